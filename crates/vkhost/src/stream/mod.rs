//! Async streams: ordered device work on one queue, tracked by a timeline semaphore.
//!
//! A [`Stream`] records copies into an open batch (one command buffer) and submits it when it
//! holds enough work, when a staging chunk fills, or on [`Stream::record`],
//! [`Stream::synchronize`], [`Stream::flush`] or any wait. Batch k signals value k on the
//! stream's timeline semaphore. A stream is ordered like a CUDA stream: within a batch a global
//! transfer barrier goes between two commands whenever they touch overlapping bytes of one
//! buffer with a write on either side (independent copies run concurrently); each batch starts
//! with one, ordering it after the previous batch on the same queue, and ends with a transfer →
//! host barrier when it writes host memory.
//!
//! Host memory:
//! - a range covered by a registration or pinned block is copied directly; the entry remembers
//!   (stream, value), and `unregister`/`free_pinned` wait for it. The raw calls and the
//!   pinned-block forms ([`Stream::upload_pinned`], [`Stream::download_pinned`]) return at once;
//!   the borrowed-slice forms ([`Stream::upload`], [`Stream::download`]) return once the device
//!   has read or written the bytes (the crate docs say why);
//! - a pageable h2d source is memcpy'd into the stream's staging ring (chunks reused once the
//!   device is past them); the call returns once the source has been read;
//! - a pageable d2h destination is filled from the ring by the library once the device is done,
//!   during `synchronize`, `Event::wait`, a `Pending` drop, or when the ring wraps.
//!
//! Errors of work that never ran stick: a batch whose submission fails is lost (its copies never
//! run). The call that submitted it returns the error; besides, the guards of its copies
//! ([`Pending`]) report it whenever asked, an [`Event`] recorded after it reports it, and so does
//! the next [`Stream::synchronize`], until a `synchronize` has reported it. Pageable d2h
//! copy-outs that cannot be confirmed (a wait that failed, a lost device, a stream dropped while
//! its wait failed) are cancelled, never run later, and reported the same way: no guard answers
//! `Ok` for a destination that was not written, and nothing writes it after the error.
//!
//! Two streams are ordered like two CUDA streams: not at all, unless one waits on an
//! [`Event`] of the other ([`Stream::wait_event`]). Work of two streams of one device on the
//! same bytes (a kernel writing a pinned block through [`Binding::pinned_mut`](crate::Binding::pinned_mut)
//! on one, [`Stream::download_pinned`] into it on the other) leaves those bytes to whichever
//! lands last; every CPU view of a block still waits for both. Across devices vkhost orders for
//! you: a pinned block used on another device's stream first waits for its own device's work
//! on it.
//!
//! Streams default to the transfer-only family (the copy engines) and alternate between its
//! queues, so an h2d stream and a d2h stream created one after the other run on different
//! engines where the device has two.
//!
//! # Example
//!
//! ```
//! # fn main() -> vkhost::Result<()> {
//! let dev = vkhost::Device::open_default()?;
//! let gpu = dev.alloc_buffer(1 << 20)?;
//! let mut pinned = vkhost::PinnedBuffer::new(&dev, 1 << 20)?;
//! pinned.fill(1);
//! let stream = dev.stream()?;
//! let up = stream.upload_pinned(&pinned, 0..1 << 20, &gpu, 0)?; // enqueued: read later
//! stream.fill_async(&gpu, 0, 4096, 0)?; // ordered after the upload
//! let done = stream.record()?;
//! up.wait()?;
//! done.wait()?;
//! let mut head = [9u8; 8];
//! gpu.read(4092, &mut head)?;
//! assert_eq!(head, [0, 0, 0, 0, 1, 1, 1, 1]);
//! # Ok(()) }
//! ```

mod batch;
mod copy;
mod descriptors;
mod inner;
mod launch;
mod ring;

use crate::buffer::DeviceBuffer;
use crate::device::Device;
use crate::device::QueueKind;
use crate::device::object::Child;
use crate::error::{Error, Result};
use crate::fault::{self, Point};
use crate::kernel::Binding;
use ash::vk;
use batch::{Access, Ends};
use inner::{State, StreamInner, create_timeline, lost_error, pick_queue, relock, signalled, take_unreported};
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// An ordered sequence of device work on one queue. `Send + Sync`; operations from several
/// threads are ordered by the stream's lock. Dropping it synchronizes first.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// let (a, b) = (dev.alloc_buffer(4096)?, dev.alloc_buffer(4096)?);
/// let stream = dev.stream()?;
/// stream.fill_async(&a, 0, 4096, 0x0101_0101)?;
/// stream.copy_async(&a, 0, &b, 0, 4096)?; // runs after the fill: same stream
/// let mut out = vec![0u8; 4096];
/// stream.download(&b, 0, &mut out)?.wait()?;
/// assert!(out.iter().all(|&x| x == 1));
/// # Ok(()) }
/// ```
pub struct Stream {
    inner: Arc<StreamInner>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("device", &self.inner.shared.id).field("queue", &self.inner.queue_kind).finish()
    }
}

/// A point in a stream's work. Cheap to clone.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// let gpu = dev.alloc_buffer(1 << 16)?;
/// let stream = dev.stream()?;
/// stream.fill_async(&gpu, 0, 1 << 16, 7)?;
/// let event = stream.record()?; // submits; marks this point
/// let copy = event.clone();
/// event.wait()?;
/// assert!(copy.is_done()?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Event {
    inner: Arc<StreamInner>,
    value: u64,
    /// A copy's or a launch's own guard (its work is in batch `value`), not a recorded event:
    /// see `inner::lost_error`.
    own: bool,
    /// The enqueue call of a copy's own guard (0 for other guards and events): its cancelled
    /// copy-outs are its own, whatever else shares its batch (`State::cancelled`).
    call: u64,
    /// Set once this event (or the clone it was cloned from) was answered done: done for good
    /// (a copy's own guard too: its batch ran and its copy-outs were run), answered so without
    /// the stream's lock.
    seen_done: std::sync::OnceLock<()>,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event").field("value", &self.value).finish()
    }
}

/// Async work that borrows host memory: waits for it (and completes pageable d2h) on drop, so
/// safe code cannot touch or free memory the device is still using.
///
/// When completion cannot be confirmed (device loss, a failed wait, a wait that times out
/// after 120 s without progress), nothing it names is reused while the device may still touch
/// it: pageable copy-outs it guards are cancelled before the wait returns (the error is
/// reported, never `Ok` for bytes not written); the work keeps its own references to the
/// pinned blocks, imports and device buffers it names, so they are neither freed nor handed
/// out again until vkhost sees it done or the device is torn down (a leak, not a reuse); and a
/// later view of a pinned block it names (`Deref`/`DerefMut`) waits for the stream's queue
/// (vkQueueWaitIdle, which has no timeout) first. The borrowed-slice forms ([`Stream::upload`], [`Stream::download`]) have
/// finished with the caller's bytes when they return.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// let gpu = dev.alloc_buffer(4096)?;
/// let stream = dev.stream()?;
/// let src = vec![3u8; 4096];
/// let pending = stream.upload(&src, &gpu, 0)?; // borrows `src`
/// pending.wait()?; // (or drop it: dropping waits)
/// let mut back = vec![0u8; 4096];
/// gpu.read(0, &mut back)?;
/// assert_eq!(back, src);
/// # Ok(()) }
/// ```
#[must_use = "dropping a Pending waits for the copy"]
pub struct Pending<'a> {
    event: Option<Event>,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl std::fmt::Debug for Pending<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("event", &self.event).finish()
    }
}

impl Device {
    /// A stream on the copy engines (see [`QueueKind::Copy`]).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let stream = dev.stream()?;
    /// let gpu = dev.alloc_buffer(256)?;
    /// stream.upload(&[1; 256], &gpu, 0)?.wait()?;
    /// assert_eq!(stream.device().id(), dev.id());
    /// # Ok(()) }
    /// ```
    pub fn stream(&self) -> Result<Stream> {
        self.stream_on(QueueKind::Copy)
    }

    /// A stream on the given kind of queue (copy streams alternate between the copy queues).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::QueueKind;
    /// let dev = vkhost::Device::open_default()?;
    /// // Kernels need a compute-capable queue.
    /// let stream = dev.stream_on(QueueKind::Compute)?;
    /// assert_eq!(stream.queue()?.0, dev.raw()?.compute_family);
    /// let gpu = dev.alloc_buffer(1024)?;
    /// stream.fill_u32(vkhost::Binding::Device(&gpu, 0, 1024), 0xFFFF_FFFF)?;
    /// stream.synchronize()?;
    /// # Ok(()) }
    /// ```
    pub fn stream_on(&self, kind: QueueKind) -> Result<Stream> {
        self.stream_at(kind, None)
    }

    /// A stream on queue `index` of the given kind (modulo the queues vkhost created there:
    /// up to two copy-engine queues, one compute queue).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::QueueKind;
    /// let dev = vkhost::Device::open_default()?;
    /// let a = dev.stream_on_queue(QueueKind::Compute, 0)?;
    /// let b = dev.stream_on_queue(QueueKind::Compute, 5)?; // 5 modulo one compute queue
    /// assert_eq!(a.queue()?, b.queue()?);
    /// # Ok(()) }
    /// ```
    pub fn stream_on_queue(&self, kind: QueueKind, index: usize) -> Result<Stream> {
        self.stream_at(kind, Some(index))
    }

    fn stream_at(&self, kind: QueueKind, index: Option<usize>) -> Result<Stream> {
        let s = &self.shared;
        if !s.info.timeline_semaphore {
            return Err(Error::unsupported("streams need timeline semaphores (Vulkan 1.2)"));
        }
        let l = s.live()?;
        let queue_index = match index {
            Some(i) => i,
            None => l.next_stream.fetch_add(1, Ordering::Relaxed) as usize,
        };
        let family = pick_queue(&l, kind, queue_index)?.family;
        fault::check(Point::CreateCommandPool).map_err(|c| s.fail("vkCreateCommandPool", c))?;
        let pi = vk::CommandPoolCreateInfo::default().queue_family_index(family).flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: valid create info for a family of this device.
        let pool = unsafe { l.device.create_command_pool(&pi, None) }.map_err(|c| s.fail("vkCreateCommandPool", c))?;
        s.count_pool(1);
        let ((), sem) = crate::device::object::make_or_undo(
            (),
            |()| create_timeline(s, &l),
            |()| {
                // SAFETY: fresh pool, unused.
                unsafe { l.device.destroy_command_pool(pool, None) };
                s.count_pool(-1);
            },
        )?;
        let sem_key = crate::device::lock(&s.stream_semaphores).adopt(sem);
        let inner = Arc::new_cyclic(|me| StreamInner {
            me: me.clone(),
            shared: s.clone(),
            queue_kind: kind,
            queue_index,
            sem,
            sem_key,
            state: Mutex::new(State {
                pool,
                wait_on: Vec::new(),
                submitted: 0,
                open: None,
                inflight: VecDeque::new(),
                free_cmds: Vec::new(),
                waits: Vec::new(),
                ring: None,
                scratch: None,
                no_scratch: false,
                completions: VecDeque::new(),
                calls: 0,
                lost: Vec::new(),
                cancelled: Vec::new(),
                reported: 0,
                dead: false,
                launched: false,
                desc_free: Vec::new(),
            }),
            completed: AtomicU64::new(0),
            clean_done: AtomicU64::new(0),
            clean_own: AtomicU64::new(0),
        });
        let child: Weak<dyn Child> = Arc::downgrade(&inner) as Weak<StreamInner>;
        s.add_child(child);
        s.destroy_deferred(&l);
        Ok(Stream { inner })
    }
}

impl Stream {
    /// The queue this stream submits to: (family, index).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let (family, index) = dev.stream()?.queue()?;
    /// let raw = dev.raw()?;
    /// // A copy stream is on the copy engines where the device has them, else on the compute queue.
    /// match raw.copy_family {
    ///     Some(f) => assert!(family == f && raw.copy_queue_indices.contains(&index)),
    ///     None => assert_eq!((family, index), (raw.compute_family, raw.compute_queue_index)),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn queue(&self) -> Result<(u32, u32)> {
        let l = self.inner.shared.live_any()?;
        let q = pick_queue(&l, self.inner.queue_kind, self.inner.queue_index)?;
        Ok((q.family, q.index))
    }

    /// The device this stream runs on.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let stream = dev.stream()?;
    /// let buf = stream.device().alloc_buffer(64)?; // the stream's device, from the stream alone
    /// stream.fill_async(&buf, 0, 64, 0)?;
    /// stream.synchronize()?;
    /// # Ok(()) }
    /// ```
    pub fn device(&self) -> Device {
        Device { shared: self.inner.shared.clone() }
    }

    /// Enqueues a copy of `len` host bytes at `src` into `dst` at `dst_offset`.
    ///
    /// Host bytes covered by a registration or pinned block are enqueued and the call returns
    /// at once. Pageable bytes are copied into the stream's staging ring before the call
    /// returns, so `src` may be reused right away.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes during the call. Where a registration or pinned
    /// block covers it, those bytes must not change until the copy completes (an event recorded
    /// after it, or `synchronize`).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::host;
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(4096)?;
    /// let stream = dev.stream()?;
    /// let block = host::alloc_pinned(&dev, 4096)?;
    /// // SAFETY: a live block of 4096 bytes, which no device work names yet.
    /// unsafe { block.as_ptr().write_bytes(0x11, 4096) };
    /// // SAFETY: the block is readable, and neither written nor freed until `synchronize` returned.
    /// unsafe { stream.copy_to_device_async(block.as_ptr(), 4096, &gpu, 0) }?;
    /// stream.synchronize()?;
    /// host::free_pinned(&dev, block)?;
    /// let mut back = vec![0u8; 4096];
    /// gpu.read(0, &mut back)?;
    /// assert!(back.iter().all(|&b| b == 0x11));
    /// # Ok(()) }
    /// ```
    pub unsafe fn copy_to_device_async(&self, src: *const u8, len: usize, dst: &DeviceBuffer, dst_offset: usize) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.host_copy(true, src as usize, len, &dst.mem, dst_offset) }.map(|_| ())
    }

    /// Enqueues a copy of `len` bytes from `src` at `src_offset` into host memory at `dst`.
    /// The bytes are in place after `synchronize`, or `Event::wait` on an event recorded after
    /// this call.
    ///
    /// # Safety
    /// `dst` must stay valid, writable and otherwise untouched for `len` bytes until then.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(4096)?;
    /// gpu.write(0, &[0x22; 4096])?;
    /// let stream = dev.stream()?;
    /// let mut out = vec![0u8; 4096];
    /// // SAFETY: `out` stays alive, writable and untouched until `synchronize` returned.
    /// unsafe { stream.copy_to_host_async(&gpu, 0, out.as_mut_ptr(), 4096) }?;
    /// stream.synchronize()?; // the bytes are in place now
    /// assert!(out.iter().all(|&b| b == 0x22));
    /// # Ok(()) }
    /// ```
    pub unsafe fn copy_to_host_async(&self, src: &DeviceBuffer, src_offset: usize, dst: *mut u8, len: usize) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.host_copy(false, dst as usize, len, &src.mem, src_offset) }.map(|_| ())
    }

    /// Safe h2d from `src` (a `PinnedBuffer`, a `Registration` or any slice): the bytes are read
    /// before the call returns, so `src` may be changed or freed at once, and a leaked guard
    /// changes nothing. Pageable bytes are copied into the staging ring (the device copy may
    /// still run after the return); bytes the device reads directly (pinned or registered
    /// memory) are read by the time the call returns: it waits for the copy. A borrowed slice
    /// cannot promise more: a `&mut` taken from the same memory before the call is usable again
    /// once the guard is gone, and a guard's destructor may never run (the `thread::scoped`
    /// lesson, see [the crate docs](crate)). For an upload that returns at once from pinned memory, use
    /// [`Stream::upload_pinned`], which borrows the block itself.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(1 << 20)?;
    /// let stream = dev.stream()?;
    /// let pageable = vec![5u8; 100];
    /// stream.upload(&pageable, &gpu, 0)?.wait()?; // `pageable` was read before the return
    /// let mut pinned = vkhost::PinnedBuffer::new(&dev, 1 << 20)?;
    /// pinned.fill(4);
    /// let pending = stream.upload_pinned(&pinned, 0..1 << 20, &gpu, 0)?; // async
    /// // ... other work while the device copies ...
    /// pending.wait()?;
    /// # Ok(()) }
    /// ```
    pub fn upload<'a>(&self, src: &'a [u8], dst: &DeviceBuffer, dst_offset: usize) -> Result<Pending<'a>> {
        // SAFETY: `src` is readable for the call, and what the device reads of it directly is
        // read before the call returns (`guarded_copy` waits when some bytes went direct).
        unsafe { self.guarded_copy(true, src.as_ptr() as usize, src.len(), dst, dst_offset, |e| e.direct) }
    }

    /// Safe d2h into `dst` (a `PinnedBuffer`, a `Registration` or any slice): the call returns
    /// once the bytes are in place, whatever the memory. A borrowed slice cannot promise more
    /// (see [`Stream::upload`]): the device writing into memory that a `&mut` taken before the
    /// call can reach again once the guard is leaked would be undefined behaviour. For a
    /// download that returns at once into pinned memory, use [`Stream::download_pinned`].
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(4096)?;
    /// gpu.write(0, &[6; 4096])?;
    /// let stream = dev.stream()?;
    /// let mut out = vec![0u8; 4096];
    /// let pending = stream.download(&gpu, 0, &mut out)?; // done when it returns
    /// assert!(pending.is_done()?);
    /// drop(pending);
    /// assert!(out.iter().all(|&b| b == 6));
    /// # Ok(()) }
    /// ```
    pub fn download<'a>(&self, src: &DeviceBuffer, src_offset: usize, dst: &'a mut [u8]) -> Result<Pending<'a>> {
        // SAFETY: `dst` is writable for the call, and every write to it is complete before the
        // call returns (`guarded_copy` always waits).
        unsafe { self.guarded_copy(false, dst.as_mut_ptr() as usize, dst.len(), src, src_offset, |_| true) }
    }

    /// Async h2d of `range` of a pinned block: the call returns once the copy is enqueued, and
    /// the guard borrows the block until it is waited or dropped (drop waits). Sound without
    /// trusting that destructor: while the block is borrowed shared nobody can write it through
    /// the safe API, and once the borrow ends every `&mut` view of the block is made by its
    /// `DerefMut`, which first waits for the device's pending reads and writes of it. The block
    /// must belong to the stream's device to be read directly; on another device the bytes are
    /// staged before the call returns.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(8192)?;
    /// let stream = dev.stream()?;
    /// let mut pinned = vkhost::PinnedBuffer::new(&dev, 8192)?;
    /// pinned.fill(9);
    /// let pending = stream.upload_pinned(&pinned, 4096..8192, &gpu, 0)?;
    /// pending.wait()?;
    /// let mut back = [0u8; 4096];
    /// gpu.read(0, &mut back)?;
    /// assert_eq!(back, [9; 4096]);
    /// assert!(stream.upload_pinned(&pinned, 4096..8193, &gpu, 0).is_err(), "past the block");
    /// # Ok(()) }
    /// ```
    pub fn upload_pinned<'a>(
        &self,
        src: &'a crate::PinnedBuffer,
        range: std::ops::Range<usize>,
        dst: &DeviceBuffer,
        dst_offset: usize,
    ) -> Result<Pending<'a>> {
        let (addr, len) = self.refuse(pinned_range(src, &range))?;
        // Refused arguments return at once, before waiting for another device's work.
        self.inner.check_host_copy(addr, len, &dst.mem, dst_offset)?;
        self.settle_foreign(src, false);
        // SAFETY: the range lies in the block, mapped while `src` lives; `src` stays borrowed
        // shared for the guard's life, and after it the block's `&mut` views wait for this copy
        // (`PinnedBuffer`'s `DerefMut` settles every use); registered memory (a foreign
        // device's import of the block) is read before the return (`guarded_copy` waits then).
        unsafe { self.guarded_copy(true, addr, len, dst, dst_offset, |e| e.registered) }
    }

    /// Async d2h into `range` of a pinned block: the call returns once the copy is enqueued, and
    /// the guard borrows the block exclusively until it is waited or dropped (drop waits).
    /// Sound without trusting that destructor: once the borrow ends, every view of the block is
    /// made by its `Deref` or `DerefMut`, which first wait for the device's pending writes to
    /// it, and no view made before the call can outlive the exclusive borrow. Into a block of
    /// another device the bytes are staged and in place when the call returns.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(4096)?;
    /// gpu.write(0, &[6; 4096])?;
    /// let stream = dev.stream()?;
    /// let mut pinned = vkhost::PinnedBuffer::new(&dev, 8192)?;
    /// let pending = stream.download_pinned(&gpu, 0, &mut pinned, 4096..8192)?; // async
    /// pending.wait()?;
    /// assert!(pinned[4096..].iter().all(|&b| b == 6));
    /// # Ok(()) }
    /// ```
    pub fn download_pinned<'a>(
        &self,
        src: &DeviceBuffer,
        src_offset: usize,
        dst: &'a mut crate::PinnedBuffer,
        range: std::ops::Range<usize>,
    ) -> Result<Pending<'a>> {
        let (addr, len) = self.refuse(pinned_range(dst, &range))?;
        // Refused arguments return at once, before waiting for another device's work.
        self.inner.check_host_copy(addr, len, &src.mem, src_offset)?;
        self.settle_foreign(dst, true);
        // SAFETY: the range lies in the block, mapped while `dst` lives; `dst` stays borrowed
        // exclusively for the guard's life, and after it the block's views wait for this copy
        // (`Deref` and `DerefMut` settle its writes); staged or registered bytes are in place
        // before the return (`guarded_copy` waits then).
        unsafe { self.guarded_copy(false, addr, len, src, src_offset, |e| e.registered || e.staged) }
    }

    /// `r`, except that a refused argument answers `DeviceDestroyed` (or `DeviceLost`) first
    /// where this stream's device is gone (issue 2: every operation on a destroyed device says
    /// so, whatever its arguments), as [`StreamInner::check_host_copy`] does for copies. The
    /// liveness is asked only when an argument is refused.
    pub(crate) fn refuse<T>(&self, r: Result<T>) -> Result<T> {
        r.map_err(|refused| self.inner.shared.live().err().unwrap_or(refused))
    }

    /// Waits for the work of `block`'s own device on it when that is not this stream's device:
    /// the pending writes (`all`: every access), as the block's `Deref` (`DerefMut`) would.
    /// Here the block is reached through another import of its bytes or staged by a memcpy,
    /// which that device's work does not order against. Before this device's lock: no two
    /// devices' locks are held at once.
    pub(crate) fn settle_foreign(&self, block: &crate::PinnedBuffer, all: bool) {
        if block.device().id() != self.inner.shared.id {
            block.settle(all);
        }
    }

    /// [`Stream::upload`] of a typed slice (any [`bytemuck::Pod`] type).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(16)?;
    /// let stream = dev.stream()?;
    /// stream.upload_slice(&[1.5f32, 2.5, 3.5, 4.5], &gpu, 0)?.wait()?;
    /// let mut back = [0f32; 4];
    /// gpu.read_slice(0, &mut back)?;
    /// assert_eq!(back, [1.5, 2.5, 3.5, 4.5]);
    /// # Ok(()) }
    /// ```
    pub fn upload_slice<'a, T: bytemuck::Pod>(&self, src: &'a [T], dst: &DeviceBuffer, dst_offset: usize) -> Result<Pending<'a>> {
        self.upload(bytemuck::cast_slice(src), dst, dst_offset)
    }

    /// [`Stream::download`] into a typed slice (any [`bytemuck::Pod`] type).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(32)?;
    /// gpu.write_slice(0, &[10u64, 20, 30, 40])?;
    /// let stream = dev.stream()?;
    /// let mut out = [0u64; 4];
    /// stream.download_slice(&gpu, 0, &mut out)?.wait()?;
    /// assert_eq!(out, [10, 20, 30, 40]);
    /// # Ok(()) }
    /// ```
    pub fn download_slice<'a, T: bytemuck::Pod>(&self, src: &DeviceBuffer, src_offset: usize, dst: &'a mut [T]) -> Result<Pending<'a>> {
        self.download(src, src_offset, bytemuck::cast_slice_mut(dst))
    }

    /// After a safe copy failed part-way: pieces it already recorded may sit in the open batch
    /// and name the caller's memory (a direct piece through an import that covers it). Submit
    /// and wait for everything enqueued so far, or for the queue to go idle, before the error
    /// returns, so the caller may free or reuse the memory.
    fn drain_after_error(&self) {
        let Ok(l) = self.inner.shared.live_any() else { return };
        let (v, flushed) = {
            let mut st = inner::relock(&self.inner.state);
            let flushed = self.inner.flush(&l, &mut st);
            (st.submitted, flushed)
        };
        if self.inner.wait_value(&l, v).is_err() {
            self.inner.queue_idle(&l);
        }
        // Logged once nothing runs: a user's logger may panic on the line.
        if let Err(e) = flushed {
            log::warn!("{}: flush after a failed copy: {e}", self.inner.shared.id);
        }
    }

    /// The guard of a safe copy; waits first when `now` (the copy touches memory the caller
    /// may reuse once we return). A wait that fails waits for the queue to go idle before
    /// returning the error, so the device no longer touches the bytes either way.
    /// A safe copy's enqueue ([`StreamInner::host_copy`]) and its guard: after a failure, what
    /// was enqueued is drained before the error returns; the guard is complete before it is
    /// returned when `wait` says so of what was enqueued.
    ///
    /// # Safety
    /// As for [`StreamInner::host_copy`], for every byte the device may still read (h2d) or
    /// write (d2h) after the return when `wait` is false.
    unsafe fn guarded_copy<'a>(
        &self,
        h2d: bool,
        addr: usize,
        len: usize,
        buf: &DeviceBuffer,
        offset: usize,
        wait: impl FnOnce(&copy::Enqueued) -> bool,
    ) -> Result<Pending<'a>> {
        // A refusal of the arguments enqueued nothing: it returns at once, as CUDA's
        // cudaErrorInvalidValue does (draining would submit and wait for the stream's work).
        self.inner.check_host_copy(addr, len, &buf.mem, offset)?;
        // SAFETY: the caller's contract.
        let e = unsafe { self.inner.host_copy(h2d, addr, len, &buf.mem, offset) };
        let e = e.inspect_err(|_| self.drain_after_error())?;
        self.finish(e.value, e.call, wait(&e))
    }

    fn finish<'a>(&self, value: u64, call: u64, now: bool) -> Result<Pending<'a>> {
        let event = Event { inner: self.inner.clone(), value, own: true, call, seen_done: std::sync::OnceLock::new() };
        if !now {
            return Ok(Pending { event: Some(event), _borrow: PhantomData });
        }
        if let Err(e) = event.wait() {
            if let Ok(l) = self.inner.shared.live_any() {
                self.inner.queue_idle(&l);
            }
            return Err(e);
        }
        Ok(Pending { event: None, _borrow: PhantomData })
    }

    /// Enqueues a device-to-device copy. Overlapping ranges of one buffer are refused.
    ///
    /// On a stream whose queue family can run kernels (every [`QueueKind::Compute`] stream, and
    /// copy streams on a device without a transfer-only family), a copy of at least
    /// [`OpenOptions::d2d_kernel_min`](crate::OpenOptions::d2d_kernel_min) bytes (2 MiB on GPUs)
    /// whose offsets and length are multiples of 4 runs the built-in copy kernel
    /// ([`Stream::copy_sm`]), as CUDA's device-to-device `cudaMemcpyAsync` runs on the SMs;
    /// anything else, or where the kernel cannot run, is one vkCmdCopyBuffer. On the H200,
    /// 1 GiB: the kernel 1.9 TB/s, vkCmdCopyBuffer 0.41 TB/s on the compute queue and 0.09 TB/s
    /// on a copy queue (the copy engines, which [`Device::stream`] uses where the device has
    /// them): put large device-to-device copies on a compute stream. Either way the copy is
    /// ordered with the stream's other work as any copy is. The kernel's pipeline takes a place
    /// in the device's pipeline cache ([`OpenOptions::max_pipelines`](crate::OpenOptions::max_pipelines)).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(8192)?;
    /// gpu.write(0, &[8; 4096])?;
    /// let stream = dev.stream()?;
    /// stream.copy_async(&gpu, 0, &gpu, 4096, 4096)?; // first half into the second
    /// assert!(stream.copy_async(&gpu, 0, &gpu, 100, 4096).is_err(), "overlapping");
    /// stream.synchronize()?;
    /// let mut back = vec![0u8; 4096];
    /// gpu.read(4096, &mut back)?;
    /// assert!(back.iter().all(|&b| b == 8));
    /// # Ok(()) }
    /// ```
    pub fn copy_async(&self, src: &DeviceBuffer, src_offset: usize, dst: &DeviceBuffer, dst_offset: usize, len: usize) -> Result<()> {
        let inner = &*self.inner;
        let s = &*inner.shared;
        // A destroyed device answers that first, whatever the arguments (issue 2).
        let l = s.live()?;
        if src.shared.id != s.id || dst.shared.id != s.id {
            return Err(Error::invalid("buffers of another device"));
        }
        src.mem.check_range(src_offset, len)?;
        dst.mem.check_range(dst_offset, len)?;
        if src.raw() == dst.raw() && src_offset < dst_offset + len && dst_offset < src_offset + len && len > 0 {
            return Err(Error::invalid("overlapping source and destination ranges in one buffer"));
        }
        let l = if len > 0 && inner.d2d_by_kernel(&l, src_offset, dst_offset, len) {
            // A failed stream answers so before a pipeline is made.
            inner.check(&relock(&inner.state))?;
            // The kernel's launch takes the device and the stream's lock itself.
            drop(l);
            match self.copy_sm(Binding::Device(src, src_offset, len), Binding::Device(dst, dst_offset, len)) {
                Ok(()) => return Ok(()),
                // Where the kernel cannot run (a device whose limits refuse its workgroup, a
                // pipeline or descriptors the driver refuses), vkCmdCopyBuffer as before. Pieces
                // a longer kernel copy already enqueued are copied again after them, in stream
                // order, with the same bytes; an error of the device or the stream is the copy's
                // error again below.
                Err(e) => log::debug!("copy_async of {len} bytes by the copy kernel: {e}; by vkCmdCopyBuffer instead"),
            }
            s.live()?
        } else {
            l
        };
        let mut st = relock(&inner.state);
        inner.check(&st)?;
        if len == 0 {
            return Ok(());
        }
        let (so, dof, n) = (src_offset as u64, dst_offset as u64, len as u64);
        let region = vk::BufferCopy { src_offset: so, dst_offset: dof, size: n };
        let acc = [Access::buf(src.raw(), so, n, false), Access::buf(dst.raw(), dof, n, true)];
        inner.push_copy(&l, &mut st, src.raw(), dst.raw(), region, false, Ends::Device, acc, &[(&src.mem.res, false), (&dst.mem.res, true)])
    }

    /// Enqueues vkCmdFillBuffer: `len` bytes at `offset` set to the repeated `value`.
    /// `offset` and `len` must be multiples of 4.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(64)?;
    /// let stream = dev.stream()?;
    /// stream.fill_async(&gpu, 0, 64, 0xAABB_CCDD)?;
    /// assert!(stream.fill_async(&gpu, 2, 8, 0).is_err(), "offset not a multiple of 4");
    /// stream.synchronize()?;
    /// let mut back = [0u32; 16];
    /// gpu.read_slice(0, &mut back)?;
    /// assert_eq!(back, [0xAABB_CCDD; 16]);
    /// # Ok(()) }
    /// ```
    pub fn fill_async(&self, dst: &DeviceBuffer, offset: usize, len: usize, value: u32) -> Result<()> {
        let inner = &*self.inner;
        let s = &*inner.shared;
        // A destroyed device answers that first, whatever the arguments (issue 2).
        let l = s.live()?;
        if dst.shared.id != s.id {
            return Err(Error::invalid("buffer of another device"));
        }
        dst.mem.check_range(offset, len)?;
        if offset % 4 != 0 || len % 4 != 0 {
            return Err(Error::invalid("fill offset and length must be multiples of 4"));
        }
        let mut st = relock(&inner.state);
        inner.check(&st)?;
        if len == 0 {
            return Ok(());
        }
        let b = dst.raw();
        let acc = [Access::buf(b, offset as u64, len as u64, true)];
        let rec = |cmd| {
            // SAFETY: recording into our open command buffer; the batch owns `dst` (see `push`).
            unsafe { l.device.cmd_fill_buffer(cmd, b, offset as u64, len as u64, value) }
        };
        inner.push(&l, &mut st, len as u64, false, &acc, &[(&dst.mem.res, true)], rec)
    }

    /// Submits recorded work now, without waiting.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(1 << 20)?;
    /// let stream = dev.stream()?;
    /// stream.fill_async(&gpu, 0, 1 << 20, 0)?;
    /// stream.flush()?; // the device starts now...
    /// // ... while the host does something else ...
    /// stream.synchronize()?;
    /// # Ok(()) }
    /// ```
    pub fn flush(&self) -> Result<()> {
        let l = self.inner.shared.live()?;
        let mut st = relock(&self.inner.state);
        self.inner.check(&st)?;
        self.inner.flush(&l, &mut st)
    }

    /// An event at the current end of the stream (submits recorded work).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(4096)?;
    /// let stream = dev.stream()?;
    /// stream.fill_async(&gpu, 0, 4096, 0x0303_0303)?;
    /// let filled = stream.record()?;
    /// filled.wait()?; // the fill is done; later work on the stream may still run
    /// let mut back = [0u8; 4];
    /// gpu.read(0, &mut back)?;
    /// assert_eq!(back, [3; 4]);
    /// # Ok(()) }
    /// ```
    pub fn record(&self) -> Result<Event> {
        let l = self.inner.shared.live()?;
        let mut st = relock(&self.inner.state);
        self.inner.check(&st)?;
        self.inner.flush(&l, &mut st)?;
        Ok(Event { inner: self.inner.clone(), value: st.submitted, own: false, call: 0, seen_done: std::sync::OnceLock::new() })
    }

    /// Makes later work on this stream wait, on the device, for `event` (any stream of the same
    /// device, any queue), through its timeline semaphore.
    ///
    /// If the event's stream has pageable device-to-host copies up to the event whose bytes the
    /// library still has to copy out of staging (CPU work, which no device wait orders), this
    /// call waits for the event on the host and completes them first, so that this stream's
    /// later work on those bytes comes after them.
    ///
    /// An event with lost work at or before it (a failed submission its [`Event::wait`] would
    /// report) is that error here too; the wait is still made on the work before the event that
    /// did run (the lost batches never ran, so there is nothing of theirs to wait for), so the
    /// ordering with the event's successful work holds whether or not the caller goes on.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::QueueKind;
    /// let dev = vkhost::Device::open_default()?;
    /// let (a, b) = (dev.alloc_buffer(4096)?, dev.alloc_buffer(4096)?);
    /// let producer = dev.stream()?;
    /// let consumer = dev.stream_on(QueueKind::Compute)?;
    /// producer.fill_async(&a, 0, 4096, 0x0505_0505)?;
    /// let ready = producer.record()?;
    /// consumer.wait_event(&ready)?; // the device orders the copy after the fill
    /// consumer.copy_async(&a, 0, &b, 0, 4096)?;
    /// consumer.synchronize()?;
    /// let mut back = vec![0u8; 4096];
    /// b.read(0, &mut back)?;
    /// assert!(back.iter().all(|&x| x == 5));
    /// # Ok(()) }
    /// ```
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        if !Arc::ptr_eq(&event.inner.shared, &self.inner.shared) {
            return self.refuse(Err(Error::invalid("event of another device")));
        }
        if event.value == 0 || self.inner.shared.forked() {
            // (A forked child: `live` refuses, before any lock of the parent's streams.)
            return self.inner.shared.live().map(drop);
        }
        if Arc::ptr_eq(&event.inner, &self.inner) {
            // Stream order already puts later work after the event: only its loss is left to
            // report, as for another stream's event.
            let _l = self.inner.shared.live()?;
            return self.inner.lost(event.value, event.own, event.call).map_or(Ok(()), Err);
        }
        // Pageable d2h copy-outs of the event's stream up to the event are CPU work that only
        // that stream's reap runs, which no device wait orders: run them now (a host wait for
        // the event), so this stream's later work on those bytes comes after them, as the
        // event promises. Before any lock of this stream, and before this device's lock.
        let copy_outs = relock(&event.inner.state).completions.iter().any(|c| c.value <= event.value);
        if copy_outs {
            return event.wait();
        }
        let l = self.inner.shared.live()?;
        // The event's stream lock, released before ours is taken.
        let (target, lost) = {
            let est = relock(&event.inner.state);
            (signalled(&est, event.value), lost_error(&est, event.value, event.own, event.call))
        };
        let answer = lost.map_or(Ok(()), Err);
        if target == 0 || event.inner.completed.load(Ordering::Relaxed) >= target {
            return answer;
        }
        let mut st = relock(&self.inner.state);
        self.inner.check(&st)?;
        // Work recorded before the wait must not wait: submit it first. If that submission
        // fails, the wait still goes to the next batch (`waits` stays): the ordering holds
        // whatever this call returns.
        let flushed = self.inner.flush(&l, &mut st);
        st.waits.push((event.inner.sem, target));
        st.wait_on.push(event.inner.clone());
        flushed.and(answer)
    }

    /// Waits until all work enqueued so far is done, and completes pageable d2h copies.
    ///
    /// A failed submission is sticky: its work never ran, and the first such error that no
    /// `synchronize` reported yet is this call's error, even if the call that submitted (an
    /// enqueue, [`Stream::flush`], [`Stream::record`]) returned it already; then it is reported.
    /// The guards of lost work report it too ([`Pending::wait`], [`Event::wait`]).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(4096)?;
    /// gpu.write(0, &[1; 4096])?;
    /// let stream = dev.stream()?;
    /// let mut out = vec![0u8; 4096];
    /// // SAFETY: `out` stays alive, writable and untouched until `synchronize` returned.
    /// unsafe { stream.copy_to_host_async(&gpu, 0, out.as_mut_ptr(), 4096) }?;
    /// stream.synchronize()?; // all enqueued work done, pageable copies completed
    /// assert!(out.iter().all(|&b| b == 1));
    /// # Ok(()) }
    /// ```
    pub fn synchronize(&self) -> Result<()> {
        if self.inner.shared.forked() {
            // A forked child touches none of the parent's state (a parent thread may have held
            // this stream's lock at the fork): as every call there.
            return Err(Error::DeviceDestroyed);
        }
        let l = match self.inner.shared.live() {
            Ok(l) => l,
            Err(e) => {
                // Nothing can be waited for (a lost device): the copy-outs queued so far never
                // run, so no destination is written after this error lets the caller reuse it.
                self.inner.cancel_completions(u64::MAX, &e);
                return Err(e);
            }
        };
        let (v, flushed) = {
            let mut st = relock(&self.inner.state);
            self.inner.check(&st)?;
            let f = self.inner.flush(&l, &mut st);
            (st.submitted, f)
        };
        // Also after a failed submission: the batches submitted before it are waited for and
        // their copy-outs completed (or, if that wait fails, cancelled), so nothing this stream
        // queued writes the caller's memory after this returns.
        let r = self.inner.wait_value(&l, v).and(flushed);
        match take_unreported(&mut relock(&self.inner.state), v) {
            Some(e) => Err(e),
            None => r,
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if self.inner.shared.forked() {
            return;
        }
        if let Ok(l) = self.inner.shared.live_any() {
            self.inner.shutdown(&l);
            // Nobody else (no event, no batch of another stream) refers to the semaphore.
            if Arc::strong_count(&self.inner) == 1 {
                self.inner.destroy_semaphore(&l);
            }
        }
    }
}

impl Event {
    /// Waits on the host until the work before this event is done, and completes pageable d2h
    /// copies up to it. After the device or stream is gone, its work is done: `Ok`, unless work
    /// before it was lost or its pageable copy-outs were cancelled (then that error). In a
    /// forked child, at once: `Ok` for work the parent saw done before the fork (its bytes are in
    /// the child's copy of memory), else `DeviceDestroyed`, as every call there: nothing of the
    /// parent's runs in the child, so the child's copy of a destination never gets the bytes.
    ///
    /// Work before the event that was lost (its submission failed, so it never ran) is an
    /// error: the first such failure that [`Stream::synchronize`] has not reported yet.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(4096)?;
    /// let stream = dev.stream()?;
    /// stream.fill_async(&gpu, 0, 4096, 0)?;
    /// let event = stream.record()?;
    /// event.wait()?;
    /// assert!(event.is_done()?);
    /// # Ok(()) }
    /// ```
    pub fn wait(&self) -> Result<()> {
        let l = match self.live_or_answer() {
            Ok(l) => l,
            Err(answer) => return answer,
        };
        let r = self.inner.wait_value(&l, self.value);
        match self.inner.lost(self.value, self.own, self.call) {
            Some(e) => Err(e),
            None => {
                if r.is_ok() {
                    self.seen();
                }
                r
            }
        }
    }

    /// Whether the work before this event is done. Lost work is an error, as for
    /// [`Event::wait`].
    ///
    /// Never blocks, as `cudaEventQuery`: it neither waits for the device nor for the stream's
    /// lock, and once it answered `true` it answers `true` again. An event that names no work,
    /// or one at or below what the stream last saw complete (every `is_done`, `wait` and every
    /// operation of the stream that reaps finished work notes it), answers without the lock.
    /// Otherwise, while another thread holds the stream (an `upload` or `download` of pageable
    /// memory copies through the staging ring under it), it answers `false`; the holder's own
    /// reaps then publish the progress that lets a later poll answer `true`. While a
    /// [`Device::destroy`](crate::Device::destroy) on another thread tears the device down (it
    /// waits for the device to go idle first), it answers as while the stream is held; once the
    /// device is destroyed, the work is done (or its loss is the error), as for [`Event::wait`].
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(1 << 20)?;
    /// let stream = dev.stream()?;
    /// stream.fill_async(&gpu, 0, 1 << 20, 0)?;
    /// let event = stream.record()?;
    /// while !event.is_done()? {
    ///     std::thread::yield_now(); // or do other work
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_done(&self) -> Result<bool> {
        // Done for good without the stream's lock: value 0 (nothing to wait for), an event
        // answered done before, or one at or below the stream's watermark for its kind (see
        // `StreamInner::clean_done` and `clean_own`: a copy's own guard reports its own batch's
        // loss however often asked, so its mark rises only while nothing was ever lost).
        let for_good = self.done_for_good();
        if self.inner.shared.forked() {
            // Touching none of the parent's locks: done before the fork, or never here.
            return if for_good { Ok(true) } else { Err(Error::DeviceDestroyed) };
        }
        // The device's lock without waiting: a `destroy` on another thread holds it through its
        // wait for idle (a poll took the whole teardown, 2.4 s behind 4 GiB of fills).
        let l = match self.inner.shared.try_live_any() {
            None => return Ok(for_good),
            Some(Ok(l)) if !self.inner.shared.lost.load(Ordering::Relaxed) => l,
            Some(other) => {
                // Destroyed or lost: `live_or_answer` says what (this lock let go first).
                drop(other);
                match self.live_or_answer() {
                    Ok(l) => l,
                    Err(answer) => return answer.map(|()| true),
                }
            }
        };
        if for_good {
            return Ok(true);
        }
        let mut st = match self.inner.state.try_lock() {
            Ok(st) => st,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            // Another thread holds the stream: not known done yet (the next poll tells).
            Err(std::sync::TryLockError::WouldBlock) => return Ok(false),
        };
        if st.dead {
            return lost_error(&st, self.value, self.own, self.call).map_or(Ok(true), Err);
        }
        if self.value > st.submitted {
            // The work is still in the open batch: submit it, or polling never sees it finish.
            self.inner.flush(&l, &mut st)?;
        }
        if let Some(e) = lost_error(&st, self.value, self.own, self.call) {
            return Err(e);
        }
        if self.inner.completed_value(&l)? >= signalled(&st, self.value) {
            self.inner.reap(&l, &mut st)?;
            self.seen();
            return Ok(true);
        }
        Ok(false)
    }
}

impl Event {
    /// The device's lock, or, where the event's work can no longer be waited for on the
    /// device, the answer of [`Event::wait`] (and, as done, of [`Event::is_done`]): in a forked
    /// child `Ok` at once, touching none of the parent's state (nothing of it runs there); after
    /// the device was destroyed, the loss or cancellation of work before the event if any, else
    /// `Ok` (its work is done); on a lost device `DeviceLost`, after cancelling the copy-outs
    /// the event guards, so the library never writes destinations the caller may now reuse.
    fn live_or_answer(&self) -> std::result::Result<crate::device::LiveRef<'_>, Result<()>> {
        if self.inner.shared.forked() {
            return Err(if self.done_for_good() { Ok(()) } else { Err(Error::DeviceDestroyed) });
        }
        let Ok(l) = self.inner.shared.live_any() else { return Err(self.inner.lost(self.value, self.own, self.call).map_or(Ok(()), Err)) };
        if self.inner.shared.lost.load(Ordering::Relaxed) {
            self.inner.cancel_completions(self.value, &Error::DeviceLost);
            return Err(Err(Error::DeviceLost));
        }
        Ok(l)
    }

    /// Whether the event is known done for good without the stream's lock: it names no work,
    /// was answered done before, or lies at or below the stream's watermark for its kind.
    fn done_for_good(&self) -> bool {
        let mark = if self.own { &self.inner.clean_own } else { &self.inner.clean_done };
        self.value == 0 || self.seen_done.get().is_some() || self.value <= mark.load(Ordering::Acquire)
    }

    /// Notes that this event was answered done (after its copy-outs ran and no loss was found):
    /// for good, so later polls answer without the stream's lock. An event (not a copy's own
    /// guard) also raises the stream's watermark to its value: the reap's own mark stops below
    /// batches lost and already reported, which such an event is past.
    fn seen(&self) {
        let _ = self.seen_done.set(());
        if !self.own {
            self.inner.clean_done.fetch_max(self.value, Ordering::AcqRel);
        }
    }
}

impl Pending<'_> {
    /// Waits for the copy (and completes a pageable destination). If the copy's batch could
    /// not be submitted, the copy never ran: that error, however often asked (the stream's
    /// [`Stream::synchronize`] reports it too). In a forked child: `DeviceDestroyed` unless the
    /// parent saw the copy done before the fork (as [`Event::wait`]).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(4096)?;
    /// let stream = dev.stream()?;
    /// let mut pinned = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// pinned.fill(2);
    /// stream.upload(&pinned, &gpu, 0)?.wait()?;
    /// let mut back = vec![0u8; 4096];
    /// gpu.read(0, &mut back)?;
    /// assert!(back.iter().all(|&b| b == 2));
    /// # Ok(()) }
    /// ```
    pub fn wait(mut self) -> Result<()> {
        match self.event.take() {
            Some(e) => e.wait(),
            None => Ok(()),
        }
    }

    /// Whether the copy is done; a lost copy is an error, as for [`Pending::wait`] (in a forked
    /// child too). Never blocks (see [`Event::is_done`]); a guard of no work, or one answered done before,
    /// answers `true` without the stream's lock, and otherwise, while another thread holds the
    /// stream, `false` until a poll gets it.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(1 << 20)?;
    /// let stream = dev.stream()?;
    /// let pinned = vkhost::PinnedBuffer::new(&dev, 1 << 20)?;
    /// let pending = stream.upload_pinned(&pinned, 0..1 << 20, &gpu, 0)?;
    /// while !pending.is_done()? {
    ///     std::thread::yield_now(); // or do other work
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_done(&self) -> Result<bool> {
        self.event.as_ref().map_or(Ok(true), |e| e.is_done())
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(e) = self.event.take() {
            if e.inner.shared.forked() {
                return;
            }
            if let Err(err) = e.wait() {
                log::error!("Pending drop: waiting for the copy failed: {err}");
            }
        }
    }
}

/// `range` of `b` as (address, length), or `OutOfRange` when it does not lie in the block.
fn pinned_range(b: &crate::PinnedBuffer, range: &std::ops::Range<usize>) -> Result<(usize, usize)> {
    let len = range.end.checked_sub(range.start).ok_or(crate::Error::OutOfRange)?;
    Ok((b.range_addr(range.start, len)?, len))
}
