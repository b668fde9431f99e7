//! Vulkan objects behind registry entries: imports of host pages and pinned blocks.

use crate::device::BUFFER_USAGE as USAGE;
use crate::device::{Bound, Fresh, Live, SendPtr, Shared};
use crate::error::{Error, Result};
use crate::fault::{self, Point};
use crate::memtype;
use ash::vk;
use std::ops::Range;
use std::ptr::NonNull;

/// The memory types a host pointer can be imported into (vkGetMemoryHostPointerPropertiesEXT).
pub(crate) fn host_pointer_bits(s: &Shared, l: &Live, ptr: *const u8) -> Result<u32> {
    let ext = l.ext_host.as_ref().ok_or_else(|| Error::unsupported("VK_EXT_external_memory_host is not enabled"))?;
    fault::check(Point::GetMemoryHostPointerProperties).map_err(|c| s.fail("vkGetMemoryHostPointerPropertiesEXT", c))?;
    let mut props = vk::MemoryHostPointerPropertiesEXT::default();
    // SAFETY: the extension is enabled on this device; `ptr` is a mapped, aligned host pointer
    // (the caller validated it against /proc/self/maps and rounded it to the import granule).
    let r = unsafe {
        (ext.fp().get_memory_host_pointer_properties_ext)(
            l.device.handle(),
            vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT,
            ptr.cast(),
            &mut props,
        )
    };
    if r != vk::Result::SUCCESS {
        return Err(s.fail("vkGetMemoryHostPointerPropertiesEXT", r));
    }
    Ok(props.memory_type_bits)
}

/// Imports the host pages `covered` (already rounded, validated and reserved), into memory
/// type `want` when given (`Unsupported` if the import would get another type).
/// On failure nothing is left behind.
pub(crate) fn import_range(s: &Shared, l: &Live, covered: &Range<usize>, want: Option<u32>) -> Result<Bound> {
    let len = covered.len() as u64;
    if len > s.info.max_memory_allocation_size {
        return Err(Error::invalid(format!(
            "{len} bytes exceeds this device's maxMemoryAllocationSize ({})",
            s.info.max_memory_allocation_size
        )));
    }
    let mut ext = vk::ExternalMemoryBufferCreateInfo::default().handle_types(vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT);
    let info = Shared::buffer_info(l, len, USAGE).push_next(&mut ext);
    let mut fresh = Fresh::new(s, l, s.create_buffer(l, &info)?);
    let buffer = fresh.buffer;
    // Every `?` below (and a panic) drops `fresh`, which releases what was made.
    // SAFETY: `buffer` is a live buffer of this device.
    let req = unsafe { l.device.get_buffer_memory_requirements(buffer) };
    if req.size > len {
        return Err(Error::unsupported(format!("the import buffer requires {} bytes, more than the {len} imported", req.size)));
    }
    let host_bits = host_pointer_bits(s, l, covered.start as *const u8)?;
    let bits = host_bits & req.memory_type_bits;
    let choice = memtype::import(&l.types, bits).ok_or_else(|| {
        Error::unsupported(format!(
            "no memory type both the host pointer ({host_bits:#x}) and the buffer ({:#x}) allow",
            req.memory_type_bits
        ))
    })?;
    if let Some(w) = want.filter(|&w| w != choice.index) {
        return Err(Error::unsupported(format!("the import would be memory type {}, not {w}", choice.index)));
    }
    let mut imp = vk::ImportMemoryHostPointerInfoEXT::default()
        .handle_type(vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT)
        .host_pointer(covered.start as *mut std::ffi::c_void);
    let ai = vk::MemoryAllocateInfo::default().allocation_size(len).memory_type_index(choice.index).push_next(&mut imp);
    let memory = s.allocate_memory(l, &ai)?;
    fresh.memory = Some(memory);
    s.bind(l, buffer, memory)?;
    Ok(fresh.done(None))
}

/// A freed driver block of exactly `len` bytes that the device kept (`OpenOptions::pinned_cache`),
/// taken out of the cache: made by [`alloc_pinned_block`], so with the same usage and memory
/// type, and mapped. Nothing uses it (it was kept only once its last owner went).
pub(crate) fn kept_pinned_block(s: &Shared, l: &Live, len: usize) -> Option<(Bound, NonNull<u8>)> {
    let k = s.reuse_block(l, len as u64)?;
    Some((Bound { buffer: k.buffer, memory: k.memory, ptr: Some(k.ptr) }, k.ptr.0))
}

/// A new driver allocation of `len` bytes, bound and mapped for its whole life.
pub(crate) fn alloc_pinned_block(s: &Shared, l: &Live, len: usize) -> Result<(Bound, NonNull<u8>)> {
    // Zeroed on CPU drivers: a `PinnedBuffer` derefs to `&[u8]` over the block at once.
    let b = s.alloc_bound(l, len as u64, USAGE, &memtype::pinned, true, true)?;
    match b.ptr {
        Some(SendPtr(p)) => Ok((b, p)),
        None => {
            // SAFETY: fresh objects of ours, that no work named, released once.
            unsafe { s.release_bound(l, b.buffer, b.memory) };
            Err(Error::unsupported("pinned memory was not mapped"))
        }
    }
}
