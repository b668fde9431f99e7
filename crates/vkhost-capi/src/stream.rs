//! Streams (ordered async work on one queue) and events (points in a stream's work).

use crate::device::queue_kind;
use crate::{Fail, arg, ffi, gone_first, out, vkhost_buffer, vkhost_device, vkhost_status};
use std::ffi::c_void;
use vkhost::{Event, Stream};

/// A stream (opaque): `vkhost_stream_create`, freed by `vkhost_stream_destroy`.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev`, `buf` and the stream are live handles (created first, released last);
// every out-pointer and host range points to a local that outlives the work using it.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
    let mut stream: *mut vkhost_stream = null_mut();
    assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    let mut out = [0u32; 1024];
    assert_eq!(vkhost_stream_fill_async(stream, buf, 0, 4096, 5), VKHOST_OK);
    assert_eq!(vkhost_stream_copy_to_host_async(stream, buf, 0, out.as_mut_ptr().cast(), 4096), VKHOST_OK);
    assert_eq!(vkhost_stream_synchronize(stream), VKHOST_OK); // in order: fill, then copy
    assert!(out.iter().all(|&x| x == 5));
    assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
pub struct vkhost_stream {
    s: Stream,
}

/// An event (opaque): `vkhost_stream_record`, freed by `vkhost_event_release`.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev`, `buf` and the stream are live handles (created first, released last);
// every out-pointer and host range points to a local that outlives the work using it.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
#   let mut stream = null_mut();
#   assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    assert_eq!(vkhost_stream_fill_async(stream, buf, 0, 4096, 1), VKHOST_OK);
    let mut event: *mut vkhost_event = null_mut();
    assert_eq!(vkhost_stream_record(stream, &mut event), VKHOST_OK);
    assert_eq!(vkhost_event_wait(event), VKHOST_OK); // the fill is done
    assert_eq!(vkhost_event_release(event), VKHOST_OK);
#   assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
pub struct vkhost_event {
    e: Event,
}

/// Creates a stream on `queue_kind` (`VKHOST_QUEUE_COPY`: the copy engines, alternating between
/// them; `VKHOST_QUEUE_COMPUTE`). `VKHOST_UNSUPPORTED` without timeline semaphores.
///
/// # Safety
/// `device` must be NULL or a live handle; `stream` NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut stream = null_mut();
    // VKHOST_UNSUPPORTED instead on a device without timeline semaphores.
    assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
    assert_eq!(vkhost_stream_create(dev, 42, &mut stream), VKHOST_INVALID_ARGUMENT);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_stream_create(
    device: *const vkhost_device,
    queue_kind: u32,
    stream: *mut *mut vkhost_stream,
) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        let o = out(stream, "stream")?;
        let kind = self::queue_kind(queue_kind, "queue_kind").map_err(|refused| gone_first(&d.dev, refused))?;
        let s = d.dev.stream_on(kind)?;
        // SAFETY: forwarded contract.
        unsafe { o.put(Box::into_raw(Box::new(vkhost_stream { s }))) };
        Ok(())
    })
}

/// Waits for the stream's work, then frees the handle. Works after the device was destroyed.
/// Events recorded on it stay valid.
///
/// # Safety
/// `stream` must be NULL or a live handle not used by another thread; it is dangling after.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev`, `buf` and the stream are live handles (created first, released last);
// every out-pointer and host range points to a local that outlives the work using it.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
    let mut stream = null_mut();
    assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    let mut out = [0u32; 1024];
    assert_eq!(vkhost_stream_fill_async(stream, buf, 0, 4096, 3), VKHOST_OK);
    assert_eq!(vkhost_stream_copy_to_host_async(stream, buf, 0, out.as_mut_ptr().cast(), 4096), VKHOST_OK);
    assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK); // waits for the work first
    assert!(out.iter().all(|&x| x == 3));
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_stream_destroy(stream: *mut vkhost_stream) -> vkhost_status {
    ffi(|| {
        if stream.is_null() {
            return Err(Fail::Null("stream"));
        }
        // SAFETY: made by `Box::into_raw` in `vkhost_stream_create`, freed once per the contract.
        drop(unsafe { Box::from_raw(stream) });
        Ok(())
    })
}

/// Enqueues a copy of `len` host bytes at `src` into `dst` at `dst_offset`. Bytes covered by a
/// registration or pinned block are copied by the device later (the call returns at once);
/// pageable bytes are copied into the stream's staging ring before the call returns.
///
/// # Safety
/// `stream`, `dst` must be NULL or live handles; `src` readable for `len` bytes during the call.
/// Where a registration or pinned block covers `src`, those bytes must stay valid and unchanged
/// until the copy is done (`vkhost_stream_synchronize`, or an event recorded after it).
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev`, `buf` and the stream are live handles (created first, released last);
// every out-pointer and host range points to a local that outlives the work using it.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
#   let mut stream = null_mut();
#   assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    let src = [3u32; 1024]; // pageable: staged before the call returns
    assert_eq!(vkhost_stream_copy_to_device_async(stream, src.as_ptr().cast(), 4096, buf, 0), VKHOST_OK);
    assert_eq!(vkhost_stream_synchronize(stream), VKHOST_OK);
    let mut back = [0u32; 1024];
    assert_eq!(vkhost_copy_to_host(dev, buf, 0, back.as_mut_ptr().cast(), 4096, null_mut()), VKHOST_OK);
    assert_eq!(back, src);
#   assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_stream_copy_to_device_async(
    stream: *const vkhost_stream,
    src: *const c_void,
    len: usize,
    dst: *const vkhost_buffer,
    dst_offset: usize,
) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let (s, b) = unsafe { (arg(stream, "stream")?, arg(dst, "dst")?) };
        // SAFETY: forwarded contract.
        unsafe { s.s.copy_to_device_async(src.cast(), len, &b.buf, dst_offset) }?;
        Ok(())
    })
}

/// Enqueues a copy of `len` bytes from `src` at `src_offset` into host `dst`. The bytes are in
/// place after `vkhost_stream_synchronize`, or `vkhost_event_wait` on an event recorded after
/// this call.
///
/// # Safety
/// `stream`, `src` must be NULL or live handles; `dst` must stay valid, writable and otherwise
/// untouched for `len` bytes until then.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev`, `buf` and the stream are live handles (created first, released last);
// every out-pointer and host range points to a local that outlives the work using it.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
#   let mut stream = null_mut();
#   assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    let src = [9u32; 1024];
    assert_eq!(vkhost_copy_to_device(dev, src.as_ptr().cast(), 4096, buf, 0, null_mut()), VKHOST_OK);
    let mut out = [0u32; 1024]; // untouched by us until the stream is synchronized
    assert_eq!(vkhost_stream_copy_to_host_async(stream, buf, 0, out.as_mut_ptr().cast(), 4096), VKHOST_OK);
    assert_eq!(vkhost_stream_synchronize(stream), VKHOST_OK);
    assert_eq!(out, src);
#   assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_stream_copy_to_host_async(
    stream: *const vkhost_stream,
    src: *const vkhost_buffer,
    src_offset: usize,
    dst: *mut c_void,
    len: usize,
) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let (s, b) = unsafe { (arg(stream, "stream")?, arg(src, "src")?) };
        // SAFETY: forwarded contract.
        unsafe { s.s.copy_to_host_async(&b.buf, src_offset, dst.cast(), len) }?;
        Ok(())
    })
}

/// Enqueues a device-to-device copy of `len` bytes. Overlapping ranges of one buffer:
/// `VKHOST_INVALID_ARGUMENT`.
///
/// # Safety
/// `stream`, `src`, `dst` must be NULL or live handles.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev`, `buf` and the stream are live handles (created first, released last);
// every out-pointer and host range points to a local that outlives the work using it.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
#   let mut stream = null_mut();
#   assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    let mut other = null_mut();
    assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut other), VKHOST_OK);
    let mut out = [0u32; 1024];
    assert_eq!(vkhost_stream_fill_async(stream, buf, 0, 4096, 7), VKHOST_OK);
    assert_eq!(vkhost_stream_copy_buffer_async(stream, buf, 0, other, 0, 4096), VKHOST_OK);
    assert_eq!(vkhost_stream_copy_to_host_async(stream, other, 0, out.as_mut_ptr().cast(), 4096), VKHOST_OK);
    assert_eq!(vkhost_stream_synchronize(stream), VKHOST_OK);
    assert!(out.iter().all(|&x| x == 7));
    assert_eq!(vkhost_stream_copy_buffer_async(stream, buf, 0, buf, 8, 16), VKHOST_INVALID_ARGUMENT); // overlap
    assert_eq!(vkhost_buffer_free(other), VKHOST_OK);
#   assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_stream_copy_buffer_async(
    stream: *const vkhost_stream,
    src: *const vkhost_buffer,
    src_offset: usize,
    dst: *const vkhost_buffer,
    dst_offset: usize,
    len: usize,
) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let (s, a, b) = unsafe { (arg(stream, "stream")?, arg(src, "src")?, arg(dst, "dst")?) };
        s.s.copy_async(&a.buf, src_offset, &b.buf, dst_offset, len)?;
        Ok(())
    })
}

/// Enqueues a fill of `len` bytes at `offset` with the repeated 32-bit `value`; `offset` and
/// `len` must be multiples of 4 (else `VKHOST_INVALID_ARGUMENT`).
///
/// # Safety
/// `stream`, `dst` must be NULL or live handles.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev`, `buf` and the stream are live handles (created first, released last);
// every out-pointer and host range points to a local that outlives the work using it.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
#   let mut stream = null_mut();
#   assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    let b = 0xdead_beef;
    assert_eq!(vkhost_stream_fill_async(stream, buf, 0, 4096, 0), VKHOST_OK);
    assert_eq!(vkhost_stream_fill_async(stream, buf, 16, 32, b), VKHOST_OK); // bytes 16..48
    assert_eq!(vkhost_stream_synchronize(stream), VKHOST_OK);
    let mut out = [1u32; 16];
    assert_eq!(vkhost_copy_to_host(dev, buf, 0, out.as_mut_ptr().cast(), 64, null_mut()), VKHOST_OK);
    assert_eq!(out[3..13], [0, b, b, b, b, b, b, b, b, 0]);
    assert_eq!(vkhost_stream_fill_async(stream, buf, 2, 4, 0), VKHOST_INVALID_ARGUMENT); // not a multiple of 4
#   assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_stream_fill_async(
    stream: *const vkhost_stream,
    dst: *const vkhost_buffer,
    offset: usize,
    len: usize,
    value: u32,
) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let (s, b) = unsafe { (arg(stream, "stream")?, arg(dst, "dst")?) };
        s.s.fill_async(&b.buf, offset, len, value)?;
        Ok(())
    })
}

/// Submits recorded work now, without waiting.
///
/// # Safety
/// `stream` must be NULL or a live handle.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev`, `buf` and the stream are live handles (created first, released last);
// every out-pointer and host range points to a local that outlives the work using it.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
#   let mut stream = null_mut();
#   assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    assert_eq!(vkhost_stream_fill_async(stream, buf, 0, 4096, 1), VKHOST_OK);
    assert_eq!(vkhost_stream_flush(stream), VKHOST_OK); // the device starts on it now
    // ... host work here overlaps the fill ...
    assert_eq!(vkhost_stream_synchronize(stream), VKHOST_OK);
#   assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_stream_flush(stream: *const vkhost_stream) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        unsafe { arg(stream, "stream") }?.s.flush()?;
        Ok(())
    })
}

/// Records an event at the current end of the stream (submitting recorded work) into `*event`.
///
/// # Safety
/// `stream` must be NULL or a live handle; `event` NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev`, `buf` and the stream are live handles (created first, released last);
// every out-pointer and host range points to a local that outlives the work using it.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
#   let mut stream = null_mut();
#   assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    let mut out = [0u32; 1024];
    assert_eq!(vkhost_stream_fill_async(stream, buf, 0, 4096, 2), VKHOST_OK);
    assert_eq!(vkhost_stream_copy_to_host_async(stream, buf, 0, out.as_mut_ptr().cast(), 4096), VKHOST_OK);
    let mut event = null_mut();
    assert_eq!(vkhost_stream_record(stream, &mut event), VKHOST_OK);
    assert_eq!(vkhost_event_wait(event), VKHOST_OK); // both operations before it are done
    assert!(out.iter().all(|&x| x == 2));
    assert_eq!(vkhost_event_release(event), VKHOST_OK);
#   assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_stream_record(stream: *const vkhost_stream, event: *mut *mut vkhost_event) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let s = unsafe { arg(stream, "stream") }?;
        let o = out(event, "event")?;
        let e = s.s.record()?;
        // SAFETY: forwarded contract.
        unsafe { o.put(Box::into_raw(Box::new(vkhost_event { e }))) };
        Ok(())
    })
}

/// Makes later work on `stream` wait, on the device, for `event` (recorded on any stream of the
/// same device). An event of another device: `VKHOST_INVALID_ARGUMENT`.
///
/// # Safety
/// `stream`, `event` must be NULL or live handles.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev`, `buf` and the stream are live handles (created first, released last);
// every out-pointer and host range points to a local that outlives the work using it.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
    let (mut compute, mut copy) = (null_mut(), null_mut());
    assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COMPUTE, &mut compute), VKHOST_OK);
    assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut copy), VKHOST_OK);
    let (mut filled, mut out) = (null_mut(), [0u32; 1024]);
    assert_eq!(vkhost_stream_fill_async(compute, buf, 0, 4096, 4), VKHOST_OK);
    assert_eq!(vkhost_stream_record(compute, &mut filled), VKHOST_OK);
    assert_eq!(vkhost_stream_wait_event(copy, filled), VKHOST_OK); // the copy comes after the fill
    assert_eq!(vkhost_stream_copy_to_host_async(copy, buf, 0, out.as_mut_ptr().cast(), 4096), VKHOST_OK);
    assert_eq!(vkhost_stream_synchronize(copy), VKHOST_OK);
    assert!(out.iter().all(|&x| x == 4));
    assert_eq!(vkhost_event_release(filled), VKHOST_OK);
    assert_eq!(vkhost_stream_destroy(copy), VKHOST_OK);
    assert_eq!(vkhost_stream_destroy(compute), VKHOST_OK);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_stream_wait_event(stream: *const vkhost_stream, event: *const vkhost_event) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let (s, e) = unsafe { (arg(stream, "stream")?, arg(event, "event")?) };
        s.s.wait_event(&e.e)?;
        Ok(())
    })
}

/// Waits until all work enqueued on the stream is done (and pageable destinations are filled).
///
/// # Safety
/// `stream` must be NULL or a live handle.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev`, `buf` and the stream are live handles (created first, released last);
// every out-pointer and host range points to a local that outlives the work using it.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
#   let mut stream = null_mut();
#   assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    let (src, mut out) = ([5u32; 1024], [0u32; 1024]);
    assert_eq!(vkhost_stream_copy_to_device_async(stream, src.as_ptr().cast(), 4096, buf, 0), VKHOST_OK);
    assert_eq!(vkhost_stream_copy_to_host_async(stream, buf, 0, out.as_mut_ptr().cast(), 4096), VKHOST_OK);
    assert_eq!(vkhost_stream_synchronize(stream), VKHOST_OK); // `out` is filled now
    assert_eq!(out, src);
#   assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_stream_synchronize(stream: *const vkhost_stream) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        unsafe { arg(stream, "stream") }?.s.synchronize()?;
        Ok(())
    })
}

/// Waits on the host until the work before `event` is done. After the device or the stream is
/// gone its work is done: `VKHOST_OK`, or the error of work that never ran (a batch lost to a
/// failed submission or a device loss, copy-outs cancelled by the teardown).
///
/// Lost work before the event is its error only until `vkhost_stream_synchronize` on its
/// stream has reported that loss: from then on the event answers `VKHOST_OK` (its work that
/// ran is done; the lost work never will be). A caller that must know whether a download
/// landed checks the status of the calls that enqueued and submitted it, or of the first
/// `synchronize` after them.
///
/// In a forked child: `VKHOST_OK` at once for work the parent saw done before the fork, else
/// `VKHOST_DEVICE_DESTROYED` (nothing of the parent's runs in the child).
///
/// # Safety
/// `event` must be NULL or a live handle.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev`, `buf` and the stream are live handles (created first, released last);
// every out-pointer and host range points to a local that outlives the work using it.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
#   let mut stream = null_mut();
#   assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    assert_eq!(vkhost_stream_fill_async(stream, buf, 0, 4096, 8), VKHOST_OK);
    let (mut event, mut done) = (null_mut(), false);
    assert_eq!(vkhost_stream_record(stream, &mut event), VKHOST_OK);
    assert_eq!(vkhost_event_wait(event), VKHOST_OK);
    assert_eq!(vkhost_event_query(event, &mut done), VKHOST_OK);
    assert!(done);
    assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
    assert_eq!(vkhost_event_wait(event), VKHOST_OK); // its stream is gone: the work is done
    assert_eq!(vkhost_event_release(event), VKHOST_OK);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_event_wait(event: *const vkhost_event) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        unsafe { arg(event, "event") }?.e.wait()?;
        Ok(())
    })
}

/// Stores in `*done` whether the work before `event` is done, without blocking: not on the
/// device, not on another thread's call on the stream (an async copy of pageable memory, which
/// copies through staging), not on a `vkhost_device_destroy` in progress (while one of those
/// holds the stream or the device, `*done` is false unless the event was seen done before).
/// Lost work is its error as for `vkhost_event_wait`.
///
/// In a forked child: `*done` true for work the parent saw done before the fork, else
/// `VKHOST_DEVICE_DESTROYED`, as `vkhost_event_wait`.
///
/// # Safety
/// `event` must be NULL or a live handle; `done` NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev`, `buf` and the stream are live handles (created first, released last);
// every out-pointer and host range points to a local that outlives the work using it.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
#   let mut stream = null_mut();
#   assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    assert_eq!(vkhost_stream_fill_async(stream, buf, 0, 4096, 8), VKHOST_OK);
    let (mut event, mut done) = (null_mut(), false);
    assert_eq!(vkhost_stream_record(stream, &mut event), VKHOST_OK);
    while !done {
        // Never blocks: poll, doing other host work in between.
        assert_eq!(vkhost_event_query(event, &mut done), VKHOST_OK);
    }
    assert_eq!(vkhost_event_release(event), VKHOST_OK);
#   assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_event_query(event: *const vkhost_event, done: *mut bool) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let e = unsafe { arg(event, "event") }?;
        let o = out(done, "done")?;
        let d = e.e.is_done()?;
        // SAFETY: forwarded contract.
        unsafe { o.put(d) };
        Ok(())
    })
}

/// Frees the event handle (the work it marks is unaffected).
///
/// # Safety
/// `event` must be NULL or a live handle not used by another thread; it is dangling after.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev`, `buf` and the stream are live handles (created first, released last);
// every out-pointer and host range points to a local that outlives the work using it.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
#   let mut stream = null_mut();
#   assert_eq!(vkhost_stream_create(dev, VKHOST_QUEUE_COPY, &mut stream), VKHOST_OK);
    let mut event = null_mut();
    assert_eq!(vkhost_stream_fill_async(stream, buf, 0, 4096, 6), VKHOST_OK);
    assert_eq!(vkhost_stream_record(stream, &mut event), VKHOST_OK);
    assert_eq!(vkhost_event_release(event), VKHOST_OK); // the fill still runs
    assert_eq!(vkhost_stream_synchronize(stream), VKHOST_OK);
#   assert_eq!(vkhost_stream_destroy(stream), VKHOST_OK);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_event_release(event: *mut vkhost_event) -> vkhost_status {
    ffi(|| {
        if event.is_null() {
            return Err(Fail::Null("event"));
        }
        // SAFETY: made by `Box::into_raw` in `vkhost_stream_record`, freed once per the contract.
        drop(unsafe { Box::from_raw(event) });
        Ok(())
    })
}
