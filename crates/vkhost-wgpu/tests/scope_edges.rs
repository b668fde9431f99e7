//! Scopes and the interop's opening at their edges (an audit's reproducers, 2026-12-03).
//! Failed on the code before: wgpu's staged `write_buffer` copies flushed before a scope ends,
//! also after `wgpu::Device::destroy` and with a non-panicking error handler (d5, d5b, d6: they
//! ran later, into freed memory, a segfault in d5b); no `vkDeviceWaitIdle` racing another
//! thread's submit (d2); features and limits the adapter lacks refused by `open_adapter` (d3,
//! d3b). Cases the audit found sound, kept as regression tests: escaped encoders (d1, d1b) and
//! teardown orders (d4). Validation on, zero errors asserted by `common::Checked`. (wgpu-core 24
//! can also deadlock when a poll after `destroy` meets another thread's `write_buffer`: its own
//! lock order, documented in `scope.rs`, not tested here.)

mod common;
use common::*;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use vkhost_wgpu::vkhost::PinnedBuffer;
use vkhost_wgpu::{Interop, Options, wgpu};

/// A 4 KiB copy destination, and an encoder that recorded a copy from `pinned` inside a scope
/// and escaped it as the scope's return value.
fn escaped_encoder(interop: &Interop, pinned: &mut PinnedBuffer) -> (wgpu::Buffer, wgpu::CommandEncoder) {
    let dev = interop.device();
    let other = dev.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 4096,
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let enc = interop
        .scope(|s| -> vkhost_wgpu::Result<wgpu::CommandEncoder> {
            let b = s.pinned(pinned)?;
            let mut enc = dev.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(&b, 0, &other, 0, 4096);
            Ok(enc)
        })
        .unwrap();
    (other, enc)
}

/// H3: a command encoder that recorded a copy from a HostBuffer escapes the scope (as the
/// closure's return value, a `'static` type). The scope destroys the buffer (wgpu destroys the
/// VkBuffer at once: no submission used it), leaving the encoder's open VkCommandBuffer
/// referencing a destroyed VkBuffer. Finishing or merely dropping it ends that command buffer.
#[test]
fn d1_escaped_encoder_after_scope() {
    let Some(interop) = open() else { return };
    let dev = interop.device();
    let mut pinned = PinnedBuffer::new(interop.vkhost(), 4096).unwrap();
    pinned.fill(1);
    let (_other, enc) = escaped_encoder(&interop, &mut pinned);
    eprintln!("scope returned; validation errors so far: {:?}", take_validation_errors());
    drop(pinned);
    dev.push_error_scope(wgpu::ErrorFilter::Validation);
    let cb = enc.finish();
    interop.queue().submit([cb]);
    let e = block_on(dev.pop_error_scope());
    eprintln!("wgpu error for the escaped encoder: {e:?}");
    dev.poll(wgpu::Maintain::Wait);
    let (n, last) = take_validation_errors();
    assert_eq!(n, 0, "validation errors after an escaped encoder: {n}, last: {last:?}");
}

/// Same, but the escaped encoder is simply dropped, never finished.
#[test]
fn d1b_escaped_encoder_dropped_after_scope() {
    let Some(interop) = open() else { return };
    let dev = interop.device();
    let mut pinned = PinnedBuffer::new(interop.vkhost(), 4096).unwrap();
    let (_other, enc) = escaped_encoder(&interop, &mut pinned);
    drop(enc);
    dev.poll(wgpu::Maintain::Wait);
    let (n, last) = take_validation_errors();
    assert_eq!(n, 0, "validation errors after dropping an escaped encoder: {n}, last: {last:?}");
}

/// H2: `wgpu::Device::destroy` (safe) in a scope sends the scope down its fallback path, which
/// calls vkDeviceWaitIdle, which needs every VkQueue of the device externally synchronized.
/// wgpu-core 24's `Queue::submit` does not check device validity, so another thread's
/// `queue.submit` still reaches vkQueueSubmit concurrently.
#[test]
fn d2_device_wait_idle_races_another_threads_submit() {
    let Some(interop) = open() else { return };
    let interop = Arc::new(interop);
    let mut pinned = PinnedBuffer::new(interop.vkhost(), 4096).unwrap();
    pinned.fill(0);
    pinned[4..8].copy_from_slice(&60_000_000u32.to_ne_bytes());
    let stop = Arc::new(AtomicBool::new(false));
    let go = Arc::new(AtomicBool::new(false));
    let submits = {
        let (i, stop, go) = (interop.clone(), stop.clone(), go.clone());
        std::thread::spawn(move || {
            let mut ok = 0u64;
            let mut failed = 0u64;
            while !go.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            while !stop.load(Ordering::Acquire) {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    i.queue().submit([]);
                }));
                if r.is_ok() { ok += 1 } else { failed += 1 }
            }
            (ok, failed)
        })
    };
    let t = std::time::Instant::now();
    interop
        .scope(|s| -> vkhost_wgpu::Result<()> {
            let b = s.pinned(&mut pinned)?;
            dispatch(&interop, SLOW, &[&b], 1);
            interop.device().destroy();
            go.store(true, Ordering::Release);
            Ok(())
        })
        .unwrap();
    stop.store(true, Ordering::Release);
    let (ok, failed) = submits.join().unwrap();
    eprintln!("scope took {:?}; the other thread's submits: {ok} accepted, {failed} refused", t.elapsed());
    assert_eq!(u32::from_ne_bytes(pinned[12..16].try_into().unwrap()), 0xDEAD_BEEF);
    let (n, last) = take_validation_errors();
    assert_eq!(n, 0, "validation errors: {n}, last: {last:?}");
}

/// H30: `open_adapter` hands `opts.device` to `create_device_from_hal`, which (unlike
/// `request_device`) checks neither features nor limits against the adapter. Limits beyond the
/// hardware let wgpu validate shaders against numbers Vulkan does not allow.
#[test]
fn d3_limits_beyond_the_adapter_are_refused() {
    let Some(base) = open() else { return };
    let adapter = base.adapter().clone();
    let hw = adapter.limits();
    eprintln!("adapter: workgroup_size_x {}, invocations {}", hw.max_compute_workgroup_size_x, hw.max_compute_invocations_per_workgroup);
    let want = hw.max_compute_workgroup_size_x * 4;
    let limits =
        wgpu::Limits { max_compute_workgroup_size_x: want, max_compute_invocations_per_workgroup: want, ..wgpu::Limits::default() };
    let opts = Options {
        instance_flags: wgpu::InstanceFlags::VALIDATION | wgpu::InstanceFlags::DEBUG,
        device: wgpu::DeviceDescriptor { required_limits: limits, ..Default::default() },
        ..Default::default()
    };
    let r = Interop::open_adapter(&adapter, &opts);
    let interop = match r {
        Err(e) => {
            eprintln!("refused (expected): {e}");
            return;
        }
        Ok(i) => i,
    };
    eprintln!("accepted limits beyond the adapter: device limits {}", interop.device().limits().max_compute_workgroup_size_x);
    let mut pinned = PinnedBuffer::new(interop.vkhost(), 4 * want as usize).unwrap();
    pinned.fill(0);
    let src = format!(
        "@group(0) @binding(0) var<storage, read_write> b: array<u32>;
         @compute @workgroup_size({want}) fn main(@builtin(local_invocation_index) i: u32) {{ b[i] = i + 1u; }}"
    );
    interop.device().push_error_scope(wgpu::ErrorFilter::Validation);
    interop
        .scope(|s| -> vkhost_wgpu::Result<()> {
            let b = s.pinned(&mut pinned)?;
            dispatch(&interop, &src, &[&b], 1);
            Ok(())
        })
        .unwrap();
    let e = block_on(interop.device().pop_error_scope());
    eprintln!("wgpu validation: {e:?}");
    let words: &[u32] = pinned.as_slice().unwrap();
    eprintln!("last word {} (want {want})", words[want as usize - 1]);
    let (n, last) = take_validation_errors();
    panic!("Interop::open_adapter accepted limits beyond the adapter; wgpu error {e:?}; Vulkan validation errors {n}, last {last:?}");
}

/// H30b: a feature the adapter lacks.
#[test]
fn d3b_feature_beyond_the_adapter_is_refused() {
    let Some(base) = open() else { return };
    let adapter = base.adapter().clone();
    let lacking = wgpu::Features::all_native_mask() - adapter.features();
    let Some(f) = lacking.iter().find(|f| !f.intersects(wgpu::Features::all_webgpu_mask())).or(lacking.iter().next()) else {
        eprintln!("the adapter offers every feature");
        return;
    };
    eprintln!("requesting {f:?}, which the adapter lacks");
    let opts = Options { device: wgpu::DeviceDescriptor { required_features: f, ..Default::default() }, ..Default::default() };
    let r = Interop::open_adapter(&adapter, &opts);
    eprintln!("open_adapter: {:?}", r.as_ref().map(|i| i.device().features()));
    let (n, last) = take_validation_errors();
    assert!(r.is_err(), "accepted a feature the adapter lacks");
    assert_eq!(n, 0, "validation errors: {n}, last: {last:?}");
}

/// Teardown in a mix of orders and threads, with escaped wgpu handles (buffer clone, bind group,
/// unfinished encoder) outliving the Interop, the vkhost device and its memory.
#[test]
fn d4_teardown_orders_with_escaped_handles() {
    for order in 0..4 {
        let Some(checked) = open() else { return };
        drop(checked);
        let interop =
            Interop::open(&Options { instance_flags: wgpu::InstanceFlags::VALIDATION | wgpu::InstanceFlags::DEBUG, ..Default::default() })
                .unwrap();
        let dev = interop.device().clone();
        let mut pinned = PinnedBuffer::new(interop.vkhost(), 4096).unwrap();
        let align = interop.host_buffer_alignment();
        let mut v = vec![0u8; 4096 + align];
        let at = v.as_ptr().align_offset(align);
        let p = pipeline(
            &dev,
            "@group(0) @binding(0) var<storage, read_write> b: array<u32>;
            @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) { b[i.x] = 7u; }",
        );
        let escaped = {
            let mut reg = interop.vkhost().register(&mut v[at..at + 4096]).unwrap();
            let e = interop
                .scope(|s| -> vkhost_wgpu::Result<_> {
                    let a = s.pinned(&mut pinned)?;
                    let b = s.registration(&mut reg)?;
                    let g = dev.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: None,
                        layout: &p.get_bind_group_layout(0),
                        entries: &[wgpu::BindGroupEntry { binding: 0, resource: a.as_entire_binding() }],
                    });
                    let mut enc = dev.create_command_encoder(&Default::default());
                    {
                        let mut pass = enc.begin_compute_pass(&Default::default());
                        pass.set_pipeline(&p);
                        pass.set_bind_group(0, &g, &[]);
                        pass.dispatch_workgroups(16, 1, 1);
                    }
                    interop.queue().submit([enc.finish()]);
                    let mut enc2 = dev.create_command_encoder(&Default::default());
                    enc2.copy_buffer_to_buffer(&a, 0, &b, 0, 256);
                    Ok((wgpu::Buffer::clone(&a), wgpu::Buffer::clone(&b), g, enc2))
                })
                .unwrap();
            drop(reg);
            e
        };
        assert!(pinned.iter().all(|&x| x == 7 || x == 0));
        let vk = interop.vkhost().clone();
        match order {
            0 => {
                drop(interop);
                std::thread::spawn(move || drop(pinned)).join().unwrap();
                std::thread::spawn(move || drop(escaped)).join().unwrap();
                drop(vk);
                drop(dev);
            }
            1 => {
                let t = std::thread::spawn(move || drop(escaped));
                drop(dev);
                t.join().unwrap();
                drop(pinned);
                vk.destroy().unwrap();
                drop(interop);
                drop(vk);
            }
            2 => {
                drop(pinned);
                vk.destroy().unwrap();
                drop(vk);
                std::thread::spawn(move || drop(interop)).join().unwrap();
                drop(dev);
                drop(escaped);
            }
            _ => {
                let (a, b, g, enc) = escaped;
                drop(interop);
                drop(vk);
                drop(a);
                std::thread::spawn(move || drop(pinned)).join().unwrap();
                drop(dev);
                drop(g);
                std::thread::spawn(move || drop(enc)).join().unwrap();
                drop(b);
            }
        }
        drop(v);
        let (n, last) = take_validation_errors();
        assert_eq!(n, 0, "order {order}: validation errors {n}, last {last:?}");
    }
}

/// H31: a `queue.write_buffer` into a HostBuffer is staged in wgpu's pending writes and
/// submitted with the next submission. `wgpu::Device::destroy` in the scope sends its end down
/// the fallback path, which (before the fix) only called vkDeviceWaitIdle: the staged copy was
/// never submitted, and the next `queue.submit` (accepted after destroy) ran it after the scope
/// had returned and the registration had ended: the device wrote the caller's Vec outside any
/// borrow (or freed memory, for a pinned block).
#[test]
fn d5_staged_write_runs_after_the_scope() {
    let Some(interop) = open() else { return };
    let align = interop.host_buffer_alignment();
    let mut v = vec![0u8; 4096 + align];
    let at = v.as_ptr().align_offset(align);
    {
        let mut reg = interop.vkhost().register(&mut v[at..at + 4096]).unwrap();
        interop
            .scope(|s| -> vkhost_wgpu::Result<()> {
                let b = s.registration(&mut reg)?;
                interop.queue().write_buffer(&b, 0, &[0xAB; 256]);
                interop.device().destroy();
                Ok(())
            })
            .unwrap();
    } // the registration ends: the bytes are the caller's alone
    let at_scope_end = v[at];
    interop.queue().submit([]);
    interop.device().poll(wgpu::Maintain::Wait);
    let later = v[at];
    eprintln!("byte 0 when the scope returned: {at_scope_end:#x}; after a later unrelated submit: {later:#x}");
    let (n, last) = take_validation_errors();
    assert_eq!(at_scope_end, 0xAB, "the staged write had not run when the scope returned");
    assert_eq!(at_scope_end, later, "the device wrote the caller's Vec after the scope returned and the registration ended");
    assert_eq!(n, 0, "validation errors: {n}, last: {last:?}");
}

/// The same with a pinned block that is freed before the next submission.
#[test]
fn d5b_staged_write_into_freed_pinned_block() {
    let Some(interop) = open() else { return };
    let mut pinned = PinnedBuffer::new(interop.vkhost(), 1 << 20).unwrap();
    interop
        .scope(|s| -> vkhost_wgpu::Result<()> {
            let b = s.pinned(&mut pinned)?;
            interop.queue().write_buffer(&b, 0, &vec![0xAB; 1 << 20]);
            interop.device().destroy();
            Ok(())
        })
        .unwrap();
    let at_scope_end = pinned[0];
    drop(pinned); // vkFreeMemory
    eprintln!("pinned byte 0 at scope end {at_scope_end:#x}; block freed; submitting");
    interop.queue().submit([]);
    interop.device().poll(wgpu::Maintain::Wait);
    let (n, last) = take_validation_errors();
    assert_eq!(at_scope_end, 0xAB, "the staged write had not run when the scope returned");
    assert_eq!(n, 0, "validation errors: {n}, last: {last:?}");
}

/// H31b: as d5, but wgpu's errors do not panic (a caller's `on_uncaptured_error` handler that
/// logs; an error scope left open would do the same): the scope's end then takes its normal
/// path, whose barrier submission wgpu refuses (invalid encoder), so the staged copy is again
/// never submitted before the scope returns.
#[test]
fn d6_staged_write_runs_after_the_scope_with_a_non_panicking_error_handler() {
    let Some(interop) = open() else { return };
    interop.device().on_uncaptured_error(Box::new(|e| eprintln!("uncaptured: {e}")));
    let align = interop.host_buffer_alignment();
    let mut v = vec![0u8; 4096 + align];
    let at = v.as_ptr().align_offset(align);
    {
        let mut reg = interop.vkhost().register(&mut v[at..at + 4096]).unwrap();
        interop
            .scope(|s| -> vkhost_wgpu::Result<()> {
                let b = s.registration(&mut reg)?;
                interop.queue().write_buffer(&b, 0, &[0xAB; 256]);
                interop.device().destroy();
                Ok(())
            })
            .unwrap();
    }
    let at_scope_end = v[at];
    interop.queue().submit([]);
    interop.device().poll(wgpu::Maintain::Wait);
    let later = v[at];
    eprintln!("byte 0 when the scope returned: {at_scope_end:#x}; after a later unrelated submit: {later:#x}");
    let (n, last) = take_validation_errors();
    assert_eq!(at_scope_end, 0xAB, "the staged write had not run when the scope returned");
    assert_eq!(at_scope_end, later, "the device wrote the caller's Vec after the scope returned and the registration ended");
    assert_eq!(n, 0, "validation errors: {n}, last: {last:?}");
}

/// A clear of the whole of `b` in its own submission.
fn clear_all(interop: &Interop, b: &wgpu::Buffer) {
    let mut enc = interop.device().create_command_encoder(&Default::default());
    enc.clear_buffer(b, 0, None);
    interop.queue().submit([enc.finish()]);
}

/// A user's wgpu callback that panics while the scope's end polls: its panic reaches the
/// caller once the scope's work is done, and the bytes are there. Before, the scope's end took
/// it for wgpu failing: it returned `Ok` with the panic swallowed (once), or aborted the
/// process (a callback that panicked again; found by an audit). Now the wait is retried with a
/// fresh submission; a callback that keeps panicking past the retries (8) still ends in the
/// abort, as wgpu refusing to wait does, which this test does not run.
#[test]
fn d7_a_panicking_wgpu_callback_reaches_the_caller_after_the_wait() {
    let Some(interop) = open() else { return };
    let mut p = PinnedBuffer::new(interop.vkhost(), 4096).unwrap();
    p.fill(0xEE);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        interop.scope(|s| -> vkhost_wgpu::Result<()> {
            let b = s.pinned(&mut p)?;
            clear_all(&interop, &b);
            interop.queue().on_submitted_work_done(|| panic!("user callback panics once"));
            Ok(())
        })
    }));
    let msg = r.as_ref().err().and_then(|e| e.downcast_ref::<&str>().copied());
    assert_eq!(msg, Some("user callback panics once"), "the callback's panic did not reach the caller: {:?}", r.map_err(|_| ()));
    assert!(p.iter().all(|&b| b == 0), "the scope's clear did not finish before the scope ended");
    // A callback that panics a few times (re-arming, then stopping) is waited through as well.
    let left = Arc::new(std::sync::atomic::AtomicU32::new(3));
    p.fill(0xEE);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        interop.scope(|s| -> vkhost_wgpu::Result<()> {
            let b = s.pinned(&mut p)?;
            clear_all(&interop, &b);
            fn arm(q: wgpu::Queue, left: Arc<std::sync::atomic::AtomicU32>) {
                let q2 = q.clone();
                q.on_submitted_work_done(move || {
                    if left.fetch_sub(1, Ordering::AcqRel) > 1 {
                        arm(q2, left.clone());
                    }
                    panic!("user callback panics again");
                });
            }
            arm(interop.queue().clone(), left.clone());
            Ok(())
        })
    }));
    assert!(r.is_err(), "the callback's panics were swallowed");
    assert!(p.iter().all(|&b| b == 0), "the second scope's clear did not finish");
}

/// A user's wgpu callback that panics on *another* thread (here a `map_async` callback of a
/// thread that polls the device and survives the panic) while a scope ends: wgpu runs every
/// finished callback of a batch on the thread whose `poll` or `submit` collected them, and a
/// panic drops the rest of the batch without running them. When the scope's own
/// `on_submitted_work_done` flag was in that batch, it was never set, and the scope's end polled
/// forever (a hang at 100% CPU). A race: the other thread must collect the batch between the
/// scope attaching its flag and polling, so the test ends many scopes and fails if one hangs.
#[test]
fn d8_a_callback_panicking_on_another_thread_does_not_hang_the_scope() {
    let Some(interop) = open() else { return };
    let interop = Arc::new(interop);
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (i, stop) = (interop.clone(), stop.clone());
        std::thread::spawn(move || {
            let dev = i.device();
            let m = dev.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: 256,
                usage: wgpu::BufferUsages::MAP_READ,
                mapped_at_creation: false,
            });
            let me = std::thread::current().id();
            let mut panics = 0u64;
            let ran = Arc::new(AtomicBool::new(true));
            let mut first = true;
            while !stop.load(Ordering::Acquire) {
                if ran.swap(false, Ordering::AcqRel) {
                    if !std::mem::take(&mut first) {
                        m.unmap();
                    }
                    let ran = ran.clone();
                    m.slice(..).map_async(wgpu::MapMode::Read, move |_| {
                        ran.store(true, Ordering::Release);
                        if std::thread::current().id() == me {
                            panic!("the poller's map callback panics");
                        }
                    });
                }
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dev.poll(wgpu::Maintain::Poll))).is_err() {
                    panics += 1;
                }
            }
            panics
        })
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = {
        let i = interop.clone();
        std::thread::spawn(move || {
            let mut p = PinnedBuffer::new(i.vkhost(), 4096).unwrap();
            for n in 0..3000 {
                i.scope(|s| -> vkhost_wgpu::Result<()> {
                    let b = s.pinned(&mut p)?;
                    clear_all(&i, &b);
                    Ok(())
                })
                .unwrap();
                if tx.send(n).is_err() {
                    return;
                }
            }
        })
    };
    let mut done = 0;
    loop {
        match rx.recv_timeout(std::time::Duration::from_secs(20)) {
            Ok(n) => done = n + 1,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("a scope's end hung after {done} scopes (its flag dropped by a panic on the poller thread)")
            }
        }
    }
    worker.join().unwrap();
    stop.store(true, Ordering::Release);
    let panics = poller.join().unwrap();
    eprintln!("{done} scopes ended; the poller's callback panicked {panics} times");
    assert_eq!(done, 3000);
}
