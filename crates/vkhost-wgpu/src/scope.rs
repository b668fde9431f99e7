//! Registered and pinned memory as wgpu buffers, inside a scope that finishes their device work.
//!
//! **The buffer wgpu gets.** wgpu-hal takes ownership of a VkBuffer given to
//! `vulkan::Device::buffer_from_raw`: its `destroy_buffer` calls vkDestroyBuffer (it frees no
//! memory: the buffer has no allocator block). So wgpu never gets vkhost's own buffer. Each wrap
//! creates a new VkBuffer with the usage and external-memory handle types of vkhost's buffer over
//! the same allocation (so Vulkan guarantees the same memoryTypeBits and alignment), binds it to
//! vkhost's VkDeviceMemory at the guard's first byte, exactly as long as the guard, and hands it
//! to `wgpu::Device::create_buffer_from_hal` with COPY_SRC | COPY_DST | STORAGE (vkhost's
//! TRANSFER_SRC | TRANSFER_DST | STORAGE_BUFFER). wgpu-core marks such buffers initialized (its
//! init tracker has length 0), so it never clears the caller's bytes. wgpu destroys the VkBuffer;
//! vkhost frees the memory.
//!
//! **Why a scope, not a guard.** A `wgpu::Buffer` is `Clone`, and bind groups, encoders and
//! command buffers keep it alive (wgpu-core holds `Arc`s), so no borrow can stop wgpu from using
//! it after the vkhost guard is gone; and a guard whose `Drop` waits for the device would be
//! unsound under `mem::forget` (STYLE.md, habit 16). [`Interop::scope`] is shaped like
//! `std::thread::scope`: wrapping borrows the [`Registration`] or [`PinnedBuffer`] mutably for the
//! whole scope, and when the closure returns or unwinds, before the borrow ends, the scope
//!
//! 1. destroys every buffer it handed out (`wgpu::Buffer::destroy`): wgpu then refuses any later
//!    submission that names one of them, through a clone, a bind group or a command buffer
//!    encoded earlier (`Queue::submit` checks every buffer a command buffer uses: a validation
//!    error, never a use), and keeps the VkBuffer until the submissions that used it complete.
//!    (wgpu 24 still *records* a dispatch through an escaped bind group before it refuses the
//!    submission: its bind groups do not list buffers that are already initialized, as a
//!    `HostBuffer` always is, so destroying the buffer does not invalidate them. The validation
//!    layer flags that recording, VUID-vkCmdDispatch-None-02699; the device never runs it.);
//! 2. submits a command buffer with one global barrier, all commands' writes → host reads and
//!    writes, which also flushes wgpu's pending `write_buffer` copies (they go first in that
//!    submission): device writes to the caller's pages are visible to the host afterwards;
//! 3. polls the device (`Maintain::Poll`, which reads the fence) until that submission, and so
//!    every earlier one, has completed. Never `Maintain::Wait`: wgpu-core 24's wait gives up
//!    after 60 s, ignores the timeout and runs the callbacks of every submission as if it had
//!    completed, so a scope whose kernel ran longer returned while the kernel still wrote the
//!    caller's pages. The same wgpu bug reaches a scope through another thread's
//!    `Device::poll(Maintain::Wait)` that times out meanwhile: on a device that runs work of
//!    60 s or more, do not wait through `Maintain::Wait` on any thread while a scope ends.
//!
//! A scope that handed out no buffer takes step 3 alone (a failure there is logged: no vkhost
//! memory is at stake).
//!
//! Meanwhile the scope holds a [`vkhost::DeviceHold`], so `vkhost::Device::destroy` answers
//! `Busy` instead of freeing imports wgpu may be using; the raw `host::unregister` and
//! `host::free_pinned` already refuse guarded entries. Nothing the caller can leak stands between
//! the device and the memory: the `Scope` lives in [`Interop::scope`]'s frame.
//!
//! If wgpu fails while the scope ends (its default error handler panics: a device the caller
//! destroyed with the safe `wgpu::Device::destroy`, which leaves work already submitted running,
//! or a lost device), the scope does not trust that nothing runs: it submits an empty batch
//! through wgpu (wgpu-core 24 still accepts one after `destroy`, and it carries wgpu's staged
//! `write_buffer` copies) and waits for it through wgpu before it returns, and logs the failure.
//! Never `vkDeviceWaitIdle`: other threads may still submit on wgpu's queue. A lost device
//! answers at once (it runs nothing more, the stance vkhost's own waits take). If even the empty
//! submission fails on a device that is not lost, nothing can wait soundly for work that may
//! still write the caller's pages, so the process aborts rather than end the borrow.
//!
//! A user's wgpu callback (`on_submitted_work_done`, `map_async`, device lost) that panics
//! while the scope ends (wgpu runs finished work's callbacks in `submit` and `poll`) does not
//! cut the wait short: the wait starts again with a fresh submission, and the panic reaches
//! the caller of [`Interop::scope`] once the work is done (unless the closure is already
//! unwinding). A callback that panics every time it runs, past 8 tries, is treated as wgpu
//! failing (above). One that panics on another thread, whose `poll` or `submit` collected the
//! scope's own callback in the same batch, makes wgpu drop that callback unrun: the scope takes
//! the drop for completion (wgpu collects a callback only with its completed submission).
//!
//! wgpu-core 24 itself can deadlock when one thread polls a device after
//! `wgpu::Device::destroy` while another calls `Queue::write_buffer` (a lock-order inversion
//! between its trackers and snatch locks); a scope that ends on a destroyed device polls, so
//! do not destroy a device while other threads still write through its queue.

use crate::{Error, Interop, Result};
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use vkhost::ash::{self, vk};
use vkhost::{PinnedBuffer, RawMemory, Registration};
use wgpu::hal::api::Vulkan;

/// A caught panic's payload.
type Panic = Box<dyn std::any::Any + Send>;

/// States of a wait's `on_submitted_work_done` callback ([`Inner::wait_only`]).
const PENDING: u8 = 0;
const RAN: u8 = 1;
const DROPPED: u8 = 2;

/// Carried by that callback: marks it `DROPPED` if wgpu drops it without running it (a panic
/// in an earlier callback of the same batch, on whatever thread ran the batch).
struct Signal(Arc<AtomicU8>);

impl Drop for Signal {
    fn drop(&mut self) {
        // After a run the state is RAN, which stays.
        let _ = self.0.compare_exchange(PENDING, DROPPED, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// Between two polls of a scope's wait ([`Inner::wait_only`]): the thread yields for its first
/// 64 polls (work that ends within microseconds), then sleeps 20 us, doubling up to 1 ms (so a
/// long kernel costs at most about 1 ms of latency at the scope's end, and no busy core).
fn idle(polls: u32) {
    const SPINS: u32 = 64;
    if polls <= SPINS {
        std::thread::yield_now();
    } else {
        let us = (20u64 << (polls - SPINS).min(6)).min(1000);
        std::thread::sleep(std::time::Duration::from_micros(us));
    }
}

/// How many panics out of `submit` or `poll` a scope's wait takes (a user's callback that
/// panics each time it runs) before it gives up on waiting through wgpu; see
/// [`Inner::wait_only`].
const POLL_PANICS: u32 = 8;

/// The wgpu usages of every [`HostBuffer`]: what vkhost's TRANSFER_SRC | TRANSFER_DST |
/// STORAGE_BUFFER allow. No MAP usage: wgpu cannot map a buffer it did not allocate (the bytes
/// are host memory already: read them through the guard after the scope).
///
/// # Example
///
/// ```
/// use vkhost_wgpu::{USAGES, wgpu::BufferUsages};
/// assert!(USAGES.contains(BufferUsages::STORAGE | BufferUsages::COPY_SRC | BufferUsages::COPY_DST));
/// // No mapping: read and write the bytes through the vkhost guard, outside the scope.
/// assert!(!USAGES.intersects(BufferUsages::MAP_READ | BufferUsages::MAP_WRITE));
/// ```
pub const USAGES: wgpu::BufferUsages = wgpu::BufferUsages::COPY_SRC.union(wgpu::BufferUsages::COPY_DST).union(wgpu::BufferUsages::STORAGE);

/// The Vulkan usage of every VkBuffer handed to wgpu: vkhost's own (`RawMemory::usage`), so
/// that memoryTypeBits and alignment match its buffers over the same memory.
pub(crate) const VK_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw()
        | vk::BufferUsageFlags::STORAGE_BUFFER.as_raw(),
);

impl Interop {
    /// Runs `f` with a [`Scope`] that hands out registered and pinned memory as wgpu buffers
    /// ([`Scope::registration`], [`Scope::pinned`]), then, before returning (also when `f`
    /// panics), destroys those buffers and waits until all device work submitted so far has
    /// completed (see the module docs for the exact steps). Returns what `f` returns.
    ///
    /// The guards stay borrowed until then, so the host reads the results after the scope:
    ///
    /// ```
    /// # fn main() -> vkhost_wgpu::Result<()> {
    /// let interop = vkhost_wgpu::Interop::open(&Default::default())?;
    /// let mut pinned = vkhost_wgpu::vkhost::PinnedBuffer::new(interop.vkhost(), 1 << 16)?;
    /// pinned.fill(1);
    /// interop.scope(|s| -> vkhost_wgpu::Result<()> {
    ///     let buf = s.pinned(&mut pinned)?;
    ///     let mut enc = interop.device().create_command_encoder(&Default::default());
    ///     enc.clear_buffer(&buf, 0, Some(64)); // zeroes the first 64 bytes in place
    ///     interop.queue().submit([enc.finish()]);
    ///     Ok(())
    /// })?;
    /// assert_eq!((pinned[0], pinned[63], pinned[64]), (0, 0, 1));
    /// # Ok(()) }
    /// ```
    pub fn scope<'env, F, T>(&self, f: F) -> T
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
    {
        let scope = Scope {
            inner: Inner {
                device: self.device.clone(),
                queue: self.queue.clone(),
                raw: self.raw.clone(),
                vkhost: self.vkhost.clone(),
                // Err only after destroy: then nothing can be wrapped (`Scope::wrap` checks).
                hold: self.vkhost.hold().ok(),
                buffers: Mutex::new(Vec::new()),
            },
            _scope: PhantomData,
            _env: PhantomData,
        };
        // `scope.inner`'s drop (on return or unwind) finishes the work; see `Drop for Inner`.
        f(&scope)
    }
}

/// What [`Interop::scope`]'s closure gets: hands out wgpu buffers over vkhost memory, valid
/// until the scope ends (see the module docs).
///
/// `'scope` is the scope's lifetime, `'env` what it may borrow from outside (as in
/// `std::thread::Scope`): a guard wrapped here stays borrowed until [`Interop::scope`] returns.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost_wgpu::Result<()> {
/// # use vkhost_wgpu::{Interop, vkhost::PinnedBuffer};
/// let interop = Interop::open(&Default::default())?;
/// let dev = interop.vkhost();
/// let (mut a, mut b) = (PinnedBuffer::new(dev, 4096)?, PinnedBuffer::new(dev, 4096)?);
/// a.fill(7);
/// interop.scope(|s| -> vkhost_wgpu::Result<()> {
///     let (src, dst) = (s.pinned(&mut a)?, s.pinned(&mut b)?);
///     let mut enc = interop.device().create_command_encoder(&Default::default());
///     enc.copy_buffer_to_buffer(&src, 0, &dst, 0, 4096);
///     interop.queue().submit([enc.finish()]);
///     Ok(())
/// })?; // the copy has completed here
/// assert!(b.iter().all(|&x| x == 7));
/// # Ok(()) }
/// ```
pub struct Scope<'scope, 'env: 'scope> {
    inner: Inner,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// A scope's state. It carries the `Drop` (a `Drop` on `Scope` itself would make the borrow
/// checker require `'scope` to outlive the scope value).
struct Inner {
    device: wgpu::Device,
    queue: wgpu::Queue,
    raw: ash::Device,
    vkhost: vkhost::Device,
    /// Keeps `vkhost::Device::destroy` `Busy` while wgpu may use vkhost's memory.
    hold: Option<vkhost::DeviceHold>,
    /// Every buffer handed out, destroyed when the scope ends.
    buffers: Mutex<Vec<wgpu::Buffer>>,
}

impl std::fmt::Debug for Scope<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.inner.buffers.lock().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("Scope").field("vkhost", &self.inner.vkhost.id()).field("buffers", &n).finish()
    }
}

/// A wgpu buffer over a [`Registration`]'s or [`PinnedBuffer`]'s bytes, from a [`Scope`].
///
/// It derefs to the `wgpu::Buffer`: bind it as a storage buffer (offset 0 is the guard's first
/// byte; its size is the guard's length), or copy to and from it with wgpu. Its usages are
/// [`USAGES`]. Clones of the `wgpu::Buffer` (and bind groups over it) may escape the scope, but
/// the scope destroys the buffer when it ends: wgpu refuses to submit any later use (a
/// validation error; see the module docs for what wgpu 24 still records).
///
/// # Example
///
/// ```
/// # fn main() -> vkhost_wgpu::Result<()> {
/// # use vkhost_wgpu::{Interop, vkhost::PinnedBuffer};
/// let interop = Interop::open(&Default::default())?;
/// let mut pinned = PinnedBuffer::new(interop.vkhost(), 4096)?;
/// interop.scope(|s| -> vkhost_wgpu::Result<()> {
///     let buf = s.pinned(&mut pinned)?; // derefs to the wgpu::Buffer
///     assert_eq!((buf.size(), buf.usage()), (4096, vkhost_wgpu::USAGES));
///     let _binding = buf.as_entire_binding(); // for a bind group entry
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct HostBuffer<'scope> {
    buffer: wgpu::Buffer,
    _scope: PhantomData<&'scope ()>,
}

impl HostBuffer<'_> {
    /// The wgpu buffer.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost_wgpu::Result<()> {
    /// # use vkhost_wgpu::{Interop, vkhost::PinnedBuffer, wgpu};
    /// let interop = Interop::open(&Default::default())?;
    /// let mut pinned = PinnedBuffer::new(interop.vkhost(), 4096)?;
    /// interop.scope(|s| -> vkhost_wgpu::Result<()> {
    ///     let host = s.pinned(&mut pinned)?;
    ///     let buffer: &wgpu::Buffer = host.buffer();
    ///     assert_eq!(buffer.size(), 4096);
    ///     Ok(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }
}

impl std::ops::Deref for HostBuffer<'_> {
    type Target = wgpu::Buffer;
    fn deref(&self) -> &wgpu::Buffer {
        &self.buffer
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// `reg`'s bytes as a wgpu storage buffer, with no staging: shaders and copies read and
    /// write the caller's pages. `reg` stays borrowed until the scope ends.
    ///
    /// Errors (`InvalidArgument`): a registration of another vkhost device; a length that is
    /// not a multiple of 4 (`wgpu::COPY_BUFFER_ALIGNMENT`); a first byte whose address is not a
    /// multiple of [`Interop::host_buffer_alignment`] (64 on lavapipe), since a VkBuffer over
    /// exactly these bytes must start there. (A larger buffer starting lower would let a shader
    /// write bytes outside the registration.) `Unsupported`: a registration larger
    /// than one allocation whose bytes span two imports. `Vkhost(DeviceDestroyed)` after destroy.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost_wgpu::Result<()> {
    /// # use vkhost_wgpu::Interop;
    /// let interop = Interop::open(&Default::default())?;
    /// let (len, align) = (4096, interop.host_buffer_alignment());
    /// let mut bytes = vec![0xFFu8; len + align];
    /// let at = bytes.as_ptr().align_offset(align);
    /// let mut reg = interop.vkhost().register(&mut bytes[at..at + len])?;
    /// interop.scope(|s| -> vkhost_wgpu::Result<()> {
    ///     let buf = s.registration(&mut reg)?;
    ///     let mut enc = interop.device().create_command_encoder(&Default::default());
    ///     enc.clear_buffer(&buf, 0, None); // zeroes the registered bytes in place
    ///     interop.queue().submit([enc.finish()]);
    ///     Ok(())
    /// })?;
    /// drop(reg);
    /// assert!(bytes[at..at + len].iter().all(|&b| b == 0));
    /// assert!(bytes[..at].iter().chain(&bytes[at + len..]).all(|&b| b == 0xFF)); // outside: untouched
    /// # Ok(()) }
    /// ```
    pub fn registration<'a: 'scope>(&self, reg: &'scope mut Registration<'a>) -> Result<HostBuffer<'scope>> {
        self.inner.same_device(reg.device())?;
        // Device access vkhost tracks (a recorded copy) finishes first, as for a host write.
        std::ops::DerefMut::deref_mut(reg);
        let raw = reg.raw_memory().ok_or_else(|| self.inner.no_memory("the registration"))?;
        let buffer = self.inner.wrap(raw, reg.len(), "vkhost registration")?;
        Ok(HostBuffer { buffer, _scope: PhantomData })
    }

    /// `pinned`'s bytes as a wgpu storage buffer. `pinned` stays borrowed until the scope ends.
    /// Errors as for [`Scope::registration`] (a pinned block starts at a page, so alignment
    /// holds; its length must be a multiple of 4 and of the buffer alignment).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost_wgpu::Result<()> {
    /// # use vkhost_wgpu::{Interop, vkhost::PinnedBuffer};
    /// let interop = Interop::open(&Default::default())?;
    /// let mut pinned = PinnedBuffer::new(interop.vkhost(), 1 << 16)?;
    /// pinned.fill(3);
    /// interop.scope(|s| -> vkhost_wgpu::Result<()> {
    ///     let buf = s.pinned(&mut pinned)?;
    ///     let mut enc = interop.device().create_command_encoder(&Default::default());
    ///     enc.clear_buffer(&buf, 4096, Some(4096)); // the second 4 KiB
    ///     interop.queue().submit([enc.finish()]);
    ///     Ok(())
    /// })?;
    /// assert_eq!((pinned[4095], pinned[4096], pinned[8191], pinned[8192]), (3, 0, 0, 3));
    /// # Ok(()) }
    /// ```
    pub fn pinned(&self, pinned: &'scope mut PinnedBuffer) -> Result<HostBuffer<'scope>> {
        self.inner.same_device(pinned.device())?;
        // Pending device access vkhost tracks finishes first (as for `DerefMut`).
        std::ops::DerefMut::deref_mut(pinned);
        let raw = pinned.raw_memory().ok_or_else(|| self.inner.no_memory("the pinned block"))?;
        let buffer = self.inner.wrap(raw, pinned.len(), "vkhost pinned block")?;
        Ok(HostBuffer { buffer, _scope: PhantomData })
    }
}

impl Inner {
    fn same_device(&self, dev: &vkhost::Device) -> Result<()> {
        if dev.id() != self.vkhost.id() {
            return Err(Error::invalid(format!("the memory belongs to {}, not to this Interop's {}", dev.id(), self.vkhost.id())));
        }
        Ok(())
    }

    fn no_memory(&self, what: &str) -> Error {
        if self.vkhost.is_destroyed() {
            return vkhost::Error::DeviceDestroyed.into();
        }
        Error::unsupported(format!("{what} spans two imports (it is larger than one allocation): no single VkBuffer covers it"))
    }

    /// Creates a VkBuffer over exactly `len` bytes at `raw.offset` of `raw.memory` and gives it
    /// to wgpu.
    fn wrap(&self, raw: RawMemory, len: usize, label: &str) -> Result<wgpu::Buffer> {
        if self.hold.is_none() {
            return Err(vkhost::Error::DeviceDestroyed.into());
        }
        let size = len as u64;
        if size % wgpu::COPY_BUFFER_ALIGNMENT != 0 {
            return Err(Error::invalid(format!(
                "{len} bytes: a wgpu buffer's length must be a multiple of {}",
                wgpu::COPY_BUFFER_ALIGNMENT
            )));
        }
        let mut ext = vk::ExternalMemoryBufferCreateInfo::default().handle_types(raw.handle_types);
        if raw.usage != VK_USAGE {
            // vkhost changed its buffers' usage: the USAGES promise would not hold.
            return Err(Error::unsupported(format!("vkhost's buffers have usage {:?}, not {VK_USAGE:?}", raw.usage)));
        }
        let mut info = vk::BufferCreateInfo::default().size(size).usage(raw.usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
        if !raw.handle_types.is_empty() {
            // VUID-vkBindBufferMemory-memory-02985: imported memory binds only to buffers
            // created with its handle type.
            info = info.push_next(&mut ext);
        }
        // SAFETY: a valid create info; the device is alive (the Interop holds it).
        let buffer = unsafe { self.raw.create_buffer(&info, None) }.map_err(|code| Error::Vulkan { call: "vkCreateBuffer", code })?;
        let bound = (|| {
            // SAFETY: `buffer` is a live buffer of this device.
            let req = unsafe { self.raw.get_buffer_memory_requirements(buffer) };
            if raw.offset % req.alignment != 0 {
                return Err(Error::invalid(format!(
                    "the bytes start {} bytes into their allocation, and a VkBuffer over them must start at a multiple of {} \
                     bytes (VkMemoryRequirements::alignment): register a slice whose address is a multiple of {}",
                    raw.offset, req.alignment, req.alignment
                )));
            }
            if raw.offset + req.size > raw.size {
                return Err(Error::invalid(format!(
                    "a VkBuffer of {size} bytes needs {} bytes of memory at offset {}, and the allocation has {}: use a length that \
                     is a multiple of {}",
                    req.size, raw.offset, raw.size, req.alignment
                )));
            }
            // SAFETY: the memory is vkhost's live allocation (the guard is borrowed for the scope
            // and the device held), of a type in `req.memory_type_bits` (same usage, flags and
            // handle types as vkhost's buffer bound to it), and offset and size were checked.
            unsafe { self.raw.bind_buffer_memory(buffer, raw.memory, raw.offset) }
                .map_err(|code| Error::Vulkan { call: "vkBindBufferMemory", code })
        })();
        if let Err(e) = bound {
            // SAFETY: our fresh buffer, never used, destroyed once.
            unsafe { self.raw.destroy_buffer(buffer, None) };
            return Err(e);
        }
        // SAFETY: the memory is vkhost's, not wgpu's to manage (wgpu destroys only the
        // VkBuffer), and wgpu never maps it (no MAP usage).
        let hal = unsafe { wgpu::hal::vulkan::Device::buffer_from_raw(buffer) };
        let desc = wgpu::BufferDescriptor { label: Some(label), size, usage: USAGES, mapped_at_creation: false };
        // SAFETY: `hal` is a buffer of this device's VkDevice, `size` bytes, with the Vulkan
        // usages `USAGES` needs, not mapped.
        let buffer = unsafe { self.device.create_buffer_from_hal::<Vulkan>(hal, &desc) };
        self.buffers.lock().unwrap_or_else(PoisonError::into_inner).push(buffer.clone());
        Ok(buffer)
    }

    /// Step 2 of the module docs: the host-visibility barrier, recorded (submitted by the
    /// caller).
    fn barrier(&self) -> wgpu::CommandBuffer {
        let mut enc = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("vkhost-wgpu scope end") });
        // SAFETY: records one pipeline barrier into the open command buffer; destroys nothing.
        unsafe {
            enc.as_hal_mut::<Vulkan, _, _>(|e| {
                if let Some(e) = e {
                    let barrier = [vk::MemoryBarrier::default()
                        .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
                        .dst_access_mask(vk::AccessFlags::HOST_READ | vk::AccessFlags::HOST_WRITE)];
                    self.raw.cmd_pipeline_barrier(
                        e.raw_handle(),
                        vk::PipelineStageFlags::ALL_COMMANDS,
                        vk::PipelineStageFlags::HOST,
                        vk::DependencyFlags::empty(),
                        &barrier,
                        &[],
                        &[],
                    );
                }
            })
        };
        enc.finish()
    }

    /// Whether the Vulkan device reports itself lost (`vkGetFenceStatus` of a fresh fence: no
    /// queue is touched). A fence that cannot be made counts as not lost.
    fn device_lost(&self) -> bool {
        // SAFETY: plain create/query/destroy of our own fence on a live VkDevice; no queue is
        // used, so nothing needs external synchronization beyond the fence, which is ours.
        unsafe {
            let Ok(f) = self.raw.create_fence(&ash::vk::FenceCreateInfo::default(), None) else { return false };
            let lost = self.raw.get_fence_status(f) == Err(ash::vk::Result::ERROR_DEVICE_LOST);
            self.raw.destroy_fence(f, None);
            lost
        }
    }

    /// Waits until every submission so far has completed (step 3).
    ///
    /// First an empty submission: wgpu submits its staged `write_buffer` copies with any
    /// submission, and the barrier's may have been refused without a panic (after
    /// `wgpu::Device::destroy` with a caller's non-panicking error handler or an open error
    /// scope: an invalid encoder). wgpu-core 24 accepts an empty one even then; without it the
    /// staged copy into a HostBuffer would run at some later submission, after the scope
    /// (audit D, d5/d6).
    ///
    /// A user's wgpu callback (`on_submitted_work_done`, `map_async`, device lost) runs inside
    /// `poll` (after wgpu's wait) or `submit`, and may panic: the callbacks after it in that batch are
    /// dropped without running, ours perhaps among them. So a panic out of either is caught,
    /// the first one kept and returned once the wait is done, and the wait starts again with a
    /// fresh submission and flag, up to [`POLL_PANICS`] times; then the last panic goes on (to
    /// the caller's fallback, as one from wgpu failing would). Before, the scope's end took
    /// such a panic for wgpu failing: it swallowed it, or aborted the process when the
    /// callback panicked again (found by an audit).
    fn wait_only(&self) -> Option<Panic> {
        let mut first: Option<Panic> = None;
        for tries in 1.. {
            let waited = std::panic::catch_unwind(AssertUnwindSafe(|| {
                // `submit` too runs the callbacks of finished work: a panic may come out of it.
                self.queue.submit([]);
                // Attached to the latest submission (ours, or a later one of another thread):
                // it runs once every submission up to there has completed.
                let state = Arc::new(AtomicU8::new(PENDING));
                let signal = Signal(state.clone());
                self.queue.on_submitted_work_done(move || signal.0.store(RAN, Ordering::Release));
                // Until the callback ran, or wgpu dropped it unrun: it collected the callback
                // with its completed submission, and an earlier callback of that batch panicked
                // (on another thread, whose `poll` or `submit` collected it; on this one the
                // panic comes out here). Either way our submission, and every earlier one, has
                // completed; no later poll would ever run the callback.
                //
                // Polled, never `Maintain::Wait`: wgpu-core 24's wait gives up after 60 s
                // (CLEANUP_WAIT_MS), ignores that it timed out and takes every submission up to
                // the latest as completed, so it ran this callback while a longer kernel still
                // wrote the caller's pages. `Maintain::Poll` reads the fence's real value.
                let mut polls = 0u32;
                while state.load(Ordering::Acquire) == PENDING {
                    self.device.poll(wgpu::Maintain::Poll);
                    polls = polls.saturating_add(1);
                    idle(polls);
                }
            }));
            match waited {
                Ok(()) => break,
                Err(p) if tries >= POLL_PANICS => std::panic::resume_unwind(p),
                Err(p) => {
                    first.get_or_insert(p);
                }
            }
        }
        first
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let buffers = std::mem::take(self.buffers.get_mut().unwrap_or_else(PoisonError::into_inner));
        if buffers.is_empty() {
            // Nothing of vkhost's went to wgpu: no buffer to destroy, no host barrier. The scope
            // still waits for the work submitted so far, as `Interop::scope` promises (it
            // returned at once before). A failure to wait endangers no vkhost memory here, so
            // it is logged, never the abort below.
            match std::panic::catch_unwind(AssertUnwindSafe(|| self.wait_only())) {
                Ok(Some(p)) if !std::thread::panicking() => std::panic::resume_unwind(p),
                Ok(_) => {}
                Err(_) => {
                    let id = self.vkhost.id();
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        log::error!("{id}: wgpu failed while a scope that wrapped nothing waited (device destroyed or lost?)")
                    }));
                }
            }
            return;
        }
        for b in &buffers {
            b.destroy();
        }
        drop(buffers);
        // Never unwind out of here until the wait is done (this may run while `f` unwinds):
        // wgpu panics on a lost device, from its default error handler too, and a user's wgpu
        // callback may panic inside `Queue::submit` (which runs finished work's callbacks) or
        // `poll`. Such a panic goes on at the end, once the work is done; one out of recording
        // the barrier is wgpu refusing it (after `wgpu::Device::destroy`), the scope's own
        // business, and is not.
        let mut first_panic: Option<Panic> = None;
        let waited = match std::panic::catch_unwind(AssertUnwindSafe(|| self.barrier())) {
            Ok(cmd) => {
                if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    self.queue.submit([cmd]);
                })) {
                    first_panic = Some(p);
                }
                match std::panic::catch_unwind(AssertUnwindSafe(|| self.wait_only())) {
                    Ok(p) => {
                        first_panic = first_panic.or(p);
                        true
                    }
                    Err(p) => {
                        first_panic.get_or_insert(p);
                        false
                    }
                }
            }
            Err(_) => false,
        };
        if !waited {
            // wgpu refused to record or submit the barrier, or to wait: after
            // `wgpu::Device::destroy` (safe) it refuses new encoders while what was submitted
            // keeps running, writing the caller's pages, and the borrow of them ends when this
            // returns. Wait through wgpu, never with vkDeviceWaitIdle: wgpu-core 24's
            // `Queue::submit` does not check that the device is valid, so other threads may
            // still call vkQueueSubmit on wgpu's queue, and vkDeviceWaitIdle needs that queue
            // externally synchronized (found by audit D). An empty submission is still
            // accepted, and its completion means every earlier one's.
            let waited = match std::panic::catch_unwind(AssertUnwindSafe(|| self.wait_only())) {
                Ok(p) => {
                    first_panic = first_panic.or(p);
                    true
                }
                Err(_) => false,
            };
            // A lost device runs nothing more: the scope may end. Otherwise work that names the
            // caller's pages may still run and there is no sound way left to wait for it (no
            // wgpu submission is accepted, and vkDeviceWaitIdle would race other threads'
            // submits): ending the borrow now could let the device write freed memory, so the
            // process stops instead. Decided before anything is logged: a logger that panics
            // must not unwind past this.
            let abort = !waited && !self.device_lost();
            let id = self.vkhost.id();
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
                log::error!(
                    "{id}: wgpu failed while a scope flushed its work (device destroyed or lost?); {}",
                    if waited { "waited through an empty submission; the scope ends" } else { "the empty submission failed too" }
                );
                if abort {
                    log::error!("{id}: cannot wait for a scope's work on a live device; aborting");
                }
            }));
            if abort {
                std::process::abort();
            }
        }
        // The work is done: the panic reaches the caller now, unless the thread is already
        // unwinding (from `f`), where a second panic would abort.
        if let Some(p) = first_panic {
            if !std::thread::panicking() {
                std::panic::resume_unwind(p);
            }
        }
        // `hold` drops after this: destroy may proceed.
    }
}
