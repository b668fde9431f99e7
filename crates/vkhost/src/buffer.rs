//! Device-local buffers and the safe copy entry points.

use crate::device::Device;
use crate::device::object::BufferObj;
use crate::error::{Error, Result};
use crate::resource::{DeviceMem, Resource};
use ash::vk;

/// A device-local buffer (TRANSFER_SRC | TRANSFER_DST | STORAGE_BUFFER).
///
/// Submitted work owns what it uses: a stream copy that names the buffer keeps it alive until
/// that work is reaped, so dropping the buffer never waits and never frees memory the device
/// still uses. If the device is destroyed first, the buffer is inert: its operations return
/// `DeviceDestroyed` and its drop does nothing.
///
/// Synchronous copies ([`DeviceBuffer::write`], [`DeviceBuffer::read`]) first wait for stream
/// work already enqueued on the buffer, as a CUDA user expects of the legacy default stream:
/// a `read` after `fill_async` sees the fill. Stream work that was lost (its submission failed:
/// the call that submitted it returned the error, and the stream's `synchronize` reports it)
/// never ran, so a `read` after it sees the bytes from before it; the synchronous copy itself
/// does not report the stream's loss (unlike a CUDA blocking copy, which returns earlier async
/// errors). Work another thread enqueues on the buffer *while* a synchronous copy runs is not
/// ordered with it, as work on two streams is not: order the two threads yourself (the device
/// bytes may be old, new or a mix; no Rust reference sees them).
///
/// On a discrete GPU with a full BAR (see [`BarWrites`](crate::BarWrites)) the buffer lives in
/// mapped VRAM, and a `write` of at most [`OpenOptions::bar_write_max`](crate::OpenOptions::bar_write_max)
/// bytes is CPU stores into the mapping, after that wait: no submission, no DMA (above
/// [`OpenOptions::BAR_SOLO_MAX`](crate::OpenOptions::BAR_SOLO_MAX), only while the staging
/// threads poll for work; else a submitted copy). Reads are
/// always copies: a memcpy reads the BAR at 0.03 GB/s. (With streaming loads, as `vkhost
/// bench`'s `device_to_host_bar` reads, one thread reads 4 KiB in 6-7 µs on the H200, about
/// half a copy's time; `read` does not use them.)
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// let buf = dev.alloc_buffer(64 << 10)?;
/// buf.write(0, &[0xAB; 4096])?;
/// // Copies between device buffers are stream work; a read waits for it (as CUDA's default stream does).
/// let stream = dev.stream()?;
/// stream.copy_async(&buf, 0, &buf, 32 << 10, 4096)?;
/// let mut out = vec![0u8; 4096];
/// buf.read(32 << 10, &mut out)?;
/// assert!(out.iter().all(|&b| b == 0xAB));
/// # Ok(()) }
/// ```
pub struct DeviceBuffer {
    /// The tracked buffer, its length and its store lock: what copies and streams take.
    pub(crate) mem: DeviceMem,
    /// Last, so it drops after `mem`: the buffer's objects are released while this owner still
    /// keeps the device, and the device's last reference, if it is this one, goes through
    /// `drop_shared` (see `SharedRef`).
    pub(crate) shared: crate::device::SharedRef,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer").field("device", &self.shared.id).field("len", &self.mem.len).finish()
    }
}

pub(crate) use crate::device::BUFFER_USAGE as USAGE;

impl DeviceBuffer {
    pub(crate) fn new(device: &Device, len: usize) -> Result<DeviceBuffer> {
        let s = &device.shared;
        // A destroyed device answers that first, whatever the length (issue 2).
        let l = s.live()?;
        if len == 0 {
            return Err(Error::invalid("device buffer of zero bytes"));
        }
        // Mapped (for the CPU stores) where the device's buffers live in mapped VRAM; zeroed on
        // CPU drivers, so that a read before any write reads initialized bytes.
        let b = s.alloc_device_bound(&l, len as u64, USAGE, true, true)?;
        let res = Resource::new(s, BufferObj::new(s, b, len as u64));
        let owner: std::sync::Weak<Resource> = std::sync::Arc::downgrade(&res);
        s.note_device_buffer(res.obj.buffer, owner);
        Ok(DeviceBuffer { mem: DeviceMem::new(s.id, res, len), shared: s.clone() })
    }

    /// Size in bytes.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// assert_eq!(dev.alloc_buffer(1000)?.len(), 1000);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.mem.len
    }

    /// Always false: zero-sized buffers are refused.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// assert!(!dev.alloc_buffer(1)?.is_empty());
    /// assert!(dev.alloc_buffer(0).is_err());
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.mem.len == 0
    }

    /// The VkBuffer. Valid while this buffer lives and its device is not destroyed (stream work
    /// that names it keeps it a little longer).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let buf = dev.alloc_buffer(4096)?;
    /// let handle: vkhost::vk::Buffer = buf.raw(); // for your own command buffers
    /// assert_ne!(handle, vkhost::vk::Buffer::null());
    /// # Ok(()) }
    /// ```
    pub fn raw(&self) -> vk::Buffer {
        self.mem.raw()
    }

    /// The device this buffer belongs to.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let buf = dev.alloc_buffer(4096)?;
    /// assert_eq!(buf.device().id(), dev.id());
    /// # Ok(()) }
    /// ```
    pub fn device(&self) -> Device {
        Device { shared: self.shared.clone() }
    }

    /// Copies `data` into the buffer at `offset`. Host bytes that lie in a registration or a
    /// pinned block go direct (one vkCmdCopyBuffer, no staging); the rest is staged through
    /// bounded, reusable staging memory. A zero-length write at an offset up to the buffer's size
    /// is an `Ok` no-op; past it, `OutOfRange` as for any write.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let buf = dev.alloc_buffer(8192)?;
    /// buf.write(100, b"hello")?; // pageable bytes: staged
    /// let mut pinned = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// pinned.fill(9);
    /// buf.write(4096, &pinned)?; // pinned bytes: one direct copy
    /// let mut out = [0u8; 5];
    /// buf.read(100, &mut out)?;
    /// assert_eq!(&out, b"hello");
    /// assert_eq!(buf.write(8190, &[0; 4]), Err(vkhost::Error::OutOfRange));
    /// # Ok(()) }
    /// ```
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        // SAFETY: `data` is a live, readable slice for the whole call.
        unsafe { crate::host::copy_to_device_impl(&self.shared, data.as_ptr(), data.len(), &self.mem, offset) }.map(|_| ())
    }

    /// [`DeviceBuffer::write`] of a typed slice (any [`bytemuck::Pod`] type: `f32`, `u32`, `[u8; 4]`,
    /// your own `#[repr(C)]` structs deriving `Pod`).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let buf = dev.alloc_buffer(4 * 1024)?;
    /// buf.write_slice(0, &[1.5f32; 1024])?;
    /// let mut back = vec![0f32; 1024];
    /// buf.read_slice(0, &mut back)?;
    /// assert_eq!(back, [1.5f32; 1024]);
    /// # Ok(()) }
    /// ```
    pub fn write_slice<T: bytemuck::Pod>(&self, offset: usize, data: &[T]) -> Result<()> {
        self.write(offset, bytemuck::cast_slice(data))
    }

    /// [`DeviceBuffer::read`] into a typed slice (see [`DeviceBuffer::write_slice`]).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let buf = dev.alloc_buffer(64)?;
    /// buf.write_slice(0, &[1u32, 2, 3, 4])?;
    /// let mut two = [0u32; 2];
    /// buf.read_slice(8, &mut two)?; // offsets are in bytes
    /// assert_eq!(two, [3, 4]);
    /// # Ok(()) }
    /// ```
    pub fn read_slice<T: bytemuck::Pod>(&self, offset: usize, out: &mut [T]) -> Result<()> {
        self.read(offset, bytemuck::cast_slice_mut(out))
    }

    /// Copies from the buffer at `offset` into `out`, direct where `out` is registered or
    /// pinned, staged otherwise. A zero-length read at an offset up to the buffer's size is an
    /// `Ok` no-op; past it, `OutOfRange` as for any read.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let buf = dev.alloc_buffer(4096)?;
    /// buf.write(0, &[7; 4096])?;
    /// let mut pinned = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// buf.read(0, &mut pinned)?; // straight into pinned memory, no staging
    /// assert!(pinned.iter().all(|&b| b == 7));
    /// # Ok(()) }
    /// ```
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        // SAFETY: `out` is a live, writable slice for the whole call, borrowed exclusively.
        unsafe { crate::host::copy_to_host_impl(&self.shared, &self.mem, offset, out.as_mut_ptr(), out.len()) }.map(|_| ())
    }
}

/// Device buffers, from the device (here, with the type, so the device layer names no
/// higher one).
impl Device {
    /// Allocates a device-local buffer of `len` bytes (see [`crate::DeviceBuffer`]). Its
    /// contents are unspecified until written (on a GPU not zeroed: they may be bytes an earlier
    /// buffer of this process left), but a read before any write reads initialized bytes: on a
    /// CPU driver, whose "device memory" is this process's heap, vkhost zeroes new buffers.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let buf = dev.alloc_buffer(256 << 10)?;
    /// assert_eq!(buf.len(), 256 << 10);
    /// buf.write_slice(0, &[0.5f32; 1024])?;
    /// # Ok(()) }
    /// ```
    pub fn alloc_buffer(&self, len: usize) -> Result<DeviceBuffer> {
        DeviceBuffer::new(self, len)
    }
}
