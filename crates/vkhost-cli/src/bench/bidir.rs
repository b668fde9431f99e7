//! `bidir`: h2d and d2h at once on two streams: from one thread where the device reads and
//! writes the host memory directly (pinned, registered), one thread each for pageable memory.

use super::Ctx;
use crate::devices::anyhow_free::Result;
use crate::stats::{Summary, summarize};
use serde_json::{Value, json};
use std::time::Instant;
use vkhost::{DeviceBuffer, Stream};

/// How a bidir pair is driven (`--bidir-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BidirMode {
    /// Pinned and registered memory: both copies enqueued from one thread (`copy_*_async` on
    /// two streams), then both awaited, as CUDA's two-stream bidir is. Pageable memory: a thread
    /// per direction (its safe download completes before it returns).
    Auto,
    /// Each direction on its own thread, each a synchronous upload or download, for every path.
    Threads,
}

/// h2d and d2h at once on two streams (so two queues where the device has two copy engines).
/// `direct`: the host memory is pinned or registered, so both copies can be enqueued from one
/// thread and run while it polls both (`--bidir-mode auto`); otherwise each
/// direction runs on its own thread (the d2h one started once for all iterations) so a staged
/// direction's memcpy does not hold up the other.
/// Bandwidth is the sum over the wall time of both; the median iteration's start and end of
/// each direction (µs from the iteration's start) go into the JSON.
/// `between` runs untimed before each timed iteration (`--flush-cache`). Also returns how many
/// untimed pairs ran first ([`super::point::warm_up`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn bidir(
    cx: &Ctx,
    pair: &str,
    direct: bool,
    up: &DeviceBuffer,
    src: &[u8],
    down: &DeviceBuffer,
    dst: &mut [u8],
    between: &mut dyn FnMut(),
) -> Result<(Summary, Value, usize)> {
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
    let one_thread = direct && cx.bidir_mode != BidirMode::Threads;
    let mut warm = 0;
    let runs = if one_thread {
        let mut one = || async_pair(&s_up, &s_down, up, src, down, dst);
        warm = super::point::warm_up(super::point::BIDIR_WARM_UP, cx.budget, &mut one)?;
        super::point::runs_with_cpu(cx.iters, cx.budget, &mut *between, one)?
    } else {
        // The d2h on a partner thread started once for the whole measurement (see `with_partner`).
        with_partner(
            || s_down.download(down, 0, dst).and_then(|p| p.wait()),
            |partner| {
                // Every iteration takes the partner's result, whatever failed, before the next start.
                let mut one = || -> Result<(f64, [f64; 4])> {
                    partner.start()?;
                    let a = Instant::now();
                    let r_up = s_up.upload(src, up, 0).and_then(|p| p.wait());
                    let b = Instant::now();
                    let (r_down, c, d) = partner.finish()?;
                    r_up?;
                    r_down?;
                    Ok(spans(a, b, c, d))
                };
                warm = super::point::warm_up(super::point::BIDIR_WARM_UP, cx.budget, &mut one)?;
                super::point::runs_with_cpu(cx.iters, cx.budget, &mut *between, one)
            },
        )?
    };
    let (mut runs, cpu, cores) = runs;
    let s = summarize(&runs.iter().map(|r| r.0).collect::<Vec<_>>()).ok_or("no samples")?;
    runs.sort_by(|x, y| x.0.total_cmp(&y.0));
    let m = runs[runs.len() / 2].1;
    let extra = json!({
        "h2d_start_us": m[0] * 1e6, "h2d_end_us": m[1] * 1e6,
        "d2h_start_us": m[2] * 1e6, "d2h_end_us": m[3] * 1e6,
        "mode": if one_thread { "two streams, one thread (async copies)" } else { "two streams (one thread each)" },
        "queues": queues,
        "cpu_s_per_copy": cpu,
        "cpu_cores": cores,
    });
    Ok((s, extra, warm))
}

/// The wall time of a pair and each side's start and end, from the earlier start.
fn spans(a: Instant, b: Instant, c: Instant, d: Instant) -> (f64, [f64; 4]) {
    let t0 = a.min(c);
    let secs = |t: Instant| t.duration_since(t0).as_secs_f64();
    (secs(b.max(d)), [secs(a), secs(b), secs(c), secs(d)])
}

/// How long [`async_pair`] polls its two events before it waits on them instead: longer than
/// any pair the bench times (a 1 GiB pair takes ~37 ms on the H200), so the ends it reports
/// are when a poll first saw each copy done; past it, `Event::wait` (the library's timeout,
/// device loss) ends a pair that never completes, where polling would spin forever.
const POLL_FOR: std::time::Duration = std::time::Duration::from_secs(2);

/// One pair from one thread: the h2d enqueued and submitted on `s_up`, the d2h on `s_down`,
/// then both polled until done, each end timed when its poll first sees it (both are polled
/// only once both are submitted). Times from the h2d's enqueue: the d2h's start is when its
/// enqueue began.
///
/// `s_up` and `s_down` are [`bidir`]'s own streams, dropped there before its borrows of `src`
/// and `dst` end; that is what the copies' safety rests on where this function returns an
/// error (see below).
fn async_pair(
    s_up: &Stream,
    s_down: &Stream,
    up: &DeviceBuffer,
    src: &[u8],
    down: &DeviceBuffer,
    dst: &mut [u8],
) -> Result<(f64, [f64; 4])> {
    let a = Instant::now();
    let r = (|| -> Result<(f64, [f64; 4])> {
        // SAFETY: (both copies) `src` and `dst` are borrowed for this whole call, and `dst`
        // exclusively: nothing else reads or writes them while the copies can run. Before they
        // are free again, either both streams' `synchronize` below returned Ok (every copy on
        // them completed), or, on any error (a copy enqueued in part, a failed submission, a
        // wait that could not confirm completion), `bidir` returns it and drops both streams,
        // which it owns and never leaks, before its own borrows of `src` and `dst` end; a
        // stream's drop waits for its submitted work, or for its queue to go idle where it
        // cannot confirm that (`Stream`'s shutdown).
        unsafe { s_up.copy_to_device_async(src.as_ptr(), src.len(), up, 0) }?;
        let ev_up = s_up.record()?;
        let c = Instant::now();
        // SAFETY: as above.
        unsafe { s_down.copy_to_host_async(down, 0, dst.as_mut_ptr(), dst.len()) }?;
        let ev_down = s_down.record()?;
        let (mut b, mut d) = (None, None);
        while (b.is_none() || d.is_none()) && a.elapsed() < POLL_FOR {
            if b.is_none() && ev_up.is_done()? {
                b = Some(Instant::now());
            }
            if d.is_none() && ev_down.is_done()? {
                d = Some(Instant::now());
            }
        }
        // Past POLL_FOR: block instead (an error once the library gives up on the device).
        let b = match b {
            Some(t) => t,
            None => ev_up.wait().map(|()| Instant::now())?,
        };
        let d = match d {
            Some(t) => t,
            None => ev_down.wait().map(|()| Instant::now())?,
        };
        Ok(spans(a, b, c, d))
    })();
    // Both streams settled (their results checked) whatever failed above.
    let (su, sd) = (s_up.synchronize(), s_down.synchronize());
    let r = r?;
    su?;
    sd?;
    Ok(r)
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
