//! Small synchronous copies from several pinned blocks of one process (issue 10: in some
//! processes the bench's pinned 4 KiB-4 MiB copies ran 15-25% slower, registered ones not).
//! Is the slow state the process's or one block's?
//!
//!     cargo run --release --example pinned_small -- [blocks=4] [MiB per block=1024]
//!
//! For each pinned block (and one registered allocation of the same size for comparison):
//! the median of 200 synchronous 4 KiB copies h2d and d2h from offset 0, and of 50 1 MiB copies.
//!
//! `CHURN=find10k|pinned1g|reg1g` first does what one part of the bench's costs testcase does
//! (10 000 registrations of 4 KiB then their unregisters; alloc/free of a 1 GiB pinned block 10
//! times; register/unregister of 1 GiB 10 times): does that leave the blocks allocated after it
//! slow?

use std::time::Instant;
use vkhost::{BarWrites, Device, OpenOptions, PinnedBuffer};

#[path = "support/args.rs"]
mod args;
#[path = "support/timing.rs"]
mod timing;
use timing::sync_copies;

/// Anonymous read-write memory of `len` bytes, touched; unmapped by the caller.
fn mapped(len: usize) -> *mut u8 {
    // SAFETY: a fresh private anonymous mapping.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    assert!(p != libc::MAP_FAILED, "mmap {len} bytes failed");
    // SAFETY: the mapping is `len` bytes, read-write.
    unsafe { std::ptr::write_bytes(p as *mut u8, 1, len) };
    p as *mut u8
}

/// What `CHURN` names, timed.
fn churn(dev: &Device, what: &str) -> vkhost::Result<()> {
    use vkhost::host;
    let t = Instant::now();
    match what {
        "" => return Ok(()),
        "find10k" => {
            let (page, n) = (host::page_size(), 10_000);
            let base = mapped(2 * n * page);
            for i in 0..n {
                // SAFETY: the mapping outlives the unregisters below.
                unsafe { host::register(dev, base as usize + 2 * i * page, page) }?;
            }
            for i in 0..n {
                host::unregister(dev, base as usize + 2 * i * page)?;
            }
            dev.release_queued();
            // SAFETY: nothing is registered in it any more.
            unsafe { libc::munmap(base as *mut libc::c_void, 2 * n * page) };
        }
        "pinned1g" => {
            for _ in 0..10 {
                let p = host::alloc_pinned(dev, 1 << 30)?;
                host::free_pinned(dev, p)?;
                // free_pinned hands the block to the background releaser: free it here, as the
                // bench's costs loop does.
                dev.release_queued();
            }
        }
        "reg1g" => {
            let base = mapped(1 << 30);
            for _ in 0..10 {
                // SAFETY: the mapping outlives the unregister.
                unsafe { host::register(dev, base, 1 << 30) }?;
                host::unregister(dev, base)?;
                dev.release_queued();
            }
            // SAFETY: nothing is registered in it any more.
            unsafe { libc::munmap(base as *mut libc::c_void, 1 << 30) };
        }
        other => return Err(vkhost::Error::InvalidArgument { reason: format!("CHURN={other}: find10k, pinned1g or reg1g") }),
    }
    println!("churn {what}: {:.1} ms", t.elapsed().as_secs_f64() * 1e3);
    Ok(())
}

fn main() -> vkhost::Result<()> {
    let blocks: usize = args::arg(1, 4)?;
    let (mib, len) = args::size_arg(2, 20, 1024, 0)?;
    // Copies, not BAR stores, for the writes too.
    let dev = Device::open_default_with(&OpenOptions { bar_writes: BarWrites::Off, ..OpenOptions::default() })?;
    churn(&dev, &args::choice("CHURN", &["find10k", "pinned1g", "reg1g"])?)?;
    let buf = dev.alloc_buffer(1 << 20)?;
    let mut pinned = Vec::new();
    for _ in 0..blocks {
        let mut p = PinnedBuffer::new(&dev, len)?;
        p.fill(1);
        pinned.push(p);
    }
    for (i, p) in pinned.iter_mut().enumerate() {
        let (w4, r4) = sync_copies(&buf, p, 4096, 200)?;
        let (w1, r1) = sync_copies(&buf, p, 1 << 20, 50)?;
        println!("pinned block {i} ({mib} MiB): 4 KiB h2d {w4:6.1} us d2h {r4:6.1} us; 1 MiB h2d {w1:6.1} us d2h {r1:6.1} us");
    }
    let mut mine = vec![1u8; len];
    let mut reg = dev.register(&mut mine)?;
    // From the Vec's first byte (wherever the allocator put it in its page), and from the first
    // page boundary inside it.
    let skew = reg.as_ptr() as usize % 4096;
    let aligned = (4096 - skew) % 4096;
    for (what, off) in [(format!("start, {skew} B into a page"), 0), ("first page boundary".to_string(), aligned)] {
        let (w4, r4) = sync_copies(&buf, &mut reg[off..], 4096, 200)?;
        let (w1, r1) = sync_copies(&buf, &mut reg[off..], 1 << 20, 50)?;
        println!("registered Vec ({mib} MiB), {what}: 4 KiB h2d {w4:6.1} us d2h {r4:6.1} us; 1 MiB h2d {w1:6.1} us d2h {r1:6.1} us");
    }
    drop(reg);
    drop(mine);
    // Page-aligned anonymous memory, touched, registered (what the bench's registered path uses).
    // SAFETY: a fresh private anonymous mapping, unmapped below after the registration is gone.
    let base = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    if base != libc::MAP_FAILED {
        // SAFETY: the mapping is `len` bytes, read-write, ours until munmap.
        let m = unsafe { std::slice::from_raw_parts_mut(base as *mut u8, len) };
        m.fill(1);
        let mut reg = dev.register(m)?;
        let (w4, r4) = sync_copies(&buf, &mut reg, 4096, 200)?;
        let (w1, r1) = sync_copies(&buf, &mut reg, 1 << 20, 50)?;
        println!("registered mmap ({mib} MiB), page-aligned: 4 KiB h2d {w4:6.1} us d2h {r4:6.1} us; 1 MiB h2d {w1:6.1} us d2h {r1:6.1} us");
        drop(reg);
        // SAFETY: the registration is gone; nothing else uses the mapping.
        unsafe { libc::munmap(base, len) };
    }
    drop(pinned);
    drop(buf);
    dev.destroy()
}
