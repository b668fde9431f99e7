//! Small synchronous writes as CPU stores into mapped device memory (`BarWrites`), validation
//! on. Lavapipe's only memory type is DEVICE_LOCAL|HOST_VISIBLE|HOST_COHERENT, so `On` maps
//! every device buffer there, as `Auto` does on a discrete GPU with a full BAR.

mod common;
use common::*;
use vkhost::{BarAssist, BarWrites, CopyPath, OpenOptions, host};

fn bar_on() -> OpenOptions {
    OpenOptions { bar_writes: BarWrites::On, ..opts() }
}

fn mapped(d: &vkhost::Device) -> u64 {
    host::device_stats(d).mapped_bytes
}

/// The first `n` bytes of `buf` as stream work enqueued now sees them: copied by `s` into
/// `other`, then read back.
fn later_read(s: &vkhost::Stream, buf: &vkhost::DeviceBuffer, other: &vkhost::DeviceBuffer, n: usize) -> Vec<u8> {
    s.copy_async(buf, 0, other, 0, n).unwrap();
    s.synchronize().unwrap();
    let mut got = vec![0u8; n];
    other.read(0, &mut got).unwrap();
    got
}

/// Writes up to `bar_write_max` are stores, when it is at most `BAR_SOLO_MAX` (larger ones are
/// stores only while the staging threads poll on GPUs: `mid_size_writes_split_only_onto_polling_threads`).
#[test]
fn small_writes_are_stores_and_round_trip() {
    let Some(d) = device_with(OpenOptions { bar_write_max: OpenOptions::BAR_SOLO_MAX, ..bar_on() }) else { return };
    let max = d.options().bar_write_max;
    let buf = d.alloc_buffer(2 * max).unwrap();
    for (n, off) in [(1, 0), (4096, 12), (max, max)] {
        let before = mapped(&d);
        let want = pattern(n, n as u8);
        buf.write(off, &want).unwrap();
        assert_eq!(mapped(&d) - before, n as u64, "a write of {n} bytes is stores");
        let mut got = vec![0u8; n];
        buf.read(off, &mut got).unwrap();
        assert!(got == want, "{n} bytes at {off}");
    }
    // Larger than bar_write_max: a submitted copy.
    let before = mapped(&d);
    let want = pattern(max + 1, 7);
    buf.write(0, &want).unwrap();
    assert_eq!(mapped(&d), before);
    let mut got = vec![0u8; max + 1];
    buf.read(0, &mut got).unwrap();
    assert!(got == want);
    // The raw seed copy is always a submitted copy.
    let small = pattern(64, 1);
    // SAFETY: `small` is live for the call.
    let path = unsafe { host::copy_to_device(&d, small.as_ptr(), 64, &buf, 0) }.unwrap();
    assert_ne!(path, CopyPath::Mapped);
    assert_eq!(mapped(&d), before);
}

/// A store lands after stream work enqueued earlier on the same bytes, and stream work enqueued
/// after it sees it.
#[test]
fn stores_are_ordered_after_and_before_stream_work() {
    let Some(d) = device_with(bar_on()) else { return };
    let n = 64 << 10;
    let buf = d.alloc_buffer(n).unwrap();
    let other = d.alloc_buffer(n).unwrap();
    let s = d.stream().unwrap();
    for round in 0..20u32 {
        // Earlier device work writes the bytes; the store must land after it.
        s.fill_async(&buf, 0, n, 0xDEAD_0000 | round).unwrap();
        let want = pattern(4096, round as u8);
        buf.write(1024, &want).unwrap();
        // Later device work reads them: it must see the store.
        let got = later_read(&s, &buf, &other, n);
        assert!(got[1024..1024 + 4096] == want[..], "round {round}: the store lost to or was missed by stream work");
        let fill = (0xDEAD_0000u32 | round).to_le_bytes();
        assert!(got[..1024].chunks(4).all(|c| c == fill), "round {round}: the fill before the store");
        assert!(got[1024 + 4096..].chunks(4).all(|c| c == fill), "round {round}: the fill after the store");
    }
}

#[test]
fn off_and_zero_max_submit_copies() {
    for o in [OpenOptions { bar_writes: BarWrites::Off, ..opts() }, OpenOptions { bar_write_max: 0, ..bar_on() }] {
        let Some(d) = device_with(o) else { return };
        let buf = d.alloc_buffer(4096).unwrap();
        let want = pattern(4096, 3);
        buf.write(0, &want).unwrap();
        let mut got = vec![0u8; 4096];
        buf.read(0, &mut got).unwrap();
        assert!(got == want);
        assert_eq!(mapped(&d), 0);
    }
}

/// `Auto` maps device buffers only on a discrete GPU with a full BAR, never on a CPU device.
#[test]
fn auto_is_off_on_cpu_devices() {
    let Some(d) = device_with(OpenOptions { bar_writes: BarWrites::Auto, ..opts() }) else { return };
    let buf = d.alloc_buffer(4096).unwrap();
    buf.write(0, &[1u8; 4096]).unwrap();
    let full_bar = {
        let t: Vec<_> = d.info().memory_types.iter().map(|t| (t.flags, t.heap_index)).collect();
        vkhost::memtype::full_bar(&t)
    };
    if d.info().device_type != vkhost::DeviceType::Discrete || !full_bar {
        assert_eq!(mapped(&d), 0, "Auto stored on a device without a full BAR");
    } else {
        assert_eq!(mapped(&d), 4096, "Auto did not store on a full-BAR discrete GPU");
    }
}

/// Threads storing into one buffer at once: the shared range ends as one thread's write, and
/// every disjoint write lands. (Whether concurrent stores could race is an argument, not a
/// test: the buffer's store lock, `DeviceMem::stores`, serializes them; a race detector would be the test.)
#[test]
fn concurrent_stores_into_one_buffer() {
    let Some(d) = device_with(bar_on()) else { return };
    let n = 64 << 10;
    let buf = d.alloc_buffer(8 * n).unwrap();
    std::thread::scope(|s| {
        for t in 0..8u8 {
            let buf = &buf;
            s.spawn(move || {
                let same = vec![t + 1; n];
                let own = pattern(n, t);
                for _ in 0..50 {
                    buf.write(0, &same).unwrap();
                    if t < 7 {
                        buf.write((t as usize + 1) * n, &own).unwrap();
                    }
                }
            });
        }
    });
    let mut got = vec![0u8; 8 * n];
    buf.read(0, &mut got).unwrap();
    let first = got[0];
    assert!(got[..n].iter().all(|&b| b == first), "one write of the shared range landed whole, not a mix");
    for t in 0..7u8 {
        let at = (t as usize + 1) * n;
        assert!(got[at..at + n] == pattern(n, t)[..], "thread {t}'s own range");
    }
}

/// With `bar_write_max` raised (the bidir-through-the-BAR setup of `vkhost bench -t bidir_bar`),
/// large writes are stores split over the staging threads: every byte lands, in order after
/// earlier stream work and before later stream work, while a read runs on another thread.
#[test]
fn large_split_stores_round_trip_and_stay_ordered() {
    let Some(d) = device_with(OpenOptions { bar_write_max: 8 << 20, staging_threads: 4, ..bar_on() }) else { return };
    let n = (3 << 20) + 4100;
    let buf = d.alloc_buffer(n + 8192).unwrap();
    let other = d.alloc_buffer(n + 8192).unwrap();
    let down = d.alloc_buffer(n).unwrap();
    let down_want = pattern(n, 0x77);
    down.write(0, &down_want).unwrap();
    let s = d.stream().unwrap();
    for round in 0..4u32 {
        s.fill_async(&buf, 0, n + 8192, 0xBEEF_0000 | round).unwrap();
        let want = pattern(n, round as u8 ^ 0x5C);
        let before = mapped(&d);
        let mut back = vec![0u8; n];
        std::thread::scope(|t| {
            let h = t.spawn(|| down.read(0, &mut back));
            buf.write(4096, &want).unwrap();
            h.join().unwrap().unwrap();
        });
        assert_eq!(mapped(&d) - before, n as u64, "round {round}: the large write is stores");
        assert!(back == down_want, "round {round}: the concurrent read");
        let got = later_read(&s, &buf, &other, n + 8192);
        assert!(got[4096..4096 + n] == want[..], "round {round}: the split stores");
        let fill = (0xBEEF_0000u32 | round).to_le_bytes();
        assert!(got[..4096].chunks(4).all(|c| c == fill), "round {round}: the fill before the stores");
        assert!(got[4096 + n..].chunks(4).all(|c| c == fill), "round {round}: the fill after the stores");
    }
    assert_eq!(d.validation_errors(), 0);
}

/// Where the staging threads poll for work (`staging_spin`, the default on GPUs; set here, since
/// lavapipe's default is no polling), a write between `BAR_SOLO_MAX` and `BAR_PARKED_SPLIT_MIN`
/// is stores split in 64 KiB parts only while enough threads poll: after they parked, such a
/// write is a submitted copy that wakes them, and a later one finds them polling and is stores.
/// Every write lands whole, either way, ordered with stream work on the same bytes; a write is
/// never part stores, part copy.
#[test]
fn mid_size_writes_split_only_onto_polling_threads() {
    let spin = std::time::Duration::from_millis(20);
    let o = OpenOptions { bar_write_max: 1 << 20, staging_threads: 4, staging_spin: Some(spin), ..bar_on() };
    let Some(d) = device_with(o) else { return };
    let n = (1 << 20) - 4096 + 7;
    assert!(n > OpenOptions::BAR_SOLO_MAX && n < OpenOptions::BAR_PARKED_SPLIT_MIN);
    // The write at 4099 (unaligned), fill bytes on both sides.
    let (at, total) = (4099, (4099 + n + 4096).next_multiple_of(4096));
    let buf = d.alloc_buffer(total).unwrap();
    let other = d.alloc_buffer(total).unwrap();
    let s = d.stream().unwrap();
    // On CPU devices nothing else in this binary polls (their `staging_spin` defaults to none),
    // so a write after a pause finds the threads parked; on GPUs the other tests' staged copies
    // (1 ms of polling) may leave them polling at any time.
    let alone = d.info().device_type == vkhost::DeviceType::Cpu;
    let (mut stored, mut copied) = (0, 0);
    for round in 0..40u32 {
        if round % 10 == 0 {
            // Long enough for the threads to park.
            std::thread::sleep(spin * 10);
        }
        s.fill_async(&buf, 0, total, 0xBEEF_0000 | round).unwrap();
        let want = pattern(n, round as u8 ^ 0x3A);
        let before = mapped(&d);
        buf.write(at, &want).unwrap();
        match mapped(&d) - before {
            0 => copied += 1,
            m if m == n as u64 => stored += 1,
            m => panic!("round {round}: {m} of {n} bytes stored"),
        }
        if round % 10 == 0 && alone {
            assert_eq!(mapped(&d), before, "round {round}: a write after the threads parked is a submitted copy");
        }
        let got = later_read(&s, &buf, &other, total);
        assert!(got[at..at + n] == want[..], "round {round}: the write's bytes");
        let fill = (0xBEEF_0000u32 | round).to_le_bytes();
        let fill_at = |i: usize| fill[i % 4];
        assert!((0..at).all(|i| got[i] == fill_at(i)), "round {round}: the fill before the write");
        assert!((at + n..total).all(|i| got[i] == fill_at(i)), "round {round}: the fill after the write");
    }
    assert!(stored > 0, "no write found the threads polling ({copied} copies)");
    assert!(copied >= 4 || !alone, "{copied} writes after the threads parked were submitted copies, of 4");
    // A small write is stores whatever the threads do.
    let before = mapped(&d);
    buf.write(0, &pattern(4096, 1)).unwrap();
    assert_eq!(mapped(&d) - before, 4096);
    assert_eq!(d.validation_errors(), 0);
}

fn assist() -> OpenOptions {
    OpenOptions { bar_assist: BarAssist::Always, bar_write_max: 4096, assist_threads: 3, ..bar_on() }
}

/// Bytes written so far by the copy engine (direct or staged) and by stores.
fn moved(d: &vkhost::Device) -> (u64, u64) {
    let s = host::device_stats(d);
    (s.direct_bytes + s.staged_bytes, s.mapped_bytes)
}

/// `bar_assist`: a large write into mapped memory is shared between the copy engine and CPU
/// stores. Every byte lands once at any size and offset, from pageable (staged), pinned (direct)
/// and partly registered (mixed) sources; nothing around it changes; the two sides' counts add
/// up to the write.
#[test]
fn assisted_writes_land_every_byte_once() {
    // Before the device: dropped after it, so the registration never outlives these bytes, even
    // if an assert fails before the unregister (the device's teardown releases its imports).
    let mut reg = vec![0u8; (9 << 20) + 8192];
    let Some(d) = device_with(assist()) else { return };
    let min = OpenOptions::ASSIST_MIN;
    let guard = 4096;
    let sizes = [min, min + 3, (4 << 20) + 4095, 9 << 20];
    let buf = d.alloc_buffer(2 * guard + (9 << 20) + 8192).unwrap();
    let mut pinned = vkhost::PinnedBuffer::new(&d, 9 << 20).unwrap();
    // Register the middle of `reg` only: a write from it is direct there and staged around it.
    let page = 4096;
    let base = reg.as_mut_ptr() as usize;
    let start = (base + (2 << 20)).next_multiple_of(page);
    // SAFETY: `reg` is declared before `d`, so it is freed only after the device (and with it
    // every import) is gone, whether or not the unregister below is reached.
    unsafe { host::register(&d, start as *mut u8, 4 << 20) }.unwrap();
    for &n in &sizes {
        for off in [guard, guard + 7] {
            for src in 0..3 {
                let want = pattern(n, (n + off + src) as u8);
                let data: &[u8] = match src {
                    0 => &want,
                    1 => {
                        pinned[..n].copy_from_slice(&want);
                        &pinned[..n]
                    }
                    _ => {
                        reg[..n].copy_from_slice(&want);
                        &reg[..n]
                    }
                };
                buf.write(0, &vec![0xC3; buf.len()]).unwrap();
                let (c0, m0) = moved(&d);
                buf.write(off, data).unwrap();
                let (c1, m1) = moved(&d);
                assert_eq!((c1 - c0) + (m1 - m0), n as u64, "size {n}, source {src}: the two sides' bytes do not add up");
                let mut got = vec![0u8; buf.len()];
                buf.read(0, &mut got).unwrap();
                assert!(got[off..off + n] == want[..], "size {n} at {off}, source {src}: wrong bytes");
                assert!(
                    got[..off].iter().chain(&got[off + n..]).all(|&b| b == 0xC3),
                    "size {n} at {off}, source {src}: bytes around changed"
                );
            }
        }
    }
    host::unregister(&d, start as *mut u8).unwrap();
}

/// Both sides take part in a large write (the copy engine takes the first chunk from the back
/// before any store thread can have taken the whole range, and the stores start at once): over
/// a few 16 MiB writes, each side moved some bytes.
#[test]
fn assisted_writes_use_both_sides() {
    let Some(d) = device_with(assist()) else { return };
    let n = 16 << 20;
    let buf = d.alloc_buffer(n).unwrap();
    let mut src = vkhost::PinnedBuffer::new(&d, n).unwrap();
    src.fill(5);
    let (c0, m0) = moved(&d);
    for _ in 0..4 {
        buf.write(0, &src).unwrap();
    }
    let (c1, m1) = moved(&d);
    assert!(c1 > c0, "the copy engine moved nothing");
    assert!(m1 > m0, "the stores moved nothing");
    assert_eq!((c1 - c0) + (m1 - m0), 4 * n as u64);
}

/// Stream work before an assisted write lands first; work after it sees every byte of it.
#[test]
fn assisted_writes_are_ordered_with_stream_work() {
    let Some(d) = device_with(assist()) else { return };
    let n = 4 << 20;
    let buf = d.alloc_buffer(n + 8192).unwrap();
    let other = d.alloc_buffer(n + 8192).unwrap();
    let s = d.stream().unwrap();
    for round in 0..4u32 {
        s.fill_async(&buf, 0, n + 8192, 0xBEEF_0000 | round).unwrap();
        let want = pattern(n, round as u8);
        buf.write(4096, &want).unwrap();
        let got = later_read(&s, &buf, &other, n + 8192);
        assert!(got[4096..4096 + n] == want[..], "round {round}: the write lost to or was missed by stream work");
        let fill = (0xBEEF_0000u32 | round).to_le_bytes();
        assert!(got[..4096].chunks(4).chain(got[4096 + n..].chunks(4)).all(|c| c == fill), "round {round}: the fill around the write");
    }
}

/// Off, or `Auto` (the default) on a device whose copy queues were not measured reading host
/// memory slowly (lavapipe measures nothing), or with stores off (`bar_write_max: 0`), or
/// below `ASSIST_MIN`, or `Bidir` on a device that has not read, a large write is the copy
/// engine's alone.
#[test]
fn assist_applies_only_when_asked_and_large() {
    let min = OpenOptions::ASSIST_MIN;
    if std::env::var_os("VKHOST_BAR_ASSIST").is_none() {
        assert_eq!(OpenOptions::default().bar_assist, BarAssist::Auto);
    }
    for (o, n) in [
        (OpenOptions { bar_assist: BarAssist::Off, ..assist() }, 2 * min),
        (OpenOptions { bar_assist: BarAssist::Auto, ..assist() }, 2 * min),
        (OpenOptions { bar_assist: BarAssist::Bidir, ..assist() }, 2 * min),
        (OpenOptions { bar_write_max: 0, ..assist() }, 2 * min),
        (assist(), min - 1),
    ] {
        let auto = o.bar_assist == BarAssist::Auto;
        let Some(d) = device_with(o) else { return };
        if auto && d.copy_queues().reads_host_slowly() {
            // A GPU host that reads host memory slowly: Auto shares there (the unit test
            // `auto_assist_shares_large_writes_only_where_host_reads_are_slow` covers both cases).
            eprintln!("Auto: this device's copy queues read host memory slowly, so it shares; case skipped");
            continue;
        }
        let buf = d.alloc_buffer(n).unwrap();
        let want = pattern(n, 9);
        buf.write(0, &want).unwrap();
        assert_eq!(mapped(&d), 0, "{n} bytes: stores took part");
        let mut got = vec![0u8; n];
        buf.read(0, &mut got).unwrap();
        assert!(got == want);
    }
}

/// `BarAssist::Bidir`: a large write is shared while another thread reads from the device, and
/// is the copy engine's alone once no read has run for `ASSIST_RECENT`; every byte lands either
/// way.
#[test]
fn bidir_assist_shares_only_beside_reads() {
    let Some(d) = device_with(OpenOptions { bar_assist: BarAssist::Bidir, ..assist() }) else { return };
    let n = 2 * OpenOptions::ASSIST_MIN;
    let buf = d.alloc_buffer(n).unwrap();
    let other = d.alloc_buffer(n).unwrap();
    other.write(0, &pattern(n, 3)).unwrap();
    let check = |round: u8| {
        let want = pattern(n, round);
        let before = moved(&d);
        buf.write(0, &want).unwrap();
        let after = moved(&d);
        let mut got = vec![0u8; n];
        buf.read(0, &mut got).unwrap();
        assert!(got == want, "round {round}: the bytes differ");
        (after.0 - before.0, after.1 - before.1)
    };
    // A read this thread just finished runs beside nothing: not shared (the write starts well
    // within ASSIST_RECENT of the read, which would count were it another thread's).
    let mut sink = vec![0u8; n];
    let want = pattern(n, 7);
    let before = moved(&d);
    other.read(0, &mut sink).unwrap();
    buf.write(0, &want).unwrap();
    assert_eq!(moved(&d).1 - before.1, 0, "a write shared after this thread's own read");
    // (`before` was taken before the read: the copy engine moved the read and the write.)
    assert_eq!(moved(&d).0 - before.0, 2 * n as u64);
    // Beside a reader in a loop: shared. The reader's copies are slow on lavapipe, so one is
    // running or just ended whenever a write starts; a few tries allow for a descheduled reader.
    let stop = std::sync::atomic::AtomicBool::new(false);
    /// Stops the reader however the writes end (a failed assertion included).
    struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let shared = std::thread::scope(|sc| {
        let _stop = Stop(&stop);
        sc.spawn(|| {
            let mut sink = vec![0u8; n];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                other.read(0, &mut sink).unwrap();
            }
        });
        let mut shared = false;
        for round in 0..8u8 {
            // (The copy engine's count includes the reader's bytes here.)
            let (_, stored) = check(round + 10);
            assert!(stored <= n as u64, "round {round}: stored {stored} of {n}");
            if stored > 0 {
                shared = true;
                break;
            }
        }
        shared
    });
    assert!(shared, "no write was shared while another thread read");
    // No read since (the check's own read-back above is one: wait it out as well).
    for round in 0..2u8 {
        std::thread::sleep(OpenOptions::ASSIST_RECENT + std::time::Duration::from_millis(5));
        let want = pattern(n, round + 40);
        let before = moved(&d);
        buf.write(0, &want).unwrap();
        let after = moved(&d);
        assert_eq!(after.1 - before.1, 0, "round {round}: stores took part with no read about");
        assert_eq!(after.0 - before.0, n as u64);
        let mut got = vec![0u8; n];
        buf.read(0, &mut got).unwrap();
        assert!(got == want);
    }
}
