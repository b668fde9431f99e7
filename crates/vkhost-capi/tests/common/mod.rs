//! Shared by the C ABI's Rust tests.

use std::ffi::CStr;
use std::ptr;
use vkhost_capi::vkhost_status::*;
use vkhost_capi::*;

/// The calling thread's last error message.
pub fn message() -> String {
    // SAFETY: the thread's message, read before the next call.
    unsafe { CStr::from_ptr(vkhost_last_error_message()) }.to_string_lossy().into_owned()
}

/// The default device, opened through the ABI with the validation layer on.
pub fn open_validated() -> *mut vkhost_device {
    let mut o = std::mem::MaybeUninit::<vkhost_open_options>::uninit();
    // SAFETY: valid out-pointers; `o` is read only after the call filled it.
    unsafe {
        assert_eq!(vkhost_open_options_default(o.as_mut_ptr()), VKHOST_OK);
        let mut o = o.assume_init();
        o.validation = 1;
        let mut dev = ptr::null_mut();
        assert_eq!(vkhost_device_open_with(VKHOST_DEFAULT_DEVICE, &o, &mut dev), VKHOST_OK, "{}", message());
        dev
    }
}
