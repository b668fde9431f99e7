//! A panic unwinding through vkhost (a user's logger that panics on an error message, here
//! armed per thread) in the middle of a registration leaves nothing behind: no registry entry,
//! no import, no count. Fault injection makes the call fail (and log) at a chosen point.
//! Before the fix (`HostRange::register`'s undo ran only on `Err`; `import_pieces` held the
//! other pieces' imports as plain handles until every piece was done) these failed: an entry
//! owned by a guard that no longer existed, 15 of 16 pieces' buffers and memories leaked.
//!
//! Copies too: a panic out of a wait leaves nothing that writes the caller's memory later.
//! On the code before the commit that added them, the three copy tests below failed (8192 and 4096 bytes of the
//! caller's Vec written by the stream's drop; 27-42 MiB of unregistered pages written by the
//! device after the registration's drop returned).

mod common;
use common::*;
use vkhost::host::{self, entries_of};
use vkhost::{Device, HostRange, OpenOptions, PinnedBuffer};

const PIECE: usize = 64 << 10;

fn small_pieces() -> OpenOptions {
    OpenOptions { max_import_piece: Some(PIECE), ..opts() }
}

fn dev_with(o: OpenOptions) -> Checked {
    panic_logger::install();
    device_with(o).expect("device")
}

/// A panicking user callback (the process logger) during the second device's registration:
/// nothing must stay registered on the first device.
#[test]
fn host_range_panic_during_second_device_leaves_nothing() {
    let a = dev_with(opts());
    // b is not Checked: it will be lost.
    let b = Device::open_with(a.info().index, &opts()).unwrap();
    let mut v = vec![3u8; 64 << 10];
    let addr = v.as_ptr() as usize;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // a's import takes CreateBuffer call 0 on this thread; b's is call 1.
        vkhost::fault::inject(vkhost::fault::Point::CreateBuffer, 1, vkhost::vk::Result::ERROR_DEVICE_LOST);
        panic_logger::arm(log::Level::Error, 0);
        let r = HostRange::register(&[&a, &b], &mut v);
        r.map(|_| ())
    }));
    vkhost::fault::disarm();
    panic_logger::disarm();
    eprintln!("register result: {:?}", r.as_ref().map_err(|_| "panicked"));
    let left_a = entries_of(&a);
    let found = host::find(&a, addr, 8).is_some();
    let raw = host::unregister(&a, addr);
    eprintln!("after unwind: entries_of(a) = {left_a}, find(a) = {found}, raw unregister(a) = {raw:?}");
    let _ = b.destroy();
    assert!(r.is_err(), "expected the panic to unwind");
    assert_eq!(left_a, 0, "a registration of the (no longer borrowed) slice stayed on device a");
    drop(v);
}

/// A panic unwinding out of a multi-piece import (the first piece, on the caller's thread)
/// while the other pieces imported on helper threads: nothing may leak.
#[test]
fn panic_in_multi_piece_import_leaks_nothing() {
    let d = dev_with(small_pieces());
    let n = 16 * PIECE;
    let m = Pages::new(n);
    let before = d.live_objects();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        vkhost::fault::inject(vkhost::fault::Point::CreateBuffer, 0, vkhost::vk::Result::ERROR_DEVICE_LOST);
        panic_logger::arm(log::Level::Error, 0);
        // SAFETY: mapping outlives the device.
        unsafe { host::register(&d, m.ptr, n) }
    }));
    vkhost::fault::disarm();
    panic_logger::disarm();
    assert!(r.is_err(), "expected a panic");
    assert_eq!(entries_of(&d), 0, "reservation left behind");
    let after = d.live_objects();
    eprintln!("before {before:?}\nafter  {after:?}");
    assert_eq!((after.buffers, after.memories), (before.buffers, before.memories), "imports of the other pieces leaked");
}

/// A panic unwinding through `Device::register` and through a multi-piece `PinnedBuffer::new`:
/// no reservation, no count, no leaked import.
#[test]
fn panic_through_register_and_pinned_leaves_nothing() {
    let d = dev_with(small_pieces());
    let mut v = vec![0u8; 3 * PIECE];
    let before = d.live_objects();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        vkhost::fault::inject(vkhost::fault::Point::CreateBuffer, 0, vkhost::vk::Result::ERROR_DEVICE_LOST);
        panic_logger::arm(log::Level::Error, 0);
        d.register(&mut v).map(|_| ())
    }));
    vkhost::fault::disarm();
    panic_logger::disarm();
    assert!(r.is_err());
    assert_eq!(entries_of(&d), 0, "reservation left behind");
    let after = d.live_objects();
    assert_eq!((after.buffers, after.memories), (before.buffers, before.memories));
    drop(v);

    let e = dev_with(small_pieces());
    if e.host_registration().is_err() {
        return;
    }
    let before = e.live_objects();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        vkhost::fault::inject(vkhost::fault::Point::CreateBuffer, 0, vkhost::vk::Result::ERROR_DEVICE_LOST);
        panic_logger::arm(log::Level::Error, 0);
        PinnedBuffer::new(&e, 8 * PIECE).map(|_| ())
    }));
    vkhost::fault::disarm();
    panic_logger::disarm();
    assert!(r.is_err());
    assert_eq!(entries_of(&e), 0);
    let after = e.live_objects();
    eprintln!("pinned: before {before:?} after {after:?}");
    assert_eq!((after.buffers, after.memories), (before.buffers, before.memories));
    assert_eq!(e.destroy(), Ok(()), "a PinnedBuffer count left behind");
}

/// A panic out of a later step of one import or driver allocation (`vkAllocateMemory` or
/// `vkBindBufferMemory` failing with device loss, whose log line panics): the buffer (and the
/// memory) made before it are released, through `register`, a one-piece `PinnedBuffer::new`
/// (the driver's block) and `alloc_buffer`. Before the `Fresh` guard, the cleanup ran only on an
/// `Err` and the buffer leaked.
#[test]
fn panic_after_the_buffer_was_made_leaks_nothing() {
    use vkhost::fault::{self, Point};
    let page = host::page_size();
    let m = Pages::new(4 * page);
    for point in [Point::AllocateMemory, Point::BindBufferMemory] {
        for what in ["register", "PinnedBuffer::new", "alloc_buffer"] {
            // A device per attempt: the injected loss marks it lost for good.
            let d = dev_with(opts());
            let before = d.live_objects();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                fault::inject(point, 0, vkhost::vk::Result::ERROR_DEVICE_LOST);
                panic_logger::arm(log::Level::Error, 0);
                match what {
                    // SAFETY: the mapping outlives the device; nothing stays registered.
                    "register" => drop(unsafe { host::register(&d, m.ptr, 4 * page) }),
                    "PinnedBuffer::new" => drop(PinnedBuffer::new(&d, 4 * page)),
                    _ => drop(d.alloc_buffer(4 * page)),
                }
            }));
            fault::disarm();
            panic_logger::disarm();
            assert!(r.is_err(), "{point:?} in {what}: expected the logger's panic");
            let after = d.live_objects();
            assert_eq!((after.buffers, after.memories), (before.buffers, before.memories), "{point:?} in {what}: objects leaked");
            assert_eq!(entries_of(&d), 0, "{point:?} in {what}: an entry left");
            // Lost (the injected error said so): it still tears down cleanly.
            let _ = d.destroy();
        }
    }
}

/// Small staging ring: a download of three chunks waits for the first to come free.
fn small_ring() -> OpenOptions {
    OpenOptions { staging_chunk: 4096, staging_slots: 2, ..opts() }
}

/// Runs `f` with the next semaphore wait failing with device loss and the logger armed to
/// panic on the error it logs; returns `f`'s outcome (`Err`: it panicked) and whether the
/// fault fired.
fn with_wait_panic<R>(f: impl FnOnce() -> R) -> (std::thread::Result<R>, bool) {
    with_wait_fault(vkhost::vk::Result::ERROR_DEVICE_LOST, log::Level::Error, f)
}

/// Runs `f` with the next semaphore wait failing with `code` and the logger armed to panic on
/// its next line at `level` or worse; `f`'s outcome and whether the fault fired.
fn with_wait_fault<R>(code: vkhost::vk::Result, level: log::Level, f: impl FnOnce() -> R) -> (std::thread::Result<R>, bool) {
    use vkhost::fault::{self, Point};
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fault::inject(Point::WaitSemaphores, 0, code);
        panic_logger::arm(level, 0);
        f()
    }));
    let fired = fault::disarm();
    panic_logger::disarm();
    (r, fired)
}

/// One logger panic early in the process, so a test's own panic unwinds fast: the first panic
/// of a process resolves its backtrace's symbols, long enough for lavapipe to finish a copy on
/// its own.
fn warm_up_panics() {
    let w = dev_with(opts());
    let b = w.alloc_buffer(4096).unwrap();
    let s = w.stream().unwrap();
    let mut v = vec![0u8; 4096];
    let _ = with_wait_panic(|| s.download(&b, 0, &mut v).map(drop));
    drop((s, b));
    let _ = w.destroy();
}

/// `n` bytes of 0xAB on the device, and `n` bytes of fresh host pages.
fn source_and_pages(d: &Checked, n: usize) -> (vkhost::DeviceBuffer, Pages) {
    let gpu = d.alloc_buffer(n).unwrap();
    gpu.write(0, &vec![0xAB; n]).unwrap();
    (gpu, Pages::new(n))
}

/// Fills `m` with 0x11, waits, and counts the bytes something wrote since.
fn written_after(m: &Pages) -> usize {
    // SAFETY: `m` is a live mapping of `m.len` bytes that nothing else references any more.
    let host = unsafe { std::slice::from_raw_parts_mut(m.ptr, m.len) };
    host.fill(0x11);
    std::thread::sleep(std::time::Duration::from_millis(500));
    host.iter().filter(|&&b| b != 0x11).count()
}

/// `Stream::download` of `n` bytes into a plain Vec; the first semaphore wait fails with device
/// loss and its log line panics (3 chunks: the wait for ring room, inside the enqueue; 1 chunk:
/// the wait at the end of `download`). After the unwind the Vec is the caller's again: dropping
/// the stream (which reaps what is queued) must not write into it.
fn download_unwinds_then_stream_drops(n: usize) {
    let d = dev_with(small_ring());
    let gpu = d.alloc_buffer(n).unwrap();
    gpu.write(0, &vec![0xAB; n]).unwrap();
    let stream = d.stream().unwrap();
    let mut dst = vec![0u8; n];
    let (r, fired) = with_wait_panic(|| stream.download(&gpu, 0, &mut dst).map(drop));
    eprintln!("download of {n}: {:?}, fault fired: {fired}", r.as_ref().map_err(|_| "panicked"));
    assert!(r.is_err(), "expected the logger's panic to unwind out of download");
    dst.fill(0x11);
    drop(stream);
    let changed = dst.iter().filter(|&&b| b != 0x11).count();
    drop(gpu);
    let _ = d.destroy();
    assert_eq!(changed, 0, "{changed} bytes of the caller's Vec written after download unwound");
}

#[test]
fn panic_in_a_download_waiting_for_ring_room_leaves_no_copy_out() {
    download_unwinds_then_stream_drops(3 * 4096);
}

#[test]
fn panic_in_a_downloads_final_wait_leaves_no_copy_out() {
    download_unwinds_then_stream_drops(4096);
}

/// A synchronous read straight into a registration; the wait for it fails with device loss and
/// the logger panics out of `DeviceBuffer::read` with the copy in flight. The registration's
/// drop must still return only once the device no longer writes the bytes.
#[test]
fn panic_in_a_sync_reads_wait_leaves_nothing_in_flight() {
    warm_up_panics();
    let d = dev_with(opts());
    let (gpu, m) = source_and_pages(&d, 64 << 20);
    // SAFETY: `m` is a fresh mapping, alive to the end of the test; this slice is the only
    // reference to it until the registration's drop.
    let mut reg = d.register(unsafe { std::slice::from_raw_parts_mut(m.ptr, m.len) }).unwrap();
    let (r, fired) = with_wait_panic(|| gpu.read(0, &mut reg));
    drop(reg);
    let changed = written_after(&m);
    eprintln!("read: {:?}, fault fired: {fired}", r.as_ref().map_err(|_| "panicked"));
    drop(gpu);
    let _ = d.destroy();
    assert!(r.is_err(), "expected the logger's panic to unwind out of read");
    assert_eq!(changed, 0, "{changed} bytes written by the device after the registration was dropped");
}

/// A registration dropped while a stream's async copy into it runs; the drop's wait for that
/// stream fails with device loss and the logger panics out of the drop. The unwind must still
/// come after the device stopped writing the pages: the caller may unmap them next.
#[test]
fn panic_in_a_registrations_wait_for_a_stream_leaves_nothing_in_flight() {
    warm_up_panics();
    let d = dev_with(opts());
    let (gpu, m) = source_and_pages(&d, 64 << 20);
    let stream = d.stream().unwrap();
    // SAFETY: as in `panic_in_a_sync_reads_wait_leaves_nothing_in_flight`.
    let reg = d.register(unsafe { std::slice::from_raw_parts_mut(m.ptr, m.len) }).unwrap();
    // SAFETY: the registered bytes stay mapped and are not otherwise accessed until the
    // registration's drop, which is the wait for this copy.
    unsafe { stream.copy_to_host_async(&gpu, 0, reg.as_ptr().cast_mut(), m.len) }.unwrap();
    stream.flush().unwrap();
    let (r, fired) = with_wait_panic(|| drop(reg));
    let changed = written_after(&m);
    eprintln!("drop: {:?}, fault fired: {fired}", r.as_ref().map_err(|_| "panicked"));
    drop(stream);
    drop(gpu);
    let _ = d.destroy();
    assert!(r.is_err(), "expected the logger's panic to unwind out of the registration's drop");
    assert_eq!(changed, 0, "{changed} bytes written by the device after the registration's drop unwound");
}

/// `Stream::download` into host memory whose front is registered (copied direct, 128 MiB)
/// and whose tail is pageable (three chunks of a two-chunk ring): the batch with the direct
/// copy is submitted, then the wait for ring room fails with device loss and the logger
/// panics out of it. After the unwind the caller's memory is theirs again: the device must no
/// longer write it. Before the fix the direct copy was left running (the enqueue's unwind only
/// dropped its copy-outs): the bytes landed after `download` unwound.
#[test]
fn panic_in_a_mixed_downloads_wait_for_ring_room_leaves_nothing_in_flight() {
    warm_up_panics();
    let d = dev_with(small_ring());
    let direct = 128 << 20;
    let n = direct + 3 * 4096;
    let (gpu, m) = source_and_pages(&d, n);
    // SAFETY: the front of a fresh mapping that outlives the registration (unregistered below).
    unsafe { host::register(&d, m.ptr as usize, direct) }.unwrap();
    let stream = d.stream().unwrap();
    // SAFETY: `m` is live for `n` bytes; this slice is the only reference to it until it dies
    // with the call.
    let dst = unsafe { std::slice::from_raw_parts_mut(m.ptr, m.len) };
    let (r, fired) = with_wait_panic(|| stream.download(&gpu, 0, dst).map(drop));
    let changed = written_after(&m);
    eprintln!("download: {:?}, fault fired: {fired}", r.as_ref().map_err(|_| "panicked"));
    drop(stream);
    let _ = host::unregister(&d, m.ptr as usize);
    drop(gpu);
    let _ = d.destroy();
    assert!(r.is_err(), "expected the logger's panic to unwind out of download");
    assert_eq!(changed, 0, "{changed} bytes of the caller's memory written by the device after download unwound");
}

/// `Device::destroy` whose teardown logs a warning the user's logger panics on (a stream's
/// last submission fails at shutdown): the panic comes out of `destroy` only after the whole
/// teardown ran. Before, it cut the teardown short: the other stream's copy into registered
/// pages went on after `destroy` returned and the registration's drop (168 of 256 MiB written
/// afterwards, found by an audit), and every object of the device stayed alive for good.
#[test]
fn a_panic_out_of_a_teardown_step_leaves_no_work_running_and_no_object() {
    use vkhost::fault::{self, Point};
    warm_up_panics();
    let d = dev_with(opts());
    let n = 256 << 20;
    let (gpu, m) = source_and_pages(&d, n);
    // Created first, torn down first: its shutdown's submission fails and logs.
    let failing = d.stream().unwrap();
    let copying = d.stream().unwrap();
    // SAFETY: as in `panic_in_a_sync_reads_wait_leaves_nothing_in_flight`.
    let reg = d.register(unsafe { std::slice::from_raw_parts_mut(m.ptr, m.len) }).unwrap();
    // SAFETY: the registered bytes stay mapped and are not otherwise accessed until the
    // teardown, which waits for this copy.
    unsafe { copying.copy_to_host_async(&gpu, 0, reg.as_ptr().cast_mut(), n) }.unwrap();
    copying.flush().unwrap();
    failing.fill_async(&gpu, 0, 4096, 9).unwrap(); // recorded, not submitted
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fault::inject(Point::QueueSubmit, 0, vkhost::vk::Result::ERROR_OUT_OF_HOST_MEMORY);
        panic_logger::arm(log::Level::Warn, 0);
        d.destroy()
    }));
    let fired = fault::disarm();
    panic_logger::disarm();
    drop(reg);
    let changed = written_after(&m);
    eprintln!("destroy: {:?}, fault fired: {fired}", r.as_ref().map_err(|_| "panicked"));
    assert!(r.is_err() && fired, "expected the logger's panic to come out of destroy");
    assert_eq!(changed, 0, "{changed} bytes written by the device after destroy and the registration's drop");
    assert!(d.is_destroyed());
    drop((failing, copying, gpu));
    assert_eq!(d.live_objects(), vkhost::LiveObjects::default(), "objects left by the teardown");
    assert_eq!(d.destroy(), Ok(()));
}

/// Runs `f` with the next semaphore wait failing with OUT_OF_HOST_MEMORY (which logs nothing
/// itself) and the logger armed to panic on a warning; `f`'s outcome and whether it fired.
fn with_warn_panic<R>(f: impl FnOnce() -> R) -> (std::thread::Result<R>, bool) {
    with_wait_fault(vkhost::vk::Result::ERROR_OUT_OF_HOST_MEMORY, log::Level::Warn, f)
}

/// A registration's drop whose wait for a stream's copy fails and warns: the warning (panicked
/// on) came before the fallback wait for the queue, so the unwind handed the pages back with
/// the copy still writing them (142 MB written afterwards; found by an audit).
#[test]
fn warn_panic_in_a_registrations_drop_leaves_nothing_in_flight() {
    warm_up_panics();
    let d = dev_with(opts());
    let n = 256 << 20;
    let (gpu, m) = source_and_pages(&d, n);
    let stream = d.stream().unwrap();
    // SAFETY: as in `panic_in_a_sync_reads_wait_leaves_nothing_in_flight`.
    let reg = d.register(unsafe { std::slice::from_raw_parts_mut(m.ptr, m.len) }).unwrap();
    // SAFETY: the registered bytes stay mapped and untouched until the registration's drop.
    unsafe { stream.copy_to_host_async(&gpu, 0, reg.as_ptr().cast_mut(), n) }.unwrap();
    stream.flush().unwrap();
    let (r, fired) = with_warn_panic(|| drop(reg));
    let changed = written_after(&m);
    drop((stream, gpu));
    let _ = d.destroy();
    assert!(r.is_err() && fired, "expected the logger's panic to unwind out of the drop");
    assert_eq!(changed, 0, "{changed} bytes written by the device after the registration's drop unwound");
}

/// A download into memory partly registered (copied direct) and partly pageable (a copy-out
/// queued): its failed wait cancelled the copy-out and warned before anyone waited for the
/// queue, so the unwind handed the slice back with the direct copy still writing it (180 MB;
/// found by an audit).
#[test]
fn warn_panic_in_a_downloads_wait_leaves_nothing_in_flight() {
    warm_up_panics();
    let d = dev_with(small_ring());
    let n = 256 << 20;
    let total = n + 8192;
    let gpu = d.alloc_buffer(total).unwrap();
    gpu.write(0, &vec![0xAB; total]).unwrap();
    let mut m = Pages::new(total);
    // SAFETY: `m` outlives the registration (unregistered below).
    unsafe { host::register(&d, m.ptr, n) }.unwrap();
    let stream = d.stream().unwrap();
    let dst = m.slice();
    let (r, fired) = with_warn_panic(|| stream.download(&gpu, 0, dst).map(drop));
    // SAFETY: the download returned (unwound); nothing else references the first n bytes.
    let host_bytes = unsafe { std::slice::from_raw_parts_mut(m.ptr, n) };
    host_bytes.fill(0x11);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let changed = host_bytes.iter().filter(|&&b| b != 0x11).count();
    host::unregister(&d, m.ptr).unwrap();
    drop((stream, gpu));
    let _ = d.destroy();
    assert!(r.is_err() && fired, "expected the logger's panic to unwind out of download");
    assert_eq!(changed, 0, "{changed} bytes written by the device after download unwound");
}

/// A copy context's first use whose command-buffer allocation, or timeline semaphore, fails
/// with device loss and logs an error the user's logger panics on: the context's command pool
/// (made before) must go too. It leaked (one pool per failed context, counted until the end;
/// found by an audit).
#[test]
fn a_panic_while_making_a_copy_context_leaks_no_pool() {
    use vkhost::fault::{self, Point};
    for point in [Point::AllocateCommandBuffers, Point::CreateSemaphore] {
        let d = dev_with(opts());
        let gpu = d.alloc_buffer(4096).unwrap();
        // Fresh threads until one's first synchronous read takes a context nobody made yet (a
        // thread's hint picks its context; the open-time probe made one of them).
        let mut outcome = None;
        for _ in 0..16 {
            let (panicked, fired) = std::thread::scope(|t| {
                t.spawn(|| {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        fault::inject(point, 0, vkhost::vk::Result::ERROR_DEVICE_LOST);
                        panic_logger::arm(log::Level::Error, 0);
                        // A read: never CPU loads through a host-visible mapping.
                        gpu.read(0, &mut [0u8; 4096])
                    }));
                    let fired = fault::disarm();
                    panic_logger::disarm();
                    (r.is_err(), fired)
                })
                .join()
                .unwrap()
            });
            if fired {
                outcome = Some(panicked);
                break;
            }
        }
        drop(gpu);
        let _ = d.destroy();
        assert_eq!(outcome, Some(true), "{point:?}: expected a new context's failure to panic in the logger");
        assert_eq!(d.live_objects(), vkhost::LiveObjects::default(), "{point:?}: objects left after destroy");
    }
}

/// A stream batch whose submission fails with device loss, and the logger panics on the error:
/// the batch must still be recorded as lost (its work never ran: a later synchronize must not
/// report success) and its descriptor pools must go back to the stream. Before, the unwind
/// skipped both: `synchronize` returned `Ok` and the pools leaked (found by an audit).
#[test]
fn a_panic_as_a_batch_fails_to_submit_loses_it_and_leaks_no_descriptor_pool() {
    use vkhost::fault::{self, Point};
    use vkhost::kernel::Binding;
    let d = dev_with(OpenOptions { push_descriptors: false, ..opts() });
    let gpu = d.alloc_buffer(64 << 10).unwrap();
    let s = d.stream_on(vkhost::QueueKind::Compute).unwrap();
    s.fill_u32(Binding::Device(&gpu, 0, 4096), 1).unwrap();
    s.synchronize().unwrap();
    s.fill_u32(Binding::Device(&gpu, 0, 4096), 2).unwrap(); // recorded, not submitted
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fault::inject(Point::QueueSubmit, 0, vkhost::vk::Result::ERROR_DEVICE_LOST);
        panic_logger::arm(log::Level::Error, 0);
        s.flush()
    }));
    let fired = fault::disarm();
    panic_logger::disarm();
    let after = s.synchronize();
    drop(s);
    drop(gpu);
    let _ = d.destroy();
    assert!(r.is_err() && fired, "expected the logger's panic to unwind out of flush");
    assert!(after.is_err(), "synchronize reported success for a batch that never ran: {after:?}");
    assert_eq!(d.live_objects(), vkhost::LiveObjects::default(), "objects left after destroy");
}

/// A `PinnedBuffer`'s drop waits for the copies that name its block; a user's logger that
/// panics on that wait's failure unwound out of the drop before the device's count of live
/// `PinnedBuffer`s went down, and every later `destroy` answered `Busy` (a review's test).
#[test]
fn a_pinned_buffers_drop_unwinding_out_of_its_wait_leaves_destroy_free() {
    let d = dev_with(opts());
    let g = d.alloc_buffer(4096).unwrap();
    let s = d.stream().unwrap();
    let pb = PinnedBuffer::new(&d, 4096).unwrap();
    // SAFETY: the block is vkhost's and the batch owns it until the copy is reaped, whether or
    // not the drop below waits (it does).
    unsafe { s.copy_to_device_async(pb.as_ptr(), 4096, &g, 0) }.unwrap();
    let (r, fired) = with_warn_panic(|| drop(pb));
    eprintln!("drop: {}, fault fired: {fired}", if r.is_err() { "panicked (user logger)" } else { "returned" });
    assert!(r.is_err() && fired, "expected the logger's panic out of the drop's failed wait");
    let _ = s.synchronize();
    drop((s, g));
    assert_eq!(d.destroy(), Ok(()), "the PinnedBuffer is gone");
}

/// An unregister waits for a copy recorded into the caller's command buffer (a hooked
/// `RecordedCopy`), saying every 10 s that it still waits. A user's logger that panicked on
/// that line unwound out of the wait with the copy still to run (the registration's bytes
/// handed back) and left the ticket counted as in use for good: never reported done, and the
/// device's teardown waited for it forever (a review's test). Now the wait goes on and the
/// panic comes after it. About 10 s (20 s when the validation layer stalls the woken wait: see
/// Device::validation_layer_faults; the 20 s limit after the signal covers that).
#[test]
fn a_logger_panic_in_a_recorded_copys_wait_comes_after_the_wait() {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};
    use vkhost::ash::vk;
    use vkhost::host::Direction;
    let dev = dev_with(opts());
    let raw = dev.raw().unwrap();
    let d = raw.device.clone();
    // SAFETY: valid create infos for this device; destroyed at the end.
    let (pool, sem) = unsafe {
        let pool = d.create_command_pool(&vk::CommandPoolCreateInfo::default().queue_family_index(raw.compute_family), None).unwrap();
        let mut kind = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
        let sem = d.create_semaphore(&vk::SemaphoreCreateInfo::default().push_next(&mut kind), None).unwrap();
        (pool, sem)
    };
    let gpu = dev.alloc_buffer(4096).unwrap();
    let m = Pages::new(4096);
    // SAFETY: the mapping outlives the registration.
    unsafe { host::register(&dev, m.ptr, 4096) }.unwrap();
    // SAFETY: a recording command buffer of ours (never submitted: the host signals the hook's
    // value instead); the range is registered; the hook is a timeline semaphore of this device.
    unsafe {
        let info = vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1);
        let cmd = d.allocate_command_buffers(&info).unwrap()[0];
        d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).unwrap();
        let mut t = host::record_copy(&dev, cmd, Direction::HostToDevice, m.ptr, 4096, gpu.raw(), 0).unwrap();
        t.completes_at(sem, 1).unwrap();
    }
    let (tx, rx) = mpsc::channel();
    let (d2, p) = (dev.0.clone(), m.ptr as usize);
    let t0 = Instant::now();
    std::thread::spawn(move || {
        panic_logger::arm(log::Level::Warn, 0);
        let r = std::panic::catch_unwind(|| host::unregister(&d2, p));
        panic_logger::disarm();
        let _ = tx.send(r.is_err());
    });
    // Past the first 10 s step: the logger panicked on the line; the unregister must still wait.
    let early = rx.recv_timeout(Duration::from_secs(13)).ok();
    eprintln!("unregister after {:.1?} (the hook not yet signalled): {early:?}", t0.elapsed());
    // The caller's work completes now.
    // SAFETY: a timeline semaphore of this device, value increasing.
    unsafe { d.signal_semaphore(&vk::SemaphoreSignalInfo::default().semaphore(sem).value(1)) }.unwrap();
    let late = rx.recv_timeout(Duration::from_secs(20));
    eprintln!("unregister after the signal: panicked = {late:?}");
    let pending = host::reap_recorded(&dev);
    drop(gpu);
    if pending == 0 {
        // SAFETY: vkhost observed the value (nothing pending); the objects are ours, and go
        // before the VkDevice that vkhost's destroy destroys.
        unsafe {
            d.destroy_semaphore(sem, None);
            d.destroy_command_pool(pool, None);
        }
    }
    let (tx, rx) = mpsc::channel();
    let d3 = dev.0.clone();
    std::thread::spawn(move || {
        let _ = tx.send(d3.destroy());
    });
    let destroyed = rx.recv_timeout(Duration::from_secs(10));
    eprintln!("destroy: {destroyed:?}; tickets pending: {pending}");
    if destroyed.is_err() {
        std::mem::forget(dev); // its teardown hangs: the drop would destroy it again
    }
    assert!(early.is_none(), "unregister returned (panicked) before the recorded copy could run");
    assert_eq!(late, Ok(true), "the logger's panic comes out of unregister after the wait");
    assert_eq!(pending, 0, "the signalled ticket is observed done");
    assert_eq!(destroyed, Ok(Ok(())), "destroy");
    drop(m);
}

/// `Device::from_raw` with `Ownership::Owned` hands the caller's VkDevice and VkInstance to
/// vkhost only if it returns the device. A user's logger that panicked on a line logged while
/// the device opened (here the import probe's warning that it could not finish) unwound out of
/// the call after vkhost had taken them: the half-made device's drop tore down with
/// `owns_device` set and destroyed the caller's device and instance, which the caller, seeing
/// no device come back (the C API: a status other than `VKHOST_OK`, whose contract says the
/// handles stay the caller's), destroys again (a review's test). The handles wrapped here are
/// those of a vkhost device of the test, so its validation layer sees a destroy of its device
/// with children alive, and the device must work on afterwards.
#[test]
fn a_panic_while_from_raw_opens_an_owned_device_leaves_the_callers_handles() {
    use vkhost::fault::{Point, disarm, inject};
    let d = dev_with(opts());
    if d.host_registration().is_err() {
        eprintln!("SKIPPED: no host registration, no import probe at open");
        return;
    }
    let raw = d.raw().unwrap();
    let wrapped = std::panic::catch_unwind(|| {
        // The probe's import fails as if the host were out of memory; the probe says it could
        // not finish (a warning), and the logger panics on the first warning or error.
        inject(Point::GetMemoryHostPointerProperties, 0, vkhost::vk::Result::ERROR_OUT_OF_HOST_MEMORY);
        panic_logger::arm(log::Level::Warn, 0);
        // SAFETY: the handles are `d`'s, valid while `d` lives; nothing submits to its queues
        // during this call. Were the device returned it would own `d`'s handles: it is leaked
        // below rather than dropped.
        unsafe { Device::from_raw(raw, vkhost::Ownership::Owned, true, &OpenOptions { validation: false, ..opts() }) }
    });
    disarm();
    panic_logger::disarm();
    let errors = d.validation_errors();
    let last = d.last_validation_error();
    let ok = wrapped.is_err() && errors == 0;
    if !ok {
        // `d`'s device and instance may be gone (or owned by the wrapper): touch them no more.
        if let Ok(r) = wrapped {
            std::mem::forget(r);
        }
        let ev = d.0.clone();
        std::mem::forget(d);
        std::mem::forget(ev);
        panic!("after the unwind: {errors} validation errors on the caller's device, last {last:?}");
    }
    // The caller's device still works.
    let b = d.alloc_buffer(4096).unwrap();
    b.write(0, &[7; 4096]).unwrap();
    let mut out = vec![0; 4096];
    b.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&x| x == 7));
}

/// `Device::measure_copy_queues` whose first wait fails with device loss, and the user's
/// logger panics on the error: the two probe buffers it allocated (a pinned block and a device
/// buffer, released only after the measurement's closure returned) must still be released.
/// Before, the unwind skipped the release: both buffers and their memories outlived the device
/// (counted after `destroy`, and destroyed by nobody).
#[test]
fn a_panic_while_measuring_the_copy_queues_leaks_no_probe_buffer() {
    warm_up_panics();
    let d = dev_with(opts());
    let (r, fired) = with_wait_panic(|| d.measure_copy_queues().map(drop));
    let _ = d.destroy();
    assert!(fired, "the wait's fault did not fire");
    assert!(r.is_err(), "expected the logger's panic to unwind out of measure_copy_queues");
    assert_eq!(d.live_objects(), vkhost::LiveObjects::default(), "objects left after destroy");
}

/// `Stream::checksum_into` with its result in pinned host memory queues a zero fill of the
/// result, then launches the checksum: the checksum's pipeline fails with device loss and the
/// user's logger panics on that line. After the unwind the result's bytes are the caller's
/// again: nothing may write them later. The zero fill is left unsettled in the stream's open
/// batch by the unwind; the device is marked lost, so the stream's drop submits nothing (a
/// review suspected it submitted the fill there: it does not, and this test holds that). Only
/// a loss logs at `Error` here: an out-of-memory pipeline is an error return, settled.
#[test]
fn panic_in_a_checksums_launch_leaves_no_write_of_its_result_queued() {
    use vkhost::fault::{self, Point};
    use vkhost::{Binding, QueueKind};
    warm_up_panics();
    let (code, level) = (vkhost::vk::Result::ERROR_DEVICE_LOST, log::Level::Error);
    let d = dev_with(opts());
    let src = d.alloc_buffer(1 << 16).unwrap();
    src.write(0, &vec![7u8; 1 << 16]).unwrap();
    let mut out = PinnedBuffer::new(&d, 4096).unwrap();
    let stream = d.stream_on(QueueKind::Compute).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // The call's pipelines on this thread: the zero fill's (call 0), then the checksum's.
        fault::inject(Point::CreateComputePipelines, 1, code);
        panic_logger::arm(level, 0);
        stream.checksum_into(Binding::Device(&src, 0, 1 << 16), Binding::HostMut(&mut out[..8])).map(drop)
    }));
    let fired = fault::disarm();
    panic_logger::disarm();
    eprintln!("{code:?}: checksum_into: {:?}, fault fired: {fired}", r.as_ref().map_err(|_| "panicked"));
    assert!(fired && r.is_err(), "{code:?}: expected the logger's panic to unwind out of checksum_into");
    out[..8].fill(0x11);
    drop(stream);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let changed = out[..8].iter().filter(|&&b| b != 0x11).count();
    drop((out, src));
    let _ = d.destroy();
    assert_eq!(changed, 0, "{code:?}: {changed} bytes of the caller's result written after checksum_into unwound");
}
