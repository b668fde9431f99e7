//! The Vulkan side: opening devices, their queues, object creation and teardown.
//!
//! A [`Device`] is a cheap handle (`Arc`) on shared state. Everything that needs the Vulkan
//! objects takes a read lock on `Shared::live` for the whole operation; [`Device::destroy`]
//! takes the write lock, so it waits for operations in flight and then tears down in reverse
//! order: host imports and pinned blocks (the registry hook), device buffers, copy contexts,
//! the VkDevice, the messenger, the VkInstance. After that `live` is `None` and every
//! operation answers `Error::DeviceDestroyed`. With the lock released, it waits (at most 5 s)
//! for the validation log thread to log the messages still queued (`instance::LogPump`).
//!
//! Lock order, always: `live` → pipeline cache → stream state → registry → a tracker → a copy
//! context → a queue (docs/DESIGN.md has the leaves and the exceptions).
//!
//! Driver notes:
//! - lavapipe accepts any host pointer for import and crashes later, so `host::register`
//!   validates ranges against /proc/self/maps before anything reaches the driver.
//! - Waiting with vkWaitForFences sleeps (about 31 µs for an empty submit on the H200);
//!   [`submit::wait_timeline`] polls the context's timeline semaphore first (for about the
//!   transfer's time), then blocks; devices without timeline semaphores wait on fences.

pub(crate) mod import;
pub(crate) mod info;
pub(crate) mod instance;
pub(crate) mod object;
pub(crate) mod pipeline;
pub(crate) mod queues;
pub(crate) mod submit;
#[cfg(test)]
pub(crate) mod testing;

use crate::error::{Error, Result, VkResultExt};
use crate::fault::{self, Point};
use crate::memtype::{self, Choice};
use ash::vk;
use info::DeviceInfo;
use instance::{InstanceParts, LogPump, ValidationCounts};
pub use pipeline::DescriptorMode;
use queues::{CopyFloor, CopyQueues};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};

/// The usage of every buffer vkhost makes over memory (device buffers, pinned blocks, imports):
/// copies both ways and storage bindings for kernels.
pub(crate) const BUFFER_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw()
        | vk::BufferUsageFlags::STORAGE_BUFFER.as_raw(),
);

/// Locks a mutex, ignoring poisoning: every structure behind our mutexes stays consistent
/// across a panic in user code (we never hold a lock while calling user code).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
thread_local! {
    /// A test's clock for [`now_ns`] on this thread (`None`: the real one).
    pub(crate) static FAKE_NOW: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Nanoseconds since this process first asked, plus one (0 stays "never"): the clock of the
/// copy heuristics (`queues::BOTH_WAYS_RECENT`, `BarAssist::Bidir`'s recent reads). A test may
/// set it for its own thread ([`FAKE_NOW`]).
pub(crate) fn now_ns() -> u64 {
    #[cfg(test)]
    if let Ok(Some(t)) = FAKE_NOW.try_with(|c| c.get()) {
        return t;
    }
    static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    T0.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64 + 1
}

/// The fork generation of this process: "was this object created before this process was
/// forked" is one atomic load, cheap enough for every operation (kept with the memcpy pool,
/// the lowest layer that needs it).
pub(crate) use crate::par::fork_generation;

/// A process-unique device id, never reused, even after the device is destroyed.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let a = vkhost::Device::open_default()?;
/// let b = vkhost::Device::open_default()?;
/// assert_ne!(a.id(), b.id()); // two opens, two devices
/// assert_eq!(a.clone().id(), a.id()); // handles of one device share it
/// println!("{}", a.id()); // "device#N"
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(u64);

impl DeviceId {
    fn next() -> DeviceId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        DeviceId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The number behind the id.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// assert_eq!(dev.id().to_string(), format!("device#{}", dev.id().get()));
    /// # Ok(()) }
    /// ```
    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "device#{}", self.0)
    }
}

/// Whether `host::register` may import host memory on this device.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::{Device, Error, ImportPolicy, OpenOptions};
///
/// let dev = Device::open_default_with(&OpenOptions { import: ImportPolicy::Never, ..Default::default() })?;
/// assert!(dev.host_registration().is_err());
/// let mut mine = vec![0u8; 4096];
/// assert!(matches!(dev.register(&mut mine), Err(Error::Unsupported { .. })));
/// // Copies from pageable memory still work: they stage.
/// dev.alloc_buffer(4096)?.write(0, &mine)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ImportPolicy {
    /// Import when the device offers VK_EXT_external_memory_host (the default).
    #[default]
    Auto,
    /// Never import: `register` is `Unsupported` and copies stage. `VKHOST_IMPORT=never`.
    Never,
}

/// Which queue a stream (or the synchronous copies) submit to.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::{CopyQueues, Device, OpenOptions, QueueKind};
///
/// // Every synchronous copy on the compute queue; a stream there too.
/// let dev = Device::open_default_with(&OpenOptions { copy_queue: QueueKind::Compute, ..Default::default() })?;
/// assert_eq!(dev.copy_queues(), CopyQueues::fixed(QueueKind::Compute));
/// let stream = dev.stream_on(QueueKind::Compute)?;
/// assert_eq!(stream.queue()?.0, dev.raw()?.compute_family);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueKind {
    /// The copy engines (transfer-only family) where the device has them, else the compute queue.
    #[default]
    Copy,
    /// The compute-capable queue.
    Compute,
}

/// Whether small synchronous writes to device buffers are CPU stores into mapped device memory
/// ([`OpenOptions::bar_writes`]).
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::{BarWrites, Device, OpenOptions};
///
/// // Every write a submitted copy, whatever the device.
/// let dev = Device::open_default_with(&OpenOptions { bar_writes: BarWrites::Off, ..Default::default() })?;
/// assert_eq!(dev.options().bar_writes, BarWrites::Off);
/// let buf = dev.alloc_buffer(4096)?;
/// buf.write(0, &[5; 64])?;
/// let mut out = [0u8; 64];
/// buf.read(0, &mut out)?;
/// assert_eq!(out, [5; 64]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BarWrites {
    /// On a discrete GPU whose mapped VRAM type spans its VRAM (a full BAR, as on the H200):
    /// device buffers live in that type, mapped, and [`DeviceBuffer::write`](crate::DeviceBuffer::write)
    /// of at most [`OpenOptions::bar_write_max`] bytes is CPU stores into the mapping instead of
    /// a submitted copy (0.5-0.7 µs for 4 KiB on the H200, where a copy takes 12-14 µs; above
    /// [`OpenOptions::BAR_SOLO_MAX`] only while the staging threads poll, see there). Elsewhere, off.
    #[default]
    Auto,
    /// Wherever a DEVICE_LOCAL|HOST_VISIBLE|HOST_COHERENT type exists (UMA and CPU devices too;
    /// on a discrete GPU with a full BAR, the full BAR's type, never a small window listed
    /// before it: [`memtype::full_bar_types`]).
    On,
    /// Never: device buffers in VRAM that is not host-visible, every write a submitted copy.
    Off,
}

/// When a large [`DeviceBuffer::write`](crate::DeviceBuffer::write) into mapped device memory
/// is shared between the copy engine and CPU stores ([`OpenOptions::bar_assist`]).
///
/// Measured on the H200 (docs/PERFORMANCE.md, 2026-12-02): beside a copy-engine read on another
/// thread, a 256 MiB-1 GiB write shared with 3-4 store threads moved 59-64 GB/s in sum in some
/// processes, where two copy-engine copies give 57-58 and the library's synchronous write and
/// read on two threads 52; but a write alone moved 40-44 GB/s shared against 49-51 by the copy
/// engine alone. (Shared rounds beside reads that fell to 4-9 GB/s in some processes were the
/// write's copy-engine chunks sharing the compute queue with the read: they now run on a copy
/// engine where the device has one and `copy_queue` is `Copy`, and the full sweep gave 60.1 /
/// 60.4 GB/s at 256 MiB / 1 GiB.) Since a write alone loses a fifth there, it is not shared
/// by default on such a host.
///
/// The exception is a host whose GPU reads host memory slowly, and there the default,
/// [`Auto`](Self::Auto), shares every large write. On H100 hosts of 2026-12-05/06
/// (docs/PERFORMANCE.md) the copy engine read host memory at 32-35 GB/s and wrote it at 51-52
/// (CUDA's own copy kernel over mapped memory read at 34 too; `cudaMemcpy` 55). There a shared
/// write alone moved more than the copy engine at every size, in three records on three
/// hosts: 4 MiB 33.3-34.5 GB/s against 29.5-32.5, 16 MiB 36.7-38.2 against 33.2-33.5, 64 MiB
/// 40.4-41.1 against 34.2-34.4, 256 MiB 42.4-42.9 against 34.2-34.8 (1.25x), 1 GiB 36.2-36.7
/// against 34.3-34.5 (unsteady, 34.5-45.5). `Auto` itself, on such a host (2026-12-06, copy
/// engine 32.3 GB/s reading host memory and 51.0 writing it), found the slow reads, shared as
/// `Always` does (0.98-1.02x of it from 16 MiB) and moved 1.20-1.35x the copy engine alone from
/// 16 MiB to 1 GiB in three rounds (1 GiB 43.5-45.3 GB/s against 33.6-34.1). `vkhost devices`
/// prints the rates measured at open, and
/// [`CopyQueues::reads_host_slowly`](crate::CopyQueues::reads_host_slowly) says which case
/// `Auto` found.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::{BarAssist, BarWrites, Device, OpenOptions};
///
/// // Share every large write (here lavapipe's memory is mapped because of `BarWrites::On`).
/// let dev = Device::open_default_with(&OpenOptions { bar_writes: BarWrites::On, bar_assist: BarAssist::Always, ..Default::default() })?;
/// let n = 2 * OpenOptions::ASSIST_MIN;
/// let buf = dev.alloc_buffer(n)?;
/// let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
/// buf.write(0, &data)?;
/// let mut back = vec![0u8; n];
/// buf.read(0, &mut back)?;
/// assert_eq!(back, data);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BarAssist {
    /// Never share: large writes are the copy engine's.
    Off,
    /// Share a write while a synchronous device-to-host copy runs on the same device, or ended
    /// on another thread less than [`OpenOptions::ASSIST_RECENT`] ago (a loop of reads on
    /// another thread). A write that starts with no such read is the copy engine's alone, as
    /// with `Off` (so a thread that reads, then writes, gets no sharing from its own read); a
    /// shared write whose reads stop hands the rest of its range to the copy engine.
    /// Device-to-host copies of streams are not counted.
    Bidir,
    /// Share every write of at least [`OpenOptions::ASSIST_MIN`] bytes.
    Always,
    /// `Always` where the copy queues measured at open (or by
    /// [`Device::measure_copy_queues`](crate::Device::measure_copy_queues) since: the choice in
    /// use) read host memory below [`CopyQueues::SLOW_READS`](crate::CopyQueues::SLOW_READS) of
    /// the rate they write it ([`CopyQueues::reads_host_slowly`](crate::CopyQueues::reads_host_slowly)),
    /// else `Off` (also where nothing was measured). The default.
    #[default]
    Auto,
}

/// Options for [`Device::open_with`].
///
/// [`Device::open_with`] and [`Device::from_raw`] refuse options that fail
/// [`OpenOptions::validate`] with `Error::InvalidArgument`, before any Vulkan object is created.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::{Device, OpenOptions};
///
/// let opts = OpenOptions {
///     staging_chunk: 1 << 20, // 1 MiB chunks
///     staging_slots: 2,
///     max_pipelines: 16,
///     ..Default::default()     // the rest from the environment (VKHOST_*) or the defaults
/// };
/// let dev = Device::open_default_with(&opts)?;
/// assert_eq!(dev.options().staging_chunk, 1 << 20);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Import policy. Default: `VKHOST_IMPORT=never` (or `off`, `0`) → `Never`, else `Auto`.
    pub import: ImportPolicy,
    /// Enable the Khronos validation layer. Default: `VKHOST_VALIDATION=1` (or `true`, `on`).
    /// Its messages are counted ([`Device::validation_errors`]) and logged under the target
    /// `vkhost::validation`, on a thread named `vkhost-validation-log`, never inside the
    /// layer's callback: a logger may call vkhost. The call that tears the device down
    /// ([`Device::destroy`], or the last handle's drop), once it released the device, waits
    /// until they were logged: at most 5 s (a logger that blocks longer goes on logging after
    /// it), and not at all on that thread (a logger that tore the device down). A concurrent
    /// second `destroy` does not wait for it.
    pub validation: bool,
    /// Bytes per staging chunk for staged copies (default 16 MiB). At least
    /// [`STAGING_CHUNK_MIN`](Self::STAGING_CHUNK_MIN) (4 KiB) and a multiple of it.
    /// `VKHOST_STAGING_CHUNK=N` (bytes) sets it.
    pub staging_chunk: usize,
    /// Threads that memcpy through staging (pageable copies), each part at least 256 KiB, and
    /// that split CPU stores of 128 KiB and more into mapped device memory (see `bar_write_max`
    /// and [`BAR_SOLO_MAX`](Self::BAR_SOLO_MAX): at most 8 of them, in 64 KiB parts, where
    /// they poll for work; on CPU drivers where they never do, from 512 KiB in 256 KiB parts):
    /// the calling thread plus
    /// pool workers. Default: the machine's cores less two (all of
    /// them up to 4 cores), at most 16: on the H200's 16 cores, 14 threads kept the medians and,
    /// in three of four processes, cut 16 MiB copies' spread from 34-57% to 2-7%
    /// (`VKHOST_STAGING_THREADS` overrides). In 1..=64.
    pub staging_threads: usize,
    /// How long a staging thread polls for the next piece of work before it sleeps, after it
    /// copied a part of a staged copy. A staged copy runs in batches microseconds apart, and
    /// copies often come back to back, while a sleeping thread can take tens of microseconds to
    /// wake (longer on a busy or virtualized machine); polling keeps them at hand, for CPU time.
    /// The calling thread, done with its own parts, polls as long for the others to finish
    /// before it sleeps. Mid-size writes into mapped device memory split only onto threads that
    /// poll, and wake them when they find them asleep ([`BAR_SOLO_MAX`](Self::BAR_SOLO_MAX)).
    /// `None` (the default): 1 ms on GPUs, none on CPU drivers (their copies run on the cores a
    /// polling thread would take). On the H200, 1 ms against none: pageable 4-16 MiB 20-110%
    /// faster, 64 MiB-1 GiB 0-5%, for ~40% more CPU time over a whole bench run
    /// (docs/PERFORMANCE.md). At most 100 ms. `VKHOST_STAGING_SPIN_US=N` sets N microseconds.
    pub staging_spin: Option<std::time::Duration>,
    /// Pinned blocks of at least this many bytes are vkhost's own anonymous memory, 2 MiB
    /// aligned, advised `MADV_HUGEPAGE` and faulted in, then imported (VK_EXT_external_memory_host)
    /// instead of allocated by the driver: the kernel backs them with huge pages where it can,
    /// and the device maps them with large pages. Only where the import gets the memory type a
    /// driver-allocated block would (the pinned ranking); the same registry entry, `find` and
    /// copies; `free_pinned` (or the device's teardown) releases the import, then unmaps. Where
    /// imports are unavailable or refuse, the driver allocates the block. Blocks larger than
    /// one allocation are always made this way (see [`max_import_piece`](Self::max_import_piece)).
    /// Once a device refuses such an import in a way that recurs (another memory type, or the
    /// driver refusing the pointer), its later blocks below that size go to the driver at once.
    /// A `fork()` copies such a block's pages into the child (Linux copies pinned anonymous
    /// memory rather than share it), which costs time and memory in a process that forks.
    ///
    /// `None` (the default) and `Some(usize::MAX)`: never, every block that fits one allocation
    /// is the driver's, as the seed's `allocate_pinned` says ("no host memory crosses to the
    /// driver"). Opt in where allocation time matters and the process does not fork (above):
    /// [`PINNED_HUGE_MIN`](Self::PINNED_HUGE_MIN) on the H200, against driver blocks in
    /// alternated processes: `alloc_pinned` 1 GiB 185-280 ms against 253-304, 256 MiB 41-59
    /// against 57-82, `free_pinned` plus its release of 1 GiB 36-43 ms against 53-76, copies the
    /// same (docs/PERFORMANCE.md). `VKHOST_PINNED_HUGE_MIN=N` (bytes; `off`) sets it.
    pub pinned_huge_min: Option<usize>,
    /// Bytes of freed pinned driver blocks a device keeps for reuse. A block that
    /// [`free_pinned`](crate::host::free_pinned) or a [`PinnedBuffer`](crate::PinnedBuffer)'s
    /// drop let go of (once the last work naming it was reaped, as for any release) is kept
    /// instead of freed, and the next block of exactly its size is that block again: no
    /// vkAllocateMemory, vkBindBufferMemory or vkMapMemory, as `cudaHostAlloc` and PyTorch's
    /// caching host allocator reuse freed pinned memory. A reused block holds what its last
    /// user wrote. Oldest blocks go first (to the background releaser) when the sum (each
    /// block counted in whole 4 KiB pages) would pass this, or past 1024 blocks (each is a
    /// VkDeviceMemory, and Vulkan promises only 4096 at once); a block larger than it, counted in
    /// whole 4 KiB pages, is never kept. Any vkAllocateMemory of the device (a pinned block, a
    /// device or staging buffer, an import of a registration or of huge-page memory) that fails
    /// for lack of memory or of allocations frees what is kept and tries once more. Only driver
    /// blocks are kept: blocks of vkhost's own huge-page memory
    /// ([`pinned_huge_min`](Self::pinned_huge_min)) are released as before. [`Device::trim_pinned_cache`] frees what is kept;
    /// [`Device::release_queued`], [`Device::live_objects`] and teardown do too.
    /// [`Device::pinned_cache`] tells what it holds and reused.
    ///
    /// `None` (the default): [`PINNED_CACHE`](Self::PINNED_CACHE) (64 MiB) on GPUs, where a
    /// driver block costs 50-250 us to allocate at 4 KiB-1 MiB on the H200 and 0.2-0.4 ms to
    /// free; none on CPU drivers, whose allocation is a `malloc`. `Some(0)` keeps nothing.
    /// `VKHOST_PINNED_CACHE=N` (bytes; `off`) sets it.
    pub pinned_cache: Option<usize>,
    /// Staging chunks in flight per copy context and per stream (default 3). In
    /// [`STAGING_SLOTS`](Self::STAGING_SLOTS) (2..=16); `staging_chunk × staging_slots` (one
    /// staging buffer) must fit the device's maxMemoryAllocationSize. `VKHOST_STAGING_SLOTS=N`
    /// sets it.
    pub staging_slots: usize,
    /// The queue synchronous copies use: `Copy` (default) lets vkhost choose between the copy
    /// engines and the compute queue by measurement (see `measure_copy_queues`; bulk copies
    /// running both ways at once take the copy engines, see [`Device::copy_queues`]); `Compute`
    /// sends every synchronous copy to the compute queue. `VKHOST_COPY_QUEUE=compute` sets
    /// `Compute`.
    pub copy_queue: QueueKind,
    /// With `copy_queue: Copy`, measure at open which queue is faster for each direction and
    /// size class ([`CopyQueues`]; about 30 ms, once per physical device and process) on devices
    /// that have copy engines. `false` keeps every synchronous copy on the copy engines. Default
    /// true; `VKHOST_COPY_QUEUE=copy` sets false.
    pub measure_copy_queues: bool,
    /// CPU stores for small synchronous writes ([`BarWrites`]). Default `Auto`;
    /// `VKHOST_BAR_WRITES=on|off|auto` sets it.
    pub bar_writes: BarWrites,
    /// The largest [`DeviceBuffer::write`](crate::DeviceBuffer::write) done by CPU stores when
    /// `bar_writes` applies (default 1 MiB). 0 turns the stores off while keeping device
    /// buffers mapped. `VKHOST_BAR_WRITE_MAX` sets it. Up to
    /// [`BAR_SOLO_MAX`](Self::BAR_SOLO_MAX) (256 KiB) a write is always stores; above it, only
    /// where the staging threads poll for work at the time (see there), else a submitted copy
    /// (on CPU drivers without polling: always stores).
    /// On an H100 (full BAR, docs/PERFORMANCE.md, thirtieth session) back-to-back writes from
    /// pinned memory took 9.4 / 20.1 / 34.3 us at 256 KiB / 512 KiB / 1 MiB against 19.6 /
    /// 34.5 / 51.2 for a submitted copy in the same process (`examples/bar_cost.rs`), and
    /// `vkhost bench`'s `host_to_device_bar+write` rows gave 1.61-1.63x / 1.09-1.12x / 0.89x
    /// CUDA's pinned copy of the same size (the copy engine 0.82-0.84x / 0.80-0.83x /
    /// 0.85-0.89x); a write after the threads parked is a copy plus 1-8 us. From ~1.5 MiB the
    /// copy engine (~50 GB/s) is faster than the stores (~33).
    ///
    /// Raised further, writes are stores split over up to 8 staging threads (30-34 GB/s into
    /// the H200's BAR from 4-16 threads, against ~50 for a copy). Beside a copy engine's
    /// device-to-host copy they did not beat a second copy-engine copy there: 46-50 GB/s both
    /// ways together against 57-61 (`vkhost bench -t bidir_ce,bidir_bar`, docs/PERFORMANCE.md);
    /// measure it on your device before raising it for that. [`bar_assist`](Self::bar_assist)
    /// is the other way: stores beside the copy engine within one large write.
    pub bar_write_max: usize,
    /// Share a [`DeviceBuffer::write`](crate::DeviceBuffer::write) larger than `bar_write_max`
    /// (and of at least [`ASSIST_MIN`](Self::ASSIST_MIN)) into mapped device memory between the
    /// copy engine and CPU stores ([`BarAssist`]): the copy engine takes chunks from the back of
    /// the range, [`assist_threads`](Self::assist_threads) threads store chunks from the front,
    /// until they meet, so each side does what its speed allows. Where stores reach the device
    /// over a path the copy engine leaves idle (the H200's BAR beside a copy in the other
    /// direction, or a host whose GPU reads host memory slowly), a write can move faster than
    /// the copy engine alone. Default [`BarAssist::Auto`] (see there for why);
    /// `VKHOST_BAR_ASSIST=auto`, `bidir`, `1|on|always`, `0|off` set it. Needs mapped device
    /// buffers (`bar_writes`) and `bar_write_max > 0`.
    pub bar_assist: BarAssist,
    /// Threads that store a shared write's front ([`bar_assist`](Self::bar_assist)); default 3,
    /// in 1..=64. On the H200, beside a copy-engine read: 3 threads 59-64 GB/s in sum, 7 threads
    /// 58, 15 threads 56-57 (more stores take more of the write from the faster engine).
    /// `VKHOST_ASSIST_THREADS` sets it.
    pub assist_threads: usize,
    /// The largest single import or pinned allocation, in bytes. A registration or pinned block
    /// larger than this becomes several imports behind one entry (see [`crate::host`]). `None`
    /// (the default): the device's maxMemoryAllocationSize. `Some(n)`: `n` must be a multiple of
    /// the page size (4 KiB), at least one page, and at most the device's limit; mainly for
    /// testing large ranges with small memory. `VKHOST_IMPORT_PIECE=N` sets it.
    pub max_import_piece: Option<usize>,
    /// Use VK_KHR_push_descriptor for kernel launches where the driver offers it (default
    /// true). `false` opens the device without the extension, so launches write descriptor sets
    /// from per-stream pools instead ([`DescriptorMode::Sets`](crate::kernel::DescriptorMode),
    /// the mode of drivers without the extension and of [`Device::from_raw`]): for testing
    /// that path, or to leave the extension off. `VKHOST_PUSH_DESCRIPTORS=0` sets false.
    pub push_descriptors: bool,
    /// The most compute pipelines a device caches (default 256, at least 1): a launch of a
    /// kernel not in the cache creates its pipeline and evicts the least recently launched one.
    /// Eviction never destroys a pipeline that submitted work still uses (see
    /// [`crate::kernel`]). `VKHOST_MAX_PIPELINES=N` sets it.
    pub max_pipelines: usize,
    /// The smallest device-to-device [`Stream::copy_async`](crate::Stream::copy_async) that runs
    /// the built-in copy kernel instead of one vkCmdCopyBuffer, on a stream whose queue family
    /// can run kernels (every [`QueueKind::Compute`] stream, and copy streams on a device without
    /// a transfer-only family; a copy engine's stream always copies with vkCmdCopyBuffer), when
    /// both offsets and the length are multiples of 4. On the H200 the
    /// kernel moved 1.9 TB/s at 1 GiB where vkCmdCopyBuffer did 0.41 TB/s on the compute queue
    /// and 0.09 on a copy queue, and both were equal at 1 MiB (docs/PERFORMANCE.md). `None`
    /// (the default): [`D2D_KERNEL_MIN`](Self::D2D_KERNEL_MIN) on GPUs, never on CPU devices
    /// (lavapipe's vkCmdCopyBuffer is a memcpy, ten times its kernel). `Some(usize::MAX)`:
    /// never; `Some(0)`: every such copy, on CPU devices too. `VKHOST_D2D_KERNEL_MIN=N` (bytes,
    /// `0` included) or `=off`/`never` sets it. The first such copy on a device creates the
    /// kernel's pipeline (counted in [`LiveObjects::pipelines`], and held in the pipeline cache
    /// as a kernel's is); where the kernel cannot run, the copy is a vkCmdCopyBuffer.
    pub d2d_kernel_min: Option<usize>,
    /// The fewest small direct copies (each at most [`GATHER_REGION_MAX`](Self::GATHER_REGION_MAX))
    /// that a stream moves through its device scratch buffer when they go between the same
    /// pinned block or registration and the same device buffer, back to back, and their host
    /// bytes form one unbroken range: an upload copies that range into the scratch buffer in one
    /// region and scatters it from there by device-to-device regions, a download gathers into the
    /// scratch buffer and copies the range out in one region ([`HostStats::gathered_bytes`]
    /// counts them). On the H200 a copy region that reads or writes host memory cost ~3.3 us
    /// and one between device buffers ~1.85 us (issue 10), so many small scattered copies of one
    /// dense host range finish sooner. `None` (the default): 32 on GPUs, never on CPU devices
    /// (lavapipe's copies are memcpys: the detour is one more). `Some(usize::MAX)`: never;
    /// values below 2 act as 2, and values above [`GATHER_REGIONS_MAX`](Self::GATHER_REGIONS_MAX)
    /// (64) but for `usize::MAX` are refused at open (no run is that long). A run whose
    /// contiguous copies merged into a region larger than `GATHER_REGION_MAX` goes direct. The
    /// scratch buffer ([`GATHER_SCRATCH`](Self::GATHER_SCRATCH) bytes of device memory) is made
    /// by a stream's first run that gathers and kept until the stream goes; where it cannot be
    /// made, the copies go direct. On the H200, 1000 async 4 KiB uploads from one pinned block
    /// to scattered device offsets took 2.27-2.39 ms gathered against 3.12-3.14 direct (CUDA
    /// 4.3-4.6 in the same processes; docs/PERFORMANCE.md, twenty-ninth session).
    /// `VKHOST_GATHER_REGIONS=N|off` sets it.
    ///
    /// [`HostStats::gathered_bytes`]: crate::host::HostStats::gathered_bytes
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Device, OpenOptions, PinnedBuffer};
    /// // Gather from 4 copies on, on lavapipe too.
    /// let dev = Device::open_default_with(&OpenOptions { gather_regions: Some(4), ..Default::default() })?;
    /// let k = 4096;
    /// let mut src = PinnedBuffer::new(&dev, 64 * k)?;
    /// for (i, b) in src.iter_mut().enumerate() { *b = (i / k) as u8; }
    /// let buf = dev.alloc_buffer(64 * k)?;
    /// let stream = dev.stream()?;
    /// // 64 consecutive host pieces to scattered device offsets, all enqueued before a wait.
    /// let pending = (0..64)
    ///     .map(|i| stream.upload_pinned(&src, i * k..(i + 1) * k, &buf, (i * 17 % 64) * k))
    ///     .collect::<vkhost::Result<Vec<_>>>()?;
    /// stream.synchronize()?;
    /// drop(pending);
    /// assert!(vkhost::host::device_stats(&dev).gathered_bytes > 0);
    /// let mut back = vec![0u8; k];
    /// buf.read(17 * k, &mut back)?;
    /// assert!(back.iter().all(|&b| b == 1));
    /// # Ok(()) }
    /// ```
    pub gather_regions: Option<usize>,
    /// Whether a stream that starts from idle (every batch it submitted known complete) submits
    /// its first 64 commands at once, instead of when its batch fills (512 commands or 4 MiB) or
    /// a wait comes: the device starts while the caller goes on enqueuing. Costs one submission
    /// more per start from idle. Default true; `VKHOST_EARLY_SUBMIT=0|off` sets false (to
    /// measure it, or to keep submissions fewest). On the H200 it changed 1000 small async
    /// copies by a few percent at most, within the spread of processes (docs/PERFORMANCE.md).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Device, OpenOptions, PinnedBuffer};
    /// let dev = Device::open_default_with(&OpenOptions { early_submit: false, ..Default::default() })?;
    /// let buf = dev.alloc_buffer(64 * 64)?;
    /// let src = PinnedBuffer::new(&dev, 64 * 64)?;
    /// let stream = dev.stream()?;
    /// for i in 0..64 {
    ///     // SAFETY: inside the block, unchanged until the synchronize below.
    ///     unsafe { stream.copy_to_device_async(src.as_ptr().add(i * 64), 64, &buf, (63 - i) * 64)? };
    /// }
    /// stream.synchronize()?; // the one submission of these 64 copies
    /// # Ok(()) }
    /// ```
    pub early_submit: bool,
    /// The largest region vkhost records in one `VkBufferCopy`: a larger copy is several
    /// regions of one command. It applies to direct copies between host memory (a pinned block
    /// or a registration) and a device buffer, synchronous or on a stream (and
    /// [`host::record_copy`](crate::host::record_copy), [`Device::copy_floor`]), and to stream
    /// copies between device buffers; copies through the staging buffers (pageable memory)
    /// keep their chunks whole. `None`: by device type,
    /// [`CPU_COPY_PIECE`](Self::CPU_COPY_PIECE) (256 KiB) on CPU devices, 1 GiB on every other
    /// type (a GPU's copy engine gains nothing from cutting; 1 GiB is the largest region vkhost
    /// ever records, below lavapipe's 2 GiB bug). `Some(n)`: `n` bytes, a multiple of 4 KiB
    /// from 4 KiB to 1 GiB (checked at open). `VKHOST_COPY_PIECE=N` sets it. Each cut region
    /// is 24 bytes of the command: small pieces make large copies long commands.
    ///
    /// Why: on a CPU device (lavapipe) a region is one `memcpy` on the driver's queue thread.
    /// On the 2-core EPYC machine this was measured on, 16-256 MiB copies done as 256 KiB
    /// regions ran 7-33% faster than as one region (medians of interleaved `vkhost bench`
    /// processes: pinned, registered and device-to-device; docs/PERFORMANCE.md; a plain C loop
    /// of 256 KiB `memcpy`s against one 16 MiB `memcpy`: 44 against 35 GB/s). Cutting the
    /// staging chunks measured no faster.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Device, OpenOptions, PinnedBuffer};
    /// // Direct copies in 64 KiB regions, on any device.
    /// let dev = Device::open_default_with(&OpenOptions { copy_piece: Some(64 << 10), ..Default::default() })?;
    /// let mut src = PinnedBuffer::new(&dev, 1 << 20)?;
    /// for (i, b) in src.iter_mut().enumerate() { *b = (i % 251) as u8; }
    /// let buf = dev.alloc_buffer(1 << 20)?;
    /// buf.write(0, &src)?;
    /// let mut back = vec![0u8; 1 << 20];
    /// buf.read(0, &mut back)?;
    /// assert!(back == &src[..]);
    /// # Ok(()) }
    /// ```
    pub copy_piece: Option<usize>,
}

impl OpenOptions {
    /// The default [`d2d_kernel_min`](Self::d2d_kernel_min) on GPUs: 2 MiB.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{OpenOptions, QueueKind};
    /// // Every device-to-device copy_async of a compute stream by the copy kernel, from 4 KiB.
    /// let dev = vkhost::Device::open_default_with(&OpenOptions { d2d_kernel_min: Some(4096), ..Default::default() })?;
    /// let (a, b) = (dev.alloc_buffer(1 << 20)?, dev.alloc_buffer(1 << 20)?);
    /// a.write(0, &[7; 1 << 20])?;
    /// let stream = dev.stream_on(QueueKind::Compute)?;
    /// stream.copy_async(&a, 0, &b, 0, 1 << 20)?;
    /// stream.synchronize()?;
    /// assert_eq!(dev.live_objects().pipelines, 1, "the copy kernel's pipeline, made by its first copy");
    /// assert!(OpenOptions::D2D_KERNEL_MIN > 1 << 20, "at 1 MiB vkCmdCopyBuffer was as fast (H200)");
    /// # Ok(()) }
    /// ```
    pub const D2D_KERNEL_MIN: usize = 2 << 20;

    /// The default [`copy_piece`](Self::copy_piece) on CPU devices: 256 KiB.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::OpenOptions;
    /// // The default leaves the choice to the device type; this sets the CPU devices' value anywhere.
    /// let opts = OpenOptions { copy_piece: Some(OpenOptions::CPU_COPY_PIECE), ..Default::default() };
    /// assert_eq!(opts.copy_piece, Some(256 << 10));
    /// ```
    pub const CPU_COPY_PIECE: usize = 256 << 10;

    /// The default [`gather_regions`](Self::gather_regions) on GPUs: 32 copies.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::OpenOptions;
    /// // The default leaves the choice to the device type; this sets the GPUs' value anywhere.
    /// let opts = OpenOptions { gather_regions: Some(OpenOptions::GATHER_REGIONS), ..Default::default() };
    /// assert_eq!(opts.gather_regions, Some(32));
    /// ```
    pub const GATHER_REGIONS: usize = 32;
    /// The largest [`gather_regions`](Self::gather_regions) but `usize::MAX` (never): a
    /// stream's conflict tracking puts a barrier, which ends a run of copies, after 64 copies.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::OpenOptions;
    /// let info = &vkhost::devices()?[0];
    /// for (n, ok) in [(2, true), (OpenOptions::GATHER_REGIONS_MAX, true), (65, false), (usize::MAX, true)] {
    ///     let opts = OpenOptions { gather_regions: Some(n), ..Default::default() };
    ///     assert_eq!(opts.validate(info).is_ok(), ok, "gather_regions {n}");
    /// }
    /// # Ok::<(), vkhost::Error>(())
    /// ```
    pub const GATHER_REGIONS_MAX: usize = 64;
    /// The largest copy [`gather_regions`](Self::gather_regions) moves through a stream's
    /// scratch buffer (64 KiB): larger regions are bandwidth-bound, and the detour would only
    /// add a second pass over their bytes.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Device, OpenOptions, PinnedBuffer};
    /// let dev = Device::open_default_with(&OpenOptions { gather_regions: Some(2), ..Default::default() })?;
    /// let k = OpenOptions::GATHER_REGION_MAX as usize + 1;
    /// let src = PinnedBuffer::new(&dev, 4 * k)?;
    /// let buf = dev.alloc_buffer(4 * k)?;
    /// let stream = dev.stream()?;
    /// let pending = (0..4)
    ///     .map(|i| stream.upload_pinned(&src, i * k..(i + 1) * k, &buf, (3 - i) * k))
    ///     .collect::<vkhost::Result<Vec<_>>>()?;
    /// stream.synchronize()?;
    /// drop(pending);
    /// assert_eq!(vkhost::host::device_stats(&dev).gathered_bytes, 0, "pieces too large to gather");
    /// # Ok(()) }
    /// ```
    pub const GATHER_REGION_MAX: u64 = 64 << 10;
    /// The size of a stream's scratch buffer for [`gather_regions`](Self::gather_regions)
    /// (4 MiB of device memory): what one batch of the stream's copies can hold. A stream that
    /// gathers holds one buffer and one allocation more while it lives.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Device, OpenOptions, PinnedBuffer};
    /// let dev = Device::open_default_with(&OpenOptions { gather_regions: Some(2), ..Default::default() })?;
    /// let src = PinnedBuffer::new(&dev, 8192)?;
    /// let buf = dev.alloc_buffer(8192)?;
    /// let stream = dev.stream()?;
    /// let before = dev.live_objects().buffers;
    /// let up = [stream.upload_pinned(&src, 0..4096, &buf, 4096)?, stream.upload_pinned(&src, 4096..8192, &buf, 0)?];
    /// stream.synchronize()?;
    /// drop(up);
    /// assert_eq!(dev.live_objects().buffers, before + 1, "the scratch buffer, made by the first gathered run");
    /// drop(stream);
    /// assert_eq!(dev.live_objects().buffers, before, "released with the stream");
    /// assert!(OpenOptions::GATHER_SCRATCH >= 1000 * 4096);
    /// # Ok(()) }
    /// ```
    pub const GATHER_SCRATCH: u64 = 4 << 20;

    /// The smallest staging chunk, and the granule every chunk is a multiple of: one 4 KiB page.
    /// Smaller chunks would make the open-time import probe (one page through staging) and every
    /// staged copy overrun the staging buffer.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::OpenOptions;
    ///
    /// let info = &vkhost::devices()?[0];
    /// let opts = OpenOptions { staging_chunk: 64 * OpenOptions::STAGING_CHUNK_MIN, ..Default::default() };
    /// assert!(opts.validate(info).is_ok());
    /// let odd = OpenOptions { staging_chunk: OpenOptions::STAGING_CHUNK_MIN + 512, ..Default::default() };
    /// assert!(odd.validate(info).is_err());
    /// # Ok(()) }
    /// ```
    pub const STAGING_CHUNK_MIN: usize = 4096;
    /// The allowed staging slot counts. Streams need two (one chunk fills while the device copies
    /// the other); more than 16 only pins memory and command buffers without more overlap.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::OpenOptions;
    ///
    /// let info = &vkhost::devices()?[0];
    /// for slots in [1, 2, 16, 17] {
    ///     let opts = OpenOptions { staging_chunk: 1 << 20, staging_slots: slots, ..Default::default() };
    ///     assert_eq!(opts.validate(info).is_ok(), OpenOptions::STAGING_SLOTS.contains(&slots));
    /// }
    /// # Ok(()) }
    /// ```
    pub const STAGING_SLOTS: std::ops::RangeInclusive<usize> = 2..=16;
    /// The smallest write that [`bar_assist`](Self::bar_assist) shares between the copy engine
    /// and CPU stores (4 MiB): the copy engine takes chunks of at least 1 MiB, each a submitted
    /// copy (~12 us of submit and wait on the H200), so a smaller write is done by one side
    /// before the other has started.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{BarAssist, BarWrites, Device, OpenOptions};
    ///
    /// let dev = Device::open_default_with(&OpenOptions { bar_writes: BarWrites::On, bar_assist: BarAssist::Always, ..Default::default() })?;
    /// let n = 2 * OpenOptions::ASSIST_MIN;
    /// let buf = dev.alloc_buffer(n)?;
    /// let data: Vec<u8> = (0..n).map(|i| i as u8).collect();
    /// buf.write(0, &data)?; // stores and a copy, where the device has mapped memory
    /// let mut back = vec![0u8; n];
    /// buf.read(0, &mut back)?;
    /// assert_eq!(back, data);
    /// # Ok(()) }
    /// ```
    pub const ASSIST_MIN: usize = 4 << 20;
    /// How recently a device-to-host copy must have ended for [`BarAssist::Bidir`] to count
    /// the device as busy reading (10 ms). A thread that reads in a loop leaves gaps between its
    /// copies, and a read meant to run beside a write may start a little after it: such a write
    /// should still be shared. A write shared for nothing costs little: the copy engine takes
    /// the rest of it once this long has passed without a read.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::{BarAssist, OpenOptions};
    ///
    /// // A reader thread that pauses longer than this between its reads gets no sharing.
    /// assert_eq!(OpenOptions::ASSIST_RECENT, std::time::Duration::from_millis(10));
    /// let opts = OpenOptions { bar_assist: BarAssist::Bidir, ..Default::default() };
    /// assert!(opts.validate(&vkhost::devices()?[0]).is_ok());
    /// # Ok::<(), vkhost::Error>(())
    /// ```
    pub const ASSIST_RECENT: std::time::Duration = std::time::Duration::from_millis(10);
    /// A [`DeviceBuffer::write`](crate::DeviceBuffer::write) into mapped device memory of up
    /// to this size (256 KiB) is CPU stores even when the staging threads are parked: the
    /// calling thread alone, which still beats a submitted copy there (15-17 us against 20 at
    /// 256 KiB on the H200). Larger writes (up to `bar_write_max`) are stores split over the
    /// staging threads only where those poll for work (`staging_spin`, on GPUs) at the time
    /// of the write, up to [`BAR_PARKED_SPLIT_MIN`](Self::BAR_PARKED_SPLIT_MIN): a parked
    /// thread takes tens of microseconds to wake, as long as a 1 MiB write's stores on polling
    /// threads. Finding them parked, such a write is a submitted copy and wakes them to poll
    /// for the next one. Where no thread would poll (one staging thread, or a GPU opened with
    /// `staging_spin` 0) such a write is a submitted copy. On CPU drivers whose staging threads
    /// do not poll (their default) every write up to `bar_write_max` is stores, spread over the
    /// staging threads in 256 KiB parts (under 512 KiB, the caller's alone).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{BarWrites, Device, OpenOptions};
    ///
    /// let dev = Device::open_default_with(&OpenOptions { bar_writes: BarWrites::On, ..Default::default() })?;
    /// let buf = dev.alloc_buffer(OpenOptions::BAR_SOLO_MAX)?;
    /// let before = vkhost::host::device_stats(&dev).mapped_bytes;
    /// buf.write(0, &vec![7u8; OpenOptions::BAR_SOLO_MAX])?;
    /// // Stored by the CPU wherever the device has mapped device memory (lavapipe has).
    /// assert_eq!(vkhost::host::device_stats(&dev).mapped_bytes - before, OpenOptions::BAR_SOLO_MAX as u64);
    /// # Ok(()) }
    /// ```
    pub const BAR_SOLO_MAX: usize = 256 << 10;
    /// From this size (2 MiB) a [`DeviceBuffer::write`](crate::DeviceBuffer::write) of at most
    /// `bar_write_max` into mapped device memory is stores split over the staging threads even
    /// when they are parked: their wake-up is then a small part of the stores' time (60 us and
    /// more). See [`BAR_SOLO_MAX`](Self::BAR_SOLO_MAX) for the sizes between.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{BarWrites, Device, OpenOptions};
    ///
    /// let n = OpenOptions::BAR_PARKED_SPLIT_MIN;
    /// let opts = OpenOptions { bar_writes: BarWrites::On, bar_write_max: n, ..Default::default() };
    /// let dev = Device::open_default_with(&opts)?;
    /// let buf = dev.alloc_buffer(n)?;
    /// let before = vkhost::host::device_stats(&dev).mapped_bytes;
    /// buf.write(0, &vec![7u8; n])?;
    /// assert_eq!(vkhost::host::device_stats(&dev).mapped_bytes - before, n as u64);
    /// # Ok(()) }
    /// ```
    pub const BAR_PARKED_SPLIT_MIN: usize = 2 << 20;
    /// A [`pinned_huge_min`](Self::pinned_huge_min) to opt in with (2 MiB, one huge page: a
    /// smaller block cannot be a huge page). Off by default; see there for what it costs.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::OpenOptions;
    /// assert_eq!(OpenOptions::PINNED_HUGE_MIN, 2 << 20);
    /// // Every block of at least 4 MiB from huge pages, on any device that imports host memory.
    /// let opts = OpenOptions { pinned_huge_min: Some(4 << 20), ..Default::default() };
    /// let dev = vkhost::Device::open_default_with(&opts)?;
    /// let block = vkhost::PinnedBuffer::new(&dev, 4 << 20)?;
    /// assert_eq!(block.len(), 4 << 20);
    /// # Ok(()) }
    /// ```
    pub const PINNED_HUGE_MIN: usize = 2 << 20;
    /// The default [`pinned_cache`](Self::pinned_cache) on GPUs: 64 MiB of freed pinned
    /// driver blocks kept for reuse.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::OpenOptions;
    /// assert_eq!(OpenOptions::PINNED_CACHE, 64 << 20);
    /// // `None`: the default, whatever VKHOST_PINNED_CACHE says.
    /// let dev = vkhost::Device::open_default_with(&OpenOptions { pinned_cache: None, ..Default::default() })?;
    /// let gpu = dev.info().device_type != vkhost::DeviceType::Cpu;
    /// assert_eq!(dev.pinned_cache().cap, if gpu { OpenOptions::PINNED_CACHE as u64 } else { 0 });
    /// # Ok(()) }
    /// ```
    pub const PINNED_CACHE: usize = 64 << 20;
    /// The longest [`staging_spin`](Self::staging_spin) (100 ms).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use vkhost::OpenOptions;
    ///
    /// let info = &vkhost::devices()?[0];
    /// let ok = OpenOptions { staging_spin: Some(OpenOptions::STAGING_SPIN_MAX), ..Default::default() };
    /// assert!(ok.validate(info).is_ok());
    /// let long = OpenOptions { staging_spin: Some(Duration::from_secs(1)), ..Default::default() };
    /// assert!(long.validate(info).is_err());
    /// # Ok::<(), vkhost::Error>(())
    /// ```
    pub const STAGING_SPIN_MAX: std::time::Duration = std::time::Duration::from_millis(100);

    /// Checks the options against a device's facts: `staging_chunk` at least 4 KiB and a
    /// multiple of 4 KiB, `staging_slots` in 2..=16, `staging_threads` and `assist_threads` in
    /// 1..=64, `max_pipelines` at least 1, `staging_spin` at most
    /// [`STAGING_SPIN_MAX`](Self::STAGING_SPIN_MAX), `max_import_piece` (when set) a multiple of
    /// 4 KiB, at least 4 KiB and no more than `info.max_memory_allocation_size`, `copy_piece`
    /// (when set) a multiple of 4 KiB from 4 KiB to 1 GiB, `gather_regions` (when set) at most
    /// [`GATHER_REGIONS_MAX`](Self::GATHER_REGIONS_MAX) or `usize::MAX`, and
    /// `staging_chunk × staging_slots` (the size of one staging buffer) no more than
    /// `info.max_memory_allocation_size`. Any failure is
    /// `Error::InvalidArgument` naming the field. Called by [`Device::open_with`] and
    /// [`Device::from_raw`] before they create anything.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Error, OpenOptions};
    ///
    /// let info = &vkhost::devices()?[0];
    /// let bad = OpenOptions { staging_slots: 1, ..Default::default() };
    /// let err = bad.validate(info).unwrap_err();
    /// assert!(matches!(&err, Error::InvalidArgument { reason } if reason.contains("staging_slots")));
    /// // Opening refuses the same options before it creates anything.
    /// assert_eq!(vkhost::Device::open_with(info.index, &bad).unwrap_err(), err);
    /// # Ok(()) }
    /// ```
    pub fn validate(&self, info: &DeviceInfo) -> Result<()> {
        let (chunk, slots) = (self.staging_chunk, self.staging_slots);
        let min = Self::STAGING_CHUNK_MIN;
        if chunk < min || chunk % min != 0 {
            return Err(Error::invalid(format!(
                "OpenOptions::staging_chunk = {chunk}: it must be at least {min} bytes and a multiple of {min} (one page){}",
                env_hint(&["VKHOST_STAGING_CHUNK"])
            )));
        }
        if !(1..=crate::par::MAX_THREADS).contains(&self.staging_threads) {
            return Err(Error::invalid(format!(
                "OpenOptions::staging_threads = {}: it must be in 1..={}{}",
                self.staging_threads,
                crate::par::MAX_THREADS,
                env_hint(&["VKHOST_STAGING_THREADS"])
            )));
        }
        if !(1..=crate::par::MAX_THREADS).contains(&self.assist_threads) {
            return Err(Error::invalid(format!(
                "OpenOptions::assist_threads = {}: it must be in 1..={}{}",
                self.assist_threads,
                crate::par::MAX_THREADS,
                env_hint(&["VKHOST_ASSIST_THREADS"])
            )));
        }
        if let Some(n) = self.gather_regions.filter(|&n| n > Self::GATHER_REGIONS_MAX && n != usize::MAX) {
            return Err(Error::invalid(format!(
                "OpenOptions::gather_regions = Some({n}): a stream's run of copies holds at most {} (its conflict tracking puts a barrier after that many), so it would never gather; use Some(usize::MAX) for never{}",
                Self::GATHER_REGIONS_MAX,
                env_hint(&["VKHOST_GATHER_REGIONS"])
            )));
        }
        if let Some(p) = self.copy_piece.filter(|&p| p < min || p % min != 0 || p as u64 > crate::device::submit::COPY_REGION_MAX) {
            return Err(Error::invalid(format!(
                "OpenOptions::copy_piece = Some({p}): it must be a multiple of {min} (one page), at least one page, and at most {} (1 GiB){}",
                crate::device::submit::COPY_REGION_MAX,
                env_hint(&["VKHOST_COPY_PIECE"])
            )));
        }
        if self.max_pipelines == 0 {
            return Err(Error::invalid(format!(
                "OpenOptions::max_pipelines = 0: the pipeline cache holds at least one pipeline{}",
                env_hint(&["VKHOST_MAX_PIPELINES"])
            )));
        }
        if let Some(d) = self.staging_spin.filter(|&d| d > Self::STAGING_SPIN_MAX) {
            return Err(Error::invalid(format!(
                "OpenOptions::staging_spin = {d:?}: it must be at most {:?}{}",
                Self::STAGING_SPIN_MAX,
                env_hint(&["VKHOST_STAGING_SPIN_US"])
            )));
        }
        if !Self::STAGING_SLOTS.contains(&slots) {
            return Err(Error::invalid(format!(
                "OpenOptions::staging_slots = {slots}: it must be in {}..={}{}",
                Self::STAGING_SLOTS.start(),
                Self::STAGING_SLOTS.end(),
                env_hint(&["VKHOST_STAGING_SLOTS"])
            )));
        }
        let max = info.max_memory_allocation_size;
        if let Some(p) = self.max_import_piece {
            if p < min || p % min != 0 || p as u64 > max {
                return Err(Error::invalid(format!(
                    "OpenOptions::max_import_piece = {p}: it must be a multiple of {min} (one page), at least one page, and at \
                     most this device's maxMemoryAllocationSize ({max} bytes){}",
                    env_hint(&["VKHOST_IMPORT_PIECE"])
                )));
            }
        }
        match (chunk as u64).checked_mul(slots as u64) {
            Some(total) if total <= max => Ok(()),
            total => Err(Error::invalid(format!(
                "OpenOptions::staging_chunk × staging_slots = {chunk} × {slots} = {}: one staging buffer must fit this device's \
                 maxMemoryAllocationSize ({max} bytes){}",
                total.map_or_else(|| "more than 2^64".to_string(), |t| format!("{t} bytes")),
                env_hint(&["VKHOST_STAGING_CHUNK", "VKHOST_STAGING_SLOTS"])
            ))),
        }
    }
}

/// What the layer above runs on a device as it opens, once the device is made and before the
/// copy queues are measured and the lost check: the import probe (`host::probe::run`, given
/// by the public constructors in `open.rs`), so that the device layer names no host memory.
pub(crate) type AfterOpen = fn(&Device);

thread_local! {
    /// Set while this thread runs an import probe (see [`ProbeScope`]).
    static IN_PROBE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is running an import probe: its copies are not the user's traffic
/// (stats, the readers `BarAssist::Bidir` counts), and its `register` of the probe page does
/// not run the probe again. Here, below the copies that ask, rather than beside the probe.
pub(crate) fn in_probe() -> bool {
    IN_PROBE.with(|c| c.get())
}

/// Marks this thread as running an import probe until dropped. Cleared however the probe ends
/// (a panic out of a logger included); a leaked scope leaves the flag set, which is only
/// bookkeeping (stats, re-runs): nothing's soundness reads it.
pub(crate) struct ProbeScope(());

impl ProbeScope {
    pub(crate) fn enter() -> ProbeScope {
        IN_PROBE.with(|c| c.set(true));
        ProbeScope(())
    }
}

impl Drop for ProbeScope {
    fn drop(&mut self) {
        // `try_with`: a drop must not panic, even were the thread's locals being torn down.
        let _ = IN_PROBE.try_with(|c| c.set(false));
    }
}

/// An environment variable's value; one that is not UTF-8 is taken lossily (so that it is
/// reported as malformed, not read as unset).
fn env_text(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// For an error about a field the environment may have set: which of `vars` are set, so that a
/// user who never wrote the field sees where its value came from ("" when none is).
fn env_hint(vars: &[&str]) -> String {
    let set: Vec<String> = vars.iter().filter_map(|v| env_text(v).map(|t| format!("{v}={t:?}"))).collect();
    if set.is_empty() { String::new() } else { format!(" (the environment has {})", set.join(", ")) }
}

/// Logs `line` about variable `name` set to `value` once per process: the options are read
/// from the environment at every open and by several calls, and one malformed value should
/// not fill a log (a review counted 13 lines for one Python device).
fn warn_env_once(name: &str, value: &str, line: std::fmt::Arguments<'_>) {
    static SEEN: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !seen.iter().any(|(n, v)| n == name && v == value) {
        seen.push((name.to_owned(), value.to_owned()));
        drop(seen);
        log::warn!("{line}");
    }
}

/// A number from the environment (`None` when unset or not a number: the default applies).
fn env_usize(name: &str) -> Option<usize> {
    let v = env_text(name)?;
    match v.trim().parse::<usize>() {
        Ok(n) => Some(n),
        Err(e) => {
            let what = match e.kind() {
                std::num::IntErrorKind::PosOverflow => format!("is larger than {}", usize::MAX),
                _ => "is not a whole number".to_owned(),
            };
            warn_env_once(name, &v, format_args!("{name}={v:?} {what}: ignored, the default applies"));
            None
        }
    }
}

/// [`env_usize`], or `Some(off)` where the variable says `off` or `never`.
fn env_usize_or_off(name: &str, off: usize) -> Option<usize> {
    match std::env::var(name).as_deref().map(str::trim) {
        Ok("off" | "never") => Some(off),
        _ => env_usize(name),
    }
}

/// The word an environment variable holds, warning (and answering `None`, the default) when it
/// is set to none of `known`.
pub(crate) fn env_word(name: &str, known: &[&'static str]) -> Option<&'static str> {
    let v = env_text(name)?;
    let w = known.iter().copied().find(|k| *k == v.trim());
    if w.is_none() {
        warn_env_once(name, &v, format_args!("{name}={v:?} is not one of {known:?}: ignored, the default applies"));
    }
    w
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            import: match env_word("VKHOST_IMPORT", &["never", "off", "0", "auto"]) {
                Some("never" | "off" | "0") => ImportPolicy::Never,
                _ => ImportPolicy::Auto,
            },
            validation: instance::validation_requested(),
            staging_chunk: env_usize("VKHOST_STAGING_CHUNK").unwrap_or(16 << 20),
            staging_slots: env_usize("VKHOST_STAGING_SLOTS").unwrap_or(3),
            staging_threads: env_usize("VKHOST_STAGING_THREADS").unwrap_or_else(crate::par::default_threads),
            pinned_huge_min: env_usize_or_off("VKHOST_PINNED_HUGE_MIN", usize::MAX),
            pinned_cache: env_usize_or_off("VKHOST_PINNED_CACHE", 0),
            staging_spin: env_usize("VKHOST_STAGING_SPIN_US").map(|us| std::time::Duration::from_micros(us as u64)),
            max_import_piece: env_usize("VKHOST_IMPORT_PIECE"),
            copy_queue: match env_word("VKHOST_COPY_QUEUE", &["compute", "copy", "auto"]) {
                Some("compute") => QueueKind::Compute,
                _ => QueueKind::Copy,
            },
            measure_copy_queues: std::env::var("VKHOST_COPY_QUEUE").as_deref().map(str::trim) != Ok("copy"),
            bar_writes: match env_word("VKHOST_BAR_WRITES", &["on", "1", "off", "0", "never", "auto"]) {
                Some("on" | "1") => BarWrites::On,
                Some("off" | "0" | "never") => BarWrites::Off,
                _ => BarWrites::Auto,
            },
            bar_write_max: env_usize("VKHOST_BAR_WRITE_MAX").unwrap_or(1 << 20),
            bar_assist: match env_word("VKHOST_BAR_ASSIST", &["1", "on", "always", "bidir", "0", "off", "auto"]) {
                Some("1" | "on" | "always") => BarAssist::Always,
                Some("bidir") => BarAssist::Bidir,
                Some("0" | "off") => BarAssist::Off,
                _ => BarAssist::Auto,
            },
            assist_threads: env_usize("VKHOST_ASSIST_THREADS").unwrap_or(3),
            push_descriptors: !matches!(
                env_word("VKHOST_PUSH_DESCRIPTORS", &["0", "off", "never", "1", "on"]),
                Some("0" | "off" | "never")
            ),
            max_pipelines: env_usize("VKHOST_MAX_PIPELINES").unwrap_or(256),
            d2d_kernel_min: env_usize_or_off("VKHOST_D2D_KERNEL_MIN", usize::MAX),
            gather_regions: env_usize_or_off("VKHOST_GATHER_REGIONS", usize::MAX),
            early_submit: !matches!(env_word("VKHOST_EARLY_SUBMIT", &["0", "off", "never", "1", "on"]), Some("0" | "off" | "never")),
            copy_piece: env_usize("VKHOST_COPY_PIECE"),
        }
    }
}

/// Refuses queues of a [`RawDevice`] the physical device cannot have: a compute family that is
/// not one or not compute-capable, a copy family without TRANSFER, an index past its family's
/// queue count, a copy queue named twice. (Whether the caller created those queues with the
/// device stays the caller's guarantee: Vulkan cannot be asked.)
fn check_raw_queues(info: &DeviceInfo, raw: &RawDevice) -> Result<()> {
    let fam = |f: u32, want: vk::QueueFlags| info.queue_families.iter().find(|q| q.index == f && q.flags.intersects(want));
    match fam(raw.compute_family, vk::QueueFlags::COMPUTE) {
        Some(q) if raw.compute_queue_index < q.count => {}
        Some(q) => {
            return Err(Error::invalid(format!(
                "compute queue index {} of family {}: the family has {} queue(s)",
                raw.compute_queue_index, q.index, q.count
            )));
        }
        None => return Err(Error::invalid(format!("queue family {} is not a compute family of this device", raw.compute_family))),
    }
    if let Some(f) = raw.copy_family {
        let q = fam(f, vk::QueueFlags::TRANSFER | vk::QueueFlags::COMPUTE | vk::QueueFlags::GRAPHICS)
            .ok_or_else(|| Error::invalid(format!("queue family {f} is not a family of this device that can copy")))?;
        for (k, &i) in raw.copy_queue_indices.iter().enumerate() {
            if i >= q.count {
                return Err(Error::invalid(format!("copy queue index {i} of family {f}: the family has {} queue(s)", q.count)));
            }
            // One lock per VkQueue: a queue named twice would be submitted to under two.
            if raw.copy_queue_indices[..k].contains(&i) || (f == raw.compute_family && i == raw.compute_queue_index) {
                return Err(Error::invalid(format!("copy queue index {i} of family {f} given twice (or also as the compute queue)")));
            }
        }
    }
    Ok(())
}

/// A device's validation-message counts ([`Device::validation_counter`]), readable after the
/// device is gone. All zero when validation is off.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let opts = vkhost::OpenOptions { validation: vkhost::validation_layer_installed(), ..Default::default() };
/// let dev = vkhost::Device::open_default_with(&opts)?;
/// let counter = dev.validation_counter();
/// drop(dev);
/// // What the teardown reported (objects left undestroyed) is counted too.
/// assert_eq!((counter.errors(), counter.is_final()), (0, true), "{:?}", counter.last_error());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ValidationCounter(Arc<ValidationCounts>);

impl ValidationCounter {
    /// Validation-layer error messages so far, those of the device's teardown included.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let counter = vkhost::Device::open_default()?.validation_counter(); // opened and dropped
    /// assert_eq!(counter.errors(), 0);
    /// # Ok(()) }
    /// ```
    pub fn errors(&self) -> u64 {
        self.0.errors()
    }

    /// Validation-layer warnings so far.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let counter = dev.validation_counter();
    /// assert_eq!(counter.warnings(), dev.validation_warnings());
    /// # Ok(()) }
    /// ```
    pub fn warnings(&self) -> u64 {
        self.0.warnings()
    }

    /// The layer's reports about a fault of its own so far, left out of
    /// [`errors`](Self::errors) ([`Device::validation_layer_faults`]).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let counter = dev.validation_counter();
    /// assert_eq!(counter.layer_faults(), dev.validation_layer_faults());
    /// # Ok(()) }
    /// ```
    pub fn layer_faults(&self) -> u64 {
        self.0.layer_faults()
    }

    /// The most recent validation-layer error message, if any.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let counter = vkhost::Device::open_default()?.validation_counter();
    /// assert_eq!(counter.last_error(), None);
    /// # Ok(()) }
    /// ```
    pub fn last_error(&self) -> Option<String> {
        self.0.last_error()
    }

    /// Whether the device's teardown has ended ([`Device::destroy`], or the drop of its last
    /// handle): the counts no longer change. Never in a forked child (the teardown is the
    /// parent's), nor where a teardown step panicked (a user's logger) before its end.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let counter = dev.validation_counter();
    /// dev.destroy()?;
    /// assert!(counter.is_final(), "destroy tore it down, though `dev` is still held");
    /// # Ok(()) }
    /// ```
    pub fn is_final(&self) -> bool {
        self.0.done.load(Ordering::Acquire)
    }
}

/// Live Vulkan object counts of one device, for leak checks.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// let before = dev.live_objects();
/// let buf = dev.alloc_buffer(4096)?;
/// assert_eq!(dev.live_objects().buffers, before.buffers + 1);
/// drop(buf);
/// assert_eq!(dev.live_objects(), before);
/// dev.destroy()?;
/// assert_eq!(dev.live_objects(), vkhost::LiveObjects::default()); // nothing leaked
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LiveObjects {
    /// VkBuffers.
    pub buffers: i64,
    /// VkDeviceMemory allocations (imports included).
    pub memories: i64,
    /// VkCommandPools.
    pub command_pools: i64,
    /// VkFences.
    pub fences: i64,
    /// VkSemaphores.
    pub semaphores: i64,
    /// Compute pipelines of kernels (each with its pipeline layout and descriptor-set layout):
    /// the cached ones and evicted ones that submitted work still holds.
    pub pipelines: i64,
    /// VkDescriptorPools of streams (launches in [`DescriptorMode::Sets`](crate::kernel::DescriptorMode)).
    pub descriptor_pools: i64,
}

#[derive(Default)]
pub(crate) struct ObjectCounters {
    buffers: AtomicI64,
    memories: AtomicI64,
    command_pools: AtomicI64,
    fences: AtomicI64,
    semaphores: AtomicI64,
    pipelines: AtomicI64,
    descriptor_pools: AtomicI64,
}

impl ObjectCounters {
    fn snapshot(&self) -> LiveObjects {
        LiveObjects {
            buffers: self.buffers.load(Ordering::Relaxed),
            memories: self.memories.load(Ordering::Relaxed),
            command_pools: self.command_pools.load(Ordering::Relaxed),
            fences: self.fences.load(Ordering::Relaxed),
            semaphores: self.semaphores.load(Ordering::Relaxed),
            pipelines: self.pipelines.load(Ordering::Relaxed),
            descriptor_pools: self.descriptor_pools.load(Ordering::Relaxed),
        }
    }
}

/// One `VkQueue`, behind its own lock (vkQueueSubmit needs external synchronization).
pub(crate) struct Queue {
    pub family: u32,
    pub index: u32,
    pub raw: Mutex<vk::Queue>,
}

/// A buffer bound to fresh memory, optionally mapped.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    pub buffer: vk::Buffer,
    pub memory: vk::DeviceMemory,
    pub ptr: Option<SendPtr>,
}

/// A buffer (and the memory for it, once allocated) being made: released however the making
/// ends short of [`Fresh::done`], an error or a panic unwinding through it (a user's logger
/// panicking on the error `Shared::fail` logs), so nothing leaks.
pub(crate) struct Fresh<'a> {
    s: &'a Shared,
    l: &'a Live,
    pub buffer: vk::Buffer,
    pub memory: Option<vk::DeviceMemory>,
}

impl<'a> Fresh<'a> {
    pub(crate) fn new(s: &'a Shared, l: &'a Live, buffer: vk::Buffer) -> Fresh<'a> {
        Fresh { s, l, buffer, memory: None }
    }

    /// The objects are kept: their owner releases them.
    pub(crate) fn done(self, ptr: Option<SendPtr>) -> Bound {
        let b = Bound { buffer: self.buffer, memory: self.memory.unwrap_or_default(), ptr };
        std::mem::forget(self);
        b
    }
}

impl Drop for Fresh<'_> {
    fn drop(&mut self) {
        // SAFETY: fresh objects of this device that nothing has used (no work names them and
        // nothing else holds their handles), destroyed once, the buffer before its memory.
        unsafe {
            self.s.destroy_buffer(self.l, self.buffer);
            if let Some(m) = self.memory {
                self.s.free_memory(self.l, m);
            }
        }
    }
}

/// A raw pointer into mapped or registered memory that may cross threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendPtr(pub NonNull<u8>);
// SAFETY: the pointer names driver-mapped or caller-registered memory whose lifetime the owning
// object tracks; moving the address between threads does not by itself access it.
unsafe impl Send for SendPtr {}
// SAFETY: as above; all accesses go through unsafe code that states its own synchronization.
unsafe impl Sync for SendPtr {}

/// Everything that exists only while the device is alive.
pub(crate) struct Live {
    pub instance_parts: Option<InstanceParts>,
    pub owns_device: bool,
    pub entry: ash::Entry,
    pub instance: ash::Instance,
    pub physical: vk::PhysicalDevice,
    pub device: ash::Device,
    pub ext_host: Option<ash::ext::external_memory_host::Device>,
    /// VK_KHR_push_descriptor, where vkhost enabled it (devices it created, that offer it, with
    /// `OpenOptions::push_descriptors`): kernel launches push their descriptors
    /// ([`DescriptorMode::Push`]); without it they use descriptor sets.
    pub push_desc: Option<ash::khr::push_descriptor::Device>,
    /// The compute-capable queue vkhost submits to; `None` on a borrowed device without queues
    /// ([`Device::from_raw_borrowed`]), where vkhost never submits.
    pub compute: Option<Queue>,
    /// Queues of the transfer-only family, where the device has one.
    pub copy_queues: Vec<Queue>,
    pub copy_ctxs: Vec<Mutex<Option<submit::CopyCtx>>>,
    pub types: Vec<vk::MemoryPropertyFlags>,
    /// The queue families vkhost submits to. With more than one, buffers are created with
    /// CONCURRENT sharing across them: synchronous copies use the copy family and streams may
    /// use either, with no ownership transfers (an EXCLUSIVE buffer used by two families without
    /// a transfer has undefined contents).
    pub families: Vec<u32>,
    pub next_stream: AtomicU64,
}

/// Why vkhost's own copies and streams fail on a borrowed device without queues.
pub(crate) const NO_QUEUES: &str = "borrowed device without queues: record copies with host::record_copy";

impl Live {
    /// The compute queue, or `Unsupported` on a borrowed device without queues.
    pub(crate) fn compute_queue(&self) -> Result<&Queue> {
        self.compute.as_ref().ok_or_else(|| Error::unsupported(NO_QUEUES))
    }

    /// Whether this is a borrowed device without queues ([`Device::from_raw_borrowed`]).
    pub(crate) fn queueless(&self) -> bool {
        self.compute.is_none()
    }
}

/// State shared by every handle of one device.
pub(crate) struct Shared {
    pub id: DeviceId,
    /// [`fork_generation`] when the device was opened: in a forked child it differs, and the
    /// child must not touch the parent's Vulkan objects (see [`Shared::forked`]).
    pub fork_gen: u64,
    pub info: DeviceInfo,
    pub options: OpenOptions,
    pub counts: Arc<ValidationCounts>,
    pub live: RwLock<Option<Live>>,
    pub lost: AtomicBool,
    pub objects: ObjectCounters,
    /// Live `PinnedBuffer`s: while any lives, `destroy` is `Busy`.
    pub safe_pinned: AtomicUsize,
    /// `host::RecordedCopy` tickets not yet given a completion hook (nor dropped): while any
    /// lives, `destroy` is `Busy` (their work cannot be waited for yet).
    pub open_tickets: AtomicUsize,
    /// Live [`DeviceHold`]s: while any lives, `destroy` is `Busy`.
    pub holds: AtomicUsize,
    /// What [`Device::keep_alive`] was given: dropped after teardown, with the last handle.
    pub owners: Mutex<Vec<Box<dyn std::any::Any + Send + Sync>>>,
    pub direct_bytes: AtomicU64,
    pub staged_bytes: AtomicU64,
    pub mapped_bytes: AtomicU64,
    pub gathered_bytes: AtomicU64,
    /// Synchronous device-to-host copies running now, when the last one ended (nanoseconds
    /// on a process clock; 0: never) and on which thread (a per-thread number), for
    /// [`BarAssist::Bidir`] (kept only under it). A heuristic only: nothing's soundness reads them.
    pub reading: AtomicUsize,
    pub read_ended: AtomicU64,
    pub read_thread: AtomicU64,
    /// Set when teardown begins: the device's objects are going (read lock-free by `find`).
    pub gone: AtomicBool,
    /// Bumped by every buffer destroy: a command buffer recorded at an earlier epoch may name a
    /// handle that now means another buffer (`submit`'s reuse of recorded copies).
    pub buffer_epoch: AtomicU64,
    /// Children to tear down at destroy (streams, buffers, imports), see `object`.
    pub children: Mutex<object::Pruned<Vec<std::sync::Weak<dyn object::Child>>>>,
    /// The device buffers vkhost made on this device, by handle, as `Any` (their type belongs
    /// to a layer above): `host::record_copy` holds the one a recorded copy names until the copy
    /// is reaped. Weak, so an entry never keeps a buffer; dead ones are pruned as it grows.
    pub device_buffers: Mutex<object::Pruned<DeviceBuffers>>,
    /// Every buffer's handles, for teardown's sweep (`object::Slot`); slots whose buffer is gone
    /// and released are forgotten now and then.
    pub slots: Mutex<object::Pruned<Vec<Arc<object::Slot>>>>,
    /// Buffers whose last owner dropped them while the device lock was taken.
    pub garbage: Mutex<Vec<(vk::Buffer, vk::DeviceMemory, Option<object::Backing>)>>,
    /// Pipelines whose last owner dropped them while the device lock was taken.
    pub pipeline_garbage: Mutex<Vec<pipeline::Handles>>,
    /// Set when either garbage list may hold something.
    pub has_garbage: AtomicBool,
    /// Freed pinned driver blocks kept for reuse (`OpenOptions::pinned_cache`; see
    /// `object`'s `keep_for_reuse`). A leaf lock: taken under `live` (read, or teardown's
    /// write) to add, take or free blocks, alone to read the counts.
    pub block_cache: Mutex<crate::reuse::Cache<object::KeptBlock>>,
    /// Held while a thread drains the garbage lists (`drain_garbage`), always under `live`.
    pub draining: Mutex<()>,
    /// Every stream's timeline semaphore not destroyed yet, and whether its stream's last
    /// reference went (`retired`: destroyed at the next stream creation, `release_queued` or
    /// destroy). The one authority over who destroys a stream's semaphore: whoever takes it out
    /// of this list, under its lock (see `StreamSemaphores`).
    pub stream_semaphores: Mutex<StreamSemaphores>,
    /// The import probe's verdict (run at open, and again at a `register` while `probe_retry`
    /// says it could not finish): `Ok(granule)` or why registration failed.
    pub probe: std::sync::OnceLock<std::result::Result<usize, String>>,
    /// Set when the probe could not finish for a reason that may pass (out of memory): the next
    /// registration runs it again (`host::register_entry`, under `probe_lock`), and meanwhile
    /// registration is not refused for it (pinned blocks stay the driver's). At most
    /// `host::probe`'s `PROBE_TRIES` runs: then the failure is the verdict.
    pub probe_retry: AtomicBool,
    /// Held while a `register` runs the probe again: the others wait for its verdict.
    pub probe_lock: Mutex<()>,
    /// Runs of the probe so far (at open and again).
    pub probe_tries: std::sync::atomic::AtomicU32,
    /// Set by the host layer once an import of vkhost's own memory for a pinned block was
    /// refused in a way that recurs (`Unsupported`: another memory type than the pinned
    /// ranking's; the driver refusing anonymous memory): later blocks go straight to the driver,
    /// without first mapping and faulting in memory that cannot be used.
    pub own_memory_refused: AtomicBool,
    /// Compute pipelines of kernels launched on this device, at most
    /// `OpenOptions::max_pipelines`, made for the device's descriptor mode (a device child:
    /// dropped at teardown, phase OBJECTS; each pipeline is a child too).
    pub pipelines: Arc<pipeline::PipelineCache>,
    /// The queue each class of synchronous copy uses (`queues`).
    pub copy_choice: queues::Choice,
    /// Whether device buffers go in mapped device memory, for CPU-store writes
    /// (`OpenOptions::bar_writes`, decided at open from the memory types).
    pub mapped_buffers: bool,
    /// The memory-type bits mapped device buffers may take: a full BAR's types
    /// (`memtype::full_bar_types`) where there is one, else every type.
    pub mapped_types: u32,
}

/// A read guard on a live device.
pub(crate) struct LiveRef<'a>(RwLockReadGuard<'a, Option<Live>>);

impl std::ops::Deref for LiveRef<'_> {
    type Target = Live;
    fn deref(&self) -> &Live {
        match self.0.as_ref() {
            Some(l) => l,
            // `Shared::live_any` only builds a LiveRef after seeing `Some`, under the same guard.
            None => unreachable!("LiveRef built over a destroyed device"),
        }
    }
}

impl Shared {
    /// True in a process forked from the one that opened the device. The child shares the
    /// parent's driver state (kernel objects, device memory, queues) but not necessarily its
    /// mappings, so releasing or using Vulkan objects there can corrupt the parent's device:
    /// every drop and teardown path does nothing in a forked child.
    pub(crate) fn forked(&self) -> bool {
        fork_generation() != self.fork_gen
    }

    /// The largest region of a copy that does not go through a staging buffer
    /// ([`OpenOptions::copy_piece`], resolved by device type when `None`).
    pub(crate) fn copy_piece(&self) -> u64 {
        match self.options.copy_piece {
            Some(n) => n as u64,
            None if self.info.device_type == crate::DeviceType::Cpu => OpenOptions::CPU_COPY_PIECE as u64,
            None => submit::COPY_REGION_MAX,
        }
    }

    /// The live device, or `DeviceDestroyed`, or `DeviceLost` once a call has lost it.
    pub(crate) fn live(&self) -> Result<LiveRef<'_>> {
        let l = self.live_any()?;
        if self.lost.load(Ordering::Relaxed) {
            return Err(Error::DeviceLost);
        }
        Ok(l)
    }

    /// The live device even if lost: for release paths, which must still work after a loss.
    /// In a forked child the device is `DeviceDestroyed`: nothing there touches the parent's
    /// objects.
    pub(crate) fn live_any(&self) -> Result<LiveRef<'_>> {
        if self.forked() {
            return Err(Error::DeviceDestroyed);
        }
        let g = self.live.read().unwrap_or_else(PoisonError::into_inner);
        if g.is_none() {
            return Err(Error::DeviceDestroyed);
        }
        Ok(LiveRef(g))
    }

    /// [`Shared::live_any`] without waiting: `None` while the lock is held for writing or a
    /// writer waits for it (a `destroy` in progress, which holds it through its wait for idle).
    /// For the calls that must never block (`Event::is_done`).
    pub(crate) fn try_live_any(&self) -> Option<Result<LiveRef<'_>>> {
        if self.forked() {
            return Some(Err(Error::DeviceDestroyed));
        }
        let g = match self.live.try_read() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        Some(if g.is_none() { Err(Error::DeviceDestroyed) } else { Ok(LiveRef(g)) })
    }

    /// The largest single import or pinned allocation: the option, else the device's limit,
    /// rounded down to `granule` (a power of two).
    pub(crate) fn import_piece(&self, granule: usize) -> usize {
        let limit = self.options.max_import_piece.map_or(self.info.max_memory_allocation_size, |p| p as u64);
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        (limit & !(granule - 1)).max(granule)
    }

    /// Buffer create info with the sharing mode every vkhost buffer uses (see `Live::families`).
    pub(crate) fn buffer_info<'a>(l: &'a Live, size: u64, usage: vk::BufferUsageFlags) -> vk::BufferCreateInfo<'a> {
        let info = vk::BufferCreateInfo::default().size(size).usage(usage);
        if l.families.len() > 1 {
            info.sharing_mode(vk::SharingMode::CONCURRENT).queue_family_indices(&l.families)
        } else {
            info.sharing_mode(vk::SharingMode::EXCLUSIVE)
        }
    }

    /// Classifies a failed call, remembering a device loss, and logs a loss.
    pub(crate) fn fail(&self, call: &'static str, code: vk::Result) -> Error {
        let e = self.fail_unlogged(call, code);
        self.log_failure(call, code);
        e
    }

    /// [`Shared::fail`] without the log line: for a caller whose bookkeeping must be done
    /// before a user's logger runs (it may panic), which then calls [`Shared::log_failure`].
    pub(crate) fn fail_unlogged(&self, call: &'static str, code: vk::Result) -> Error {
        if code == vk::Result::ERROR_DEVICE_LOST {
            self.lost.store(true, Ordering::Relaxed);
        }
        Error::vk(call, code)
    }

    /// The log line of [`Shared::fail`].
    pub(crate) fn log_failure(&self, call: &'static str, code: vk::Result) {
        if code == vk::Result::ERROR_DEVICE_LOST {
            log::error!("{}: device lost in {call}", self.id);
        }
    }

    // ---- object creation, counted and fault-injectable ----

    pub(crate) fn create_buffer(&self, l: &Live, info: &vk::BufferCreateInfo<'_>) -> Result<vk::Buffer> {
        fault::check(Point::CreateBuffer).map_err(|c| self.fail("vkCreateBuffer", c))?;
        // SAFETY: `info` is a valid create info whose pNext chain the caller built from locals.
        let b = unsafe { l.device.create_buffer(info, None) }.map_err(|c| self.fail("vkCreateBuffer", c))?;
        self.objects.buffers.fetch_add(1, Ordering::Relaxed);
        Ok(b)
    }

    /// # Safety
    /// `b` was created by `create_buffer` on this device, no pending work uses it, and it is
    /// destroyed once.
    pub(crate) unsafe fn destroy_buffer(&self, l: &Live, b: vk::Buffer) {
        // Before the handle can be reused: copy contexts stop resubmitting what they recorded.
        self.buffer_epoch.fetch_add(1, Ordering::AcqRel);
        // SAFETY: the caller's contract.
        unsafe { l.device.destroy_buffer(b, None) };
        self.objects.buffers.fetch_sub(1, Ordering::Relaxed);
    }

    /// `vkAllocateMemory` (a driver allocation or an import). Out of memory (or of allocations)
    /// while freed pinned blocks are kept for reuse (`OpenOptions::pinned_cache`): frees them
    /// and tries once more.
    pub(crate) fn allocate_memory(&self, l: &Live, info: &vk::MemoryAllocateInfo<'_>) -> Result<vk::DeviceMemory> {
        match self.allocate_memory_once(l, info) {
            Err(Error::OutOfHostMemory | Error::OutOfDeviceMemory | Error::Vulkan { code: vk::Result::ERROR_TOO_MANY_OBJECTS, .. })
                if self.trim_block_cache(l) > 0 =>
            {
                self.allocate_memory_once(l, info)
            }
            r => r,
        }
    }

    fn allocate_memory_once(&self, l: &Live, info: &vk::MemoryAllocateInfo<'_>) -> Result<vk::DeviceMemory> {
        fault::check(Point::AllocateMemory).map_err(|c| self.fail("vkAllocateMemory", c))?;
        // SAFETY: `info` is valid; its pNext chain (an import, at most) refers to live locals.
        let m = unsafe { l.device.allocate_memory(info, None) }.map_err(|c| self.fail("vkAllocateMemory", c))?;
        self.objects.memories.fetch_add(1, Ordering::Relaxed);
        Ok(m)
    }

    /// # Safety
    /// `m` was allocated by `allocate_memory` on this device, nothing bound to it is in use, and
    /// it is freed once.
    pub(crate) unsafe fn free_memory(&self, l: &Live, m: vk::DeviceMemory) {
        // SAFETY: the caller's contract. Freeing also unmaps.
        unsafe { l.device.free_memory(m, None) };
        self.objects.memories.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn bind(&self, l: &Live, b: vk::Buffer, m: vk::DeviceMemory) -> Result<()> {
        fault::check(Point::BindBufferMemory).map_err(|c| self.fail("vkBindBufferMemory", c))?;
        // SAFETY: `b` and `m` are fresh objects of this device; the caller checked type and size.
        unsafe { l.device.bind_buffer_memory(b, m, 0) }.map_err(|c| self.fail("vkBindBufferMemory", c))
    }

    pub(crate) fn map(&self, l: &Live, m: vk::DeviceMemory) -> Result<NonNull<u8>> {
        fault::check(Point::MapMemory).map_err(|c| self.fail("vkMapMemory", c))?;
        // SAFETY: `m` is host-visible (chosen so) and not mapped yet.
        let p =
            unsafe { l.device.map_memory(m, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }.map_err(|c| self.fail("vkMapMemory", c))?;
        NonNull::new(p.cast::<u8>()).ok_or(Error::Vulkan { call: "vkMapMemory", code: vk::Result::ERROR_MEMORY_MAP_FAILED })
    }

    pub(crate) fn count_pool(&self, delta: i64) {
        self.objects.command_pools.fetch_add(delta, Ordering::Relaxed);
    }
    pub(crate) fn count_semaphore(&self, delta: i64) {
        self.objects.semaphores.fetch_add(delta, Ordering::Relaxed);
    }

    /// See `Device::host_registration`.
    pub(crate) fn registration(&self) -> std::result::Result<usize, String> {
        if self.options.import == ImportPolicy::Never {
            return Err("imports disabled by policy (VKHOST_IMPORT=never or OpenOptions::import)".into());
        }
        let g = self.info.host_registration()?;
        match self.probe.get() {
            Some(Err(why)) => Err(format!("import probe failed: {why}")),
            _ => Ok(g),
        }
    }

    /// Destroys semaphores of streams that are gone.
    pub(crate) fn destroy_deferred(&self, l: &Live) {
        let sems = lock(&self.stream_semaphores).take_retired();
        for sem in sems {
            // SAFETY: the stream and every batch that could wait on it are gone (the last
            // reference to its inner state, which waiting batches hold, was dropped).
            unsafe { l.device.destroy_semaphore(sem, None) };
            self.count_semaphore(-1);
        }
    }

    /// At the end of teardown, after every stream alive at its start was shut down and its
    /// semaphore destroyed: destroys whatever is still listed. Those are semaphores of streams
    /// whose last reference went as the teardown ran, before their drop retired them (the
    /// teardown's children could not include them): the drop, when it runs, finds nothing.
    fn destroy_stream_semaphores(&self, l: &Live) {
        let sems = lock(&self.stream_semaphores).take_all();
        for sem in sems {
            // SAFETY: the device is idle, every stream that could still use its semaphore was
            // shut down (teardown's WORK phase), and nothing submits any more.
            unsafe { l.device.destroy_semaphore(sem, None) };
            self.count_semaphore(-1);
        }
    }

    pub(crate) fn count_pipeline(&self, delta: i64) {
        self.objects.pipelines.fetch_add(delta, Ordering::Relaxed);
    }

    pub(crate) fn count_descriptor_pool(&self, delta: i64) {
        self.objects.descriptor_pools.fetch_add(delta, Ordering::Relaxed);
    }

    pub(crate) fn count_fence(&self, delta: i64) {
        self.objects.fences.fetch_add(delta, Ordering::Relaxed);
    }

    /// A buffer of `size` bytes with `usage`, bound to fresh memory of the type `choose` picks,
    /// mapped when `map`. On any failure, everything created so far is destroyed. With `zero`
    /// its first `size` bytes read 0 on a CPU driver (see
    /// [`zero_heap_memory`](Self::zero_heap_memory)): for the memory users can read before they
    /// write it, pinned blocks (a safe `&[u8]`) and device buffers (`DeviceBuffer::read`).
    /// Without, its bytes are whatever the driver left: for vkhost's own buffers, which it
    /// writes before it reads.
    pub(crate) fn alloc_bound(
        &self,
        l: &Live,
        size: u64,
        usage: vk::BufferUsageFlags,
        choose: &dyn Fn(&[vk::MemoryPropertyFlags], u32) -> Option<Choice>,
        map: bool,
        zero: bool,
    ) -> Result<Bound> {
        if size == 0 {
            return Err(Error::invalid("zero-length allocation"));
        }
        if size > self.info.max_memory_allocation_size {
            return Err(Error::invalid(format!(
                "{size} bytes exceeds this device's maxMemoryAllocationSize ({})",
                self.info.max_memory_allocation_size
            )));
        }
        self.drain_garbage(l);
        let info = Self::buffer_info(l, size, usage);
        let mut fresh = Fresh::new(self, l, self.create_buffer(l, &info)?);
        // SAFETY: `fresh.buffer` is a live buffer of this device.
        let req = unsafe { l.device.get_buffer_memory_requirements(fresh.buffer) };
        let Choice { index, .. } = choose(&l.types, req.memory_type_bits)
            .ok_or_else(|| Error::unsupported(format!("no suitable memory type among bits {:#x} for {:?}", req.memory_type_bits, usage)))?;
        let ai = vk::MemoryAllocateInfo::default().allocation_size(req.size).memory_type_index(index);
        let memory = self.allocate_memory(l, &ai)?;
        fresh.memory = Some(memory);
        self.bind(l, fresh.buffer, memory)?;
        let ptr = if map { Some(SendPtr(self.map(l, memory)?)) } else { None };
        if zero {
            self.zero_heap_memory(l, memory, l.types[index as usize], ptr, size)?;
        }
        Ok(fresh.done(ptr))
    }

    /// Sets the first `size` bytes of fresh `memory` (of a type with `flags`, mapped at `ptr`
    /// when given) to 0 where the device is a CPU driver (lavapipe, SwiftShader): there "device
    /// memory" is this process's heap, and bytes nobody wrote are uninitialized to Rust. A safe
    /// `&[u8]` over a new pinned block, or a `DeviceBuffer::read` before any write, would read
    /// them (undefined behaviour; valgrind reports each branch on them). A GPU driver's memory
    /// is pages the kernel cleared before the process got them, or that earlier work of the
    /// process wrote: bytes with values, left as they are (zeroing a 1 GiB block costs ~0.1 s
    /// of CPU). CPU drivers give only host-visible types; one that is not is left as it is.
    fn zero_heap_memory(
        &self,
        l: &Live,
        memory: vk::DeviceMemory,
        flags: vk::MemoryPropertyFlags,
        ptr: Option<SendPtr>,
        size: u64,
    ) -> Result<()> {
        if self.info.device_type != crate::DeviceType::Cpu || !flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE) {
            return Ok(());
        }
        let (p, temporary) = match ptr {
            Some(p) => (p.0, false),
            None => (self.map(l, memory)?, true),
        };
        let len = usize::try_from(size).map_err(|_| Error::invalid(format!("{size} bytes do not fit this host's address space")))?;
        // SAFETY: `p` maps the whole of `memory` (vkMapMemory with VK_WHOLE_SIZE), which is at
        // least `size` bytes (the buffer of `size` bytes is bound to it at offset 0), and
        // nothing else can reach this fresh memory yet.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0, len) };
        if !flags.contains(vk::MemoryPropertyFlags::HOST_COHERENT) {
            let range = vk::MappedMemoryRange::default().memory(memory).offset(0).size(vk::WHOLE_SIZE);
            // SAFETY: `memory` is mapped (above) and host-visible.
            unsafe { l.device.flush_mapped_memory_ranges(&[range]) }.map_err(|c| self.fail("vkFlushMappedMemoryRanges", c))?;
        }
        if temporary {
            // SAFETY: mapped just above by this call, not mapped elsewhere (fresh), and the
            // pointer is not used after this.
            unsafe { l.device.unmap_memory(memory) };
        }
        Ok(())
    }

    /// [`alloc_bound`](Self::alloc_bound) in the memory device buffers get: mapped VRAM where
    /// small writes are CPU stores (`OpenOptions::bar_writes`; mapped when `map`), else, or if
    /// no mapped type can hold this buffer (its memory-type bits), ordinary VRAM. A failed
    /// allocation is the caller's error either way: on a full BAR both types share one heap.
    /// `zero` as in [`alloc_bound`](Self::alloc_bound).
    pub(crate) fn alloc_device_bound(&self, l: &Live, size: u64, usage: vk::BufferUsageFlags, map: bool, zero: bool) -> Result<Bound> {
        match self
            .mapped_buffers
            .then(|| self.alloc_bound(l, size, usage, &|t, b| memtype::device_mapped(t, b & self.mapped_types), map, zero))
        {
            Some(Ok(b)) => Ok(b),
            Some(Err(Error::Unsupported { .. })) | None => self.alloc_bound(l, size, usage, &memtype::device_local, false, zero),
            Some(Err(e)) => Err(e),
        }
    }

    /// # Safety
    /// `b` came from `alloc_bound` (or an import) on this device, nothing pending uses it, and it
    /// is released once.
    pub(crate) unsafe fn release_bound(&self, l: &Live, buffer: vk::Buffer, memory: vk::DeviceMemory) {
        // SAFETY: the caller's contract; the buffer goes before its memory.
        unsafe {
            self.destroy_buffer(l, buffer);
            self.free_memory(l, memory);
        }
    }

    /// Tears down everything the device owns, in reverse order of creation. In a forked child
    /// it only forgets `live`: no Vulkan call, no drop of the loader or the handles, no logging
    /// (another thread of the parent may have held the logger's lock at the fork).
    ///
    /// Every step runs even if one panics (a user's logger that panics on a warning a step
    /// logs, as a stream's shutdown does when its last submission fails): a teardown cut short
    /// by the first panic left streams' work running on the device after `destroy` returned
    /// and every object alive. The first panic is returned, for `destroy` to resume once the
    /// device is gone; the last handle's drop discards it (a drop does not panic).
    ///
    /// The validation log thread comes back unclosed, for the caller to close once it released
    /// the device's lock ([`LogPump::close`]: a logger may call into this device).
    fn teardown(&self, live: Live) -> (Option<object::Panic>, Option<LogPump>) {
        use object::step;
        // Before anything is released: `host::find` answers None from here on.
        self.gone.store(true, Ordering::Release);
        if self.forked() {
            std::mem::forget(live);
            return (None, None);
        }
        let mut first = None;
        let mut pump = None;
        // Every child, held until its last phase ran (see `live_children`).
        let kids = self.live_children();
        // Work first: streams submit what they recorded, wait, reap (dropping the owners their
        // batches held), complete pageable d2h copies; on a borrowed device, the caller's
        // recorded copies are waited for through their completion hooks.
        self.teardown_children(&kids, &live, object::phase::WORK, &mut first);
        // Then the queues idle, whatever the WORK steps did (a step cut short by a panic may
        // not have waited for its stream): each wait comes before anything it logs. On the
        // caller's device (`from_raw` with `Borrowed`) that covers vkhost's queues only: the
        // caller's work on vkhost's objects (recorded copies) is waited for in WORK alone.
        if live.owns_device {
            // SAFETY: the device is valid and vkhost's to destroy: no one else submits to any of
            // its queues now (a device from `from_raw` with `Owned` is handed over for good);
            // a lost device returns an error, which changes nothing here.
            let r = unsafe { submit::device_idle(&live.device) };
            step(&mut first, || {
                if let Err(e) = r {
                    log::warn!("{}: vkDeviceWaitIdle at destroy: {e:?}", self.id);
                }
            });
        } else {
            // The caller's device (`from_raw` with `Borrowed`): not vkDeviceWaitIdle, which needs
            // every VkQueue of the device externally synchronized, and the caller may be
            // submitting to queues of its own now. Each of vkhost's queues, under its lock. (A
            // device from `from_raw_borrowed` has none: vkhost never submitted there, and the
            // WORK phase waited for every use of its objects the caller announced.)
            for q in live.compute.iter().chain(&live.copy_queues) {
                let g = lock(&q.raw);
                // SAFETY: the queue is the device's and held under its lock (externally
                // synchronized); a lost device returns an error, which changes nothing here.
                let r = unsafe { submit::queue_idle(&live.device, *g) };
                drop(g);
                step(&mut first, || {
                    if let Err(e) = r {
                        log::warn!("{}: vkQueueWaitIdle at destroy: {e:?}", self.id);
                    }
                });
            }
        }
        if first.is_some() && !live.owns_device {
            // A step panicked on the caller's device: the caller's work that names vkhost's
            // imports and blocks may still run, and nothing vkhost can wait on covers it. They
            // are leaked (as are vkhost's other objects on that device), never freed under it.
            step(&mut first, || log::error!("{}: teardown interrupted by a panic on a borrowed device: its objects are leaked", self.id));
            std::mem::forget(kids);
            return (first, None);
        }
        // Then objects: imports, pinned blocks, device buffers. Owners that outlive the device
        // (registry tombstones, handles) keep inert shells.
        self.teardown_children(&kids, &live, object::phase::OBJECTS, &mut first);
        // Buffers whose last owner was being dropped on another thread as the children were
        // taken: released here, or queued by that drop for the drains below.
        step(&mut first, || self.sweep_slots(&live));
        // Blocks kept for reuse: nothing can add one now (`keep_for_reuse` needs `live`).
        step(&mut first, || {
            self.trim_block_cache(&live);
        });
        step(&mut first, || self.drain_garbage(&live));
        self.teardown_children(&kids, &live, object::phase::SYNC, &mut first);
        // Released: their drops find nothing left to release (streams' semaphores are out of
        // `stream_semaphores`, buffers' memory taken).
        step(&mut first, || drop(kids));
        step(&mut first, || self.destroy_deferred(&live));
        for ctx in &live.copy_ctxs {
            step(&mut first, || {
                if let Some(c) = lock(ctx).take() {
                    // SAFETY: the device is idle; the context is destroyed once.
                    unsafe { c.destroy(self, &live) };
                }
            });
        }
        // Owners other threads dropped while this teardown ran queued their objects (they could
        // not take the device lock): release them too, last, before the device goes.
        step(&mut first, || self.drain_garbage(&live));
        step(&mut first, || self.destroy_deferred(&live));
        step(&mut first, || self.destroy_stream_semaphores(&live));
        step(&mut first, || {
            let left = self.objects.snapshot();
            if left != LiveObjects::default() {
                log::warn!("{}: objects still counted at destroy: {left:?}", self.id);
            }
        });
        if live.owns_device {
            // SAFETY: every child object was destroyed above and the device is idle.
            unsafe { live.device.destroy_device(None) };
            if let Some(parts) = live.instance_parts {
                // SAFETY: the device, the only child of this instance, is gone.
                pump = unsafe { parts.destroy() };
            }
        }
        // The messenger is gone with the instance: the counts are final (`ValidationCounter`).
        self.counts.done.store(true, Ordering::Release);
        step(&mut first, || log::debug!("{}: destroyed", self.id));
        (first, pump)
    }
}

/// `Shared::device_buffers`' map: a device buffer's handle to its owner, weak, as `Any`.
pub(crate) type DeviceBuffers = std::collections::HashMap<vk::Buffer, std::sync::Weak<dyn std::any::Any + Send + Sync>>;

/// The timeline semaphores of a device's streams (`Shared::stream_semaphores`). A semaphore is
/// listed from its stream's creation until it is destroyed; whoever takes it out (under the
/// lock) destroys it, so a stream's last drop racing the device's teardown can neither leak it
/// nor destroy it twice. Entries are keyed by a number never reused, not by the handle: a
/// driver may hand a destroyed semaphore's handle value to the next stream's.
#[derive(Default)]
pub(crate) struct StreamSemaphores {
    next: u64,
    /// (key, semaphore, retired: its stream's last reference went).
    list: Vec<(u64, vk::Semaphore, bool)>,
}

impl StreamSemaphores {
    /// Lists a new stream's semaphore; returns its key.
    pub(crate) fn adopt(&mut self, sem: vk::Semaphore) -> u64 {
        self.next += 1;
        self.list.push((self.next, sem, false));
        self.next
    }

    /// Marks `key`'s semaphore for destruction at the next `destroy_deferred` (its stream's
    /// last reference went); nothing if it is no longer listed (already destroyed).
    pub(crate) fn retire(&mut self, key: u64) {
        if let Some(e) = self.list.iter_mut().find(|e| e.0 == key) {
            e.2 = true;
        }
    }

    /// Takes `key`'s semaphore out of the list: `Some` if it was listed, and the caller now
    /// destroys it.
    pub(crate) fn take(&mut self, key: u64) -> Option<vk::Semaphore> {
        let i = self.list.iter().position(|e| e.0 == key)?;
        Some(self.list.swap_remove(i).1)
    }

    fn take_retired(&mut self) -> Vec<vk::Semaphore> {
        let mut out = Vec::new();
        self.list.retain(|&(_, sem, retired)| {
            if retired {
                out.push(sem);
            }
            !retired
        });
        out
    }

    fn take_all(&mut self) -> Vec<vk::Semaphore> {
        self.list.drain(..).map(|e| e.1).collect()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if self.forked() {
            // The owners (a wgpu device, say) would destroy the parent's driver objects, and
            // queued garbage may hold a mapping vkhost made (a huge-page block's): leave both.
            std::mem::forget(std::mem::take(self.owners.get_mut().unwrap_or_else(PoisonError::into_inner)));
            std::mem::forget(std::mem::take(self.garbage.get_mut().unwrap_or_else(PoisonError::into_inner)));
            return;
        }
        let live = self.live.get_mut().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(live) = live {
            // A panic out of a step (a user's logger) is not resumed here: a drop does not panic.
            let (panicked, pump) = self.teardown(live);
            // `close` contains a logger's panics.
            pump.map(LogPump::close);
            // The payload's own drop may panic too (a logger's `panic_any`): kept inside.
            instance::contain(move || drop(panicked));
        }
        // The owners go last (field drop order), after every vkhost object of the device.
    }
}

/// A Vulkan device opened by vkhost: a cheap, cloneable, thread-safe handle.
///
/// Dropping the last handle destroys the device; [`Device::destroy`] does it now. Every object
/// made from the device holds a handle too: device buffers, pinned buffers, registrations,
/// host ranges, streams with their events and `Pending` guards, recorded copies, a
/// [`DeviceHold`]. So one of them forgotten (`mem::forget`, a reference cycle) keeps the device
/// until an explicit `destroy`, or for good where that is `Busy` (a forgotten `PinnedBuffer`,
/// `DeviceHold` or unhooked `RecordedCopy`; see the crate docs on leaks).
///
/// A process that exits (`std::process::exit`, or `main` returning) while another thread is
/// inside a vkhost call may crash in the driver, which tears itself down under that call
/// (lavapipe does, in 3 of 6 runs of a review's probe): stop and join the threads that use a
/// device before the process exits. Exiting with devices still open and no call running is
/// fine.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// println!("{} ({})", dev.info().name, dev.info().device_type.as_str());
/// let buf = dev.alloc_buffer(4096)?;
/// // Cheap handles: clone one into each thread.
/// let d = dev.clone();
/// std::thread::spawn(move || d.alloc_buffer(64).map(|b| b.len())).join().unwrap()?;
/// buf.write(0, &[1; 4096])?;
/// dev.destroy()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Device {
    pub(crate) shared: SharedRef,
}

/// An owning reference to a device's state, held by every long-lived owner (`Device`,
/// `DeviceBuffer`, a stream's state). Its drop never leaves the background releaser as the
/// last owner: the releaser holds a device's state while it frees queued imports, and if a
/// user's last handle went meanwhile, the device's teardown (vkDestroyDevice, and for a
/// borrowed device the wait on the caller's objects) would run later on the releaser's thread,
/// after the user's drop returned, racing process exit or the caller destroying its VkDevice.
/// See [`object::drop_shared`].
pub(crate) struct SharedRef(std::mem::ManuallyDrop<Arc<Shared>>);

impl SharedRef {
    pub(crate) fn new(s: Arc<Shared>) -> SharedRef {
        SharedRef(std::mem::ManuallyDrop::new(s))
    }
}

impl std::ops::Deref for SharedRef {
    type Target = Arc<Shared>;
    fn deref(&self) -> &Arc<Shared> {
        &self.0
    }
}

impl Clone for SharedRef {
    fn clone(&self) -> SharedRef {
        SharedRef::new(Arc::clone(&self.0))
    }
}

impl Drop for SharedRef {
    fn drop(&mut self) {
        // SAFETY: taken once, here, and `self.0` is never used again (this is its drop).
        let s = unsafe { std::mem::ManuallyDrop::take(&mut self.0) };
        object::drop_shared(s);
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device").field("id", &self.shared.id).field("name", &self.shared.info.name).finish()
    }
}

/// Lists the physical devices, one [`DeviceInfo`] each: empty when the loader finds no driver
/// it can use (none installed). `Err(LoaderMissing)` without a loader.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let infos = vkhost::devices()?;
/// assert!(!infos.is_empty(), "no Vulkan device");
/// for info in &infos {
///     println!("{}: {} ({})", info.index, info.name, info.device_type.as_str());
/// }
/// // Indices are what Device::open takes.
/// let dev = vkhost::Device::open(infos[0].index)?;
/// assert_eq!(dev.info().name, infos[0].name);
/// # Ok(()) }
/// ```
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let counts = Arc::new(ValidationCounts::default());
    let parts = match instance::create(false, &counts) {
        Ok(p) => p,
        // A loader without a usable driver: there are no devices.
        Err(Error::NoDevice) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    // SAFETY: the instance is alive until `destroy` below.
    let pds = unsafe { parts.instance.enumerate_physical_devices() };
    let out = pds
        .map(|pds| pds.iter().enumerate().map(|(i, &pd)| info::query(&parts.instance, pd, i)).collect())
        .map_err(|c| Error::vk("vkEnumeratePhysicalDevices", c));
    // SAFETY: nothing was created from this instance.
    unsafe { parts.destroy() }.map(LogPump::close);
    out
}

/// Whether the Khronos validation layer (`VK_LAYER_KHRONOS_validation`) is installed, as the
/// Vulkan loader lists it: what [`OpenOptions::validation`] needs (an open with validation
/// asked for and no layer is `Unsupported`). `false` when no loader can be found.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// // Check with the layer where it is installed, without it elsewhere.
/// let validation = vkhost::validation_layer_installed();
/// let dev = vkhost::Device::open_default_with(&vkhost::OpenOptions { validation, ..Default::default() })?;
/// assert_eq!(dev.validation_enabled(), validation);
/// # Ok(()) }
/// ```
pub fn validation_layer_installed() -> bool {
    instance::entry().and_then(|e| instance::layer_installed(&e)).unwrap_or(false)
}

/// The interop view of a device, from [`Device::raw`]. The handles are valid until the device
/// is destroyed; objects a user creates from them must be destroyed before that.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// let raw = dev.raw()?;
/// // Your own Vulkan calls on vkhost's handles:
/// // SAFETY: plain queries on live handles.
/// let props = unsafe { raw.instance.get_physical_device_properties(raw.physical_device) };
/// assert_eq!(props.device_id, dev.info().device_id);
/// // SAFETY: as above.
/// let families = unsafe { raw.instance.get_physical_device_queue_family_properties(raw.physical_device) };
/// assert!(families[raw.compute_family as usize].queue_flags.contains(vkhost::vk::QueueFlags::COMPUTE));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RawDevice {
    /// The loaded Vulkan entry points.
    pub entry: ash::Entry,
    /// The VkInstance and its function table.
    pub instance: ash::Instance,
    /// The physical device the device was created from.
    pub physical_device: vk::PhysicalDevice,
    /// The VkDevice and its function table.
    pub device: ash::Device,
    /// The compute-capable family vkhost uses.
    pub compute_family: u32,
    /// The index of the queue vkhost uses in `compute_family`.
    pub compute_queue_index: u32,
    /// The transfer-only family (copy engines) vkhost uses, if any.
    pub copy_family: Option<u32>,
    /// The queue indices vkhost uses in `copy_family`; empty without one.
    pub copy_queue_indices: Vec<u32>,
}

impl std::fmt::Debug for RawDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawDevice")
            .field("physical_device", &self.physical_device)
            .field("device", &self.device.handle())
            .field("compute_family", &self.compute_family)
            .field("copy_family", &self.copy_family)
            .finish()
    }
}

/// A caller's device for [`Device::from_raw_borrowed`]: no queues, never destroyed by vkhost.
///
/// # Example
///
/// ```
/// use vkhost::{ash, vk, BorrowedDevice, Device, OpenOptions};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let info = vkhost::devices()?.into_iter().next().expect("a Vulkan device");
/// # // SAFETY: loading libvulkan; it stays loaded while `entry` lives.
/// # let entry = unsafe { ash::Entry::load()? };
/// # let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
/// # // SAFETY: a valid create info: no layers, no extensions.
/// # let instance = unsafe { entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None)? };
/// # // SAFETY: the instance is alive; vkhost::devices() lists the devices in the loader's order.
/// # let pd = unsafe { instance.enumerate_physical_devices()? }[info.index];
/// # let family = info.compute_family().expect("a compute queue family").index;
/// # let emh = info.host_import_alignment.is_some();
/// # let exts = if emh { vec![ash::ext::external_memory_host::NAME.as_ptr()] } else { Vec::new() };
/// # let prio = [1.0f32];
/// # let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&prio)];
/// # let mut f12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(info.timeline_semaphore);
/// # let mut dci = vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_extension_names(&exts);
/// # if info.api_version >= (vkhost::ApiVersion { major: 1, minor: 2, patch: 0 }) {
/// #     dci = dci.push_next(&mut f12);
/// # }
/// # // SAFETY: the queue family, the extension and the feature were all read from `pd`.
/// # let device = unsafe { instance.create_device(pd, &dci, None)? };
/// // `entry`, `instance`, `pd` and `device` are the caller's own (a runtime's; setup hidden): one
/// // queue of the compute family `family`; VK_EXT_external_memory_host (`emh`: whether enabled)
/// // and timeline semaphores enabled where the device offers them.
/// let raw = BorrowedDevice {
///     entry: entry.clone(),
///     instance: instance.clone(),
///     physical_device: pd,
///     device: device.clone(),
///     external_memory_host: emh, // whether `device` has VK_EXT_external_memory_host enabled
/// };
/// // SAFETY: the handles are valid, `pd` is the device's physical device, and they outlive `dev`
/// // (destroyed below, before them); `emh` tells whether the extension was enabled.
/// let dev = unsafe { Device::from_raw_borrowed(raw, &OpenOptions::default())? };
/// assert!(dev.is_borrowed());
/// assert!(matches!(dev.raw(), Err(vkhost::Error::Unsupported { .. }))); // the caller has the handles
/// dev.destroy()?;
/// // SAFETY: vkhost is done with the handles: the device goes, then its instance.
/// unsafe {
///     device.destroy_device(None);
///     instance.destroy_instance(None);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct BorrowedDevice {
    /// The loaded Vulkan entry points.
    pub entry: ash::Entry,
    /// The VkInstance and its function table.
    pub instance: ash::Instance,
    /// The physical device `device` was created from.
    pub physical_device: vk::PhysicalDevice,
    /// The caller's VkDevice and its function table.
    pub device: ash::Device,
    /// Whether VK_EXT_external_memory_host is enabled on `device` (required for
    /// `host::register`; must be `false` if it is not enabled).
    pub external_memory_host: bool,
}

impl std::fmt::Debug for BorrowedDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BorrowedDevice")
            .field("physical_device", &self.physical_device)
            .field("device", &self.device.handle())
            .field("external_memory_host", &self.external_memory_host)
            .finish()
    }
}

/// Who destroys a device wrapped by [`Device::from_raw`].
///
/// # Example
///
/// ```
/// use vkhost::{ash, vk, Device, OpenOptions, Ownership, RawDevice};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let info = vkhost::devices()?.into_iter().next().expect("a Vulkan device");
/// # // SAFETY: loading libvulkan; it stays loaded while `entry` lives.
/// # let entry = unsafe { ash::Entry::load()? };
/// # let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
/// # // SAFETY: a valid create info: no layers, no extensions.
/// # let instance = unsafe { entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None)? };
/// # // SAFETY: the instance is alive; vkhost::devices() lists the devices in the loader's order.
/// # let pd = unsafe { instance.enumerate_physical_devices()? }[info.index];
/// # let family = info.compute_family().expect("a compute queue family").index;
/// # let emh = info.host_import_alignment.is_some();
/// # let exts = if emh { vec![ash::ext::external_memory_host::NAME.as_ptr()] } else { Vec::new() };
/// # let prio = [1.0f32];
/// # let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&prio)];
/// # let mut f12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(info.timeline_semaphore);
/// # let mut dci = vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_extension_names(&exts);
/// # if info.api_version >= (vkhost::ApiVersion { major: 1, minor: 2, patch: 0 }) {
/// #     dci = dci.push_next(&mut f12);
/// # }
/// # // SAFETY: the queue family, the extension and the feature were all read from `pd`.
/// # let device = unsafe { instance.create_device(pd, &dci, None)? };
/// // `entry`, `instance`, `pd` and `device` are the caller's own (a runtime's; setup hidden): one
/// // queue of the compute family `family`; VK_EXT_external_memory_host (`emh`: whether enabled)
/// // and timeline semaphores enabled where the device offers them.
/// let raw = RawDevice {
///     entry,
///     instance,
///     physical_device: pd,
///     device,
///     compute_family: family,
///     compute_queue_index: 0,
///     copy_family: None,
///     copy_queue_indices: Vec::new(),
/// };
/// // SAFETY: the handles are valid and nothing else uses them from here on; with `Owned`,
/// // vkhost destroys the device and the instance, so this code never does.
/// let dev = unsafe { Device::from_raw(raw, Ownership::Owned, emh, &OpenOptions::default())? };
/// dev.alloc_buffer(64)?.write(0, &[1; 64])?;
/// dev.destroy()?; // vkDestroyDevice, then vkDestroyInstance
/// assert!(dev.is_destroyed());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// vkhost destroys the VkDevice and then the VkInstance at `destroy`/last drop.
    Owned,
    /// The caller destroys both, after vkhost's `destroy` (or the last drop) returned.
    Borrowed,
}

impl Device {
    /// [`Device::open_with`]'s device layer: opens physical device `index` with `opts`, running
    /// `after` on the device once it is made (see [`AfterOpen`]).
    pub(crate) fn open_index(index: usize, opts: &OpenOptions, after: AfterOpen) -> Result<Device> {
        let counts = Arc::new(ValidationCounts::default());
        let parts = instance::create(opts.validation, &counts)?;
        match Self::create_on(&parts, index, opts) {
            Ok((pd, info, device, cfam, tfam)) => {
                let push = info.push_descriptor && opts.push_descriptors;
                let live = Self::assemble(Some(parts), true, pd, &info, device, Some((cfam, 0)), tfam, push)?;
                Self::wrap(live, info, opts.clone(), counts, false, after)
            }
            Err(e) => {
                // SAFETY: create_on cleaned up anything it made (invalid options fail before
                // vkCreateDevice); the instance has no children.
                unsafe { parts.destroy() }.map(LogPump::close);
                Err(e)
            }
        }
    }

    /// The index of the device [`Device::open_default`] opens: `VKHOST_DEVICE` if set
    /// (`InvalidArgument` naming it if it is not an index; one that names no device makes
    /// `open_default` answer `NoDevice` and log a warning naming the variable), else the first
    /// discrete GPU, then integrated, virtual, CPU. `NoDevice` when there is none.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let i = vkhost::Device::default_index()?;
    /// assert_eq!(vkhost::Device::open_default()?.info().index, i);
    /// # Ok(()) }
    /// ```
    pub fn default_index() -> Result<usize> {
        if let Some(v) = env_text("VKHOST_DEVICE") {
            return v.trim().parse::<usize>().map_err(|_| Error::invalid(format!("VKHOST_DEVICE={v:?} is not an index")));
        }
        let infos = devices()?;
        info::pick_default(&infos).ok_or(Error::NoDevice)
    }

    /// Creates the VkDevice for physical device `index`, once `opts` passed validation against
    /// its facts (nothing is created otherwise).
    #[allow(clippy::type_complexity)]
    fn create_on(
        parts: &InstanceParts,
        index: usize,
        opts: &OpenOptions,
    ) -> Result<(vk::PhysicalDevice, DeviceInfo, ash::Device, u32, Option<(u32, Vec<u32>)>)> {
        // SAFETY: the instance is alive.
        let pds = unsafe { parts.instance.enumerate_physical_devices() }.call("vkEnumeratePhysicalDevices")?;
        let &pd = pds.get(index).ok_or(Error::NoDevice)?;
        let info = info::query(&parts.instance, pd, index);
        opts.validate(&info)?;
        let cfam = info.compute_family().ok_or_else(|| Error::unsupported("no compute-capable queue family"))?.index;
        // Up to two queues of the copy-engine family: streams put h2d and d2h on different ones.
        let tfam = info.transfer_family().map(|f| (f.index, (0..f.count.min(2)).collect::<Vec<u32>>()));
        let prio = [1.0f32; 2];
        let mut qinfos = vec![vk::DeviceQueueCreateInfo::default().queue_family_index(cfam).queue_priorities(&prio[..1])];
        if let Some((f, idx)) = &tfam {
            qinfos.push(vk::DeviceQueueCreateInfo::default().queue_family_index(*f).queue_priorities(&prio[..idx.len()]));
        }
        let mut exts = Vec::new();
        if info.host_import_alignment.is_some() {
            exts.push(ash::ext::external_memory_host::NAME.as_ptr());
            if info.api_version < info::ApiVersion::from_raw(vk::API_VERSION_1_1) {
                exts.push(ash::khr::external_memory::NAME.as_ptr());
            }
        }
        if info.push_descriptor && opts.push_descriptors {
            exts.push(ash::khr::push_descriptor::NAME.as_ptr());
        }
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(info.timeline_semaphore);
        let v12 = info.api_version >= info::ApiVersion::from_raw(vk::API_VERSION_1_2);
        let mut dinfo = vk::DeviceCreateInfo::default().queue_create_infos(&qinfos).enabled_extension_names(&exts);
        if v12 {
            dinfo = dinfo.push_next(&mut f12);
        }
        // SAFETY: the queue families, counts, extensions and features were all read from `pd`.
        let device = unsafe { parts.instance.create_device(pd, &dinfo, None) }.call("vkCreateDevice")?;
        Ok((pd, info, device, cfam, tfam))
    }

    /// The device's `Live` state; `push`: VK_KHR_push_descriptor is enabled on `device`.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        parts: Option<InstanceParts>,
        owns_device: bool,
        pd: vk::PhysicalDevice,
        info: &DeviceInfo,
        device: ash::Device,
        compute: Option<(u32, u32)>,
        tfam: Option<(u32, Vec<u32>)>,
        push: bool,
    ) -> Result<Live> {
        let (entry, instance) = match &parts {
            Some(p) => (p.entry.clone(), p.instance.clone()),
            None => return Err(Error::invalid("no instance")),
        };
        let get = |family: u32, index: u32| Queue {
            family,
            index,
            // SAFETY: the device was created with this family and at least index+1 queues.
            raw: Mutex::new(unsafe { device.get_device_queue(family, index) }),
        };
        let compute_q = compute.map(|(f, i)| get(f, i));
        let copy_queues: Vec<Queue> = tfam.map(|(f, idx)| idx.into_iter().map(|i| get(f, i)).collect()).unwrap_or_default();
        let ext_host = info.host_import_alignment.map(|_| ash::ext::external_memory_host::Device::new(&instance, &device));
        let push_desc = push.then(|| ash::khr::push_descriptor::Device::new(&instance, &device));
        // Without queues (a borrowed device) there are no copy contexts and no families: buffers
        // are EXCLUSIVE, owned by whichever family of the caller's first uses them.
        // Two contexts per copy-engine queue, then two on the compute queue (submit::queue_of).
        let nctx = if compute_q.is_some() { copy_queues.len() * 2 + 2 } else { 0 };
        let mut families: Vec<u32> = compute_q.iter().map(|q| q.family).collect();
        families.extend(copy_queues.first().map(|q| q.family).filter(|f| !families.contains(f)));
        Ok(Live {
            instance_parts: parts,
            owns_device,
            entry,
            instance,
            physical: pd,
            device,
            ext_host,
            push_desc,
            compute: compute_q,
            copy_queues,
            copy_ctxs: (0..nctx).map(|_| Mutex::new(None)).collect(),
            types: info.memory_type_flags(),
            families,
            next_stream: AtomicU64::new(0),
        })
    }

    /// The options of a device vkhost did not create: `validation` does not apply (the caller's
    /// instance has the layer or not, and vkhost has no messenger on it to count its messages),
    /// so it is off in what [`Device::options`] and [`Device::validation_enabled`] answer.
    fn wrapped_options(opts: &OpenOptions) -> OpenOptions {
        if opts.validation {
            log::debug!("OpenOptions::validation does not apply to a wrapped device: the caller's instance decides");
        }
        OpenOptions { validation: false, ..opts.clone() }
    }

    /// The device over `live`, once `after` ran on it (the import probe) and the copy queues
    /// were measured; `DeviceLost` (the device torn down again) if the device was lost
    /// meanwhile: a device every call would refuse is no open device.
    /// `callers`: the Vulkan device and instance came from the caller (`from_raw`,
    /// `from_raw_borrowed`): on that failure vkhost destroys its own objects only and the
    /// handles stay the caller's, as on every other failure of those calls.
    fn wrap(
        mut live: Live,
        info: DeviceInfo,
        options: OpenOptions,
        counts: Arc<ValidationCounts>,
        callers: bool,
        after: AfterOpen,
    ) -> Result<Device> {
        // The caller's handles (`from_raw` with `Owned`) become vkhost's only as the device is
        // returned: until then a teardown (the lost device below, or the drop of `d` when a
        // user's logger panics on a line logged while the device opens, the probe's among them)
        // destroys vkhost's objects only, and the caller, who got no device, still owns the
        // device and the instance (found by a review: the unwind destroyed both, and a C
        // caller, told the call failed, destroyed them again).
        let handover = callers.then(|| (std::mem::replace(&mut live.owns_device, false), live.instance_parts.take()));
        let mode = if live.push_desc.is_some() { DescriptorMode::Push } else { DescriptorMode::Sets };
        let max_pipelines = options.max_pipelines;
        let pinned_cache = match options.pinned_cache {
            Some(n) => n,
            None if info.device_type == info::DeviceType::Cpu => 0,
            None => OpenOptions::PINNED_CACHE,
        };
        // A full BAR's types where the device has one, so that a small window listed before it
        // is never chosen; else any mapped device-local type (`BarWrites::On` only).
        let full_bar = memtype::full_bar_types(&info.memory_types.iter().map(|t| (t.flags, t.heap_index)).collect::<Vec<_>>());
        let mapped_types = if full_bar != 0 { full_bar } else { u32::MAX };
        let mapped_buffers = match options.bar_writes {
            BarWrites::Off => false,
            BarWrites::On => memtype::device_mapped(&live.types, mapped_types).is_some(),
            BarWrites::Auto => info.device_type == info::DeviceType::Discrete && full_bar != 0,
        };
        let d = Device {
            shared: SharedRef::new(Arc::new(Shared {
                id: DeviceId::next(),
                fork_gen: fork_generation(),
                info,
                options,
                counts,
                live: RwLock::new(Some(live)),
                lost: AtomicBool::new(false),
                objects: ObjectCounters::default(),
                safe_pinned: AtomicUsize::new(0),
                open_tickets: AtomicUsize::new(0),
                holds: AtomicUsize::new(0),
                owners: Mutex::new(Vec::new()),
                direct_bytes: AtomicU64::new(0),
                staged_bytes: AtomicU64::new(0),
                mapped_bytes: AtomicU64::new(0),
                gathered_bytes: AtomicU64::new(0),
                reading: AtomicUsize::new(0),
                read_ended: AtomicU64::new(0),
                read_thread: AtomicU64::new(0),
                buffer_epoch: AtomicU64::new(0),
                gone: AtomicBool::new(false),
                children: Mutex::new(object::Pruned::new(Vec::new())),
                device_buffers: Mutex::new(object::Pruned::new(std::collections::HashMap::new())),
                slots: Mutex::new(object::Pruned::new(Vec::new())),
                garbage: Mutex::new(Vec::new()),
                pipeline_garbage: Mutex::new(Vec::new()),
                has_garbage: AtomicBool::new(false),
                draining: Mutex::new(()),
                block_cache: Mutex::new(crate::reuse::Cache::new(pinned_cache as u64)),
                stream_semaphores: Mutex::new(StreamSemaphores::default()),
                probe: std::sync::OnceLock::new(),
                probe_retry: AtomicBool::new(false),
                probe_lock: Mutex::new(()),
                probe_tries: std::sync::atomic::AtomicU32::new(0),
                own_memory_refused: AtomicBool::new(false),
                pipelines: Arc::new(pipeline::PipelineCache::new(max_pipelines, mode)),
                copy_choice: queues::Choice::new(queues::CopyQueues::fixed(QueueKind::Copy)),
                mapped_buffers,
                mapped_types,
            })),
        };
        let cache: std::sync::Weak<dyn object::Child> = Arc::downgrade(&d.shared.pipelines) as std::sync::Weak<pipeline::PipelineCache>;
        d.shared.add_child(cache);
        log::debug!("{}: opened {} ({})", d.shared.id, d.shared.info.name, d.shared.info.driver_name);
        after(&d);
        d.choose_copy_queues();
        if d.shared.lost.load(Ordering::Acquire) {
            log::warn!("{}: the device was lost while it was opened", d.shared.id);
            // Nothing else holds it: the teardown runs (and cannot be Busy), on vkhost's
            // objects only where the handles are the caller's (`handover` above).
            let _ = d.destroy();
            return Err(Error::DeviceLost);
        }
        if let Some((owns, parts)) = handover {
            if let Some(l) = d.shared.live.write().unwrap_or_else(PoisonError::into_inner).as_mut() {
                l.owns_device = owns;
                l.instance_parts = parts;
            }
        }
        Ok(d)
    }

    /// Measures which queue synchronous copies should use ([`queues`]), where the device has
    /// both copy engines and a compute queue and the options leave the choice open. A failed
    /// measurement keeps the copy engines for everything (logged).
    fn choose_copy_queues(&self) {
        let s = &self.shared;
        let Ok(g) = s.live() else { return };
        if g.queueless() {
            return;
        }
        if s.options.copy_queue == QueueKind::Compute || g.copy_queues.is_empty() {
            s.copy_choice.set(CopyQueues::fixed(QueueKind::Compute));
            return;
        }
        if !s.options.measure_copy_queues {
            return;
        }
        match queues::at_open(s, &g) {
            Ok(c) => s.copy_choice.set(c),
            Err(e) => log::warn!("{}: measuring the copy queues failed, copies stay on the copy engines: {e}", s.id),
        }
    }

    /// Measures the copy engines against the compute queue now ([`CopyQueues`]) and uses the result
    /// for synchronous copies from here on; returns it. Open does this by itself on devices with
    /// both kinds of queue (`OpenOptions::measure_copy_queues`); this call measures on any device
    /// with queues, one kind or two (on a device with only a compute queue both kinds are that
    /// queue, so the choice changes nothing). `copy_queue: Compute` in the options still sends
    /// every copy to the compute queue.
    ///
    /// Errors: `DeviceDestroyed`, `DeviceLost`, `Unsupported` on a borrowed device without queues,
    /// or the allocation of the probe buffers (128 MiB pinned and 128 MiB on the device; 32 MiB each without copy engines) failing.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::QueueKind;
    ///
    /// let dev = vkhost::Device::open_default()?;
    /// let q = dev.measure_copy_queues()?;
    /// let (copy_engines, compute) = q.measured.expect("just measured");
    /// println!("bulk uploads: {:.1} GB/s on the copy engines, {:.1} on the compute queue",
    ///     copy_engines.bulk_to_device_gbps, compute.bulk_to_device_gbps);
    /// assert_eq!(dev.copy_queues(), q); // in use from now on
    /// if dev.info().transfer_family().is_none() {
    ///     assert_eq!(q.queue_for(true, 4096), QueueKind::Compute); // the only queue there is
    /// }
    /// # Ok(()) }
    /// ```
    pub fn measure_copy_queues(&self) -> Result<CopyQueues> {
        let s = &self.shared;
        let g = s.live()?;
        g.compute_queue()?;
        let c = queues::measure(s, &g)?;
        s.copy_choice.set(c);
        Ok(c)
    }

    /// The floor of a synchronous copy of `len` bytes on this device: `iters` submissions (after
    /// three untimed ones) of one pre-recorded `vkCmdCopyBuffer` between a host buffer of the
    /// memory type of pinned blocks and a device buffer of the type of device buffers, each
    /// submitted and waited the way a synchronous copy waits (a poll of a timeline semaphore,
    /// then a block), on the queue a synchronous copy of that direction and size takes
    /// ([`Device::copy_queues`], or the compute queue with `copy_queue: Compute`; the returned
    /// `queue` says which). A device-to-host copy ends with
    /// the TRANSFER→HOST_READ memory barrier the Vulkan spec requires before the host may read
    /// what the device wrote, as every copy of vkhost's into host memory does. No planning,
    /// lookup, recording or ownership: what the device and the driver alone cost, so that
    /// [`DeviceBuffer::write`](crate::DeviceBuffer::write) and
    /// [`read`](crate::DeviceBuffer::read) of the same size show vkhost's own cost on top
    /// (`vkhost bench`'s `latency_floor_*` testcases; docs/PERFORMANCE.md). On the H200
    /// (2026-12-04, ten processes) a 4 KiB copy's floor was 11.6-12.7 us host to device and
    /// 12.5-13.7 us device to host, 1.6-2.0 us of which is that barrier (no form of it is
    /// cheaper there); `DeviceBuffer::write`/`read` took 0.4-1.0 us more.
    ///
    /// The two buffers are dedicated allocations made for the call (not part of a pinned block
    /// or of a device buffer of yours), released before it returns, unwinding included; so is
    /// the wait for whatever it submitted. The copy context it borrows is the one this thread's
    /// synchronous copies prefer.
    ///
    /// Errors: `InvalidArgument` for `len` 0, `iters` 0 or above [`CopyFloor::MAX_ITERS`], or
    /// `len` above the device's largest allocation; `DeviceDestroyed`, `DeviceLost`,
    /// `Unsupported` on a borrowed device without queues; out of host or device memory for the
    /// buffers.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let f = dev.copy_floor(false, 4096, 20)?;
    /// assert_eq!(f.times.len(), 20);
    /// if dev.options().copy_queue == vkhost::QueueKind::Copy {
    ///     assert_eq!(f.queue, dev.copy_queues().queue_for(false, 4096));
    /// }
    /// println!("4 KiB device to host: at least {:?} on {:?}", f.median(), f.queue);
    /// assert!(dev.copy_floor(true, 0, 20).is_err());
    /// assert!(dev.copy_floor(true, 4096, vkhost::CopyFloor::MAX_ITERS + 1).is_err());
    /// # Ok(()) }
    /// ```
    pub fn copy_floor(&self, to_device: bool, len: u64, iters: usize) -> Result<CopyFloor> {
        // A destroyed device answers that first, whatever the arguments (issue 2).
        let s = &self.shared;
        let g = s.live()?;
        if len == 0 || iters == 0 || iters > CopyFloor::MAX_ITERS {
            return Err(Error::invalid(format!(
                "copy_floor needs a length above 0 and a count in 1..={} (len {len}, iters {iters})",
                CopyFloor::MAX_ITERS
            )));
        }
        g.compute_queue()?;
        queues::floor(s, &g, to_device, len, iters)
    }

    /// The queues synchronous copies use, by direction and size, with the measurement behind
    /// the choice (see [`Device::measure_copy_queues`]).
    ///
    /// One exception, on devices with two or more copy-engine queues: a bulk copy this choice
    /// sends to the compute queue while another thread's bulk copy runs the other way (or
    /// within 10 ms of the end of the last such pair) goes to the copy engines instead, uploads
    /// on one and downloads on the other. On the H200 a write and a read at once moved 48-53
    /// GB/s in sum on the one compute queue and 57-59 on two copy engines (docs/PERFORMANCE.md),
    /// while alone the compute queue is the faster by 1-3.5%.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::QueueKind;
    ///
    /// let dev = vkhost::Device::open_default()?;
    /// let q = dev.copy_queues();
    /// let small = q.queue_for(false, 4096);
    /// let bulk = q.queue_for(false, 256 << 20);
    /// println!("downloads: 4 KiB on {small:?}, 256 MiB on {bulk:?}");
    /// if dev.options().copy_queue == QueueKind::Compute {
    ///     assert_eq!((small, bulk), (QueueKind::Compute, QueueKind::Compute));
    /// }
    /// # Ok(()) }
    /// ```
    pub fn copy_queues(&self) -> CopyQueues {
        self.shared.copy_choice.get()
    }

    /// [`Device::from_raw`]'s device layer, running `after` on the device once it is made.
    ///
    /// # Safety
    /// As for [`Device::from_raw`].
    pub(crate) unsafe fn wrap_raw(
        raw: RawDevice,
        ownership: Ownership,
        external_memory_host: bool,
        opts: &OpenOptions,
        after: AfterOpen,
    ) -> Result<Device> {
        // SAFETY: the caller guarantees the handles are valid.
        let pds = unsafe { raw.instance.enumerate_physical_devices() }.call("vkEnumeratePhysicalDevices")?;
        let index = pds.iter().position(|&p| p == raw.physical_device).ok_or(Error::NoDevice)?;
        let mut info = info::query(&raw.instance, raw.physical_device, index);
        if !external_memory_host {
            info.host_import_alignment = None;
        }
        // vkhost cannot tell whether the caller enabled VK_KHR_push_descriptor: launches on
        // wrapped devices use descriptor sets (`push` false below); `info` keeps the fact.
        opts.validate(&info)?;
        check_raw_queues(&info, &raw)?;
        let parts = InstanceParts { entry: raw.entry.clone(), instance: raw.instance.clone(), debug: None, pump: None };
        let tfam = raw.copy_family.map(|f| (f, raw.copy_queue_indices.clone()));
        let owned = ownership == Ownership::Owned;
        let mut live = Self::assemble(
            Some(parts),
            owned,
            raw.physical_device,
            &info,
            raw.device,
            Some((raw.compute_family, raw.compute_queue_index)),
            tfam,
            false,
        )?;
        if !owned {
            live.instance_parts = None;
        }
        Self::wrap(live, info, Self::wrapped_options(opts), Arc::new(ValidationCounts::default()), true, after)
    }

    /// [`Device::from_raw_borrowed`]'s device layer, running `after` on the device once it is
    /// made.
    ///
    /// # Safety
    /// As for [`Device::from_raw_borrowed`].
    pub(crate) unsafe fn wrap_borrowed(raw: BorrowedDevice, opts: &OpenOptions, after: AfterOpen) -> Result<Device> {
        // SAFETY: the caller guarantees the handles are valid.
        let pds = unsafe { raw.instance.enumerate_physical_devices() }.call("vkEnumeratePhysicalDevices")?;
        let index = pds.iter().position(|&p| p == raw.physical_device).ok_or(Error::NoDevice)?;
        let mut info = info::query(&raw.instance, raw.physical_device, index);
        if !raw.external_memory_host {
            info.host_import_alignment = None;
        }
        opts.validate(&info)?;
        let parts = InstanceParts { entry: raw.entry.clone(), instance: raw.instance.clone(), debug: None, pump: None };
        let mut live = Self::assemble(Some(parts), false, raw.physical_device, &info, raw.device, None, None, false)?;
        live.instance_parts = None;
        Self::wrap(live, info, Self::wrapped_options(opts), Arc::new(ValidationCounts::default()), true, after)
    }

    /// Whether this is a borrowed device without queues ([`Device::from_raw_borrowed`]).
    /// `false` after destroy.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// assert!(!dev.is_borrowed()); // vkhost's own device, with queues
    /// # Ok(()) }
    /// ```
    pub fn is_borrowed(&self) -> bool {
        self.shared.live_any().is_ok_and(|l| l.queueless())
    }

    /// The interop handles. Errors with `DeviceDestroyed` after `destroy`, and `Unsupported` on
    /// a borrowed device without queues ([`Device::from_raw_borrowed`]: the caller has the
    /// handles).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let raw = dev.raw()?;
    /// assert_eq!(raw.copy_family.is_some(), !raw.copy_queue_indices.is_empty());
    /// // SAFETY: a plain query on live handles.
    /// let props = unsafe { raw.instance.get_physical_device_properties(raw.physical_device) };
    /// assert_eq!(props.vendor_id, dev.info().vendor_id);
    /// dev.destroy()?;
    /// assert_eq!(dev.raw().unwrap_err(), vkhost::Error::DeviceDestroyed);
    /// # Ok(()) }
    /// ```
    pub fn raw(&self) -> Result<RawDevice> {
        let l = self.shared.live_any()?;
        let compute = l.compute_queue()?;
        Ok(RawDevice {
            entry: l.entry.clone(),
            instance: l.instance.clone(),
            physical_device: l.physical,
            device: l.device.clone(),
            compute_family: compute.family,
            compute_queue_index: compute.index,
            copy_family: l.copy_queues.first().map(|q| q.family),
            copy_queue_indices: l.copy_queues.iter().map(|q| q.index).collect(),
        })
    }

    /// The process-unique id of this device.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let buf = dev.alloc_buffer(64)?;
    /// assert_eq!(buf.device().id(), dev.id());
    /// # Ok(()) }
    /// ```
    pub fn id(&self) -> DeviceId {
        self.shared.id
    }

    /// The physical device's facts.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let info = dev.info();
    /// println!("{}: Vulkan {}, driver {}", info.name, info.api_version, info.driver_name);
    /// assert!(info.max_memory_allocation_size > 0);
    /// # Ok(()) }
    /// ```
    pub fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    /// The options the device was opened with.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let opts = vkhost::OpenOptions { max_pipelines: 8, ..Default::default() };
    /// let dev = vkhost::Device::open_default_with(&opts)?;
    /// assert_eq!(dev.options().max_pipelines, 8);
    /// # Ok(()) }
    /// ```
    pub fn options(&self) -> &OpenOptions {
        &self.shared.options
    }

    /// How long this device's staging threads poll for the next batch before they sleep:
    /// [`OpenOptions::staging_spin`] where set, else the default for the device's kind (1 ms on
    /// GPUs, none on CPU drivers).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use std::time::Duration;
    /// let opts = vkhost::OpenOptions { staging_spin: Some(Duration::from_micros(50)), ..Default::default() };
    /// let dev = vkhost::Device::open_default_with(&opts)?;
    /// assert_eq!(dev.staging_spin(), Duration::from_micros(50));
    /// # Ok(()) }
    /// ```
    pub fn staging_spin(&self) -> std::time::Duration {
        submit::staging_spin(&self.shared)
    }

    /// The largest region of this device's copies that do not go through a staging buffer
    /// (direct copies of host memory, stream copies between device buffers):
    /// [`OpenOptions::copy_piece`] where set, else the default for the device's kind
    /// ([`OpenOptions::CPU_COPY_PIECE`] on CPU devices, 1 GiB on every other type).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Device, DeviceType, OpenOptions};
    /// let dev = Device::open_default()?;
    /// if dev.options().copy_piece.is_none() && dev.info().device_type == DeviceType::Cpu {
    ///     assert_eq!(dev.copy_piece(), OpenOptions::CPU_COPY_PIECE as u64);
    /// }
    /// let dev = Device::open_default_with(&OpenOptions { copy_piece: Some(1 << 20), ..Default::default() })?;
    /// assert_eq!(dev.copy_piece(), 1 << 20);
    /// # Ok(()) }
    /// ```
    pub fn copy_piece(&self) -> u64 {
        self.shared.copy_piece()
    }

    /// Validation-layer error messages seen so far (0 when validation is off).
    ///
    /// The layer's reports about a fault of its own are not among them: they are counted by
    /// [`validation_layer_faults`](Self::validation_layer_faults).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?; // VKHOST_VALIDATION=1 turns the layer on
    /// dev.alloc_buffer(4096)?.write(0, &[1; 4096])?;
    /// assert_eq!(dev.validation_errors(), 0, "{:?}", dev.last_validation_error());
    /// # Ok(()) }
    /// ```
    pub fn validation_errors(&self) -> u64 {
        self.shared.counts.errors()
    }

    /// The most recent validation-layer error message, if any.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// dev.alloc_buffer(64)?.write(0, &[1; 64])?;
    /// if let Some(msg) = dev.last_validation_error() {
    ///     panic!("{} validation error(s), the last: {msg}", dev.validation_errors());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn last_validation_error(&self) -> Option<String> {
        self.shared.counts.last_error()
    }

    /// This device's validation-message counts as a handle that outlives the device: read after
    /// the last handle is gone, it includes what the layer reported during the teardown
    /// (vkDestroyDevice's reports of objects left undestroyed), which
    /// [`validation_errors`](Self::validation_errors) cannot be asked for any more.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let counter = dev.validation_counter();
    /// dev.alloc_buffer(64)?.write(0, &[1; 64])?;
    /// assert!(!counter.is_final());
    /// drop(dev); // the last handle: the device is torn down
    /// assert!(counter.is_final());
    /// assert_eq!(counter.errors(), 0, "{:?}", counter.last_error());
    /// # Ok(()) }
    /// ```
    pub fn validation_counter(&self) -> ValidationCounter {
        ValidationCounter(self.shared.counts.clone())
    }

    /// Validation-layer warnings seen so far.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// dev.alloc_buffer(64)?.write(0, &[1; 64])?;
    /// if !dev.validation_enabled() {
    ///     assert_eq!(dev.validation_warnings(), 0); // nothing listens without the layer
    /// }
    /// println!("{} validation warning(s)", dev.validation_warnings());
    /// # Ok(()) }
    /// ```
    pub fn validation_warnings(&self) -> u64 {
        self.shared.counts.warnings()
    }

    /// Reports the validation layer made about a fault of its own, not of the program, which
    /// [`validation_errors`](Self::validation_errors) leaves out; each is logged as a warning.
    ///
    /// One such report is known: `UNASSIGNED-VkSemaphore-state-timeout` (layer 1.3.239; later
    /// layers name it `INTERNAL-ERROR-VkSemaphore-state-timeout`), "most likely a validation bug"
    /// in the layer's own words. With synchronization validation on, a vkWaitSemaphores that
    /// another thread's vkSignalSemaphore wakes can stall in the layer for 10 s, waiting under
    /// the layer's lock for the layer's record of that signal, and is then reported. A plain
    /// program that waits on a timeline semaphore in one thread and signals it in another shows
    /// it; vkhost does this when it waits for a caller's semaphore
    /// ([`record_copy`](crate::host::record_copy)'s hooks).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// dev.alloc_buffer(64)?.write(0, &[1; 64])?;
    /// assert_eq!(dev.validation_layer_faults(), 0);
    /// # Ok(()) }
    /// ```
    pub fn validation_layer_faults(&self) -> u64 {
        self.shared.counts.layer_faults()
    }

    /// Whether the validation layer is on for this device, with vkhost counting its messages
    /// ([`validation_errors`](Self::validation_errors)): always false for a device vkhost did
    /// not create ([`from_raw`](Self::from_raw), [`from_raw_borrowed`](Self::from_raw_borrowed)),
    /// whose instance is the caller's.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// assert_eq!(dev.validation_enabled(), dev.options().validation);
    /// # Ok(()) }
    /// ```
    pub fn validation_enabled(&self) -> bool {
        self.shared.options.validation
    }

    /// Vulkan objects this device's vkhost code has alive now. What waits for the background
    /// releaser and the freed pinned blocks kept for reuse count as gone: this call frees them
    /// first ([`release_queued`](Self::release_queued)), so the counts are exact.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let before = dev.live_objects();
    /// let pinned = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// assert_eq!(dev.live_objects().memories, before.memories + 1);
    /// drop(pinned);
    /// assert_eq!(dev.live_objects().memories, before.memories);
    /// # Ok(()) }
    /// ```
    pub fn live_objects(&self) -> LiveObjects {
        // Objects queued for the background releaser (an unregister's import) and freed pinned
        // blocks kept for reuse count as gone: release them now, so the counts are exact.
        self.release_queued();
        self.shared.objects.snapshot()
    }

    /// What the device's cache of freed pinned blocks holds now, its cap and how many blocks
    /// it gave out again (see [`OpenOptions::pinned_cache`]).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{host, OpenOptions};
    /// let dev = vkhost::Device::open_default_with(&OpenOptions { pinned_cache: Some(1 << 20), ..Default::default() })?;
    /// let a = host::alloc_pinned(&dev, 8192)?;
    /// host::free_pinned(&dev, a)?;
    /// assert_eq!((dev.pinned_cache().blocks, dev.pinned_cache().bytes), (1, 8192));
    /// let b = host::alloc_pinned(&dev, 8192)?; // the kept block, not a new allocation
    /// assert_eq!((dev.pinned_cache().blocks, dev.pinned_cache().reused), (0, 1));
    /// host::free_pinned(&dev, b)?;
    /// # Ok(()) }
    /// ```
    pub fn pinned_cache(&self) -> crate::PinnedCacheStats {
        if self.shared.forked() {
            // The parent's blocks, and a lock a parent thread may have held at the fork.
            return crate::PinnedCacheStats::default();
        }
        lock(&self.shared.block_cache).stats()
    }

    /// Frees now, on this thread, the pinned blocks kept for reuse
    /// ([`OpenOptions::pinned_cache`]); returns their bytes, each block counted in whole 4 KiB
    /// pages (as against the cap). Later frees fill the cache again.
    /// [`release_queued`](Self::release_queued) does this and more. Does nothing after the
    /// device was destroyed (teardown freed them).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default_with(&vkhost::OpenOptions { pinned_cache: Some(1 << 20), ..Default::default() })?;
    /// drop(vkhost::PinnedBuffer::new(&dev, 4096)?);
    /// assert_eq!(dev.trim_pinned_cache(), 4096);
    /// assert_eq!(dev.pinned_cache().blocks, 0);
    /// # Ok(()) }
    /// ```
    pub fn trim_pinned_cache(&self) -> u64 {
        match self.shared.live_any() {
            Ok(l) => self.shared.trim_block_cache(&l),
            Err(_) => 0,
        }
    }

    /// Releases now, on this thread, what waits for the background releaser: the imports and
    /// blocks that `unregister`, `free_pinned` and dropped guards handed over once no work used
    /// them (unpinning a 1 GiB import took 25-30 ms on the H200; `unregister` returns before
    /// it), and the freed pinned blocks kept for reuse ([`OpenOptions::pinned_cache`]; only
    /// those: [`trim_pinned_cache`](Self::trim_pinned_cache)). Returns when everything queued
    /// before the call is released, including a release another thread had started. Objects
    /// that submitted work still holds are not queued yet: they go when that work is reaped.
    /// Does nothing after the device was destroyed.
    ///
    /// For measurements (time a `register` without the previous import's release beside it) and
    /// for programs that want the memory's pins gone at a known point.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::host;
    /// let dev = vkhost::Device::open_default()?;
    /// let before = dev.live_objects();
    /// let mut pages = vec![0u8; 1 << 20];
    /// // SAFETY: `pages` outlives the unregister below.
    /// unsafe { host::register(&dev, pages.as_mut_ptr(), pages.len()) }?;
    /// host::unregister(&dev, pages.as_mut_ptr())?;
    /// dev.release_queued(); // the import is gone, not only queued
    /// assert_eq!(dev.live_objects(), before);
    /// # Ok(()) }
    /// ```
    pub fn release_queued(&self) {
        if let Ok(l) = self.shared.live_any() {
            self.shared.trim_block_cache(&l);
            self.shared.drain_all_garbage(&l);
            // And the semaphores of streams whose last reference (an event, a batch of another
            // stream) went since: their drop could only mark them.
            self.shared.destroy_deferred(&l);
        }
    }

    /// How kernel launches on this device bind their buffers: pushed descriptors where vkhost
    /// enabled VK_KHR_push_descriptor, descriptor sets otherwise (see [`DescriptorMode`] and
    /// [`crate::kernel`]). Fixed at open.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::kernel::DescriptorMode;
    ///
    /// let dev = vkhost::Device::open_default()?;
    /// match dev.descriptor_mode() {
    ///     DescriptorMode::Push => assert!(dev.info().push_descriptor && dev.options().push_descriptors),
    ///     DescriptorMode::Sets => println!("launches write descriptor sets"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn descriptor_mode(&self) -> DescriptorMode {
        self.shared.pipelines.mode()
    }

    /// Whether `destroy` has run.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// assert!(!dev.is_destroyed());
    /// dev.destroy()?;
    /// assert!(dev.is_destroyed());
    /// # Ok(()) }
    /// ```
    pub fn is_destroyed(&self) -> bool {
        self.shared.live_any().is_err()
    }

    /// Whether the device was lost (a Vulkan call answered `VK_ERROR_DEVICE_LOST`): from then
    /// on every operation but the release paths answers [`Error::DeviceLost`] until `destroy`.
    /// Stays true after `destroy` (which [`Device::is_destroyed`] tells).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// assert!(!dev.is_lost()); // a healthy device; a lost one answers `DeviceLost` first
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.shared.lost.load(Ordering::Acquire)
    }

    /// Waits idle and destroys everything the device owns: imports and pinned blocks (raw
    /// registrations stay as tombstones, raw pinned blocks stay listed until `free_pinned`),
    /// device buffers (their handles become inert), copy contexts, the device, the instance.
    /// Idempotent. `Error::Busy` while a `PinnedBuffer` of this device lives, a
    /// [`crate::host::RecordedCopy`] ticket without a completion hook, or a [`DeviceHold`]. On a borrowed device it
    /// waits for every recorded copy's hook (the caller's semaphore or fence) instead of
    /// vkDeviceWaitIdle.
    ///
    /// A panic out of the process's logger (on a warning the teardown logs) does not cut the
    /// teardown short: every step runs, and the panic resumes from `destroy` once the device is
    /// gone. On a borrowed device, a panic while waiting for the caller's recorded copies leaves
    /// vkhost's objects there leaked rather than freed under work that may still run.
    ///
    /// **In a forked child** (a process forked after the device was opened) `destroy` makes no
    /// Vulkan call: the child's copies of the handles name the parent's driver objects, and
    /// destroying them could break the parent's device. It only marks the device destroyed in
    /// the child (later calls there answer `DeviceDestroyed`), leaking the child's host-side
    /// copies of the bookkeeping, and returns `Ok(())`, never `Busy`. It does not wait for a lock
    /// held by a thread that did not survive the fork: if the device's lock is held, it changes
    /// nothing. Dropping the last handle in a forked child is likewise inert. A child should
    /// `exec` or `_exit`, not use the device.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::Error;
    ///
    /// let dev = vkhost::Device::open_default()?;
    /// let buf = dev.alloc_buffer(4096)?;
    /// let pinned = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// assert!(matches!(dev.destroy(), Err(Error::Busy { .. }))); // the pinned block lives
    /// drop(pinned);
    /// dev.destroy()?;
    /// dev.destroy()?; // idempotent
    /// assert_eq!(buf.write(0, &[1]), Err(Error::DeviceDestroyed)); // the buffer is inert
    /// # Ok(()) }
    /// ```
    pub fn destroy(&self) -> Result<()> {
        if self.shared.forked() {
            if let Ok(mut g) = self.shared.live.try_write() {
                if let Some(live) = g.take() {
                    let _ = self.shared.teardown(live); // forgets, see teardown
                }
            }
            return Ok(());
        }
        let mut g = self.shared.live.write().unwrap_or_else(PoisonError::into_inner);
        let n = self.shared.safe_pinned.load(Ordering::Acquire);
        if g.is_some() && n > 0 {
            return Err(Error::Busy { reason: format!("{n} PinnedBuffer(s) of this device still live") });
        }
        let t = self.shared.open_tickets.load(Ordering::Acquire);
        if g.is_some() && t > 0 {
            return Err(Error::Busy {
                reason: format!("{t} host::RecordedCopy ticket(s) of this device have no completion hook yet (nor were dropped)"),
            });
        }
        let h = self.shared.holds.load(Ordering::Acquire);
        if g.is_some() && h > 0 {
            return Err(Error::Busy { reason: format!("{h} DeviceHold(s) of this device still live") });
        }
        let (panicked, pump) = g.take().map_or((None, None), |live| self.shared.teardown(live));
        drop(g);
        // Out of the lock: a logger may call into this device while the queue drains.
        pump.map(LogPump::close);
        if let Some(p) = panicked {
            // The device is gone, every step ran: now the panic (a user's logger's) goes on.
            std::panic::resume_unwind(p);
        }
        Ok(())
    }

    /// Makes [`Device::destroy`] answer `Busy` until the returned hold is dropped.
    ///
    /// For a caller whose own device work names vkhost's memory outside vkhost's tracking (on a
    /// borrowed device: a runtime's shader reading an import it bound its own VkBuffer to, as
    /// `vkhost-wgpu` does) and that must finish that work before the imports can go. The hold
    /// keeps a handle of the device, so a forgotten hold leaks the device (`destroy` stays
    /// `Busy`), never frees memory in use. `DeviceDestroyed` after destroy.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::Error;
    ///
    /// let dev = vkhost::Device::open_default()?;
    /// let hold = dev.hold()?; // while your own work uses vkhost's memory
    /// assert!(matches!(dev.destroy(), Err(Error::Busy { .. })));
    /// drop(hold); // that work finished
    /// dev.destroy()?;
    /// assert!(matches!(dev.hold(), Err(Error::DeviceDestroyed)));
    /// # Ok(()) }
    /// ```
    pub fn hold(&self) -> Result<DeviceHold> {
        // Counted under the device lock, as `PinnedBuffer::new` is: a concurrent destroy either
        // ran fully before (DeviceDestroyed) or sees the hold.
        let _l = self.shared.live_any()?;
        self.shared.holds.fetch_add(1, Ordering::AcqRel);
        Ok(DeviceHold { dev: self.clone() })
    }

    /// Keeps `owner` alive until the last handle of this device is gone, and drops it after
    /// vkhost's teardown (after every import, pinned block and buffer of the device is
    /// released). For the object that owns a borrowed device's VkDevice
    /// ([`Device::from_raw_borrowed`]): `vkhost-wgpu` keeps the `wgpu::Device` here, so the
    /// VkDevice outlives every vkhost handle, including pinned buffers and registrations that
    /// outlive the caller's wrapper. Several owners drop in the order given. In a forked child
    /// they are leaked, never dropped (see [`Device::destroy`]).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use std::sync::Arc;
    ///
    /// let dev = vkhost::Device::open_default()?;
    /// let owner = Arc::new("the runtime's device"); // what owns a borrowed VkDevice, say
    /// dev.keep_alive(Box::new(owner.clone()));
    /// assert_eq!(Arc::strong_count(&owner), 2);
    /// drop(dev); // the last handle: vkhost tears down, then drops the owner
    /// assert_eq!(Arc::strong_count(&owner), 1);
    /// # Ok(()) }
    /// ```
    pub fn keep_alive(&self, owner: Box<dyn std::any::Any + Send + Sync>) {
        lock(&self.shared.owners).push(owner);
    }

    /// Where registration stands on this device: the granule (alignment) or why not.
    ///
    /// Cached per device: the facts (extension, alignment), the policy, and the import probe run
    /// at open. When it is `Err`, `host::register` is `Unsupported` with this reason and copies
    /// stage.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let mut mine = vec![0u8; 64 << 10];
    /// match dev.host_registration() {
    ///     Ok(granule) => {
    ///         assert!(granule.is_power_of_two());
    ///         let reg = dev.register(&mut mine)?; // imported: copies go direct
    ///         assert_eq!(reg.len(), 64 << 10);
    ///     }
    ///     Err(why) => println!("copies of your memory stage: {why}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn host_registration(&self) -> std::result::Result<usize, String> {
        self.shared.registration()
    }

    /// The import probe's verdict: `None` when it did not run (policy, or the device cannot
    /// import at all) or could not finish for a reason that may pass (out of memory: it runs
    /// again at the next registration), else `Ok(granule)` or what failed.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// match dev.import_probe() {
    ///     None => println!("no verdict: ruled out before any probe, or to be run again"),
    ///     Some(Ok(_)) => assert!(dev.host_registration().is_ok()),
    ///     Some(Err(why)) => println!("the driver advertises imports but the probe failed: {why}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn import_probe(&self) -> Option<std::result::Result<usize, String>> {
        self.shared.probe.get().cloned()
    }

    /// The memory types this device's pinned blocks, imports, staging and device buffers use,
    /// with the reason for each.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let m = dev.memory_choices();
    /// let pinned = m.pinned.expect("Vulkan guarantees a host-coherent type");
    /// println!("pinned blocks: type {} ({})", pinned.index, pinned.reason);
    /// assert!((pinned.index as usize) < dev.info().memory_types.len());
    /// # Ok(()) }
    /// ```
    pub fn memory_choices(&self) -> MemoryChoices {
        let types = self.shared.info.memory_type_flags();
        let host_bits = self.probe_import_bits();
        MemoryChoices {
            pinned: memtype::pinned(&types, u32::MAX),
            // Where `bar_writes` maps device buffers, they live in the mapped VRAM type.
            device_local: if self.shared.mapped_buffers {
                memtype::device_mapped(&types, self.shared.mapped_types)
            } else {
                memtype::device_local(&types, u32::MAX)
            },
            import: host_bits.clone().ok().and_then(|b| memtype::import(&types, b)),
            import_bits: host_bits,
        }
    }

    fn probe_import_bits(&self) -> std::result::Result<u32, String> {
        self.host_registration()?;
        let l = self.shared.live().map_err(|e| e.to_string())?;
        let page = crate::maps::page_size();
        crate::maps::with_probe_page(page, |p| import::host_pointer_bits(&self.shared, &l, p)).map_err(|e| e.to_string())
    }
}

/// From [`Device::hold`]: while it lives, [`Device::destroy`] answers `Busy`.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// let hold: vkhost::DeviceHold = dev.hold()?;
/// assert!(dev.destroy().is_err());
/// drop(hold);
/// assert!(dev.destroy().is_ok());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DeviceHold {
    dev: Device,
}

impl DeviceHold {
    /// The device held.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let hold = dev.hold()?;
    /// assert_eq!(hold.device().id(), dev.id());
    /// # Ok(()) }
    /// ```
    pub fn device(&self) -> &Device {
        &self.dev
    }
}

impl Drop for DeviceHold {
    fn drop(&mut self) {
        self.dev.shared.holds.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What [`Device::memory_choices`] reports.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// let vkhost::MemoryChoices { pinned, device_local, import, import_bits } = dev.memory_choices();
/// assert!(pinned.is_some() && device_local.is_some());
/// match import_bits {
///     Ok(bits) => println!("host pages import into types {bits:#b}, vkhost picks {import:?}"),
///     Err(why) => assert!(import.is_none(), "no registration: {why}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryChoices {
    /// The type of pinned blocks and staging buffers ([`memtype::pinned`]).
    pub pinned: Option<Choice>,
    /// The type of device buffers: [`memtype::device_mapped`] where
    /// [`OpenOptions::bar_writes`] maps them (a full BAR with `Auto`, or `On`), else
    /// [`memtype::device_local`].
    pub device_local: Option<Choice>,
    /// The type imports of an anonymous page get ([`memtype::import`]); `None` when
    /// registration is off or no allowed type is host-coherent.
    pub import: Option<Choice>,
    /// The memory-type bits vkGetMemoryHostPointerPropertiesEXT gave for an anonymous page.
    pub import_bits: std::result::Result<u32, String>,
}
