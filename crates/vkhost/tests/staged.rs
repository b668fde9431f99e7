//! Staged copies (the baseline path): any size, any offset, bounded staging.

mod common;
use common::*;
use vkhost::Error;

fn round_trip(len: usize, off: usize) {
    let d = device().unwrap();
    let buf = d.alloc_buffer(len + off + 7).unwrap();
    let src = pattern(len, (len % 251) as u8);
    buf.write(off, &src).unwrap();
    let mut out = vec![0u8; len];
    buf.read(off, &mut out).unwrap();
    assert!(out == src, "round trip mismatch at len {len} offset {off}");
    let s = vkhost::host::device_stats(&d);
    assert_eq!(s.staged_bytes, 2 * len as u64);
    assert_eq!(s.direct_bytes, 0);
}

#[test]
fn one_byte() {
    round_trip(1, 0);
    round_trip(1, 13);
}

#[test]
fn page_minus_one() {
    round_trip(4095, 0);
    round_trip(4095, 13);
}

#[test]
fn mib_plus_three() {
    round_trip((1 << 20) + 3, 0);
    round_trip((1 << 20) + 3, 13);
}

#[test]
fn large_300_mib_bounded_staging() {
    // Bigger than all staging memory together: proves chunking.
    round_trip(300 << 20, 0);
    round_trip(300 << 20, 13);
}

#[test]
fn out_of_range_and_zero_length() {
    let d = device().unwrap();
    let buf = d.alloc_buffer(100).unwrap();
    assert_eq!(buf.write(0, &[]), Ok(()));
    assert_eq!(buf.read(100, &mut []), Ok(()));
    assert_eq!(buf.write(99, &[1, 2]).unwrap_err(), Error::OutOfRange);
    assert_eq!(buf.write(101, &[]).unwrap_err(), Error::OutOfRange);
    assert_eq!(buf.read(usize::MAX, &mut [0]).unwrap_err(), Error::OutOfRange);
    assert_eq!(buf.read(1, &mut [0; 100]).unwrap_err(), Error::OutOfRange);
    assert!(matches!(d.alloc_buffer(0), Err(Error::InvalidArgument { .. })));
    // Nothing was written by the refused calls.
    let mut out = [7u8; 100];
    buf.write(0, &[0; 100]).unwrap();
    buf.read(0, &mut out).unwrap();
    assert_eq!(out, [0; 100]);
}

#[test]
fn neighbours_untouched() {
    let d = device().unwrap();
    let buf = d.alloc_buffer(1000).unwrap();
    buf.write(0, &[0xAA; 1000]).unwrap();
    buf.write(500, &[1, 2, 3]).unwrap();
    let mut out = [0u8; 1000];
    buf.read(0, &mut out).unwrap();
    assert!(out[..500].iter().all(|&b| b == 0xAA));
    assert_eq!(&out[500..503], &[1, 2, 3]);
    assert!(out[503..].iter().all(|&b| b == 0xAA));
}

#[test]
fn many_threads_share_one_device() {
    let d = device().unwrap();
    std::thread::scope(|s| {
        for t in 0..6u8 {
            let d = &d;
            s.spawn(move || {
                let buf = d.alloc_buffer(1 << 16).unwrap();
                for i in 0..20 {
                    let src = pattern(1 << 16, t.wrapping_mul(31).wrapping_add(i));
                    buf.write(0, &src).unwrap();
                    let mut out = vec![0; 1 << 16];
                    buf.read(0, &mut out).unwrap();
                    assert!(out == src);
                }
            });
        }
    });
}
