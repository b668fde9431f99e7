//! Does a device buffer in mapped VRAM (the BAR window, `BarWrites`) cost device-side
//! bandwidth? And where do CPU stores stop beating a submitted copy?
//!
//!     VKHOST_BAR_WRITES=off  cargo run --release --example bar_cost
//!     VKHOST_BAR_WRITES=auto cargo run --release --example bar_cost
//!
//! Prints, for device buffers placed by the environment's choice: device-to-device copy
//! bandwidth (stream copy, 256 MiB), h2d / d2h DMA from pinned memory (256 MiB), a compute
//! kernel's fill bandwidth over the buffer, and the median time of `DeviceBuffer::write` against
//! a submitted copy (`host::copy_to_device`) at 4 KiB to 4 MiB (`VKHOST_BAR_WRITE_MAX` decides up
//! to which size the write is CPU stores): back to back ("warm": the store threads still poll
//! from the write before) and 5 ms apart ("cold": they parked), with the share of the writes
//! that were stores.

use std::time::Instant;
use vkhost::{Device, PinnedBuffer, host};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time(n: usize, mut f: impl FnMut() -> vkhost::Result<()>) -> vkhost::Result<f64> {
    f()?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f()?;
        v.push(t.elapsed().as_secs_f64());
    }
    Ok(median(v))
}

/// The median time of `f`, each run after a pause of 5 ms (not timed): longer than the staging
/// threads poll after a write (1 ms on GPUs), so every run finds them parked.
fn time_cold(n: usize, mut f: impl FnMut() -> vkhost::Result<()>) -> vkhost::Result<f64> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        std::thread::sleep(std::time::Duration::from_millis(5));
        let t = Instant::now();
        f()?;
        v.push(t.elapsed().as_secs_f64());
    }
    Ok(median(v))
}

fn main() -> vkhost::Result<()> {
    let dev = Device::open_default()?;
    let big = 256 << 20;
    let a = dev.alloc_buffer(big)?;
    let b = dev.alloc_buffer(big)?;
    let mapped = {
        let before = host::device_stats(&dev).mapped_bytes;
        a.write(0, &[1u8; 64])?;
        host::device_stats(&dev).mapped_bytes > before
    };
    println!("{} ({}), device buffers mapped for CPU stores: {mapped}", dev.info().name, dev.info().driver_name);
    let s = dev.stream()?;
    let gb = |bytes: usize, t: f64| bytes as f64 / t / 1e9;
    let t = time(10, || {
        s.copy_async(&a, 0, &b, 0, big)?;
        s.synchronize()
    })?;
    println!("d2d copy 256 MiB: {:.1} GB/s (read + write counted once)", gb(big, t));
    let t = time(10, || {
        s.fill_async(&a, 0, big, 0x1234_5678)?;
        s.synchronize()
    })?;
    println!("fill 256 MiB: {:.1} GB/s", gb(big, t));
    // The same on the shader cores (the copy kernel reads and writes device memory at HBM
    // speed, where a cost of the mapped type would show most).
    let ks = dev.stream_on(vkhost::QueueKind::Compute)?;
    let t = time(10, || {
        ks.copy_sm(vkhost::Binding::Device(&a, 0, big), vkhost::Binding::Device(&b, 0, big))?;
        ks.synchronize()
    })?;
    println!("d2d copy kernel 256 MiB: {:.1} GB/s", gb(big, t));
    let mut p = PinnedBuffer::new(&dev, big)?;
    p.fill(3);
    // SAFETY: the pinned block outlives every copy.
    let t = time(10, || unsafe { host::copy_to_device(&dev, p.as_ptr(), big, &a, 0) }.map(|_| ()))?;
    println!("h2d DMA 256 MiB: {:.1} GB/s", gb(big, t));
    let t = time(10, || a.read(0, &mut p))?;
    println!("d2h DMA 256 MiB: {:.1} GB/s", gb(big, t));
    let stored = || host::device_stats(&dev).mapped_bytes;
    for n in [4 << 10, 16 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 768 << 10, 1 << 20, 1536 << 10, 2 << 20, 4 << 20] {
        let s0 = stored();
        let w = time(200, || a.write(0, &p[..n]))?;
        let warm_share = (stored() - s0) as f64 / (201 * n) as f64;
        let s0 = stored();
        let cold = time_cold(60, || a.write(0, &p[..n]))?;
        let cold_share = (stored() - s0) as f64 / (60 * n) as f64;
        // SAFETY: as above.
        let copy = || unsafe { host::copy_to_device(&dev, p.as_ptr(), n, &a, 0) }.map(|_| ());
        let c = time(200, copy)?;
        let c_cold = time_cold(60, copy)?;
        println!(
            "{:>5} KiB: DeviceBuffer::write warm {:8.2} us ({:3.0}% stores), cold {:8.2} us ({:3.0}% stores); submitted copy warm {:8.2} us, cold {:8.2} us",
            n >> 10,
            w * 1e6,
            warm_share * 100.0,
            cold * 1e6,
            cold_share * 100.0,
            c * 1e6,
            c_cold * 1e6
        );
    }
    let mut back = vec![0u8; 4096];
    a.write(0, &[0xA5; 4096])?;
    a.read(0, &mut back)?;
    if back.iter().any(|&x| x != 0xA5) {
        eprintln!("FAIL: a 4 KiB write did not read back");
        std::process::exit(2);
    }
    drop((a, b, p, s, ks));
    dev.destroy()
}
