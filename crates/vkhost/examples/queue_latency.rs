//! Small-copy latency on each queue vkhost opened, in one process (issue 10: in some processes
//! every small copy ran ~30 us slower; is that one queue's or the whole device's?).
//!
//!     cargo run --release --example queue_latency [rounds=1]
//!
//! With rounds > 1 the process opens, measures and destroys the device that many times, one
//! after the other: is the slow state the process's, or one VkDevice's? With `PIN_CPUS=0,8,15`
//! the last device's synchronous 4 KiB copies are also timed with this thread pinned to each of
//! those CPUs in turn: is it where the waiting thread runs?
//!
//! For each copy-engine queue and the compute queue: the median of 200 stream uploads and
//! downloads of 4 KiB (enqueue + wait) from pinned memory, and of 50 of 1 MiB; then the
//! synchronous path (`DeviceBuffer::write`/`read`, BAR stores off), which picks its own queue.

use std::time::Instant;
use vkhost::{BarWrites, Device, OpenOptions, PinnedBuffer, QueueKind};

#[path = "support/args.rs"]
mod args;
#[path = "support/timing.rs"]
mod timing;
use timing::{median, sync_copies};

fn main() -> vkhost::Result<()> {
    let rounds: usize = args::arg(1, 1)?.max(1);
    let cpus: Vec<usize> = args::list("PIN_CPUS", &args::var("PIN_CPUS")?)?;
    if let Some(&cpu) = cpus.iter().find(|&&c| c >= libc::CPU_SETSIZE as usize) {
        let reason = format!("PIN_CPUS: CPU {cpu} is past the largest set sched_setaffinity takes ({})", libc::CPU_SETSIZE);
        return Err(vkhost::Error::InvalidArgument { reason });
    }
    for k in 0..rounds {
        if rounds > 1 {
            println!("-- device {} of {rounds}", k + 1);
        }
        round(&cpus)?;
    }
    Ok(())
}

fn round(cpus: &[usize]) -> vkhost::Result<()> {
    let dev = Device::open_default_with(&OpenOptions { bar_writes: BarWrites::Off, ..OpenOptions::default() })?;
    let buf = dev.alloc_buffer(1 << 20)?;
    let mut host = PinnedBuffer::new(&dev, 1 << 20)?;
    host.fill(3);
    let raw = dev.raw()?;
    let mut queues: Vec<(QueueKind, usize)> = (0..raw.copy_queue_indices.len()).map(|i| (QueueKind::Copy, i)).collect();
    queues.push((QueueKind::Compute, 0));
    for (kind, i) in queues {
        let s = dev.stream_on_queue(kind, i)?;
        let q = s.queue()?;
        let mut out = Vec::new();
        for (len, n) in [(4096usize, 200), (1 << 20, 50)] {
            let (mut up, mut down) = (Vec::new(), Vec::new());
            for _ in 0..n {
                let t = Instant::now();
                s.upload(&host[..len], &buf, 0)?.wait()?;
                up.push(t.elapsed().as_secs_f64() * 1e6);
                let t = Instant::now();
                s.download(&buf, 0, &mut host[..len])?.wait()?;
                down.push(t.elapsed().as_secs_f64() * 1e6);
            }
            out.push(format!("{} h2d {:6.1} us d2h {:6.1} us", if len == 4096 { "4 KiB" } else { "1 MiB" }, median(up), median(down)));
        }
        println!("stream on {kind:?} queue {i} (family {}, index {}): {}", q.0, q.1, out.join("; "));
    }
    let mut out = Vec::new();
    for (len, n) in [(4096usize, 200), (1 << 20, 50)] {
        let (w, r) = sync_copies(&buf, &mut host, len, n)?;
        out.push(format!("{} h2d {w:6.1} us d2h {r:6.1} us", if len == 4096 { "4 KiB" } else { "1 MiB" }));
    }
    println!("synchronous copies: {}", out.join("; "));
    for &cpu in cpus {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and sched_setaffinity on the
        // calling thread (pid 0) with its size have no other preconditions.
        let ok = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) == 0
        };
        if !ok {
            println!("cannot pin to CPU {cpu}");
            continue;
        }
        let (w, r) = sync_copies(&buf, &mut host, 4096, 200)?;
        println!("pinned to CPU {cpu:2}: synchronous 4 KiB h2d {w:6.1} us d2h {r:6.1} us");
    }
    drop(host);
    drop(buf);
    dev.destroy()
}
