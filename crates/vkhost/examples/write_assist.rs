//! `DeviceBuffer::write` of large pinned sources under each `BarAssist` mode, in one process:
//! what `Auto` (the default) chose on this device, and what it gets against `Off` (the copy
//! engine alone) and `Always` (every write of `OpenOptions::ASSIST_MIN` and more shared with
//! CPU stores).
//!
//!     cargo run --release --example write_assist -- [rounds=3] [sizes in MiB, comma-separated]
//!
//! One device per mode, opened once; the modes alternate size by size and round by round, so
//! that drifts in the process hit each alike. Prints, per size and mode, the median GB/s of 10
//! timed writes (after one untimed) and the share of the bytes the CPU stored, then checks the
//! last write of each by reading it back.

use std::time::Instant;
use vkhost::{BarAssist, Device, OpenOptions, PinnedBuffer};
#[path = "support/args.rs"]
mod args;

fn main() -> vkhost::Result<()> {
    let rounds: usize = args::arg(1, 3)?.max(1);
    let sizes = args::sizes(2, 20, &[4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30])?;
    let max = sizes.iter().copied().max().unwrap_or(0);
    let modes = [BarAssist::Auto, BarAssist::Off, BarAssist::Always];
    let mut devs = Vec::new();
    for m in modes {
        let dev = Device::open_default_with(&OpenOptions { bar_assist: m, ..Default::default() })?;
        let buf = dev.alloc_buffer(max)?;
        let mut src = PinnedBuffer::new(&dev, max)?;
        src.iter_mut().enumerate().for_each(|(i, b)| *b = (i % 251) as u8);
        devs.push((m, dev, buf, src));
    }
    let q = devs[0].1.copy_queues();
    println!(
        "{}: bulk copies at open {:?} GB/s (h2d, d2h); reads host memory slowly, so Auto shares: {}",
        devs[0].1.info().name,
        q.bulk_at_open(),
        q.reads_host_slowly()
    );
    let mut always_stored = 0;
    for r in 1..=rounds {
        for &n in &sizes {
            let mut line = format!("round {r} {:>5} MiB:", n >> 20);
            for (m, dev, buf, src) in &devs {
                buf.write(0, &src[..n])?;
                let before = vkhost::host::device_stats(dev).mapped_bytes;
                let mut t = Vec::new();
                for _ in 0..10 {
                    let s = Instant::now();
                    buf.write(0, &src[..n])?;
                    t.push(s.elapsed().as_secs_f64());
                }
                let stored = vkhost::host::device_stats(dev).mapped_bytes - before;
                t.sort_by(f64::total_cmp);
                if *m == BarAssist::Always {
                    always_stored += stored;
                }
                let share = 100.0 * stored as f64 / (10.0 * n as f64);
                line += &format!("  {m:?} {:6.2} GB/s ({share:3.0}% stored)", n as f64 / t[5] / 1e9);
            }
            println!("{line}");
        }
    }
    if always_stored == 0 && sizes.iter().any(|&n| n >= OpenOptions::ASSIST_MIN) {
        println!("nothing stored under Always: this device's buffers are not mapped, and no mode shares anything");
    }
    let mut fails = 0;
    for (m, _, buf, src) in &devs {
        let n = max.min(64 << 20);
        let mut back = vec![0u8; n];
        buf.read(0, &mut back)?;
        if back[..] != src[..n] {
            println!("FAIL: {m:?}'s writes did not land");
            fails += 1;
        }
    }
    println!("{}", if fails == 0 { "ok" } else { "FAILED" });
    if fails > 0 {
        std::process::exit(1);
    }
    Ok(())
}
