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
    assert_eq!(buf.read(101, &mut []).unwrap_err(), Error::OutOfRange);
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

/// Staging threads that poll for the next batch before they sleep (`staging_spin`; the default
/// leaves it off on CPU drivers such as lavapipe, so this turns it on): multi-batch copies both
/// ways, synchronous and on a stream, from two threads at once, every byte checked. Each
/// thread's copies and the other's take parts from one process-wide pool of polling workers.
#[test]
fn polling_staging_threads_copy_exactly() {
    let o = vkhost::OpenOptions {
        staging_spin: Some(std::time::Duration::from_micros(300)),
        staging_chunk: 1 << 20,
        staging_threads: 4,
        ..opts()
    };
    let d = device_with(o).unwrap();
    assert_eq!(d.options().staging_spin, Some(std::time::Duration::from_micros(300)));
    std::thread::scope(|sc| {
        for t in 0..2u8 {
            let d = &d;
            sc.spawn(move || {
                let st = d.stream().unwrap();
                for (k, (len, off)) in [((9 << 20) + 13, 5), (4 << 20, 0), (300 << 10, 4097)].into_iter().enumerate() {
                    let buf = d.alloc_buffer(len + off).unwrap();
                    let src = pattern(len, t.wrapping_mul(17).wrapping_add(k as u8));
                    buf.write(off, &src).unwrap();
                    let mut out = vec![0u8; len];
                    buf.read(off, &mut out).unwrap();
                    assert!(out == src, "synchronous, thread {t}, len {len}");
                    let src2: Vec<u8> = src.iter().map(|b| b ^ 0xA5).collect();
                    st.upload(&src2, &buf, off).unwrap().wait().unwrap();
                    let mut out2 = vec![0u8; len];
                    st.download(&buf, off, &mut out2).unwrap().wait().unwrap();
                    assert!(out2 == src2, "stream, thread {t}, len {len}");
                }
            });
        }
    });
}

/// `staging_spin` is bounded: more than `OpenOptions::STAGING_SPIN_MAX` is refused at open,
/// naming the field, before anything is created.
#[test]
fn staging_spin_over_the_maximum_is_refused() {
    let o = vkhost::OpenOptions { staging_spin: Some(vkhost::OpenOptions::STAGING_SPIN_MAX * 2), ..opts() };
    match vkhost::Device::open_default_with(&o) {
        Err(Error::InvalidArgument { reason }) => assert!(reason.contains("staging_spin"), "{reason}"),
        other => panic!("expected InvalidArgument, got {:?}", other.map(|_| ())),
    }
}
