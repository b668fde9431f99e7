//! One registration larger than the device's largest allocation (issue 15): register a large
//! page-aligned allocation (default 8 GiB), check `find` inside each import piece and across a
//! piece boundary, copy a range that crosses the boundary to the device and back, and time
//! register / copy / unregister.
//!
//!     cargo run --release --example big_register -- [GiB]
//!
//! With `VKHOST_IMPORT_PIECE=N` the pieces are N bytes (to try it on a small machine).
//!
//! Exits 2 on any mismatch. Needs the memory: twice the size would not fit many machines, so the
//! copy goes through one device buffer of 1 GiB.

#[path = "support/args.rs"]
mod args;

use std::time::Instant;
use vkhost::{Device, Error, host};

fn main() -> vkhost::Result<()> {
    let gib: usize = args::arg(1, 8)?;
    if gib == 0 {
        return Err(Error::InvalidArgument { reason: "argument 1: the size is a whole number of GiB, at least 1, not 0".into() });
    }
    let len = args::bytes("argument 1", gib, 30)?;
    let dev = Device::open_default()?;
    let limit = dev.info().max_memory_allocation_size as usize;
    // The import piece: the device's limit, or OpenOptions::max_import_piece (VKHOST_IMPORT_PIECE).
    let piece = dev.options().max_import_piece.unwrap_or(limit) & !4095;
    println!("{} ({}): {} GiB registration, maxMemoryAllocationSize {} MiB", dev.info().name, dev.info().driver_name, gib, limit >> 20);
    // SAFETY: a fresh anonymous private mapping, unmapped at the end after the unregister.
    let base = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    if base == libc::MAP_FAILED {
        eprintln!("cannot map {gib} GiB");
        std::process::exit(1);
    }
    let p = base as *mut u8;
    // SAFETY: the mapping is `len` bytes, read-write, ours until munmap below.
    let bytes = unsafe { std::slice::from_raw_parts_mut(p, len) };
    let t = Instant::now();
    std::thread::scope(|s| {
        for (i, c) in bytes.chunks_mut(len / 16).enumerate() {
            s.spawn(move || {
                for (j, w) in c.chunks_mut(8).enumerate() {
                    let v = ((i * 1_000_003 + j) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                    w.copy_from_slice(&v.to_le_bytes()[..w.len()]);
                }
            });
        }
    });
    println!("filled in {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    let mut fails = 0;
    let t = Instant::now();
    // SAFETY: the mapping stays until after unregister.
    unsafe { host::register(&dev, p, len) }?;
    println!(
        "register: {:.1} ms ({} pieces of at most {})",
        t.elapsed().as_secs_f64() * 1e3,
        len.div_ceil(piece),
        vkhost::fmt_bytes(piece as u64)
    );
    let stats = host::device_stats(&dev);
    if stats.live_imports != 1 {
        println!("FAIL: stats count {} live imports, want 1", stats.live_imports);
        fails += 1;
    }
    // find: inside the first piece, at the end of the first and the start of the second, and
    // inside the last.
    let mut inside = vec![(0usize, 4096usize), (len - 4096, 4096)];
    if len > piece {
        inside.extend([(piece - 4096, 4096), (piece, (1usize << 20).min(piece).min(len - piece))]);
    }
    for (off, n) in inside {
        if host::find(&dev, p.wrapping_add(off), n).is_none() {
            println!("FAIL: find({off:#x}, {n}) is None inside a piece");
            fails += 1;
        }
    }
    if len > piece && host::find(&dev, p.wrapping_add(piece - 4096), 8192).is_some() {
        println!("FAIL: find across a piece boundary covered it");
        fails += 1;
    }
    // A copy that crosses the boundary: two regions, direct.
    let n = (1usize << 30).min(len).min(piece);
    let off = if len > piece { piece - n / 2 } else { 0 };
    let dbuf = dev.alloc_buffer(n)?;
    let t = Instant::now();
    // SAFETY: the bytes are registered and live.
    let path = unsafe { host::copy_to_device(&dev, p.add(off), n, &dbuf, 0) }?;
    let up = t.elapsed().as_secs_f64();
    // Written before the clock starts: `vec![0u8; n]` is calloc's untouched pages, and the first
    // touch of each inside the staged copy was most of its time (4.8 GB/s on the H100, the
    // thirty-ninth session), a figure of page faults, not of the pageable path.
    let mut back = vec![0xA5u8; n];
    let t = Instant::now();
    dbuf.read(0, &mut back)?;
    let down = t.elapsed().as_secs_f64();
    if back[..] != bytes[off..off + n] {
        println!("FAIL: the crossing copy did not round-trip");
        fails += 1;
    }
    // And back into the registration, direct, over a zeroed stretch.
    bytes[off..off + n].fill(0);
    let t = Instant::now();
    // SAFETY: as above.
    let path2 = unsafe { host::copy_to_host(&dev, &dbuf, 0, p.add(off), n) }?;
    let down2 = t.elapsed().as_secs_f64();
    if back[..] != bytes[off..off + n] {
        println!("FAIL: the copy back into the registration did not land");
        fails += 1;
    }
    println!(
        "{} {}: h2d {:.1} GB/s ({path:?}), d2h into a Vec {:.1} GB/s, d2h into the registration {:.1} GB/s ({path2:?})",
        vkhost::fmt_bytes(n as u64),
        if len > piece { "across the piece boundary" } else { "in the one piece" },
        n as f64 / up / 1e9,
        n as f64 / down / 1e9,
        n as f64 / down2 / 1e9
    );
    drop(dbuf);
    let t = Instant::now();
    host::unregister(&dev, p)?;
    println!("unregister: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    if host::find(&dev, p, 4096).is_some() || host::device_stats(&dev).live_imports != 0 {
        println!("FAIL: something is left registered");
        fails += 1;
    }
    // SAFETY: unregistered; nothing names the mapping any more.
    unsafe { libc::munmap(base, len) };
    dev.destroy()?;
    if fails > 0 {
        std::process::exit(2);
    }
    println!("ok");
    Ok(())
}
