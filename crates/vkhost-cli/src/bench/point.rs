//! One measured point (`Point`, `point`), the timing loop every measurement shares
//! (`measure`), and the non-zero pattern the round-trip checks write (`pattern`).

use crate::devices::anyhow_free::Result;
use crate::stats::{Summary, gbps, summarize};
use serde_json::Value;
use std::time::{Duration, Instant};

/// One measured point.
#[derive(Debug, Clone)]
pub struct Point {
    pub api: &'static str,
    pub kind: &'static str,
    pub path: String,
    pub dir: String,
    /// Moved by the built-in copy kernel (an `_sm` testcase) rather than the copy engine.
    pub sm: bool,
    pub size: u64,
    pub bytes_moved: u64,
    pub s: Summary,
    pub verified: Option<bool>,
    pub note: String,
    /// What tells apart points of one testcase and size: the bidir queue pair, small_async's
    /// "async" or "sync"; empty otherwise.
    pub variant: String,
    /// Untimed runs before the timed ones (1 for every `measure`; 0 for costs and find).
    pub warmup: usize,
    pub extra: Value,
}

impl Point {
    pub fn gbps(&self) -> f64 {
        gbps(self.bytes_moved, self.s.median)
    }

    /// The testcase that measured this point.
    pub fn testcase(&self) -> &'static str {
        super::testcase::testcase_of(self.kind, &self.path, &self.dir, self.sm)
    }
}

/// How long a bidir point's pairs run untimed first, Vulkan's and CUDA's alike (see
/// [`warm_up`]).
pub const BIDIR_WARM_UP: Duration = Duration::from_millis(500);

/// Runs `one` untimed for `span` (or `budget`, if less), at least once, and says how many
/// times it ran. The bidir points use it with [`BIDIR_WARM_UP`]: on the H200 the first few
/// hundred milliseconds of two-way traffic in a process often ran at 48-49 GB/s and everything
/// after at 57-58 (one-way copies just before did not shorten that stretch, a pause made it no
/// shorter, and which point fell into it moved with `--sizes`: docs/PERFORMANCE.md,
/// twenty-second session). One untimed pair, as every other point has, left the whole
/// 256 MiB point (~100 ms) inside it.
pub fn warm_up<T>(span: Duration, budget: Duration, one: &mut impl FnMut() -> Result<T>) -> Result<usize> {
    let start = Instant::now();
    let span = budget.min(span);
    one()?;
    let mut n = 1;
    while start.elapsed() < span && !super::interrupted() {
        one()?;
        n += 1;
    }
    Ok(n)
}

/// Runs `f` once to warm up, then up to `iters` timed runs within `budget`.
pub fn measure(iters: usize, budget: Duration, f: impl FnMut() -> Result<()>) -> Result<Summary> {
    measure_with(iters, budget, || {}, f)
}

/// `measure`, with at least `min` timed runs whatever the budget (the latency testcases' floor).
pub fn measure_at_least(iters: usize, min: usize, budget: Duration, mut f: impl FnMut() -> Result<()>) -> Result<Summary> {
    f()?;
    let mut t = Vec::with_capacity(iters.clamp(1, 1024));
    let start = Instant::now();
    while t.len() < iters.max(min).max(1) && (t.len() < min.max(1) || start.elapsed() < budget) {
        let t0 = Instant::now();
        f()?;
        t.push(t0.elapsed().as_secs_f64());
    }
    summarize(&t).ok_or_else(|| "no samples".into())
}

/// `measure`, calling `between` untimed before every timed run (`--flush-cache`).
pub fn measure_with(iters: usize, budget: Duration, between: impl FnMut(), mut f: impl FnMut() -> Result<()>) -> Result<Summary> {
    f()?;
    let t = runs_within(iters, budget, between, || {
        let t0 = Instant::now();
        f()?;
        Ok(t0.elapsed().as_secs_f64())
    })?;
    summarize(&t).ok_or_else(|| "no samples".into())
}

/// [`measure_with`], and the process's CPU cost of the timed runs: CPU seconds per copy, and
/// cores busy during a copy (that CPU time over the wall time of the same runs). The warm-up
/// and the untimed `between` (a cache flush) count in neither; the CPU clock is read outside
/// each run's timing.
pub fn measure_with_cpu(
    iters: usize,
    budget: Duration,
    between: impl FnMut(),
    mut f: impl FnMut() -> Result<()>,
) -> Result<(Summary, f64, f64)> {
    f()?;
    let (t, cpu, cores) = runs_with_cpu(iters, budget, between, || {
        let t0 = Instant::now();
        f()?;
        Ok(t0.elapsed().as_secs_f64())
    })?;
    let s = summarize(&t).ok_or("no samples")?;
    Ok((s, cpu, cores))
}

/// [`runs_within`], with the process's CPU time over the runs (every thread's: the staging
/// threads and a bidir partner's too; `between` is not counted): the CPU seconds per run, and
/// the cores busy on average while the runs ran.
pub fn runs_with_cpu<T>(
    iters: usize,
    budget: Duration,
    between: impl FnMut(),
    mut one: impl FnMut() -> Result<T>,
) -> Result<(Vec<T>, f64, f64)> {
    let (mut cpu, mut wall) = (0.0, 0.0);
    let t = runs_within(iters, budget, between, || {
        let (c0, w0) = (cpu_seconds(), Instant::now());
        let r = one()?;
        cpu += cpu_seconds() - c0;
        wall += w0.elapsed().as_secs_f64();
        Ok(r)
    })?;
    let n = t.len().max(1) as f64;
    Ok((t, cpu / n, cpu / f64::max(wall, 1e-12)))
}

/// Up to `iters` runs of `one` (at least one) while within `budget`, each after an untimed
/// `between`; what each run returns (for runs that time themselves, such as a pair of threads).
pub fn runs_within<T>(iters: usize, budget: Duration, mut between: impl FnMut(), mut one: impl FnMut() -> Result<T>) -> Result<Vec<T>> {
    // Not `iters` up front: `--iters` may be huge with a small budget.
    let mut runs = Vec::with_capacity(iters.clamp(1, 1024));
    let start = Instant::now();
    while runs.len() < iters.max(1) && (runs.is_empty() || start.elapsed() < budget) {
        between();
        runs.push(one()?);
    }
    Ok(runs)
}

/// CPU time of the whole process (every thread, user + system), in seconds.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given; a zeroed rusage is a valid value.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) } != 0 {
        return 0.0;
    }
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    t(r.ru_utime) + t(r.ru_stime)
}

/// Fills `buf` with a non-zero xorshift pattern of `seed`: what every round-trip check writes.
pub fn pattern(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    for c in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = (x | 0x0101_0101_0101_0101).to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
}
/// A point with no check, note or extra data yet.
pub fn point(api: &'static str, kind: &'static str, path: &str, dir: &str, size: u64, moved: u64, s: Summary) -> Point {
    Point {
        api,
        kind,
        path: path.into(),
        dir: dir.into(),
        sm: false,
        size,
        bytes_moved: moved,
        s,
        verified: None,
        note: String::new(),
        // small-async's two timings of one testcase and size (CUDA's too) differ by this.
        variant: if kind == "small-async" { dir.split('-').next().unwrap_or_default().into() } else { String::new() },
        warmup: 1,
        extra: Value::Null,
    }
}
