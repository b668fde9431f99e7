//! The registry: which host ranges a VkBuffer covers, per device. Pure data, no Vulkan calls.
//!
//! One table for the process, keyed by (device, address), behind one lock (held by
//! `host::REGISTRY`). Each device has a [`Table`]: its entries sorted by *key* (the registered
//! or allocated start, which the caller names on unregister/free), with the keys in a vector of
//! their own. Keys' user ranges never overlap, so entries sorted by key are sorted by end too,
//! and lookups visit only the entries near the address: a binary search over the keys, then
//! O(k), k the entries sharing a granule with it.
//!
//! An entry's *covered* range is what its buffer spans: the rounded import for a registration,
//! the block for a pinned allocation. Two registrations may share a page, so covered ranges may
//! overlap; `find` answers with any entry whose covered range holds the whole query.
//!
//! Entries hold a cell `T` (in the crate: an `Option` of the entry's imports). `None` is a
//! reservation whose import is still being made; a cell whose imports are dead (the device was
//! destroyed) is a tombstone. `find` in `host/mod.rs` skips both.

use std::ops::Range;

/// The kind of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Registered,
    Pinned,
}

/// One entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<T> {
    pub kind: Kind,
    /// The bytes the caller registered or allocated.
    pub user: Range<usize>,
    /// The bytes the buffer covers; `user` ⊆ `covered`.
    pub covered: Range<usize>,
    /// False while a registration is being imported (a reservation): not usable, not removable.
    pub live: bool,
    /// The safe guard type that owns the entry (`PinnedBuffer`, `Registration`, `HostRange`),
    /// if any: the raw `free_pinned` and `unregister` refuse it, naming that type.
    pub guard: Option<&'static str>,
    pub cell: T,
}

/// What [`Registry::split`] returns: inline for up to four pieces (a copy's range nearly always
/// is one entry, or one entry and a gap), so a synchronous copy allocates nothing to plan.
pub type Split<'a, T> = smallvec::SmallVec<[(Range<usize>, Option<&'a Entry<T>>); 4]>;

/// Why an insertion was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Overlap,
}

/// A map from the few devices a process has to their tables: a vector searched in order, which
/// beats hashing for a handful of keys (`find` runs it on every lookup).
#[derive(Debug)]
struct DevMap<D, V>(Vec<(D, V)>);

impl<D: Eq + Copy, V: Default> DevMap<D, V> {
    fn get(&self, d: &D) -> Option<&V> {
        self.0.iter().find(|(k, _)| k == d).map(|(_, v)| v)
    }
    fn get_mut(&mut self, d: &D) -> Option<&mut V> {
        self.0.iter_mut().find(|(k, _)| k == d).map(|(_, v)| v)
    }
    fn or_default(&mut self, d: D) -> &mut V {
        let i = match self.0.iter().position(|(k, _)| *k == d) {
            Some(i) => i,
            None => {
                self.0.push((d, V::default()));
                self.0.len() - 1
            }
        };
        &mut self.0[i].1
    }
    fn remove(&mut self, d: &D) {
        self.0.retain(|(k, _)| k != d);
    }
    fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }
    fn keys(&self) -> impl Iterator<Item = &D> {
        self.0.iter().map(|(k, _)| k)
    }
}

/// One device's entries, sorted by key, with the keys in a vector of their own: a lookup is a
/// binary search over 8-byte keys (80 KB for 10 000 entries, cache-resident) and then one entry,
/// where a `BTreeMap` walked down nodes that hold the entries themselves: in a microbenchmark of
/// 10 000 one-page entries and random lookups, 40 ns against 82-98. Inserting or removing moves
/// the entries after the position (a memmove of about 70 bytes per entry: ~0.35 MB at 10 000,
/// a small part of an import's own cost).
#[derive(Debug)]
struct Table<T> {
    keys: Vec<usize>,
    entries: Vec<Entry<T>>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table { keys: Vec::new(), entries: Vec::new() }
    }
}

impl<T> Table<T> {
    fn len(&self) -> usize {
        self.keys.len()
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The index of the first key at or above `x`.
    fn lower(&self, x: usize) -> usize {
        self.keys.partition_point(|&k| k < x)
    }

    /// The index of the first key above `x`.
    fn upper(&self, x: usize) -> usize {
        self.keys.partition_point(|&k| k <= x)
    }

    /// The index of key `k`, if present.
    fn index(&self, k: usize) -> Option<usize> {
        let i = self.lower(k);
        (self.keys.get(i) == Some(&k)).then_some(i)
    }

    fn get(&self, k: usize) -> Option<&Entry<T>> {
        self.index(k).map(|i| &self.entries[i])
    }

    fn get_mut(&mut self, k: usize) -> Option<&mut Entry<T>> {
        self.index(k).map(|i| &mut self.entries[i])
    }

    /// Inserts `e` at key `k`, replacing an entry with the same key (as a map does).
    fn insert(&mut self, k: usize, e: Entry<T>) {
        match self.index(k) {
            Some(i) => self.entries[i] = e,
            None => {
                let i = self.lower(k);
                self.keys.insert(i, k);
                self.entries.insert(i, e);
            }
        }
    }

    fn remove(&mut self, k: usize) -> Option<Entry<T>> {
        let i = self.index(k)?;
        self.keys.remove(i);
        Some(self.entries.remove(i))
    }

    /// The entries whose key is below `x`, nearest first.
    fn below(&self, x: usize) -> impl DoubleEndedIterator<Item = &Entry<T>> {
        self.entries[..self.lower(x)].iter().rev()
    }

    /// The entries whose key is at or below `x`, nearest first.
    fn at_or_below(&self, x: usize) -> impl Iterator<Item = &Entry<T>> {
        self.entries[..self.upper(x)].iter().rev()
    }

    /// (key, entry) for keys at or above `x`, in order.
    fn from(&self, x: usize) -> impl Iterator<Item = (usize, &Entry<T>)> {
        let i = self.lower(x);
        self.keys[i..].iter().copied().zip(self.entries[i..].iter())
    }

    fn values(&self) -> std::slice::Iter<'_, Entry<T>> {
        self.entries.iter()
    }

    fn values_mut(&mut self) -> std::slice::IterMut<'_, Entry<T>> {
        self.entries.iter_mut()
    }
}

/// The per-process table, generic over the cell so tests can model it with plain values.
#[derive(Debug)]
pub struct Registry<D, T> {
    devices: DevMap<D, Table<T>>,
    /// The widest distance between an entry's covered range and its user range, per side:
    /// bounds how far from a query a covering entry's key can be.
    slack: usize,
}

impl<D, T> Default for Registry<D, T> {
    fn default() -> Self {
        Registry { devices: DevMap(Vec::new()), slack: 0 }
    }
}

impl<D: std::hash::Hash + Eq + Copy, T> Registry<D, T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `range` overlaps any entry's user bytes on `dev`.
    pub fn overlaps(&self, dev: D, range: &Range<usize>) -> bool {
        let Some(m) = self.devices.get(&dev) else { return false };
        if range.start >= range.end {
            return false;
        }
        // The last entry starting before range.end is the only candidate that can reach it.
        m.below(range.end).next().is_some_and(|e| e.user.end > range.start)
    }

    /// Inserts an entry keyed by `user.start`; refuses overlap with another entry's user bytes.
    pub fn insert(&mut self, dev: D, entry: Entry<T>) -> Result<(), Refusal> {
        if self.overlaps(dev, &entry.user) || entry.user.is_empty() {
            return Err(Refusal::Overlap);
        }
        let slack = (entry.user.start - entry.covered.start).max(entry.covered.end - entry.user.end);
        self.slack = self.slack.max(slack);
        self.devices.or_default(dev).insert(entry.user.start, entry);
        Ok(())
    }

    /// The entry keyed exactly `addr`.
    pub fn get(&self, dev: D, addr: usize) -> Option<&Entry<T>> {
        self.devices.get(&dev)?.get(addr)
    }

    pub fn get_mut(&mut self, dev: D, addr: usize) -> Option<&mut Entry<T>> {
        self.devices.get_mut(&dev)?.get_mut(addr)
    }

    /// Removes the entry keyed exactly `addr` if `pred` accepts it.
    pub fn remove_if(&mut self, dev: D, addr: usize, pred: impl FnOnce(&Entry<T>) -> bool) -> Option<Entry<T>> {
        let m = self.devices.get_mut(&dev)?;
        if !pred(m.get(addr)?) {
            return None;
        }
        let e = m.remove(addr);
        if m.is_empty() {
            self.devices.remove(&dev);
        }
        e
    }

    /// Entries whose covered range contains `addr`, nearest key first. Only live entries.
    fn covering(&self, dev: D, addr: usize) -> impl Iterator<Item = &Entry<T>> {
        let slack = self.slack;
        self.devices
            .get(&dev)
            .into_iter()
            .flat_map(move |m| m.at_or_below(addr.saturating_add(slack)))
            // Ends decrease going back; once an entry ends (plus slack) at or before addr, so
            // does every earlier one.
            .take_while(move |e| e.user.end.saturating_add(slack) > addr)
            .filter(move |e| e.live && e.covered.start <= addr && addr < e.covered.end)
    }

    /// The live entry whose covered range holds all of `[addr, addr+len)` (len ≥ 1), preferring
    /// the one whose own bytes contain `addr`.
    pub fn find(&self, dev: D, addr: usize, len: usize) -> Option<&Entry<T>> {
        let end = addr.checked_add(len.max(1))?;
        let mut best: Option<&Entry<T>> = None;
        for e in self.covering(dev, addr) {
            if e.covered.end >= end {
                if e.user.contains(&addr) {
                    return Some(e);
                }
                best = best.or(Some(e));
            }
        }
        best
    }

    /// Splits `[addr, addr+len)` into covered pieces and gaps, in order: `(range, Some(entry))`
    /// for a piece a live entry covers, `(range, None)` for a gap.
    pub fn split(&self, dev: D, addr: usize, len: usize) -> Split<'_, T> {
        let mut out: Split<'_, T> = Split::new();
        let Some(end) = addr.checked_add(len) else { return out };
        let mut cur = addr;
        while cur < end {
            // Bytes an entry registered or allocated go through that entry's own buffer, so the
            // uses of every byte are noted on its owner (an unregister waits for exactly the work
            // that can touch its bytes). Bytes in no entry's own range (the rest of a shared page)
            // go through the covering entry that reaches farthest, up to the next entry's start.
            let owner = self.covering(dev, cur).find(|e| e.user.contains(&cur));
            let hit = owner.or_else(|| self.covering(dev, cur).max_by_key(|e| e.covered.end));
            match hit {
                Some(e) => {
                    let limit = match owner {
                        Some(o) => o.user.end,
                        None => self.next_key_after(dev, cur).unwrap_or(usize::MAX),
                    };
                    let stop = e.covered.end.min(end).min(limit);
                    out.push((cur..stop, Some(e)));
                    cur = stop;
                }
                None => {
                    let next = self.next_covered_start(dev, cur).unwrap_or(end).min(end);
                    match out.last_mut() {
                        Some((r, None)) => r.end = next,
                        _ => out.push((cur..next, None)),
                    }
                    cur = next;
                }
            }
        }
        out
    }

    /// The smallest entry key (user start) above `addr`, live or not.
    fn next_key_after(&self, dev: D, addr: usize) -> Option<usize> {
        let m = self.devices.get(&dev)?;
        m.from(addr.checked_add(1)?).next().map(|(k, _)| k)
    }

    /// The smallest covered start above `addr` among live entries.
    fn next_covered_start(&self, dev: D, addr: usize) -> Option<usize> {
        let m = self.devices.get(&dev)?;
        let slack = self.slack;
        let mut best: Option<usize> = None;
        for (_, e) in m.from(addr.saturating_sub(slack)) {
            if let Some(b) = best {
                if e.user.start.saturating_sub(slack) > b {
                    break;
                }
            }
            if e.live && e.covered.start > addr {
                best = Some(best.map_or(e.covered.start, |b| b.min(e.covered.start)));
            }
        }
        best
    }

    /// All entries of a device, in address order.
    pub fn entries(&self, dev: D) -> impl Iterator<Item = &Entry<T>> {
        self.devices.get(&dev).into_iter().flat_map(|m| m.values())
    }

    /// All entries of a device, mutable, in address order.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn entries_mut(&mut self, dev: D) -> impl Iterator<Item = &mut Entry<T>> {
        self.devices.get_mut(&dev).into_iter().flat_map(|m| m.values_mut())
    }

    /// Entries of every device.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn len(&self) -> usize {
        self.devices.values().map(|m| m.len()).sum()
    }

    #[cfg_attr(not(test), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every entry of `dev` (a device nobody can name any more) and returns them, to be
    /// dropped outside whatever lock guards the registry.
    pub fn remove_device(&mut self, dev: D) -> Vec<Entry<T>> {
        let Some(i) = self.devices.0.iter().position(|(k, _)| *k == dev) else { return Vec::new() };
        self.devices.0.swap_remove(i).1.entries
    }

    /// The devices that have entries.
    pub fn device_ids(&self) -> Vec<D> {
        self.devices.keys().copied().collect()
    }

    /// Entries of one device.
    pub fn len_of(&self, dev: D) -> usize {
        self.devices.get(&dev).map_or(0, |m| m.len())
    }
}

/// Rounds `[addr, addr+len)` outward to multiples of `granule` (a power of two).
/// `None` if the rounded end overflows, or if `granule` is not a power of two (0 included):
/// import granules always are (the page size, and minImportedHostPointerAlignment, which
/// Vulkan requires to be one). Before, such a granule panicked in debug builds and gave a range
/// that was no multiple of it in release.
///
/// # Example
///
/// ```
/// use vkhost::host::round_out;
/// assert_eq!(round_out(4100, 10, 4096), Some(4096..8192));
/// assert_eq!(round_out(4096, 4096, 4096), Some(4096..8192), "aligned ranges stay as they are");
/// assert_eq!(round_out(4000, 200, 4096), Some(0..8192), "a range across a boundary takes both pages");
/// assert_eq!(round_out(usize::MAX - 10, 5, 4096), None);
/// assert_eq!(round_out(4100, 10, 3), None, "not a power of two");
/// ```
pub fn round_out(addr: usize, len: usize, granule: usize) -> Option<Range<usize>> {
    if !granule.is_power_of_two() {
        return None;
    }
    let start = addr & !(granule - 1);
    let end = addr.checked_add(len)?.checked_add(granule - 1)? & !(granule - 1);
    Some(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type R = Registry<u32, u32>;

    fn reg(user: Range<usize>, g: usize, cell: u32) -> Entry<u32> {
        Entry { kind: Kind::Registered, covered: round_out(user.start, user.len(), g).unwrap(), user, live: true, guard: None, cell }
    }

    fn pin(user: Range<usize>, cell: u32) -> Entry<u32> {
        Entry { kind: Kind::Pinned, covered: user.clone(), user, live: true, guard: None, cell }
    }

    #[test]
    fn rounding() {
        assert_eq!(round_out(4096 + 10, 100, 4096), Some(4096..8192));
        assert_eq!(round_out(4096, 4096, 4096), Some(4096..8192));
        assert_eq!(round_out(4095, 2, 4096), Some(0..8192));
        assert_eq!(round_out(usize::MAX - 10, 5, 4096), None);
    }

    #[test]
    fn find_inside_covered_not_just_user_bytes() {
        let mut r = R::new();
        r.insert(0, reg(4096 + 100..4096 + 200, 4096, 1)).unwrap();
        assert_eq!(r.find(0, 4096, 4096).map(|e| e.cell), Some(1));
        assert_eq!(r.find(0, 4096 + 150, 10).map(|e| e.cell), Some(1));
        assert!(r.find(0, 4096, 4097).is_none());
        assert!(r.find(1, 4096 + 150, 10).is_none(), "other device is independent");
    }

    #[test]
    fn shared_page_both_findable() {
        let mut r = R::new();
        r.insert(0, reg(4096 + 10..4096 + 20, 4096, 1)).unwrap();
        r.insert(0, reg(4096 + 30..4096 + 40, 4096, 2)).unwrap();
        assert_eq!(r.find(0, 4096 + 12, 2).unwrap().cell, 1);
        assert_eq!(r.find(0, 4096 + 32, 2).unwrap().cell, 2);
        assert!(r.find(0, 4096 + 25, 1).is_some());
        assert_eq!(r.insert(0, reg(4096 + 15..4096 + 35, 4096, 3)), Err(Refusal::Overlap));
    }

    #[test]
    fn split_mixed() {
        let mut r = R::new();
        r.insert(0, pin(1000..2000, 1)).unwrap();
        r.insert(0, pin(3000..4000, 2)).unwrap();
        let s = r.split(0, 1500, 2000);
        let v: Vec<_> = s.iter().map(|(rg, e)| (rg.clone(), e.map(|e| e.cell))).collect();
        assert_eq!(v, vec![(1500..2000, Some(1)), (2000..3000, None), (3000..3500, Some(2))]);
    }

    #[test]
    fn tombstones_are_not_found() {
        let mut r = R::new();
        let mut e = pin(1000..2000, 1);
        e.live = false;
        r.insert(0, e).unwrap();
        assert!(r.find(0, 1000, 1).is_none());
        assert_eq!(r.split(0, 1000, 10)[..], [(1000..1010, None)]);
        // but still blocks overlapping inserts and is removable by key
        assert!(r.overlaps(0, &(1500..1600)));
        assert!(r.remove_if(0, 1000, |_| true).is_some());
        assert!(r.is_empty());
    }

    #[test]
    fn removing_a_device_takes_all_its_entries_and_no_other() {
        let mut r = R::new();
        r.insert(0, pin(1000..2000, 1)).unwrap();
        let mut t = reg(4096 + 10..4096 + 20, 4096, 2);
        t.live = false;
        r.insert(0, t).unwrap();
        r.insert(1, pin(1000..2000, 3)).unwrap();
        let gone: Vec<u32> = r.remove_device(0).into_iter().map(|e| e.cell).collect();
        assert_eq!(gone, [1, 2], "live entries and tombstones, in address order");
        assert_eq!((r.len_of(0), r.device_ids()), (0, vec![1]));
        assert!(r.find(0, 1000, 1).is_none() && !r.overlaps(0, &(1000..2000)));
        assert_eq!(r.find(1, 1500, 1).map(|e| e.cell), Some(3));
        assert!(r.remove_device(0).is_empty(), "a second removal finds nothing");
        r.insert(0, pin(1000..2000, 4)).unwrap();
    }

    #[test]
    fn many_entries_lookup_stays_local() {
        let mut r = R::new();
        for i in 0..10_000usize {
            r.insert(0, reg(i * 8192 + 8..i * 8192 + 4000, 4096, i as u32)).unwrap();
        }
        for i in (0..10_000usize).step_by(997) {
            assert_eq!(r.find(0, i * 8192 + 100, 10).unwrap().cell, i as u32);
            assert!(r.find(0, i * 8192 + 4096 + 100, 10).is_none());
        }
    }

    /// Model: a plain list of entries, answers by brute force.
    #[derive(Debug, Clone)]
    enum Op {
        Reg(usize, usize),
        Pin(usize, usize),
        Remove(usize),
        Find(usize, usize),
        Split(usize, usize),
        Kill,
    }

    fn op() -> impl Strategy<Value = Op> {
        let a = 0usize..64 * 1024;
        let l = 1usize..12_000;
        prop_oneof![
            (a.clone(), l.clone()).prop_map(|(a, l)| Op::Reg(a, l)),
            (a.clone(), l.clone()).prop_map(|(a, l)| Op::Pin(a & !63, l)),
            a.clone().prop_map(Op::Remove),
            (a.clone(), l.clone()).prop_map(|(a, l)| Op::Find(a, l)),
            (a.clone(), l.clone()).prop_map(|(a, l)| Op::Split(a, l)),
            Just(Op::Kill),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]
        #[test]
        fn registry_matches_model(ops in proptest::collection::vec(op(), 1..60)) {
            let g = 4096;
            let mut r = R::new();
            let mut model: Vec<Entry<u32>> = Vec::new();
            let mut next = 0u32;
            for op in ops {
                match op {
                    Op::Reg(a, l) | Op::Pin(a, l) => {
                        let e = if matches!(op, Op::Reg(..)) { reg(a..a + l, g, next) } else { pin(a..a + l, next) };
                        next += 1;
                        let clash = model.iter().any(|m| m.user.start < e.user.end && e.user.start < m.user.end);
                        let got = r.insert(0, e.clone());
                        prop_assert_eq!(got.is_err(), clash);
                        if !clash { model.push(e); }
                    }
                    Op::Remove(a) => {
                        // remove by an existing key half the time
                        let key = if a % 2 == 0 && !model.is_empty() { model[a % model.len()].user.start } else { a };
                        let got = r.remove_if(0, key, |_| true).map(|e| e.cell);
                        let pos = model.iter().position(|m| m.user.start == key);
                        let want = pos.map(|p| model.remove(p).cell);
                        prop_assert_eq!(got, want);
                    }
                    Op::Find(a, l) => {
                        let got = r.find(0, a, l).map(|e| e.cell);
                        let any = model.iter().any(|m| m.live && m.covered.start <= a && a + l <= m.covered.end);
                        prop_assert_eq!(got.is_some(), any);
                        if let Some(c) = got {
                            let m = model.iter().find(|m| m.cell == c).unwrap();
                            prop_assert!(m.live && m.covered.start <= a && a + l <= m.covered.end);
                        }
                    }
                    Op::Split(a, l) => {
                        let s = r.split(0, a, l);
                        // pieces tile the range in order
                        let mut cur = a;
                        for (rg, e) in &s {
                            prop_assert_eq!(rg.start, cur);
                            prop_assert!(rg.end > rg.start);
                            cur = rg.end;
                            match e {
                                Some(e) => {
                                    prop_assert!(e.live && e.covered.start <= rg.start && rg.end <= e.covered.end);
                                    // Bytes some live entry owns go through that entry.
                                    for x in [rg.start, rg.end - 1] {
                                        if let Some(o) = model.iter().find(|m| m.live && m.user.contains(&x)) {
                                            prop_assert_eq!(o.cell, e.cell, "byte {} of entry {} went through {}", x, o.cell, e.cell);
                                        }
                                    }
                                }
                                None => for x in [rg.start, rg.end - 1, (rg.start + rg.end) / 2] {
                                    prop_assert!(!model.iter().any(|m| m.live && m.covered.start <= x && x < m.covered.end),
                                        "gap byte {} is covered", x);
                                },
                            }
                        }
                        prop_assert_eq!(cur, a + l);
                    }
                    Op::Kill => {
                        for e in r.entries_mut(0) { e.live = false; }
                        for m in model.iter_mut() { m.live = false; }
                    }
                }
                prop_assert_eq!(r.len(), model.len());
            }
        }
    }
}
