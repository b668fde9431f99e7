//! The C ABI's cache of freed pinned blocks, turned on through the environment (it is off on
//! CPU drivers by default): a freed block comes back to the next allocation of its size, and
//! `vkhost_device_trim_pinned_cache` frees it. One test in its own binary (process), so the
//! environment it sets reaches no other test.

use std::ptr::null_mut;
use vkhost_capi::vkhost_status::*;
use vkhost_capi::*;

#[test]
fn trim_frees_the_block_the_cache_kept() {
    // SAFETY: the only test of this binary sets the variable before any other thread reads the
    // environment (the device reads it at open).
    unsafe { std::env::set_var("VKHOST_PINNED_CACHE", "1048576") };
    // SAFETY: every handle is live for its calls (opened first, released last) and every
    // out-pointer points to a local of the type the call writes.
    unsafe {
        let mut opts = std::mem::MaybeUninit::uninit();
        assert_eq!(vkhost_open_options_default(opts.as_mut_ptr()), VKHOST_OK);
        let mut opts = opts.assume_init();
        opts.validation = 1;
        let mut dev = null_mut();
        let st = vkhost_device_open_with(0, &opts, &mut dev);
        if st == VKHOST_LOADER_MISSING || st == VKHOST_NO_DEVICE {
            eprintln!("SKIPPED: no Vulkan device ({st:?})");
            return;
        }
        assert_eq!(st, VKHOST_OK);
        let mut block = null_mut();
        assert_eq!(vkhost_alloc_pinned(dev, 4096, &mut block), VKHOST_OK);
        block.cast::<u8>().write_bytes(7, 4096);
        assert_eq!(vkhost_free_pinned(dev, block), VKHOST_OK);
        let mut again = null_mut();
        assert_eq!(vkhost_alloc_pinned(dev, 4096, &mut again), VKHOST_OK);
        assert_eq!(again, block, "the kept block");
        assert!(std::slice::from_raw_parts(again.cast::<u8>(), 4096).iter().all(|&b| b == 7), "with its old contents");
        assert_eq!(vkhost_free_pinned(dev, again), VKHOST_OK);
        let mut bytes = 0u64;
        assert_eq!(vkhost_device_trim_pinned_cache(dev, &mut bytes), VKHOST_OK);
        assert_eq!(bytes, 4096);
        assert_eq!(vkhost_device_trim_pinned_cache(dev, &mut bytes), VKHOST_OK);
        assert_eq!(bytes, 0, "nothing left");
        assert_eq!(vkhost_device_trim_pinned_cache(dev, null_mut()), VKHOST_NULL_ARGUMENT);
        assert_eq!(vkhost_device_destroy(dev), VKHOST_OK);
        assert_eq!(vkhost_device_trim_pinned_cache(dev, &mut bytes), VKHOST_OK);
        assert_eq!(bytes, 0, "after destroy");
        let mut errors = u64::MAX;
        assert_eq!(vkhost_device_validation_errors(dev, &mut errors), VKHOST_OK);
        assert_eq!(errors, 0);
        assert_eq!(vkhost_device_release(dev), VKHOST_OK);
    }
}
