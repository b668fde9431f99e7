//! The measurement examples' shared argument parsing (`examples/support/args.rs`), host-only: a
//! value that is given but does not parse, or a size that overflows, must be an
//! `Error::InvalidArgument` naming it, never a silent default, a wrapped size or a dropped entry.

#[path = "../examples/support/args.rs"]
mod args;

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
