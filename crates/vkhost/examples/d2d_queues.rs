//! Device-to-device copies and fills by each engine: vkCmdCopyBuffer on a copy queue and on the
//! compute queue (on the H200 ~88 and ~410 GB/s at 1 GiB, where the copy kernel does ~1.9 TB/s
//! and CUDA's cudaMemcpy 2.1), `Stream::copy_async` on a compute stream (the kernel from
//! `OpenOptions::d2d_kernel_min`), and from what size the kernel wins.
//!
//!     cargo run --release --example d2d_queues -- [largest MiB=1024]
//!
//! Per size: the median of 10 enqueues + synchronize (after 2 untimed), GB/s counting the size
//! once, for vkCmdCopyBuffer on a copy stream and on a compute stream (a second device opened
//! with `d2d_kernel_min` off), `copy_async` on a compute stream with the default options,
//! `copy_sm` (the copy kernel), then `fill_async` (vkCmdFillBuffer) on a copy and a compute
//! stream and `fill_u32` (the fill kernel).

use std::time::Instant;
use vkhost::{Binding, Device, OpenOptions, QueueKind, Stream};

#[path = "support/args.rs"]
mod args;
#[path = "support/timing.rs"]
mod timing;
use timing::median;

fn gbps(n: usize, mut f: impl FnMut() -> vkhost::Result<()>, s: &Stream) -> vkhost::Result<f64> {
    for _ in 0..2 {
        f()?;
        s.synchronize()?;
    }
    let mut t = Vec::new();
    for _ in 0..10 {
        let a = Instant::now();
        f()?;
        s.synchronize()?;
        t.push(a.elapsed().as_secs_f64());
    }
    Ok(n as f64 / median(t) / 1e9)
}

fn main() -> vkhost::Result<()> {
    let (_, max) = args::size_arg(1, 20, 1024, 1)?;
    let dev = Device::open_default()?;
    let raw = Device::open_default_with(&OpenOptions { d2d_kernel_min: Some(usize::MAX), ..Default::default() })?;
    let (a, b) = (dev.alloc_buffer(max)?, dev.alloc_buffer(max)?);
    let (ra, rb) = (raw.alloc_buffer(max)?, raw.alloc_buffer(max)?);
    let (copy, comp, rcomp) = (dev.stream_on(QueueKind::Copy)?, dev.stream_on(QueueKind::Compute)?, raw.stream_on(QueueKind::Compute)?);
    println!(
        "{:>9} {:>10} {:>10} {:>10} {:>10} | {:>10} {:>10} {:>10}",
        "size", "copy q", "compute q", "copy_async", "kernel", "fill copy", "fill comp", "fill kern"
    );
    let mut n = 4096;
    while n <= max {
        let c1 = gbps(n, || copy.copy_async(&a, 0, &b, 0, n), &copy)?;
        let c2 = gbps(n, || rcomp.copy_async(&ra, 0, &rb, 0, n), &rcomp)?;
        let c3 = gbps(n, || comp.copy_async(&a, 0, &b, 0, n), &comp)?;
        let c4 = gbps(n, || comp.copy_sm(Binding::Device(&a, 0, n), Binding::Device(&b, 0, n)), &comp)?;
        let f1 = gbps(n, || copy.fill_async(&b, 0, n, 7), &copy)?;
        let f2 = gbps(n, || comp.fill_async(&b, 0, n, 7), &comp)?;
        let f3 = gbps(n, || comp.fill_u32(Binding::Device(&b, 0, n), 7), &comp)?;
        let k = if n >= 1 << 20 { format!("{} MiB", n >> 20) } else { format!("{} KiB", n >> 10) };
        println!("{k:>9} {c1:>10.2} {c2:>10.2} {c3:>10.2} {c4:>10.2} | {f1:>10.2} {f2:>10.2} {f3:>10.2}");
        // Every power of 4, and 2 MiB (the default d2d_kernel_min).
        n = if n == 1 << 20 {
            2 << 20
        } else if n == 2 << 20 {
            4 << 20
        } else {
            n * 4
        };
    }
    Ok(())
}
