//! Which queue synchronous copies use, chosen by measurement.
//!
//! A discrete GPU offers copies on two kinds of queue: the copy engines (a transfer-only
//! family) and the compute family's queue. Which is faster depends on the device and on the
//! copy: on the H200 (2026-12-01, one call) the compute queue moved 256 MiB at 50.9 / 52.2 GB/s
//! (h2d / d2h) against the copy engines' 49.3 / 51.0, while a 4 KiB copy took 17.1 / 18.5 µs
//! there against 14.8 / 16.3 µs on a copy engine. So the choice is made per direction and per
//! size class, small or bulk, split where the two queues' measured times cross (at least
//! [`BULK_MIN`]; about 3.5 MB with those figures), from a measurement at open ([`measure`]): each queue copies
//! [`PROBE_BULK`] bytes (128 MiB) and 4 KiB both ways between a pinned block and a device
//! buffer, the kinds interleaved, best of several; a queue's bulk bandwidth is the slope between
//! the two sizes, its latency the 4 KiB time; the compute queue is chosen only where it is faster by
//! more than [`MARGIN`], since the copy engines leave the compute queue to kernels and streams.
//! The result is cached per physical device for the process (a second open does not measure).

use super::submit::{self, Dir, HostSide, Piece};
use super::{Live, QueueKind, Shared, now_ns};
use crate::error::Result;
use crate::memtype;
use ash::vk;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Instant;

/// Copies of at least this many bytes are "bulk"; smaller ones are "small" (latency-bound).
pub const BULK_MIN: u64 = 1 << 20;
/// The bulk probe's size: long enough that the two queues' few-percent difference stands out of
/// the run-to-run noise, short enough for an open (~2.6 ms a copy on the H100 and H200). At 32
/// MiB (~0.65 ms a copy) the H100's compute queue measured 0-1.8% faster than its copy engines
/// for device→host between processes (2026-12-05), under [`MARGIN`] in some, where 128 MiB
/// and up measured 2.2-2.3% (and 2% in bulk copies of 256 MiB-1 GiB forced to either queue).
/// With this probe (and the slope below) the compute queue measured 1.8-2.7% faster for d2h
/// and was chosen for bulk copies in 24 of 24 processes; the old one kept every copy on the
/// copy engines in 1 of 10 (docs/PERFORMANCE.md, thirty-second session).
const PROBE_BULK: u64 = 128 << 20;
/// The bulk probe's size where the device has no copy engines: both kinds are then the compute
/// queue, the choice is fixed and the figures only inform (32 MiB: 4 s less on lavapipe's
/// `tests/device.rs`, which measures twice).
const PROBE_BULK_ONE_QUEUE: u64 = 32 << 20;
/// The small probe's size.
const PROBE_SMALL: u64 = 4096;
/// The compute queue must beat the copy engines by this fraction to be chosen.
pub const MARGIN: f64 = 0.01;

/// What the measurement at open found for one queue kind: bulk GB/s and 4 KiB latency in µs,
/// each direction.
///
/// # Example
///
/// ```
/// use vkhost::{CopyQueues, QueueFigures, QueueKind};
///
/// // The H200's figures: the compute queue is a little faster in bulk, the copy engines
/// // have the lower latency.
/// let copy = QueueFigures { bulk_to_device_gbps: 49.3, bulk_to_host_gbps: 51.0, small_to_device_us: 14.8, small_to_host_us: 16.3 };
/// let compute = QueueFigures { bulk_to_device_gbps: 50.9, bulk_to_host_gbps: 52.2, small_to_device_us: 17.1, small_to_host_us: 18.5 };
/// let q = CopyQueues::from_figures(copy, compute);
/// assert_eq!(q.measured, Some((copy, compute)));
/// assert_eq!((q.small_to_device, q.bulk_to_device), (QueueKind::Copy, QueueKind::Compute));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueFigures {
    /// Bulk host→device, GB/s (1e9 bytes/s): the best bulk run's time (128 MiB; 32 MiB on a
    /// device without copy engines) less the best 4 KiB run's (the submission's fixed cost),
    /// over the bytes between them.
    pub bulk_to_device_gbps: f64,
    /// Bulk device→host, GB/s.
    pub bulk_to_host_gbps: f64,
    /// 4 KiB host→device, µs, best of the runs.
    pub small_to_device_us: f64,
    /// 4 KiB device→host, µs.
    pub small_to_host_us: f64,
}

/// The queues synchronous copies use ([`Device::copy_queues`](crate::Device::copy_queues)).
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// let q = dev.copy_queues();
/// println!("4 KiB uploads run on {:?}, 64 MiB uploads on {:?}", q.queue_for(true, 4096), q.queue_for(true, 64 << 20));
/// if dev.info().transfer_family().is_none() {
///     // No copy engines: every copy runs on the compute queue.
///     assert_eq!(q, vkhost::CopyQueues { measured: q.measured, ..vkhost::CopyQueues::fixed(vkhost::QueueKind::Compute) });
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CopyQueues {
    /// Host→device copies smaller than `bulk_min_to_device`.
    pub small_to_device: QueueKind,
    /// Device→host copies smaller than `bulk_min_to_host`.
    pub small_to_host: QueueKind,
    /// Host→device copies of at least `bulk_min_to_device` bytes.
    pub bulk_to_device: QueueKind,
    /// Device→host copies of at least `bulk_min_to_host` bytes.
    pub bulk_to_host: QueueKind,
    /// Host→device copies of at least this many bytes are "bulk" ([`BULK_MIN`](Self::BULK_MIN)
    /// unless measured: then where the faster-bulk queue's time, latency included, drops below
    /// the lower-latency queue's).
    pub bulk_min_to_device: u64,
    /// The same for device→host copies.
    pub bulk_min_to_host: u64,
    /// The measurement behind the choice: (copy engines, compute queue). `None` when nothing
    /// was measured: the device has one kind of queue, the options fixed the queue
    /// (`OpenOptions::measure_copy_queues` false or `copy_queue` set to `Compute`), or the
    /// measurement failed (then everything stays on `copy_queue`).
    pub measured: Option<(QueueFigures, QueueFigures)>,
}

impl CopyQueues {
    /// Copies of at least this many bytes count as bulk, unless measured otherwise.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::{CopyQueues, QueueKind};
    ///
    /// let q = CopyQueues::fixed(QueueKind::Copy);
    /// assert_eq!(q.bulk_min_to_device, CopyQueues::BULK_MIN);
    /// assert_eq!(CopyQueues::BULK_MIN, 1 << 20);
    /// ```
    pub const BULK_MIN: u64 = BULK_MIN;
    /// The compute queue must beat the copy engines by this fraction to be chosen.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::{CopyQueues, QueueFigures, QueueKind};
    ///
    /// let copy = QueueFigures { bulk_to_device_gbps: 50.0, bulk_to_host_gbps: 50.0, small_to_device_us: 10.0, small_to_host_us: 10.0 };
    /// // Faster by less than the margin everywhere: the copy engines keep every class.
    /// let f = 1.0 + CopyQueues::MARGIN / 2.0;
    /// let compute = QueueFigures {
    ///     bulk_to_device_gbps: 50.0 * f, bulk_to_host_gbps: 50.0 * f, small_to_device_us: 10.0 / f, small_to_host_us: 10.0 / f,
    /// };
    /// let q = CopyQueues::from_figures(copy, compute);
    /// assert_eq!(q, CopyQueues { measured: q.measured, ..CopyQueues::fixed(QueueKind::Copy) });
    /// ```
    pub const MARGIN: f64 = MARGIN;

    /// Every class on `kind`, measured by nothing.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::{CopyQueues, QueueKind};
    ///
    /// let q = CopyQueues::fixed(QueueKind::Compute);
    /// assert_eq!(q.queue_for(true, 4096), QueueKind::Compute);
    /// assert_eq!(q.queue_for(false, 1 << 30), QueueKind::Compute);
    /// assert!(q.measured.is_none());
    /// ```
    pub fn fixed(kind: QueueKind) -> CopyQueues {
        CopyQueues {
            small_to_device: kind,
            small_to_host: kind,
            bulk_to_device: kind,
            bulk_to_host: kind,
            bulk_min_to_device: BULK_MIN,
            bulk_min_to_host: BULK_MIN,
            measured: None,
        }
    }

    /// The choice the figures imply (pure): compute only where it beats the copy engines by
    /// more than [`MARGIN`](Self::MARGIN); when one queue has the lower latency and the other
    /// the higher bandwidth, the size where their times (latency + size / bandwidth) cross, at
    /// least [`BULK_MIN`](Self::BULK_MIN), splits small from bulk.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::{CopyQueues, QueueFigures, QueueKind};
    ///
    /// // The H200's figures: the compute queue is a little faster in bulk, the copy engines
    /// // have the lower latency.
    /// let copy = QueueFigures { bulk_to_device_gbps: 49.3, bulk_to_host_gbps: 51.0, small_to_device_us: 14.8, small_to_host_us: 16.3 };
    /// let compute = QueueFigures { bulk_to_device_gbps: 50.9, bulk_to_host_gbps: 52.2, small_to_device_us: 17.1, small_to_host_us: 18.5 };
    /// let q = CopyQueues::from_figures(copy, compute);
    /// assert_eq!((q.small_to_device, q.small_to_host), (QueueKind::Copy, QueueKind::Copy));
    /// assert_eq!((q.bulk_to_device, q.bulk_to_host), (QueueKind::Compute, QueueKind::Compute));
    /// // 2.3 µs more latency against 3% more bandwidth: the compute queue pays off from ~3.6 MB.
    /// assert!((3_500_000..3_700_000).contains(&q.bulk_min_to_device));
    /// ```
    pub fn from_figures(copy: QueueFigures, compute: QueueFigures) -> CopyQueues {
        let faster = |c: f64, k: f64| if k > c * (1.0 + MARGIN) { QueueKind::Compute } else { QueueKind::Copy };
        let quicker = |c: f64, k: f64| if k * (1.0 + MARGIN) < c { QueueKind::Compute } else { QueueKind::Copy };
        // Bytes where lat_a + n/bw_a = lat_b + n/bw_b, for the slower-latency, faster-bulk b.
        let cross = |small: QueueKind, bulk: QueueKind, (lc, bc): (f64, f64), (lk, bk): (f64, f64)| -> u64 {
            let (la, ba, lb, bb) = match (small, bulk) {
                (QueueKind::Copy, QueueKind::Compute) => (lc, bc, lk, bk),
                (QueueKind::Compute, QueueKind::Copy) => (lk, bk, lc, bc),
                _ => return BULK_MIN,
            };
            let per_byte = 1e6 / (ba * 1e9) - 1e6 / (bb * 1e9); // µs per byte saved in bulk
            if per_byte <= 0.0 || lb <= la {
                return BULK_MIN;
            }
            (((lb - la) / per_byte) as u64).clamp(BULK_MIN, 1 << 30)
        };
        let small_to_device = quicker(copy.small_to_device_us, compute.small_to_device_us);
        let small_to_host = quicker(copy.small_to_host_us, compute.small_to_host_us);
        let bulk_to_device = faster(copy.bulk_to_device_gbps, compute.bulk_to_device_gbps);
        let bulk_to_host = faster(copy.bulk_to_host_gbps, compute.bulk_to_host_gbps);
        CopyQueues {
            small_to_device,
            small_to_host,
            bulk_to_device,
            bulk_to_host,
            bulk_min_to_device: cross(
                small_to_device,
                bulk_to_device,
                (copy.small_to_device_us, copy.bulk_to_device_gbps),
                (compute.small_to_device_us, compute.bulk_to_device_gbps),
            ),
            bulk_min_to_host: cross(
                small_to_host,
                bulk_to_host,
                (copy.small_to_host_us, copy.bulk_to_host_gbps),
                (compute.small_to_host_us, compute.bulk_to_host_gbps),
            ),
            measured: Some((copy, compute)),
        }
    }

    /// The queue for a synchronous copy of `bytes`, host→device when `to_device`.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::{CopyQueues, QueueKind};
    ///
    /// // Small copies on the copy engines, bulk ones from 4 MiB on the compute queue.
    /// let q = CopyQueues { bulk_to_device: QueueKind::Compute, bulk_min_to_device: 4 << 20, ..CopyQueues::fixed(QueueKind::Copy) };
    /// assert_eq!(q.queue_for(true, 4096), QueueKind::Copy);
    /// assert_eq!(q.queue_for(true, 4 << 20), QueueKind::Compute);
    /// assert_eq!(q.queue_for(false, 4 << 20), QueueKind::Copy); // the other direction
    /// ```
    pub fn queue_for(&self, to_device: bool, bytes: u64) -> QueueKind {
        match to_device {
            true if bytes >= self.bulk_min_to_device => self.bulk_to_device,
            true => self.small_to_device,
            false if bytes >= self.bulk_min_to_host => self.bulk_to_host,
            false => self.small_to_host,
        }
    }

    /// Below this ratio of bulk host→device to device→host bandwidth measured at open, the
    /// host's GPU reads host memory slowly ([`reads_host_slowly`](Self::reads_host_slowly)).
    /// Four H100 hosts of 2026-12-05/06 read at 32-35 GB/s and wrote at 51-52 (0.64-0.68x), a
    /// plain Vulkan program and CUDA's copy kernel too; every other host measured 0.96-0.98x.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::{CopyQueues, QueueFigures};
    ///
    /// let at = |h2d: f64| {
    ///     let f = QueueFigures { bulk_to_device_gbps: h2d, bulk_to_host_gbps: 50.0, small_to_device_us: 12.0, small_to_host_us: 12.0 };
    ///     CopyQueues::from_figures(f, f)
    /// };
    /// assert_eq!(CopyQueues::SLOW_READS, 0.8);
    /// assert!(at(39.0).reads_host_slowly()); // 0.78x
    /// assert!(!at(41.0).reads_host_slowly()); // 0.82x
    /// ```
    pub const SLOW_READS: f64 = 0.8;

    /// The bulk (host→device, device→host) GB/s measured at open, each the better of the
    /// queues measured; `None` when nothing was measured.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::{CopyQueues, QueueFigures};
    ///
    /// let copy = QueueFigures { bulk_to_device_gbps: 34.3, bulk_to_host_gbps: 51.3, small_to_device_us: 11.7, small_to_host_us: 12.5 };
    /// let compute = QueueFigures { bulk_to_device_gbps: 34.8, bulk_to_host_gbps: 52.4, small_to_device_us: 13.0, small_to_host_us: 13.9 };
    /// let q = CopyQueues::from_figures(copy, compute);
    /// assert_eq!(q.bulk_at_open(), Some((34.8, 52.4)));
    /// assert!(q.reads_host_slowly());
    /// assert_eq!(CopyQueues::fixed(vkhost::QueueKind::Copy).bulk_at_open(), None);
    /// ```
    pub fn bulk_at_open(&self) -> Option<(f64, f64)> {
        let (c, k) = self.measured?;
        Some((c.bulk_to_device_gbps.max(k.bulk_to_device_gbps), c.bulk_to_host_gbps.max(k.bulk_to_host_gbps)))
    }

    /// Whether the measurement at open found the GPU reading host memory below
    /// [`SLOW_READS`](Self::SLOW_READS) of the rate it writes it ([`BarAssist::Auto`](crate::BarAssist::Auto)
    /// shares large writes there). `false` when nothing was measured.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let q = dev.copy_queues();
    /// if q.reads_host_slowly() {
    ///     let (h2d, d2h) = q.bulk_at_open().expect("measured");
    ///     println!("this host's GPU reads host memory at {h2d:.1} GB/s, writes it at {d2h:.1}");
    /// }
    /// assert_eq!(q.reads_host_slowly(), q.bulk_at_open().is_some_and(|(h, d)| h > 0.0 && h < vkhost::CopyQueues::SLOW_READS * d));
    /// # Ok(()) }
    /// ```
    pub fn reads_host_slowly(&self) -> bool {
        self.bulk_at_open().is_some_and(|(h2d, d2h)| h2d > 0.0 && d2h > 0.0 && h2d < Self::SLOW_READS * d2h)
    }

    fn bits(&self) -> u8 {
        let b = |k: QueueKind, i: u8| if k == QueueKind::Compute { 1 << i } else { 0 };
        b(self.small_to_device, 0) | b(self.small_to_host, 1) | b(self.bulk_to_device, 2) | b(self.bulk_to_host, 3)
    }
}

/// How long after the end of the last synchronous bulk copy that ran beside the other
/// direction the next ones still go to the copy engines (see [`Choice::enter_bulk`]): a loop
/// of writes on one thread beside reads on another starts its copies a few microseconds
/// apart, not always overlapping.
pub const BOTH_WAYS_RECENT: std::time::Duration = std::time::Duration::from_millis(10);

/// The device's current choice: the kinds as bits and the thresholds (read on every copy),
/// the whole record behind a lock (read by `Device::copy_queues`), and the synchronous bulk
/// copies in flight per direction.
#[derive(Debug)]
pub(crate) struct Choice {
    bits: AtomicU8,
    /// `record.reads_host_slowly()`, for `BarAssist::Auto`'s lock-free read on every large write.
    slow_reads: std::sync::atomic::AtomicBool,
    min_to_device: AtomicU64,
    min_to_host: AtomicU64,
    record: Mutex<CopyQueues>,
    /// Synchronous copies in flight that the choice sent to the compute queue, by direction
    /// (`[to device, to host]`).
    bulk: [AtomicU64; 2],
    /// How many such copies ever entered, by direction: a copy that sees the other
    /// direction's count change while it ran had one beside it.
    entered: [AtomicU64; 2],
    /// When a bulk copy that ran beside the other direction last ended (`now_ns`; 0: never).
    both_ways: AtomicU64,
}

/// A bulk synchronous copy in flight (see [`Choice::enter_bulk`]); leaves on drop. A heuristic's
/// count only: nothing rests on it.
pub(crate) struct Bulk<'a> {
    choice: &'a Choice,
    dir: usize,
    /// Whether the copy runs beside the other direction's, now or within [`BOTH_WAYS_RECENT`].
    pub both_ways: bool,
    /// Whether one in the other direction was in flight when this one entered.
    beside: bool,
    /// The other direction's `entered` count when this one entered.
    other_entered: u64,
}

impl Drop for Bulk<'_> {
    fn drop(&mut self) {
        let c = self.choice;
        // The window runs from the end of the last copy that ran beside the other direction
        // (one was in flight when it entered, or one entered while it ran), not its start: a
        // 256 MiB pair takes ~9 ms, so the next round started after a window counted from the
        // start had closed, and went one to the compute queue and one to a copy engine (52
        // GB/s in sum on the H200, where two copy engines give 58). A copy that only fell in
        // the window (alone) does not extend it: one thread's back-to-back copies go back to
        // the compute queue once the other direction stopped.
        if self.beside || c.entered[1 - self.dir].load(Ordering::SeqCst) != self.other_entered {
            // The later of two racing ends wins.
            c.both_ways.fetch_max(now_ns(), Ordering::Relaxed);
        }
        c.bulk[self.dir].fetch_sub(1, Ordering::SeqCst);
    }
}

impl Choice {
    pub(crate) fn new(c: CopyQueues) -> Choice {
        Choice {
            bits: AtomicU8::new(c.bits()),
            slow_reads: std::sync::atomic::AtomicBool::new(c.reads_host_slowly()),
            min_to_device: AtomicU64::new(c.bulk_min_to_device),
            min_to_host: AtomicU64::new(c.bulk_min_to_host),
            record: Mutex::new(c),
            bulk: [AtomicU64::new(0), AtomicU64::new(0)],
            entered: [AtomicU64::new(0), AtomicU64::new(0)],
            both_ways: AtomicU64::new(0),
        }
    }

    /// Counts a synchronous copy in `dir` that [`Choice::pick`] sent to the compute queue, for
    /// as long as the returned guard lives, and says whether it runs beside one in the other
    /// direction (now, or within [`BOTH_WAYS_RECENT`] of the end of the last copy that ran
    /// beside the other direction). Such pairs go to the copy engines instead, one direction on
    /// each: on the H200 (2026-12-02, examples/sync_bidir.rs) a write and a read at once on two
    /// threads moved 47.6-53.3 GB/s in sum on the one compute queue and 57.6-58.6 on two copy
    /// engines, where alone the compute queue is 1-3.5% faster.
    pub(crate) fn enter_bulk(&self, dir: Dir) -> Bulk<'_> {
        let (me, other) = match dir {
            Dir::ToDevice => (0, 1),
            Dir::ToHost => (1, 0),
        };
        // SeqCst on both sides: of two copies entering at once, at least one sees the other
        // (with acquire/release both could read the other's count before its increment).
        self.bulk[me].fetch_add(1, Ordering::SeqCst);
        self.entered[me].fetch_add(1, Ordering::SeqCst);
        // (The time of the last pair is written when its copies leave: see `Bulk`'s drop.)
        let other_entered = self.entered[other].load(Ordering::SeqCst);
        let beside = self.bulk[other].load(Ordering::SeqCst) > 0;
        let both_ways = beside
            || match self.both_ways.load(Ordering::Relaxed) {
                0 => false,
                t => now_ns().saturating_sub(t) < BOTH_WAYS_RECENT.as_nanos() as u64,
            };
        Bulk { choice: self, dir: me, both_ways, beside, other_entered }
    }

    /// Whether a copy of `bytes` in `dir` is of the bulk class (at least the choice's
    /// threshold for that direction), whichever queue the class goes to.
    pub(crate) fn is_bulk(&self, dir: Dir, bytes: u64) -> bool {
        match dir {
            Dir::ToDevice => bytes >= self.min_to_device.load(Ordering::Relaxed),
            Dir::ToHost => bytes >= self.min_to_host.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn set(&self, c: CopyQueues) {
        let mut r = super::lock(&self.record);
        *r = c;
        self.min_to_device.store(c.bulk_min_to_device, Ordering::Relaxed);
        self.min_to_host.store(c.bulk_min_to_host, Ordering::Relaxed);
        self.bits.store(c.bits(), Ordering::Relaxed);
        self.slow_reads.store(c.reads_host_slowly(), Ordering::Relaxed);
    }

    /// Whether the choice in use was measured reading host memory slowly (lock-free).
    pub(crate) fn reads_host_slowly(&self) -> bool {
        self.slow_reads.load(Ordering::Relaxed)
    }

    pub(crate) fn get(&self) -> CopyQueues {
        *super::lock(&self.record)
    }

    /// The queue for a copy of `bytes` in `dir` (lock-free; a copy racing `set` may use either
    /// choice, both valid).
    pub(crate) fn pick(&self, dir: Dir, bytes: u64) -> QueueKind {
        let bit = match dir {
            Dir::ToDevice if bytes >= self.min_to_device.load(Ordering::Relaxed) => 2,
            Dir::ToDevice => 0,
            Dir::ToHost if bytes >= self.min_to_host.load(Ordering::Relaxed) => 3,
            Dir::ToHost => 1,
        };
        if self.bits.load(Ordering::Relaxed) & (1 << bit) != 0 { QueueKind::Compute } else { QueueKind::Copy }
    }
}

/// Which physical device: its enumeration index with its identity (vendor, device, driver).
type Key = (usize, u32, u32, u32);

/// Choices already measured in this process, by physical device. A forked child starts with
/// an empty cache (`PerFork`): a parent thread opening a device may have held its lock at the
/// fork.
fn cache() -> &'static Mutex<HashMap<Key, CopyQueues>> {
    static C: crate::par::PerFork<Mutex<HashMap<Key, CopyQueues>>> = crate::par::PerFork::new(Default::default);
    C.get()
}

/// The choice for a device at open: the cached one for this physical device, else a fresh
/// measurement (cached on success).
pub(crate) fn at_open(s: &Shared, l: &Live) -> Result<CopyQueues> {
    let i = &s.info;
    let key = (i.index, i.vendor_id, i.device_id, i.driver_version);
    if let Some(c) = super::lock(cache()).get(&key) {
        return Ok(*c);
    }
    let c = measure(s, l)?;
    super::lock(cache()).insert(key, c);
    Ok(c)
}

/// A queue's bulk bandwidth in GB/s from the best times of a `bulk`-byte and a [`PROBE_SMALL`]
/// copy: the bytes between them over the time between them, so that the fixed
/// cost of a submission (the latency, which [`CopyQueues::from_figures`] counts on its own) is
/// not counted twice. Where the difference is not positive (a clock too coarse), the plain
/// ratio of the bulk copy.
fn slope_gbps(bulk: u64, bulk_s: f64, small_s: f64) -> f64 {
    let d = bulk_s - small_s;
    if d > 0.0 && small_s.is_finite() { (bulk - PROBE_SMALL) as f64 / d / 1e9 } else { bulk as f64 / bulk_s / 1e9 }
}

/// Measures both queue kinds (see the module docs) and returns the choice they imply.
pub(crate) fn measure(s: &Shared, l: &Live) -> Result<CopyQueues> {
    let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
    // Without copy engines both kinds are the compute queue: the choice is fixed.
    let one_queue = l.copy_queues.is_empty();
    let bulk_len = if one_queue { PROBE_BULK_ONE_QUEUE } else { PROBE_BULK };
    // Released when dropped, unwinding included (a user's logger panicking on a failed wait's
    // error): after every copy below returned, which leaves nothing running that names them.
    let host = Owned { s, l, b: s.alloc_bound(l, bulk_len, usage, &memtype::pinned, false, false)? };
    let dev = Owned { s, l, b: s.alloc_bound(l, bulk_len, usage, &memtype::device_local, false, false)? };
    let time = |kind: QueueKind, dir: Dir, len: u64| -> Result<f64> {
        let piece = Piece { dev_offset: 0, len, host: HostSide::Direct { buffer: host.b.buffer, offset: 0, addr: 0 } };
        let t = Instant::now();
        // SAFETY: both buffers are ours, alive until released below, after every copy returned;
        // the piece is direct (no host bytes are touched) and lies in both buffers.
        unsafe { submit::execute_on(s, l, dir, dev.b.buffer, &[piece], 0, kind) }?;
        Ok(t.elapsed().as_secs_f64())
    };
    let r = (|| {
        let kinds = [QueueKind::Copy, QueueKind::Compute];
        let dirs = [Dir::ToDevice, Dir::ToHost];
        // [kind][dir]: best bulk seconds, small samples.
        let mut bulk = [[f64::INFINITY; 2]; 2];
        let mut small: [[Vec<f64>; 2]; 2] = Default::default();
        for &kind in &kinds {
            for &dir in &dirs {
                time(kind, dir, bulk_len)?; // warm-up: first submission, command buffers
                time(kind, dir, PROBE_SMALL)?;
            }
        }
        for _ in 0..3 {
            for (k, &kind) in kinds.iter().enumerate() {
                for (d, &dir) in dirs.iter().enumerate() {
                    bulk[k][d] = bulk[k][d].min(time(kind, dir, bulk_len)?);
                }
            }
        }
        for _ in 0..7 {
            for (k, &kind) in kinds.iter().enumerate() {
                for (d, &dir) in dirs.iter().enumerate() {
                    small[k][d].push(time(kind, dir, PROBE_SMALL)?);
                }
            }
        }
        let fig = |k: usize| {
            // Best of the runs, like the bulk figure, not the median: on the H200 a stretch of
            // slow samples during the open (one queue's 4 KiB h2d at 45 us against 12-18 for the
            // rest) made the median pick the compute queue for every small copy of that process.
            // The best run is what the queue can do; the choice compares capabilities.
            let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
            let (s2d, s2h) = (best(&small[k][0]), best(&small[k][1]));
            QueueFigures {
                bulk_to_device_gbps: slope_gbps(bulk_len, bulk[k][0], s2d),
                bulk_to_host_gbps: slope_gbps(bulk_len, bulk[k][1], s2h),
                small_to_device_us: s2d * 1e6,
                small_to_host_us: s2h * 1e6,
            }
        };
        let c = CopyQueues::from_figures(fig(0), fig(1));
        // Both kinds ran on the compute queue: say so.
        Ok(if one_queue { CopyQueues { measured: c.measured, ..CopyQueues::fixed(QueueKind::Compute) } } else { c })
    })();
    // Every copy above returned (synchronous: completed or drained on error), so nothing
    // pending names the buffers.
    drop((dev, host));
    r
}

/// A buffer of ours, released when dropped: on every path out of [`measure`] and [`floor`],
/// unwinding included, and only after their copies returned, which leaves nothing running
/// that names it.
struct Owned<'a> {
    s: &'a Shared,
    l: &'a Live,
    b: super::Bound,
}

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        // SAFETY: ours, released once; nothing pending names it (see the type's docs).
        unsafe { self.s.release_bound(self.l, self.b.buffer, self.b.memory) };
    }
}

/// What [`Device::copy_floor`](super::Device::copy_floor) measured: the time a synchronous
/// copy of one size and direction costs the device and the driver alone, on the queue vkhost
/// copies on.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use vkhost::{CopyFloor, QueueKind};
///
/// let f = CopyFloor { queue: QueueKind::Copy, len: 4096, to_device: false, times: [13, 11, 12].map(Duration::from_micros).to_vec() };
/// assert_eq!(f.median(), Duration::from_micros(12));
/// assert_eq!(f.min(), Duration::from_micros(11));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyFloor {
    /// The queue it ran on: the one a synchronous copy of this size and direction takes
    /// ([`CopyQueues::queue_for`], or the compute queue with `OpenOptions::copy_queue: Compute`).
    pub queue: QueueKind,
    /// Bytes copied.
    pub len: u64,
    /// Host to device (`true`) or device to host.
    pub to_device: bool,
    /// Each timed submission, submit to completion seen, in order; never empty.
    pub times: Vec<std::time::Duration>,
}

impl CopyFloor {
    /// The most iterations [`Device::copy_floor`](super::Device::copy_floor) takes in one call.
    ///
    /// # Example
    ///
    /// ```
    /// assert_eq!(vkhost::CopyFloor::MAX_ITERS, 100_000);
    /// ```
    pub const MAX_ITERS: usize = 100_000;

    /// The median time (the upper middle for an even count).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use vkhost::{CopyFloor, QueueKind};
    ///
    /// let f = CopyFloor { queue: QueueKind::Compute, len: 1 << 20, to_device: true, times: [40, 10, 30, 20].map(Duration::from_micros).to_vec() };
    /// assert_eq!(f.median(), Duration::from_micros(30));
    /// ```
    pub fn median(&self) -> std::time::Duration {
        let mut t = self.times.clone();
        t.sort_unstable();
        t.get(t.len() / 2).copied().unwrap_or_default()
    }

    /// The fastest time.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use vkhost::{CopyFloor, QueueKind};
    ///
    /// let f = CopyFloor { queue: QueueKind::Copy, len: 4096, to_device: false, times: vec![Duration::from_micros(13); 3] };
    /// assert_eq!(f.min(), f.median());
    /// ```
    pub fn min(&self) -> std::time::Duration {
        self.times.iter().copied().min().unwrap_or_default()
    }
}

/// [`Device::copy_floor`](super::Device::copy_floor): a pinned-type buffer and a device buffer
/// of the type [`crate::DeviceBuffer`]s get, `len` bytes each, then [`submit::floor`] on the
/// queue a synchronous copy of that size and direction takes, and both buffers released
/// (also when this unwinds).
pub(crate) fn floor(s: &Shared, l: &Live, to_device: bool, len: u64, iters: usize) -> Result<CopyFloor> {
    let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
    let dir = if to_device { Dir::ToDevice } else { Dir::ToHost };
    // As `submit::execute` picks (the bulk-both-ways exception aside: the floor runs alone).
    let kind = match s.options.copy_queue {
        QueueKind::Compute => QueueKind::Compute,
        QueueKind::Copy => s.copy_choice.pick(dir, len),
    };
    let host = Owned { s, l, b: s.alloc_bound(l, len, usage, &memtype::pinned, false, false)? };
    let dev = Owned { s, l, b: s.alloc_device_bound(l, len, usage, false, false)? };
    // SAFETY: both buffers are ours, made above with transfer usage and `len` bytes, used by
    // nothing else, and released (when `dev` and `host` drop) only after `floor` returned,
    // which waits for whatever it submitted on every path, unwinding included.
    let times = unsafe { submit::floor(s, l, dir, dev.b.buffer, host.b.buffer, len, kind, iters) }?;
    drop((dev, host));
    Ok(CopyFloor { queue: kind, len, to_device, times: times.into_iter().map(std::time::Duration::from_secs_f64).collect() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bulk copy alone stays where the choice put it; beside one in the other direction (and
    /// for `BOTH_WAYS_RECENT` after the end of the last such copy) it is flagged for the copy
    /// engines; the same direction twice is not "both ways", and the flag lapses once the
    /// window passed. On a fake clock, so a slow machine cannot stretch the window.
    #[test]
    fn bulk_copies_both_ways_are_flagged_and_the_flag_lapses() {
        use crate::device::FAKE_NOW;
        let at = |ms: u64| FAKE_NOW.with(|c| c.set(Some(1 + ms * 1_000_000)));
        let window = BOTH_WAYS_RECENT.as_millis() as u64;
        let c = Choice::new(CopyQueues::fixed(QueueKind::Compute));
        at(100);
        {
            let a = c.enter_bulk(Dir::ToDevice);
            assert!(!a.both_ways, "alone");
            let b = c.enter_bulk(Dir::ToDevice);
            assert!(!b.both_ways, "the same direction twice");
            let r = c.enter_bulk(Dir::ToHost);
            assert!(r.both_ways, "beside a write");
        }
        at(100 + window - 1);
        let w = c.enter_bulk(Dir::ToDevice);
        assert!(w.both_ways, "within BOTH_WAYS_RECENT of the last pair");
        drop(w);
        // That write ran alone: it does not extend the window.
        at(100 + window + 1);
        assert!(!c.enter_bulk(Dir::ToDevice).both_ways, "one thread's copies after the pair");
        // A long pair: the window counts from its end, not its start.
        at(1000);
        {
            let w = c.enter_bulk(Dir::ToDevice);
            let r = c.enter_bulk(Dir::ToHost);
            assert!(!w.both_ways && r.both_ways, "the first of a pair alone, the second beside it");
            at(1000 + 3 * window);
        }
        at(1000 + 4 * window - 1);
        assert!(c.enter_bulk(Dir::ToDevice).both_ways, "within BOTH_WAYS_RECENT of the end of a long pair");
        // The first of a pair (entered alone) ending well after the second: the window runs
        // from its end.
        at(2000);
        let first = c.enter_bulk(Dir::ToHost);
        {
            let second = c.enter_bulk(Dir::ToDevice);
            assert!(!first.both_ways && second.both_ways);
        }
        at(2000 + 3 * window);
        drop(first);
        at(2000 + 4 * window - 1);
        assert!(c.enter_bulk(Dir::ToDevice).both_ways, "within BOTH_WAYS_RECENT of the later end");
        at(2000 + 4 * window + 1);
        assert!(!c.enter_bulk(Dir::ToDevice).both_ways, "past it");
        at(3000);
        assert!(!c.enter_bulk(Dir::ToHost).both_ways, "after the window");
        assert!(c.bulk.iter().all(|b| b.load(Ordering::Relaxed) == 0), "every guard left");
        FAKE_NOW.with(|c| c.set(None));
    }

    /// Only copies of the bulk class count as bulk, by each direction's threshold.
    #[test]
    fn the_bulk_class_is_each_directions_threshold() {
        let q = CopyQueues { bulk_min_to_device: 4 << 20, bulk_min_to_host: 5 << 20, ..CopyQueues::fixed(QueueKind::Copy) };
        let c = Choice::new(q);
        assert!(!c.is_bulk(Dir::ToDevice, (4 << 20) - 1) && c.is_bulk(Dir::ToDevice, 4 << 20));
        assert!(!c.is_bulk(Dir::ToHost, 4 << 20) && c.is_bulk(Dir::ToHost, 5 << 20));
    }

    fn f(b2d: f64, b2h: f64, s2d: f64, s2h: f64) -> QueueFigures {
        QueueFigures { bulk_to_device_gbps: b2d, bulk_to_host_gbps: b2h, small_to_device_us: s2d, small_to_host_us: s2h }
    }

    #[test]
    fn h200_figures_pick_compute_for_bulk_and_copy_engines_for_small() {
        let c = CopyQueues::from_figures(f(49.3, 51.0, 14.8, 16.3), f(50.9, 52.2, 17.1, 18.5));
        assert_eq!(c.bulk_to_device, QueueKind::Compute);
        assert_eq!(c.bulk_to_host, QueueKind::Compute);
        assert_eq!(c.small_to_device, QueueKind::Copy);
        assert_eq!(c.small_to_host, QueueKind::Copy);
        // h2d: 2.3 µs more latency, 3% more bandwidth: the compute queue wins from about 3.6 MB;
        // d2h: 2.2 µs and 2.4%: from about 4.9 MB.
        assert!((3_500_000..3_700_000).contains(&c.bulk_min_to_device), "{}", c.bulk_min_to_device);
        assert!((4_800_000..5_000_000).contains(&c.bulk_min_to_host), "{}", c.bulk_min_to_host);
        assert_eq!(c.queue_for(true, 4 << 20), QueueKind::Compute);
        assert_eq!(c.queue_for(true, 1 << 20), QueueKind::Copy);
        assert_eq!(c.queue_for(false, 1 << 30), QueueKind::Compute);
        let ch = Choice::new(c);
        for (dir, n) in
            [(Dir::ToDevice, 4096), (Dir::ToHost, 4096), (Dir::ToDevice, 1 << 30), (Dir::ToHost, 1 << 30), (Dir::ToHost, 3 << 20)]
        {
            assert_eq!(ch.pick(dir, n), c.queue_for(dir == Dir::ToDevice, n));
        }
    }

    #[test]
    fn within_the_margin_the_copy_engines_stay() {
        let c = CopyQueues::from_figures(f(50.0, 50.0, 10.0, 10.0), f(50.4, 50.4, 9.95, 9.95));
        assert_eq!(c, CopyQueues { measured: c.measured, ..CopyQueues::fixed(QueueKind::Copy) });
        // Compute both quicker and faster: every class there, no crossover.
        let c = CopyQueues::from_figures(f(50.0, 50.0, 10.0, 10.0), f(52.0, 52.0, 9.0, 9.0));
        assert_eq!(c, CopyQueues { measured: c.measured, ..CopyQueues::fixed(QueueKind::Compute) });
        let c = CopyQueues::from_figures(f(50.0, 50.0, 10.0, 10.0), f(49.0, 51.0, 11.0, 9.0));
        assert_eq!((c.bulk_to_device, c.bulk_to_host), (QueueKind::Copy, QueueKind::Compute));
        assert_eq!((c.small_to_device, c.small_to_host), (QueueKind::Copy, QueueKind::Compute));
    }

    /// The H100's process that kept bulk d2h on the copy engines (2026-12-05, probe of 32 MiB):
    /// 50.3 GB/s and 13.9 us against 50.5 GB/s and 16.0 us, latency inside both. Bandwidth as
    /// the slope between the two sizes takes the latency out once; the plain ratio counted
    /// the compute queue's higher latency against its bandwidth too.
    #[test]
    fn bulk_bandwidth_is_the_slope_between_the_probe_sizes() {
        let (lc, lk) = (13.9e-6, 16.0e-6);
        let at = |gbps: f64, lat: f64| lat + (PROBE_BULK - PROBE_SMALL) as f64 / (gbps * 1e9);
        let (c, k) = (slope_gbps(PROBE_BULK, at(51.0, lc), lc), slope_gbps(PROBE_BULK, at(51.6, lk), lk));
        assert!((c - 51.0).abs() < 1e-9 && (k - 51.6).abs() < 1e-9, "{c} {k}");
        let plain = |t: f64| PROBE_BULK as f64 / t / 1e9;
        assert!(plain(at(51.6, lk)) / plain(at(51.0, lc)) < k / c, "the plain ratio narrows the gap");
        // A zero or negative difference falls back to the plain ratio, never a negative rate.
        assert_eq!(slope_gbps(PROBE_BULK, 1e-3, 2e-3), PROBE_BULK as f64 / 1e-3 / 1e9);
        assert_eq!(slope_gbps(PROBE_BULK, 1e-3, f64::INFINITY), PROBE_BULK as f64 / 1e-3 / 1e9);
    }
}
