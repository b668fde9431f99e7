//! Vulkan objects with owners: a buffer bound to memory, destroyed when its owner drops it or at
//! device teardown, whichever comes first; and the children a device tears down.
//!
//! The device layer knows nothing of what its children are (imports, device buffers, streams):
//! each registers a `Weak<dyn Child>` when it is created, and [`Shared::teardown`] walks them in
//! `phase` after the device is idle.
//!
//! A [`BufferObj`] dropped while the device's `live` lock cannot be taken without blocking (a
//! destroy is waiting, or this thread is inside the teardown) is queued on `Shared::garbage` and
//! released by the next allocation or by teardown: a drop never waits for the device lock and
//! never panics (it may wait briefly for its own slot's lock, below, behind a release in
//! progress).
//!
//! A buffer's handles live in a [`Slot`] that its device holds too (`Shared::slots`), and an
//! owner's drop works on them under the slot's lock. Teardown sweeps every slot after its
//! children: a buffer whose last owner went on another thread just before the teardown took
//! its children (the `Weak` no longer upgrades, but the drop has not run yet) is released by
//! the sweep or, if the drop got the lock first, queued by it before the sweep's final drain.
//! Either way nothing of the buffer outlives the device.

use super::DeviceId;
use super::{Bound, Live, SendPtr, Shared, lock};
use ash::vk;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

/// A panic caught in a teardown step, resumed once the whole teardown ran.
pub(crate) type Panic = Box<dyn std::any::Any + Send>;

/// Runs one step of a teardown and keeps the first panic out of it (a user's logger that
/// panics on a line the step logs): the remaining steps still run, so no panic leaves the
/// device's work running or its objects alive.
pub(crate) fn step(first: &mut Option<Panic>, f: impl FnOnce()) {
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        first.get_or_insert(p);
    }
}

/// Makes something in steps that each may fail and log (`make` on `state`, the part made so
/// far); when one fails, or a user's logger panics on the failure it logs, `undo` takes back
/// what was made before the error or the panic goes on. Without `catch_unwind` a panic would
/// skip the undo and leak what was made.
pub(crate) fn make_or_undo<S, T>(
    mut state: S,
    make: impl FnOnce(&mut S) -> crate::Result<T>,
    undo: impl FnOnce(S),
) -> crate::Result<(S, T)> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| make(&mut state))) {
        Ok(Ok(t)) => Ok((state, t)),
        Ok(Err(e)) => {
            undo(state);
            Err(e)
        }
        Err(p) => {
            undo(state);
            std::panic::resume_unwind(p)
        }
    }
}

/// Teardown phases, in order.
pub(crate) mod phase {
    /// Finish work: streams submit what they recorded, wait, reap.
    pub const WORK: u8 = 0;
    /// The device is idle: buffers, imports, pinned blocks, command pools go.
    pub const OBJECTS: u8 = 1;
    /// Synchronization objects other work could wait on (timeline semaphores) go last.
    pub const SYNC: u8 = 2;
}

/// Something a device destroys at teardown.
pub(crate) trait Child: Send + Sync {
    /// Does this child's part of teardown `phase` (see [`phase`]); called for every phase.
    fn teardown(&self, s: &Shared, l: &Live, phase: u8);
}

/// A list of a device's entries that die without telling it (weak children, released slots,
/// dropped device buffers), pruned of the dead ones as it grows: once it reached `next`
/// entries, and then not before it doubled what was left (at least 64). Steady churn at any
/// size costs one scan per doubling; pruning at every power of two scanned on every insert
/// while the live count sat just under one.
pub(crate) struct Pruned<C> {
    pub items: C,
    next: usize,
}

/// How many entries a [`Pruned`] list holds.
pub(crate) trait Entries {
    fn count(&self) -> usize;
}

impl<T> Entries for Vec<T> {
    fn count(&self) -> usize {
        self.len()
    }
}

impl<K, V> Entries for std::collections::HashMap<K, V> {
    fn count(&self) -> usize {
        self.len()
    }
}

impl<C: Entries> Pruned<C> {
    pub(crate) const fn new(items: C) -> Pruned<C> {
        Pruned { items, next: 64 }
    }

    /// Before an insert: runs `prune` (it drops the dead entries) once the list reached its
    /// size for the next prune.
    pub(crate) fn prune_when_due(&mut self, prune: impl FnOnce(&mut C)) {
        if self.items.count() >= self.next {
            prune(&mut self.items);
            self.next = (2 * self.items.count()).max(64);
        }
    }
}

/// A buffer bound to memory of the device, optionally mapped (the mapping lasts as long as the
/// memory). The handles are released once: by [`BufferObj::release_now`], by teardown, or by
/// drop.
pub(crate) struct BufferObj {
    /// Weak: registry entries own imports, and must not keep their device alive.
    shared: Weak<Shared>,
    pub device: DeviceId,
    /// The fork generation it was created in: in a forked child, drops do nothing.
    fork_gen: u64,
    pub buffer: vk::Buffer,
    pub size: u64,
    /// The handles' state, shared with the device's teardown (see the module docs).
    slot: Arc<Slot>,
    /// Whether a backing was given (it stays `true` after the backing went).
    backed: bool,
    /// Where the memory is mapped, for buffers allocated mapped (pinned blocks, staging, device
    /// buffers in mapped VRAM): valid while the memory exists (see [`BufferObj::mapped`]).
    map: Option<super::SendPtr>,
    /// Set by [`BufferObj::release_in_background_when_dropped`]: the last owner's drop hands the
    /// objects to the background releaser instead of freeing them on its own thread.
    background: std::sync::atomic::AtomicBool,
    /// Set by [`BufferObj::reuse_when_dropped`]: the last owner's drop keeps the objects in the
    /// device's cache of freed blocks (`Shared::keep_for_reuse`) when they fit.
    reuse: std::sync::atomic::AtomicBool,
}

/// The granule a kept block's memory is counted in against `OpenOptions::pinned_cache`.
const PAGE: u64 = 4096;

/// A freed pinned driver block kept for reuse ([`Shared::keep_for_reuse`]): its buffer, its
/// memory and the mapping it keeps (only mapped blocks are kept).
pub(crate) struct KeptBlock {
    pub buffer: vk::Buffer,
    pub memory: vk::DeviceMemory,
    pub ptr: SendPtr,
}

/// Something that must outlive a `BufferObj`'s memory.
pub(crate) type Backing = Arc<dyn std::any::Any + Send + Sync>;

/// What releasing a [`BufferObj`] takes: shared between the object and its device
/// (`Shared::slots`), so that teardown reaches it even while the object's last owner is being
/// dropped on another thread. Whoever takes `memory` under its lock releases the objects (or
/// queues them for a drain) before letting go of the lock.
pub(crate) struct Slot {
    buffer: vk::Buffer,
    /// `Some` while the objects exist.
    memory: Mutex<Option<vk::DeviceMemory>>,
    /// `memory.is_some()`, readable without the lock (`find` asks on every lookup). Cleared
    /// under the lock before the objects are destroyed.
    present: std::sync::atomic::AtomicBool,
    /// What must outlive the memory (the host mapping an import was made from, when vkhost
    /// made it): dropped only after the memory is freed (by the release, or teardown's).
    backing: Mutex<Option<Backing>>,
    /// The fork generation it was made in: a forked child keeps the parent's mappings.
    fork_gen: u64,
}

impl Slot {
    /// Whether the device can forget this slot: its object is gone (only the device holds it)
    /// and nothing is left to release.
    fn done(self: &Arc<Self>) -> bool {
        Arc::strong_count(self) == 1 && !self.present.load(Ordering::Acquire)
    }

    /// Releases the objects if nobody did yet (teardown's sweep).
    ///
    /// # Safety
    /// No pending or future device work may use the buffer, and `s`, `l` are its device's.
    unsafe fn release(&self, s: &Shared, l: &Live) {
        let mut g = lock(&self.memory);
        self.present.store(false, Ordering::Release);
        if let Some(m) = g.take() {
            // SAFETY: the caller's contract; `take` under the lock makes this the only release.
            unsafe { s.release_bound(l, self.buffer, m) };
            drop(lock(&self.backing).take());
        }
        drop(g);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if super::fork_generation() != self.fork_gen {
            // A forked child: the mapping is the parent's too; leave it.
            std::mem::forget(take_backing(&mut self.backing));
        }
    }
}

impl std::fmt::Debug for BufferObj {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferObj").field("device", &self.device).field("buffer", &self.buffer).field("size", &self.size).finish()
    }
}

impl BufferObj {
    /// Takes ownership of a freshly bound buffer.
    pub(crate) fn new(shared: &Arc<Shared>, b: Bound, size: u64) -> BufferObj {
        let slot = Arc::new(Slot {
            buffer: b.buffer,
            memory: Mutex::new(Some(b.memory)),
            present: std::sync::atomic::AtomicBool::new(true),
            backing: Mutex::new(None),
            fork_gen: shared.fork_gen,
        });
        shared.add_slot(slot.clone());
        BufferObj {
            shared: Arc::downgrade(shared),
            device: shared.id,
            fork_gen: shared.fork_gen,
            buffer: b.buffer,
            size,
            slot,
            backed: false,
            map: b.ptr,
            background: std::sync::atomic::AtomicBool::new(false),
            reuse: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// From now on, the last owner's drop queues the objects for the background releaser
    /// (as [`BufferObj::release_later`] does) rather than freeing them itself: for a pinned block
    /// the caller let go of (`free_pinned`, a `PinnedBuffer`'s drop), whose vkFreeMemory takes
    /// 0.2-0.4 ms even at 4 KiB on the H200 (docs/PERFORMANCE.md). Nothing changes for work
    /// that still holds the object: it goes when the last of them is reaped, as before.
    pub(crate) fn release_in_background_when_dropped(&self) {
        self.background.store(true, std::sync::atomic::Ordering::Release);
    }

    /// From now on, the last owner's drop keeps a mapped buffer without a backing (a pinned
    /// driver block the caller let go of) in the device's cache of freed blocks, for the next
    /// block of its size (`OpenOptions::pinned_cache`), instead of releasing it; when the cache
    /// cannot keep it, the release goes on as set. As for the release: nothing changes for work
    /// that still holds the object, and it is kept only once the last of them is reaped.
    pub(crate) fn reuse_when_dropped(&self) {
        self.reuse.store(true, std::sync::atomic::Ordering::Release);
    }

    /// The mapping of the memory, if it was allocated mapped. Using it is sound only while the
    /// memory exists: the caller holds the device's `live` guard (so teardown cannot free it)
    /// and a reference to the owner of this object (so its drop cannot), and checks [`alive`](Self::alive).
    pub(crate) fn mapped(&self) -> Option<std::ptr::NonNull<u8>> {
        self.map.map(|p| p.0)
    }

    /// Keeps `backing` alive until the memory is freed.
    pub(crate) fn with_backing(mut self, backing: Backing) -> BufferObj {
        *lock(&self.slot.backing) = Some(backing);
        self.backed = true;
        self
    }

    /// The device's state, while the device is alive. Called only inside a call on an owner of
    /// the device (a handle that holds it), so the clone is never the last owner: the background
    /// releaser's rule (see `drop_shared`) rests on it.
    pub(crate) fn shared(&self) -> Option<Arc<Shared>> {
        self.shared.upgrade()
    }

    /// Whether the Vulkan objects still exist.
    pub(crate) fn alive(&self) -> bool {
        self.slot.present.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Hands the objects to the background releaser thread: the buffer counts as gone at once
    /// (`alive` is false), its memory is freed under the device's lock soon after on another
    /// thread, and at the latest by the device's teardown. Freeing an import unpins its pages
    /// (about 29 ms per GiB on the H200), so an unregister that hands it over returns once no
    /// work can touch the pages, without that wait. The pages stay pinned, and so physically
    /// allocated, until then: unmapping them meanwhile is harmless (nothing names the import
    /// any more).
    ///
    /// # Safety
    /// As for [`BufferObj::release_now`]: no pending or future device work may use the buffer.
    pub(crate) unsafe fn release_later(&self, s: &Arc<Shared>) {
        let mut g = lock(&self.slot.memory);
        self.slot.present.store(false, std::sync::atomic::Ordering::Release);
        // Queued under the slot's lock, so a teardown's sweep that finds the slot empty drains
        // it after.
        if let Some(m) = g.take() {
            s.queue_garbage(self.buffer, m, None);
        }
        drop(g);
        releaser().send(Arc::downgrade(s));
    }

    /// The memory the buffer is bound to (at offset 0), while the objects exist.
    pub(crate) fn memory(&self) -> Option<vk::DeviceMemory> {
        *lock(&self.slot.memory)
    }

    /// Whether the memory was imported from a host mapping vkhost made (a pinned block of
    /// vkhost's own huge-page memory, see `host::alloc_pinned`): only such imports carry a
    /// backing.
    pub(crate) fn has_backing(&self) -> bool {
        self.backed
    }

    /// Destroys the objects now (no-op if already gone).
    ///
    /// # Safety
    /// No pending or future device work may use the buffer, and `s`, `l` are its device's.
    pub(crate) unsafe fn release_now(&self, s: &Shared, l: &Live) {
        // SAFETY: the caller's contract. Once the import is gone, the mapping it was made from
        // may go too (teardown unmaps a block as it frees a driver-allocated one); other pieces
        // of the same block keep their share of it until they are released.
        unsafe { self.slot.release(s, l) };
    }
}

/// The backing out of its lock, poisoned or not (for `Drop`, which has the object to itself).
fn take_backing(b: &mut Mutex<Option<Backing>>) -> Option<Backing> {
    match b.get_mut() {
        Ok(b) => b.take(),
        Err(p) => p.into_inner().take(),
    }
}

impl Drop for BufferObj {
    fn drop(&mut self) {
        #[cfg(test)]
        tests::DROP_PAUSE.here(self.device.get());
        if super::fork_generation() != self.fork_gen {
            // Nothing here is the child's to release, not even a mapping vkhost made (the
            // slot's drop leaves it too).
            return;
        }
        // The last owner went: no submitted work holds it (batches keep an owner until they are
        // reaped), so it may go now, or as soon as the device lock is free. Everything below
        // runs under the slot's lock: a teardown sweeping it waits, then finds it empty and
        // drains what this queued.
        let mut g = lock(&self.slot.memory);
        // None: released already (by an unregister, or the device's teardown).
        let Some(m) = g.take() else { return };
        let Some(s) = self.shared.upgrade() else {
            // The device's last handle went and its teardown is under way: its sweep of the
            // slots waits for this lock and releases the objects (it holds the slot).
            *g = Some(m);
            return;
        };
        self.slot.present.store(false, Ordering::Release);
        let backing = lock(&self.slot.backing).take();
        // A pinned driver block let go of: kept for reuse where the cache takes it (`Err`: no
        // room for it, or the device is going; the handles are plain values, `m` is still ours).
        let kept = match (*self.reuse.get_mut(), &backing, self.map) {
            (true, None, Some(ptr)) => s.keep_for_reuse(KeptBlock { buffer: self.buffer, memory: m, ptr }, self.size).ok(),
            _ => None,
        };
        // Whether the background releaser has something to free.
        let wake = match kept {
            // Kept: the objects live on in the cache, out of this (now empty) slot; older blocks
            // queued to make room are the releaser's.
            Some(evicted) => evicted,
            None if *self.background.get_mut() => {
                s.queue_garbage(self.buffer, m, backing);
                true
            }
            None => {
                s.release_or_defer(self.buffer, m, backing);
                // Before `s`: if it is the last reference, its teardown sweeps this slot.
                drop(g);
                drop(s);
                return;
            }
        };
        // Let go of the slot, then of the device, then wake the releaser: woken first, it could
        // take the device before `drop_shared`, which would then wait out its whole drain (an
        // earlier unregister's 1 GiB unpin: ~30 ms) on this thread. If this was the last
        // reference, the teardown just freed the queue and the cache, and the releaser's upgrade
        // fails. (A last reference's teardown sweeps this slot: its lock must be free.)
        drop(g);
        let w = Arc::downgrade(&s);
        drop_shared(s);
        if wake {
            releaser().send(w);
        }
    }
}

impl Shared {
    /// Releases a buffer and its memory if the device lock is free now; queues them otherwise.
    pub(crate) fn release_or_defer(&self, buffer: vk::Buffer, memory: vk::DeviceMemory, backing: Option<Backing>) {
        if let Ok(g) = self.live.try_read() {
            if let Some(l) = g.as_ref() {
                // SAFETY: the owner's last reference went, so nothing uses the objects, and they
                // are released once (the owner took them).
                unsafe { self.release_bound(l, buffer, memory) };
            }
            // A destroyed device already released everything it had.
            drop(backing);
            return;
        }
        lock(&self.garbage).push((buffer, memory, backing));
        self.has_garbage.store(true, Ordering::Release);
    }

    /// Keeps a freed block (a pinned driver block whose last owner went: nothing uses it) in
    /// the cache for the next block of `size` bytes ([`Shared::reuse_block`]). `Ok(evicted)`:
    /// kept, and whether older blocks were queued for the releaser to make room. `Err(b)`: not
    /// kept, for the caller to release: it does not fit the cache, the device is lost, or its
    /// lock is taken (a destroy waits or runs: its teardown frees what the cache holds, and a
    /// block put in after that would outlive the device).
    pub(crate) fn keep_for_reuse(&self, b: KeptBlock, size: u64) -> Result<bool, KeptBlock> {
        if self.forked() || self.lost.load(Ordering::Acquire) {
            return Err(b);
        }
        let Ok(g) = self.live.try_read() else { return Err(b) };
        if g.is_none() {
            return Err(b);
        }
        // The memory a block holds: whole pages at least (a 1-byte block is a page or more of
        // device memory), so many tiny blocks cannot pass the cap uncounted.
        let cost = size.max(1).next_multiple_of(PAGE);
        let evicted = lock(&self.block_cache).put(size, cost, b)?;
        let any = !evicted.is_empty();
        for e in evicted {
            self.queue_garbage(e.buffer, e.memory, None);
        }
        drop(g);
        Ok(any)
    }

    /// A kept block of exactly `size` bytes (see [`Shared::keep_for_reuse`]), taken out of the
    /// cache: its buffer, memory and mapping are as the block's first allocation made them.
    /// It counts as reused once handed out ([`Shared::count_block_reuse`]).
    pub(crate) fn reuse_block(&self, _l: &Live, size: u64) -> Option<KeptBlock> {
        lock(&self.block_cache).take(size)
    }

    /// Counts a block [`Shared::reuse_block`] gave as handed out to a caller
    /// (`PinnedCacheStats::reused`).
    pub(crate) fn count_block_reuse(&self) {
        lock(&self.block_cache).count_reuse();
    }

    /// Releases every block the cache keeps; returns their bytes.
    pub(crate) fn trim_block_cache(&self, l: &Live) -> u64 {
        let (blocks, bytes) = {
            let mut c = lock(&self.block_cache);
            let bytes = c.stats().bytes;
            (c.drain(), bytes)
        };
        for b in blocks {
            // SAFETY: kept only after the last owner went (nothing uses it), taken out of the
            // cache under its lock, so released once.
            unsafe { self.release_bound(l, b.buffer, b.memory) };
        }
        bytes
    }

    /// Queues a buffer and its memory for the next drain (the releaser's, an allocation's,
    /// `Device::release_queued`'s or teardown's).
    fn queue_garbage(&self, buffer: vk::Buffer, memory: vk::DeviceMemory, backing: Option<Backing>) {
        lock(&self.garbage).push((buffer, memory, backing));
        self.has_garbage.store(true, Ordering::Release);
    }

    /// Releases queued garbage, buffers and pipelines (called with the device lock held). While
    /// another thread drains (the background releaser freeing an import), returns at once: that
    /// thread releases what it took, and anything queued after waits for the next drain.
    pub(crate) fn drain_garbage(&self, l: &Live) {
        let g = match self.draining.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        self.drain_locked(l);
        drop(g);
    }

    /// [`Shared::drain_garbage`] that waits for a drain in progress on another thread: when it
    /// returns, everything queued before the call is released, so object counts are exact
    /// (`Device::live_objects`). A drain that only skipped the flag would count a buffer the
    /// releaser destroyed while its memory is not freed yet.
    pub(crate) fn drain_all_garbage(&self, l: &Live) {
        let g = lock(&self.draining);
        self.drain_locked(l);
        drop(g);
    }

    /// The drain itself, with `draining` held.
    fn drain_locked(&self, l: &Live) {
        if !self.has_garbage.swap(false, Ordering::AcqRel) {
            return;
        }
        self.drain_pipeline_garbage(l);
        let g = std::mem::take(&mut *lock(&self.garbage));
        for (b, m, backing) in g {
            // SAFETY: queued by a drop of the last owner: nothing uses them; released once.
            unsafe { self.release_bound(l, b, m) };
            drop(backing);
        }
    }

    /// Keeps `slot` for teardown's sweep ([`Shared::sweep_slots`]); forgets slots whose object is
    /// gone and released now and then (amortized, as for children).
    fn add_slot(&self, slot: Arc<Slot>) {
        let mut g = lock(&self.slots);
        g.prune_when_due(|v| v.retain(|s| !s.done()));
        g.items.push(slot);
    }

    /// Teardown, after its children's `OBJECTS` phase: releases every buffer whose objects are
    /// still there (an owner's drop that began before the children were taken), waiting for a
    /// drop under way to let go of its slot. The drains that follow release what such drops
    /// queued.
    pub(crate) fn sweep_slots(&self, l: &Live) {
        let slots = std::mem::take(&mut lock(&self.slots).items);
        for s in slots {
            // SAFETY: teardown runs this with the device idle and every stream shut down; the
            // last owner is gone or going (its drop finds the slot empty).
            unsafe { s.release(self, l) };
        }
    }

    /// Lists a device buffer vkhost made, under its handle (see `Shared::device_buffers`).
    pub(crate) fn note_device_buffer(&self, b: vk::Buffer, owner: Weak<dyn std::any::Any + Send + Sync>) {
        let mut g = lock(&self.device_buffers);
        g.prune_when_due(|m| m.retain(|_, w| w.strong_count() > 0));
        // A handle of a buffer gone may have been given to this one: the newest entry wins.
        g.items.insert(b, owner);
    }

    /// The live device buffer vkhost made with handle `b`, if any.
    pub(crate) fn device_buffer(&self, b: vk::Buffer) -> Option<std::sync::Arc<dyn std::any::Any + Send + Sync>> {
        lock(&self.device_buffers).items.get(&b).and_then(std::sync::Weak::upgrade)
    }

    /// Registers a child for teardown.
    pub(crate) fn add_child(&self, c: Weak<dyn Child>) {
        let mut g = lock(&self.children);
        g.prune_when_due(|v| v.retain(|w| w.strong_count() > 0));
        g.items.push(c);
    }

    /// Every child still alive, held: teardown keeps them across its phases, so a child whose
    /// other owners go during one phase (a pinned block whose last batch or recorded copy is
    /// reaped in `WORK`) still gets the later ones (its objects released in `OBJECTS`). When
    /// the last handle of the device drops, its children cannot reach it any more (the `Weak`
    /// does not upgrade), so nothing else could release them.
    pub(crate) fn live_children(&self) -> Vec<Arc<dyn Child>> {
        lock(&self.children).items.iter().filter_map(|w| w.upgrade()).collect()
    }

    /// Runs teardown `phase` on `kids` (see [`Shared::live_children`]).
    /// Each child's step runs even when an earlier one panicked (a user's logger panicking on a
    /// line the step logs); the first panic is kept in `first` for the end of the teardown.
    pub(crate) fn teardown_children(&self, kids: &[Arc<dyn Child>], l: &Live, phase: u8, first: &mut Option<Panic>) {
        for k in kids {
            step(first, || k.teardown(self, l, phase));
        }
    }
}

/// The process's background releaser: one thread that drains the garbage of devices sent to it
/// (started on first use; it waits on a condition variable when idle).
struct Releaser {
    /// Starts the thread, once, after the releaser is installed (`releaser`).
    started: std::sync::Once,
    queue: Mutex<Vec<Weak<Shared>>>,
    cv: std::sync::Condvar,
    /// The address of the device state the releaser holds an `Arc` to now (0: none). Set under
    /// this lock when it upgrades, cleared under it after it dropped that `Arc`; [`drop_shared`]
    /// waits on `idle` while it names the device being dropped and no other owner is left.
    holding: Mutex<usize>,
    idle: std::sync::Condvar,
    /// Devices sent and not yet done with (dropped, or found gone): zero when the releaser has
    /// nothing queued or in hand. Tests wait for it before they pause the releaser, so that it
    /// cannot stop on an earlier send (a device's open-time import probe) while holding the
    /// device a test thread is about to drop.
    pending: std::sync::atomic::AtomicUsize,
}

/// This process's releaser, made on first use; a forked child makes its own (`PerFork`): there
/// the parent's has no thread, and its locks may have been held at the fork.
static RELEASER: crate::par::PerFork<Releaser> = crate::par::PerFork::new(|| Releaser {
    started: std::sync::Once::new(),
    queue: Mutex::new(Vec::new()),
    cv: std::sync::Condvar::new(),
    holding: Mutex::new(0),
    idle: std::sync::Condvar::new(),
    pending: std::sync::atomic::AtomicUsize::new(0),
});

/// The releaser of this fork generation, if one was started.
fn current_releaser() -> Option<&'static Releaser> {
    RELEASER.current()
}

/// Drops an owner's reference to a device's state so that the background releaser is never the
/// last owner (which would run the device's teardown on its thread, after the user's last drop
/// returned). While the releaser holds this device and no other owner is left (the count is
/// this reference and the releaser's), waits for it to let go; then gives the reference up
/// under the releaser's `holding` lock (`Arc::into_inner`), so the releaser cannot upgrade in
/// between: if this was the last reference, the releaser's later upgrade fails, and the
/// teardown runs here, **after** the lock is released. A teardown under the lock would stall
/// every other thread's vkhost drops, of every device, for as long as it lasts, and deadlock
/// where the teardown waits on one of those threads (a borrowed device's teardown waiting for
/// the semaphore of a recorded copy that a thread blocked in such a drop would signal; a
/// `keep_alive` owner joining a thread that drops a handle). Nested last drops (a teardown
/// dropping another device's last owner) take the same path: the lock is free again by then.
///
/// With another owner left, the drop does not wait: that owner's own drop takes this lock too,
/// so it cannot go meanwhile, and it is the one that waits if it turns out last. Waiting in
/// every case made a guard's drop wait out the releaser's whole drain of the same device (a
/// `PinnedBuffer` whose block it had just handed over, then its `Device` handle: up to ~30 ms
/// behind an earlier 1 GiB unregister's unpin on the H200), and a test that paused the releaser
/// there hung.
pub(crate) fn drop_shared(s: Arc<Shared>) {
    let Some(r) = current_releaser() else {
        // No releaser was started in this process (since the fork): nothing else can hold
        // the state.
        drop(s);
        return;
    };
    let me = Arc::as_ptr(&s) as usize;
    let last = {
        let mut h = lock(&r.holding);
        // Other references than this and the releaser's are owners (whose drops take this lock)
        // or transient clones inside a call on an owner's handle.
        while *h == me && Arc::strong_count(&s) <= 2 {
            h = r.idle.wait(h).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        Arc::into_inner(s)
    };
    // The teardown, if this was the last reference: no lock held.
    drop(last);
}

/// This fork generation's releaser, started on first use. If its thread cannot be started,
/// what is sent to it goes at the next allocation, `Device::release_queued` or teardown.
fn releaser() -> &'static Releaser {
    let r = RELEASER.get();
    // The thread is started by whoever gets here first, only for the installed releaser (a
    // releaser made by a thread that lost the race to install it is dropped unstarted).
    r.started.call_once(|| {
        if let Err(e) = std::thread::Builder::new().name("vkhost-release".into()).spawn(move || r.run()) {
            log::warn!("no background releaser thread ({e}): queued releases wait for the next allocation or teardown");
        }
    });
    r
}

impl Releaser {
    fn send(&self, s: Weak<Shared>) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        lock(&self.queue).push(s);
        self.cv.notify_one();
    }

    fn run(&self) {
        loop {
            let batch = {
                let mut q = lock(&self.queue);
                while q.is_empty() {
                    q = self.cv.wait(q).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                std::mem::take(&mut *q)
            };
            for w in batch {
                // Upgrade under `holding` (see `drop_shared`): an owner's last drop in progress
                // finishes first (then this fails), and one that starts later waits for us.
                let s = {
                    let mut h = lock(&self.holding);
                    let Some(s) = w.upgrade() else {
                        self.pending.fetch_sub(1, Ordering::AcqRel);
                        continue;
                    };
                    *h = Arc::as_ptr(&s) as usize;
                    s
                };
                #[cfg(test)]
                tests::pause_point(&s);
                // A device being destroyed holds the lock exclusively and drains its garbage
                // itself; afterwards `live` is None and there is nothing left here. Never block
                // on the lock while holding the device: a thread waiting in `drop_shared` for
                // us may hold a read lock that a pending teardown (a writer) waits for, and a
                // writer-preferring lock would park this read behind it. Skipped garbage goes
                // at the next allocation, `live_objects` or teardown.
                match s.live.try_read() {
                    Ok(g) => {
                        if let Some(l) = g.as_ref() {
                            s.drain_garbage(l);
                        }
                    }
                    Err(std::sync::TryLockError::Poisoned(p)) => {
                        if let Some(l) = p.get_ref().as_ref() {
                            s.drain_garbage(l);
                        }
                    }
                    Err(std::sync::TryLockError::WouldBlock) => {}
                }
                // Not the last reference: every owner's drop goes through `drop_shared`, which
                // waits while `holding` names this device and no other owner is left (so the
                // last owner waits), and transient clones live inside a call on an owner's
                // handle (a `Weak<Shared>` is upgraded only there: see `BufferObj::shared`).
                let mut h = lock(&self.holding);
                let last = Arc::into_inner(s);
                *h = 0;
                drop(h);
                self.pending.fetch_sub(1, Ordering::AcqRel);
                self.idle.notify_all();
                // `None` by the protocol above; were it the last reference, its teardown runs
                // here, outside the lock, as in `drop_shared`.
                drop(last);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::time::{Duration, Instant};

    /// The device (id) whose release the releaser stops in, holding its state, until cleared.
    static PAUSE_ID: AtomicU64 = AtomicU64::new(0);
    static REACHED: AtomicBool = AtomicBool::new(false);

    /// The tests below share the pause: one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    /// For a test of the pause: the other one kept out, `REACHED` cleared, and a device (None,
    /// after saying why the test is skipped, if there is none).
    fn setup() -> Option<(std::sync::MutexGuard<'static, ()>, crate::Device)> {
        let one = lock(&SERIAL);
        REACHED.store(false, Ordering::Release);
        // Freed blocks released, not kept for reuse (whatever VKHOST_PINNED_CACHE says): these
        // tests follow a block to the releaser.
        match crate::Device::open_default_with(&crate::OpenOptions { pinned_cache: Some(0), ..Default::default() }) {
            Ok(d) => {
                // The open-time import probe's unregister sent the device to the releaser:
                // let that go by before a test arms the pause, or the releaser could stop on
                // that send, holding the device before the test's own send, where the test
                // does not expect it.
                settle();
                Some((one, d))
            }
            Err(e) => {
                eprintln!("skipped: no Vulkan device ({e})");
                None
            }
        }
    }

    /// Waits until the releaser has nothing sent and not done with (none started: nothing to
    /// wait for).
    fn settle() {
        let Some(r) = current_releaser() else { return };
        let t = Instant::now();
        while r.pending.load(Ordering::Acquire) != 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "the releaser never finished what it was sent");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Lets the releaser go every `secs` while it is paused (a test thread blocked on the paused
    /// releaser would otherwise hang the binary); the test asserts it did not fire. Dropping it
    /// disarms it. `settle` waits for the process-wide count of sends: with tests on several
    /// threads another test's sends can hold it up (the binaries run one test at a time).
    struct Watchdog {
        fired: Arc<AtomicBool>,
        _disarm: std::sync::mpsc::Sender<()>,
    }
    impl Watchdog {
        fn start(secs: u64) -> Watchdog {
            let fired = Arc::new(AtomicBool::new(false));
            let f = fired.clone();
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            std::thread::spawn(move || {
                // Every `secs` until disarmed: a later round of the test may pause again.
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(secs)) {
                    if PAUSE_ID.load(Ordering::Acquire) != 0 {
                        // Said before the release, so the released drop cannot return first.
                        f.store(true, Ordering::Release);
                        PAUSE_ID.store(0, Ordering::Release);
                    }
                }
            });
            Watchdog { fired, _disarm: tx }
        }
        fn fired(&self) -> bool {
            self.fired.load(Ordering::Acquire)
        }
    }

    /// Where the first of an armed device's buffer drops stops (`BufferObj::drop`'s start).
    pub(super) static DROP_PAUSE: crate::device::testing::DropPause = crate::device::testing::DropPause::new();

    /// A device buffer whose last owner is dropped on another thread as the device is
    /// destroyed: the drop has begun (the owner's count is zero, so teardown's children do not
    /// include it) but none of it has run when the teardown does. Teardown must still release
    /// the buffer before the device goes: before the slots, the drop found the device destroyed
    /// afterwards and the objects were never freed (the validation layer reports them at
    /// vkDestroyDevice; the counts keep them).
    #[test]
    fn a_buffer_dropped_on_another_thread_as_its_device_is_destroyed_is_released_first() {
        let _one = lock(&SERIAL);
        let Some(dev) = crate::device::testing::open_validated() else { return };
        let buf = dev.alloc_buffer(4096).unwrap();
        let unpause = DROP_PAUSE.arm(dev.id().get());
        let t = std::thread::spawn(move || drop(buf));
        DROP_PAUSE.wait_reached("the buffer's drop");
        dev.destroy().unwrap();
        drop(unpause);
        t.join().unwrap();
        assert_eq!(dev.shared.objects.snapshot(), crate::device::LiveObjects::default(), "objects left after destroy");
        assert_eq!(dev.validation_errors(), 0, "{:?}", dev.last_validation_error());
    }

    pub(super) fn pause_point(s: &Shared) {
        if PAUSE_ID.load(Ordering::Acquire) != s.id.get() {
            return;
        }
        REACHED.store(true, Ordering::Release);
        while PAUSE_ID.load(Ordering::Acquire) == s.id.get() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The user's last drop of a device while the background releaser holds its state: the
    /// drop of another handle first returns at once, and the last drop must return only once
    /// the device is torn down (on the user's thread), never leave
    /// the teardown to the releaser for later (found by a doc example under validation: a
    /// segfault in the layer when the teardown raced process exit; for a borrowed device,
    /// vkhost would use the caller's VkDevice after the caller's drop returned).
    #[test]
    fn the_last_drop_tears_down_even_while_the_releaser_holds_the_device() {
        let Some((_one, dev)) = setup() else { return };
        if let Err(e) = dev.host_registration() {
            eprintln!("skipped: host registration unavailable ({e})");
            return;
        }
        let weak = Arc::downgrade(&*dev.shared);
        PAUSE_ID.store(dev.id().get(), Ordering::Release);
        // An unregister hands the import to the releaser, which stops holding the state.
        let layout = std::alloc::Layout::from_size_align(4096, 4096).unwrap();
        // SAFETY: a fresh page-aligned allocation, freed below after the unregister.
        let page = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!page.is_null());
        // SAFETY: the page stays allocated until after `unregister` returns.
        unsafe { crate::host::register(&dev, page, 4096) }.unwrap();
        crate::host::unregister(&dev, page).unwrap();
        let t = Instant::now();
        while !REACHED.load(Ordering::Acquire) {
            assert!(t.elapsed() < Duration::from_secs(10), "the releaser never took the device");
            std::thread::sleep(Duration::from_millis(1));
        }
        // A handle that is not the last goes at once, held releaser or not.
        let watchdog = Watchdog::start(20);
        drop(dev.clone());
        assert!(!watchdog.fired(), "dropping a second handle waited for the held releaser");
        drop(watchdog);
        let release = std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            PAUSE_ID.store(0, Ordering::Release);
        });
        drop(dev);
        let torn_down = weak.upgrade().is_none();
        release.join().unwrap();
        // SAFETY: allocated above with this layout; no import of it is left.
        unsafe { std::alloc::dealloc(page, layout) };
        assert!(torn_down, "the last Device drop returned while the releaser still held the device");
    }

    /// `free_pinned` and a `PinnedBuffer`'s drop hand the block to the background releaser
    /// (freeing driver memory took 0.2-0.4 ms per block on the H200): the releaser is sent the
    /// device, and while it is held there the block waits in the garbage, counted as gone by
    /// `live_objects` (which frees it on the caller's thread).
    #[test]
    fn free_pinned_hands_the_block_to_the_background_releaser() {
        let Some((_one, dev)) = setup() else { return };
        let before = dev.live_objects();
        /// Lets the releaser go however the test ends (a failed assert must not leave it
        /// paused for the rest of the binary).
        struct Unpause;
        impl Drop for Unpause {
            fn drop(&mut self) {
                PAUSE_ID.store(0, Ordering::Release);
            }
        }
        let _unpause = Unpause;
        let watchdog = Watchdog::start(60);
        PAUSE_ID.store(dev.id().get(), Ordering::Release);
        for guard in [false, true] {
            REACHED.store(false, Ordering::Release);
            if guard {
                drop(crate::PinnedBuffer::new(&dev, 4096).unwrap());
            } else {
                let p = crate::host::alloc_pinned(&dev, 4096).unwrap();
                crate::host::free_pinned(&dev, p).unwrap();
            }
            let t = Instant::now();
            while !REACHED.load(Ordering::Acquire) {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "the block was freed on the caller's thread, not handed to the releaser (guard: {guard})"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(lock(&dev.shared.garbage).len(), 1, "the block waits for the held releaser (guard: {guard})");
            // `live_objects` frees it here while the releaser is held.
            assert_eq!(dev.live_objects(), before);
            assert!(lock(&dev.shared.garbage).is_empty());
            PAUSE_ID.store(0, Ordering::Release);
            // Let the releaser finish with the device before the next round pauses it again:
            // paused on this round's send while the next round's drop waits for it to let go
            // of the device, the two would wait for each other.
            assert!(current_releaser().is_some(), "the releaser was started");
            settle();
            PAUSE_ID.store(dev.id().get(), Ordering::Release);
        }
        PAUSE_ID.store(0, Ordering::Release);
        assert!(!watchdog.fired(), "the releaser had to be let go by the watchdog: the test's drop waited for it");
        dev.destroy().unwrap();
    }

    /// `Pruned`: a list whose live count sits just under a power of two while entries come and
    /// go is pruned once per doubling, not on every insert (as pruning at each power of two
    /// did), and pruning keeps exactly the live entries.
    #[test]
    fn pruned_lists_prune_once_per_doubling_under_churn() {
        let mut p = super::Pruned::new(Vec::<(u32, bool)>::new()); // (id, alive)
        let mut prunes = 0;
        for i in 0..127 {
            p.prune_when_due(|v| v.retain(|e| e.1));
            p.items.push((i, true));
        }
        // Churn: each round one entry dies and one is added, 127 alive throughout.
        for i in 127..10_127u32 {
            let dead = p.items.iter().position(|e| e.1).unwrap();
            p.items[dead].1 = false;
            p.prune_when_due(|v| {
                prunes += 1;
                v.retain(|e| e.1);
            });
            p.items.push((i, true));
        }
        assert_eq!(p.items.iter().filter(|e| e.1).count(), 127);
        assert!(prunes <= 10_000 / 127 + 2, "{prunes} prunes for 10 000 inserts at 127 live entries");
        p.items.retain(|e| e.1);
        assert!(p.items.iter().all(|e| e.1) && p.items.len() == 127);
    }
}
