//! Raw-ash setup shared by the probes that bypass vkhost (`armed_latency`, `host_read_barrier`),
//! included with `#[path]`; not an example itself (no `main`).

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
