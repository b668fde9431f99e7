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
//!
//! This file owns the command line (`Args`), the `run` entry and the sweep driver with its
//! shared state (`Ctx`). The rest, by responsibility:
//! - `point`: one measured point, the timing loop and the check pattern;
//! - `paths`: the pinned, registered and pageable paths' host memory and their h2d/d2h sweep;
//! - `bidir`: both directions at once on two streams;
//! - `bar`: memcpy through the mapped BAR window;
//! - `small_async`: 1000 small async copies against 1000 synchronous ones;
//! - `costs`: register/unregister, alloc/free pinned, and find;
//! - `output`: the table (with the CUDA comparison columns) and the JSON record.

mod bar;
mod bidir;
mod costs;
mod output;
mod paths;
mod point;
mod small_async;

pub use point::{measure, point, Point};

use crate::devices::anyhow_free::Result;
use crate::stats::{parse_size, sweep};
use costs::costs;
use indicatif::{ProgressBar, ProgressStyle};
use output::{print_table, to_json};
use paths::bench_path;
use serde_json::Value;
use small_async::small_async;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use vkhost::{Device, OpenOptions};

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
