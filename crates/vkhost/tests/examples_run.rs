//! The examples that take no arguments run, each with the validation layer on and zero
//! validation errors: `examples/quickstart.rs` (the README's library example: the README's code
//! block is that file, up to whitespace) and `examples/small_copies.rs`. Each example's `main`
//! runs in a child process of this test binary with `VKHOST_VALIDATION=1`, so that its own
//! `Device::open_default()` turns the layer on. Before this test both were compiled by
//! `cargo test` but run by nothing, and the README's copy had drifted from the file unseen.
//! (The examples that take arguments: tests/example_args.rs.)

mod common;

/// The examples, as they are (hence no `//!` header in them); `run` calls the private `main`.
mod quickstart {
    include!("../examples/quickstart.rs");

    pub fn run() -> vkhost::Result<()> {
        main()
    }
}

mod small_copies {
    include!("../examples/small_copies.rs");

    pub fn run() -> vkhost::Result<()> {
        main()
    }
}

use std::sync::atomic::{AtomicU64, Ordering};

/// Set, to the example's name, in the child process that runs it (`example_child`).
const CHILD_ENV: &str = "VKHOST_EXAMPLE_CHILD";

/// The text with every run of whitespace made one space, and without the example's header: the
/// `//` comment lines before its first line of code.
fn normalized(text: &str) -> String {
    let code: Vec<&str> = text.lines().skip_while(|l| l.trim_start().starts_with("//") || l.trim().is_empty()).collect();
    code.join("\n").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The README's fenced Rust block under "## Library example".
fn readme_example(readme: &str) -> Option<&str> {
    let section = &readme[readme.find("## Library example")?..];
    let body = &section[section.find("```rust\n")? + "```rust\n".len()..];
    Some(&body[..body.find("\n```")?])
}

#[test]
fn the_readme_example_is_the_quickstart() {
    let readme = std::fs::read_to_string(common::crate_path("../../README.md")).expect("README.md");
    let example = std::fs::read_to_string(common::crate_path("examples/quickstart.rs")).expect("examples/quickstart.rs");
    let block = readme_example(&readme).expect("README.md has a ```rust block under \"## Library example\"");
    assert!(block.contains("fn main()"), "the README's example block is not a program:\n{block}");
    assert_eq!(
        normalized(block),
        normalized(&example),
        "README.md's library example differs from crates/vkhost/examples/quickstart.rs (beyond whitespace): make them one text"
    );
}

#[test]
fn normalizing_keeps_what_differs() {
    // The comparison above must not hide a real difference.
    assert_eq!(normalized("// header\n\nlet a = 1;   // x\n\n  // y\n let b;"), "let a = 1; // x // y let b;");
    assert_ne!(normalized("use vkhost::{host, Device};"), normalized("use vkhost::{Device, host};"));
    assert_eq!(readme_example("## Library example\n\n```rust\nfn main() {}\n```\n"), Some("fn main() {}"));
    assert_eq!(readme_example("## Other\n```rust\nx\n```\n"), None);
}

/// Validation errors logged (target `vkhost::validation`, level Error) in this process.
static ERRORS: AtomicU64 = AtomicU64::new(0);

/// Counts the validation errors and prints every line at Warn or worse to stderr.
struct Counting;

impl log::Log for Counting {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record) {
        if r.level() == log::Level::Error && r.target() == "vkhost::validation" {
            ERRORS.fetch_add(1, Ordering::Relaxed);
        }
        if r.level() <= log::Level::Warn {
            eprintln!("[{} {}] {}", r.level(), r.target(), r.args());
        }
    }
    fn flush(&self) {}
}

/// Runs only as the child of `run_clean` (which sets `VKHOST_VALIDATION=1` and names the
/// example in `VKHOST_EXAMPLE_CHILD`): the example's `main` must return `Ok` and log no
/// validation error.
#[test]
fn example_child() {
    let Some(name) = std::env::var_os(CHILD_ENV) else {
        eprintln!("example_child: runs only as the child process of the *_runs_clean_under_validation tests");
        return;
    };
    log::set_boxed_logger(Box::new(Counting)).expect("the only logger of this process");
    log::set_max_level(log::LevelFilter::Warn);
    let r = match name.to_str() {
        Some("quickstart") => quickstart::run(),
        Some("small_copies") => small_copies::run(),
        _ => panic!("{CHILD_ENV}={name:?} names no example this test runs"),
    };
    assert!(r.is_ok(), "{name:?} returned {r:?}");
    let n = ERRORS.load(Ordering::Relaxed);
    assert_eq!(n, 0, "{name:?} ran with {n} validation errors (above)");
    eprintln!("{}: Ok, 0 validation errors", name.to_string_lossy());
}

/// Runs the example `name` in a child process (`example_child`), at most 300 s, and asserts that
/// it ran clean.
fn run_clean(name: &str) {
    if std::env::var_os(CHILD_ENV).is_some() {
        return; // a child runs only example_child
    }
    // A device with the layer, or the reason why not (failing, unless skipping is allowed).
    let Some(d) = common::device() else { return };
    drop(d);
    let mut cmd = common::child::this_test("example_child");
    cmd.env(CHILD_ENV, name).env("VKHOST_VALIDATION", "1").stdout(std::process::Stdio::null());
    let limit = std::time::Duration::from_secs(300);
    let Some((status, stderr)) = common::child::run_with_stderr(&mut cmd, limit) else {
        panic!("{name} was still running after {limit:?}")
    };
    assert!(status.success(), "{name}'s child process: {status}; stderr:\n{stderr}");
    assert!(stderr.contains(&format!("{name}: Ok, 0 validation errors")), "the child did not run {name}; stderr:\n{stderr}");
}

#[test]
fn quickstart_runs_clean_under_validation() {
    run_clean("quickstart");
}

#[test]
fn small_copies_runs_clean_under_validation() {
    run_clean("small_copies");
}
