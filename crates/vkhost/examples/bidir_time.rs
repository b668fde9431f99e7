//! Bidir pairs of pinned memory over time, after other large host allocations or none: is the
//! pinned pair at 256 MiB slow for as long as the process lives, or for a while after other
//! memory was allocated (docs/PERFORMANCE.md, twenty-first and twenty-second sessions)?
//!
//!     cargo run --release --example bidir_time -- [block MiB=1024] [copy MiB=256] [seconds=12]
//!
//! Environment: `EXTRA=1` also allocates what the bench's other paths hold (2 x block MiB
//! registered with `Device::register`, 2 x block MiB of filled `Vec`s) after the pinned
//! blocks (`EXTRA=before`: before them); `DEVBUF_FIRST=1` allocates the two device buffers
//! before any host memory (else after it); `TOUCH=late` leaves the pinned blocks untouched until
//! right before the pairs, then writes only the copied range (as the bench's sweep does);
//! `FAULT_MIB=n` writes a fresh n MiB `Vec` right before the pairs; `SLEEP_MS=n` pauses before
//! the first pair.
//!
//! Each pair: `upload_pinned` on one copy queue and `download_pinned` on the other, both
//! awaited. Prints, per half second, the median sum GB/s of the pairs in it and when each
//! direction ended (µs, the median pair's).

use std::time::Instant;
use vkhost::{Device, PinnedBuffer, QueueKind, Registration};
#[path = "support/args.rs"]
mod args;

/// Registers the first two buffers of `other`, when there is one (the bench's registered path's
/// two regions; the other two stand for the pageable path's).
fn register_two<'a>(dev: &Device, other: &'a mut Option<[Vec<u8>; 4]>) -> vkhost::Result<Vec<Registration<'a>>> {
    match other {
        Some([a, b, ..]) => Ok(vec![dev.register(a)?, dev.register(b)?]),
        None => Ok(Vec::new()),
    }
}

fn main() -> vkhost::Result<()> {
    let ((_, block), (_, copy)) = (args::size_arg(1, 20, 1024, 1)?, args::size_arg(2, 20, 256, 1)?);
    let secs = args::arg(3, 12usize)?.max(1);
    let copy = copy.min(block);
    let extra = args::choice("EXTRA", &["before", "1"])?;
    let dev = Device::open_default()?;
    let devbuf_first = args::choice("DEVBUF_FIRST", &["0", "1"])? == "1";
    let two_buffers = || -> vkhost::Result<_> { Ok((dev.alloc_buffer(block)?, dev.alloc_buffer(block)?)) };
    let early = if devbuf_first { Some(two_buffers()?) } else { None };
    let t0 = Instant::now();
    // What the bench's other paths hold: two buffers to register, two pageable ones.
    let others = || [vec![1u8; block], vec![1u8; block], vec![1u8; block], vec![1u8; block]];
    let mut before = if extra == "before" { Some(others()) } else { None };
    let regs_before = register_two(&dev, &mut before)?;
    let mut src = PinnedBuffer::new(&dev, block)?;
    let mut dst = PinnedBuffer::new(&dev, block)?;
    // TOUCH=late: the blocks' first CPU writes come right before the pairs, and only over the
    // copied range, as in the bench's sweep (its round-trip check writes the range it copies).
    let late = args::choice("TOUCH", &["late"])? == "late";
    if !late {
        src.fill(3);
        dst.fill(0);
    }
    let mut after = if extra == "1" { Some(others()) } else { None };
    let regs_after = register_two(&dev, &mut after)?;
    let (up, down) = match early {
        Some(b) => b,
        None => two_buffers()?,
    };
    println!(
        "block {} MiB, copy {} MiB, extra {:?}, device buffers {}, allocations took {:.2} s",
        block >> 20,
        copy >> 20,
        extra,
        if devbuf_first { "first" } else { "last" },
        t0.elapsed().as_secs_f64()
    );
    let (s_up, s_down) = (dev.stream_on_queue(QueueKind::Copy, 0)?, dev.stream_on_queue(QueueKind::Copy, 1)?);
    if late {
        src[..copy].fill(3);
        dst[..copy].fill(0);
    }
    // FAULT_MIB: a fresh Vec of that many MiB written (page faults) right before the pairs;
    // SLEEP_MS: a pause after that, before the first pair.
    let env = |k: &str| args::env::<usize>(k).map(Option::unwrap_or_default);
    let fresh = vec![2u8; args::bytes("FAULT_MIB", env("FAULT_MIB")?, 20)?];
    std::thread::sleep(std::time::Duration::from_millis(env("SLEEP_MS")? as u64));
    let mut first = 0;
    // Wall clock (UTC, seconds into the day) of the first pair, to line up with nvidia-smi's
    // timestamps.
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() % 86400.0);
    println!("first pair at {:02}:{:02}:{:06.3} UTC", (wall / 3600.0) as u32, (wall % 3600.0 / 60.0) as u32, wall % 60.0);
    let start = Instant::now();
    let mut window = Vec::new();
    let mut next = 0.5;
    while start.elapsed().as_secs_f64() < secs as f64 {
        let a = Instant::now();
        let u = s_up.upload_pinned(&src, 0..copy, &up, 0)?;
        let d = s_down.download_pinned(&down, 0, &mut dst, 0..copy)?;
        u.wait()?;
        let b = a.elapsed().as_secs_f64();
        d.wait()?;
        let c = a.elapsed().as_secs_f64();
        window.push((2.0 * copy as f64 / c.max(b) / 1e9, b * 1e6, c * 1e6));
        // The first pairs one by one: a slow stretch right after the allocations would hide
        // in a half second's median.
        if first < 24 {
            first += 1;
            let w = window.pop().expect("pushed above");
            println!("pair {first:2} at {:6.1} ms: {:6.2} GB/s", start.elapsed().as_secs_f64() * 1e3, w.0);
        }
        if start.elapsed().as_secs_f64() >= next && !window.is_empty() {
            window.sort_by(|x, y| x.0.total_cmp(&y.0));
            // The median pair (the upper middle): its GB/s is the window's median.
            let m = window[window.len() / 2];
            println!("t {:5.1} s: {:6.2} GB/s over {} pairs (h2d waited at {:.0} us, d2h at {:.0})", next, m.0, window.len(), m.1, m.2);
            window.clear();
            next += 0.5;
        }
    }
    // The registrations end (and wait for nothing: every pair was awaited) before their memory.
    drop((regs_before, regs_after));
    drop((before, after, fresh));
    Ok(())
}
