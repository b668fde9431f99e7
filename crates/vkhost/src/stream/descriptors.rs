//! Descriptor sets for launches on devices without push descriptors
//! ([`DescriptorMode::Sets`](crate::kernel::DescriptorMode)).
//!
//! Each stream keeps descriptor pools. A launch allocates its set from the open batch's current
//! pool (a fresh or free pool joins the batch when that one is full), writes it
//! (vkUpdateDescriptorSets, before any command names it) and binds it. The batch owns its pools
//! until it is reaped: only then, with every command that names their sets complete, are they
//! reset (vkResetDescriptorPool frees all their sets at once) and kept for reuse. A batch whose
//! submission failed never ran, so its pools are reset at once. Shutdown destroys them after the
//! stream's last batch completed. Every access is under the stream lock (pools and their sets
//! need external synchronization).

use super::inner::{State, StreamInner};
use crate::device::Live;
use crate::error::{Error, Result};
use crate::fault::{self, Point};
use ash::vk;

/// Sets per pool: a batch holds at most 512 commands (`batch::BATCH_CMDS`), so a busy batch
/// chains a few pools and most take one.
const POOL_SETS: u32 = 64;
/// Storage-buffer descriptors per pool (four per set); a pool for a kernel with more bindings
/// than this is made that large.
const POOL_DESCS: u32 = 4 * POOL_SETS;
/// Free pools a stream keeps for reuse; more (after a burst) are destroyed.
const FREE_POOLS: usize = 8;

/// One descriptor pool of a stream, with what is left in it.
#[derive(Debug)]
pub(super) struct DescPool {
    raw: vk::DescriptorPool,
    /// Storage-buffer descriptors it was made for.
    descs: u32,
    sets_left: u32,
    descs_left: u32,
}

impl DescPool {
    fn fits(&self, n: u32) -> bool {
        self.sets_left >= 1 && self.descs_left >= n
    }
}

impl StreamInner {
    /// A descriptor set of `layout` (`n` storage buffers) for a launch recorded next in the open
    /// batch (begun here if needed), from a pool the batch owns. Unwritten: the caller updates
    /// it before recording a command that names it.
    pub(super) fn alloc_set(&self, l: &Live, st: &mut State, layout: vk::DescriptorSetLayout, n: u32) -> Result<vk::DescriptorSet> {
        self.begin(l, st)?;
        let s = &*self.shared;
        // Twice at most: a pool the driver calls full (which the counts should rule out) is
        // marked so, and the second try takes a fresh one.
        for _ in 0..2 {
            let current = st.open.as_ref().and_then(|b| b.pools.last()).is_some_and(|p| p.fits(n));
            if !current {
                let p = match st.desc_free.iter().position(|p| p.descs >= n) {
                    Some(i) => st.desc_free.swap_remove(i),
                    None => self.create_pool(l, n)?,
                };
                match st.open.as_mut() {
                    Some(b) => b.pools.push(p),
                    None => {
                        // SAFETY: a free or fresh pool: none of its sets is allocated.
                        unsafe { self.destroy_pools(l, [p]) };
                        return Err(Error::unsupported("no open batch"));
                    }
                }
            }
            let Some(p) = st.open.as_mut().and_then(|b| b.pools.last_mut()) else {
                return Err(Error::unsupported("no open batch"));
            };
            let layouts = [layout];
            let ai = vk::DescriptorSetAllocateInfo::default().descriptor_pool(p.raw).set_layouts(&layouts);
            let r = match fault::check(Point::AllocateDescriptorSets) {
                // SAFETY: the pool is this stream's, under its lock, with room for one set of
                // `n` storage buffers (counted); `layout` is live (the caller holds its pipeline).
                Ok(()) => unsafe { l.device.allocate_descriptor_sets(&ai) },
                Err(c) => Err(c),
            };
            match r {
                Ok(v) => {
                    p.sets_left -= 1;
                    p.descs_left -= n;
                    return v.first().copied().ok_or_else(|| Error::vk("vkAllocateDescriptorSets", vk::Result::ERROR_UNKNOWN));
                }
                Err(vk::Result::ERROR_OUT_OF_POOL_MEMORY | vk::Result::ERROR_FRAGMENTED_POOL) => p.sets_left = 0,
                Err(c) => return Err(s.fail("vkAllocateDescriptorSets", c)),
            }
        }
        Err(s.fail("vkAllocateDescriptorSets", vk::Result::ERROR_OUT_OF_POOL_MEMORY))
    }

    fn create_pool(&self, l: &Live, n: u32) -> Result<DescPool> {
        let descs = n.max(POOL_DESCS);
        let sizes = [vk::DescriptorPoolSize { ty: vk::DescriptorType::STORAGE_BUFFER, descriptor_count: descs }];
        let ci = vk::DescriptorPoolCreateInfo::default().max_sets(POOL_SETS).pool_sizes(&sizes);
        fault::check(Point::CreateDescriptorPool).map_err(|c| self.shared.fail("vkCreateDescriptorPool", c))?;
        // SAFETY: valid create info.
        let raw = unsafe { l.device.create_descriptor_pool(&ci, None) }.map_err(|c| self.shared.fail("vkCreateDescriptorPool", c))?;
        self.shared.count_descriptor_pool(1);
        Ok(DescPool { raw, descs, sets_left: POOL_SETS, descs_left: descs })
    }

    /// Resets `pools` and keeps them for reuse (destroying those past [`FREE_POOLS`]).
    ///
    /// # Safety
    /// No submitted work that names their sets may be pending: the batch that owned them was
    /// reaped (its value completed), or it was never submitted. `st` is this stream's state,
    /// locked.
    pub(super) unsafe fn recycle_pools(&self, l: &Live, st: &mut State, pools: Vec<DescPool>) {
        // Logged once every pool is placed: a user's logger may panic.
        let mut failed = None;
        for mut p in pools {
            if st.desc_free.len() >= FREE_POOLS {
                // SAFETY: the caller's contract.
                unsafe { self.destroy_pools(l, [p]) };
                continue;
            }
            // SAFETY: the caller's contract; the pool is this stream's, under its lock.
            match unsafe { l.device.reset_descriptor_pool(p.raw, vk::DescriptorPoolResetFlags::empty()) } {
                Ok(()) => {
                    p.sets_left = POOL_SETS;
                    p.descs_left = p.descs;
                    st.desc_free.push(p);
                }
                Err(c) => {
                    // SAFETY: the caller's contract.
                    unsafe { self.destroy_pools(l, [p]) };
                    failed = Some(c);
                }
            }
        }
        if let Some(c) = failed {
            log::warn!("{}: vkResetDescriptorPool: {c:?}; the pool is destroyed", self.shared.id);
        }
    }

    /// Destroys `pools` (freeing their sets).
    ///
    /// # Safety
    /// As for [`StreamInner::recycle_pools`]: no pending work names their sets.
    pub(super) unsafe fn destroy_pools(&self, l: &Live, pools: impl IntoIterator<Item = DescPool>) {
        for p in pools {
            // SAFETY: by the caller's contract nothing pending uses the pool's sets; each pool is
            // destroyed once (moved in).
            unsafe { l.device.destroy_descriptor_pool(p.raw, None) };
            self.shared.count_descriptor_pool(-1);
        }
    }
}
