//! The statuses only a failing driver produces, reached through the C ABI with vkhost's fault
//! injection (feature `fault-injection`): OUT_OF_HOST_MEMORY, OUT_OF_DEVICE_MEMORY, VULKAN,
//! DEVICE_LOST, each with its message, and the device still destroyable afterwards.
//!
//! `cargo test --release -p vkhost-capi --features fault-injection --test faults`

use std::ptr;
use vkhost::ash::vk;
use vkhost::fault::{self, Point};
use vkhost_capi::vkhost_status::{self, *};
use vkhost_capi::*;

mod common;
use common::{message, open_validated};

/// Arms `point` to fail with `code` on its first call, runs `f`, and checks the status.
fn expect_fault(point: Point, code: vk::Result, want: vkhost_status, f: impl FnOnce() -> vkhost_status) {
    fault::inject(point, 0, code);
    let got = f();
    let fired = fault::disarm();
    assert!(fired, "{point:?} was never called");
    assert_eq!(got, want, "{point:?} -> {code:?}: {}", message());
    assert!(!message().is_empty());
}

#[test]
fn driver_failures_map_to_their_statuses() {
    let dev = open_validated();
    // SAFETY: valid out-pointers throughout; handles are used only while live.
    unsafe {
        let mut buf = ptr::null_mut();
        let mut p = ptr::null_mut();

        expect_fault(Point::AllocateMemory, vk::Result::ERROR_OUT_OF_DEVICE_MEMORY, VKHOST_OUT_OF_DEVICE_MEMORY, || {
            vkhost_buffer_alloc(dev, 4096, &mut buf)
        });
        expect_fault(Point::CreateBuffer, vk::Result::ERROR_OUT_OF_HOST_MEMORY, VKHOST_OUT_OF_HOST_MEMORY, || {
            vkhost_buffer_alloc(dev, 4096, &mut buf)
        });
        expect_fault(Point::MapMemory, vk::Result::ERROR_MEMORY_MAP_FAILED, VKHOST_VULKAN, || vkhost_alloc_pinned(dev, 4096, &mut p));
        assert!(message().contains("vkMapMemory"), "{}", message());
        assert!(buf.is_null() && p.is_null(), "out-pointers are written only on success");

        assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
        let data = vec![7u8; 4096];
        let mut path = vkhost_copy_path::VKHOST_PATH_DIRECT;
        expect_fault(Point::QueueSubmit, vk::Result::ERROR_DEVICE_LOST, VKHOST_DEVICE_LOST, || {
            vkhost_copy_to_device(dev, data.as_ptr().cast(), data.len(), buf, 0, &mut path)
        });
        // Lost stays lost; teardown still works.
        assert_eq!(vkhost_copy_to_device(dev, data.as_ptr().cast(), data.len(), buf, 0, &mut path), VKHOST_DEVICE_LOST);
        assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
        assert_eq!(vkhost_device_destroy(dev), VKHOST_OK, "{}", message());
        let mut errors = 1u64;
        assert_eq!(vkhost_device_validation_errors(dev, &mut errors), VKHOST_OK);
        assert_eq!(vkhost_device_release(dev), VKHOST_OK);
        assert_eq!(errors, 0);
    }
}

// Counting vkDestroyDevice / vkDestroyInstance through an intercepting vkGetInstanceProcAddr
// handed to `vkhost_device_from_vulkan` (vkhost loads both through it).
mod count {
    use std::ffi::{CStr, c_char};
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use vkhost::ash::vk;

    pub static DEVICES: AtomicUsize = AtomicUsize::new(0);
    pub static INSTANCES: AtomicUsize = AtomicUsize::new(0);
    pub static GIPA: OnceLock<vk::PFN_vkGetInstanceProcAddr> = OnceLock::new();
    static GDPA: OnceLock<vk::PFN_vkGetDeviceProcAddr> = OnceLock::new();
    static DD: OnceLock<vk::PFN_vkDestroyDevice> = OnceLock::new();
    static DI: OnceLock<vk::PFN_vkDestroyInstance> = OnceLock::new();

    pub fn destroys() -> (usize, usize) {
        (DEVICES.load(Ordering::SeqCst), INSTANCES.load(Ordering::SeqCst))
    }

    unsafe extern "system" fn destroy_device(d: vk::Device, a: *const vk::AllocationCallbacks<'_>) {
        DEVICES.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the loader's own vkDestroyDevice, with the caller's arguments.
        unsafe { DD.get().expect("loaded")(d, a) }
    }

    unsafe extern "system" fn destroy_instance(i: vk::Instance, a: *const vk::AllocationCallbacks<'_>) {
        INSTANCES.fetch_add(1, Ordering::SeqCst);
        // SAFETY: as above.
        unsafe { DI.get().expect("loaded")(i, a) }
    }

    /// # Safety
    /// As vkGetDeviceProcAddr.
    unsafe extern "system" fn gdpa(d: vk::Device, name: *const c_char) -> vk::PFN_vkVoidFunction {
        // SAFETY: the loader's own function, the caller's arguments.
        let real = unsafe { GDPA.get().expect("loaded")(d, name) };
        // SAFETY: `name` is a nul-terminated string (the caller's contract).
        if unsafe { CStr::from_ptr(name) } == c"vkDestroyDevice" && real.is_some() {
            // SAFETY: the loader's pointer for vkDestroyDevice has that signature.
            let _ = DD.set(unsafe { std::mem::transmute::<vk::PFN_vkVoidFunction, vk::PFN_vkDestroyDevice>(real) });
            // SAFETY: a function of the signature the name implies.
            return unsafe { std::mem::transmute::<vk::PFN_vkDestroyDevice, vk::PFN_vkVoidFunction>(destroy_device) };
        }
        real
    }

    /// # Safety
    /// As vkGetInstanceProcAddr.
    pub unsafe extern "system" fn gipa(i: vk::Instance, name: *const c_char) -> vk::PFN_vkVoidFunction {
        // SAFETY: the loader's own function, the caller's arguments.
        let real = unsafe { GIPA.get().expect("set")(i, name) };
        // SAFETY: `name` is a nul-terminated string (the caller's contract).
        let n = unsafe { CStr::from_ptr(name) };
        if real.is_none() {
            return real;
        }
        if n == c"vkDestroyInstance" {
            // SAFETY: the loader's pointer for vkDestroyInstance has that signature.
            let _ = DI.set(unsafe { std::mem::transmute::<vk::PFN_vkVoidFunction, vk::PFN_vkDestroyInstance>(real) });
            // SAFETY: a function of the signature the name implies.
            return unsafe { std::mem::transmute::<vk::PFN_vkDestroyInstance, vk::PFN_vkVoidFunction>(destroy_instance) };
        }
        if n == c"vkGetDeviceProcAddr" {
            // SAFETY: the loader's pointer for vkGetDeviceProcAddr has that signature.
            let _ = GDPA.set(unsafe { std::mem::transmute::<vk::PFN_vkVoidFunction, vk::PFN_vkGetDeviceProcAddr>(real) });
            // SAFETY: a function of the signature the name implies.
            return unsafe { std::mem::transmute::<vk::PFN_vkGetDeviceProcAddr, vk::PFN_vkVoidFunction>(gdpa) };
        }
        real
    }
}

/// `vkhost_device_from_vulkan(owned = 1)` that fails leaves the handles to the caller, whatever
/// the failure: refused options destroyed nothing, but a device lost during the open-time
/// probe had vkhost destroy the caller's device and instance (a caller cleaning up after the
/// failure destroyed them twice; found by an audit). Now both destroy nothing, and the caller's
/// own destroys are the only ones.
#[test]
fn a_failed_owned_wrap_leaves_the_handles_to_the_caller() {
    use vkhost::ash::{self, vk::Handle};
    // SAFETY: loading libvulkan; it stays loaded while `entry` lives.
    let entry = unsafe { ash::Entry::load() }.expect("libvulkan");
    let _ = count::GIPA.set(entry.static_fn().get_instance_proc_addr);
    let info = vkhost::devices().unwrap().into_iter().next().expect("a Vulkan device");
    let make = || {
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
        // SAFETY: a valid create info: no layers, no extensions.
        let instance = unsafe { entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None) }.unwrap();
        // SAFETY: the instance is alive; devices() lists them in the loader's order.
        let pd = unsafe { instance.enumerate_physical_devices() }.unwrap()[info.index];
        let family = info.compute_family().expect("a compute family").index;
        let emh = info.host_import_alignment.is_some();
        let exts = if emh { vec![ash::ext::external_memory_host::NAME.as_ptr()] } else { Vec::new() };
        let prio = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&prio)];
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(info.timeline_semaphore);
        let dci = vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_extension_names(&exts).push_next(&mut f12);
        // SAFETY: the family, the extension and the feature were read from `pd`.
        let device = unsafe { instance.create_device(pd, &dci, None) }.unwrap();
        let raw = vkhost_raw_device {
            get_instance_proc_addr: count::gipa as *const std::ffi::c_void,
            instance: instance.handle().as_raw() as *mut std::ffi::c_void,
            physical_device: pd.as_raw() as *mut std::ffi::c_void,
            device: device.handle().as_raw() as *mut std::ffi::c_void,
            compute_family: family,
            compute_queue_index: 0,
            copy_family: VKHOST_NO_FAMILY,
            copy_queue_count: 0,
            copy_queue_indices: [0; 4],
            external_memory_host: u32::from(emh),
        };
        (instance, device, raw)
    };
    let mut o = std::mem::MaybeUninit::<vkhost_open_options>::uninit();
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { vkhost_open_options_default(o.as_mut_ptr()) }, VKHOST_OK);
    // SAFETY: filled by the call above.
    let o = unsafe { o.assume_init() };
    let mut bad = o;
    bad.staging_slots = 1;
    for (what, opts, fault_at_probe, want) in
        [("refused options", bad, false, VKHOST_INVALID_ARGUMENT), ("a device lost at the open probe", o, true, VKHOST_DEVICE_LOST)]
    {
        let (instance, device, raw) = make();
        let before = count::destroys();
        let mut dev = ptr::null_mut();
        if fault_at_probe {
            fault::inject(Point::QueueSubmit, 0, vk::Result::ERROR_DEVICE_LOST);
        }
        // SAFETY: valid handles, owned = 1; `dev` a valid out-pointer.
        let st = unsafe { vkhost_device_from_vulkan(&raw, 1, &opts, &mut dev) };
        if fault_at_probe {
            assert!(fault::disarm(), "the probe never submitted");
        }
        assert_eq!(st, want, "{what}: {}", message());
        assert!(dev.is_null(), "{what}: a device handed out");
        assert_eq!(count::destroys(), before, "{what}: vkhost destroyed the caller's handles");
        // The handles are still the caller's: it destroys them, once.
        // SAFETY: nothing uses them any more.
        unsafe {
            device.destroy_device(None);
            instance.destroy_instance(None);
        }
    }
    // A wrap that succeeds owns them: vkhost's destroy destroys each, once.
    let (_instance, _device, raw) = make();
    let before = count::destroys();
    let mut dev = ptr::null_mut();
    // SAFETY: valid handles, owned = 1, handed to vkhost for good; `dev` a valid out-pointer.
    assert_eq!(unsafe { vkhost_device_from_vulkan(&raw, 1, &o, &mut dev) }, VKHOST_OK, "{}", message());
    // SAFETY: `dev` is the live handle just made, released once.
    unsafe {
        assert_eq!(vkhost_device_destroy(dev), VKHOST_OK);
        assert_eq!(vkhost_device_release(dev), VKHOST_OK);
    }
    assert_eq!(count::destroys(), (before.0 + 1, before.1 + 1), "an owned device's destroy");
}

/// A lost device answers `VKHOST_DEVICE_LOST` before the ABI's own argument refusals, as the
/// Rust API does (every operation answers `DeviceLost` until destroy) and as a destroyed device
/// answers `VKHOST_DEVICE_DESTROYED` first (`tests/destroyed_first.rs`): the synchronous copies
/// given another device's buffer and `vkhost_stream_create` with a queue kind that is none
/// answered `VKHOST_INVALID_ARGUMENT` (the ABI's checks looked for a destroyed device only).
#[test]
fn a_lost_device_answers_lost_before_refusing_arguments() {
    let (a, b) = (open_validated(), open_validated());
    // SAFETY: every handle is live for its calls (opened first, released last) and every
    // out-pointer and host range points to a local of the right type and size.
    unsafe {
        let (mut buf_a, mut buf_b) = (ptr::null_mut(), ptr::null_mut());
        assert_eq!(vkhost_buffer_alloc(a, 4096, &mut buf_a), VKHOST_OK);
        assert_eq!(vkhost_buffer_alloc(b, 4096, &mut buf_b), VKHOST_OK);
        let mut bytes = [7u8; 64];
        expect_fault(Point::QueueSubmit, vk::Result::ERROR_DEVICE_LOST, VKHOST_DEVICE_LOST, || {
            vkhost_copy_to_device(a, bytes.as_ptr().cast(), 64, buf_a, 0, ptr::null_mut())
        });
        let mut s = ptr::null_mut();
        let check = |what: &str, st: vkhost_status| {
            assert_eq!(st, VKHOST_DEVICE_LOST, "{what}: {}", message());
        };
        check("stream_create", vkhost_stream_create(a, VKHOST_QUEUE_COPY, &mut s));
        check("stream_create with a queue kind that is none", vkhost_stream_create(a, 7, &mut s));
        let st = vkhost_copy_to_device(a, bytes.as_ptr().cast(), 64, buf_b, 0, ptr::null_mut());
        check("copy_to_device into another device's buffer", st);
        let st = vkhost_copy_to_host(a, buf_b, 0, bytes.as_mut_ptr().cast(), 64, ptr::null_mut());
        check("copy_to_host from another device's buffer", st);
        assert!(s.is_null(), "out-pointers are written only on success");
        assert_eq!(vkhost_buffer_free(buf_a), VKHOST_OK);
        assert_eq!(vkhost_buffer_free(buf_b), VKHOST_OK);
        assert_eq!(vkhost_device_destroy(a), VKHOST_OK, "{}", message());
        assert_eq!(vkhost_device_release(a), VKHOST_OK);
        assert_eq!(vkhost_device_release(b), VKHOST_OK);
    }
}

/// On a lost device, what creates or copies answers `VKHOST_DEVICE_LOST` (the bad arguments of
/// such a call included), while what only reads what the handles recorded and what releases
/// still works: a caller cleaning up after the loss frees its blocks and registrations and
/// reads the raw handles (say for `VK_EXT_device_fault`) before `vkhost_device_destroy`. The
/// answers `VKHOST_DEVICE_LOST`'s doc lists.
#[test]
fn a_lost_device_refuses_new_work_but_reads_and_releases() {
    let a = open_validated();
    // SAFETY: every handle is live for its calls (opened first, released last) and every
    // out-pointer and host range points to a local of the right type and size.
    unsafe {
        let (mut buf, mut block) = (ptr::null_mut(), ptr::null_mut());
        assert_eq!(vkhost_buffer_alloc(a, 4096, &mut buf), VKHOST_OK);
        assert_eq!(vkhost_alloc_pinned(a, 4096, &mut block), VKHOST_OK);
        let mut host = vec![7u8; 1 << 16];
        assert_eq!(vkhost_register(a, host.as_mut_ptr().cast(), 1 << 16), VKHOST_OK);
        let (mut stream, mut event) = (ptr::null_mut(), ptr::null_mut());
        assert_eq!(vkhost_stream_create(a, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
        assert_eq!(vkhost_stream_record(stream, &mut event), VKHOST_OK);
        expect_fault(Point::QueueSubmit, vk::Result::ERROR_DEVICE_LOST, VKHOST_DEVICE_LOST, || {
            vkhost_copy_to_device(a, host.as_ptr().cast(), 64, buf, 0, ptr::null_mut())
        });
        let lost = |what: &str, st: vkhost_status| assert_eq!(st, VKHOST_DEVICE_LOST, "{what}: {}", message());
        let (mut block2, mut buf2, mut s) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        lost("alloc_pinned", vkhost_alloc_pinned(a, 4096, &mut block2));
        lost("alloc_pinned of 0 bytes", vkhost_alloc_pinned(a, 0, &mut block2));
        let mut other = vec![0u8; 1 << 16];
        lost("register", vkhost_register(a, other.as_mut_ptr().cast(), 1 << 16));
        lost("register of NULL", vkhost_register(a, ptr::null_mut(), 1 << 16));
        lost("buffer_alloc", vkhost_buffer_alloc(a, 4096, &mut buf2));
        lost("stream_create", vkhost_stream_create(a, VKHOST_QUEUE_COPY, &mut s));
        lost("copy_to_host", vkhost_copy_to_host(a, buf, 0, host.as_mut_ptr().cast(), 64, ptr::null_mut()));
        assert!(block2.is_null() && buf2.is_null() && s.is_null(), "out-pointers are written only on success");
        let ok = |what: &str, st: vkhost_status| assert_eq!(st, VKHOST_OK, "{what}: {}", message());
        let mut raw = std::mem::MaybeUninit::uninit();
        ok("device_raw", vkhost_device_raw(a, raw.as_mut_ptr()));
        let mut granule = 0usize;
        ok("device_registration", vkhost_device_registration(a, &mut granule));
        let (mut vk_buffer, mut offset) = (0u64, u64::MAX);
        ok("find", vkhost_find(a, block, 64, &mut vk_buffer, &mut offset));
        assert_eq!(offset, 0, "the block's own buffer, at its start");
        let mut handle = 0u64;
        ok("buffer_handle", vkhost_buffer_handle(buf, &mut handle));
        assert_ne!(handle, 0);
        let mut trimmed = 0u64;
        ok("trim_pinned_cache", vkhost_device_trim_pinned_cache(a, &mut trimmed));
        let mut stats = std::mem::MaybeUninit::uninit();
        ok("device_stats", vkhost_device_stats(a, stats.as_mut_ptr()));
        let mut counters = vkhost_host_counters::new();
        ok("device_counters", vkhost_device_counters(a, &mut counters));
        ok("event_release", vkhost_event_release(event));
        ok("stream_destroy", vkhost_stream_destroy(stream));
        ok("free_pinned", vkhost_free_pinned(a, block));
        ok("unregister", vkhost_unregister(a, host.as_mut_ptr().cast()));
        assert_eq!(vkhost_free_pinned(a, block), VKHOST_NOT_PINNED, "released once");
        ok("buffer_free", vkhost_buffer_free(buf));
        ok("device_destroy", vkhost_device_destroy(a));
        assert_eq!(vkhost_device_release(a), VKHOST_OK);
    }
}
