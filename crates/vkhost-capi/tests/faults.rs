//! The statuses only a failing driver produces, reached through the C ABI with vkhost's fault
//! injection (feature `fault-injection`): OUT_OF_HOST_MEMORY, OUT_OF_DEVICE_MEMORY, VULKAN,
//! DEVICE_LOST, each with its message, and the device still destroyable afterwards.
//!
//! `cargo test --release -p vkhost-capi --features fault-injection --test faults`

use std::ffi::CStr;
use std::ptr;
use vkhost::ash::vk;
use vkhost::fault::{self, Point};
use vkhost_capi::vkhost_status::{self, *};
use vkhost_capi::*;

fn message() -> String {
    // SAFETY: the thread's message, read before the next call.
    unsafe { CStr::from_ptr(vkhost_last_error_message()) }.to_string_lossy().into_owned()
}

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
    let mut o = std::mem::MaybeUninit::<vkhost_open_options>::uninit();
    // SAFETY: valid out-pointers throughout; handles are used only while live.
    unsafe {
        assert_eq!(vkhost_open_options_default(o.as_mut_ptr()), VKHOST_OK);
        let mut o = o.assume_init();
        o.validation = 1;
        let mut dev = ptr::null_mut();
        assert_eq!(vkhost_device_open_with(VKHOST_DEFAULT_DEVICE, &o, &mut dev), VKHOST_OK, "{}", message());
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
