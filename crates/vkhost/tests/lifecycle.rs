//! Device lifecycle under threads, with the validation layer on: the scenario of a rare SIGSEGV
//! once reported (4 threads that open, use and destroy devices, 3 destroys racing).
//!
//! Each round, 4 threads each open a private device, register a Vec, allocate a PinnedBuffer
//! and a DeviceBuffer, copy synchronously and through a stream, verify the bytes and destroy the
//! device. Meanwhile thread 0 opens a shared device and hands clones to the others: thread 0
//! keeps using it (copies, streams, PinnedBuffers, registrations) while threads 1-3 use it and
//! then race to `destroy()` it. On the shared device every operation succeeds with the right
//! bytes or answers `DeviceDestroyed`; `destroy` answers `Busy` only while a PinnedBuffer lives.
//! Every device ends with zero validation errors.
//!
//! A rare crash shows up per process (at thread exit, at process exit, in a one-in-N race), so
//! `child_processes` re-runs the scenario in fresh processes and reports any signal, with the
//! shared object that holds the faulting instruction (vkhost is linked into the test binary).
//!
//! Known crash, not vkhost's: Khronos validation layers older than 1.4.304 (Debian 12 ships
//! 1.3.239) keep a process-global `layer_data_map` that vkCreateInstance/vkCreateDevice/
//! vkDestroyDevice/vkDestroyInstance modify with no lock while every other call, on any thread
//! and any device, reads it (Vulkan-ValidationLayers#4391, fixed upstream by 3d4d519). About once
//! in 500 to 1000 rounds here, a call on one device (vkGetFenceStatus, vkResetCommandBuffer) walks
//! a hash node that another thread's vkDestroyDevice just freed, or misses its entry while another
//! thread's vkCreateDevice rehashes and gets a blank one: SIGSEGV in the layer, at address 0
//! called from it, or in libc's pthread_rwlock_rdlock (the lock of a freed layer object, by its
//! look); once it reported a live private device as "Invalid VkDevice". `child_processes`
//! reports such a child (signal, faulting object, caller; or the marked validation error) but
//! fails only on other deaths, unless `VKHOST_LIFECYCLE_STRICT=1`; with a fixed layer every death
//! fails, and so does a child that hangs. The in-process test cannot tell: it fails (and prints
//! the fault line first).
//!
//! Knobs: `VKHOST_LIFECYCLE_ROUNDS` (rounds in this process, default 5),
//! `VKHOST_LIFECYCLE_CHILDREN` (child processes, default 24), `VKHOST_LIFECYCLE_CHILD_ROUNDS`
//! (rounds per child, default 3), `VKHOST_LIFECYCLE_STRICT=1` (no known-crash exception).

mod common;
use common::*;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;
use vkhost::{Device, Error, PinnedBuffer, Result};

const THREADS: usize = 4;
const LEN: usize = 64 << 10;
/// Set in a child process: it runs the scenario only.
const CHILD_ENV: &str = "VKHOST_LIFECYCLE_CHILD";
/// The first validation layer without the race (upstream 3d4d519).
const LAYER_FIXED: u32 = vkhost::vk::make_api_version(0, 1, 4, 304);

/// How the races went: `destroy` calls answered Busy, and operations of thread 0 on the shared
/// device answered DeviceDestroyed (destroy landed while it was using the device).
static BUSY: AtomicUsize = AtomicUsize::new(0);
static DESTROYED_IN_USE: AtomicUsize = AtomicUsize::new(0);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `Some` on success, `None` on `DeviceDestroyed`; anything else fails the test.
fn ok_or_destroyed<T>(what: &str, r: Result<T>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(Error::DeviceDestroyed) => {
            DESTROYED_IN_USE.fetch_add(1, Ordering::Relaxed);
            None
        }
        Err(e) => panic!("{what} on the shared device: {e:?}"),
    }
}

/// Asserts zero validation errors. On a private device (opened, used and destroyed by one
/// thread) an error that calls one of its dispatchable handles invalid cannot come from vkhost,
/// which never lets a device go while it uses it; it is what the layer's unlocked
/// `layer_data_map` gives (see the module docs), and the panic says so with `LAYER_RACE`.
fn assert_clean(d: &Device, what: &str, private: bool) {
    assert!(d.validation_enabled());
    let (n, last) = (d.validation_errors(), d.last_validation_error());
    let dispatchable = ["VkInstance", "VkPhysicalDevice", "VkDevice", "VkQueue", "VkCommandBuffer"];
    let race = private && last.as_deref().is_some_and(|m| dispatchable.iter().any(|h| m.contains(&format!("Invalid {h} "))));
    assert!(n == 0, "{}{what}: {n} validation errors; last: {last:?}", if race { LAYER_RACE } else { "" });
    assert_eq!(last, None, "{what}");
}

/// Marks a child's failure that has the shape of the validation layer's known race.
const LAYER_RACE: &str = "VKHOST_LAYER_RACE: ";

/// A barrier that a failing thread breaks: the others then fail too, instead of waiting for it
/// forever.
struct Gate {
    arrived: Mutex<usize>,
    cv: Condvar,
    need: usize,
    broken: AtomicBool,
}

impl Gate {
    fn new(need: usize) -> Gate {
        Gate { arrived: Mutex::new(0), cv: Condvar::new(), need, broken: AtomicBool::new(false) }
    }

    fn pass(&self) {
        let mut n = self.arrived.lock().unwrap_or_else(PoisonError::into_inner);
        *n += 1;
        self.cv.notify_all();
        while *n < self.need {
            assert!(!self.is_broken(), "another thread of this round failed");
            n = self.cv.wait_timeout(n, Duration::from_millis(10)).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }
}

/// Breaks the gates of the round when its thread unwinds.
struct BreakOnPanic<'a>(&'a [&'a Gate]);

impl Drop for BreakOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for g in self.0 {
                g.broken.store(true, Ordering::Relaxed);
                g.cv.notify_all();
            }
        }
    }
}

/// Opens a device with validation on (the same options every device test uses).
fn open() -> Device {
    init_log();
    Device::open_default_with(&opts()).unwrap_or_else(|e| panic!("open: {e}. Run scripts/setup."))
}

/// The full private workload on a device this thread owns, then destroy.
fn private_device(seed: u8) {
    let d = open();
    let want = pattern(LEN, seed);
    let buf = d.alloc_buffer(LEN).unwrap();

    // A registered Vec: both directions go direct.
    let mut mine = want.clone();
    {
        let mut reg = d.register(&mut mine).unwrap();
        buf.write(0, &reg).unwrap();
        reg.fill(0);
        buf.read(0, &mut reg).unwrap();
        assert!(reg[..] == want[..], "seed {seed}: registered round trip");
    }

    // A PinnedBuffer: destroy is Busy while it lives.
    let mut pinned = PinnedBuffer::new(&d, LEN).unwrap();
    pinned.copy_from_slice(&pattern(LEN, seed ^ 0x55));
    buf.write(0, &pinned).unwrap();
    let mut out = vec![0u8; LEN];
    buf.read(0, &mut out).unwrap();
    assert!(out[..] == pinned[..], "seed {seed}: pinned h2d");
    assert!(matches!(d.destroy(), Err(Error::Busy { .. })), "destroy with a live PinnedBuffer must be Busy");

    // A stream: upload from pageable memory, download into the pinned block and into a Vec.
    let stream = d.stream().unwrap();
    stream.upload(&want, &buf, 0).unwrap().wait().unwrap();
    stream.download(&buf, 0, &mut pinned).unwrap().wait().unwrap();
    assert!(pinned[..] == want[..], "seed {seed}: stream to pinned");
    out.fill(0);
    stream.download(&buf, 0, &mut out).unwrap().wait().unwrap();
    assert!(out == want, "seed {seed}: stream to pageable");
    stream.synchronize().unwrap();

    drop(pinned);
    d.destroy().unwrap();
    assert!(d.is_destroyed());
    // Handles that outlive the device are inert.
    assert_eq!(buf.write(0, &[1]).unwrap_err(), Error::DeviceDestroyed);
    drop(stream);
    drop(buf);
    assert_clean(&d, "private device", true);
}

/// Thread 0's use of the shared device: copies until the others have destroyed it (or failed).
fn use_shared(d: &Device, seed: u8, race: &Gate) {
    for i in 0.. {
        if d.is_destroyed() || race.is_broken() {
            return;
        }
        let s = seed.wrapping_add(i as u8);
        let want = pattern(LEN, s);
        let Some(buf) = ok_or_destroyed("alloc_buffer", d.alloc_buffer(LEN)) else { return };
        if ok_or_destroyed("write", buf.write(0, &want)).is_some() {
            let mut out = vec![0u8; LEN];
            if ok_or_destroyed("read", buf.read(0, &mut out)).is_some() {
                assert!(out == want, "shared device: sync round trip");
            }
        }
        // A PinnedBuffer makes the destroyers wait (Busy) while it lives.
        match PinnedBuffer::new(d, LEN) {
            Ok(mut p) => {
                p.copy_from_slice(&want);
                if ok_or_destroyed("write from pinned", buf.write(0, &p)).is_some() {
                    p.fill(0);
                    if ok_or_destroyed("read into pinned", buf.read(0, &mut p)).is_some() {
                        assert!(p[..] == want[..], "shared device: pinned round trip");
                    }
                }
            }
            Err(Error::DeviceDestroyed) => return,
            Err(e) => panic!("PinnedBuffer::new on the shared device: {e:?}"),
        }
        stream_round_trip(d, &buf, &want);
        let mut v = want.clone();
        let reg = d.register(&mut v);
        match &reg {
            Ok(reg) => {
                let _ = ok_or_destroyed("write from registration", buf.write(0, reg));
            }
            Err(Error::DeviceDestroyed) => {}
            Err(e) => panic!("register on the shared device: {e:?}"),
        }
        drop(reg);
    }
}

/// Upload then download through a stream; the bytes must be right when both were accepted.
fn stream_round_trip(d: &Device, buf: &vkhost::DeviceBuffer, want: &[u8]) {
    let Some(stream) = ok_or_destroyed("stream", d.stream()) else { return };
    let Some(up) = ok_or_destroyed("upload", stream.upload(want, buf, 0)) else { return };
    let _ = ok_or_destroyed("upload wait", up.wait());
    let mut out = vec![0u8; want.len()];
    // A download accepted before destroy is completed by destroy: the bytes are there.
    let accepted = ok_or_destroyed("download", stream.download(buf, 0, &mut out)).map(|p| ok_or_destroyed("download wait", p.wait()));
    if accepted.is_some() {
        assert!(out == want, "shared device: stream round trip");
    }
    let _ = ok_or_destroyed("synchronize", stream.synchronize());
}

/// Destroys the shared device, retrying while a PinnedBuffer makes it Busy.
fn destroy_shared(d: &Device) {
    for _ in 0..100_000 {
        match d.destroy() {
            Ok(()) => return,
            Err(Error::Busy { .. }) => {
                BUSY.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now()
            }
            Err(e) => panic!("destroy of the shared device: {e:?}"),
        }
    }
    panic!("destroy of the shared device stayed Busy");
}

fn round(r: usize) {
    let slot: Mutex<Option<Device>> = Mutex::new(None);
    let (start, race) = (Gate::new(THREADS), Gate::new(THREADS - 1));
    let gates = [&start, &race];
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let (slot, start, race, gates) = (&slot, &start, &race, &gates);
            sc.spawn(move || {
                let _break = BreakOnPanic(gates);
                let seed = (r * THREADS + t) as u8;
                if t == 0 {
                    *slot.lock().unwrap() = Some(open());
                }
                start.pass();
                let shared = slot.lock().unwrap().clone().unwrap();
                if t == 0 {
                    // Keep using the shared device while the others destroy it.
                    use_shared(&shared, seed, race);
                    private_device(seed);
                } else {
                    // Open and use a private device concurrently with the shared device's use,
                    // then race the two other threads to destroy the shared one.
                    let buf = ok_or_destroyed("alloc_buffer", shared.alloc_buffer(LEN));
                    if let Some(buf) = &buf {
                        stream_round_trip(&shared, buf, &pattern(LEN, seed));
                    }
                    private_device(seed);
                    race.pass();
                    destroy_shared(&shared);
                    assert!(shared.is_destroyed());
                    drop(buf);
                }
                drop(shared);
            });
        }
    });
    let shared = slot.into_inner().unwrap().unwrap();
    assert!(shared.is_destroyed());
    assert_eq!(shared.alloc_buffer(16).unwrap_err(), Error::DeviceDestroyed);
    assert_clean(&shared, "shared device", false);
}

#[test]
fn four_threads_open_use_destroy() {
    // With a validation layer older than 1.4.304 the scenario can die of the layer's own race
    // (see `child_processes`) about once in 100-200 runs: in-process, that would kill the whole
    // test binary. There it runs only inside `child_processes`, which tells that death apart.
    let layer = validation_layer_version();
    let racy = layer.is_some_and(|v| v < LAYER_FIXED);
    if std::env::var_os(CHILD_ENV).is_none() && racy && std::env::var("VKHOST_LIFECYCLE_STRICT").as_deref() != Ok("1") {
        eprintln!(
            "four_threads_open_use_destroy: runs in child processes only (child_processes) with validation layer {}, \
             whose known race could kill this process; VKHOST_LIFECYCLE_STRICT=1 runs it here",
            fmt_version(layer.unwrap_or(0))
        );
        return;
    }
    report_faults();
    let rounds = env_usize("VKHOST_LIFECYCLE_ROUNDS", 5);
    let t0 = std::time::Instant::now();
    for r in 0..rounds {
        round(r);
    }
    eprintln!(
        "{rounds} rounds in {:.1?}: destroy answered Busy {} times, operations on the shared device \
         answered DeviceDestroyed {} times",
        t0.elapsed(),
        BUSY.load(Ordering::Relaxed),
        DESTROYED_IN_USE.load(Ordering::Relaxed)
    );
}

#[test]
fn child_processes() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return; // a child runs only the scenario
    }
    let children = env_usize("VKHOST_LIFECYCLE_CHILDREN", 24);
    let rounds = env_usize("VKHOST_LIFECYCLE_CHILD_ROUNDS", 3);
    let strict = std::env::var("VKHOST_LIFECYCLE_STRICT").as_deref() == Ok("1");
    let layer = validation_layer_version();
    // A round takes well under a second; a child past this has hung.
    let limit = Duration::from_secs(120 + 10 * rounds as u64);
    let t0 = std::time::Instant::now();
    let (mut failures, mut layer_races) = (Vec::new(), 0);
    for i in 0..children {
        let Some((status, err)) = run_child(rounds, limit) else {
            eprintln!("child {i}: hung, killed after {limit:?}");
            failures.push(format!("child {i}: hung, killed after {limit:?}"));
            continue;
        };
        if status.success() {
            continue;
        }
        let how = death(status, &err);
        let tail: Vec<&str> = err.lines().rev().take(30).collect();
        eprintln!("child {i}: {how}\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        if !strict && known_layer_race(status, &err, layer) {
            layer_races += 1;
            eprintln!(
                "child {i}: this has the shape of the known race of VK_LAYER_KHRONOS_validation {} (older \
                 than 1.4.304), whose global layer_data_map every thread reads while instance and device \
                 creation and destruction write it without a lock (KhronosGroup/Vulkan-ValidationLayers#4391, \
                 fixed upstream by 3d4d519 in v1.4.304): not counted as a vkhost failure. \
                 VKHOST_LIFECYCLE_STRICT=1 counts it.",
                fmt_version(layer.unwrap_or(0))
            );
        } else {
            failures.push(format!("child {i}: {how}"));
        }
    }
    eprintln!(
        "{children} child processes x {rounds} rounds in {:.1?}; {} failed, {layer_races} hit the known validation-layer race",
        t0.elapsed(),
        failures.len()
    );
    assert!(failures.is_empty(), "{} of {children} children failed: {failures:?}", failures.len());
}

/// Runs the scenario in a child process: its exit status and stderr, or `None` if it ran past
/// `limit` (then it is killed).
fn run_child(rounds: usize, limit: Duration) -> Option<(std::process::ExitStatus, String)> {
    let mut cmd = common::child::this_test("four_threads_open_use_destroy");
    cmd.env(CHILD_ENV, "1").env("VKHOST_LIFECYCLE_ROUNDS", rounds.to_string()).stdout(std::process::Stdio::null());
    common::child::run_with_stderr(&mut cmd, limit)
}

/// How a child died, for the report: the signal and the fault line, or the exit code.
fn death(status: std::process::ExitStatus, err: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (_, Some(sig)) => {
            let fault = err.lines().find(|l| l.starts_with("VKHOST_FAULT")).unwrap_or("no VKHOST_FAULT line");
            format!("killed by signal {sig}{}: {fault}", if status.core_dumped() { " (core dumped)" } else { "" })
        }
        (Some(code), None) => format!("exit code {code}"),
        (None, None) => format!("{status:?}"),
    }
}

/// The installed Khronos validation layer's version (its spec version), if it is installed.
fn validation_layer_version() -> Option<u32> {
    // SAFETY: loading the Vulkan loader runs its initialisers; the entry lives until return.
    let entry = unsafe { vkhost::ash::Entry::load() }.ok()?;
    // SAFETY: a plain query on a loaded entry.
    let layers = unsafe { entry.enumerate_instance_layer_properties() }.ok()?;
    layers.iter().find(|l| l.layer_name_as_c_str().is_ok_and(|n| n == c"VK_LAYER_KHRONOS_validation")).map(|l| l.spec_version)
}

fn fmt_version(v: u32) -> String {
    use vkhost::vk;
    format!("{}.{}.{}", vk::api_version_major(v), vk::api_version_minor(v), vk::api_version_patch(v))
}

#[test]
fn classifies_faults() {
    use std::os::unix::process::ExitStatusExt;
    let old = Some(vkhost::vk::make_api_version(0, 1, 3, 239));
    let fixed = Some(vkhost::vk::make_api_version(0, 1, 4, 304));
    let v = "/lib/x86_64-linux-gnu/libVkLayer_khronos_validation.so";
    let c = "/lib/x86_64-linux-gnu/libc.so.6";
    let line = |at: &str, from: &str| format!("x\nVKHOST_FAULT signal 11 at pc 0x1 in {at} +0x1 called from {from} +0x2\ny");
    // Wait statuses: killed by a signal, and exit code 101 (a failed test).
    let (segv, abrt, exit101) =
        (ExitStatusExt::from_raw(libc::SIGSEGV), ExitStatusExt::from_raw(libc::SIGABRT), ExitStatusExt::from_raw(101 << 8));
    // The shapes seen: a fault in the layer, a jump to 0 from it, a lock of a freed layer object,
    // and a private device's own handle called invalid.
    assert!(known_layer_race(segv, &line(v, "?"), old));
    assert!(known_layer_race(segv, &line("?", v), old));
    assert!(known_layer_race(segv, &line(c, v), old));
    assert!(known_layer_race(exit101, &format!("panicked at x:\n{LAYER_RACE}private device: 1 validation errors"), old));
    // Anything else is a failure: vkhost (this binary), the driver, a fixed layer, an abort, a
    // plain test failure, no report.
    assert!(!known_layer_race(segv, &line("/x/deps/lifecycle-1234", v), old));
    assert!(!known_layer_race(segv, &line("/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so", v), old));
    assert!(!known_layer_race(segv, &line(c, "/x/deps/lifecycle-1234"), old));
    assert!(!known_layer_race(segv, &line(v, "?"), fixed));
    assert!(!known_layer_race(exit101, LAYER_RACE, fixed));
    assert!(!known_layer_race(abrt, &line(v, "?"), old));
    assert!(!known_layer_race(exit101, "shared device: 1 validation errors", old));
    assert!(!known_layer_race(segv, "no report", old));
}

/// Whether a child's death has the shape of the validation layer's known race (see the module
/// docs), with a layer older than 1.4.304 (where upstream 3d4d519 made `layer_data_map`
/// thread-safe): a SIGSEGV/SIGBUS whose faulting instruction is in the layer, or that jumped to
/// address 0 or faulted in libc (the lock of a freed layer object) when called from the layer;
/// or a test failure that `assert_clean` marked (a private device's own handle called invalid).
fn known_layer_race(status: std::process::ExitStatus, err: &str, layer: Option<u32>) -> bool {
    use std::os::unix::process::ExitStatusExt;
    const LAYER: &str = "libVkLayer_khronos_validation.so";
    let fixed = vkhost::vk::make_api_version(0, 1, 4, 304);
    if layer.is_none_or(|v| (v & !(0x7 << 29)) >= fixed) {
        return false;
    }
    if status.code() == Some(101) {
        return err.contains(LAYER_RACE);
    }
    let Some(fault) = err.lines().find(|l| l.starts_with("VKHOST_FAULT")) else { return false };
    let field = |key: &str| fault.split(key).nth(1).and_then(|r| r.split(' ').next()).unwrap_or("");
    let (at, from) = (field(" in "), field(" called from "));
    let located = at.ends_with(LAYER) || ((at == "?" || at.contains("/libc.so")) && from.ends_with(LAYER));
    matches!(status.signal(), Some(libc::SIGSEGV) | Some(libc::SIGBUS)) && located
}

/// Installs a handler that, on a fatal signal, writes one line to stderr naming the signal, the
/// faulting instruction and the shared object that holds it, and the caller's return address
/// (exact when the fault is at address 0 or on a function's first instruction), then lets the
/// signal kill the process as before (core dump included). A parent reads that line to tell a
/// crash in vkhost (linked into this binary) from one in the driver, the loader or the layer.
fn report_faults() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for sig in [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE] {
            // SAFETY: a zeroed sigaction with our handler; SA_RESETHAND restores the default
            // action before the handler runs, SA_ONSTACK uses the alternate stack that Rust
            // threads have (so a stack overflow still reports).
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_fault as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESETHAND | libc::SA_ONSTACK;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    });
}

/// The shared object holding `addr` and the offset in it, or "?".
fn object_of(addr: usize) -> (&'static str, usize) {
    // SAFETY: dladdr only reads the loader's link map (the process is about to die anyway);
    // dli_fname, when set, is a NUL-terminated path the loader keeps while the object is loaded.
    unsafe {
        let mut dl: libc::Dl_info = std::mem::zeroed();
        if addr == 0 || libc::dladdr(addr as *const libc::c_void, &mut dl) == 0 || dl.dli_fname.is_null() {
            return ("?", addr);
        }
        (std::ffi::CStr::from_ptr(dl.dli_fname).to_str().unwrap_or("?"), addr.wrapping_sub(dl.dli_fbase as usize))
    }
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    use std::fmt::Write;
    /// Formats into a stack buffer: no allocation in a signal handler.
    struct Buf([u8; 768], usize);
    impl Write for Buf {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            let n = s.len().min(self.0.len() - self.1);
            self.0[self.1..self.1 + n].copy_from_slice(&s.as_bytes()[..n]);
            self.1 += n;
            Ok(())
        }
    }
    // The faulting pc, and the return address a call just made left: on x86_64 the word at the
    // stack pointer, on aarch64 the link register.
    // SAFETY: the kernel passes a valid ucontext for SA_SIGINFO handlers, and the stack pointer
    // of the interrupted thread points into its mapped stack.
    #[cfg(target_arch = "x86_64")]
    let (pc, ret) = unsafe {
        let g = &(*(ctx as *const libc::ucontext_t)).uc_mcontext.gregs;
        let sp = g[libc::REG_RSP as usize] as usize;
        // A fault next to the stack pointer is a stack overflow: the stack is not readable.
        let overflow = ((*info).si_addr() as usize).abs_diff(sp) < 1 << 16;
        (g[libc::REG_RIP as usize] as usize, if overflow { 0 } else { *(sp as *const usize) })
    };
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    let (pc, ret) = unsafe {
        let _ = info;
        let m = &(*(ctx as *const libc::ucontext_t)).uc_mcontext;
        (m.pc as usize, m.regs[30] as usize)
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let (pc, ret) = {
        let _ = (ctx, info);
        (0usize, 0usize)
    };
    let ((lib, off), (rlib, roff)) = (object_of(pc), object_of(ret));
    let mut b = Buf([0; 768], 0);
    let _ = writeln!(b, "VKHOST_FAULT signal {sig} at pc {pc:#x} in {lib} +{off:#x} called from {rlib} +{roff:#x}");
    // SAFETY: write(2) and raise(3) are async-signal-safe. The disposition is the default again
    // (SA_RESETHAND) and the signal is blocked until we return, so it then kills the process,
    // whether it was a fault (which would also recur) or sent by kill(2).
    unsafe {
        libc::write(2, b.0.as_ptr().cast(), b.1);
        libc::raise(sig);
    }
}

/// A `keep_alive` owner whose drop joins a worker thread that drops a handle of another device:
/// the owner drops inside the last drop of the first device. Before, that teardown ran under
/// the process-wide releaser lock, which the worker's drop waited for: deadlock (found by an
/// audit helper).
#[test]
fn a_keep_alive_owner_may_join_a_thread_that_drops_a_handle() {
    let a = Device::open_default_with(&opts()).unwrap();
    let b = Device::open_default_with(&opts()).unwrap();
    struct Joiner(Option<std::thread::JoinHandle<()>>, std::sync::mpsc::Sender<()>);
    impl Drop for Joiner {
        fn drop(&mut self) {
            let _ = self.1.send(());
            self.0.take().unwrap().join().unwrap();
        }
    }
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let b2 = b.clone();
    let worker = std::thread::spawn(move || {
        go_rx.recv().unwrap();
        drop(b2);
    });
    a.keep_alive(Box::new(Joiner(Some(worker), go_tx)));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(a);
        tx.send(()).unwrap();
    });
    let r = rx.recv_timeout(Duration::from_secs(10));
    if r.is_err() {
        std::mem::forget(b); // its drop would block on the same lock
        panic!("deadlock: the last drop of `a` never returned (its owner joins a thread dropping a handle of `b`)");
    }
    drop(b);
}

/// The last handle of device B dropped inside the last drop of device A (a `keep_alive` owner
/// of A) while the background releaser holds B (draining B's freed pinned blocks): B's
/// teardown runs before `drop(a)` returns, on the user's thread. Before, the nested drop did
/// not wait for the releaser, which became B's last owner and tore B down on its own thread
/// after the user's last drop returned (an exit right after crashed: found by an audit helper).
/// Records the thread that dropped it (the one that ran its device's teardown).
struct Marker {
    dropped: std::sync::Arc<AtomicBool>,
    thread: std::sync::Arc<Mutex<Option<String>>>,
}
impl Drop for Marker {
    fn drop(&mut self) {
        *self.thread.lock().unwrap() = std::thread::current().name().map(str::to_owned);
        self.dropped.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_nested_last_drop_tears_down_before_it_returns() {
    let mut hits = 0;
    for round in 0..10 {
        let a = Device::open_default_with(&opts()).unwrap();
        let b = Device::open_default_with(&opts()).unwrap();
        let dropped = std::sync::Arc::new(AtomicBool::new(false));
        let thread = std::sync::Arc::new(Mutex::new(None));
        b.keep_alive(Box::new(Marker { dropped: dropped.clone(), thread: thread.clone() }));
        a.keep_alive(Box::new(b.clone()));
        let blocks: Vec<_> = (0..1500).map(|_| vkhost::host::alloc_pinned(&b, 4096).unwrap()).collect();
        for p in blocks {
            vkhost::host::free_pinned(&b, p).unwrap();
        }
        drop(b); // not the last: A's owner holds one
        drop(a); // the last handle of A, and through its owner the last user handle of B
        let done_at_return = dropped.load(Ordering::SeqCst);
        // Let the releaser finish.
        let t = std::time::Instant::now();
        while !dropped.load(Ordering::SeqCst) && t.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let who = thread.lock().unwrap().clone();
        eprintln!("round {round}: torn down when drop(a) returned: {done_at_return}; B's owners dropped on thread {who:?}");
        if !done_at_return {
            hits += 1;
        }
    }
    assert_eq!(hits, 0, "B's teardown ran after the user's last drop returned (on the releaser thread) in {hits}/10 rounds");
}
