// Measures 1000 small async copies on each kind of stream queue, to see where per-copy cost
// goes: host reads (h2d from pinned memory, scattered or contiguous), device-to-device
// (scattered), and device-to-host. Prints one line per case; used for docs/PERFORMANCE.md.
//
//     cargo run --release --example small_copies
//
// (`//`, not `//!`: tests/examples_run.rs `include!`s this file and runs it.)

use std::time::Instant;
use vkhost::{Device, PinnedBuffer, QueueKind};

const N: usize = 1000;
const K: usize = 4096;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> vkhost::Result<()> {
    let dev = Device::open_default()?;
    println!("{} ({})", dev.info().name, dev.info().driver_name);
    let mut src = PinnedBuffer::new(&dev, N * K)?;
    src.fill(3);
    let dst = PinnedBuffer::new(&dev, N * K)?;
    let dst_ptr = dst.as_ptr() as *mut u8;
    let a = dev.alloc_buffer(N * K)?;
    let b = dev.alloc_buffer(N * K)?;
    let scatter = |i: usize| (i * 617) % N * K;
    for kind in [QueueKind::Copy, QueueKind::Compute] {
        let s = dev.stream_on(kind)?;
        let q = s.queue()?;
        type Case<'a> = (&'a str, Box<dyn Fn() -> vkhost::Result<()> + 'a>);
        let cases: Vec<Case> = vec![
            (
                "h2d scattered",
                Box::new(|| {
                    for i in 0..N {
                        // SAFETY: the pinned block outlives the stream work (synchronized).
                        unsafe { s.copy_to_device_async(src.as_ptr().add(i * K), K, &a, scatter(i)) }?;
                    }
                    s.synchronize()
                }),
            ),
            (
                "h2d contiguous",
                Box::new(|| {
                    for i in 0..N {
                        // SAFETY: as above.
                        unsafe { s.copy_to_device_async(src.as_ptr().add(i * K), K, &a, i * K) }?;
                    }
                    s.synchronize()
                }),
            ),
            (
                "d2d scattered",
                Box::new(|| {
                    for i in 0..N {
                        s.copy_async(&a, i * K, &b, scatter(i), K)?;
                    }
                    s.synchronize()
                }),
            ),
            (
                "d2h scattered",
                Box::new(|| {
                    for i in 0..N {
                        // SAFETY: the pinned block outlives the stream work (synchronized).
                        unsafe { s.copy_to_host_async(&a, scatter(i), dst_ptr.add(i * K), K) }?;
                    }
                    s.synchronize()
                }),
            ),
        ];
        for (name, f) in &cases {
            f()?;
            let mut t = Vec::new();
            for _ in 0..7 {
                let t0 = Instant::now();
                f()?;
                t.push(t0.elapsed().as_secs_f64());
            }
            let m = median(t);
            println!("queue {q:?} {kind:?}: {name}: {:.2} ms per 1000 x 4 KiB ({:.2} us each)", m * 1e3, m * 1e3);
        }
    }
    drop(dst);
    drop(src);
    dev.destroy()
}
