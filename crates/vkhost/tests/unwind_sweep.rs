//! A systematic sweep of panics unwinding out of a user's logger at every failure point.
//!
//! For each operation of tests/fault.rs (plus kernel launches in both descriptor modes), for
//! each fault point, for every call N of that point the operation makes: the Nth call fails
//! (DEVICE_LOST, which logs an error, or OUT_OF_HOST_MEMORY); the operation runs once with a
//! quiet logger, to count the warning and error lines it logs on this thread (L), then once
//! for each k < L with the logger panicking on line k, each run under `catch_unwind` on a fresh
//! device, and then:
//! - no registry entry is left that nobody owns;
//! - nothing writes the caller's memory after the call unwound (the destinations live in
//!   `Pages` the test fills right after the unwind and checks after destroy; the op's streams
//!   are kept alive past the unwind so their drop comes after that fill);
//! - after a device loss, every stream the op made reports an error (a lost batch never
//!   reads as done);
//! - after destroy no object is left and validation saw no error.
//!
//! Every failing case is collected and printed; the test fails at the end if any.
//! `VKHOST_SWEEP_ONLY=<op name substring>` restricts the ops.

mod common;
use common::ops::*;
use common::{Pages, panic_logger};
use vkhost::fault::{Point, calls, disarm, inject};
use vkhost::host::{self, entries_of};
use vkhost::{OpenOptions, vk};

fn cases() -> Vec<(&'static str, Op, OpenOptions)> {
    vec![
        ("register", op_register as Op, fopts()),
        ("alloc_pinned", op_alloc_pinned, fopts()),
        ("alloc_buffer", op_alloc_buffer, fopts()),
        ("staged copies", op_staged, fopts()),
        ("direct copies", op_direct, fopts()),
        ("mixed copies", op_mixed, fopts()),
        ("stream work", op_stream, fopts()),
        ("copy_floor", op_floor, fopts()),
        ("launch (push)", op_launch, launch_opts(true)),
        ("launch (sets)", op_launch, launch_opts(false)),
    ]
}

fn fill(m: &mut Pages) {
    m.slice().fill(0x11);
}
fn changed(m: &mut Pages) -> usize {
    m.slice().iter().filter(|&&b| b != 0x11).count()
}

/// One case: a fresh device, the op once (warm-up), then the op with the fault armed.
/// Returns the problems found, and whether the logger panicked.
fn one(
    name: &str,
    op: Op,
    o: &OpenOptions,
    point: Point,
    nth: u64,
    code: vk::Result,
    panic_at: Option<u32>,
) -> (Vec<String>, bool, bool, u32) {
    let ctx = match panic_at {
        Some(k) => format!("{name}: {} #{nth} -> {code:?}, logger panics on line {k}", point.name()),
        None => format!("{name}: {} #{nth} -> {code:?}, logger quiet", point.name()),
    };
    let mut bad = Vec::new();
    let mut env = Env::with(o);
    op(&mut env).expect("warm-up");
    let base_entries = entries_of(&env.dev);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        panic_logger::reset_lines();
        if let Some(k) = panic_at {
            panic_logger::arm(log::Level::Warn, k);
        }
        inject(point, nth, code);
        op(&mut env)
    }));
    let fired = disarm();
    panic_logger::disarm();
    let lines = panic_logger::lines();
    let panicked = match &r {
        Err(p) => {
            let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
            if !panic_logger::is_logger_panic(p.as_ref()) {
                bad.push(format!("{ctx}: a panic that is not the logger's: {msg:?}"));
            } else if std::env::var_os("VKHOST_SWEEP_VERBOSE").is_some() {
                eprintln!("{ctx}: {msg}");
            }
            true
        }
        Ok(_) => false,
    };
    // The caller owns its memory again: nothing may write it from here on.
    fill(&mut env.scratch);
    fill(&mut env.mem);
    env.pinned.fill(0x11);
    let extra = env.extra_reg.take();
    let mut want_entries = base_entries;
    if extra.is_some() {
        want_entries += 1; // the op's own registration, alive (its unregister was skipped)
    }
    let entries = entries_of(&env.dev);
    if entries != want_entries {
        bad.push(format!("{ctx}: {entries} registry entries, expected {want_entries}"));
    }
    // A lost device: each stream the op made must report it.
    if panicked && code == vk::Result::ERROR_DEVICE_LOST {
        for (i, s) in env.keep.iter().enumerate() {
            if let Ok(()) = s.synchronize() {
                bad.push(format!("{ctx}: stream {i}'s synchronize after the loss answered Ok"));
            }
        }
    }
    if panicked && code != vk::Result::ERROR_DEVICE_LOST && !env.keep.is_empty() {
        let rs: Vec<_> = env.keep.iter().map(|s| s.synchronize()).collect();
        if std::env::var_os("VKHOST_SWEEP_VERBOSE").is_some() {
            eprintln!("{ctx}: OOM panic; streams' synchronize: {rs:?}");
        }
    }
    env.keep.clear();
    if let Some(p) = extra {
        let _ = host::unregister(&env.dev, p);
    }
    let Env { dev, mut mem, reg_base, pinned, buf, mut scratch, .. } = env;
    let pc = pinned.iter().filter(|&&b| b != 0x11).count();
    if pc != 0 {
        bad.push(format!("{ctx}: {pc} bytes of the pinned block written after the unwind"));
    }
    if let Err(e) = host::unregister(&dev, reg_base) {
        bad.push(format!("{ctx}: late unregister: {e:?}"));
    }
    drop((pinned, buf));
    let d = dev.destroy();
    if !matches!(d, Ok(()) | Err(vkhost::Error::DeviceLost)) {
        bad.push(format!("{ctx}: destroy: {d:?}"));
    }
    let left = dev.live_objects();
    if left != vkhost::LiveObjects::default() {
        bad.push(format!("{ctx}: objects left at destroy: {left:?}"));
    }
    if dev.validation_errors() != 0 {
        bad.push(format!("{ctx}: validation errors: {:?}", dev.last_validation_error()));
    }
    let (sc, mc) = (changed(&mut scratch), changed(&mut mem));
    if sc + mc != 0 {
        bad.push(format!("{ctx}: written after the unwind: {sc} bytes of the read/download destination, {mc} of the host mapping"));
    }
    drop(dev);
    (bad, panicked, fired, lines)
}

/// Calls of each point the op makes after a warm-up.
fn counts(op: Op, o: &OpenOptions) -> Vec<(Point, u64)> {
    let mut env = Env::with(o);
    op(&mut env).expect("warm-up");
    disarm();
    op(&mut env).expect("counted run");
    let c = Point::ALL.iter().map(|&p| (p, calls(p))).collect();
    disarm();
    drop(env.keep.drain(..));
    host::unregister(&env.dev, env.reg_base).unwrap();
    let Env { dev, pinned, buf, .. } = env;
    drop((pinned, buf));
    dev.destroy().unwrap();
    c
}

fn sweep(code: vk::Result) {
    panic_logger::install();
    let only = std::env::var("VKHOST_SWEEP_ONLY").ok();
    let mut bad = Vec::new();
    let t0 = std::time::Instant::now();
    let (mut all_panics, mut all_fired) = (0, 0);
    for (name, op, o) in cases() {
        if only.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let t = std::time::Instant::now();
        let (mut runs, mut panics, mut unfired) = (0, 0, 0);
        for (point, n) in counts(op, &o) {
            for nth in 0..n {
                // Quiet first: how many lines this fault logs; then a panic on each of them.
                let (b, _, fired, lines) = one(name, op, &o, point, nth, code, None);
                unfired += !fired as usize;
                all_fired += fired as usize;
                for l in &b {
                    eprintln!("BAD {l}");
                }
                bad.extend(b);
                for k in 0..lines {
                    let (b, panicked, _, _) = one(name, op, &o, point, nth, code, Some(k));
                    runs += 1;
                    panics += panicked as usize;
                    for l in &b {
                        eprintln!("BAD {l}");
                    }
                    bad.extend(b);
                }
            }
        }
        eprintln!("{name}: {runs} panicking runs, {panics} logger panics, {unfired} not fired, {:.1?}", t.elapsed());
        all_panics += panics;
    }
    eprintln!("total {:.1?}, {} problems", t0.elapsed(), bad.len());
    assert!(all_fired > 0, "no fault fired: the sweep tested nothing");
    // Device loss logs an error wherever it happens; what OUT_OF_HOST_MEMORY logs depends on
    // timing (a warning from a wait that may already be over), so it may panic nowhere.
    if code == vk::Result::ERROR_DEVICE_LOST {
        assert!(all_panics > 0, "no fault made the logger panic: the sweep tested no unwind");
    }
    assert!(bad.is_empty(), "{} problems:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn sweep_device_lost_with_a_logger_panicking_on_each_line() {
    sweep(vk::Result::ERROR_DEVICE_LOST);
}

#[test]
fn sweep_out_of_host_memory_with_a_logger_panicking_on_each_line() {
    sweep(vk::Result::ERROR_OUT_OF_HOST_MEMORY);
}
