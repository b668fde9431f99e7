//! `vkhost bench`: host↔device bandwidth and latency by path, with costs and a CUDA baseline.
//!
//! Paths, one per way a user hands memory over:
//! - `pinned`: `host::alloc_pinned` memory (`PinnedBuffer`);
//! - `registered`: the user's page-aligned allocation, registered;
//! - `pageable`: a plain `Vec<u8>` through the default path (staged);
//! - `bar`: memcpy into mapped DEVICE_LOCAL|HOST_VISIBLE memory, where such a type exists.
//!
//! Directions: `h2d`, `d2h`, `bidir` (both at once on two threads, so two copy contexts and,
//! where the device has them, two copy-engine queues; reported as the sum).
//! Every point first checks one round trip with a non-zero pattern; a mismatch prints FAIL and
//! the exit code is 2.

use crate::devices::anyhow_free::Result;
use crate::pages::{Pages, RW};
use crate::stats::{gbps, parse_size, size_label, summarize, sweep, Summary};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use vkhost::{host, vk, Device, DeviceBuffer, OpenOptions, PinnedBuffer};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathKind {
    Pinned,
    Registered,
    Pageable,
    Bar,
}

impl PathKind {
    fn name(self) -> &'static str {
        match self {
            PathKind::Pinned => "pinned",
            PathKind::Registered => "registered",
            PathKind::Pageable => "pageable",
            PathKind::Bar => "bar",
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirKind {
    H2d,
    D2h,
    Bidir,
}

impl DirKind {
    fn name(self) -> &'static str {
        match self {
            DirKind::H2d => "h2d",
            DirKind::D2h => "d2h",
            DirKind::Bidir => "bidir",
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Baseline {
    Cuda,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Device index (default: the preferred device; VKHOST_DEVICE overrides).
    #[arg(long)]
    device: Option<usize>,
    /// Sizes, comma-separated: 4K,1M,1G. Default: 4K to --max-size in ×4 steps.
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<String>>,
    /// Largest size of the default sweep.
    #[arg(long, default_value = "1G")]
    max_size: String,
    /// Timed iterations per point (median reported), within --budget.
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// Time budget per point, in seconds: fewer iterations when it runs out (at least one).
    #[arg(long, default_value_t = 2.0)]
    budget: f64,
    /// Paths to measure.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "pinned,registered,pageable,bar")]
    paths: Vec<PathKind>,
    /// Directions to measure.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "h2d,d2h,bidir")]
    dirs: Vec<DirKind>,
    /// The short sweep `make run` uses: 4K,64K,1M,16M, at most 5 iterations and 0.5 s per point.
    #[arg(long)]
    quick: bool,
    /// Skip the register/alloc/find cost measurements.
    #[arg(long)]
    no_costs: bool,
    /// Largest read from the BAR window (reads run at ~0.03 GB/s on discrete GPUs).
    #[arg(long, default_value = "4M")]
    bar_read_cap: String,
    /// Write one JSON object per point to FILE (a JSON array).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an SVG plot of bandwidth against size.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Also run the same sweep through CUDA on the same GPU and print Vulkan/CUDA ratios.
    #[arg(long, value_enum)]
    baseline: Option<Baseline>,
    /// Advise huge pages (MADV_HUGEPAGE) on the registered and pageable paths' memory.
    #[arg(long)]
    hugepages: bool,
    /// Queue pairs for bidir (h2d-d2h): copy-copy (two copy-engine queues), compute-copy,
    /// copy-compute, compute-compute. Several give one bidir point each.
    #[arg(long, value_delimiter = ',', default_value = "copy-copy")]
    bidir_queues: Vec<String>,
    /// Test hook: corrupt the expected pattern of the first check, which must then FAIL (exit 2).
    #[arg(long, hide = true)]
    plant_mismatch: bool,
}

/// One measured point.
#[derive(Debug, Clone)]
pub struct Point {
    pub api: &'static str,
    pub kind: &'static str,
    pub path: String,
    pub dir: String,
    pub size: u64,
    pub bytes_moved: u64,
    pub s: Summary,
    pub verified: Option<bool>,
    pub note: String,
    pub extra: Value,
}

impl Point {
    pub fn gbps(&self) -> f64 {
        gbps(self.bytes_moved, self.s.median)
    }
}

/// Runs `f` once to warm up, then up to `iters` timed runs within `budget`.
pub fn measure(iters: usize, budget: Duration, mut f: impl FnMut() -> Result<()>) -> Result<Summary> {
    f()?;
    let mut t = Vec::with_capacity(iters);
    let start = Instant::now();
    while t.len() < iters.max(1) && (t.is_empty() || start.elapsed() < budget) {
        let t0 = Instant::now();
        f()?;
        t.push(t0.elapsed().as_secs_f64());
    }
    summarize(&t).ok_or_else(|| "no samples".into())
}

fn pattern(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    for c in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = (x | 0x0101_0101_0101_0101).to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
}

/// Page-aligned memory faulted in before timing (the `registered` path's "user allocation").
fn touched_pages(len: usize, huge: bool) -> Result<Pages> {
    let mut p = Pages::map(len, RW)?;
    if huge {
        p.advise_huge();
    }
    p.slice().fill(1);
    Ok(p)
}

/// Host memory for one path: two regions (the second for bidir's other direction).
enum Host {
    Pinned(PinnedBuffer, PinnedBuffer),
    Registered(Pages, Pages),
    Pageable(Vec<u8>, Vec<u8>),
}

impl Host {
    fn both(&mut self) -> (&mut [u8], &mut [u8]) {
        match self {
            Host::Pinned(a, b) => (&mut a[..], &mut b[..]),
            Host::Registered(a, b) => (a.slice(), b.slice()),
            Host::Pageable(a, b) => (&mut a[..], &mut b[..]),
        }
    }
}

/// A buffer in the BAR window (or UMA memory), mapped, through the interop handles.
struct Bar {
    raw: vkhost::RawDevice,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    ptr: *mut u8,
    len: usize,
}

impl Bar {
    fn new(dev: &Device, len: usize) -> Result<Option<Bar>> {
        let types = dev.info().memory_type_flags();
        let want = vk::MemoryPropertyFlags::DEVICE_LOCAL | vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let raw = dev.raw()?;
        let info =
            vk::BufferCreateInfo::default().size(len as u64).usage(vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST);
        // SAFETY: valid create info on a live device; every object is destroyed in Drop or below.
        unsafe {
            let buffer = raw.device.create_buffer(&info, None)?;
            let req = raw.device.get_buffer_memory_requirements(buffer);
            let Some(ti) = (0..types.len()).find(|&i| req.memory_type_bits & (1 << i) != 0 && types[i].contains(want)) else {
                raw.device.destroy_buffer(buffer, None);
                return Ok(None);
            };
            let ai = vk::MemoryAllocateInfo::default().allocation_size(req.size).memory_type_index(ti as u32);
            let memory = match raw.device.allocate_memory(&ai, None) {
                Ok(m) => m,
                Err(e) => {
                    raw.device.destroy_buffer(buffer, None);
                    return Err(format!("BAR allocation of {len} bytes: {e:?}").into());
                }
            };
            let ptr = raw
                .device
                .bind_buffer_memory(buffer, memory, 0)
                .and_then(|_| raw.device.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()));
            match ptr {
                Ok(p) => Ok(Some(Bar { raw, buffer, memory, ptr: p.cast(), len })),
                Err(e) => {
                    raw.device.destroy_buffer(buffer, None);
                    raw.device.free_memory(memory, None);
                    Err(format!("BAR bind/map: {e:?}").into())
                }
            }
        }
    }
    fn slice(&mut self) -> &mut [u8] {
        // SAFETY: mapped for len bytes while self lives.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        // SAFETY: our objects; no device work uses them (the bar path is memcpy only).
        unsafe {
            self.raw.device.destroy_buffer(self.buffer, None);
            self.raw.device.free_memory(self.memory, None);
        }
    }
}

struct Ctx {
    dev: Device,
    hugepages: bool,
    bidir_queues: Vec<String>,
    device_name: String,
    driver: String,
    iters: usize,
    budget: Duration,
    plant: bool,
    failures: usize,
    points: Vec<Point>,
    pb: ProgressBar,
}

impl Ctx {
    fn push(&mut self, p: Point) {
        self.pb.inc(1);
        self.points.push(p);
    }

    fn check(&mut self, what: &str, got: &[u8], want: &[u8]) -> bool {
        let plant = std::mem::take(&mut self.plant);
        let ok = got == want && !plant;
        if !ok {
            self.failures += 1;
            let at = got.iter().zip(want).position(|(a, b)| a != b);
            self.pb.suspend(|| {
                eprintln!("FAIL {what}: round trip mismatch{}", if plant { " (planted)" } else { "" });
                if let Some(i) = at {
                    eprintln!("     first difference at byte {i}: got {:#04x}, want {:#04x}", got[i], want[i]);
                }
            });
        }
        ok
    }
}

/// A point with no check, note or extra data yet.
pub fn point(api: &'static str, kind: &'static str, path: &str, dir: &str, size: u64, moved: u64, s: Summary) -> Point {
    Point {
        api,
        kind,
        path: path.into(),
        dir: dir.into(),
        size,
        bytes_moved: moved,
        s,
        verified: None,
        note: String::new(),
        extra: Value::Null,
    }
}

pub fn run(a: Args) -> Result<ExitCode> {
    let opts = OpenOptions { validation: false, ..OpenOptions::default() };
    let dev = match a.device {
        Some(i) => Device::open_with(i, &opts)?,
        None => Device::open_default_with(&opts)?,
    };
    let quick = a.quick;
    let sizes: Vec<u64> = match &a.sizes {
        Some(v) => v.iter().map(|s| parse_size(s)).collect::<std::result::Result<_, _>>()?,
        None if quick => vec![4 << 10, 64 << 10, 1 << 20, 16 << 20],
        None => sweep(4 << 10, parse_size(&a.max_size)?),
    };
    if sizes.is_empty() {
        return Err("no sizes".into());
    }
    let max = *sizes.iter().max().unwrap_or(&4096) as usize;
    let bar_cap = parse_size(&a.bar_read_cap)? as usize;
    let iters = if quick { a.iters.min(5) } else { a.iters };
    let budget = Duration::from_secs_f64(if quick { a.budget.min(0.5) } else { a.budget });
    let info = dev.info().clone();

    let npoints = a.paths.len() * a.dirs.len() * sizes.len() + 4;
    let pb = ProgressBar::new(npoints as u64);
    pb.set_style(ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} {msg}").unwrap_or_else(|_| ProgressStyle::default_bar()));

    println!(
        "vkhost bench on [{}] {} ({}, {}), API {}",
        info.index,
        info.name,
        info.device_type.as_str(),
        info.driver_name,
        info.api_version
    );
    println!(
        "host registration: {}; copy queues: {}",
        crate::devices::registration_line(&dev.host_registration()),
        info.transfer_family().map(|f| format!("family {} x{}", f.index, f.count.min(2))).unwrap_or_else(|| "none (compute queue)".into())
    );
    let mut cx = Ctx {
        hugepages: a.hugepages,
        bidir_queues: a.bidir_queues.clone(),
        device_name: info.name.clone(),
        driver: format!("{} {}", info.driver_name, info.driver_info),
        dev: dev.clone(),
        iters,
        budget,
        plant: a.plant_mismatch,
        failures: 0,
        points: Vec::new(),
        pb,
    };

    let dbuf = [dev.alloc_buffer(max)?, dev.alloc_buffer(max)?];
    let mut notes = Vec::new();
    for &path in &a.paths {
        let r = bench_path(&mut cx, path, &a.dirs, &sizes, &dbuf, bar_cap);
        if let Err(e) = r {
            notes.push(format!("{}: skipped ({e})", path.name()));
        }
    }
    drop(dbuf);
    if let Err(e) = small_async(&mut cx) {
        notes.push(format!("small-async: skipped ({e})"));
    }

    if !(a.no_costs) {
        costs(&mut cx, &sizes, &mut notes)?;
    }
    cx.pb.finish_and_clear();

    let cuda = match a.baseline {
        Some(Baseline::Cuda) => crate::cuda::run(&sizes, iters, budget, &a.dirs, &mut notes),
        None => Vec::new(),
    };
    print_table(&cx.points, &cuda);
    for n in &notes {
        println!("note: {n}");
    }

    let all: Vec<&Point> = cx.points.iter().chain(cuda.iter()).collect();
    if let Some(f) = &a.json {
        let v: Vec<Value> = all.iter().map(|p| to_json(&cx, p)).collect();
        std::fs::write(f, serde_json::to_string_pretty(&v)?)?;
        println!("wrote {}", f.display());
    }
    if let Some(f) = &a.plot {
        crate::plot::svg(f, &all, &format!("{} ({})", cx.device_name, cx.driver.trim()))?;
        println!("wrote {}", f.display());
    }
    dev.destroy()?;
    if cx.failures > 0 {
        println!("FAIL: {} point(s) did not round-trip", cx.failures);
        return Ok(ExitCode::from(2));
    }
    println!("all points verified");
    Ok(ExitCode::SUCCESS)
}

fn to_json(cx: &Ctx, p: &Point) -> Value {
    let g = p.gbps();
    json!({
        "api": p.api,
        "kind": p.kind,
        "device": cx.device_name,
        "driver": cx.driver.trim(),
        "path": p.path,
        "dir": p.dir,
        "size": p.size,
        "iters": p.s.n,
        "median_s": p.s.median,
        "min_s": p.s.min,
        "max_s": p.s.max,
        "gbps": if g.is_finite() { json!(g) } else { Value::Null },
        "max_gbps": gbps(p.bytes_moved, p.s.min),
        "min_gbps": gbps(p.bytes_moved, p.s.max),
        "latency_us": if p.kind == "copy" && p.size <= 64 << 10 { json!(p.s.median * 1e6) } else { Value::Null },
        "verified": p.verified,
        "note": p.note,
        "extra": p.extra,
    })
}

fn bench_path(cx: &mut Ctx, path: PathKind, dirs: &[DirKind], sizes: &[u64], dbuf: &[DeviceBuffer; 2], bar_cap: usize) -> Result<()> {
    let max = *sizes.iter().max().unwrap_or(&4096) as usize;
    if path == PathKind::Bar {
        return bench_bar(cx, dirs, sizes, max, bar_cap);
    }
    let dev = cx.dev.clone();
    let mut host = match path {
        PathKind::Pinned => Host::Pinned(PinnedBuffer::new(&dev, max)?, PinnedBuffer::new(&dev, max)?),
        PathKind::Registered => {
            let (a, b) = (touched_pages(max, cx.hugepages)?, touched_pages(max, cx.hugepages)?);
            // SAFETY: the mappings live until after unregister below (they drop with `host`).
            unsafe {
                host::register(&dev, a.ptr, a.len)?;
                if let Err(e) = host::register(&dev, b.ptr, b.len) {
                    host::unregister(&dev, a.ptr)?;
                    return Err(e.into());
                }
            }
            Host::Registered(a, b)
        }
        _ => Host::Pageable(vec![1u8; max], vec![1u8; max]),
    };
    let r = sweep_host(cx, path, dirs, sizes, dbuf, &mut host);
    if let Host::Registered(a, b) = &host {
        host::unregister(&dev, a.ptr)?;
        host::unregister(&dev, b.ptr)?;
    }
    r
}

fn sweep_host(cx: &mut Ctx, path: PathKind, dirs: &[DirKind], sizes: &[u64], dbuf: &[DeviceBuffer; 2], host: &mut Host) -> Result<()> {
    let expect = if path == PathKind::Pageable { vkhost::CopyPath::Staged } else { vkhost::CopyPath::Direct };
    for &size in sizes {
        let n = size as usize;
        for &dir in dirs {
            cx.pb.set_message(format!("{} {} {}", path.name(), dir.name(), size_label(size)));
            let what = format!("{} {} {}", path.name(), dir.name(), size_label(size));
            let (src, dst) = host.both();
            let (src, dst) = (&mut src[..n], &mut dst[..n]);
            // Check one round trip through this path, and which copy path ran.
            let seed = size ^ (dir as u64) << 40 ^ (path as u64) << 48;
            let mut want = vec![0u8; n];
            pattern(&mut want, seed);
            let mut ran = Vec::new();
            let mut check_buf = vec![0u8; n];
            if dir != DirKind::D2h {
                src.copy_from_slice(&want);
                // SAFETY: `src` is a live slice of n bytes.
                ran.push(unsafe { host::copy_to_device(&cx.dev, src.as_ptr(), n, &dbuf[0], 0) }?);
                dbuf[0].read(0, &mut check_buf)?;
            }
            if dir != DirKind::H2d {
                dbuf[1].write(0, &want)?;
                dst.fill(0);
                // SAFETY: `dst` is a live, exclusively borrowed slice of n bytes.
                ran.push(unsafe { host::copy_to_host(&cx.dev, &dbuf[1], 0, dst.as_mut_ptr(), n) }?);
                if dir == DirKind::D2h {
                    check_buf.copy_from_slice(dst);
                } else if dst != &want[..] {
                    check_buf.fill(0);
                }
            }
            let ok = cx.check(&what, &check_buf, &want);
            let mut note = String::new();
            if ran.iter().any(|&r| r != expect) {
                note = format!("copy path {ran:?}, expected {expect:?}");
            }
            let (s, extra) = match dir {
                DirKind::H2d => (measure(cx.iters, cx.budget, || Ok(dbuf[0].write(0, src)?))?, Value::Null),
                DirKind::D2h => (measure(cx.iters, cx.budget, || Ok(dbuf[1].read(0, dst)?))?, Value::Null),
                DirKind::Bidir => {
                    for (i, pair) in cx.bidir_queues.clone().iter().enumerate() {
                        let (s, extra) = bidir(cx, pair, &dbuf[0], src, &dbuf[1], dst)?;
                        let mut p = point("vulkan", "copy", path.name(), dir.name(), size, 2 * size, s);
                        p.verified = Some(ok);
                        p.note = if cx.bidir_queues.len() > 1 {
                            format!("{note}{}queues {pair}", if note.is_empty() { "" } else { "; " })
                        } else {
                            note.clone()
                        };
                        p.extra = extra;
                        if i + 1 < cx.bidir_queues.len() {
                            cx.points.push(p);
                        } else {
                            cx.push(p);
                        }
                    }
                    continue;
                }
            };
            let mut p = point("vulkan", "copy", path.name(), dir.name(), size, size, s);
            p.verified = Some(ok);
            p.note = note;
            p.extra = extra;
            cx.push(p);
        }
    }
    Ok(())
}

/// h2d and d2h at once on two streams (so two queues where the device has two copy engines),
/// each driven by its own thread so a staged direction's memcpy does not hold up the other.
/// Bandwidth is the sum over the wall time of both; the median iteration's start and end of
/// each direction (µs from the iteration's start) go into the JSON.
fn bidir(cx: &Ctx, pair: &str, up: &DeviceBuffer, src: &[u8], down: &DeviceBuffer, dst: &mut [u8]) -> Result<(Summary, Value)> {
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

/// 1000 async 4 KiB h2d copies from pinned memory plus one synchronize, against 1000
/// synchronous ones, twice: to consecutive offsets (`async`/`sync`: the plain case, where the
/// stream batches adjacent copies into few regions) and to scattered offsets
/// (`async-scattered`/`sync-scattered`: a permutation, so nothing merges; every copy is its own
/// region for the copy engine).
fn small_async(cx: &mut Ctx) -> Result<()> {
    const N: usize = 1000;
    const K: usize = 4096;
    let dev = cx.dev.clone();
    let mut src = PinnedBuffer::new(&dev, N * K)?;
    pattern(&mut src, 99);
    let buf = dev.alloc_buffer(N * K)?;
    let stream = dev.stream()?;
    type Offset = fn(usize) -> usize;
    let patterns: [(&str, Offset); 2] = [("", |i| i * K), ("-scattered", |i| (i * 617) % N * K)];
    for (suffix, dst_of) in patterns {
        let run_async = || -> Result<()> {
            for i in 0..N {
                // SAFETY: the pinned block outlives the work (synchronized below).
                unsafe { stream.copy_to_device_async(src.as_ptr().add(i * K), K, &buf, dst_of(i)) }?;
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
        buf.write(0, &vec![0u8; N * K])?;
        let a = measure(cx.iters.min(5), cx.budget, run_async)?;
        let mut back = vec![0u8; N * K];
        buf.read(0, &mut back)?;
        let mut want = vec![0u8; N * K];
        for i in 0..N {
            want[dst_of(i)..dst_of(i) + K].copy_from_slice(&src[i * K..(i + 1) * K]);
        }
        let ok = cx.check(&format!("small-async{suffix}"), &back, &want);
        let sy = measure(cx.iters.min(5), cx.budget, run_sync)?;
        let speedup = sy.median / a.median;
        let offsets = if suffix.is_empty() { "consecutive" } else { "scattered" };
        let mut p = point("vulkan", "small-async", "pinned", &format!("async{suffix}"), K as u64, (N * K) as u64, a);
        p.verified = Some(ok);
        p.note = format!("1000 x 4K async to {offsets} offsets + synchronize; {speedup:.1}x faster than 1000 synchronous copies");
        p.extra = json!({"sync_median_s": sy.median, "speedup": speedup, "offsets": offsets});
        cx.push(p);
        let mut q = point("vulkan", "small-async", "pinned", &format!("sync{suffix}"), K as u64, (N * K) as u64, sy);
        q.note = format!("1000 x 4K synchronous copies to {offsets} offsets");
        cx.push(q);
    }
    Ok(())
}

fn bench_bar(cx: &mut Ctx, dirs: &[DirKind], sizes: &[u64], max: usize, cap: usize) -> Result<()> {
    let Some(mut bar) = Bar::new(&cx.dev, max)? else {
        return Err("no DEVICE_LOCAL|HOST_VISIBLE memory type".into());
    };
    let mut host = vec![1u8; max];
    let mut back = vec![0u8; max.min(cap)];
    for &size in sizes {
        let n = size as usize;
        for &dir in dirs {
            cx.pb.set_message(format!("bar {} {}", dir.name(), size_label(size)));
            if dir != DirKind::H2d && n > cap {
                cx.pb.inc(1);
                continue;
            }
            let what = format!("bar {} {}", dir.name(), size_label(size));
            let mut want = vec![0u8; n];
            pattern(&mut want, size ^ 0xBA5);
            // h2d: memcpy in, read back (capped) and check; d2h: memcpy out and check.
            bar.slice()[..n].copy_from_slice(&want);
            let k = n.min(cap);
            back[..k].copy_from_slice(&bar.slice()[..k]);
            let ok = cx.check(&what, &back[..k], &want[..k]);
            let s = match dir {
                DirKind::H2d => measure(cx.iters, cx.budget, || {
                    bar.slice()[..n].copy_from_slice(&host[..n]);
                    Ok(())
                })?,
                DirKind::D2h => measure(cx.iters, cx.budget, || {
                    host[..n].copy_from_slice(&bar.slice()[..n]);
                    Ok(())
                })?,
                DirKind::Bidir => {
                    cx.pb.inc(1);
                    continue;
                }
            };
            let mut p = point("vulkan", "copy", "bar", dir.name(), size, size, s);
            p.verified = Some(ok);
            if dir == DirKind::H2d && n > cap {
                p.note = format!("check read back the first {} only", size_label(cap as u64));
            }
            cx.push(p);
        }
    }
    let cap_note = format!(
        "bar: d2h reads capped at {} (--bar-read-cap): on discrete GPUs they run at ~0.03 GB/s; bidir not measured (memcpy only)",
        size_label(cap as u64)
    );
    cx.pb.suspend(|| eprintln!("{cap_note}"));
    Ok(())
}

/// register/unregister, alloc_pinned/free_pinned per size; find at 1, 100, 10 000 entries.
fn costs(cx: &mut Ctx, sizes: &[u64], notes: &mut Vec<String>) -> Result<()> {
    let dev = cx.dev.clone();
    let iters = cx.iters;
    let can_register = dev.host_registration().is_ok();
    for &size in sizes {
        let n = size as usize;
        cx.pb.set_message(format!("costs {}", size_label(size)));
        if can_register {
            let mut pages = touched_pages(n, false)?;
            let (mut reg, mut unreg) = (Vec::new(), Vec::new());
            for _ in 0..iters.max(1) {
                let t = Instant::now();
                // SAFETY: `pages` outlives the unregister below.
                unsafe { host::register(&dev, pages.slice().as_mut_ptr(), n) }?;
                reg.push(t.elapsed().as_secs_f64());
                let t = Instant::now();
                host::unregister(&dev, pages.ptr)?;
                unreg.push(t.elapsed().as_secs_f64());
            }
            for (op, v) in [("register", &reg), ("unregister", &unreg)] {
                if let Some(s) = summarize(v) {
                    cx.points.push(point("vulkan", "cost", "registered", op, size, size, s));
                }
            }
        }
        let (mut al, mut fr) = (Vec::new(), Vec::new());
        for _ in 0..iters.max(1) {
            let t = Instant::now();
            let p = host::alloc_pinned(&dev, n)?;
            al.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            host::free_pinned(&dev, p)?;
            fr.push(t.elapsed().as_secs_f64());
        }
        for (op, v) in [("alloc_pinned", &al), ("free_pinned", &fr)] {
            if let Some(s) = summarize(v) {
                cx.points.push(point("vulkan", "cost", "pinned", op, size, size, s));
            }
        }
    }
    if !can_register {
        notes.push("register costs and find: skipped, host registration unavailable".into());
        return Ok(());
    }
    let counts: &[usize] = &[1, 100, 10_000];
    for &count in counts {
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
            let lookups = 200_000usize;
            let mut x = 12345usize;
            let mut hits = 0usize;
            let t = Instant::now();
            for _ in 0..lookups {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let i = (x >> 33) % count;
                hits += host::find(&dev, base + 2 * i * page + 64, 256).is_some() as usize;
            }
            let per = t.elapsed().as_secs_f64() / lookups as f64;
            if hits != lookups {
                cx.failures += 1;
                eprintln!("FAIL find: {hits} of {lookups} lookups found their registration");
            }
            let s = Summary { median: per, min: per, max: per, n: lookups };
            let mut p = point("vulkan", "find", "registered", "find", count as u64, 0, s);
            p.verified = Some(hits == lookups);
            p.note = format!("{count} live registrations");
            cx.points.push(p);
        }
        for i in 0..done {
            host::unregister(&dev, base + 2 * i * page)?;
        }
        r?;
    }
    Ok(())
}

fn fmt_gbps(g: f64) -> String {
    if g >= 100.0 {
        format!("{g:.0}")
    } else if g >= 1.0 {
        format!("{g:.2}")
    } else {
        format!("{g:.3}")
    }
}

fn print_table(points: &[Point], cuda: &[Point]) {
    let cuda_of = |p: &Point| -> Option<&Point> {
        let path = match p.path.as_str() {
            "pinned" | "registered" => "pinned",
            "pageable" => "pageable",
            _ => return None,
        };
        cuda.iter().find(|c| c.kind == p.kind && c.path == path && c.dir == p.dir && c.size == p.size)
    };
    println!();
    println!(
        "{:<11} {:<5} {:>6} {:>9} {:>9} {:>9} {:>10} {:>6} {:>6} {:>9} {:>7}",
        "path", "dir", "size", "GB/s", "min", "max", "latency", "iters", "check", "CUDA GB/s", "ratio"
    );
    for p in points.iter().filter(|p| p.kind == "copy").chain(cuda.iter().filter(|p| p.kind == "copy")) {
        let g = p.gbps();
        let lat = if p.size <= 64 << 10 { format!("{:.1} us", p.s.median * 1e6) } else { String::new() };
        let (cg, ratio) = match (p.api, cuda_of(p)) {
            ("vulkan", Some(c)) => (fmt_gbps(c.gbps()), format!("{:.2}x", g / c.gbps())),
            _ => (String::new(), String::new()),
        };
        let check = match p.verified {
            Some(true) => "ok",
            Some(false) => "FAIL",
            None => "",
        };
        let path = if p.api == "cuda" { format!("cuda-{}", p.path) } else { p.path.clone() };
        println!(
            "{:<11} {:<5} {:>6} {:>9} {:>9} {:>9} {:>10} {:>6} {:>6} {:>9} {:>7}{}",
            path,
            p.dir,
            size_label(p.size),
            fmt_gbps(g),
            fmt_gbps(gbps(p.bytes_moved, p.s.max)),
            fmt_gbps(gbps(p.bytes_moved, p.s.min)),
            lat,
            p.s.n,
            check,
            cg,
            ratio,
            if p.note.is_empty() { String::new() } else { format!("  ({})", p.note) }
        );
    }
    let costs: Vec<&Point> = points.iter().filter(|p| p.kind == "cost").collect();
    if !costs.is_empty() {
        println!();
        println!("{:<14} {:>6} {:>12} {:>12} {:>12}", "cost", "size", "median", "min", "max");
        for p in costs {
            println!("{:<14} {:>6} {:>12} {:>12} {:>12}", p.dir, size_label(p.size), dur(p.s.median), dur(p.s.min), dur(p.s.max));
        }
    }
    for p in points.iter().filter(|p| p.kind == "find") {
        println!("find with {:>6} live registrations: {:.0} ns per lookup", p.size, p.s.median * 1e9);
    }
    for p in points.iter().chain(cuda).filter(|p| p.kind == "small-async") {
        println!("{} small-{}: {} for 1000 copies, {} GB/s ({})", p.api, p.dir, dur(p.s.median), fmt_gbps(p.gbps()), p.note);
    }
}

fn dur(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}
