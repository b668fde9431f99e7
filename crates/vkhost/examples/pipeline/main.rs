//! A pipeline over a large host array that is registered, never copied into staging: N chunks go
//! h2d → kernel (a per-element affine map) → d2h, serially, double-buffered on two streams, and
//! zero-copy (the kernel reads and writes the registered memory). The work is in `demo.rs`,
//! which `vkhost demo pipeline` runs too.
//!
//! `cargo run --release --example pipeline [MiB] [chunks]` (default 64 MiB in 16 chunks). Exits
//! 1 when an output differs from the CPU's.

mod demo;

fn main() -> vkhost::Result<()> {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64).max(1);
    let chunks: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(16).max(1);
    let dev = vkhost::Device::open_default()?;
    if !demo::run(dev, &demo::Options { mib, chunks, plant_mismatch: false })? {
        std::process::exit(1);
    }
    Ok(())
}
