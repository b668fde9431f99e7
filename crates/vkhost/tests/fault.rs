//! Fault injection (cargo feature `fault-injection`): make the Nth call to each guarded Vulkan
//! entry point fail with OUT_OF_HOST_MEMORY, OUT_OF_DEVICE_MEMORY or DEVICE_LOST, for every N
//! that an operation reaches, and check after each fault:
//! - a typed error (the code's own variant);
//! - no registry entry left behind;
//! - the next operation works and the live-object counters are back to baseline (OOM), or
//!   every operation returns `DeviceLost` until destroy, with late unregister/free still `Ok`
//!   and a validation-clean destroy that leaves no object (DEVICE_LOST).

mod common;
use common::ops::*;
use common::*;
use vkhost::fault::{Point, disarm, inject};
use vkhost::host::{self, entries_of};
use vkhost::{Device, Error, OpenOptions, PinnedBuffer, vk};

const CODES: [(vk::Result, Error); 3] = [
    (vk::Result::ERROR_OUT_OF_HOST_MEMORY, Error::OutOfHostMemory),
    (vk::Result::ERROR_OUT_OF_DEVICE_MEMORY, Error::OutOfDeviceMemory),
    (vk::Result::ERROR_DEVICE_LOST, Error::DeviceLost),
];

impl Env {
    /// Unregisters (late, after a loss), frees the pinned block and the buffer, destroys the
    /// device, and checks that nothing is left and validation saw no error.
    fn finish(self, ctx: &str) {
        let Env { dev, mem, pinned, buf, reg_base, scratch, keep, extra_reg } = self;
        drop(keep); // streams a failed op left
        if let Some(p) = extra_reg {
            let _ = host::unregister(&dev, p); // an op_register whose unregister failed
        }
        assert_eq!(host::unregister(&dev, reg_base), Ok(()), "{ctx}: late unregister");
        drop((pinned, buf));
        dev.destroy().unwrap();
        assert_eq!(dev.live_objects(), vkhost::LiveObjects::default(), "{ctx}: objects left at destroy");
        assert_eq!(dev.validation_errors(), 0, "{ctx}: validation errors: {:?}", dev.last_validation_error());
        drop((mem, scratch));
    }
}

const OPS: [(&str, Op); 7] = [
    ("register", op_register),
    ("alloc_pinned", op_alloc_pinned),
    ("alloc_buffer", op_alloc_buffer),
    ("staged copies", op_staged),
    ("direct copies", op_direct),
    ("mixed copies", op_mixed),
    ("stream work", op_stream),
];

/// Sweeps N over every call of `point` that `op` makes, for each code.
fn sweep(name: &str, op: Op) {
    sweep_with(name, op, &fopts());
}

/// [`sweep`] on devices opened with `o`; returns how many faults fired at each point.
fn sweep_with(name: &str, op: Op, o: &OpenOptions) -> std::collections::HashMap<Point, usize> {
    init_log();
    let mut fired_total = 0;
    let mut at = std::collections::HashMap::new();
    for point in Point::ALL {
        for (code, want) in CODES.iter() {
            let mut env = Env::with(o);
            op(&mut env).expect("warm-up"); // lazily created contexts and staging now exist
            let base_entries = entries_of(&env.dev);
            let base_objects = env.dev.live_objects();
            let mut nth = 0;
            loop {
                inject(point, nth, *code);
                let r = op(&mut env);
                let fired = disarm();
                if !fired {
                    r.unwrap_or_else(|e| panic!("{name}: no fault armed at {point:?}#{nth}, yet {e}"));
                    break;
                }
                fired_total += 1;
                *at.entry(point).or_insert(0) += 1;
                let ctx = format!("{name}: {} #{nth} -> {code:?}", point.name());
                let err = r.expect_err(&ctx);
                assert_eq!(&err, want, "{ctx}: untyped or misclassified error");
                assert_eq!(entries_of(&env.dev), base_entries, "{ctx}: registry entry left behind");
                if *code == vk::Result::ERROR_DEVICE_LOST {
                    // Every operation answers DeviceLost until destroy...
                    assert_eq!(op(&mut env).unwrap_err(), Error::DeviceLost, "{ctx}: op after loss");
                    assert_eq!(env.dev.alloc_buffer(16).unwrap_err(), Error::DeviceLost, "{ctx}");
                    assert_eq!(env.buf.write(0, &[1]).unwrap_err(), Error::DeviceLost, "{ctx}");
                    // ...late unregister and free still work, and destroy is clean.
                    env.finish(&ctx);
                    env = Env::with(o);
                    op(&mut env).expect("warm-up");
                } else {
                    op(&mut env).unwrap_or_else(|e| panic!("{ctx}: next operation failed: {e}"));
                    assert_eq!(env.dev.live_objects(), base_objects, "{ctx}: live objects not back to baseline");
                    assert_eq!(entries_of(&env.dev), base_entries, "{ctx}");
                }
                nth += 1;
            }
            env.finish(name);
        }
    }
    assert!(fired_total > 0, "{name}: the sweep never injected a fault");
    eprintln!("{name}: {fired_total} faults injected and survived");
    at
}

#[test]
fn fault_register() {
    sweep(OPS[0].0, OPS[0].1);
}
#[test]
fn fault_alloc_pinned() {
    sweep(OPS[1].0, OPS[1].1);
}
#[test]
fn fault_alloc_buffer() {
    sweep(OPS[2].0, OPS[2].1);
}
#[test]
fn fault_staged_copies() {
    sweep(OPS[3].0, OPS[3].1);
}
#[test]
fn fault_direct_copies() {
    sweep(OPS[4].0, OPS[4].1);
}
#[test]
fn fault_mixed_copies() {
    sweep(OPS[5].0, OPS[5].1);
}
#[test]
fn fault_stream_work() {
    sweep(OPS[6].0, OPS[6].1);
}
/// `Device::copy_floor` both ways: a failed allocation, submission or wait returns its typed
/// error with nothing left behind (its buffers released, whatever it submitted waited for:
/// `finish` destroys the device validation-clean), and the next one works.
#[test]
fn fault_copy_floor() {
    let at = sweep_with("copy_floor", op_floor, &fopts());
    for p in [Point::AllocateMemory, Point::QueueSubmit, Point::WaitSemaphores] {
        assert!(at.get(&p).is_some_and(|&n| n > 0), "copy_floor: no fault at {p:?}: {at:?}");
    }
}

/// The points a kernel's pipeline goes through, each of which the launch sweeps must reach.
const PIPELINE_POINTS: [Point; 4] =
    [Point::CreateDescriptorSetLayout, Point::CreatePipelineLayout, Point::CreateShaderModule, Point::CreateComputePipelines];

#[test]
fn fault_launches_with_pushed_descriptors() {
    let at = sweep_with("launches (push descriptors)", op_launch, &launch_opts(true));
    for p in PIPELINE_POINTS {
        assert!(at.contains_key(&p), "no fault reached {}: {at:?}", p.name());
    }
}
#[test]
fn fault_launches_with_descriptor_sets() {
    let at = sweep_with("launches (descriptor sets)", op_launch, &launch_opts(false));
    for p in PIPELINE_POINTS.into_iter().chain([Point::CreateDescriptorPool, Point::AllocateDescriptorSets]) {
        assert!(at.contains_key(&p), "no fault reached {}: {at:?}", p.name());
    }
}

/// A probe that fails at open disables registration with its reason; copies stage.
#[test]
fn failing_probe_disables_registration() {
    init_log();
    inject(Point::GetMemoryHostPointerProperties, 0, vk::Result::ERROR_INVALID_EXTERNAL_HANDLE);
    let d = Device::open_default_with(&opts()).unwrap();
    assert!(disarm(), "the probe never queried the host pointer");
    let why = d.host_registration().unwrap_err();
    assert!(why.contains("import probe failed"), "{why}");
    assert_eq!(d.import_probe().map(|r| r.is_err()), Some(true));
    let mut v = vec![1u8; 8192];
    // SAFETY: refused before the memory is touched.
    let e = unsafe { host::register(&d, v.as_mut_ptr(), v.len()) }.unwrap_err();
    assert!(matches!(e, Error::Unsupported { ref reason } if reason.contains("probe")), "{e:?}");
    let buf = d.alloc_buffer(8192).unwrap();
    buf.write(0, &v).unwrap();
    assert_eq!(host::device_stats(&d).staged_bytes, 8192);
    assert_eq!(entries_of(&d), 0);
    drop(buf);
    d.destroy().unwrap();
    assert_eq!(d.validation_errors(), 0);
}

/// A probe that runs out of memory at open proves nothing about imports: registration stays
/// available and the next `register` runs the probe again (one such failure turned
/// registration off for the device's whole life, as "import probe failed"; found by an audit).
#[test]
fn a_probe_out_of_memory_at_open_runs_again_at_the_next_registration() {
    init_log();
    for point in [Point::CreateCommandPool, Point::GetMemoryHostPointerProperties, Point::AllocateMemory] {
        inject(point, 0, vk::Result::ERROR_OUT_OF_HOST_MEMORY);
        let d = Device::open_default_with(&opts()).unwrap();
        assert!(disarm(), "{point:?}: the probe never reached it");
        assert_eq!(d.import_probe(), None, "{point:?}: no verdict yet");
        assert!(d.host_registration().is_ok(), "{point:?}: {:?}", d.host_registration());
        let mut v = vec![1u8; 8192];
        // SAFETY: `v` outlives the registration (unregistered below).
        unsafe { host::register(&d, v.as_mut_ptr(), v.len()) }.unwrap();
        assert!(matches!(d.import_probe(), Some(Ok(_))), "{point:?}: the registration ran the probe: {:?}", d.import_probe());
        let buf = d.alloc_buffer(8192).unwrap();
        buf.write(0, &v).unwrap();
        assert_eq!(host::device_stats(&d).direct_bytes, 8192, "{point:?}: the write went direct");
        host::unregister(&d, v.as_mut_ptr()).unwrap();
        drop(buf);
        d.destroy().unwrap();
        assert_eq!(d.validation_errors(), 0);
    }
}

/// A device lost while `open` probes it is no open device: `open` answers `DeviceLost` (it
/// answered `Ok` with a device whose every call then failed, so the caller could not fall back
/// at open; found by an audit), and a later open works.
#[test]
fn open_whose_probe_loses_the_device_fails() {
    init_log();
    inject(Point::QueueSubmit, 0, vk::Result::ERROR_DEVICE_LOST);
    let r = Device::open_default_with(&opts());
    assert!(disarm(), "the probe never submitted");
    assert_eq!(r.map(drop), Err(Error::DeviceLost));
    let d = Device::open_default_with(&opts()).unwrap();
    let buf = d.alloc_buffer(4096).unwrap();
    buf.write(0, &[7; 4096]).unwrap();
    drop(buf);
    d.destroy().unwrap();
    assert_eq!(d.validation_errors(), 0);
}

/// A pageable download that fails partway (here: the wait for a staging-ring chunk) returns an
/// error, so the caller may free or reuse the destination: the library must never write it
/// afterwards, even though earlier chunks of that download were already submitted. (Found by
/// the stream sweep under load as heap corruption: the stream's later reap wrote into a freed
/// Vec.)
#[test]
fn failed_download_never_writes_its_destination_later() {
    init_log();
    let d = Device::open_default_with(&fopts()).unwrap();
    let buf = d.alloc_buffer(1 << 20).unwrap();
    buf.write(0, &pattern(1 << 20, 4)).unwrap();
    let s = d.stream().unwrap();
    let mut out = vec![0u8; 600 << 10]; // 3 ring chunks of 256 KiB: the third waits for the first
    let mut hit = false;
    for nth in 0..4 {
        out.fill(0xEE);
        inject(Point::WaitSemaphores, nth, vk::Result::ERROR_OUT_OF_HOST_MEMORY);
        // SAFETY: `out` outlives the stream work; after an error it must not be written at all.
        let r = unsafe { s.copy_to_host_async(&buf, 0, out.as_mut_ptr(), out.len()) };
        let fired = disarm();
        if fired && r.is_err() {
            hit = true;
            out.fill(0x5A); // the caller reuses the memory after the error
            s.synchronize().ok(); // runs whatever is queued
            assert!(out.iter().all(|&b| b == 0x5A), "the failed download wrote its destination later (nth {nth})");
        } else {
            s.synchronize().unwrap();
        }
    }
    assert!(hit, "no wait inside the download was made to fail");
    drop(s);
    drop(buf);
    d.destroy().unwrap();
    assert_eq!(d.validation_errors(), 0);
}

/// Device loss with async work outstanding (issue case 4): once another call has lost the
/// device, `Event::wait` answers `DeviceLost` only after cancelling the copy-outs it guards, so
/// memory the caller reuses after that error is never written, not by the guard's drop nor by
/// the stream's. (Before: wait returned first, and the stream's drop wrote the reused memory.)
#[test]
fn device_loss_cancels_copy_outs_before_wait_returns() {
    init_log();
    let d = Device::open_default_with(&fopts()).unwrap();
    let n = 600 << 10;
    let buf = d.alloc_buffer(n).unwrap();
    buf.write(0, &pattern(n, 4)).unwrap();
    let s = d.stream().unwrap();
    let mut out = vec![0xEEu8; n];
    // SAFETY: `out` outlives the stream; after the error below it must never be written.
    unsafe { s.copy_to_host_async(&buf, 0, out.as_mut_ptr(), n) }.unwrap();
    let ev = s.record().unwrap();
    // Another call loses the device (synchronous copies wait on a timeline semaphore where the
    // device has them, as lavapipe does; on a fence otherwise).
    let wait = if d.info().timeline_semaphore { Point::WaitSemaphores } else { Point::WaitForFences };
    inject(wait, 0, vk::Result::ERROR_DEVICE_LOST);
    let r = buf.write(0, &[1u8; 64]);
    assert!(disarm(), "the injected loss did not fire");
    assert_eq!(r, Err(Error::DeviceLost));
    assert_eq!(ev.wait(), Err(Error::DeviceLost));
    out.fill(0x5A); // the caller reuses the memory after the error
    drop(ev);
    drop(s);
    assert!(out.iter().all(|&b| b == 0x5A), "a copy-out ran after wait reported the loss");
    drop(buf);
    d.destroy().unwrap();
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// A device (`fopts`), a buffer of `n` bytes holding `pattern(n, seed)`, a stream, and a pageable
/// d2h of the buffer into `out` (0xEE before) enqueued on it: its copy-out waits for the reap.
fn pending_copy_out(n: usize, seed: u8) -> (Device, vkhost::DeviceBuffer, vkhost::Stream, Vec<u8>) {
    init_log();
    let d = Device::open_default_with(&fopts()).unwrap();
    let buf = d.alloc_buffer(n).unwrap();
    buf.write(0, &pattern(n, seed)).unwrap();
    let s = d.stream().unwrap();
    let mut out = vec![0xEEu8; n];
    // SAFETY: `out`'s heap bytes stay where they are when the Vec moves to the caller, who keeps
    // them valid until the stream's work is done or cancelled, and checks them only after.
    unsafe { s.copy_to_host_async(&buf, 0, out.as_mut_ptr(), n) }.unwrap();
    (d, buf, s, out)
}

/// `synchronize` after another call lost the device returns `DeviceLost` only after cancelling
/// the stream's queued copy-outs: the stream's drop (or a later reap) never writes memory the
/// caller reused after that error. Before: it returned at once and the drop wrote it.
#[test]
fn synchronize_after_a_device_loss_cancels_the_copy_outs() {
    let (d, buf, s, mut out) = pending_copy_out(600 << 10, 4);
    let other = d.alloc_buffer(4096).unwrap(); // no stream work names it
    s.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200)); // the device finishes before the loss
    let wait = if d.info().timeline_semaphore { Point::WaitSemaphores } else { Point::WaitForFences };
    inject(wait, 0, vk::Result::ERROR_DEVICE_LOST);
    let r = other.write(0, &[1u8; 64]);
    assert!(disarm(), "the injected loss did not fire");
    assert_eq!(r, Err(Error::DeviceLost));
    assert_eq!(s.synchronize(), Err(Error::DeviceLost));
    out.fill(0x5A); // the caller reuses the memory after the error
    drop(s);
    let hit = out.iter().filter(|&&b| b != 0x5A).count();
    drop((buf, other));
    d.destroy().unwrap();
    assert_eq!(hit, 0, "{hit} bytes written by a copy-out after synchronize returned DeviceLost");
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// `synchronize` whose own submission fails still waits for the batches submitted before it
/// and completes their copy-outs before it returns the error: nothing this stream queued
/// writes the caller's memory afterwards. Before: it returned at once and the next
/// `synchronize` wrote the reused memory.
#[test]
fn synchronize_whose_submission_fails_finishes_the_earlier_copy_outs_first() {
    let n = 64 << 10;
    let (d, buf, s, mut out) = pending_copy_out(n, 4);
    let other = d.alloc_buffer(4096).unwrap();
    s.flush().unwrap(); // batch 1: the copy, submitted; its copy-out queued
    s.fill_async(&other, 0, 4096, 0).unwrap(); // batch 2, open
    inject(Point::QueueSubmit, 0, vk::Result::ERROR_OUT_OF_HOST_MEMORY);
    let r = s.synchronize();
    assert!(disarm(), "the submission was not reached");
    assert_eq!(r, Err(Error::OutOfHostMemory));
    assert!(out == pattern(n, 4), "batch 1 ran: its copy-out is done when synchronize returns");
    out.fill(0x5A); // the caller reuses the memory after the error
    s.synchronize().unwrap();
    let hit = out.iter().filter(|&&b| b != 0x5A).count();
    drop(s);
    drop((buf, other));
    d.destroy().unwrap();
    assert_eq!(hit, 0, "{hit} bytes written by a copy-out after synchronize returned an error");
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// A wait that fails inside the stream's drop (here out of host memory, no loss) drops the
/// queued copy-outs; an event recorded after the copy then answers that error, not `Ok` for a
/// destination that was never written. Before: `Ok`.
#[test]
fn an_event_after_a_drop_that_cancelled_its_copy_outs_is_an_error() {
    let n = 64 << 10;
    let (d, buf, s, out) = pending_copy_out(n, 4);
    let ev = s.record().unwrap();
    inject(Point::WaitSemaphores, 0, vk::Result::ERROR_OUT_OF_HOST_MEMORY);
    drop(s);
    assert!(disarm(), "the stream's drop did not wait");
    let r = ev.wait();
    let landed = out == pattern(n, 4);
    assert!(!landed, "the copy-out was cancelled: nothing writes `out`");
    assert_eq!(r, Err(Error::OutOfHostMemory), "the event reports the cancelled copy-out");
    assert_eq!(ev.is_done(), Err(Error::OutOfHostMemory));
    drop(ev);
    drop(buf);
    d.destroy().unwrap();
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// A safe download that fails part-way (here: the stream's staging ring cannot be allocated)
/// after it recorded a direct piece (bytes of the destination that share a page with a
/// registration go through its import): the error returns only once that piece is done, so
/// memory the caller reuses after the error is never written by it later.
#[test]
fn failed_safe_download_leaves_nothing_queued() {
    init_log();
    let d = Device::open_default_with(&fopts()).unwrap();
    let page = host::page_size();
    let n = 4 * page;
    let buf = d.alloc_buffer(n).unwrap();
    buf.write(0, &pattern(n, 8)).unwrap();
    let mut m = Pages::new(n);
    let (a, b) = m.slice().split_at_mut(100);
    let reg = d.register(a).unwrap();
    let s = d.stream().unwrap(); // a fresh stream: its ring is allocated on first staged piece
    inject(Point::AllocateMemory, 0, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
    let r = s.download(&buf, 0, b).map(|_| ());
    assert!(disarm(), "the ring allocation was not reached");
    assert_eq!(r, Err(Error::OutOfDeviceMemory));
    b.fill(0x5A); // the caller reuses the destination after the error
    s.synchronize().unwrap();
    assert!(b.iter().all(|&x| x == 0x5A), "a piece of the failed download ran after it returned");
    drop(s);
    drop(reg);
    drop(buf);
    d.destroy().unwrap();
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// A batch made only of direct copies (a pinned upload, a device copy: nothing to copy out)
/// whose submission fails never runs. Its guard says so every time it is asked, an event
/// recorded after it says so until `synchronize` reported it, and `synchronize` reports it once
/// (sticky until then) even though `flush` returned it already; later work is clean. Before:
/// the loss left no trace, so `Pending::is_done` stayed `Ok(false)`, `wait` and `synchronize`
/// answered `Ok`.
#[test]
fn lost_batch_of_direct_copies_is_reported() {
    init_log();
    let d = Device::open_default_with(&fopts()).unwrap();
    let n = 64 << 10;
    let a = d.alloc_buffer(n).unwrap();
    a.write(0, &pattern(n, 1)).unwrap();
    let b = d.alloc_buffer(n).unwrap();
    b.write(0, &vec![0u8; n]).unwrap();
    let mut pinned = PinnedBuffer::new(&d, n).unwrap();
    pinned.fill(7);
    let s = d.stream().unwrap();
    let up = s.upload_pinned(&pinned, 0..n, &b, 0).unwrap();
    s.copy_async(&a, 0, &b, 0, n / 2).unwrap();
    inject(Point::QueueSubmit, 0, vk::Result::ERROR_OUT_OF_HOST_MEMORY);
    let r = s.flush();
    assert!(disarm(), "the submission was not reached");
    assert_eq!(r, Err(Error::OutOfHostMemory));
    assert_eq!(up.is_done(), Err(Error::OutOfHostMemory), "the lost copy's guard polled");
    let ev = s.record().unwrap();
    assert_eq!(ev.wait(), Err(Error::OutOfHostMemory), "an event after the lost batch");
    assert_eq!(s.synchronize(), Err(Error::OutOfHostMemory), "synchronize after the loss");
    assert_eq!(s.synchronize(), Ok(()), "reported once");
    assert_eq!(ev.wait(), Ok(()), "the event after synchronize reported it");
    assert_eq!(up.wait(), Err(Error::OutOfHostMemory), "the lost copy's guard, after synchronize");
    // Nothing of the lost batch ran; later work runs and its guards are clean.
    let mut out = vec![0u8; n];
    b.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&x| x == 0), "lost copies ran");
    s.copy_async(&a, 0, &b, 0, n).unwrap();
    let up2 = s.upload(&pinned[..16], &b, 0).unwrap();
    up2.wait().unwrap();
    s.record().unwrap().wait().unwrap();
    b.read(0, &mut out).unwrap();
    assert!(out[..16].iter().all(|&x| x == 7) && out[16..] == pattern(n, 1)[16..]);
    drop(s);
    drop((a, b, pinned));
    d.destroy().unwrap();
    assert_eq!(d.live_objects(), vkhost::LiveObjects::default());
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// A lost batch with pageable copy-outs (cancelled, never written) stays reported to the next
/// `synchronize` even when another wait on the stream comes first: here a synchronous write of
/// the source buffer, which waits for the stream's uses of it. Before: that wait took the error
/// and `synchronize` answered `Ok` with the destination never written.
#[test]
fn lost_copy_out_error_survives_other_waits() {
    init_log();
    let d = Device::open_default_with(&fopts()).unwrap();
    let n = 64 << 10;
    let a = d.alloc_buffer(n).unwrap();
    a.write(0, &pattern(n, 2)).unwrap();
    let s = d.stream().unwrap();
    let mut out = vec![0xEEu8; n];
    // SAFETY: `out` outlives the stream work and is not touched until synchronize returns.
    unsafe { s.copy_to_host_async(&a, 0, out.as_mut_ptr(), n) }.unwrap();
    inject(Point::QueueSubmit, 0, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
    let r = s.flush();
    assert!(disarm(), "the submission was not reached");
    assert_eq!(r, Err(Error::OutOfDeviceMemory));
    a.write(0, &[1u8; 64]).unwrap(); // waits for the stream's uses of `a` (the lost batch's)
    assert_eq!(s.synchronize(), Err(Error::OutOfDeviceMemory), "the loss was swallowed by another wait");
    assert!(out.iter().all(|&x| x == 0xEE), "a cancelled copy-out wrote its destination");
    assert_eq!(s.synchronize(), Ok(()));
    drop(s);
    drop(a);
    d.destroy().unwrap();
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// A refusal of vkhost's own memory that will recur (the driver refusing the pointer:
/// `VK_ERROR_INVALID_EXTERNAL_HANDLE`) sends the device's later pinned blocks straight to the
/// driver, with no mapping made and faulted in for nothing; registrations are not affected, and
/// another device still makes its blocks of its own memory. A passing failure (out of memory,
/// `huge_page_block_falls_back_to_the_driver`) does not.
#[test]
fn a_recurring_refusal_of_own_memory_goes_to_the_driver_from_then_on() {
    let o = OpenOptions { pinned_huge_min: Some(2 << 20), ..fopts() };
    let dev = Device::open_default_with(&o).unwrap();
    let before = dev.live_objects();
    inject(Point::GetMemoryHostPointerProperties, 0, vk::Result::ERROR_INVALID_EXTERNAL_HANDLE);
    let b = PinnedBuffer::new(&dev, 4 << 20);
    assert!(disarm(), "the fault fired");
    let b = b.expect("the driver's allocation follows the refused import");
    assert_eq!(b.raw_memory().expect("one allocation").handle_types, vk::ExternalMemoryHandleTypeFlags::empty());
    drop(b);
    // No fault now: the import would work, but the device remembers the refusal.
    let c = PinnedBuffer::new(&dev, 4 << 20).unwrap();
    assert_eq!(c.raw_memory().expect("one allocation").handle_types, vk::ExternalMemoryHandleTypeFlags::empty(), "tried again");
    drop(c);
    // Registrations still import.
    let mut v = vec![7u8; 3 << 20];
    let r = dev.register(&mut v[..]).unwrap();
    assert!(host::find(&dev, r.as_ptr() as usize, 1).is_some());
    drop(r);
    dev.release_queued();
    assert_eq!(dev.live_objects(), before, "objects left");
    // Another device has its own memory again.
    let other = Device::open_default_with(&o).unwrap();
    let d = PinnedBuffer::new(&other, 4 << 20).unwrap();
    assert_eq!(d.raw_memory().expect("one import").handle_types, vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT);
    drop(d);
    other.destroy().unwrap();
    dev.destroy().unwrap();
    assert_eq!(dev.validation_errors() + other.validation_errors(), 0, "validation errors: {:?}", dev.last_validation_error());
}

/// A pinned block of vkhost's own huge-page memory (`pinned_huge_min`) whose import fails is
/// the driver's allocation instead: the call succeeds, the block is not an import, and nothing
/// of the failed attempt stays (objects, mapping, entry). Without a fault the block is an import.
#[test]
fn huge_page_block_falls_back_to_the_driver() {
    let dev = Device::open_default_with(&OpenOptions { pinned_huge_min: Some(2 << 20), ..fopts() }).unwrap();
    let before = dev.live_objects();
    let entries = entries_of(&dev);
    for (point, code) in [
        (Point::AllocateMemory, vk::Result::ERROR_OUT_OF_HOST_MEMORY),
        (Point::CreateBuffer, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY),
        (Point::BindBufferMemory, vk::Result::ERROR_OUT_OF_HOST_MEMORY),
    ] {
        inject(point, 0, code);
        let b = PinnedBuffer::new(&dev, 4 << 20);
        assert!(disarm(), "{point:?}: the fault fired");
        let b = b.unwrap_or_else(|e| panic!("{point:?}: the driver's allocation should follow a failed import: {e}"));
        let raw = b.raw_memory().expect("one allocation");
        assert_eq!(raw.handle_types, vk::ExternalMemoryHandleTypeFlags::empty(), "{point:?}: a driver allocation");
        assert_eq!(entries_of(&dev), entries + 1);
        drop(b);
        dev.release_queued();
        assert_eq!(dev.live_objects(), before, "{point:?}: objects left");
        assert_eq!(entries_of(&dev), entries);
    }
    let b = PinnedBuffer::new(&dev, 4 << 20).unwrap();
    assert_eq!(b.raw_memory().expect("one import").handle_types, vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT);
    drop(b);
    dev.destroy().unwrap();
    assert_eq!(dev.live_objects(), vkhost::LiveObjects::default());
    assert_eq!(dev.validation_errors(), 0, "validation errors: {:?}", dev.last_validation_error());
}

/// A failed wait cancels the copy-outs of the still-open batch; a later copy enqueued into that
/// same open batch is not affected: its guard answers `Ok` with its bytes in place. Before, the
/// cancellation was recorded by batch value, and that copy reported the error although it ran
/// (found by a review).
#[test]
fn a_copy_after_a_cancellation_in_the_same_batch_is_unaffected() {
    let n = 64 << 10;
    let (d, buf, s, out1) = pending_copy_out(n, 4);
    let ev = s.record().unwrap();
    let mut out2 = vec![0u8; n];
    // SAFETY: `out2` stays valid and untouched until the stream is synchronized below.
    unsafe { s.copy_to_host_async(&buf, 0, out2.as_mut_ptr(), n) }.unwrap(); // the open batch
    inject(Point::WaitSemaphores, 0, vk::Result::ERROR_OUT_OF_HOST_MEMORY);
    let r = ev.wait();
    assert!(disarm(), "the event's wait was not made to fail");
    assert_eq!(r, Err(Error::OutOfHostMemory));
    let mut out3 = vec![0u8; n];
    let r3 = s.download(&buf, 0, &mut out3).map(drop);
    assert_eq!(r3, Ok(()), "a copy after the cancellation, in the same open batch");
    assert!(out3 == pattern(n, 4), "its bytes are in place");
    assert_eq!(s.synchronize(), Err(Error::OutOfHostMemory), "synchronize reports the cancelled copy-outs once");
    assert_eq!(s.synchronize(), Ok(()));
    assert!(out1 != pattern(n, 4) && out2 != pattern(n, 4), "cancelled copy-outs never ran");
    drop(s);
    drop(buf);
    d.destroy().unwrap();
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// Pageable stream copies through the staging ring, around a batch whose submission fails:
/// `upload` (false) or `download` (true). Batch v (submitted fine, queued behind fills) and the
/// lost batch v+1 share ring chunk 0; chunk 1 follows, then chunk 0 again. Returns whether the
/// bytes of batch v's copy arrived whole.
fn ring_chunk_after_a_lost_batch(download: bool) -> bool {
    let dev = device_with(OpenOptions { staging_chunk: 64 << 10, staging_slots: 2, ..opts() }).unwrap();
    let big = dev.alloc_buffer(256 << 20).unwrap();
    let gpu = dev.alloc_buffer(1 << 20).unwrap();
    let (a, b, c, d) = (pattern(48 << 10, 1), pattern(8 << 10, 2), pattern(64 << 10, 3), pattern(64 << 10, 4));
    gpu.write(0, &a).unwrap();
    gpu.write(200 << 10, &c).unwrap();
    gpu.write(300 << 10, &d).unwrap();
    let s = dev.stream().unwrap();
    for _ in 0..8 {
        s.fill_async(&big, 0, 256 << 20, 0x1111_1111).unwrap(); // keeps the queue busy
    }
    let (mut oa, mut ob, mut oc, mut od) = (vec![0u8; a.len()], vec![0u8; b.len()], vec![0u8; c.len()], vec![0u8; d.len()]);
    // SAFETY: (every raw copy below) the vectors outlive the synchronize calls at the end and
    // the host leaves them alone meanwhile.
    unsafe {
        if download {
            s.copy_to_host_async(&gpu, 0, oa.as_mut_ptr(), oa.len()).unwrap(); // chunk 0 [0, 48K)
        } else {
            s.copy_to_device_async(a.as_ptr(), a.len(), &gpu, 0).unwrap();
        }
    }
    s.flush().unwrap(); // batch v, behind the fills
    // SAFETY: as above (the vectors outlive the synchronize calls; the host leaves them alone).
    unsafe {
        if download {
            s.copy_to_host_async(&gpu, 100 << 10, ob.as_mut_ptr(), ob.len()).unwrap(); // chunk 0 [48K, 56K)
        } else {
            s.copy_to_device_async(b.as_ptr(), b.len(), &gpu, 100 << 10).unwrap();
        }
    }
    inject(Point::QueueSubmit, 0, vk::Result::ERROR_OUT_OF_HOST_MEMORY);
    assert_eq!(s.flush(), Err(Error::OutOfHostMemory), "batch v+1 lost");
    assert!(disarm());
    // SAFETY: as above.
    unsafe {
        if download {
            s.copy_to_host_async(&gpu, 200 << 10, oc.as_mut_ptr(), oc.len()).unwrap(); // chunk 1
            s.copy_to_host_async(&gpu, 300 << 10, od.as_mut_ptr(), od.len()).unwrap(); // chunk 0 again
        } else {
            s.copy_to_device_async(c.as_ptr(), c.len(), &gpu, 200 << 10).unwrap();
            s.copy_to_device_async(d.as_ptr(), d.len(), &gpu, 300 << 10).unwrap();
        }
    }
    assert_eq!(s.synchronize(), Err(Error::OutOfHostMemory), "the loss, reported once");
    s.synchronize().unwrap();
    let whole = if download {
        assert!(oc == c && od == d, "the copies after the loss");
        oa == a
    } else {
        let mut back = vec![0u8; a.len()];
        gpu.read(0, &mut back).unwrap();
        back == a
    };
    drop(s);
    assert_eq!(dev.validation_errors(), 0);
    whole
}

/// A lost batch's staging chunk stays in use by the batches before it: marking it unused let
/// the ring hand chunk 0 to a later copy while batch v (submitted fine) still read or wrote it,
/// so an upload delivered another copy's bytes and a download returned them, both `Ok` (found
/// by an audit).
#[test]
fn a_lost_batch_frees_no_staging_chunk_earlier_batches_use() {
    assert!(ring_chunk_after_a_lost_batch(false), "the upload before the lost batch was overwritten in the ring");
    assert!(ring_chunk_after_a_lost_batch(true), "the download before the lost batch holds another copy's bytes");
}

/// The cache of freed pinned blocks (`OpenOptions::pinned_cache`) after a device loss: a block
/// freed then is released, not kept, and no kept block is handed out (`alloc_pinned` answers
/// `DeviceLost`); teardown frees what was kept before the loss.
#[test]
fn pinned_cache_after_device_loss() {
    init_log();
    let d = Device::open_default_with(&OpenOptions { pinned_cache: Some(1 << 20), ..fopts() }).unwrap();
    let kept = host::alloc_pinned(&d, 8192).unwrap();
    let live = host::alloc_pinned(&d, 8192).unwrap();
    host::free_pinned(&d, kept).unwrap();
    assert_eq!(d.pinned_cache().blocks, 1);
    let buf = d.alloc_buffer(64).unwrap();
    let wait = if d.info().timeline_semaphore { Point::WaitSemaphores } else { Point::WaitForFences };
    inject(wait, 0, vk::Result::ERROR_DEVICE_LOST);
    assert_eq!(buf.write(0, &[1u8; 64]), Err(Error::DeviceLost));
    assert!(disarm(), "the injected loss did not fire");
    host::free_pinned(&d, live).unwrap();
    assert_eq!(d.pinned_cache().blocks, 1, "a block freed after the loss is not kept");
    assert_eq!(host::alloc_pinned(&d, 8192), Err(Error::DeviceLost), "no kept block after a loss");
    assert_eq!(d.pinned_cache().reused, 0);
    drop(buf);
    d.destroy().unwrap();
    assert_eq!(d.live_objects(), vkhost::LiveObjects::default());
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// A driver block kept while huge-page blocks were off (the import probe ran out of memory at
/// open, so `pinned_huge_min` waits for its retry) is the next block of its size once they are
/// back on: the cache is asked before any new block is made (it sat in the cache unused, a
/// review found).
#[test]
fn pinned_cache_reuses_a_driver_block_kept_before_the_import_probe_ran() {
    init_log();
    inject(Point::AllocateMemory, 0, vk::Result::ERROR_OUT_OF_HOST_MEMORY);
    let o = OpenOptions { pinned_cache: Some(1 << 20), pinned_huge_min: Some(4096), ..fopts() };
    let d = Device::open_default_with(&o).unwrap();
    assert!(disarm(), "the probe never reached vkAllocateMemory");
    assert_eq!(d.import_probe(), None, "no verdict yet");
    let n = 8192;
    let a = host::alloc_pinned(&d, n).unwrap();
    host::free_pinned(&d, a).unwrap();
    assert_eq!(d.pinned_cache().blocks, 1, "a driver block (no huge-page block before the probe's verdict) is kept");
    let mut v = vec![1u8; 8192];
    // SAFETY: `v` outlives the registration (unregistered below).
    unsafe { host::register(&d, v.as_mut_ptr(), v.len()) }.unwrap();
    assert!(matches!(d.import_probe(), Some(Ok(_))), "the registration ran the probe: {:?}", d.import_probe());
    host::unregister(&d, v.as_mut_ptr()).unwrap();
    let b = host::alloc_pinned(&d, n).unwrap();
    assert_eq!(b, a, "the kept block, not a new huge-page block");
    let st = d.pinned_cache();
    assert_eq!((st.blocks, st.reused), (0, 1));
    // Another size, with nothing kept, is a huge-page block again (not kept when freed).
    let c = host::alloc_pinned(&d, 3 * n).unwrap();
    host::free_pinned(&d, c).unwrap();
    assert_eq!(d.pinned_cache().blocks, 0, "a huge-page block is never kept");
    host::free_pinned(&d, b).unwrap();
    d.destroy().unwrap();
    assert_eq!(d.live_objects(), vkhost::LiveObjects::default());
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// An allocation that fails for lack of memory while the cache keeps blocks of other sizes
/// frees them and tries once more; with nothing kept, the failure is the caller's. An import
/// (a registration) that runs out of allocations gets the same retry.
#[test]
fn pinned_cache_frees_kept_blocks_when_memory_runs_out() {
    init_log();
    let d = Device::open_default_with(&OpenOptions { pinned_cache: Some(1 << 20), ..fopts() }).unwrap();
    for n in [4096, 8192] {
        host::free_pinned(&d, host::alloc_pinned(&d, n).unwrap()).unwrap();
    }
    assert_eq!(d.pinned_cache().blocks, 2);
    inject(Point::AllocateMemory, 0, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
    let p = host::alloc_pinned(&d, 16384).expect("the retry after freeing the kept blocks");
    assert!(disarm(), "the injected failure did not fire");
    assert_eq!(d.pinned_cache().blocks, 0, "the kept blocks were freed for it");
    host::free_pinned(&d, p).unwrap();
    d.release_queued();
    inject(Point::AllocateMemory, 0, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
    assert_eq!(host::alloc_pinned(&d, 16384), Err(Error::OutOfDeviceMemory), "nothing kept: no retry");
    assert!(disarm(), "the injected failure did not fire");
    // An import gets the same retry (a registration's vkAllocateMemory): a kept block freed,
    // then the import made.
    host::free_pinned(&d, host::alloc_pinned(&d, 4096).unwrap()).unwrap();
    assert_eq!(d.pinned_cache().blocks, 1);
    let mut v = vec![3u8; 8192];
    inject(Point::AllocateMemory, 0, vk::Result::ERROR_TOO_MANY_OBJECTS);
    // SAFETY: `v` outlives the registration (unregistered below).
    unsafe { host::register(&d, v.as_mut_ptr(), v.len()) }.expect("the import's retry after freeing the kept block");
    assert!(disarm(), "the injected failure did not fire");
    assert_eq!(d.pinned_cache().blocks, 0, "the kept block was freed for it");
    let buf = d.alloc_buffer(8192).unwrap();
    buf.write(0, &v).unwrap();
    assert_eq!(host::device_stats(&d).direct_bytes, 8192, "the write went direct, through the import");
    host::unregister(&d, v.as_mut_ptr()).unwrap();
    drop(buf);
    d.destroy().unwrap();
    assert_eq!(d.live_objects(), vkhost::LiveObjects::default());
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// A device-to-device `copy_async` routed to the copy kernel (`OpenOptions::d2d_kernel_min`)
/// whose pipeline the driver refuses copies by vkCmdCopyBuffer instead: `Ok`, the right bytes,
/// no pipeline left; the next kernel copy makes its pipeline and runs.
#[test]
fn copy_async_copies_by_vkcmdcopybuffer_when_the_kernel_cannot_run() {
    let d = device_with(OpenOptions { d2d_kernel_min: Some(4), ..fopts() }).unwrap();
    let s = d.stream_on(vkhost::QueueKind::Compute).unwrap();
    let n = 1 << 16;
    let (a, b) = (d.alloc_buffer(n).unwrap(), d.alloc_buffer(n).unwrap());
    let want = pattern(n, 8);
    a.write(0, &want).unwrap();
    for code in [vk::Result::ERROR_OUT_OF_HOST_MEMORY, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY] {
        b.write(0, &vec![0; n]).unwrap();
        inject(Point::CreateComputePipelines, 0, code);
        let r = s.copy_async(&a, 0, &b, 0, n);
        assert!(disarm(), "{code:?}: the kernel's pipeline was not asked for");
        r.unwrap();
        let mut got = vec![0u8; n];
        b.read(0, &mut got).unwrap();
        assert!(got == want, "{code:?}: the fallback's bytes");
        assert_eq!(d.live_objects().pipelines, 0, "{code:?}: a pipeline left");
    }
    b.write(0, &vec![0; n]).unwrap();
    s.copy_async(&a, 0, &b, 0, n).unwrap();
    assert_eq!(d.live_objects().pipelines, 1, "the kernel ran once the driver allowed it");
    let mut got = vec![0u8; n];
    b.read(0, &mut got).unwrap();
    assert!(got == want);
}

/// A safe upload or download refused for its arguments returns at once, as CUDA's
/// `cudaErrorInvalidValue` does: it submits none of the stream's queued work and waits for none
/// (it drained the stream, submitting and waiting for everything enqueued, as after a copy that
/// failed part-way).
#[test]
fn a_refused_upload_or_download_submits_nothing() {
    let d = device().unwrap();
    let x = d.alloc_buffer(8192).unwrap();
    let s = d.stream().unwrap();
    s.fill_async(&x, 0, 4096, 0).unwrap(); // queued, not submitted
    disarm();
    assert_eq!(s.upload(&[1u8; 16], &x, 8190).unwrap_err(), Error::OutOfRange);
    let mut v = vec![0u8; 16];
    assert_eq!(s.download(&x, 8190, &mut v).unwrap_err(), Error::OutOfRange);
    assert_eq!(vkhost::fault::calls(Point::QueueSubmit), 0, "a refused call submitted the stream's work");
    s.synchronize().unwrap();
    assert_eq!(vkhost::fault::calls(Point::QueueSubmit), 1);
}

/// `wait_event` on an event with a lost batch before it still orders this stream after the
/// event's work that ran (as `cudaStreamWaitEvent` always adds the dependency), and reports the
/// loss. It made no wait at all, so a caller who logged the error and went on had no ordering.
#[test]
fn wait_event_after_a_lost_batch_still_waits_for_the_work_that_ran() {
    let d = device().unwrap();
    let x = d.alloc_buffer(1 << 20).unwrap();
    let (a, b) = (d.stream().unwrap(), d.stream().unwrap());
    a.fill_async(&x, 0, 4, 0).unwrap();
    inject(Point::QueueSubmit, 0, vk::Result::ERROR_OUT_OF_HOST_MEMORY);
    assert_eq!(a.flush().unwrap_err(), Error::OutOfHostMemory); // batch 1 lost
    disarm();
    a.fill_async(&x, 0, 1 << 20, 0x0707_0707).unwrap();
    let e = a.record().unwrap(); // batch 2: submitted, will signal
    assert_eq!(b.wait_event(&e).unwrap_err(), Error::OutOfHostMemory, "the loss is reported");
    // The wait was made: `b`'s next batch carries it, so recording submits one (value 1).
    let eb = b.record().unwrap();
    assert_eq!(format!("{eb:?}"), format!("{:?}", b.record().unwrap()), "no work between the two records");
    assert!(format!("{eb:?}").contains("value: 1"), "no wait was added: {eb:?}");
    b.synchronize().unwrap();
    assert!(e.is_done().unwrap_or(true));
    assert_eq!(a.synchronize().unwrap_err(), Error::OutOfHostMemory);
    a.synchronize().unwrap();
}

/// `wait_event` makes its wait even when submitting this stream's earlier work fails: the wait
/// goes to the next batch (a review found the call returned that failure with no wait made,
/// indistinguishable from the event's own loss).
#[test]
fn wait_event_whose_own_flush_fails_still_waits() {
    let d = device().unwrap();
    let (x, y) = (d.alloc_buffer(1 << 20).unwrap(), d.alloc_buffer(4096).unwrap());
    let (a, b) = (d.stream().unwrap(), d.stream().unwrap());
    a.fill_async(&x, 0, 1 << 20, 0x0707_0707).unwrap();
    let e = a.record().unwrap();
    b.fill_async(&y, 0, 4096, 1).unwrap(); // b's open batch, submitted by the wait
    inject(Point::QueueSubmit, 0, vk::Result::ERROR_OUT_OF_HOST_MEMORY);
    assert_eq!(b.wait_event(&e).unwrap_err(), Error::OutOfHostMemory);
    disarm();
    // b's batch 1 was lost; the wait rides on the next batch (value 2).
    let eb = b.record().unwrap();
    assert!(format!("{eb:?}").contains("value: 2"), "no wait was made: {eb:?}");
    assert_eq!(b.synchronize().unwrap_err(), Error::OutOfHostMemory);
    a.synchronize().unwrap();
}

/// `wait_event` on an event of the same stream reports lost work before the event, as it does
/// for an event of another stream (and as the event's own `wait` does): it answered `Ok`, the
/// one call of the three that hid the loss.
#[test]
fn wait_event_on_its_own_streams_event_reports_a_lost_batch() {
    let d = device().unwrap();
    let x = d.alloc_buffer(4096).unwrap();
    let a = d.stream().unwrap();
    a.fill_async(&x, 0, 4, 0).unwrap();
    inject(Point::QueueSubmit, 0, vk::Result::ERROR_OUT_OF_HOST_MEMORY);
    assert_eq!(a.flush().unwrap_err(), Error::OutOfHostMemory); // batch 1 lost
    disarm();
    a.fill_async(&x, 0, 4096, 0x0707_0707).unwrap();
    let e = a.record().unwrap(); // batch 2
    assert_eq!(e.wait().unwrap_err(), Error::OutOfHostMemory, "the event reports the loss");
    assert_eq!(a.wait_event(&e).unwrap_err(), Error::OutOfHostMemory, "so does a wait on it");
    assert_eq!(a.synchronize().unwrap_err(), Error::OutOfHostMemory);
    // Reported by synchronize: from here on, the event and the wait on it are clean.
    a.wait_event(&e).unwrap();
    e.wait().unwrap();
}

/// A vkDeviceWaitIdle or vkQueueWaitIdle that fails with an out-of-memory code says nothing of
/// whether work still runs, so teardown makes the wait again before it frees anything (it was
/// a known limit of RELIABILITY.md: the failure was taken as idle, one call, and the objects
/// the work named were freed next). An owned device waits with vkDeviceWaitIdle, a borrowed
/// one (`from_raw` with `Borrowed`) with vkQueueWaitIdle on each of vkhost's queues; each has
/// stream work in flight at destroy, and destroy stays clean.
#[test]
fn an_idle_wait_that_runs_out_of_memory_is_made_again() {
    for code in [vk::Result::ERROR_OUT_OF_HOST_MEMORY, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY] {
        // Owned: vkDeviceWaitIdle.
        let d = device().unwrap();
        let b = d.alloc_buffer(4 << 20).unwrap();
        let s = d.stream().unwrap();
        s.fill_async(&b, 0, 4 << 20, 7).unwrap();
        s.flush().unwrap();
        inject(Point::DeviceWaitIdle, 0, code);
        d.destroy().unwrap();
        assert_eq!(vkhost::fault::calls(Point::DeviceWaitIdle), 2, "{code:?}: the failed vkDeviceWaitIdle was not made again");
        assert!(disarm());
        drop((s, b));
        assert_eq!(d.live_objects(), vkhost::LiveObjects::default());
        drop(d);

        // Borrowed: vkQueueWaitIdle on each of vkhost's queues; how many, from a teardown
        // with no fault.
        let owner = device().unwrap();
        let emh = owner.info().host_import_alignment.is_some();
        let waits = |fault: bool| {
            let raw = owner.raw().unwrap();
            // SAFETY: the handles are live and outlive `w`, destroyed here first.
            let w = unsafe { Device::from_raw(raw, vkhost::Ownership::Borrowed, emh, &opts()) }.unwrap();
            let b = w.alloc_buffer(4 << 20).unwrap();
            let s = w.stream().unwrap();
            s.fill_async(&b, 0, 4 << 20, 9).unwrap();
            s.flush().unwrap();
            disarm();
            if fault {
                inject(Point::QueueWaitIdle, 0, code);
            }
            w.destroy().unwrap();
            let n = vkhost::fault::calls(Point::QueueWaitIdle);
            assert_eq!(disarm(), fault);
            drop((s, b));
            assert_eq!(w.live_objects(), vkhost::LiveObjects::default());
            assert_eq!(w.validation_errors(), 0, "{:?}", w.last_validation_error());
            n
        };
        let plain = waits(false);
        assert!(plain >= 1, "a borrowed device's teardown waits for its queues");
        assert_eq!(waits(true), plain + 1, "{code:?}: the failed vkQueueWaitIdle was not made again");
    }
}
