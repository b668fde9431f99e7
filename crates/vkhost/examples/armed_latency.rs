//! Latency lead for issue 10 (small synchronous copies): is the submission the cost? A probe in
//! raw ash, on its own instance and device (vkhost is not involved), per queue family:
//!
//! - `submit`: vkQueueSubmit of a pre-recorded 4 KiB host→device copy that signals a timeline
//!   value, then busy-poll of the value (what vkhost's synchronous copy does);
//! - `armed`: the same command buffer submitted beforehand, waiting on a second timeline
//!   semaphore; the timed part is vkSignalSemaphore from the host, then the same busy-poll;
//! - `submit-empty` / `armed-empty`: the same with an empty command buffer.
//!
//! It also says whether VK_NV_copy_memory_indirect is offered (a pre-armed copy whose regions are
//! read from memory at execution time would let any copy use an armed submission).
//!
//!     cargo run --release --example armed_latency [iters=2000] [gap_us=20]
//!
//! `gap_us`: how long the host waits after arming before it signals (the armed submission
//! must have reached the device).

use std::time::{Duration, Instant};
use vkhost::ash::vk;

#[path = "support/args.rs"]
mod args;
#[path = "support/raw.rs"]
mod raw;

fn main() -> vkhost::Result<()> {
    let iters: usize = args::arg(1, 2000)?.max(10);
    let gap = Duration::from_micros(args::arg(2, 20)?);
    run(iters, gap);
    Ok(())
}

fn run(iters: usize, gap: Duration) {
    // SAFETY: (the whole function) plain Vulkan calls on objects created here, used by this thread
    // only; a command buffer is resubmitted only after its previous submission completed.
    unsafe {
        let (_entry, instance, pd) = raw::instance_and_gpu(vk::API_VERSION_1_2);
        let props = instance.get_physical_device_properties(pd);
        println!("device: {:?}", props.device_name_as_c_str().unwrap_or_default());
        let exts = instance.enumerate_device_extension_properties(pd).unwrap_or_default();
        let has = |n: &std::ffi::CStr| exts.iter().any(|e| e.extension_name_as_c_str() == Ok(n));
        println!(
            "VK_NV_copy_memory_indirect: {}, VK_KHR_buffer_device_address (core 1.2): yes",
            if has(c"VK_NV_copy_memory_indirect") { "offered" } else { "absent" }
        );
        let fams = instance.get_physical_device_queue_family_properties(pd);
        let prio = [1.0f32];
        let used: Vec<u32> = (0..fams.len() as u32)
            .filter(|&f| {
                fams[f as usize].queue_flags.contains(vk::QueueFlags::TRANSFER)
                    || fams[f as usize].queue_flags.contains(vk::QueueFlags::COMPUTE)
            })
            .collect();
        let qcis: Vec<_> =
            used.iter().map(|&f| vk::DeviceQueueCreateInfo::default().queue_family_index(f).queue_priorities(&prio)).collect();
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
        let device = instance
            .create_device(pd, &vk::DeviceCreateInfo::default().queue_create_infos(&qcis).push_next(&mut f12), None)
            .expect("device");
        let n: u64 = 4096;
        let (hb, hm) = raw::transfer_buffer(&instance, pd, &device, n, true);
        let (db, dm) = raw::transfer_buffer(&instance, pd, &device, n, false);
        let timeline = || {
            let mut ti = vk::SemaphoreTypeCreateInfo::default().semaphore_type(vk::SemaphoreType::TIMELINE).initial_value(0);
            device.create_semaphore(&vk::SemaphoreCreateInfo::default().push_next(&mut ti), None).unwrap()
        };
        println!("{:<8} {:<14} {:>9} {:>9} {:>9}", "family", "mode", "p10 us", "median", "p90");
        for &fam in &used {
            let queue = device.get_device_queue(fam, 0);
            let pool = device.create_command_pool(&vk::CommandPoolCreateInfo::default().queue_family_index(fam), None).unwrap();
            let cbs = device
                .allocate_command_buffers(&vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(2))
                .unwrap();
            for (k, &cb) in cbs.iter().enumerate() {
                device.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default()).unwrap();
                if k == 0 {
                    device.cmd_copy_buffer(cb, hb, db, &[vk::BufferCopy { src_offset: 0, dst_offset: 0, size: n }]);
                }
                device.end_command_buffer(cb).unwrap();
            }
            for (cb, what) in [(cbs[0], "copy 4K"), (cbs[1], "empty")] {
                for armed in [false, true] {
                    let (arm, done) = (timeline(), timeline());
                    let mut t = Vec::with_capacity(iters);
                    for i in 1..=(iters as u64 + 50) {
                        let cbi = [cb];
                        let (dv, av, ds, as_) = ([i], [i], [done], [arm]);
                        let stage = [vk::PipelineStageFlags::ALL_COMMANDS];
                        let mut ti = vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&dv);
                        if armed {
                            ti = ti.wait_semaphore_values(&av);
                        }
                        let mut si = vk::SubmitInfo::default().command_buffers(&cbi).signal_semaphores(&ds);
                        if armed {
                            si = si.wait_semaphores(&as_).wait_dst_stage_mask(&stage);
                        }
                        let si = si.push_next(&mut ti);
                        let start;
                        if armed {
                            device.queue_submit(queue, &[si], vk::Fence::null()).unwrap();
                            let g = Instant::now();
                            while g.elapsed() < gap {}
                            start = Instant::now();
                            device.signal_semaphore(&vk::SemaphoreSignalInfo::default().semaphore(arm).value(i)).unwrap();
                        } else {
                            start = Instant::now();
                            device.queue_submit(queue, &[si], vk::Fence::null()).unwrap();
                        }
                        while device.get_semaphore_counter_value(done).unwrap() < i {}
                        let e = start.elapsed().as_secs_f64() * 1e6;
                        if i > 50 {
                            t.push(e);
                        }
                        if !armed {
                            let g = Instant::now();
                            while g.elapsed() < gap {}
                        }
                    }
                    t.sort_by(f64::total_cmp);
                    let q = |p: f64| t[((t.len() - 1) as f64 * p) as usize];
                    let mode = format!("{}{}", if armed { "armed " } else { "submit " }, what);
                    println!("{:<8} {:<14} {:>9.2} {:>9.2} {:>9.2}", fam, mode, q(0.1), q(0.5), q(0.9));
                    device.destroy_semaphore(arm, None);
                    device.destroy_semaphore(done, None);
                }
            }
            device.destroy_command_pool(pool, None);
        }
        device.destroy_buffer(hb, None);
        device.free_memory(hm, None);
        device.destroy_buffer(db, None);
        device.free_memory(dm, None);
        device.destroy_device(None);
        instance.destroy_instance(None);
    }
}
