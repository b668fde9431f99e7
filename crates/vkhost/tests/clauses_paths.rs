//! Issue 10's new copy paths (BAR stores and their ordering after device work, the crossover,
//! scattered small async copies, bidir mixes, chunked imports and `find`), each tested as an
//! outsider would write it from the text: the public API only, validation on, results
//! against a CPU model. Written by the fifteenth session's audit; all passed, and they stay as
//! regression tests for paths `vkhost check`'s matrix covers only in part.

mod common;
use common::*;
use vkhost::kernel::Binding;
use vkhost::{BarAssist, BarWrites, OpenOptions, PinnedBuffer, QueueKind, host};

fn bar_on() -> OpenOptions {
    OpenOptions { bar_writes: BarWrites::On, ..opts() }
}

fn mapped(d: &vkhost::Device) -> u64 {
    host::device_stats(d).mapped_bytes
}

fn read_all(buf: &vkhost::DeviceBuffer, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    buf.read(0, &mut v).unwrap();
    v
}

/// A store lands after a kernel launch (compute stream) that writes the same bytes.
#[test]
fn c_store_after_kernel_fill() {
    let Some(d) = device_with(bar_on()) else { return };
    let n = 8 << 20;
    let buf = d.alloc_buffer(n).unwrap();
    let s = d.stream_on(QueueKind::Compute).unwrap();
    for round in 0..6u32 {
        let pat = 0xA0A0_0000 | round;
        s.fill_u32(Binding::Device(&buf, 0, n), pat).unwrap();
        let want = pattern(4093, round as u8);
        let before = mapped(&d);
        buf.write(4097 + round as usize, &want).unwrap();
        assert_eq!(mapped(&d) - before, 4093, "stores");
        s.synchronize().unwrap();
        let got = read_all(&buf, n);
        let at = 4097 + round as usize;
        assert!(got[at..at + 4093] == want[..], "round {round}: kernel fill overwrote the later store");
        assert!(got[..4096].chunks(4).all(|c| c == pat.to_le_bytes()), "round {round}: fill before");
    }
}

/// Write-after-read: stream work enqueued earlier reads the bytes; a later store must not be
/// seen by it.
#[test]
fn c_store_after_pending_stream_read() {
    let Some(d) = device_with(bar_on()) else { return };
    let n = 16 << 20;
    let buf = d.alloc_buffer(n).unwrap();
    let other = d.alloc_buffer(n).unwrap();
    let s = d.stream().unwrap();
    for round in 0..6u8 {
        let old = pattern(n, round);
        buf.write(0, &old).unwrap(); // large: a submitted copy
        s.copy_async(&buf, 0, &other, 0, n).unwrap();
        let new = vec![0xEEu8 ^ round; 200 << 10];
        buf.write(n - (200 << 10), &new).unwrap(); // tail: a store, after the pending read
        s.synchronize().unwrap();
        let got = read_all(&other, n);
        assert!(got == old, "round {round}: the pending d2d copy saw a later store (WAR)");
    }
}

/// A store lands after an async upload_pinned into the same bytes, and a forgotten Pending.
#[test]
fn c_store_after_upload_pinned_and_download() {
    let Some(d) = device_with(bar_on()) else { return };
    let n = 4 << 20;
    let buf = d.alloc_buffer(n).unwrap();
    let mut block = PinnedBuffer::new(&d, n).unwrap();
    let s = d.stream().unwrap();
    for round in 0..6u8 {
        block.copy_from_slice(&pattern(n, round));
        let p = s.upload_pinned(&block, 0..n, &buf, 0).unwrap();
        std::mem::forget(p);
        let want = vec![0x11 ^ round; 777];
        buf.write(12345, &want).unwrap();
        // Enqueue a download of the same bytes; it must see the store.
        let p = s.download_pinned(&buf, 0, &mut block, 0..n).unwrap();
        std::mem::forget(p);
        let got = &block[..];
        assert!(got[12345..12345 + 777] == want[..], "round {round}: store lost");
        let exp = pattern(n, round);
        assert!(got[..12345] == exp[..12345] && got[12345 + 777..] == exp[12345 + 777..], "round {round}: upload bytes");
    }
    s.synchronize().unwrap();
}

/// Writes around the crossover (bar_write_max) and the assist minimum, odd offsets, zero length.
#[test]
fn c_writes_cross_the_crossover() {
    for (max, assist) in [(256 << 10, BarAssist::Off), (4096, BarAssist::Always), (OpenOptions::ASSIST_MIN + 3, BarAssist::Always)] {
        let o = OpenOptions { bar_write_max: max, bar_assist: assist, assist_threads: 2, staging_threads: 2, ..bar_on() };
        let Some(d) = device_with(o) else { return };
        let cap = 2 * OpenOptions::ASSIST_MIN + 8192;
        let buf = d.alloc_buffer(cap).unwrap();
        let sizes = [
            0usize,
            1,
            max - 1,
            max,
            max + 1,
            OpenOptions::ASSIST_MIN - 1,
            OpenOptions::ASSIST_MIN,
            OpenOptions::ASSIST_MIN + 1,
            2 * OpenOptions::ASSIST_MIN - 7,
        ];
        for &len in &sizes {
            for off in [0usize, 1, 4095, 8191] {
                if off + len > cap {
                    continue;
                }
                buf.write(0, &vec![0xC3; cap]).unwrap();
                let want = pattern(len, (len ^ off) as u8);
                buf.write(off, &want).unwrap();
                let got = read_all(&buf, cap);
                assert!(got[off..off + len] == want[..], "max {max} {assist:?}: len {len} off {off} payload");
                assert!(got[..off].iter().chain(&got[off + len..]).all(|&b| b == 0xC3), "max {max}: len {len} off {off} guards");
            }
        }
        // Zero length at the end is Ok; past the end OutOfRange; no panic.
        assert!(buf.write(cap, &[]).is_ok());
        assert_eq!(buf.write(cap + 1, &[]), Err(vkhost::Error::OutOfRange));
        assert_eq!(buf.write(usize::MAX, &[1]), Err(vkhost::Error::OutOfRange));
        drop(buf);
    }
}

/// Many tiny async copies on one stream with overlapping destinations, d2d copies and fills in
/// between: the result equals the CPU model (later wins).
#[test]
fn c_scattered_tiny_copies_with_overlaps_match_model() {
    let Some(d) = device() else { return };
    let n = 1 << 16;
    let buf = d.alloc_buffer(n).unwrap();
    let buf2 = d.alloc_buffer(n).unwrap();
    let mut block = PinnedBuffer::new(&d, n).unwrap();
    let s = d.stream().unwrap();
    let mut model = vec![0u8; n];
    let mut model2 = vec![0u8; n];
    buf.write(0, &model).unwrap();
    buf2.write(0, &model2).unwrap();
    block.copy_from_slice(&pattern(n, 99));
    let src = block[..].to_vec();
    let mut rng = Rng(0x0f0f_1234_5678_9999);
    let mut next = |m: usize| rng.below(m);
    for i in 0..3000 {
        let len = 1 + next(300);
        let so = next(n - len);
        let dof = next(n - len);
        match next(10) {
            0..=5 => {
                // h2d from the pinned block (unchanged during the test).
                let p = s.upload_pinned(&block, so..so + len, &buf, dof).unwrap();
                std::mem::forget(p);
                model[dof..dof + len].copy_from_slice(&src[so..so + len]);
            }
            6..=7 => {
                s.copy_async(&buf, so, &buf2, dof, len).unwrap();
                let t = model[so..so + len].to_vec();
                model2[dof..dof + len].copy_from_slice(&t);
            }
            8 => {
                s.copy_async(&buf2, so, &buf, dof, len).unwrap();
                let t = model2[so..so + len].to_vec();
                model[dof..dof + len].copy_from_slice(&t);
            }
            _ => {
                let l4 = (len / 4).max(1) * 4;
                let o4 = (dof / 4) * 4;
                if o4 + l4 <= n {
                    s.fill_async(&buf, o4, l4, 0x0102_0304 ^ i).unwrap();
                    for (k, c) in model[o4..o4 + l4].chunks_mut(4).enumerate() {
                        let _ = k;
                        c.copy_from_slice(&(0x0102_0304u32 ^ i).to_le_bytes());
                    }
                }
            }
        }
    }
    s.synchronize().unwrap();
    let got = read_all(&buf, n);
    let got2 = read_all(&buf2, n);
    let first = got.iter().zip(&model).position(|(a, b)| a != b);
    assert!(first.is_none(), "buf differs from the model at {first:?}");
    assert!(got2 == model2, "buf2 differs from the model");
}

/// Tiny scattered d2h into one pinned block with overlapping destinations (later wins).
#[test]
fn c_scattered_tiny_downloads_with_overlaps() {
    let Some(d) = device() else { return };
    let n = 1 << 16;
    let buf = d.alloc_buffer(n).unwrap();
    let src = pattern(n, 5);
    buf.write(0, &src).unwrap();
    let mut block = PinnedBuffer::new(&d, n).unwrap();
    block.fill(0);
    let mut model = vec![0u8; n];
    let s = d.stream().unwrap();
    let mut rng = Rng(0x0f0f_1234_5678_9999);
    let mut next = |m: usize| rng.below(m);
    for _ in 0..2000 {
        let len = 1 + next(64);
        let so = next(n - len);
        let dof = next(256); // heavy overlap in the first 320 bytes
        let p = s.download_pinned(&buf, so, &mut block, dof..dof + len).unwrap();
        std::mem::forget(p);
        model[dof..dof + len].copy_from_slice(&src[so..so + len]);
    }
    let got = &block[..];
    let first = got.iter().zip(&model).position(|(a, b)| a != b);
    assert!(first.is_none(), "block differs from the model at {first:?}");
}

/// A registration in 64 KiB import pieces: copies crossing piece boundaries (sync and stream,
/// both ways, odd offsets), mixed with unregistered gaps, find at the boundaries, and after
/// unregister of one of two adjacent registrations.
#[test]
fn c_chunked_import_copies_and_find() {
    let Some(d) = device_with(OpenOptions { max_import_piece: Some(64 << 10), ..opts() }) else { return };
    if d.host_registration().is_err() {
        eprintln!("SKIPPED: host registration unavailable: {:?}", d.host_registration());
        return;
    }
    let total = 1 << 20;
    let mem = Pages::new(total);
    let base = mem.ptr;
    let a = base as usize + 4096; // registration A: [a, a + 300 KiB + 5)
    let alen = (300 << 10) + 5;
    // SAFETY: the mapping outlives the registrations (unregistered below, unmapped at the end).
    unsafe { host::register(&d, a, alen) }.unwrap();
    let b = (a + alen).next_multiple_of(4096) + 4096; // B after a one-page gap
    let blen = 200 << 10;
    // SAFETY: as for A.
    unsafe { host::register(&d, b, blen) }.unwrap();
    // find at A's piece boundaries (pieces from A's first page).
    let page0 = a & !4095;
    for k in 1..5 {
        let bd = page0 + k * (64 << 10);
        assert!(host::find(&d, bd - 1, 1).is_some(), "byte before boundary {k}");
        assert!(host::find(&d, bd, 1).is_some(), "byte at boundary {k}");
        assert!(host::find(&d, bd - 8, 16).is_none(), "a range across boundary {k} is one buffer?");
        let (bb, bo) = host::find(&d, bd + 100, 10).unwrap();
        let (bb0, bo0) = host::find(&d, bd, 10).unwrap();
        assert_eq!(bb, bb0);
        assert_eq!(bo, bo0 + 100);
    }
    assert!(host::find(&d, a - 1, 1).is_none());
    assert!(host::find(&d, a + alen - 1, 1).is_some());
    assert!(host::find(&d, (a + alen).next_multiple_of(4096), 1).is_none(), "the gap page");
    let dbuf = d.alloc_buffer(total).unwrap();
    let s = d.stream().unwrap();
    // SAFETY: all host ranges are in the live mapping.
    let all = unsafe { std::slice::from_raw_parts_mut(base, total) };
    for (i, (start, len)) in [
        (a + 3, alen - 3),
        (a - 100, alen + 100 + 9000),
        (page0 + (64 << 10) - 7, 14),
        (a + 1000, (b + blen) - (a + 1000)),
        (b - 5, blen + 10),
    ]
    .into_iter()
    .enumerate()
    {
        let hoff = start - base as usize;
        for stream in [false, true] {
            // h2d
            let want = pattern(len, (i * 2 + stream as usize) as u8);
            all[hoff..hoff + len].copy_from_slice(&want);
            dbuf.write(0, &vec![0u8; total]).unwrap();
            if stream {
                // SAFETY: the range lies in the live mapping; synchronized right after.
                unsafe { s.copy_to_device_async(start as *const u8, len, &dbuf, 17) }.unwrap();
                s.synchronize().unwrap();
            } else {
                // SAFETY: the range lies in the live mapping.
                unsafe { host::copy_to_device(&d, start as *const u8, len, &dbuf, 17) }.unwrap();
            }
            let got = read_all(&dbuf, 17 + len);
            assert!(got[17..] == want[..], "case {i} stream {stream}: h2d");
            // d2h
            let want2 = pattern(len, 0x40 ^ (i as u8));
            dbuf.write(33, &want2).unwrap();
            all[hoff - 1..hoff + len + 1].fill(0xAB);
            if stream {
                // SAFETY: the range lies in the live mapping; synchronized right after.
                unsafe { s.copy_to_host_async(&dbuf, 33, start as *mut u8, len) }.unwrap();
                s.synchronize().unwrap();
            } else {
                // SAFETY: the range lies in the live mapping.
                unsafe { host::copy_to_host(&d, &dbuf, 33, start as *mut u8, len) }.unwrap();
            }
            assert!(all[hoff..hoff + len] == want2[..], "case {i} stream {stream}: d2h");
            assert!(all[hoff - 1] == 0xAB && all[hoff + len] == 0xAB, "case {i}: guards");
        }
    }
    // Unregister A: its bytes are no longer found, B's still are; copies then stage.
    host::unregister(&d, a).unwrap();
    for k in 0..5 {
        assert!(host::find(&d, page0 + k * (64 << 10) + 10, 1).is_none(), "A's piece {k} still found");
    }
    assert!(host::find(&d, b + 10, 100).is_some(), "B lost after A's unregister");
    let len = (b + blen) - (a + 1000);
    let start = a + 1000;
    let hoff = start - base as usize;
    let want = pattern(len, 0x77);
    all[hoff..hoff + len].copy_from_slice(&want);
    // SAFETY: the range lies in the live mapping.
    let path = unsafe { host::copy_to_device(&d, start as *const u8, len, &dbuf, 0) }.unwrap();
    assert_eq!(path, vkhost::CopyPath::Mixed);
    assert!(read_all(&dbuf, len) == want, "mixed after unregister");
    host::unregister(&d, b).unwrap();
    assert_eq!(host::entries_of(&d), 0);
}

/// 10 000 live registrations: find is exact for each, across neighbours None, after removing
/// every third the rest stay exact.
#[test]
fn c_find_with_ten_thousand_registrations() {
    let Some(d) = device() else { return };
    if d.host_registration().is_err() {
        eprintln!("SKIPPED: host registration unavailable: {:?}", d.host_registration());
        return;
    }
    let n = 10_000;
    let mem = Pages::new(n * 4096);
    let base = mem.ptr;
    let base = base as usize;
    for i in 0..n {
        // Ranges of 4000 bytes at odd starts inside each page.
        // SAFETY: inside the live mapping, unregistered before it goes.
        unsafe { host::register(&d, base + i * 4096 + (i % 90), 4000) }.unwrap();
    }
    let mut seen = std::collections::HashSet::new();
    for i in 0..n {
        let st = base + i * 4096 + (i % 90);
        let (b, o) = host::find(&d, st, 4000).unwrap_or_else(|| panic!("find {i}"));
        let (b2, o2) = host::find(&d, st + 3999, 1).unwrap();
        assert!(b == b2 && o2 == o + 3999, "find {i} offsets");
        if i > 0 {
            assert!(host::find(&d, base + i * 4096 - 8, 16).is_none(), "{i}: across two registrations");
        }
        seen.insert((b, o));
    }
    for i in (0..n).step_by(3) {
        host::unregister(&d, base + i * 4096 + (i % 90)).unwrap();
    }
    for i in 0..n {
        let st = base + i * 4096 + (i % 90);
        assert_eq!(host::find(&d, st + 10, 10).is_some(), i % 3 != 0, "{i} after unregister");
        if i % 3 != 0 {
            let (b, o) = host::find(&d, st + 10, 10).unwrap();
            assert!(seen.contains(&(b, o - 10)), "{i}: another buffer/offset after unregistering neighbours");
        }
    }
    for i in 0..n {
        if i % 3 != 0 {
            host::unregister(&d, base + i * 4096 + (i % 90)).unwrap();
        }
    }
    assert_eq!(host::entries_of(&d), 0);
}

/// A pinned block larger than one import piece: a kernel over a range crossing two pieces,
/// and stream copies crossing them.
#[test]
fn c_pinned_block_in_pieces() {
    let Some(d) = device_with(OpenOptions { max_import_piece: Some(64 << 10), ..opts() }) else { return };
    let n = 300 << 10;
    let mut block = match PinnedBuffer::new(&d, n) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("no pinned block in pieces: {e}");
            return;
        }
    };
    let dbuf = d.alloc_buffer(n).unwrap();
    let want = pattern(n, 3);
    dbuf.write(0, &want).unwrap();
    let s = d.stream().unwrap();
    let p = s.download_pinned(&dbuf, 0, &mut block, 0..n).unwrap();
    p.wait().unwrap();
    assert!(block[..] == want[..]);
    block.fill(0);
    let p = s.download_pinned(&dbuf, 5, &mut block, 65530..65530 + 100).unwrap();
    p.wait().unwrap();
    assert!(block[65530..65630] == want[5..105], "d2h across piece boundary");
    let c = d.stream_on(QueueKind::Compute).unwrap();
    let r = c.copy_sm(Binding::Device(&dbuf, 0, 4096), Binding::pinned_mut(&mut block, 65536 - 2048, 4096));
    match r {
        Ok(()) => {
            c.synchronize().unwrap();
            assert!(block[65536 - 2048..65536 + 2048] == want[..4096], "copy_sm across piece boundary");
        }
        Err(e) => eprintln!("copy_sm across pieces refused: {e:?}"),
    }
}

/// Both directions at once on threads, host memory a mix of registered and pageable bytes,
/// with BAR stores and assist (Bidir) on: every byte right.
#[test]
fn c_bidir_registered_pageable_mix() {
    for o in [opts(), OpenOptions { bar_assist: BarAssist::Bidir, bar_write_max: 64 << 10, assist_threads: 2, ..bar_on() }] {
        let Some(d) = device_with(o) else { return };
        let can_reg = d.host_registration().is_ok();
        let n = (6 << 20) + 4099;
        let mem = Pages::new(2 * n + 3 * 4096);
        let base = mem.ptr;
        let up_at = base as usize + 4096 + 3;
        let down_at = up_at + n + 4096;
        if can_reg {
            // Register the middle of each (mixed ranges).
            // SAFETY: inside the live mapping, unregistered before it goes.
            unsafe { host::register(&d, up_at + n / 3, n / 3) }.unwrap();
            // SAFETY: as above.
            unsafe { host::register(&d, down_at + n / 4, n / 2) }.unwrap();
        }
        let bufw = d.alloc_buffer(n + 8).unwrap();
        let bufr = d.alloc_buffer(n + 8).unwrap();
        let rwant = pattern(n, 0x31);
        bufr.write(5, &rwant).unwrap();
        for round in 0..4u8 {
            // SAFETY: inside the live mapping; no other reference to these bytes meanwhile.
            let up = unsafe { std::slice::from_raw_parts_mut(up_at as *mut u8, n) };
            let want = pattern(n, round);
            up.copy_from_slice(&want);
            // SAFETY: as above, for the read destination.
            let down = unsafe { std::slice::from_raw_parts_mut(down_at as *mut u8, n) };
            down.fill(0);
            let up: &[u8] = up;
            std::thread::scope(|t| {
                let h = t.spawn(|| {
                    for _ in 0..3 {
                        bufr.read(5, down).unwrap();
                    }
                });
                for _ in 0..3 {
                    bufw.write(7, up).unwrap();
                }
                h.join().unwrap();
            });
            let got = read_all(&bufw, n + 8);
            assert!(got[7..7 + n] == want[..], "round {round}: write");
            // SAFETY: the reads are done (the threads joined).
            let down = unsafe { std::slice::from_raw_parts(down_at as *const u8, n) };
            assert!(down == &rwant[..], "round {round}: read");
        }
        if can_reg {
            host::unregister(&d, up_at + n / 3).unwrap();
            host::unregister(&d, down_at + n / 4).unwrap();
        }
    }
}

/// Random async copies both ways on one stream between one device buffer and one host region
/// whose middle is registered (ranges direct, staged or mixed), plus d2d copies: stream order
/// must make the result equal the sequential model.
#[test]
fn c_random_async_both_ways_mixed_host_match_model() {
    let Some(d) = device() else { return };
    let can_reg = d.host_registration().is_ok();
    let hn = 64 << 10;
    let mem = Pages::new(hn + 8192);
    let base = mem.ptr;
    let h = base as usize + 4096;
    if can_reg {
        // SAFETY: inside the live mapping, unregistered before it goes.
        unsafe { host::register(&d, h + (16 << 10), 24 << 10) }.unwrap();
    }
    let n = 32 << 10;
    let buf = d.alloc_buffer(n).unwrap();
    let init = pattern(n, 1);
    buf.write(0, &init).unwrap();
    let host_init = pattern(hn, 2);
    // SAFETY: the live mapping; no copy is in flight yet.
    unsafe { std::slice::from_raw_parts_mut(h as *mut u8, hn) }.copy_from_slice(&host_init);
    let mut mdev = init.clone();
    let mut mhost = host_init.clone();
    let s = d.stream().unwrap();
    let mut rng = Rng(0x0f0f_1234_5678_9999);
    let mut next = |m: usize| rng.below(m);
    for _ in 0..1500 {
        let len = 1 + if next(8) == 0 { next(12000) } else { next(200) };
        let ho = next(hn - len);
        let dof = next(n - len);
        match next(5) {
            0 | 1 => {
                // SAFETY: inside the live mapping; the stream is synchronized before the bytes are read.
                unsafe { s.copy_to_device_async((h + ho) as *const u8, len, &buf, dof) }.unwrap();
                mdev[dof..dof + len].copy_from_slice(&mhost[ho..ho + len]);
            }
            2 | 3 => {
                // SAFETY: as above.
                unsafe { s.copy_to_host_async(&buf, dof, (h + ho) as *mut u8, len) }.unwrap();
                mhost[ho..ho + len].copy_from_slice(&mdev[dof..dof + len]);
            }
            _ => {
                let so = next(n - len);
                s.copy_async(&buf, so, &buf, dof, len).err();
                // Overlapping self-copies may be refused; model only what ran.
                if so + len <= dof || dof + len <= so {
                    let t = mdev[so..so + len].to_vec();
                    mdev[dof..dof + len].copy_from_slice(&t);
                }
            }
        }
    }
    s.synchronize().unwrap();
    let got = read_all(&buf, n);
    // SAFETY: the stream is synchronized: nothing writes the mapping any more.
    let hg = unsafe { std::slice::from_raw_parts(h as *const u8, hn) };
    let fd = got.iter().zip(&mdev).position(|(a, b)| a != b);
    let fh = hg.iter().zip(&mhost).position(|(a, b)| a != b);
    assert!(fd.is_none() && fh.is_none(), "device first diff {fd:?}, host first diff {fh:?}");
    if can_reg {
        host::unregister(&d, h + (16 << 10)).unwrap();
    }
}

/// A registration in import pieces, its device destroyed: find is None, unregister is Ok
/// (tombstone), and the same bytes register again on a new device, in pieces, with copies right.
#[test]
fn c_chunked_registration_tombstone_then_reregister() {
    let o = OpenOptions { max_import_piece: Some(64 << 10), ..opts() };
    let Some(d) = device_with(o.clone()) else { return };
    if d.host_registration().is_err() {
        eprintln!("SKIPPED: host registration unavailable: {:?}", d.host_registration());
        return;
    }
    let n = (640 << 10) + 123;
    let mem = Pages::new(n + 8192);
    let base = mem.ptr;
    let a = base as usize + 4096 + 7;
    // SAFETY: inside the live mapping; a tombstone once the device is destroyed.
    unsafe { host::register(&d, a, n) }.unwrap();
    assert!(host::find(&d, a + (64 << 10), 100).is_some());
    d.destroy().unwrap();
    assert!(host::find(&d, a, 1).is_none(), "find after destroy");
    host::unregister(&d, a).unwrap();
    assert_eq!(host::unregister(&d, a), Err(vkhost::Error::NotRegistered));
    drop(d);
    let Some(d2) = device_with(o) else { return };
    // SAFETY: inside the live mapping, unregistered before it goes.
    unsafe { host::register(&d2, a, n) }.unwrap();
    let buf = d2.alloc_buffer(n).unwrap();
    let want = pattern(n, 9);
    // SAFETY: the live mapping; no copy is in flight.
    unsafe { std::slice::from_raw_parts_mut(a as *mut u8, n) }.copy_from_slice(&want);
    // SAFETY: the registered range in the live mapping.
    let p = unsafe { host::copy_to_device(&d2, a as *const u8, n, &buf, 0) }.unwrap();
    assert_eq!(p, vkhost::CopyPath::Direct);
    assert!(read_all(&buf, n) == want);
    host::unregister(&d2, a).unwrap();
    assert_eq!(host::entries_of(&d2), 0);
}
