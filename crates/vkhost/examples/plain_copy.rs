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
//! With `PLAIN_OFFSET=K` (registered and pageable), the host bytes start K bytes past a page
//! boundary (a `vec!` of this size starts 16 bytes past one: glibc's header), and with
//! `PLAIN_DEV_OFFSET=D` the device bytes start at offset D of the device buffer: for telling
//! whether a copy's speed follows the host address's alignment or the two sides' relative one.

use std::time::Instant;
use vkhost::{Device, PinnedBuffer};
#[path = "support/args.rs"]
mod args;

fn summary(mut t: Vec<f64>, bytes: usize) -> String {
    t.sort_by(|a, b| a.total_cmp(b));
    let g = |s: f64| bytes as f64 / s / 1e9;
    format!("min {:6.2}  median {:6.2}  max {:6.2} GB/s", g(t[t.len() - 1]), g(t[t.len() / 2]), g(t[0]))
}

/// Where in `v` the host bytes start: `k` bytes past the first page boundary in it, or at its
/// start when `k` is not given.
fn at_offset(v: &[u8], k: Option<usize>) -> usize {
    match k {
        Some(k) => (v.as_ptr() as usize).next_multiple_of(4096) - v.as_ptr() as usize + k % 4096,
        None => 0,
    }
}

fn main() -> vkhost::Result<()> {
    let path = args::arg_choice(1, "pinned", &["pinned", "registered", "pageable"])?;
    let (mib, n) = args::size_arg(2, 20, 256, 0)?;
    let iters: usize = args::arg(3, 10)?.max(1);
    // The copy engine's path, as the bench's `_ce` rows take it: `BarAssist::Auto` (the
    // default) would share large writes with CPU stores on a host that reads host memory slowly.
    let dev = Device::open_default_with(&vkhost::OpenOptions { bar_assist: vkhost::BarAssist::Off, ..Default::default() })?;
    if let Some(f) = args::env::<usize>("FRAGMENT_MIB")? {
        let f = args::bytes("FRAGMENT_MIB", f, 20)?;
        let mut v = vec![0u8; f];
        v.fill(7);
        let mut p = PinnedBuffer::new(&dev, f)?;
        p.fill(7);
        drop((v, p));
    }
    let untouched = args::choice("PLAIN_UNTOUCHED", &["0", "1"])? == "1";
    let (hoff, doff) = (args::env::<usize>("PLAIN_OFFSET")?, args::env::<usize>("PLAIN_DEV_OFFSET")?.unwrap_or(0));
    let dbuf = dev.alloc_buffer(args::plus("PLAIN_DEV_OFFSET", n, doff)?)?;
    // PLAIN_OFFSET places the host bytes at that offset within a page: two spare pages.
    let hlen = args::plus("PLAIN_OFFSET", n, if hoff.is_some() { 8192 } else { 0 })?;
    let mut pinned;
    let mut plain;
    let mut reg;
    let host: &mut [u8] = match path.as_str() {
        "pinned" => {
            pinned = PinnedBuffer::new(&dev, n)?;
            &mut pinned[..]
        }
        "registered" => {
            // PLAIN_UNTOUCHED=1: a zeroed Vec whose pages nothing touched before registering.
            plain = if untouched { vec![0u8; hlen] } else { vec![1u8; hlen] };
            let at = at_offset(&plain, hoff);
            reg = dev.register(&mut plain[at..at + n])?;
            &mut reg[..]
        }
        _ => {
            // pageable: arg_choice allows nothing else
            plain = vec![1u8; hlen];
            let at = at_offset(&plain, hoff);
            &mut plain[at..at + n]
        }
    };
    host.fill(0x5A);
    let (mut h2d, mut d2h) = (Vec::new(), Vec::new());
    // One warm-up of each direction, then the timed ones.
    dbuf.write(0, host)?;
    dbuf.read(0, host)?;
    for _ in 0..iters {
        let t = Instant::now();
        dbuf.write(doff, host)?;
        h2d.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        dbuf.read(doff, host)?;
        d2h.push(t.elapsed().as_secs_f64());
    }
    if host.iter().any(|&b| b != 0x5A) {
        eprintln!("FAIL: the round trip changed the bytes");
        std::process::exit(2);
    }
    let at = format!("host at page+{}, device at {doff}", host.as_ptr() as usize % 4096);
    println!("plain_copy {path} {mib} MiB x{iters} ({at}): h2d {}", summary(h2d, n));
    println!("plain_copy {path} {mib} MiB x{iters} ({at}): d2h {}", summary(d2h, n));
    Ok(())
}
