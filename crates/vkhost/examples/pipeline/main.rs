//! A pipeline over a large host array that is registered, never copied into staging: N chunks go
//! h2d → kernel (a per-element affine map) → d2h, serially, double-buffered on two streams, and
//! zero-copy (the kernel reads and writes the registered memory). The work is in `demo.rs`,
//! which `vkhost demo pipeline` runs too.
//!
//! `cargo run --release --example pipeline [MiB] [chunks]` (default 64 MiB in 16 chunks, at most
//! 8192 MiB). Exits 1 when an output differs from the CPU's, and on an argument that does not
//! parse or is too large (0 is raised to 1).

#[path = "../support/args.rs"]
mod args;
mod demo;

fn main() -> vkhost::Result<()> {
    // demo::run raises 0 to 1 and refuses a size above its bound.
    let mib: usize = args::arg(1, 64)?;
    let chunks: usize = args::arg(2, 16)?;
    let dev = vkhost::Device::open_default()?;
    if !demo::run(dev, &demo::Options { mib, chunks, plant_mismatch: false })? {
        std::process::exit(1);
    }
    Ok(())
}
