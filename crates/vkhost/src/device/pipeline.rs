//! Compute pipelines: a bounded cache per device, and pipelines owned by the work that uses them.
//!
//! A pipeline is made from SPIR-V words, an entry point, a count of storage-buffer bindings
//! (set 0, bindings 0..n) and a push-constant size. The cache is keyed by a hash of all four
//! and compares them in full on a hit, so two kernels with the same words share one pipeline.
//!
//! **Descriptor modes.** A device binds kernel buffers one way for its whole life
//! ([`DescriptorMode`]): pushed into the command buffer (VK_KHR_push_descriptor, where vkhost
//! enabled it), or written into descriptor sets from a stream's pools (everywhere else). The set
//! layout differs (PUSH_DESCRIPTOR_KHR or not) and a pipeline layout is compatible with one mode
//! only, so the cache creates every layout for the device's mode.
//!
//! **Ownership and eviction.** The cache holds at most `OpenOptions::max_pipelines` pipelines
//! (default 256) and evicts the least recently launched one to make room. A [`Pipeline`] is an
//! `Arc` with several owners: the cache, a launch while it records, and the stream batch that
//! launched it until the batch is reaped (its completion observed). Eviction only drops the
//! cache's `Arc`: the Vulkan objects (pipeline, pipeline layout, set layout) are destroyed when
//! the last owner goes, so never under work that still uses them (VUID-vkDestroyPipeline-
//! pipeline-00765). A last owner that goes while the device lock cannot be taken without
//! blocking (a destroy is waiting, or teardown runs) queues the handles on
//! `Shared::pipeline_garbage`, released by the next cache miss, allocation or teardown, as
//! buffers are (`object.rs`). Every pipeline is also a device child: teardown (phase `OBJECTS`,
//! after every stream finished its work) destroys those still alive, evicted or not.
//!
//! The cache's lock is held while a missing pipeline is created (so each is created once) but
//! not while an evicted one is dropped; lock order: device `live` → the cache.

use super::object::{Child, phase};
use super::{Live, Shared, lock};
use crate::error::{Error, Result};
use crate::fault::{self, Point};
use ash::vk;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// How kernel launches on a device bind their storage buffers
/// ([`Device::descriptor_mode`](crate::Device::descriptor_mode)). Fixed when the device is
/// opened.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::kernel::DescriptorMode;
///
/// // Leave VK_KHR_push_descriptor off: launches write descriptor sets.
/// let opts = vkhost::OpenOptions { push_descriptors: false, ..Default::default() };
/// let dev = vkhost::Device::open_default_with(&opts)?;
/// assert_eq!(dev.descriptor_mode(), DescriptorMode::Sets);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DescriptorMode {
    /// Pushed into the command buffer with vkCmdPushDescriptorSetKHR (VK_KHR_push_descriptor):
    /// no descriptor pool. Devices vkhost opens, where the driver offers the extension and
    /// [`OpenOptions::push_descriptors`](crate::OpenOptions::push_descriptors) is true.
    Push,
    /// Written into a descriptor set (vkUpdateDescriptorSets, vkCmdBindDescriptorSets) allocated
    /// from the stream's descriptor pools; the batch owns the set until it is reaped. Devices
    /// without the extension, devices wrapped by [`Device::from_raw`](crate::Device::from_raw),
    /// and `push_descriptors: false`.
    Sets,
}

/// What a pipeline is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PipelineDesc {
    pub words: Arc<[u32]>,
    pub entry: CString,
    /// Storage-buffer bindings 0..bindings in set 0.
    pub bindings: u32,
    /// Bytes of the push-constant range (0: none).
    pub push_bytes: u32,
    /// A hash of the above (the cache key).
    pub hash: u64,
}

/// The Vulkan objects of one kernel on one device. Destroyed once: by the drop of its last
/// owner, or by teardown, whichever comes first (see the module docs). The handles are valid
/// while a reference is held and the device's `live` lock is held (teardown needs the write
/// lock to destroy them).
pub(crate) struct Pipeline {
    /// Weak: the cache is owned by the device.
    shared: Weak<Shared>,
    /// The fork generation it was created in: in a forked child, drops do nothing.
    fork_gen: u64,
    pub set_layout: vk::DescriptorSetLayout,
    pub layout: vk::PipelineLayout,
    pub pipeline: vk::Pipeline,
    /// Whether the objects exist; cleared by the one release.
    present: AtomicBool,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").field("pipeline", &self.pipeline).field("present", &self.present).finish()
    }
}

/// The handles of one pipeline, for release.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handles {
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
}

impl Pipeline {
    fn handles(&self) -> Handles {
        Handles { set_layout: self.set_layout, layout: self.layout, pipeline: self.pipeline }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        if super::fork_generation() != self.fork_gen {
            return;
        }
        // The last owner went: no submitted work holds it (batches keep an owner until they
        // are reaped), so its objects may go now, or as soon as the device lock is free.
        if !self.present.swap(false, Ordering::AcqRel) {
            return;
        }
        match self.shared.upgrade() {
            Some(s) => s.release_pipeline_or_defer(self.handles()),
            // Unreachable by construction: teardown holds every child (each pipeline is one)
            // until it released its objects.
            None => log::error!("a pipeline outlived its device's teardown: leaked"),
        }
    }
}

impl Child for Pipeline {
    fn teardown(&self, s: &Shared, l: &Live, p: u8) {
        if p == phase::OBJECTS && self.present.swap(false, Ordering::AcqRel) {
            // SAFETY: this phase runs with the device idle and every stream shut down: no
            // command buffer that names the pipeline can run; `present` makes this the only
            // release.
            unsafe { s.destroy_pipeline(l, self.handles()) };
        }
    }
}

impl Shared {
    /// Destroys a pipeline's objects if the device lock is free now; queues them otherwise.
    fn release_pipeline_or_defer(&self, h: Handles) {
        if let Ok(g) = self.live.try_read() {
            if let Some(l) = g.as_ref() {
                // SAFETY: the last owner went, so no pending work uses the objects, and they
                // are released once (`present` was cleared by the caller).
                unsafe { self.destroy_pipeline(l, h) };
            }
            // A destroyed device already released everything it had (every pipeline is a
            // child of its teardown).
            return;
        }
        lock(&self.pipeline_garbage).push(h);
        self.has_garbage.store(true, Ordering::Release);
    }

    /// Destroys queued pipelines (called by `drain_garbage`, with the device lock held).
    pub(crate) fn drain_pipeline_garbage(&self, l: &Live) {
        let g = std::mem::take(&mut *lock(&self.pipeline_garbage));
        for h in g {
            // SAFETY: queued by the drop of the last owner: nothing uses them; released once.
            unsafe { self.destroy_pipeline(l, h) };
        }
    }

    /// # Safety
    /// No pending work uses `h`'s objects, and they are destroyed once.
    unsafe fn destroy_pipeline(&self, l: &Live, h: Handles) {
        // SAFETY: the caller's contract.
        unsafe { destroy(l, h) };
        self.count_pipeline(-1);
    }
}

/// One cached pipeline.
struct Entry {
    desc: PipelineDesc,
    pipe: Arc<Pipeline>,
    /// The cache's clock when it was last handed out (LRU order).
    used: u64,
}

/// Pipelines by hash (a bucket holds every description with that hash), with the LRU clock.
#[derive(Default)]
struct Map {
    buckets: HashMap<u64, Vec<Entry>>,
    len: usize,
    clock: u64,
}

impl Map {
    /// Removes the least recently used entry.
    fn evict_lru(&mut self) -> Option<Entry> {
        let (&hash, i, _) = self
            .buckets
            .iter()
            .flat_map(|(h, v)| v.iter().enumerate().map(move |(i, e)| (h, i, e.used)))
            .min_by_key(|&(_, _, used)| used)?;
        let bucket = self.buckets.get_mut(&hash)?;
        let e = bucket.swap_remove(i);
        if bucket.is_empty() {
            self.buckets.remove(&hash);
        }
        self.len -= 1;
        Some(e)
    }
}

/// The device's pipelines (see the module docs).
pub(crate) struct PipelineCache {
    map: Mutex<Map>,
    /// At most this many entries (`OpenOptions::max_pipelines`, at least 1).
    cap: usize,
    mode: DescriptorMode,
}

impl std::fmt::Debug for PipelineCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineCache").field("pipelines", &lock(&self.map).len).field("cap", &self.cap).field("mode", &self.mode).finish()
    }
}

impl PipelineCache {
    pub(crate) fn new(cap: usize, mode: DescriptorMode) -> PipelineCache {
        PipelineCache { map: Mutex::new(Map::default()), cap: cap.max(1), mode }
    }

    /// The descriptor mode every layout of this cache is made for.
    pub(crate) fn mode(&self) -> DescriptorMode {
        self.mode
    }

    /// The pipeline for `desc`, created on first use (evicting the least recently used one when
    /// the cache is full). The caller holds the returned `Arc` while it records and moves it
    /// into the batch that uses it.
    pub(crate) fn get(&self, s: &Arc<Shared>, l: &Live, desc: &PipelineDesc) -> Result<Arc<Pipeline>> {
        let evicted;
        let p = {
            let mut map = lock(&self.map);
            map.clock += 1;
            let now = map.clock;
            if let Some(e) = map.buckets.get_mut(&desc.hash).and_then(|b| b.iter_mut().find(|e| e.desc == *desc)) {
                e.used = now;
                return Ok(e.pipe.clone());
            }
            let p = Arc::new(create(s, l, desc, self.mode)?);
            s.count_pipeline(1);
            let child: Weak<dyn Child> = Arc::downgrade(&p) as Weak<Pipeline>;
            s.add_child(child);
            evicted = if map.len >= self.cap { map.evict_lru() } else { None };
            map.buckets.entry(desc.hash).or_default().push(Entry { desc: desc.clone(), pipe: p.clone(), used: now });
            map.len += 1;
            p
        };
        // Outside the cache's lock: if no batch holds it, the evicted pipeline goes now.
        drop(evicted);
        s.drain_garbage(l);
        Ok(p)
    }

    /// How many pipelines the cache holds now (evicted ones still in use are not counted).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.map).len
    }
}

impl Child for PipelineCache {
    fn teardown(&self, _s: &Shared, _l: &Live, p: u8) {
        if p != phase::OBJECTS {
            return;
        }
        // Only the cache's references: each pipeline is a child and releases its own objects
        // in this phase (whichever runs first, the objects go once).
        let all = std::mem::take(&mut *lock(&self.map));
        drop(all);
    }
}

/// # Safety
/// No pending work uses `h`'s objects; each is destroyed once.
unsafe fn destroy(l: &Live, h: Handles) {
    // SAFETY: the caller's contract; null handles are ignored by vkDestroy*.
    unsafe {
        l.device.destroy_pipeline(h.pipeline, None);
        l.device.destroy_pipeline_layout(h.layout, None);
        l.device.destroy_descriptor_set_layout(h.set_layout, None);
    }
}

fn create(s: &Arc<Shared>, l: &Live, desc: &PipelineDesc, mode: DescriptorMode) -> Result<Pipeline> {
    let d = &l.device;
    let binds: Vec<vk::DescriptorSetLayoutBinding> = (0..desc.bindings)
        .map(|i| {
            vk::DescriptorSetLayoutBinding::default()
                .binding(i)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
        })
        .collect();
    let flags = match mode {
        DescriptorMode::Push => vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR,
        DescriptorMode::Sets => vk::DescriptorSetLayoutCreateFlags::empty(),
    };
    let si = vk::DescriptorSetLayoutCreateInfo::default().flags(flags).bindings(&binds);
    let h = Handles { set_layout: vk::DescriptorSetLayout::null(), layout: vk::PipelineLayout::null(), pipeline: vk::Pipeline::null() };
    // A failure logs, and a user's logger may panic: what was made goes either way.
    let made = super::object::make_or_undo(
        h,
        |h| {
            fault::check(Point::CreateDescriptorSetLayout).map_err(|c| s.fail("vkCreateDescriptorSetLayout", c))?;
            // SAFETY: valid create info; with PUSH_DESCRIPTOR_KHR only in `Push` mode, where
            // VK_KHR_push_descriptor is enabled (the mode is chosen from `Live::push_desc`).
            h.set_layout = unsafe { d.create_descriptor_set_layout(&si, None) }.map_err(|c| s.fail("vkCreateDescriptorSetLayout", c))?;
            let ranges = [vk::PushConstantRange::default().stage_flags(vk::ShaderStageFlags::COMPUTE).offset(0).size(desc.push_bytes)];
            let sets = [h.set_layout];
            let li = vk::PipelineLayoutCreateInfo::default().set_layouts(&sets).push_constant_ranges(if desc.push_bytes > 0 {
                &ranges
            } else {
                &[]
            });
            fault::check(Point::CreatePipelineLayout).map_err(|c| s.fail("vkCreatePipelineLayout", c))?;
            // SAFETY: valid create info over a live set layout.
            h.layout = unsafe { d.create_pipeline_layout(&li, None) }.map_err(|c| s.fail("vkCreatePipelineLayout", c))?;
            let mi = vk::ShaderModuleCreateInfo::default().code(&desc.words);
            fault::check(Point::CreateShaderModule).map_err(|c| s.fail("vkCreateShaderModule", c))?;
            // SAFETY: the words are SPIR-V (magic checked by the kernel); validity beyond that is the
            // contract of `Kernel::from_spirv` (built-ins are naga's validated output).
            let module = unsafe { d.create_shader_module(&mi, None) }.map_err(|c| s.fail("vkCreateShaderModule", c))?;
            let entry: &CStr = &desc.entry;
            let stage = vk::PipelineShaderStageCreateInfo::default().stage(vk::ShaderStageFlags::COMPUTE).module(module).name(entry);
            let ci = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(h.layout)];
            let r = match fault::check(Point::CreateComputePipelines) {
                // SAFETY: valid create info; the module and layout are live.
                Ok(()) => unsafe { d.create_compute_pipelines(vk::PipelineCache::null(), &ci, None) },
                Err(c) => Err((Vec::new(), c)),
            };
            // SAFETY: the module is only needed while the pipeline is created.
            unsafe { d.destroy_shader_module(module, None) };
            match r {
                Ok(v) => h.pipeline = v[0],
                Err((v, c)) => {
                    for x in v {
                        // SAFETY: a failed call's partial results are unused, destroyed once.
                        unsafe { d.destroy_pipeline(x, None) };
                    }
                    return Err(s.fail("vkCreateComputePipelines", c));
                }
            }
            Ok::<(), Error>(())
        },
        |h| {
            // SAFETY: fresh objects of ours, unused; null ones are ignored.
            unsafe { destroy(l, h) }
        },
    );
    let (h, ()) = made?;
    Ok(Pipeline {
        shared: Arc::downgrade(s),
        fork_gen: s.fork_gen,
        set_layout: h.set_layout,
        layout: h.layout,
        pipeline: h.pipeline,
        present: AtomicBool::new(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(used: u64) -> Entry {
        let p = Pipeline {
            shared: Weak::new(),
            fork_gen: 0,
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            // Not present: its drop releases nothing (there is no device here).
            present: AtomicBool::new(false),
        };
        let desc = PipelineDesc { words: Arc::new([]), entry: CString::default(), bindings: 0, push_bytes: 0, hash: used };
        Entry { desc, pipe: Arc::new(p), used }
    }

    #[test]
    fn eviction_takes_the_least_recently_used() {
        let c = PipelineCache::new(8, DescriptorMode::Sets);
        let mut m = lock(&c.map);
        for (hash, used) in [(1u64, 5u64), (2, 3), (3, 9)] {
            m.buckets.entry(hash % 2).or_default().push(entry(used));
            m.len += 1;
        }
        let order: Vec<u64> = std::iter::from_fn(|| m.evict_lru().map(|e| e.used)).collect();
        assert_eq!(order, [3, 5, 9]);
        assert_eq!(m.len, 0);
        assert!(m.buckets.is_empty());
        drop(m);
        assert_eq!(c.len(), 0);
    }
}
