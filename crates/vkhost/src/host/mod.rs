//! Pinned and registered host memory: the seed's module (`Vulkan_api_host`) in Rust.
//!
//! Two sources of a host range that a VkBuffer covers:
//! - **pinned blocks** ([`alloc_pinned`]): driver memory (vkAllocateMemory), bound to a buffer
//!   and mapped until [`free_pinned`] or the device's destroy;
//! - **registrations** ([`register`]): the caller's pages, imported with
//!   VK_EXT_external_memory_host, rounded outward to max(page size, minImportedHostPointerAlignment).
//!
//! A copy between such a range and a device buffer is one vkCmdCopyBuffer with no staging
//! buffer and no host memcpy. A copy whose host range lies inside a buffer's covered range uses
//! it, whether or not it names the allocated or registered bytes exactly ([`find`]). A range
//! crossing several entries and gaps goes direct where covered and staged elsewhere, in one
//! submission where the gaps fit one staging chunk ([`CopyPath::Mixed`]).
//!
//! One buffer per (device, address). When a device is destroyed its imports and blocks are
//! destroyed: registrations stay as tombstones so a late [`unregister`] succeeds quietly, once;
//! pinned blocks are unmapped but stay listed until [`free_pinned`], which then succeeds without
//! touching them. Once no handle or guard of the destroyed device is left, nobody can name them:
//! the next entry any device lists drops them ([`HostStats::tombstones`] counts those listed).
//!
//! **Address reuse (the seed's caveat).** The table is keyed by address within a device. A block
//! whose device was destroyed stays listed under its old address until `free_pinned`; if the
//! allocator hands that address out again (to a block of another device, or to any other use),
//! a late `free_pinned` of the old block still names the old listing only, because the key
//! includes the device: it succeeds quietly and releases nothing. What the table cannot tell is
//! intent: a caller who mixes up which device a pointer came from gets `NotPinned` or frees the
//! other listing. Free every block before destroying its device.
//!
//! Ownership (see `crate::track` and `crate::resource`): an entry owns its import or block as an
//! `Arc<Resource>`. Work that names it — a synchronous copy, a stream batch — holds the resource
//! while recording, notes its use, and keeps an `Arc` until it is reaped. `unregister` and
//! `free_pinned` remove the entry at once (later lookups miss; the range may be registered
//! again). An unregister then closes the import and returns only once no submitted work can read
//! or write the caller's bytes; the import's Vulkan objects are then freed on vkhost's
//! background releaser thread ([`crate::Device::release_queued`] waits for it). `free_pinned` (and a `PinnedBuffer`'s
//! drop) likewise returns once the copies and launches in flight that name the block are done,
//! as `cudaFreeHost` does, but copies recorded into a caller's command buffers (a
//! `RecordedCopy`, which only the caller submits) do not hold it up: the block, which vkhost
//! owns, goes when the last work holding it is reaped.
//!
//! **Borrowed devices** ([`crate::Device::from_raw_borrowed`]): vkhost has no queue, so the copies
//! are the caller's, recorded with [`record_copy`] into its command buffers (direct pieces only;
//! uncovered bytes are `NotRegistered`); the [`RecordedCopy`] ticket's completion hook
//! (`completes_at` a timeline value, or `completes_with_fence`) is what `unregister` waits for.
//!
//! Entries owned by a safe guard ([`PinnedBuffer`](crate::PinnedBuffer),
//! [`Registration`](crate::Registration), [`HostRange`](crate::HostRange)) are marked: the raw
//! [`free_pinned`] and [`unregister`] refuse them with [`Error::OwnedByGuard`], which names the
//! guard type, and change nothing.
//!
//! # Example
//!
//! ```
//! # fn main() -> vkhost::Result<()> {
//! use vkhost::host::{self, CopyPath};
//! let dev = vkhost::Device::open_default()?;
//! let gpu = dev.alloc_buffer(4096)?;
//! let block = host::alloc_pinned(&dev, 4096)?;
//! // SAFETY: a live pinned block of 4096 bytes, with no device work pending on it.
//! unsafe { block.as_ptr().write_bytes(7, 4096) };
//! // The registry knows which VkBuffer covers those bytes...
//! assert!(host::find(&dev, block, 4096).is_some());
//! // ...so the copy is one vkCmdCopyBuffer from it, no staging.
//! // SAFETY: the block is readable for 4096 bytes during the call.
//! let path = unsafe { host::copy_to_device(&dev, block.as_ptr(), 4096, &gpu, 0) }?;
//! assert_eq!(path, CopyPath::Direct);
//! host::free_pinned(&dev, block)?;
//! # Ok(()) }
//! ```

pub(crate) mod copy;
pub(crate) mod owners;
pub(crate) mod probe;
pub(crate) mod range;
pub(crate) mod record;
pub(crate) mod registry;
pub(crate) mod safe;

use crate::buffer::DeviceBuffer;
use crate::device::import;
use crate::device::object::BufferObj;
use crate::device::submit::Dir;
use crate::device::{Device, Shared, lock};
use crate::error::{Error, Result};
use crate::maps;
use crate::resource::Resource;
use ash::vk;
use registry::{Entry, Kind};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

pub use crate::maps::page_size;
pub(crate) use copy::{Plan, check_host_range, copy_to_device_impl, copy_to_host_impl, cover, part_left, plan, record, record_gathered};
pub(crate) use owners::{Cell, Imports};
use owners::{Reg, note_lister, registry};
pub use record::{Direction, RecordedCopy, reap_recorded, record_copy};
pub use registry::round_out;

/// What ran for a copy.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::host::{self, CopyPath};
/// let dev = vkhost::Device::open_default()?;
/// let gpu = dev.alloc_buffer(256)?;
/// let pageable = vec![1u8; 256];
/// let pinned = vkhost::PinnedBuffer::new(&dev, 256)?;
/// // SAFETY: (both) each source is readable for 256 bytes during the call.
/// let staged = unsafe { host::copy_to_device(&dev, pageable.as_ptr(), 256, &gpu, 0) }?;
/// let direct = unsafe { host::copy_to_device(&dev, pinned.as_ptr(), 256, &gpu, 0) }?;
/// assert_eq!((staged, direct), (CopyPath::Staged, CopyPath::Direct));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyPath {
    /// Every byte went straight between a host buffer and the device buffer.
    Direct,
    /// Every byte went through staging memory.
    Staged,
    /// Some of each.
    Mixed,
    /// A small write stored by the CPU into mapped device memory: no copy was submitted (see
    /// [`BarWrites`](crate::BarWrites)). Also a write that
    /// [`bar_assist`](crate::OpenOptions::bar_assist) shared between stores and the copy
    /// engine (`DeviceBuffer::write`, which does not return the path).
    Mapped,
}

/// Copy-path counters and registry sizes.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::host::{self, HostStats};
/// let dev = vkhost::Device::open_default()?;
/// assert_eq!(host::device_stats(&dev), HostStats::default(), "a fresh device has copied nothing");
/// let mut pinned = vkhost::PinnedBuffer::new(&dev, 4096)?;
/// dev.alloc_buffer(4096)?.read(0, &mut pinned)?; // a copy into the pinned block
/// let s = host::device_stats(&dev);
/// assert_eq!((s.direct_bytes, s.staged_bytes, s.live_pinned), (4096, 0, 1));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostStats {
    /// Bytes copied directly from or to pinned or registered memory.
    pub direct_bytes: u64,
    /// Bytes copied through staging memory.
    pub staged_bytes: u64,
    /// Bytes written by CPU stores into mapped device memory ([`CopyPath::Mapped`]).
    pub mapped_bytes: u64,
    /// Bytes of direct stream copies that went through a stream's device scratch buffer
    /// ([`OpenOptions::gather_regions`](crate::OpenOptions::gather_regions)), counted once their
    /// batch is submitted: counted in `direct_bytes` too.
    pub gathered_bytes: u64,
    /// Live registrations (imports whose device is alive).
    pub live_imports: usize,
    /// Live pinned blocks (whose device is alive).
    pub live_pinned: usize,
    /// Entries of destroyed devices still listed: tombstones a late `unregister` or
    /// `free_pinned` takes out. Once a device's last handle (and every guard of it) is gone, nobody
    /// can name them any more, and the next entry any device lists drops them.
    pub tombstones: usize,
}

fn count(reg: &Reg, dev: Option<crate::DeviceId>) -> (usize, usize, usize) {
    let mut imports = 0;
    let mut pinned = 0;
    let mut tombstones = 0;
    let mut tally = |e: &Entry<Option<Cell>>| {
        if e.live && e.cell.as_ref().is_some_and(|c| c.alive()) {
            match e.kind {
                Kind::Registered => imports += 1,
                Kind::Pinned => pinned += 1,
            }
        } else if e.cell.as_ref().is_some_and(|c| !c.alive()) {
            tombstones += 1;
        }
    };
    match dev {
        Some(d) => reg.entries(d).for_each(&mut tally),
        None => {
            for d in reg.device_ids() {
                reg.entries(d).for_each(&mut tally);
            }
        }
    }
    (imports, pinned, tombstones)
}

/// Process-wide counters: bytes by path since start, and live entries now.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// let before = vkhost::host::stats();
/// let mut pinned = vkhost::PinnedBuffer::new(&dev, 4096)?;
/// dev.alloc_buffer(4096)?.read(0, &mut pinned)?; // a direct copy
/// let after = vkhost::host::stats();
/// assert!(after.direct_bytes >= before.direct_bytes + 4096);
/// assert!(after.live_pinned >= 1);
/// # Ok(()) }
/// ```
pub fn stats() -> HostStats {
    let (live_imports, live_pinned, tombstones) = count(&registry(), None);
    HostStats {
        direct_bytes: copy::DIRECT.load(Ordering::Relaxed),
        staged_bytes: copy::STAGED.load(Ordering::Relaxed),
        mapped_bytes: copy::MAPPED.load(Ordering::Relaxed),
        gathered_bytes: copy::GATHERED.load(Ordering::Relaxed),
        live_imports,
        live_pinned,
        tombstones,
    }
}

/// The same counters for one device only (bytes by path through this device). In a forked
/// child the registry is the child's own: a device of the parent's shows no live imports or
/// blocks there, and its byte counters are the parent's up to the fork.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// let gpu = dev.alloc_buffer(1 << 16)?;
/// let mut out = vec![0u8; 1 << 16];
/// gpu.read(0, &mut out)?; // pageable memory: staged
/// let s = vkhost::host::device_stats(&dev);
/// assert_eq!((s.staged_bytes, s.direct_bytes), (1 << 16, 0));
/// # Ok(()) }
/// ```
pub fn device_stats(dev: &Device) -> HostStats {
    let (live_imports, live_pinned, tombstones) = count(&registry(), Some(dev.id()));
    HostStats {
        direct_bytes: dev.shared.direct_bytes.load(Ordering::Relaxed),
        staged_bytes: dev.shared.staged_bytes.load(Ordering::Relaxed),
        mapped_bytes: dev.shared.mapped_bytes.load(Ordering::Relaxed),
        gathered_bytes: dev.shared.gathered_bytes.load(Ordering::Relaxed),
        live_imports,
        live_pinned,
        tombstones,
    }
}

/// Entries listed for a device, tombstones and blocks of destroyed devices included.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::host;
/// let dev = vkhost::Device::open_default()?;
/// let block = host::alloc_pinned(&dev, 4096)?;
/// assert_eq!(host::entries_of(&dev), 1);
/// host::free_pinned(&dev, block)?;
/// assert_eq!(host::entries_of(&dev), 0);
/// # Ok(()) }
/// ```
pub fn entries_of(dev: &Device) -> usize {
    registry().len_of(dev.id())
}

/// Anything that names a host address: raw pointers, `NonNull`, or a plain address.
///
/// The address-based functions of [`crate::host`] take any of them.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::host;
/// let dev = vkhost::Device::open_default()?;
/// let block = host::alloc_pinned(&dev, 4096)?; // a NonNull<u8>
/// // The same bytes, named three ways.
/// assert_eq!(host::find(&dev, block, 16), host::find(&dev, block.as_ptr() as usize, 16));
/// assert_eq!(host::find(&dev, block, 16), host::find(&dev, block.as_ptr().cast_const(), 16));
/// host::free_pinned(&dev, block.as_ptr() as usize)?;
/// # Ok(()) }
/// ```
pub trait HostPtr {
    /// The address as an integer.
    ///
    /// # Example
    ///
    /// ```
    /// use vkhost::host::HostPtr;
    /// let v = [0u8; 8];
    /// let p = v.as_ptr();
    /// assert_eq!(HostPtr::addr(p), p as usize);
    /// assert_eq!(HostPtr::addr(std::ptr::NonNull::from(&v[4])), p as usize + 4);
    /// assert_eq!(HostPtr::addr(0x1000_usize), 0x1000);
    /// ```
    fn addr(self) -> usize;
}
impl<T> HostPtr for *const T {
    fn addr(self) -> usize {
        self as usize
    }
}
impl<T> HostPtr for *mut T {
    fn addr(self) -> usize {
        self as usize
    }
}
impl<T> HostPtr for NonNull<T> {
    fn addr(self) -> usize {
        self.as_ptr() as usize
    }
}
impl HostPtr for usize {
    fn addr(self) -> usize {
        self
    }
}

/// Allocates `len` bytes of pinned host memory, mapped until [`free_pinned`] or the device's
/// destroy (which unmaps it; see the module docs on tombstones) and bound to a
/// VkBuffer (TRANSFER_SRC | TRANSFER_DST | STORAGE_BUFFER), and lists it in the registry.
/// Driver memory (vkAllocateMemory: no host memory is handed to the driver, as the seed's
/// `allocate_pinned` says), except blocks larger than one allocation (below) and, only when
/// asked for with `OpenOptions::pinned_huge_min` (off by default), blocks of at least that size,
/// which are then vkhost's own huge-page memory imported into the same memory type where the
/// device allows it (on the H200 they allocated and freed faster and copied the same).
///
/// Memory type, best first: HOST_VISIBLE|HOST_COHERENT|HOST_CACHED not DEVICE_LOCAL; then
/// HOST_VISIBLE|HOST_COHERENT not DEVICE_LOCAL; only then DEVICE_LOCAL host-visible (the only
/// kind on UMA/CPU devices). With imports off by policy every block that fits one allocation
/// is the driver's.
///
/// A freed driver block of exactly `len` bytes that the device kept
/// ([`OpenOptions::pinned_cache`](crate::OpenOptions::pinned_cache), on GPUs by default) is
/// reused instead of a new allocation: the same buffer and mapping, listed anew, holding what
/// its last user wrote.
///
/// A huge-page block is one import of vkhost's own 2 MiB-aligned anonymous memory, faulted in
/// first. A block larger than maxMemoryAllocationSize (or `OpenOptions::max_import_piece`) is
/// such memory imported in pieces behind one entry (needs host registration; the block stays
/// one contiguous range, `find` answers within a piece).
///
/// **Who may free it.** The raw API is keyed by address, as the seed's is: any code that holds
/// the [`Device`] may [`free_pinned`] a raw block by its address (only a
/// [`PinnedBuffer`](crate::PinnedBuffer)'s block is refused), and [`Device::destroy`] unmaps
/// raw blocks (they stay listed as tombstones, as the seed asks). So `unsafe` code that
/// dereferences a raw block must know that no other code frees it meanwhile: keep raw blocks
/// private to the component that made them, and hold a [`DeviceHold`](crate::DeviceHold)
/// ([`Device::hold`]: `destroy` answers `Busy` while it lives) for as long as you touch the
/// bytes. Memory shared between components belongs in a `PinnedBuffer`, whose block no raw
/// call can free and whose life keeps `destroy` `Busy`.
///
/// Errors: `len == 0` → `InvalidArgument`; a block too large for one allocation where imports
/// are unavailable → `Unsupported`; no memory → `OutOfHostMemory` or the driver's error;
/// `AlreadyRegistered` only if four blocks in a row land on addresses that stale registrations
/// still cover (registered memory unmapped without unregistering, e.g. a forgotten
/// [`Registration`](crate::Registration)): a block that lands on one is kept while the next is
/// made, then released.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::host;
/// let dev = vkhost::Device::open_default()?;
/// let block = host::alloc_pinned(&dev, 1024)?;
/// let hold = dev.hold()?; // `destroy` is `Busy` while we touch the block
/// // SAFETY: the block is mapped for 1024 bytes until the `free_pinned` below (no other code
/// // knows its address, and `hold` keeps the device from being destroyed), and no device work
/// // names it yet.
/// let bytes = unsafe { std::slice::from_raw_parts_mut(block.as_ptr(), 1024) };
/// bytes.fill(0x5A);
/// let gpu = dev.alloc_buffer(1024)?;
/// gpu.write(0, bytes)?; // never staged: the device reads the block itself
/// host::free_pinned(&dev, block)?; // `bytes` is not used after this
/// drop(hold);
/// assert!(matches!(host::alloc_pinned(&dev, 0), Err(vkhost::Error::InvalidArgument { .. })));
/// # Ok(()) }
/// ```
pub fn alloc_pinned(dev: &Device, len: usize) -> Result<NonNull<u8>> {
    alloc_pinned_entry(dev, len, None).map(|(p, _)| p)
}

/// [`alloc_pinned`], marking the entry as owned by the `guard` type when there is one.
pub(crate) fn alloc_pinned_entry(dev: &Device, len: usize, guard: Option<&'static str>) -> Result<(NonNull<u8>, Arc<Imports>)> {
    let s = &dev.shared;
    // A destroyed device answers that before anything is asked of the arguments (issue 2:
    // after destroy, every operation on the device returns `DeviceDestroyed`).
    let l = s.live()?;
    if len == 0 {
        return Err(Error::invalid("alloc_pinned of zero bytes"));
    }
    // x86-64 and AArch64 user address spaces are at most 2^47 to 2^52 bytes: a larger block can
    // never be mapped, whatever memory the machine has.
    if len as u64 > 1 << 52 {
        return Err(Error::invalid(format!("alloc_pinned of {len} bytes: larger than any address space")));
    }
    let page = page_size();
    let piece = s.import_piece(page);
    // A block whose address a stale registration still covers (registered memory freed
    // without unregistering, e.g. a forgotten `Registration`, and the address handed out
    // again) cannot be listed. It is kept while the next one is made (so that one lands
    // elsewhere), then released: a leaked registration refuses its own address, not every
    // later block.
    let mut refused: Vec<Arc<Imports>> = Vec::new();
    let r = loop {
        let (ptr, imports, reused) = match new_block(s, &l, len, piece) {
            Ok(b) => b,
            Err(e) => break Err(e),
        };
        let start = ptr.as_ptr() as usize;
        let entry = Entry {
            kind: Kind::Pinned,
            user: start..start + len,
            covered: start..start + len,
            live: true,
            guard,
            cell: Some(Cell::new(imports.clone())),
        };
        note_lister(s);
        if registry().insert(s.id, entry).is_ok() {
            if reused {
                s.count_block_reuse();
            }
            break Ok((ptr, imports));
        }
        refused.push(imports);
        if refused.len() == PINNED_TRIES {
            break Err(Error::AlreadyRegistered);
        }
    };
    for imports in &refused {
        // SAFETY: objects of ours never listed: fresh ones no work ever named, or a kept block
        // whose work was all reaped before it was kept.
        unsafe { release_fresh(s, &l, &imports.parts) };
    }
    r
}

/// Destroys `parts`' Vulkan objects now, on this thread, instead of through the releaser.
///
/// # Safety
/// The parts are imports or allocations of the device `s`, `l` that no registry entry lists
/// and no pending or future work names (fresh ones, or a kept block taken from the cache).
unsafe fn release_fresh(s: &Shared, l: &crate::device::Live, parts: &[Arc<Resource>]) {
    for p in parts {
        // SAFETY: the caller's contract: no pending or future work uses the buffer.
        unsafe { p.obj.release_now(s, l) };
    }
}

/// How many blocks [`alloc_pinned_entry`] makes before it gives up on addresses that stale
/// registrations cover.
const PINNED_TRIES: usize = 4;

/// A pinned block of `len` bytes, not listed yet, and whether it came from the device's cache:
/// a kept driver block of that size first (whatever path would make a new one now: a block
/// made by the driver while huge-page blocks were off, e.g. during an import probe's retry, is
/// still reused), else vkhost's own huge-page memory (`OpenOptions::pinned_huge_min`) or a new
/// driver allocation, in pieces beyond `piece` bytes.
fn new_block(s: &Arc<Shared>, l: &crate::device::Live, len: usize, piece: usize) -> Result<(NonNull<u8>, Arc<Imports>, bool)> {
    if len <= piece {
        if let Some((b, ptr)) = import::kept_pinned_block(s, l, len) {
            return Ok((ptr, Imports::one(Resource::new(s, BufferObj::new(s, b, len as u64)), len), true));
        }
    }
    // vkhost's own huge-page memory (`OpenOptions::pinned_huge_min`) where the device would
    // import it into the memory type it gives driver-allocated blocks (the seed's order);
    // anything else that stops that path leaves the block to the driver. (The type is ranked
    // over every type, not the buffer's allowed ones: that can only refuse the import.)
    // A refusal that will recur (see `refusal_recurs`) sends every later block of the device
    // straight to the driver.
    let mut huge = None;
    // Not while the import probe is still to be run again (it ran out of memory at open): such
    // a refusal is no verdict on imports, so it must not set `own_memory_refused`.
    if len <= piece && huge_pinned(s, len) && !s.own_memory_refused.load(Ordering::Relaxed) && !s.probe_retry.load(Ordering::Acquire) {
        if let Some(w) = crate::memtype::pinned(&l.types, u32::MAX).map(|c| c.index) {
            match huge_block(s, l, len, Some(w)) {
                Ok(h) => huge = Some(h),
                Err(Error::DeviceLost) => return Err(Error::DeviceLost),
                Err(e) => {
                    if refusal_recurs(&e) {
                        s.own_memory_refused.store(true, Ordering::Relaxed);
                    }
                    log::debug!("{}: huge-page pinned block of {len} bytes: {e}; the driver allocates it", s.id)
                }
            }
        }
    }
    let (ptr, imports) = match huge {
        Some(h) => h,
        None if len <= piece => {
            let (b, ptr) = import::alloc_pinned_block(s, l, len)?;
            (ptr, Imports::one(Resource::new(s, BufferObj::new(s, b, len as u64)), len))
        }
        // Larger than one allocation may be: imports in pieces of one mapping, so the block
        // stays contiguous.
        None => huge_block(s, l, len, None)?,
    };
    Ok((ptr, imports, false))
}

/// Whether a failed import of vkhost's own memory for a pinned block will fail again for the
/// next block: the device gives such memory another type than the pinned ranking's, cannot
/// import at all (`Unsupported`), or the driver refuses the pointer
/// (`VK_ERROR_INVALID_EXTERNAL_HANDLE`). Running out of memory, or a failed call, may pass.
fn refusal_recurs(e: &Error) -> bool {
    matches!(e, Error::Unsupported { .. } | Error::Vulkan { code: ash::vk::Result::ERROR_INVALID_EXTERNAL_HANDLE, .. })
}

/// Whether a pinned block of `len` bytes should be vkhost's own huge-page memory:
/// `OpenOptions::pinned_huge_min`, by default never (the seed's `allocate_pinned`: "no host
/// memory crosses to the driver"). Whether imports work at all, [`huge_block`] asks.
fn huge_pinned(s: &Shared, len: usize) -> bool {
    len >= s.options.pinned_huge_min.unwrap_or(usize::MAX)
}

/// A pinned block of `len` bytes made of vkhost's own memory: one anonymous mapping, huge-page
/// aligned, advised and faulted in ([`maps::AnonMap::new_huge`]), imported in pieces of at most
/// the device's largest import, each into memory type `want` when given; the mapping goes with
/// the last piece. `Unsupported` where the device cannot import host memory.
fn huge_block(s: &Arc<Shared>, l: &crate::device::Live, len: usize, want: Option<u32>) -> Result<(NonNull<u8>, Arc<Imports>)> {
    // Imports the probe proved (not ones still to be proved after a probe that ran out of
    // memory at open: until `register` runs it again, blocks stay the driver's).
    if s.probe_retry.load(Ordering::Acquire) {
        return Err(Error::unsupported("the import probe has not finished (it runs again at the next register)"));
    }
    let granule = s.registration().map_err(|why| {
        Error::unsupported(format!(
            "a pinned block of {len} bytes of vkhost's own memory (needed beyond one allocation, {} bytes) needs imports, but: {why}",
            s.import_piece(page_size())
        ))
    })?;
    let map = maps::AnonMap::new_huge(len.next_multiple_of(granule))?;
    let ptr = map.ptr();
    let start = ptr.as_ptr() as usize;
    let imports = import_pieces(s, l, &(start..start + map.len()), Some(Arc::new(map)), want)?;
    Ok((ptr, imports))
}

/// Imports `covered` (validated, page-aligned) as pieces of at most the device's largest
/// import (each into memory type `want` when given); all or nothing.
fn import_pieces(
    s: &Arc<Shared>,
    l: &crate::device::Live,
    covered: &std::ops::Range<usize>,
    backing: Option<crate::device::object::Backing>,
    want: Option<u32>,
) -> Result<Arc<Imports>> {
    let part = s.import_piece(page_size());
    let ranges = piece_ranges(covered, part);
    // Several pieces import on several threads: each import pins its pages, and pinning is the
    // cost (about 2.4 ms per 64 MiB on the H200).
    // Each import is owned (a `Resource`, whose drop releases it) as soon as it exists, on the
    // thread that made it: a panic unwinding out of another piece's import (a user's logger,
    // a helper thread) drops the pieces already made instead of leaking their objects.
    let results = on_threads(&ranges, |r| {
        import::import_range(s, l, r, want).map(|b| {
            let mut obj = BufferObj::new(s, b, r.len() as u64);
            if let Some(k) = &backing {
                obj = obj.with_backing(k.clone());
            }
            Resource::new(s, obj)
        })
    });
    let mut parts: Vec<Arc<Resource>> = Vec::with_capacity(ranges.len());
    let mut failed = None;
    for b in results {
        match b {
            Ok(res) => parts.push(res),
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    if let Some(e) = failed {
        // SAFETY: fresh imports of ours, never listed, never named by any work.
        unsafe { release_fresh(s, l, &parts) };
        return Err(e);
    }
    Ok(Imports::new(parts, part))
}

/// `covered` cut into consecutive pieces of `part` bytes (the last may be shorter). `part` may
/// be nearly 2^64 (a device that reports no allocation limit): each piece's end is its start
/// plus what is left, at most `part`, so nothing wraps.
fn piece_ranges(covered: &std::ops::Range<usize>, part: usize) -> Vec<std::ops::Range<usize>> {
    (0..covered.len().div_ceil(part))
        .map(|i| {
            let start = covered.start + i * part;
            start..start + (covered.end - start).min(part)
        })
        .collect()
}

/// The most threads an import or release of several pieces uses.
const PIECE_THREADS: usize = 8;

/// `f` over `items`, in order, on up to [`PIECE_THREADS`] threads (this one included) when
/// there are several. A thread the system refuses (a pids limit, no memory for its stack) is no
/// error and no panic: this thread runs that share too.
fn on_threads<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let n = items.len().min(PIECE_THREADS);
    if n <= 1 {
        return items.iter().map(&f).collect();
    }
    let step = items.len().div_ceil(n);
    let out: Vec<Mutex<Option<R>>> = (0..items.len()).map(|_| Mutex::new(None)).collect();
    let share = |k: usize| {
        for j in k * step..((k + 1) * step).min(items.len()) {
            let r = f(&items[j]);
            *lock(&out[j]) = Some(r);
        }
    };
    let share = &share;
    std::thread::scope(|sc| {
        let mut mine = vec![0];
        // Shares that hold work: with `step` rounded up, fewer than `n` may.
        for k in 1..items.len().div_ceil(step) {
            if std::thread::Builder::new().name("vkhost-import".into()).spawn_scoped(sc, move || share(k)).is_err() {
                mine.push(k);
            }
        }
        mine.into_iter().for_each(share);
    });
    out.into_iter().filter_map(|m| m.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner)).collect()
}

/// Releases a pinned block: its buffer and memory, which unmaps it (or, where the device keeps
/// freed blocks, keeps it for the next block of its size: below).
///
/// `NotPinned` for anything but a live block's start: registered addresses, interior pointers,
/// a second free; `OwnedByGuard` for a `PinnedBuffer`'s block. Any other block listed at that
/// address on `dev` is freed, whoever allocated it: see **Who may free it** in
/// [`alloc_pinned`]. A block whose device was
/// destroyed has nothing left to release: `Ok`. The entry goes at once (the address is no
/// longer found); the call returns once the copies and launches in flight that name the block
/// are done, as `cudaFreeHost` does (not for a [`RecordedCopy`]: the caller submits it, maybe
/// after this call; it holds the block until it is reaped). The memory itself goes after
/// that, on vkhost's background releaser thread (freeing driver memory takes 0.2-0.4 ms per
/// block on the H200, whatever its size below a few MiB), so the call does not wait for the
/// driver's free;
/// [`Device::release_queued`](crate::Device::release_queued) waits until it is freed. Where
/// the device keeps freed blocks ([`OpenOptions::pinned_cache`](crate::OpenOptions::pinned_cache),
/// on GPUs by default), a driver block is kept instead (still mapped, out of the registry) and
/// is the next block of exactly its size; [`Device::trim_pinned_cache`](crate::Device::trim_pinned_cache)
/// frees what is kept. See the
/// module docs for the address-reuse caveat. In a forked child, on a device of the parent's:
/// `Ok`, and nothing happens (the block is the parent's).
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::{Error, host};
/// let dev = vkhost::Device::open_default()?;
/// let block = host::alloc_pinned(&dev, 4096)?;
/// host::free_pinned(&dev, block)?;
/// assert_eq!(host::find(&dev, block, 1), None, "the entry is gone at once");
/// assert_eq!(host::free_pinned(&dev, block), Err(Error::NotPinned), "a second free");
/// let guarded = vkhost::PinnedBuffer::new(&dev, 4096)?;
/// assert!(matches!(host::free_pinned(&dev, guarded.as_ptr()), Err(Error::OwnedByGuard { .. })));
/// # Ok(()) }
/// ```
pub fn free_pinned(dev: &Device, ptr: impl HostPtr) -> Result<()> {
    release_entry(dev, ptr.addr(), Kind::Pinned, false)
}

/// Unregisters the registration that starts at `ptr`.
///
/// `NotRegistered` for an interior pointer, an unknown address, a second unregister or a pinned
/// block; `OwnedByGuard` for a range a [`Registration`](crate::Registration) or a
/// [`HostRange`](crate::HostRange) owns (`what` names which). After the
/// device was destroyed the entry is a tombstone: `Ok`, once. Returns once no submitted work can
/// read or write the registered bytes (it waits for copies in flight that name them). In a
/// forked child, on a device of the parent's: `Ok`, and nothing happens (the entry is the
/// parent's; the child's registry starts empty).
///
/// The import itself (its VkBuffer and VkDeviceMemory) is freed right after, on vkhost's
/// background releaser thread: freeing unpins the pages, about 29 ms per GiB on the H200, and
/// nothing can touch them any more, so the caller need not wait for it. The pages stay pinned
/// (allocated) until then; unmapping or freeing them meanwhile is fine. Device teardown frees
/// whatever is still queued, and [`Device::live_objects`](crate::Device::live_objects) counts
/// queued objects as gone (it frees them first).
///
/// `Busy`, at once and changing nothing (the range stays registered), while a
/// [`RecordedCopy`] that names the bytes has no completion hook and was not dropped: nobody
/// could say when its work ends, so waiting could last forever (and would keep the device from
/// being destroyed). Hook or drop the ticket, then unregister again.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use std::alloc::{Layout, alloc_zeroed, dealloc};
/// use vkhost::{Error, host};
/// let dev = vkhost::Device::open_default()?;
/// let page = host::page_size();
/// let layout = Layout::from_size_align(page, page).unwrap();
/// // SAFETY: a non-zero size.
/// let mem = unsafe { alloc_zeroed(layout) };
/// # assert!(!mem.is_null());
/// // SAFETY: one whole page of our own, freed only after the unregister below.
/// unsafe { host::register(&dev, mem, page) }?;
/// host::unregister(&dev, mem)?;
/// assert_eq!(host::unregister(&dev, mem), Err(Error::NotRegistered), "a second unregister");
/// // SAFETY: allocated above with `layout`; no longer registered.
/// unsafe { dealloc(mem, layout) };
/// # Ok(()) }
/// ```
pub fn unregister(dev: &Device, ptr: impl HostPtr) -> Result<()> {
    release_entry(dev, ptr.addr(), Kind::Registered, false)
}

/// Removes the entry keyed `addr` and releases what it owns. `by_guard` is the safe owner's
/// own release; raw calls refuse guarded entries.
pub(crate) fn release_entry(dev: &Device, addr: usize, kind: Kind, by_guard: bool) -> Result<()> {
    if dev.shared.forked() {
        // The parent's device in a forked child: its entries and objects are the parent's, and
        // the child's registry never held them. Inert, as the guards' drops are there.
        return Ok(());
    }
    if kind == Kind::Registered {
        return release_registration(dev, addr, by_guard);
    }
    let s = &*dev.shared;
    // Hold the device (if alive) across the release so destroy cannot interleave.
    let l = s.live_any().ok();
    let removed = {
        let mut reg = registry();
        match reg.get(s.id, addr) {
            // A reservation (register in progress) is not live and not ours to remove.
            Some(e) if e.kind == kind && e.live => {
                if let (Some(what), false) = (e.guard, by_guard) {
                    return Err(Error::OwnedByGuard { what });
                }
                reg.remove_if(s.id, addr, |_| true)
            }
            _ => None,
        }
    };
    let e = removed.ok_or(Error::NotPinned)?;
    if let (Some(l), Some(imports)) = (l.as_ref(), e.cell) {
        for res in &imports.parts {
            // vkhost's own memory: it goes with the last owner, possibly a batch in flight, and
            // on the background releaser (freeing driver memory takes 0.2-0.4 ms per block on
            // the H200; nothing can name the block any more, so the caller need not wait for
            // the free itself).
            res.obj.release_in_background_when_dropped();
            if !res.obj.has_backing() {
                // A driver block: kept for the next block of its size where the device keeps
                // freed blocks (`OpenOptions::pinned_cache`), once the last work naming it is
                // reaped, as its release would be.
                res.obj.reuse_when_dropped();
            }
        }
        // Closed: no new work can name the block. Like cudaFreeHost, return once the copies
        // and launches in flight on vkhost's queues that name it are done (issue 11:
        // free_pinned and drops wait for launches that name the memory). Not for copies
        // recorded into a caller's command buffers (a borrowed device): the caller may free the
        // block before it submits them, and only it can; they hold the block, which goes when
        // they are reaped.
        let uses: Vec<_> = imports.parts.iter().map(|res| res.tracker.close()).collect();
        for (res, uses) in imports.parts.iter().zip(uses) {
            let ours = uses.into_iter().filter(|u| !u.timeline.upgrade().is_some_and(|t| t.submitted_by_caller())).collect();
            res.wait_uses(l, ours);
        }
    }
    Ok(())
}

/// [`release_entry`] of a registration: the caller may unmap the bytes as soon as it returns,
/// so it closes the imports, waits for every use and destroys them.
///
/// The uses are looked at before anything changes, under a close that can be called off
/// (`Tracker::begin_close`): one whose completion nobody knows yet (a [`RecordedCopy`]
/// without a hook) makes the raw `unregister` `Busy`, leaving the registration as it was. A
/// guard's release cannot refuse (its borrow ends): it waits for the hook, holding no device
/// lock, so the ticket's owner can still hook it, drop it, or get `Busy` from a destroy.
fn release_registration(dev: &Device, addr: usize, by_guard: bool) -> Result<()> {
    let s = &*dev.shared;
    let cell = {
        let reg = registry();
        match reg.get(s.id, addr) {
            // A reservation (register in progress) is not live and not ours to remove.
            Some(e) if e.kind == Kind::Registered && e.live => {
                if let (Some(what), false) = (e.guard, by_guard) {
                    return Err(Error::OwnedByGuard { what });
                }
                e.cell.clone()
            }
            _ => return Err(Error::NotRegistered),
        }
    };
    let parts: &[Arc<Resource>] = cell.as_deref().map_or(&[], |c| &c.parts[..]);
    // From here no new work can name the bytes, and work being recorded has noted its use.
    let uses: Vec<_> = parts.iter().flat_map(|r| r.tracker.begin_close()).collect();
    let unknown = crate::resource::unknown_completions(&uses);
    if !unknown.is_empty() {
        if !by_guard {
            parts.iter().for_each(|r| r.tracker.end_close(false));
            return Err(Error::Busy {
                reason: "a host::RecordedCopy ticket that names these bytes has no completion hook yet (nor was dropped)".into(),
            });
        }
        unknown.iter().for_each(|t| t.wait_known());
    }
    parts.iter().for_each(|r| r.tracker.end_close(true));
    // Hold the device (if alive) across the removal and the release, so destroy cannot
    // interleave; a destroy that ran first left a tombstone, removed here.
    let l = s.live_any().ok();
    let same = |e: &Entry<Option<Cell>>| match (&e.cell, &cell) {
        (Some(a), Some(b)) => Arc::ptr_eq(&a.imports, &b.imports),
        (a, b) => a.is_none() && b.is_none(),
    };
    // A concurrent unregister of the same entry may have removed it first: that one releases.
    registry().remove_if(s.id, addr, |e| e.kind == Kind::Registered && e.live && same(e)).ok_or(Error::NotRegistered)?;
    if let Some(l) = l.as_ref() {
        for res in parts {
            // Closed: the uses left are all there will be.
            res.close_and_wait(l);
        }
        // Releasing an import unpins its pages (about 29 ms per GiB on the H200): the
        // background releaser does it, as nothing can touch the pages any more.
        for res in parts {
            // SAFETY: closed and every use waited, so no work can name it any more.
            unsafe { res.obj.release_later(&dev.shared) };
        }
    }
    Ok(())
}

/// Imports the host pages covering `[ptr, ptr+len)` on `dev` (VK_EXT_external_memory_host).
///
/// The range is rounded outward to max(page size, minImportedHostPointerAlignment); two
/// registrations may share a page, each importing its own rounded range.
///
/// Refusals, each leaving no entry, no VkBuffer and no VkDeviceMemory:
/// - the extension is missing, the import granule is coarser than a page, or imports are off by
///   policy: `Unsupported`;
/// - null `ptr`, `len == 0`, `ptr + len` overflowing, or a rounded range not fully mapped
///   read-write (checked against /proc/self/maps, by the PROCMAP_QUERY ioctl where the kernel
///   has it): `InvalidArgument`; on CPU drivers, which import any pointer and fault only when
///   they copy, also a page that cannot be read although it is mapped read-write (a guard
///   region, a shared file mapping past its file's end), found by `MADV_POPULATE_READ`
///   (GPU drivers refuse such pages at import themselves);
/// - the bytes overlap a registration or pinned block on the same device: `AlreadyRegistered`.
///
/// Not supported: memory that only some threads of the process may access (pages tagged with a
/// memory-protection key by `pkey_mprotect`): vkhost's staging threads and a CPU driver's queue
/// threads read and write host bytes from threads of their own. (The same holds for the safe
/// API's slices: Rust assumes any thread may access them.)
///
/// Performance: on the H200, large registrations of 4 KiB-page memory copied at 37-48 GB/s from
/// run to run, and at 48-51 GB/s when the memory was advised `MADV_HUGEPAGE` before it was
/// first touched (docs/PERFORMANCE.md). vkhost does not change the advice on your memory.
///
/// # Safety
/// Until [`unregister`] returns `Ok` (or the device is destroyed), the pages covering the range must
/// stay mapped and writable and must not be freed or remapped, and a file they map must not
/// shrink below them (a truncated file's pages fault with SIGBUS on any access, vkhost's
/// copies included): the device may read or write them at any time a copy names them. The rounded range includes the partial pages at both ends; the
/// caller must own them too (they are only read or written by copies that name those bytes).
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use std::alloc::{Layout, alloc_zeroed, dealloc};
/// use vkhost::{CopyPath, host};
/// let dev = vkhost::Device::open_default()?;
/// let page = host::page_size();
/// let layout = Layout::from_size_align(page, page).unwrap();
/// // SAFETY: a non-zero size.
/// let mem = unsafe { alloc_zeroed(layout) };
/// # assert!(!mem.is_null());
/// // SAFETY: `mem` is a whole page of our own (no partial pages), mapped read-write, and
/// // neither freed nor otherwise touched until the unregister below.
/// unsafe { host::register(&dev, mem, page) }?;
/// let gpu = dev.alloc_buffer(page)?;
/// gpu.write(0, &vec![9u8; page])?;
/// // SAFETY: the page is writable and not otherwise accessed during the call.
/// assert_eq!(unsafe { host::copy_to_host(&dev, &gpu, 0, mem, page) }?, CopyPath::Direct);
/// host::unregister(&dev, mem)?;
/// // SAFETY: the copy completed; we own the page.
/// assert!(unsafe { std::slice::from_raw_parts(mem, page) }.iter().all(|&b| b == 9));
/// // SAFETY: allocated above with `layout`; no longer registered.
/// unsafe { dealloc(mem, layout) };
/// # Ok(()) }
/// ```
pub unsafe fn register(dev: &Device, ptr: impl HostPtr, len: usize) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { register_entry(dev, ptr.addr(), len, None) }.map(|_| ())
}

/// [`register`], marking the entry as owned by the `guard` type when there is one.
///
/// # Safety
/// As for [`register`].
pub(crate) unsafe fn register_entry(dev: &Device, addr: usize, len: usize, guard: Option<&'static str>) -> Result<Arc<Imports>> {
    let s = &dev.shared;
    // A destroyed (or lost) device answers that before anything is asked of the arguments or
    // the policy (issue 2: after destroy, every operation returns `DeviceDestroyed`). Only a
    // check: the guard is taken again below, after the probe retry (which registers on this
    // thread).
    drop(s.live()?);
    // The policy first, with its own short reason (asked of the options, not read from the
    // longer message `registration` gives for it).
    if s.options.import == crate::device::ImportPolicy::Never {
        return Err(Error::unsupported("imports disabled by policy"));
    }
    // The probe could not finish at open (out of memory): run it now, one thread at a time,
    // the others waiting for its verdict. Its own `register` of the probe page runs on this
    // thread and skips this. A destroyed or lost device answers that, not a verdict.
    if s.probe_retry.load(Ordering::Acquire) && !crate::device::in_probe() {
        drop(s.live()?);
        let _one = lock(&s.probe_lock);
        if s.probe_retry.load(Ordering::Acquire) {
            probe::run(dev);
        }
        drop(s.live()?);
    }
    let granule = s.registration().map_err(Error::unsupported)?;
    if addr == 0 {
        return Err(Error::invalid("null pointer"));
    }
    if len == 0 {
        return Err(Error::invalid("zero-length registration"));
    }
    let end = addr.checked_add(len).ok_or_else(|| Error::invalid("ptr + len overflows"))?;
    let covered = round_out(addr, len, granule).ok_or_else(|| Error::invalid("rounded range overflows"))?;
    let l = s.live()?;
    maps::check_rw(&covered)?;
    // CPU drivers import any pointer and fault only when they copy (lavapipe: on its own queue
    // thread, killing the process): there, prove every page readable too. GPU drivers pin the
    // pages at import and refuse those they cannot pin; the extra pass would cost them time.
    if s.info.device_type == crate::DeviceType::Cpu {
        maps::populate_read(&covered)?;
    }
    // Reserve the bytes, so a concurrent overlapping register is refused while we import
    // without holding the registry lock.
    let reservation = Entry { kind: Kind::Registered, user: addr..end, covered: covered.clone(), live: false, guard, cell: None };
    note_lister(s);
    registry().insert(s.id, reservation).map_err(|_| Error::AlreadyRegistered)?;
    /// Takes the reservation back however the import ends short of success (an error, or a
    /// panic unwinding through here): the bytes stay registrable.
    struct Reserved<'a> {
        s: &'a Shared,
        addr: usize,
        armed: bool,
    }
    impl Drop for Reserved<'_> {
        fn drop(&mut self) {
            if self.armed {
                registry().remove_if(self.s.id, self.addr, |e| !e.live);
            }
        }
    }
    let mut reserved = Reserved { s, addr, armed: true };
    let res = import_pieces(s, &l, &covered, None, None)?;
    let mut reg = registry();
    if let Some(e) = reg.get_mut(s.id, addr) {
        e.cell = Some(Cell::new(res.clone()));
        e.live = true;
    }
    reserved.armed = false;
    Ok(res)
}

/// The buffer and byte offset that address `[ptr, ptr+len)` on `dev`, when a live registration
/// or pinned block covers all of it (its rounded import or its block) through one buffer.
/// `None` otherwise, and after the device was destroyed. An entry imported in several pieces
/// (larger than `OpenOptions::max_import_piece` or the device's maxMemoryAllocationSize) has
/// one buffer per piece: a range that crosses from one piece into the next has no single
/// buffer and is `None` (copies over it still go direct, piece by piece). A zero-length range
/// is looked up as the byte at `ptr`: it is found where that byte is covered (one past an
/// import's last byte is not).
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::host;
/// let dev = vkhost::Device::open_default()?;
/// let block = host::alloc_pinned(&dev, 4096)?;
/// let (buffer, offset) = host::find(&dev, block.as_ptr() as usize + 100, 50).expect("covered");
/// assert_eq!(offset, 100);
/// assert_eq!(host::find(&dev, block, 4096), Some((buffer, 0)), "one buffer covers the block");
/// assert_eq!(host::find(&dev, block, 4097), None, "one byte past the block");
/// host::free_pinned(&dev, block)?;
/// # Ok(()) }
/// ```
pub fn find(dev: &Device, ptr: impl HostPtr, len: usize) -> Option<(vk::Buffer, u64)> {
    // A destroyed device's entries are tombstones. Its teardown sets `gone` before it releases
    // anything, and nothing else releases an entry's objects while the entry is listed
    // (unregister and free_pinned remove it first), so this one flag stands for every object.
    if dev.shared.gone.load(Ordering::Acquire) {
        return None;
    }
    let addr = ptr.addr();
    let reg = registry();
    let e = reg.find(dev.id(), addr, len)?;
    let cell = e.cell.as_ref()?;
    let off = addr - e.covered.start;
    if off < cell.part {
        // In the first piece, from the entry alone; one buffer must cover all of it (a range
        // that crosses into the next piece has none).
        let left = cell.part.min(e.covered.len()) - off;
        return (left >= len.max(1)).then_some((cell.first, off as u64));
    }
    let imports = &cell.imports;
    if imports.left_in_part(off, e.covered.len()) < len.max(1) {
        return None;
    }
    let (res, in_part) = imports.at(off);
    Some((res.obj.buffer, in_part as u64))
}

/// Copies `len` bytes from host `src` to `dst` at `dst_offset`, synchronously.
///
/// Host bytes covered by one registration or pinned block: one vkCmdCopyBuffer from that
/// entry's buffer, no staging, no memcpy. Bytes in several entries and gaps: covered pieces go
/// direct, gaps are staged, in one submission where the gaps fit a staging chunk.
///
/// Always a submitted copy (the copy engines or the compute queue), never CPU stores into
/// mapped device memory: that is [`DeviceBuffer::write`]'s fast path for small writes.
///
/// # Safety
/// `src` must be readable for `len` bytes for the duration of the call.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::{CopyPath, host};
/// let dev = vkhost::Device::open_default()?;
/// let gpu = dev.alloc_buffer(8192)?;
/// let mut src = vkhost::PinnedBuffer::new(&dev, 4096)?;
/// src.fill(3);
/// // SAFETY: `src` is readable for 4096 bytes during the call.
/// let path = unsafe { host::copy_to_device(&dev, src.as_ptr(), 4096, &gpu, 4096) }?;
/// assert_eq!(path, CopyPath::Direct);
/// let mut back = vec![0u8; 4096];
/// gpu.read(4096, &mut back)?;
/// assert!(back.iter().all(|&b| b == 3));
/// # Ok(()) }
/// ```
pub unsafe fn copy_to_device(dev: &Device, src: *const u8, len: usize, dst: &DeviceBuffer, dst_offset: usize) -> Result<CopyPath> {
    // SAFETY: forwarded contract.
    unsafe { copy::copy(&dev.shared, Dir::ToDevice, src as usize, len, &dst.mem, dst_offset, false) }
}

/// Copies `len` bytes from `src` at `src_offset` to host `dst`, synchronously; direct where
/// `dst` is covered, staged elsewhere.
///
/// # Safety
/// `dst` must be writable for `len` bytes for the duration of the call, and not otherwise
/// accessed during it.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::{CopyPath, host};
/// let dev = vkhost::Device::open_default()?;
/// let gpu = dev.alloc_buffer(4096)?;
/// gpu.write(0, &[0xAB; 4096])?;
/// let mut dst = vkhost::PinnedBuffer::new(&dev, 4096)?;
/// // SAFETY: `dst` is ours (borrowed mutably), writable for 4096 bytes and not otherwise
/// // accessed during the call.
/// let path = unsafe { host::copy_to_host(&dev, &gpu, 0, dst.as_mut_ptr(), 4096) }?;
/// assert_eq!(path, CopyPath::Direct);
/// assert!(dst.iter().all(|&b| b == 0xAB));
/// # Ok(()) }
/// ```
pub unsafe fn copy_to_host(dev: &Device, src: &DeviceBuffer, src_offset: usize, dst: *mut u8, len: usize) -> Result<CopyPath> {
    // SAFETY: forwarded contract.
    unsafe { copy_to_host_impl(&dev.shared, &src.mem, src_offset, dst, len) }
}

#[cfg(test)]
mod tests {
    use super::{on_threads, piece_ranges};

    #[test]
    fn on_threads_keeps_order() {
        for n in [0usize, 1, 2, 7, 8, 9, 33] {
            let v: Vec<usize> = (0..n).collect();
            assert_eq!(on_threads(&v, |x| x * 3), v.iter().map(|x| x * 3).collect::<Vec<_>>());
        }
    }

    /// A device that reports no allocation limit (maxMemoryAllocationSize 0, which vkhost reads
    /// as `u64::MAX`) has an import piece of nearly 2^64 bytes: one piece, the whole range.
    /// Before, `start + part` wrapped (release) or panicked (debug): the piece was an empty,
    /// inverted range, imported as a zero-sized VkBuffer (VUID-VkBufferCreateInfo-size-00912).
    #[test]
    fn piece_ranges_of_an_unlimited_device_do_not_wrap() {
        let covered = 0x7f00_0000_1000usize..0x7f00_0000_5000;
        assert_eq!(piece_ranges(&covered, usize::MAX & !4095), vec![covered.clone()]);
        assert_eq!(piece_ranges(&covered, 1 << 63), vec![covered.clone()]);
        // Ordinary pieces are unchanged: consecutive, the last one shorter.
        assert_eq!(piece_ranges(&covered, 0x3000), vec![0x7f00_0000_1000..0x7f00_0000_4000, 0x7f00_0000_4000..0x7f00_0000_5000]);
        assert_eq!(piece_ranges(&covered, 0x1000).len(), 4);
        // The top of the address space.
        let top = usize::MAX - 0x2fff..usize::MAX - 0xfff;
        assert_eq!(piece_ranges(&top, 1 << 40), vec![top.clone()]);
    }
}
