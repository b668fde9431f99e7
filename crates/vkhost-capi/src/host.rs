//! The seed's host-memory calls (pinned blocks, registrations, find, synchronous copies,
//! stats) and device buffers.

use crate::{Fail, arg, ffi, gone_first, out, vkhost_device, vkhost_status};
use std::ffi::c_void;
use vkhost::ash::vk::Handle;
use vkhost::{CopyPath, DeviceBuffer, HostStats, host};

/// A device-local buffer (opaque): `vkhost_buffer_alloc`, freed by `vkhost_buffer_free`.
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
    let mut buf: *mut vkhost_buffer = null_mut();
    assert_eq!(vkhost_buffer_alloc(dev, 1 << 16, &mut buf), VKHOST_OK);
    let mut len = 0;
    assert_eq!(vkhost_buffer_len(buf, &mut len), VKHOST_OK);
    assert_eq!(len, 1 << 16);
    assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
pub struct vkhost_buffer {
    pub(crate) buf: DeviceBuffer,
}

/// What ran for a synchronous copy.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
use vkhost_copy_path::*;
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
    let mut block = null_mut();
    assert_eq!(vkhost_alloc_pinned(dev, 4096, &mut block), VKHOST_OK);
    let mut pageable = vec![0u8; 4096];
    let mut path = VKHOST_PATH_MIXED;
    assert_eq!(vkhost_copy_to_host(dev, buf, 0, block, 4096, &mut path), VKHOST_OK);
    assert_eq!(path, VKHOST_PATH_DIRECT); // into pinned memory
    assert_eq!(vkhost_copy_to_host(dev, buf, 0, pageable.as_mut_ptr().cast(), 4096, &mut path), VKHOST_OK);
    assert_eq!(path, VKHOST_PATH_STAGED); // into memory vkhost does not know
    assert_eq!(vkhost_free_pinned(dev, block), VKHOST_OK);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum vkhost_copy_path {
    /// Every byte went straight between registered or pinned host memory and the device buffer.
    VKHOST_PATH_DIRECT = 0,
    /// Every byte went through staging memory.
    VKHOST_PATH_STAGED = 1,
    /// Some of each (a range crossing registrations and gaps).
    VKHOST_PATH_MIXED = 2,
    /// A small write stored by the CPU into mapped device memory (no copy submitted).
    VKHOST_PATH_MAPPED = 3,
}

impl From<CopyPath> for vkhost_copy_path {
    fn from(p: CopyPath) -> Self {
        match p {
            CopyPath::Direct => vkhost_copy_path::VKHOST_PATH_DIRECT,
            CopyPath::Staged => vkhost_copy_path::VKHOST_PATH_STAGED,
            CopyPath::Mixed => vkhost_copy_path::VKHOST_PATH_MIXED,
            CopyPath::Mapped => vkhost_copy_path::VKHOST_PATH_MAPPED,
        }
    }
}

/// Copy-path counters and registry sizes (`vkhost_stats`, `vkhost_device_stats`).
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
    let mut block = null_mut();
    assert_eq!(vkhost_alloc_pinned(dev, 4096, &mut block), VKHOST_OK);
    let mut stats = MaybeUninit::<vkhost_host_stats>::uninit();
    assert_eq!(vkhost_device_stats(dev, stats.as_mut_ptr()), VKHOST_OK);
    let stats = stats.assume_init();
    assert_eq!((stats.live_pinned, stats.live_imports), (1, 0));
    assert_eq!(vkhost_free_pinned(dev, block), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct vkhost_host_stats {
    /// Bytes copied directly from or to pinned or registered memory.
    pub direct_bytes: u64,
    /// Bytes copied through staging memory.
    pub staged_bytes: u64,
    /// Live registrations (whose device is alive).
    pub live_imports: usize,
    /// Live pinned blocks (whose device is alive).
    pub live_pinned: usize,
}

impl From<HostStats> for vkhost_host_stats {
    fn from(s: HostStats) -> Self {
        vkhost_host_stats {
            direct_bytes: s.direct_bytes,
            staged_bytes: s.staged_bytes,
            live_imports: s.live_imports,
            live_pinned: s.live_pinned,
        }
    }
}

/// Allocates `len` bytes of pinned host memory (driver memory, unless `VKHOST_PINNED_HUGE_MIN`
/// asks for vkhost's own huge-page memory imported; mapped until `vkhost_free_pinned` or the
/// device's destroy, and bound to a VkBuffer) and stores its address in `*ptr`. Free it with `vkhost_free_pinned` before
/// destroying the device (destroy unmaps it). `len == 0`: `VKHOST_INVALID_ARGUMENT`.
/// More than one allocation may hold (maxMemoryAllocationSize, or the options'
/// `max_import_piece`): one contiguous block of vkhost's own memory imported in pieces where
/// the device can import host memory, else `VKHOST_UNSUPPORTED`.
///
/// # Safety
/// `device` must be NULL or a live handle; `ptr` NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
// The block is written only while allocated, within its 64 KiB.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut block = null_mut();
    assert_eq!(vkhost_alloc_pinned(dev, 1 << 16, &mut block), VKHOST_OK);
    let bytes = std::slice::from_raw_parts_mut(block.cast::<u8>(), 1 << 16);
    bytes.fill(7); // ordinary host memory, mapped for its whole life
    assert_eq!(vkhost_free_pinned(dev, block), VKHOST_OK);
    assert_eq!(vkhost_alloc_pinned(dev, 0, &mut block), VKHOST_INVALID_ARGUMENT);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_alloc_pinned(device: *const vkhost_device, len: usize, ptr: *mut *mut c_void) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        let o = out(ptr, "ptr")?;
        let p = host::alloc_pinned(&d.dev, len)?;
        // SAFETY: forwarded contract.
        unsafe { o.put(p.as_ptr().cast()) };
        Ok(())
    })
}

/// Frees the pinned block that starts at `ptr`. The entry goes at once (a later `vkhost_find`
/// misses); the call returns once the copies and launches in flight that use the block are
/// done, as `cudaFreeHost` does, and the memory is freed after that on vkhost's background
/// thread, or, for a driver block that fits the device's cache of freed blocks (64 MiB on GPUs
/// by default, none on CPU drivers; `VKHOST_PINNED_CACHE=N|off` sets it), kept for the next
/// `vkhost_alloc_pinned` of exactly its size, which gets it back with its old contents;
/// `vkhost_device_trim_pinned_cache` frees what is kept. A copy recorded into the caller's
/// command buffer, which only the caller submits, does not hold the call up: it holds the
/// block until it is reaped.
/// `VKHOST_NOT_PINNED` for anything but a live block's start (interior pointers, registered
/// addresses, a second free). After `vkhost_device_destroy` the block is a tombstone: `VKHOST_OK`,
/// once.
///
/// # Safety
/// `device` must be NULL or a live handle. `ptr` is only compared, never dereferenced.
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
    let mut block = null_mut();
    assert_eq!(vkhost_alloc_pinned(dev, 4096, &mut block), VKHOST_OK);
    assert_eq!(vkhost_free_pinned(dev, block.cast::<u8>().add(8).cast()), VKHOST_NOT_PINNED);
    assert_eq!(vkhost_free_pinned(dev, block), VKHOST_OK);
    assert_eq!(vkhost_free_pinned(dev, block), VKHOST_NOT_PINNED); // a second free
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_free_pinned(device: *const vkhost_device, ptr: *mut c_void) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        host::free_pinned(&d.dev, ptr)?;
        Ok(())
    })
}

/// Registers (imports, VK_EXT_external_memory_host) the caller's memory `[ptr, ptr+len)`, rounded
/// out to the import granule, so copies from or to it go direct.
///
/// Refusals leave nothing behind: `VKHOST_UNSUPPORTED` (no extension, or imports off),
/// `VKHOST_INVALID_ARGUMENT` (NULL `ptr`, `len == 0`, overflow, or pages not mapped read-write),
/// `VKHOST_ALREADY_REGISTERED` (overlaps a registration or pinned block of this device).
///
/// # Safety
/// `device` must be NULL or a live handle. Until `vkhost_unregister` returns (or the device is
/// destroyed), the pages covering the rounded range must stay mapped and writable, and must not
/// be freed or remapped, nor a file they map shrink below them (SIGBUS on any access): the
/// device may read or write them whenever a copy names them.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last); `mem` stays allocated until
// after its unregistration; out-pointers point to locals of their type.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
#   let mut buf = null_mut();
#   assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
    let mut granule = 0;
    assert_eq!(vkhost_device_registration(dev, &mut granule), VKHOST_OK);
    // Memory that starts and ends on the granule, so the registration covers exactly it.
    let layout = std::alloc::Layout::from_size_align(granule.max(1 << 16), granule).unwrap();
    let mem = std::alloc::alloc_zeroed(layout);
    assert!(!mem.is_null());
    assert_eq!(vkhost_register(dev, mem.cast(), layout.size()), VKHOST_OK);
    let mut path = vkhost_copy_path::VKHOST_PATH_STAGED;
    assert_eq!(vkhost_copy_to_host(dev, buf, 0, mem.cast(), 4096, &mut path), VKHOST_OK);
    assert_eq!(path, vkhost_copy_path::VKHOST_PATH_DIRECT); // no staging
    assert_eq!(vkhost_register(dev, mem.cast(), 4096), VKHOST_ALREADY_REGISTERED);
    assert_eq!(vkhost_unregister(dev, mem.cast()), VKHOST_OK);
    std::alloc::dealloc(mem, layout);
#   assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_register(device: *const vkhost_device, ptr: *mut c_void, len: usize) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        // SAFETY: forwarded contract (pages stay mapped until unregister).
        unsafe { host::register(&d.dev, ptr, len) }?;
        Ok(())
    })
}

/// Unregisters the registration that starts at `ptr`; returns once no submitted work can read
/// or write its bytes. `VKHOST_NOT_REGISTERED` for an interior or unknown pointer, a second
/// unregister or a pinned block. After `vkhost_device_destroy`: `VKHOST_OK`, once (tombstone).
///
/// # Safety
/// `device` must be NULL or a live handle. `ptr` is only compared, never dereferenced.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last); `mem` stays allocated until
// after its unregistration; out-pointers point to locals of their type.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut granule = 0;
    assert_eq!(vkhost_device_registration(dev, &mut granule), VKHOST_OK);
    // Memory that starts and ends on the granule, so the registration covers exactly it.
    let layout = std::alloc::Layout::from_size_align(granule.max(1 << 16), granule).unwrap();
    let mem = std::alloc::alloc_zeroed(layout);
    assert!(!mem.is_null());
    assert_eq!(vkhost_register(dev, mem.cast(), layout.size()), VKHOST_OK);
    assert_eq!(vkhost_unregister(dev, mem.add(4096).cast()), VKHOST_NOT_REGISTERED); // interior
    assert_eq!(vkhost_unregister(dev, mem.cast()), VKHOST_OK);
    assert_eq!(vkhost_unregister(dev, mem.cast()), VKHOST_NOT_REGISTERED); // a second time
    std::alloc::dealloc(mem, layout); // now the device can no longer touch it
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_unregister(device: *const vkhost_device, ptr: *mut c_void) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        host::unregister(&d.dev, ptr)?;
        Ok(())
    })
}

/// Finds the VkBuffer (as its `uint64_t` handle) and byte offset that address
/// `[ptr, ptr+len)`, when one live registration or pinned block covers all of it through one
/// buffer. Otherwise `VKHOST_NOT_REGISTERED` (also after the device was destroyed). A
/// registration covers its import: the whole pages (or import granules) around the registered
/// bytes, so bytes next to them in those pages are found too, and copies of them go direct.
/// (Registering is refused only over the registered bytes themselves: a second range that
/// shares a page with the first may be registered.) An entry
/// imported in several pieces (`max_import_piece`, or larger than the device's
/// maxMemoryAllocationSize) has a buffer per piece: a range that crosses from one piece into
/// the next has no single buffer and is `VKHOST_NOT_REGISTERED`; copies over it still go
/// direct.
///
/// # Safety
/// `device` must be NULL or a live handle; `buffer` and `offset` NULL or valid for writes.
/// `ptr` is only compared.
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
    let mut block = null_mut();
    assert_eq!(vkhost_alloc_pinned(dev, 1 << 16, &mut block), VKHOST_OK);
    let (mut vk_buffer, mut offset, mut vk_buffer2, mut offset2) = (0u64, 0u64, 0u64, 0u64);
    assert_eq!(vkhost_find(dev, block, 1 << 16, &mut vk_buffer, &mut offset), VKHOST_OK);
    assert_eq!(vkhost_find(dev, block.cast::<u8>().add(100).cast(), 50, &mut vk_buffer2, &mut offset2), VKHOST_OK);
    assert_ne!(vk_buffer, 0);
    assert_eq!((vk_buffer2, offset2), (vk_buffer, offset + 100));
    let local = 0u32; // memory vkhost does not know
    assert_eq!(vkhost_find(dev, (&raw const local).cast(), 4, &mut vk_buffer, &mut offset), VKHOST_NOT_REGISTERED);
    assert_eq!(vkhost_free_pinned(dev, block), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_find(
    device: *const vkhost_device,
    ptr: *const c_void,
    len: usize,
    buffer: *mut u64,
    offset: *mut u64,
) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        let (ob, oo) = (out(buffer, "buffer")?, out(offset, "offset")?);
        let (b, off) = host::find(&d.dev, ptr, len).ok_or(Fail::Other(
            vkhost_status::VKHOST_NOT_REGISTERED,
            format!("no single buffer of a registration or pinned block covers {len} bytes at {ptr:p} (none covers them, or they cross between two import pieces)"),
        ))?;
        // SAFETY: forwarded contract.
        unsafe {
            ob.put(b.as_raw());
            oo.put(off);
        }
        Ok(())
    })
}

/// The buffer of a synchronous copy belongs to the device it names (a destroyed or lost device answers
/// that first).
fn same_device(d: &vkhost_device, b: &vkhost_buffer) -> Result<(), Fail> {
    if d.dev.id() != b.buf.device().id() {
        let refused = vkhost::Error::InvalidArgument { reason: "the buffer belongs to another device".into() }.into();
        return Err(gone_first(&d.dev, refused));
    }
    Ok(())
}

/// Copies `len` bytes from host `src` into `dst` at `dst_offset`, synchronously: direct where a
/// registration or pinned block covers the bytes, staged elsewhere. `*path` (if not NULL) says
/// which. `VKHOST_OUT_OF_RANGE` past the buffer's end. A zero-length copy at an offset within
/// the buffer (at most its size) is a no-op.
///
/// # Safety
/// `device`, `dst` must be NULL or live handles; `src` readable for `len` bytes during the call;
/// `path` NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
use vkhost_copy_path::*;
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut buf = null_mut();
    assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
    let src: Vec<u8> = (0..=255).cycle().take(4096).collect();
    let mut path = VKHOST_PATH_MIXED;
    assert_eq!(vkhost_copy_to_device(dev, src.as_ptr().cast(), 4096, buf, 0, &mut path), VKHOST_OK);
    // Pageable memory: staged, or stored by the CPU where device memory is mapped (a full BAR).
    assert!(path == VKHOST_PATH_STAGED || path == VKHOST_PATH_MAPPED);
    let mut back = vec![0u8; 4096];
    assert_eq!(vkhost_copy_to_host(dev, buf, 0, back.as_mut_ptr().cast(), 4096, null_mut()), VKHOST_OK);
    assert_eq!(back, src);
    assert_eq!(vkhost_copy_to_device(dev, src.as_ptr().cast(), 8, buf, 4092, &mut path), VKHOST_OUT_OF_RANGE);
    assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_copy_to_device(
    device: *const vkhost_device,
    src: *const c_void,
    len: usize,
    dst: *const vkhost_buffer,
    dst_offset: usize,
    path: *mut vkhost_copy_path,
) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let (d, b) = unsafe { (arg(device, "device")?, arg(dst, "dst")?) };
        same_device(d, b)?;
        // SAFETY: forwarded contract (`src` readable for `len` bytes).
        let p = unsafe { host::copy_to_device(&d.dev, src.cast(), len, &b.buf, dst_offset) }?;
        if !path.is_null() {
            // SAFETY: non-NULL, valid per the contract.
            unsafe { path.write(p.into()) };
        }
        Ok(())
    })
}

/// Copies `len` bytes from `src` at `src_offset` into host `dst`, synchronously: direct where
/// `dst` is registered or pinned, staged elsewhere. `*path` (if not NULL) says which.
///
/// # Safety
/// `device`, `src` must be NULL or live handles; `dst` writable for `len` bytes and not
/// otherwise accessed during the call; `path` NULL or valid for a write.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
use vkhost_copy_path::*;
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
// The pinned block is read only while allocated, within its 4096 bytes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let (mut buf, mut block) = (null_mut(), null_mut());
    assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
    assert_eq!(vkhost_alloc_pinned(dev, 4096, &mut block), VKHOST_OK);
    let src = [42u8; 4096];
    assert_eq!(vkhost_copy_to_device(dev, src.as_ptr().cast(), 4096, buf, 0, null_mut()), VKHOST_OK);
    let mut path = VKHOST_PATH_MIXED;
    assert_eq!(vkhost_copy_to_host(dev, buf, 0, block, 4096, &mut path), VKHOST_OK);
    assert_eq!(path, VKHOST_PATH_DIRECT); // straight into the pinned block
    assert_eq!(std::slice::from_raw_parts(block.cast::<u8>(), 4096), &src);
    assert_eq!(vkhost_free_pinned(dev, block), VKHOST_OK);
    assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_copy_to_host(
    device: *const vkhost_device,
    src: *const vkhost_buffer,
    src_offset: usize,
    dst: *mut c_void,
    len: usize,
    path: *mut vkhost_copy_path,
) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let (d, b) = unsafe { (arg(device, "device")?, arg(src, "src")?) };
        same_device(d, b)?;
        // SAFETY: forwarded contract (`dst` writable for `len` bytes).
        let p = unsafe { host::copy_to_host(&d.dev, &b.buf, src_offset, dst.cast(), len) }?;
        if !path.is_null() {
            // SAFETY: non-NULL, valid per the contract.
            unsafe { path.write(p.into()) };
        }
        Ok(())
    })
}

/// Process-wide counters into `*stats`: bytes by path since start, live entries now.
///
/// # Safety
/// `stats` must be NULL or valid for a write.
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
    let mut block = null_mut();
    assert_eq!(vkhost_alloc_pinned(dev, 4096, &mut block), VKHOST_OK);
    let mut stats = MaybeUninit::<vkhost_host_stats>::uninit();
    assert_eq!(vkhost_stats(stats.as_mut_ptr()), VKHOST_OK);
    assert!(stats.assume_init().live_pinned >= 1); // this block, and any other device's
    assert_eq!(vkhost_free_pinned(dev, block), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_stats(stats: *mut vkhost_host_stats) -> vkhost_status {
    ffi(|| {
        let o = out(stats, "stats")?;
        // SAFETY: forwarded contract.
        unsafe { o.put(host::stats().into()) };
        Ok(())
    })
}

/// The same counters for one device (bytes copied through it, its live entries).
///
/// # Safety
/// `device` must be NULL or a live handle; `stats` NULL or valid for a write.
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
    let mut buf = null_mut();
    assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
    let mut pageable = vec![0u8; 4096];
    assert_eq!(vkhost_copy_to_host(dev, buf, 0, pageable.as_mut_ptr().cast(), 4096, null_mut()), VKHOST_OK);
    let mut stats = MaybeUninit::<vkhost_host_stats>::uninit();
    assert_eq!(vkhost_device_stats(dev, stats.as_mut_ptr()), VKHOST_OK);
    assert_eq!(stats.assume_init().staged_bytes, 4096); // this device's copies only
    assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_stats(device: *const vkhost_device, stats: *mut vkhost_host_stats) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        let o = out(stats, "stats")?;
        // SAFETY: forwarded contract.
        unsafe { o.put(host::device_stats(&d.dev).into()) };
        Ok(())
    })
}

/// Every copy-path counter and registry size (`vkhost_counters`, `vkhost_device_counters`):
/// what `vkhost_host_stats` has, and the counters added since. Extensible: fields are only
/// ever appended. The caller sets `struct_size` to `sizeof(vkhost_host_counters)` before the
/// call; vkhost writes the fields that both its struct and the caller's hold, sets
/// `struct_size` to the bytes it wrote, and leaves the rest of a larger struct as it was. So a
/// program built against an older header works with a later library (it gets the fields it
/// knows), and one built against a later header learns from `struct_size` which fields an
/// older library filled. A `struct_size` short of this first version's fields is
/// `VKHOST_INVALID_ARGUMENT`, with nothing written.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::ptr::null_mut;
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut block = null_mut();
    assert_eq!(vkhost_alloc_pinned(dev, 4096, &mut block), VKHOST_OK);
    let mut c = vkhost_host_counters::new(); // struct_size set
    assert_eq!(vkhost_device_counters(dev, &mut c), VKHOST_OK);
    assert_eq!((c.live_pinned, c.live_imports, c.mapped_bytes), (1, 0, 0));
    assert_eq!(vkhost_free_pinned(dev, block), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct vkhost_host_counters {
    /// Set by the caller to `sizeof(vkhost_host_counters)`; set by vkhost to the bytes it wrote.
    pub struct_size: usize,
    /// Bytes copied directly from or to pinned or registered memory.
    pub direct_bytes: u64,
    /// Bytes copied through staging memory.
    pub staged_bytes: u64,
    /// Bytes written by CPU stores into device memory mapped in the host's address space (the
    /// BAR path of small synchronous writes).
    pub mapped_bytes: u64,
    /// Bytes stream copies moved through a stream's scratch buffer (gathered runs of small
    /// direct copies; counted in `direct_bytes` too).
    pub gathered_bytes: u64,
    /// Live registrations (whose device is alive).
    pub live_imports: usize,
    /// Live pinned blocks (whose device is alive).
    pub live_pinned: usize,
    /// Entries left behind by destroyed devices (tombstones: a late `vkhost_unregister` or
    /// `vkhost_free_pinned` of one succeeds once).
    pub tombstones: usize,
}

impl vkhost_host_counters {
    /// Zeroed counters with `struct_size` set, ready to pass.
    ///
    /// # Example
    ///
    /// ```
    /// let c = vkhost_capi::vkhost_host_counters::new();
    /// assert_eq!(c.struct_size, std::mem::size_of::<vkhost_capi::vkhost_host_counters>());
    /// ```
    pub fn new() -> Self {
        vkhost_host_counters { struct_size: std::mem::size_of::<Self>(), ..Default::default() }
    }
}

impl From<HostStats> for vkhost_host_counters {
    fn from(s: HostStats) -> Self {
        vkhost_host_counters {
            struct_size: std::mem::size_of::<Self>(),
            direct_bytes: s.direct_bytes,
            staged_bytes: s.staged_bytes,
            mapped_bytes: s.mapped_bytes,
            gathered_bytes: s.gathered_bytes,
            live_imports: s.live_imports,
            live_pinned: s.live_pinned,
            tombstones: s.tombstones,
        }
    }
}

/// The end of the first `vkhost_host_counters`'s fields (`tombstones`): the smallest
/// `struct_size` vkhost accepts, now and after fields are appended, so a program built against
/// this header keeps working with a later library.
const COUNTERS_V1_END: usize = std::mem::offset_of!(vkhost_host_counters, tombstones) + std::mem::size_of::<usize>();

/// Checks a `vkhost_host_counters` out-pointer: non-NULL, and a `struct_size` that holds at
/// least the first version's fields. Answers how many bytes to write: the caller's size or
/// this library's struct, whichever is smaller.
///
/// # Safety
/// `p` is NULL or valid for a read of its `struct_size` field.
unsafe fn counters_len(p: *mut vkhost_host_counters) -> crate::Res<usize> {
    out(p, "counters")?;
    // SAFETY: non-NULL (checked above); the field is readable per the caller's contract. Read
    // through a raw place: the rest of the struct may be uninitialised.
    let size = unsafe { std::ptr::addr_of!((*p).struct_size).read() };
    if size < COUNTERS_V1_END {
        let want = std::mem::size_of::<vkhost_host_counters>();
        let msg = format!("counters->struct_size = {size}: set it to sizeof(vkhost_host_counters) ({want} in this header)");
        return Err(Fail::Other(vkhost_status::VKHOST_INVALID_ARGUMENT, msg));
    }
    Ok(size.min(std::mem::size_of::<vkhost_host_counters>()))
}

/// Writes the first `len` bytes of `stats` as counters to `p`, `struct_size` set to `len`.
///
/// # Safety
/// `p` is valid for a write of `len` bytes, `len` from [`counters_len`].
unsafe fn write_counters(p: *mut vkhost_host_counters, len: usize, stats: HostStats) {
    let v = vkhost_host_counters { struct_size: len, ..stats.into() };
    // SAFETY: `len` is at most the size of `v` (counters_len), and `p` is writable for `len`
    // bytes (the caller's contract); an untyped byte copy (padding included), which also
    // leaves any bytes of a larger caller struct past `len` as they were.
    unsafe { std::ptr::copy_nonoverlapping((&raw const v).cast::<u8>(), p.cast::<u8>(), len) };
}

/// Process-wide counters into `*counters` (see `vkhost_host_counters`): bytes by path since
/// start, live entries and tombstones now.
///
/// # Safety
/// `counters` must be NULL or valid for a read of its `struct_size` field and a write of
/// `struct_size` bytes.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
// SAFETY: `c` is a local of the type the call writes.
unsafe {
    let mut c = vkhost_host_counters::new();
    assert_eq!(vkhost_counters(&mut c), VKHOST_OK);
    assert_eq!(c.struct_size, std::mem::size_of::<vkhost_host_counters>());
    c.struct_size = 8; // short of the first version's fields: refused, nothing written
    assert_eq!(vkhost_counters(&mut c), VKHOST_INVALID_ARGUMENT);
    assert_eq!(c.struct_size, 8);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_counters(counters: *mut vkhost_host_counters) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let len = unsafe { counters_len(counters) }?;
        // SAFETY: forwarded contract: `len` bytes (at most the caller's struct_size) are writable.
        unsafe { write_counters(counters, len, host::stats()) };
        Ok(())
    })
}

/// The same counters for one device (bytes copied through it, its live entries and
/// tombstones).
///
/// # Safety
/// `device` must be NULL or a live handle; `counters` as for `vkhost_counters`.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::ptr::null_mut;
// SAFETY: `dev` is a live handle (opened first, released last) and every out-pointer
// points to a local of the type the call writes.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut buf = null_mut();
    assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
    let mut pageable = vec![0u8; 4096];
    assert_eq!(vkhost_copy_to_host(dev, buf, 0, pageable.as_mut_ptr().cast(), 4096, null_mut()), VKHOST_OK);
    let mut c = vkhost_host_counters::new();
    assert_eq!(vkhost_device_counters(dev, &mut c), VKHOST_OK);
    assert_eq!((c.staged_bytes, c.gathered_bytes), (4096, 0)); // this device's copies only
    assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_device_counters(device: *const vkhost_device, counters: *mut vkhost_host_counters) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        // SAFETY: forwarded contract.
        let len = unsafe { counters_len(counters) }?;
        // SAFETY: forwarded contract: `len` bytes (at most the caller's struct_size) are writable.
        unsafe { write_counters(counters, len, host::device_stats(&d.dev)) };
        Ok(())
    })
}

/// Allocates a device-local buffer of `len` bytes (TRANSFER_SRC | TRANSFER_DST |
/// STORAGE_BUFFER). `len == 0`: `VKHOST_INVALID_ARGUMENT`. Its bytes are unspecified
/// (not necessarily zero) until written.
///
/// # Safety
/// `device` must be NULL or a live handle; `buffer` NULL or valid for a write.
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
    let mut buf = null_mut();
    assert_eq!(vkhost_buffer_alloc(dev, 1 << 20, &mut buf), VKHOST_OK);
    assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
    assert_eq!(vkhost_buffer_alloc(dev, 0, &mut buf), VKHOST_INVALID_ARGUMENT);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_buffer_alloc(device: *const vkhost_device, len: usize, buffer: *mut *mut vkhost_buffer) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let d = unsafe { arg(device, "device") }?;
        let o = out(buffer, "buffer")?;
        let buf = d.dev.alloc_buffer(len)?;
        // SAFETY: forwarded contract.
        unsafe { o.put(Box::into_raw(Box::new(vkhost_buffer { buf }))) };
        Ok(())
    })
}

/// Frees the buffer handle. Does not wait for the buffer's work: stream work that uses the
/// buffer keeps its memory until that work is done. Works after the device was destroyed. If
/// this was the last reference to a device whose handles were all released, the device's
/// teardown runs here (it waits for the device's work, as `vkhost_device_destroy`).
///
/// # Safety
/// `buffer` must be NULL or a live handle not used by another thread; it is dangling after.
#[cfg_attr(
    doc,
    doc = r#"
# Example

```
# use vkhost_capi::{*, vkhost_status::*};
# use std::{mem::MaybeUninit, ptr::null_mut};
// SAFETY: `dev` is a live handle (opened first, released last); `buf` is freed once and not
// used after; out-pointers point to locals of their type.
unsafe {
#   let mut dev = null_mut();
#   assert_eq!(vkhost_device_open_default(&mut dev), VKHOST_OK);
    let mut buf = null_mut();
    assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
    assert_eq!(vkhost_device_destroy(dev), VKHOST_OK);
    assert_eq!(vkhost_buffer_free(buf), VKHOST_OK); // after the device's destroy too
    assert_eq!(vkhost_buffer_free(null_mut()), VKHOST_NULL_ARGUMENT);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_buffer_free(buffer: *mut vkhost_buffer) -> vkhost_status {
    ffi(|| {
        if buffer.is_null() {
            return Err(Fail::Null("buffer"));
        }
        // SAFETY: made by `Box::into_raw` in `vkhost_buffer_alloc`, freed once per the contract.
        drop(unsafe { Box::from_raw(buffer) });
        Ok(())
    })
}

/// Stores the buffer's size in bytes in `*len`.
///
/// # Safety
/// `buffer` must be NULL or a live handle; `len` NULL or valid for a write.
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
    let mut buf = null_mut();
    assert_eq!(vkhost_buffer_alloc(dev, 12345, &mut buf), VKHOST_OK);
    let mut len = 0;
    assert_eq!(vkhost_buffer_len(buf, &mut len), VKHOST_OK);
    assert_eq!(len, 12345);
    assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_buffer_len(buffer: *const vkhost_buffer, len: *mut usize) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let b = unsafe { arg(buffer, "buffer") }?;
        let o = out(len, "len")?;
        // SAFETY: forwarded contract.
        unsafe { o.put(b.buf.len()) };
        Ok(())
    })
}

/// Stores the buffer's VkBuffer handle in `*vk_buffer`, for use in the caller's own command
/// buffers. Valid while the buffer handle lives and the device is not destroyed; after
/// `vkhost_device_destroy`, `VKHOST_DEVICE_DESTROYED` (the VkBuffer is gone).
///
/// # Safety
/// `buffer` must be NULL or a live handle; `vk_buffer` NULL or valid for a write.
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
    let mut buf = null_mut();
    assert_eq!(vkhost_buffer_alloc(dev, 4096, &mut buf), VKHOST_OK);
    let mut vk_buffer = 0u64;
    assert_eq!(vkhost_buffer_handle(buf, &mut vk_buffer), VKHOST_OK);
    assert_ne!(vk_buffer, 0); // a VkBuffer (VK_NULL_HANDLE is 0)
    assert_eq!(vkhost_buffer_free(buf), VKHOST_OK);
#   assert_eq!(vkhost_device_release(dev), VKHOST_OK);
}
```
"#
)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vkhost_buffer_handle(buffer: *const vkhost_buffer, vk_buffer: *mut u64) -> vkhost_status {
    ffi(|| {
        // SAFETY: forwarded contract.
        let b = unsafe { arg(buffer, "buffer") }?;
        let o = out(vk_buffer, "vk_buffer")?;
        if b.buf.device().is_destroyed() {
            return Err(vkhost::Error::DeviceDestroyed.into());
        }
        // SAFETY: forwarded contract.
        unsafe { o.put(b.buf.raw().as_raw()) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `HostStats` field lands in its own field of the C struct.
    #[test]
    fn counters_carry_every_host_stats_field() {
        let s = HostStats {
            direct_bytes: 1,
            staged_bytes: 2,
            mapped_bytes: 3,
            gathered_bytes: 4,
            live_imports: 5,
            live_pinned: 6,
            tombstones: 7,
        };
        let c = vkhost_host_counters::from(s);
        assert_eq!(c.struct_size, std::mem::size_of::<vkhost_host_counters>());
        let got = (c.direct_bytes, c.staged_bytes, c.mapped_bytes, c.gathered_bytes, c.live_imports, c.live_pinned, c.tombstones);
        assert_eq!(got, (1, 2, 3, 4, 5, 6, 7));
    }

    /// A caller's struct larger than this library's (built against a later header) gets this
    /// library's fields, `struct_size` set to them, and the rest left as it was; one short of
    /// the first version's fields is refused with nothing written.
    #[test]
    fn counters_fit_the_callers_struct_size() {
        #[repr(C)]
        struct Later {
            c: vkhost_host_counters,
            appended: u64,
        }
        let mut later =
            Later { c: vkhost_host_counters { struct_size: std::mem::size_of::<Later>(), ..Default::default() }, appended: 0xABAB };
        // SAFETY: a live local, writable for its whole size.
        assert_eq!(unsafe { vkhost_counters(&mut later.c) }, vkhost_status::VKHOST_OK);
        assert_eq!((later.c.struct_size, later.appended), (std::mem::size_of::<vkhost_host_counters>(), 0xABAB));
        assert_eq!(COUNTERS_V1_END, std::mem::size_of::<vkhost_host_counters>(), "no padding at the end on this target");
        let mut short = vkhost_host_counters { struct_size: COUNTERS_V1_END - 1, direct_bytes: 9, ..Default::default() };
        // SAFETY: as above.
        assert_eq!(unsafe { vkhost_counters(&mut short) }, vkhost_status::VKHOST_INVALID_ARGUMENT);
        assert_eq!((short.struct_size, short.direct_bytes), (COUNTERS_V1_END - 1, 9));
    }
}
