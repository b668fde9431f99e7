//! Raw-ash pieces shared by the probes that bypass vkhost (`armed_latency`, `host_read_barrier`,
//! and `sync_floor`'s raw copies), included with `#[path]`; not an example itself (no `main`).
//! Each probe uses part of it.
#![allow(dead_code)]

use std::time::Instant;
use vkhost::ash::{self, vk};

/// A transfer buffer of `n` bytes bound to fresh memory: host-visible and coherent
/// (preferring a type that is not DEVICE_LOCAL) for `host`, else DEVICE_LOCAL (preferring one
/// that is not HOST_VISIBLE). Panics on failure: a probe has nothing to fall back to.
///
/// # Safety
/// `device` was created from `pd` of `instance` and is live; the caller destroys the buffer
/// before the memory, both before the device.
pub unsafe fn transfer_buffer(
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
    device: &ash::Device,
    n: u64,
    host: bool,
) -> (vk::Buffer, vk::DeviceMemory) {
    // SAFETY: the caller's contract; plain creation, allocation and binding.
    unsafe {
        let mem = instance.get_physical_device_memory_properties(pd);
        let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
        let b = device.create_buffer(&vk::BufferCreateInfo::default().size(n).usage(usage), None).unwrap();
        let req = device.get_buffer_memory_requirements(b);
        let (want, avoid) = if host {
            (vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT, vk::MemoryPropertyFlags::DEVICE_LOCAL)
        } else {
            (vk::MemoryPropertyFlags::DEVICE_LOCAL, vk::MemoryPropertyFlags::HOST_VISIBLE)
        };
        let allowed = |i: u32| req.memory_type_bits & (1 << i) != 0 && mem.memory_types[i as usize].property_flags.contains(want);
        let t = (0..mem.memory_type_count)
            .find(|&i| allowed(i) && !mem.memory_types[i as usize].property_flags.intersects(avoid))
            .or_else(|| (0..mem.memory_type_count).find(|&i| allowed(i)))
            .expect("memory type");
        let m = device.allocate_memory(&vk::MemoryAllocateInfo::default().allocation_size(req.size).memory_type_index(t), None).unwrap();
        device.bind_buffer_memory(b, m, 0).unwrap();
        (b, m)
    }
}

/// The loader, an instance of Vulkan `api`, and its first discrete GPU (else its first device).
/// Panics without a loader or a device. The caller destroys the instance, before dropping the
/// entry.
pub fn instance_and_gpu(api: u32) -> (ash::Entry, ash::Instance, vk::PhysicalDevice) {
    // SAFETY: loading libvulkan, which stays loaded while the returned entry lives; plain
    // instance creation and queries on it.
    unsafe {
        let entry = ash::Entry::load().expect("loader");
        let app = vk::ApplicationInfo::default().api_version(api);
        let instance = entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None).expect("instance");
        let pds = instance.enumerate_physical_devices().expect("devices");
        let pd = *pds
            .iter()
            .find(|&&p| instance.get_physical_device_properties(p).device_type == vk::PhysicalDeviceType::DISCRETE_GPU)
            .or(pds.first())
            .expect("a Vulkan device");
        (entry, instance, pd)
    }
}

/// Records the TRANSFER_WRITE→HOST_READ dependency (TRANSFER to HOST stage) that must follow a
/// copy into host memory before the host reads it: a global memory barrier, or with `range` a
/// buffer memory barrier over (buffer, offset, size).
///
/// # Safety
/// `cb` is in the recording state, externally synchronized; the buffer in `range` is live.
pub unsafe fn host_read_barrier(device: &ash::Device, cb: vk::CommandBuffer, range: Option<(vk::Buffer, u64, u64)>) {
    let (src, dst) = (vk::PipelineStageFlags::TRANSFER, vk::PipelineStageFlags::HOST);
    let (write, read) = (vk::AccessFlags::TRANSFER_WRITE, vk::AccessFlags::HOST_READ);
    // SAFETY: the caller's contract.
    unsafe {
        match range {
            None => {
                let b = vk::MemoryBarrier::default().src_access_mask(write).dst_access_mask(read);
                device.cmd_pipeline_barrier(cb, src, dst, vk::DependencyFlags::empty(), &[b], &[], &[]);
            }
            Some((buffer, offset, size)) => {
                let b = vk::BufferMemoryBarrier::default()
                    .src_access_mask(write)
                    .dst_access_mask(read)
                    .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                    .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                    .buffer(buffer)
                    .offset(offset)
                    .size(size);
                device.cmd_pipeline_barrier(cb, src, dst, vk::DependencyFlags::empty(), &[], &[b], &[]);
            }
        }
    }
}

/// A timeline semaphore at 0. Panics on failure.
///
/// # Safety
/// `device` is live and was created with the timelineSemaphore feature.
pub unsafe fn timeline(device: &ash::Device) -> vk::Semaphore {
    let mut ti = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(0);
    // SAFETY: the caller's contract.
    unsafe { device.create_semaphore(&vk::SemaphoreCreateInfo::default().push_next(&mut ti), None) }.unwrap()
}

/// Microseconds from submitting `cb` on `queue`, signalling `sem` to `value`, until a busy poll
/// of the semaphore sees it. Panics on failure.
///
/// # Safety
/// `cb` is executable and its previous submission completed; `queue` is externally
/// synchronized (no other thread submits to it meanwhile); `value` is above every value
/// submitted on `sem` before.
pub unsafe fn submit_and_poll(device: &ash::Device, queue: vk::Queue, cb: vk::CommandBuffer, sem: vk::Semaphore, value: u64) -> f64 {
    let (cbi, vals, sems) = ([cb], [value], [sem]);
    let mut tsi = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&vals);
    let si = vk::SubmitInfo::default().command_buffers(&cbi).signal_semaphores(&sems).push_next(&mut tsi);
    let t = Instant::now();
    // SAFETY: the caller's contract; the poll returns once the submission completed.
    unsafe {
        device.queue_submit(queue, &[si], vk::Fence::null()).unwrap();
        while device.get_semaphore_counter_value(sem).unwrap() < value {}
    }
    t.elapsed().as_secs_f64() * 1e6
}
