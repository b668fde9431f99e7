//! Would a mid-size h2d copy into mapped VRAM finish sooner shared between the copy engine and
//! CPU stores (issue 10: 1-4 MiB at >= 0.88x CUDA; a copy pays the ~12 us submit-and-wait floor
//! before its first byte moves, and the CPU could store the front meanwhile)?
//!
//!     cargo run --release --example mid_split -- [iterations=50]
//!
//! For 256 KiB to 4 MiB from a pinned block, the median of `iterations` of:
//! - `ce`: the whole copy on the copy engine (`host::copy_to_device`, as `vkhost bench`'s
//!   `host_to_device_ce`);
//! - `front k/8`: the back `(8-k)/8` uploaded on a copy-queue stream (flushed at once), the
//!   front `k/8` stored by the CPU into a second buffer meanwhile (`DeviceBuffer::write` with
//!   `bar_write_max` raised: split over the staging threads from 512 KiB), then the upload
//!   waited on. Two buffers, because a write waits for stream work enqueued on its own buffer:
//!   this measures what sharing the link would give, not a library path.
//!
//! Needs a DEVICE_LOCAL|HOST_VISIBLE memory type (a full BAR, or UMA); prints GB/s per size.

use std::time::Instant;
use vkhost::{BarWrites, Device, OpenOptions, PinnedBuffer, QueueKind, host};

#[path = "support/args.rs"]
mod args;
#[path = "support/timing.rs"]
mod timing;
use timing::median;

fn main() -> vkhost::Result<()> {
    let iters: usize = args::arg(1, 50)?.max(1);
    let max = 4 << 20;
    let dev = Device::open_default_with(&OpenOptions { bar_writes: BarWrites::On, bar_write_max: max, ..OpenOptions::default() })?;
    let (front, back) = (dev.alloc_buffer(max)?, dev.alloc_buffer(max)?);
    let mut host = PinnedBuffer::new(&dev, max)?;
    host.fill(7);
    let s = dev.stream_on(QueueKind::Copy)?;
    // The stores land only where buffers are mapped: say so if they are not.
    let before = host::device_stats(&dev).mapped_bytes;
    front.write(0, &host[..4096])?;
    if host::device_stats(&dev).mapped_bytes == before {
        println!("{}: device buffers are not mapped here; nothing to share", dev.info().name);
        return Ok(());
    }
    println!("{}: {iters} iterations, GB/s (median); stream on {:?}", dev.info().name, s.queue()?);
    for len in [256usize << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20] {
        let gbps = |v: Vec<f64>| len as f64 / median(v) / 1e9;
        let mut ce = Vec::new();
        for _ in 0..iters {
            let t = Instant::now();
            // SAFETY: `host` is a live pinned block of at least `len` bytes, not written meanwhile.
            unsafe { host::copy_to_device(&dev, host.as_ptr(), len, &back, 0) }?;
            ce.push(t.elapsed().as_secs_f64());
        }
        let mut line = format!("{:>5} KiB  ce {:5.2}", len >> 10, gbps(ce));
        for k in 0..=4 {
            let cut = (len * k / 8) & !4095;
            let mut v = Vec::new();
            for _ in 0..iters {
                let t = Instant::now();
                let p = s.upload(&host[cut..len], &back, cut)?;
                s.flush()?;
                if cut > 0 {
                    front.write(0, &host[..cut])?;
                }
                p.wait()?;
                v.push(t.elapsed().as_secs_f64());
            }
            line += &format!("  front {k}/8 {:5.2}", gbps(v));
        }
        println!("{line}");
    }
    Ok(())
}
