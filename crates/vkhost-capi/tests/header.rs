//! The drift check: include/vkhost.h must be exactly what cbindgen generates from this crate.
//! `VKHOST_BLESS=1 cargo test -p vkhost-capi --test header` rewrites it.

use std::path::Path;

#[test]
fn header_matches_a_fresh_generation() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings =
        cbindgen::Builder::new().with_crate(crate_dir).with_config(config).generate().expect("cbindgen could not generate the header");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let header = crate_dir.join("../../include/vkhost.h");
    if std::env::var_os("VKHOST_BLESS").is_some() {
        std::fs::write(&header, &fresh).expect("write include/vkhost.h");
        return;
    }
    // The fresh generation goes to a temp file so a failure can be inspected with diff.
    let tmp = std::env::temp_dir().join(format!("vkhost.h.fresh.{}", std::process::id()));
    std::fs::write(&tmp, &fresh).expect("write the fresh header");
    let checked_in = std::fs::read(&header).unwrap_or_default();
    if checked_in != fresh {
        panic!(
            "include/vkhost.h is stale: `diff {} {}` shows the change; regenerate with \
             `VKHOST_BLESS=1 cargo test -p vkhost-capi --test header` and commit it",
            header.display(),
            tmp.display()
        );
    }
    let _ = std::fs::remove_file(&tmp);
}
