//! `vkhost bench --devices all|LIST`: nvbandwidth's host × GPU matrix. For each path (pinned,
//! registered, pageable), direction (h2d, d2h) and size: every device alone, then all of them at
//! once from one process (one thread per device, each with its own host buffer and device
//! buffer, as CUDA's multi-GPU figure is measured), reported as the aggregate GB/s and its ratio
//! to the sum of the devices alone. Every point is verified once per device.
//!
//! `--json` writes `{run, matrix}` (docs/bench-devices.schema.json) and `--csv` a line per
//! device and one for the aggregate of each row, also after Ctrl-C with the rows measured.

use super::point::{measure, pattern};
use super::{Args, DirKind, PathKind};
use crate::devices::anyhow_free::Result;
use crate::pages::Pages;
use crate::stats::{Summary, gbps, size_label};
use serde_json::{Value, json};
use std::process::ExitCode;
use std::time::Duration;
use vkhost::{Device, DeviceBuffer, PinnedBuffer};

/// One device's side of a point: its host memory (by path) and device buffer.
struct Side {
    dev: Device,
    buf: DeviceBuffer,
    pinned: Option<PinnedBuffer>,
    /// The registered path's memory: page-aligned and touched before it is registered, as the
    /// single-device sweep's (`paths::touched_pages`). A `vec![0; n]` registered untouched
    /// had its pages faulted in by the driver's pinning, and the H200 then wrote it at 36-39
    /// GB/s against 52 for touched pages (2026-12-01).
    pages: Option<Pages>,
    plain: Vec<u8>,
    /// Whether `pages` is registered on `dev` (the registered path), for the Side's life.
    registered: bool,
}

impl Side {
    fn new(dev: &Device, path: PathKind, n: usize) -> Result<Side> {
        let buf = dev.alloc_buffer(n)?;
        let (pinned, pages, plain) = match path {
            PathKind::Pinned => (Some(PinnedBuffer::new(dev, n)?), None, Vec::new()),
            PathKind::Registered => (None, Some(super::paths::touched_pages(n, false)?), Vec::new()),
            _ => {
                let mut v = vec![0u8; n];
                v.fill(1);
                (None, None, v)
            }
        };
        let mut side = Side { dev: dev.clone(), buf, pinned, pages, plain, registered: false };
        if let Some(p) = &side.pages {
            // SAFETY: the mapping is owned by the Side, so it stays mapped as long as the Side
            // does; its Drop unregisters before the mapping goes, and a Side that never drops
            // leaks the mapping with the registration, so the pages are never unmapped under it.
            // Only this Side's synchronous copies touch it.
            unsafe { vkhost::host::register(dev, p.ptr, p.len) }?;
            side.registered = true;
        }
        Ok(side)
    }

    /// One synchronous copy.
    fn copy(buf: &DeviceBuffer, host: &mut [u8], dir: DirKind) -> Result<()> {
        match dir {
            DirKind::H2d => buf.write(0, host)?,
            _ => buf.read(0, host)?,
        }
        Ok(())
    }

    /// Runs `f` with this side's host bytes: the pinned block, or the (registered or plain) Vec.
    fn with_host<T>(&mut self, f: impl FnOnce(&DeviceBuffer, &mut [u8]) -> Result<T>) -> Result<T> {
        if let Some(p) = self.pinned.as_mut() {
            return f(&self.buf, p);
        }
        match self.pages.as_mut() {
            Some(p) => f(&self.buf, p.slice()),
            None => f(&self.buf, &mut self.plain),
        }
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if let (true, Some(p)) = (self.registered, &self.pages) {
            if let Err(e) = vkhost::host::unregister(&self.dev, p.ptr) {
                eprintln!("bench --devices: unregister failed: {e}");
            }
        }
    }
}

/// Parses `all` or a comma list of indices.
fn indices(spec: &str) -> Result<Vec<usize>> {
    if spec == "all" {
        return Ok(vkhost::devices()?.iter().map(|i| i.index).collect());
    }
    let v: Vec<usize> = spec
        .split(',')
        .map(|s| {
            s.trim().parse::<usize>().map_err(|_| {
                if s.trim() == "all" {
                    format!("--devices {spec:?}: `all` stands alone, not in a list").into()
                } else {
                    format!("--devices: {s:?} is not a device index (or give `all` alone)").into()
                }
            })
        })
        .collect::<Result<_>>()?;
    let infos = vkhost::devices()?;
    for &i in &v {
        crate::devices::check_index("--devices", i, &infos)?;
    }
    Ok(v)
}

/// Verifies one round trip of `n` bytes through `side` for `dir`, in `scratch` (two buffers of
/// the largest size, allocated once per run, as the plain bench's check buffers are). With a
/// fresh pair of `Vec`s per point, 2 GiB allocated and freed right before a 1 GiB point's timed
/// copies, the matrix's pageable 1 GiB d2h was below the plain bench's in 6 of 8 process pairs
/// on the H200 (median 47.72 against 49.23 GB/s, docs/PERFORMANCE.md, eleventh session).
fn verify(side: &mut Side, dir: DirKind, n: usize, k: usize, scratch: &mut (Vec<u8>, Vec<u8>)) -> Result<bool> {
    verify_with(side, dir, n, k, scratch, Side::copy)
}

/// The pattern seed of the check of `dir` at `n` bytes on the `k`th device: each direction's
/// its own, so that a d2h check never wants the bytes the h2d check of its size left in the
/// device buffer.
fn seed(n: usize, k: usize, dir: DirKind) -> u64 {
    n as u64 ^ ((k as u64) << 40) ^ ((dir as u64) << 56)
}

/// [`verify`], with the timed copy `copy` (a test's stands for a copy that moves nothing).
fn verify_with(
    side: &mut Side,
    dir: DirKind,
    n: usize,
    k: usize,
    scratch: &mut (Vec<u8>, Vec<u8>),
    copy: impl FnOnce(&DeviceBuffer, &mut [u8], DirKind) -> Result<()>,
) -> Result<bool> {
    let (want, got) = (&mut scratch.0[..n], &mut scratch.1[..n]);
    pattern(want, seed(n, k, dir));
    got.fill(0);
    match dir {
        DirKind::H2d => {
            side.with_host(|buf, host| {
                host[..n].copy_from_slice(want);
                copy(buf, &mut host[..n], dir)
            })?;
            side.buf.read(0, got)?;
        }
        _ => {
            side.buf.write(0, want)?;
            side.with_host(|buf, host| {
                // Zeroed first, so that a read that moves nothing fails whatever the host
                // memory held before.
                host[..n].fill(0);
                copy(buf, &mut host[..n], dir)?;
                got.copy_from_slice(&host[..n]);
                Ok(())
            })?;
        }
    }
    Ok(got == want)
}

/// The `--devices` run: prints the matrix and writes `--json` and `--csv`; exit code 130 when
/// interrupted, else 2 on any failed check, else 1 when a path or point was left out by an error,
/// an output could not be written or a device's destroy failed.
pub(super) fn run(a: &Args, spec: &str) -> Result<ExitCode> {
    let started = std::time::SystemTime::now();
    let refused: Vec<&str> = [(a.plot.is_some(), "--plot"), (a.compare.is_some(), "--compare"), (a.baseline.is_some(), "--baseline")]
        .into_iter()
        .filter_map(|(set, name)| set.then_some(name))
        .collect();
    if !refused.is_empty() {
        return Err(format!(
            "--devices refuses {}: --plot, --compare and --baseline are for single-device runs (the matrix is printed, and \
             written with --json and --csv)",
            refused.join(", ")
        )
        .into());
    }
    // Flags the matrix has no use for are refused, not ignored (a user who passes --cpu thinks
    // the run is pinned to those CPUs). Default-valued ones count when changed.
    let unused: Vec<&str> = [
        (!a.testcases.is_empty(), "-t"),
        (a.cpu.is_some(), "--cpu"),
        (a.hugepages, "--hugepages"),
        (a.flush_cache, "--flush-cache"),
        (a.no_costs, "--no-costs"),
        (a.plant_mismatch, "--plant-mismatch"),
        (a.bar_threads.is_some(), "--bar-threads"),
        (a.bar_read_cap != "4M", "--bar-read-cap"),
        (a.bar_reads != super::BarReads::Stream, "--bar-reads"),
        (a.max_size != "1G", "--max-size"),
        (a.bidir_queues != ["copy-copy"], "--bidir-queues"),
        (a.bidir_mode != super::bidir::BidirMode::Auto, "--bidir-mode"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect();
    if !unused.is_empty() {
        return Err(format!(
            "--devices measures pinned, registered and pageable h2d and d2h with --sizes, --iters, --budget, --paths, --dirs, \
             --quick and the --staging-* options, and writes --json and --csv; it has no use for {}",
            unused.join(", ")
        )
        .into());
    }
    // The matrix is host memory to and from each device: --dirs d2d or --paths bar,device alone
    // would print an empty table.
    let paths = [PathKind::Pinned, PathKind::Registered, PathKind::Pageable];
    if a.paths.as_ref().is_some_and(|v| !paths.iter().any(|p| v.contains(p)))
        || a.dirs.as_ref().is_some_and(|v| !v.contains(&DirKind::H2d) && !v.contains(&DirKind::D2h))
    {
        return Err("--devices measures pinned, registered and pageable memory, h2d and d2h: --paths and --dirs leave nothing".into());
    }
    // Before measuring, as the sweep: an output that cannot be written would lose the run.
    super::check_outputs(&[("--json", &a.json), ("--csv", &a.csv)])?;
    let idx = indices(spec)?;
    if idx.is_empty() {
        return Err("--devices: no Vulkan device".into());
    }
    // Uploads through `DeviceBuffer::write` on the copy engine's path, as the plain bench's
    // `_ce` rows it is compared with: `BarAssist::Auto` (the default) would share large writes
    // with CPU stores on a host that reads host memory slowly.
    let opts = vkhost::OpenOptions { bar_assist: vkhost::BarAssist::Off, ..super::open_options(a)? };
    let sizes: Vec<u64> = match &a.sizes {
        Some(v) => super::unique_sizes(v.iter().map(|s| super::size_arg("--sizes", s)).collect::<Result<_>>()?),
        None if a.quick => vec![1 << 20, 16 << 20],
        None => vec![16 << 20, 256 << 20, 1 << 30],
    };
    check_sizes(&sizes, a, idx.len())?;
    let devs: Vec<Device> = idx.iter().map(|&i| Device::open_with(i, &opts)).collect::<vkhost::Result<_>>()?;
    let iters = if a.quick { a.iters.min(5) } else { a.iters };
    let budget = Duration::from_secs_f64(if a.quick { a.budget.min(0.5) } else { a.budget });
    for d in &devs {
        let i = d.info();
        println!(
            "[{}] {} ({}, {}); host registration: {}",
            i.index,
            i.name,
            i.device_type.as_str(),
            i.driver_name,
            crate::devices::registration_line(&d.host_registration())
        );
    }
    let names: Vec<String> = idx.iter().map(|i| format!("dev{i}")).collect();
    print!("{:<11} {:<4} {:>6}", "path", "dir", "size");
    for n in &names {
        print!(" {n:>9}");
    }
    println!(" {:>10} {:>8} check", "aggregate", "vs sum");
    let mut failures = 0;
    // Paths and points left out by an error (noted; the run goes on, then exits 1).
    let mut errors = 0;
    let mut notes: Vec<String> = Vec::new();
    // The rows of `--json`'s `matrix`, as measured (the CSV is made from them).
    let mut rows: Vec<Value> = Vec::new();
    // Every path's memory on every device first, each allocated once at the largest size and
    // reused for every size, then the measurements (as the single-device sweep does): memory
    // allocated after gigabytes of other paths' allocations gets scattered physical pages, which
    // the device reads and the staging memcpy touches slower (pageable 256 MiB measured 15-20%
    // below the plain bench when each path allocated after the previous one was freed).
    let max = *sizes.iter().max().unwrap_or(&(1 << 20)) as usize;
    let mut all: Vec<(PathKind, Vec<Side>)> = Vec::new();
    for path in paths {
        if a.paths.as_ref().is_some_and(|v| !v.contains(&path)) {
            continue;
        }
        if path == PathKind::Registered && devs.iter().any(|d| d.host_registration().is_err()) {
            println!("{:<11} skipped: registration is unavailable on a device", "registered");
            notes.push("registered: skipped (registration is unavailable on a device)".into());
            continue;
        }
        // A path whose memory cannot be had (out of pinned memory, a refused registration) is
        // skipped with a note, as in the sweep, and the others still run and are written.
        match devs.iter().map(|d| Side::new(d, path, max)).collect::<Result<Vec<_>>>() {
            Ok(sides) => all.push((path, sides)),
            Err(e) => {
                println!("{:<11} skipped: {e}", path.name());
                notes.push(format!("{}: skipped ({e})", path.name()));
                errors += 1;
            }
        }
    }
    let mut scratch = (vec![0u8; max], vec![0u8; max]);
    for (path, sides) in &mut all {
        for dir in [DirKind::H2d, DirKind::D2h] {
            if a.dirs.as_ref().is_some_and(|v| !v.contains(&dir)) {
                continue;
            }
            for &size in &sizes {
                if super::interrupted() {
                    break;
                }
                let n = size as usize;
                let point = |sides: &mut Vec<Side>, scratch: &mut (Vec<u8>, Vec<u8>)| -> Result<(bool, Vec<Summary>, Summary)> {
                    let mut ok = true;
                    for (k, s) in sides.iter_mut().enumerate() {
                        ok &= verify(s, dir, n, k, scratch)?;
                    }
                    let mut alone: Vec<Summary> = Vec::new();
                    for s in sides.iter_mut() {
                        alone.push(s.with_host(|buf, host| measure(iters, budget, || Side::copy(buf, &mut host[..n], dir)))?);
                    }
                    Ok((ok, alone, together(sides, n, dir, iters, budget)?))
                };
                // A point that fails (a copy's error) is noted and the matrix goes on, as the
                // sweep's paths do: the rows measured before it are still printed and written.
                let (ok, alone, together) = match point(sides, &mut scratch) {
                    Ok(p) => p,
                    Err(e) => {
                        println!("{:<11} {:<4} {:>6} error: {e}", path.name(), dir.name(), size_label(size));
                        notes.push(format!("{} {} {}: skipped ({e})", path.name(), dir.name(), size_label(size)));
                        errors += 1;
                        continue;
                    }
                };
                let agg = gbps(size * devs.len() as u64, together.median);
                let sum: f64 = alone.iter().map(|t| gbps(size, t.median)).sum();
                print!("{:<11} {:<4} {:>6}", path.name(), dir.name(), size_label(size));
                for t in &alone {
                    print!(" {:>9.2}", gbps(size, t.median));
                }
                println!(" {agg:>10.2} {:>7.2}x {}", agg / sum, if ok { "ok" } else { "FAIL" });
                if !ok {
                    failures += 1;
                }
                rows.push(row_json(*path, dir, size, &devs, &alone, (agg, sum, together.median), ok));
            }
        }
    }
    drop(all);
    println!(
        "GB/s = 1e9 bytes/s, medians; aggregate = all devices' bytes over the wall time of one round with every device copying at once"
    );
    if super::interrupted() {
        notes.push("interrupted (Ctrl-C): the rows measured so far are reported".into());
    }
    // Every output is attempted even when an earlier one fails, and the failures reported
    // together at the end, as in the sweep.
    let mut write_errors: Vec<String> = Vec::new();
    if let Some(f) = &a.json {
        let doc = json!({ "run": run_json(started, &devs, &sizes, iters, budget, failures, notes), "matrix": rows });
        match std::fs::write(f, serde_json::to_string_pretty(&doc)?) {
            Ok(()) => println!("wrote {}", f.display()),
            Err(e) => write_errors.push(format!("--json {}: {e}", f.display())),
        }
    }
    if let Some(f) = &a.csv {
        match std::fs::write(f, super::output::csv_of(&CSV_COLS, &csv_lines(&rows))) {
            Ok(()) => println!("wrote {}", f.display()),
            Err(e) => write_errors.push(format!("--csv {}: {e}", f.display())),
        }
    }
    for d in devs {
        if let Err(e) = d.destroy() {
            write_errors.push(format!("destroying a device: {e}"));
        }
    }
    for e in &write_errors {
        eprintln!("vkhost: {e}");
    }
    if super::interrupted() {
        // As the single-device sweep: the rows measured so far are printed and written; the
        // rest is not.
        println!("interrupted: the rows above were measured, the rest of the matrix was not");
        return Ok(ExitCode::from(130));
    }
    Ok(if failures > 0 {
        ExitCode::from(2)
    } else if errors > 0 || !write_errors.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Refuses, before any device is opened, sizes whose host memory the machine does not have (as
/// the sweep's `check_sizes` does): every device's memory of every path is allocated up front
/// at the largest size (a host region per device and path) beside the check's two host
/// buffers; more than MemTotal is refused. Necessary, not sufficient. (A 1 TiB `--sizes`
/// skipped every path, then aborted allocating the check's buffers: exit 134.) A size above a
/// device's maxMemoryAllocationSize is not refused here: its paths are skipped with a note.
fn check_sizes(sizes: &[u64], a: &Args, devices: usize) -> Result<()> {
    let Some(&max) = sizes.iter().max() else { return Ok(()) };
    let paths = [PathKind::Pinned, PathKind::Registered, PathKind::Pageable]
        .iter()
        .filter(|p| a.paths.as_ref().is_none_or(|v| v.contains(p)))
        .count() as u64;
    let regions = paths * devices as u64 + 2;
    let need = max.saturating_mul(regions);
    match super::mem_total() {
        Some(ram) if need > ram => {
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            Err(format!(
                "--sizes {}: the matrix holds about {:.1} GiB of host memory at once ({regions} regions of the largest size: one per \
                 device and path, and the check's two), more than this machine's {:.1} GiB",
                size_label(max),
                gib(need),
                gib(ram)
            )
            .into())
        }
        _ => Ok(()),
    }
}

/// A number for the JSON, or null where it is not finite (GB/s of a zero time).
fn num(x: f64) -> Value {
    if x.is_finite() { json!(x) } else { Value::Null }
}

/// One row of `matrix` (docs/BENCH.md, "Several devices"): each device alone in `--devices`
/// order, then all of them at once (`(aggregate GB/s, sum of the devices' GB/s alone, aggregate
/// median)`, as the printed row has them).
fn row_json(
    path: PathKind,
    dir: DirKind,
    size: u64,
    devs: &[Device],
    alone: &[Summary],
    (agg, sum, median): (f64, f64, f64),
    ok: bool,
) -> Value {
    json!({
        "path": path.name(),
        "dir": dir.name(),
        "size": size,
        "per_device": devs.iter().zip(alone).map(|(d, t)| json!({
            "index": d.info().index,
            "gbps": num(gbps(size, t.median)),
            "median_s": t.median,
        })).collect::<Vec<_>>(),
        "aggregate_gbps": num(agg),
        "aggregate_median_s": median,
        "vs_sum": num(agg / sum),
        "ok": ok,
    })
}

/// `run` of `--devices`'s JSON: the sweep's metadata less what only a single-device run has
/// (testcases, the bar and cache-flush settings, the PCIe link, the unstable threshold: rows
/// carry no spread), with `devices` for `device`.
fn run_json(
    started: std::time::SystemTime,
    devs: &[Device],
    sizes: &[u64],
    iters: usize,
    budget: Duration,
    failures: usize,
    mut notes: Vec<String>,
) -> Value {
    let (version, commit) = super::meta::build();
    let devices: Vec<Value> = devs
        .iter()
        .map(|d| {
            let mut j = super::output::device_json(d.info(), &d.host_registration());
            j["copy_queues"] = crate::devices::queues_json(&d.copy_queues());
            j
        })
        .collect();
    // Every device is opened with the same options; the staging spin's default is by the kind
    // of device (none on CPU drivers), so devices of two kinds can differ in it.
    let o = devs[0].options();
    let mut staging = json!({ "threads": o.staging_threads, "chunk_bytes": o.staging_chunk, "slots": o.staging_slots });
    let spins: Vec<u64> = devs.iter().map(|d| d.staging_spin().as_micros() as u64).collect();
    if spins.iter().all(|&s| s == spins[0]) {
        staging["spin_us"] = spins[0].into();
    } else {
        let each: Vec<String> = devs.iter().zip(&spins).map(|(d, s)| format!("[{}] {s} us", d.info().index)).collect();
        notes.push(format!("staging spin differs by device: {}", each.join(", ")));
    }
    json!({
        "schema_version": super::meta::SCHEMA_VERSION,
        "tool": "vkhost bench --devices",
        "vkhost_version": version,
        "git_commit": commit,
        "time": super::meta::rfc3339(started.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)),
        "duration_s": started.elapsed().map(|d| d.as_secs_f64()).unwrap_or(0.0),
        "args": std::env::args().collect::<Vec<_>>(),
        "interrupted": super::interrupted(),
        "sizes": sizes,
        "iters": iters,
        "warmup_iters": 1,
        "budget_s": budget.as_secs_f64(),
        "staging": staging,
        "failures": failures,
        "host": super::meta::host(),
        "affinity": json!({
            "source": "none",
            "requested": null,
            "cpus": super::meta::cpu_list_string(&super::meta::current_affinity()),
            "scope": "not pinned",
            "reason": "--devices does not pin (--cpu is refused with it): its threads, one per device, run where the scheduler puts them",
        }),
        "devices": devices,
        "notes": notes,
    })
}

/// `--csv`'s columns: `device` is the device's index, or `aggregate` on a row's all-at-once
/// line; `position` the device's place in `--devices` (which tells apart the lines of
/// `--devices 0,0`), empty on the aggregate line; `vs_sum` is on that line only; `ok` is the
/// row's check on each of its lines.
const CSV_COLS: [&str; 9] = ["path", "dir", "size", "device", "position", "gbps", "median_s", "vs_sum", "ok"];

/// `--csv`'s lines: for each matrix row, one per device in `--devices` order, then the aggregate.
fn csv_lines(rows: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    for r in rows {
        let line = |device: Value, position: Value, gbps: &Value, median: &Value, vs_sum: &Value| {
            json!({
                "path": r["path"], "dir": r["dir"], "size": r["size"], "device": device, "position": position,
                "gbps": gbps, "median_s": median, "vs_sum": vs_sum, "ok": r["ok"],
            })
        };
        for (k, d) in r["per_device"].as_array().into_iter().flatten().enumerate() {
            out.push(line(d["index"].clone(), json!(k), &d["gbps"], &d["median_s"], &Value::Null));
        }
        out.push(line(json!("aggregate"), Value::Null, &r["aggregate_gbps"], &r["aggregate_median_s"], &r["vs_sum"]));
    }
    out
}

/// The rounds of [`together`]: the measuring thread starts round k by setting `go` to k, each
/// device's thread, spinning on it, runs its copy and counts itself into `done`, and the round
/// ends when all have. Spinning, not a `std::sync::Barrier`: a barrier's futex wake-ups cost
/// tens of microseconds on a cloud host, which one round pays twice, and on one H100 (one
/// device, so the aggregate should equal the device alone) they made `vs sum` 0.81x at 16 MiB
/// and 0.06x at 4 KiB.
#[derive(Default)]
struct Rounds {
    go: std::sync::atomic::AtomicU64,
    done: std::sync::atomic::AtomicUsize,
    stop: std::sync::atomic::AtomicBool,
}

impl Rounds {
    /// Waits until `ready`: spinning first, then yielding (more threads than cores, as on a
    /// CPU driver, must still let the copies run).
    fn wait_until(ready: impl Fn() -> bool) {
        let mut spins = 0u32;
        while !ready() {
            if spins < 1 << 12 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// One round with `threads` device threads: released, then waited for to the last.
    fn run(&self, k: u64, threads: usize) {
        use std::sync::atomic::Ordering;
        self.done.store(0, Ordering::Relaxed);
        self.go.store(k, Ordering::Release);
        Self::wait_until(|| self.done.load(Ordering::Acquire) == threads);
    }

    /// A device thread: waits for round `k` (or the stop); `false` when stopped.
    fn next(&self, k: u64) -> bool {
        use std::sync::atomic::Ordering;
        Self::wait_until(|| self.go.load(Ordering::Acquire) >= k || self.stop.load(Ordering::Acquire));
        !self.stop.load(Ordering::Acquire)
    }

    /// A device thread's round is over.
    fn finished(&self) {
        self.done.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// A device thread: `work` once a round until the stop. Its error, or its panic, is kept in
    /// `failed` for the measuring thread, and the thread counts itself into the round either
    /// way: a panic that skipped [`Rounds::finished`] left the measuring thread spinning forever.
    fn serve(&self, failed: &std::sync::Mutex<Option<String>>, mut work: impl FnMut() -> Result<()>) {
        let mut k = 1;
        while self.next(k) {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut work)).unwrap_or_else(|p| {
                let what = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
                // Dropped inside a catch as well: a payload whose drop panics would end the
                // thread before `finished`, the hang again. A second payload is leaked.
                if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(p))) {
                    std::mem::forget(again);
                }
                Err(format!("a device thread panicked: {}", what.as_deref().unwrap_or("(no message)")).into())
            });
            if let Err(e) = r {
                failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get_or_insert(e.to_string());
            }
            self.finished();
            k += 1;
        }
    }
}

/// All devices at once: one thread per device, each with its own memory, started once for the
/// point and released together each round ([`Rounds`]); a round's time runs from the release
/// to the last thread's end. (A thread spawned per round cost ~30% at 16 MiB: the spawn, and a
/// new thread's first copy on a copy context it had not used.)
fn together(sides: &mut [Side], n: usize, dir: DirKind, iters: usize, budget: Duration) -> Result<crate::stats::Summary> {
    use std::sync::Mutex;
    use std::sync::atomic::Ordering;
    let rounds = Rounds::default();
    let threads = sides.len();
    let failed: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|sc| {
        for s in sides.iter_mut() {
            let (rounds, failed) = (&rounds, &failed);
            sc.spawn(move || rounds.serve(failed, || s.with_host(|buf, host| Side::copy(buf, &mut host[..n], dir))));
        }
        let mut k = 0;
        let t = measure(iters, budget, || {
            k += 1;
            rounds.run(k, threads);
            match failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
                Some(e) => Err(e.into()),
                None => Ok(()),
            }
        });
        // Stop the threads, whatever `measure` returned (each is between rounds now).
        rounds.stop.store(true, Ordering::Release);
        t
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every round runs each device thread's work exactly once, none starts before its round
    /// and the measuring thread returns only after the last thread's part; the stop ends them.
    #[test]
    fn rounds_run_each_thread_once_per_round_and_stop() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let rounds = Rounds::default();
        let count = [AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)];
        std::thread::scope(|sc| {
            for c in &count {
                let rounds = &rounds;
                sc.spawn(move || {
                    let mut k = 1;
                    while rounds.next(k) {
                        std::thread::sleep(Duration::from_micros((k % 3) * 200));
                        c.fetch_add(1, Ordering::SeqCst);
                        rounds.finished();
                        k += 1;
                    }
                });
            }
            for k in 1..=50u64 {
                rounds.run(k, count.len());
                for c in &count {
                    assert_eq!(c.load(Ordering::SeqCst) as u64, k, "round {k} returned before a thread's part ran");
                }
            }
            rounds.stop.store(true, Ordering::Release);
        });
        assert!(count.iter().all(|c| c.load(Ordering::SeqCst) == 50));
    }

    /// A device thread whose copy panics fails the measurement with the panic's message; before,
    /// it never counted itself into the round and the measuring thread spun forever.
    #[test]
    fn a_device_thread_that_panics_fails_the_round_instead_of_hanging_it() {
        use std::sync::{Arc, Mutex, mpsc};
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("the payload's drop");
            }
        }
        let (tx, rx) = mpsc::channel();
        // A thread of its own, so that a hang fails the test by the timeout below.
        std::thread::spawn(move || {
            let rounds = Arc::new(Rounds::default());
            let failed = Arc::new(Mutex::new(None::<String>));
            let worker = {
                let (rounds, failed) = (rounds.clone(), failed.clone());
                std::thread::spawn(move || {
                    let mut k = 0;
                    rounds.serve(&failed, || {
                        k += 1;
                        if k == 1 {
                            panic!("copy went wrong")
                        }
                        // A payload whose drop panics again must not end the thread either.
                        std::panic::panic_any(Bomb)
                    })
                })
            };
            rounds.run(1, 1);
            let first = failed.lock().unwrap().take();
            rounds.run(2, 1);
            let second = failed.lock().unwrap().take();
            rounds.stop.store(true, std::sync::atomic::Ordering::Release);
            let _ = worker.join();
            let _ = tx.send((first, second));
        });
        let (first, second) = rx.recv_timeout(Duration::from_secs(60)).expect("a round never ended: the measuring thread hangs");
        let first = first.expect("the panic is reported as the round's failure");
        assert!(first.contains("panicked") && first.contains("copy went wrong"), "{first}");
        assert!(second.expect("the second round's panic is reported too").contains("(no message)"));
    }

    /// The check of a d2h point fails when its read moved nothing. The h2d check of the same
    /// size, the last h2d check before it at the last size of `--sizes`, had left
    /// the very bytes the d2h check wants in the host memory, and in the device buffer: the
    /// seed was the size and the device's place alone, and the host memory was read as it was.
    #[test]
    fn a_d2h_check_fails_when_the_read_moved_nothing() {
        let validation = vkhost::validation_layer_installed();
        let dev = Device::open_default_with(&vkhost::OpenOptions { validation, ..Default::default() }).unwrap();
        let n = 64 << 10;
        let mut scratch = (vec![0u8; n], vec![0u8; n]);
        for path in [PathKind::Pinned, PathKind::Pageable] {
            let mut side = Side::new(&dev, path, n).unwrap();
            for k in [0, 1] {
                assert!(verify(&mut side, DirKind::H2d, n, k, &mut scratch).unwrap(), "{path:?}: a real h2d copy passes");
                let nothing = |_: &DeviceBuffer, _: &mut [u8], _: DirKind| Ok(());
                let passed = verify_with(&mut side, DirKind::D2h, n, k, &mut scratch, nothing).unwrap();
                assert!(!passed, "{path:?}, device {k}: a d2h read that moved nothing passed its check");
                assert!(verify(&mut side, DirKind::D2h, n, k, &mut scratch).unwrap(), "{path:?}: a real d2h copy passes");
            }
        }
        dev.destroy().unwrap();
        assert_eq!(dev.validation_errors(), 0);
    }
}
