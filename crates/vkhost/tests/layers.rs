//! The layering docs/ARCHITECTURE.md states, checked on the sources: dependencies point down
//! only, and the device layer names neither host memory nor streams. Pure file reading: no
//! device needed.
//!
//! What counts as a dependency: a `crate::` path to a higher layer's module, or the name of a
//! higher layer's public type, in code. Comments, doc comments, string literals and
//! `#[cfg(test)]` items are left out (unit tests of a lower module may drive it through the
//! public API above it).

use std::path::Path;

/// (layer, files under `crates/vkhost/src`). Layer 5 files are not listed (nothing is above
/// them), nor is `host/mod.rs`, which holds layer 4's plans and copies beside the raw seed API.
const LAYERS: &[(u8, &[&str])] = &[
    (1, &["track.rs", "reuse.rs", "memtype.rs", "maps.rs", "par.rs", "host/registry.rs"]),
    (
        2,
        &[
            "device/mod.rs",
            "device/info.rs",
            "device/instance.rs",
            "device/object.rs",
            "device/pipeline.rs",
            "device/queues.rs",
            "device/submit.rs",
            "device/import.rs",
        ],
    ),
    (3, &["resource.rs"]),
    (4, &["stream/copy.rs", "stream/inner.rs", "stream/batch.rs", "stream/ring.rs", "stream/descriptors.rs", "host/record.rs"]),
];

/// What each layer may not name: module paths first, then public type names of layers above.
fn forbidden(layer: u8) -> Vec<&'static str> {
    let mut v =
        vec!["crate::open", "crate::kernel", "crate::buffer", "DeviceBuffer", "PinnedBuffer", "Registration", "HostRange", "Kernel"];
    // `Stream` alone: the safe stream type (the layer-4 state is `StreamInner`).
    v.extend(["Stream", "Pending", "Event"]);
    if layer <= 3 {
        v.extend(["crate::host", "crate::stream", "Device::open", "Device::from_raw"]);
    }
    if layer <= 2 {
        v.extend(["crate::resource", "Resource"]);
    }
    if layer <= 1 {
        v.extend(["crate::device", "Shared", "Live"]);
    }
    v
}

/// The source with comments, string and char literals and `#[cfg(test)]` items blanked.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let end = src[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            i = end;
            out.push(' ');
        } else if b[i] == b'"' {
            // A raw string `r"..."`/`r#"..."#` has no escapes; the few here have no `"` inside.
            let raw = i > 0 && (b[i - 1] == b'r' || b[i - 1] == b'#');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && !raw {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || (b[i + 1] == b'\\' && b[i + 3..].contains(&b'\''))) {
            // A char literal ('{', '\n', '\''); a lifetime has no closing quote right after.
            i += 1;
            if b[i] == b'\\' {
                i += 1;
            }
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    strip_test_items(&out)
}

/// Removes each `#[cfg(test)]` item: up to its `;` or its matching `}`.
fn strip_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let semi = item.find(';');
        let brace = item.find('{');
        let end = match (semi, brace) {
            (Some(s), Some(b)) if s < b => s + 1,
            (Some(s), None) => s + 1,
            (_, Some(b)) => {
                let mut depth = 0usize;
                let mut end = item.len();
                for (k, c) in item[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// Whether `code` names `word` as a whole identifier path (not as part of a longer name).
fn names(code: &str, word: &str) -> Option<usize> {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let b = code.as_bytes();
    let mut from = 0;
    while let Some(k) = code[from..].find(word) {
        let at = from + k;
        let end = at + word.len();
        let before_ok = at == 0 || !ident(b[at - 1]);
        let after_ok = end >= b.len() || !ident(b[end]);
        if before_ok && after_ok {
            return Some(code[..at].matches('\n').count() + 1);
        }
        from = end;
    }
    None
}

/// `crates/vkhost/src`: where this test was built, or (a test binary carried to another machine
/// with the working tree, as `scripts/h200-run.sh` runs them) under the current directory.
fn src_root() -> std::path::PathBuf {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    if built.is_dir() {
        return built;
    }
    let here = Path::new("crates/vkhost/src");
    assert!(here.is_dir(), "the sources are neither at {} nor under the current directory", built.display());
    here.to_path_buf()
}

fn violations(layer: u8, src: &str) -> Vec<String> {
    let code = code_only(src);
    forbidden(layer).into_iter().filter_map(|w| names(&code, w).map(|line| format!("names `{w}` (near code line {line})"))).collect()
}

#[test]
fn every_layer_names_only_the_layers_below_it() {
    let root = src_root();
    let mut bad = Vec::new();
    let mut listed = 0;
    for (layer, files) in LAYERS {
        for f in *files {
            let path = root.join(f);
            let src =
                std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (update LAYERS to the source tree)", path.display()));
            listed += 1;
            for v in violations(*layer, &src) {
                bad.push(format!("{f} (layer {layer}) {v}"));
            }
        }
    }
    assert!(listed >= 20, "too few files checked: {listed}");
    assert!(bad.is_empty(), "upward dependencies:\n{}", bad.join("\n"));
}

/// Every file of the device directory is listed (a new file must be placed in a layer).
#[test]
fn every_device_layer_file_is_checked() {
    let dir = src_root().join("device");
    let listed: Vec<&str> = LAYERS.iter().flat_map(|(_, f)| f.iter().copied()).collect();
    for e in std::fs::read_dir(&dir).unwrap() {
        let name = format!("device/{}", e.unwrap().file_name().to_string_lossy());
        if name == "device/testing.rs" {
            continue; // unit-test scaffolding, compiled only for tests
        }
        assert!(listed.contains(&name.as_str()), "{name} is in no layer of this test");
    }
}

/// The checker itself: an upward path in code is caught; the same in a comment, a string, a
/// doc link or a test module is not; a longer identifier is not the word.
#[test]
fn the_checker_catches_an_upward_use_and_only_in_code() {
    let up = "fn f(dev: &Device) { let _ = crate::host::probe(dev); }\n";
    assert_eq!(violations(2, up).len(), 1, "{:?}", violations(2, up));
    assert!(!violations(2, "use crate::device::import;\nfn g() {}\n").iter().any(|v| v.contains("crate::host")));
    let hidden = concat!(
        "/// See [`crate::host::register`].\n",
        "// crate::stream::Stream is above\n",
        "fn f() { log::warn!(\"crate::host::x DeviceBuffer\"); let c = '{'; }\n",
        "#[cfg(test)]\nmod tests { fn t() { crate::host::register(); let _ = PinnedBuffer::new(); } }\n",
        "struct StreamInner; struct Streams;\n",
    );
    assert!(violations(2, hidden).is_empty(), "{:?}", violations(2, hidden));
    assert_eq!(violations(4, "fn f(b: &DeviceBuffer) {}").len(), 1);
    assert!(violations(4, "fn f(b: &DeviceMem) {}").is_empty());
    // A test item that is a single line ends at its `;`.
    assert_eq!(violations(2, "#[cfg(test)]\nuse crate::host::x;\nuse crate::stream::y;\n").len(), 1);
}
