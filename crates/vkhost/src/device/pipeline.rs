//! Compute pipelines, cached per device and destroyed at its teardown.
//!
//! A pipeline is made from SPIR-V words, an entry point, a count of storage-buffer bindings
//! (set 0, bindings 0..n, bound with push descriptors: VK_KHR_push_descriptor) and a push-constant
//! size. The cache is keyed by a hash of all four and compares them in full on a hit, so two
//! kernels with the same words share one pipeline. Entries live until the device is destroyed
//! (teardown phase `OBJECTS`, after every stream finished its work): a recorded launch names
//! the handles without owning them, and nothing destroys them earlier.
//!
//! The cache's lock is held while a missing pipeline is created (so each is created once); lock
//! order: device `live` → the cache.

use super::object::{phase, Child};
use super::{lock, Live, Shared};
use crate::error::{Error, Result};
use ash::vk;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::{Arc, Mutex};

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

/// The Vulkan objects of one kernel on one device. The handles stay valid until teardown.
#[derive(Debug)]
pub(crate) struct Pipeline {
    pub set_layout: vk::DescriptorSetLayout,
    pub layout: vk::PipelineLayout,
    pub pipeline: vk::Pipeline,
}

/// Pipelines by hash; a bucket holds every description with that hash.
type Buckets = HashMap<u64, Vec<(PipelineDesc, Arc<Pipeline>)>>;

/// The device's pipelines (see the module docs).
#[derive(Default)]
pub(crate) struct PipelineCache {
    map: Mutex<Buckets>,
}

impl std::fmt::Debug for PipelineCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineCache").field("pipelines", &lock(&self.map).values().map(Vec::len).sum::<usize>()).finish()
    }
}

impl PipelineCache {
    /// The pipeline for `desc`, created on first use.
    pub(crate) fn get(&self, s: &Shared, l: &Live, desc: &PipelineDesc) -> Result<Arc<Pipeline>> {
        let mut map = lock(&self.map);
        let bucket = map.entry(desc.hash).or_default();
        if let Some((_, p)) = bucket.iter().find(|(d, _)| d == desc) {
            return Ok(p.clone());
        }
        let p = Arc::new(create(s, l, desc)?);
        s.count_pipeline(1);
        bucket.push((desc.clone(), p.clone()));
        Ok(p)
    }
}

impl Child for PipelineCache {
    fn teardown(&self, s: &Shared, l: &Live, p: u8) {
        if p != phase::OBJECTS {
            return;
        }
        let all = std::mem::take(&mut *lock(&self.map));
        for (_, p) in all.into_values().flatten() {
            // SAFETY: this phase runs with the device idle and every stream shut down: no
            // command buffer that names the pipeline can run; each is destroyed once (taken).
            unsafe { destroy(l, &p) };
            s.count_pipeline(-1);
        }
    }
}

/// # Safety
/// No pending work uses `p`'s objects; each is destroyed once.
unsafe fn destroy(l: &Live, p: &Pipeline) {
    // SAFETY: the caller's contract; null handles are ignored by vkDestroy*.
    unsafe {
        l.device.destroy_pipeline(p.pipeline, None);
        l.device.destroy_pipeline_layout(p.layout, None);
        l.device.destroy_descriptor_set_layout(p.set_layout, None);
    }
}

fn create(s: &Shared, l: &Live, desc: &PipelineDesc) -> Result<Pipeline> {
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
    let si = vk::DescriptorSetLayoutCreateInfo::default().flags(vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR).bindings(&binds);
    let mut p =
        Pipeline { set_layout: vk::DescriptorSetLayout::null(), layout: vk::PipelineLayout::null(), pipeline: vk::Pipeline::null() };
    let r = (|| {
        // SAFETY: valid create info; VK_KHR_push_descriptor is enabled (the caller checked).
        p.set_layout = unsafe { d.create_descriptor_set_layout(&si, None) }.map_err(|c| s.fail("vkCreateDescriptorSetLayout", c))?;
        let ranges = [vk::PushConstantRange::default().stage_flags(vk::ShaderStageFlags::COMPUTE).offset(0).size(desc.push_bytes)];
        let sets = [p.set_layout];
        let li = vk::PipelineLayoutCreateInfo::default().set_layouts(&sets).push_constant_ranges(if desc.push_bytes > 0 {
            &ranges
        } else {
            &[]
        });
        // SAFETY: valid create info over a live set layout.
        p.layout = unsafe { d.create_pipeline_layout(&li, None) }.map_err(|c| s.fail("vkCreatePipelineLayout", c))?;
        let mi = vk::ShaderModuleCreateInfo::default().code(&desc.words);
        // SAFETY: the words are SPIR-V (magic checked by the kernel); validity beyond that is the
        // contract of `Kernel::from_spirv` (built-ins are naga's validated output).
        let module = unsafe { d.create_shader_module(&mi, None) }.map_err(|c| s.fail("vkCreateShaderModule", c))?;
        let entry: &CStr = &desc.entry;
        let stage = vk::PipelineShaderStageCreateInfo::default().stage(vk::ShaderStageFlags::COMPUTE).module(module).name(entry);
        let ci = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(p.layout)];
        // SAFETY: valid create info; the module and layout are live.
        let r = unsafe { d.create_compute_pipelines(vk::PipelineCache::null(), &ci, None) };
        // SAFETY: the module is only needed while the pipeline is created.
        unsafe { d.destroy_shader_module(module, None) };
        match r {
            Ok(v) => p.pipeline = v[0],
            Err((v, c)) => {
                for x in v {
                    // SAFETY: a failed call's partial results are unused, destroyed once.
                    unsafe { d.destroy_pipeline(x, None) };
                }
                return Err(s.fail("vkCreateComputePipelines", c));
            }
        }
        Ok::<(), Error>(())
    })();
    match r {
        Ok(()) => Ok(p),
        Err(e) => {
            // SAFETY: fresh objects of ours, unused; null ones are ignored.
            unsafe { destroy(l, &p) };
            Err(e)
        }
    }
}
