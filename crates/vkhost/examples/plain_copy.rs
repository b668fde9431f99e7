//! The minimal program `vkhost bench` is checked against: one host buffer, one device buffer,
//! back-to-back synchronous copies through the safe API, nothing else in the process.
//!
//!     cargo run --release --example plain_copy -- [pinned|registered|pageable] [SIZE_MiB] [ITERS]
//!
//! `registered` is a `vec!` registered with `Device::register`; `pageable` a `Vec` copied through
//! the staged path. Prints the min, median and max GB/s (1e9 bytes/s) of each direction.
//! With `FRAGMENT_MIB=N` in the environment, the program first allocates, touches and frees N MiB
//! of ordinary memory and N MiB of pinned memory, as a long benchmark sweep does, before it
//! allocates its own buffers.

use std::time::Instant;
use vkhost::{Device, PinnedBuffer};

fn summary(mut t: Vec<f64>, bytes: usize) -> String {
    t.sort_by(|a, b| a.total_cmp(b));
    let g = |s: f64| bytes as f64 / s / 1e9;
    format!("min {:6.2}  median {:6.2}  max {:6.2} GB/s", g(t[t.len() - 1]), g(t[t.len() / 2]), g(t[0]))
}

fn main() -> vkhost::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args.first().map(String::as_str).unwrap_or("pinned");
    let mib: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(256);
    let iters: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10).max(1);
    let n = mib << 20;
    let dev = Device::open_default()?;
    if let Some(f) = std::env::var("FRAGMENT_MIB").ok().and_then(|s| s.parse::<usize>().ok()) {
        let mut v = vec![0u8; f << 20];
        v.fill(7);
        let mut p = PinnedBuffer::new(&dev, f << 20)?;
        p.fill(7);
        drop((v, p));
    }
    let dbuf = dev.alloc_buffer(n)?;
    let mut pinned;
    let mut plain;
    let mut reg;
    let host: &mut [u8] = match path {
        "pinned" => {
            pinned = PinnedBuffer::new(&dev, n)?;
            &mut pinned[..]
        }
        "registered" => {
            // PLAIN_UNTOUCHED=1: a zeroed Vec whose pages nothing touched before registering.
            plain = if std::env::var("PLAIN_UNTOUCHED").as_deref() == Ok("1") { vec![0u8; n] } else { vec![1u8; n] };
            reg = dev.register(&mut plain)?;
            &mut reg[..]
        }
        _ => {
            plain = vec![1u8; n];
            &mut plain[..]
        }
    };
    host.fill(0x5A);
    let (mut h2d, mut d2h) = (Vec::new(), Vec::new());
    // One warm-up of each direction, then the timed ones.
    dbuf.write(0, host)?;
    dbuf.read(0, host)?;
    for _ in 0..iters {
        let t = Instant::now();
        dbuf.write(0, host)?;
        h2d.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        dbuf.read(0, host)?;
        d2h.push(t.elapsed().as_secs_f64());
    }
    if host.iter().any(|&b| b != 0x5A) {
        eprintln!("FAIL: the round trip changed the bytes");
        std::process::exit(2);
    }
    println!("plain_copy {path} {mib} MiB x{iters}: h2d {}", summary(h2d, n));
    println!("plain_copy {path} {mib} MiB x{iters}: d2h {}", summary(d2h, n));
    Ok(())
}
