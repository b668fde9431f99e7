//! Copy submission: copy contexts, pipelined staging, fence waits.
//!
//! A copy is described as a list of [`Piece`]s, each a contiguous device range paired with
//! either a host buffer that covers its host bytes (`Direct`: one vkCmdCopyBuffer, no staging,
//! no memcpy) or plain host bytes (`Staged`: memcpy through a staging chunk). [`execute`] packs
//! pieces into batches whose staged bytes fit one chunk; each batch is one submission on one
//! slot of a copy context, and the slots rotate so the CPU fills chunk k+1 while the device
//! copies chunk k. A copy that is all direct pieces is one submission.
//!
//! A copy context owns a command pool (behind the context's lock, as vkCommandPool requires
//! external synchronization), its command buffers, fences and staging memory. A device has a
//! few contexts, so several threads copy at once; each context submits to one queue.

use super::{Bound, Live, Queue, SendPtr, Shared, lock};
use crate::error::{Error, Result};
use crate::fault::{self, Point};
use crate::memtype;
use ash::vk;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

/// Direction of a host↔device copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    ToDevice,
    ToHost,
}

/// The host side of one piece.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostSide {
    /// Host bytes at `addr`, covered by `buffer` at `offset`.
    Direct { buffer: vk::Buffer, offset: u64, addr: usize },
    /// Plain host bytes at `addr`, copied through staging.
    Staged { addr: usize },
}

/// A contiguous stretch of a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub dev_offset: u64,
    pub len: u64,
    pub host: HostSide,
}

#[derive(Debug, Clone, Copy)]
struct Op {
    dev_offset: u64,
    len: u64,
    src: OpSrc,
}

#[derive(Debug, Clone, Copy)]
enum OpSrc {
    Direct { buffer: vk::Buffer, offset: u64 },
    Staged { addr: usize, staging_off: u64 },
}

struct Slot {
    cmd: vk::CommandBuffer,
    /// The slot's fence, on devices without timeline semaphores (else null).
    fence: vk::Fence,
    /// The context timeline's value the pending submission signals (timeline devices).
    value: u64,
    /// Submitted and not yet waited; for d2h, the memcpys still to do once it completes.
    pending: Option<Outs>,
    /// Bytes of the pending submission (sets how long the wait polls).
    bytes: u64,
    /// What `cmd` holds, recorded at buffer epoch `.0` (see [`Recorded`]).
    recorded: Option<(u64, Recorded)>,
}

/// A slot's device-to-host memcpys owed once its copy completes: (staging offset, host address,
/// length), inline for a few (a synchronous copy allocates nothing on its hot path).
type Outs = smallvec::SmallVec<[(u64, usize, u64); 4]>;
/// A batch's sizes from [`ramp`], inline for a short ramp.
type Sizes = smallvec::SmallVec<[u64; 8]>;
/// One submission's copies, inline for a few pieces.
type Batch = smallvec::SmallVec<[Op; 4]>;

/// The commands a slot's command buffer holds: the direction, the device buffer and the
/// regions (host buffer, host offset, device offset, length). A copy that would record the same
/// commands resubmits the command buffer as it is, skipping reset, begin, record and end (about
/// a microsecond of a 4 KiB copy's 14 on the H200) — but only while no buffer of the device has
/// been destroyed since it was recorded ([`Shared::buffer_epoch`]): a handle in it then still
/// names the same live buffer, since handles are only reused after a destroy.
#[derive(Debug, PartialEq, Eq)]
struct Recorded {
    dir: Dir,
    dev: vk::Buffer,
    regions: smallvec::SmallVec<[(vk::Buffer, u64, u64, u64); 4]>,
}

/// One copy context: a pool, slots, staging.
pub(crate) struct CopyCtx {
    queue: usize,
    /// A timeline semaphore every submission of the context signals, where the device has the
    /// feature: polling its value reads memory, where polling a fence is a driver call (on the
    /// H200 a 4 KiB copy took 14 us with fence polling; vkprobe's timeline poll, 12.4).
    timeline: Option<vk::Semaphore>,
    /// The last value submitted on `timeline`.
    next: u64,
    pool: vk::CommandPool,
    slots: Vec<Slot>,
    staging: Option<Bound>,
    chunk: u64,
}

/// Which queue a context submits to. Contexts `0..2n` (n copy-engine queues) submit to the
/// copy engines, round robin; the last two to the compute queue (all of them when the device
/// has no copy engines).
fn queue_of(l: &Live, ctx_index: usize) -> Result<&Queue> {
    let n = l.copy_queues.len();
    if ctx_index < 2 * n { Ok(&l.copy_queues[ctx_index % n]) } else { l.compute_queue() }
}

/// The contexts that submit to `kind`'s queue (see [`queue_of`]).
fn ctx_range(l: &Live, kind: super::QueueKind) -> std::ops::Range<usize> {
    let n = l.copy_queues.len();
    match kind {
        super::QueueKind::Copy if n > 0 => 0..2 * n,
        _ => 2 * n..l.copy_ctxs.len(),
    }
}

impl CopyCtx {
    fn new(s: &Shared, l: &Live, ctx_index: usize) -> Result<CopyCtx> {
        let q = queue_of(l, ctx_index)?;
        fault::check(Point::CreateCommandPool).map_err(|c| s.fail("vkCreateCommandPool", c))?;
        let pi = vk::CommandPoolCreateInfo::default().queue_family_index(q.family).flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: valid create info for a family the device was created with.
        let pool = unsafe { l.device.create_command_pool(&pi, None) }.map_err(|c| s.fail("vkCreateCommandPool", c))?;
        s.count_pool(1);
        let ctx = CopyCtx {
            queue: ctx_index,
            pool,
            timeline: None,
            next: 0,
            slots: Vec::new(),
            staging: None,
            chunk: s.options.staging_chunk as u64,
        };
        let made = super::object::make_or_undo(
            ctx,
            |ctx| {
                let n = s.options.staging_slots as u32;
                fault::check(Point::AllocateCommandBuffers).map_err(|c| s.fail("vkAllocateCommandBuffers", c))?;
                let ai = vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(n);
                // SAFETY: `pool` is ours and externally synchronized by the context's lock.
                let cmds = unsafe { l.device.allocate_command_buffers(&ai) }.map_err(|c| s.fail("vkAllocateCommandBuffers", c))?;
                if s.info.timeline_semaphore {
                    ctx.timeline = Some(create_timeline(s, l)?);
                }
                for cmd in cmds {
                    let fence = if ctx.timeline.is_some() {
                        vk::Fence::null()
                    } else {
                        fault::check(Point::CreateFence).map_err(|c| s.fail("vkCreateFence", c))?;
                        // SAFETY: plain fence creation.
                        let f = unsafe { l.device.create_fence(&vk::FenceCreateInfo::default(), None) }
                            .map_err(|c| s.fail("vkCreateFence", c))?;
                        s.count_fence(1);
                        f
                    };
                    ctx.slots.push(Slot { cmd, fence, value: 0, pending: None, bytes: 0, recorded: None });
                }
                Ok(())
            },
            // SAFETY: nothing was submitted; the objects are ours and destroyed once.
            |ctx| unsafe { ctx.destroy(s, l) },
        );
        made.map(|(ctx, ())| ctx)
    }

    /// # Safety
    /// No submission of this context may be pending (the device is idle, or every slot waited).
    pub(crate) unsafe fn destroy(self, s: &Shared, l: &Live) {
        for slot in self.slots.iter().filter(|slot| slot.fence != vk::Fence::null()) {
            // SAFETY: the fence is ours and not in use, per the contract.
            unsafe { l.device.destroy_fence(slot.fence, None) };
            s.count_fence(-1);
        }
        if let Some(t) = self.timeline {
            // SAFETY: ours, and no submission that signals it is pending, per the contract.
            unsafe { l.device.destroy_semaphore(t, None) };
            s.count_semaphore(-1);
        }
        // SAFETY: destroying the pool frees its command buffers; none is pending.
        unsafe { l.device.destroy_command_pool(self.pool, None) };
        s.count_pool(-1);
        if let Some(b) = self.staging {
            // SAFETY: the staging buffer is ours and idle.
            unsafe { s.release_bound(l, b.buffer, b.memory) };
        }
    }

    fn staging(&mut self, s: &Shared, l: &Live) -> Result<(vk::Buffer, SendPtr)> {
        if self.staging.is_none() {
            let size = self.chunk * self.slots.len() as u64;
            let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
            self.staging = Some(s.alloc_bound(l, size, usage, &memtype::pinned, true, false)?);
        }
        match self.staging {
            Some(Bound { buffer, ptr: Some(p), .. }) => Ok((buffer, p)),
            _ => Err(Error::unsupported("staging memory is not mapped")),
        }
    }
}

/// A locked copy context, created on first use.
pub(crate) struct CtxGuard<'a> {
    guard: MutexGuard<'a, Option<CopyCtx>>,
}

impl CtxGuard<'_> {
    fn ctx(&mut self) -> &mut CopyCtx {
        match self.guard.as_mut() {
            Some(c) => c,
            None => unreachable!("acquire fills the context before returning"),
        }
    }
}

/// Takes a free copy context on `kind`'s queue (or waits for one), creating it on first use:
/// the `prefer`red one if free, else the next free one. With `same_queue_first`, free contexts
/// on the preferred context's queue come before those on another queue (a copy that runs
/// beside the other direction keeps off that direction's copy engine while it can).
pub(crate) fn acquire<'a>(s: &Shared, l: &'a Live, prefer: usize, kind: super::QueueKind, same_queue_first: bool) -> Result<CtxGuard<'a>> {
    // A borrowed device has no queues and no copy contexts.
    l.compute_queue()?;
    let range = ctx_range(l, kind);
    let n = range.len();
    if n == 0 {
        return Err(Error::unsupported(super::NO_QUEUES));
    }
    let mut guard = None;
    for k in context_order(range.clone(), l.copy_queues.len(), prefer, same_queue_first) {
        if let Ok(g) = l.copy_ctxs[k].try_lock() {
            guard = Some((k, g));
            break;
        }
    }
    let (k, mut g) = match guard {
        Some(x) => x,
        None => (range.start + prefer % n, lock(&l.copy_ctxs[range.start + prefer % n])),
    };
    if g.is_none() {
        *g = Some(CopyCtx::new(s, l, k)?);
    }
    Ok(CtxGuard { guard: g })
}

/// The order in which [`acquire`] tries the contexts of `range` (indices into the device's
/// contexts; contexts `0..2n` alternate between the `n` copy-engine queues, see [`queue_of`]):
/// from `prefer` on, wrapping; with `same_queue_first`, those on `prefer`'s queue first.
fn context_order(range: std::ops::Range<usize>, copy_queues: usize, prefer: usize, same_queue_first: bool) -> impl Iterator<Item = usize> {
    let (start, len) = (range.start, range.len());
    let n = len.max(1);
    let queue = move |k: usize| if k < 2 * copy_queues { k % copy_queues } else { usize::MAX };
    let mine = queue(start + prefer % n);
    // No allocation: this runs on every synchronous copy.
    let from_prefer = move || (0..len).map(move |i| start + (prefer + i) % n);
    let same = from_prefer().filter(move |&k| !same_queue_first || queue(k) == mine);
    let other = from_prefer().filter(move |&k| same_queue_first && queue(k) != mine);
    same.chain(other)
}

/// The boundary the host side of a large DMA should start on ([`host_aligned`]).
pub(crate) const HOST_ALIGN: u64 = 256;

/// The smallest copy [`host_aligned`] splits.
const HOST_ALIGN_MIN: u64 = 64 << 10;

/// A copy of `len` bytes between host bytes at `host_off` of their buffer (whose offset 0 is
/// page-aligned: an import starts on a page, a driver block on its own) and `other_off` of
/// another buffer, as `(host_off, other_off, len)` regions whose bulk starts on a
/// [`HOST_ALIGN`] boundary of the host side: the head before it (less than 256 bytes) is a
/// region of its own. On the H200, a 256 MiB copy whose host bytes started 16 bytes past a
/// page (a `vec!`'s, glibc's header) moved 35-37 GB/s device-to-host (one run 48.5) and 47 the
/// other way, 64 bytes past 48, 256 or 2048 past 50-52; starting on a page boundary it moved
/// 51-52 both ways whatever the device offset (16 or 240: docs/PERFORMANCE.md, tenth
/// session). The DMA's speed follows the host address. Copies under 64 KiB stay whole.
pub(crate) fn host_aligned(host_off: u64, other_off: u64, len: u64) -> smallvec::SmallVec<[(u64, u64, u64); 2]> {
    let head = host_off.next_multiple_of(HOST_ALIGN) - host_off;
    if len < HOST_ALIGN_MIN || head == 0 || head >= len {
        return smallvec::smallvec![(host_off, other_off, len)];
    }
    smallvec::smallvec![(host_off, other_off, head), (host_off + head, other_off + head, len - head)]
}

/// How long to poll a fence before sleeping in vkWaitForFences. Polling cuts the wake-up latency
/// (GPU.md: 31 µs → 12 µs for a 4 KiB copy on the H200), and for mid-size copies waking late
/// costs bandwidth: on the H200 a 16 MiB copy went from 43.8 to 47.6 GB/s when the poll lasted
/// past its ~350 µs. So the poll follows the transfer's size, about its time at 10 GB/s,
/// clamped to [200 µs, 20 ms]; past that, a late wake-up costs under 0.2%. CPU drivers keep the
/// short poll: their copies run on the same cores a spinning thread would take.
pub(crate) fn spin_for(s: &Shared, bytes: u64) -> Duration {
    const MIN: Duration = Duration::from_micros(200);
    if s.info.device_type == crate::DeviceType::Cpu {
        return MIN;
    }
    Duration::from_nanos(bytes / 10).clamp(MIN, poll_cap())
}

/// The longest poll, 20 ms unless `VKHOST_POLL_MAX_US` says otherwise (read once; for
/// measuring the cost of a late wake-up on a given driver).
fn poll_cap() -> Duration {
    static CAP: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| {
        let us = std::env::var("VKHOST_POLL_MAX_US").ok().and_then(|s| s.trim().parse::<u64>().ok());
        Duration::from_micros(us.unwrap_or(20_000).max(200))
    })
}
/// A device that has not finished a copy in this long is treated as hung.
const WAIT_TIMEOUT_NS: u64 = 120_000_000_000;

/// A timeline semaphore at 0 (the device enabled the feature when it reports it).
pub(crate) fn create_timeline(s: &Shared, l: &Live) -> Result<vk::Semaphore> {
    fault::check(Point::CreateSemaphore).map_err(|c| s.fail("vkCreateSemaphore", c))?;
    let mut ti = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(0);
    let si = vk::SemaphoreCreateInfo::default().push_next(&mut ti);
    // SAFETY: valid create info; the timeline feature was enabled at device creation.
    let sem = unsafe { l.device.create_semaphore(&si, None) }.map_err(|c| s.fail("vkCreateSemaphore", c))?;
    s.count_semaphore(1);
    Ok(sem)
}

/// Waits until timeline `sem` reaches `value`: polls its counter for `spin`, then blocks.
pub(crate) fn wait_timeline(s: &Shared, l: &Live, sem: vk::Semaphore, value: u64, spin: Duration) -> Result<()> {
    fault::check(Point::WaitSemaphores).map_err(|c| s.fail("vkWaitSemaphores", c))?;
    let t = Instant::now();
    loop {
        // SAFETY: a live timeline semaphore of this device.
        match unsafe { l.device.get_semaphore_counter_value(sem) } {
            Ok(v) if v >= value => return Ok(()),
            Ok(_) if t.elapsed() < spin => std::hint::spin_loop(),
            Ok(_) => break,
            Err(c) => return Err(s.fail("vkGetSemaphoreCounterValue", c)),
        }
    }
    let (sems, vals) = ([sem], [value]);
    let wi = vk::SemaphoreWaitInfo::default().semaphores(&sems).values(&vals);
    // SAFETY: a live semaphore whose value was submitted for signalling.
    unsafe { l.device.wait_semaphores(&wi, WAIT_TIMEOUT_NS) }.map_err(|c| s.fail("vkWaitSemaphores", c))
}

/// Waits for a fence: polls for `spin`, then blocks.
pub(crate) fn wait_fence(s: &Shared, l: &Live, fence: vk::Fence, spin: Duration) -> Result<()> {
    fault::check(Point::WaitForFences).map_err(|c| s.fail("vkWaitForFences", c))?;
    let t = Instant::now();
    loop {
        // SAFETY: the fence is a live fence of this device.
        match unsafe { l.device.get_fence_status(fence) } {
            Ok(true) => return Ok(()),
            Ok(false) if t.elapsed() < spin => std::hint::spin_loop(),
            Ok(false) => break,
            Err(c) => return Err(s.fail("vkGetFenceStatus", c)),
        }
    }
    // SAFETY: as above.
    match unsafe { l.device.wait_for_fences(&[fence], true, WAIT_TIMEOUT_NS) } {
        Ok(()) => Ok(()),
        Err(c) => Err(s.fail("vkWaitForFences", c)),
    }
}

/// memcpy of a staged copy's bytes, split over up to `s`'s staging threads when large
/// ([`crate::par`]); `dir` says which side is the caller's memory: `ToHost` copies out of
/// staging into it, `ToDevice` into staging. Stores as [`staging_stores`] says; the workers
/// poll for the next batch as [`staging_spin`] says.
///
/// # Safety
/// `src` is readable and `dst` writable for `len` bytes, and they do not overlap.
pub(crate) unsafe fn par_copy(s: &Shared, dst: *mut u8, src: *const u8, len: usize, dir: Dir) {
    // SAFETY: the caller's contract.
    unsafe { crate::par::copy_with(dst, src, len, s.options.staging_threads, staging_stores(dir), staging_spin(s)) }
}

/// How long a staging worker polls for the next batch before it parks
/// (`OpenOptions::staging_spin`): as set, else [`STAGING_SPIN`] on GPUs and none on CPU
/// drivers, whose copies run on the cores a polling worker would take.
pub(crate) fn staging_spin(s: &Shared) -> Duration {
    match s.options.staging_spin {
        Some(d) => d,
        None if s.info.device_type == crate::DeviceType::Cpu => Duration::ZERO,
        None => STAGING_SPIN,
    }
}

/// The default of [`staging_spin`] on GPUs. On the H200 (docs/h200/s9/call1-spin.txt, two
/// processes each, 30 iterations) against no polling: pageable 16 MiB h2d 23.6-23.9 ->
/// 29.3-30.0 GB/s and d2h 27.5-29.0 -> 33.8-34.2, 4 MiB d2h 12.3-12.5 -> 20.9-26.1, 64 MiB h2d
/// 38.2 -> 40.1-40.5, 256 MiB-1 GiB within 0-4%; the bench process's user CPU time 25-26 s ->
/// 37 s. 100 us caught only the h2d batches of one copy, not the next copy.
const STAGING_SPIN: Duration = Duration::from_millis(1);

/// How staged copies write their destination: `VKHOST_STAGING_STORES=cached` (memcpy), `out`
/// (streaming stores for copies out of staging into the caller's memory) or `all` (into staging
/// too), read once.
pub(crate) fn staging_stores(dir: Dir) -> crate::par::Stores {
    use crate::par::Stores;
    static MODE: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    let mode = *MODE.get_or_init(|| match std::env::var("VKHOST_STAGING_STORES").as_deref().map(str::trim) {
        Ok("out") => 1,
        Ok("all") => 2,
        _ => 0,
    });
    match (mode, dir) {
        (2, _) | (1, Dir::ToHost) => Stores::Streaming,
        _ => Stores::Cached,
    }
}

/// The smallest batch of a ramp (see [`ramp`]).
const RAMP_MIN: u64 = 1 << 20;

/// Staged bytes per batch for a staged copy of `total` bytes: full chunks, except that a copy
/// of at least four chunks starts and ends with a ramp (chunk/16, /8, /4, /2 up, the same down,
/// each at least 1 MiB). The first DMA waits for the first memcpy (h2d) and the last memcpy
/// for the last DMA (d2h), so small first and last batches shorten the pipeline's fill and
/// drain: on the H200 a 256 MiB pageable copy with 16 MiB chunks spent about one chunk's time
/// (0.35 ms of 6) in them. An h2d copy of less than four chunks, which would be one or a few
/// full batches (one memcpy, then its DMA, then the next), is split into up to four equal
/// batches of at least 1 MiB, so the memcpy of one overlaps the DMA of the one before: on the
/// H200 8 MiB went from 16.0-16.7 to 19.6-22.7 GB/s, 16 MiB from 19.2-22.2 to 22.0-25.1, 32 MiB
/// from 25.0-28.8 to 27.1-31.5 (three runs each, alternated; docs/h200/s5/call6-pagesplit.txt).
/// Not d2h, whose DMAs are all submitted before the first memcpy anyway: there the split cost
/// 32 MiB 35.7-37.1 -> 22.4-27.6 GB/s. An empty schedule means full chunks throughout.
fn ramp(total: u64, chunk: u64, dir: Dir) -> Sizes {
    if total < 4 * chunk {
        let n = if dir == Dir::ToDevice { (total / RAMP_MIN).min(4) } else { 0 };
        if n < 2 {
            return Sizes::new();
        }
        // Equal parts, each a multiple of 64 KiB and at most a chunk; the last takes the rest.
        let each = total.div_ceil(n).next_multiple_of(64 << 10).min(chunk);
        let mut v = Sizes::new();
        cut(&mut v, total, each);
        return v;
    }
    let up: Sizes = [16, 8, 4, 2].iter().map(|d| chunk / d).filter(|&c| c >= RAMP_MIN).collect();
    let mid = total - 2 * up.iter().sum::<u64>();
    let mut v = up.clone();
    cut(&mut v, mid, chunk);
    v.extend(up.iter().rev().copied());
    v
}

/// Appends `total` cut into batches of `each`, the rest (if any) last.
fn cut(v: &mut Sizes, total: u64, each: u64) {
    v.extend(std::iter::repeat_n(each, (total / each) as usize));
    if total % each != 0 {
        v.push(total % each);
    }
}

fn batches(pieces: &[Piece], chunk: u64, dir: Dir) -> smallvec::SmallVec<[Batch; 4]> {
    let staged: u64 = pieces.iter().filter(|p| matches!(p.host, HostSide::Staged { .. })).map(|p| p.len).sum();
    let sched = ramp(staged, chunk, dir);
    let mut out = smallvec::SmallVec::<[Batch; 4]>::new();
    let mut cur = Batch::new();
    let mut used = 0u64;
    for p in pieces {
        match p.host {
            HostSide::Direct { buffer, offset, .. } => {
                cur.push(Op { dev_offset: p.dev_offset, len: p.len, src: OpSrc::Direct { buffer, offset } })
            }
            HostSide::Staged { addr } => {
                let mut done = 0;
                while done < p.len {
                    let cap = sched.get(out.len()).copied().unwrap_or(chunk);
                    if used == cap {
                        out.push(std::mem::take(&mut cur));
                        used = 0;
                        continue;
                    }
                    let n = (cap - used).min(p.len - done);
                    cur.push(Op {
                        dev_offset: p.dev_offset + done,
                        len: n,
                        src: OpSrc::Staged { addr: addr + done as usize, staging_off: used },
                    });
                    used += n;
                    done += n;
                }
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Bytes moved by an executed copy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Moved {
    pub direct: u64,
    pub staged: u64,
}

/// Runs a copy between device buffer `dev` and the host side of `pieces`, synchronously.
///
/// # Safety
/// Every `Staged` address range must be readable (h2d) or writable (d2h) for its length, and
/// every `Direct` buffer must stay alive until this returns; the device ranges must lie in `dev`.
pub(crate) unsafe fn execute(s: &Shared, l: &Live, dir: Dir, dev: vk::Buffer, pieces: &[Piece], prefer: usize) -> Result<Moved> {
    use super::QueueKind::{Compute, Copy};
    let bytes = pieces.iter().map(|p| p.len).sum();
    let kind = match s.options.copy_queue {
        Compute => Compute,
        Copy => s.copy_choice.pick(dir, bytes),
    };
    // A bulk copy the choice sends to the compute queue while one runs the other way goes to
    // the copy engines instead (see `Choice::enter_bulk` and `both_ways_route`).
    let counted = kind == Compute && s.options.copy_queue == Copy && s.copy_choice.is_bulk(dir, bytes) && l.copy_queues.len() >= 2;
    let bulk = counted.then(|| s.copy_choice.enter_bulk(dir));
    let (kind, prefer, same_queue_first) = match &bulk {
        Some(b) if b.both_ways => both_ways_route(dir),
        _ => (kind, prefer, false),
    };
    // SAFETY: the caller's contract.
    let r = unsafe { execute_in(s, l, dir, dev, pieces, prefer, kind, same_queue_first) };
    drop(bulk);
    r
}

/// Where a bulk copy that runs beside the other direction goes: the copy engines, to-device
/// copies preferring engine 0 and to-host copies engine 1 (contexts 0 and 1; see
/// [`queue_of`]), each trying its own engine's contexts before the other's.
fn both_ways_route(dir: Dir) -> (super::QueueKind, usize, bool) {
    (super::QueueKind::Copy, if dir == Dir::ToDevice { 0 } else { 1 }, true)
}

/// [`execute`] on `kind`'s queue, whatever the device's choice (the queue measurement); a
/// device without copy engines runs `Copy` on the compute queue.
///
/// # Safety
/// As for [`execute`].
pub(crate) unsafe fn execute_on(
    s: &Shared,
    l: &Live,
    dir: Dir,
    dev: vk::Buffer,
    pieces: &[Piece],
    prefer: usize,
    kind: super::QueueKind,
) -> Result<Moved> {
    // SAFETY: the caller's contract.
    unsafe { execute_in(s, l, dir, dev, pieces, prefer, kind, false) }
}

/// # Safety
/// As for [`execute`].
#[allow(clippy::too_many_arguments)]
unsafe fn execute_in(
    s: &Shared,
    l: &Live,
    dir: Dir,
    dev: vk::Buffer,
    pieces: &[Piece],
    prefer: usize,
    kind: super::QueueKind,
    same_queue_first: bool,
) -> Result<Moved> {
    let g = acquire(s, l, prefer, kind, same_queue_first)?;
    // Drains every slot however this call ends, unwinding included (a panic in a user's logger
    // as a wait fails): nothing may be in flight when we return, because the caller may then
    // free what the copy names (an import, a device buffer, its memory), and no slot may stay
    // pending with d2h memcpys into the caller's memory for a later copy to run.
    let mut run = Drain { s, l, g, queue: None, timeline: None, staging: None, armed: true };
    let ctx = run.g.ctx();
    let batches = batches(pieces, ctx.chunk, dir);
    let any_staged = pieces.iter().any(|p| matches!(p.host, HostSide::Staged { .. }));
    let staging = if any_staged { Some(ctx.staging(s, l)?) } else { None };
    let queue = queue_of(l, ctx.queue)?;
    let timeline = ctx.timeline;
    (run.queue, run.timeline, run.staging) = (Some(queue), timeline, staging.map(|x| x.1));
    let ctx = run.g.ctx();
    let nslots = ctx.slots.len();
    let mut moved = Moved::default();

    let mut result = Ok(());
    for (k, ops) in batches.iter().enumerate() {
        let si = k % nslots;
        if let Err(e) = complete(s, l, &mut ctx.slots[si], timeline, staging.map(|x| x.1)) {
            result = Err(e);
            break;
        }
        let base = si as u64 * ctx.chunk;
        let sync = timeline.map(|t| (t, ctx.next + 1));
        // SAFETY: per-op contracts are this function's own; see the helper.
        let r = unsafe { submit_batch(s, l, queue, &mut ctx.slots[si], dir, dev, ops, staging, base, sync) };
        if r.is_ok() && sync.is_some() {
            ctx.next += 1;
        }
        if let Err(e) = r {
            result = Err(e);
            break;
        }
        for op in ops {
            match op.src {
                OpSrc::Direct { .. } => moved.direct += op.len,
                OpSrc::Staged { .. } => moved.staged += op.len,
            }
        }
    }
    // Drain every slot, even after an error (and again from the drop if this unwinds).
    let drained = run.drain();
    run.armed = false;
    result.and(drained).map(|()| moved)
}

/// [`execute_in`]'s context, drained when dropped unless `armed` was cleared (after the
/// explicit [`Drain::drain`] of a call that did not unwind).
struct Drain<'a> {
    s: &'a Shared,
    l: &'a Live,
    g: CtxGuard<'a>,
    /// Unset until the call knows its queue: nothing was submitted before.
    queue: Option<&'a Queue>,
    timeline: Option<vk::Semaphore>,
    staging: Option<SendPtr>,
    armed: bool,
}

/// How long [`queue_idle`] and [`device_idle`] sleep between tries, at most.
const IDLE_RETRY_MAX: Duration = Duration::from_millis(10);

/// `try_wait` until it answers anything but out-of-memory, sleeping between tries (from 50 µs,
/// doubling to [`IDLE_RETRY_MAX`]). vkhost waits for a queue or device to go idle before it
/// frees what submitted work names; the spec lets those waits fail with an out-of-memory code,
/// which says nothing of whether work still runs. Taking that as idle would free memory (or
/// let a caller free pages) under a running copy, so the wait is made again: the result is
/// `Ok` (idle) or another code (device loss: nothing runs any more). It never logs: callers
/// in unwinding drops rely on that (the logger may be what panicked).
fn wait_idle(mut try_wait: impl FnMut() -> std::result::Result<(), vk::Result>) -> std::result::Result<(), vk::Result> {
    let mut pause = Duration::from_micros(50);
    loop {
        match try_wait() {
            Err(vk::Result::ERROR_OUT_OF_HOST_MEMORY | vk::Result::ERROR_OUT_OF_DEVICE_MEMORY) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(IDLE_RETRY_MAX);
            }
            r => return r,
        }
    }
}

/// `vkQueueWaitIdle`, made again after an out-of-memory answer ([`wait_idle`]): `Ok` once the
/// queue is idle, else the error (device loss), after which nothing runs on it.
///
/// # Safety
/// `queue` is a queue of `device`, externally synchronized by the caller (held under its lock).
pub(crate) unsafe fn queue_idle(device: &ash::Device, queue: vk::Queue) -> std::result::Result<(), vk::Result> {
    wait_idle(|| {
        fault::check(Point::QueueWaitIdle)?;
        // SAFETY: the caller's contract: a queue of `device`, externally synchronized.
        unsafe { device.queue_wait_idle(queue) }
    })
}

/// `vkDeviceWaitIdle`, made again after an out-of-memory answer, as [`queue_idle`].
///
/// # Safety
/// `device` is valid and every one of its queues is externally synchronized for the call's
/// length (nobody else submits to them).
pub(crate) unsafe fn device_idle(device: &ash::Device) -> std::result::Result<(), vk::Result> {
    wait_idle(|| {
        fault::check(Point::DeviceWaitIdle)?;
        // SAFETY: the caller's contract.
        unsafe { device.device_wait_idle() }
    })
}

impl Drain<'_> {
    /// Waits for every slot's submission and runs its d2h memcpys; the first error. A slot
    /// whose wait fails is waited for through its whole queue, and its memcpys are dropped.
    fn drain(&mut self) -> Result<()> {
        let (s, l, timeline, staging) = (self.s, self.l, self.timeline, self.staging);
        let Some(queue) = self.queue else { return Ok(()) };
        let mut result = Ok(());
        for slot in self.g.ctx().slots.iter_mut() {
            let r = complete(s, l, slot, timeline, staging);
            if r.is_err() && slot.pending.is_some() {
                // The fence wait failed with the submission possibly still running: wait for the
                // whole queue instead (on a really lost device this returns at once, and nothing
                // runs any more). The slot's d2h memcpys are dropped: the copy reports an error.
                let q = lock(&queue.raw);
                // SAFETY: the queue is externally synchronized by its lock.
                if let Err(c) = unsafe { queue_idle(&l.device, *q) } {
                    log::warn!("{}: vkQueueWaitIdle after a failed fence wait: {c:?}", s.id);
                }
                slot.pending = None;
            }
            if result.is_ok() {
                result = r;
            }
        }
        result
    }
}

impl Drop for Drain<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Unwinding out of `execute_in` (a panic from a wait's log line, say): nothing the
        // slots submitted may still run when the unwind reaches the caller. No wait that logs
        // (the logger could panic again, inside this drop: an abort): the queue goes idle,
        // quietly, and the slots' d2h memcpys are dropped (the caller gets the panic, not the
        // bytes).
        let Some(queue) = self.queue else { return };
        let slots = &mut self.g.ctx().slots;
        if slots.iter().any(|s| s.pending.is_some()) {
            let q = lock(&queue.raw);
            // SAFETY: the queue is externally synchronized by its lock. Its result is ignored:
            // on a lost device nothing runs any more either way.
            let _ = unsafe { queue_idle(&self.l.device, *q) };
            for s in slots.iter_mut() {
                s.pending = None;
            }
        }
    }
}

/// Waits for a slot's submission (its value on the context's `timeline`, else its fence), then
/// does its d2h memcpys.
fn complete(s: &Shared, l: &Live, slot: &mut Slot, timeline: Option<vk::Semaphore>, staging: Option<SendPtr>) -> Result<()> {
    if slot.pending.is_none() {
        return Ok(());
    }
    // Stay pending if the wait fails: the work may still be in flight, and the slot's command
    // buffer and staging must not be reused until a later wait succeeds.
    match timeline {
        Some(t) => wait_timeline(s, l, t, slot.value, spin_for(s, slot.bytes))?,
        None => wait_fence(s, l, slot.fence, spin_for(s, slot.bytes))?,
    }
    let Some(outs) = slot.pending.take() else { return Ok(()) };
    if let Some(st) = staging {
        for (soff, addr, len) in outs {
            // SAFETY: the fence signalled, so the device's writes to staging are complete and
            // (through the barrier to HOST) visible; `addr` is writable per `execute`'s contract.
            unsafe { par_copy(s, addr as *mut u8, st.0.as_ptr().add(soff as usize), len as usize, Dir::ToHost) };
        }
    }
    Ok(())
}

/// Orders what follows in `cmd` after earlier transfer and host accesses (same command buffer,
/// or earlier submissions on the same queue).
///
/// # Safety
/// `cmd` is in the recording state and externally synchronized by the caller.
pub(crate) unsafe fn transfer_barrier(d: &ash::Device, cmd: vk::CommandBuffer) {
    let b = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::TRANSFER_WRITE | vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::HOST_WRITE)
        .dst_access_mask(vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE);
    let (src, dst) = (vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::HOST, vk::PipelineStageFlags::TRANSFER);
    // SAFETY: the caller's contract.
    unsafe { d.cmd_pipeline_barrier(cmd, src, dst, vk::DependencyFlags::empty(), &[b], &[], &[]) };
}

/// [`transfer_barrier`] for streams that also dispatch kernels (compute-capable queues only):
/// orders transfers and compute-shader storage accesses both ways.
///
/// # Safety
/// As for [`transfer_barrier`]; the queue family supports COMPUTE.
pub(crate) unsafe fn compute_barrier(d: &ash::Device, cmd: vk::CommandBuffer) {
    let rw =
        vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE | vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE;
    let b = vk::MemoryBarrier::default().src_access_mask(rw | vk::AccessFlags::HOST_WRITE).dst_access_mask(rw);
    let work = vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::COMPUTE_SHADER;
    // SAFETY: the caller's contract.
    unsafe { d.cmd_pipeline_barrier(cmd, work | vk::PipelineStageFlags::HOST, work, vk::DependencyFlags::empty(), &[b], &[], &[]) };
}

/// [`host_read_barrier`] for command buffers with dispatches: transfer and shader writes → host.
///
/// # Safety
/// As for [`compute_barrier`].
pub(crate) unsafe fn compute_host_read_barrier(d: &ash::Device, cmd: vk::CommandBuffer) {
    let b = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::TRANSFER_WRITE | vk::AccessFlags::SHADER_WRITE)
        .dst_access_mask(vk::AccessFlags::HOST_READ);
    let src = vk::PipelineStageFlags::TRANSFER | vk::PipelineStageFlags::COMPUTE_SHADER;
    // SAFETY: the caller's contract.
    unsafe { d.cmd_pipeline_barrier(cmd, src, vk::PipelineStageFlags::HOST, vk::DependencyFlags::empty(), &[b], &[], &[]) };
}

/// The largest region vkhost records in one `VkBufferCopy`: 1 GiB. lavapipe (Mesa 22.3) copies
/// a region of 2 GiB or more wrongly (its copy box is 32-bit and signed: wrong bytes, or a
/// crash in its queue thread), and a buffer of its maxMemoryAllocationSize is exactly 2 GiB;
/// a larger copy becomes one region per GiB of the same vkCmdCopyBuffer, which costs a GPU
/// nothing measurable beside a copy of that size.
pub(crate) const COPY_REGION_MAX: u64 = 1 << 30;

#[cfg(test)]
thread_local! {
    /// `VkBufferCopy` regions this thread recorded through [`cmd_copy_buffer`] (unit tests
    /// count what was cut).
    pub(crate) static RECORDED_REGIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// One vkCmdCopyBuffer of `regions`, each cut into regions of at most `piece` bytes (at most
/// [`COPY_REGION_MAX`]: a larger `piece` counts as that); as given when none is larger (no
/// allocation on the hot path). `piece` is [`COPY_REGION_MAX`] for a staging chunk, else
/// `Shared::copy_piece` (`OpenOptions::copy_piece`). Where the list of cut regions cannot be
/// allocated, one vkCmdCopyBuffer per cut region instead (the same copies, no allocation).
///
/// # Safety
/// As for vkCmdCopyBuffer: `cmd` is recording; `src` and `dst` are live buffers, the regions
/// within them, in the usage and order the caller's barriers make valid.
pub(crate) unsafe fn cmd_copy_buffer(
    d: &ash::Device,
    cmd: vk::CommandBuffer,
    src: vk::Buffer,
    dst: vk::Buffer,
    regions: &[vk::BufferCopy],
    piece: u64,
) {
    let piece = piece.clamp(1, COPY_REGION_MAX);
    if regions.iter().all(|r| r.size <= piece) {
        #[cfg(test)]
        RECORDED_REGIONS.with(|c| c.set(c.get() + regions.len()));
        // SAFETY: the caller's contract.
        unsafe { d.cmd_copy_buffer(cmd, src, dst, regions) };
        return;
    }
    let mut cut = Vec::new();
    if cut.try_reserve_exact(regions.iter().map(|r| r.size.div_ceil(piece) as usize).sum()).is_ok() {
        cut.extend(cut_regions(regions, piece));
        #[cfg(test)]
        RECORDED_REGIONS.with(|c| c.set(c.get() + cut.len()));
        // SAFETY: the caller's contract; the cut regions are sub-ranges of `regions`, which do
        // not overlap each other.
        unsafe { d.cmd_copy_buffer(cmd, src, dst, &cut) };
        return;
    }
    for part in cut_regions(regions, piece) {
        #[cfg(test)]
        RECORDED_REGIONS.with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract; `part` is a sub-range of one of `regions`.
        unsafe { d.cmd_copy_buffer(cmd, src, dst, &[part]) };
    }
}

/// `regions` cut into regions of at most `piece` bytes (not 0), in order, covering the same
/// bytes.
fn cut_regions(regions: &[vk::BufferCopy], piece: u64) -> impl Iterator<Item = vk::BufferCopy> + '_ {
    regions.iter().flat_map(move |r| {
        (0..r.size.div_ceil(piece)).map(move |i| {
            let done = i * piece;
            vk::BufferCopy { src_offset: r.src_offset + done, dst_offset: r.dst_offset + done, size: (r.size - done).min(piece) }
        })
    })
}

/// Makes transfer writes in `cmd` visible to host reads once the submission is waited on.
///
/// # Safety
/// As for [`transfer_barrier`].
pub(crate) unsafe fn host_read_barrier(d: &ash::Device, cmd: vk::CommandBuffer) {
    let b = vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::TRANSFER_WRITE).dst_access_mask(vk::AccessFlags::HOST_READ);
    let (src, dst) = (vk::PipelineStageFlags::TRANSFER, vk::PipelineStageFlags::HOST);
    // SAFETY: the caller's contract.
    unsafe { d.cmd_pipeline_barrier(cmd, src, dst, vk::DependencyFlags::empty(), &[b], &[], &[]) };
}

/// Untimed submissions before [`floor`] times any.
pub(crate) const FLOOR_WARMUP: usize = 3;

/// Spreads threads over copy contexts: each thread's preferred context (the `prefer` of
/// [`execute`]).
pub(crate) fn thread_hint() -> usize {
    thread_local! { static HINT: usize = {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as usize
    }}
    HINT.with(|h| *h)
}

/// Seconds of each of `iters` submissions (after [`FLOOR_WARMUP`] untimed ones) of one
/// pre-recorded copy of `len` bytes in `dir` between `host` and `dev` (both from offset 0) on
/// one of `kind`'s contexts (this thread's, as for a synchronous copy): submit, then the wait
/// every synchronous copy does (a poll of the timeline or fence, then a block); on a device
/// without timelines the fence's reset is timed too, as a copy pays it. Device-to-host copies
/// end with the TRANSFER→HOST_READ barrier the spec requires before the host reads what the
/// device wrote, as every d2h copy of vkhost's does. Nothing else of a copy's work: no
/// planning, no lookup, no owners. What a synchronous copy of `len` bytes costs the device and
/// the driver alone (see [`super::Device::copy_floor`]).
///
/// The context's first command buffer is re-recorded; the next copy in that slot records its
/// own again. However this ends, unwinding included, nothing it submitted still runs when it
/// returns.
///
/// # Safety
/// `host` and `dev` are live buffers of this device, with TRANSFER_SRC and TRANSFER_DST usage
/// and at least `len` bytes, that stay alive until this returns and that no other work uses
/// meanwhile; `len` is not 0.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn floor(
    s: &Shared,
    l: &Live,
    dir: Dir,
    dev: vk::Buffer,
    host: vk::Buffer,
    len: u64,
    kind: super::QueueKind,
    iters: usize,
) -> Result<Vec<f64>> {
    let runs = iters.checked_add(FLOOR_WARMUP).ok_or_else(|| Error::invalid("copy_floor: too many iterations"))?;
    let mut t = Vec::new();
    t.try_reserve_exact(iters).map_err(|_| Error::OutOfHostMemory)?;
    let mut g = acquire(s, l, thread_hint(), kind, false)?;
    let ctx = g.ctx();
    let queue = queue_of(l, ctx.queue)?;
    let (timeline, staging) = (ctx.timeline, ctx.staging.and_then(|b| b.ptr));
    // An unlocked context is drained (`execute_in`); waited again in case, with its copy-outs.
    for slot in ctx.slots.iter_mut() {
        complete(s, l, slot, timeline, staging)?;
    }
    let d = &l.device;
    let slot = &mut ctx.slots[0];
    slot.recorded = None;
    let (src, dst) = match dir {
        Dir::ToDevice => (host, dev),
        Dir::ToHost => (dev, host),
    };
    // SAFETY: the command buffer is this locked context's and idle (every slot completed); the
    // buffers are live with the usage and size the caller promised.
    unsafe {
        d.reset_command_buffer(slot.cmd, vk::CommandBufferResetFlags::empty()).map_err(|c| s.fail("vkResetCommandBuffer", c))?;
        d.begin_command_buffer(slot.cmd, &vk::CommandBufferBeginInfo::default()).map_err(|c| s.fail("vkBeginCommandBuffer", c))?;
        cmd_copy_buffer(d, slot.cmd, src, dst, &[vk::BufferCopy { src_offset: 0, dst_offset: 0, size: len }], s.copy_piece());
        if dir == Dir::ToHost {
            host_read_barrier(d, slot.cmd);
        }
        d.end_command_buffer(slot.cmd).map_err(|c| s.fail("vkEndCommandBuffer", c))?;
    }
    /// Set while a submission has not been waited for: dropped so (an error return, or an
    /// unwind out of a wait's log line), the queue goes idle first, quietly (no logging: the
    /// logger may be what panicked), so that the caller may release the buffers.
    struct InFlight<'a> {
        l: &'a Live,
        queue: &'a Queue,
        armed: bool,
    }
    impl Drop for InFlight<'_> {
        fn drop(&mut self) {
            if self.armed {
                let q = lock(&self.queue.raw);
                // SAFETY: the queue is externally synchronized by its lock. The result is
                // ignored: on a lost device nothing runs any more either way.
                let _ = unsafe { queue_idle(&self.l.device, *q) };
            }
        }
    }
    let mut in_flight = InFlight { l, queue, armed: false };
    for i in 0..runs {
        let value = ctx.next + 1;
        let cmds = [slot.cmd];
        let (sig, vals) = ([timeline.unwrap_or_default()], [value]);
        let mut tsi = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&vals);
        let mut si = vk::SubmitInfo::default().command_buffers(&cmds);
        let t0 = Instant::now();
        if timeline.is_some() {
            si = si.signal_semaphores(&sig).push_next(&mut tsi);
        } else {
            // SAFETY: the slot's fence is idle (its last submission was waited on).
            unsafe { d.reset_fences(&[slot.fence]) }.map_err(|c| s.fail("vkResetFences", c))?;
        }
        fault::check(Point::QueueSubmit).map_err(|c| s.fail("vkQueueSubmit", c))?;
        {
            let q = lock(&queue.raw);
            // SAFETY: the queue is externally synchronized by its lock; the command buffer is
            // recorded and idle, the timeline value above every value the context submitted.
            unsafe { d.queue_submit(*q, &[si], slot.fence) }.map_err(|c| s.fail("vkQueueSubmit", c))?;
        }
        in_flight.armed = true;
        if timeline.is_some() {
            ctx.next = value;
        }
        match timeline {
            Some(sem) => wait_timeline(s, l, sem, value, spin_for(s, len))?,
            None => wait_fence(s, l, slot.fence, spin_for(s, len))?,
        }
        in_flight.armed = false;
        if i >= FLOOR_WARMUP {
            t.push(t0.elapsed().as_secs_f64());
        }
    }
    Ok(t)
}

/// Records (or reuses) and submits one batch of `ops` in `slot`: staged h2d bytes are copied
/// into the slot's staging range first; staged d2h bytes are owed to the slot (copied out when
/// it completes).
///
/// # Safety
/// The slot's previous submission completed (its command buffer and staging range are idle);
/// `staging`, when given, is this context's staging buffer, large enough for every op's
/// `base + staging_off` range (see [`batches`]); every staged host range of `ops` is readable
/// (h2d) or writable (d2h) until the slot completes; `dev` and every direct op's buffer stay
/// alive until then.
#[allow(clippy::too_many_arguments)]
unsafe fn submit_batch(
    s: &Shared,
    l: &Live,
    queue: &Queue,
    slot: &mut Slot,
    dir: Dir,
    dev: vk::Buffer,
    ops: &[Op],
    staging: Option<(vk::Buffer, SendPtr)>,
    base: u64,
    sync: Option<(vk::Semaphore, u64)>,
) -> Result<()> {
    let mut outs = Outs::new();
    if dir == Dir::ToDevice {
        for op in ops {
            if let (OpSrc::Staged { addr, staging_off }, Some((_, st))) = (op.src, staging) {
                // SAFETY: `addr` is readable for op.len (execute's contract); the staging slot is
                // idle (its previous submission was completed) and large enough (batches()).
                unsafe { par_copy(s, st.0.as_ptr().add((base + staging_off) as usize), addr as *const u8, op.len as usize, Dir::ToDevice) };
            }
        }
    }
    let d = &l.device;
    let cmd = slot.cmd;
    // The regions, and the d2h memcpys the slot owes once the copy completes.
    let mut regions = smallvec::SmallVec::<[(vk::Buffer, u64, u64, u64); 4]>::new();
    for op in ops {
        let (host_buf, host_off, direct) = match (op.src, staging) {
            (OpSrc::Direct { buffer, offset }, _) => (buffer, offset, true),
            (OpSrc::Staged { staging_off, addr }, Some((sb, _))) => {
                if dir == Dir::ToHost {
                    outs.push((base + staging_off, addr, op.len));
                }
                (sb, base + staging_off, false)
            }
            (OpSrc::Staged { .. }, None) => return Err(Error::unsupported("staged piece without staging memory")),
        };
        if direct {
            for (h, d, n) in host_aligned(host_off, op.dev_offset, op.len) {
                regions.push((host_buf, h, d, n));
            }
        } else {
            regions.push((host_buf, host_off, op.dev_offset, op.len));
        }
    }
    let want = Recorded { dir, dev, regions };
    // Read before comparing: a destroy after this read makes the next copy re-record, and none
    // of the buffers this copy names can be destroyed while it runs (the caller holds them).
    let epoch = s.buffer_epoch.load(std::sync::atomic::Ordering::Acquire);
    let piece = s.copy_piece();
    let reuse = reusable(&slot.recorded, epoch, &want);
    // SAFETY: the command buffer belongs to this context's pool, which we hold locked, and its
    // previous submission completed; every buffer named is alive for the submission. A reused
    // command buffer names exactly these buffers (same handles, recorded since the last destroy
    // of any buffer of this device, so the same objects) and is in the executable state (it was
    // recorded without ONE_TIME_SUBMIT and its submission completed).
    unsafe {
        if !reuse {
            slot.recorded = None;
            d.reset_command_buffer(cmd, vk::CommandBufferResetFlags::empty()).map_err(|c| s.fail("vkResetCommandBuffer", c))?;
            d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).map_err(|c| s.fail("vkBeginCommandBuffer", c))?;
            // No barrier before the copies: every earlier submission of this context was waited
            // on with its fence, and a submission's implicit host-to-device memory dependency
            // makes what that wait made available visible here (synchronization validation
            // agrees). It saved 1.5-2.5 us per small copy on the H200. Concurrent copies from
            // other threads to the same bytes are the caller's race, as with any memcpy.
            for &(host_buf, host_off, dev_off, len) in &want.regions {
                let (src, dst, region) = match dir {
                    Dir::ToDevice => (host_buf, dev, vk::BufferCopy { src_offset: host_off, dst_offset: dev_off, size: len }),
                    Dir::ToHost => (dev, host_buf, vk::BufferCopy { src_offset: dev_off, dst_offset: host_off, size: len }),
                };
                // A staging chunk stays one region (cutting it measured no faster on lavapipe).
                let staged = staging.is_some_and(|(sb, _)| sb == host_buf);
                cmd_copy_buffer(d, cmd, src, dst, &[region], if staged { COPY_REGION_MAX } else { piece });
            }
            if dir == Dir::ToHost {
                host_read_barrier(d, cmd);
            }
            d.end_command_buffer(cmd).map_err(|c| s.fail("vkEndCommandBuffer", c))?;
        }
        if sync.is_none() {
            d.reset_fences(&[slot.fence]).map_err(|c| s.fail("vkResetFences", c))?;
        }
    }
    if !reuse {
        slot.recorded = Some((epoch, want));
    }
    fault::check(Point::QueueSubmit).map_err(|c| s.fail("vkQueueSubmit", c))?;
    let cmds = [cmd];
    let (sig, vals) = match sync {
        Some((t, v)) => ([t], [v]),
        None => ([vk::Semaphore::null()], [0]),
    };
    let mut tsi = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&vals);
    let mut si = vk::SubmitInfo::default().command_buffers(&cmds);
    if sync.is_some() {
        si = si.signal_semaphores(&sig).push_next(&mut tsi);
    }
    {
        let q = lock(&queue.raw);
        // SAFETY: the queue is externally synchronized by its lock; the command buffer is
        // recorded, and the fence unsignalled or the timeline value above every value the
        // context submitted before.
        unsafe { d.queue_submit(*q, &[si], slot.fence) }.map_err(|c| s.fail("vkQueueSubmit", c))?;
    }
    if let Some((_, v)) = sync {
        slot.value = v;
    }
    slot.pending = Some(outs);
    slot.bytes = ops.iter().map(|o| o.len).sum();
    Ok(())
}

/// Whether a slot's recorded commands (`recorded`, at its epoch) are the copy `want` at buffer
/// epoch `epoch`: same commands, and no buffer destroyed since they were recorded.
fn reusable(recorded: &Option<(u64, Recorded)>, epoch: u64, want: &Recorded) -> bool {
    recorded.as_ref().is_some_and(|(e, r)| *e == epoch && r == want)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contexts `acquire` tries: from the preferred one, wrapping; with `same_queue_first`,
    /// the preferred context's copy engine first. Two engines: contexts 0..4 alternate between
    /// them, 4 and 5 are the compute queue's.
    #[test]
    fn contexts_are_tried_from_the_preferred_one_same_engine_first() {
        let order = |r: std::ops::Range<usize>, q: usize, p: usize, same: bool| context_order(r, q, p, same).collect::<Vec<_>>();
        assert_eq!(order(0..4, 2, 1, false), [1, 2, 3, 0]);
        assert_eq!(order(0..4, 2, 1, true), [1, 3, 2, 0]);
        assert_eq!(order(0..4, 2, 0, true), [0, 2, 1, 3]);
        assert_eq!(order(0..4, 2, 6, true), [2, 0, 3, 1], "prefer wraps");
        assert_eq!(order(4..6, 2, 1, true), [5, 4], "the compute queue's contexts: one queue");
        assert_eq!(order(0..2, 1, 1, true), [1, 0], "one engine");
        assert_eq!(order(0..2, 0, 0, true), [0, 1], "no engines: the compute queue's contexts");
        assert!(order(0..0, 0, 3, true).is_empty());
    }

    /// A bulk copy beside the other direction: the copy engines, uploads from engine 0's
    /// context and downloads from engine 1's, each keeping to its own engine first.
    #[test]
    fn both_ways_copies_take_one_engine_each() {
        assert_eq!(both_ways_route(Dir::ToDevice), (crate::QueueKind::Copy, 0, true));
        assert_eq!(both_ways_route(Dir::ToHost), (crate::QueueKind::Copy, 1, true));
        // With two engines the two preferred contexts are on different engines, and neither
        // direction's first try is the other's engine.
        let up: Vec<_> = context_order(0..4, 2, 0, true).collect();
        let down: Vec<_> = context_order(0..4, 2, 1, true).collect();
        assert_eq!((up[0] % 2, up[1] % 2, down[0] % 2, down[1] % 2), (0, 0, 1, 1));
    }

    /// Cut regions cover the same bytes in order, none above the piece, each source and
    /// destination offset moved together.
    #[test]
    fn cut_regions_cover_the_same_bytes_in_pieces() {
        let r = |src_offset, dst_offset, size| vk::BufferCopy { src_offset, dst_offset, size };
        let got: Vec<_> = cut_regions(&[r(100, 7, 10), r(0, 1000, 3)], 4).collect();
        let want = [r(100, 7, 4), r(104, 11, 4), r(108, 15, 2), r(0, 1000, 3)];
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!((g.src_offset, g.dst_offset, g.size), (w.src_offset, w.dst_offset, w.size));
        }
        let big: Vec<u64> = cut_regions(&[r(0, 0, 5 * COPY_REGION_MAX / 2)], COPY_REGION_MAX).map(|c| c.size).collect();
        assert_eq!(big, [COPY_REGION_MAX, COPY_REGION_MAX, COPY_REGION_MAX / 2]);
        assert_eq!(cut_regions(&[r(5, 6, 0)], 4).count(), 0, "an empty region cuts to none");
    }

    #[test]
    fn recorded_commands_are_reused_only_in_the_same_epoch() {
        let b = |raw: u64| <vk::Buffer as vk::Handle>::from_raw(raw);
        let rec = |dir| Recorded { dir, dev: b(1), regions: smallvec::smallvec![(b(2), 0, 64, 4096)] };
        let slot = Some((7, rec(Dir::ToDevice)));
        assert!(reusable(&slot, 7, &rec(Dir::ToDevice)));
        // A buffer destroyed since: the same handles may name other buffers now.
        assert!(!reusable(&slot, 8, &rec(Dir::ToDevice)));
        assert!(!reusable(&slot, 7, &rec(Dir::ToHost)));
        assert!(!reusable(&slot, 7, &Recorded { regions: smallvec::smallvec![(b(2), 0, 64, 4095)], ..rec(Dir::ToDevice) }));
        assert!(!reusable(&None, 7, &rec(Dir::ToDevice)));
    }

    #[test]
    fn batches_split_staged_bytes_by_chunk() {
        let pieces = [
            Piece { dev_offset: 0, len: 10, host: HostSide::Staged { addr: 1000 } },
            Piece { dev_offset: 10, len: 100, host: HostSide::Direct { buffer: vk::Buffer::null(), offset: 5, addr: 0 } },
            Piece { dev_offset: 110, len: 25, host: HostSide::Staged { addr: 2000 } },
        ];
        let b = batches(&pieces, 16, Dir::ToHost);
        // 10 staged + direct + 6 staged | 16 staged | 3 staged
        assert_eq!(b.len(), 3);
        let staged: Vec<u64> =
            b.iter().map(|ops| ops.iter().filter(|o| matches!(o.src, OpSrc::Staged { .. })).map(|o| o.len).sum()).collect();
        assert_eq!(staged, vec![16, 16, 3]);
        let total: u64 = b.iter().flatten().map(|o| o.len).sum();
        assert_eq!(total, 135);
        // Device offsets stay contiguous per piece.
        let last = b[2][0];
        assert_eq!(last.dev_offset, 110 + 22);
        assert!(matches!(last.src, OpSrc::Staged { addr: 2022, staging_off: 0 }));
    }

    #[test]
    fn large_staged_copies_ramp_up_and_down() {
        let m = 1u64 << 20;
        let up = Dir::ToDevice;
        // h2d below four chunks: up to four equal batches of at least 1 MiB, none above a chunk.
        assert_eq!(ramp(16 * m, 16 * m, up)[..], [4 * m; 4]);
        assert_eq!(ramp(3 * 16 * m, 16 * m, up)[..], [12 * m; 4]);
        assert_eq!(ramp(2 * m, 16 * m, up)[..], [m, m]);
        assert!(ramp(m, 16 * m, up).is_empty() && ramp(2 * m - 1, 16 * m, up).is_empty());
        let odd = ramp(5 * m + 12345, 16 * m, up);
        assert_eq!(odd.iter().sum::<u64>(), 5 * m + 12345);
        assert!(odd.len() == 4 && odd.iter().all(|&c| c > 0 && c <= 16 * m));
        let r7 = ramp(7 * m, 2 * m, up);
        assert_eq!(r7.iter().sum::<u64>(), 7 * m);
        assert!(r7.iter().all(|&c| c <= 2 * m), "never above a chunk: {r7:?}");
        // d2h below four chunks: full chunks.
        assert!(ramp(3 * 16 * m, 16 * m, Dir::ToHost).is_empty() && ramp(16 * m, 16 * m, Dir::ToHost).is_empty());
        let sizes: Vec<u64> = batches(&[Piece { dev_offset: 0, len: 16 * m, host: HostSide::Staged { addr: 1 << 40 } }], 16 * m, up)
            .iter()
            .map(|ops| ops.iter().map(|o| o.len).sum())
            .collect();
        assert_eq!(sizes, [4 * m; 4]);
        let r = ramp(256 * m + 4096, 16 * m, Dir::ToHost);
        assert_eq!(r[..4], [m, 2 * m, 4 * m, 8 * m]);
        assert_eq!(r[r.len() - 4..], [8 * m, 4 * m, 2 * m, m]);
        assert_eq!(r.iter().sum::<u64>(), 256 * m + 4096);
        assert!(r.iter().all(|&c| c > 0 && c <= 16 * m));
        // Chunks too small to ramp: no ramp steps, full chunks.
        assert!(ramp(1 << 30, 64 << 10, up).iter().all(|&c| c == 64 << 10));
        // batches() follows the schedule, staging offsets within each batch's slot.
        let pieces = [Piece { dev_offset: 0, len: 256 * m + 4096, host: HostSide::Staged { addr: 1 << 40 } }];
        let b = batches(&pieces, 16 * m, Dir::ToHost);
        let sizes: Vec<u64> = b.iter().map(|ops| ops.iter().map(|o| o.len).sum()).collect();
        assert_eq!(sizes[..], r[..]);
        let mut at = 0;
        for ops in &b {
            for o in ops {
                assert_eq!(o.dev_offset, at);
                assert!(matches!(o.src, OpSrc::Staged { staging_off, .. } if staging_off + o.len <= 16 * m));
                at += o.len;
            }
        }
    }

    #[test]
    fn all_direct_is_one_batch() {
        let pieces: Vec<Piece> = (0..5)
            .map(|i| Piece { dev_offset: i * 100, len: 100, host: HostSide::Direct { buffer: vk::Buffer::null(), offset: 0, addr: 0 } })
            .collect();
        assert_eq!(batches(&pieces, 16, Dir::ToHost).len(), 1);
    }

    #[test]
    fn large_copies_start_their_bulk_on_a_host_boundary() {
        assert_eq!(host_aligned(16, 0, 1 << 20).to_vec(), vec![(16, 0, 240), (256, 240, (1 << 20) - 240)]);
        assert_eq!(host_aligned(4096 + 16, 7, 1 << 20).to_vec(), vec![(4096 + 16, 7, 240), (4096 + 256, 247, (1 << 20) - 240)]);
        assert_eq!(host_aligned(512, 16, 1 << 20).to_vec(), vec![(512, 16, 1 << 20)], "already on a boundary");
        assert_eq!(host_aligned(16, 0, 4096).to_vec(), vec![(16, 0, 4096)], "small copies stay whole");
        for (h, o, n) in [(1u64, 3u64, 1u64 << 16), (255, 0, 1 << 17), (100, 100, (1 << 16) + 5)] {
            let parts = host_aligned(h, o, n);
            assert_eq!(parts.iter().map(|p| p.2).sum::<u64>(), n, "every byte once");
            assert_eq!(parts[0].0, h);
            assert_eq!(parts[0].1, o);
            assert_eq!(parts.last().unwrap().0 % HOST_ALIGN, 0);
            for w in parts.windows(2) {
                assert_eq!((w[0].0 + w[0].2, w[0].1 + w[0].2), (w[1].0, w[1].1), "contiguous on both sides");
            }
        }
    }

    #[test]
    fn par_copy_copies() {
        let src: Vec<u8> = (0..(9 << 20)).map(|i| (i * 7 % 251) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        // SAFETY: distinct vectors of equal length.
        unsafe {
            crate::par::copy_with(dst.as_mut_ptr(), src.as_ptr(), src.len(), 8, staging_stores(Dir::ToHost), Duration::from_micros(20))
        };
        assert_eq!(src, dst);
    }
}
