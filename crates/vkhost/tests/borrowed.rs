//! Borrowed-device mode: the test owns its instance, VkDevice, queue, command pool, device
//! buffer and semaphores (ash, validation layer on, errors counted by its own messenger);
//! vkhost wraps the device without queues, registers host memory, and records copies into the
//! test's command buffer with `host::record_copy`. Destroy order: vkhost, then the test's
//! objects. Also `Device::from_raw` over the same kind of device (made without
//! VK_KHR_push_descriptor), where vkhost submits to the caller's queue and launches kernels
//! with descriptor sets.

mod common;
use common::*;

use std::ffi::{CStr, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use vkhost::ash::{self, vk};
use vkhost::host::{self, Direction};
use vkhost::{BorrowedDevice, Device, Error};

const VALIDATION: &CStr = c"VK_LAYER_KHRONOS_validation";

struct Counts {
    errors: AtomicU64,
    last: std::sync::Mutex<Option<String>>,
}

unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // Never unwind across the FFI boundary.
    let _ = std::panic::catch_unwind(|| {
        if !severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
            return;
        }
        // SAFETY: `user` is the `Counts` the messenger was created with, alive until it is
        // destroyed; `data` is valid for the callback.
        let (counts, msg) = unsafe {
            let c = &*(user as *const Counts);
            let m = (*data).message_as_c_str().map(|m| m.to_string_lossy().into_owned()).unwrap_or_default();
            (c, m)
        };
        eprintln!("validation error: {msg}");
        counts.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut g) = counts.last.lock() {
            *g = Some(msg);
        }
    });
    vk::FALSE
}

/// What the "runtime" owns: everything vkhost must not create or destroy.
struct Caller {
    entry: ash::Entry,
    instance: ash::Instance,
    debug: ash::ext::debug_utils::Instance,
    messenger: vk::DebugUtilsMessengerEXT,
    counts: Box<Counts>,
    pd: vk::PhysicalDevice,
    device: ash::Device,
    /// The compute family of `queue`.
    family: u32,
    queue: vk::Queue,
    pool: vk::CommandPool,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    sems: Vec<vk::Semaphore>,
}

const BUF_LEN: u64 = 1 << 20;

impl Caller {
    /// Instance with validation, the first device offering VK_EXT_external_memory_host and
    /// timeline semaphores, one queue of a compute family, a pool and a device-local buffer.
    fn new() -> Option<Caller> {
        init_log();
        let skip = std::env::var("VKHOST_SKIP_NO_DEVICE").as_deref() == Ok("1");
        let fail = |why: String| -> Option<Caller> {
            if skip {
                eprintln!("SKIPPED: {why}; VKHOST_SKIP_NO_DEVICE=1 allows skipping");
                return None;
            }
            panic!("{why}. Run scripts/setup (installs lavapipe and the validation layer).");
        };
        // SAFETY: loading libvulkan; nothing else is called through it yet.
        let entry = match unsafe { ash::Entry::load() } {
            Ok(e) => e,
            Err(e) => return fail(format!("no Vulkan loader: {e}")),
        };
        // SAFETY: plain enumeration.
        let layers = unsafe { entry.enumerate_instance_layer_properties() }.unwrap_or_default();
        if !layers.iter().any(|l| l.layer_name_as_c_str() == Ok(VALIDATION)) {
            return fail("the Khronos validation layer is not installed".into());
        }
        let counts = Box::new(Counts { errors: AtomicU64::new(0), last: std::sync::Mutex::new(None) });
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
        let layer_names = [VALIDATION.as_ptr()];
        let exts = [ash::ext::debug_utils::NAME.as_ptr()];
        let mut dbg = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING)
            .message_type(
                vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                    | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                    | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
            )
            .pfn_user_callback(Some(on_message))
            .user_data(&*counts as *const Counts as *mut c_void);
        let ici = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layer_names)
            .enabled_extension_names(&exts)
            .push_next(&mut dbg);
        // SAFETY: valid create info; the layer and extension exist.
        let instance = unsafe { entry.create_instance(&ici, None) }.expect("vkCreateInstance");
        let debug = ash::ext::debug_utils::Instance::new(&entry, &instance);
        // SAFETY: `counts` outlives the messenger (destroyed in `destroy` before it is dropped).
        let messenger = unsafe { debug.create_debug_utils_messenger(&dbg, None) }.expect("messenger");
        // SAFETY: the instance is alive.
        let pds = unsafe { instance.enumerate_physical_devices() }.expect("enumerate");
        let pick = pds.iter().copied().find(|&pd| {
            // SAFETY: `pd` belongs to the instance.
            let exts = unsafe { instance.enumerate_device_extension_properties(pd) }.unwrap_or_default();
            let has = exts.iter().any(|e| e.extension_name_as_c_str() == Ok(ash::ext::external_memory_host::NAME));
            let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
            let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f12);
            // SAFETY: as above.
            unsafe { instance.get_physical_device_features2(pd, &mut f2) };
            has && f12.timeline_semaphore == vk::TRUE
        });
        let Some(pd) = pick else {
            // SAFETY: nothing else was created from the instance.
            unsafe {
                debug.destroy_debug_utils_messenger(messenger, None);
                instance.destroy_instance(None);
            }
            return fail("no device with VK_EXT_external_memory_host and timeline semaphores".into());
        };
        // SAFETY: as above.
        let fams = unsafe { instance.get_physical_device_queue_family_properties(pd) };
        let family = fams.iter().position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE)).expect("a compute family") as u32;
        let prio = [1.0f32];
        let qci = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&prio)];
        let dexts = [ash::ext::external_memory_host::NAME.as_ptr()];
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        let dci = vk::DeviceCreateInfo::default().queue_create_infos(&qci).enabled_extension_names(&dexts).push_next(&mut f12);
        // SAFETY: family, extension and feature were checked above.
        let device = unsafe { instance.create_device(pd, &dci, None) }.expect("vkCreateDevice");
        // SAFETY: one queue of `family` was created.
        let queue = unsafe { device.get_device_queue(family, 0) };
        let pci = vk::CommandPoolCreateInfo::default().queue_family_index(family).flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: valid create info.
        let pool = unsafe { device.create_command_pool(&pci, None) }.expect("pool");
        let bci = vk::BufferCreateInfo::default()
            .size(BUF_LEN)
            .usage(vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: valid create info.
        let buffer = unsafe { device.create_buffer(&bci, None) }.expect("buffer");
        // SAFETY: the buffer is alive.
        let req = unsafe { device.get_buffer_memory_requirements(buffer) };
        // SAFETY: as above.
        let props = unsafe { instance.get_physical_device_memory_properties(pd) };
        let ty = (0..props.memory_type_count)
            .filter(|&i| req.memory_type_bits & (1 << i) != 0)
            .max_by_key(|&i| props.memory_types[i as usize].property_flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL))
            .expect("a memory type");
        let mai = vk::MemoryAllocateInfo::default().allocation_size(req.size).memory_type_index(ty);
        // SAFETY: valid allocate info; then a fresh buffer bound to fresh memory.
        let memory = unsafe { device.allocate_memory(&mai, None) }.expect("memory");
        // SAFETY: as above.
        unsafe { device.bind_buffer_memory(buffer, memory, 0) }.expect("bind");
        Some(Caller { entry, instance, debug, messenger, counts, pd, device, family, queue, pool, buffer, memory, sems: Vec::new() })
    }

    /// Wraps the device in vkhost's borrowed mode.
    fn wrap(&self) -> Device {
        self.wrap_with(&opts())
    }

    /// [`Caller::wrap`] with options.
    fn wrap_with(&self, o: &vkhost::OpenOptions) -> Device {
        let raw = BorrowedDevice {
            entry: self.entry.clone(),
            instance: self.instance.clone(),
            physical_device: self.pd,
            device: self.device.clone(),
            external_memory_host: true,
        };
        // SAFETY: the handles are valid and outlive the vkhost device (each test destroys it
        // before `Caller::destroy`).
        let d = unsafe { Device::from_raw_borrowed(raw, o) }.expect("from_raw_borrowed");
        assert!(d.is_borrowed());
        assert!(d.host_registration().is_ok(), "registration: {:?}", d.host_registration());
        d
    }

    fn timeline(&mut self) -> vk::Semaphore {
        let mut ti = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(0);
        let si = vk::SemaphoreCreateInfo::default().push_next(&mut ti);
        // SAFETY: timelineSemaphore is enabled.
        let s = unsafe { self.device.create_semaphore(&si, None) }.expect("semaphore");
        self.sems.push(s);
        s
    }

    fn begin(&self) -> vk::CommandBuffer {
        let ai =
            vk::CommandBufferAllocateInfo::default().command_pool(self.pool).level(vk::CommandBufferLevel::PRIMARY).command_buffer_count(1);
        // SAFETY: the pool is ours, used by this thread only.
        let cmd = unsafe { self.device.allocate_command_buffers(&ai) }.expect("cmd")[0];
        let bi = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: fresh command buffer.
        unsafe { self.device.begin_command_buffer(cmd, &bi) }.expect("begin");
        cmd
    }

    /// Ends `cmd` and submits it, waiting on `wait` (timeline, value) first if given, and
    /// signalling `signal` at `value`.
    fn submit(&self, cmd: vk::CommandBuffer, wait: Option<(vk::Semaphore, u64)>, signal: vk::Semaphore, value: u64) {
        submit_on(&self.device, self.queue, cmd, wait, signal, value)
    }

    fn wait(&self, sem: vk::Semaphore, value: u64) {
        let (s, v) = ([sem], [value]);
        let info = vk::SemaphoreWaitInfo::default().semaphores(&s).values(&v);
        // SAFETY: the semaphore is alive.
        unsafe { self.device.wait_semaphores(&info, u64::MAX) }.expect("wait");
    }

    fn value(&self, sem: vk::Semaphore) -> u64 {
        // SAFETY: the semaphore is alive.
        unsafe { self.device.get_semaphore_counter_value(sem) }.expect("counter")
    }

    /// Destroys everything, after vkhost's destroy; asserts zero validation errors.
    fn destroy(self) {
        // SAFETY: all work was waited for (each test waits its last submission), vkhost's
        // device is destroyed, so the caller's objects go in reverse order of creation.
        unsafe {
            self.device.device_wait_idle().expect("idle");
            for s in &self.sems {
                self.device.destroy_semaphore(*s, None);
            }
            self.device.destroy_command_pool(self.pool, None);
            self.device.destroy_buffer(self.buffer, None);
            self.device.free_memory(self.memory, None);
            self.device.destroy_device(None);
            self.debug.destroy_debug_utils_messenger(self.messenger, None);
            self.instance.destroy_instance(None);
        }
        let n = self.counts.errors.load(Ordering::Relaxed);
        assert_eq!(n, 0, "validation errors; last: {:?}", self.counts.last.lock().map(|g| g.clone()));
    }
}

/// Ends `cmd` and submits it on `queue`, waiting on `wait` (timeline, value) first if given,
/// and signalling `signal` at `value`.
fn submit_on(
    device: &ash::Device,
    queue: vk::Queue,
    cmd: vk::CommandBuffer,
    wait: Option<(vk::Semaphore, u64)>,
    signal: vk::Semaphore,
    value: u64,
) {
    // SAFETY: `cmd` is recording.
    unsafe { device.end_command_buffer(cmd) }.expect("end");
    let cmds = [cmd];
    let sig = [signal];
    let sig_v = [value];
    let (wsem, wval): (Vec<_>, Vec<_>) = wait.into_iter().unzip();
    let stages = vec![vk::PipelineStageFlags::TRANSFER; wsem.len()];
    let mut tsi = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&sig_v).wait_semaphore_values(&wval);
    let si = vk::SubmitInfo::default()
        .command_buffers(&cmds)
        .signal_semaphores(&sig)
        .wait_semaphores(&wsem)
        .wait_dst_stage_mask(&stages)
        .push_next(&mut tsi);
    // SAFETY: the queue is ours, used by one thread at a time.
    unsafe { device.queue_submit(queue, &[si], vk::Fence::null()) }.expect("submit");
}

/// A wrapped device does not claim the validation layer vkhost did not enable: its instance is
/// the caller's and vkhost counts nothing there, so `validation: true` does not apply and
/// `validation_enabled` answers false (it answered true, with `validation_errors` 0 whatever
/// happened: a check relying on it passed without validating; found by an audit).
#[test]
fn a_wrapped_device_does_not_claim_validation() {
    let Some(c) = Caller::new() else { return };
    let dev = c.wrap_with(&vkhost::OpenOptions { validation: true, ..opts() });
    assert!(!dev.validation_enabled(), "validation_enabled on a device vkhost did not create");
    assert!(!dev.options().validation);
    dev.destroy().unwrap();
    c.destroy();
}

#[test]
fn queueless_device_refuses_its_own_copies() {
    let Some(c) = Caller::new() else { return };
    let dev = c.wrap();
    let why = |r: Result<(), Error>| match r {
        Err(Error::Unsupported { reason }) => assert!(reason.contains("host::record_copy"), "{reason}"),
        r => panic!("expected Unsupported, got {r:?}"),
    };
    why(dev.stream().map(|_| ()));
    why(dev.stream_on(vkhost::QueueKind::Compute).map(|_| ()));
    why(dev.raw().map(|_| ()));
    let buf = dev.alloc_buffer(4096).expect("device buffers exist, as handles");
    why(buf.write(0, &[1u8; 16]));
    let mut back = [0u8; 16];
    why(buf.read(0, &mut back));
    let page = host::page_size();
    let p = Pages::new(page);
    // SAFETY: `p` stays mapped until after the unregister.
    unsafe { host::register(&dev, p.ptr, page) }.unwrap();
    assert!(host::find(&dev, p.ptr, page).is_some());
    let src = pattern(16, 3);
    // SAFETY: `src` is readable for its length.
    why(unsafe { host::copy_to_device(&dev, src.as_ptr(), 16, &buf, 0) }.map(|_| ()));
    // Pinned blocks work without queues.
    let pinned = host::alloc_pinned(&dev, 3 * page).unwrap();
    assert!(host::find(&dev, pinned, 3 * page).is_some());
    drop(buf);
    dev.destroy().unwrap();
    // Tombstones after destroy: a late unregister/free succeeds once.
    host::unregister(&dev, p.ptr).unwrap();
    assert_eq!(host::unregister(&dev, p.ptr), Err(Error::NotRegistered));
    host::free_pinned(&dev, pinned).unwrap();
    c.destroy();
}

#[test]
fn recorded_copies_round_trip_through_registered_memory() {
    let Some(mut c) = Caller::new() else { return };
    let dev = c.wrap();
    let done = c.timeline();
    let page = host::page_size();
    let len = 5 * page + 123;

    // A Vec registered through the safe API, and a destination made of two imports side by
    // side (the copy back crosses them: two regions).
    let mut src = pattern(len, 0x5a);
    let want = src.clone();
    let src_reg = dev.register(&mut src).unwrap();
    let mut dst = Pages::new(6 * page);
    let half = 3 * page;
    // SAFETY: `dst` stays mapped until after both unregisters below.
    unsafe {
        host::register(&dev, dst.ptr, half).unwrap();
        host::register(&dev, dst.ptr.add(half), half).unwrap();
    }

    // Not covered: refused, nothing recorded.
    let cmd = c.begin();
    // Its own mapping: a heap allocation could share a page with `src`, whose registration
    // covers its first and last pages whole (the test failed when malloc put it there).
    let loose = Pages::new(page);
    // SAFETY: `cmd` is recording, the buffer is large enough; nothing is recorded on error.
    let r = unsafe { host::record_copy(&dev, cmd, Direction::HostToDevice, loose.ptr, 64, c.buffer, 0) };
    assert!(matches!(r, Err(Error::NotRegistered)), "{r:?}");
    // Partly covered (runs past the destination's imports): refused too.
    // SAFETY: as above.
    let r = unsafe { host::record_copy(&dev, cmd, Direction::DeviceToHost, dst.ptr.add(page), 6 * page, c.buffer, 0) };
    assert!(matches!(r, Err(Error::NotRegistered)), "{r:?}");

    // h2d then d2h in one command buffer: the helper's leading barrier orders the read after
    // the write.
    // SAFETY: `cmd` is recording; `c.buffer` has both usages and BUF_LEN >= len + 4096; the
    // tickets are hooked before the submit; the host bytes are left alone until `done`.
    let (mut up, mut down) = unsafe {
        let up = host::record_copy(&dev, cmd, Direction::HostToDevice, src_reg.as_ptr(), len, c.buffer, 4096).unwrap();
        let down = host::record_copy(&dev, cmd, Direction::DeviceToHost, dst.ptr.add(7), len, c.buffer, 4096).unwrap();
        (up, down)
    };
    assert_eq!((up.regions(), down.regions()), (1, 2));
    assert_eq!(dev.destroy(), Err(Error::Busy { reason: dev_busy_reason(2) }));
    // SAFETY: `done` is a timeline semaphore of this device, signalled at 1 by the submission
    // below, and destroyed only after vkhost's destroy.
    unsafe {
        up.completes_at(done, 1).unwrap();
        down.completes_at(done, 1).unwrap();
    }
    // SAFETY: refused before anything is stored (a second hook).
    assert!(matches!(unsafe { up.completes_at(done, 1) }, Err(Error::InvalidArgument { .. })));
    drop(up);
    drop(down);
    c.submit(cmd, None, done, 1);
    c.wait(done, 1);
    assert_eq!(host::reap_recorded(&dev), 0);
    assert_eq!(&dst.slice()[7..7 + len], &want[..]);

    drop(src_reg);
    // SAFETY: the pointers are the registrations' starts.
    unsafe {
        host::unregister(&dev, dst.ptr).unwrap();
        host::unregister(&dev, dst.ptr.add(half)).unwrap();
    }
    dev.destroy().unwrap();
    c.destroy();
}

/// A recorded copy of 64 KiB or more whose host bytes start off a 256-byte boundary is one
/// command of two regions (the head, then a host-aligned bulk): every byte lands once, both
/// ways, with nothing written around it.
#[test]
fn recorded_copies_off_a_host_boundary_are_exact() {
    let Some(mut c) = Caller::new() else { return };
    let dev = c.wrap();
    let done = c.timeline();
    let page = host::page_size();
    let len = (256 << 10) + 5;
    let mut m = Pages::new(2 * len + 3 * page);
    // SAFETY: `m` stays mapped until after the unregister.
    unsafe { host::register(&dev, m.ptr, m.len) }.unwrap();
    let want = pattern(len, 0x3c);
    // Both off a 256-byte boundary (16, then 16 + len + page + 84: 105 past one).
    let (src_at, dst_at) = (16usize, 16 + len + page + 84);
    m.slice()[src_at..src_at + len].copy_from_slice(&want);
    let cmd = c.begin();
    // SAFETY: `cmd` is recording; `c.buffer` has both usages and BUF_LEN >= 3 + len; the tickets
    // are hooked before the submit; the host bytes are left alone until `done`.
    let (up, down) = unsafe {
        let mut up = host::record_copy(&dev, cmd, Direction::HostToDevice, m.ptr.add(src_at), len, c.buffer, 3).unwrap();
        let mut down = host::record_copy(&dev, cmd, Direction::DeviceToHost, m.ptr.add(dst_at), len, c.buffer, 3).unwrap();
        up.completes_at(done, 1).unwrap();
        down.completes_at(done, 1).unwrap();
        (up, down)
    };
    assert_eq!((up.regions(), down.regions()), (1, 1), "one command each: one import covers the range");
    drop((up, down));
    c.submit(cmd, None, done, 1);
    c.wait(done, 1);
    assert_eq!(host::reap_recorded(&dev), 0);
    assert!(m.slice()[dst_at..dst_at + len] == want[..], "the d2h bytes");
    assert!(m.slice()[src_at + len..dst_at].iter().all(|&b| b == 0), "nothing written before them");
    assert!(m.slice()[dst_at + len..].iter().all(|&b| b == 0), "nor after");
    host::unregister(&dev, m.ptr).unwrap();
    dev.destroy().unwrap();
    c.destroy();
}

fn dev_busy_reason(n: usize) -> String {
    format!("{n} host::RecordedCopy ticket(s) of this device have no completion hook yet (nor were dropped)")
}

#[test]
fn unregister_waits_for_the_callers_completion() {
    let Some(mut c) = Caller::new() else { return };
    let dev = c.wrap();
    let done = c.timeline();
    let page = host::page_size();
    let len = 4 * page;
    let mut p = Pages::new(len);
    p.slice().copy_from_slice(&pattern(len, 9));
    // SAFETY: `p` stays mapped until after the unregister.
    unsafe { host::register(&dev, p.ptr, len) }.unwrap();
    let cmd = c.begin();
    // SAFETY: `cmd` is recording, the range fits the buffer, the ticket is hooked before the
    // submit; `done` outlives vkhost's device.
    unsafe {
        let mut t = host::record_copy(&dev, cmd, Direction::DeviceToHost, p.ptr, len, c.buffer, 0).unwrap();
        t.completes_at(done, 1).unwrap();
    }
    // The caller submits 400 ms from now, on another thread (the queue is used by that thread
    // only until it is joined). The unregister below is issued before the work even exists on
    // the queue, let alone completes: it must wait for `done`.
    // State: PENDING → SUBMITTED (the submitter) or → CANCELLED (unregister returned first:
    // the bug; the submission is then skipped, so the test fails on the assertion rather than
    // by the device writing into a destroyed import).
    const PENDING: u8 = 0;
    const SUBMITTED: u8 = 1;
    const CANCELLED: u8 = 2;
    let state = Arc::new(AtomicU8::new(PENDING));
    let submitter = {
        let (device, queue, state) = (c.device.clone(), c.queue, state.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(400));
            if state.compare_exchange(PENDING, SUBMITTED, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                submit_on(&device, queue, cmd, None, done, 1);
            }
        })
    };
    let t0 = Instant::now();
    host::unregister(&dev, p.ptr).unwrap();
    let waited = t0.elapsed();
    let early = state.compare_exchange(PENDING, CANCELLED, Ordering::SeqCst, Ordering::SeqCst).is_ok();
    if early {
        submitter.join().unwrap();
        // Never submitted: complete the hook from the host so vkhost's teardown (which waits
        // for it) does not hang the failing test.
        let si = vk::SemaphoreSignalInfo::default().semaphore(done).value(1);
        // SAFETY: `done` is alive and has no pending signal.
        unsafe { c.device.signal_semaphore(&si) }.expect("signal");
        panic!("unregister returned after {waited:?}, before the caller's work was submitted");
    }
    assert!(c.value(done) >= 1, "unregister returned before the caller's copy completed");
    assert!(host::find(&dev, p.ptr, len).is_none());
    submitter.join().unwrap();
    assert_eq!(host::reap_recorded(&dev), 0);

    // A ticket dropped without a hook (its command buffer never submitted) does not block.
    // SAFETY: `p` is mapped; the command buffer below is freed with the pool, never submitted.
    unsafe { host::register(&dev, p.ptr, len) }.unwrap();
    let cmd2 = c.begin();
    // SAFETY: as above.
    let t = unsafe { host::record_copy(&dev, cmd2, Direction::HostToDevice, p.ptr, len, c.buffer, 0) }.unwrap();
    assert!(!t.is_complete());
    drop(t);
    host::unregister(&dev, p.ptr).unwrap();
    dev.destroy().unwrap();
    c.destroy();
}

#[test]
fn pinned_block_freed_while_a_recorded_copy_runs_stays_alive() {
    let Some(mut c) = Caller::new() else { return };
    let dev = c.wrap();
    let done = c.timeline();
    let page = host::page_size();
    let mut pb = vkhost::PinnedBuffer::new(&dev, 2 * page).unwrap();
    pb.copy_from_slice(&pattern(2 * page, 4));
    let raw = host::alloc_pinned(&dev, 2 * page).unwrap();
    let cmd = c.begin();
    // SAFETY: recording; both ranges are pinned blocks; hooked before submit; `done` outlives
    // vkhost's device; the host bytes are not touched until `done`.
    unsafe {
        let mut a = host::record_copy(&dev, cmd, Direction::HostToDevice, pb.as_ptr(), 2 * page, c.buffer, 0).unwrap();
        a.completes_at(done, 1).unwrap();
        let mut b = host::record_copy(&dev, cmd, Direction::DeviceToHost, raw, 2 * page, c.buffer, 0).unwrap();
        b.completes_at(done, 1).unwrap();
    }
    // Freed after recording, before the work even runs: the recorded copy owns the block until
    // it completes, so the submission below still names a live buffer (validation checks).
    host::free_pinned(&dev, raw).unwrap();
    assert_eq!(host::reap_recorded(&dev), 2);
    c.submit(cmd, None, done, 1);
    c.wait(done, 1);
    assert_eq!(host::reap_recorded(&dev), 0);
    drop(pb);
    dev.destroy().unwrap();
    c.destroy();
}

#[test]
fn fence_hook_is_observed_before_the_caller_resets_it() {
    let Some(mut c) = Caller::new() else { return };
    let dev = c.wrap();
    let done = c.timeline(); // only so `submit` has something to signal
    let page = host::page_size();
    let mut p = Pages::new(2 * page);
    let want = pattern(2 * page, 0x21);
    p.slice().copy_from_slice(&want);
    // SAFETY: `p` stays mapped until after the unregister.
    unsafe { host::register(&dev, p.ptr, 2 * page) }.unwrap();
    // SAFETY: plain fence creation.
    let fence = unsafe { c.device.create_fence(&vk::FenceCreateInfo::default(), None) }.unwrap();
    let cmd = c.begin();
    // SAFETY: recording; registered range; the buffer is the caller's.
    let mut t = unsafe { host::record_copy(&dev, cmd, Direction::HostToDevice, p.ptr, 2 * page, c.buffer, 0) }.unwrap();
    assert!(!t.is_complete());
    // The submit carries the fence; the hook comes after it returned.
    // SAFETY: `cmd` is recording; the queue is used by this thread only; the fence is
    // unsignaled, signalled only by that submission, and reset only after vkhost observed it.
    unsafe {
        c.device.end_command_buffer(cmd).unwrap();
        let cmds = [cmd];
        let sig = [done];
        let v = [1u64];
        let mut tsi = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&v);
        let si = vk::SubmitInfo::default().command_buffers(&cmds).signal_semaphores(&sig).push_next(&mut tsi);
        c.device.queue_submit(c.queue, &[si], fence).unwrap();
        t.completes_with_fence(fence).unwrap();
        c.device.wait_for_fences(&[fence], true, u64::MAX).unwrap();
    }
    assert!(t.is_complete());
    drop(t);
    assert_eq!(host::reap_recorded(&dev), 0);
    // SAFETY: vkhost observed the fence (reap reported nothing pending); nothing uses it.
    unsafe {
        c.device.reset_fences(&[fence]).unwrap();
        c.device.destroy_fence(fence, None);
    }
    host::unregister(&dev, p.ptr).unwrap();
    dev.destroy().unwrap();
    c.destroy();
}

/// The raw `unregister` of bytes an unhooked ticket names answers `Busy` at once and changes
/// nothing, so the ticket's owner can still destroy (`Busy`), hook or drop it. Before: the
/// unregister blocked until a hook came, holding the device lock, so a destroy on the ticket's
/// thread deadlocked (here: the unregister's thread never answered within 5 s).
#[test]
fn unregister_of_bytes_an_unhooked_ticket_names_is_busy() {
    let Some(c) = Caller::new() else { return };
    let dev = c.wrap();
    let page = host::page_size();
    let len = 2 * page;
    let p = Pages::new(len);
    // SAFETY: `p` stays mapped until after the unregister below.
    unsafe { host::register(&dev, p.ptr, len) }.unwrap();
    let cmd = c.begin();
    // SAFETY: `cmd` is recording; the range fits the buffer; the command buffer is never
    // submitted (freed with the pool), which dropping the ticket unhooked declares.
    let t = unsafe { host::record_copy(&dev, cmd, Direction::DeviceToHost, p.ptr, len, c.buffer, 0) }.unwrap();
    let addr = p.ptr as usize;
    let (tx, rx) = std::sync::mpsc::channel();
    let other = {
        let dev = dev.clone();
        std::thread::spawn(move || tx.send(host::unregister(&dev, addr)).unwrap())
    };
    let r = rx.recv_timeout(Duration::from_secs(5));
    let Ok(r) = r else {
        // Unblock the unregister so the failing test ends instead of hanging.
        drop(t);
        other.join().unwrap();
        panic!("unregister of bytes an unhooked ticket names did not answer within 5 s");
    };
    other.join().unwrap();
    assert!(matches!(r, Err(Error::Busy { ref reason }) if reason.contains("RecordedCopy")), "{r:?}");
    // Nothing changed: still registered, and new copies can name the bytes.
    assert!(host::find(&dev, p.ptr, len).is_some(), "a Busy unregister removed the entry");
    let cmd2 = c.begin();
    // SAFETY: as above; this ticket is dropped unhooked too, its command buffer never submitted.
    let t2 = unsafe { host::record_copy(&dev, cmd2, Direction::HostToDevice, p.ptr, len, c.buffer, 0) }.unwrap();
    drop(t2);
    assert!(matches!(dev.destroy(), Err(Error::Busy { .. })), "destroy with an unhooked ticket");
    drop(t);
    host::unregister(&dev, p.ptr).unwrap();
    assert!(host::find(&dev, p.ptr, len).is_none());
    dev.destroy().unwrap();
    c.destroy();
}

/// A `Registration` dropped while an unhooked ticket names its bytes cannot refuse: it waits for
/// the hook, but without the device lock, so a destroy on another thread answers `Busy` at once
/// (the ticket is still open) instead of waiting behind the drop. Before: the drop waited
/// holding the device lock and the destroy blocked (here: no answer within 5 s).
#[test]
fn guard_drop_waiting_for_a_hook_leaves_destroy_free_to_answer() {
    let Some(c) = Caller::new() else { return };
    let dev = c.wrap();
    let page = host::page_size();
    let mut v = pattern(3 * page, 6);
    let reg = dev.register(&mut v).unwrap();
    let cmd = c.begin();
    // SAFETY: `cmd` is recording; the range fits the buffer; the command buffer is never
    // submitted (freed with the pool), which dropping the ticket unhooked declares.
    let t = unsafe { host::record_copy(&dev, cmd, Direction::HostToDevice, reg.as_ptr(), reg.len(), c.buffer, 0) }.unwrap();
    std::thread::scope(|s| {
        let dropper = s.spawn(move || drop(reg));
        std::thread::sleep(Duration::from_millis(300)); // the drop is waiting for the hook now
        let (tx, rx) = std::sync::mpsc::channel();
        let destroyer = {
            let dev = dev.clone();
            s.spawn(move || tx.send(dev.destroy()).unwrap())
        };
        let r = rx.recv_timeout(Duration::from_secs(5));
        drop(t); // declares the commands never run: the drop proceeds
        dropper.join().unwrap();
        destroyer.join().unwrap();
        let r = r.expect("destroy did not answer within 5 s while a Registration's drop waited for a hook");
        assert!(matches!(r, Err(Error::Busy { .. })), "{r:?}");
    });
    assert!(host::find(&dev, v.as_ptr(), v.len()).is_none());
    dev.destroy().unwrap();
    c.destroy();
}

/// A pinned block whose last owner goes during the teardown of a device whose last handle was
/// dropped (here: a recorded copy's pending state, after `free_pinned`, released by the
/// teardown's `WORK` phase) has its objects freed in the `OBJECTS` phase, and its mapping (a
/// block larger than one import piece is a mapping vkhost made) stays until then. Before: the
/// block's objects could not reach their device any more (its last handle was going), so the
/// buffers and imported memories leaked, reported by validation at the caller's
/// vkDestroyDevice (VUID-vkDestroyDevice-device-00378), and the mapping was unmapped under them.
#[test]
fn pinned_block_whose_last_owner_goes_at_teardown_is_freed() {
    let Some(mut c) = Caller::new() else { return };
    let dev = c.wrap_with(&vkhost::OpenOptions { max_import_piece: Some(64 << 10), ..opts() });
    let done = c.timeline();
    let len = 256 << 10;
    let raw = host::alloc_pinned(&dev, len).unwrap();
    let cmd = c.begin();
    // SAFETY: recording; the range is one pinned block (four import pieces) and fits the
    // buffer; hooked before the submit; `done` outlives vkhost's device; the block is not
    // touched by the host afterwards.
    let regions = unsafe {
        let mut t = host::record_copy(&dev, cmd, Direction::HostToDevice, raw, len, c.buffer, 0).unwrap();
        t.completes_at(done, 1).unwrap();
        t.regions()
    };
    assert_eq!(regions, 4, "one region per import piece");
    // The recorded copy now holds the block's last owners.
    host::free_pinned(&dev, raw).unwrap();
    c.submit(cmd, None, done, 1);
    // The last handle: teardown runs here; its WORK phase waits for `done` and lets the
    // recorded copy's owners go.
    drop(dev);
    c.wait(done, 1);
    c.destroy();
}

/// What an interop layer (vkhost-wgpu) builds on: `raw_memory` names the allocation and the
/// guard's offset in it, `hold` keeps `destroy` Busy, and `keep_alive` owners go with the last
/// handle, after teardown.
#[test]
fn interop_accessors_hold_and_owners() {
    let Some(c) = Caller::new() else { return };
    let dev = c.wrap();
    let page = host::page_size();
    let mut pages = Pages::new(2 * page);
    let reg = dev.register(&mut pages.slice()[100..100 + page]).unwrap();
    let raw = reg.raw_memory().expect("a registration has one import");
    assert_eq!(raw.offset, 100, "the first registered byte, from the page the import starts at");
    assert_eq!(raw.size, 2 * page as u64, "the import covers the rounded range");
    assert_eq!(raw.handle_types, vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT);
    assert_ne!(raw.memory, vk::DeviceMemory::null());
    assert_eq!(Some((raw.buffer, raw.offset)), host::find(&dev, reg.as_ptr(), reg.len()));
    let pinned = vkhost::PinnedBuffer::new(&dev, 3 * page).unwrap();
    let praw = pinned.raw_memory().expect("a pinned block is one allocation");
    assert_eq!((praw.offset, praw.size), (0, 3 * page as u64));
    assert!(praw.handle_types.is_empty(), "a driver allocation, not an import");
    assert_eq!(praw.usage, raw.usage);
    drop(pinned);

    // A hold makes destroy Busy until it goes.
    let hold = dev.hold().unwrap();
    assert!(matches!(dev.destroy(), Err(Error::Busy { .. })));
    drop(hold);

    // Owners stay until the last handle is gone, after destroy.
    struct Owner(Arc<AtomicU8>);
    impl Drop for Owner {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicU8::new(0));
    dev.keep_alive(Box::new(Owner(dropped.clone())));
    let handle = dev.clone();
    dev.destroy().unwrap();
    assert_eq!(reg.raw_memory(), None, "no memory after destroy");
    assert!(matches!(dev.hold(), Err(Error::DeviceDestroyed)));
    drop(reg);
    drop(dev);
    assert_eq!(dropped.load(Ordering::SeqCst), 0, "a handle is left");
    drop(handle);
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
    c.destroy();
}

/// `Device::from_raw` over the caller's device, which was created without
/// VK_KHR_push_descriptor: vkhost submits to the caller's compute queue, and kernel launches
/// bind descriptor sets from its streams' pools. The built-ins (SM copy, checksum, fill) over a
/// device buffer, a pinned block and registered memory, at offsets aligned and not aligned to
/// minStorageBufferOffsetAlignment, with guard bytes on both sides; the caller's messenger
/// counts validation errors (zero, synchronization validation included when
/// VK_LAYER_ENABLES asks for it). Before: launches on a `from_raw` device were `Unsupported`.
#[test]
fn from_raw_without_push_descriptors_launches_with_descriptor_sets() {
    use vkhost::kernel::{Binding, DescriptorMode, checksum_cpu};
    let Some(c) = Caller::new() else { return };
    let raw = vkhost::RawDevice {
        entry: c.entry.clone(),
        instance: c.instance.clone(),
        physical_device: c.pd,
        device: c.device.clone(),
        compute_family: c.family,
        compute_queue_index: 0,
        copy_family: None,
        copy_queue_indices: Vec::new(),
    };
    // SAFETY: the handles are valid and outlive the vkhost device (destroyed before
    // `c.destroy`); vkhost submits to the caller's one queue, which this test leaves to it
    // meanwhile; VK_EXT_external_memory_host is enabled.
    let dev = unsafe { Device::from_raw(raw, vkhost::Ownership::Borrowed, true, &opts()) }.unwrap();
    assert_eq!(dev.descriptor_mode(), DescriptorMode::Sets);
    assert!(dev.host_registration().is_ok(), "registration: {:?}", dev.host_registration());
    let s = dev.stream_on(vkhost::QueueKind::Compute).unwrap();
    let a = dev.info().min_storage_buffer_offset_alignment.max(16) as usize;
    let len = 4096 + 48;
    let pat = 0xC0FF_EE11u32;
    for off in [a, a + 4, 2 * a + 12] {
        let total = off + len + 96;
        let want = pattern(len, off as u8);
        let src = dev.alloc_buffer(len).unwrap();
        src.write(0, &want).unwrap();
        let init = pattern(total, 7);
        let sum = checksum_cpu(&want);
        let check = |got: &[u8], what: &str, filled: bool| {
            assert_eq!(got[..off], init[..off], "{what} +{off}: guard before");
            assert_eq!(got[off + len..], init[off + len..], "{what} +{off}: guard after");
            if filled {
                assert!(got[off..off + len].chunks(4).all(|w| w == pat.to_ne_bytes()), "{what} +{off}: filled");
            } else {
                assert!(got[off..off + len] == want[..], "{what} +{off}: copied");
            }
        };

        let g = dev.alloc_buffer(total).unwrap();
        g.write(0, &init).unwrap();
        s.copy_sm(Binding::Device(&src, 0, len), Binding::Device(&g, off, len)).unwrap();
        assert_eq!(s.checksum(Binding::Device(&g, off, len)).unwrap(), sum, "device +{off}: checksum");
        let mut got = vec![0u8; total];
        g.read(0, &mut got).unwrap();
        check(&got, "device", false);
        s.fill_u32(Binding::Device(&g, off, len), pat).unwrap();
        s.synchronize().unwrap();
        g.read(0, &mut got).unwrap();
        check(&got, "device", true);

        let mut p = vkhost::PinnedBuffer::new(&dev, total).unwrap();
        p.copy_from_slice(&init);
        s.copy_sm(Binding::Device(&src, 0, len), Binding::HostMut(&mut p[off..off + len])).unwrap();
        assert_eq!(s.checksum(Binding::Host(&p[off..off + len])).unwrap(), sum, "pinned +{off}: checksum");
        check(&p, "pinned", false);
        s.fill_u32(Binding::HostMut(&mut p[off..off + len]), pat).unwrap();
        check(&p, "pinned", true);
        drop(p);

        let mut v = init.clone();
        {
            let mut reg = dev.register(&mut v).unwrap();
            s.copy_sm(Binding::Device(&src, 0, len), Binding::HostMut(&mut reg[off..off + len])).unwrap();
            assert_eq!(s.checksum(Binding::Host(&reg[off..off + len])).unwrap(), sum, "registered +{off}: checksum");
            check(&reg, "registered", false);
            s.fill_u32(Binding::HostMut(&mut reg[off..off + len]), pat).unwrap();
        }
        check(&v, "registered", true);
    }
    assert!(dev.live_objects().descriptor_pools > 0, "launches used descriptor pools");
    drop(s);
    dev.destroy().unwrap();
    assert_eq!(dev.live_objects(), vkhost::LiveObjects::default(), "everything destroyed");
    c.destroy();
}

/// Two threads that poll `t.is_complete()` until `stop`.
fn spawn_pollers<'s>(s: &'s std::thread::Scope<'s, '_>, t: &'s host::RecordedCopy, stop: &'s std::sync::atomic::AtomicBool) {
    for _ in 0..2 {
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = t.is_complete();
            }
        });
    }
}

/// vkhost reports a recorded copy complete (`reap_recorded` 0 pending, `is_complete`) only once
/// none of its calls on the caller's semaphore or fence runs on any thread, and makes none after,
/// so the caller may destroy the object at once. A review found threads polling `is_complete`
/// still calling vkGetFenceStatus / vkGetSemaphoreCounterValue on the destroyed object
/// (validation errors, then a segfault, within a few iterations for the fence). Fences are
/// hooked after the submit that signals them returned (their contract), so no poll overlaps it.
#[test]
fn completion_is_reported_only_once_vkhost_is_done_with_the_callers_object() {
    let Some(mut c) = Caller::new() else { return };
    let dev = c.wrap();
    let done = c.timeline(); // only so `submit` has something to signal on the fence rounds
    let page = host::page_size();
    let p = Pages::new(2 * page);
    // SAFETY: `p` stays mapped until after the unregister.
    unsafe { host::register(&dev, p.ptr, 2 * page) }.unwrap();
    for fence_hook in [true, false] {
        for i in 0..60u64 {
            let cmd = c.begin();
            // SAFETY: recording; registered range; the buffer is the caller's.
            let mut t = unsafe { host::record_copy(&dev, cmd, Direction::HostToDevice, p.ptr, 2 * page, c.buffer, 0) }.unwrap();
            if fence_hook {
                // SAFETY: plain fence creation.
                let fence = unsafe { c.device.create_fence(&vk::FenceCreateInfo::default(), None) }.unwrap();
                // SAFETY: `cmd` is recording; the queue is used by this thread only; the fence is
                // unsignaled and signalled only by this submission; hooked after it returned.
                unsafe {
                    c.device.end_command_buffer(cmd).unwrap();
                    let cmds = [cmd];
                    let (sig, v) = ([done], [i + 1]);
                    let mut tsi = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&v);
                    let si = vk::SubmitInfo::default().command_buffers(&cmds).signal_semaphores(&sig).push_next(&mut tsi);
                    c.device.queue_submit(c.queue, &[si], fence).unwrap();
                    t.completes_with_fence(fence).unwrap();
                }
                let stop = std::sync::atomic::AtomicBool::new(false);
                std::thread::scope(|s| {
                    spawn_pollers(s, &t, &stop);
                    // SAFETY: the fence is alive.
                    unsafe { c.device.wait_for_fences(&[fence], true, u64::MAX) }.unwrap();
                    while host::reap_recorded(&dev) != 0 {}
                    // SAFETY: vkhost reported the ticket done: it no longer touches the fence.
                    unsafe { c.device.destroy_fence(fence, None) };
                    stop.store(true, Ordering::Relaxed);
                });
            } else {
                let sem = c.timeline();
                // SAFETY: `sem` is a timeline semaphore of this device, signalled to 1 only by
                // the submission below, destroyed only once vkhost reported the ticket done.
                unsafe { t.completes_at(sem, 1) }.unwrap();
                let stop = std::sync::atomic::AtomicBool::new(false);
                std::thread::scope(|s| {
                    spawn_pollers(s, &t, &stop);
                    c.submit(cmd, None, sem, 1);
                    c.wait(sem, 1);
                    while host::reap_recorded(&dev) != 0 {}
                    // SAFETY: vkhost reported the ticket done: it no longer touches the semaphore.
                    unsafe { c.device.destroy_semaphore(sem, None) };
                    stop.store(true, Ordering::Relaxed);
                });
                c.sems.retain(|&s| s != sem);
            }
            drop(t);
            // SAFETY: the copy completed; the command buffer is ours.
            unsafe { c.device.free_command_buffers(c.pool, &[cmd]) };
            let n = c.counts.errors.load(Ordering::Relaxed);
            assert_eq!(n, 0, "round {i} (fence: {fence_hook}): {:?}", c.counts.last.lock().map(|g| g.clone()));
        }
    }
    host::unregister(&dev, p.ptr).unwrap();
    dev.destroy().unwrap();
    c.destroy();
}

/// The last drop of a borrowed device whose teardown waits for a recorded copy's hook does not
/// hold up other threads' drops: the thread that makes the caller's work complete drops an
/// unrelated handle of another device first. Before, the teardown ran under the process-wide
/// releaser lock that every owner's drop takes: deadlock (found by an audit helper).
#[test]
fn a_last_drop_waiting_for_a_hook_blocks_no_other_drop() {
    let Some(mut c) = Caller::new() else { return };
    let dev = c.wrap();
    let other = Device::open_default_with(&opts()).expect("second device");
    let gate = c.timeline();
    let done = c.timeline();
    let page = host::page_size();
    let p = Pages::new(page);
    // SAFETY: `p` stays mapped until after the unregister at the end.
    unsafe { host::register(&dev, p.ptr, page) }.unwrap();
    let cmd = c.begin();
    // SAFETY: recording; fits; hooked before submit; `done` outlives vkhost's device.
    unsafe {
        let mut t = host::record_copy(&dev, cmd, Direction::HostToDevice, p.ptr, page, c.buffer, 0).unwrap();
        t.completes_at(done, 1).unwrap();
    }
    c.submit(cmd, Some((gate, 1)), done, 1);
    let other2 = other.clone();
    let raw = c.device.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    // Who signals `gate`: the signaller, or this thread after a deadlock. Decided here rather
    // than by asking the semaphore's value: under heavy load the validation layer's semaphore
    // tracking can stall such a query while another thread waits on `done` (once in CI).
    let signalled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let signalled2 = signalled.clone();
    // Set once the drop returned: a timeout then says which call blocked, vkhost's drop (the
    // deadlock this test is about) or the signal (the driver's or the layer's; the layer
    // stalled there once in CI under heavy load, with its own UNASSIGNED-VkSemaphore-state-timeout
    // report, a fault of the layer's that the zero-error check leaves out: see
    // Device::validation_layer_faults).
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dropped2 = dropped.clone();
    let signaller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(other2); // an unrelated handle of an unrelated device, not its last
        dropped2.store(true, Ordering::SeqCst);
        if !signalled2.swap(true, Ordering::SeqCst) {
            // SAFETY: `gate` is alive.
            unsafe { raw.signal_semaphore(&vk::SemaphoreSignalInfo::default().semaphore(gate).value(1)).unwrap() };
        }
        tx.send(()).unwrap();
    });
    // The last handle: its teardown waits for `done`, which waits for `gate`.
    let dropper = std::thread::spawn(move || drop(dev));
    let r = rx.recv_timeout(Duration::from_secs(10));
    let drop_returned = dropped.load(Ordering::SeqCst);
    if r.is_err() {
        if drop_returned {
            eprintln!("the signaller's drop returned, then its vkSignalSemaphore blocked for 10 s (the driver or the layer)");
        } else {
            eprintln!("DEADLOCK: the signaller's drop of another device's clone blocked for 10 s");
        }
        // Unblock everything.
        if !signalled.swap(true, Ordering::SeqCst) {
            // SAFETY: `gate` is alive.
            unsafe { c.device.signal_semaphore(&vk::SemaphoreSignalInfo::default().semaphore(gate).value(1)).unwrap() };
        }
    }
    dropper.join().unwrap();
    signaller.join().unwrap();
    c.wait(done, 1);
    drop(other);
    c.destroy();
    assert!(r.is_ok() || drop_returned, "deadlock: teardown held the process-wide releaser lock while waiting for the caller's hook");
}

/// Runs `f` on a thread; `Some(result)` if it returned within `secs`, else `None` (the thread
/// is left running, to be released by the caller).
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> (Option<T>, std::sync::mpsc::Receiver<T>) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    let r = rx.recv_timeout(Duration::from_secs(secs)).ok();
    (r, rx)
}

/// A `DeviceBuffer` that a recorded copy names (its `raw()` handle, as record_copy's examples
/// use it) and that is dropped before the copy runs stays alive until the copy is reaped: the
/// ticket's state holds it. Up to `d1a6e3d` only the host side was held, so the drop freed the
/// buffer under the pending copy (lavapipe crashed in its queue thread; found by a review).
#[test]
fn device_buffer_dropped_while_a_recorded_copy_names_it_stays_alive() {
    let Some(mut c) = Caller::new() else { return };
    let dev = c.wrap();
    let done = c.timeline();
    let n = 4 << 20;
    let mut pb = vkhost::PinnedBuffer::new(&dev, n).unwrap();
    pb.copy_from_slice(&pattern(n, 9));
    let gpu = dev.alloc_buffer(n).unwrap();
    let buffers = dev.live_objects().buffers;
    let cmd = c.begin();
    // SAFETY: recording; the host range is a pinned block, not touched until `done`; `gpu` is a
    // buffer of this device with TRANSFER_DST, in range; hooked before the submit; `done`
    // outlives vkhost's device.
    unsafe {
        let mut t = host::record_copy(&dev, cmd, Direction::HostToDevice, pb.as_ptr(), n, gpu.raw(), 0).unwrap();
        t.completes_at(done, 1).unwrap();
    }
    drop(gpu);
    assert_eq!(dev.live_objects().buffers, buffers, "the recorded copy holds the device buffer");
    c.submit(cmd, None, done, 1);
    c.wait(done, 1);
    assert_eq!(host::reap_recorded(&dev), 0);
    assert_eq!(dev.live_objects().buffers, buffers - 1, "released once the copy was reaped");
    drop(pb);
    dev.destroy().unwrap();
    c.destroy();
}

struct OwnObjects {
    d: vkhost::ash::Device,
    pool: vk::CommandPool,
    sem: vk::Semaphore,
}

impl OwnObjects {
    fn new(dev: &vkhost::Device) -> OwnObjects {
        let raw = dev.raw().unwrap();
        let d = raw.device.clone();
        // SAFETY: valid create infos for this device; destroyed at the end of the test.
        unsafe {
            let pool = d.create_command_pool(&vk::CommandPoolCreateInfo::default().queue_family_index(raw.compute_family), None).unwrap();
            let mut kind = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
            let sem = d.create_semaphore(&vk::SemaphoreCreateInfo::default().push_next(&mut kind), None).unwrap();
            OwnObjects { d, pool, sem }
        }
    }
    fn cmd(&self) -> vk::CommandBuffer {
        // SAFETY: our pool, this thread only.
        unsafe {
            let info = vk::CommandBufferAllocateInfo::default().command_pool(self.pool).command_buffer_count(1);
            let cmd = self.d.allocate_command_buffers(&info).unwrap()[0];
            self.d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).unwrap();
            cmd
        }
    }
    /// What the caller's submission would do: signal the hook's value (from the host here).
    fn signal(&self, v: u64) {
        // SAFETY: a timeline semaphore of this device, value increasing.
        unsafe { self.d.signal_semaphore(&vk::SemaphoreSignalInfo::default().semaphore(self.sem).value(v)) }.unwrap();
    }
    fn destroy(self) {
        // SAFETY: vkhost observed the value; nothing of ours is in flight.
        unsafe {
            self.d.destroy_semaphore(self.sem, None);
            self.d.destroy_command_pool(self.pool, None);
        }
    }
}

/// record_copy's contract: hook the ticket before submitting. A program may free the pinned
/// block between the hook and its submission (as `pinned_block_freed_while_a_recorded_copy_runs_stays_alive`
/// does): `free_pinned` must not wait for the caller's later submission. When free_pinned first
/// waited for the block's uses (a3ddfb3), it hung here under the device's `live` read lock
/// (a review's test; a concurrent destroy then blocked every other call on the device).
#[test]
fn free_pinned_between_a_hook_and_its_submission_returns() {
    let dev = device().unwrap();
    let block = host::alloc_pinned(&dev, 4096).unwrap();
    let (d2, b) = (dev.0.clone(), block.as_ptr() as usize);
    let hung = released_between_a_hook_and_its_submission(&dev, block.as_ptr(), "free_pinned", move || {
        host::free_pinned(&d2, b).unwrap();
    });
    assert!(
        !hung,
        "free_pinned of a block named by a hooked, not yet submitted RecordedCopy hung (returned only once the caller's later submit signalled)"
    );
}

/// The same with a PinnedBuffer's drop.
#[test]
fn a_pinned_buffers_drop_between_a_hook_and_its_submission_returns() {
    let dev = device().unwrap();
    let pb = vkhost::PinnedBuffer::new(&dev, 4096).unwrap();
    let p = pb.as_ptr();
    let hung = released_between_a_hook_and_its_submission(&dev, p, "PinnedBuffer drop", move || drop(pb));
    assert!(!hung, "a PinnedBuffer's drop hung on a hooked, not yet submitted RecordedCopy");
}

/// Records a 4096-byte copy from the pinned block at `src` and hooks it to a timeline value,
/// then runs `release` (which frees the block) before that value is signalled, as the
/// caller's later submission would. Whether `release` hung: it did not return within 5 s.
fn released_between_a_hook_and_its_submission(dev: &Checked, src: *const u8, what: &str, release: impl FnOnce() + Send + 'static) -> bool {
    let own = OwnObjects::new(dev);
    let gpu = dev.alloc_buffer(4096).unwrap();
    let cmd = own.cmd();
    // SAFETY: recording, ours; `src` is a live pinned block of 4096 bytes (freed only by
    // `release`, which the ticket's hold outlives); gpu has TRANSFER_DST and 4096 bytes;
    // hooked before any submit.
    unsafe {
        let mut t = host::record_copy(dev, cmd, Direction::HostToDevice, src, 4096, gpu.raw(), 0).unwrap();
        t.completes_at(own.sem, 1).unwrap();
    }
    let (r, rx) = within(5, release);
    eprintln!("{what} within 5 s (the caller's submit still to come): {r:?}");
    // Stand in for the submission the caller would make after the release returned.
    own.signal(1);
    let late = rx.recv_timeout(Duration::from_secs(20));
    eprintln!("{what} after the value was signalled: {late:?}");
    drop(gpu);
    while host::reap_recorded(dev) > 0 {}
    own.destroy();
    r.is_none()
}

/// A pinned block kept for reuse (`OpenOptions::pinned_cache`) is kept only once its last owner
/// goes: a block freed while a recorded copy still names it is not handed to the next
/// `alloc_pinned` of its size until that copy is reaped (then it is, the same block).
#[test]
fn a_freed_block_is_reused_only_after_its_recorded_copy_is_reaped() {
    let Some(mut c) = Caller::new() else { return };
    let dev = c.wrap_with(&vkhost::OpenOptions { pinned_cache: Some(1 << 20), ..opts() });
    let done = c.timeline();
    let n = 2 * host::page_size();
    let raw = host::alloc_pinned(&dev, n).unwrap();
    let cmd = c.begin();
    // SAFETY: recording; the range is a pinned block; hooked before submit; `done` outlives
    // vkhost's device; the host bytes are not touched until `done`.
    unsafe {
        let mut t = host::record_copy(&dev, cmd, Direction::DeviceToHost, raw, n, c.buffer, 0).unwrap();
        t.completes_at(done, 1).unwrap();
    }
    host::free_pinned(&dev, raw).unwrap();
    assert_eq!(host::reap_recorded(&dev), 1, "the copy is still outstanding");
    assert_eq!(dev.pinned_cache().blocks, 0, "kept while a recorded copy still names it");
    let other = host::alloc_pinned(&dev, n).unwrap();
    assert_ne!(other, raw, "the block a recorded copy names was handed out again");
    c.submit(cmd, None, done, 1);
    c.wait(done, 1);
    assert_eq!(host::reap_recorded(&dev), 0, "reaped");
    assert_eq!(dev.pinned_cache().blocks, 1, "kept once the copy was reaped");
    let again = host::alloc_pinned(&dev, n).unwrap();
    assert_eq!(again, raw, "the kept block, reused");
    assert_eq!(dev.pinned_cache().reused, 1);
    host::free_pinned(&dev, again).unwrap();
    host::free_pinned(&dev, other).unwrap();
    assert_eq!(dev.pinned_cache().blocks, 2);
    // Teardown frees what the cache keeps (the caller's validation layer counts a leak).
    dev.destroy().unwrap();
    assert_eq!(dev.live_objects(), vkhost::LiveObjects::default());
    c.destroy();
}
