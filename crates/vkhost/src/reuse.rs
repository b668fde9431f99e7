//! A bounded cache of freed blocks kept for reuse, matched by exact size (pure data: the device
//! layer keeps freed pinned driver blocks in one, see `OpenOptions::pinned_cache`).
//!
//! The policy only: what is kept, what a request gets, what goes to make room. What a block
//! is, and that nothing uses it when it is put in, is the caller's.

use std::collections::VecDeque;

/// Blocks of at most `cap` bytes and [`MAX_BLOCKS`] blocks in all, oldest first: (key, cost,
/// block). A block is found by its key (the size it was asked for) and counts its cost (the
/// memory it holds) against the cap.
pub(crate) struct Cache<T> {
    cap: u64,
    bytes: u64,
    blocks: VecDeque<(u64, u64, T)>,
    reused: u64,
}

/// The most blocks a [`Cache`] keeps, whatever their bytes: each kept pinned block is a
/// VkDeviceMemory, and Vulkan guarantees only 4096 allocations at once
/// (maxMemoryAllocationCount), shared with everything else the program allocates.
pub(crate) const MAX_BLOCKS: usize = 1024;

/// What a device's cache of freed pinned blocks holds and has given out
/// ([`Device::pinned_cache`](crate::Device::pinned_cache), `OpenOptions::pinned_cache`).
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// let opts = vkhost::OpenOptions { pinned_cache: Some(1 << 20), ..Default::default() };
/// let dev = vkhost::Device::open_default_with(&opts)?;
/// drop(vkhost::PinnedBuffer::new(&dev, 4096)?); // kept for reuse
/// let again = vkhost::PinnedBuffer::new(&dev, 4096)?; // the same block, from the cache
/// let s = dev.pinned_cache();
/// assert_eq!((s.blocks, s.reused, s.cap), (0, 1, 1 << 20));
/// # drop(again);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PinnedCacheStats {
    /// Blocks kept now.
    pub blocks: usize,
    /// The memory they hold: each block's size rounded up to whole 4 KiB pages.
    pub bytes: u64,
    /// The most bytes kept at once (the cache's cap).
    pub cap: u64,
    /// Requests answered from the cache so far.
    pub reused: u64,
}

impl<T> Cache<T> {
    /// An empty cache of at most `cap` bytes (0: keeps nothing).
    pub(crate) fn new(cap: u64) -> Self {
        Cache { cap, bytes: 0, blocks: VecDeque::new(), reused: 0 }
    }

    /// Keeps `item`, found by `key`, holding `cost` bytes. `Ok` with the blocks evicted to make
    /// room (the oldest first; the caller releases them); `Err(item)` when it can never fit
    /// (`cost` 0 or over the cap), nothing changed.
    pub(crate) fn put(&mut self, key: u64, cost: u64, item: T) -> Result<Vec<T>, T> {
        if cost == 0 || cost > self.cap {
            return Err(item);
        }
        let mut evicted = Vec::new();
        while self.bytes + cost > self.cap || self.blocks.len() >= MAX_BLOCKS {
            match self.blocks.pop_front() {
                Some((_, n, old)) => {
                    self.bytes -= n;
                    evicted.push(old);
                }
                // Unreachable while `bytes` is the sum of the blocks' costs and `cost <= cap`.
                None => break,
            }
        }
        self.bytes += cost;
        self.blocks.push_back((key, cost, item));
        Ok(evicted)
    }

    /// The most recently kept block found by `key`, taken out. It counts as reused only once
    /// the caller says it was handed out ([`Cache::count_reuse`]): a taken block can still be
    /// released instead.
    pub(crate) fn take(&mut self, key: u64) -> Option<T> {
        let i = self.blocks.iter().rposition(|&(k, _, _)| k == key)?;
        let (_, n, item) = self.blocks.remove(i)?;
        self.bytes -= n;
        Some(item)
    }

    /// Counts one taken block as handed out.
    pub(crate) fn count_reuse(&mut self) {
        self.reused += 1;
    }

    /// Every block, taken out (the caller releases them).
    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.bytes = 0;
        self.blocks.drain(..).map(|(_, _, item)| item).collect()
    }

    pub(crate) fn stats(&self) -> PinnedCacheStats {
        PinnedCacheStats { blocks: self.blocks.len(), bytes: self.bytes, cap: self.cap, reused: self.reused }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_exact_sizes_newest_first() {
        let mut c = Cache::new(100);
        assert!(c.put(10, 10, "a").unwrap().is_empty());
        assert!(c.put(20, 20, "b").unwrap().is_empty());
        assert!(c.put(10, 10, "c").unwrap().is_empty());
        assert_eq!(c.stats(), PinnedCacheStats { blocks: 3, bytes: 40, cap: 100, reused: 0 });
        assert_eq!(c.take(10), Some("c"), "the newest of that size");
        assert_eq!(c.take(15), None, "no size but the exact one");
        assert_eq!(c.take(10), Some("a"));
        assert_eq!(c.take(10), None);
        assert_eq!(c.stats(), PinnedCacheStats { blocks: 1, bytes: 20, cap: 100, reused: 0 }, "taken, not yet counted");
        c.count_reuse();
        assert_eq!(c.stats().reused, 1, "only what the caller handed out");
    }

    #[test]
    fn evicts_the_oldest_to_stay_under_the_cap() {
        let mut c = Cache::new(100);
        for (i, n) in [40u64, 30, 20].into_iter().enumerate() {
            assert!(c.put(n, n, i).unwrap().is_empty());
        }
        // 90 kept; 50 more needs 40 out: the oldest (40) goes, and only it.
        assert_eq!(c.put(50, 50, 3), Ok(vec![0]));
        assert_eq!(c.stats().bytes, 100);
        // 100 needs everything out.
        assert_eq!(c.put(100, 100, 4), Ok(vec![1, 2, 3]));
        assert_eq!(c.stats(), PinnedCacheStats { blocks: 1, bytes: 100, cap: 100, reused: 0 });
    }

    #[test]
    fn refuses_what_cannot_fit() {
        let mut c = Cache::new(100);
        assert_eq!(c.put(101, 101, 'x'), Err('x'));
        assert_eq!(c.put(0, 0, 'y'), Err('y'));
        let mut off = Cache::new(0);
        assert_eq!(off.put(1, 1, 'z'), Err('z'), "a cap of 0 keeps nothing");
        assert_eq!(c.stats().blocks + off.stats().blocks, 0);
    }

    #[test]
    fn finds_by_key_and_counts_the_cost() {
        let mut c = Cache::new(16384);
        // One byte asked for, a page held: the cap counts the page.
        assert!(c.put(1, 4096, 'a').unwrap().is_empty());
        assert_eq!(c.stats().bytes, 4096);
        assert_eq!(c.take(4096), None, "found by the size asked for, not its cost");
        assert_eq!(c.take(1), Some('a'));
    }

    #[test]
    fn keeps_at_most_max_blocks() {
        let mut c = Cache::new(u64::MAX);
        for i in 0..MAX_BLOCKS {
            assert!(c.put(1, 1, i).unwrap().is_empty());
        }
        assert_eq!(c.put(1, 1, MAX_BLOCKS), Ok(vec![0]), "the oldest goes past MAX_BLOCKS");
        assert_eq!(c.stats().blocks, MAX_BLOCKS);
    }

    #[test]
    fn drain_empties() {
        let mut c = Cache::new(100);
        c.put(10, 10, 1).unwrap();
        c.put(20, 20, 2).unwrap();
        assert_eq!(c.drain(), vec![1, 2]);
        assert_eq!(c.stats().bytes, 0);
        assert_eq!(c.take(10), None);
    }
}
