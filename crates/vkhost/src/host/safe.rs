//! Safe owners over the raw, address-based API: [`PinnedBuffer`] and [`Registration`].

use crate::device::{Device, SendPtr};
use crate::error::{Error, Result};
use std::marker::PhantomData;
use std::sync::atomic::Ordering;

/// Driver-allocated, mapped host memory that DMA copies address directly; frees on drop.
///
/// While any `PinnedBuffer` of a device lives, `Device::destroy` returns `Error::Busy`, so safe
/// code never touches unmapped memory. Its contents start zeroed where the driver zeroes
/// (not guaranteed by Vulkan): write before you read.
pub struct PinnedBuffer {
    dev: Device,
    ptr: SendPtr,
    len: usize,
}

impl std::fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer").field("device", &self.dev.id()).field("ptr", &self.ptr.0).field("len", &self.len).finish()
    }
}

impl PinnedBuffer {
    /// Allocates `len` bytes of pinned memory on `dev` (see [`super::alloc_pinned`]).
    pub fn new(dev: &Device, len: usize) -> Result<PinnedBuffer> {
        {
            // Count ourselves under the device lock, so a concurrent destroy either runs fully
            // before (and we fail with DeviceDestroyed below) or sees us and answers Busy.
            let _l = dev.shared.live()?;
            dev.shared.safe_pinned.fetch_add(1, Ordering::AcqRel);
        }
        match super::alloc_pinned(dev, len) {
            Ok(p) => Ok(PinnedBuffer { dev: dev.clone(), ptr: SendPtr(p), len }),
            Err(e) => {
                dev.shared.safe_pinned.fetch_sub(1, Ordering::AcqRel);
                Err(e)
            }
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: zero-length blocks are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapped pointer.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.0.as_ptr()
    }

    /// The mapped pointer, mutable.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.0.as_ptr()
    }

    /// The device the block belongs to.
    pub fn device(&self) -> &Device {
        &self.dev
    }
}

impl std::ops::Deref for PinnedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the block is mapped for `len` bytes while we live (destroy is Busy meanwhile)
        // and aliasing follows `&self`.
        unsafe { std::slice::from_raw_parts(self.ptr.0.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for PinnedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, with exclusive access through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.0.as_ptr(), self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if let Err(e) = super::free_pinned(&self.dev, self.ptr.0) {
            log::error!("PinnedBuffer drop: free_pinned failed: {e}");
        }
        self.dev.shared.safe_pinned.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A registration of a borrowed slice; unregisters on drop.
///
/// Borrowing the slice mutably for `'a` keeps the memory mapped, writable and unaliased for as
/// long as the device may use it. Read and write it through `Deref`/`DerefMut`.
pub struct Registration<'a> {
    dev: Device,
    ptr: SendPtr,
    len: usize,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl std::fmt::Debug for Registration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration").field("device", &self.dev.id()).field("ptr", &self.ptr.0).field("len", &self.len).finish()
    }
}

impl Device {
    /// Registers `buf` (see [`super::register`]): copies to and from it go direct while the
    /// returned guard lives.
    pub fn register<'a>(&self, buf: &'a mut [u8]) -> Result<Registration<'a>> {
        let ptr = std::ptr::NonNull::new(buf.as_mut_ptr()).ok_or_else(|| Error::invalid("null slice"))?;
        if buf.is_empty() {
            return Err(Error::invalid("zero-length registration"));
        }
        // SAFETY: the slice is borrowed mutably for 'a, so its pages stay mapped and writable
        // and nobody else touches it until the Registration (which unregisters on drop) ends.
        unsafe { super::register(self, ptr, buf.len()) }?;
        Ok(Registration { dev: self.clone(), ptr: SendPtr(ptr), len: buf.len(), _borrow: PhantomData })
    }
}

impl Registration<'_> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: zero-length registrations are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first registered byte.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.0.as_ptr()
    }

    /// The device it is registered on.
    pub fn device(&self) -> &Device {
        &self.dev
    }
}

impl std::ops::Deref for Registration<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the slice is borrowed for 'a by this guard; shared access follows `&self`.
        unsafe { std::slice::from_raw_parts(self.ptr.0.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Registration<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, exclusive through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.0.as_ptr(), self.len) }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Err(e) = super::unregister(&self.dev, self.ptr.0) {
            log::error!("Registration drop: unregister failed: {e}");
        }
    }
}
