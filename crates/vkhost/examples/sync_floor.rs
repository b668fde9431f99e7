//! Issue 10's small-copy target, measured against its floor in one process: "synchronous copies
//! within 1 us of the submit-and-poll floor". The issue's 12.4 us floor was a host→device copy in
//! another program (`vkprobe`); is vkhost's extra time at 4 KiB its own, or the floor of that
//! direction and moment?
//!
//!     cargo run --release --example sync_floor [rounds=5] [iters=300]
//!
//! Everything below runs on vkhost's own VkDevice, its own buffers and the very queues it copies
//! on, from this one thread:
//!
//! - `raw`: a pre-recorded `vkCmdCopyBuffer` of 4 KiB between the pinned block's VkBuffer and the
//!   device buffer's VkBuffer, submitted with a timeline signal and busy-polled with
//!   vkGetSemaphoreCounterValue (no fence, no allocation): the floor, per queue and direction.
//!   The d2h copy three ways: alone (no barrier: what the H200 allows, not what the spec
//!   promises), followed by the global TRANSFER_WRITE→HOST_READ memory barrier vkhost records
//!   (`+mb`, which the spec requires before the host reads device writes), and followed by a
//!   buffer memory barrier over the 4 KiB only (`+bb`);
//! - `vkhost`: `DeviceBuffer::write` / `read` of the same 4 KiB between the same two buffers
//!   (BAR stores off), timed the same way (call to return).
//!
//! Rounds alternate the two (raw copy queue, raw compute queue, vkhost) so that a drift of the
//! device's state over the process hits both. Each line is the median of `iters` copies; the
//! summary is the median of the rounds' medians, and vkhost's excess over the floor of the queue
//! it chose for that direction.

use std::time::Instant;
use vkhost::ash::vk;
use vkhost::{BarWrites, Device, OpenOptions, PinnedBuffer, QueueKind};

#[path = "support/args.rs"]
mod args;
#[path = "support/raw.rs"]
mod raw;
#[path = "support/timing.rs"]
mod timing;
use timing::median;

const LEN: u64 = 4096;

/// A pre-recorded copy on one queue, its pool and its timeline.
struct Raw {
    device: vkhost::ash::Device,
    queue: vk::Queue,
    pool: vk::CommandPool,
    /// [h2d, d2h, d2h + memory barrier, d2h + buffer barrier]
    cbs: [vk::CommandBuffer; 4],
    timeline: vk::Semaphore,
    value: u64,
}

impl Raw {
    /// # Safety
    /// `device` is vkhost's live device and (`family`, `index`) one of its queues; the queue is
    /// externally synchronized: no vkhost call that may submit runs while this submits (vkhost
    /// guards its queues with its own locks, which this code does not take); the buffers are
    /// live and hold `LEN` bytes.
    unsafe fn new(device: &vkhost::ash::Device, family: u32, index: u32, host: vk::Buffer, host_off: u64, dev: vk::Buffer) -> Raw {
        // SAFETY: the caller's contract; plain object creation and recording.
        unsafe {
            let queue = device.get_device_queue(family, index);
            let pool = device.create_command_pool(&vk::CommandPoolCreateInfo::default().queue_family_index(family), None).unwrap();
            let v = device
                .allocate_command_buffers(&vk::CommandBufferAllocateInfo::default().command_pool(pool).command_buffer_count(4))
                .unwrap();
            let cbs = [v[0], v[1], v[2], v[3]];
            for (k, &cb) in cbs.iter().enumerate() {
                device.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default()).unwrap();
                if k == 0 {
                    device.cmd_copy_buffer(cb, host, dev, &[vk::BufferCopy { src_offset: host_off, dst_offset: 0, size: LEN }]);
                } else {
                    device.cmd_copy_buffer(cb, dev, host, &[vk::BufferCopy { src_offset: 0, dst_offset: host_off, size: LEN }]);
                }
                match k {
                    2 => raw::host_read_barrier(device, cb, None),
                    3 => raw::host_read_barrier(device, cb, Some((host, host_off, LEN))),
                    _ => {}
                }
                device.end_command_buffer(cb).unwrap();
            }
            let timeline = raw::timeline(device);
            Raw { device: device.clone(), queue, pool, cbs, timeline, value: 0 }
        }
    }

    /// Microseconds of one submit + busy-poll of command buffer `d` (see `cbs`).
    fn once(&mut self, d: usize) -> f64 {
        self.value += 1;
        // SAFETY: the command buffer's previous submission completed (polled to completion by
        // the last call); no vkhost call runs meanwhile (`new`'s contract); values only grow.
        unsafe { raw::submit_and_poll(&self.device, self.queue, self.cbs[d], self.timeline, self.value) }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: every submission was polled to completion; objects of ours.
        unsafe {
            self.device.destroy_semaphore(self.timeline, None);
            self.device.destroy_command_pool(self.pool, None);
        }
    }
}

fn main() -> vkhost::Result<()> {
    let rounds: usize = args::arg(1, 5)?.max(1);
    let iters: usize = args::arg(2, 300)?.max(10);
    let dev = Device::open_default_with(&OpenOptions { bar_writes: BarWrites::Off, ..OpenOptions::default() })?;
    println!("device: {}", dev.info().name);
    let buf = dev.alloc_buffer(LEN as usize)?;
    let mut host = PinnedBuffer::new(&dev, LEN as usize)?;
    host.fill(7);
    let mem = host.raw_memory().expect("a pinned block has a buffer");
    let raw = dev.raw()?;
    let choice = dev.copy_queues();
    println!(
        "vkhost's queues for small copies: h2d {:?}, d2h {:?}; measured at open: {:?}",
        choice.small_to_device, choice.small_to_host, choice.measured
    );
    let mut queues: Vec<(QueueKind, u32, u32)> = Vec::new();
    if let (Some(f), Some(&i)) = (raw.copy_family, raw.copy_queue_indices.first()) {
        queues.push((QueueKind::Copy, f, i));
    }
    queues.push((QueueKind::Compute, raw.compute_family, raw.compute_queue_index));
    // SAFETY: vkhost's live device and queues; this thread is the only one that submits, and
    // vkhost submits only inside the calls below, made from this thread between raw submissions
    // (never during one: each is polled to completion); the buffers live until the end of
    // main, after the Raws drop.
    let mut raws: Vec<Raw> =
        queues.iter().map(|&(_, f, i)| unsafe { Raw::new(&raw.device, f, i, mem.buffer, mem.offset, buf.raw()) }).collect();
    // [queue][command buffer] and vkhost [dir]: one median per round.
    let mut floors = vec![[Vec::new(), Vec::new(), Vec::new(), Vec::new()]; raws.len()];
    let mut ours = [Vec::new(), Vec::new()];
    for _ in 0..20 {
        for r in raws.iter_mut() {
            for k in 0..4 {
                r.once(k);
            }
        }
        buf.write(0, &host)?;
        buf.read(0, &mut host)?;
    }
    println!("{:<7} {:<22} {:>9} {:>9} {:>9} {:>9}", "round", "what", "h2d us", "d2h us", "d2h+mb", "d2h+bb");
    for round in 1..=rounds {
        for (q, r) in raws.iter_mut().enumerate() {
            let m: Vec<f64> = (0..4).map(|k| median((0..iters).map(|_| r.once(k)).collect())).collect();
            println!(
                "{round:<7} {:<22} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                format!("raw {:?} ({}, {})", queues[q].0, queues[q].1, queues[q].2),
                m[0],
                m[1],
                m[2],
                m[3]
            );
            for k in 0..4 {
                floors[q][k].push(m[k]);
            }
        }
        let (mut w, mut rd) = (Vec::with_capacity(iters), Vec::with_capacity(iters));
        for _ in 0..iters {
            let t = Instant::now();
            buf.write(0, &host)?;
            w.push(t.elapsed().as_secs_f64() * 1e6);
        }
        for _ in 0..iters {
            let t = Instant::now();
            buf.read(0, &mut host)?;
            rd.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let (w, rd) = (median(w), median(rd));
        println!("{round:<7} {:<22} {w:>9.2} {rd:>9.2}", "vkhost write / read");
        ours[0].push(w);
        ours[1].push(rd);
    }
    println!("-- medians of the {rounds} rounds");
    let pick = |k: QueueKind| queues.iter().position(|q| q.0 == k).unwrap_or(queues.len() - 1);
    for (d, (name, kind)) in [("h2d", choice.small_to_device), ("d2h", choice.small_to_host)].into_iter().enumerate() {
        let all: Vec<String> = (0..raws.len()).map(|q| format!("{:?} {:.2}", queues[q].0, median(floors[q][d].clone()))).collect();
        let floor = median(floors[pick(kind)][d].clone());
        let best = (0..raws.len()).map(|q| median(floors[q][d].clone())).fold(f64::INFINITY, f64::min);
        let v = median(ours[d].clone());
        println!(
            "{name}: vkhost {v:.2} us on {kind:?}; raw floor {} us; excess over its queue's floor {:+.2} us, over the best queue's {:+.2} us",
            all.join(", "),
            v - floor,
            v - best
        );
        if d == 1 {
            let q = pick(kind);
            let (mb, bb) = (median(floors[q][2].clone()), median(floors[q][3].clone()));
            println!(
                "d2h with the HOST_READ barrier the spec asks for, on {kind:?}: memory barrier {mb:.2} us ({:+.2} over none), buffer barrier {bb:.2} us ({:+.2}); vkhost over the memory-barrier floor {:+.2} us",
                mb - floor,
                bb - floor,
                v - mb
            );
        }
    }
    drop(raws);
    drop(host);
    drop(buf);
    dev.destroy()
}
