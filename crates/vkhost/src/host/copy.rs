//! Layer 4 of the host module: synchronous copies (plans against the registry, CPU stores into
//! mapped device memory, shared writes), the covering buffer a kernel binding resolves to, and
//! the byte counters. The raw seed API in `host/mod.rs` (layer 5) and the streams call these;
//! they take the layer-3 `DeviceMem`, never the public `DeviceBuffer`.

use super::registry::Kind;
use super::{CopyPath, registry};
use crate::OpenOptions;
use crate::device::Shared;
use crate::device::submit::{self, Dir, HostSide, Piece};
use crate::error::{Error, Result};
use crate::resource::{DeviceMem, Held};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes moved by the copies of every device (the process-wide `HostStats`).
pub(super) static DIRECT: AtomicU64 = AtomicU64::new(0);
pub(super) static STAGED: AtomicU64 = AtomicU64::new(0);
pub(super) static MAPPED: AtomicU64 = AtomicU64::new(0);
pub(super) static GATHERED: AtomicU64 = AtomicU64::new(0);

/// A host range as a kernel binding sees it: the covering import's (or pinned block's)
/// resource, held (see `crate::track`), and the range's byte offset in its buffer.
pub(crate) struct Cover {
    pub held: Held,
    pub offset: u64,
}

/// The live entry that covers all of `[addr, addr+len)` on `s` (preferring the one whose own
/// bytes contain `addr`, as [`super::find`] does), held. `None` when no single buffer covers it (no
/// entry, or a range that crosses two import pieces of one entry), and when another entry's
/// own bytes lie in the range (two registrations sharing a page): the launch's use is noted
/// on the one entry it holds, so an unregister of the other would not wait for it (copies
/// route each byte through its owner, `Registry::split`; a binding is one buffer).
pub(crate) fn cover(s: &Shared, addr: usize, len: usize) -> Option<Cover> {
    let reg = registry();
    let e = reg.find(s.id, addr, len)?;
    // Every byte some entry owns is `e`'s (bytes no one owns, the rest of a shared page, may
    // go through any entry covering them).
    let owned_by_e = |(r, o): &(std::ops::Range<usize>, Option<&registry::Entry<_>>)| {
        o.is_some_and(|o| std::ptr::eq(o, e) || !o.user.contains(&r.start))
    };
    if !reg.split(s.id, addr, len.max(1)).iter().all(owned_by_e) {
        return None;
    }
    let imports = e.cell.as_ref().filter(|c| c.alive())?;
    let off = addr - e.covered.start;
    if imports.left_in_part(off, e.covered.len()) < len.max(1) {
        return None;
    }
    let (res, in_part) = imports.at(off);
    let held = res.hold()?;
    Some(Cover { held, offset: in_part as u64 })
}

/// Bytes from `addr` to the end of the import that covers it on device `s` (one piece of a
/// registration or pinned block made of several), or `None` where nothing live covers `addr`.
/// A host range that starts at `addr` and is no longer than this is covered by one buffer
/// (what [`cover`] needs); the built-in kernels cut their launches there.
pub(crate) fn part_left(s: &Shared, addr: usize) -> Option<usize> {
    let reg = registry();
    let e = reg.find(s.id, addr, 1)?;
    let imports = e.cell.as_ref().filter(|c| c.alive())?;
    Some(imports.left_in_part(addr - e.covered.start, e.covered.len()))
}

/// # Safety
/// `src` readable for `len` bytes during the call.
/// `DeviceBuffer::write`'s copy: CPU stores into mapped device memory where the buffer has it,
/// `len` is at most `bar_write_max` and [`bar_write`] says so, else [`copy_to_device`]'s.
pub(crate) unsafe fn copy_to_device_impl(s: &Shared, src: *const u8, len: usize, dst: &DeviceMem, off: usize) -> Result<CopyPath> {
    // SAFETY: forwarded contract.
    unsafe { copy(s, Dir::ToDevice, src as usize, len, dst, off, true) }
}

/// # Safety
/// `dst` writable for `len` bytes during the call.
pub(crate) unsafe fn copy_to_host_impl(s: &Shared, src: &DeviceMem, off: usize, dst: *mut u8, len: usize) -> Result<CopyPath> {
    // SAFETY: forwarded contract.
    unsafe { copy(s, Dir::ToHost, dst as usize, len, src, off, false) }
}

/// A plan: pieces, and holds on the resources its direct pieces name (see `crate::track`):
/// while the plan lives, closing them waits.
pub(crate) struct Plan {
    /// Inline up to four pieces and two held owners: planning a synchronous copy allocates
    /// nothing (a copy that crosses more entries spills to the heap).
    pub pieces: smallvec::SmallVec<[Piece; 4]>,
    pub held: smallvec::SmallVec<[Held; 2]>,
    /// Whether a direct piece lies in a registration (the caller's memory, not vkhost's).
    pub registered: bool,
}

/// Splits a host range against the registry into direct pieces and staged gaps, holding every
/// resource a direct piece names.
pub(crate) fn plan(s: &Shared, addr: usize, len: usize, dev_off: u64) -> Plan {
    let reg = registry();
    let mut held = smallvec::SmallVec::<[Held; 2]>::new();
    let mut registered = false;
    let mut pieces = smallvec::SmallVec::<[Piece; 4]>::new();
    for (r, e) in reg.split(s.id, addr, len) {
        let staged = Piece { dev_offset: dev_off + (r.start - addr) as u64, len: r.len() as u64, host: HostSide::Staged { addr: r.start } };
        // Entries in the registry are never closed (removal comes first), but one whose device
        // was destroyed has no objects: stage around it.
        let Some((e, imports)) = e.and_then(|e| e.cell.as_ref().filter(|c| c.alive()).map(|c| (e, c))) else {
            pieces.push(staged);
            continue;
        };
        // One direct piece per import piece the range crosses.
        let mut at = r.start;
        while at < r.end {
            let off = at - e.covered.start;
            let n = imports.left_in_part(off, e.covered.len()).min(r.end - at);
            let (res, in_part) = imports.at(off);
            let have = held.iter().any(|h| Arc::ptr_eq(&h.0, res));
            let host = if have || res.hold().map(|h| held.push(h)).is_some() {
                registered |= e.kind == Kind::Registered;
                HostSide::Direct { buffer: res.obj.buffer, offset: in_part as u64, addr: at }
            } else {
                HostSide::Staged { addr: at }
            };
            pieces.push(Piece { dev_offset: dev_off + (at - addr) as u64, len: n as u64, host });
            at += n;
        }
    }
    Plan { pieces, held, registered }
}

pub(crate) fn path_of(pieces: &[Piece]) -> CopyPath {
    let direct = pieces.iter().any(|p| matches!(p.host, HostSide::Direct { .. }));
    let staged = pieces.iter().any(|p| matches!(p.host, HostSide::Staged { .. }));
    match (direct, staged) {
        (true, true) => CopyPath::Mixed,
        (false, true) => CopyPath::Staged,
        _ => CopyPath::Direct,
    }
}

pub(crate) fn check_host_range(addr: usize, len: usize) -> Result<()> {
    if len > 0 && addr == 0 {
        return Err(Error::invalid("null host pointer"));
    }
    addr.checked_add(len).ok_or_else(|| Error::invalid("host pointer + len overflows"))?;
    Ok(())
}

/// # Safety
/// The host range is readable (h2d) or writable (d2h) for `len` bytes during the call.
pub(super) unsafe fn copy(s: &Shared, dir: Dir, addr: usize, len: usize, buf: &DeviceMem, off: usize, stores: bool) -> Result<CopyPath> {
    // A destroyed device answers that first, whatever the arguments (issue 2).
    let l = s.live()?;
    buf.check_device(s)?;
    buf.check_range(off, len)?;
    check_host_range(addr, len)?;
    if len == 0 {
        return Ok(CopyPath::Direct);
    }
    // A borrowed device without queues refuses vkhost's own copies, CPU stores included (they
    // are the same operation to the caller); before the settle below, which could wait.
    l.compute_queue()?;
    // Stream work already enqueued on the buffer comes first (see `DeviceBuffer`).
    buf.res.settle(&l);
    // A wait in the settle that found the device lost (it waited the queue idle instead):
    // this copy answers as every later call does.
    if s.lost.load(Ordering::Relaxed) {
        return Err(Error::DeviceLost);
    }
    // Store threads to wake once the copy below is done, and how long they poll.
    let mut warm_after = None;
    if stores && dir == Dir::ToDevice && len <= s.options.bar_write_max {
        if let Some(map) = buf.res.obj.mapped().filter(|_| buf.res.obj.alive()) {
            let spin = submit::staging_spin(s);
            let cpu = s.info.device_type == crate::DeviceType::Cpu;
            match bar_write(len, s.options.staging_threads, spin, crate::par::polling(), cpu) {
                // Too few store threads polling for a write this size: the copy engine below
                // takes it, and the threads are woken for the next one after it (woken before,
                // they would take cores from the copy's submission and wait).
                BarWrite::Copy { warm } => warm_after = Some((warm, spin)),
                BarWrite::Store(how) => {
                    // One CPU writer per buffer at a time (see `DeviceMem::stores`).
                    let _g = buf.stores.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    // SAFETY: the source is readable for `len` (the caller's contract); the
                    // destination is the buffer's mapping at `off`, in range (checked above),
                    // alive while we hold `l` (teardown takes it exclusively) and `buf` (its
                    // owner); every device access to the buffer enqueued before this call
                    // completed (`settle`), and work submitted after it sees the stores
                    // (HOST_COHERENT memory; a submission makes earlier host writes visible). No
                    // other CPU access to the mapping runs meanwhile: vkhost's only CPU accesses
                    // to it are these stores, under `stores`. Host memory that is itself mapped
                    // device memory is fine: they are different bytes unless the caller passed
                    // the buffer's own mapping, which it cannot get. `store` returns when every
                    // part is done.
                    unsafe { store(how, map.as_ptr().add(off), addr as *const u8, len, s.options.staging_threads, spin) };
                    record_mapped(s, len as u64);
                    return Ok(CopyPath::Mapped);
                }
            }
        }
    }
    if stores
        && dir == Dir::ToDevice
        && s.options.bar_write_max > 0
        && len >= crate::OpenOptions::ASSIST_MIN
        && share_write(s.options.bar_assist, reading_now(s), slow_reads(s))
    {
        if let Some(map) = buf.res.obj.mapped().filter(|_| buf.res.obj.alive()) {
            // SAFETY: as for the stores above (the caller's contract for the source; the
            // mapping alive under `l` and `buf`, earlier device work settled); the copy-engine
            // side holds what it names until each of its copies returns.
            return unsafe { assisted_write(s, &l, addr, len, buf, off, map) };
        }
    }
    let p = plan(s, addr, len, off as u64);
    // Only `BarAssist::Bidir` asks who reads; the open-time probe's read is not a reader a
    // write should be shared beside.
    let counted = dir == Dir::ToHost && s.options.bar_assist == crate::BarAssist::Bidir && !crate::device::in_probe();
    let _reading = counted.then(|| Reading::start(s));
    // SAFETY: staged host ranges are the caller's (readable or writable per the contract); the
    // direct buffers are held (and owned through `p.held`) until this returns; device ranges
    // were range-checked. `execute` never returns with work in flight.
    let moved = unsafe { submit::execute(s, &l, dir, buf.raw(), &p.pieces, submit::thread_hint()) }?;
    record(s, moved.direct, moved.staged);
    if let Some((n, spin)) = warm_after {
        crate::par::warm(n, spin);
    }
    Ok(path_of(&p.pieces))
}

/// `OpenOptions::bar_assist`: a write into mapped device memory shared between the copy engine
/// (chunks from the back of the range, on this thread, each a normal planned copy: direct from
/// pinned or registered memory, else staged) and CPU stores (chunks from the front, on the
/// staging threads), until they meet. Returns when both sides are done; an error from the copy
/// engine's side is returned after the stores finished the rest of the range.
///
/// # Safety
/// As for the stores in [`copy`]: `[addr, addr+len)` readable during the call; `map` is `buf`'s
/// mapping, alive while `l` and `buf` are held; every device access to the buffer enqueued
/// before the call has completed; `[off, off+len)` is in range.
unsafe fn assisted_write(
    s: &Shared,
    l: &crate::device::Live,
    addr: usize,
    len: usize,
    buf: &DeviceMem,
    off: usize,
    map: std::ptr::NonNull<u8>,
) -> Result<CopyPath> {
    // One CPU writer per buffer at a time (see `DeviceMem::stores`).
    let _g = buf.stores.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // Front chunks small enough that the threads end together (1 MiB takes ~0.3 ms at the
    // ~3 GB/s one thread stores into the H200's BAR); copy-engine chunks of a quarter of the
    // write, at least 1 MiB (the ~12 us between two synchronous copies is then under 40% of a
    // chunk's time even at the smallest, and ~1% at 32 MiB) and at most 32 MiB, so the two
    // sides meet near where their speeds say.
    let threads = s.options.assist_threads;
    let split = crate::par::Split::new(len, (len / (16 * threads)).clamp(256 << 10, 1 << 20));
    let ce_chunk = (len / 4).clamp(1 << 20, 32 << 20);
    // The copy-engine side runs on a copy engine whatever its size, leaving the compute queue
    // (where synchronous reads of 4 MiB and more go on the H200) to the reads beside it. With
    // both on the compute queue, 2 of 6 processes on the H200 stalled every round of a 64 MiB
    // shared write beside a read (20-35 ms a round: stores and copy engine both slow); with the
    // write's chunks on a copy engine, none of 6 did, and the write beside the read went from
    // 27.5 to 29-30 GB/s (2026-12-02, examples/assist_rounds.rs; docs/PERFORMANCE.md).
    // (`copy_queue: Compute` keeps every synchronous copy on the compute queue, this one too.)
    let ce_queue = s.options.copy_queue;
    let mut moved = submit::Moved::default();
    let mut path: Option<CopyPath> = None;
    // Once the reads that made this write shared stop, the copy engine takes the rest at once:
    // alone it is the faster side.
    let slow = slow_reads(s);
    let chunk = || if share_write(s.options.bar_assist, reading_now(s), slow) { ce_chunk } else { usize::MAX };
    // The copy engine's first chunk is taken before the store threads are given the front, so
    // both sides take part in a shared write: this thread, preempted right after posting the
    // stores' jobs (few cores, the store threads spinning), could otherwise find the whole
    // range stored.
    let mut first = split.take_back(chunk());
    let back = || -> Result<()> {
        while let Some((at, n)) = first.take().or_else(|| split.take_back(chunk())) {
            let p = plan(s, addr + at, n, (off + at) as u64);
            // SAFETY: the source range is the caller's (readable); the direct buffers are held
            // by `p.held` until this iteration ends; the device range is within the checked
            // `[off, off+len)`; the stores never touch this chunk (taken once from the split).
            // `execute_on` never returns with work in flight.
            let m = unsafe { submit::execute_on(s, l, Dir::ToDevice, buf.raw(), &p.pieces, submit::thread_hint(), ce_queue) }?;
            moved.direct += m.direct;
            moved.staged += m.staged;
            let this = path_of(&p.pieces);
            path = Some(match path {
                Some(q) if q != this => CopyPath::Mixed,
                _ => this,
            });
        }
        Ok(())
    };
    // SAFETY: the destination is the buffer's mapping at `off` for `len` bytes (in range, alive
    // under `l` and `buf`, no other CPU writer under `stores`, earlier device work settled); the
    // source is readable for `len`; `back` touches only the chunks it takes, through the copy
    // engine. `copy_front` returns after every front chunk is stored.
    let r = unsafe {
        crate::par::copy_front(
            map.as_ptr().add(off),
            addr as *const u8,
            &split,
            threads,
            crate::par::Stores::Cached,
            std::time::Duration::ZERO,
            back,
        )
    };
    let stored = split.front_taken() as u64;
    crate::par::Split::recycle(split);
    record(s, moved.direct, moved.staged);
    record_mapped(s, stored);
    r?;
    // The copy engine's path if it did all, else the stores took part.
    Ok(match path {
        Some(p) if stored == 0 => p,
        _ => CopyPath::Mapped,
    })
}

/// The parts a write into mapped device memory is stored in when the store threads are
/// polling: 64 KiB, ~2 us of one thread's stores into the H200's BAR. The bench's own store
/// pool (8 polling threads, 64 KiB parts) moved 256 KiB-1 MiB at 33-34 GB/s there (7.8 us at
/// 256 KiB, 31.6 at 1 MiB), where one thread takes 15-17 us at 256 KiB and a copy 20 and 34.
pub(crate) const BAR_PART: usize = 64 << 10;

/// The most threads (the caller's included) that store one write into mapped device memory:
/// 4-16 threads all reached 29-34 GB/s into the H200's BAR (the write side of the link), so
/// more only cost CPU.
pub(crate) const BAR_THREADS: usize = 8;

/// How a write of at most `bar_write_max` bytes into mapped device memory runs ([`bar_write`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BarWrite {
    /// CPU stores.
    Store(BarStores),
    /// Not stores this time (a submitted copy instead); `warm` threads are woken to poll, so
    /// that a next write this size finds them.
    Copy { warm: usize },
}

/// How the CPU stores of a write into mapped device memory are split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BarStores {
    /// Stores over the staging threads in [`crate::par::MIN_PART`] parts (`par::copy`: a write
    /// under two parts on the caller alone), workers woken per copy: on CPU drivers, whose
    /// staging threads never poll by default and whose copies are a driver thread's memcpy.
    Spread,
    /// Stores by the calling thread alone; then `warm` threads are woken to poll for the next
    /// write (0: none needed).
    Solo { warm: usize },
    /// Stores in [`BAR_PART`] parts on `threads` threads, the caller's included: enough of
    /// them were polling.
    Split { threads: usize },
}

/// Decides [`BarWrite`] for a write of `len` bytes, from the staging threads' count and
/// polling time (`staging_spin`), how many pool workers poll right now, and whether the device
/// is a CPU driver (`cpu`: without polling, stores spread over parked threads, which beat its
/// copies; with it, as on GPUs). A parked worker
/// takes tens of microseconds to wake, longer than a 256 KiB-1 MiB write's stores take on
/// polling threads (8-32 us), so a write only splits onto threads that already poll (three
/// quarters of those it would use at least: a late one finds its share taken by others); one that
/// would split but finds them parked wakes them for the next (they poll for `spin`) and runs
/// alone (up to [`OpenOptions::BAR_SOLO_MAX`]) or as a submitted copy (below
/// [`OpenOptions::BAR_PARKED_SPLIT_MIN`], from where the wake-up is a small part of the stores).
/// Where no thread would help (one staging thread, or a GPU whose staging threads never poll:
/// `staging_spin` 0), a write between the two is a submitted copy: one thread's stores lose to
/// it there (15-17 us at 256 KiB on the H200, so ~60 at 1 MiB against a copy's 34), and so did
/// a split onto parked threads (39-43 us at 1 MiB).
pub(crate) fn bar_write(len: usize, staging_threads: usize, spin: std::time::Duration, polling: usize, cpu: bool) -> BarWrite {
    if spin.is_zero() && cpu {
        return BarWrite::Store(BarStores::Spread);
    }
    let threads = (len / BAR_PART).clamp(1, staging_threads.clamp(1, BAR_THREADS));
    let workers = threads - 1;
    if workers == 0 || spin.is_zero() {
        // Nobody polls now or will: the caller's stores, a split onto parked threads where the
        // wake-up is a small part, or a copy (see above).
        if len <= OpenOptions::BAR_SOLO_MAX || workers == 0 && len >= OpenOptions::BAR_PARKED_SPLIT_MIN {
            BarWrite::Store(BarStores::Solo { warm: 0 })
        } else if len >= OpenOptions::BAR_PARKED_SPLIT_MIN {
            BarWrite::Store(BarStores::Split { threads })
        } else {
            BarWrite::Copy { warm: 0 }
        }
    } else if 4 * polling >= 3 * workers || len >= OpenOptions::BAR_PARKED_SPLIT_MIN {
        BarWrite::Store(BarStores::Split { threads })
    } else if len <= OpenOptions::BAR_SOLO_MAX {
        BarWrite::Store(BarStores::Solo { warm: workers })
    } else {
        BarWrite::Copy { warm: workers }
    }
}

/// Stores `len` bytes from `src` to `dst` as `how` says, waking threads to poll for `spin`
/// where `how` asks.
///
/// # Safety
/// `src` is readable and `dst` writable for `len` bytes until this returns, and they do not
/// overlap.
unsafe fn store(how: BarStores, dst: *mut u8, src: *const u8, len: usize, staging_threads: usize, spin: std::time::Duration) {
    match how {
        BarStores::Spread => {
            // SAFETY: the caller's contract.
            unsafe { crate::par::copy(dst, src, len, staging_threads) }
        }
        BarStores::Solo { warm } => {
            // SAFETY: the caller's contract.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
            crate::par::warm(warm, spin);
        }
        BarStores::Split { threads } => {
            // SAFETY: the caller's contract.
            unsafe { crate::par::copy_in_parts(dst, src, len, threads, crate::par::Stores::Cached, spin, BAR_PART) }
        }
    }
}

/// What [`crate::BarAssist`] decides for a large write into mapped memory: share it between the
/// copy engine and CPU stores, given how long ago the device was last seen reading (`Some(0)`:
/// a device-to-host copy is running now; `None`: none since the device opened) and whether the
/// measurement at open found the GPU reading host memory slowly.
pub(crate) fn share_write(mode: crate::BarAssist, since_read: Option<std::time::Duration>, slow_reads: bool) -> bool {
    match mode {
        crate::BarAssist::Always => true,
        crate::BarAssist::Off => false,
        crate::BarAssist::Bidir => since_read.is_some_and(|d| d < crate::OpenOptions::ASSIST_RECENT),
        crate::BarAssist::Auto => slow_reads,
    }
}

/// Whether `BarAssist::Auto` shares: the copy-queue choice in use (measured at open, or by
/// `Device::measure_copy_queues` since) reads host memory slowly
/// (`CopyQueues::reads_host_slowly`). Lock-free.
fn slow_reads(s: &Shared) -> bool {
    s.options.bar_assist == crate::BarAssist::Auto && s.copy_choice.reads_host_slowly()
}

/// This thread's number (from 1: 0 in `read_thread` is "nobody"), to tell whose read ended
/// last.
fn thread_number() -> u64 {
    submit::thread_hint() as u64 + 1
}

/// How long ago the device was last reading on another thread (zero while a synchronous
/// device-to-host copy runs: the caller, writing, is not the one reading), for [`share_write`].
/// A read this thread finished before its write does not count: nothing runs beside the write.
fn reading_now(s: &Shared) -> Option<std::time::Duration> {
    if s.reading.load(Ordering::Acquire) > 0 {
        return Some(std::time::Duration::ZERO);
    }
    if s.read_thread.load(Ordering::Relaxed) == thread_number() {
        return None;
    }
    match s.read_ended.load(Ordering::Relaxed) {
        0 => None,
        t => Some(std::time::Duration::from_nanos(crate::device::now_ns().saturating_sub(t))),
    }
}

/// A synchronous device-to-host copy in progress, counted in `Shared::reading` (a heuristic for
/// [`share_write`]: a leaked one only makes writes shared).
struct Reading<'a>(&'a Shared);

impl<'a> Reading<'a> {
    fn start(s: &'a Shared) -> Reading<'a> {
        s.reading.fetch_add(1, Ordering::Relaxed);
        Reading(s)
    }
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        // The end first: a writer that sees no read running then sees how recent it was.
        self.0.read_ended.store(crate::device::now_ns(), Ordering::Relaxed);
        self.0.read_thread.store(thread_number(), Ordering::Relaxed);
        self.0.reading.fetch_sub(1, Ordering::Release);
    }
}

/// Counts a write done by CPU stores into mapped device memory.
fn record_mapped(s: &Shared, bytes: u64) {
    if crate::device::in_probe() {
        return;
    }
    MAPPED.fetch_add(bytes, Ordering::Relaxed);
    s.mapped_bytes.fetch_add(bytes, Ordering::Relaxed);
}

/// Counts bytes a stream moved through its scratch buffer (`OpenOptions::gather_regions`).
pub(crate) fn record_gathered(s: &Shared, bytes: u64) {
    if bytes == 0 || crate::device::in_probe() {
        return;
    }
    GATHERED.fetch_add(bytes, Ordering::Relaxed);
    s.gathered_bytes.fetch_add(bytes, Ordering::Relaxed);
}

pub(crate) fn record(s: &Shared, direct: u64, staged: u64) {
    if crate::device::in_probe() {
        return;
    }
    DIRECT.fetch_add(direct, Ordering::Relaxed);
    STAGED.fetch_add(staged, Ordering::Relaxed);
    s.direct_bytes.fetch_add(direct, Ordering::Relaxed);
    s.staged_bytes.fetch_add(staged, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::{BAR_PART, BAR_THREADS, BarStores, BarWrite, bar_write, share_write, slow_reads};
    use crate::{BarAssist, OpenOptions};
    use std::time::Duration;

    /// Writes into mapped device memory split only onto polling threads (or when large enough
    /// that waking them is a small part); parked threads are woken by writes that would have
    /// split, never by those that would not; CPU drivers (no polling) keep the spread stores.
    #[test]
    fn bar_writes_split_only_onto_polling_threads() {
        use BarStores::{Solo, Split, Spread};
        use BarWrite::{Copy, Store};
        let spin = Duration::from_millis(1);
        let solo = OpenOptions::BAR_SOLO_MAX;
        let big = OpenOptions::BAR_PARKED_SPLIT_MIN;
        assert!(solo < big);
        // (len, staging threads, polling) -> decision
        let cases = [
            (4096, 14, 0, Store(Solo { warm: 0 })),
            (2 * BAR_PART - 1, 14, 0, Store(Solo { warm: 0 })),
            (2 * BAR_PART, 14, 0, Store(Solo { warm: 1 })),
            (2 * BAR_PART, 14, 1, Store(Split { threads: 2 })),
            (solo, 14, 0, Store(Solo { warm: 3 })),
            (solo, 14, 2, Store(Solo { warm: 3 })),
            (solo, 14, 3, Store(Split { threads: 4 })),
            (3 * BAR_PART, 14, 1, Store(Solo { warm: 2 })),
            (3 * BAR_PART, 14, 2, Store(Split { threads: 3 })),
            (solo + 4096, 14, 0, Copy { warm: 3 }),
            (1 << 20, 14, 5, Copy { warm: BAR_THREADS - 1 }),
            (1 << 20, 14, 6, Store(Split { threads: BAR_THREADS })),
            (1 << 20, 14, 7, Store(Split { threads: BAR_THREADS })),
            (1 << 20, 14, 40, Store(Split { threads: BAR_THREADS })),
            (1 << 20, 2, 0, Copy { warm: 1 }),
            (1 << 20, 2, 1, Store(Split { threads: 2 })),
            // One staging thread: nothing to split onto; stores alone only where they win.
            (1 << 20, 1, 0, Copy { warm: 0 }),
            (solo, 1, 0, Store(Solo { warm: 0 })),
            (big, 1, 0, Store(Solo { warm: 0 })),
            (big - 4096, 14, 0, Copy { warm: BAR_THREADS - 1 }),
            (big, 14, 0, Store(Split { threads: BAR_THREADS })),
            (1 << 30, 14, 0, Store(Split { threads: BAR_THREADS })),
        ];
        for (len, threads, polling, want) in cases {
            assert_eq!(bar_write(len, threads, spin, polling, false), want, "len {len}, threads {threads}, polling {polling}");
            // A CPU driver that polls (`staging_spin` set) decides as a GPU does.
            assert_eq!(bar_write(len, threads, spin, polling, true), want, "cpu: len {len}, threads {threads}, polling {polling}");
        }
        // CPU drivers without polling (their default): stores spread over parked threads.
        for len in [1, solo, 1 << 20, 1 << 30] {
            assert_eq!(bar_write(len, 14, Duration::ZERO, 0, true), Store(Spread), "len {len} without polling");
        }
        // GPUs without polling (`staging_spin` 0): the caller alone up to BAR_SOLO_MAX, a copy
        // between, split onto parked threads from BAR_PARKED_SPLIT_MIN; nobody is woken.
        for (len, want) in [
            (4096, Store(Solo { warm: 0 })),
            (solo, Store(Solo { warm: 0 })),
            (solo + 4096, Copy { warm: 0 }),
            (big - 1, Copy { warm: 0 }),
            (big, Store(Split { threads: BAR_THREADS })),
        ] {
            assert_eq!(bar_write(len, 14, Duration::ZERO, 40, false), want, "gpu without polling: len {len}");
        }
    }

    #[test]
    fn bar_assist_shares_beside_recent_reads_only() {
        let recent = OpenOptions::ASSIST_RECENT;
        for since in [None, Some(Duration::ZERO), Some(recent / 2), Some(recent), Some(recent * 100)] {
            for slow in [false, true] {
                assert!(share_write(BarAssist::Always, since, slow));
                assert!(!share_write(BarAssist::Off, since, slow));
                assert_eq!(share_write(BarAssist::Bidir, since, slow), since.is_some_and(|d| d < recent), "{since:?}");
                // Auto: on a host whose GPU reads host memory slowly only, reads or not.
                assert_eq!(share_write(BarAssist::Auto, since, slow), slow, "{since:?}");
            }
        }
        assert_eq!(BarAssist::default(), BarAssist::Auto);
    }

    /// `BarAssist::Auto` shares a large write into mapped device memory between the copy
    /// engine and CPU stores on a device whose copy queues, measured at open, read host memory
    /// below `CopyQueues::SLOW_READS` of the rate they write it, and never elsewhere. lavapipe
    /// measures nothing (one kind of queue), so the figures are set here: a capped H100 host's
    /// (34 / 52 GB/s) and a full-speed one's (51 / 52).
    #[test]
    fn auto_assist_shares_large_writes_only_where_host_reads_are_slow() {
        use crate::{CopyQueues, QueueFigures};
        use std::sync::atomic::Ordering;
        let validation = crate::device::validation_layer_installed();
        // `bar_write_max` set: a raised one from the environment would store a whole write.
        let opts = OpenOptions {
            validation,
            bar_writes: crate::BarWrites::On,
            bar_assist: BarAssist::Auto,
            bar_write_max: 1 << 20,
            ..Default::default()
        };
        let dev = match crate::Device::open_default_with(&opts) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("skipped: no Vulkan device ({e})");
                return;
            }
        };
        if !dev.shared.mapped_buffers {
            eprintln!("skipped: the device's buffers are not mapped (BarWrites::On found no host-visible VRAM)");
            return;
        }
        let n = 4 * OpenOptions::ASSIST_MIN;
        let buf = dev.alloc_buffer(n).unwrap();
        let mut src = crate::PinnedBuffer::new(&dev, n).unwrap();
        let mut back = vec![0u8; n];
        let figures =
            |h2d: f64| QueueFigures { bulk_to_device_gbps: h2d, bulk_to_host_gbps: 52.0, small_to_device_us: 12.0, small_to_host_us: 12.0 };
        let stored = || dev.shared.mapped_bytes.load(Ordering::Relaxed);
        for (h2d, slow) in [(51.0, false), (34.0, true)] {
            let q = CopyQueues::from_figures(figures(h2d), figures(h2d));
            assert_eq!(q.reads_host_slowly(), slow);
            dev.shared.copy_choice.set(q);
            assert_eq!(slow_reads(&dev.shared), slow);
            // Up to 20 writes, until one stores: a shared write's stores may (rarely, on a
            // loaded machine) find the copy engine done with the range; a write that is not
            // shared never stores, in any of them.
            let mut took = 0;
            for k in 0..20u8 {
                if took > 0 {
                    break;
                }
                let data: Vec<u8> = (0..n).map(|i| (i as u8) ^ k ^ (h2d as u8)).collect();
                src.copy_from_slice(&data);
                let before = stored();
                buf.write(0, &src).unwrap();
                took += stored() - before;
                buf.read(0, &mut back).unwrap();
                assert!(back == data, "write {k} at h2d {h2d} GB/s did not land");
            }
            assert_eq!(took > 0, slow, "h2d {h2d} GB/s against 52: {took} bytes stored by CPU threads");
        }
        assert_eq!(dev.validation_errors(), 0);
    }
}
