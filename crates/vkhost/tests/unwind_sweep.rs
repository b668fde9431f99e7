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
use common::*;
use std::cell::Cell as StdCell;
use std::sync::Once;
use vkhost::fault::{Point, calls, disarm, inject};
use vkhost::host::{self, entries_of};
use vkhost::{Device, OpenOptions, PinnedBuffer, Stream, vk};

// ---- a user logger that panics on the k-th warning-or-error line of this thread ----
thread_local! {
    /// `Some(k)`: the logger panics on the k-th (0-based) line at Warn or worse from now.
    static PANIC_AT: StdCell<Option<u32>> = const { StdCell::new(None) };
    /// Lines at Warn or worse logged on this thread since the last reset.
    static LINES: StdCell<u32> = const { StdCell::new(0) };
}
struct PanicLogger;
impl log::Log for PanicLogger {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        if r.level() > log::Level::Warn {
            return;
        }
        let i = LINES.with(|l| {
            let i = l.get();
            l.set(i + 1);
            i
        });
        if std::env::var_os("VKHOST_SWEEP_LOG").is_some() {
            eprintln!("  log #{i} [{}] {}", r.level(), r.args());
        }
        if PANIC_AT.with(|p| p.get()) == Some(i) {
            PANIC_AT.with(|p| p.set(None));
            panic!("user logger panicked on: {}", r.args());
        }
    }
    fn flush(&self) {}
}
fn install_logger() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_boxed_logger(Box::new(PanicLogger)).unwrap();
        log::set_max_level(log::LevelFilter::Warn);
        // Quiet panics of the logger (they are expected); others still print.
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info.payload().downcast_ref::<String>().map(String::as_str).unwrap_or("");
            if !msg.starts_with("user logger panicked") {
                prev(info);
            }
        }));
    });
}

/// Small staging chunks so staged copies span several batches and slots.
fn fopts() -> OpenOptions {
    OpenOptions { staging_chunk: 256 << 10, staging_slots: 2, ..opts() }
}
fn launch_opts(push: bool) -> OpenOptions {
    OpenOptions { max_pipelines: 1, push_descriptors: push, ..fopts() }
}

const SCRATCH: usize = 1 << 20;

struct Env {
    dev: Device,
    mem: Pages,
    reg_base: usize,
    pinned: PinnedBuffer,
    buf: vkhost::DeviceBuffer,
    /// Host destination of downloads and reads: checked for late writes.
    scratch: Pages,
    /// Streams the op made, kept past an unwind.
    keep: Vec<Stream>,
    /// A registration of op_register, between its register and unregister.
    extra_reg: Option<usize>,
}

impl Env {
    fn with(o: &OpenOptions) -> Env {
        let dev = Device::open_default_with(o).expect("device");
        let mem = Pages::new(16 * 4096);
        let reg_base = mem.ptr as usize + 8 * 4096;
        // SAFETY: the mapping outlives the registration (Env drops it after destroy).
        unsafe { host::register(&dev, reg_base, 4 * 4096) }.unwrap();
        let pinned = PinnedBuffer::new(&dev, 1 << 20).unwrap();
        let buf = dev.alloc_buffer(1 << 20).unwrap();
        Env { dev, mem, reg_base, pinned, buf, scratch: Pages::new(SCRATCH), keep: Vec::new(), extra_reg: None }
    }
}

type Op = fn(&mut Env) -> vkhost::Result<()>;

fn op_register(e: &mut Env) -> vkhost::Result<()> {
    let p = e.mem.ptr as usize + 100;
    // SAFETY: inside the live mapping, not overlapping the Env registration.
    unsafe { host::register(&e.dev, p, 3 * 4096) }?;
    e.extra_reg = Some(p);
    host::unregister(&e.dev, p)?;
    e.extra_reg = None;
    Ok(())
}
fn op_alloc_pinned(e: &mut Env) -> vkhost::Result<()> {
    let p = host::alloc_pinned(&e.dev, 64 << 10)?;
    host::free_pinned(&e.dev, p)
}
fn op_alloc_buffer(e: &mut Env) -> vkhost::Result<()> {
    e.dev.alloc_buffer(4096).map(drop)
}
fn op_staged(e: &mut Env) -> vkhost::Result<()> {
    let v = pattern(700 << 10, 1);
    e.buf.write(3, &v)?;
    let buf = &e.buf;
    let out = &mut e.scratch.slice()[..v.len()];
    buf.read(3, out)?;
    assert!(*out == v[..], "staged round trip");
    Ok(())
}
fn op_direct(e: &mut Env) -> vkhost::Result<()> {
    let n = 4 * 4096;
    e.mem.slice()[8 * 4096..12 * 4096].copy_from_slice(&pattern(n, 2));
    // SAFETY: the registered range lies in the live mapping.
    unsafe { host::copy_to_device(&e.dev, e.reg_base as *const u8, n, &e.buf, 0) }?;
    // SAFETY: the pinned block holds n bytes and outlives the call.
    unsafe { host::copy_to_host(&e.dev, &e.buf, 0, e.pinned.as_mut_ptr(), n) }?;
    assert!(e.pinned[..n] == pattern(n, 2)[..]);
    Ok(())
}
fn op_mixed(e: &mut Env) -> vkhost::Result<()> {
    let from = e.reg_base - 2 * 4096;
    let n = 4 * 4096;
    // SAFETY: inside the live mapping.
    let p = unsafe { host::copy_to_device(&e.dev, from as *const u8, n, &e.buf, 0) }?;
    assert_eq!(p, vkhost::CopyPath::Mixed);
    // SAFETY: inside the live mapping.
    unsafe { host::copy_to_host(&e.dev, &e.buf, 0, from as *mut u8, n) }?;
    Ok(())
}
fn op_stream(e: &mut Env) -> vkhost::Result<()> {
    let s = e.dev.stream()?;
    e.keep.push(s);
    let s = e.keep.last().unwrap();
    let v = pattern(600 << 10, 3);
    s.upload(&v, &e.buf, 0)?.wait()?;
    let out = &mut e.scratch.slice()[..v.len()];
    s.download(&e.buf, 0, out)?.wait()?;
    assert!(*out == v[..], "stream round trip");
    // SAFETY: registered range in the live mapping; synchronized before return.
    unsafe { s.copy_to_device_async(e.reg_base as *const u8, 4096, &e.buf, 0) }?;
    s.fill_async(&e.buf, 4096, 4096, 7)?;
    let ev = s.record()?;
    let t = e.dev.stream()?;
    e.keep.push(t);
    let (s, t) = (&e.keep[0], &e.keep[1]);
    t.wait_event(&ev)?;
    t.copy_async(&e.buf, 0, &e.buf, 8192, 4096)?;
    t.synchronize()?;
    s.synchronize()?;
    e.keep.clear();
    Ok(())
}
fn op_launch(e: &mut Env) -> vkhost::Result<()> {
    use vkhost::kernel::{Binding, builtin};
    let s = e.dev.stream_on(vkhost::QueueKind::Compute)?;
    e.keep.push(s);
    let s = &e.keep[0];
    let n = 64 << 10;
    s.fill_u32(Binding::Device(&e.buf, 0, n), 0xA5C3_0F01)?;
    s.copy_sm(Binding::Device(&e.buf, 0, n), Binding::Device(&e.buf, n, n))?;
    let sum = s.checksum(Binding::Device(&e.buf, n, n))?;
    let want: Vec<u8> = 0xA5C3_0F01u32.to_le_bytes().iter().copied().cycle().take(n).collect();
    assert_eq!(sum, builtin::checksum_cpu(&want), "launch results");
    s.fill_u32(Binding::pinned_mut(&mut e.pinned, 0, 4096), 0x0102_0304)?;
    s.synchronize()?;
    assert!(e.pinned[..4096].chunks(4).all(|w| w == [4, 3, 2, 1]), "pinned fill");
    e.keep.clear();
    Ok(())
}

fn cases() -> Vec<(&'static str, Op, OpenOptions)> {
    vec![
        ("register", op_register as Op, fopts()),
        ("alloc_pinned", op_alloc_pinned, fopts()),
        ("alloc_buffer", op_alloc_buffer, fopts()),
        ("staged copies", op_staged, fopts()),
        ("direct copies", op_direct, fopts()),
        ("mixed copies", op_mixed, fopts()),
        ("stream work", op_stream, fopts()),
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
        LINES.with(|l| l.set(0));
        PANIC_AT.with(|p| p.set(panic_at));
        inject(point, nth, code);
        op(&mut env)
    }));
    let fired = disarm();
    PANIC_AT.with(|p| p.set(None));
    let lines = LINES.with(|l| l.get());
    let panicked = match &r {
        Err(p) => {
            let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
            if !msg.starts_with("user logger panicked") {
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
    install_logger();
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
