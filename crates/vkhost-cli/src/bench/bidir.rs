//! `bidir`: h2d and d2h at once on two streams, one thread each, on a chosen queue pair.

use super::Ctx;
use crate::devices::anyhow_free::Result;
use crate::stats::{Summary, summarize};
use serde_json::{Value, json};
use std::time::Instant;
use vkhost::DeviceBuffer;

/// h2d and d2h at once on two streams (so two queues where the device has two copy engines),
/// each driven by its own thread so a staged direction's memcpy does not hold up the other.
/// Bandwidth is the sum over the wall time of both; the median iteration's start and end of
/// each direction (µs from the iteration's start) go into the JSON.
/// `between` runs untimed before each timed iteration (`--flush-cache`).
pub(super) fn bidir(
    cx: &Ctx,
    pair: &str,
    up: &DeviceBuffer,
    src: &[u8],
    down: &DeviceBuffer,
    dst: &mut [u8],
    between: &mut dyn FnMut(),
) -> Result<(Summary, Value)> {
    use vkhost::QueueKind::{Compute, Copy};
    let (ku, kd) = match pair {
        "copy-copy" => (Copy, Copy),
        "compute-copy" => (Compute, Copy),
        "copy-compute" => (Copy, Compute),
        "compute-compute" => (Compute, Compute),
        other => return Err(format!("unknown --bidir-queues pair {other:?}").into()),
    };
    let s_up = cx.dev.stream_on_queue(ku, 0)?;
    let s_down = cx.dev.stream_on_queue(kd, if kd == ku { 1 } else { 0 })?;
    let queues = format!("h2d on queue {:?}, d2h on queue {:?} (family, index)", s_up.queue()?, s_down.queue()?);
    let mut runs: Vec<(f64, [f64; 4])> = Vec::new();
    let mut one = || -> Result<(f64, [f64; 4])> {
        let barrier = std::sync::Barrier::new(2);
        let t0 = Instant::now();
        let (r_up, r_down) = std::thread::scope(|s| {
            let h = s.spawn(|| {
                barrier.wait();
                let a = t0.elapsed().as_secs_f64();
                let r = s_down.download(down, 0, dst).and_then(|p| p.wait());
                (r, a, t0.elapsed().as_secs_f64())
            });
            barrier.wait();
            let a = t0.elapsed().as_secs_f64();
            let r = s_up.upload(src, up, 0).and_then(|p| p.wait());
            let b = t0.elapsed().as_secs_f64();
            let other = h.join().map_err(|_| "bidir thread panicked");
            ((r, a, b), other)
        });
        let (r2, c, d) = r_down?;
        r_up.0?;
        r2?;
        let (a, b) = (r_up.1, r_up.2);
        let start = a.min(c);
        Ok((b.max(d) - start, [a - start, b - start, c - start, d - start]))
    };
    one()?;
    let begin = Instant::now();
    while runs.len() < cx.iters.max(1) && (runs.is_empty() || begin.elapsed() < cx.budget) {
        between();
        runs.push(one()?);
    }
    let s = summarize(&runs.iter().map(|r| r.0).collect::<Vec<_>>()).ok_or("no samples")?;
    runs.sort_by(|x, y| x.0.total_cmp(&y.0));
    let m = runs[runs.len() / 2].1;
    let extra = json!({
        "h2d_start_us": m[0] * 1e6, "h2d_end_us": m[1] * 1e6,
        "d2h_start_us": m[2] * 1e6, "d2h_end_us": m[3] * 1e6,
        "mode": "two streams (one thread each)",
        "queues": queues,
    });
    Ok((s, extra))
}
