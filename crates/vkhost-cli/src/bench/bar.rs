//! The `bar` path: memcpy into mapped DEVICE_LOCAL|HOST_VISIBLE memory (the BAR window, or UMA
//! memory), and reads out of it (streaming loads by default, `--bar-reads`), capped by
//! `--bar-read-cap`.
//!
//! Writes and reads of 128 KiB and more are split over `--bar-threads` threads ([`Stores`]):
//! one thread's stores into the H200's BAR reach about 9 GB/s sustained, 4-16 threads 29-31
//! GB/s (the write side of the link), so one thread would measure the CPU, not the BAR.

use super::{Ctx, DirKind, flush_cache, measure_with, point, point::pattern, point::runs_within};
use crate::devices::anyhow_free::Result;
use crate::stats::size_label;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use vkhost::{Device, vk};

/// The smallest share of a write one store thread takes.
const STORE_PART_MIN: usize = 64 << 10;

/// The smallest share of a read one thread takes: as for writes, so reads and writes start
/// the spinning threads at the same size (starting them at a smaller read left them spinning
/// beside the small writes of the next sizes, and on a 2-core machine a read's own threads
/// waited for CPU behind them: 256 KiB took 4 ms). Reads of 16-64 KiB would gain from threads
/// too (64 KiB: 106 us from one thread, 22 from eight on the H200).
const READ_PART_MIN: usize = STORE_PART_MIN;

/// `dst.copy_from_slice(src)` for a `src` in write-combining memory (the BAR window): on
/// x86-64 with SSE4.1, streaming loads (`movntdqa`), four 64-byte lines per round, so the CPU
/// keeps several line fills in flight instead of one uncached load at a time; elsewhere a
/// memcpy. On ordinary (write-back) memory, as lavapipe's, streaming loads are plain loads.
pub(super) fn read_stream(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    #[cfg(target_arch = "x86_64")]
    if streaming_loads() {
        // SAFETY: the CPU has SSE4.1 (checked just above); the slices are valid and of one length.
        unsafe { read_stream_sse41(dst, src) };
        return;
    }
    dst.copy_from_slice(src);
}

/// Whether [`read_stream`] reads with streaming loads on this CPU (x86-64 with SSE4.1).
fn streaming_loads() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("sse4.1");
    #[cfg(not(target_arch = "x86_64"))]
    return false;
}

/// # Safety
/// The CPU must support SSE4.1; `dst.len() == src.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.1")]
unsafe fn read_stream_sse41(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::{__m128i, _mm_storeu_si128, _mm_stream_load_si128};
    // Four lines a round: on the H200's Xeon, 8, 16 or 32 lines a round read no faster (one
    // thread, 4 KiB: 7.1 us at 4 lines, 16.4 at 8, 16.2 at 16, 12.2 at 32; 2026-12-04).
    const LOADS: usize = 16;
    let round = 16 * LOADS;
    // Streaming loads may be served from a streaming-load buffer filled by an earlier read of
    // the same line; a fence first, as Intel advises, so a read sees what the device wrote
    // since the last one.
    std::arch::x86_64::_mm_mfence();
    let n = src.len();
    // Up to the first 16-byte boundary of the source by memcpy (movntdqa needs aligned loads).
    let head = src.as_ptr().align_offset(16).min(n);
    dst[..head].copy_from_slice(&src[..head]);
    let mut i = head;
    while i + round <= n {
        let mut v = [[0u8; 16]; LOADS];
        for (k, w) in v.iter_mut().enumerate() {
            // SAFETY: `src[i + 16k .. i + 16k + 16]` is in bounds (`i + round <= n`) and 16-byte
            // aligned (`i` starts at the boundary and moves in multiples of 16); SSE4.1 is
            // enabled for this function.
            *w = unsafe { std::mem::transmute::<__m128i, [u8; 16]>(_mm_stream_load_si128(src.as_ptr().add(i + 16 * k).cast())) };
        }
        for (k, w) in v.iter().enumerate() {
            // SAFETY: `dst[i + 16k .. i + 16k + 16]` is in bounds (same length as `src`); an
            // unaligned store.
            unsafe { _mm_storeu_si128(dst.as_mut_ptr().add(i + 16 * k).cast(), std::mem::transmute::<[u8; 16], __m128i>(*w)) };
        }
        i += round;
    }
    while i + 16 <= n {
        // SAFETY: in bounds and 16-byte aligned, as above.
        let w = unsafe { _mm_stream_load_si128(src.as_ptr().add(i).cast()) };
        // SAFETY: in bounds, unaligned store.
        unsafe { _mm_storeu_si128(dst.as_mut_ptr().add(i).cast(), w) };
        i += 16;
    }
    dst[i..].copy_from_slice(&src[i..]);
}

/// What `--bar-reads` does on this CPU (the run's JSON says it).
pub(super) fn read_method(r: super::BarReads) -> &'static str {
    match r {
        super::BarReads::Memcpy => "memcpy",
        super::BarReads::Stream if streaming_loads() => "movntdqa",
        super::BarReads::Stream => "memcpy (no streaming loads on this CPU)",
    }
}

/// One worker's mailbox in [`Stores`]: its part of the current job. Each worker has its own,
/// so a job engages only the workers that have a part, and waits for nobody else: with one
/// shared job that every worker acknowledged, a 4-part write waited for all 7 workers, idle
/// ones too, and any one of them off its CPU held it until it ran again (the likely cause, not
/// proven, of 256 KiB bar writes at 2.8 ms median in one H200 process).
#[derive(Default)]
#[repr(align(128))] // one mailbox per cache line pair: workers poll theirs, not their neighbours'
struct Slot {
    /// Bumped once per job given to this worker (and once to stop); the worker spins on it.
    posted: AtomicU64,
    /// The last `posted` value whose part the worker finished.
    done: AtomicU64,
    src: AtomicUsize,
    dst: AtomicUsize,
    len: AtomicUsize,
    /// The part reads the BAR with streaming loads ([`read_stream`]) instead of a memcpy.
    stream: AtomicBool,
}

/// What the workers of [`Stores`] share: their mailboxes and the stop flag.
struct StoreJobs {
    slots: Vec<Slot>,
    stop: AtomicBool,
}

/// Worker threads that, with the calling thread, split a memcpy into the BAR (or a read out of
/// it). Workers spin between jobs (a wake-up would cost more than a 256 KiB write), so they
/// start only at the first job large enough to split (the small sizes, measured first, run
/// with no spinning threads beside them) and live only while the bar rows run.
struct Stores {
    threads: usize,
    jobs: Arc<StoreJobs>,
    workers: std::cell::OnceCell<Vec<std::thread::JoinHandle<()>>>,
}

impl Stores {
    /// The calling thread plus `threads - 1` workers, started on first use.
    fn new(threads: usize) -> Stores {
        let threads = threads.max(1);
        let slots = (1..threads).map(|_| Slot::default()).collect();
        Stores { threads, jobs: Arc::new(StoreJobs { slots, stop: AtomicBool::new(false) }), workers: std::cell::OnceCell::new() }
    }

    fn threads(&self) -> usize {
        self.threads
    }

    /// Starts the workers, on the first call.
    fn start_workers(&self) {
        self.workers.get_or_init(|| {
            (0..self.jobs.slots.len())
                .map(|k| {
                    let jobs = self.jobs.clone();
                    std::thread::spawn(move || Stores::work(&jobs, k))
                })
                .collect()
        });
    }

    /// Worker `k`: waits for a part in its mailbox, copies it, says so; until `stop`.
    fn work(jobs: &StoreJobs, k: usize) {
        let slot = &jobs.slots[k];
        let mut seen = 0u64;
        loop {
            let mut spins = 0u32;
            let g = loop {
                let g = slot.posted.load(Ordering::Acquire);
                if g != seen {
                    break g;
                }
                spins += 1;
                if spins < 1 << 16 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            };
            seen = g;
            if jobs.stop.load(Ordering::Acquire) {
                return;
            }
            let (src, dst, n) = (slot.src.load(Ordering::Relaxed), slot.dst.load(Ordering::Relaxed), slot.len.load(Ordering::Relaxed));
            // SAFETY: `run` wrote this mailbox only while this worker was idle (it had seen the
            // previous part's `done`), then released it with `posted`, which this thread
            // acquired above: the fields are this part's. The part, `[src, src+n)` readable and
            // `[dst, dst+n)` writable, lies in the caller's slices, disjoint from every other
            // part, and `run` waits for this part's `done` before it returns, so both stay
            // valid while it runs.
            let (src, dst) =
                unsafe { (std::slice::from_raw_parts(src as *const u8, n), std::slice::from_raw_parts_mut(dst as *mut u8, n)) };
            if slot.stream.load(Ordering::Relaxed) {
                read_stream(dst, src);
            } else {
                dst.copy_from_slice(src);
            }
            // A full fence before saying so: on x86 it also drains this core's write-combining
            // buffers, so the part's last stores into the BAR have left the CPU before the
            // caller stops its clock or reads the bytes back (a Release store alone does not;
            // the shared job's `fetch_add` did, as a locked instruction).
            std::sync::atomic::fence(Ordering::SeqCst);
            slot.done.store(g, Ordering::Release);
        }
    }

    /// `dst.copy_from_slice(src)`, split over the threads when it is large enough.
    fn copy(&self, dst: &mut [u8], src: &[u8]) {
        self.run(dst, src, STORE_PART_MIN, false);
    }

    /// A read out of the BAR (`src`), split over the threads in parts of at least
    /// [`READ_PART_MIN`]: streaming loads ([`read_stream`]) when `stream`, else a memcpy.
    fn read(&self, dst: &mut [u8], src: &[u8], stream: bool) {
        self.run(dst, src, READ_PART_MIN, stream);
    }

    /// How [`Stores::run`] splits `len` bytes in parts of at least `part_min` over `threads`:
    /// (bytes per part, a multiple of 4096, or `len` when it does not split; parts that get
    /// bytes), which is what a point's note says.
    fn split(len: usize, part_min: usize, threads: usize) -> (usize, usize) {
        let parts = (len / part_min).min(threads);
        if parts <= 1 {
            return (len, 1);
        }
        let step = len.div_ceil(parts).next_multiple_of(4096);
        (step, len.div_ceil(step))
    }

    fn run(&self, dst: &mut [u8], src: &[u8], part_min: usize, stream: bool) {
        let len = src.len();
        assert_eq!(dst.len(), len);
        let once = |dst: &mut [u8], src: &[u8]| if stream { read_stream(dst, src) } else { dst.copy_from_slice(src) };
        let (step, parts) = Stores::split(len, part_min, self.threads());
        if parts <= 1 {
            once(dst, src);
            return;
        }
        self.start_workers();
        // Part 0 is reached through this pointer, as the workers reach theirs, never through
        // `dst` again while they run: reborrowing `dst` (its `IndexMut`) would retag the whole
        // slice under the workers' writes (Miri: a data race under Tree Borrows).
        let dp = dst.as_mut_ptr();
        // Parts 1.. to workers 0..: each mailbox is idle here (the last `run` waited for every
        // part it posted), so writing its fields races with nothing; `posted` releases them.
        let used = &self.jobs.slots[..parts - 1];
        for (k, slot) in used.iter().enumerate() {
            let start = (k + 1) * step;
            let n = step.min(len - start);
            slot.src.store(src.as_ptr() as usize + start, Ordering::Relaxed);
            slot.dst.store(dp as usize + start, Ordering::Relaxed);
            slot.len.store(n, Ordering::Relaxed);
            slot.stream.store(stream, Ordering::Relaxed);
            slot.posted.fetch_add(1, Ordering::Release);
        }
        // SAFETY: `dp` is `dst`'s start, valid for `len >= step.min(len)` bytes; part 0 is this
        // thread's alone (the workers take parts 1..), and `dst` is not used again until they
        // are done.
        once(unsafe { std::slice::from_raw_parts_mut(dp, step.min(len)) }, &src[..step.min(len)]);
        // Once every posted part is done, no worker touches `src` or `dst` any more. Only this
        // thread bumps `posted` (and `drop`, which has `&mut self`), so its value is this job's.
        for slot in used {
            let g = slot.posted.load(Ordering::Relaxed);
            while slot.done.load(Ordering::Acquire) != g {
                std::hint::spin_loop();
            }
        }
    }
}

impl Drop for Stores {
    fn drop(&mut self) {
        let Some(workers) = self.workers.take() else { return };
        self.jobs.stop.store(true, Ordering::Release);
        for slot in &self.jobs.slots {
            slot.posted.fetch_add(1, Ordering::AcqRel);
        }
        for w in workers {
            let _ = w.join();
        }
    }
}

/// The default `--bar-threads`: half the CPUs this process may use, at most 8 (one on a 2-core
/// machine, where spinning helpers would only compete with the stores).
pub(super) fn default_bar_threads() -> usize {
    (cpus() / 2).clamp(1, 8)
}

/// The CPUs this process may use: `--bar-threads` is capped there (spinning helpers beyond it
/// would take turns with the stores instead of adding to them).
pub(super) fn cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// A buffer in the BAR window (or UMA memory), mapped, through the interop handles.
struct Bar {
    raw: vkhost::RawDevice,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    ptr: *mut u8,
    len: usize,
}

impl Bar {
    fn new(dev: &Device, len: usize) -> Result<Option<Bar>> {
        let types = dev.info().memory_type_flags();
        let want = vk::MemoryPropertyFlags::DEVICE_LOCAL | vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let raw = dev.raw()?;
        let info =
            vk::BufferCreateInfo::default().size(len as u64).usage(vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST);
        // SAFETY: valid create info on a live device; every object is destroyed in Drop or below.
        unsafe {
            let buffer = raw.device.create_buffer(&info, None)?;
            let req = raw.device.get_buffer_memory_requirements(buffer);
            let Some(ti) = (0..types.len()).find(|&i| req.memory_type_bits & (1 << i) != 0 && types[i].contains(want)) else {
                raw.device.destroy_buffer(buffer, None);
                return Ok(None);
            };
            let ai = vk::MemoryAllocateInfo::default().allocation_size(req.size).memory_type_index(ti as u32);
            let memory = match raw.device.allocate_memory(&ai, None) {
                Ok(m) => m,
                Err(e) => {
                    raw.device.destroy_buffer(buffer, None);
                    return Err(format!("BAR allocation of {len} bytes: {e:?}").into());
                }
            };
            let ptr = raw
                .device
                .bind_buffer_memory(buffer, memory, 0)
                .and_then(|_| raw.device.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()));
            match ptr {
                Ok(p) => Ok(Some(Bar { raw, buffer, memory, ptr: p.cast(), len })),
                Err(e) => {
                    raw.device.destroy_buffer(buffer, None);
                    raw.device.free_memory(memory, None);
                    Err(format!("BAR bind/map: {e:?}").into())
                }
            }
        }
    }
    fn slice(&mut self) -> &mut [u8] {
        // SAFETY: mapped for len bytes while self lives.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        // SAFETY: our objects; no device work uses them (the bar path is memcpy only).
        unsafe {
            self.raw.device.destroy_buffer(self.buffer, None);
            self.raw.device.free_memory(self.memory, None);
        }
    }
}
pub(super) fn bench_bar(cx: &mut Ctx, dirs: &[DirKind], sizes: &[u64], max: usize, cap: usize, threads: usize) -> Result<()> {
    let Some(mut bar) = Bar::new(&cx.dev, max)? else {
        return Err("no DEVICE_LOCAL|HOST_VISIBLE memory type".into());
    };
    let stores = Stores::new(threads);
    let stream = cx.bar_reads == super::BarReads::Stream;
    let mut bidir: Option<Result<BidirBar>> = None;
    let mut assist: Option<Result<BidirBar>> = None;
    let mut user: Option<Result<UserWrite>> = None;
    let mut host = vec![1u8; max];
    let mut back = vec![0u8; max.min(cap)];
    // d2h sizes left out for the cap: said in the run's notes, not only on stderr.
    let mut over_cap = Vec::new();
    for &size in sizes {
        let n = size as usize;
        for &dir in dirs {
            if super::interrupted() {
                return Ok(());
            }
            cx.pb.set_message(format!("bar {} {}", dir.name(), size_label(size)));
            if dir == DirKind::Bidir {
                match bidir.get_or_insert_with(|| BidirBar::new(&cx.dev, max, false)) {
                    Ok(b) => {
                        let (s, ok, note) = b.measure(cx, n, true)?;
                        let mut p = point("vulkan", "copy", "bar", dir.name(), size, 2 * size, s);
                        p.verified = Some(ok);
                        p.note = note;
                        p.warmup = UNTIMED_ROUNDS;
                        if !ok {
                            cx.failures += 1;
                        }
                        cx.push(p);
                    }
                    Err(e) => {
                        let e = format!("bidir_bar: skipped ({e})");
                        cx.pb.suspend(|| eprintln!("{e}"));
                        cx.pb.inc(1);
                    }
                }
                assisted(cx, &mut assist, max, n, dir)?;
                continue;
            }
            if dir == DirKind::D2h && n > cap {
                over_cap.push(size_label(size));
                cx.pb.inc(1);
                continue;
            }
            let what = format!("bar {} {}", dir.name(), size_label(size));
            let mut want = vec![0u8; n];
            pattern(&mut want, size ^ 0xBA5);
            // h2d: memcpy in (split as the timed copies are), read back (capped) and check; d2h:
            // read out as the timed reads do and check.
            stores.copy(&mut bar.slice()[..n], &want);
            let k = n.min(cap);
            // An h2d point's check reads on this thread (it must not start the threads before
            // a write would); a d2h point's as its timed reads do.
            match dir {
                DirKind::D2h => stores.read(&mut back[..k], &bar.slice()[..k], stream),
                _ if stream => read_stream(&mut back[..k], &bar.slice()[..k]),
                _ => back[..k].copy_from_slice(&bar.slice()[..k]),
            }
            let ok = cx.check(&what, &back[..k], &want[..k]);
            // --flush-cache: the CPU copies the bytes here too.
            let s = match dir {
                DirKind::H2d => measure_with(
                    cx.iters,
                    cx.budget,
                    || flush_cache(&mut cx.flush),
                    || {
                        stores.copy(&mut bar.slice()[..n], &host[..n]);
                        Ok(())
                    },
                )?,
                DirKind::D2h => measure_with(
                    cx.iters,
                    cx.budget,
                    || flush_cache(&mut cx.flush),
                    || {
                        stores.read(&mut host[..n], &bar.slice()[..n], stream);
                        Ok(())
                    },
                )?,
                DirKind::Bidir | DirKind::D2d => {
                    cx.pb.inc(1);
                    continue;
                }
            };
            let mut p = point("vulkan", "copy", "bar", dir.name(), size, size, s);
            p.verified = Some(ok);
            let mut notes = Vec::new();
            let parts = Stores::split(n, if dir == DirKind::H2d { STORE_PART_MIN } else { READ_PART_MIN }, stores.threads()).1;
            notes.push(format!("{parts} thread{}", if parts == 1 { "" } else { "s" }));
            if dir == DirKind::D2h {
                notes.push(read_method(cx.bar_reads).to_string());
            }
            if dir == DirKind::H2d && n > cap {
                notes.push(format!("check read back the first {} only", size_label(cap as u64)));
            }
            p.note = notes.join("; ");
            cx.push(p);
            if dir == DirKind::H2d {
                user_write(cx, &mut user, n)?;
                assisted(cx, &mut assist, max, n, dir)?;
            }
        }
    }
    if !over_cap.is_empty() {
        // Said only where a size was left out: the cap changes nothing otherwise.
        let cap_note = format!(
            "bar: d2h reads of {} left out, over --bar-read-cap {}: on discrete GPUs they run at 0.03-5 GB/s",
            over_cap.join(", "),
            size_label(cap as u64)
        );
        cx.pb.suspend(|| eprintln!("{cap_note}"));
        cx.notes.push(format!("bar d2h: {} skipped, over --bar-read-cap {}", over_cap.join(", "), size_label(cap as u64)));
    }
    Ok(())
}

/// Untimed rounds before a `bidir_bar` point's timed ones (see `BidirBar::measure`).
const UNTIMED_ROUNDS: usize = 3;

/// The largest write the `write` variant measures: above it a write is the copy engine's
/// (`host_to_device_ce`) unless `bar_write_max` is raised.
const USER_WRITE_MAX: usize = 4 << 20;

/// The `write` variant of a bar h2d point: `DeviceBuffer::write` from a pinned block on the
/// bench's own device, with its options as they are (the library's defaults unless the
/// environment sets them): what a user's write of that size gets, CPU stores where the device
/// buffer is mapped and the write at most `bar_write_max` (split over the staging threads where
/// they poll), else the copy engine. Its note says the share of the bytes the CPU stored; its
/// CUDA ratio is against CUDA's pinned h2d copy of the same size.
struct UserWrite {
    buf: vkhost::DeviceBuffer,
    src: vkhost::PinnedBuffer,
    /// Points measured so far: [`UserWrite::prepare`] seeds each point's source with it.
    points: u64,
}

impl UserWrite {
    fn new(dev: &Device) -> Result<UserWrite> {
        let buf = dev.alloc_buffer(USER_WRITE_MAX)?;
        let mut src = vkhost::PinnedBuffer::new(dev, USER_WRITE_MAX)?;
        pattern(&mut src, 0x05E4);
        Ok(UserWrite { buf, src, points: 0 })
    }

    /// Sets up the point of `n` bytes before its checked write: a source of the point's own, so
    /// that the buffer never already holds it (an earlier, larger point wrote the same pattern's
    /// first bytes) and a write that moved nothing fails the check.
    fn prepare(&mut self, n: usize) {
        self.points += 1;
        pattern(&mut self.src[..n], 0x05E4 ^ self.points << 32 ^ n as u64);
    }
}

/// Measures the `write` variant of an h2d bar point of `n` bytes (up to [`USER_WRITE_MAX`]): an
/// extra point beside the row (not counted in the progress bar). A device that cannot allocate
/// for it is said once and skipped.
fn user_write(cx: &mut Ctx, state: &mut Option<Result<UserWrite>>, n: usize) -> Result<()> {
    if n > USER_WRITE_MAX {
        return Ok(());
    }
    let fresh = state.is_none();
    let made = state.get_or_insert_with(|| UserWrite::new(&cx.dev));
    let w = match made {
        Ok(w) => w,
        Err(e) => {
            if fresh {
                let e = format!("bar write: skipped ({e})");
                cx.pb.suspend(|| eprintln!("{e}"));
            }
            return Ok(());
        }
    };
    let stored = |dev: &Device| vkhost::host::device_stats(dev).mapped_bytes;
    // Untimed and checked first (as every point is): written, read back.
    w.prepare(n);
    w.buf.write(0, &w.src[..n])?;
    let mut back = vec![0u8; n];
    w.buf.read(0, &mut back)?;
    let ok = cx.check(&format!("bar write h2d {}", size_label(n as u64)), &back, &w.src[..n]);
    let (before, mut writes) = (stored(&cx.dev), 0u64);
    let s = measure_with(
        cx.iters,
        cx.budget,
        || flush_cache(&mut cx.flush),
        || {
            writes += 1;
            w.buf.write(0, &w.src[..n]).map_err(Into::into)
        },
    )?;
    let share = 100.0 * (stored(&cx.dev) - before) as f64 / (writes as f64 * n as f64).max(1.0);
    let mut p = point("vulkan", "copy", "bar", "h2d", n as u64, n as u64, s);
    p.verified = Some(ok);
    p.variant = "write".into();
    let o = cx.dev.options();
    p.note = format!(
        "DeviceBuffer::write from pinned memory, this device's options (bar_write_max {}): CPU stores took {share:.0}% of the bytes",
        size_label(o.bar_write_max as u64)
    );
    cx.points.push(p);
    Ok(())
}

/// The `assist` variant of a bar h2d or bidir point (see [`BidirBar`]), for writes of at least
/// `OpenOptions::ASSIST_MIN`: an extra point beside the row (not counted in the progress bar).
/// A device that cannot open with it is said once and skipped.
fn assisted(cx: &mut Ctx, state: &mut Option<Result<BidirBar>>, max: usize, n: usize, dir: DirKind) -> Result<()> {
    if n < vkhost::OpenOptions::ASSIST_MIN {
        return Ok(());
    }
    let fresh = state.is_none();
    match state.get_or_insert_with(|| BidirBar::new(&cx.dev, max, true)) {
        Ok(b) => {
            let both = dir == DirKind::Bidir;
            let (s, ok, note) = b.measure(cx, n, both)?;
            let size = n as u64;
            let mut p = point("vulkan", "copy", "bar", dir.name(), size, if both { 2 * size } else { size }, s);
            p.verified = Some(ok);
            p.note = note;
            p.variant = "assist".into();
            p.warmup = UNTIMED_ROUNDS;
            if !ok {
                cx.failures += 1;
            }
            cx.points.push(p);
        }
        Err(e) if fresh => {
            let e = format!("bar assist: skipped ({e})");
            cx.pb.suspend(|| eprintln!("{e}"));
        }
        Err(_) => {}
    }
    Ok(())
}

/// `bidir_bar`: the library's BAR-store write path against the copy engine in the other
/// direction. A second device on the same GPU, opened with `bar_writes: On` and `bar_write_max`
/// raised to the largest size, so that `DeviceBuffer::write` is CPU stores into the mapped
/// buffer (split over the staging threads) for every size (from 256 KiB to 2 MiB while those
/// poll for work, which back-to-back rounds keep them doing; the note gives the stores' share);
/// on another thread at the same time,
/// `DeviceBuffer::read` of a second buffer into pinned memory runs on the copy engine. Sum of
/// both directions over the wall time.
///
/// The `assist` variant opens its device with `bar_assist` as the environment sets it (`Off`
/// and `Auto`, the default, mean `Always` here) and `bar_write_max` left as it is: a write of
/// `ASSIST_MIN` (4 MiB) and more is shared between the copy engine (from the back, reading a
/// pinned source directly) and the CPU stores (from the front) until they meet; with
/// `VKHOST_BAR_ASSIST=bidir`, only while the other thread reads. Its h2d rows (variant `assist`
/// of `host_to_device_bar`) time that write alone (with `bidir`, the copy engine's alone; the
/// note says the stores' share).
struct BidirBar {
    dev: Device,
    up: vkhost::DeviceBuffer,
    down: vkhost::DeviceBuffer,
    /// The h2d source: a `Vec` for the stores (where memory type does not matter to the CPU),
    /// a pinned block for `assist` (so the copy engine's share is direct).
    src: Src,
    dst: vkhost::PinnedBuffer,
    assist: bool,
    /// Points measured so far: [`BidirBar::prepare`] seeds each point's h2d source with it.
    points: u64,
}

enum Src {
    Plain(Vec<u8>),
    Pinned(vkhost::PinnedBuffer),
}

impl std::ops::Deref for Src {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Src::Plain(v) => v,
            Src::Pinned(p) => p,
        }
    }
}

impl std::ops::DerefMut for Src {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Src::Plain(v) => v,
            Src::Pinned(p) => p,
        }
    }
}

impl BidirBar {
    fn new(dev: &Device, max: usize, assist: bool) -> Result<BidirBar> {
        let base = dev.options().clone();
        let opts = if assist {
            // The mode the environment asks for (`VKHOST_BAR_ASSIST=bidir`: shared only beside
            // a read); `Off`, and `Auto` (the default) on a host that reads host memory at full
            // speed, would leave nothing to measure: `Always` here.
            let bar_assist = match base.bar_assist {
                vkhost::BarAssist::Off | vkhost::BarAssist::Auto => vkhost::BarAssist::Always,
                m => m,
            };
            vkhost::OpenOptions { bar_writes: vkhost::BarWrites::On, bar_assist, ..base }
        } else {
            vkhost::OpenOptions { bar_writes: vkhost::BarWrites::On, bar_write_max: max, ..base }
        };
        let dev = Device::open_with(dev.info().index, &opts)?;
        let up = dev.alloc_buffer(max)?;
        let down = dev.alloc_buffer(max)?;
        let dst = vkhost::PinnedBuffer::new(&dev, max)?;
        let src = if assist {
            let mut p = vkhost::PinnedBuffer::new(&dev, max)?;
            pattern(&mut p, 0xB1D1);
            Src::Pinned(p)
        } else {
            let mut v = vec![0u8; max];
            pattern(&mut v, 0xB1D1);
            Src::Plain(v)
        };
        let b = BidirBar { dev, up, down, src, dst, assist, points: 0 };
        // The stores need device buffers in mapped device memory. Asked once, here, by a write
        // that is stores wherever the buffer is mapped (at most `BAR_SOLO_MAX`): a larger write
        // may rightly be a copy (threads parked), which says nothing about the mapping.
        if !assist {
            let before = b.moved();
            b.up.write(0, &b.src[..max.min(4096)])?;
            if b.moved().0 == before.0 {
                return Err("device buffers are not in mapped device memory here (no DEVICE_LOCAL|HOST_VISIBLE type)".into());
            }
        }
        Ok(b)
    }

    /// Bytes stored by the CPU and moved by the copy engine on this device so far.
    fn moved(&self) -> (u64, u64) {
        let s = vkhost::host::device_stats(&self.dev);
        (s.mapped_bytes, s.direct_bytes + s.staged_bytes)
    }

    /// The share of the h2d bytes the CPU stored since `before` (`moved()`), for the note.
    fn stored_share(&self, before: (u64, u64), d2h_bytes: u64) -> f64 {
        let now = self.moved();
        let stored = (now.0 - before.0) as f64;
        let copied = (now.1 - before.1).saturating_sub(d2h_bytes) as f64;
        100.0 * stored / (stored + copied).max(1.0)
    }

    /// One untimed, verified round, then the timed iterations; `both`: h2d and d2h at once,
    /// else the h2d write alone.
    fn measure(&mut self, cx: &mut Ctx, n: usize, both: bool) -> Result<(crate::stats::Summary, bool, String)> {
        let want = self.prepare(n, both)?;
        // Untimed: three rounds (no time limit: `rounds` stops at the budget after the first),
        // so that a write of `BAR_SOLO_MAX`-`BAR_PARKED_SPLIT_MIN` that found the store threads
        // parked (a submitted copy, which wakes them) is followed by ones that find them
        // polling; every round leaves the bytes of the one checked below. That the buffers are
        // mapped was asked in `new`: a write this size may be a copy in every round.
        self.rounds(n, both, UNTIMED_ROUNDS, std::time::Duration::MAX, &mut cx.flush)?;
        let ok = self.verify(n, both, &want)?;
        if !ok {
            eprintln!("FAIL bidir_bar{} {n}: the bytes differ", if self.assist { " (assist)" } else { "" });
        }
        let before = self.moved();
        let runs = self.rounds(n, both, cx.iters, cx.budget, &mut cx.flush)?;
        let s = crate::stats::summarize(&runs).ok_or("no samples")?;
        let d2h = if both { (runs.len() * n) as u64 } else { 0 };
        let copier = crate::devices::copier(self.dev.info());
        let d2h_note = if both { format!("; d2h: {copier} into pinned memory") } else { String::new() };
        let share = self.stored_share(before, d2h);
        let note = if self.assist {
            // `assisted` measures only writes of at least ASSIST_MIN, above bar_write_max.
            format!(
                "h2d: {copier} from a pinned source plus CPU stores on {} thread(s) (bar_assist {:?}), stores took {share:.0}%{d2h_note}",
                self.dev.options().assist_threads,
                self.dev.options().bar_assist
            )
        } else {
            // As the library splits a write (64 KiB parts over up to 8 threads where the staging
            // threads poll, 256 KiB parts over all of them where they never do).
            let o = self.dev.options();
            let threads = if self.dev.staging_spin().is_zero() {
                o.staging_threads.min((n / (256 << 10)).max(1))
            } else {
                o.staging_threads.min(8).min((n / (64 << 10)).max(1))
            };
            // Writes that found the store threads parked were submitted copies: say where the
            // rest of the bytes went.
            let rest = if share < 99.5 { format!(", {copier} the rest (writes that found the threads parked)") } else { String::new() };
            format!(
                "h2d: CPU stores on {threads} thread(s) (DeviceBuffer::write, bar_write_max raised), stores took {share:.0}%{rest}{d2h_note}"
            )
        };
        Ok((s, ok, note))
    }

    /// Sets up a point of `n` bytes before its untimed rounds: an h2d source of the point's
    /// own, so that `up` never already holds it (from `new`'s probe, an earlier point of the
    /// same size, the `assist` h2d point before its bidir one, or a larger point before), and
    /// a write that moved nothing fails the check; and the d2h source on the device (returned:
    /// what the rounds' reads must bring back).
    fn prepare(&mut self, n: usize, both: bool) -> Result<Vec<u8>> {
        self.points += 1;
        pattern(&mut self.src[..n], 0xB1D1 ^ self.points << 32 ^ (both as u64) << 31 ^ n as u64);
        let mut want = vec![0u8; n];
        pattern(&mut want, n as u64 ^ 0xD0);
        self.down.write(0, &want)?;
        Ok(want)
    }

    /// Whether the rounds since [`Self::prepare`] moved the point's bytes: the h2d source is in
    /// `up`, and with `both` the d2h's `want` in `dst`.
    fn verify(&self, n: usize, both: bool, want: &[u8]) -> Result<bool> {
        let mut back = vec![0u8; n];
        self.up.read(0, &mut back)?;
        Ok(back == self.src[..n] && (!both || self.dst[..n] == want[..]))
    }

    /// The h2d write, and with `both` the d2h read at the same time on a partner thread (started
    /// once for all rounds): up to `iters` rounds within `budget` (at least one), each after an
    /// untimed `--flush-cache`; the wall time of each.
    fn rounds(&mut self, n: usize, both: bool, iters: usize, budget: std::time::Duration, flush: &mut Option<Vec<u8>>) -> Result<Vec<f64>> {
        let (up, down, src, dst) = (&self.up, &self.down, &self.src[..n], &mut self.dst[..n]);
        if !both {
            return runs_within(
                iters,
                budget,
                || flush_cache(flush),
                || {
                    let t0 = std::time::Instant::now();
                    up.write(0, src)?;
                    Ok(t0.elapsed().as_secs_f64())
                },
            );
        }
        super::bidir::with_partner(
            || down.read(0, dst),
            |partner| {
                runs_within(
                    iters,
                    budget,
                    || flush_cache(flush),
                    || {
                        partner.start()?;
                        let t0 = std::time::Instant::now();
                        let a = up.write(0, src);
                        let t1 = std::time::Instant::now();
                        let (b, c, d) = partner.finish()?;
                        let t = t1.max(d).duration_since(t0.min(c)).as_secs_f64();
                        a?;
                        b?;
                        Ok(t)
                    },
                )
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{BidirBar, Stores, UserWrite, read_stream};

    /// The default device, with the validation layer where it is installed (the tests assert
    /// it reported nothing).
    fn validated_device() -> vkhost::Device {
        let validation = vkhost::validation_layer_installed();
        vkhost::Device::open_default_with(&vkhost::OpenOptions { validation, ..Default::default() }).unwrap()
    }

    /// The `write` variant's check fails when its write moved nothing, whatever point came
    /// before: the source was one pattern for every size, so after a larger point (`--sizes
    /// 1M,4K`) the buffer already held the smaller point's bytes.
    #[test]
    fn a_bar_write_check_fails_when_the_write_moved_nothing() {
        let dev = validated_device();
        let mut w = UserWrite::new(&dev).unwrap();
        for (before, n) in [(64 << 10, 4096), (4096, 4096), (4096, 64 << 10)] {
            w.prepare(before);
            w.buf.write(0, &w.src[..before]).unwrap();
            w.prepare(n);
            let mut back = vec![0u8; n];
            w.buf.read(0, &mut back).unwrap();
            assert_ne!(back, &w.src[..n], "a point of {n} bytes after one of {before}: a write that moved nothing passed");
        }
        drop(w);
        dev.destroy().unwrap();
        assert_eq!(dev.validation_errors(), 0);
    }

    /// A point's check fails when its h2d write moved nothing: the bytes `up` holds before a
    /// point's rounds are never the ones the point checks for. (They were: the source was one
    /// pattern for every point, so the 4 KiB `bidir_bar` point found the bytes `new`'s probe
    /// wrote, and a `bidir_bar+assist` point those its `host_to_device_bar+assist` point of the
    /// same size wrote; likewise any size after a larger one.) Each case skips the h2d write and
    /// does the d2h read alone, as a write that does nothing would leave things.
    #[test]
    fn a_bidir_bar_check_fails_when_the_write_moved_nothing() {
        let dev = validated_device();
        let max = 64 << 10;
        for assist in [false, true] {
            let Ok(mut b) = BidirBar::new(&dev, max, assist) else {
                eprintln!("no mapped device buffers here: nothing to check (assist {assist})");
                continue;
            };
            // Sizes in the order a run may give them, each h2d alone then with the read.
            for n in [4096, max, 4096] {
                for both in [false, true] {
                    // What the point's rounds would leave if the write worked, then the point
                    // that finds those bytes.
                    let want = b.prepare(n, both).unwrap();
                    b.up.write(0, &b.src[..n]).unwrap();
                    b.down.read(0, &mut b.dst[..n]).unwrap();
                    assert!(b.verify(n, both, &want).unwrap(), "assist {assist}, {n} bytes, both {both}: the check passes a real write");
                    for next_both in [false, true] {
                        let want = b.prepare(n, next_both).unwrap();
                        b.down.read(0, &mut b.dst[..n]).unwrap();
                        assert!(
                            !b.verify(n, next_both, &want).unwrap(),
                            "assist {assist}, {n} bytes, both {next_both} after both {both}: a write that moved nothing passed"
                        );
                    }
                }
            }
        }
        dev.destroy().unwrap();
        assert_eq!(dev.validation_errors(), 0);
    }

    /// Streaming reads equal a memcpy at every source alignment and length around the 16-byte
    /// loads and the 256-byte rounds, and split over threads.
    #[test]
    fn streaming_reads_copy_exactly() {
        let src: Vec<u8> = (0..8192 + 64).map(|i| (i * 7 + 3) as u8).collect();
        for start in 0..33 {
            for len in [0, 1, 15, 16, 17, 255, 256, 257, 511, 1000, 4096, 4097, 8192] {
                let s = &src[start..start + len];
                let mut d = vec![0xEEu8; len];
                read_stream(&mut d, s);
                assert_eq!(d, s, "start {start} len {len}");
            }
        }
        let stores = Stores::new(3);
        let big: Vec<u8> = (0..(64 << 10) + 100).map(|i| (i % 251) as u8).collect();
        for stream in [true, false] {
            let mut d = vec![0u8; big.len() - 1];
            stores.read(&mut d, &big[1..], stream);
            assert_eq!(d, &big[1..], "stream {stream}");
        }
    }

    /// Jobs of 1 to 4 parts in turn over the same 3 workers: a worker left out of one job
    /// takes its part of the next, every byte lands once, in place, and the bytes around the
    /// destination are untouched (each worker has its own mailbox, reused from job to job).
    #[test]
    fn stores_split_jobs_of_any_part_count() {
        let stores = Stores::new(4);
        let src: Vec<u8> = (0..(64 << 10) + 3).map(|i| (i * 13 + 5) as u8).collect();
        for round in 0..200usize {
            let len = [4096, 2 * 4096 + 1, 3 * 4096, 16 << 10, (64 << 10) + 3, 5000][round % 6];
            let from = round % 3;
            let len = len.min(src.len() - from);
            let mut dst = vec![0xAAu8; len + 2];
            stores.run(&mut dst[1..len + 1], &src[from..from + len], 4096, round % 4 == 0);
            assert_eq!(&dst[1..len + 1], &src[from..from + len], "round {round}, {len} bytes");
            assert_eq!((dst[0], dst[len + 1]), (0xAA, 0xAA), "round {round}: a byte outside the destination changed");
        }
    }

    /// The parts a point's note counts are the parts that get bytes: parts are whole pages, so
    /// 3 threads over 16 KiB are 2 parts of 8 KiB, not 3.
    #[test]
    fn split_counts_the_parts_that_get_bytes() {
        assert_eq!(Stores::split(16 << 10, 4 << 10, 3), (8 << 10, 2));
        assert_eq!(Stores::split(64 << 10, super::READ_PART_MIN, 8), (64 << 10, 1));
        assert_eq!(Stores::split(32 << 10, 4 << 10, 7), (8 << 10, 4));
        assert_eq!(Stores::split(64 << 10, 4 << 10, 7), (12 << 10, 6));
        assert_eq!(Stores::split(4 << 10, 4 << 10, 8), (4 << 10, 1));
        assert_eq!(Stores::split(100, 4 << 10, 8), (100, 1));
        for len in [8 << 10, (1 << 20) + 7, 4 << 20] {
            for threads in 1..=16 {
                let (step, parts) = Stores::split(len, 4 << 10, threads);
                assert!(parts <= threads && parts * step >= len && (parts - 1) * step < len, "{len} {threads}");
            }
        }
    }
}
