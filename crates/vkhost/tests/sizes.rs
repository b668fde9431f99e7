//! One copy of 2 GiB in every path, validation on. 2 GiB is lavapipe's maxMemoryAllocationSize,
//! so its largest buffer, and Mesa 22.3's lavapipe copies a vkCmdCopyBuffer region of 2^31
//! bytes or more wrongly (a 32-bit copy box: wrong bytes from byte 256, or SIGSEGV in its queue
//! thread). vkhost cuts regions at 1 GiB (`submit::COPY_REGION_MAX`); up to `d1a6e3d` each of
//! these copies failed on lavapipe (found by a review: `vkhost bench --sizes 2G` reported
//! "round trip mismatch", and a pinned write crashed), and `copy_floor` up to `bc90b31`. Not
//! under `scripts/memcheck`: 8 GiB of memory and seconds of memcpy.
//!
//! The device opens with `OpenOptions::copy_piece` at 1 GiB, the GPUs' default: lavapipe's own
//! default (256 KiB regions) would never reach the 1 GiB cut these copies test.

mod common;
use common::*;
use vkhost::{CopyPath, PinnedBuffer, host};

const BIG: usize = 2 << 30;

/// Whether the two slices are equal, naming the first difference.
fn same(what: &str, got: &[u8], want: &[u8]) {
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!("{what}: first difference at byte {i}: got {:#04x}, want {:#04x}", got[i], want[i]);
    }
    assert_eq!(got.len(), want.len(), "{what}");
}

#[test]
fn copies_of_two_gib_in_one_command() {
    let Some(d) = device_with(vkhost::OpenOptions { copy_piece: Some(1 << 30), ..opts() }) else { return };
    assert_eq!(d.copy_piece(), 1 << 30);
    if (d.info().max_memory_allocation_size as usize) < BIG {
        eprintln!("SKIPPED: this device's maxMemoryAllocationSize is under 2 GiB");
        return;
    }
    let want = pattern(BIG, 5);
    let a = d.alloc_buffer(BIG).unwrap();
    let b = d.alloc_buffer(BIG).unwrap();

    // Pinned: direct both ways.
    let mut pinned = PinnedBuffer::new(&d, BIG).unwrap();
    pinned.copy_from_slice(&want);
    // SAFETY: the block is readable for BIG bytes during the call.
    assert_eq!(unsafe { host::copy_to_device(&d, pinned.as_ptr(), BIG, &a, 0) }, Ok(CopyPath::Direct));
    pinned.fill(0);
    // SAFETY: the block is writable for BIG bytes during the call, and not otherwise used.
    assert_eq!(unsafe { host::copy_to_host(&d, &a, 0, pinned.as_mut_ptr(), BIG) }, Ok(CopyPath::Direct));
    same("pinned round trip", &pinned, &want);

    // Device to device on a stream, then a stream download into the pinned block.
    let s = d.stream().unwrap();
    s.copy_async(&a, 0, &b, 0, BIG).unwrap();
    pinned.fill(0);
    s.download_pinned(&b, 0, &mut pinned, 0..BIG).unwrap().wait().unwrap();
    same("device to device", &pinned, &want);

    // Registered memory: direct both ways.
    drop(pinned);
    let mut host = Pages::new(BIG);
    {
        let mut reg = d.register(host.slice()).unwrap();
        reg.copy_from_slice(&want);
        b.write(0, &reg).unwrap();
        reg.fill(0);
        b.read(0, &mut reg).unwrap();
        same("registered round trip", &reg, &want);
    }

    // The floor under a copy (`Device::copy_floor`: a copy vkhost records on its own).
    d.copy_floor(true, BIG as u64, 1).unwrap();
    d.copy_floor(false, BIG as u64, 1).unwrap();

    // A fill of the whole buffer (vkCmdFillBuffer, never cut: lavapipe fills 2 GiB right).
    s.fill_async(&a, 0, BIG, 0x0101_0101).unwrap();
    s.synchronize().unwrap();
    let back = host.slice();
    a.read(0, back).unwrap();
    if let Some(i) = back.iter().position(|&x| x != 1) {
        panic!("fill: byte {i} is {:#04x}", back[i]);
    }
}
