//! Synchronous copies both ways at once: `DeviceBuffer::write` on one thread and
//! `DeviceBuffer::read` on another, in lock-step, from and into pinned memory (issue 10: on the
//! H200 the two went to the one compute queue from 4 MiB and summed 50-52 GB/s, where two
//! streams on the copy engines give 57-58).
//!
//!     cargo run --release --example sync_bidir -- [MiB=64] [rounds=20]
//!
//! Prints the median GB/s of the write alone, the read alone, and both at once (the sum of
//! both sizes over the round's wall time).

use std::sync::Barrier;
use std::time::Instant;
use vkhost::{Device, PinnedBuffer};

#[path = "support/args.rs"]
mod args;
#[path = "support/timing.rs"]
mod timing;
use timing::median;

fn main() -> vkhost::Result<()> {
    let (mib, n) = args::size_arg(1, 20, 64, 1)?;
    let rounds = args::arg(2, 20usize)?.max(1);
    let dev = Device::open_default()?;
    let (up, down) = (dev.alloc_buffer(n)?, dev.alloc_buffer(n)?);
    let mut src = PinnedBuffer::new(&dev, n)?;
    src.fill(3);
    let mut dst = PinnedBuffer::new(&dev, n)?;
    let gbps = |bytes: usize, s: f64| bytes as f64 / s / 1e9;
    let (mut w, mut r) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        up.write(0, &src)?;
        w.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        down.read(0, &mut dst)?;
        r.push(t.elapsed().as_secs_f64());
    }
    let (start, end) = (Barrier::new(2), Barrier::new(2));
    let both = std::thread::scope(|sc| -> vkhost::Result<Vec<f64>> {
        let (start_r, end_r, down, dst) = (&start, &end, &down, &mut dst);
        let reader = sc.spawn(move || -> vkhost::Result<()> {
            for _ in 0..rounds {
                start_r.wait();
                let x = down.read(0, dst);
                end_r.wait();
                x?;
            }
            Ok(())
        });
        let mut both = Vec::new();
        for _ in 0..rounds {
            start.wait();
            let t = Instant::now();
            let x = up.write(0, &src);
            end.wait();
            both.push(t.elapsed().as_secs_f64());
            x?;
        }
        match reader.join() {
            Ok(x) => x?,
            Err(p) => std::panic::resume_unwind(p),
        }
        Ok(both)
    })?;
    let q = dev.copy_queues();
    println!(
        "{} {mib} MiB: write alone {:.2} GB/s ({:?}), read alone {:.2} ({:?}), both at once {:.2} in sum",
        dev.info().name,
        gbps(n, median(w)),
        q.queue_for(true, n as u64),
        gbps(n, median(r)),
        q.queue_for(false, n as u64),
        gbps(2 * n, median(both))
    );
    Ok(())
}
