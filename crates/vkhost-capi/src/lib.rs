//! # vkhost's C ABI
//!
//! The seed's function set over a stable C ABI, for runtimes outside Rust (C, C++, Python's
//! ctypes). The library is `libvkhost_capi.so` / `libvkhost_capi.a` (link with
//! `-lvkhost_capi`); the header is `include/vkhost.h`, generated from this crate by cbindgen
//! (`tests/header.rs` fails when the checked-in header drifts; `VKHOST_BLESS=1` rewrites it).
//!
//! ## Conventions
//!
//! - Every function returns a [`vkhost_status`]; results come back through out-pointers, which
//!   are written only on `VKHOST_OK`.
//! - A NULL handle or NULL out-pointer is `VKHOST_NULL_ARGUMENT`; nothing crashes on it. Host
//!   *data* pointers (what `register` or a copy names) are checked by the library itself
//!   (NULL there is `VKHOST_INVALID_ARGUMENT`, as in the Rust API).
//! - [`vkhost_last_error_message`] describes the last call made on the calling thread (an empty
//!   string after a success).
//! - No Rust panic crosses the boundary: each entry point catches one and returns
//!   `VKHOST_INTERNAL`.
//! - Handles are thread-safe (any thread may use them concurrently), except that releasing a
//!   handle (`*_release`, `*_free`, `vkhost_stream_destroy`) while another thread uses it, or
//!   using it afterwards, is undefined behaviour, as with `free`.
//!
//! ## Teardown
//!
//! [`vkhost_device_destroy`] destroys the Vulkan device and everything it owns; the handle stays
//! valid, so late [`vkhost_unregister`] and [`vkhost_free_pinned`] reach the tombstones and
//! succeed (once), and other calls answer `VKHOST_DEVICE_DESTROYED`.
//! [`vkhost_device_release`] frees the handle. Buffers, streams and events hold the device's
//! shared state: release them too (in any order).
//!
//! ## Example
//!
//! The round trip of the C API, called from Rust (C calls the same functions through
//! `include/vkhost.h`): open a device, make a device buffer, copy bytes there and back, clean up.
//!
//! ```
//! use vkhost_capi::{*, vkhost_status::*};
//! use std::ptr::null_mut;
//! let (mut dev, mut buf) = (null_mut(), null_mut());
//! let (src, mut back) = ([7u8; 4096], [0u8; 4096]);
//! // SAFETY: out-pointers and host ranges point to locals of the right type and size; each
//! // handle is used only between its creation and its release.
//! unsafe {
//!     assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
//!     assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
//!     assert_eq!(vkhost_copy_to_device(dev, src.as_ptr().cast(), 4096, buf, 0, null_mut()), VKHOST_OK);
//!     assert_eq!(vkhost_copy_to_host(dev, buf, 0, back.as_mut_ptr().cast(), 4096, null_mut()), VKHOST_OK);
//!     assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
//!     assert_eq!(vkhost_device_release(dev), VKHOST_OK);
//! }
//! assert_eq!(back, src);
//! ```
//!
//! The examples on the items `include/vkhost.h` declares are `#[cfg_attr(doc, doc = ...)]`
//! attributes rather than `///` lines: cbindgen copies only plain doc attributes into the
//! header, which keeps Rust out of the C header.

#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![allow(non_camel_case_types)]

mod device;
mod host;
mod stream;

pub use device::*;
pub use host::*;
pub use stream::*;

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use vkhost::Error;

/// The result of every vkhost call. One code per kind of `vkhost::Error`, plus the ABI's own.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
let mut n = 0usize;
// SAFETY: a NULL out-pointer is checked, never written; `n` is valid for the write.
let (null, ok) = unsafe { (vkhost_device_count(null_mut()), vkhost_device_count(&mut n)) };
assert_eq!(null, VKHOST_NULL_ARGUMENT);
assert_eq!(ok, VKHOST_OK);
assert_eq!(VKHOST_NOT_REGISTERED as i32, 12); // the values are part of the ABI
```
"#
)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vkhost_status {
    /// Success.
    VKHOST_OK = 0,
    /// A handle or out-pointer argument was NULL.
    VKHOST_NULL_ARGUMENT = 1,
    /// libvulkan.so.1 could not be loaded.
    VKHOST_LOADER_MISSING = 2,
    /// No Vulkan device, or none at the requested index.
    VKHOST_NO_DEVICE = 3,
    /// Out of host memory (VK_ERROR_OUT_OF_HOST_MEMORY or a failed host allocation).
    VKHOST_OUT_OF_HOST_MEMORY = 4,
    /// Out of device memory, or no memory type fits.
    VKHOST_OUT_OF_DEVICE_MEMORY = 5,
    /// The device was lost. Until `vkhost_device_destroy`, every call that creates or copies
    /// answers this, whatever its other arguments; what reads what the handles recorded
    /// (`vkhost_device_raw`, `vkhost_device_registration`, `vkhost_find`, `vkhost_buffer_handle`,
    /// the stats and counters) and what releases (`vkhost_free_pinned`, `vkhost_unregister`,
    /// `vkhost_buffer_free`, `vkhost_stream_destroy`, `vkhost_event_release`,
    /// `vkhost_device_trim_pinned_cache`) still works.
    VKHOST_DEVICE_LOST = 6,
    /// The device was destroyed (`vkhost_device_destroy`).
    VKHOST_DEVICE_DESTROYED = 7,
    /// The device or the import policy does not allow this.
    VKHOST_UNSUPPORTED = 8,
    /// An argument was refused before anything reached the driver.
    VKHOST_INVALID_ARGUMENT = 9,
    /// An offset or length runs past the end of a buffer.
    VKHOST_OUT_OF_RANGE = 10,
    /// `vkhost_free_pinned` of an address that is not the start of a live pinned block.
    VKHOST_NOT_PINNED = 11,
    /// `vkhost_unregister` of an address that is not the start of a registration, or
    /// `vkhost_find` of a range no registration or pinned block covers.
    VKHOST_NOT_REGISTERED = 12,
    /// `vkhost_register` of bytes overlapping a registration or pinned block of the device.
    VKHOST_ALREADY_REGISTERED = 13,
    /// The entry is owned by a safe Rust guard (never produced by entries made through this ABI).
    VKHOST_OWNED_BY_GUARD = 14,
    /// The device cannot be destroyed while safe Rust owners of its memory live (never
    /// produced through this ABI alone).
    VKHOST_BUSY = 15,
    /// Any other Vulkan failure; the message names the entry point and the VkResult.
    VKHOST_VULKAN = 16,
    /// A bug in vkhost (a panic caught at the boundary), or an error kind newer than this ABI.
    VKHOST_INTERNAL = 17,
}

use vkhost_status::*;

impl vkhost_status {
    /// The status of a library error.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost_capi::vkhost_status::{self, *};
    /// assert_eq!(vkhost_status::of(&vkhost::Error::NotPinned), VKHOST_NOT_PINNED);
    /// assert_eq!(vkhost_status::of(&vkhost::Error::OutOfRange), VKHOST_OUT_OF_RANGE);
    /// ```
    pub fn of(e: &Error) -> vkhost_status {
        match e {
            Error::LoaderMissing { .. } => VKHOST_LOADER_MISSING,
            Error::NoDevice => VKHOST_NO_DEVICE,
            Error::OutOfHostMemory => VKHOST_OUT_OF_HOST_MEMORY,
            Error::OutOfDeviceMemory => VKHOST_OUT_OF_DEVICE_MEMORY,
            Error::DeviceLost => VKHOST_DEVICE_LOST,
            Error::DeviceDestroyed => VKHOST_DEVICE_DESTROYED,
            Error::Unsupported { .. } => VKHOST_UNSUPPORTED,
            Error::InvalidArgument { .. } => VKHOST_INVALID_ARGUMENT,
            Error::OutOfRange => VKHOST_OUT_OF_RANGE,
            Error::NotPinned => VKHOST_NOT_PINNED,
            Error::NotRegistered => VKHOST_NOT_REGISTERED,
            Error::AlreadyRegistered => VKHOST_ALREADY_REGISTERED,
            Error::OwnedByGuard { .. } => VKHOST_OWNED_BY_GUARD,
            Error::Busy { .. } => VKHOST_BUSY,
            Error::Vulkan { .. } => VKHOST_VULKAN,
            _ => VKHOST_INTERNAL,
        }
    }

    const ALL: [vkhost_status; 18] = [
        VKHOST_OK,
        VKHOST_NULL_ARGUMENT,
        VKHOST_LOADER_MISSING,
        VKHOST_NO_DEVICE,
        VKHOST_OUT_OF_HOST_MEMORY,
        VKHOST_OUT_OF_DEVICE_MEMORY,
        VKHOST_DEVICE_LOST,
        VKHOST_DEVICE_DESTROYED,
        VKHOST_UNSUPPORTED,
        VKHOST_INVALID_ARGUMENT,
        VKHOST_OUT_OF_RANGE,
        VKHOST_NOT_PINNED,
        VKHOST_NOT_REGISTERED,
        VKHOST_ALREADY_REGISTERED,
        VKHOST_OWNED_BY_GUARD,
        VKHOST_BUSY,
        VKHOST_VULKAN,
        VKHOST_INTERNAL,
    ];

    fn name(self) -> &'static std::ffi::CStr {
        match self {
            VKHOST_OK => c"VKHOST_OK",
            VKHOST_NULL_ARGUMENT => c"VKHOST_NULL_ARGUMENT",
            VKHOST_LOADER_MISSING => c"VKHOST_LOADER_MISSING",
            VKHOST_NO_DEVICE => c"VKHOST_NO_DEVICE",
            VKHOST_OUT_OF_HOST_MEMORY => c"VKHOST_OUT_OF_HOST_MEMORY",
            VKHOST_OUT_OF_DEVICE_MEMORY => c"VKHOST_OUT_OF_DEVICE_MEMORY",
            VKHOST_DEVICE_LOST => c"VKHOST_DEVICE_LOST",
            VKHOST_DEVICE_DESTROYED => c"VKHOST_DEVICE_DESTROYED",
            VKHOST_UNSUPPORTED => c"VKHOST_UNSUPPORTED",
            VKHOST_INVALID_ARGUMENT => c"VKHOST_INVALID_ARGUMENT",
            VKHOST_OUT_OF_RANGE => c"VKHOST_OUT_OF_RANGE",
            VKHOST_NOT_PINNED => c"VKHOST_NOT_PINNED",
            VKHOST_NOT_REGISTERED => c"VKHOST_NOT_REGISTERED",
            VKHOST_ALREADY_REGISTERED => c"VKHOST_ALREADY_REGISTERED",
            VKHOST_OWNED_BY_GUARD => c"VKHOST_OWNED_BY_GUARD",
            VKHOST_BUSY => c"VKHOST_BUSY",
            VKHOST_VULKAN => c"VKHOST_VULKAN",
            VKHOST_INTERNAL => c"VKHOST_INTERNAL",
        }
    }
}

/// Why a call failed, before it becomes a status and a message.
pub(crate) enum Fail {
    /// A NULL handle or out-pointer: which argument.
    Null(&'static str),
    /// The library refused.
    Lib(Error),
    /// A status of the ABI's own, with its message.
    Other(vkhost_status, String),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::Lib(e)
    }
}

pub(crate) type Res<T = ()> = Result<T, Fail>;

thread_local! {
    /// The message of the last call on this thread; `vkhost_last_error_message` lends it out.
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last(msg: String) {
    // Interior NULs cannot cross as a C string: replace them.
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    // `try_with`: during thread teardown the slot may be gone; the status still returns.
    let _ = LAST.try_with(|l| *l.borrow_mut() = c);
}

/// Drops a caught panic's payload inside a catch as well: a payload whose drop panics would
/// unwind into the C caller (an abort). A second payload from that drop is leaked.
pub(crate) fn drop_payload(p: Box<dyn std::any::Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(p))) {
        std::mem::forget(again);
    }
}

/// The boundary every entry point goes through: runs `f`, catches a panic, records the
/// message and turns the outcome into a status.
pub(crate) fn ffi(f: impl FnOnce() -> Res) -> vkhost_status {
    stderr_log::install();
    let (status, msg) = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => (VKHOST_OK, String::new()),
        Ok(Err(Fail::Null(what))) => (VKHOST_NULL_ARGUMENT, format!("{what} is NULL")),
        Ok(Err(Fail::Lib(e))) => (vkhost_status::of(&e), e.to_string()),
        Ok(Err(Fail::Other(s, m))) => (s, m),
        Err(p) => {
            let what = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
            drop_payload(p);
            (VKHOST_INTERNAL, format!("internal error (a panic in vkhost): {}", what.unwrap_or_default()))
        }
    };
    set_last(msg);
    status
}

/// `refused`, an argument's refusal by the ABI itself, unless `dev` was destroyed or lost: a gone
/// device answers `VKHOST_DEVICE_DESTROYED` first, whatever the other arguments, as the Rust API
/// does (issue 2's order) and `vkhost_device_destroy`'s contract says, and a lost one
/// `VKHOST_DEVICE_LOST`, as every Rust operation on it does until destroy.
pub(crate) fn gone_first(dev: &vkhost::Device, refused: Fail) -> Fail {
    if dev.is_destroyed() {
        Fail::Lib(Error::DeviceDestroyed)
    } else if dev.is_lost() {
        Fail::Lib(Error::DeviceLost)
    } else {
        refused
    }
}

/// A handle argument: `Null` when NULL.
///
/// # Safety
/// Non-NULL `p` must point to a live object of this type that outlives `'a`.
pub(crate) unsafe fn arg<'a, T>(p: *const T, what: &'static str) -> Res<&'a T> {
    // SAFETY: NULL is checked by `as_ref`; otherwise the caller's contract.
    unsafe { p.as_ref() }.ok_or(Fail::Null(what))
}

/// An out-pointer argument, checked before any work so a NULL leaves no partial state.
pub(crate) fn out<T>(p: *mut T, what: &'static str) -> Res<Out<T>> {
    if p.is_null() { Err(Fail::Null(what)) } else { Ok(Out(p)) }
}

/// A checked, non-NULL out-pointer.
pub(crate) struct Out<T>(*mut T);

impl<T> Out<T> {
    /// Writes the result (without reading or dropping what was there: C memory may be
    /// uninitialised).
    ///
    /// # Safety
    /// The pointer must be valid for a write of `T` and suitably aligned.
    pub(crate) unsafe fn put(self, v: T) {
        // SAFETY: non-NULL (checked by `out`), valid and aligned per the caller's contract.
        unsafe { self.0.write(v) }
    }
}

/// The message of the last vkhost call made on the calling thread: why it failed, or `""` after
/// a success. Never NULL. The string belongs to vkhost and stays valid until the next vkhost call
/// on the same thread (calls to this function, `vkhost_status_name` and
/// `vkhost_validation_errors` do not count).
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
use std::ffi::CStr;
let mut n = 0;
// SAFETY: NULL is allowed for the out-pointer (the failure shown), `n` is valid for the write;
// each message is copied out before the next vkhost call on this thread.
let (failed, succeeded) = unsafe {
    assert_eq!(vkhost_device_count(null_mut()), VKHOST_NULL_ARGUMENT);
    let failed = CStr::from_ptr(vkhost_last_error_message()).to_owned();
    assert_eq!(vkhost_device_count(&mut n), VKHOST_OK);
    (failed, CStr::from_ptr(vkhost_last_error_message()).to_owned())
};
assert_eq!(failed.to_str(), Ok("count is NULL"));
assert!(succeeded.is_empty());
```
"#
)]
#[unsafe(no_mangle)]
pub extern "C" fn vkhost_last_error_message() -> *const c_char {
    // Never unwinds: the slot is only borrowed mutably inside `set_last`, which does not call
    // out; if the thread is being torn down the static empty string is returned.
    LAST.try_with(|l| l.borrow().as_ptr()).unwrap_or(c"".as_ptr())
}

/// The name of a status code as a static string (`"VKHOST_NOT_REGISTERED"`), or
/// `"VKHOST_UNKNOWN_STATUS"` for a value that is not a `vkhost_status`.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
use std::ffi::CStr;
// SAFETY: vkhost_status_name returns static NUL-terminated strings.
let (name, unknown) =
    unsafe { (CStr::from_ptr(vkhost_status_name(VKHOST_OUT_OF_RANGE as i32)), CStr::from_ptr(vkhost_status_name(99))) };
assert_eq!(name, c"VKHOST_OUT_OF_RANGE");
assert_eq!(unknown, c"VKHOST_UNKNOWN_STATUS");
```
"#
)]
#[unsafe(no_mangle)]
pub extern "C" fn vkhost_status_name(status: i32) -> *const c_char {
    vkhost_status::ALL.iter().find(|s| **s as i32 == status).map_or(c"VKHOST_UNKNOWN_STATUS".as_ptr(), |s| s.name().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic whose payload panics again when dropped (`panic_any` of such a value, say from
    /// a user's logger) answers `VKHOST_INTERNAL`: the payload was dropped outside the catch,
    /// and that second panic unwound into the `extern "C"` caller, which aborts the process.
    #[test]
    fn a_panic_payload_that_panics_on_drop_stays_inside_the_boundary() {
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("the payload's drop");
            }
        }
        let st = ffi(|| std::panic::panic_any(Bomb));
        assert_eq!(st, VKHOST_INTERNAL);
        // SAFETY: the message of this thread's last call, read before the next.
        let msg = unsafe { std::ffi::CStr::from_ptr(vkhost_last_error_message()) };
        assert!(msg.to_string_lossy().contains("a panic in vkhost"), "{msg:?}");
    }

    #[test]
    fn statuses_are_numbered_in_order_and_named() {
        for (i, s) in vkhost_status::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
            // SAFETY: static NUL-terminated strings.
            let name = unsafe { std::ffi::CStr::from_ptr(vkhost_status_name(i as i32)) };
            assert_eq!(name, s.name());
        }
        // SAFETY: as above.
        let unknown = unsafe { std::ffi::CStr::from_ptr(vkhost_status_name(99)) };
        assert_eq!(unknown, c"VKHOST_UNKNOWN_STATUS");
    }

    /// `vkhost_validation_errors` returns a count, not a status: it leaves the thread's message
    /// (and the pointer `vkhost_last_error_message` lent out) as it was, so C may read both in
    /// one expression (`printf("%s (%llu)", vkhost_last_error_message(), vkhost_validation_errors())`,
    /// whose arguments run in either order). It replaced the message with "" before, freeing the
    /// string such a caller was still to read.
    #[test]
    fn the_validation_count_leaves_the_last_message_alone() {
        // SAFETY: a NULL out-pointer is checked, never written.
        assert_eq!(unsafe { crate::vkhost_device_count(std::ptr::null_mut()) }, VKHOST_NULL_ARGUMENT);
        let lent = vkhost_last_error_message();
        let _ = crate::vkhost_validation_errors();
        assert_eq!(vkhost_last_error_message(), lent, "the lent string was replaced");
        // SAFETY: the thread's message, still the one lent out above (asserted).
        let m = unsafe { std::ffi::CStr::from_ptr(vkhost_last_error_message()) };
        assert_eq!(m, c"count is NULL");
    }

    /// A NULL out-pointer is `VKHOST_NULL_ARGUMENT`, as the crate docs say, whatever the other
    /// arguments: `vkhost_device_open_with` checked its options first and answered
    /// `VKHOST_INVALID_ARGUMENT` for bad options and a NULL out-pointer (a review's note).
    #[test]
    fn a_null_out_pointer_is_named_before_the_options_are_checked() {
        let mut o = std::mem::MaybeUninit::uninit();
        // SAFETY: a valid out-pointer to a local.
        assert_eq!(unsafe { crate::vkhost_open_options_default(o.as_mut_ptr()) }, VKHOST_OK);
        // SAFETY: written by the call above.
        let mut o = unsafe { o.assume_init() };
        o.import_policy = 77;
        // SAFETY: the options point to a local; the NULL out-pointer is checked, never written.
        let st = unsafe { crate::vkhost_device_open_with(0, &o, std::ptr::null_mut()) };
        assert_eq!(st, VKHOST_NULL_ARGUMENT);
    }

    #[test]
    fn a_panic_becomes_internal_with_its_message() {
        let s = ffi(|| panic!("boom"));
        assert_eq!(s, VKHOST_INTERNAL);
        // SAFETY: the thread's message, read before the next call.
        let m = unsafe { std::ffi::CStr::from_ptr(vkhost_last_error_message()) }.to_string_lossy().into_owned();
        assert!(m.contains("boom"), "{m}");
        assert_eq!(ffi(|| Ok(())), VKHOST_OK);
        // SAFETY: as above.
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(vkhost_last_error_message()) }, c"");
    }
}

/// vkhost's log for programs that have no Rust logger: a C or Python program would otherwise
/// never see vkhost's warnings (an environment variable ignored for a malformed value, a
/// validation-layer message, work cancelled by a device loss). Lines go to standard error as
/// `vkhost: <level>: <message>`, warnings and errors by default; `VKHOST_LOG=off|error|warn|info|debug|trace`
/// sets the level (another value warns and keeps `warn`). Installed by the first call through
/// the ABI, unless the process already has a logger, or `VKHOST_LOG=off`: a Rust program that
/// links this crate and sets a logger of its own sets it before its first `vkhost_*` call (or
/// sets `VKHOST_LOG=off`), since a process has one logger.
mod stderr_log {
    use std::io::Write;

    struct Stderr;

    impl log::Log for Stderr {
        fn enabled(&self, m: &log::Metadata<'_>) -> bool {
            m.level() <= log::max_level()
        }
        fn log(&self, r: &log::Record<'_>) {
            if self.enabled(r.metadata()) {
                // One write per line, so lines from several threads do not interleave.
                let line = format!("vkhost: {}: {}\n", r.level().as_str().to_ascii_lowercase(), r.args());
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
        }
        fn flush(&self) {}
    }

    static LOGGER: Stderr = Stderr;

    /// The level `VKHOST_LOG` asks for (warnings and errors when unset), and the value when it
    /// is none of the known ones.
    fn level() -> (log::LevelFilter, Option<String>) {
        let v = std::env::var_os("VKHOST_LOG").map(|v| v.to_string_lossy().into_owned());
        let level = match v.as_deref().map(str::trim) {
            None | Some("warn") => log::LevelFilter::Warn,
            Some("off" | "0") => log::LevelFilter::Off,
            Some("error") => log::LevelFilter::Error,
            Some("info") => log::LevelFilter::Info,
            Some("debug") => log::LevelFilter::Debug,
            Some("trace") => log::LevelFilter::Trace,
            Some(_) => return (log::LevelFilter::Warn, v),
        };
        (level, None)
    }

    pub(crate) fn install() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let (level, unknown) = level();
            if level != log::LevelFilter::Off && log::set_logger(&LOGGER).is_ok() {
                log::set_max_level(level);
                if let Some(v) = unknown {
                    log::warn!("VKHOST_LOG={v:?} is not one of off, error, warn, info, debug, trace: warn applies");
                }
            }
        });
    }
}
