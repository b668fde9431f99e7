//! Does a mid-size copy split over two copy-engine queues finish sooner than on one (issue 10:
//! 1-4 MiB at >= 0.88x CUDA; one queue pays the ~12 us submit-and-wait floor plus the transfer)?
//!
//!     cargo run --release --example split_copy -- [iterations=50]
//!
//! For 256 KiB to 16 MiB from pinned memory, the median of `iterations` of:
//! - the synchronous path (`DeviceBuffer::write`/`read`, BAR stores off), for reference;
//! - one stream on copy queue 0: the whole copy, flushed and waited on;
//! - two streams on copy queues 0 and 1: half each, both flushed, then both waited on.
//!
//! Prints GB/s per size and direction.

use std::time::Instant;
use vkhost::{BarWrites, Device, OpenOptions, PinnedBuffer, QueueKind};

#[path = "support/args.rs"]
mod args;
#[path = "support/timing.rs"]
mod timing;
use timing::median;

fn main() -> vkhost::Result<()> {
    let iters: usize = args::arg(1, 50)?.max(1);
    let dev = Device::open_default_with(&OpenOptions { bar_writes: BarWrites::Off, ..OpenOptions::default() })?;
    let max = 16 << 20;
    let buf = dev.alloc_buffer(max)?;
    let mut host = PinnedBuffer::new(&dev, max)?;
    host.fill(5);
    let queues = dev.raw()?.copy_queue_indices.len();
    if queues < 2 {
        println!("{}: {queues} copy queue(s); nothing to split over", dev.info().name);
        return Ok(());
    }
    let (s0, s1) = (dev.stream_on_queue(QueueKind::Copy, 0)?, dev.stream_on_queue(QueueKind::Copy, 1)?);
    println!("{}: queues {:?} and {:?}, {iters} iterations, GB/s (median)", dev.info().name, s0.queue()?, s1.queue()?);
    for len in [256usize << 10, 1 << 20, 2 << 20, 4 << 20, 16 << 20] {
        let h = len / 2;
        let gbps = |v: Vec<f64>| len as f64 / median(v) / 1e9;
        let (mut sync_w, mut sync_r, mut one_w, mut one_r, mut two_w, mut two_r) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..iters {
            let t = Instant::now();
            buf.write(0, &host[..len])?;
            sync_w.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            buf.read(0, &mut host[..len])?;
            sync_r.push(t.elapsed().as_secs_f64());

            let t = Instant::now();
            let p = s0.upload(&host[..len], &buf, 0)?;
            s0.flush()?;
            p.wait()?;
            one_w.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let p = s0.download(&buf, 0, &mut host[..len])?;
            s0.flush()?;
            p.wait()?;
            one_r.push(t.elapsed().as_secs_f64());

            let t = Instant::now();
            let p0 = s0.upload(&host[..h], &buf, 0)?;
            s0.flush()?;
            let p1 = s1.upload(&host[h..len], &buf, h)?;
            s1.flush()?;
            p0.wait()?;
            p1.wait()?;
            two_w.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let (a, b) = host[..len].split_at_mut(h);
            let p0 = s0.download(&buf, 0, a)?;
            s0.flush()?;
            let p1 = s1.download(&buf, h, b)?;
            s1.flush()?;
            p0.wait()?;
            p1.wait()?;
            two_r.push(t.elapsed().as_secs_f64());
        }
        println!(
            "{:>5} KiB  h2d: sync {:5.1}  one queue {:5.1}  two queues {:5.1}   d2h: sync {:5.1}  one queue {:5.1}  two queues {:5.1}",
            len >> 10,
            gbps(sync_w),
            gbps(one_w),
            gbps(two_w),
            gbps(sync_r),
            gbps(one_r),
            gbps(two_r)
        );
    }
    drop((s0, s1));
    drop(host);
    drop(buf);
    dev.destroy()
}
