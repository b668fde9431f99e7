//! Costs: register/unregister and alloc_pinned/free_pinned per size, and `find` with 1, 100
//! and 10 000 live registrations.

use super::paths::touched_pages;
use super::{Ctx, Point, point};
use crate::devices::anyhow_free::Result;
use crate::stats::{Summary, size_label, summarize};
use std::time::Instant;
use vkhost::host;

/// Lookups timed together in one round of the `find` points: each round's time per lookup is
/// one sample (a lookup alone, ~50-200 ns, is below the clock's resolution to time).
const FIND_ROUND: usize = 20_000;

/// register/unregister, alloc_pinned/free_pinned per size; find at 1, 100, 10 000 entries.
pub(super) fn costs(cx: &mut Ctx, sizes: &[u64], notes: &mut Vec<String>) -> Result<()> {
    let dev = cx.dev.clone();
    let iters = cx.iters;
    let can_register = dev.host_registration().is_ok();
    for &size in sizes {
        if super::interrupted() {
            return Ok(());
        }
        let n = size as usize;
        cx.pb.set_message(format!("costs {}", size_label(size)));
        if can_register {
            let mut pages = touched_pages(n, false)?;
            let (mut reg, mut unreg, mut released) = (Vec::new(), Vec::new(), Vec::new());
            let start = Instant::now();
            // Up to --iters rounds while within --budget (at least one), as every point.
            for _ in (0..iters.max(1)).take_while(|&k| k == 0 || start.elapsed() < cx.budget) {
                let t = Instant::now();
                // SAFETY: `pages` outlives the unregister below.
                unsafe { host::register(&dev, pages.slice().as_mut_ptr(), n) }?;
                reg.push(t.elapsed().as_secs_f64());
                let t = Instant::now();
                host::unregister(&dev, pages.ptr)?;
                unreg.push(t.elapsed().as_secs_f64());
                // `unregister` returns once no work can touch the pages and hands the import to
                // the background releaser, which unpins them. Wait for that here
                // (`Device::release_queued`), outside the timed register: otherwise the next
                // `register` is timed while the previous import is being unpinned on another
                // thread, a cost of the loop and not of `register`.
                // The wait is reported too: unregister + release, the whole cost of the pages.
                dev.release_queued();
                released.push(t.elapsed().as_secs_f64());
            }
            for (op, v) in [("register", &reg), ("unregister", &unreg), ("unregister+release", &released)] {
                if let Some(s) = summarize(v) {
                    let mut p = point("vulkan", "cost", "registered", op, size, size, s);
                    p.warmup = 0;
                    cx.points.push(p);
                }
            }
        }
        // Where the device keeps freed blocks of this size (`OpenOptions::pinned_cache`: driver
        // blocks that fit its cap), a program that allocates and frees in a loop gets the kept
        // block back: that is `alloc_pinned`, and `alloc_pinned_uncached` is a new driver block,
        // timed in the same round with the cache emptied first (`release_queued`, untimed).
        // Elsewhere `alloc_pinned` is the new block. Whether it keeps them, one untimed block
        // tells.
        let cached = {
            dev.release_queued();
            host::free_pinned(&dev, host::alloc_pinned(&dev, n)?)?;
            let kept = dev.pinned_cache().bytes >= size;
            dev.release_queued();
            kept
        };
        let (mut al, mut fresh, mut fr, mut fr_released) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let start = Instant::now();
        for _ in (0..iters.max(1)).take_while(|&k| k == 0 || start.elapsed() < cx.budget) {
            if cached {
                let t = Instant::now();
                let p = host::alloc_pinned(&dev, n)?;
                fresh.push(t.elapsed().as_secs_f64());
                host::free_pinned(&dev, p)?;
            }
            let t = Instant::now();
            let p = host::alloc_pinned(&dev, n)?;
            al.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            host::free_pinned(&dev, p)?;
            fr.push(t.elapsed().as_secs_f64());
            // As for unregister: `free_pinned` hands the memory to the background releaser (or
            // keeps it for reuse); the next alloc is timed only after it is freed
            // (`release_queued` frees both), and the whole cost is reported too.
            dev.release_queued();
            fr_released.push(t.elapsed().as_secs_f64());
        }
        for (op, v) in
            [("alloc_pinned", &al), ("alloc_pinned_uncached", &fresh), ("free_pinned", &fr), ("free_pinned+release", &fr_released)]
        {
            if let Some(s) = summarize(v) {
                let mut p = point("vulkan", "cost", "pinned", op, size, size, s);
                p.warmup = 0;
                if cached {
                    p.note = match op {
                        "alloc_pinned" => "the freed block of this size, kept for reuse (pinned_cache)",
                        "alloc_pinned_uncached" => "a new driver block: the cache emptied first",
                        "free_pinned" => "into the cache (pinned_cache)",
                        _ => "into the cache, then freed by release_queued (which empties it)",
                    }
                    .into();
                }
                cx.points.push(p);
            }
        }
    }
    if !can_register {
        notes.push("register costs and find: skipped, host registration unavailable".into());
        return Ok(());
    }
    let counts: &[usize] = &[1, 100, 10_000];
    for &count in counts {
        if super::interrupted() {
            return Ok(());
        }
        cx.pb.set_message(format!("find with {count} registrations"));
        let page = host::page_size();
        let mut pages = touched_pages(2 * count * page, false)?;
        let base = pages.slice().as_mut_ptr() as usize;
        let mut done = 0;
        let mut r: Result<()> = Ok(());
        for i in 0..count {
            // SAFETY: `pages` outlives the unregisters below.
            if let Err(e) = unsafe { host::register(&dev, base + 2 * i * page, page) } {
                r = Err(e.into());
                break;
            }
            done += 1;
        }
        if r.is_ok() {
            // One untimed round, then up to --iters timed rounds within --budget (at least
            // one), as every point: each round's time per lookup is a sample, so the median,
            // spread and the unstable mark mean what they mean for the copies.
            let mut x = 12345usize;
            let (mut hits, mut lookups) = (0usize, 0usize);
            let mut round = |hits: &mut usize, lookups: &mut usize| {
                let t = Instant::now();
                for _ in 0..FIND_ROUND {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let i = (x >> 33) % count;
                    *hits += host::find(&dev, base + 2 * i * page + 64, 256).is_some() as usize;
                }
                *lookups += FIND_ROUND;
                t.elapsed().as_secs_f64() / FIND_ROUND as f64
            };
            round(&mut hits, &mut lookups);
            let mut per = Vec::with_capacity(iters.max(1));
            let start = Instant::now();
            for _ in (0..iters.max(1)).take_while(|&k| k == 0 || start.elapsed() < cx.budget) {
                per.push(round(&mut hits, &mut lookups));
            }
            if hits != lookups {
                cx.failures += 1;
                eprintln!("FAIL find: {hits} of {lookups} lookups found their registration");
            }
            let s = summarize(&per).ok_or("find: no rounds")?;
            let mut p = point("vulkan", "find", "registered", "find", count as u64, 0, s);
            p.verified = Some(hits == lookups);
            p.note = format!("{count} live registrations; {FIND_ROUND} lookups a round");
            cx.points.push(p);
        }
        for i in 0..done {
            host::unregister(&dev, base + 2 * i * page)?;
        }
        r?;
    }
    // The testcases after these start with no release still queued.
    dev.release_queued();
    Ok(())
}

/// What the costs process measured (`in_child`).
pub(super) struct ChildCosts {
    pub points: Vec<Point>,
    pub notes: Vec<String>,
    /// Points that failed their check there (a `find` that missed).
    pub failures: usize,
}

/// The `costs` testcase in a process of its own: this executable, `bench -t costs` with the
/// same sizes, iterations, budget, device and CPUs, writing its points as JSON for this process to read.
/// Run before this process opens its device.
///
/// Why (H200, docs/PERFORMANCE.md 2026-12-02): what costs does (allocating and freeing pinned
/// blocks up to 1 GiB, 10 000 registrations then their unregisters) leaves pinned blocks slower
/// for 4 KiB-4 MiB copies (4 KiB 12.6 -> 17-21 us, 1 MiB 31 -> 21-24 GB/s, 4 MiB 44 -> 34) in the
/// process that did it (`CHURN` in examples/pinned_small.rs), and in a process whose device was
/// already open while another process did it (whether its blocks were allocated before or after),
/// but not in a process that opens its device after the churning one exited (`exitchurn` in
/// scripts/h200-run.sh: 2 of 2 fast). Measured after the copies instead, costs would be those of
/// a process that just moved ~100 GiB (register 1 GiB 73 ms against 52).
pub(super) fn in_child(
    device: Option<usize>,
    cpu: Option<&str>,
    sizes: &[u64],
    iters: usize,
    budget: std::time::Duration,
) -> Result<ChildCosts> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable to run the costs in: {e}"))?;
    let dir = PrivateDir::new()?;
    let out = dir.0.join("costs.json");
    let sizes: Vec<String> = sizes.iter().map(u64::to_string).collect();
    let mut cmd = std::process::Command::new(exe);
    let budget = budget.as_secs_f64().to_string();
    cmd.args(["bench", "-t", "costs", "--sizes", &sizes.join(","), "--iters", &iters.to_string(), "--budget", &budget, "--json"]).arg(&out);
    // The device this process will open: the same --device, or the same default and
    // VKHOST_DEVICE (inherited).
    if let Some(d) = device {
        cmd.args(["--device", &d.to_string()]);
    }
    if let Some(c) = cpu {
        cmd.args(["--cpu", c]);
    }
    // Its table is this process's to print; its errors go straight to the user.
    cmd.stdout(std::process::Stdio::null());
    let status = cmd.status().map_err(|e| format!("cannot run the costs process: {e}"))?;
    // 0: all verified; 2: a check failed; 130: Ctrl-C (what was measured is still written, and
    // this process, which got the same Ctrl-C, stops too).
    if !matches!(status.code(), Some(0 | 2 | 130)) {
        // Its error went straight to the user's terminal, just above.
        return Err(format!("the costs process failed ({status}; its error is above)").into());
    }
    let text = std::fs::read_to_string(&out).map_err(|e| format!("reading the costs process's {}: {e}", out.display()))?;
    let doc: serde_json::Value = serde_json::from_str(&text)?;
    let points = doc["results"].as_array().map(|v| v.iter().filter_map(from_json).collect()).unwrap_or_default();
    // Its Ctrl-C note is this process's to make (it got the same Ctrl-C).
    let notes = doc["run"]["notes"]
        .as_array()
        .map(|v| v.iter().filter_map(|n| n.as_str()).filter(|n| !n.starts_with("interrupted")).map(String::from).collect())
        .unwrap_or_default();
    let failures = doc["run"]["failures"].as_u64().unwrap_or(0) as usize;
    Ok(ChildCosts { points, notes, failures })
}

/// A directory only this user can enter, made new for one costs process (never one left by an
/// earlier run, nor a path another user prepared), removed with what is in it on drop.
struct PrivateDir(std::path::PathBuf);

impl PrivateDir {
    fn new() -> Result<PrivateDir> {
        use std::os::unix::fs::DirBuilderExt;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let base = std::env::temp_dir();
        let mut last = None;
        for k in 0..16u32 {
            let d = base.join(format!("vkhost-bench-{}-{nanos:x}-{k}", std::process::id()));
            // `create` fails if anything is already there: nothing of someone else's is reused.
            match std::fs::DirBuilder::new().mode(0o700).create(&d) {
                Ok(()) => return Ok(PrivateDir(d)),
                Err(e) => last = Some(e),
            }
        }
        Err(format!(
            "cannot make a directory in {} for the costs process: {}",
            base.display(),
            last.map(|e| e.to_string()).unwrap_or_default()
        )
        .into())
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A cost or find point back from its `--json` record (`output::to_json`); None for any other.
fn from_json(v: &serde_json::Value) -> Option<Point> {
    let kind = match v["kind"].as_str()? {
        "cost" => "cost",
        "find" => "find",
        _ => return None,
    };
    let f = |k: &str| v[k].as_f64();
    let s = Summary {
        median: f("median_s")?,
        mean: f("mean_s")?,
        stddev: f("stddev_s")?,
        min: f("min_s")?,
        max: f("max_s")?,
        n: v["iters"].as_u64()? as usize,
    };
    let mut p = point("vulkan", kind, v["path"].as_str()?, v["dir"].as_str()?, v["size"].as_u64()?, v["bytes_moved"].as_u64()?, s);
    p.verified = v["verified"].as_bool();
    p.note = v["note"].as_str().unwrap_or_default().to_string();
    p.warmup = v["warmup_iters"].as_u64().unwrap_or(0) as usize;
    p.extra = v["extra"].clone();
    Some(p)
}
