//! Safe owners over the raw, address-based API: [`PinnedBuffer`] and [`Registration`].

use super::Imports;
use super::registry::Kind;
use crate::device::{Device, SendPtr};
use crate::error::{Error, Result};
use ash::vk;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The Vulkan memory behind a guard's bytes, from [`PinnedBuffer::raw_memory`] and
/// [`Registration::raw_memory`]: for interop that binds its own VkBuffer to the same memory
/// (`vkhost-wgpu` hands such a buffer to wgpu, which destroys the VkBuffers it is given and so
/// cannot be given vkhost's own).
///
/// The handles are valid while the guard lives and its device is not destroyed; binding and
/// using a buffer on them is the caller's `unsafe` business, and every use must complete before
/// the guard goes (or the device is destroyed: see [`crate::DeviceHold`]). A buffer created with
/// `usage` and `handle_types` (and no create flags) has the same memoryTypeBits and alignment as
/// vkhost's own buffer over this memory (Vulkan guarantees both for equal usage, flags and
/// handle types), so it can be bound at `offset` if `offset` is a multiple of that alignment.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::ash::vk;
/// let dev = vkhost::Device::open_default()?;
/// let pinned = vkhost::PinnedBuffer::new(&dev, 4096)?;
/// let raw = pinned.raw_memory().expect("a small block is one allocation");
/// assert_ne!(raw.memory, vk::DeviceMemory::null());
/// assert!(raw.offset + pinned.len() as u64 <= raw.size);
/// assert!(raw.usage.contains(vk::BufferUsageFlags::STORAGE_BUFFER));
/// assert!(raw.handle_types.is_empty(), "a driver allocation, not an import");
/// // vkhost's own buffer over the memory is what `host::find` answers.
/// assert_eq!(vkhost::host::find(&dev, pinned.as_ptr(), 4096), Some((raw.buffer, raw.offset)));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawMemory {
    /// vkhost's buffer over the allocation, bound at its offset 0 (what [`super::find`] answers).
    pub buffer: vk::Buffer,
    /// The allocation (an import, or a driver allocation for a pinned block).
    pub memory: vk::DeviceMemory,
    /// The guard's first byte, in bytes from the start of `memory` (and of `buffer`).
    pub offset: u64,
    /// Bytes of `memory` (and of `buffer`) usable from its start: `offset + len` fits.
    pub size: u64,
    /// The usage vkhost created `buffer` with: TRANSFER_SRC | TRANSFER_DST | STORAGE_BUFFER.
    pub usage: vk::BufferUsageFlags,
    /// The external handle types `memory` was imported with: HOST_ALLOCATION_EXT for
    /// registrations and pinned blocks of vkhost's own memory (see
    /// [`OpenOptions::pinned_huge_min`](crate::OpenOptions::pinned_huge_min); blocks larger than
    /// one allocation), empty for driver allocations.
    /// A buffer bound to it must be created with the same `VkExternalMemoryBufferCreateInfo`
    /// (VUID-vkBindBufferMemory-memory-02985).
    pub handle_types: vk::ExternalMemoryHandleTypeFlags,
}

/// [`RawMemory`] for `len` bytes at `offset` into an entry's imports, when one piece holds them
/// all and the objects exist.
fn raw_memory(
    res: &super::Imports,
    offset: usize,
    len: usize,
    imported: impl Fn(&crate::device::object::BufferObj) -> bool,
) -> Option<RawMemory> {
    let (piece, at) = res.at(offset);
    let obj = &piece.obj;
    let memory = obj.memory()?;
    if at as u64 + len as u64 > obj.size {
        return None; // the bytes cross into the next piece
    }
    let handle_types =
        if imported(obj) { vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT } else { vk::ExternalMemoryHandleTypeFlags::empty() };
    Some(RawMemory { buffer: obj.buffer, memory, offset: at as u64, size: obj.size, usage: crate::device::BUFFER_USAGE, handle_types })
}

/// Pinned, mapped host memory that DMA copies address directly (driver-allocated; see
/// [`alloc_pinned`](super::alloc_pinned) for the exceptions); frees on drop.
///
/// While any `PinnedBuffer` of a device lives, `Device::destroy` returns `Error::Busy`, so safe
/// code never touches unmapped memory. A new block's bytes are unspecified but always
/// initialized: on a CPU driver (lavapipe), whose memory is this process's heap, vkhost zeroes
/// them; a GPU driver's host memory holds what the kernel (which clears every page it hands a
/// process) or earlier work of this process left, usually zeroes (not guaranteed by Vulkan);
/// and a block reused from the device's cache of freed blocks
/// ([`OpenOptions::pinned_cache`](crate::OpenOptions::pinned_cache)) holds what its last user
/// wrote. Write before you read.
///
/// Stream work that names the block owns it: dropping the buffer waits for the copies and
/// launches in flight that name it (as [`free_pinned`](super::free_pinned) does), and the
/// memory goes once the last of them is reaped. Reading the bytes (`Deref`) first waits for device
/// writes to them still pending, and writing them (`DerefMut`) for any device access, so even a
/// leaked [`Pending`](crate::Pending) (`mem::forget`) cannot let safe code race the device.
/// The raw [`host::free_pinned`](super::free_pinned) refuses a `PinnedBuffer`'s block.
///
/// # Panics
///
/// `Deref` and `DerefMut` (and so every slice view) panic in a process forked from the one that
/// made a block a GPU driver allocated. Those bytes are the parent's driver mapping: the driver
/// may map them shared with the parent (whose device and CPU keep writing them) or exclude
/// them from the child (`MADV_DONTFORK`, as CUDA does with pinned memory), where a read would
/// fault. There the streams and kernels of any device, the child's own included, refuse the
/// block (`upload_pinned`, `download_pinned`, `Binding::pinned`/`pinned_mut`: `Unsupported`),
/// rather than stage or import those bytes. Where the child holds a private copy (a CPU
/// driver's blocks, which are heap memory, and blocks of vkhost's own memory, see
/// [`alloc_pinned`](super::alloc_pinned)) it reads and writes that copy. Dropping the buffer
/// in the child is fine, and does nothing (see **fork** in the [crate docs](crate)).
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// let gpu = dev.alloc_buffer(1 << 16)?;
/// let mut pinned = vkhost::PinnedBuffer::new(&dev, 1 << 16)?;
/// pinned.fill(5); // a `[u8]` through `DerefMut`
/// gpu.write(0, &pinned)?; // never staged: the device reads the block itself
/// let stream = dev.stream()?;
/// stream.fill_async(&gpu, 0, 1 << 16, 0x0909_0909)?;
/// stream.download_pinned(&gpu, 0, &mut pinned, 0..1 << 16)?.wait()?; // async into the block
/// assert!(pinned.iter().all(|&b| b == 9));
/// # Ok(()) }
/// ```
pub struct PinnedBuffer {
    ptr: SendPtr,
    len: usize,
    res: Arc<Imports>,
    /// Last: the block's objects go while this handle still keeps the device (see `SharedRef`).
    dev: Device,
}

impl std::fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer").field("device", &self.dev.id()).field("ptr", &self.ptr.0).field("len", &self.len).finish()
    }
}

impl PinnedBuffer {
    /// Allocates `len` bytes of pinned memory on `dev` (see [`super::alloc_pinned`]).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let pinned = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// assert_eq!(pinned.len(), 4096);
    /// assert!(vkhost::PinnedBuffer::new(&dev, 0).is_err(), "zero bytes are refused");
    /// # Ok(()) }
    /// ```
    pub fn new(dev: &Device, len: usize) -> Result<PinnedBuffer> {
        {
            // Count ourselves under the device lock, so a concurrent destroy either runs fully
            // before (and we fail with DeviceDestroyed below) or sees us and answers Busy.
            let _l = dev.shared.live()?;
            dev.shared.safe_pinned.fetch_add(1, Ordering::AcqRel);
        }
        /// Uncounts the block however the allocation ends short of a `PinnedBuffer` (an error,
        /// or a panic unwinding through here): else `destroy` would answer `Busy` for ever.
        struct Counted<'a>(&'a Device, bool);
        impl Drop for Counted<'_> {
            fn drop(&mut self) {
                if self.1 {
                    self.0.shared.safe_pinned.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
        let mut counted = Counted(dev, true);
        let (p, res) = super::alloc_pinned_entry(dev, len, Some("PinnedBuffer"))?;
        counted.1 = false;
        Ok(PinnedBuffer { dev: dev.clone(), ptr: SendPtr(p), len, res })
    }

    /// Length in bytes.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let pinned = vkhost::PinnedBuffer::new(&dev, 1000)?;
    /// assert_eq!(pinned.len(), 1000);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: zero-length blocks are refused.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// assert!(!vkhost::PinnedBuffer::new(&dev, 1)?.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapped pointer. Accesses through it are not ordered after pending device work;
    /// the slice views are.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let pinned = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// // The pointer names the block in the raw, address-based API.
    /// assert!(vkhost::host::find(&dev, pinned.as_ptr(), pinned.len()).is_some());
    /// assert_eq!(pinned.as_ptr(), pinned[..].as_ptr());
    /// # Ok(()) }
    /// ```
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.0.as_ptr()
    }

    /// The mapped pointer, mutable.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let mut pinned = vkhost::PinnedBuffer::new(&dev, 16)?;
    /// let p = pinned.as_mut_ptr();
    /// // SAFETY: in bounds of the live block, which no device work names.
    /// unsafe { p.add(3).write(42) };
    /// assert_eq!(pinned[3], 42);
    /// # Ok(()) }
    /// ```
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.0.as_ptr()
    }

    /// The device the block belongs to.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let pinned = vkhost::PinnedBuffer::new(&dev, 64)?;
    /// assert_eq!(pinned.device().id(), dev.id());
    /// # Ok(()) }
    /// ```
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// The memory behind the block, for binding an interop buffer to it (see [`RawMemory`]).
    /// `None` after the device was destroyed, or for a block larger than one allocation (made
    /// of several imports, so no single memory holds it).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let pinned = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// let raw = pinned.raw_memory().expect("one allocation");
    /// assert_eq!(raw.offset, 0, "the block starts its allocation");
    /// assert!(raw.size >= 4096);
    /// # Ok(()) }
    /// ```
    pub fn raw_memory(&self) -> Option<RawMemory> {
        // Only blocks of vkhost's own memory (huge-page blocks, blocks larger than one
        // allocation) are imports (of an anonymous mapping, their backing).
        raw_memory(&self.res, 0, self.len, |o| o.has_backing())
    }

    /// The block as a slice of `T` (any [`bytemuck::Pod`] type), waiting for pending device
    /// writes like `Deref`. `InvalidArgument` when the length is not a multiple of
    /// `size_of::<T>()` (the block itself is aligned for any `T` up to the page size).
    ///
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let mut p = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// p.as_mut_slice::<f32>()?.fill(0.5);
    /// assert_eq!(p.as_slice::<f32>()?[1023], 0.5);
    /// # Ok(()) }
    /// ```
    pub fn as_slice<T: bytemuck::Pod>(&self) -> Result<&[T]> {
        bytemuck::try_cast_slice(&self[..]).map_err(|e| Error::invalid(format!("PinnedBuffer::as_slice: {e:?}")))
    }

    /// The block as a mutable slice of `T`, waiting for any pending device access like
    /// `DerefMut` (see [`PinnedBuffer::as_slice`]).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let mut pinned = vkhost::PinnedBuffer::new(&dev, 64)?;
    /// pinned.as_mut_slice::<u32>()?.copy_from_slice(&[7; 16]);
    /// assert_eq!(pinned[..4], 7u32.to_ne_bytes());
    /// let gpu = dev.alloc_buffer(64)?;
    /// gpu.write(0, &pinned)?;
    /// let mut back = [0u32; 16];
    /// gpu.read_slice(0, &mut back)?;
    /// assert_eq!(back, [7; 16]);
    /// # Ok(()) }
    /// ```
    pub fn as_mut_slice<T: bytemuck::Pod>(&mut self) -> Result<&mut [T]> {
        bytemuck::try_cast_slice_mut(&mut self[..]).map_err(|e| Error::invalid(format!("PinnedBuffer::as_mut_slice: {e:?}")))
    }
}

impl PinnedBuffer {
    /// Whether `r` is one of the block's own imports (on its own device).
    pub(crate) fn owns(&self, r: &Arc<crate::resource::Resource>) -> bool {
        self.res.parts.iter().any(|p| Arc::ptr_eq(p, r))
    }

    /// `OutOfRange` unless `[offset, offset + len)` lies in the block (as
    /// `DeviceMem::check_range`); else the address of its first byte. First,
    /// `Unsupported` in a forked child that holds no copy of its own of the bytes (the check of
    /// [`PinnedBuffer::not_forked`], as an error): streams and kernels of any device, the
    /// child's own included, reach the block through this and would otherwise stage or import
    /// the parent's driver mapping.
    pub(crate) fn range_addr(&self, offset: usize, len: usize) -> Result<usize> {
        if self.parents_bytes() {
            return Err(Error::unsupported(FORKED_BLOCK));
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.ptr.0.as_ptr() as usize + offset),
            _ => Err(Error::OutOfRange),
        }
    }

    /// Waits for the block's device's pending work on it: writes, or every use with `all` (what
    /// `Deref` and `DerefMut` wait for).
    pub(crate) fn settle(&self, all: bool) {
        if all { self.res.settle_all() } else { self.res.settle_writes() }
    }

    /// Panics in a process forked from the one that made the block, unless the child holds a
    /// private copy of its bytes (see the type's `# Panics`).
    fn not_forked(&self) {
        if self.parents_bytes() {
            panic!("{FORKED_BLOCK}");
        }
    }

    /// Whether this is a process forked from the one that made the block, and the bytes are
    /// not the child's own copy (see [`private_after_fork`]).
    fn parents_bytes(&self) -> bool {
        self.dev.shared.forked()
            && !private_after_fork(self.dev.shared.info.device_type, self.res.parts.iter().any(|p| p.obj.has_backing()))
    }
}

/// What a forked child is told when it uses a GPU driver's block made before the fork.
const FORKED_BLOCK: &str = "a PinnedBuffer made before fork() was used in the child: its bytes are the parent's \
                            driver mapping, which a child may share with the parent's device or not have at all";

/// Whether a forked child holds a private copy of a pinned block's bytes: a CPU driver's block
/// (its memory is the process heap, copied on write like any) or vkhost's own anonymous memory
/// (`backed`: a huge-page or piecewise block; `MAP_PRIVATE`, and Linux copies pinned pages into
/// the child at once). That last rests on the kernel: since Linux 5.9 a fork copies at once the
/// anonymous pages a driver pinned with `pin_user_pages` (`FOLL_PIN`), and a driver that
/// mirrors the memory (HMM) follows the parent's copy-on-write; an older kernel, or a driver
/// that holds plain `get_user_pages` references, would leave the page shared copy-on-write, and
/// the parent's device could write the page the child keeps. A GPU driver's block is a mapping
/// of the driver's: it may be shared with the parent (Mesa maps its buffer objects shared), or
/// left out of the child (`MADV_DONTFORK`, as CUDA's pinned memory is), where a read faults.
fn private_after_fork(device_type: crate::DeviceType, backed: bool) -> bool {
    device_type == crate::DeviceType::Cpu || backed
}

impl std::ops::Deref for PinnedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.not_forked();
        self.res.settle_writes();
        // SAFETY: the block is mapped for `len` bytes while we live (destroy is Busy meanwhile,
        // and the memory goes with its last owner, `self.res` among them); no device write to
        // it is pending (settled above, and a new one needs `&mut` access to the bytes through
        // the safe API); aliasing follows `&self`.
        unsafe { std::slice::from_raw_parts(self.ptr.0.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for PinnedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.not_forked();
        self.res.settle_all();
        // SAFETY: as in `deref`, with no device access pending at all, and exclusive access
        // through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.0.as_ptr(), self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if self.dev.shared.forked() {
            return;
        }
        // Uncounted after the release, and on an unwind out of it too (a user's logger that
        // panics on a failed wait's warning): a count left behind would answer every later
        // `Device::destroy` with `Busy`.
        struct Uncount<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Uncount<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _uncount = Uncount(&self.dev.shared.safe_pinned);
        if let Err(e) = super::release_entry(&self.dev, self.ptr.0.as_ptr() as usize, Kind::Pinned, true) {
            log::error!("PinnedBuffer drop: free_pinned failed: {e}");
        }
    }
}

/// A registration of a borrowed slice; unregisters on drop.
///
/// Borrowing the slice mutably for `'a` keeps the memory mapped, writable and unaliased for as
/// long as the device may use it. Read and write it through `Deref`/`DerefMut`. The raw
/// [`host::unregister`](super::unregister) refuses it.
///
/// Leaks: `mem::forget` on a `Registration` ends the borrow without unregistering. That is
/// memory-safe because safe code never leaves device work on registered memory in flight (safe
/// stream copies that touch registered bytes complete before they return, see
/// [`Stream`](crate::Stream)), but the range stays registered until the device is destroyed:
/// registering those bytes again is `AlreadyRegistered`, and copies of memory later placed at
/// those addresses go through the old import, which on a discrete GPU still pins the old pages.
/// (A pinned block the driver maps there is made elsewhere instead.) Do not forget a
/// `Registration`; where a guard could be leaked (stored in a structure with cycles, handed to
/// code you do not control), [`Device::with_registered`] registers for one call only and
/// cannot be leaked.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// let gpu = dev.alloc_buffer(4096)?;
/// let mut mine = vec![0u8; 4096];
/// let mut reg = dev.register(&mut mine)?;
/// reg.fill(3); // the bytes, through `DerefMut`
/// gpu.write(0, &reg)?; // never staged
/// assert!(matches!(vkhost::host::unregister(&dev, reg.as_ptr()), Err(vkhost::Error::OwnedByGuard { .. })));
/// drop(reg); // unregisters; `mine` is mine again
/// mine[0] = 1;
/// # Ok(()) }
/// ```
pub struct Registration<'a> {
    ptr: SendPtr,
    len: usize,
    res: Arc<Imports>,
    _borrow: PhantomData<&'a mut [u8]>,
    /// Last: the import's objects go while this handle still keeps the device (see `SharedRef`).
    dev: Device,
}

impl std::fmt::Debug for Registration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration").field("device", &self.dev.id()).field("ptr", &self.ptr.0).field("len", &self.len).finish()
    }
}

impl Device {
    /// Registers `buf` (see [`super::register`]): copies to and from it go direct while the
    /// returned guard lives.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(1 << 16)?;
    /// gpu.write(0, &vec![1u8; 1 << 16])?;
    /// let mut mine = vec![0u8; 1 << 16];
    /// {
    ///     let mut reg = dev.register(&mut mine)?;
    ///     gpu.read(0, &mut reg)?; // direct into my pages: no staging
    /// }
    /// assert!(mine.iter().all(|&b| b == 1));
    /// assert_eq!(vkhost::host::device_stats(&dev).live_imports, 0, "unregistered on drop");
    /// # Ok(()) }
    /// ```
    pub fn register<'a>(&self, buf: &'a mut [u8]) -> Result<Registration<'a>> {
        // A destroyed device answers that first, whatever the slice (issue 2).
        drop(self.shared.live()?);
        let ptr = std::ptr::NonNull::new(buf.as_mut_ptr()).ok_or_else(|| Error::invalid("null slice"))?;
        if buf.is_empty() {
            return Err(Error::invalid("zero-length registration"));
        }
        // SAFETY: the slice is borrowed mutably for 'a, so its pages stay mapped and writable
        // and nobody else touches it until the Registration (which unregisters on drop) ends.
        let res = unsafe { super::register_entry(self, ptr.as_ptr() as usize, buf.len(), Some("Registration")) }?;
        Ok(Registration { dev: self.clone(), ptr: SendPtr(ptr), len: buf.len(), res, _borrow: PhantomData })
    }

    /// Registers `buf` for the call of `f` only: `f` gets the bytes (copies to and from them go
    /// direct, the registry finding them by address), and the registration ends when `f`
    /// returns or unwinds, whatever `f` does, after the device's work on the bytes (as a
    /// [`Registration`]'s drop). A `Registration` can be leaked with `mem::forget`, which
    /// leaves the range registered until the device is destroyed (memory-safe, but later
    /// memory at those addresses is reached through the old import: see [`Registration`]);
    /// here the guard never leaves this call, so nothing of the registration outlives the
    /// borrow of `buf`. `f` gets the slice, not a guard, for that reason: a guard it could
    /// swap with another would leave this frame unregistering the wrong range. Refusals are
    /// [`Device::register`]'s, before `f` runs.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::host;
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(1 << 16)?;
    /// gpu.write(0, &vec![7u8; 1 << 16])?;
    /// let mut mine = vec![0u8; 1 << 16];
    /// let staged_before = host::device_stats(&dev).staged_bytes;
    /// let sum = dev.with_registered(&mut mine, |bytes| -> vkhost::Result<u64> {
    ///     gpu.read(0, bytes)?; // direct into my pages
    ///     Ok(bytes.iter().map(|&b| b as u64).sum())
    /// })??;
    /// assert_eq!(sum, 7 << 16);
    /// assert_eq!(host::device_stats(&dev).staged_bytes, staged_before, "nothing staged");
    /// assert_eq!(host::device_stats(&dev).live_imports, 0, "unregistered when the call returned");
    /// # Ok(()) }
    /// ```
    pub fn with_registered<R>(&self, buf: &mut [u8], f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        let mut reg = self.register(buf)?;
        // An unwind out of `f` drops `reg` on its way: unregistered either way.
        let r = f(&mut reg);
        drop(reg);
        Ok(r)
    }
}

impl Registration<'_> {
    /// Length in bytes.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let mut mine = vec![0u8; 1000];
    /// assert_eq!(dev.register(&mut mine)?.len(), 1000);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: zero-length registrations are refused.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let mut mine = vec![0u8; 10];
    /// assert!(!dev.register(&mut mine)?.is_empty());
    /// assert!(dev.register(&mut []).is_err());
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first registered byte.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let mut mine = vec![0u8; 4096];
    /// let addr = mine.as_ptr();
    /// let reg = dev.register(&mut mine)?;
    /// assert_eq!(reg.as_ptr(), addr);
    /// assert!(vkhost::host::find(&dev, reg.as_ptr(), reg.len()).is_some());
    /// # Ok(()) }
    /// ```
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.0.as_ptr()
    }

    /// The device it is registered on.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let mut mine = vec![0u8; 64];
    /// let reg = dev.register(&mut mine)?;
    /// assert_eq!(reg.device().id(), dev.id());
    /// # Ok(()) }
    /// ```
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// The memory behind the registered bytes, for binding an interop buffer to it (see
    /// [`RawMemory`]): `offset` is where the first registered byte lies in the import (which
    /// starts at the page, or import granule, below it). `None` after the device was destroyed,
    /// or when the bytes span two import pieces (a registration larger than one allocation).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::ash::vk;
    /// let dev = vkhost::Device::open_default()?;
    /// let mut mine = vec![0u8; 3000];
    /// let reg = dev.register(&mut mine)?;
    /// let raw = reg.raw_memory().expect("one import");
    /// let page = vkhost::host::page_size();
    /// assert_eq!(raw.offset as usize, reg.as_ptr() as usize % page, "imports start on a page");
    /// assert_eq!(raw.handle_types, vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT);
    /// assert_eq!(vkhost::host::find(&dev, reg.as_ptr(), reg.len()), Some((raw.buffer, raw.offset)));
    /// # Ok(()) }
    /// ```
    pub fn raw_memory(&self) -> Option<RawMemory> {
        let addr = self.ptr.0.as_ptr() as usize;
        let covered = {
            let reg = super::registry();
            let e = reg.find(self.dev.id(), addr, self.len)?;
            // Our own entry (a registration's bytes overlap no other entry of the device).
            e.cell.as_ref().filter(|c| Arc::ptr_eq(c, &self.res))?;
            e.covered.start
        };
        raw_memory(&self.res, addr - covered, self.len, |_| true)
    }
}

impl std::ops::Deref for Registration<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.res.settle_writes();
        // SAFETY: the slice is borrowed for 'a by this guard; no device write is pending (raw
        // async copies are the caller's to order); shared access follows `&self`.
        unsafe { std::slice::from_raw_parts(self.ptr.0.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Registration<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.res.settle_all();
        // SAFETY: as above, exclusive through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.0.as_ptr(), self.len) }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if self.dev.shared.forked() {
            return;
        }
        if let Err(e) = super::release_entry(&self.dev, self.ptr.0.as_ptr() as usize, Kind::Registered, true) {
            log::error!("Registration drop: unregister failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::private_after_fork;
    use crate::DeviceType;

    #[test]
    fn only_gpu_driver_blocks_are_out_of_reach_after_fork() {
        for t in [DeviceType::Discrete, DeviceType::Integrated, DeviceType::Virtual, DeviceType::Other] {
            assert!(!private_after_fork(t, false), "{t:?}: a driver mapping");
            assert!(private_after_fork(t, true), "{t:?}: vkhost's own anonymous memory");
        }
        assert!(private_after_fork(DeviceType::Cpu, false) && private_after_fork(DeviceType::Cpu, true));
    }
}
