//! Foundation tests on a real device (lavapipe in CI), validation on, zero errors asserted.

mod common;
use common::*;
use vkhost::{Device, DeviceType, Error, OpenOptions};

#[test]
fn enumerate_reports_facts() {
    init_log();
    let infos = vkhost::devices().expect("devices()");
    assert!(!infos.is_empty(), "no Vulkan device: run scripts/setup");
    for (i, d) in infos.iter().enumerate() {
        assert_eq!(d.index, i);
        assert!(!d.name.is_empty());
        assert!(!d.memory_types.is_empty() && !d.memory_heaps.is_empty());
        assert!(d.queue_families.iter().any(|f| f.count > 0));
        assert!(d.api_version.major >= 1);
    }
    if let Some(lvp) = infos.iter().find(|d| d.name.contains("llvmpipe")) {
        assert_eq!(lvp.device_type, DeviceType::Cpu);
        assert_eq!(lvp.host_import_alignment, Some(4096));
        assert_eq!(lvp.host_registration(), Ok(4096));
        assert!(!lvp.driver_name.is_empty());
    }
}

#[test]
fn open_same_index_twice_gives_distinct_devices() {
    let a = device().unwrap();
    let b = Device::open_with(a.info().index, &opts()).unwrap();
    assert_ne!(a.id(), b.id());
    assert_eq!(a.info(), b.info());
    let ida = a.id();
    b.destroy().unwrap();
    assert_eq!(b.validation_errors(), 0);
    // Ids are never reused, even after destroy.
    let c = Device::open_with(a.info().index, &opts()).unwrap();
    assert!(c.id() != ida && c.id() != b.id());
    c.destroy().unwrap();
}

#[test]
fn device_is_clone_send_sync() {
    fn assert_traits<T: Clone + Send + Sync>() {}
    fn assert_send_sync<T: Send + Sync>() {}
    assert_traits::<Device>();
    assert_send_sync::<vkhost::DeviceBuffer>();
    assert_send_sync::<vkhost::PinnedBuffer>();
    assert_send_sync::<vkhost::Registration<'static>>();
    assert_send_sync::<vkhost::Stream>();
    assert_send_sync::<vkhost::Event>();
    assert_send_sync::<vkhost::Pending<'static>>();
    assert_send_sync::<Error>();
}

#[test]
fn destroy_is_idempotent_and_final() {
    let d = device().unwrap();
    let buf = d.alloc_buffer(4096).unwrap();
    buf.write(0, &[1, 2, 3]).unwrap();
    d.destroy().unwrap();
    d.destroy().unwrap();
    assert!(d.is_destroyed());
    assert_eq!(d.alloc_buffer(16).unwrap_err(), Error::DeviceDestroyed);
    // The buffer outlived its device: inert.
    assert_eq!(buf.write(0, &[1]).unwrap_err(), Error::DeviceDestroyed);
    assert_eq!(buf.read(0, &mut [0]).unwrap_err(), Error::DeviceDestroyed);
    assert_eq!(buf.write(0, &[]).unwrap_err(), Error::DeviceDestroyed);
    assert!(matches!(d.raw(), Err(Error::DeviceDestroyed)));
    assert_eq!(d.live_objects(), vkhost::LiveObjects::default());
    drop(buf); // does nothing
}

#[test]
fn clones_share_state_and_last_drop_destroys() {
    let d = device().unwrap();
    let d2 = d.0.clone();
    assert_eq!(d.id(), d2.id());
    d2.destroy().unwrap();
    assert!(d.is_destroyed());

    // Dropping every handle destroys: the validation layer would report leaked objects
    // at vkDestroyDevice, and the counters of a clone kept elsewhere would be nonzero.
    let e = Device::open_default_with(&opts()).unwrap();
    let buf = e.alloc_buffer(1024).unwrap();
    buf.write(0, &[9; 1024]).unwrap();
    drop(e);
    // The buffer still holds the device: it works.
    let mut out = [0u8; 1024];
    buf.read(0, &mut out).unwrap();
    assert_eq!(out, [9; 1024]);
    let dev = buf.device();
    let before = dev.live_objects();
    drop(buf);
    let after = dev.live_objects();
    assert_eq!(after.buffers, before.buffers - 1);
    assert_eq!(after.memories, before.memories - 1);
    assert_eq!(dev.validation_errors(), 0);
}

#[test]
fn raw_handles_usable() {
    let d = device().unwrap();
    let raw = d.raw().unwrap();
    // SAFETY: plain queries on live handles.
    let props = unsafe { raw.instance.get_physical_device_properties(raw.physical_device) };
    assert_eq!(props.device_id, d.info().device_id);
    // SAFETY: a plain query on live handles.
    let fams = unsafe { raw.instance.get_physical_device_queue_family_properties(raw.physical_device) };
    assert!(fams[raw.compute_family as usize].queue_flags.contains(vkhost::vk::QueueFlags::COMPUTE));
}

#[test]
fn from_raw_borrowed_leaves_device_to_caller() {
    let d = device().unwrap();
    let raw = d.raw().unwrap();
    // SAFETY: the handles are live and outlive `wrapped`, whose destroy runs first; vkhost
    // does not destroy a borrowed device.
    let wrapped = unsafe { Device::from_raw(raw, vkhost::Ownership::Borrowed, d.info().host_import_alignment.is_some(), &opts()) }.unwrap();
    assert_ne!(wrapped.id(), d.id());
    let b = wrapped.alloc_buffer(64).unwrap();
    b.write(3, &[5; 10]).unwrap();
    let mut out = [0; 10];
    b.read(3, &mut out).unwrap();
    assert_eq!(out, [5; 10]);
    drop(b);
    wrapped.destroy().unwrap();
    // The original device is untouched and still works.
    let b = d.alloc_buffer(64).unwrap();
    b.write(0, &[1; 64]).unwrap();
}

#[test]
fn open_bad_index_is_no_device() {
    init_log();
    assert_eq!(Device::open_with(10_000, &opts()).unwrap_err(), Error::NoDevice);
}

#[test]
fn env_device_override() {
    init_log();
    // Runs in its own process? No: env is process-wide, so only read it, never set it here.
    if let Ok(v) = std::env::var("VKHOST_DEVICE") {
        let d = Device::open_default_with(&opts()).unwrap();
        assert_eq!(d.info().index.to_string(), v);
        d.destroy().unwrap();
    } else {
        eprintln!("VKHOST_DEVICE unset: the override is covered by the CLI test");
    }
}

/// The zero-error assertions in every device test mean something only if the messenger counts:
/// make one deliberate mistake through the interop handles and see it counted.
#[test]
fn validation_layer_counts_errors() {
    init_log();
    let d = Device::open_default_with(&opts()).unwrap();
    assert_eq!(d.validation_errors(), 0);
    let raw = d.raw().unwrap();
    // Empty usage violates VUID-VkBufferCreateInfo-None-09500 / usage-requiredbitmask; drivers
    // accept it harmlessly (a size-0 buffer crashed the NVIDIA driver).
    let info = vkhost::vk::BufferCreateInfo::default().size(256).usage(vkhost::vk::BufferUsageFlags::empty());
    // SAFETY: deliberately invalid create info for the layer to catch; the buffer is destroyed
    // right after and never bound or used.
    if let Ok(b) = unsafe { raw.device.create_buffer(&info, None) } {
        // SAFETY: the buffer was created just above, never bound or used.
        unsafe { raw.device.destroy_buffer(b, None) };
    }
    assert!(d.validation_errors() >= 1, "the validation layer did not report a size-0 buffer");
    d.destroy().unwrap();
}

/// Whether VK_LAYER_ENABLES turns synchronization validation on (`make test` sets it); if not,
/// prints why the test skips (`why` ends the line).
fn sync_validation_on(why: &str) -> bool {
    let on = std::env::var("VK_LAYER_ENABLES").unwrap_or_default().contains("SYNCHRONIZATION_VALIDATION");
    if !on {
        eprintln!("SKIPPED: VK_LAYER_ENABLES does not enable synchronization validation (make test sets it){why}");
    }
    on
}

/// With synchronization validation on (VK_LAYER_ENABLES, as `make test` sets it), a planted
/// write-after-write hazard must be reported, or "zero hazards" proves nothing.
#[test]
fn sync_validation_reports_planted_hazard() {
    init_log();
    if !sync_validation_on("") {
        return;
    }
    use vkhost::vk;
    let d = Device::open_default_with(&opts()).unwrap();
    let a = d.alloc_buffer(4096).unwrap();
    let b = d.alloc_buffer(4096).unwrap();
    let raw = d.raw().unwrap();
    let dev = &raw.device;
    // SAFETY: objects created and destroyed here, on an idle queue that vkhost does not use
    // concurrently in this test; the hazard is deliberate (two copies to the same bytes without
    // a barrier), harmless to the driver.
    unsafe {
        let pool = dev.create_command_pool(&vk::CommandPoolCreateInfo::default().queue_family_index(raw.compute_family), None).unwrap();
        let cmd =
            dev.allocate_command_buffers(&vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1)).unwrap()[0];
        dev.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).unwrap();
        let r = vk::BufferCopy { src_offset: 0, dst_offset: 0, size: 4096 };
        dev.cmd_copy_buffer(cmd, a.raw(), b.raw(), &[r]);
        dev.cmd_copy_buffer(cmd, a.raw(), b.raw(), &[r]);
        dev.end_command_buffer(cmd).unwrap();
        let q = dev.get_device_queue(raw.compute_family, raw.compute_queue_index);
        let cmds = [cmd];
        dev.queue_submit(q, &[vk::SubmitInfo::default().command_buffers(&cmds)], vk::Fence::null()).unwrap();
        dev.queue_wait_idle(q).unwrap();
        dev.destroy_command_pool(pool, None);
    }
    assert!(d.validation_errors() >= 1, "synchronization validation did not report a WAW hazard");
    drop((a, b));
    d.destroy().unwrap();
}

/// The layer's own fault is not a validation error: with synchronization validation on,
/// layer 1.3.239 stalls a vkWaitSemaphores that another thread's host signal wakes, for 10 s,
/// and reports `UNASSIGNED-VkSemaphore-state-timeout` ("most likely a validation bug"); it did
/// so three times in CI under load. Provoked here as in a plain program: both threads on one CPU, the
/// signaller at the lowest priority, so the woken waiter runs first. Whether or not a round
/// stalls, the error count stays 0 and every stall is counted as the layer's fault; a layer
/// that names the report otherwise fails here. Up to 6 rounds, stopping at the first stall
/// (about 11 s then).
#[test]
fn the_layers_own_semaphore_timeout_is_not_a_validation_error() {
    init_log();
    if !sync_validation_on(", which the stall needs") {
        return;
    }
    use std::time::{Duration, Instant};
    use vkhost::vk;
    fn pin_to_cpu0(nice: i32) {
        // SAFETY: plain syscalls on this thread's own affinity and priority.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            libc::setpriority(libc::PRIO_PROCESS, libc::syscall(libc::SYS_gettid) as libc::id_t, nice);
        }
    }
    let d = Device::open_default_with(&opts()).unwrap();
    let raw = d.raw().unwrap();
    let mut stalls = 0;
    for _ in 0..6 {
        let dev = raw.device.clone();
        let mut kind = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
        // SAFETY: a valid create info; destroyed below, after both threads are done with it.
        let sem = unsafe { dev.create_semaphore(&vk::SemaphoreCreateInfo::default().push_next(&mut kind), None) }.unwrap();
        let waiter = {
            let dev = dev.clone();
            std::thread::spawn(move || {
                pin_to_cpu0(0);
                let t = Instant::now();
                let (s, v) = ([sem], [1u64]);
                // SAFETY: a live timeline semaphore; signalled by the other thread.
                let r = unsafe { dev.wait_semaphores(&vk::SemaphoreWaitInfo::default().semaphores(&s).values(&v), 30_000_000_000) };
                (r, t.elapsed())
            })
        };
        let signaller = {
            let dev = dev.clone();
            std::thread::spawn(move || {
                pin_to_cpu0(19);
                std::thread::sleep(Duration::from_millis(100));
                // SAFETY: a live timeline semaphore, value increasing.
                unsafe { dev.signal_semaphore(&vk::SemaphoreSignalInfo::default().semaphore(sem).value(1)) }
            })
        };
        assert_eq!(signaller.join().unwrap(), Ok(()));
        let (r, took) = waiter.join().unwrap();
        assert_eq!(r, Ok(()));
        // SAFETY: both threads are done with it.
        unsafe { dev.destroy_semaphore(sem, None) };
        if took > Duration::from_secs(5) {
            stalls += 1;
            break;
        }
    }
    eprintln!(
        "{stalls} round(s) stalled in the layer; layer faults {}, errors {} (last {:?})",
        d.validation_layer_faults(),
        d.validation_errors(),
        d.last_validation_error()
    );
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
    assert_eq!(d.validation_layer_faults(), stalls, "a stall is counted as the layer's fault, and nothing else is");
    drop(raw);
    d.destroy().unwrap();
}

/// The facts of the device `device()` opens.
fn default_info() -> vkhost::DeviceInfo {
    device().unwrap().info().clone()
}

fn staging(chunk: usize, slots: usize) -> OpenOptions {
    OpenOptions { staging_chunk: chunk, staging_slots: slots, ..opts() }
}

/// Options refused by `validate`, by `open_with` (before vkCreateDevice) and by `from_raw`.
fn assert_refused(o: &OpenOptions, info: &vkhost::DeviceInfo, why: &str) {
    match o.validate(info) {
        Err(Error::InvalidArgument { reason }) => assert!(reason.contains(why), "reason {reason:?} lacks {why:?}"),
        r => panic!("validate accepted chunk {} × slots {}: {r:?}", o.staging_chunk, o.staging_slots),
    }
    match Device::open_with(info.index, o) {
        Err(Error::InvalidArgument { reason }) => assert!(reason.contains(why), "reason {reason:?} lacks {why:?}"),
        r => panic!("open_with accepted chunk {} × slots {}: {r:?}", o.staging_chunk, o.staging_slots),
    }
}

#[test]
fn staging_options_wrapping_product_refused() {
    let info = default_info();
    // The soundness issue's case: u64::MAX/3 + 1 bytes × 3 slots wrapped to a 2-byte staging
    // buffer that the open-time probe then overran by 4 KiB. Not a page multiple either.
    let chunk = (u64::MAX / 3 + 1) as usize;
    assert_eq!((chunk as u64).wrapping_mul(3), 2);
    assert_refused(&staging(chunk, 3), &info, "staging_chunk");
    // The same product, page-aligned: only the checked multiplication catches it (it wraps to 8 KiB).
    let chunk = ((u64::MAX / 3 + 1) as usize).next_multiple_of(4096);
    assert_eq!((chunk as u64).wrapping_mul(3), 8192);
    assert_refused(&staging(chunk, 3), &info, "maxMemoryAllocationSize");
    let mut unlimited = info.clone();
    unlimited.max_memory_allocation_size = u64::MAX;
    assert_refused_by_validate(&staging(chunk, 3), &unlimited, "more than 2^64");
}

fn assert_refused_by_validate(o: &OpenOptions, info: &vkhost::DeviceInfo, why: &str) {
    match o.validate(info) {
        Err(Error::InvalidArgument { reason }) => assert!(reason.contains(why), "reason {reason:?} lacks {why:?}"),
        r => panic!("validate accepted chunk {} × slots {}: {r:?}", o.staging_chunk, o.staging_slots),
    }
}

#[test]
fn staging_options_zero_refused() {
    let info = default_info();
    assert_refused(&staging(0, 3), &info, "staging_chunk");
    assert_refused(&staging(16 << 20, 0), &info, "staging_slots");
    assert_refused(&staging(0, 0), &info, "staging_chunk");
}

#[test]
fn staging_chunk_must_be_page_multiple() {
    let info = default_info();
    assert_refused(&staging(4095, 3), &info, "multiple of 4096");
    assert_refused(&staging(4096 + 512, 3), &info, "multiple of 4096");
    assert_refused(&staging((16 << 20) + 1, 3), &info, "multiple of 4096");
    assert!(staging(4096, 3).validate(&info).is_ok());
    assert!(staging(3 * 4096, 3).validate(&info).is_ok());
}

#[test]
fn staging_slots_bounded() {
    let info = default_info();
    assert_eq!(OpenOptions::STAGING_SLOTS, 2..=16);
    // One slot: streams would silently take two, so it is refused rather than changed.
    assert_refused(&staging(1 << 20, 1), &info, "staging_slots");
    assert_refused(&staging(1 << 20, 17), &info, "staging_slots");
    assert_refused(&staging(1 << 20, usize::MAX), &info, "staging_slots");
    assert!(staging(1 << 20, 2).validate(&info).is_ok());
    assert!(staging(1 << 20, 16).validate(&info).is_ok());
}

#[test]
fn staging_over_allocation_limit_refused() {
    let mut info = default_info();
    let max = info.max_memory_allocation_size;
    // 16 slots of the smallest page-multiple chunk whose 16 copies pass the device's limit.
    if let Some(chunk) = (max / 16 / 4096 + 1).checked_mul(4096).filter(|c| c.checked_mul(16).is_some()) {
        assert!(chunk * 16 > max);
        assert_refused(&staging(chunk as usize, 16), &info, "maxMemoryAllocationSize");
    }
    // Against a small limit, exactly at it is fine and one page over is not.
    info.max_memory_allocation_size = 64 << 20;
    assert!(staging(16 << 20, 4).validate(&info).is_ok());
    assert_refused_by_validate(&staging((16 << 20) + 4096, 4), &info, "maxMemoryAllocationSize");
    assert_refused_by_validate(&staging(16 << 20, 5), &info, "maxMemoryAllocationSize");
}

#[test]
fn from_raw_refuses_bad_options_before_assembling() {
    let d = device().unwrap();
    let raw = d.raw().unwrap();
    let emh = d.info().host_import_alignment.is_some();
    for bad in [staging(0, 3), staging(4096, 1), staging(4097, 3), staging(1 << 62, 4)] {
        // SAFETY: the handles are live; a refused wrap creates and destroys nothing (Borrowed).
        let r = unsafe { Device::from_raw(raw.clone(), vkhost::Ownership::Borrowed, emh, &bad) };
        assert!(matches!(r, Err(Error::InvalidArgument { .. })), "from_raw accepted {bad:?}: {r:?}");
    }
    // The device is untouched.
    let b = d.alloc_buffer(4096).unwrap();
    b.write(0, &[3; 4096]).unwrap();
}

/// Queues the physical device cannot have are refused before anything touches them: a family
/// that does not exist or cannot compute, an index past its family's count, a queue named twice.
/// Before: the open-time probe submitted to a null queue (a segfault in the driver; the C ABI's
/// `vkhost_device_from_vulkan` reached it with a bad family number).
#[test]
fn from_raw_refuses_queues_the_device_cannot_have() {
    let d = device().unwrap();
    let raw = d.raw().unwrap();
    let emh = d.info().host_import_alignment.is_some();
    let fams = &d.info().queue_families;
    let compute = raw.compute_family;
    let count = fams.iter().find(|f| f.index == compute).map(|f| f.count).unwrap();
    let no_compute = fams.iter().find(|f| !f.flags.contains(vkhost::vk::QueueFlags::COMPUTE)).map(|f| f.index);
    let mut bad = vec![
        vkhost::RawDevice { compute_family: 99, ..raw.clone() },
        vkhost::RawDevice { compute_queue_index: count, ..raw.clone() },
        vkhost::RawDevice { copy_family: Some(99), copy_queue_indices: vec![0], ..raw.clone() },
        vkhost::RawDevice { copy_family: Some(compute), copy_queue_indices: vec![count], ..raw.clone() },
        vkhost::RawDevice { copy_family: Some(compute), copy_queue_indices: vec![raw.compute_queue_index], ..raw.clone() },
    ];
    if let Some(f) = no_compute {
        bad.push(vkhost::RawDevice { compute_family: f, ..raw.clone() });
    }
    for r in bad {
        let what = format!("{:?} {:?} {:?}", (r.compute_family, r.compute_queue_index), r.copy_family, r.copy_queue_indices);
        // SAFETY: the handles are live; a refused wrap creates and destroys nothing (Borrowed).
        let got = unsafe { Device::from_raw(r, vkhost::Ownership::Borrowed, emh, &opts()) };
        assert!(matches!(got, Err(Error::InvalidArgument { .. })), "from_raw accepted queues {what}: {got:?}");
    }
    let b = d.alloc_buffer(4096).unwrap();
    b.write(0, &[3; 4096]).unwrap();
}

#[test]
fn default_and_boundary_options_open() {
    let info = default_info();
    assert!(OpenOptions::default().validate(&info).is_ok());
    let d = device_with(opts()).unwrap();
    assert_eq!((d.options().staging_chunk, d.options().staging_slots), (16 << 20, 3));
    drop(d);
    // The smallest staging (two 4 KiB slots): a 64 KiB staged copy goes through 16 chunks.
    let d = device_with(staging(4096, 2)).unwrap();
    let buf = d.alloc_buffer(64 << 10).unwrap();
    let want = pattern(64 << 10, 7);
    buf.write(0, &want).unwrap();
    let mut out = vec![0u8; 64 << 10];
    buf.read(0, &mut out).unwrap();
    assert!(out == want);
    // A stream's staging ring with the same two slots: upload and download through it.
    let st = d.stream().unwrap();
    let up = pattern(64 << 10, 8);
    st.upload(&up, &buf, 0).unwrap().wait().unwrap();
    let mut back = vec![0u8; 64 << 10];
    st.download(&buf, 0, &mut back).unwrap().wait().unwrap();
    assert!(back == up);
}

/// The copy-queue measurement runs on any device with queues, with validation clean, and
/// copies of both size classes still round-trip on whatever queue it chose.
#[test]
fn measured_copy_queues_carry_both_size_classes() {
    let Some(d) = device() else { return };
    let has_copy_engines = d.info().transfer_family().is_some();
    let before = d.copy_queues();
    if !has_copy_engines {
        // Nothing to choose from: every class on the compute queue, not measured at open.
        assert_eq!(before, vkhost::CopyQueues::fixed(vkhost::QueueKind::Compute));
    }
    let c = d.measure_copy_queues().unwrap();
    assert_eq!(d.copy_queues(), c);
    let (copy, compute) = c.measured.expect("measure_copy_queues returns its figures");
    for f in [copy, compute] {
        assert!(f.bulk_to_device_gbps > 0.0 && f.bulk_to_host_gbps > 0.0, "{f:?}");
        assert!(f.small_to_device_us > 0.0 && f.small_to_host_us > 0.0, "{f:?}");
    }
    if !has_copy_engines {
        assert_eq!(c.bulk_to_device, vkhost::QueueKind::Compute);
        assert_eq!(c.small_to_host, vkhost::QueueKind::Compute);
    }
    for n in [4096, vkhost::CopyQueues::BULK_MIN as usize + 4096] {
        let buf = d.alloc_buffer(n).unwrap();
        let want = pattern(n, 9);
        buf.write(0, &want).unwrap();
        let mut got = vec![0u8; n];
        buf.read(0, &mut got).unwrap();
        assert!(got == want, "round trip of {n} bytes");
        let mut p = vkhost::PinnedBuffer::new(&d, n).unwrap();
        p.copy_from_slice(&want);
        let buf2 = d.alloc_buffer(n).unwrap();
        buf2.write(0, &p).unwrap();
        p.fill(0);
        buf2.read(0, &mut p).unwrap();
        assert!(p[..] == want[..], "direct round trip of {n} bytes");
    }
}

/// `copy_queue: Compute` fixes every class on the compute queue, whatever a measurement says.
#[test]
fn compute_copy_queue_option_fixes_every_class() {
    let Some(d) = device_with(OpenOptions { copy_queue: vkhost::QueueKind::Compute, ..opts() }) else { return };
    assert_eq!(d.copy_queues(), vkhost::CopyQueues::fixed(vkhost::QueueKind::Compute));
    let buf = d.alloc_buffer(8192).unwrap();
    let want = pattern(8192, 3);
    buf.write(0, &want).unwrap();
    let mut got = vec![0u8; 8192];
    buf.read(0, &mut got).unwrap();
    assert!(got == want);
}

/// Synchronous copies resubmit a command buffer they recorded for the same copy, but never
/// after a buffer was destroyed: a new buffer may then reuse the old one's handle, and the old
/// command buffer would name a destroyed object (validation reports it; the copy would land in
/// freed memory).
#[test]
fn recorded_copies_are_not_reused_across_a_buffer_destroy() {
    let Some(d) = device() else { return };
    let n = 4096;
    let mut p = vkhost::PinnedBuffer::new(&d, n).unwrap();
    let mut back = vkhost::PinnedBuffer::new(&d, n).unwrap();
    for round in 0..40u8 {
        let buf = d.alloc_buffer(n).unwrap();
        for rep in 0..3u8 {
            p.fill(round ^ rep.wrapping_mul(31) | 1);
            // The same copy each time: the second and third reuse the recorded commands.
            // SAFETY: the pinned blocks outlive the calls.
            unsafe { vkhost::host::copy_to_device(&d, p.as_ptr(), n, &buf, 0) }.unwrap();
            // SAFETY: as above.
            unsafe { vkhost::host::copy_to_host(&d, &buf, 0, back.as_mut_ptr(), n) }.unwrap();
            assert!(back[..] == p[..], "round {round}, rep {rep}");
        }
        drop(buf);
    }
    drop((p, back));
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// `copy_floor` times what it was asked, on the queue the choice gives, with validation clean
/// (its d2h copy's HOST_READ barrier included), refuses nothing to time, and leaves the copy
/// context it borrowed fit for copies: a pinned round trip of the same size before and after
/// (whose recorded commands the floor's recording replaced) still carries its bytes.
#[test]
fn copy_floor_times_the_chosen_queue_and_leaves_copies_working() {
    let Some(d) = device() else { return };
    let n = 4096;
    let mut p = vkhost::PinnedBuffer::new(&d, n).unwrap();
    let mut back = vkhost::PinnedBuffer::new(&d, n).unwrap();
    let buf = d.alloc_buffer(n).unwrap();
    let round_trip = |p: &mut vkhost::PinnedBuffer, back: &mut vkhost::PinnedBuffer, seed: u8| {
        p.fill(seed);
        buf.write(0, p).unwrap();
        back.fill(0);
        buf.read(0, back).unwrap();
        assert!(back[..] == p[..], "round trip {seed}");
    };
    round_trip(&mut p, &mut back, 1);
    let objects = d.live_objects();
    for to_device in [true, false] {
        for len in [4096u64, 3 << 20] {
            let f = d.copy_floor(to_device, len, 7).unwrap();
            assert_eq!((f.len, f.to_device, f.times.len()), (len, to_device, 7), "{f:?}");
            assert_eq!(f.queue, d.copy_queues().queue_for(to_device, len), "{f:?}");
            assert!(f.min() > std::time::Duration::ZERO && f.min() <= f.median(), "{f:?}");
            round_trip(&mut p, &mut back, 2 + len as u8 + to_device as u8);
        }
    }
    for (len, iters) in [(0, 5), (4096, 0), (4096, vkhost::CopyFloor::MAX_ITERS + 1), (4096, usize::MAX)] {
        match d.copy_floor(true, len, iters) {
            Err(Error::InvalidArgument { .. }) => {}
            other => panic!("copy_floor({len}, {iters}): {other:?}"),
        }
    }
    assert!(matches!(d.copy_floor(false, d.info().max_memory_allocation_size + 1, 1), Err(Error::InvalidArgument { .. })));
    let now = d.live_objects();
    assert_eq!((now.buffers, now.memories), (objects.buffers, objects.memories), "the floor's buffers are released");
    drop((p, back, buf));
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// With `copy_queue: Compute` every synchronous copy takes the compute queue, and so does the
/// floor, whatever a later `measure_copy_queues` chose.
#[test]
fn copy_floor_follows_the_copy_queue_option() {
    let Some(d) = device_with(OpenOptions { copy_queue: vkhost::QueueKind::Compute, ..opts() }) else { return };
    d.measure_copy_queues().unwrap();
    for to_device in [true, false] {
        assert_eq!(d.copy_floor(to_device, 4096, 3).unwrap().queue, vkhost::QueueKind::Compute);
    }
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}
