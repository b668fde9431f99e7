//! The system refuses a thread (a container's pids limit, no address space for its stack):
//! safe calls that import or copy on several threads return normally, run the refused share on
//! the calling thread, and leave nothing behind. Made to happen by capping the process's
//! address space (RLIMIT_AS) just above what it uses, so no new thread stack fits. One test
//! function, so that the cap never meets another test's threads in this process.
//!
//! Before: `std::thread::Scope::spawn` panicked out of `broadcast`, `Device::register`,
//! `PinnedBuffer::new` and `HostRange::register` part-way: a registry reservation left behind
//! (the bytes never registrable again), imported pieces no teardown knew of, `destroy`
//! answering `Busy` for ever, a `HostRange` half registered.

mod common;
use common::*;
use vkhost::{Device, HostRange, OpenOptions, PinnedBuffer, broadcast};

fn vm_size() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let l = s.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// Runs `f` with the address space capped `room` bytes above its current size, catching a
/// panic (the bug) so the cap is always lifted. Before `f`, parked probe threads take every
/// thread stack the C library has cached from exited threads (and what room is left) until
/// the system refuses one: then vkhost's threads inside `f` need new stacks, which do not fit.
/// With less room than one stack (2 MiB), a refusal must have been seen, else the scenario
/// would test nothing: that fails the test.
fn capped<R>(room: u64, f: impl FnOnce() -> R) -> std::thread::Result<R> {
    let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain getrlimit/setrlimit on this process.
    unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut old) };
    let cap = libc::rlimit { rlim_cur: vm_size() + room, rlim_max: old.rlim_max };
    // SAFETY: as above.
    unsafe { libc::setrlimit(libc::RLIMIT_AS, &cap) };
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    let mut probes = Vec::new();
    let mut refused = false;
    for _ in 0..64 {
        let rx = rx.clone();
        match std::thread::Builder::new().spawn(move || {
            let _ = rx.lock().map(|r| r.recv());
        }) {
            Ok(h) => probes.push(h),
            Err(_) => {
                refused = true;
                break;
            }
        }
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    for _ in &probes {
        let _ = tx.send(());
    }
    for h in probes {
        let _ = h.join();
    }
    // SAFETY: as above (the limit restored).
    unsafe { libc::setrlimit(libc::RLIMIT_AS, &old) };
    assert!(refused || room >= 2 << 20, "the address-space cap did not make the system refuse a thread: the scenario would test nothing");
    r
}

fn pieces() -> OpenOptions {
    OpenOptions { max_import_piece: Some(64 << 10), ..opts() }
}

#[test]
fn refused_threads_are_no_panic_and_leave_nothing_behind() {
    let d = device().unwrap();
    if d.info().device_type != vkhost::DeviceType::Cpu {
        eprintln!(
            "SKIPPED: capping the address space under a GPU driver can make the driver itself fail; the scenario is vkhost's own threads and runs on CPU drivers (lavapipe)"
        );
        return;
    }
    drop(d);
    // broadcast: one thread per destination.
    {
        let d = device().unwrap();
        let n = 4096;
        let buf = d.alloc_buffer(2 * n).unwrap();
        let mut src = PinnedBuffer::new(&d, n).unwrap();
        src.fill(7);
        broadcast(&src, &[(&buf, 0), (&buf, n)]).unwrap(); // warm: copy contexts exist
        let srcs: &[u8] = &src;
        let dsts: Vec<(&vkhost::DeviceBuffer, usize)> = (0..16).map(|i| (&buf, (i % 2) * n)).collect();
        let r = capped(1 << 20, || broadcast(srcs, &dsts));
        assert!(r.is_ok(), "broadcast panicked when a thread was refused");
        let mut back = vec![0u8; 2 * n];
        buf.read(0, &mut back).unwrap();
        assert!(back.iter().all(|&b| b == 7), "every destination written");
    }
    // A registration of several imports: imported on several threads.
    {
        let d = device_with(pieces()).unwrap();
        let mut mem = Pages::new(1 << 20);
        let before = d.live_objects();
        let r = capped(1 << 20, || d.register(mem.slice()).map(drop));
        assert!(r.is_ok(), "Device::register panicked when a thread was refused");
        let again = d.register(mem.slice());
        assert!(again.is_ok(), "the bytes stay registrable: {:?}", again.as_ref().map(drop));
        drop(again);
        assert_eq!(d.live_objects().buffers, before.buffers, "no import left behind");
        d.0.destroy().unwrap();
        assert_eq!(d.0.live_objects(), vkhost::LiveObjects::default(), "nothing past teardown");
    }
    // A pinned block of several imports: destroy works afterwards.
    {
        let d = device_with(pieces()).unwrap();
        let r = capped(4 << 20, || PinnedBuffer::new(&d, 1 << 20).map(drop));
        assert!(r.is_ok(), "PinnedBuffer::new panicked when a thread was refused");
        assert_eq!(d.0.destroy(), Ok(()), "destroy with no PinnedBuffer alive");
    }
    // A HostRange over a device importing in pieces: all or nothing.
    {
        let a = device().unwrap();
        let b = Checked(Device::open_with(a.info().index, &pieces()).unwrap());
        let mut mem = Pages::new(1 << 20);
        let r = capped(1 << 20, || HostRange::register(&[&*a, &*b], mem.slice()).map(drop));
        assert!(r.is_ok(), "HostRange::register panicked when a thread was refused");
        assert!(vkhost::host::find(&a, mem.ptr, 16).is_none(), "nothing stays registered after the range went");
        assert!(vkhost::host::find(&b, mem.ptr, 16).is_none());
    }
}
