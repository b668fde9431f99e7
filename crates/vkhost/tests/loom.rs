//! Model check of the ownership protocol (`src/track.rs`) under every interleaving (`loom`).
//!
//! `track.rs` is included as is, with its sync primitives (`crate::sync_prims`) bound to loom's,
//! so the protocol checked is the protocol shipped. Around it, a small model of how the crate
//! uses it:
//!
//! - a registry slot (`Mutex<Option<Arc<Res>>>`): recorders look the resource up and enter its
//!   tracker under the registry lock (`host::plan`);
//! - a stream (`Stream`): an open batch under the stream lock, `own` notes a use of the open
//!   batch's value and keeps an `Arc` in the batch (`stream.rs` `own`), `flush` submits it, and
//!   `wait_for` flushes the open batch first if the awaited value is in it (`wait_value`);
//! - a device thread that executes submitted batches in order, asserting that no resource a
//!   batch names is destroyed or was already given back to the caller (the registered-memory
//!   property: once `unregister` returns the caller may unmap the bytes), then completes the
//!   batch's value and reaps it (drops its `Arc`s);
//! - an unregister (`host::release_entry`): for a registration, closes the tracker (the close
//!   that can be called off, committed; or called off, as a `Busy` unregister does), removes the
//!   slot under the registry lock, waits for each returned use, sets `returned`, then destroys;
//!   for a pinned block, removes the slot, closes and drops its `Arc` so the last owner
//!   destroys.
//!
//! Run with `cargo test -p vkhost --release --test loom`. Each model is bounded by a number of
//! preemptions (loom's `preemption_bound`): 2 by default, which the broken ordering below needs
//! (at 1 it is not found), and 3 for the split-copy model (the original bug's shape). Every
//! model passes at 3 too: `LOOM_MAX_PREEMPTIONS=3` runs them all at 3 (about a minute on two
//! cores, against a few seconds by default).

/// `track.rs`'s primitives, bound to loom's.
mod sync_prims {
    pub(crate) use loom::sync::atomic::{AtomicBool, Ordering};
    pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
}

#[path = "../src/track.rs"]
#[allow(dead_code)]
mod track;

use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::collections::VecDeque;
use track::{TimelineRef, Tracker};

/// Default preemption bound (see the module docs).
const PREEMPTIONS: usize = 2;

/// The one timeline of the model (a stream's `Weak` in the crate).
#[derive(Clone, Debug)]
struct Tl(u32);

impl TimelineRef for Tl {
    fn same(&self, other: &Self) -> bool {
        self.0 == other.0
    }
    fn alive(&self) -> bool {
        true
    }
}

const TL: Tl = Tl(1);

/// Counters outside the resource, so they outlive it.
#[derive(Debug, Default)]
struct Probe {
    /// Batches naming the resource being executed by the device right now.
    running: AtomicUsize,
    /// How many times the resource's objects were destroyed.
    destroys: AtomicUsize,
}

/// A tracked resource (`resource::Resource`): a tracker and the state of its objects.
#[derive(Debug)]
struct Res {
    tracker: Tracker<Tl>,
    /// Registered: the unregister's waits returned (the caller may unmap the bytes now).
    returned: AtomicBool,
    /// The objects were destroyed.
    destroyed: AtomicBool,
    /// Pinned: destroyed by the last owner (drop); registered: by the unregister.
    destroy_on_drop: bool,
    probe: Arc<Probe>,
}

impl Res {
    fn new(destroy_on_drop: bool, probe: &Arc<Probe>) -> Arc<Res> {
        Arc::new(Res {
            tracker: Tracker::default(),
            returned: AtomicBool::new(false),
            destroyed: AtomicBool::new(false),
            destroy_on_drop,
            probe: probe.clone(),
        })
    }

    fn destroy(&self) {
        assert_eq!(self.probe.running.load(SeqCst), 0, "protocol violated: destroyed while a batch naming it runs");
        assert!(!self.destroyed.swap(true, SeqCst), "protocol violated: destroyed twice");
        self.probe.destroys.fetch_add(1, SeqCst);
    }
}

impl Drop for Res {
    fn drop(&mut self) {
        if self.destroy_on_drop {
            self.destroy();
        }
    }
}

/// A batch: the value that completes it and the owners it keeps until reaped.
struct Batch {
    value: u64,
    keep: Vec<Arc<Res>>,
}

struct StreamState {
    open: Option<Batch>,
    submitted: u64,
    /// Submitted and not yet executed (the queue the device takes from).
    queue: VecDeque<Batch>,
}

/// A stream with its timeline; its lock is the stream lock.
struct Stream {
    st: Mutex<StreamState>,
    completed: AtomicU64,
    /// Set once no more work will be submitted; the device thread then drains and exits.
    shutdown: AtomicBool,
}

impl Stream {
    fn new() -> Arc<Stream> {
        Arc::new(Stream {
            st: Mutex::new(StreamState { open: None, submitted: 0, queue: VecDeque::new() }),
            completed: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
        })
    }

    /// Opens a batch if none is open.
    fn begin(st: &mut StreamState) {
        if st.open.is_none() {
            st.open = Some(Batch { value: st.submitted + 1, keep: Vec::new() });
        }
    }

    /// `stream.rs` `own`: notes a use by the open batch (before it can be submitted) and makes
    /// the batch keep the owner.
    fn own(st: &mut StreamState, r: &Arc<Res>) {
        let b = st.open.as_mut().expect("own without an open batch");
        r.tracker.note(&TL, b.value, false);
        b.keep.push(r.clone());
    }

    /// The broken order's half of `own`: keeps the owner without noting the use.
    fn keep_only(st: &mut StreamState, r: &Arc<Res>) -> u64 {
        let b = st.open.as_mut().expect("keep without an open batch");
        b.keep.push(r.clone());
        b.value
    }

    /// Submits the open batch: from now on the device may execute it.
    fn flush(st: &mut StreamState) {
        if let Some(b) = st.open.take() {
            st.submitted = b.value;
            st.queue.push_back(b);
        }
    }

    /// `Timeline::wait_for`: submits the open batch if `value` is in it, then waits.
    fn wait_for(&self, value: u64) {
        {
            let mut st = self.st.lock().unwrap();
            if st.submitted < value {
                Stream::flush(&mut st);
            }
        }
        while self.completed.load(SeqCst) < value {
            thread::yield_now();
        }
    }

    /// The device: executes submitted batches in order, completes and reaps them.
    fn device(&self) {
        loop {
            // Read `shutdown` before looking at the queue: seen set, every batch is queued.
            let down = self.shutdown.load(SeqCst);
            let b = self.st.lock().unwrap().queue.pop_front();
            let Some(b) = b else {
                if down {
                    return;
                }
                thread::yield_now();
                continue;
            };
            for r in &b.keep {
                r.probe.running.fetch_add(1, SeqCst);
                assert!(!r.destroyed.load(SeqCst), "protocol violated: the device executes work naming a destroyed resource");
                assert!(!r.returned.load(SeqCst), "protocol violated: the device executes work naming memory after unregister returned");
            }
            for r in &b.keep {
                r.probe.running.fetch_sub(1, SeqCst);
            }
            self.completed.store(b.value, SeqCst);
            drop(b); // reaped: the batch's owners go
        }
    }

    /// Submits what is left and lets the device drain (stream synchronize + drop).
    fn finish(&self) {
        Stream::flush(&mut self.st.lock().unwrap());
        self.shutdown.store(true, SeqCst);
    }
}

type Registry = Arc<Mutex<Option<Arc<Res>>>>;

/// How the recorder records its work.
#[derive(Clone, Copy, Debug)]
enum Recording {
    /// One piece, noted, submitted, then leave.
    One,
    /// A copy split over two batches (the original bug's shape): note v, submit, note v+1,
    /// leave with the second batch still open (an unregister's wait flushes it).
    Split,
    /// As `Split`, but the second batch is submitted before leaving.
    SplitSubmitted,
    /// A synchronous copy: note v, submit, wait for v while still entered, leave (a concurrent
    /// close waits for the recorder, which waits for the device: must not deadlock).
    Sync,
    /// BROKEN: the second batch is submitted and the recorder leaves before noting its use.
    BrokenNoteAfterLeave,
}

/// A recorder (an async copy through `host::plan` + `enqueue_pieces`).
fn record(reg: &Registry, s: &Stream, how: Recording) {
    // Lookup and enter under the registry lock (`host::plan`).
    let held = {
        let g = reg.lock().unwrap();
        g.as_ref().and_then(|r| r.tracker.enter().then(|| r.clone()))
    };
    let Some(r) = held else { return };
    let mut late = None;
    let mut wait = None;
    {
        let mut st = s.st.lock().unwrap();
        Stream::begin(&mut st);
        Stream::own(&mut st, &r);
        match how {
            Recording::One => Stream::flush(&mut st),
            Recording::Sync => {
                wait = st.open.as_ref().map(|b| b.value);
                Stream::flush(&mut st);
            }
            Recording::Split | Recording::SplitSubmitted => {
                Stream::flush(&mut st);
                Stream::begin(&mut st);
                Stream::own(&mut st, &r);
                if matches!(how, Recording::SplitSubmitted) {
                    Stream::flush(&mut st);
                }
            }
            Recording::BrokenNoteAfterLeave => {
                Stream::flush(&mut st);
                Stream::begin(&mut st);
                late = Some(Stream::keep_only(&mut st, &r));
                Stream::flush(&mut st);
            }
        }
    }
    if let Some(v) = wait {
        s.wait_for(v);
    }
    r.tracker.leave();
    if let Some(v) = late {
        r.tracker.note(&TL, v, false);
    }
}

/// `host::release_registration`: look the entry up, close (a close that could be called off,
/// here committed), remove, wait every use, return, destroy.
fn unregister(reg: &Registry, s: &Stream) {
    let found = reg.lock().unwrap().clone();
    let Some(r) = found else { return };
    r.tracker.begin_close();
    r.tracker.end_close(true);
    let removed = reg.lock().unwrap().take();
    let Some(r) = removed.filter(|x| Arc::ptr_eq(x, &r)) else { return };
    for u in r.tracker.close() {
        s.wait_for(u.value);
        r.tracker.retire(&u.timeline, u.value);
    }
    r.returned.store(true, SeqCst);
    r.destroy();
}

/// An unregister that answers `Busy` (a use whose completion nobody knows yet): the close is
/// called off and the entry stays.
fn called_off(reg: &Registry) {
    let found = reg.lock().unwrap().clone();
    if let Some(r) = found {
        r.tracker.begin_close();
        r.tracker.end_close(false);
    }
}

/// `release_entry` of a pinned block: remove, close (no wait), drop the registry's owner.
fn unpin(reg: &Registry) {
    let removed = reg.lock().unwrap().take();
    if let Some(r) = removed {
        r.tracker.close();
        drop(r);
    }
}

/// Checks `f` under every interleaving with at most `preemptions` preemptions, unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise.
fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(preemptions);
    }
    b.check(f);
}

/// Registered memory: recorder, unregister and device race; the device never touches the
/// resource after the unregister returned or destroyed it, and nothing deadlocks.
fn registered(how: Recording, preemptions: usize) {
    model(preemptions, move || {
        let probe = Arc::new(Probe::default());
        let res = Res::new(false, &probe);
        let reg: Registry = Arc::new(Mutex::new(Some(res.clone())));
        drop(res);
        let s = Stream::new();

        let dev = {
            let s = s.clone();
            thread::spawn(move || s.device())
        };
        let rec = {
            let (reg, s) = (reg.clone(), s.clone());
            thread::spawn(move || record(&reg, &s, how))
        };
        let unreg = {
            let (reg, s) = (reg.clone(), s.clone());
            thread::spawn(move || unregister(&reg, &s))
        };
        rec.join().unwrap();
        unreg.join().unwrap();
        s.finish();
        dev.join().unwrap();
        assert_eq!(probe.destroys.load(SeqCst), 1);
    });
}

#[test]
fn registered_one_batch() {
    registered(Recording::One, PREEMPTIONS);
}

#[test]
fn registered_sync_copy() {
    registered(Recording::Sync, PREEMPTIONS);
}

#[test]
fn registered_split_over_two_batches_second_open() {
    registered(Recording::Split, 3);
}

#[test]
fn registered_split_over_two_batches_both_submitted() {
    registered(Recording::SplitSubmitted, PREEMPTIONS);
}

/// A `Busy` unregister (its close called off) and then a real one, racing a recorder: after
/// the call-off the resource takes new work again, and the real unregister still waits for all
/// of it.
#[test]
fn registered_after_a_called_off_close() {
    model(PREEMPTIONS, || {
        let probe = Arc::new(Probe::default());
        let res = Res::new(false, &probe);
        let reg: Registry = Arc::new(Mutex::new(Some(res.clone())));
        drop(res);
        let s = Stream::new();

        let dev = {
            let s = s.clone();
            thread::spawn(move || s.device())
        };
        let rec = {
            let (reg, s) = (reg.clone(), s.clone());
            thread::spawn(move || record(&reg, &s, Recording::Split))
        };
        let unreg = {
            let (reg, s) = (reg.clone(), s.clone());
            thread::spawn(move || {
                called_off(&reg);
                unregister(&reg, &s);
            })
        };
        rec.join().unwrap();
        unreg.join().unwrap();
        s.finish();
        dev.join().unwrap();
        assert_eq!(probe.destroys.load(SeqCst), 1);
    });
}

/// The ordering the original bug had: a copy whose later piece goes into a later batch, with
/// that piece's use noted only after the recorder left (so after the work was submitted).
/// `close` can then return without it; the unregister returns while the second batch may still
/// run. This test proves the checker catches a broken ordering: loom must find an interleaving
/// where the device executes work naming the memory after the unregister returned, or while it
/// destroys it (whichever loom reaches first; both are the same bug).
#[test]
#[should_panic(expected = "protocol violated")]
fn broken_note_after_leave_is_caught() {
    registered(Recording::BrokenNoteAfterLeave, PREEMPTIONS);
}

/// Pinned blocks: the removal closes without waiting and drops the registry's owner; the last
/// owner (possibly a batch being reaped) destroys. Destroyed exactly once, never while a batch
/// naming it runs.
#[test]
fn pinned_destroyed_by_last_owner() {
    model(PREEMPTIONS, || {
        let probe = Arc::new(Probe::default());
        let res = Res::new(true, &probe);
        let reg: Registry = Arc::new(Mutex::new(Some(res.clone())));
        drop(res);
        let s = Stream::new();

        let dev = {
            let s = s.clone();
            thread::spawn(move || s.device())
        };
        let rec = {
            let (reg, s) = (reg.clone(), s.clone());
            thread::spawn(move || record(&reg, &s, Recording::SplitSubmitted))
        };
        let unp = {
            let reg = reg.clone();
            thread::spawn(move || unpin(&reg))
        };
        rec.join().unwrap();
        unp.join().unwrap();
        s.finish();
        dev.join().unwrap();
        drop(s);
        drop(reg);
        assert_eq!(probe.destroys.load(SeqCst), 1, "destroyed exactly once, by the last owner");
    });
}
