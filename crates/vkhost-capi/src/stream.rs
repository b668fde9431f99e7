//! Streams (ordered async work on one queue) and events (points in a stream's work).

use crate::device::queue_kind;
use crate::{Fail, arg, ffi, out, vkhost_buffer, vkhost_device, vkhost_status};
use std::ffi::c_void;
use vkhost::{Event, Stream};

/// A stream (opaque): `vkhost_stream_create`, freed by `vkhost_stream_destroy`.
pub struct vkhost_stream {
    s: Stream,
}

/// An event (opaque): `vkhost_stream_record`, freed by `vkhost_event_release`.
pub struct vkhost_event {
    e: Event,
}

/// Creates a stream on `queue_kind` (`VKHOST_QUEUE_COPY`: the copy engines, alternating between
/// them; `VKHOST_QUEUE_COMPUTE`). `VKHOST_UNSUPPORTED` without timeline semaphores.
///
/// # Safety
/// `device` must be NULL or a live handle; `stream` NULL or valid for a write.
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
        let kind = self::queue_kind(queue_kind, "queue_kind")?;
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
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_stream_synchronize(stream: *const vkhost_stream) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        unsafe { arg(stream, "stream") }?.s.synchronize()?;
        Ok(())
    })
}

/// Waits on the host until the work before `event` is done. After the device or the stream is
/// gone its work is done: `VKHOST_OK`.
///
/// # Safety
/// `event` must be NULL or a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_event_wait(event: *const vkhost_event) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        unsafe { arg(event, "event") }?.e.wait()?;
        Ok(())
    })
}

/// Stores in `*done` whether the work before `event` is done, without blocking.
///
/// # Safety
/// `event` must be NULL or a live handle; `done` NULL or valid for a write.
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
