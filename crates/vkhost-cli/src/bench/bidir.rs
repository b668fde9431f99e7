//! `bidir`: h2d and d2h at once on two streams, one thread each, on a chosen queue pair.

use super::Ctx;
use crate::devices::anyhow_free::Result;
use crate::stats::{Summary, summarize};
use serde_json::{Value, json};
use std::time::Instant;
use vkhost::DeviceBuffer;

/// h2d and d2h at once on two streams (so two queues where the device has two copy engines),
/// each driven by its own thread (the d2h one started once for all iterations) so a staged
/// direction's memcpy does not hold up the other.
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
    // The d2h on a partner thread started once for the whole measurement (see `with_partner`).
    let runs = with_partner(
        || s_down.download(down, 0, dst).and_then(|p| p.wait()),
        |partner| {
            // Every iteration takes the partner's result, whatever failed, before the next start.
            let one = || -> Result<(f64, [f64; 4])> {
                partner.start()?;
                let a = Instant::now();
                let r_up = s_up.upload(src, up, 0).and_then(|p| p.wait());
                let b = Instant::now();
                let (r_down, c, d) = partner.finish()?;
                r_up?;
                r_down?;
                let t0 = a.min(c);
                let secs = |t: Instant| t.duration_since(t0).as_secs_f64();
                Ok((secs(b.max(d)), [secs(a), secs(b), secs(c), secs(d)]))
            };
            one()?;
            super::point::runs_within(cx.iters, cx.budget, &mut *between, one)
        },
    )?;
    let mut runs = runs;
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

/// The other side of a two-thread measurement (see [`with_partner`]).
pub(super) struct Partner<R> {
    go: std::sync::mpsc::Sender<()>,
    done: std::sync::mpsc::Receiver<(R, Instant, Instant)>,
}

impl<R> Partner<R> {
    /// Starts one run of the partner's work.
    pub(super) fn start(&self) -> Result<()> {
        self.go.send(()).map_err(|_| "the partner thread stopped".into())
    }

    /// Waits for the run started last: its result, and when it started and ended.
    pub(super) fn finish(&self) -> Result<(R, Instant, Instant)> {
        self.done.recv().map_err(|_| "the partner thread stopped".into())
    }
}

/// Runs `body` with a partner thread, started once, that runs `work` each time
/// [`Partner::start`] is called. A thread spawned per iteration ran its part cold inside the
/// timed window (the spawn itself was not timed: each side's start is taken after a barrier):
/// a fresh stack and first touches, a wake-up onto a core it had not run on. On the H200 the
/// d2h of a 4 KiB bidir pair took ~55 us against ~20 for the h2d beside it.
/// The partner stops when `body` returns or unwinds (its sender drops), so nothing waits on a
/// thread that is gone.
pub(super) fn with_partner<R: Send, T>(mut work: impl FnMut() -> R + Send, body: impl FnOnce(&Partner<R>) -> Result<T>) -> Result<T> {
    std::thread::scope(|sc| {
        let (go, go_rx) = std::sync::mpsc::channel::<()>();
        let (tx, done) = std::sync::mpsc::channel();
        let h = sc.spawn(move || {
            while go_rx.recv().is_ok() {
                let a = Instant::now();
                let r = work();
                if tx.send((r, a, Instant::now())).is_err() {
                    return;
                }
            }
        });
        let partner = Partner { go, done };
        let r = body(&partner);
        drop(partner);
        h.join().map_err(|_| "the partner thread panicked")?;
        r
    })
}
