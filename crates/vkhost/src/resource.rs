//! Tracked resources: a Vulkan buffer (device buffer, import, pinned block) with the uses that
//! submitted work made of it, owned through `Arc`.
//!
//! The protocol is [`crate::track`]'s: recorders [`Resource::hold`] the resource while they
//! record work that names it, note each use with the timeline value that completes it, and put
//! an `Arc` clone into the batch, which keeps it until it is reaped. The objects go when the last
//! owner goes ([`BufferObj`]'s drop), or at device teardown.
//!
//! This layer names no stream: submitted work is seen through the [`Timeline`] trait, which
//! streams implement.

use crate::device::object::{BufferObj, Child};
use crate::device::{DeviceId, Live, Shared};
use crate::error::{Error, Result};
use crate::track::{Tracker, Use};
use ash::vk;
use std::sync::{Arc, Mutex, Weak};

/// Something submitted work completes on (a stream's timeline semaphore).
pub(crate) trait Timeline: Send + Sync {
    /// Waits until `value` completed, submitting recorded work first if it is not yet.
    fn wait_for(&self, l: &Live, value: u64) -> Result<()>;
    /// The fallback when a wait fails and something must be released: waits for the queue to
    /// go idle (returns at once on a lost device, where nothing runs any more).
    fn queue_idle(&self, l: &Live);
    /// Whether nobody can say yet when the work completes, and only the caller can change that
    /// (a recorded copy whose ticket has no completion hook): `wait_for` would block until the
    /// caller acts. Once `false`, it stays `false`.
    fn completion_unknown(&self) -> bool {
        false
    }
    /// Blocks until [`Timeline::completion_unknown`] is `false`. Takes no lock of the device, so
    /// the caller may hook the work or destroy the device (`Busy`) meanwhile.
    fn wait_known(&self) {}
    /// Whether the work is the caller's to submit (a copy recorded into the caller's command
    /// buffer): vkhost cannot tell when it will run, so only a release that hands the caller's
    /// own bytes back (an unregister) waits for it; a pinned block's free does not.
    fn submitted_by_caller(&self) -> bool {
        false
    }
}

/// The timelines among `uses` whose completion is unknown (see
/// [`Timeline::completion_unknown`]).
pub(crate) fn unknown_completions(uses: &[Use<TimelineRef>]) -> Vec<Arc<dyn Timeline>> {
    uses.iter().filter_map(|u| u.timeline.upgrade()).filter(|t| t.completion_unknown()).collect()
}

/// A reference to a timeline, as uses record it.
pub(crate) type TimelineRef = Weak<dyn Timeline>;

/// A device buffer's state under the safe type (`crate::DeviceBuffer`, which adds the device
/// handle it keeps): what copies and streams need of it, so that they name no safe type.
#[derive(Debug)]
pub(crate) struct DeviceMem {
    pub res: Arc<Resource>,
    pub len: usize,
    /// The device it belongs to: a copy through another device refuses it.
    pub device: DeviceId,
    /// Held while the CPU stores into the buffer's mapping (`BarWrites`): a write takes `&self`,
    /// and two threads storing into the same bytes at once would be a data race (undefined
    /// behaviour), where two submitted copies are only the device's business.
    pub stores: Mutex<()>,
}

impl DeviceMem {
    pub(crate) fn new(device: DeviceId, res: Arc<Resource>, len: usize) -> DeviceMem {
        DeviceMem { res, len, device, stores: Mutex::new(()) }
    }

    /// The VkBuffer.
    pub(crate) fn raw(&self) -> vk::Buffer {
        self.res.obj.buffer
    }

    /// Checks `[offset, offset+len)` against the buffer: `OutOfRange` past the end.
    pub(crate) fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfRange),
        }
    }

    /// `InvalidArgument` unless the buffer belongs to device `s`.
    pub(crate) fn check_device(&self, s: &Shared) -> Result<()> {
        if self.device != s.id {
            return Err(Error::invalid(format!("the device buffer belongs to {}, not {}", self.device, s.id)));
        }
        Ok(())
    }
}

/// A buffer and the uses of it by submitted work.
#[derive(Debug)]
pub(crate) struct Resource {
    pub obj: BufferObj,
    pub tracker: Tracker<TimelineRef>,
}

impl Child for Resource {
    fn teardown(&self, s: &Shared, l: &Live, phase: u8) {
        if phase == crate::device::object::phase::OBJECTS {
            // SAFETY: this phase runs with the device idle and every stream shut down.
            unsafe { self.obj.release_now(s, l) };
        }
    }
}

impl Resource {
    /// Wraps a bound buffer and registers it with its device for teardown.
    pub(crate) fn new(shared: &Arc<Shared>, obj: BufferObj) -> Arc<Resource> {
        let r = Arc::new(Resource { obj, tracker: Tracker::default() });
        let w: Weak<Resource> = Arc::downgrade(&r);
        shared.add_child(w);
        r
    }

    fn shared(&self) -> Option<Arc<Shared>> {
        self.obj.shared()
    }

    /// Enters as a recorder (see [`crate::track`]); `None` once the resource was closed.
    pub(crate) fn hold(self: &Arc<Self>) -> Option<Held> {
        self.tracker.enter().then(|| Held(self.clone()))
    }

    /// Waits for `uses` to complete; a failed wait falls back to waiting the queue idle, so
    /// this never returns while work it was given may still run.
    pub(crate) fn wait_uses(&self, l: &Live, uses: Vec<Use<TimelineRef>>) {
        // Logged once every use was waited for: a user's logger that panics on the line must
        // not skip the waits (the caller may hand the bytes back next).
        let mut failed = None;
        for u in uses {
            let Some(tl) = u.timeline.upgrade() else { continue };
            match tl.wait_for(l, u.value) {
                Ok(()) => self.tracker.retire(&u.timeline, u.value),
                Err(e) => {
                    tl.queue_idle(l);
                    failed.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failed {
            log::warn!("waiting for work that names a buffer: {e}; waited for its queue instead");
        }
    }

    /// Waits for every use noted so far (the resource stays open): orders a synchronous access
    /// after earlier stream work.
    pub(crate) fn settle(&self, l: &Live) {
        let uses = self.tracker.uses();
        if !uses.is_empty() {
            self.wait_uses(l, uses);
        }
    }

    /// Waits for device writes noted so far; cheap when none can be pending.
    pub(crate) fn settle_writes(&self) {
        if !self.tracker.may_have_writes() {
            return;
        }
        let Some(s) = self.shared() else { return };
        let writes: Vec<_> = self.tracker.uses().into_iter().filter(|u| u.write).collect();
        wait_known(&writes);
        let Ok(l) = s.live_any() else { return };
        self.wait_uses(&l, writes);
    }

    /// Waits for every use noted so far, taking the device lock itself; cheap when none was.
    pub(crate) fn settle_all(&self) {
        if !self.tracker.has_uses() {
            return;
        }
        let Some(s) = self.shared() else { return };
        wait_known(&self.tracker.uses());
        let Ok(l) = s.live_any() else { return };
        self.settle(&l);
    }

    /// Closes the resource to new work and waits until no submitted work can touch it.
    pub(crate) fn close_and_wait(&self, l: &Live) {
        let uses = self.tracker.close();
        self.wait_uses(l, uses);
    }
}

/// Waits, with no device lock held, until the completion of every use in `uses` is known: the
/// wait for the work itself then happens under the device lock, and a destroy meanwhile answers
/// `Busy` instead of waiting for this thread.
fn wait_known(uses: &[Use<TimelineRef>]) {
    for t in unknown_completions(uses) {
        t.wait_known();
    }
}

/// A recorder's hold on a resource (see [`Resource::hold`]); leaves on drop. Crate-internal:
/// never leaked.
#[derive(Debug)]
pub(crate) struct Held(pub Arc<Resource>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.tracker.leave();
    }
}
