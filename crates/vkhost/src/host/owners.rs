//! The registry of owners (layer 3): the process-wide table of registrations and pinned blocks
//! per device and address, each entry's `Imports` (the `Arc<Resource>` owners of its pieces),
//! and the list of devices that listed entries (tombstones are dropped once nobody can name
//! them). The raw seed API (`host/mod.rs`) and the copies (`host/copy.rs`) use it.

use super::registry::Registry;
use crate::device::{Shared, lock};
use crate::resource::Resource;
use ash::vk;
use std::sync::{Arc, Mutex};

pub(super) type Reg = Registry<crate::DeviceId, Option<Cell>>;

/// An entry's cell: what it owns, with the first piece's buffer and the piece size inline, so
/// `find` answers from the registry's own node without following a pointer (with 10 000
/// registrations each pointer followed is a likely cache miss).
#[derive(Clone)]
pub(crate) struct Cell {
    pub(super) imports: Arc<Imports>,
    pub(super) first: vk::Buffer,
    pub(super) part: usize,
}

impl Cell {
    pub(super) fn new(imports: Arc<Imports>) -> Cell {
        let (first, part) = (imports.first, imports.part);
        Cell { imports, first, part }
    }
}

impl std::ops::Deref for Cell {
    type Target = Arc<Imports>;
    fn deref(&self) -> &Arc<Imports> {
        &self.imports
    }
}

/// What an entry owns: its covered range as one import (or pinned block), or, when the range
/// is larger than the device's largest allocation ([`crate::OpenOptions::max_import_piece`]),
/// as consecutive pieces of `part` bytes each (the last may be shorter). Unregister, tombstones
/// and stats treat the pieces as one entry; a lookup or a copy addresses the piece that holds
/// each byte.
#[derive(Debug)]
pub(crate) struct Imports {
    pub parts: Vec<Arc<Resource>>,
    pub part: usize,
    /// The first piece's buffer, inline: `find` answers most lookups without following
    /// `parts` (with 10 000 registrations each pointer it follows is a likely cache miss).
    pub first: vk::Buffer,
}

impl Imports {
    pub(super) fn one(r: Arc<Resource>, len: usize) -> Arc<Imports> {
        let first = r.obj.buffer;
        Arc::new(Imports { parts: vec![r], part: len.max(1), first })
    }

    pub(super) fn new(parts: Vec<Arc<Resource>>, part: usize) -> Arc<Imports> {
        let first = parts.first().map_or(vk::Buffer::null(), |r| r.obj.buffer);
        Arc::new(Imports { parts, part, first })
    }

    /// Whether the objects exist (all pieces share their device's fate).
    pub(crate) fn alive(&self) -> bool {
        self.parts.first().is_some_and(|p| p.obj.alive())
    }

    /// The piece holding the byte `off` bytes into the covered range, and its offset there.
    pub(crate) fn at(&self, off: usize) -> (&Arc<Resource>, usize) {
        let i = (off / self.part).min(self.parts.len() - 1);
        (&self.parts[i], off - i * self.part)
    }

    /// Bytes from `off` to the end of its piece.
    pub(super) fn left_in_part(&self, off: usize, covered_len: usize) -> usize {
        let i = (off / self.part).min(self.parts.len() - 1);
        ((i + 1) * self.part).min(covered_len) - off
    }

    /// Waits for device writes pending on any piece (see `Resource::settle_writes`).
    pub(crate) fn settle_writes(&self) {
        self.parts.iter().for_each(|p| p.settle_writes());
    }

    /// Waits for any device access pending on any piece.
    pub(crate) fn settle_all(&self) {
        self.parts.iter().for_each(|p| p.settle_all());
    }
}

/// The registry of this process. A forked child starts with an empty one: a parent thread may
/// have held the lock at the fork (the child's first `register`, its own device's open among
/// them, hung on it), and the parent's entries name the parent's Vulkan objects, which the
/// child must not touch (`find` on them answers nothing there).
static REGISTRY: crate::par::PerFork<Mutex<Reg>> = crate::par::PerFork::new(|| Mutex::new(Registry::new()));

pub(super) fn registry() -> std::sync::MutexGuard<'static, Reg> {
    lock(REGISTRY.get())
}

/// A device that listed an entry in the registry, with a `Weak` of its state.
type Lister = (crate::DeviceId, std::sync::Weak<Shared>);

/// The devices that listed an entry in the registry.
static LISTERS: crate::par::PerFork<Mutex<Vec<Lister>>> = crate::par::PerFork::new(|| Mutex::new(Vec::new()));

/// Called before `s` lists an entry: the entries of devices whose state is gone (the last
/// handle and every guard dropped: nobody can name them to unregister or free) leave the
/// registry, whichever device lists next: tombstones stay only while a late
/// `unregister`/`free_pinned` can still reach them, instead of for the life of the process (a
/// program that opened devices in a loop and dropped them before their registrations grew
/// without bound). The list holds one entry per device that listed and still lives, so the scan
/// is short. The registry's lock is not held while the lister list's is, and the entries are
/// dropped after both.
pub(super) fn note_lister(s: &Arc<Shared>) {
    let gone: Vec<crate::DeviceId> = {
        let mut g = lock(LISTERS.get());
        // One pass: a device whose last reference drops meanwhile is either kept for the next
        // listing or swept now, never dropped from the list unswept.
        let mut gone = Vec::new();
        g.retain(|(id, w)| {
            let live = w.strong_count() > 0;
            if !live {
                gone.push(*id);
            }
            live
        });
        if !g.iter().any(|(id, _)| *id == s.id) {
            g.push((s.id, Arc::downgrade(s)));
        }
        gone
    };
    if gone.is_empty() {
        return;
    }
    let dropped: Vec<_> = {
        let mut r = registry();
        gone.into_iter().flat_map(|id| r.remove_device(id)).collect()
    };
    drop(dropped);
}
