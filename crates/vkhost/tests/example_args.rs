//! The measurement examples' shared argument parsing (`examples/support/args.rs`), host-only: a
//! value that is given but does not parse, or a size that overflows, must be an
//! `Error::InvalidArgument` naming it, never a silent default, a wrapped size or a dropped entry.

#[path = "../examples/support/args.rs"]
mod args;
mod common;

use vkhost::Error;

fn reason(e: Error) -> String {
    match e {
        Error::InvalidArgument { reason } => reason,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn absent_arguments_and_variables_give_the_default() {
    // The test binary never has this many arguments.
    assert_eq!(args::arg(10_000, 7usize).unwrap(), 7);
    assert_eq!(args::size_arg(10_000, 20, 3, 1).unwrap(), (3, 3 << 20));
    assert_eq!(args::size_arg(10_000, 20, 0, 1).unwrap(), (1, 1 << 20), "raised to min");
    assert_eq!(args::arg_choice(10_000, "pinned", &["pinned", "pageable"]).unwrap(), "pinned");
    assert_eq!(args::sizes(10_000, 10, &[4096]).unwrap(), vec![4096]);
    let key = "VKHOST_EXAMPLE_ARGS_TEST_NEVER_SET";
    assert_eq!(args::var(key).unwrap(), "");
    assert_eq!(args::env::<usize>(key).unwrap(), None);
    assert_eq!(args::choice(key, &["0", "1"]).unwrap(), "");
}

#[test]
fn sizes_that_overflow_are_refused() {
    assert_eq!(args::bytes("x", 3, 20).unwrap(), 3 << 20);
    assert_eq!(args::bytes("x", 0, 20).unwrap(), 0);
    let r = reason(args::bytes("FRAGMENT_MIB", usize::MAX, 20).unwrap_err());
    assert!(r.starts_with("FRAGMENT_MIB: expected a size that fits in usize"), "{r}");
    assert!(args::bytes("x", (usize::MAX >> 20) + 1, 20).is_err());
    assert_eq!(args::bytes("x", usize::MAX >> 20, 20).unwrap(), (usize::MAX >> 20) << 20);

    assert_eq!(args::plus("x", 10, 5).unwrap(), 15);
    assert_eq!(args::plus("x", usize::MAX, 0).unwrap(), usize::MAX);
    let r = reason(args::plus("PLAIN_OFFSET", usize::MAX - 1, 2).unwrap_err());
    assert!(r.starts_with("PLAIN_OFFSET: expected at most 1 more bytes"), "{r}");
}

#[test]
fn lists_parse_every_entry_or_fail() {
    assert_eq!(args::list::<usize>("x", "").unwrap(), Vec::<usize>::new());
    assert_eq!(args::list::<usize>("x", "1, 2,,3 ").unwrap(), vec![1, 2, 3]);
    let r = reason(args::list::<usize>("argument 2", "1,two,3").unwrap_err());
    assert!(r.contains("argument 2") && r.contains("\"two\""), "{r}");
    assert!(args::list::<usize>("x", "1,-2").is_err(), "a negative size is not dropped");
    assert!(args::list::<u8>("x", "1,256").is_err(), "an out-of-range entry is not truncated");
}

/// The newest modification time of `path`, or of the files directly in it when it is a folder.
fn newest(path: &std::path::Path) -> Option<std::time::SystemTime> {
    let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match std::fs::read_dir(path) {
        Ok(entries) => entries.filter_map(|e| modified(&e.ok()?.path())).max(),
        Err(_) => modified(path),
    }
}

/// The built example `name` (`cargo test` builds the examples beside the tests), or `None`, after
/// saying why, when it is absent or older than its source (`source`: its file or folder under
/// `examples/`) or the shared `support/` files. A run filtered to this test alone builds no
/// examples; the examples are not packed with the test binaries for the GPU machine.
fn example(name: &str, source: &str) -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("examples").join(name);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let sources = newest(&dir.join(source)).max(newest(&dir.join("support")));
    match (newest(&bin), sources) {
        (Some(b), Some(s)) if b >= s => Some(bin),
        (None, _) => {
            eprintln!("skipped {name}: no example binary at {} (run `cargo test` without target filters)", bin.display());
            None
        }
        _ => {
            eprintln!("skipped {name}: {} is older than examples/{source} or examples/support (rebuild the examples)", bin.display());
            None
        }
    }
}

/// Runs the example with `args` and `env` (and none of the examples' other variables), at most
/// 120 s: `(exit code, stderr)`.
fn run_example(bin: &std::path::Path, args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = std::process::Command::new(bin);
    cmd.args(args).stdout(std::process::Stdio::null());
    for k in ["FRAGMENT_MIB", "PLAIN_UNTOUCHED", "PLAIN_OFFSET", "PLAIN_DEV_OFFSET"] {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    match common::child::run_with_stderr(&mut cmd, std::time::Duration::from_secs(120)) {
        Some((status, stderr)) => (status.code(), stderr),
        None => panic!("{} {args:?} still running after 120 s: an argument was not refused", bin.display()),
    }
}

/// Each example that takes arguments, given one that does not parse or is too large, exits 1
/// with an `InvalidArgument` naming it; before these examples used `support/args.rs`, some fell
/// back to the default silently, wrapped a size or panicked.
#[test]
fn examples_refuse_bad_arguments() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let os = |s: &'static str| OsStr::new(s);
    let not_utf8 = OsStr::from_bytes(b"\xff");
    // (example, its source file or folder, arguments, environment, what stderr must say)
    type Case<'a> = (&'a str, &'a str, Vec<&'a OsStr>, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        ("pipeline", "pipeline", vec![os("x")], &[], "argument 1: expected a usize, got \\\"x\\\""),
        ("pipeline", "pipeline", vec![os("4"), os("two")], &[], "argument 2: expected a usize"),
        ("pipeline", "pipeline", vec![os("18446744073709551615")], &[], "at most 8192 MiB"),
        ("pipeline", "pipeline", vec![not_utf8], &[], "argument 1: expected UTF-8 text"),
        ("plain_copy", "plain_copy.rs", vec![os("bogus")], &[], "argument 1: expected one of pinned, registered, pageable"),
        (
            "plain_copy",
            "plain_copy.rs",
            vec![os("pinned"), os("18446744073709551615")],
            &[],
            "argument 2: expected a size that fits in usize",
        ),
        ("plain_copy", "plain_copy.rs", vec![os("pinned"), os("1")], &[("FRAGMENT_MIB", "abc")], "FRAGMENT_MIB: expected a usize"),
        ("plain_copy", "plain_copy.rs", vec![os("pinned"), os("1")], &[("PLAIN_UNTOUCHED", "2")], "PLAIN_UNTOUCHED: expected one of 0, 1"),
        ("alloc_cost", "alloc_cost.rs", vec![os("1"), os("4,x")], &[], "argument 2: expected a usize, got \\\"x\\\""),
        ("alloc_cost", "alloc_cost.rs", vec![os("1"), os("4,0")], &[], "argument 2: expected sizes of at least 1"),
        ("d2d_queues", "d2d_queues.rs", vec![os("-1")], &[], "argument 1: expected a usize"),
        ("sync_floor", "sync_floor.rs", vec![os("1"), os("y")], &[], "argument 2: expected a usize"),
        ("armed_latency", "armed_latency.rs", vec![os("10"), os("1.5")], &[], "argument 2: expected a u64"),
        ("host_read_barrier", "host_read_barrier.rs", vec![not_utf8], &[], "argument 1: expected UTF-8 text"),
    ];
    let mut ran = 0;
    for (name, source, args, env, want) in cases {
        let Some(bin) = example(name, source) else { continue };
        let (code, stderr) = run_example(&bin, args, env);
        assert_eq!(code, Some(1), "{name} {args:?} {env:?}: exit code; stderr:\n{stderr}");
        assert!(stderr.contains("InvalidArgument") && stderr.contains(want), "{name} {args:?} {env:?}: stderr lacks {want:?}:\n{stderr}");
        ran += 1;
    }
    eprintln!("{ran} of {} example runs checked", cases.len());
}
