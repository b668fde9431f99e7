//! What the HOST_READ barrier of a device-to-host copy costs, by form (issue 10, 4 KiB d2h).
//! A probe in raw ash, on its own VkDevice with timeline semaphores (Vulkan 1.2 or later) and,
//! where the device has it (Vulkan 1.3), synchronization2 (vkhost is not involved):
//!
//!     cargo run --release --example host_read_barrier [iters=2000] [rounds=5]
//!
//! On the copy-engine family's queue 0 (else the first compute family's), a pre-recorded 4 KiB
//! copy from a DEVICE_LOCAL buffer to a HOST_VISIBLE|HOST_COHERENT one, submitted with a
//! timeline signal and busy-polled, followed by:
//! - `none`: nothing (not what the spec allows before the host reads the bytes);
//! - `v1 global`: vkCmdPipelineBarrier TRANSFER→HOST, TRANSFER_WRITE→HOST_READ (vkhost's);
//! - `v1 buffer`: the same as a buffer memory barrier over the 4 KiB;
//! - `v2 copy`: vkCmdPipelineBarrier2 COPY→HOST, TRANSFER_WRITE→HOST_READ;
//! - `v2 all`: vkCmdPipelineBarrier2 ALL_TRANSFER→HOST, MEMORY_WRITE→HOST_READ;
//! - `h2d`: the copy the other way, no barrier (for scale).
//!
//! Rounds interleave the forms; each line is a round's medians, the last line their medians.

use vkhost::ash::vk;

#[path = "support/args.rs"]
mod args;
#[path = "support/raw.rs"]
mod raw;
#[path = "support/timing.rs"]
mod timing;
use timing::median;

fn main() -> vkhost::Result<()> {
    let iters: usize = args::arg(1, 2000)?.max(10);
    let rounds: usize = args::arg(2, 5)?.max(1);
    // SAFETY: (the whole block) plain Vulkan calls on objects created here, used by this thread
    // only; a command buffer is resubmitted only after its previous submission completed.
    unsafe {
        let (_entry, instance, pd) = raw::instance_and_gpu(vk::API_VERSION_1_3);
        let props = instance.get_physical_device_properties(pd);
        println!(
            "device: {:?}, API {}.{}",
            props.device_name_as_c_str().unwrap_or_default(),
            vk::api_version_major(props.api_version),
            vk::api_version_minor(props.api_version)
        );
        let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f13);
        instance.get_physical_device_features2(pd, &mut f2);
        let sync2 = f13.synchronization2 == vk::TRUE && props.api_version >= vk::API_VERSION_1_3;
        println!("synchronization2: {}", if sync2 { "yes" } else { "no (v2 rows skipped)" });
        let fams = instance.get_physical_device_queue_family_properties(pd);
        let fam = (0..fams.len() as u32)
            .find(|&f| {
                let fl = fams[f as usize].queue_flags;
                fl.contains(vk::QueueFlags::TRANSFER) && !fl.intersects(vk::QueueFlags::COMPUTE | vk::QueueFlags::GRAPHICS)
            })
            .or_else(|| (0..fams.len() as u32).find(|&f| fams[f as usize].queue_flags.contains(vk::QueueFlags::COMPUTE)))
            .expect("a queue family");
        println!("queue family {fam} ({:?})", fams[fam as usize].queue_flags);
        let prio = [1.0f32];
        let qci = [vk::DeviceQueueCreateInfo::default().queue_family_index(fam).queue_priorities(&prio)];
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        let mut f13on = vk::PhysicalDeviceVulkan13Features::default().synchronization2(sync2);
        let mut dci = vk::DeviceCreateInfo::default().queue_create_infos(&qci).push_next(&mut f12);
        if props.api_version >= vk::API_VERSION_1_3 {
            dci = dci.push_next(&mut f13on);
        }
        let device = instance.create_device(pd, &dci, None).expect("device");
        let queue = device.get_device_queue(fam, 0);
        let n: u64 = 4096;
        let (hb, hm) = raw::transfer_buffer(&instance, pd, &device, n, true);
        let (db, dm) = raw::transfer_buffer(&instance, pd, &device, n, false);
        let pool = device.create_command_pool(&vk::CommandPoolCreateInfo::default().queue_family_index(fam), None).unwrap();
        let names = ["none", "v1 global", "v1 buffer", "v2 copy", "v2 all", "h2d"];
        let forms: Vec<usize> = (0..names.len()).filter(|&k| sync2 || !(3..=4).contains(&k)).collect();
        let cbs = device
            .allocate_command_buffers(&vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(names.len() as u32))
            .unwrap();
        for &k in &forms {
            let cb = cbs[k];
            device.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default()).unwrap();
            let region = [vk::BufferCopy { src_offset: 0, dst_offset: 0, size: n }];
            if k == 5 {
                device.cmd_copy_buffer(cb, hb, db, &region);
            } else {
                device.cmd_copy_buffer(cb, db, hb, &region);
            }
            match k {
                1 => raw::host_read_barrier(&device, cb, None),
                2 => raw::host_read_barrier(&device, cb, Some((hb, 0, n))),
                3 | 4 => {
                    let (stage, access) = if k == 3 {
                        (vk::PipelineStageFlags2::COPY, vk::AccessFlags2::TRANSFER_WRITE)
                    } else {
                        (vk::PipelineStageFlags2::ALL_TRANSFER, vk::AccessFlags2::MEMORY_WRITE)
                    };
                    let b = [vk::MemoryBarrier2::default()
                        .src_stage_mask(stage)
                        .src_access_mask(access)
                        .dst_stage_mask(vk::PipelineStageFlags2::HOST)
                        .dst_access_mask(vk::AccessFlags2::HOST_READ)];
                    device.cmd_pipeline_barrier2(cb, &vk::DependencyInfo::default().memory_barriers(&b));
                }
                _ => {}
            }
            device.end_command_buffer(cb).unwrap();
        }
        let sem = raw::timeline(&device);
        let mut value = 0u64;
        let mut once = |cb: vk::CommandBuffer| {
            value += 1;
            raw::submit_and_poll(&device, queue, cb, sem, value)
        };
        for &k in &forms {
            for _ in 0..50 {
                once(cbs[k]);
            }
        }
        print!("{:<6}", "round");
        for &k in &forms {
            print!(" {:>10}", names[k]);
        }
        println!("   (median us of {iters})");
        let mut all: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
        for r in 1..=rounds {
            print!("{r:<6}");
            for &k in &forms {
                let m = median((0..iters).map(|_| once(cbs[k])).collect());
                all[k].push(m);
                print!(" {m:>10.2}");
            }
            println!();
        }
        print!("{:<6}", "median");
        for &k in &forms {
            print!(" {:>10.2}", median(all[k].clone()));
        }
        println!();
        device.destroy_semaphore(sem, None);
        device.destroy_command_pool(pool, None);
        for (b, m) in [(hb, hm), (db, dm)] {
            device.destroy_buffer(b, None);
            device.free_memory(m, None);
        }
        device.destroy_device(None);
        instance.destroy_instance(None);
    }
    Ok(())
}
