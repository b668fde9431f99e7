//! `small-async`: 1000 async 4 KiB copies plus one synchronize against 1000 synchronous ones.

use super::{Ctx, measure, point, point::pattern};
use crate::devices::anyhow_free::Result;
use serde_json::json;
use vkhost::PinnedBuffer;

/// 1000 async 4 KiB h2d copies from pinned memory plus one synchronize, against 1000
/// synchronous ones, twice: to consecutive offsets (`async`/`sync`: the plain case, where the
/// stream batches adjacent copies into few regions) and to scattered offsets
/// (`async-scattered`/`sync-scattered`: a permutation, so nothing merges; every copy is its own
/// region for the copy engine; on GPUs the stream gathers them, see
/// `OpenOptions::gather_regions`).
const N: usize = 1000;
const K: usize = 4096;

/// small-async's memory: N x K bytes pinned and on the device, allocated with the sweep's memory
/// before any copy (as `latency::Mem`, for the same reason).
pub(super) struct Mem {
    src: PinnedBuffer,
    buf: vkhost::DeviceBuffer,
}

impl Mem {
    pub(super) fn new(dev: &vkhost::Device) -> Result<Mem> {
        Ok(Mem { src: PinnedBuffer::new(dev, N * K)?, buf: dev.alloc_buffer(N * K)? })
    }
}

pub(super) fn small_async(cx: &mut Ctx, which: &[bool], mem: &mut Mem) -> Result<()> {
    let dev = cx.dev.clone();
    let Mem { src, buf } = mem;
    pattern(src, 99);
    let stream = dev.stream()?;
    type Offset = fn(usize) -> usize;
    let patterns: [(&str, Offset); 2] = [("", |i| i * K), ("-scattered", |i| (i * 617) % N * K)];
    for (scattered, (suffix, dst_of)) in [false, true].into_iter().zip(patterns) {
        if !which.contains(&scattered) || super::interrupted() {
            continue;
        }
        let run_async = || -> Result<()> {
            for i in 0..N {
                // SAFETY: the pinned block outlives the work (synchronized below).
                unsafe { stream.copy_to_device_async(src.as_ptr().add(i * K), K, buf, dst_of(i)) }?;
            }
            stream.synchronize()?;
            Ok(())
        };
        let run_sync = || -> Result<()> {
            for i in 0..N {
                buf.write(dst_of(i), &src[i * K..(i + 1) * K])?;
            }
            Ok(())
        };
        let mut want = vec![0u8; N * K];
        for i in 0..N {
            want[dst_of(i)..dst_of(i) + K].copy_from_slice(&src[i * K..(i + 1) * K]);
        }
        // Each variant first checks one round of its copies into a zeroed buffer, as every
        // point does, then is timed.
        let mut back = vec![0u8; N * K];
        let mut checked = |name: &str, run: &dyn Fn() -> Result<()>| -> Result<bool> {
            buf.write(0, &vec![0u8; N * K])?;
            run()?;
            buf.read(0, &mut back)?;
            Ok(cx.check(name, &back, &want))
        };
        let gathered_before = vkhost::host::device_stats(&dev).gathered_bytes;
        let ok_async = checked(&format!("small-async{suffix}"), &run_async)?;
        // How much of one round went through the stream's scratch buffer
        // (`OpenOptions::gather_regions`: on GPUs, runs of small copies of one dense host range).
        let gathered = vkhost::host::device_stats(&dev).gathered_bytes - gathered_before;
        let ok_sync = checked(&format!("small-sync{suffix}"), &run_sync)?;
        let a = measure(cx.iters.min(5), cx.budget, run_async)?;
        let sy = measure(cx.iters.min(5), cx.budget, run_sync)?;
        let speedup = sy.median / a.median;
        let offsets = if suffix.is_empty() { "consecutive" } else { "scattered" };
        let mut p = point("vulkan", "small-async", "pinned", &format!("async{suffix}"), K as u64, (N * K) as u64, a);
        p.verified = Some(ok_async);
        // Where synchronous writes are CPU stores into the BAR (the H200), they beat the async
        // copies: say "slower" then, not "0.2x faster".
        let versus = if speedup >= 1.0 { format!("{speedup:.1}x faster than") } else { format!("{:.1}x slower than", 1.0 / speedup) };
        let via = if gathered > 0 {
            format!(", {}% through the stream's scratch buffer", gathered * 100 / (N * K) as u64)
        } else {
            String::new()
        };
        p.note = format!("1000 x 4K async to {offsets} offsets + synchronize{via}; {versus} 1000 synchronous copies");
        p.extra = json!({"sync_median_s": sy.median, "speedup": speedup, "offsets": offsets, "gathered_bytes": gathered});
        cx.push(p);
        let mut q = point("vulkan", "small-async", "pinned", &format!("sync{suffix}"), K as u64, (N * K) as u64, sy);
        q.verified = Some(ok_sync);
        q.note = format!("1000 x 4K synchronous copies to {offsets} offsets");
        cx.push(q);
    }
    Ok(())
}
