//! Device-local buffers and the safe copy entry points.

use crate::device::{lock, Device, Shared};
use crate::error::{Error, Result};
use crate::memtype;
use ash::vk;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A device-local buffer (TRANSFER_SRC | TRANSFER_DST | STORAGE_BUFFER).
///
/// It holds its device and frees itself on drop. If the device is destroyed first, the buffer
/// is inert: its operations return `DeviceDestroyed` and its drop does nothing.
pub struct DeviceBuffer {
    pub(crate) shared: Arc<Shared>,
    id: u64,
    buffer: vk::Buffer,
    len: usize,
    /// Stream work that names this buffer: dropping waits for it.
    uses: crate::stream::Uses,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer").field("device", &self.shared.id).field("len", &self.len).finish()
    }
}

pub(crate) const USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw()
        | vk::BufferUsageFlags::STORAGE_BUFFER.as_raw(),
);

impl DeviceBuffer {
    pub(crate) fn new(device: &Device, len: usize) -> Result<DeviceBuffer> {
        let s = &device.shared;
        if len == 0 {
            return Err(Error::invalid("device buffer of zero bytes"));
        }
        let l = s.live()?;
        let b = s.alloc_bound(&l, len as u64, USAGE, memtype::device_local, false)?;
        let id = s.next_buffer.fetch_add(1, Ordering::Relaxed);
        lock(&l.buffers).insert(id, (b.buffer, b.memory));
        Ok(DeviceBuffer { shared: s.clone(), id, buffer: b.buffer, len, uses: Default::default() })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: zero-sized buffers are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The VkBuffer. Valid until this buffer is dropped or its device destroyed.
    pub fn raw(&self) -> vk::Buffer {
        self.buffer
    }

    /// The device this buffer belongs to.
    pub fn device(&self) -> Device {
        Device { shared: self.shared.clone() }
    }

    pub(crate) fn note_use(&self, w: &std::sync::Weak<crate::stream::StreamInner>, v: u64) {
        self.uses.note(w, v);
    }

    /// Checks `[offset, offset+len)` against the buffer: `OutOfRange` past the end.
    pub(crate) fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfRange),
        }
    }

    /// Copies `data` into the buffer at `offset`. Host bytes that lie in a registration or a
    /// pinned block go direct (one vkCmdCopyBuffer, no staging); the rest is staged through
    /// bounded, reusable staging memory. A zero-length write is an `Ok` no-op.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        // SAFETY: `data` is a live, readable slice for the whole call.
        unsafe { crate::host::copy_to_device_impl(&self.shared, data.as_ptr(), data.len(), self, offset) }.map(|_| ())
    }

    /// Copies from the buffer at `offset` into `out`, direct where `out` is registered or
    /// pinned, staged otherwise. A zero-length read is an `Ok` no-op.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        // SAFETY: `out` is a live, writable slice for the whole call, borrowed exclusively.
        unsafe { crate::host::copy_to_host_impl(&self.shared, self, offset, out.as_mut_ptr(), out.len()) }.map(|_| ())
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let Ok(l) = self.shared.live_any() else { return };
        // Pending stream work that names the buffer finishes first.
        self.uses.wait_all(&l);
        let entry = lock(&l.buffers).remove(&self.id);
        if let Some((b, m)) = entry {
            // SAFETY: synchronous copies borrow `&self`, so none is in flight; stream work naming
            // the buffer completed (waited above); the map entry proves destroy did not free it.
            unsafe { self.shared.release_bound(&l, b, m) };
        }
    }
}
