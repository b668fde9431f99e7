//! `latency_host_to_device`, `latency_device_to_host`: one synchronous `DeviceBuffer::write` or
//! `read` from or to pinned memory at small sizes, where the submission and the wait, not the
//! bus, set the time: what a user's program gets. A write is CPU stores into the BAR where
//! vkhost uses them (`BarWrites`, noted `path mapped` on the point); the submitted copy's
//! latency is the `host_to_device_ce` testcase at the same sizes.

use super::testcase::{FLOOR_SIZES, LATENCY_SIZES};
use super::{Ctx, DirKind, point, point::measure_at_least, point::pattern};
use crate::devices::anyhow_free::Result;
use crate::stats::size_label;
use vkhost::PinnedBuffer;

/// At least this many timed copies per size: each takes microseconds, and a median of few is
/// noise.
const MIN_ITERS: usize = 50;

/// The latency and floor testcases' memory: a pinned block and a device buffer of the largest
/// of their sizes.
///
/// Allocated with the sweep's memory, before any copy: allocated after the sweep freed its 1 GiB
/// pinned blocks, a pinned block is slower for small copies on the H200 (4 KiB d2h 14.9 us
/// against 13.0-13.5; the same churn as in `costs::in_child`).
pub(super) struct Mem {
    host: PinnedBuffer,
    dbuf: vkhost::DeviceBuffer,
}

impl Mem {
    /// For `sizes` (`LATENCY_SIZES` or `FLOOR_SIZES`).
    pub(super) fn new(dev: &vkhost::Device, sizes: &[u64]) -> Result<Mem> {
        let max = *sizes.iter().max().unwrap_or(&4096) as usize;
        Ok(Mem { host: PinnedBuffer::new(dev, max)?, dbuf: dev.alloc_buffer(max)? })
    }
}

pub(super) fn latency(cx: &mut Ctx, dirs: &[DirKind], mem: &mut Mem) -> Result<()> {
    let dev = cx.dev.clone();
    let Mem { host, dbuf } = mem;
    for &size in &LATENCY_SIZES {
        for &dir in dirs {
            if super::interrupted() {
                return Ok(());
            }
            let what = format!("latency {} {}", dir.name(), size_label(size));
            cx.pb.set_message(what.clone());
            let n = size as usize;
            let mut want = vec![0u8; n];
            pattern(&mut want, size ^ 0x1A7 ^ (dir as u64) << 32);
            let mut got = vec![0u8; n];
            if dir == DirKind::H2d {
                host[..n].copy_from_slice(&want);
                dbuf.write(0, &host[..n])?;
                dbuf.read(0, &mut got)?;
            } else {
                dbuf.write(0, &want)?;
                host[..n].fill(0);
                dbuf.read(0, &mut host[..n])?;
                got.copy_from_slice(&host[..n]);
            }
            let ok = cx.check(&what, &got, &want);
            let before = vkhost::host::device_stats(&dev).mapped_bytes;
            // At least MIN_ITERS timed copies, whatever --budget says (docs/BENCH.md).
            let s = match dir {
                DirKind::H2d => measure_at_least(cx.iters, MIN_ITERS, cx.budget, || Ok(dbuf.write(0, &host[..n])?))?,
                _ => measure_at_least(cx.iters, MIN_ITERS, cx.budget, || Ok(dbuf.read(0, &mut host[..n])?))?,
            };
            let mut p = point("vulkan", "latency", "pinned", dir.name(), size, size, s);
            p.verified = Some(ok);
            if vkhost::host::device_stats(&dev).mapped_bytes > before {
                p.note = "path mapped (CPU stores into the BAR)".into();
            }
            cx.push(p);
        }
    }
    Ok(())
}

/// Timed runs of the floor, and of vkhost's copy, per round: the floor and vkhost's copy
/// alternate in rounds of this many (five rounds at the default `--iters`), so that a change of
/// the device's state within the process (seen on the H200: every 4 KiB copy from 13 to 43 us
/// between the start and the end of one run) hits both alike.
const FLOOR_ROUND: usize = 10;

/// `latency_floor_host_to_device`, `latency_floor_device_to_host`: `Device::copy_floor` at
/// `FLOOR_SIZES`, in rounds of [`FLOOR_ROUND`] alternated with the `_ce` testcase's own call
/// on the same size and direction (`host::copy_to_device` from a pinned block, or
/// `DeviceBuffer::read` into one): `--iters` timed runs of each, at least [`MIN_ITERS`], and
/// no new round once `--budget` ran out past those. The floor's buffers are the library's
/// own, so the point moves no bytes of the bench's and is not verified. The note and `extra`
/// give the queue and vkhost's copy's median over the floor's: vkhost's own cost per copy,
/// measured side by side.
pub(super) fn floor(cx: &mut Ctx, dirs: &[DirKind], mem: &mut Mem) -> Result<()> {
    let dev = cx.dev.clone();
    let Mem { host, dbuf } = mem;
    host.fill(0x5A);
    for &size in &FLOOR_SIZES {
        for &dir in dirs {
            if super::interrupted() {
                return Ok(());
            }
            cx.pb.set_message(format!("latency floor {} {}", dir.name(), size_label(size)));
            let n = size as usize;
            let mut copy = || -> Result<f64> {
                let t = std::time::Instant::now();
                match dir {
                    // SAFETY: the pinned block holds `n` bytes and outlives the call.
                    DirKind::H2d => unsafe { vkhost::host::copy_to_device(&dev, host.as_ptr(), n, dbuf, 0) }.map(|_| ())?,
                    _ => dbuf.read(0, &mut host[..n])?,
                }
                Ok(t.elapsed().as_secs_f64())
            };
            let want = cx.iters.max(MIN_ITERS);
            let (mut floor, mut ours, mut queue) = (Vec::new(), Vec::new(), None);
            let start = std::time::Instant::now();
            while floor.len() < want && (floor.len() < MIN_ITERS || start.elapsed() < cx.budget) {
                let k = FLOOR_ROUND.min(want - floor.len());
                let f = dev.copy_floor(dir == DirKind::H2d, size, k)?;
                floor.extend(f.times.iter().map(|t| t.as_secs_f64()));
                queue = Some(f.queue);
                // Untimed: the floor's buffers went, so the copy records its commands again.
                copy()?;
                for _ in 0..k {
                    ours.push(copy()?);
                }
            }
            let s = crate::stats::summarize(&floor).ok_or("no samples")?;
            let mine = crate::stats::summarize(&ours).ok_or("no samples")?;
            let over = (mine.median - s.median) * 1e6;
            let mut p = point("vulkan", "latency", "floor", dir.name(), size, size, s);
            p.warmup = 3; // per round: `copy_floor`'s untimed submissions
            let ce = super::testcase::testcase_of("copy", "pinned", dir.name(), false);
            let queue = queue.map(|q| format!("{q:?}")).unwrap_or_default();
            p.note = format!("{queue} queue; vkhost's {ce} copy {:.1} us, {over:+.1} over it", mine.median * 1e6);
            p.extra = serde_json::json!({ "queue": queue, "vkhost_median_s": mine.median, "vkhost_over_floor_us": over });
            cx.push(p);
        }
    }
    Ok(())
}
