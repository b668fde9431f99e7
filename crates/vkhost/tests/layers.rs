//! The layering docs/ARCHITECTURE.md states, checked on the sources: dependencies point down
//! only, and the device layer names neither host memory nor streams. Pure file reading: no
//! device needed.
//!
//! What counts as a dependency: a `crate::` path to a higher layer's module, or the name of a
//! higher layer's public type, in code. Comments, doc comments, string literals and
//! `#[cfg(test)]` items are left out (unit tests of a lower module may drive it through the
//! public API above it).

mod common;

/// (layer, files under `crates/vkhost/src`). Layer 5 files are not listed (nothing is above
/// them): `host/mod.rs` is the raw seed API, its registry of owners `host/owners.rs` and its
/// copies and plans `host/copy.rs`.
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
    (3, &["resource.rs", "host/owners.rs"]),
    (
        4,
        &[
            "host/copy.rs",
            "stream/copy.rs",
            "stream/inner.rs",
            "stream/batch.rs",
            "stream/ring.rs",
            "stream/descriptors.rs",
            "host/record.rs",
        ],
    ),
];

/// What each layer may not name: module paths first, then public type and constructor names of
/// layers above. `file` (relative to `src/`) adds the `super::` paths of its directory's
/// higher modules.
fn forbidden(layer: u8, file: &str) -> Vec<&'static str> {
    // Layer 5 modules, and the safe types.
    let mut v = vec![
        "crate::open",
        "crate::kernel",
        "crate::buffer",
        "crate::host::safe",
        "crate::host::range",
        "crate::host::probe",
        "crate::stream::launch",
        "DeviceBuffer",
        "PinnedBuffer",
        "Registration",
        "HostRange",
        "Kernel",
        // `Stream` alone: the safe stream type (the layer-4 state is `StreamInner`).
        "Stream",
        "Pending",
        "Event",
    ];
    // The public constructors (layer 5, `open.rs`), however they are named.
    v.extend([
        "Device::open",
        "Device::open_with",
        "Device::open_default",
        "Device::open_default_with",
        "Device::from_raw",
        "Device::from_raw_borrowed",
        "Self::open",
        "Self::open_with",
        "Self::open_default",
        "Self::open_default_with",
        "Self::from_raw",
        "Self::from_raw_borrowed",
    ]);
    if file.starts_with("stream/") {
        v.extend(["super::launch", "super::Stream", "super::Pending", "super::Event"]);
    }
    if file.starts_with("host/") {
        v.extend(["super::safe", "super::range", "super::probe"]);
    }
    if layer <= 3 {
        v.extend(["crate::host", "crate::stream"]);
        if file.starts_with("host/") {
            v.push("super::");
        }
    }
    if layer <= 2 {
        v.extend(["crate::resource", "Resource", "DeviceMem"]);
    }
    if layer <= 1 {
        v.extend(["crate::device", "Shared", "Live"]);
    }
    v
}

/// The source with comments, string and char literals and `#[cfg(test)]` items blanked (line
/// breaks kept, so line numbers still point at the source), and `use crate::{a, b::c}` groups
/// spelled out as `crate::a crate::b::c`.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    // Keeps the line breaks of a blanked span.
    let blank = |out: &mut String, span: &[u8]| {
        out.push(' ');
        out.extend(std::iter::repeat_n('\n', span.iter().filter(|&&c| c == b'\n').count()));
    };
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            // Nested block comments, as Rust has them.
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &b[i..j]);
            i = j;
        } else if b[i] == b'r' && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#')) && (i == 0 || !ident(b[i - 1])) {
            // A raw string r"..." / r#"..."#: no escapes, ends at `"` and as many `#`.
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            let open = i + 1 + hashes;
            if b.get(open) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            let end = b[open + 1..].windows(close.len()).position(|w| w == &close[..]).map_or(b.len(), |k| open + 1 + k + close.len());
            blank(&mut out, &b[i..end]);
            i = end;
        } else if b[i] == b'"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            blank(&mut out, &b[start..i.min(b.len())]);
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
    expand_use_groups(&strip_test_items(&out))
}

fn ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `crate::{a, b::{c, d}}` → `crate::a crate::b::c crate::b::d` (also for `super::`), so that a
/// grouped import names each module as a path would.
fn expand_use_groups(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("::{") {
        // The path before the group, back to the start of the identifier path.
        let head_start = rest[..at].rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')).map_or(0, |k| k + 1);
        let head = &rest[head_start..at];
        let end = past_matching_brace(rest, at + 2);
        out.push_str(&rest[..head_start]);
        let inner = &rest[at + 3..end.saturating_sub(1).max(at + 3)];
        // Nested groups expand recursively; entries are split at top-level commas.
        let mut level = 0usize;
        let mut from = 0;
        let mut items = Vec::new();
        for (k, c) in inner.char_indices() {
            match c {
                '{' => level += 1,
                '}' => level = level.saturating_sub(1),
                ',' if level == 0 => {
                    items.push(&inner[from..k]);
                    from = k + 1;
                }
                _ => {}
            }
        }
        items.push(&inner[from..]);
        for item in items {
            let item = item.trim();
            if !item.is_empty() {
                out.push_str(&expand_use_groups(&format!("{head}::{item}")));
                out.push(' ');
            }
        }
        // Keep the group's line breaks.
        out.extend(std::iter::repeat_n('\n', rest[at..end].matches('\n').count()));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// The index just past the `}` that closes the `{` at `open` in `s` (the end of `s` if none).
fn past_matching_brace(s: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (k, c) in s[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + k + 1;
                }
            }
            _ => {}
        }
    }
    s.len()
}

/// Removes each `#[cfg(test)]` item (a module, function, `use`, ... : up to its `;` or its
/// matching `}`), keeping line breaks. An attribute on anything else (a field, a statement) is
/// left as it is: nothing is hidden that could be code of the library.
fn strip_test_items(code: &str) -> String {
    const ITEMS: &[&str] =
        &["mod", "fn", "use", "impl", "struct", "enum", "static", "const", "type", "trait", "pub", "unsafe", "extern", "thread_local!"];
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        // Further attributes, then the keyword.
        let mut body = item.trim_start();
        while body.starts_with("#[") {
            body = body[body.find(']').map_or(body.len(), |k| k + 1)..].trim_start();
        }
        let first = body.split(|c: char| c.is_whitespace() || c == '(').next().unwrap_or("");
        if !ITEMS.contains(&first) {
            out.push_str("#[cfg(test)]");
            rest = item;
            continue;
        }
        let semi = item.find(';');
        let brace = item.find('{');
        let end = match (semi, brace) {
            (Some(s), Some(b)) if s < b => s + 1,
            (Some(s), None) => s + 1,
            (_, Some(b)) => past_matching_brace(item, b),
            (None, None) => item.len(),
        };
        out.extend(std::iter::repeat_n('\n', item[..end].matches('\n').count()));
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// Where `code` names `word` as a whole identifier path (not as part of a longer name): the
/// line, counted from 1.
/// A match that goes on with one of `allow` is skipped (a lower layer's module that lives in a
/// higher one's directory: `crate::host` + `::registry`).
fn names_but(code: &str, word: &str, allow: &[&str]) -> Option<usize> {
    let b = code.as_bytes();
    let mut from = 0;
    while let Some(k) = code[from..].find(word) {
        let at = from + k;
        let end = at + word.len();
        // A bare type name after `vk::` is Vulkan's (`vk::Event`), not vkhost's.
        let vulkan = !word.contains("::") && code[..at].ends_with("vk::");
        let before_ok = (at == 0 || !ident(b[at - 1])) && !vulkan;
        let after_ok = (word.ends_with(':') || end >= b.len() || !ident(b[end])) && !allow.iter().any(|a| code[end..].starts_with(a));
        if before_ok && after_ok {
            return Some(code[..at].matches('\n').count() + 1);
        }
        from = end;
    }
    None
}

/// `crates/vkhost/src` (`common::crate_path`: where this test was built, or under the current
/// directory on another machine).
fn src_root() -> std::path::PathBuf {
    // Another tree to check (`VKHOST_LAYERS_SRC=/path/to/crates/vkhost/src`): how the test was
    // shown to fail on the code before the layers were fixed.
    if let Some(dir) = std::env::var_os("VKHOST_LAYERS_SRC") {
        return dir.into();
    }
    common::crate_path("src")
}

fn violations(layer: u8, file: &str, src: &str) -> Vec<String> {
    let code = code_only(src);
    forbidden(layer, file)
        .into_iter()
        .filter_map(|w| names_but(&code, w, allowed(layer, w)).map(|line| format!("names `{w}` (near code line {line})")))
        .collect()
}

/// The lower layers' modules inside `host/`, which a layer may name although they sit in a
/// higher layer's directory: the interval registry (layer 1) and, from layer 3, the registry
/// of owners.
fn allowed(layer: u8, word: &str) -> &'static [&'static str] {
    match (word, layer) {
        ("crate::host", 3) => &["::registry", "::owners"],
        ("crate::host", _) => &["::registry"],
        ("super::", 3) => &["registry"],
        _ => &[],
    }
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
            for v in violations(*layer, f, &src) {
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

/// The checker itself: an upward path in code is caught, however it is spelled; the same in a
/// comment, a string, a doc link or a test module is not; a longer identifier is not the word.
#[test]
fn the_checker_catches_an_upward_use_and_only_in_code() {
    let dev = "device/mod.rs";
    let up = "fn f(dev: &Device) { let _ = crate::host::probe(dev); }\n";
    assert!(violations(2, dev, up).iter().any(|v| v.contains("`crate::host`")), "{:?}", violations(2, dev, up));
    assert!(violations(2, dev, "use crate::device::import;\nfn g() {}\n").is_empty());
    // Grouped imports, constructors by any name, `super::` from a higher module's sibling.
    assert_eq!(violations(2, dev, "use crate::{error, host};\n").len(), 1);
    let grouped = "use crate::{error::Error, stream::{inner, Stream}};\n";
    assert_eq!(violations(2, dev, grouped).len(), 2, "{:?} in {:?}", violations(2, dev, grouped), code_only(grouped));
    assert_eq!(violations(2, dev, "fn f() { let _ = Device::open_default_with(&o); }").len(), 1);
    assert_eq!(violations(2, dev, "fn f() { let _ = Self::from_raw_borrowed(r, &o); }").len(), 1);
    assert!(violations(2, dev, "fn f() { let _ = Self::open_index(0, &o, g); }").is_empty());
    assert_eq!(violations(4, "stream/inner.rs", "use super::launch::Bound;").len(), 1);
    assert_eq!(violations(4, "host/record.rs", "use crate::host::safe::Guard;").len(), 1);
    assert_eq!(violations(1, "host/registry.rs", "use super::Entry;").len(), 1);
    // The lower modules in `host/`: the interval registry from anywhere, the owners from layer 3.
    assert!(violations(2, dev, "use crate::host::registry::Registry;").is_empty());
    assert_eq!(violations(2, dev, "use crate::host::owners::Imports;").len(), 1);
    assert!(violations(3, "host/owners.rs", "use super::registry::Registry;").is_empty());
    assert_eq!(violations(3, "host/owners.rs", "use super::register;").len(), 1);
    assert_eq!(violations(3, "resource.rs", "use crate::host::copy::plan;").len(), 1);
    let hidden = concat!(
        "/// See [`crate::host::register`].\n",
        "// crate::stream::Stream is above\n",
        "fn f() { log::warn!(\"crate::host::x DeviceBuffer\"); let c = '{'; }\n",
        "fn g() { let s = r#\"a\" crate::host \"#; }\n",
        "/* crate::host /* nested */ crate::stream */\n",
        "#[cfg(test)]\nmod tests { fn t() { crate::host::register(); let _ = PinnedBuffer::new(); } }\n",
        "struct StreamInner; struct Streams;\n",
    );
    assert!(violations(2, dev, hidden).is_empty(), "{:?}", violations(2, dev, hidden));
    // Code after a raw string or a nested comment is still seen, on its own line.
    let after = "fn g() { let s = r#\"a\" b\"#; }\n/* x /* y */ z */\nuse crate::host::x;\n";
    assert_eq!(violations(2, dev, after), vec!["names `crate::host` (near code line 3)".to_string()]);
    assert_eq!(violations(4, "stream/copy.rs", "fn f(b: &DeviceBuffer) {}").len(), 1);
    assert!(violations(4, "stream/copy.rs", "fn f(b: &DeviceMem) {}").is_empty());
    assert!(violations(2, dev, "fn f(e: vk::Event) {}").is_empty());
    // A test item that is a single line ends at its `;`; an attribute on a field hides nothing.
    assert_eq!(violations(2, dev, "#[cfg(test)]\nuse crate::host::x;\nuse crate::stream::y;\n").len(), 1);
    assert_eq!(violations(2, dev, "struct S {\n    #[cfg(test)]\n    a: u8,\n}\nimpl S { fn f() { crate::host::x(); } }\n").len(), 1);
}
