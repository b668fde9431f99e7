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
//! - a range covered by a registration or pinned block is copied directly and the call returns
//!   at once; the entry remembers (stream, value), and `unregister`/`free_pinned` wait for it;
//! - a pageable h2d source is memcpy'd into the stream's staging ring (chunks reused once the
//!   device is past them); the call returns once the source has been read;
//! - a pageable d2h destination is filled from the ring by the library once the device is done,
//!   during `synchronize`, `Event::wait`, a `Pending` drop, or when the ring wraps.
//!
//! Streams default to the transfer-only family (the copy engines) and alternate between its
//! queues, so an h2d stream and a d2h stream created one after the other run on different
//! engines where the device has two.

use crate::buffer::DeviceBuffer;
use crate::device::object::{phase, Child};
use crate::device::submit::{host_read_barrier, par_copy, transfer_barrier, HostSide};
use crate::device::QueueKind;
use crate::device::{lock, Bound, Device, Live, Queue, Shared};
use crate::error::{Error, Result};
use crate::fault::{self, Point};
use crate::host;
use crate::memtype;
use crate::resource::{Resource, Timeline};
use ash::vk;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;

/// Flush the open batch once it holds this many commands or bytes.
const BATCH_CMDS: usize = 512;
const BATCH_BYTES: u64 = 4 << 20;
const WAIT_TIMEOUT_NS: u64 = 120_000_000_000;

struct Batch {
    cmd: vk::CommandBuffer,
    cmds: usize,
    bytes: u64,
    d2h: bool,
    /// Ranges touched since the last barrier.
    touched: Vec<Access>,
    /// Owners of what the batch names, kept until it is reaped.
    keep: Vec<Arc<Resource>>,
    /// Copies between one pair of buffers not yet recorded: consecutive copies between the same
    /// buffers become one vkCmdCopyBuffer with several regions, and contiguous ones one region.
    merged: Option<Merged>,
}

struct Merged {
    src: vk::Buffer,
    dst: vk::Buffer,
    regions: Vec<vk::BufferCopy>,
}

/// How many accesses to track before a barrier is cheaper than checking.
const TRACKED: usize = 128;

/// What a range is a range of: bytes of one device buffer, or host bytes by address. Host
/// bytes are keyed by address, not by the import that reaches them, so two imports that share
/// a page conflict as they should.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Buffer(vk::Buffer),
    Host,
}

/// A range a command reads or writes.
#[derive(Clone, Copy)]
struct Access {
    key: Key,
    start: u64,
    end: u64,
    write: bool,
}

impl Access {
    fn buf(buffer: vk::Buffer, start: u64, len: u64, write: bool) -> Access {
        Access { key: Key::Buffer(buffer), start, end: start + len, write }
    }
    fn host(addr: usize, len: u64, write: bool) -> Access {
        Access { key: Key::Host, start: addr as u64, end: addr as u64 + len, write }
    }
}

impl Batch {
    /// Records the merged copy, if any.
    ///
    /// # Safety
    /// `self.cmd` is recording, under the stream lock; the buffers named are alive until the
    /// batch completes.
    unsafe fn emit(&mut self, d: &ash::Device) {
        if let Some(m) = self.merged.take() {
            // SAFETY: the caller's contract; the regions do not overlap (a conflict would have
            // emitted the earlier ones and put a barrier in between).
            unsafe { d.cmd_copy_buffer(self.cmd, m.src, m.dst, &m.regions) };
        }
    }

    /// Puts a barrier before a command making the accesses `acc` if it conflicts with one since
    /// the last barrier (recording pending copies first), then tracks `acc`.
    ///
    /// # Safety
    /// As for [`Batch::emit`].
    unsafe fn order(&mut self, d: &ash::Device, acc: &[Access]) {
        if self.cmds > 0 && self.conflicts(acc) {
            // SAFETY: the caller's contract.
            unsafe {
                self.emit(d);
                transfer_barrier(d, self.cmd);
            }
            self.touched.clear();
        }
        self.touched.extend_from_slice(acc);
    }

    /// Whether `acc` conflicts with an access since the last barrier (a write on either side of
    /// overlapping bytes of one buffer): then a barrier must separate them.
    fn conflicts(&self, acc: &[Access]) -> bool {
        self.touched.len() + acc.len() > TRACKED
            || acc.iter().any(|a| self.touched.iter().any(|t| t.key == a.key && t.start < a.end && a.start < t.end && (t.write || a.write)))
    }
}

/// A submitted batch: it owns what it names until it is reaped.
struct Done {
    value: u64,
    cmd: vk::CommandBuffer,
    _wait_on: Vec<Arc<StreamInner>>,
    _owners: Vec<Arc<Resource>>,
}

/// A pageable d2h piece to copy out of the ring once `value` completes.
struct Completion {
    /// The enqueue call that queued it: a failed call removes its own completions.
    call: u64,
    value: u64,
    ring_off: u64,
    addr: usize,
    len: u64,
}

/// What an async host copy enqueued.
struct Enqueued {
    /// The timeline value that completes it.
    value: u64,
    /// Whether a direct piece lies in a registration (the caller's memory).
    registered: bool,
    /// Whether some bytes went through the staging ring.
    staged: bool,
}

struct Ring {
    bound: Bound,
    chunk: u64,
    /// The timeline value that last used each chunk (0: never).
    last: Vec<u64>,
    cur: usize,
    used: u64,
}

struct State {
    pool: vk::CommandPool,
    /// Value of the last submitted batch.
    submitted: u64,
    open: Option<Batch>,
    inflight: VecDeque<Done>,
    /// Streams whose semaphores the next submission waits on, kept alive with it.
    wait_on: Vec<Arc<StreamInner>>,
    free_cmds: Vec<vk::CommandBuffer>,
    waits: Vec<(vk::Semaphore, u64)>,
    ring: Option<Ring>,
    completions: VecDeque<Completion>,
    /// Numbers enqueue calls, for `Completion::call`.
    calls: u64,
    /// Set when queued pageable d2h completions were cancelled after an error; the next wait
    /// on this stream reports it, so no caller mistakes an unwritten destination for data.
    cancelled: Option<Error>,
    dead: bool,
}

impl std::fmt::Debug for StreamInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamInner").field("queue", &self.queue_kind).finish()
    }
}

pub(crate) struct StreamInner {
    me: Weak<StreamInner>,
    shared: Arc<Shared>,
    queue_kind: QueueKind,
    queue_index: usize,
    /// The timeline semaphore. Destroyed only when the last reference goes (other streams'
    /// batches may wait on it), through `Shared::deferred_semaphores`, or at device destroy.
    sem: vk::Semaphore,
    sem_destroyed: std::sync::atomic::AtomicBool,
    state: Mutex<State>,
    /// Highest value known complete (cache of the semaphore).
    completed: AtomicU64,
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        // No device lock here (this can run inside another stream's reap): defer.
        if !self.sem_destroyed.swap(true, Ordering::AcqRel) {
            lock(&self.shared.deferred_semaphores).push(self.sem);
        }
    }
}

impl StreamInner {
    /// At device destroy, after `shutdown`: the semaphore goes now, even if events still
    /// reference this stream.
    pub(crate) fn destroy_semaphore(&self, l: &Live) {
        if !self.sem_destroyed.swap(true, Ordering::AcqRel) {
            // SAFETY: the device is idle and every stream is shut down: nothing waits on it.
            unsafe { l.device.destroy_semaphore(self.sem, None) };
            self.shared.count_semaphore(-1);
        }
    }
}

/// An ordered sequence of device work on one queue. `Send + Sync`; operations from several
/// threads are ordered by the stream's lock. Dropping it synchronizes first.
pub struct Stream {
    inner: Arc<StreamInner>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").field("device", &self.inner.shared.id).field("queue", &self.inner.queue_kind).finish()
    }
}

/// A point in a stream's work. Cheap to clone.
#[derive(Clone)]
pub struct Event {
    inner: Arc<StreamInner>,
    value: u64,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event").field("value", &self.value).finish()
    }
}

/// Async work that borrows host memory: waits for it (and completes pageable d2h) on drop, so
/// safe code cannot touch or free memory the device is still using.
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
    pub fn stream(&self) -> Result<Stream> {
        self.stream_on(QueueKind::Copy)
    }

    /// A stream on the given kind of queue (copy streams alternate between the copy queues).
    pub fn stream_on(&self, kind: QueueKind) -> Result<Stream> {
        self.stream_at(kind, None)
    }

    /// A stream on queue `index` of the given kind (modulo the queues vkhost created there:
    /// up to two copy-engine queues, one compute queue).
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
        let family = pick_queue(&l, kind, queue_index).family;
        fault::check(Point::CreateCommandPool).map_err(|c| s.fail("vkCreateCommandPool", c))?;
        let pi = vk::CommandPoolCreateInfo::default().queue_family_index(family).flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: valid create info for a family of this device.
        let pool = unsafe { l.device.create_command_pool(&pi, None) }.map_err(|c| s.fail("vkCreateCommandPool", c))?;
        s.count_pool(1);
        let sem = match create_timeline(s, &l) {
            Ok(x) => x,
            Err(e) => {
                // SAFETY: fresh pool, unused.
                unsafe { l.device.destroy_command_pool(pool, None) };
                s.count_pool(-1);
                return Err(e);
            }
        };
        let inner = Arc::new_cyclic(|me| StreamInner {
            me: me.clone(),
            shared: s.clone(),
            queue_kind: kind,
            queue_index,
            sem,
            sem_destroyed: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(State {
                pool,
                wait_on: Vec::new(),
                submitted: 0,
                open: None,
                inflight: VecDeque::new(),
                free_cmds: Vec::new(),
                waits: Vec::new(),
                ring: None,
                completions: VecDeque::new(),
                calls: 0,
                cancelled: None,
                dead: false,
            }),
            completed: AtomicU64::new(0),
        });
        let child: Weak<dyn Child> = Arc::downgrade(&inner) as Weak<StreamInner>;
        s.add_child(child);
        s.destroy_deferred(&l);
        Ok(Stream { inner })
    }
}

fn create_timeline(s: &Shared, l: &Live) -> Result<vk::Semaphore> {
    fault::check(Point::CreateSemaphore).map_err(|c| s.fail("vkCreateSemaphore", c))?;
    let mut ti = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(0);
    let si = vk::SemaphoreCreateInfo::default().push_next(&mut ti);
    // SAFETY: valid create info; the timeline feature was enabled at device creation.
    let sem = unsafe { l.device.create_semaphore(&si, None) }.map_err(|c| s.fail("vkCreateSemaphore", c))?;
    s.count_semaphore(1);
    Ok(sem)
}

fn pick_queue(l: &Live, kind: QueueKind, i: usize) -> &Queue {
    match kind {
        QueueKind::Copy if !l.copy_queues.is_empty() => &l.copy_queues[i % l.copy_queues.len()],
        _ => &l.compute,
    }
}

fn relock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl StreamInner {
    fn check(&self, st: &State) -> Result<()> {
        if st.dead {
            return Err(Error::DeviceDestroyed);
        }
        Ok(())
    }

    /// The value the open batch will signal.
    fn batch_value(st: &State) -> u64 {
        st.submitted + 1
    }

    fn begin(&self, l: &Live, st: &mut State) -> Result<()> {
        if st.open.is_some() {
            return Ok(());
        }
        let s = &*self.shared;
        let cmd = match st.free_cmds.pop() {
            Some(c) => c,
            None => {
                fault::check(Point::AllocateCommandBuffers).map_err(|c| s.fail("vkAllocateCommandBuffers", c))?;
                let ai = vk::CommandBufferAllocateInfo::default()
                    .command_pool(st.pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1);
                // SAFETY: the pool is ours, synchronized by the stream lock.
                let v = unsafe { l.device.allocate_command_buffers(&ai) }.map_err(|c| s.fail("vkAllocateCommandBuffers", c))?;
                v[0]
            }
        };
        // SAFETY: `cmd` is idle (fresh or returned by reap after its batch completed).
        let r = unsafe {
            l.device.reset_command_buffer(cmd, vk::CommandBufferResetFlags::empty()).and_then(|_| {
                l.device
                    .begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT))
            })
        };
        if let Err(c) = r {
            st.free_cmds.push(cmd);
            return Err(s.fail("vkBeginCommandBuffer", c));
        }
        // SAFETY: `cmd` was just begun and is ours, under the stream lock.
        unsafe { transfer_barrier(&l.device, cmd) };
        st.open = Some(Batch { cmd, cmds: 0, bytes: 0, d2h: false, touched: Vec::new(), keep: Vec::new(), merged: None });
        Ok(())
    }

    /// Submits the open batch (or, with pending waits and nothing recorded, an empty one).
    fn flush(&self, l: &Live, st: &mut State) -> Result<()> {
        if st.open.is_none() && st.waits.is_empty() {
            return Ok(());
        }
        self.begin(l, st)?;
        let s = &*self.shared;
        let Some(mut b) = st.open.take() else { return Ok(()) };
        let d = &l.device;
        // SAFETY: `b.cmd` is in the recording state, owned by this stream.
        unsafe {
            b.emit(d);
            if b.d2h {
                host_read_barrier(d, b.cmd);
            }
            if let Err(c) = d.end_command_buffer(b.cmd) {
                st.free_cmds.push(b.cmd);
                return Err(s.fail("vkEndCommandBuffer", c));
            }
        }
        let value = st.submitted + 1;
        let wait_sems: Vec<vk::Semaphore> = st.waits.iter().map(|w| w.0).collect();
        let wait_vals: Vec<u64> = st.waits.iter().map(|w| w.1).collect();
        let stages = vec![vk::PipelineStageFlags::ALL_COMMANDS; wait_sems.len()];
        let sig = [self.sem];
        let sig_vals = [value];
        let cmds = [b.cmd];
        let mut tsi = vk::TimelineSemaphoreSubmitInfo::default().wait_semaphore_values(&wait_vals).signal_semaphore_values(&sig_vals);
        let si = vk::SubmitInfo::default()
            .wait_semaphores(&wait_sems)
            .wait_dst_stage_mask(&stages)
            .command_buffers(&cmds)
            .signal_semaphores(&sig)
            .push_next(&mut tsi);
        let r = fault::check(Point::QueueSubmit).map_err(|c| s.fail("vkQueueSubmit", c)).and_then(|()| {
            let q = pick_queue(l, self.queue_kind, self.queue_index);
            let g = lock(&q.raw);
            // SAFETY: the queue is externally synchronized by its lock; everything the command
            // buffer names is kept alive until `value` completes (last-use tracking).
            unsafe { d.queue_submit(*g, &[si], vk::Fence::null()) }.map_err(|c| s.fail("vkQueueSubmit", c))
        });
        match r {
            Ok(()) => {
                st.submitted = value;
                st.waits.clear();
                let wait_on = std::mem::take(&mut st.wait_on);
                st.inflight.push_back(Done { value, cmd: b.cmd, _wait_on: wait_on, _owners: b.keep });
                Ok(())
            }
            Err(e) => {
                // The batch is lost: its copies did not run. Completions that depended on it
                // would copy stale bytes, so drop them, and free its ring chunks.
                st.free_cmds.push(b.cmd);
                let before = st.completions.len();
                st.completions.retain(|c| c.value != value);
                if st.completions.len() != before {
                    st.cancelled = Some(e.clone());
                }
                if let Some(r) = st.ring.as_mut() {
                    for v in r.last.iter_mut() {
                        if *v == value {
                            *v = 0;
                        }
                    }
                }
                Err(e)
            }
        }
    }

    fn completed_value(&self, l: &Live) -> Result<u64> {
        let sem = self.sem;
        // SAFETY: the semaphore is a live timeline semaphore of this device.
        let v = unsafe { l.device.get_semaphore_counter_value(sem) }.map_err(|c| self.shared.fail("vkGetSemaphoreCounterValue", c))?;
        self.completed.fetch_max(v, Ordering::Relaxed);
        Ok(v)
    }

    /// Waits until `value` completed (value ≤ submitted).
    fn wait_sem(&self, l: &Live, value: u64) -> Result<()> {
        let sem = self.sem;
        if self.completed.load(Ordering::Relaxed) >= value {
            return Ok(());
        }
        let s = &*self.shared;
        fault::check(Point::WaitSemaphores).map_err(|c| s.fail("vkWaitSemaphores", c))?;
        // Poll as a 20 MB transfer would (2 ms on GPUs, 200 us on CPU drivers), then sleep.
        let spin = crate::device::submit::spin_for(s, 20 << 20);
        let t = Instant::now();
        while t.elapsed() < spin {
            if self.completed_value(l)? >= value {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        let sems = [sem];
        let vals = [value];
        let wi = vk::SemaphoreWaitInfo::default().semaphores(&sems).values(&vals);
        // SAFETY: valid wait info on a live semaphore whose value will be signalled (submitted).
        unsafe { l.device.wait_semaphores(&wi, WAIT_TIMEOUT_NS) }.map_err(|c| s.fail("vkWaitSemaphores", c))?;
        self.completed.fetch_max(value, Ordering::Relaxed);
        Ok(())
    }

    /// Recycles finished batches and runs finished d2h completions.
    fn reap(&self, l: &Live, st: &mut State) -> Result<()> {
        let done = self.completed_value(l)?;
        while st.inflight.front().is_some_and(|b| b.value <= done) {
            if let Some(b) = st.inflight.pop_front() {
                st.free_cmds.push(b.cmd);
            }
        }
        while st.completions.front().is_some_and(|c| c.value <= done) {
            let Some(c) = st.completions.pop_front() else { break };
            if let Some(r) = &st.ring {
                if let Some(p) = r.bound.ptr {
                    // SAFETY: the device finished writing this ring range (value completed, and
                    // the batch ends with a transfer → host barrier); `addr` is the caller's
                    // writable memory, valid until synchronize/wait per the async contract.
                    unsafe { par_copy(c.addr as *mut u8, p.0.as_ptr().add(c.ring_off as usize), c.len as usize) };
                }
            }
        }
        Ok(())
    }

    /// Flushes if needed, waits for `value`, reaps. Takes and releases the stream lock.
    ///
    /// On failure, every queued pageable d2h completion is cancelled: the caller sees an error
    /// and may free those destinations, so the library must never write them later.
    pub(crate) fn wait_value(&self, l: &Live, value: u64) -> Result<()> {
        let r = self.wait_value_inner(l, value);
        if let Err(e) = &r {
            let mut st = relock(&self.state);
            if !st.completions.is_empty() {
                log::warn!("{}: stream wait failed ({e}); {} pageable d2h copies cancelled", self.shared.id, st.completions.len());
                st.completions.clear();
            }
            st.cancelled = None;
            return r;
        }
        let mut st = relock(&self.state);
        match st.cancelled.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn wait_value_inner(&self, l: &Live, value: u64) -> Result<()> {
        let value = {
            let mut st = relock(&self.state);
            if st.dead {
                return Ok(());
            }
            if value > st.submitted {
                self.flush(l, &mut st)?;
            }
            // A value past the last submission belonged to a batch whose submission failed:
            // that work never ran, so there is nothing to wait for.
            value.min(st.submitted)
        };
        self.wait_sem(l, value)?;
        let mut st = relock(&self.state);
        if st.dead {
            return Ok(());
        }
        self.reap(l, &mut st)
    }

    /// Waits until the stream's queue is idle (under the queue's lock): the fallback when a
    /// semaphore wait fails and something must be released. On a lost device it returns at once,
    /// and nothing runs any more.
    pub(crate) fn queue_idle(&self, l: &Live) {
        let q = pick_queue(l, self.queue_kind, self.queue_index);
        let g = lock(&q.raw);
        // SAFETY: the queue is externally synchronized by its lock.
        if let Err(c) = unsafe { l.device.queue_wait_idle(*g) } {
            log::warn!("{}: vkQueueWaitIdle: {c:?}", self.shared.id);
        }
    }

    /// Synchronizes and destroys the stream's objects (stream drop, device destroy).
    pub(crate) fn shutdown(&self, l: &Live) {
        let s = &*self.shared;
        let mut st = relock(&self.state);
        if st.dead {
            return;
        }
        let r = self.flush(l, &mut st).and_then(|()| self.wait_sem(l, st.submitted));
        match r {
            Ok(()) => {
                let _ = self.reap(l, &mut st);
            }
            Err(e) => {
                log::warn!("{}: stream shutdown: {e}; waiting for the queue to go idle", s.id);
                self.queue_idle(l);
            }
        }
        st.dead = true;
        // SAFETY: every batch completed (or the device is idle/lost); the objects are ours and
        // destroyed once (`dead` guards re-entry).
        unsafe {
            l.device.destroy_command_pool(st.pool, None);
            s.count_pool(-1);
            if let Some(r) = st.ring.take() {
                s.release_bound(l, r.bound.buffer, r.bound.memory);
            }
        }
        st.inflight.clear();
        st.free_cmds.clear();
        st.completions.clear();
        st.wait_on.clear();
        st.waits.clear();
    }

    /// Room for `n` (≤ chunk) staged bytes in the ring; may flush and wait for old work.
    fn ring_alloc(&self, l: &Live, st: &mut State, n: u64) -> Result<u64> {
        let s = &*self.shared;
        if st.ring.is_none() {
            let chunk = s.options.staging_chunk as u64;
            let slots = s.options.staging_slots as u64;
            let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
            let bound = s.alloc_bound(l, chunk * slots, usage, memtype::pinned, true)?;
            st.ring = Some(Ring { bound, chunk, last: vec![0; slots as usize], cur: 0, used: 0 });
        }
        let (chunk, full) = {
            let Some(r) = st.ring.as_ref() else { return Err(Error::unsupported("no staging ring")) };
            (r.chunk, r.used + n > r.chunk)
        };
        debug_assert!(n <= chunk);
        if full {
            // Close this chunk: submit what uses it, so the device starts while we fill the next.
            self.flush(l, st)?;
            let (next, need) = {
                let Some(r) = st.ring.as_ref() else { return Err(Error::unsupported("no staging ring")) };
                let next = (r.cur + 1) % r.last.len();
                (next, r.last[next])
            };
            if need > 0 {
                if need > st.submitted {
                    self.flush(l, st)?;
                }
                // Move to the next chunk only once its previous use is done: after a failed wait
                // the ring stays where it was, and the next call waits again.
                self.wait_sem(l, need.min(st.submitted))?;
                self.reap(l, st)?;
            }
            if let Some(r) = st.ring.as_mut() {
                r.cur = next;
                r.used = 0;
            }
        }
        let v = Self::batch_value(st);
        let Some(r) = st.ring.as_mut() else { return Err(Error::unsupported("no staging ring")) };
        let off = r.cur as u64 * r.chunk + r.used;
        r.used += n;
        r.last[r.cur] = v;
        Ok(off)
    }

    /// Completes pending pageable d2h copies that write into `[addr, addr+len)`.
    fn settle(&self, l: &Live, st: &mut State, addr: usize, len: usize) -> Result<()> {
        let end = addr + len;
        let need = st.completions.iter().filter(|c| c.addr < end && addr < c.addr + c.len as usize).map(|c| c.value).max();
        if let Some(v) = need {
            if v > st.submitted {
                self.flush(l, st)?;
            }
            self.wait_sem(l, v.min(st.submitted))?;
            self.reap(l, st)?;
        }
        Ok(())
    }

    fn ring_buffer(st: &State) -> Result<(vk::Buffer, *mut u8)> {
        match &st.ring {
            Some(Ring { bound: Bound { buffer, ptr: Some(p), .. }, .. }) => Ok((*buffer, p.0.as_ptr())),
            _ => Err(Error::unsupported("staging ring is not mapped")),
        }
    }

    /// Records one copy, ordered after earlier commands it conflicts with, and flushes a full
    /// batch. `acc` is what it touches (source first); each of `owners` is noted as used (with
    /// whether the copy writes it) and kept by the batch until it is reaped.
    #[allow(clippy::too_many_arguments)]
    fn push_copy(
        &self,
        l: &Live,
        st: &mut State,
        src: vk::Buffer,
        dst: vk::Buffer,
        region: vk::BufferCopy,
        d2h: bool,
        acc: [Access; 2],
        owners: &[(&Arc<Resource>, bool)],
    ) -> Result<()> {
        self.begin(l, st)?;
        self.own(st, owners);
        let Some(b) = st.open.as_mut() else { return Err(Error::unsupported("no open batch")) };
        let d = &l.device;
        // SAFETY: recording into our open command buffer under the stream lock; both buffers are
        // owned by the batch (`own` above) until it is reaped.
        unsafe { b.order(d, &acc) };
        match b.merged.as_mut() {
            Some(m) if m.src == src && m.dst == dst => match m.regions.last_mut() {
                Some(last) if last.src_offset + last.size == region.src_offset && last.dst_offset + last.size == region.dst_offset => {
                    last.size += region.size
                }
                _ => m.regions.push(region),
            },
            _ => {
                // SAFETY: as above.
                unsafe { b.emit(d) };
                b.merged = Some(Merged { src, dst, regions: vec![region] });
            }
        }
        b.cmds += 1;
        b.bytes += region.size;
        b.d2h |= d2h;
        if b.cmds >= BATCH_CMDS || b.bytes >= BATCH_BYTES {
            self.flush(l, st)?;
        }
        Ok(())
    }

    /// Notes a use of each owner by the open batch and makes the batch keep it. Call after
    /// `begin` and before recording, so the use is noted before the batch can be submitted
    /// (`crate::track`).
    fn own(&self, st: &mut State, owners: &[(&Arc<Resource>, bool)]) {
        let v = Self::batch_value(st);
        let tl = self.timeline();
        let Some(b) = st.open.as_mut() else { return };
        for &(r, write) in owners {
            r.tracker.note(&tl, v, write);
            if !b.keep.iter().rev().take(8).any(|k| Arc::ptr_eq(k, r)) {
                b.keep.push(r.clone());
            }
        }
    }

    /// Records one command (`rec`) that makes the accesses `acc`, and flushes a full batch.
    ///
    /// Stream order: a barrier goes before the command only when it touches bytes that an
    /// earlier command since the last barrier touched, with a write on either side. Independent
    /// small copies then run concurrently on the copy engine instead of draining it one by one.
    #[allow(clippy::too_many_arguments)]
    fn push(
        &self,
        l: &Live,
        st: &mut State,
        bytes: u64,
        d2h: bool,
        acc: &[Access],
        owners: &[(&Arc<Resource>, bool)],
        rec: impl FnOnce(vk::CommandBuffer),
    ) -> Result<()> {
        self.begin(l, st)?;
        self.own(st, owners);
        let Some(b) = st.open.as_mut() else { return Err(Error::unsupported("no open batch")) };
        // SAFETY: the open batch's command buffer is recording, under the stream lock; pending
        // copies are recorded first so command order is stream order.
        unsafe {
            b.order(&l.device, acc);
            b.emit(&l.device);
        }
        rec(b.cmd);
        b.cmds += 1;
        b.bytes += bytes;
        b.d2h |= d2h;
        if b.cmds >= BATCH_CMDS || b.bytes >= BATCH_BYTES {
            self.flush(l, st)?;
        }
        Ok(())
    }

    /// An async host↔device copy (see the `Stream` methods).
    ///
    /// # Safety
    /// h2d: `addr` readable for `len` bytes until the call returns, and, where a registration
    /// or pinned block covers it, unchanged until the work completes. d2h: `addr` writable for
    /// `len` bytes and not otherwise accessed until the work completes and a wait returns.
    unsafe fn host_copy(&self, to_device: bool, addr: usize, len: usize, buf: &DeviceBuffer, off: usize) -> Result<Enqueued> {
        let s = &*self.shared;
        if buf.shared.id != s.id {
            return Err(Error::invalid("the device buffer belongs to another device"));
        }
        let l = s.live()?;
        buf.check_range(off, len)?;
        host::check_host_range(addr, len)?;
        let mut st = relock(&self.state);
        self.check(&st)?;
        if len == 0 {
            return Ok(Enqueued { value: st.submitted + u64::from(st.open.is_some()), registered: false, staged: false });
        }
        // Holds every resource a direct piece names until this call has noted all its uses.
        let plan = host::plan(s, addr, len, off as u64);
        st.calls += 1;
        let call = st.calls;
        let r = self.enqueue_pieces(&l, &mut st, to_device, &plan, buf, call);
        if r.is_err() {
            // The caller sees an error and may free the destination: the pageable d2h pieces
            // this call queued must never be written (pieces already completed were written
            // inside the call, while the memory was still the caller's to lend).
            st.completions.retain(|c| c.call != call);
        }
        let (direct, staged) = r?;
        host::record(s, direct, staged);
        // The value that covers this copy: the open batch, or the last submitted one.
        let value = if st.open.is_some() { st.submitted + 1 } else { st.submitted };
        Ok(Enqueued { value, registered: plan.registered, staged: staged > 0 })
    }

    /// Records a planned copy's pieces; returns (direct, staged) bytes.
    fn enqueue_pieces(
        &self,
        l: &Live,
        st: &mut State,
        to_device: bool,
        plan: &host::Plan,
        buf: &DeviceBuffer,
        call: u64,
    ) -> Result<(u64, u64)> {
        let s = &*self.shared;
        let (mut direct, mut staged) = (0, 0);
        let (dev, dev_res) = (buf.raw(), &buf.res);
        for piece in &plan.pieces {
            match piece.host {
                HostSide::Direct { buffer, offset, addr } => {
                    let Some(held) = plan.held.iter().find(|h| h.0.obj.buffer == buffer) else {
                        return Err(Error::unsupported("direct piece without its owner"));
                    };
                    let host_acc = Access::host(addr, piece.len, !to_device);
                    let dev_acc = Access::buf(dev, piece.dev_offset, piece.len, to_device);
                    let owners = [(&held.0, !to_device), (dev_res, to_device)];
                    if to_device {
                        let region = vk::BufferCopy { src_offset: offset, dst_offset: piece.dev_offset, size: piece.len };
                        self.push_copy(l, st, buffer, dev, region, false, [host_acc, dev_acc], &owners)?;
                    } else {
                        let region = vk::BufferCopy { src_offset: piece.dev_offset, dst_offset: offset, size: piece.len };
                        self.push_copy(l, st, dev, buffer, region, true, [dev_acc, host_acc], &owners)?;
                    }
                    direct += piece.len;
                }
                HostSide::Staged { addr: a } => {
                    if to_device {
                        // Stream order for host bytes: an earlier pageable d2h into these bytes
                        // must land before we read them.
                        self.settle(l, st, a, piece.len as usize)?;
                    }
                    let chunk = s.options.staging_chunk as u64;
                    let mut done = 0;
                    while done < piece.len {
                        let n = (piece.len - done).min(chunk);
                        let roff = self.ring_alloc(l, st, n)?;
                        let (rb, rp) = Self::ring_buffer(st)?;
                        let dev_off = piece.dev_offset + done;
                        let owners = [(dev_res, to_device)];
                        if to_device {
                            // SAFETY: the source is readable (contract); the ring range is ours
                            // and idle (ring_alloc waited for its previous use).
                            unsafe { par_copy(rp.add(roff as usize), (a + done as usize) as *const u8, n as usize) };
                            let acc = [Access::buf(rb, roff, n, false), Access::buf(dev, dev_off, n, true)];
                            let region = vk::BufferCopy { src_offset: roff, dst_offset: dev_off, size: n };
                            self.push_copy(l, st, rb, dev, region, false, acc, &owners)?;
                        } else {
                            let v = Self::batch_value(st);
                            let acc = [Access::buf(dev, dev_off, n, false), Access::buf(rb, roff, n, true)];
                            let region = vk::BufferCopy { src_offset: dev_off, dst_offset: roff, size: n };
                            self.push_copy(l, st, dev, rb, region, true, acc, &owners)?;
                            st.completions.push_back(Completion { call, value: v, ring_off: roff, addr: a + done as usize, len: n });
                        }
                        done += n;
                    }
                    staged += piece.len;
                }
            }
        }
        Ok((direct, staged))
    }

    /// This stream as the timeline its uses are noted on.
    fn timeline(&self) -> Weak<dyn Timeline> {
        self.me.clone()
    }
}

impl StreamInner {
    /// Drops queued pageable d2h copy-outs up to `value` (their work cannot be confirmed).
    fn cancel_completions(&self, value: u64) {
        let mut st = relock(&self.state);
        let before = st.completions.len();
        st.completions.retain(|c| c.value > value);
        if st.completions.len() != before {
            log::warn!("{}: {} pageable d2h copies cancelled", self.shared.id, before - st.completions.len());
        }
    }
}

impl Timeline for StreamInner {
    fn wait_for(&self, l: &Live, value: u64) -> Result<()> {
        self.wait_value(l, value)
    }
    fn queue_idle(&self, l: &Live) {
        StreamInner::queue_idle(self, l)
    }
}

impl Child for StreamInner {
    fn teardown(&self, _s: &Shared, l: &Live, p: u8) {
        match p {
            phase::WORK => self.shutdown(l),
            phase::SYNC => self.destroy_semaphore(l),
            _ => {}
        }
    }
}

impl Stream {
    /// The queue this stream submits to: (family, index).
    pub fn queue(&self) -> Result<(u32, u32)> {
        let l = self.inner.shared.live_any()?;
        let q = pick_queue(&l, self.inner.queue_kind, self.inner.queue_index);
        Ok((q.family, q.index))
    }

    /// The device this stream runs on.
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
    pub unsafe fn copy_to_device_async(&self, src: *const u8, len: usize, dst: &DeviceBuffer, dst_offset: usize) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.host_copy(true, src as usize, len, dst, dst_offset) }.map(|_| ())
    }

    /// Enqueues a copy of `len` bytes from `src` at `src_offset` into host memory at `dst`.
    /// The bytes are in place after `synchronize`, or `Event::wait` on an event recorded after
    /// this call.
    ///
    /// # Safety
    /// `dst` must stay valid, writable and otherwise untouched for `len` bytes until then.
    pub unsafe fn copy_to_host_async(&self, src: &DeviceBuffer, src_offset: usize, dst: *mut u8, len: usize) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.inner.host_copy(false, dst as usize, len, src, src_offset) }.map(|_| ())
    }

    /// Safe h2d from `src` (a `PinnedBuffer`, a `Registration` or any slice).
    ///
    /// Async only where that is sound without trusting a destructor (see the module docs):
    /// - bytes in pinned blocks (vkhost's memory, owned by the work) are read by the device
    ///   after the call returns;
    /// - pageable bytes are copied into the staging ring before the call returns;
    /// - bytes in a registration (the caller's memory) are read before the call returns: the
    ///   call waits for the copy.
    ///
    /// The returned guard borrows `src` until it is dropped or waited (drop waits).
    pub fn upload<'a>(&self, src: &'a [u8], dst: &DeviceBuffer, dst_offset: usize) -> Result<Pending<'a>> {
        // SAFETY: `src` is readable for the call; what the device reads after the call returns
        // lies in pinned blocks, which the submitted work owns (their memory outlives it).
        let e = unsafe { self.inner.host_copy(true, src.as_ptr() as usize, src.len(), dst, dst_offset) }?;
        self.finish(e.value, e.registered)
    }

    /// Safe d2h into `dst` (a `PinnedBuffer`, a `Registration` or any slice).
    ///
    /// Async only into pinned blocks, whose `Deref` waits for device writes still pending, so a
    /// leaked guard cannot expose bytes being written. Into pageable or registered memory the
    /// call returns once the bytes are in place.
    pub fn download<'a>(&self, src: &DeviceBuffer, src_offset: usize, dst: &'a mut [u8]) -> Result<Pending<'a>> {
        // SAFETY: `dst` is writable for the call; what the device writes after the call returns
        // lies in pinned blocks, owned by the submitted work, whose safe views wait for it.
        let e = unsafe { self.inner.host_copy(false, dst.as_mut_ptr() as usize, dst.len(), src, src_offset) }?;
        self.finish(e.value, e.registered || e.staged)
    }

    /// The guard of a safe copy; waits first when `now` (the copy touches memory the caller
    /// may reuse once we return). A wait that fails waits for the queue to go idle before
    /// returning the error, so the device no longer touches the bytes either way.
    fn finish<'a>(&self, value: u64, now: bool) -> Result<Pending<'a>> {
        let event = Event { inner: self.inner.clone(), value };
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
    pub fn copy_async(&self, src: &DeviceBuffer, src_offset: usize, dst: &DeviceBuffer, dst_offset: usize, len: usize) -> Result<()> {
        let inner = &*self.inner;
        let s = &*inner.shared;
        if src.shared.id != s.id || dst.shared.id != s.id {
            return Err(Error::invalid("buffers of another device"));
        }
        let l = s.live()?;
        src.check_range(src_offset, len)?;
        dst.check_range(dst_offset, len)?;
        if src.raw() == dst.raw() && src_offset < dst_offset + len && dst_offset < src_offset + len && len > 0 {
            return Err(Error::invalid("overlapping source and destination ranges in one buffer"));
        }
        let mut st = relock(&inner.state);
        inner.check(&st)?;
        if len == 0 {
            return Ok(());
        }
        let (so, dof, n) = (src_offset as u64, dst_offset as u64, len as u64);
        let region = vk::BufferCopy { src_offset: so, dst_offset: dof, size: n };
        let acc = [Access::buf(src.raw(), so, n, false), Access::buf(dst.raw(), dof, n, true)];
        inner.push_copy(&l, &mut st, src.raw(), dst.raw(), region, false, acc, &[(&src.res, false), (&dst.res, true)])
    }

    /// Enqueues vkCmdFillBuffer: `len` bytes at `offset` set to the repeated `value`.
    /// `offset` and `len` must be multiples of 4.
    pub fn fill_async(&self, dst: &DeviceBuffer, offset: usize, len: usize, value: u32) -> Result<()> {
        let inner = &*self.inner;
        let s = &*inner.shared;
        if dst.shared.id != s.id {
            return Err(Error::invalid("buffer of another device"));
        }
        let l = s.live()?;
        dst.check_range(offset, len)?;
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
        inner.push(&l, &mut st, len as u64, false, &acc, &[(&dst.res, true)], rec)
    }

    /// Submits recorded work now, without waiting.
    pub fn flush(&self) -> Result<()> {
        let l = self.inner.shared.live()?;
        let mut st = relock(&self.inner.state);
        self.inner.check(&st)?;
        self.inner.flush(&l, &mut st)
    }

    /// An event at the current end of the stream (submits recorded work).
    pub fn record(&self) -> Result<Event> {
        let l = self.inner.shared.live()?;
        let mut st = relock(&self.inner.state);
        self.inner.check(&st)?;
        self.inner.flush(&l, &mut st)?;
        Ok(Event { inner: self.inner.clone(), value: st.submitted })
    }

    /// Makes later work on this stream wait, on the device, for `event` (any stream of the same
    /// device, any queue), through its timeline semaphore.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        if !Arc::ptr_eq(&event.inner.shared, &self.inner.shared) {
            return Err(Error::invalid("event of another device"));
        }
        let l = self.inner.shared.live()?;
        if Arc::ptr_eq(&event.inner, &self.inner) || event.value == 0 || event.inner.completed.load(Ordering::Relaxed) >= event.value {
            return Ok(());
        }
        let mut st = relock(&self.inner.state);
        self.inner.check(&st)?;
        // Work recorded before the wait must not wait: submit it first.
        self.inner.flush(&l, &mut st)?;
        st.waits.push((event.inner.sem, event.value));
        st.wait_on.push(event.inner.clone());
        Ok(())
    }

    /// Waits until all work enqueued so far is done, and completes pageable d2h copies.
    pub fn synchronize(&self) -> Result<()> {
        let l = self.inner.shared.live()?;
        let v = {
            let mut st = relock(&self.inner.state);
            self.inner.check(&st)?;
            self.inner.flush(&l, &mut st)?;
            st.submitted
        };
        self.inner.wait_value(&l, v)
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
    /// copies up to it. After the device or stream is gone, its work is done: `Ok`.
    pub fn wait(&self) -> Result<()> {
        let Ok(l) = self.inner.shared.live_any() else { return Ok(()) };
        if self.inner.shared.lost.load(Ordering::Relaxed) {
            // Nothing will complete: cancel the copy-outs this event guards before returning,
            // so the library never writes destinations the caller may now reuse.
            self.inner.cancel_completions(self.value);
            return Err(Error::DeviceLost);
        }
        self.inner.wait_value(&l, self.value)
    }

    /// Whether the work before this event is done (never blocks).
    pub fn is_done(&self) -> Result<bool> {
        let Ok(l) = self.inner.shared.live_any() else { return Ok(true) };
        let mut st = relock(&self.inner.state);
        if st.dead {
            return Ok(true);
        }
        if self.value > st.submitted {
            // The work is still in the open batch: submit it, or polling never sees it finish.
            self.inner.flush(&l, &mut st)?;
        }
        if self.inner.completed_value(&l)? >= self.value {
            self.inner.reap(&l, &mut st)?;
            return Ok(true);
        }
        Ok(false)
    }
}

impl Pending<'_> {
    /// Waits for the copy (and completes a pageable destination).
    pub fn wait(mut self) -> Result<()> {
        match self.event.take() {
            Some(e) => e.wait(),
            None => Ok(()),
        }
    }

    /// Whether the copy is done (never blocks).
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
