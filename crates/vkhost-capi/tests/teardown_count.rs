//! `vkhost_validation_errors` counts what the validation layer reports during a device's
//! teardown, also when the teardown runs inside `vkhost_device_release` (the last handle; what
//! Python's `Device.__del__` does) rather than `vkhost_device_destroy`. Up to `7088ff9` a
//! released device's count was taken before its teardown ran, so vkDestroyDevice's reports of
//! objects left undestroyed (the leak check) were never counted and this test fails there.
//! Its own process: the count is process-wide.

mod common;
use common::open_validated;
use vkhost::ash::{self, vk, vk::Handle};
use vkhost_capi::vkhost_status::*;
use vkhost_capi::*;

/// Opens a device with validation through the ABI and leaves one VkBuffer of the caller's on
/// it, for the teardown's check to report.
fn device_with_a_leaked_buffer() -> *mut vkhost_device {
    let dev = open_validated();
    // SAFETY: valid out-pointers; the raw handles are used while the device lives.
    unsafe {
        let mut raw = std::mem::MaybeUninit::<vkhost_raw_device>::uninit();
        assert_eq!(vkhost_device_raw(dev, raw.as_mut_ptr()), VKHOST_OK);
        let raw = raw.assume_init();
        let gipa: vk::PFN_vkGetInstanceProcAddr = std::mem::transmute(raw.get_instance_proc_addr);
        let entry = ash::Entry::from_static_fn(ash::StaticFn { get_instance_proc_addr: gipa });
        let instance = ash::Instance::load(entry.static_fn(), vk::Instance::from_raw(raw.instance as u64));
        let device = ash::Device::load(instance.fp_v1_0(), vk::Device::from_raw(raw.device as u64));
        let info = vk::BufferCreateInfo::default().size(256).usage(vk::BufferUsageFlags::TRANSFER_SRC);
        device.create_buffer(&info, None).expect("vkCreateBuffer");
        dev
    }
}

#[test]
fn teardown_reports_count_whether_the_device_is_destroyed_or_released() {
    if !vkhost::validation_layer_installed() {
        eprintln!("SKIPPED: the Khronos validation layer is not installed (make setup installs it)");
        return;
    }
    assert_eq!(vkhost_validation_errors(), 0);
    // Released without destroy: the teardown runs inside the release.
    let dev = device_with_a_leaked_buffer();
    // SAFETY: a live handle, released once.
    assert_eq!(unsafe { vkhost_device_release(dev) }, VKHOST_OK);
    let after_release = vkhost_validation_errors();
    assert!(after_release >= 1, "vkDestroyDevice's report of the caller's VkBuffer is counted at release");
    // Destroyed, then released.
    let dev = device_with_a_leaked_buffer();
    // SAFETY: a live handle, released once after its destroy.
    unsafe {
        assert_eq!(vkhost_device_destroy(dev), VKHOST_OK);
        assert_eq!(vkhost_device_release(dev), VKHOST_OK);
    }
    assert!(vkhost_validation_errors() > after_release, "and at destroy");
    // A later count still holds both (the finished devices' errors are kept).
    assert!(vkhost_validation_errors() >= 2);
}
