//! The `pinned`, `registered` and `pageable` paths: their host memory, registration, the
//! round-trip check, and the h2d/d2h timing per size (bidir is handed to `bidir`).

use super::bar::bench_bar;
use super::bidir::bidir;
use super::{Ctx, DirKind, PathKind, flush_cache, point, point::measure_with_cpu, point::pattern};
use crate::devices::anyhow_free::Result;
use crate::pages::{Pages, RW};
use crate::stats::size_label;
use vkhost::{DeviceBuffer, PinnedBuffer, host};

/// Page-aligned memory faulted in before timing (the `registered` path's "user allocation").
pub(super) fn touched_pages(len: usize, huge: bool) -> Result<Pages> {
    let mut p = Pages::map(len, RW)?;
    if huge {
        p.advise_huge();
    }
    p.slice().fill(1);
    Ok(p)
}

/// Host memory for one path: two regions (the second for bidir's other direction).
///
/// Every path's memory is allocated once, before the first measurement, and reused for every
/// size, as a user's program allocates its buffers once: memory allocated after the sweep has
/// churned through gigabytes of allocations is not what such a program copies from.
pub(super) enum Host {
    Pinned(PinnedBuffer, PinnedBuffer),
    Registered(Pages, Pages),
    Pageable(Vec<u8>, Vec<u8>),
    /// Pageable memory advised huge (`--hugepages`): mapped pages, never registered.
    PageableHuge(Pages, Pages),
}

impl Host {
    /// The host memory of `path` (not `bar`), `max` bytes twice, touched, registered where the
    /// path registers.
    pub(super) fn new(cx: &Ctx, path: PathKind, max: usize) -> Result<Host> {
        let dev = &cx.dev;
        Ok(match path {
            PathKind::Pinned => Host::Pinned(PinnedBuffer::new(dev, max)?, PinnedBuffer::new(dev, max)?),
            PathKind::Registered => {
                let (a, b) = (touched_pages(max, cx.hugepages)?, touched_pages(max, cx.hugepages)?);
                // SAFETY: the mappings live until `release` unregisters them (the bench calls it
                // before dropping the Host).
                unsafe {
                    host::register(dev, a.ptr, a.len)?;
                    if let Err(e) = host::register(dev, b.ptr, b.len) {
                        host::unregister(dev, a.ptr)?;
                        return Err(e.into());
                    }
                }
                Host::Registered(a, b)
            }
            _ if cx.hugepages => Host::PageableHuge(touched_pages(max, true)?, touched_pages(max, true)?),
            _ => {
                let (mut a, mut b) = (vec![0u8; max], vec![0u8; max]);
                a.fill(1);
                b.fill(1);
                Host::Pageable(a, b)
            }
        })
    }

    /// Unregisters what `new` registered.
    pub(super) fn release(&self, dev: &vkhost::Device) -> Result<()> {
        if let Host::Registered(a, b) = self {
            host::unregister(dev, a.ptr)?;
            host::unregister(dev, b.ptr)?;
        }
        Ok(())
    }

    pub(super) fn both(&mut self) -> (&mut [u8], &mut [u8]) {
        match self {
            Host::Pinned(a, b) => (&mut a[..], &mut b[..]),
            Host::Registered(a, b) => (a.slice(), b.slice()),
            Host::Pageable(a, b) => (&mut a[..], &mut b[..]),
            Host::PageableHuge(a, b) => (a.slice(), b.slice()),
        }
    }
}

/// Measures `path`'s copy-engine testcases (with its memory from `Host::new`; `bar` maps its
/// own, `device` has none) at every size.
#[allow(clippy::too_many_arguments)]
pub(super) fn bench_path(
    cx: &mut Ctx,
    path: PathKind,
    dirs: &[DirKind],
    sizes: &[u64],
    dbuf: &[DeviceBuffer; 2],
    host: Option<&mut Host>,
    bar_cap: usize,
) -> Result<()> {
    let max = *sizes.iter().max().unwrap_or(&4096) as usize;
    match host {
        Some(h) => sweep_host(cx, path, dirs, sizes, dbuf, h),
        None if path == PathKind::Device => super::d2d::bench_d2d_ce(cx, sizes, dbuf),
        None => {
            let threads = cx.bar_threads;
            bench_bar(cx, dirs, sizes, max, bar_cap, threads)
        }
    }
}

fn sweep_host(cx: &mut Ctx, path: PathKind, dirs: &[DirKind], sizes: &[u64], dbuf: &[DeviceBuffer; 2], host: &mut Host) -> Result<()> {
    let expect = if path == PathKind::Pageable { vkhost::CopyPath::Staged } else { vkhost::CopyPath::Direct };
    // --flush-cache: only where the CPU copies the bytes (the staged path's memcpy).
    let mut flush = if path == PathKind::Pageable { cx.flush.take() } else { None };
    let r = sweep_sizes(cx, path, dirs, sizes, dbuf, host, expect, &mut flush);
    if flush.is_some() {
        cx.flush = flush;
    }
    r
}

#[allow(clippy::too_many_arguments)]
fn sweep_sizes(
    cx: &mut Ctx,
    path: PathKind,
    dirs: &[DirKind],
    sizes: &[u64],
    dbuf: &[DeviceBuffer; 2],
    host: &mut Host,
    expect: vkhost::CopyPath,
    flush: &mut Option<Vec<u8>>,
) -> Result<()> {
    for &size in sizes {
        let n = size as usize;
        for &dir in dirs {
            if super::interrupted() {
                return Ok(());
            }
            cx.pb.set_message(format!("{} {} {}", path.name(), dir.name(), size_label(size)));
            let (src, dst) = host.both();
            let (src, dst) = (&mut src[..n], &mut dst[..n]);
            // Check one round trip through this path, and which copy path ran.
            let seed = size ^ (dir as u64) << 40 ^ (path as u64) << 48;
            // The check's buffers, allocated once at the largest size (no per-point churn).
            let (mut want, mut check_buf) = std::mem::take(&mut cx.scratch);
            want.resize(want.len().max(n), 0);
            check_buf.resize(check_buf.len().max(n), 0);
            let r = check_and_measure(cx, path, dir, size, dbuf, src, dst, expect, flush, &mut want[..n], &mut check_buf[..n], seed);
            cx.scratch = (want, check_buf);
            r?;
        }
    }
    Ok(())
}

/// One point: a round trip checked through this path, then the timed copies.
#[allow(clippy::too_many_arguments)]
fn check_and_measure(
    cx: &mut Ctx,
    path: PathKind,
    dir: DirKind,
    size: u64,
    dbuf: &[DeviceBuffer; 2],
    src: &mut [u8],
    dst: &mut [u8],
    expect: vkhost::CopyPath,
    flush: &mut Option<Vec<u8>>,
    want: &mut [u8],
    check_buf: &mut [u8],
    seed: u64,
) -> Result<()> {
    let n = size as usize;
    let what = format!("{} {} {}", path.name(), dir.name(), size_label(size));
    pattern(want, seed);
    check_buf.fill(0);
    let mut ran = Vec::new();
    if dir != DirKind::D2h {
        src.copy_from_slice(want);
        // SAFETY: `src` is a live slice of n bytes.
        ran.push(unsafe { host::copy_to_device(&cx.dev, src.as_ptr(), n, &dbuf[0], 0) }?);
        dbuf[0].read(0, check_buf)?;
    }
    if dir != DirKind::H2d {
        dbuf[1].write(0, want)?;
        dst.fill(0);
        // SAFETY: `dst` is a live, exclusively borrowed slice of n bytes.
        ran.push(unsafe { host::copy_to_host(&cx.dev, &dbuf[1], 0, dst.as_mut_ptr(), n) }?);
        if dir == DirKind::D2h {
            check_buf.copy_from_slice(dst);
        } else if dst != &want[..] {
            check_buf.fill(0);
        }
    }
    let ok = cx.check(&what, check_buf, want);
    let mut note = String::new();
    if ran.iter().any(|&r| r != expect) {
        note = format!("copy path {ran:?}, expected {expect:?}");
    }
    let (s, cpu, cores) = match dir {
        // A submitted copy (the copy engines, "ce"), never DeviceBuffer::write's CPU stores.
        DirKind::H2d => measure_with_cpu(
            cx.iters,
            cx.budget,
            || flush_cache(flush),
            // SAFETY: `src` is a live slice of n bytes for the whole measurement.
            || Ok(unsafe { host::copy_to_device(&cx.dev, src.as_ptr(), n, &dbuf[0], 0) }.map(|_| ())?),
        )?,
        DirKind::D2h => measure_with_cpu(cx.iters, cx.budget, || flush_cache(flush), || Ok(dbuf[1].read(0, dst)?))?,
        DirKind::D2d => return Err("d2d is the device path's direction".into()),
        DirKind::Bidir => {
            for (i, pair) in cx.bidir_queues.clone().iter().enumerate() {
                let (s, extra, warm) =
                    bidir(cx, pair, path != PathKind::Pageable, &dbuf[0], src, &dbuf[1], dst, &mut || flush_cache(flush))?;
                let mut p = point("vulkan", "copy", path.name(), dir.name(), size, 2 * size, s);
                p.verified = Some(ok);
                p.warmup = warm;
                let mut notes: Vec<String> = (!note.is_empty()).then(|| note.clone()).into_iter().collect();
                if cx.bidir_queues.len() > 1 {
                    notes.push(format!("queues {pair}"));
                }
                // As for one-way pageable points: the staging threads' memcpys are its cost.
                if path == PathKind::Pageable {
                    notes.push(format!("CPU {:.1} cores", extra["cpu_cores"].as_f64().unwrap_or(0.0)));
                }
                p.note = notes.join("; ");
                p.extra = extra;
                p.variant = pair.clone();
                if i + 1 < cx.bidir_queues.len() {
                    cx.points.push(p);
                } else {
                    cx.push(p);
                }
            }
            return Ok(());
        }
    };
    // CPU cost of the timed copies: the process's CPU seconds per copy, and as cores busy during
    // a copy (a spinning wait is one core; staging adds its threads).
    let mut p = point("vulkan", "copy", path.name(), dir.name(), size, size, s);
    p.verified = Some(ok);
    // The staged path's CPU cost in the table too (every path's is in the JSON): its memcpys
    // run on the staging threads, and that is what pageable memory costs beside the bandwidth.
    if path == PathKind::Pageable {
        note = format!("{note}{}CPU {cores:.1} cores", if note.is_empty() { "" } else { "; " });
    }
    p.note = note;
    p.extra = serde_json::json!({ "cpu_s_per_copy": cpu, "cpu_cores": cores });
    cx.push(p);
    Ok(())
}
