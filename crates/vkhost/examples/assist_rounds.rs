//! Round by round, a shared write (`OpenOptions::bar_assist`, issue 10): in some processes on
//! the H200 most rounds of a 64 MiB shared write ran at 4-9 GB/s where others ran at 40-60,
//! with the same minor page faults, so this prints every round (wall clock, time, GB/s, the
//! stores' share) to be set beside `nvidia-smi`'s samples of the link and clocks.
//!
//!     cargo run --release --example assist_rounds -- [MiB=64] [rounds=40] [read=0|1]
//!
//! `read=1` runs a copy-engine read of the same size on a second thread, in lock-step with
//! the writes (the bench's `bidir_bar+assist`).

use std::sync::Barrier;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use vkhost::{BarAssist, BarWrites, Device, OpenOptions, PinnedBuffer, host};
#[path = "support/args.rs"]
mod args;

fn main() -> vkhost::Result<()> {
    let (mib, n) = args::size_arg(1, 20, 64, 4)?;
    let (rounds, read) = (args::arg(2, 40usize)?.max(1), args::arg(3, 0usize)? == 1);
    let opts = OpenOptions { bar_writes: BarWrites::On, bar_assist: BarAssist::Always, ..OpenOptions::default() };
    let dev = Device::open_default_with(&opts)?;
    let (wbuf, rbuf) = (dev.alloc_buffer(n)?, dev.alloc_buffer(n)?);
    let mut src = PinnedBuffer::new(&dev, n)?;
    src.fill(7);
    let mut dst = PinnedBuffer::new(&dev, n)?;
    let (start, end) = (Barrier::new(2), Barrier::new(2));
    println!("{} ({}), {mib} MiB, reader: {read}", dev.info().name, dev.info().driver_name);
    println!("{:>17} {:>9} {:>8} {:>7}", "unix s", "ms", "GB/s", "stores");
    std::thread::scope(|sc| -> vkhost::Result<()> {
        let reader = read.then(|| {
            let (start, end, rbuf, dst) = (&start, &end, &rbuf, &mut dst);
            sc.spawn(move || -> vkhost::Result<()> {
                for _ in 0..rounds {
                    start.wait();
                    let r = rbuf.read(0, dst);
                    end.wait();
                    r?;
                }
                Ok(())
            })
        });
        for _ in 0..rounds {
            if read {
                start.wait();
            }
            let before = host::device_stats(&dev).mapped_bytes;
            let wall = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
            let t = Instant::now();
            let w = wbuf.write(0, &src);
            let s = t.elapsed().as_secs_f64();
            if read {
                end.wait();
            }
            w?;
            let stored = host::device_stats(&dev).mapped_bytes - before;
            println!("{wall:>17.3} {:>9.3} {:>8.2} {:>6.0}%", s * 1e3, n as f64 / s / 1e9, 100.0 * stored as f64 / n as f64);
        }
        if let Some(h) = reader {
            match h.join() {
                Ok(r) => r?,
                Err(p) => std::panic::resume_unwind(p),
            }
        }
        Ok(())
    })
}
