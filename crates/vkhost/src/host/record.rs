//! Copies recorded into a caller's command buffer: the borrowed-device mode's copy path
//! ([`crate::Device::from_raw_borrowed`]), usable on any device.
//!
//! [`record_copy`] plans a host range against the registry like vkhost's own copies do, but
//! accepts only ranges that imports or pinned blocks cover completely (no staging: vkhost
//! submits nothing here), records one `vkCmdCopyBuffer` per covered piece plus barriers into the
//! caller's command buffer, and returns a [`RecordedCopy`] ticket.
//!
//! Ownership follows `crate::track`: while recording, the covering resources are held; a use of
//! each is noted on the ticket's own timeline (a [`Timeline`] whose completion is the caller's
//! semaphore value or fence), and the ticket's shared state keeps an `Arc` of each resource. That
//! state sits in a process-wide list until vkhost observes the caller's work complete
//! ([`reap_recorded`], an `unregister` or `free_pinned` that waits, device teardown), so the use
//! stays visible to `unregister` however the ticket itself is dropped or leaked.
//!
//! A ticket without a hook is a use whose completion is unknown: the raw `unregister` of the
//! bytes answers `Busy` at once and changes nothing (waiting could last forever, and would hold
//! the device lock against a destroy on the ticket's thread), the drop of a safe guard over
//! them (`Registration`, `HostRange`, which cannot refuse) waits for the hook with no device
//! lock held, and `Device::destroy` is `Busy`. Dropping a ticket without a hook declares the
//! commands will never run ([`record_copy`]'s contract); forgetting it (`mem::forget`) leaves
//! the bytes registered (`unregister` stays `Busy`), a guard's drop over them blocked, and the
//! device `Busy`: a leak becomes a refusal or a hang, never a use of freed memory.

use super::{HostPtr, check_host_range, plan};
use crate::device::object::{Child, phase};
use crate::device::submit::{HostSide, host_aligned, host_read_barrier, transfer_barrier};
use crate::device::{Device, Live, Shared, lock};
use crate::error::{Error, Result, VkResultExt};
use crate::resource::{Resource, Timeline};
use ash::vk;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

/// Direction of a recorded copy.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// # use vkhost::ash::vk;
/// # let dev = vkhost::Device::open_default()?;
/// # let raw = dev.raw()?;
/// # let d = &raw.device;
/// # // A command buffer of our own, recording, from a pool of vkhost's compute family.
/// # // SAFETY: valid create infos for this device; both are destroyed at the end.
/// # let (pool, cmd) = unsafe {
/// #     let info = vk::CommandPoolCreateInfo::default().queue_family_index(raw.compute_family);
/// #     let pool = d.create_command_pool(&info, None).unwrap();
/// #     let info = vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1);
/// #     let cmd = d.allocate_command_buffers(&info).unwrap()[0];
/// #     d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).unwrap();
/// #     (pool, cmd)
/// # };
/// use vkhost::host::{self, Direction};
/// let gpu = dev.alloc_buffer(8192)?;
/// let up = vkhost::PinnedBuffer::new(&dev, 4096)?;
/// let mut down = vkhost::PinnedBuffer::new(&dev, 4096)?;
/// // SAFETY: `cmd` is recording and ours alone; `gpu` has TRANSFER_SRC and TRANSFER_DST usage
/// // and 8192 bytes; the tickets are dropped unhooked and `cmd` is never submitted.
/// unsafe {
///     let a = host::record_copy(&dev, cmd, Direction::HostToDevice, up.as_ptr(), 4096, gpu.raw(), 0)?;
///     let b = host::record_copy(&dev, cmd, Direction::DeviceToHost, down.as_mut_ptr(), 4096, gpu.raw(), 4096)?;
///     assert_eq!((a.bytes(), b.bytes()), (4096, 4096));
/// }
/// # // SAFETY: the commands never ran, or completed and vkhost observed it.
/// # unsafe { d.destroy_command_pool(pool, None) };
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the registered (or pinned) host bytes into the caller's device buffer.
    HostToDevice,
    /// From the caller's device buffer into the registered (or pinned) host bytes.
    DeviceToHost,
}

/// How the caller's work completes, once told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hook {
    /// No hook yet: completion unknown.
    Unset,
    /// A timeline semaphore reaching a value.
    Semaphore(vk::Semaphore, u64),
    /// A fence signalling.
    Fence(vk::Fence),
    /// The ticket was dropped without a hook: by contract the commands never run.
    Abandoned,
    /// vkhost observed completion.
    Done,
}

/// The caller's object a hook names, as vkhost calls into it.
#[derive(Debug, Clone, Copy)]
enum Object {
    Semaphore(vk::Semaphore, u64),
    Fence(vk::Fence),
}

/// A hook, and how many of vkhost's Vulkan calls on its semaphore or fence are running.
struct HookState {
    hook: Hook,
    /// Calls (`vkGetSemaphoreCounterValue`, `vkGetFenceStatus`, the waits) that read the hook
    /// before it became `Done` and have not returned yet. Completion is reported only once this
    /// is 0: from then on vkhost never touches the caller's object again, so the caller may
    /// destroy or reset it (a review found a poll on another thread still calling into a fence
    /// the caller had destroyed after `reap_recorded` reported the ticket done).
    users: usize,
}

/// One recorded copy's completion and the resources its commands name (see the module docs).
pub(crate) struct Recorded {
    device: crate::DeviceId,
    hook: Mutex<HookState>,
    changed: Condvar,
    /// Owners of what the commands name, dropped once completion is observed.
    keep: Mutex<Vec<Arc<Resource>>>,
    /// The device buffer the commands name, when it is one vkhost made (a `DeviceBuffer`'s
    /// resource): held, not tracked, so its drop cannot free it under the recorded copy, and
    /// dropped with `keep`.
    buffer: Mutex<Option<Arc<dyn std::any::Any + Send + Sync>>>,
}

/// Every `Recorded` whose completion vkhost has not observed yet, of every device. Its lock is
/// never held across a Vulkan call or while taking another lock. A forked child gets an empty
/// one (`PerFork`: a parent thread may have held the lock at the fork).
static PENDING: crate::par::PerFork<Mutex<Vec<Arc<Recorded>>>> = crate::par::PerFork::new(|| Mutex::new(Vec::new()));

impl Recorded {
    fn set(&self, h: Hook) {
        lock(&self.hook).hook = h;
        self.changed.notify_all();
    }

    /// Takes the hook's object for one call on it: `Err(done)` when there is nothing to call
    /// (`done`: whether completion is observed and no other call is running).
    fn enter(g: &mut HookState) -> std::result::Result<Object, bool> {
        let o = match g.hook {
            Hook::Unset => return Err(false),
            Hook::Abandoned => return Err(true),
            Hook::Done => return Err(g.users == 0),
            Hook::Semaphore(sem, v) => Object::Semaphore(sem, v),
            Hook::Fence(f) => Object::Fence(f),
        };
        g.users += 1;
        Ok(o)
    }

    /// Ends a call `enter` began; `complete`: the call saw the work complete. Returns whether
    /// completion is now observed and no other call is running.
    fn leave(&self, complete: bool) -> bool {
        let mut g = lock(&self.hook);
        g.users -= 1;
        if complete {
            g.hook = Hook::Done;
        }
        let quiet = g.hook == Hook::Done && g.users == 0;
        drop(g);
        self.changed.notify_all();
        quiet
    }

    /// Whether the work completed and vkhost is done with the caller's object, without blocking
    /// (`false` while no hook is set, and while another thread's call on the object runs).
    fn poll(&self, l: &Live) -> bool {
        let entered = Self::enter(&mut lock(&self.hook));
        let h = match entered {
            Ok(h) => h,
            Err(done) => return done,
        };
        let complete = match h {
            // SAFETY: the caller of `completes_at` keeps the semaphore alive until vkhost observes
            // completion (reported only once no call like this one runs); vkGetSemaphoreCounterValue
            // needs no external synchronization.
            Object::Semaphore(sem, v) => unsafe { l.device.get_semaphore_counter_value(sem) }.is_ok_and(|c| c >= v),
            // SAFETY: as above, for the fence of `completes_with_fence`, hooked only after the
            // caller's vkQueueSubmit of it returned (its contract), so this never overlaps it.
            Object::Fence(f) => unsafe { l.device.get_fence_status(f) }.unwrap_or(false),
        };
        self.leave(complete)
    }

    /// Blocks until the ticket was given a hook or dropped; returns the hook.
    fn wait_hook(&self) -> Hook {
        let mut g = lock(&self.hook);
        while g.hook == Hook::Unset {
            let (g2, t) = self.changed.wait_timeout(g, Duration::from_secs(10)).unwrap_or_else(std::sync::PoisonError::into_inner);
            g = g2;
            if t.timed_out() && g.hook == Hook::Unset {
                log::warn!(
                    "{}: waiting for a host::RecordedCopy ticket that has no completion hook (completes_at / \
                     completes_with_fence) and was not dropped",
                    self.device
                );
            }
        }
        g.hook
    }

    /// Blocks until the work completed and no call of vkhost's on the caller's object runs:
    /// first until a hook is given, then on the caller's semaphore or fence (saying every 10 s
    /// that it still waits: a hook nobody signals blocks this for good).
    fn wait(&self, l: &Live) -> Result<()> {
        self.wait_hook();
        // Bound first: the guard must be gone before `quiesce` locks again.
        let entered = Self::enter(&mut lock(&self.hook));
        let h = match entered {
            Ok(h) => h,
            Err(_) => {
                self.quiesce();
                return Ok(());
            }
        };
        let (r, panicked) = self.wait_object(l, h);
        self.leave(r.is_ok());
        if let Some(p) = panicked {
            // After the wait and the leave: the caller (an unregister) may hand the bytes back
            // next, and a count left behind would keep the ticket pending for good.
            if r.is_ok() {
                self.quiesce();
            }
            std::panic::resume_unwind(p);
        }
        r?;
        self.quiesce();
        Ok(())
    }

    /// The wait on the caller's object itself, in 10 s steps; with the panic of a user's logger
    /// on the "still waiting" line, if one came (the wait went on regardless).
    fn wait_object(&self, l: &Live, h: Object) -> (Result<()>, Option<Box<dyn std::any::Any + Send>>) {
        const STEP_NS: u64 = 10_000_000_000;
        let mut panicked = None;
        loop {
            let r = match h {
                Object::Semaphore(sem, v) => {
                    let sems = [sem];
                    let values = [v];
                    let info = vk::SemaphoreWaitInfo::default().semaphores(&sems).values(&values);
                    // SAFETY: the semaphore is alive (the hook's contract: until completion is
                    // reported, which waits for this call); vkWaitSemaphores needs no external
                    // synchronization.
                    unsafe { l.device.wait_semaphores(&info, STEP_NS) }
                }
                // SAFETY: the fence is alive and not reset before vkhost reports it observed
                // (the hook's contract), and hooked only after the caller's vkQueueSubmit of it
                // returned, so this never overlaps it.
                Object::Fence(f) => unsafe { l.device.wait_for_fences(&[f], true, STEP_NS) },
            };
            match r {
                Err(vk::Result::TIMEOUT) if panicked.is_none() => {
                    let warn = || {
                        log::warn!(
                            "{}: a host::RecordedCopy's semaphore or fence has not signalled in 10 s (was the work \
                             it completes submitted?); still waiting",
                            self.device
                        )
                    };
                    panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(warn)).err();
                }
                Err(vk::Result::TIMEOUT) => {}
                r => {
                    let call = if matches!(h, Object::Fence(_)) { "vkWaitForFences" } else { "vkWaitSemaphores" };
                    return (r.call(call), panicked);
                }
            }
        }
    }

    /// Once completion is observed: blocks until no other call on the caller's object runs
    /// (their polls return at once, their waits on a signalled object promptly).
    fn quiesce(&self) {
        let mut g = lock(&self.hook);
        while g.users > 0 {
            g = self.changed.wait(g).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

impl Timeline for Recorded {
    fn wait_for(&self, l: &Live, _value: u64) -> Result<()> {
        self.wait(l)
    }

    fn submitted_by_caller(&self) -> bool {
        true
    }

    /// There is no queue of vkhost's to wait for (the caller's queues are not ours to
    /// synchronize): keep waiting on the hook until it succeeds, or the device is lost.
    fn queue_idle(&self, l: &Live) {
        loop {
            match self.wait(l) {
                Ok(()) | Err(Error::DeviceLost) => return,
                Err(e) => {
                    log::warn!("{}: waiting for a recorded copy: {e}; retrying", self.device);
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }

    /// No hook yet: only the caller can say when the commands complete (or that they never run).
    fn completion_unknown(&self) -> bool {
        lock(&self.hook).hook == Hook::Unset
    }

    fn wait_known(&self) {
        self.wait_hook();
    }
}

impl Child for Recorded {
    fn teardown(&self, _s: &Shared, l: &Live, p: u8) {
        if p == phase::WORK {
            // Objects go in the next phase: the caller's work naming them must be complete.
            self.queue_idle(l);
            let keep = std::mem::take(&mut *lock(&self.keep));
            drop(keep);
            drop(lock(&self.buffer).take());
            // Observed complete: out of the pending list (teardown holds an `Arc` of `self`).
            lock(PENDING.get()).retain(|r| !std::ptr::eq(Arc::as_ptr(r), self));
        }
    }
}

/// A copy recorded by [`record_copy`]: give it a completion hook, a timeline value
/// ([`RecordedCopy::completes_at`], before or after submitting the command buffer) or a fence
/// ([`RecordedCopy::completes_with_fence`], **after** the `vkQueueSubmit` that signals it
/// returned: vkhost polls the fence from any thread once hooked, and the submit needs the fence
/// to itself).
///
/// The ticket can be dropped once hooked; vkhost keeps what the commands name until it observes
/// the hook complete. Dropping it without a hook declares that the command buffer will never be
/// submitted (see [`record_copy`]'s Safety); while an unhooked ticket lives, `Device::destroy`
/// and an [`unregister`](super::unregister) of the bytes are `Busy` (changing nothing), and the
/// drop of a `Registration` or `HostRange` over them blocks until the hook is given, as does
/// any access through the guards to those bytes (`Deref`/`DerefMut` of a `PinnedBuffer`,
/// `Registration` or `HostRange`, which wait for the device work that names them; vkhost-wgpu's
/// `Scope::pinned`/`registration` too): hook the ticket first, on the same thread. Forgetting
/// an unhooked ticket (`mem::forget`) leaves all three so for good: a leak becomes a refusal or
/// a hang, never a use of freed memory. The uses and the resources' `Arc`s are vkhost's from
/// [`record_copy`] on, so soundness never rests on the ticket's `Drop`.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// # use vkhost::ash::vk;
/// # let dev = vkhost::Device::open_default()?;
/// # let raw = dev.raw()?;
/// # let d = &raw.device;
/// # // A command buffer of our own, recording, from a pool of vkhost's compute family.
/// # // SAFETY: valid create infos for this device; both are destroyed at the end.
/// # let (pool, cmd) = unsafe {
/// #     let info = vk::CommandPoolCreateInfo::default().queue_family_index(raw.compute_family);
/// #     let pool = d.create_command_pool(&info, None).unwrap();
/// #     let info = vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1);
/// #     let cmd = d.allocate_command_buffers(&info).unwrap()[0];
/// #     d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).unwrap();
/// #     (pool, cmd)
/// # };
/// # // SAFETY: a valid create info; destroyed at the end, after vkhost observed it signalled.
/// # let fence = unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }.unwrap();
/// use vkhost::host::{self, Direction};
/// let gpu = dev.alloc_buffer(4096)?;
/// let mut src = vkhost::PinnedBuffer::new(&dev, 4096)?;
/// src.fill(0x42);
/// // SAFETY: `cmd` is recording and ours alone; `gpu` has TRANSFER_DST usage and 4096 bytes; the
/// // ticket is hooked after the one submission; `src` is not written until the copy completed.
/// let mut ticket = unsafe { host::record_copy(&dev, cmd, Direction::HostToDevice, src.as_ptr(), 4096, gpu.raw(), 0) }?;
/// # // SAFETY: `cmd` is complete and submitted once; no other thread uses vkhost's compute
/// # // queue meanwhile (this example runs no stream or copy), as `Device::raw` requires.
/// # unsafe {
/// #     d.end_command_buffer(cmd).unwrap();
/// #     let queue = d.get_device_queue(raw.compute_family, raw.compute_queue_index);
/// #     d.queue_submit(queue, &[vk::SubmitInfo::default().command_buffers(&[cmd])], fence).unwrap();
/// # }
/// // SAFETY: `fence` is of this device, was unsignaled at the submission of `cmd` that signals
/// // it (which returned), and is destroyed only after `reap_recorded` reported the ticket done.
/// unsafe { ticket.completes_with_fence(fence) }?;
/// drop(ticket); // hooked: vkhost keeps what the commands name until the fence signals
/// # // SAFETY: the fence is alive.
/// # unsafe { d.wait_for_fences(&[fence], true, u64::MAX) }.unwrap();
/// assert_eq!(host::reap_recorded(&dev), 0);
/// let mut back = vec![0u8; 4096];
/// gpu.read(0, &mut back)?;
/// assert!(back.iter().all(|&b| b == 0x42));
/// # // SAFETY: the work completed and vkhost observed it (`reap_recorded` said so).
/// # unsafe {
/// #     d.destroy_fence(fence, None);
/// #     d.destroy_command_pool(pool, None);
/// # }
/// # Ok(()) }
/// ```
#[must_use = "give the ticket a completion hook (a fence's after the vkQueueSubmit that signals it)"]
pub struct RecordedCopy {
    rec: Arc<Recorded>,
    /// Keeps the device alive while unhooked, so its last drop cannot tear down under us.
    dev: Device,
    hooked: bool,
    regions: usize,
    bytes: u64,
}

impl std::fmt::Debug for RecordedCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordedCopy").field("regions", &self.regions).field("bytes", &self.bytes).field("hooked", &self.hooked).finish()
    }
}

impl RecordedCopy {
    /// The `vkCmdCopyBuffer` commands recorded: one per covered piece (a command may hold
    /// several `VkBufferCopy` regions: a piece off a 256-byte host boundary, or one larger than
    /// [`OpenOptions::copy_piece`](crate::OpenOptions::copy_piece)).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// # use vkhost::ash::vk;
    /// # let dev = vkhost::Device::open_default()?;
    /// # let raw = dev.raw()?;
    /// # let d = &raw.device;
    /// # // A command buffer of our own, recording, from a pool of vkhost's compute family.
    /// # // SAFETY: valid create infos for this device; both are destroyed at the end.
    /// # let (pool, cmd) = unsafe {
    /// #     let info = vk::CommandPoolCreateInfo::default().queue_family_index(raw.compute_family);
    /// #     let pool = d.create_command_pool(&info, None).unwrap();
    /// #     let info = vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1);
    /// #     let cmd = d.allocate_command_buffers(&info).unwrap()[0];
    /// #     d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).unwrap();
    /// #     (pool, cmd)
    /// # };
    /// use vkhost::host::{self, Direction};
    /// let gpu = dev.alloc_buffer(8192)?;
    /// let block = vkhost::PinnedBuffer::new(&dev, 8192)?;
    /// // SAFETY: `cmd` is recording and ours alone; `gpu` has TRANSFER_DST usage and 8192 bytes; the
    /// // ticket is dropped unhooked and `cmd` is never submitted.
    /// let ticket = unsafe { host::record_copy(&dev, cmd, Direction::HostToDevice, block.as_ptr(), 8192, gpu.raw(), 0) }?;
    /// assert_eq!(ticket.regions(), 1, "one pinned block: one command");
    /// drop(ticket);
    /// # // SAFETY: the commands never ran, or completed and vkhost observed it.
    /// # unsafe { d.destroy_command_pool(pool, None) };
    /// # Ok(()) }
    /// ```
    pub fn regions(&self) -> usize {
        self.regions
    }

    /// Bytes the recorded commands copy.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// # use vkhost::ash::vk;
    /// # let dev = vkhost::Device::open_default()?;
    /// # let raw = dev.raw()?;
    /// # let d = &raw.device;
    /// # // A command buffer of our own, recording, from a pool of vkhost's compute family.
    /// # // SAFETY: valid create infos for this device; both are destroyed at the end.
    /// # let (pool, cmd) = unsafe {
    /// #     let info = vk::CommandPoolCreateInfo::default().queue_family_index(raw.compute_family);
    /// #     let pool = d.create_command_pool(&info, None).unwrap();
    /// #     let info = vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1);
    /// #     let cmd = d.allocate_command_buffers(&info).unwrap()[0];
    /// #     d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).unwrap();
    /// #     (pool, cmd)
    /// # };
    /// use vkhost::host::{self, Direction};
    /// let gpu = dev.alloc_buffer(4096)?;
    /// let mut block = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// // SAFETY: `cmd` is recording and ours alone; `gpu` has TRANSFER_SRC usage and 4096 bytes; the
    /// // ticket is dropped unhooked and `cmd` is never submitted.
    /// let ticket = unsafe { host::record_copy(&dev, cmd, Direction::DeviceToHost, block.as_mut_ptr().add(96), 1000, gpu.raw(), 0) }?;
    /// assert_eq!(ticket.bytes(), 1000);
    /// drop(ticket);
    /// # // SAFETY: the commands never ran, or completed and vkhost observed it.
    /// # unsafe { d.destroy_command_pool(pool, None) };
    /// # Ok(()) }
    /// ```
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn hook(&mut self, h: Hook) -> Result<()> {
        if self.hooked {
            return Err(Error::invalid("this RecordedCopy already has a completion hook"));
        }
        self.rec.set(h);
        self.hooked = true;
        self.dev.shared.open_tickets.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    }

    /// Says the recorded commands complete when timeline `semaphore` reaches `value`. Call it
    /// before or after `vkQueueSubmit`.
    ///
    /// `Unsupported` below Vulkan 1.2 or without timeline semaphores on the physical device;
    /// `InvalidArgument` when a hook was already given.
    ///
    /// # Safety
    /// - `semaphore` is a timeline semaphore of this device (the caller enabled
    ///   timelineSemaphore), and it reaches `value` only once every command [`record_copy`]
    ///   recorded for this ticket has completed (the submission that executes them signals
    ///   `value`, or a value is reached only after that work).
    /// - It is not destroyed until vkhost observed the value: [`reap_recorded`] reported this
    ///   ticket done (`0` pending), an `unregister` of the bytes returned, or the device was
    ///   destroyed (a `free_pinned` does not wait for recorded copies).
    ///   ([`RecordedCopy::is_complete`] returning `true` on one thread says the same: vkhost
    ///   reports completion only once none of its calls on the semaphore runs on any thread,
    ///   and makes none after.) "The device was destroyed" is for devices
    ///   vkhost borrows: on one it owns (`Device::open*`, `from_raw` owned), the semaphore, pool
    ///   and command buffers are objects of the VkDevice that `Device::destroy` (or the last
    ///   handle's drop) destroys, so destroy them before it, after one of the other two.
    /// - The submission is made (or the value signalled some other way): until vkhost observes
    ///   it, whatever waits for this ticket waits (an `unregister` or a guard's drop over its
    ///   bytes, `Device::destroy` and the last handle's drop), saying so in the log every 10 s.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// # use vkhost::ash::vk;
    /// # let dev = vkhost::Device::open_default()?;
    /// # let raw = dev.raw()?;
    /// # let d = &raw.device;
    /// # // A command buffer of our own, recording, from a pool of vkhost's compute family.
    /// # // SAFETY: valid create infos for this device; both are destroyed at the end.
    /// # let (pool, cmd) = unsafe {
    /// #     let info = vk::CommandPoolCreateInfo::default().queue_family_index(raw.compute_family);
    /// #     let pool = d.create_command_pool(&info, None).unwrap();
    /// #     let info = vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1);
    /// #     let cmd = d.allocate_command_buffers(&info).unwrap()[0];
    /// #     d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).unwrap();
    /// #     (pool, cmd)
    /// # };
    /// # // SAFETY: valid create infos; destroyed at the end, after vkhost observed the value.
    /// # let sem = unsafe {
    /// #     let mut kind = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE);
    /// #     d.create_semaphore(&vk::SemaphoreCreateInfo::default().push_next(&mut kind), None)
    /// # }
    /// # .unwrap();
    /// use vkhost::host::{self, Direction};
    /// let gpu = dev.alloc_buffer(4096)?;
    /// let src = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// // SAFETY: `cmd` is recording and ours alone; `gpu` has TRANSFER_DST usage and 4096 bytes; the
    /// // ticket is hooked before the one submission; `src` is not written meanwhile.
    /// let mut ticket = unsafe { host::record_copy(&dev, cmd, Direction::HostToDevice, src.as_ptr(), 4096, gpu.raw(), 0) }?;
    /// // SAFETY: `sem` is a timeline semaphore of this device; only the submission below, after the
    /// // copy, signals 1; it is destroyed after `reap_recorded` reported the ticket done.
    /// unsafe { ticket.completes_at(sem, 1) }?;
    /// // SAFETY: `cmd` is complete and submitted once; no other thread uses vkhost's compute queue
    /// // meanwhile (this example runs no stream or copy), as `Device::raw` requires.
    /// unsafe {
    ///     d.end_command_buffer(cmd).unwrap();
    ///     let mut signal = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&[1]);
    ///     let (cmds, sems) = ([cmd], [sem]);
    ///     let submit = vk::SubmitInfo::default().command_buffers(&cmds).signal_semaphores(&sems).push_next(&mut signal);
    ///     let queue = d.get_device_queue(raw.compute_family, raw.compute_queue_index);
    ///     d.queue_submit(queue, &[submit], vk::Fence::null()).unwrap();
    ///     d.wait_semaphores(&vk::SemaphoreWaitInfo::default().semaphores(&[sem]).values(&[1]), u64::MAX).unwrap();
    /// }
    /// assert!(ticket.is_complete());
    /// assert_eq!(host::reap_recorded(&dev), 0);
    /// # // SAFETY: the work completed and vkhost observed it.
    /// # unsafe {
    /// #     d.destroy_semaphore(sem, None);
    /// #     d.destroy_command_pool(pool, None);
    /// # }
    /// # Ok(()) }
    /// ```
    pub unsafe fn completes_at(&mut self, semaphore: vk::Semaphore, value: u64) -> Result<()> {
        let info = &self.dev.shared.info;
        if info.api_version < crate::ApiVersion::from_raw(vk::API_VERSION_1_2) || !info.timeline_semaphore {
            return Err(Error::unsupported("completes_at needs Vulkan 1.2 timeline semaphores: use completes_with_fence"));
        }
        if semaphore == vk::Semaphore::null() {
            return Err(Error::invalid("null semaphore"));
        }
        self.hook(Hook::Semaphore(semaphore, value))
    }

    /// Says the recorded commands complete when `fence` signals. Call it **after** the
    /// `vkQueueSubmit` that signals `fence` returned: from the hook on, vkhost may poll or wait
    /// on the fence from any thread, and `vkQueueSubmit` needs the fence externally synchronized.
    ///
    /// `InvalidArgument` when a hook was already given.
    ///
    /// # Safety
    /// - `fence` is a fence of this device, signalled only by the submission that executes the
    ///   recorded commands (so, after they completed); that `vkQueueSubmit` has returned, and the
    ///   fence was unsignaled when it was made.
    /// - It is neither reset, destroyed nor submitted again until vkhost observed it signalled:
    ///   call [`reap_recorded`] after your own wait and before `vkResetFences` (it must report
    ///   this ticket done; or [`RecordedCopy::is_complete`] returned `true`, which vkhost says
    ///   only once none of its calls on the fence runs on any thread), or let an
    ///   `unregister` of the bytes or the device's destroy return first (not a `free_pinned`,
    ///   which does not wait for recorded copies). (On a device vkhost owns, the fence, pool and
    ///   command buffers are objects of the VkDevice `Device::destroy` destroys: destroy them
    ///   before it, after one of the others.)
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// # use vkhost::ash::vk;
    /// # let dev = vkhost::Device::open_default()?;
    /// # let raw = dev.raw()?;
    /// # let d = &raw.device;
    /// # // A command buffer of our own, recording, from a pool of vkhost's compute family.
    /// # // SAFETY: valid create infos for this device; both are destroyed at the end.
    /// # let (pool, cmd) = unsafe {
    /// #     let info = vk::CommandPoolCreateInfo::default().queue_family_index(raw.compute_family);
    /// #     let pool = d.create_command_pool(&info, None).unwrap();
    /// #     let info = vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1);
    /// #     let cmd = d.allocate_command_buffers(&info).unwrap()[0];
    /// #     d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).unwrap();
    /// #     (pool, cmd)
    /// # };
    /// # // SAFETY: a valid create info; destroyed at the end, after vkhost observed it signalled.
    /// # let fence = unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }.unwrap();
    /// use vkhost::host::{self, Direction};
    /// let gpu = dev.alloc_buffer(4096)?;
    /// gpu.write(0, &[7; 4096])?;
    /// let mut dst = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// // SAFETY: `cmd` is recording and ours alone; `gpu` has TRANSFER_SRC usage and 4096 bytes; the
    /// // ticket is hooked after the one submission; `dst` is not accessed until the copy completed.
    /// let mut ticket = unsafe { host::record_copy(&dev, cmd, Direction::DeviceToHost, dst.as_mut_ptr(), 4096, gpu.raw(), 0) }?;
    /// # // SAFETY: `cmd` is complete and submitted once; no other thread uses vkhost's compute
    /// # // queue meanwhile (this example runs no stream or copy), as `Device::raw` requires.
    /// # unsafe {
    /// #     d.end_command_buffer(cmd).unwrap();
    /// #     let queue = d.get_device_queue(raw.compute_family, raw.compute_queue_index);
    /// #     d.queue_submit(queue, &[vk::SubmitInfo::default().command_buffers(&[cmd])], fence).unwrap();
    /// # }
    /// // SAFETY: `fence` is of this device; the submission of `cmd` that signals it returned (the
    /// // fence was unsignaled then); it is neither reset nor destroyed before `reap_recorded`
    /// // reported the ticket done.
    /// unsafe { ticket.completes_with_fence(fence) }?;
    /// // SAFETY: the fence is alive.
    /// unsafe { d.wait_for_fences(&[fence], true, u64::MAX) }.unwrap();
    /// assert_eq!(host::reap_recorded(&dev), 0, "observed: the fence may be reset or destroyed now");
    /// assert!(dst.iter().all(|&b| b == 7));
    /// # // SAFETY: the work completed and vkhost observed it (`reap_recorded` said so).
    /// # unsafe {
    /// #     d.destroy_fence(fence, None);
    /// #     d.destroy_command_pool(pool, None);
    /// # }
    /// # Ok(()) }
    /// ```
    pub unsafe fn completes_with_fence(&mut self, fence: vk::Fence) -> Result<()> {
        if fence == vk::Fence::null() {
            return Err(Error::invalid("null fence"));
        }
        self.hook(Hook::Fence(fence))
    }

    /// Whether vkhost sees the work complete (polls the hook; `false` without one).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// # use vkhost::ash::vk;
    /// # let dev = vkhost::Device::open_default()?;
    /// # let raw = dev.raw()?;
    /// # let d = &raw.device;
    /// # // A command buffer of our own, recording, from a pool of vkhost's compute family.
    /// # // SAFETY: valid create infos for this device; both are destroyed at the end.
    /// # let (pool, cmd) = unsafe {
    /// #     let info = vk::CommandPoolCreateInfo::default().queue_family_index(raw.compute_family);
    /// #     let pool = d.create_command_pool(&info, None).unwrap();
    /// #     let info = vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1);
    /// #     let cmd = d.allocate_command_buffers(&info).unwrap()[0];
    /// #     d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).unwrap();
    /// #     (pool, cmd)
    /// # };
    /// # // SAFETY: a valid create info; destroyed at the end, after vkhost observed it signalled.
    /// # let fence = unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }.unwrap();
    /// use vkhost::host::{self, Direction};
    /// let gpu = dev.alloc_buffer(4096)?;
    /// let src = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// // SAFETY: as for `completes_with_fence`: `cmd` recording and ours, `gpu` large enough with
    /// // TRANSFER_DST usage, hooked after the one submission, `src` not written meanwhile.
    /// let mut ticket = unsafe { host::record_copy(&dev, cmd, Direction::HostToDevice, src.as_ptr(), 4096, gpu.raw(), 0) }?;
    /// assert!(!ticket.is_complete(), "no hook yet");
    /// # // SAFETY: `cmd` is complete and submitted once; no other thread uses vkhost's compute
    /// # // queue meanwhile (this example runs no stream or copy), as `Device::raw` requires.
    /// # unsafe {
    /// #     d.end_command_buffer(cmd).unwrap();
    /// #     let queue = d.get_device_queue(raw.compute_family, raw.compute_queue_index);
    /// #     d.queue_submit(queue, &[vk::SubmitInfo::default().command_buffers(&[cmd])], fence).unwrap();
    /// # }
    /// // SAFETY: the submission that signals `fence` returned; kept until observed.
    /// unsafe { ticket.completes_with_fence(fence) }?;
    /// while !ticket.is_complete() {
    ///     std::thread::yield_now();
    /// }
    /// # assert_eq!(host::reap_recorded(&dev), 0);
    /// # // SAFETY: the work completed and vkhost observed it (`reap_recorded` said so).
    /// # unsafe {
    /// #     d.destroy_fence(fence, None);
    /// #     d.destroy_command_pool(pool, None);
    /// # }
    /// # Ok(()) }
    /// ```
    pub fn is_complete(&self) -> bool {
        let Ok(l) = self.dev.shared.live_any() else { return true };
        self.rec.poll(&l)
    }
}

impl Drop for RecordedCopy {
    fn drop(&mut self) {
        if !self.hooked {
            // By record_copy's contract the command buffer will never be submitted.
            self.rec.set(Hook::Abandoned);
            self.dev.shared.open_tickets.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Observes completed recorded copies of `dev` (polling their hooks, never blocking) and drops
/// vkhost's hold on what they named. Returns how many of `dev`'s recorded copies are still
/// pending. [`record_copy`] calls it too.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// # use vkhost::ash::vk;
/// # let dev = vkhost::Device::open_default()?;
/// # let raw = dev.raw()?;
/// # let d = &raw.device;
/// # // A command buffer of our own, recording, from a pool of vkhost's compute family.
/// # // SAFETY: valid create infos for this device; both are destroyed at the end.
/// # let (pool, cmd) = unsafe {
/// #     let info = vk::CommandPoolCreateInfo::default().queue_family_index(raw.compute_family);
/// #     let pool = d.create_command_pool(&info, None).unwrap();
/// #     let info = vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1);
/// #     let cmd = d.allocate_command_buffers(&info).unwrap()[0];
/// #     d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).unwrap();
/// #     (pool, cmd)
/// # };
/// # // SAFETY: a valid create info; destroyed at the end, after vkhost observed it signalled.
/// # let fence = unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }.unwrap();
/// use vkhost::host::{self, Direction};
/// let gpu = dev.alloc_buffer(4096)?;
/// let src = vkhost::PinnedBuffer::new(&dev, 4096)?;
/// // SAFETY: `cmd` is recording and ours alone; `gpu` has TRANSFER_DST usage and 4096 bytes; the
/// // ticket is hooked after the one submission; `src` is not written meanwhile.
/// let mut ticket = unsafe { host::record_copy(&dev, cmd, Direction::HostToDevice, src.as_ptr(), 4096, gpu.raw(), 0) }?;
/// assert_eq!(host::reap_recorded(&dev), 1, "no hook yet");
/// # // SAFETY: `cmd` is complete and submitted once; no other thread uses vkhost's compute
/// # // queue meanwhile (this example runs no stream or copy), as `Device::raw` requires.
/// # unsafe {
/// #     d.end_command_buffer(cmd).unwrap();
/// #     let queue = d.get_device_queue(raw.compute_family, raw.compute_queue_index);
/// #     d.queue_submit(queue, &[vk::SubmitInfo::default().command_buffers(&[cmd])], fence).unwrap();
/// # }
/// // SAFETY: the submission that signals `fence` returned (it was unsignaled then); destroyed
/// // only once `reap_recorded` reported the ticket done.
/// unsafe { ticket.completes_with_fence(fence) }?;
/// drop(ticket);
/// // SAFETY: the fence is alive.
/// unsafe { d.wait_for_fences(&[fence], true, u64::MAX) }.unwrap();
/// assert_eq!(host::reap_recorded(&dev), 0);
/// # // SAFETY: the work completed and vkhost observed it (`reap_recorded` said so).
/// # unsafe {
/// #     d.destroy_fence(fence, None);
/// #     d.destroy_command_pool(pool, None);
/// # }
/// # Ok(()) }
/// ```
pub fn reap_recorded(dev: &Device) -> usize {
    let mine: Vec<Arc<Recorded>> = lock(PENDING.get()).iter().filter(|r| r.device == dev.id()).cloned().collect();
    let l = dev.shared.live_any().ok();
    let mut done = Vec::new();
    for r in &mine {
        // A destroyed device's teardown waited for every hook.
        if l.as_ref().is_none_or(|l| r.poll(l)) {
            done.push(r.clone());
        }
    }
    drop(l);
    let pending = mine.len() - done.len();
    if !done.is_empty() {
        lock(PENDING.get()).retain(|r| !done.iter().any(|d| Arc::ptr_eq(d, r)));
        for r in &done {
            let tl: Weak<dyn Timeline> = Arc::downgrade(r) as Weak<Recorded>;
            let keep = std::mem::take(&mut *lock(&r.keep));
            for res in &keep {
                res.tracker.retire(&tl, 1);
            }
            // The last owner may be this: objects go through `BufferObj`'s drop.
            drop(keep);
            drop(lock(&r.buffer).take());
        }
    }
    pending
}

/// The regions of one piece's `vkCmdCopyBuffer`: `n` bytes between host-buffer offset `ho` and
/// device offset `doff`, the bulk of a large piece starting on a host boundary
/// ([`host_aligned`]).
fn copy_regions(dir: Direction, ho: u64, doff: u64, n: u64) -> smallvec::SmallVec<[vk::BufferCopy; 2]> {
    host_aligned(ho, doff, n)
        .into_iter()
        .map(|(h, o, n)| match dir {
            Direction::HostToDevice => vk::BufferCopy { src_offset: h, dst_offset: o, size: n },
            Direction::DeviceToHost => vk::BufferCopy { src_offset: o, dst_offset: h, size: n },
        })
        .collect()
}

/// Records a copy between host bytes `[host, host+len)` and the caller's device `buffer` at
/// `offset` into the caller's command buffer `cmd`; see [`RecordedCopy`] for the ticket and
/// [`crate::Device::from_raw_borrowed`] for the mode it serves.
///
/// The host range must be covered completely by live registrations and/or pinned blocks of
/// `dev`, as [`find`](super::find) covers: a registration's rounded import, so bytes in the
/// partial pages next to the registered ones count too, and a `DeviceToHost` copy of them writes
/// there (several entries, or several import pieces of one, make several regions); anything
/// else is `Error::NotRegistered` (nothing is staged). When `buffer` is a
/// [`DeviceBuffer`](crate::DeviceBuffer) of `dev` (its [`raw`](crate::DeviceBuffer::raw)
/// handle), the ticket's state holds it as it holds the host side: dropped meanwhile, it is
/// freed only once the copy is reaped. `InvalidArgument` for `len == 0`, a null
/// or overflowing range. `DeviceDestroyed`/`DeviceLost` as usual. On error nothing was recorded.
///
/// Recorded: a barrier (transfer and host writes → transfer reads and writes: earlier transfers
/// in this command buffer or queue, and host writes, come first); one `vkCmdCopyBuffer` per
/// covered piece (a piece of 64 KiB or more whose host bytes start off a 256-byte boundary is
/// two regions of it, its bulk starting on one: the DMA's speed follows the host address's
/// alignment, see docs/PERFORMANCE.md; no region larger than
/// [`OpenOptions::copy_piece`](crate::OpenOptions::copy_piece), by default 256 KiB on CPU
/// devices and 1 GiB on GPUs);
/// after a device-to-host copy, a barrier transfer writes → host reads. Later uses
/// of `buffer` by other stages (a shader reading what was uploaded) and earlier non-transfer
/// writes to it need the caller's own barriers.
///
/// Works on any device; it is the only copy path of a borrowed device without queues.
///
/// # Safety
/// - `cmd` is a primary or secondary command buffer of `dev`'s VkDevice in the recording state,
///   from a pool of a queue family that supports transfers, externally synchronized by the
///   caller (its pool too) during the call.
/// - `buffer` is a buffer of that device, bound to memory, with TRANSFER_DST usage
///   (`HostToDevice`) or TRANSFER_SRC (`DeviceToHost`), and `offset + len` is within its size.
///   Unless it is a [`DeviceBuffer`](crate::DeviceBuffer) of `dev` (which the ticket holds),
///   it and its memory outlive the recorded work.
///   With EXCLUSIVE sharing across several of the caller's families, ownership transfers are
///   the caller's (vkhost's own buffers on a borrowed device are EXCLUSIVE too).
/// - The ticket gets a completion hook before the command buffer is submitted, and the recorded
///   commands execute at most once (one submission). If the ticket is dropped without a hook,
///   `cmd` is never submitted (reset or free it).
/// - Until the work completed, the host bytes are not written (`HostToDevice`) or not accessed
///   at all (`DeviceToHost`) by the host.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// # use vkhost::ash::vk;
/// # let dev = vkhost::Device::open_default()?;
/// # let raw = dev.raw()?;
/// # let d = &raw.device;
/// # // A command buffer of our own, recording, from a pool of vkhost's compute family.
/// # // SAFETY: valid create infos for this device; both are destroyed at the end.
/// # let (pool, cmd) = unsafe {
/// #     let info = vk::CommandPoolCreateInfo::default().queue_family_index(raw.compute_family);
/// #     let pool = d.create_command_pool(&info, None).unwrap();
/// #     let info = vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(1);
/// #     let cmd = d.allocate_command_buffers(&info).unwrap()[0];
/// #     d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).unwrap();
/// #     (pool, cmd)
/// # };
/// # // SAFETY: a valid create info; destroyed at the end, after vkhost observed it signalled.
/// # let fence = unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }.unwrap();
/// use vkhost::host::{self, Direction};
/// let gpu = dev.alloc_buffer(4096)?;
/// let mut src = vkhost::PinnedBuffer::new(&dev, 4096)?;
/// let mut dst = vkhost::PinnedBuffer::new(&dev, 4096)?;
/// src.fill(0x33);
/// // SAFETY: `cmd` is recording and ours alone; `gpu` has TRANSFER_SRC and TRANSFER_DST usage and
/// // 4096 bytes; both tickets are hooked after the one submission; the host leaves `src` and `dst`
/// // alone until the fence signalled.
/// unsafe {
///     let (s, t) = (src.as_ptr(), dst.as_mut_ptr());
///     let mut up = host::record_copy(&dev, cmd, Direction::HostToDevice, s, 4096, gpu.raw(), 0)?;
///     let mut down = host::record_copy(&dev, cmd, Direction::DeviceToHost, t, 4096, gpu.raw(), 0)?;
///     d.end_command_buffer(cmd).unwrap();
///     // vkhost's own queue: no other thread uses it meanwhile (no stream, no copy).
///     let queue = d.get_device_queue(raw.compute_family, raw.compute_queue_index);
///     d.queue_submit(queue, &[vk::SubmitInfo::default().command_buffers(&[cmd])], fence).unwrap();
///     // The submission that signals `fence` returned (unsignaled then); kept until observed.
///     up.completes_with_fence(fence)?;
///     down.completes_with_fence(fence)?;
///     d.wait_for_fences(&[fence], true, u64::MAX).unwrap();
/// }
/// assert_eq!(host::reap_recorded(&dev), 0);
/// assert!(dst.iter().all(|&b| b == 0x33));
/// # // SAFETY: the work completed and vkhost observed it (`reap_recorded` said so).
/// # unsafe {
/// #     d.destroy_fence(fence, None);
/// #     d.destroy_command_pool(pool, None);
/// # }
/// # Ok(()) }
/// ```
pub unsafe fn record_copy(
    dev: &Device,
    cmd: vk::CommandBuffer,
    dir: Direction,
    host: impl HostPtr,
    len: usize,
    buffer: vk::Buffer,
    offset: u64,
) -> Result<RecordedCopy> {
    // A destroyed or lost device answers that before the arguments are looked at (issue 2).
    drop(dev.shared.live()?);
    let addr = host.addr();
    if len == 0 {
        return Err(Error::invalid("record_copy of zero bytes"));
    }
    check_host_range(addr, len)?;
    offset.checked_add(len as u64).ok_or_else(|| Error::invalid("offset + len overflows"))?;
    if cmd == vk::CommandBuffer::null() || buffer == vk::Buffer::null() {
        return Err(Error::invalid("null command buffer or buffer"));
    }
    reap_recorded(dev);
    let s = &dev.shared;
    let l = s.live()?;
    let p = plan(s, addr, len, offset);
    let mut pieces = Vec::with_capacity(p.pieces.len());
    for piece in &p.pieces {
        match piece.host {
            HostSide::Direct { buffer: hb, offset: ho, .. } => pieces.push((hb, ho, piece.dev_offset, piece.len)),
            HostSide::Staged { .. } => return Err(Error::NotRegistered),
        }
    }
    let write = dir == Direction::DeviceToHost;
    let rec = Arc::new(Recorded {
        device: s.id,
        hook: Mutex::new(HookState { hook: Hook::Unset, users: 0 }),
        changed: Condvar::new(),
        keep: Mutex::new(Vec::new()),
        // A `DeviceBuffer` of `dev` named by its handle: held until the copy is reaped.
        buffer: Mutex::new(s.device_buffer(buffer)),
    });
    let tl: Weak<dyn Timeline> = Arc::downgrade(&rec) as Weak<Recorded>;
    {
        let mut keep = lock(&rec.keep);
        // Note each use while held, before the caller can submit (crate::track).
        for h in &p.held {
            h.0.tracker.note(&tl, 1, write);
            keep.push(h.0.clone());
        }
    }
    lock(PENDING.get()).push(rec.clone());
    let child: Weak<dyn Child> = Arc::downgrade(&rec) as Weak<Recorded>;
    s.add_child(child);
    s.open_tickets.fetch_add(1, Ordering::AcqRel);
    let ticket = RecordedCopy { rec, dev: dev.clone(), hooked: false, regions: pieces.len(), bytes: len as u64 };
    let d = &l.device;
    // SAFETY: `cmd` is recording and externally synchronized (the caller's contract); the host
    // buffers are held now and owned by the ticket's state until completion is observed; the
    // caller's buffer range is valid by contract; the regions of one command do not overlap.
    unsafe {
        transfer_barrier(d, cmd);
        for &(hb, ho, doff, n) in &pieces {
            // One command per piece; a large piece whose host bytes start off a 256-byte
            // boundary is two regions of it, the bulk host-aligned (`submit::host_aligned`).
            let regions = copy_regions(dir, ho, doff, n);
            let (src, dst) = match dir {
                Direction::HostToDevice => (hb, buffer),
                Direction::DeviceToHost => (buffer, hb),
            };
            crate::device::submit::cmd_copy_buffer(d, cmd, src, dst, &regions, s.copy_piece());
        }
        if write {
            host_read_barrier(d, cmd);
        }
    }
    // The holds (`p.held`) leave here, after every use was noted.
    drop(p);
    Ok(ticket)
}

#[cfg(test)]
mod tests {
    use super::{Direction, copy_regions};

    /// A large piece whose host bytes start off a 256-byte boundary records its bulk from the
    /// boundary, both ways, and the regions cover the piece once, in order.
    #[test]
    fn recorded_bulk_starts_on_a_host_boundary() {
        let n = 1u64 << 20;
        for (ho, doff) in [(16u64, 0u64), (4096 + 16, 7), (255, 1000)] {
            let up = copy_regions(Direction::HostToDevice, ho, doff, n);
            let down = copy_regions(Direction::DeviceToHost, ho, doff, n);
            assert_eq!(up.len(), 2, "host +{ho}: head and bulk");
            assert_eq!(up[1].src_offset % 256, 0, "h2d bulk reads from a host boundary");
            assert_eq!(down[1].dst_offset % 256, 0, "d2h bulk writes to a host boundary");
            assert_eq!((up[0].src_offset, up[0].dst_offset), (ho, doff));
            assert_eq!((up[1].src_offset, up[1].dst_offset), (ho + up[0].size, doff + up[0].size));
            assert_eq!(up[0].size + up[1].size, n);
            assert_eq!(down[1].dst_offset, ho + down[0].size);
            assert_eq!(down[0].size + down[1].size, n);
            assert_eq!((down[0].src_offset, down[0].dst_offset, down[1].src_offset), (doff, ho, doff + down[0].size));
        }
        assert_eq!(copy_regions(Direction::HostToDevice, 512, 3, n).len(), 1, "already on a boundary");
        assert_eq!(copy_regions(Direction::DeviceToHost, 16, 0, 4096).len(), 1, "small pieces stay whole");
    }
}
