//! The stream's state and its timeline: submitting the open batch, waiting for and reaping
//! completed batches (running pageable d2h copy-outs), shutdown, and the semaphore's life.

use super::batch::Batch;
use super::descriptors::DescPool;
use super::ring::{Completion, Ring};
use crate::device::QueueKind;
use crate::device::object::{Child, phase};
use crate::device::pipeline::Pipeline;
use crate::device::submit::{Dir, compute_host_read_barrier, host_read_barrier, par_copy};
use crate::device::{Live, Queue, Shared, lock};
use crate::error::{Error, Result};
use crate::fault::{self, Point};
use crate::resource::{Resource, Timeline};
use ash::vk;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// A submitted batch: it owns what it names until it is reaped.
pub(super) struct Done {
    value: u64,
    cmd: vk::CommandBuffer,
    _wait_on: Vec<Arc<StreamInner>>,
    _owners: Vec<Arc<Resource>>,
    _pipes: Vec<Arc<Pipeline>>,
    /// Reset (recycled) when the batch is reaped.
    pools: Vec<DescPool>,
}

pub(super) struct State {
    pub(super) pool: vk::CommandPool,
    /// Value of the last submitted batch.
    pub(super) submitted: u64,
    pub(super) open: Option<Batch>,
    pub(super) inflight: VecDeque<Done>,
    /// Streams whose semaphores the next submission waits on, kept alive with it.
    pub(super) wait_on: Vec<Arc<StreamInner>>,
    pub(super) free_cmds: Vec<vk::CommandBuffer>,
    pub(super) waits: Vec<(vk::Semaphore, u64)>,
    pub(super) ring: Option<Ring>,
    /// The scratch buffer gathered copies go through (`OpenOptions::gather_regions`), made by
    /// the first run that uses it and released at shutdown, as the ring; `no_scratch` once it
    /// could not be made (the stream then never gathers).
    pub(super) scratch: Option<(super::batch::Scratch, crate::device::Bound)>,
    pub(super) no_scratch: bool,
    pub(super) completions: VecDeque<Completion>,
    /// Numbers enqueue calls, for `Completion::call`.
    pub(super) calls: u64,
    /// Batches whose submission failed, by value (ascending), with the error: their work never
    /// ran and their values are never signalled. Kept for the stream's life (one entry per
    /// failed submission), so every guard of such a batch can still tell (see [`lost_error`]).
    pub(super) lost: Vec<(u64, Error)>,
    /// Pageable d2h copy-outs dropped undelivered (a failed wait, a lost device, a shutdown
    /// whose wait failed), as (batch value, enqueue call, error): the call's own guard and the
    /// events after the batch report the error as for a lost batch (see [`lost_error`]), so no
    /// guard answers `Ok` for a destination that was never written. Keyed by call too, because
    /// the open batch may take later copies that are not affected. One entry per such call,
    /// kept for the stream's life.
    pub(super) cancelled: Vec<(u64, u64, Error)>,
    /// Lost (or cancelled) batches up to this value were reported by `Stream::synchronize`.
    pub(super) reported: u64,
    pub(super) dead: bool,
    /// Whether a kernel was launched on this stream: barriers then include compute accesses.
    pub(super) launched: bool,
    /// Reset descriptor pools, ready for the next batch's launches (`descriptors`).
    pub(super) desc_free: Vec<DescPool>,
}

impl std::fmt::Debug for StreamInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamInner").field("queue", &self.queue_kind).finish()
    }
}

pub(crate) struct StreamInner {
    pub(super) me: Weak<StreamInner>,
    pub(super) queue_kind: QueueKind,
    pub(super) queue_index: usize,
    /// The timeline semaphore. Destroyed only when the last reference goes (other streams'
    /// batches may wait on it), through `Shared::stream_semaphores`, or at device destroy.
    pub(super) sem: vk::Semaphore,
    /// `sem`'s key in `Shared::stream_semaphores`.
    pub(super) sem_key: u64,
    pub(super) state: Mutex<State>,
    /// Highest value known complete (cache of the semaphore).
    pub(super) completed: AtomicU64,
    /// Highest value every event (not a copy's own guard) at or below is done for good: its
    /// batches completed, their pageable copy-outs ran, and no loss or cancellation at or before
    /// it is unreported (a later loss or cancellation can only be of later batches). Raised by
    /// every reap and by events answered done, so `Event::is_done` answers such events without
    /// the stream's lock, which an upload on another thread may hold for as long as its copy
    /// through the staging ring takes.
    pub(super) clean_done: AtomicU64,
    /// The same for a copy's or a launch's own guard, which reports its own batch's loss (or
    /// its call's cancelled copy-outs) however often asked: raised only while the stream has
    /// never lost a batch nor cancelled a copy-out (`State::lost` and `State::cancelled` only
    /// grow), so every guard at or below it ran cleanly.
    pub(super) clean_own: AtomicU64,
    /// Last, so it drops after `state` (the batches and the resources they own): their objects
    /// are released while the stream still keeps the device, and the device's last reference,
    /// if it is this one, goes through `drop_shared` (see `SharedRef`).
    pub(super) shared: crate::device::SharedRef,
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        #[cfg(test)]
        tests::DROP_PAUSE.here(self.shared.id.get());
        if self.shared.forked() {
            // A parent thread may have held the list's lock at the fork; nothing to do here.
            return;
        }
        // No device lock here (this can run inside another stream's reap): defer. If the
        // device's teardown already destroyed the semaphore (this drop began as it ran), it is
        // no longer listed and this does nothing.
        lock(&self.shared.stream_semaphores).retire(self.sem_key);
    }
}

impl StreamInner {
    /// At device destroy, after `shutdown` (and from the stream's own last drop): the
    /// semaphore goes now, even if events still reference this stream. Once only: the one
    /// that takes it out of `Shared::stream_semaphores` destroys it.
    pub(crate) fn destroy_semaphore(&self, l: &Live) {
        let taken = lock(&self.shared.stream_semaphores).take(self.sem_key);
        if let Some(sem) = taken {
            // SAFETY: the device is idle and every stream is shut down, or no one else refers
            // to this stream: nothing waits on the semaphore.
            unsafe { l.device.destroy_semaphore(sem, None) };
            self.shared.count_semaphore(-1);
        }
    }
}

pub(super) use crate::device::submit::create_timeline;

/// The queue a stream of `kind` submits to; `Unsupported` on a borrowed device without queues.
pub(super) fn pick_queue(l: &Live, kind: QueueKind, i: usize) -> Result<&Queue> {
    match kind {
        QueueKind::Copy if !l.copy_queues.is_empty() => Ok(&l.copy_queues[i % l.copy_queues.len()]),
        _ => l.compute_queue(),
    }
}

impl StreamInner {
    /// Whether a device-to-device copy of `len` bytes from `src` to `dst` (offsets) runs the
    /// built-in copy kernel on this stream (`OpenOptions::d2d_kernel_min`): at least that
    /// long, offsets and length multiples of 4 (the kernel's words), and a queue family that can
    /// run kernels.
    pub(super) fn d2d_by_kernel(&self, l: &Live, src: usize, dst: usize, len: usize) -> bool {
        let s = &*self.shared;
        let min = match s.options.d2d_kernel_min {
            Some(m) => m,
            None if s.info.device_type == crate::DeviceType::Cpu => return false,
            None => crate::OpenOptions::D2D_KERNEL_MIN,
        };
        len >= min.max(1) && (src | dst | len) % 4 == 0 && self.runs_kernels(l).unwrap_or(false)
    }

    /// Whether this stream's queue family can run kernels (`Unsupported` on a borrowed device
    /// without queues, as [`pick_queue`]).
    pub(super) fn runs_kernels(&self, l: &Live) -> Result<bool> {
        let q = pick_queue(l, self.queue_kind, self.queue_index)?;
        Ok(self.shared.info.queue_families.get(q.family as usize).is_some_and(|f| f.flags.contains(vk::QueueFlags::COMPUTE)))
    }
}

/// The last value at or before `value` that a submitted batch signals: what waiting for
/// `value` means (values of lost batches are never signalled; nothing past `submitted` was).
pub(super) fn signalled(st: &State, value: u64) -> u64 {
    let mut t = value.min(st.submitted);
    for &(u, _) in st.lost.iter().rev() {
        if u == t {
            t -= 1;
        } else if u < t {
            break;
        }
    }
    t
}

/// The error a guard at `value` reports, if work it guards was lost: a copy's or a launch's
/// guard (`own`: the work is in batch `value`) reports its own batch's loss, always; an event
/// (the end of the stream when recorded) reports the first loss at or before it that
/// `synchronize` has not reported yet.
/// Cancelled copy-outs count as lost here: for an event, any at or before it (unreported); for
/// a copy's own guard, its own call's (`call`, never 0 for a copy with copy-outs).
pub(super) fn lost_error(st: &State, value: u64, own: bool, call: u64) -> Option<Error> {
    let hit = |u: u64| if own { u == value } else { u <= value && u > st.reported };
    let lost = st.lost.iter().filter(|(u, _)| hit(*u)).map(|(u, e)| (*u, e));
    let cancelled = st
        .cancelled
        .iter()
        .filter(|(u, c, _)| if own { call != 0 && *c == call } else { *u <= value && *u > st.reported })
        .map(|(u, _, e)| (*u, e));
    lost.chain(cancelled).min_by_key(|(u, _)| *u).map(|(_, e)| e.clone())
}

/// The first lost (or cancelled) batch at or before `upto` (what `synchronize` waited for) not
/// reported yet; marks every loss up to it reported.
pub(super) fn take_unreported(st: &mut State, upto: u64) -> Option<Error> {
    let lost = st.lost.iter().map(|(u, e)| (*u, e));
    let cancelled = st.cancelled.iter().map(|(u, _, e)| (*u, e));
    let e = lost.chain(cancelled).filter(|(u, _)| *u > st.reported && *u <= upto).min_by_key(|(u, _)| *u).map(|(_, e)| e.clone());
    st.reported = st.reported.max(upto);
    e
}

/// Records batch `value` as lost with `e` (it never ran): its value is used up (the next batch
/// signals the one after), and its copy-outs are dropped (they would copy stale bytes). Its
/// ring chunks keep `value` as their last use: a chunk is shared by the batches before it too,
/// and `ring_alloc` waits for `signalled(value)`, the last batch before it that ran. (Marking
/// them unused let the ring hand out a chunk earlier batches still read or wrote: an upload
/// overwritten before the device read it, a download's bytes replaced before its copy-out.)
fn lose(st: &mut State, value: u64, e: &Error) {
    st.submitted = value;
    st.lost.push((value, e.clone()));
    st.completions.retain(|c| c.value != value);
}

/// Drops the queued pageable d2h copy-outs `drop` selects, never to run, and records their
/// batches as cancelled with `e` (see [`State::cancelled`]); returns how many went.
pub(super) fn cancel_where(st: &mut State, drop: impl Fn(&super::ring::Completion) -> bool, e: &Error) -> usize {
    let before = st.completions.len();
    let mut hit: Vec<(u64, u64)> = Vec::new();
    st.completions.retain(|c| {
        let d = drop(c);
        if d && !hit.contains(&(c.value, c.call)) {
            hit.push((c.value, c.call));
        }
        !d
    });
    for (v, c) in hit {
        if !st.cancelled.iter().any(|(u, k, _)| (*u, *k) == (v, c)) {
            st.cancelled.push((v, c, e.clone()));
        }
    }
    before - st.completions.len()
}

/// The error recorded for pageable d2h copy-outs cancelled because a panic unwound through
/// the stream call that waited for them (or enqueued them).
pub(super) fn unwound() -> Error {
    Error::Vulkan { call: "a stream wait (a panic unwound through it)", code: vk::Result::ERROR_UNKNOWN }
}

pub(super) fn relock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl StreamInner {
    pub(super) fn check(&self, st: &State) -> Result<()> {
        if st.dead {
            return Err(Error::DeviceDestroyed);
        }
        Ok(())
    }

    /// The value the open batch will signal.
    pub(super) fn batch_value(st: &State) -> u64 {
        st.submitted + 1
    }

    /// Submits the open batch (or, with pending waits and nothing recorded, an empty one).
    pub(super) fn flush(&self, l: &Live, st: &mut State) -> Result<()> {
        if st.open.is_none() && st.waits.is_empty() {
            return Ok(());
        }
        self.begin(l, st)?;
        let s = &*self.shared;
        let Some(mut b) = st.open.take() else { return Ok(()) };
        let d = &l.device;
        // SAFETY: `b.cmd` is in the recording state, owned by this stream.
        let ended = unsafe {
            b.emit(d);
            if b.d2h && b.compute {
                compute_host_read_barrier(d, b.cmd);
            } else if b.d2h {
                host_read_barrier(d, b.cmd);
            }
            d.end_command_buffer(b.cmd)
        };
        let value = st.submitted + 1;
        if let Err(c) = ended {
            st.free_cmds.push(b.cmd);
            // SAFETY: never submitted: no work names the batch's descriptor sets.
            unsafe { self.recycle_pools(l, st, b.pools) };
            // Lost as a batch whose submission failed (below): else its copy-outs would stay
            // queued under a value the next batch signals, and copy stale ring bytes out. The
            // log line comes last: a user's logger may panic.
            let e = s.fail_unlogged("vkEndCommandBuffer", c);
            lose(st, value, &e);
            s.log_failure("vkEndCommandBuffer", c);
            return Err(e);
        }
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
        // The failure's log line waits until the batch is accounted for (below): a user's
        // logger may panic, and an unwind from here would leak the batch's descriptor pools
        // and leave its copy-outs queued under a value the next batch signals.
        let submitted: Result<std::result::Result<(), vk::Result>> = match fault::check(Point::QueueSubmit) {
            Err(c) => Ok(Err(c)),
            Ok(()) => pick_queue(l, self.queue_kind, self.queue_index).map(|q| {
                let g = lock(&q.raw);
                // SAFETY: the queue is externally synchronized by its lock; everything the
                // command buffer names is kept alive until `value` completes (last-use tracking).
                unsafe { d.queue_submit(*g, &[si], vk::Fence::null()) }
            }),
        };
        let failed = submitted.as_ref().ok().and_then(|r| r.err());
        let r = submitted.and_then(|r| r.map_err(|c| s.fail_unlogged("vkQueueSubmit", c)));
        match r {
            Ok(()) => {
                st.submitted = value;
                st.waits.clear();
                crate::host::record_gathered(s, b.gathered);
                let wait_on = std::mem::take(&mut st.wait_on);
                st.inflight.push_back(Done { value, cmd: b.cmd, _wait_on: wait_on, _owners: b.keep, _pipes: b.pipes, pools: b.pools });
                Ok(())
            }
            Err(e) => {
                // The batch is lost: its copies did not run. Its value is used up (the next batch
                // signals the one after), so its guards can tell it from later work, and the
                // error stays until reported (`lost_error`, `take_unreported`). Completions that
                // depended on it would copy stale bytes, so drop them, and free its ring chunks.
                st.free_cmds.push(b.cmd);
                // SAFETY: the submission failed, so its commands never run (a failed
                // vkQueueSubmit leaves what it names unaffected): nothing uses these sets.
                unsafe { self.recycle_pools(l, st, b.pools) };
                lose(st, value, &e);
                if let Some(c) = failed {
                    s.log_failure("vkQueueSubmit", c);
                }
                Err(e)
            }
        }
    }

    pub(super) fn completed_value(&self, l: &Live) -> Result<u64> {
        let sem = self.sem;
        // SAFETY: the semaphore is a live timeline semaphore of this device.
        let v = unsafe { l.device.get_semaphore_counter_value(sem) }.map_err(|c| self.shared.fail("vkGetSemaphoreCounterValue", c))?;
        self.completed.fetch_max(v, Ordering::Relaxed);
        Ok(v)
    }

    /// Waits until `value` completed (value ≤ submitted).
    pub(super) fn wait_sem(&self, l: &Live, value: u64) -> Result<()> {
        if self.completed.load(Ordering::Relaxed) >= value {
            return Ok(());
        }
        let s = &*self.shared;
        // Poll as a 20 MB transfer would (2 ms on GPUs, 200 us on CPU drivers), then sleep.
        crate::device::submit::wait_timeline(s, l, self.sem, value, crate::device::submit::spin_for(s, 20 << 20))?;
        self.completed.fetch_max(value, Ordering::Relaxed);
        Ok(())
    }

    /// Recycles finished batches and runs finished d2h completions.
    pub(super) fn reap(&self, l: &Live, st: &mut State) -> Result<()> {
        let done = self.completed_value(l)?;
        while st.inflight.front().is_some_and(|b| b.value <= done) {
            if let Some(b) = st.inflight.pop_front() {
                st.free_cmds.push(b.cmd);
                // SAFETY: the batch's value completed: no command of it runs any more.
                unsafe { self.recycle_pools(l, st, b.pools) };
                // Its owners, pipelines included, go here (`b` drops).
            }
        }
        while st.completions.front().is_some_and(|c| c.value <= done) {
            let Some(c) = st.completions.pop_front() else { break };
            if let Some(r) = &st.ring {
                if let Some(p) = r.bound.ptr {
                    // SAFETY: the device finished writing this ring range (value completed, and
                    // the batch ends with a transfer → host barrier); `addr` is the caller's
                    // writable memory, valid until synchronize/wait per the async contract.
                    unsafe {
                        par_copy(&self.shared, c.addr as *mut u8, p.0.as_ptr().add(c.ring_off as usize), c.len as usize, Dir::ToHost)
                    };
                }
            }
        }
        // Whoever holds the stream and reaps publishes progress for lock-free polls (see
        // `clean_done`): every event below both the completed value and the first loss or
        // cancellation not yet reported is done for good, its copy-outs run just above. (Only
        // the polls raised it, and a poll that found the stream held by a thread enqueuing back
        // to back rarely got in: a poll-only loop waited seconds.)
        let mut clean = done.min(st.submitted);
        for u in st.lost.iter().map(|l| l.0).chain(st.cancelled.iter().map(|c| c.0)).filter(|&u| u > st.reported) {
            clean = clean.min(u - 1);
        }
        self.clean_done.fetch_max(clean, Ordering::AcqRel);
        if st.lost.is_empty() && st.cancelled.is_empty() {
            self.clean_own.fetch_max(clean, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Flushes if needed, waits for `value` (for the last batch at or before it that was
    /// submitted: see [`signalled`]), reaps. Takes and releases the stream lock. Lost batches
    /// are not its to report: the guards and `synchronize` do (`lost_error`,
    /// `take_unreported`), so a wait for another reason (an unregister, a settle) loses nothing.
    ///
    /// On failure, every queued pageable d2h completion is cancelled: the caller sees an error
    /// and may free those destinations, so the library must never write them later.
    ///
    /// A panic unwinding out of the wait (a user's logger, as a failed wait logs) cancels them
    /// too, with [`unwound`]'s error, and waits for the queue to go idle before it goes on.
    pub(crate) fn wait_value(&self, l: &Live, value: u64) -> Result<()> {
        let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.wait_value_inner(l, value))) {
            Ok(r) => r,
            Err(panic) => {
                cancel_where(&mut relock(&self.state), |_| true, &unwound());
                // As after a failed wait: the caller (an unregister, a settle) may hand back
                // bytes the batches name, so the queue goes idle first.
                self.queue_idle(l);
                std::panic::resume_unwind(panic)
            }
        };
        if let Err(e) = &r {
            let n = cancel_where(&mut relock(&self.state), |_| true, e);
            if n > 0 {
                // The queue idle before the line: its callers wait for it after an error, but a
                // user's logger that panics on the line would skip their wait, and the caller's
                // bytes (a download's slice) would be handed back with the device writing them.
                let _ = self.wait_queue_idle(l);
                log::warn!("{}: stream wait failed ({e}); {n} pageable d2h copies cancelled", self.shared.id);
            }
        }
        r
    }

    /// [`lost_error`] under the stream lock.
    pub(super) fn lost(&self, value: u64, own: bool, call: u64) -> Option<Error> {
        lost_error(&relock(&self.state), value, own, call)
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
            // A lost batch's work never ran: wait for what was submitted before it.
            signalled(&st, value)
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
        if let Err(c) = self.wait_queue_idle(l) {
            log::warn!("{}: vkQueueWaitIdle: {c:?}", self.shared.id);
        }
    }

    /// [`StreamInner::queue_idle`] without logging: the caller says what failed.
    pub(super) fn wait_queue_idle(&self, l: &Live) -> std::result::Result<(), ash::vk::Result> {
        // A stream exists only on a device with queues.
        let Ok(q) = pick_queue(l, self.queue_kind, self.queue_index) else { return Ok(()) };
        let g = lock(&q.raw);
        // SAFETY: the queue is externally synchronized by its lock.
        unsafe { crate::device::submit::queue_idle(&l.device, *g) }
    }

    /// Synchronizes and destroys the stream's objects (stream drop, device destroy). What it has
    /// to say is logged at the end, once everything is done: a user's logger that panics on
    /// the warning can cut nothing short (the queue wait, the objects' release).
    pub(crate) fn shutdown(&self, l: &Live) {
        let s = &*self.shared;
        let mut st = relock(&self.state);
        if st.dead {
            return;
        }
        let mut say = Vec::new();
        // Flushing, waiting and reaping may log on their way (a failed submission, a cancelled
        // copy-out): a user's logger that panics there must not cut the release below short.
        let work = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let r = self.flush(l, &mut st).and_then(|()| self.wait_sem(l, signalled(&st, st.submitted)));
            match r {
                Ok(()) => {
                    if let Err(e) = self.reap(l, &mut st) {
                        // Copy-outs that could not be confirmed are not run, and their guards say so.
                        cancel_where(&mut st, |_| true, &e);
                    }
                }
                Err(e) => {
                    let idle = self.wait_queue_idle(l);
                    say.push(format!("{}: stream shutdown: {e}; waited for the queue to go idle ({idle:?})", s.id));
                    // Whether their batches ran cannot be told: the copy-outs are not run, and
                    // their guards say so (an event waited after this drop answers the error).
                    let n = cancel_where(&mut st, |_| true, &e);
                    if n > 0 {
                        say.push(format!("{}: {n} pageable d2h copies cancelled at shutdown", s.id));
                    }
                }
            }
        }));
        if work.is_err() {
            // Cut short: whatever was submitted is waited for here, and nothing queued runs.
            let _ = self.wait_queue_idle(l);
            cancel_where(&mut st, |_| true, &Error::DeviceDestroyed);
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
            if let Some((_, b)) = st.scratch.take() {
                s.release_bound(l, b.buffer, b.memory);
            }
            let mut pools = std::mem::take(&mut st.desc_free);
            pools.extend(st.inflight.iter_mut().flat_map(|d| std::mem::take(&mut d.pools)));
            pools.extend(st.open.as_mut().map(|b| std::mem::take(&mut b.pools)).unwrap_or_default());
            self.destroy_pools(l, pools);
        }
        st.inflight.clear();
        st.free_cmds.clear();
        // Anything still queued (nothing, after a wait that succeeded and a reap) never runs.
        cancel_where(&mut st, |_| true, &Error::DeviceDestroyed);
        st.wait_on.clear();
        st.waits.clear();
        drop(st);
        for line in say {
            log::warn!("{line}");
        }
        if let Err(p) = work {
            std::panic::resume_unwind(p);
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

#[cfg(test)]
mod tests {
    /// Where the first of an armed device's streams' last drops stops (`StreamInner::drop`'s
    /// start).
    pub(super) static DROP_PAUSE: crate::device::testing::DropPause = crate::device::testing::DropPause::new();

    /// A stream whose last reference (an `Event`, after the `Stream` was dropped) goes on
    /// another thread as its device is destroyed: the drop has begun (the count is zero, so
    /// teardown's children do not include it) but none of it ran before the teardown's end.
    /// The semaphore must still be destroyed before the device: before
    /// `Shared::stream_semaphores` was the one authority, the drop queued it after teardown's
    /// last drain and vkDestroyDevice left it alive (VUID-vkDestroyDevice-device-00378, and
    /// the semaphore count stayed at one).
    #[test]
    fn a_streams_last_drop_racing_its_device_destroy_leaks_no_semaphore() {
        let Some(dev) = crate::device::testing::open_validated() else { return };
        let buf = dev.alloc_buffer(4096).unwrap();
        let s = dev.stream().unwrap();
        s.fill_async(&buf, 0, 4096, 5).unwrap();
        let ev = s.record().unwrap();
        drop(s);
        let unpause = DROP_PAUSE.arm(dev.id().get());
        let t = std::thread::spawn(move || drop(ev));
        DROP_PAUSE.wait_reached("the stream's last drop");
        dev.destroy().unwrap();
        drop(unpause);
        t.join().unwrap();
        drop(buf);
        assert_eq!(dev.live_objects(), crate::device::LiveObjects::default(), "objects left after destroy");
        assert_eq!(dev.validation_errors(), 0, "{:?}", dev.last_validation_error());
    }
}
