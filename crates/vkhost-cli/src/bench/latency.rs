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

/// The latency testcases' memory: a pinned block and a device buffer of the largest size.
///
/// Allocated with the sweep's memory, before any copy: allocated after the sweep freed its 1 GiB
/// pinned blocks, a pinned block is slower for small copies on the H200 (4 KiB d2h 14.9 us
/// against 13.0-13.5; the same churn as in `costs::in_child`).
pub(super) struct Mem {
    host: PinnedBuffer,
    dbuf: vkhost::DeviceBuffer,
}

impl Mem {
    pub(super) fn new(dev: &vkhost::Device) -> Result<Mem> {
        let max = *LATENCY_SIZES.iter().max().unwrap_or(&4096) as usize;
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

/// `latency_floor_host_to_device`, `latency_floor_device_to_host`: `Device::copy_floor` at
/// `FLOOR_SIZES`, the same number of timed runs as a latency point. Its buffers are the
/// library's own, so the point moves no bytes of the bench's and is not verified. The note
/// gives the queue and how much more the sweep's synchronous copy of the same size and
/// direction from pinned memory took (the `_ce` point, when the run measured it): vkhost's own
/// cost over the device's.
pub(super) fn floor(cx: &mut Ctx, dirs: &[DirKind]) -> Result<()> {
    for &size in &FLOOR_SIZES {
        for &dir in dirs {
            if super::interrupted() {
                return Ok(());
            }
            cx.pb.set_message(format!("latency floor {} {}", dir.name(), size_label(size)));
            let iters = cx.iters.max(MIN_ITERS);
            let f = cx.dev.copy_floor(dir == DirKind::H2d, size, iters)?;
            let secs: Vec<f64> = f.times.iter().map(|t| t.as_secs_f64()).collect();
            let s = crate::stats::summarize(&secs).ok_or("no samples")?;
            let mut p = point("vulkan", "latency", "floor", dir.name(), size, size, s);
            let ce = cx.points.iter().find(|q| q.kind == "copy" && q.path == "pinned" && q.dir == dir.name() && q.size == size && !q.sm);
            p.note = match ce {
                Some(q) => format!("{:?} queue; {} {:+.1} us", f.queue, q.testcase(), (q.s.median - s.median) * 1e6),
                None => format!("{:?} queue", f.queue),
            };
            cx.push(p);
        }
    }
    Ok(())
}
