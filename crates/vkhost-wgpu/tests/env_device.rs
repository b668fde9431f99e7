//! `VKHOST_DEVICE` as `Interop::pick_adapter` reads it. Its own test binary (one test): it sets
//! the variable, which no other thread of the process may read or write meanwhile.

use vkhost_wgpu::{Error, Interop, wgpu};

/// A `VKHOST_DEVICE` that is not UTF-8 names no index: `pick_adapter` must refuse it, as
/// vkhost's `Device::open_default` does (`InvalidArgument` naming the variable), not open the
/// default adapter as if it were unset (before: `std::env::var` failed with `NotUnicode`, which
/// read as "not set").
#[test]
#[cfg(unix)]
fn a_vkhost_device_that_is_not_utf8_is_refused() {
    use std::os::unix::ffi::OsStrExt;
    let instance = wgpu::Instance::new(&wgpu::InstanceDescriptor { backends: wgpu::Backends::VULKAN, ..Default::default() });
    if instance.enumerate_adapters(wgpu::Backends::VULKAN).is_empty() {
        eprintln!("SKIPPED: wgpu finds no Vulkan adapter here");
        return;
    }
    // SAFETY: this test binary has one test, and no other thread reads or writes the
    // environment while it runs (the harness's main thread only waits for it).
    unsafe { std::env::set_var("VKHOST_DEVICE", std::ffi::OsStr::from_bytes(b"0\xff")) };
    let r = Interop::pick_adapter(&instance);
    // SAFETY: as above.
    unsafe { std::env::remove_var("VKHOST_DEVICE") };
    match r {
        Err(Error::InvalidArgument { reason }) => assert!(reason.contains("VKHOST_DEVICE"), "{reason}"),
        Err(e) => panic!("expected InvalidArgument naming VKHOST_DEVICE, got {e}"),
        Ok(a) => panic!("a VKHOST_DEVICE that is not UTF-8 was taken as unset: opened {}", a.get_info().name),
    }
    // Unset again: the default adapter.
    Interop::pick_adapter(&instance).expect("default adapter");
}
