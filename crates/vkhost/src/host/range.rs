//! One host range on several devices: [`HostRange`], and copies between one host range and a
//! buffer on each device at once ([`broadcast`], [`gather`]).
//!
//! The seed keys imports by (device, address), so the same bytes can be imported on every
//! device. A `HostRange` registers them everywhere or nowhere, answers `find` per device, and
//! unregisters everywhere at once. Tombstones stay per device, as the seed has them: destroying
//! one device leaves the range registered and working on the others. Like a `Registration`, it
//! keeps what each device's entry owns and settles it before handing the bytes out: the views
//! wait for device writes (`Deref`) or any device access (`DerefMut`) still pending on any
//! device.
//!
//! # Example
//!
//! ```
//! # fn main() -> vkhost::Result<()> {
//! // Two devices: a second VkDevice on the same GPU stands in for a second GPU here.
//! let a = vkhost::Device::open_default()?;
//! let b = vkhost::Device::open(a.info().index)?;
//! let (ga, gb) = (a.alloc_buffer(4096)?, b.alloc_buffer(4096)?);
//! let mut data = vec![7u8; 8192];
//! let range = vkhost::HostRange::register(&[&a, &b], &mut data)?;
//! // The same bytes to both devices at once, never staged.
//! vkhost::broadcast(&range[..4096], &[(&ga, 0), (&gb, 0)])?;
//! assert_eq!(vkhost::host::device_stats(&a).staged_bytes, 0);
//! assert_eq!(vkhost::host::device_stats(&b).staged_bytes, 0);
//! range.unregister()?;
//! # Ok(()) }
//! ```

use super::Imports;
use super::registry::Kind;
use crate::buffer::DeviceBuffer;
use crate::device::{Device, SendPtr};
use crate::error::{Error, Result};
use ash::vk;
use std::marker::PhantomData;
use std::sync::Arc;

/// A borrowed slice registered on a set of devices; unregistered everywhere on drop.
///
/// Like [`Registration`](crate::Registration), it borrows the slice mutably for `'a`, its
/// entries are refused by the raw `unregister` (`OwnedByGuard`), a forgotten `HostRange`
/// leaves its ranges registered (memory-safe, see `Registration`), and reading the bytes
/// (`Deref`) waits for device writes to them still pending on any device, writing them
/// (`DerefMut`) for any device access.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// // Two devices: a second VkDevice on the same GPU stands in for a second GPU here.
/// let a = vkhost::Device::open_default()?;
/// let b = vkhost::Device::open(a.info().index)?;
/// let gpu = b.alloc_buffer(4096)?;
/// gpu.write(0, &[5; 4096])?;
/// let mut data = vec![0u8; 4096];
/// let mut range = vkhost::HostRange::register(&[&a, &b], &mut data)?;
/// gpu.read(0, &mut range)?; // direct: the bytes are registered on `b` too
/// assert!(range.iter().all(|&x| x == 5));
/// drop(range); // unregistered on both devices
/// # Ok(()) }
/// ```
pub struct HostRange<'a> {
    /// What each device's entry owns (`owners[i]` is `devices[i]`'s): the views settle it.
    owners: Vec<Arc<Imports>>,
    ptr: SendPtr,
    len: usize,
    _borrow: PhantomData<&'a mut [u8]>,
    /// Last: the imports' objects go while these handles still keep their devices (see
    /// `SharedRef`).
    devices: Vec<Device>,
}

impl std::fmt::Debug for HostRange<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<_> = self.devices.iter().map(|d| d.id()).collect();
        f.debug_struct("HostRange").field("devices", &ids).field("ptr", &self.ptr.0).field("len", &self.len).finish()
    }
}

impl<'a> HostRange<'a> {
    /// Registers `buf` on every device of `devices`, all or nothing: if one refuses, the ones
    /// already done are unregistered and its error is returned. A device listed twice is
    /// `InvalidArgument`; an empty list too.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// // Two devices: a second VkDevice on the same GPU stands in for a second GPU here.
    /// let a = vkhost::Device::open_default()?;
    /// let b = vkhost::Device::open(a.info().index)?;
    /// let mut data = vec![0u8; 4096];
    /// let range = vkhost::HostRange::register(&[&a, &b], &mut data)?;
    /// assert_eq!(range.devices().len(), 2);
    /// drop(range);
    /// let twice = vkhost::HostRange::register(&[&a, &a], &mut data);
    /// assert!(matches!(twice, Err(vkhost::Error::InvalidArgument { .. })));
    /// # Ok(()) }
    /// ```
    pub fn register(devices: &[&Device], buf: &'a mut [u8]) -> Result<HostRange<'a>> {
        if devices.is_empty() {
            return Err(Error::invalid("HostRange::register on no device"));
        }
        // A destroyed device answers that first, whatever the other arguments (issue 2).
        for d in devices {
            drop(d.shared.live()?);
        }
        for (i, d) in devices.iter().enumerate() {
            if devices[..i].iter().any(|e| e.id() == d.id()) {
                return Err(Error::invalid(format!("{} listed twice", d.id())));
            }
        }
        let ptr = std::ptr::NonNull::new(buf.as_mut_ptr()).ok_or_else(|| Error::invalid("null slice"))?;
        if buf.is_empty() {
            return Err(Error::invalid("zero-length registration"));
        }
        let addr = ptr.as_ptr() as usize;
        /// The registrations made so far, undone however `register` ends short of a
        /// `HostRange`: an error on a later device, or a panic unwinding through it (a user's
        /// logger, a helper thread). Else a panic would leave guard-owned entries of a slice
        /// whose borrow ended, which no one could unregister.
        struct Undo {
            addr: usize,
            done: Vec<Device>,
        }
        impl Drop for Undo {
            fn drop(&mut self) {
                for d in &self.done {
                    if let Err(u) = super::release_entry(d, self.addr, Kind::Registered, true) {
                        log::error!("HostRange: undoing the registration on {}: {u}", d.id());
                    }
                }
            }
        }
        let mut undo = Undo { addr, done: Vec::with_capacity(devices.len()) };
        let mut owners = Vec::with_capacity(devices.len());
        for d in devices {
            // SAFETY: the slice is borrowed mutably for 'a, so its pages stay mapped, writable
            // and untouched by anyone else while this HostRange lives. If it is leaked instead of
            // dropped, the entries outlive the borrow, and that is still sound: no safe work on
            // the bytes is left in flight (safe copies and launches that name them complete
            // before they return), an import pins its pages on a GPU (later copies through it
            // reach those, not freed memory), and overlapping registrations are refused. Sound,
            // not useful: new memory at those addresses then copies through the stale import,
            // so on a GPU its bytes are the old pinned pages' (wrong bytes, never freed memory),
            // as `Registration`'s forget docs say.
            let o = unsafe { super::register_entry(d, addr, buf.len(), Some("HostRange")) }?;
            undo.done.push((*d).clone());
            owners.push(o);
        }
        let done = std::mem::take(&mut undo.done);
        Ok(HostRange { devices: done, owners, ptr: SendPtr(ptr), len: buf.len(), _borrow: PhantomData })
    }

    /// The devices it is registered on.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// # // Two devices: a second VkDevice on the same GPU stands in for a second GPU here.
    /// # let a = vkhost::Device::open_default()?;
    /// # let b = vkhost::Device::open(a.info().index)?;
    /// let mut data = vec![0u8; 64];
    /// let range = vkhost::HostRange::register(&[&a, &b], &mut data)?;
    /// let ids: Vec<_> = range.devices().iter().map(|d| d.id()).collect();
    /// assert_eq!(ids, [a.id(), b.id()]);
    /// # Ok(()) }
    /// ```
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Length in bytes.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let mut data = vec![0u8; 100];
    /// assert_eq!(vkhost::HostRange::register(&[&dev], &mut data)?.len(), 100);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: zero-length ranges are refused.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let mut data = vec![0u8; 100];
    /// assert!(!vkhost::HostRange::register(&[&dev], &mut data)?.is_empty());
    /// assert!(vkhost::HostRange::register(&[&dev], &mut []).is_err());
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first registered byte.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let mut data = vec![0u8; 100];
    /// let addr = data.as_ptr();
    /// let range = vkhost::HostRange::register(&[&dev], &mut data)?;
    /// assert_eq!(range.as_ptr(), addr);
    /// # Ok(()) }
    /// ```
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.0.as_ptr()
    }

    /// [`super::find`] on `dev` for `len` bytes at `offset` into the range: the buffer and offset
    /// that cover them on that device. `None` for a device it is not registered on, a range out
    /// of bounds or crossing two import pieces, or a destroyed device. A zero-length range is
    /// looked up as the byte at `offset` (as [`super::find`] does), so `offset` must be inside
    /// the range: `find(dev, len, 0)` is `None`.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// # // Two devices: a second VkDevice on the same GPU stands in for a second GPU here.
    /// # let a = vkhost::Device::open_default()?;
    /// # let b = vkhost::Device::open(a.info().index)?;
    /// let mut data = vec![0u8; 4096];
    /// let range = vkhost::HostRange::register(&[&a, &b], &mut data)?;
    /// let (buf_a, _) = range.find(&a, 16, 64).expect("registered on a");
    /// let (buf_b, _) = range.find(&b, 16, 64).expect("registered on b");
    /// assert_ne!(buf_a, buf_b, "one import per device");
    /// assert_eq!(range.find(&a, 4000, 200), None, "past the range");
    /// assert_eq!(range.find(&a, 4096, 0), None, "one past the end, though in the rounded page");
    /// # Ok(()) }
    /// ```
    pub fn find(&self, dev: &Device, offset: usize, len: usize) -> Option<(vk::Buffer, u64)> {
        let end = offset.checked_add(len.max(1))?;
        if end > self.len || !self.devices.iter().any(|d| d.id() == dev.id()) {
            return None;
        }
        super::find(dev, self.ptr.0.as_ptr() as usize + offset, len)
    }

    /// Unregisters on every device, returning once no work on any device can touch the bytes.
    /// Devices destroyed meanwhile hold tombstones, removed quietly. The first error, if any, is
    /// returned after every device was tried.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// # // Two devices: a second VkDevice on the same GPU stands in for a second GPU here.
    /// # let a = vkhost::Device::open_default()?;
    /// # let b = vkhost::Device::open(a.info().index)?;
    /// let mut data = vec![0u8; 4096];
    /// let addr = data.as_ptr();
    /// let range = vkhost::HostRange::register(&[&a, &b], &mut data)?;
    /// range.unregister()?;
    /// assert_eq!(vkhost::host::find(&a, addr, 4096), None);
    /// assert_eq!(vkhost::host::find(&b, addr, 4096), None);
    /// data[0] = 1; // ours again
    /// # Ok(()) }
    /// ```
    pub fn unregister(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        self.owners.clear();
        let mut first = Ok(());
        for d in std::mem::take(&mut self.devices) {
            if d.shared.forked() {
                continue;
            }
            let r = super::release_entry(&d, self.ptr.0.as_ptr() as usize, Kind::Registered, true);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl std::ops::Deref for HostRange<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.owners.iter().for_each(|o| o.settle_writes());
        // SAFETY: the slice is borrowed for 'a by this guard; no device write to it is pending
        // on any device (settled above; raw async copies are the caller's to order); shared
        // access follows `&self`.
        unsafe { std::slice::from_raw_parts(self.ptr.0.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for HostRange<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.owners.iter().for_each(|o| o.settle_all());
        // SAFETY: as above, with no device access pending at all, exclusive through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.0.as_ptr(), self.len) }
    }
}

impl Drop for HostRange<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            log::error!("HostRange drop: unregister failed: {e}");
        }
    }
}

/// Copies `src` into each `(buffer, offset)` of `dsts`, every device at once (one thread per
/// destination), synchronously: direct where `src` is registered or pinned on that device
/// (a [`HostRange`] makes it so everywhere), staged elsewhere. Every destination's range is
/// checked before any copy starts (`OutOfRange` copies nothing); an error of a copy itself is
/// returned, the first one, after every copy finished. No destinations: `Ok`, nothing to do.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// # // Two devices: a second VkDevice on the same GPU stands in for a second GPU here.
/// # let a = vkhost::Device::open_default()?;
/// # let b = vkhost::Device::open(a.info().index)?;
/// let (ga, gb) = (a.alloc_buffer(4096)?, b.alloc_buffer(8192)?);
/// let src = vec![9u8; 4096];
/// vkhost::broadcast(&src, &[(&ga, 0), (&gb, 4096)])?; // staged: `src` is not registered
/// let mut back = vec![0u8; 4096];
/// gb.read(4096, &mut back)?;
/// assert_eq!(back, src);
/// # Ok(()) }
/// ```
pub fn broadcast(src: &[u8], dsts: &[(&DeviceBuffer, usize)]) -> Result<()> {
    dsts.iter().try_for_each(|&(b, off)| b.mem.check_range(off, src.len()))?;
    run_all(dsts.len(), |i| dsts[i].0.write(dsts[i].1, src))
}

/// Copies from each `(buffer, offset)` of `srcs` into its slice of `dst`, every device at once:
/// `dst` is cut into `srcs.len()` consecutive slices of `dst.len() / srcs.len()` bytes (the last
/// takes the remainder), and slice `i` is read from `srcs[i]`. Synchronous; direct where `dst` is
/// registered or pinned on the source's device. Every source's range is checked before any
/// copy starts (`OutOfRange` copies nothing); an error of a copy itself is returned, the first
/// one, after every copy finished. No sources: `Ok` for an empty `dst`, else `InvalidArgument`
/// (its bytes would be left unwritten).
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// # // Two devices: a second VkDevice on the same GPU stands in for a second GPU here.
/// # let a = vkhost::Device::open_default()?;
/// # let b = vkhost::Device::open(a.info().index)?;
/// let (ga, gb) = (a.alloc_buffer(4096)?, b.alloc_buffer(4096)?);
/// ga.write(0, &[1; 4096])?;
/// gb.write(0, &[2; 4096])?;
/// let mut out = vec![0u8; 8192];
/// vkhost::gather(&[(&ga, 0), (&gb, 0)], &mut out)?;
/// assert!(out[..4096].iter().all(|&x| x == 1) && out[4096..].iter().all(|&x| x == 2));
/// # Ok(()) }
/// ```
pub fn gather(srcs: &[(&DeviceBuffer, usize)], dst: &mut [u8]) -> Result<()> {
    if srcs.is_empty() {
        return if dst.is_empty() { Ok(()) } else { Err(Error::invalid("gather from no source")) };
    }
    let n = srcs.len();
    let each = dst.len() / n;
    let mut slices: Vec<&mut [u8]> = Vec::with_capacity(n);
    let mut rest = dst;
    for (i, &(b, off)) in srcs.iter().enumerate() {
        let take = if i + 1 == n { rest.len() } else { each };
        // Every source's range before any copy starts (`run_all` below).
        b.mem.check_range(off, take)?;
        let (a, b) = rest.split_at_mut(take);
        slices.push(a);
        rest = b;
    }
    let cells: Vec<std::sync::Mutex<&mut [u8]>> = slices.into_iter().map(std::sync::Mutex::new).collect();
    run_all(n, |i| {
        let mut g = cells[i].lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        srcs[i].0.read(srcs[i].1, &mut g)
    })
}

/// Runs `f(0..n)` on one thread each (the calling thread takes the first, and any whose thread
/// the system refuses: no panic), all errors collected; returns the first.
fn run_all(n: usize, f: impl Fn(usize) -> Result<()> + Sync) -> Result<()> {
    let f = &f;
    let results: Vec<Result<()>> = std::thread::scope(|sc| {
        let mut mine = vec![0];
        let mut handles = Vec::new();
        for i in 1..n {
            match std::thread::Builder::new().name("vkhost-multi".into()).spawn_scoped(sc, move || f(i)) {
                Ok(h) => handles.push(h),
                Err(_) => mine.push(i),
            }
        }
        let mut out: Vec<Result<()>> = if n > 0 { mine.into_iter().map(f).collect() } else { Vec::new() };
        for h in handles {
            out.push(h.join().unwrap_or_else(|_| Err(Error::invalid("a copy thread panicked"))));
        }
        out
    });
    results.into_iter().find(|r| r.is_err()).unwrap_or(Ok(()))
}
