//! `vkhost bench`: host↔device bandwidth and latency by path, with costs and a CUDA baseline.
//!
//! Paths, one per way a user hands memory over:
//! - `pinned`: `host::alloc_pinned` memory (`PinnedBuffer`);
//! - `registered`: the user's page-aligned allocation, registered;
//! - `pageable`: a plain `Vec<u8>` through the default path (staged);
//! - `bar`: memcpy into mapped DEVICE_LOCAL|HOST_VISIBLE memory, where such a type exists;
//! - `device`: no host memory, a copy between two device buffers (direction `d2d`).
//!
//! Directions: `h2d`, `d2h`, `bidir` (both at once on two threads, so two copy contexts and,
//! where the device has them, two copy-engine queues; reported as the sum), `d2d`.
//!
//! Engines: the copy engine (`_ce`: vkCmdCopyBuffer on a copy queue), or the built-in copy
//! kernel (`_sm`: `Stream::copy_sm` on a compute stream, binding the pinned or registered
//! memory directly).
//! Every point first checks one round trip with a non-zero pattern; a mismatch prints FAIL and
//! the exit code is 2.
//!
//! What runs is chosen by named testcases (`testcase`: `--list`, `-t`), narrowed by `--paths`,
//! `--dirs` and `--no-costs` as before.
//!
//! This file owns the command line (`Args`), the `run` entry and the sweep driver with its
//! shared state (`Ctx`), and the Ctrl-C flag. The rest, by responsibility:
//! - `testcase`: the named testcases and `-t` selection (pure);
//! - `point`: one measured point, the timing loop and the check pattern;
//! - `paths`: the pinned, registered and pageable paths' host memory and their h2d/d2h sweep;
//! - `bidir`: both directions at once on two streams;
//! - `sm`: the copy kernel's testcases (h2d and d2h over pinned and registered memory, d2d);
//! - `d2d`: `device_to_device_ce`, a stream copy between two device buffers;
//! - `bar`: memcpy through the mapped BAR window;
//! - `latency`: single small synchronous copies;
//! - `small_async`: 1000 small async copies against 1000 synchronous ones;
//! - `costs`: register/unregister, alloc/free pinned, and find;
//! - `meta`: the run metadata (build, host, NUMA, device, PCIe link) and CPU pinning;
//! - `output`: the table (with the CUDA comparison columns), the JSON record and CSV;
//! - `compare`: `--compare OLD.json`, new/old ratios point by point.

mod anomaly;
mod bar;
mod bidir;
mod compare;
mod costs;
mod d2d;
mod latency;
pub mod meta;
mod multi;
mod output;
mod paths;
mod point;
mod sm;
mod small_async;
pub mod testcase;

pub use point::{Point, measure, measure_with, point};
// The CUDA baseline's bidir pairs warm up as the Vulkan ones do.
#[cfg(feature = "cuda")]
pub use point::{BIDIR_WARM_UP, warm_up};
// The CUDA baseline checks its SM copy with the same pattern.
#[cfg(feature = "cuda")]
pub use point::pattern;

use crate::devices::anyhow_free::Result;
use crate::stats::{parse_size, sweep};
use costs::costs;
use indicatif::{ProgressBar, ProgressStyle};
use output::{print_table, to_json};
use paths::bench_path;
use serde_json::{Value, json};
use small_async::small_async;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use testcase::{Testcase, Work};
use vkhost::{Device, OpenOptions};

/// `--bar-reads`: how the bar path's d2h rows read the BAR window.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarReads {
    /// Streaming loads where the CPU has them (x86-64 with SSE4.1), else a memcpy.
    Stream,
    /// A plain memcpy (`copy_from_slice`).
    Memcpy,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathKind {
    Pinned,
    Registered,
    Pageable,
    Bar,
    /// No host memory: between two device buffers (the `d2d` direction).
    Device,
}

impl PathKind {
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Pinned => "pinned",
            PathKind::Registered => "registered",
            PathKind::Pageable => "pageable",
            PathKind::Bar => "bar",
            PathKind::Device => "device",
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirKind {
    H2d,
    D2h,
    Bidir,
    /// Device buffer to device buffer (the `device` path).
    D2d,
}

impl DirKind {
    pub fn name(self) -> &'static str {
        match self {
            DirKind::H2d => "h2d",
            DirKind::D2h => "d2h",
            DirKind::Bidir => "bidir",
            DirKind::D2d => "d2d",
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Baseline {
    Cuda,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// List the testcases with a one-line description, and exit.
    #[arg(long)]
    list: bool,
    /// Testcases to run (see --list): repeat, or comma-separate; a name that is not a testcase
    /// selects every testcase it is a prefix of (`-t host_to_device`, `-t latency`), and an
    /// engine every testcase of it (`-t sm`: the copy kernel's; `-t ce`, `-t bar`). Default: all.
    #[arg(short = 't', long = "testcase", value_delimiter = ',')]
    testcases: Vec<String>,
    /// Device index (default: the preferred device; VKHOST_DEVICE overrides).
    #[arg(long, conflicts_with = "devices")]
    device: Option<usize>,
    /// The host × GPU matrix instead of the sweep: `all` or a list of device indices; each
    /// device alone and all at once, for pinned, registered and pageable memory (default sizes
    /// 16M,256M,1G; --sizes, --paths, --dirs, --iters, --budget, --quick, --staging-*, --json
    /// and --csv apply; --plot, --compare and --baseline are refused).
    #[arg(long, value_name = "all|LIST")]
    devices: Option<String>,
    /// Sizes, comma-separated: 4K,1M,1G. Default: 4K to --max-size in ×4 steps.
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<String>>,
    /// Largest size of the default sweep (and of --quick's).
    #[arg(long, default_value = "1G")]
    max_size: String,
    /// Timed iterations per point after one warm-up (median, mean, stddev, min, max reported),
    /// within --budget.
    #[arg(long, default_value_t = 10, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(1..), |n| n as usize))]
    iters: usize,
    /// Time budget per point, in seconds: fewer iterations when it runs out (at least one). The
    /// bidir points' warm-up takes up to 0.5 s more (their pairs run untimed for that long, or
    /// for the budget, if less).
    #[arg(long, default_value_t = 2.0, value_parser = parse_budget)]
    budget: f64,
    /// Only the copy (ce, sm, bar) and latency testcases on these paths (default: all; latency is
    /// pinned; `device` is the device-to-device testcases).
    #[arg(long, value_enum, value_delimiter = ',')]
    paths: Option<Vec<PathKind>>,
    /// Only the copy and latency testcases in these directions (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    dirs: Option<Vec<DirKind>>,
    /// The short sweep `make run` uses: 4K,64K,1M,16M, at most 5 iterations and 0.5 s per point.
    #[arg(long)]
    quick: bool,
    /// Skip the register/alloc/find cost measurements (the `costs` testcase).
    #[arg(long)]
    no_costs: bool,
    /// Largest read from the BAR window (on a discrete GPU reads run at ~0.03 GB/s by memcpy,
    /// 0.5-5 GB/s with streaming loads).
    #[arg(long, default_value = "4M")]
    bar_read_cap: String,
    /// How the bar path reads the BAR window: `stream`, SSE4.1 streaming loads (movntdqa, four
    /// cache lines in flight; a plain memcpy where the CPU lacks them), or `memcpy`.
    #[arg(long, value_enum, default_value = "stream")]
    bar_reads: BarReads,
    /// Threads that split a bar write or read of 128 KiB or more
    /// (default: half the CPUs, at most 8; capped at the CPUs this process may use).
    #[arg(long, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(1..), |n| n as usize))]
    bar_threads: Option<usize>,
    /// Between timed iterations on the paths where the CPU copies the bytes (pageable, bar),
    /// write a buffer twice the last-level cache so no iteration finds its data in cache.
    #[arg(long)]
    flush_cache: bool,
    /// Threads that memcpy through staging on the pageable path (OpenOptions::staging_threads;
    /// default: the library's, VKHOST_STAGING_THREADS or the cores less two (all of them up to
    /// 4 cores), at most 16).
    #[arg(long)]
    staging_threads: Option<usize>,
    /// Microseconds the staging threads poll for the next batch before they sleep
    /// (OpenOptions::staging_spin; default: the library's, VKHOST_STAGING_SPIN_US or 1000 on
    /// GPUs, 0 on CPU drivers).
    #[arg(long, value_name = "US")]
    staging_spin_us: Option<u64>,
    /// Bytes per staging chunk (OpenOptions::staging_chunk), e.g. 16M.
    #[arg(long)]
    staging_chunk: Option<String>,
    /// Staging chunks in flight (OpenOptions::staging_slots).
    #[arg(long)]
    staging_slots: Option<usize>,
    /// Pin every thread to these CPUs (0-3,8) or `none`. Default: the CPUs local to the
    /// device's NUMA node where sysfs says which they are, else no pinning.
    #[arg(long, value_name = "LIST")]
    cpu: Option<String>,
    /// Write the run as one JSON object {run: metadata, results: points} (docs/BENCH.md); with
    /// --devices, {run: metadata, matrix: rows} (docs/bench-devices.schema.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the results as CSV, one row per point; with --devices, a line per device and one
    /// for the aggregate of each matrix row.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Print new/old ratios against an earlier `--json` file, point by point.
    #[arg(long, value_name = "OLD.json")]
    compare: Option<PathBuf>,
    /// Write a plot of bandwidth against size, a panel per direction and one for latency:
    /// SVG (.svg), or PNG when FILE ends in .png; other extensions are refused.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Also run the same sweep through CUDA on the same GPU and print Vulkan/CUDA ratios (needs a
    /// build with the `cuda` feature: refused without it).
    #[arg(long, value_enum)]
    baseline: Option<Baseline>,
    /// Advise huge pages (MADV_HUGEPAGE) on the registered and pageable paths' memory.
    #[arg(long)]
    hugepages: bool,
    /// Queue pairs for bidir (h2d-d2h): copy-copy (two copy-engine queues), compute-copy,
    /// copy-compute, compute-compute. Several give one bidir point each.
    #[arg(long, value_delimiter = ',', default_value = "copy-copy", value_parser = ["copy-copy", "compute-copy", "copy-compute", "compute-compute"])]
    bidir_queues: Vec<String>,
    /// How a bidir pair is driven: auto (pinned and registered memory: both copies enqueued
    /// from one thread, as CUDA's two-stream bidir is; pageable: a thread per direction) or
    /// threads (a thread per direction for every path).
    #[arg(long, value_enum, default_value_t = bidir::BidirMode::Auto)]
    bidir_mode: bidir::BidirMode,
    /// Test hook: corrupt the expected pattern of the first check, which must then FAIL (exit 2).
    #[arg(long, hide = true)]
    plant_mismatch: bool,
}

/// Refuses an output path that cannot be written: `-` (write to a file), a directory, one in a
/// folder that does not exist, the file standard output or standard error already writes to
/// (`--json /dev/stdout > out.txt`: the JSON, written from offset 0, and the lines printed after
/// it would overwrite each other), or one the process cannot open for writing (no permission, a
/// read-only or virtual file system such as /proc). Checked before a run measures anything; a
/// file the check creates is removed again, and an existing one is opened without truncating
/// it. Pipes and devices (`--json >(jq .)`) pass: they have no offset to clash at, and opening
/// a FIFO with no reader would block the run before it starts. Writing can still fail later (a
/// full disk), and that error names the file too.
pub(crate) fn check_output(what: &str, f: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if f.as_os_str() == "-" {
        return Err(format!("{what} -: name a file (writing to standard output is not supported)").into());
    }
    if f.is_dir() {
        return Err(format!("{what} {}: is a directory", f.display()).into());
    }
    let dir = f.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if !dir.is_dir() {
        return Err(format!("{what} {}: the folder {} does not exist", f.display(), dir.display()).into());
    }
    let cannot = |e: std::io::Error| -> Result<()> { Err(format!("{what} {}: cannot be written: {e}", f.display()).into()) };
    match std::fs::metadata(f) {
        Ok(m) if !m.is_file() => Ok(()),
        Ok(m) => {
            // The file standard output or standard error is: the same device and inode.
            for (fd, name) in [(1, "standard output"), (2, "standard error")] {
                // SAFETY: fstat fills the struct it is given; a zeroed stat is a valid value.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: as above; an fd that is not open makes fstat return -1, nothing else.
                if unsafe { libc::fstat(fd, &mut st) } == 0 && (st.st_dev as u64, st.st_ino as u64) == (m.dev(), m.ino()) {
                    return Err(format!("{what} {}: is the file {name} writes to; name another file", f.display()).into());
                }
            }
            std::fs::OpenOptions::new().append(true).open(f).map(drop).or_else(cannot)
        }
        // Not there, or a symbolic link to a file not there yet: create the file it names, to
        // see that it can be, and remove it again (the link stays).
        Err(_) => {
            let target = link_target(f);
            match std::fs::OpenOptions::new().write(true).create_new(true).open(&target) {
                Ok(_) => {
                    let _ = std::fs::remove_file(&target);
                    Ok(())
                }
                Err(e) => cannot(e),
            }
        }
    }
}

/// [`check_output`] for each output given, and refuses two that name one file: the later one
/// would overwrite the earlier (the JSON lost under the plot). Compared as written, through the
/// folder's real path, and, for files that exist, as files (a symbolic or hard link to the
/// other). The sweep and `--devices` both call it before measuring.
pub(super) fn check_outputs(outputs: &[(&str, &Option<PathBuf>)]) -> Result<()> {
    let given: Vec<(&str, &PathBuf)> = outputs.iter().filter_map(|(w, f)| f.as_ref().map(|f| (*w, f))).collect();
    for (i, (what, f)) in given.iter().enumerate() {
        check_output(what, f)?;
        let same = |g: &PathBuf| {
            let (g2, f2) = (link_target(g), link_target(f));
            g == *f || (g2.file_name() == f2.file_name() && real_dir(&g2) == real_dir(&f2)) || same_file(g, f)
        };
        if let Some((other, _)) = given[..i].iter().find(|(_, g)| same(g)) {
            return Err(format!("{other} and {what} name the same file {}: one would overwrite the other", f.display()).into());
        }
    }
    Ok(())
}

/// Refuses, before anything runs (the costs process included), sizes the sweep cannot measure:
/// - host memory: the copy testcases hold two regions of the largest size per host path they
///   use (pinned, registered, pageable; bar maps its own two), allocated up front, plus the
///   round-trip check's two; the costs hold one of each size at a time. More than the
///   machine's memory (MemTotal) is refused: necessary, not sufficient (other processes use
///   memory too);
/// - device memory: a copy testcase's device buffers are one allocation each, so a size above
///   maxMemoryAllocationSize of the device the run opens is refused.
///
/// The latency, floor and small-async testcases use sizes of their own, and are not limited by
/// these. `flag` names what gave the sizes (`--sizes`, or `--max-size` for the default sweep).
fn check_sizes(sizes: &[u64], flag: &str, chosen: &[&Testcase], max_alloc: Option<u64>) -> Result<()> {
    let Some(&max) = sizes.iter().max() else { return Ok(()) };
    let ram = mem_total();
    let copies: Vec<PathKind> = chosen
        .iter()
        .filter_map(|t| match t.work {
            Work::Copy(p, _) | Work::Sm(p, _) => Some(p),
            _ => None,
        })
        .collect();
    let host_paths =
        [PathKind::Pinned, PathKind::Registered, PathKind::Pageable, PathKind::Bar].iter().filter(|p| copies.contains(p)).count();
    // Regions of the largest size held at once.
    let regions = if host_paths > 0 { 2 * host_paths as u64 + 2 } else { 0 };
    let regions = if chosen.iter().any(|t| t.work == Work::Costs) { regions.max(1) } else { regions };
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    if let Some(ram) = ram {
        let need = max.saturating_mul(regions);
        if regions > 0 && need > ram {
            return Err(format!(
                "{flag} {}: the testcases chosen hold about {:.1} GiB of host memory at once ({regions} regions of the largest size), \
                 more than this machine's {:.1} GiB",
                crate::stats::size_label(max),
                gib(need),
                gib(ram)
            )
            .into());
        }
    }
    if let Some(m) = max_alloc.filter(|&m| !copies.is_empty() && max > m) {
        return Err(format!(
            "{flag} {}: exceeds the device's maxMemoryAllocationSize ({}); the copy testcases need a device buffer of each size in one allocation",
            crate::stats::size_label(max),
            crate::stats::size_label(m)
        )
        .into());
    }
    Ok(())
}

/// The machine's memory in bytes (`MemTotal` of /proc/meminfo), where it can be read.
pub(super) fn mem_total() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let kib = m.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse::<u64>().ok()?;
        kib.checked_mul(1024)
    })
}

/// `p` with symbolic links followed, also to a target that does not exist yet (a link to an
/// output the run is about to write); at most 40 links, as the kernel allows.
fn link_target(p: &std::path::Path) -> PathBuf {
    let mut p = p.to_path_buf();
    for _ in 0..40 {
        match std::fs::read_link(&p) {
            Ok(t) if t.is_absolute() => p = t,
            Ok(t) => p = p.parent().unwrap_or(std::path::Path::new("")).join(t),
            Err(_) => break,
        }
    }
    p
}

/// Whether `a` and `b` exist and are one file (device and inode), whatever links lead to it.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => false,
    }
}

/// Sizes in the order given, each once: a size named twice would be measured twice, as two
/// points of one identity (which `--compare` cannot tell apart).
pub(super) fn unique_sizes(v: Vec<u64>) -> Vec<u64> {
    let mut seen = std::collections::HashSet::new();
    v.into_iter().filter(|s| seen.insert(*s)).collect()
}

/// A size flag's value in bytes; a bad one is an error naming the flag (`--bar-read-cap: bad
/// size "0": ...`: the value alone did not say which of four size flags it came from).
pub(super) fn size_arg(flag: &str, s: &str) -> Result<u64> {
    parse_size(s).map_err(|e| format!("{flag}: {e}").into())
}

/// The real path of `f`'s folder (`.` for a bare name), for telling whether two outputs are one.
fn real_dir(f: &std::path::Path) -> Option<PathBuf> {
    let dir = f.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    std::fs::canonicalize(dir).ok()
}

/// `--budget`: seconds, finite, from 0 to a day (a `Duration` from anything else would panic).
fn parse_budget(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(0.0..=86_400.0).contains(&v) {
        return Err(format!("{s:?}: the budget is from 0 to 86400 seconds"));
    }
    Ok(v)
}

/// Set by SIGINT; the sweeps stop between points when they see it.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether Ctrl-C was pressed: stop measuring, keep what was measured.
pub(super) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

extern "C" fn on_sigint(_: libc::c_int) {
    if INTERRUPTED.swap(true, Ordering::Relaxed) {
        // A second Ctrl-C: the user does not want to wait for the point in flight.
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
}

/// Routes SIGINT to `INTERRUPTED` for the rest of the process.
fn catch_sigint() {
    let handler: extern "C" fn(libc::c_int) = on_sigint;
    // SAFETY: the handler only touches an atomic and calls _exit, both async-signal-safe.
    unsafe { libc::signal(libc::SIGINT, handler as libc::sighandler_t) };
}

/// The testcases to run: `-t` (or all), narrowed by --paths, --dirs and --no-costs.
fn chosen(a: &Args) -> Result<Vec<&'static Testcase>> {
    let path_ok = |p: PathKind| a.paths.as_ref().is_none_or(|v| v.contains(&p));
    let dir_ok = |d: DirKind| a.dirs.as_ref().is_none_or(|v| v.contains(&d));
    let v: Vec<&'static Testcase> = testcase::select(&a.testcases)?
        .into_iter()
        .filter(|t| match t.work {
            Work::Copy(p, d) | Work::Sm(p, d) => path_ok(p) && dir_ok(d),
            Work::Latency(d) | Work::Floor(d) => path_ok(PathKind::Pinned) && dir_ok(d),
            Work::SmallAsync { .. } => true,
            Work::Costs => !a.no_costs,
        })
        .collect();
    if v.is_empty() {
        return Err("no testcase left to run: -t, --paths, --dirs and --no-costs exclude every one".into());
    }
    Ok(v)
}

struct Ctx {
    dev: Device,
    /// `--flush-cache`'s buffer, taken by the paths that use it.
    flush: Option<Vec<u8>>,
    hugepages: bool,
    bidir_queues: Vec<String>,
    /// `--bidir-mode`.
    bidir_mode: bidir::BidirMode,
    device_name: String,
    driver: String,
    iters: usize,
    budget: Duration,
    plant: bool,
    failures: usize,
    points: Vec<Point>,
    pb: ProgressBar,
    /// The round-trip check's two buffers (expected, read back), reused for every point.
    scratch: (Vec<u8>, Vec<u8>),
    /// `--bar-threads`.
    bar_threads: usize,
    /// `--bar-reads`.
    bar_reads: BarReads,
    /// Notes a testcase makes on the way (what it skipped and why), for the run's `notes`.
    notes: Vec<String>,
}

/// Writes every byte of `buf` (a buffer larger than the LLC), evicting what the last iteration
/// left in the caches.
fn flush_cache(buf: &mut Option<Vec<u8>>) {
    if let Some(b) = buf {
        let v = b[0].wrapping_add(1);
        b.fill(v);
        std::hint::black_box(&b[..]);
    }
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
    if a.list {
        print!("{}", testcase::list());
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(spec) = &a.devices {
        catch_sigint();
        return multi::run(&a, spec);
    }
    // Refused before measuring: a build without the `cuda` feature can never run the baseline,
    // and a whole sweep that ends in a note and exit 0 is not the comparison that was asked for.
    if a.baseline.is_some() && !cfg!(feature = "cuda") {
        return Err("--baseline cuda: this vkhost was built without the `cuda` feature (cargo build --release --features \
                    vkhost-cli/cuda); nothing was measured"
            .into());
    }
    let started = std::time::SystemTime::now();
    let infos = vkhost::devices()?;
    if let Some(i) = a.device {
        crate::devices::check_index("--device", i, &infos)?;
    }
    let chosen = chosen(&a)?;
    // The plot draws the copy and latency points: with none chosen it would be five empty panels.
    if a.plot.is_some() && !chosen.iter().any(|t| matches!(t.work, Work::Copy(..) | Work::Sm(..) | Work::Latency(_) | Work::Floor(_))) {
        return Err("--plot draws the copy and latency testcases, and none is chosen (costs and small_async are in the table, \
                    the JSON and the CSV)"
            .into());
    }
    // Before measuring: an output that cannot be written would lose the whole run.
    if let Some(f) = &a.plot {
        crate::plot::is_png("--plot", f)?;
    }
    check_outputs(&[("--json", &a.json), ("--csv", &a.csv), ("--plot", &a.plot)])?;
    // Read before measuring, so a bad file fails fast.
    let old = match &a.compare {
        Some(f) => Some(compare::load(f)?),
        None => None,
    };
    let quick = a.quick;
    let max = size_arg("--max-size", &a.max_size)?;
    let sizes: Vec<u64> = match &a.sizes {
        Some(v) => unique_sizes(v.iter().map(|s| size_arg("--sizes", s)).collect::<Result<_>>()?),
        // `--max-size` holds for the quick sweep too (its default, 1G, is above every quick size).
        None if quick => [4 << 10, 64 << 10, 1 << 20, 16 << 20].into_iter().filter(|&s| s <= max).collect(),
        None => sweep(4 << 10, max),
    };
    if sizes.is_empty() {
        return Err(format!("--max-size {}: the default sweep starts at 4K", a.max_size).into());
    }
    let iters = if quick { a.iters.min(5) } else { a.iters };
    let budget = Duration::from_secs_f64(if quick { a.budget.min(0.5) } else { a.budget });
    let opts = open_options(&a)?;
    if let Some(c) = a.cpu.as_deref().filter(|c| c.trim() != "none") {
        meta::parse_cpu_list(c)?;
    }
    let bar_cap = size_arg("--bar-read-cap", &a.bar_read_cap)? as usize;
    // Options the device would refuse are refused before anything runs, the costs process
    // included: checked against the chosen device, or without `--device` against every device
    // (refused when none takes them; one the default device alone refuses fails at its open).
    let first_err = infos.iter().filter(|i| a.device.is_none_or(|d| d == i.index)).try_fold(None, |first, i| match opts.validate(i) {
        Ok(()) => Err(()),
        Err(e) => Ok(first.or(Some(e))),
    });
    if let Ok(Some(e)) = first_err {
        return Err(e.into());
    }
    // The device the run opens: --device, else the one open_default_with picks.
    let target = match a.device {
        Some(i) => Some(i),
        None => Device::default_index().ok(),
    };
    let max_alloc = infos.iter().find(|i| Some(i.index) == target).map(|i| i.max_memory_allocation_size);
    check_sizes(&sizes, if a.sizes.is_some() { "--sizes" } else { "--max-size" }, &chosen, max_alloc)?;
    // From here Ctrl-C stops between points (the costs process stops too: it gets the same
    // signal) and the run still writes its files.
    catch_sigint();
    // The costs beside other testcases: first, in a process of their own that exits before this
    // one opens the device (`costs::in_child` says why); alone, here.
    let want_costs = chosen.iter().any(|t| t.work == Work::Costs);
    // A failed costs process ends the run, as a failed cost measured here does.
    let child_costs = match (want_costs && chosen.iter().any(|t| t.work != Work::Costs))
        .then(|| costs::in_child(a.device, a.cpu.as_deref(), &sizes, iters, budget))
    {
        Some(r) => Some(r?),
        None => None,
    };
    let dev = match a.device {
        Some(i) => Device::open_with(i, &opts)?,
        None => Device::open_default_with(&opts)?,
    };
    let max = *sizes.iter().max().unwrap_or(&4096) as usize;
    let info = dev.info().clone();

    let pci = meta::pci_address(&dev);
    let pci_addr = pci.as_ref().ok().cloned();
    let (pcie, link, local_cpus) = meta::pcie(pci);
    let affinity = pin(a.cpu.as_deref(), local_cpus)?;

    let npoints: usize = chosen
        .iter()
        .map(|t| match t.work {
            Work::Copy(..) | Work::Sm(..) => sizes.len(),
            Work::Latency(_) => testcase::LATENCY_SIZES.len(),
            Work::Floor(_) => testcase::FLOOR_SIZES.len(),
            Work::SmallAsync { .. } => 2,
            Work::Costs => 0,
        })
        .sum();
    // On a terminal only: redirected output stays free of bar redraws.
    let pb = if std::io::stderr().is_terminal() { ProgressBar::new(npoints as u64) } else { ProgressBar::hidden() };
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
    for l in crate::devices::copy_queue_lines(&dev.copy_queues()) {
        println!("{l}");
    }
    println!("{}", output::link_line(&pcie));
    println!("CPUs: {}", output::affinity_line(&affinity));
    let flush_bytes = (2 * meta::llc_bytes().unwrap_or(32 << 20)) as usize;
    let mut cx = Ctx {
        hugepages: a.hugepages,
        // Each pair once: a pair named twice made two points of one variant.
        bidir_queues: a
            .bidir_queues
            .iter()
            .enumerate()
            .filter(|(i, q)| !a.bidir_queues[..*i].contains(q))
            .map(|(_, q)| q.clone())
            .collect(),
        bidir_mode: a.bidir_mode,
        device_name: info.name.clone(),
        driver: format!("{} {}", info.driver_name, info.driver_info),
        dev: dev.clone(),
        flush: a.flush_cache.then(|| vec![0u8; flush_bytes]),
        iters,
        budget,
        plant: a.plant_mismatch,
        failures: 0,
        points: Vec::new(),
        pb,
        scratch: Default::default(),
        bar_threads: a.bar_threads.unwrap_or_else(bar::default_bar_threads).clamp(1, bar::cpus()),
        bar_reads: a.bar_reads,
        notes: Vec::new(),
    };

    let mut notes = Vec::new();
    // (path, direction, by the copy kernel)
    let copies: Vec<(PathKind, DirKind, bool)> = chosen
        .iter()
        .filter_map(|t| match t.work {
            Work::Copy(p, d) => Some((p, d, false)),
            Work::Sm(p, d) => Some((p, d, true)),
            _ => None,
        })
        .collect();
    // Every path's host memory (see `paths::Host`; the sm testcases use the same memory as the
    // path's ce ones) and the latency and small-async testcases' memory, then the copies: pinned
    // blocks allocated after the sweep freed its own are slower for small copies on the H200
    // (`latency::Mem`); a user's program allocates its buffers once, first.
    let lat: Vec<DirKind> = chosen.iter().filter_map(|t| if let Work::Latency(d) = t.work { Some(d) } else { None }).collect();
    let floor: Vec<DirKind> = chosen.iter().filter_map(|t| if let Work::Floor(d) = t.work { Some(d) } else { None }).collect();
    let small: Vec<bool> =
        chosen.iter().filter_map(|t| if let Work::SmallAsync { scattered } = t.work { Some(scattered) } else { None }).collect();
    let mut work = Vec::new();
    let dbuf = if copies.is_empty() || interrupted() { None } else { Some([dev.alloc_buffer(max)?, dev.alloc_buffer(max)?]) };
    if dbuf.is_some() {
        for path in [PathKind::Pinned, PathKind::Registered, PathKind::Pageable, PathKind::Bar, PathKind::Device] {
            let dirs = |sm: bool| -> Vec<DirKind> { copies.iter().filter(|c| c.0 == path && c.2 == sm).map(|c| c.1).collect() };
            let (ce, sm) = (dirs(false), dirs(true));
            if ce.is_empty() && sm.is_empty() {
                continue;
            }
            match path {
                PathKind::Bar | PathKind::Device => work.push((path, ce, sm, None)),
                _ => match paths::Host::new(&cx, path, max) {
                    Ok(h) => work.push((path, ce, sm, Some(h))),
                    Err(e) => notes.push(format!("{}: skipped ({e})", path.name())),
                },
            }
        }
        cx.scratch = (vec![0u8; max], vec![0u8; max]);
    }
    let mut lat_mem = (!lat.is_empty() && !interrupted()).then(|| latency::Mem::new(&dev, &testcase::LATENCY_SIZES));
    let mut floor_mem = (!floor.is_empty() && !interrupted()).then(|| latency::Mem::new(&dev, &testcase::FLOOR_SIZES));
    let mut small_mem = (!small.is_empty() && !interrupted()).then(|| small_async::Mem::new(&dev));
    // A failed cost (alone, in this process) ends the run, after the sweep's registrations are
    // released below.
    let costs_done = match child_costs {
        Some(c) => {
            notes.push("costs: measured first, in a process of their own (docs/BENCH.md)".into());
            cx.points.extend(c.points);
            cx.failures += c.failures;
            notes.extend(c.notes);
            Ok(())
        }
        None if want_costs && !interrupted() => costs(&mut cx, &sizes, &mut notes),
        None => Ok(()),
    };
    if let Some(dbuf) = dbuf.as_ref().filter(|_| costs_done.is_ok()) {
        for (path, ce, sm, host) in &mut work {
            if !ce.is_empty() && !interrupted() {
                if let Err(e) = bench_path(&mut cx, *path, ce, &sizes, dbuf, host.as_mut(), bar_cap) {
                    notes.push(format!("{}: skipped ({e})", path.name()));
                }
            }
            if !sm.is_empty() && !interrupted() {
                if let Err(e) = sm::bench_sm(&mut cx, *path, sm, &sizes, dbuf, host.as_mut(), &mut notes) {
                    notes.push(format!("{} sm: skipped ({e})", path.name()));
                }
            }
        }
    }
    for (path, _, _, host) in &work {
        if let Some(Err(e)) = host.as_ref().map(|h| h.release(&dev)) {
            notes.push(format!("{}: unregister failed ({e})", path.name()));
        }
    }
    cx.scratch = Default::default();
    drop(work);
    drop(dbuf);
    costs_done?;
    if let Some(mem) = lat_mem.as_mut().filter(|_| !interrupted()) {
        if let Err(e) = mem.as_mut().map_err(|e| e.to_string()).and_then(|m| latency::latency(&mut cx, &lat, m).map_err(|e| e.to_string()))
        {
            notes.push(format!("latency: skipped ({e})"));
        }
    }
    // Right after the latency testcase, which it is the floor of (and of the sweep's `_ce` points).
    if let Some(mem) = floor_mem.as_mut().filter(|_| !interrupted()) {
        if let Err(e) = mem.as_mut().map_err(|e| e.to_string()).and_then(|m| latency::floor(&mut cx, &floor, m).map_err(|e| e.to_string()))
        {
            notes.push(format!("latency floor: skipped ({e})"));
        }
    }
    if let Some(mem) = small_mem.as_mut().filter(|_| !interrupted()) {
        if let Err(e) = mem.as_mut().map_err(|e| e.to_string()).and_then(|m| small_async(&mut cx, &small, m).map_err(|e| e.to_string())) {
            notes.push(format!("small-async: skipped ({e})"));
        }
    }
    drop((lat_mem, floor_mem, small_mem));
    cx.pb.finish_and_clear();
    if interrupted() {
        notes.push("interrupted (Ctrl-C): the points measured so far are reported".into());
    }

    let cuda = match a.baseline {
        Some(Baseline::Cuda) if !interrupted() => {
            // cudaMemcpy compares with the copy-engine testcases; CUDA's SM copy over mapped
            // pinned memory with the `_sm` ones over host memory (pinned, and registered as
            // `_registered_ce` is compared: against CUDA's pinned figure).
            let host = |p: PathKind| matches!(p, PathKind::Pinned | PathKind::Registered);
            let plan = crate::cuda::Plan {
                sizes: &sizes,
                iters,
                budget,
                dirs: [DirKind::H2d, DirKind::D2h, DirKind::Bidir, DirKind::D2d]
                    .into_iter()
                    .filter(|d| copies.iter().any(|c| c.1 == *d && !c.2 && c.0 != PathKind::Bar))
                    .collect(),
                sm: [DirKind::H2d, DirKind::D2h].into_iter().filter(|d| copies.iter().any(|c| c.1 == *d && c.2 && host(c.0))).collect(),
                small_async: chosen.iter().any(|t| matches!(t.work, Work::SmallAsync { .. })),
                pci: pci_addr,
            };
            crate::cuda::run(&plan, &mut notes)
        }
        _ => Vec::new(),
    };
    let queues = dev.copy_queues();
    let at_open = anomaly::small_at_open(&queues);
    notes.append(&mut cx.notes);
    notes.extend(anomaly::notes(&cx.points, at_open));
    if cx.points.iter().any(|p| p.dir == "h2d" || p.dir == "bidir") {
        notes.extend(anomaly::host_read_note(&queues));
    }
    print_table(&cx.points, &cuda, link.as_ref());
    for n in &notes {
        println!("note: {n}");
    }

    let all: Vec<&Point> = cx.points.iter().chain(cuda.iter()).collect();
    let results: Vec<Value> = all.iter().map(|p| to_json(p, link.as_ref())).collect();
    let (version, commit) = meta::build();
    let mut device_json = output::device_json(&info, &dev.host_registration());
    device_json["copy_queues"] = crate::devices::queues_json(&dev.copy_queues());
    let run = json!({
        "schema_version": meta::SCHEMA_VERSION,
        "tool": "vkhost bench",
        "vkhost_version": version,
        "git_commit": commit,
        "time": meta::rfc3339(started.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)),
        "duration_s": started.elapsed().map(|d| d.as_secs_f64()).unwrap_or(0.0),
        "args": std::env::args().collect::<Vec<_>>(),
        "interrupted": interrupted(),
        "testcases": chosen.iter().map(|t| t.name).collect::<Vec<_>>(),
        "sizes": sizes,
        "iters": iters,
        "warmup_iters": 1,
        "budget_s": budget.as_secs_f64(),
        "staging": json!({
            "threads": dev.options().staging_threads,
            "chunk_bytes": dev.options().staging_chunk,
            "slots": dev.options().staging_slots,
            "spin_us": dev.staging_spin().as_micros() as u64,
        }),
        "copy_piece_bytes": dev.copy_piece(),
        "bar_threads": cx.bar_threads,
        "bar_reads": bar::read_method(cx.bar_reads),
        "flush_cache_bytes": cx.flush.as_ref().map(|_| flush_bytes),
        "unstable_spread": crate::stats::UNSTABLE_SPREAD,
        "failures": cx.failures,
        "host": meta::host(),
        "affinity": affinity,
        "device": device_json,
        "pcie": pcie,
        "notes": notes,
    });
    // Every output is attempted even when an earlier one fails (a full disk for the JSON
    // still leaves the CSV and the plot); the failures are reported together at the end.
    let mut write_errors: Vec<String> = Vec::new();
    if let Some(f) = &a.json {
        let doc = json!({ "run": run, "results": results });
        match std::fs::write(f, serde_json::to_string_pretty(&doc)?) {
            Ok(()) => println!("wrote {}", f.display()),
            Err(e) => write_errors.push(format!("--json {}: {e}", f.display())),
        }
    }
    if let Some(f) = &a.csv {
        match std::fs::write(f, output::csv(&results)) {
            Ok(()) => println!("wrote {}", f.display()),
            Err(e) => write_errors.push(format!("--csv {}: {e}", f.display())),
        }
    }
    if let Some(old) = &old {
        compare::print(old, &results);
    }
    if let Err(e) = dev.destroy() {
        write_errors.push(format!("destroying the device: {e}"));
    }
    // Last: the data files are written even when plotting fails (no font, say).
    if let Some(f) = &a.plot {
        let title = format!("{} ({})", cx.device_name, cx.driver.trim());
        match crate::plot::plot(f, &all, &title, link.as_ref()) {
            Ok(()) => println!("wrote {}", f.display()),
            Err(e) => write_errors.push(format!("--plot {}: {e}", f.display())),
        }
    }
    // Each failure said; the exit code keeps its order of importance: interrupted (130), a
    // failed check (2), then these (1).
    for e in &write_errors {
        eprintln!("vkhost: {e}");
    }
    if interrupted() {
        println!("interrupted: {} point(s) measured", cx.points.len());
        return Ok(ExitCode::from(130));
    }
    if cx.failures > 0 {
        println!("FAIL: {} point(s) did not round-trip", cx.failures);
        return Ok(ExitCode::from(2));
    }
    if !write_errors.is_empty() {
        return Ok(ExitCode::from(1));
    }
    // Points that move none of the bench's bytes have nothing to check: the latency floor's
    // copies move the library's own buffers, and the costs time allocation and registration.
    let floor = cx.points.iter().filter(|p| p.api == "vulkan" && p.kind == "latency" && p.verified.is_none()).count();
    let costs = cx.points.iter().filter(|p| p.api == "vulkan" && p.kind == "cost" && p.verified.is_none()).count();
    let other = cx.points.iter().filter(|p| p.api == "vulkan" && !matches!(p.kind, "latency" | "cost") && p.verified.is_none()).count();
    let mut unchecked = Vec::new();
    if floor > 0 {
        unchecked.push(format!("the {floor} latency floor point(s), which copy no bytes of the bench's"));
    }
    if costs > 0 {
        unchecked.push(format!("the {costs} cost point(s), which copy nothing"));
    }
    if other > 0 {
        unchecked.push(format!("{other} point(s) with no check"));
    }
    if unchecked.is_empty() {
        println!("all points verified");
    } else {
        println!("all points verified but {}", unchecked.join(" and "));
    }
    Ok(ExitCode::SUCCESS)
}

/// Applies `--cpu` (or the default: the device's local CPUs) and says what was done, for
/// `run.affinity`. An explicit list that cannot be applied is an error; the default is not.
fn pin(cpu: Option<&str>, local: Option<Vec<usize>>) -> Result<Value> {
    let (source, requested, reason) = match (cpu.map(str::trim), local) {
        (Some("none"), _) => ("none", None, Some("--cpu none".to_string())),
        (Some(list), _) => {
            let cpus = meta::parse_cpu_list(list)?;
            meta::pin_process(&cpus).map_err(|e| format!("--cpu {list}: {e}"))?;
            ("--cpu", Some(cpus), None)
        }
        (None, Some(local)) => match meta::pin_process(&local) {
            Ok(()) => ("device-numa-node", Some(local), None),
            Err(e) => ("none", None, Some(format!("pinning to the device's local CPUs failed: {e}"))),
        },
        (None, None) => ("none", None, Some("the platform does not say which CPUs are local to the device".to_string())),
    };
    Ok(json!({
        "source": source,
        "requested": requested.as_deref().map(meta::cpu_list_string),
        "cpus": meta::cpu_list_string(&meta::current_affinity()),
        "scope": if requested.is_some() { "every thread of the process" } else { "not pinned" },
        "reason": reason,
    }))
}

/// The options a bench opens its devices with: no validation layer, and the staging flags
/// (`--staging-threads`, `--staging-spin-us`, `--staging-chunk`, `--staging-slots`) over the
/// library's defaults. The single-device sweep and `--devices` share them, so that the two
/// measure the same configuration.
pub(super) fn open_options(a: &Args) -> Result<OpenOptions> {
    let mut opts = OpenOptions { validation: false, ..OpenOptions::default() };
    if let Some(t) = a.staging_threads {
        opts.staging_threads = t;
    }
    if let Some(us) = a.staging_spin_us {
        opts.staging_spin = Some(std::time::Duration::from_micros(us));
    }
    if let Some(c) = &a.staging_chunk {
        opts.staging_chunk = size_arg("--staging-chunk", c)? as usize;
    }
    if let Some(n) = a.staging_slots {
        opts.staging_slots = n;
    }
    Ok(opts)
}
