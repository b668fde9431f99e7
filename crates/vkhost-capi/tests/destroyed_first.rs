//! After `vkhost_device_destroy`, calls that take the device answer `VKHOST_DEVICE_DESTROYED`
//! (the header's teardown contract), whatever their other arguments: as the Rust API does
//! (issue 2's order), a refusal of an argument never hides that the device is gone.

mod common;
use common::{message, open_validated};
use std::ptr::null_mut;
use vkhost_capi::vkhost_status::*;
use vkhost_capi::*;

#[test]
fn a_destroyed_device_answers_destroyed_before_refusing_arguments() {
    let (a, b) = (open_validated(), open_validated());
    // SAFETY: every handle is live for its calls (opened first, released last) and every
    // out-pointer and host range points to a local of the right type and size.
    unsafe {
        let (mut buf_a, mut buf_b) = (null_mut(), null_mut());
        assert_eq!(vkhost_buffer_alloc(a, 4096, &mut buf_a), VKHOST_OK);
        assert_eq!(vkhost_buffer_alloc(b, 4096, &mut buf_b), VKHOST_OK);
        assert_eq!(vkhost_device_destroy(a), VKHOST_OK);
        let mut bytes = [0u8; 64];
        let mut s = null_mut();
        let check = |what: &str, st: vkhost_status| {
            assert_eq!(st, VKHOST_DEVICE_DESTROYED, "{what}: {}", message());
        };
        check("stream_create with a queue kind that is none", vkhost_stream_create(a, 7, &mut s));
        let st = vkhost_copy_to_device(a, bytes.as_ptr().cast(), 64, buf_b, 0, null_mut());
        check("copy_to_device into another device's buffer", st);
        let st = vkhost_copy_to_host(a, buf_b, 0, bytes.as_mut_ptr().cast(), 64, null_mut());
        check("copy_to_host from another device's buffer", st);
        assert_eq!(vkhost_buffer_free(buf_a), VKHOST_OK);
        assert_eq!(vkhost_buffer_free(buf_b), VKHOST_OK);
        assert_eq!(vkhost_device_release(a), VKHOST_OK);
        assert_eq!(vkhost_device_release(b), VKHOST_OK);
    }
    assert_eq!(vkhost_validation_errors(), 0);
}
