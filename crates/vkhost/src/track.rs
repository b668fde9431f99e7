//! The ownership protocol of tracked resources, in pure code: no Vulkan, no device.
//!
//! Every resource that submitted work can name (an import, a pinned block, a device buffer) is
//! an `Arc` owner with a [`Tracker`]. The protocol, which `tests/loom.rs` model-checks under
//! every interleaving (`loom`):
//!
//! 1. **Hold while recording.** Code that records work naming a resource first *enters* its
//!    tracker ([`Tracker::enter`]), which fails once the tracker is closed. While entered, it
//!    notes each use ([`Tracker::note`]: the timeline and the value whose completion retires the
//!    use) *before* that work can be submitted, and clones the `Arc` into the batch, which keeps
//!    it until the batch's completion is reaped. Then it leaves ([`Tracker::leave`]).
//! 2. **Close, then wait.** Whoever must know that no work can touch the resource any more (the
//!    unregister of a caller's range) first makes it unreachable for new work (removes the
//!    registry entry), then [`Tracker::close`]s it: close waits until nobody is entered, and
//!    returns every use ever noted and not yet retired. Once each returned value completed, no
//!    submitted work can access the resource: uses noted later are impossible (entering fails).
//!    A close that may be called off ([`Tracker::begin_close`], then [`Tracker::end_close`])
//!    keeps recorders out while it looks at the uses; called off, it leaves the resource as it
//!    was (an unregister that answers `Busy` for a use nobody can wait for yet).
//! 3. **Destroy with the last owner.** Vulkan objects go when the last `Arc` goes (the registry's,
//!    a safe guard's, or a reaped batch's), never while a batch that names them can run.
//!
//! A broken order — noting a use after the work is submitted, or leaving before the last note —
//! lets `close` return while a use is unrecorded; the loom test has a variant that does exactly
//! that and catches it.
//!
//! The sync primitives come from `crate::sync_prims`, which is `std` in the crate and `loom` in
//! the model test, so the protocol checked is the protocol shipped.

use crate::sync_prims::{AtomicBool, Condvar, Mutex, MutexGuard, Ordering};

/// A reference to a timeline that submitted work completes on (in the crate, a stream's `Weak`).
pub(crate) trait TimelineRef: Clone {
    /// Whether two references name the same timeline.
    fn same(&self, other: &Self) -> bool;
    /// Whether the timeline still exists (a dropped stream synchronized first, so its uses are
    /// complete).
    fn alive(&self) -> bool;
}

impl<T: ?Sized> TimelineRef for std::sync::Weak<T> {
    fn same(&self, other: &Self) -> bool {
        std::sync::Weak::ptr_eq(self, other)
    }
    fn alive(&self) -> bool {
        self.strong_count() > 0
    }
}

/// One recorded use: the timeline it was submitted on, the value that completes it, and whether
/// the work writes the resource.
#[derive(Debug, Clone)]
pub(crate) struct Use<H> {
    pub timeline: H,
    pub value: u64,
    pub write: bool,
}

#[derive(Debug)]
struct State<H> {
    closed: bool,
    /// Closes begun with [`Tracker::begin_close`] and not yet ended: recorders cannot enter
    /// meanwhile.
    closing: usize,
    /// Recorders entered and not yet left.
    entered: usize,
    /// The latest use per timeline (and access kind); earlier values on the same timeline
    /// complete first, so one value per timeline suffices.
    uses: Vec<Use<H>>,
}

/// Uses of one resource by submitted work, and the close protocol (see the module docs).
#[derive(Debug)]
pub(crate) struct Tracker<H> {
    state: Mutex<State<H>>,
    idle: Condvar,
    /// Set when a write use is noted; cleared once every write use is retired. Lets accessors
    /// of host memory skip the lock when no device write can be pending.
    writes: AtomicBool,
}

impl<H> Default for Tracker<H> {
    fn default() -> Self {
        Tracker {
            state: Mutex::new(State { closed: false, closing: 0, entered: 0, uses: Vec::new() }),
            idle: Condvar::new(),
            writes: AtomicBool::new(false),
        }
    }
}

fn lock<S>(m: &Mutex<S>) -> MutexGuard<'_, S> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl<H: TimelineRef> Tracker<H> {
    /// Enters as a recorder: `false` once closed, or while a close is being decided (the
    /// resource must not be named by new work).
    pub(crate) fn enter(&self) -> bool {
        let mut st = lock(&self.state);
        if st.closed || st.closing > 0 {
            return false;
        }
        st.entered += 1;
        true
    }

    /// Leaves after [`Tracker::enter`]; wakes a waiting `close` when the last recorder leaves.
    pub(crate) fn leave(&self) {
        let mut st = lock(&self.state);
        st.entered = st.entered.saturating_sub(1);
        if st.entered == 0 {
            self.idle.notify_all();
        }
    }

    /// Notes a use by work that will complete at `value` on `timeline`. Call while entered,
    /// before the work can be submitted.
    pub(crate) fn note(&self, timeline: &H, value: u64, write: bool) {
        let mut st = lock(&self.state);
        if write {
            self.writes.store(true, Ordering::Release);
        }
        match st.uses.iter_mut().find(|u| u.write == write && u.timeline.same(timeline)) {
            Some(u) => u.value = u.value.max(value),
            None => {
                st.uses.retain(|u| u.timeline.alive());
                st.uses.push(Use { timeline: timeline.clone(), value, write });
            }
        }
    }

    /// Closes the tracker: later `enter`s fail. Waits until no recorder is entered, then returns
    /// every unretired use. Idempotent (a second close returns what is left).
    pub(crate) fn close(&self) -> Vec<Use<H>> {
        let mut st = lock(&self.state);
        st.closed = true;
        while st.entered > 0 {
            st = match self.idle.wait(st) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
        st.uses.clone()
    }

    /// Begins a close that may be called off (an unregister that refuses when a use can never
    /// be waited for): like [`Tracker::close`], later `enter`s fail and it waits until no
    /// recorder is entered, then returns every unretired use; but the tracker stays closed only
    /// once [`Tracker::end_close`]`(true)` says so. Uses noted before it returns are all of them
    /// until `end_close`: nobody can enter meanwhile. Each call needs one `end_close`.
    pub(crate) fn begin_close(&self) -> Vec<Use<H>> {
        let mut st = lock(&self.state);
        st.closing += 1;
        while st.entered > 0 {
            st = match self.idle.wait(st) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
        st.uses.clone()
    }

    /// Ends a [`Tracker::begin_close`]: closes the tracker for good when `close`, else lets
    /// recorders enter again (unless another close is under way or done).
    pub(crate) fn end_close(&self, close: bool) {
        let mut st = lock(&self.state);
        st.closing = st.closing.saturating_sub(1);
        st.closed |= close;
    }

    /// Whether the tracker was closed.
    #[allow(dead_code)] // the model test asserts with it
    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    /// The unretired uses, without closing (for ordering a synchronous access after them).
    pub(crate) fn uses(&self) -> Vec<Use<H>> {
        lock(&self.state).uses.clone()
    }

    /// Whether any use is unretired.
    pub(crate) fn has_uses(&self) -> bool {
        !lock(&self.state).uses.is_empty()
    }

    /// Whether a device write may be pending (cheap; false only when none can be).
    pub(crate) fn may_have_writes(&self) -> bool {
        self.writes.load(Ordering::Acquire)
    }

    /// Retires the uses of `timeline` up to `value` (their work completed).
    pub(crate) fn retire(&self, timeline: &H, value: u64) {
        let mut st = lock(&self.state);
        st.uses.retain(|u| !(u.timeline.same(timeline) && u.value <= value) && u.timeline.alive());
        if !st.uses.iter().any(|u| u.write) {
            self.writes.store(false, Ordering::Release);
        }
    }
}
