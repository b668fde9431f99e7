//! Issue 9's clauses (ownership and soundness), each tested as an outsider would write it
//! from the text: the public API only, validation on. Written by the fifteenth
//! session's audit; one of them (a `HostRange`'s entry named as a `Registration` by
//! `OwnedByGuard`) failed on the code before that session's fix, the rest passed and stay as
//! regression tests beside the targeted ones in soundness.rs.

mod common;
use common::*;
use std::mem::forget;
use std::time::{Duration, Instant};
use vkhost::host;
use vkhost::{Binding, Device, Error, OpenOptions, PinnedBuffer, QueueKind};

fn with_deadline<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(_) => panic!("{what}: did not finish within {secs} s (hang)"),
    }
}

// ---- Scenario 5 / "Everything validated at open" ----

#[test]
fn open_options_scenario5_literal() {
    init_log();
    let info = vkhost::devices().unwrap().remove(0);
    let cases: Vec<(&str, OpenOptions)> = vec![
        (
            "u64::MAX/3+1 x 3",
            OpenOptions { staging_chunk: (u64::MAX / 3 + 1) as usize, staging_slots: 3, validation: true, ..Default::default() },
        ),
        (
            "2^62 x 4 (page multiple, wraps)",
            OpenOptions { staging_chunk: 1 << 62, staging_slots: 4, validation: true, ..Default::default() },
        ),
        (
            "2^63 x 2 (page multiple, wraps to 0)",
            OpenOptions { staging_chunk: 1 << 63, staging_slots: 2, validation: true, ..Default::default() },
        ),
        ("0 chunk", OpenOptions { staging_chunk: 0, validation: true, ..Default::default() }),
        ("0 slots", OpenOptions { staging_slots: 0, validation: true, ..Default::default() }),
        ("usize::MAX slots", OpenOptions { staging_slots: usize::MAX, validation: true, ..Default::default() }),
        ("0 threads", OpenOptions { staging_threads: 0, validation: true, ..Default::default() }),
        ("import piece 0", OpenOptions { max_import_piece: Some(0), validation: true, ..Default::default() }),
        ("import piece usize::MAX", OpenOptions { max_import_piece: Some(usize::MAX), validation: true, ..Default::default() }),
    ];
    for (what, o) in cases {
        let r = Device::open_with(info.index, &o);
        assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{what}: {r:?}");
    }
}

/// Values that pass validation must then work (no wrap later on).
#[test]
fn open_options_edge_values_work() {
    init_log();
    let cases: Vec<(&str, OpenOptions)> = vec![
        ("pinned_huge_min 0", OpenOptions { pinned_huge_min: Some(0), ..opts() }),
        ("pinned_huge_min 1", OpenOptions { pinned_huge_min: Some(1), ..opts() }),
        ("bar max usize::MAX", OpenOptions { bar_writes: vkhost::BarWrites::On, bar_write_max: usize::MAX, ..opts() }),
        (
            "bar assist always, max usize::MAX",
            OpenOptions { bar_writes: vkhost::BarWrites::On, bar_assist: vkhost::BarAssist::Always, bar_write_max: usize::MAX, ..opts() },
        ),
        ("min chunk", OpenOptions { staging_chunk: 4096, staging_slots: 2, ..opts() }),
        ("one-page import piece", OpenOptions { max_import_piece: Some(4096), ..opts() }),
        ("spin zero", OpenOptions { staging_spin: Some(Duration::ZERO), ..opts() }),
    ];
    for (what, o) in cases {
        let d = match device_with(o.clone()) {
            Some(d) => d,
            None => return,
        };
        let n = 3 << 20;
        let data = pattern(n, 3);
        let buf = d.alloc_buffer(n).unwrap();
        buf.write(0, &data).unwrap();
        let mut p = PinnedBuffer::new(&d, 5000).unwrap_or_else(|e| panic!("{what}: pinned: {e}"));
        p.fill(7);
        buf.write(100, &p).unwrap();
        let mut want = data.clone();
        want[100..5100].fill(7);
        let mut mine = vec![0u8; n + 123];
        {
            let mut reg = d.register(&mut mine[17..17 + n]).unwrap();
            buf.read(0, &mut reg).unwrap();
        }
        assert!(mine[17..17 + n] == want[..], "{what}: round trip");
        let s = d.stream().unwrap();
        let mut out = vec![0u8; n];
        s.download(&buf, 0, &mut out).unwrap().wait().unwrap();
        assert!(out == want, "{what}: stream download");
        drop(p);
        drop(s);
        drop(buf);
        drop(d);
        eprintln!("{what}: ok");
    }
}

// ---- Scenario 3 / raw API ----

#[test]
fn free_pinned_of_a_live_pinned_buffer() {
    let d = device().unwrap();
    let mut a = PinnedBuffer::new(&d, 1 << 16).unwrap();
    a.fill(0x42);
    let r = host::free_pinned(&d, a.as_ptr());
    assert!(matches!(r, Err(Error::OwnedByGuard { .. })), "{r:?}");
    // Interior pointer, and through the other raw release.
    let r = host::free_pinned(&d, a.as_ptr().wrapping_add(4096));
    assert!(r.is_err(), "{r:?}");
    let r = host::unregister(&d, a.as_ptr());
    assert!(r.is_err(), "{r:?}");
    assert!(host::find(&d, a.as_ptr(), 1 << 16).is_some(), "entry still there");
    assert!(a.iter().all(|&b| b == 0x42));
    let addr = a.as_ptr() as usize;
    drop(a);
    d.release_queued();
    // A new raw block (maybe at the same address) is not freed by anything of `a`'s.
    let b = host::alloc_pinned(&d, 1 << 16).unwrap();
    eprintln!("same address: {}", b.as_ptr() as usize == addr);
    // SAFETY: live block.
    unsafe { b.as_ptr().write_bytes(0x17, 1 << 16) };
    let buf = d.alloc_buffer(1 << 16).unwrap();
    // SAFETY: live raw block.
    unsafe { host::copy_to_device(&d, b.as_ptr(), 1 << 16, &buf, 0) }.unwrap();
    let mut out = vec![0u8; 1 << 16];
    buf.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&x| x == 0x17));
    host::free_pinned(&d, b).unwrap();
}

// ---- Ordering of synchronous copies after stream work ----

#[test]
fn sync_copies_after_stream_work_of_every_kind() {
    let d = device().unwrap();
    let n = 16 << 20;
    let buf = d.alloc_buffer(n).unwrap();
    buf.write(0, &vec![0u8; n]).unwrap();

    // (a) a compute-stream built-in kernel, then a synchronous read.
    let sc = d.stream_on(QueueKind::Compute).unwrap();
    sc.fill_u32(Binding::Device(&buf, 0, n), 0x1111_1111).unwrap();
    let mut out = vec![0u8; n];
    buf.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0x11), "(a) read missed the kernel fill");

    // (b) a small staged upload (pageable), then a synchronous read.
    let s = d.stream().unwrap();
    forget(s.upload(&[0x22u8; 4096], &buf, 8192).unwrap());
    let mut small = [0u8; 4096];
    buf.read(8192, &mut small).unwrap();
    assert!(small.iter().all(|&b| b == 0x22), "(b) read missed the stream upload");

    // (c) a pending download_pinned out of buf, then a synchronous write to buf (WAR).
    buf.write(0, &vec![0x33u8; n]).unwrap();
    let mut p = PinnedBuffer::new(&d, n).unwrap();
    let pend = s.download_pinned(&buf, 0, &mut p, 0..n).unwrap();
    forget(pend);
    buf.write(0, &vec![0x44u8; n]).unwrap();
    s.synchronize().unwrap();
    assert!(p.iter().all(|&b| b == 0x33), "(c) the stream read saw the later synchronous write");

    // (d) a pending upload_pinned into buf, then a synchronous write (WAW): the write wins.
    p.fill(0x55);
    let pend = s.upload_pinned(&p, 0..n, &buf, 0).unwrap();
    forget(pend);
    buf.write(0, &vec![0x66u8; n]).unwrap();
    s.synchronize().unwrap();
    buf.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0x66), "(d) the earlier stream upload overwrote the later write");

    // (e) copy_async on a compute stream, then a synchronous read of its destination.
    let other = d.alloc_buffer(n).unwrap();
    other.write(0, &vec![0u8; n]).unwrap();
    sc.copy_async(&buf, 0, &other, 0, n).unwrap();
    other.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0x66), "(e) read missed the compute-stream copy");

    // (f) a kernel reading buf (checksum-like copy_sm?) then a synchronous write: use copy_async
    // on the compute stream reading buf, then write buf.
    sc.copy_async(&buf, 0, &other, 0, n).unwrap();
    buf.write(0, &vec![0x77u8; n]).unwrap();
    other.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0x66), "(f) the stream copy read the later write");

    // (g) synchronous write into a buffer with a pending stream fill, small write (BAR path when on).
    s.fill_async(&buf, 0, n, 0x0808_0808).unwrap();
    buf.write(0, &[0x99u8; 64]).unwrap();
    s.synchronize().unwrap();
    buf.read(0, &mut out[..128]).unwrap();
    assert!(out[..64].iter().all(|&b| b == 0x99), "(g) the stream fill overwrote the later write");
    assert!(out[64..128].iter().all(|&b| b == 0x08));
}

/// Same as (g) with BAR stores on: small synchronous writes are CPU stores into mapped memory.
#[test]
fn bar_store_write_after_stream_work() {
    let d = device_with(OpenOptions { bar_writes: vkhost::BarWrites::On, ..opts() }).unwrap();
    let n = 8 << 20;
    let buf = d.alloc_buffer(n).unwrap();
    let s = d.stream().unwrap();
    for round in 0..4u8 {
        s.fill_async(&buf, 0, n, 0x0808_0808).unwrap();
        buf.write(0, &[0x90 + round; 4096]).unwrap();
        let mut out = vec![0u8; 8192];
        buf.read(0, &mut out).unwrap();
        assert!(out[..4096].iter().all(|&b| b == 0x90 + round), "round {round}: stream fill overwrote the later store");
        // WAR: a stream copy out of buf pending, then a store.
        let other = d.alloc_buffer(n).unwrap();
        s.copy_async(&buf, 0, &other, 0, n).unwrap();
        buf.write(0, &[0xA0 + round; 4096]).unwrap();
        other.read(0, &mut out).unwrap();
        assert!(out[..4096].iter().all(|&b| b == 0x90 + round), "round {round}: stream copy read the later store");
    }
}

// ---- Pending::is_done progress ----

#[test]
fn polling_alone_finishes_every_small_op() {
    let d = device().unwrap();
    let buf = d.alloc_buffer(1 << 16).unwrap();
    let s = d.stream().unwrap();
    let spin = |what: &str, f: &dyn Fn() -> bool| {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(20), "{what}: is_done never became true");
            std::thread::yield_now();
        }
    };
    let v = vec![3u8; 100];
    let p = s.upload(&v, &buf, 0).unwrap();
    spin("pageable upload", &|| p.is_done().unwrap());
    drop(p);
    s.fill_async(&buf, 0, 256, 7).unwrap();
    let e = s.record().unwrap();
    spin("event after fill", &|| e.is_done().unwrap());
    let mut pin = PinnedBuffer::new(&d, 4096).unwrap();
    let p = s.download_pinned(&buf, 0, &mut pin, 0..64).unwrap();
    spin("download_pinned", &|| p.is_done().unwrap());
    drop(p);
    let sc = d.stream_on(QueueKind::Compute).unwrap();
    sc.fill_u32(Binding::Device(&buf, 0, 256), 5).unwrap();
    let e = sc.record().unwrap();
    spin("event after kernel", &|| e.is_done().unwrap());
    // An event recorded on s, waited by sc: polling sc's event must also make progress.
    s.fill_async(&buf, 0, 256, 9).unwrap();
    let e1 = s.record().unwrap();
    sc.wait_event(&e1).unwrap();
    sc.fill_u32(Binding::Device(&buf, 256, 256), 6).unwrap();
    let e2 = sc.record().unwrap();
    spin("cross-stream event", &|| e2.is_done().unwrap());
}

// ---- Registration drop / unregister waits for work still in an open batch ----

#[test]
fn registration_drop_waits_for_open_batch_copy() {
    let d = device().unwrap();
    let n = 1 << 16;
    let buf = d.alloc_buffer(n).unwrap();
    buf.write(0, &pattern(n, 9)).unwrap();
    let dev: Device = (*d).clone();
    let mine = with_deadline(30, "Registration drop with an unsubmitted copy naming it", move || {
        let s = dev.stream().unwrap();
        let mut mine = vec![0u8; n];
        let reg = dev.register(&mut mine).unwrap();
        // SAFETY: the registration keeps the bytes; nothing else touches them until it drops,
        // and its drop waits for every copy that names them (issue 9).
        unsafe { s.copy_to_host_async(&buf, 0, reg.as_ptr() as *mut u8, n) }.unwrap();
        drop(reg);
        let snapshot = mine.clone();
        drop(s);
        (snapshot, buf)
    });
    assert!(mine.0 == pattern(n, 9), "the copy had not landed when the drop returned");
}

#[test]
fn raw_unregister_waits_for_open_batch_copy() {
    let d = device().unwrap();
    let n = 1 << 16;
    let buf = d.alloc_buffer(n).unwrap();
    buf.write(0, &pattern(n, 10)).unwrap();
    let dev: Device = (*d).clone();
    let ok = with_deadline(30, "unregister with an unsubmitted copy naming it", move || {
        let s = dev.stream().unwrap();
        let m = Pages::new(n);
        // SAFETY: mapping outlives the registration.
        unsafe { host::register(&dev, m.ptr, n) }.unwrap();
        // SAFETY: stays mapped until unregister returns.
        unsafe { s.copy_to_host_async(&buf, 0, m.ptr, n) }.unwrap();
        host::unregister(&dev, m.ptr).unwrap();
        // SAFETY: ours.
        let ok = unsafe { std::slice::from_raw_parts(m.ptr, n) } == &pattern(n, 10)[..];
        drop(m); // unmapped right after, as the issue allows
        s.synchronize().unwrap();
        (ok, buf)
    });
    assert!(ok.0, "bytes not in place when unregister returned");
}

// ---- byte conflict: two imports sharing a page, same direction (WAW) ----

#[test]
fn imports_sharing_a_page_order_two_downloads() {
    let d = device().unwrap();
    let page = host::page_size();
    let m = Pages::new(4 * page);
    let p = m.ptr as usize;
    let (a, b) = (p + 100, p + page + 200);
    // SAFETY: mapping outlives both.
    unsafe {
        host::register(&d, a, page).unwrap();
        host::register(&d, b, 2 * page - 300).unwrap();
    }
    let s1 = d.alloc_buffer(page).unwrap();
    let s2 = d.alloc_buffer(page).unwrap();
    s1.write(0, &vec![0x11u8; page]).unwrap();
    s2.write(0, &vec![0x22u8; page]).unwrap();
    let s = d.stream().unwrap();
    for round in 0..20 {
        // SAFETY: inside the mapping, untouched until synchronize.
        unsafe {
            // via A (starts in page 0), then via B (starts in page 1): same bytes p+page+40..60
            s.copy_to_host_async(&s1, 0, (p + page - 96) as *mut u8, 200).unwrap();
            s.copy_to_host_async(&s2, 0, (p + page + 40) as *mut u8, 20).unwrap();
        }
        s.synchronize().unwrap();
        // SAFETY: ours.
        let got = unsafe { std::slice::from_raw_parts((p + page + 40) as *const u8, 20) };
        assert!(got.iter().all(|&x| x == 0x22), "round {round}: the second download did not win: {got:?}");
        // and reversed
        // SAFETY: as above.
        unsafe {
            s.copy_to_host_async(&s2, 0, (p + page + 40) as *mut u8, 20).unwrap();
            s.copy_to_host_async(&s1, 0, (p + page - 96) as *mut u8, 200).unwrap();
        }
        s.synchronize().unwrap();
        // SAFETY: synchronized: nothing writes these bytes any more.
        let got = unsafe { std::slice::from_raw_parts((p + page + 40) as *const u8, 20) };
        assert!(got.iter().all(|&x| x == 0x11), "round {round}: reversed: {got:?}");
    }
    host::unregister(&d, a).unwrap();
    host::unregister(&d, b).unwrap();
}

// ---- "name it": the raw unregister of a HostRange's entry ----

#[test]
fn raw_unregister_of_a_host_range_names_its_owner() {
    let a = device().unwrap();
    let b = device().unwrap();
    let mut data = vec![0u8; 8192];
    let range = vkhost::HostRange::register(&[&a, &b], &mut data).unwrap();
    let r = host::unregister(&a, range.as_ptr());
    eprintln!("raw unregister of a HostRange's entry: {r:?}");
    assert!(matches!(r, Err(Error::OwnedByGuard { what: "HostRange" })), "names the wrong owner: {r:?}");
    drop(range);
}

// ---- sync copies racing stream work on the same buffer from another thread ----

#[test]
fn sync_reads_racing_stream_fills_do_not_deadlock() {
    let d = device().unwrap();
    let n = 1 << 20;
    let buf = std::sync::Arc::new(d.alloc_buffer(n).unwrap());
    let dev: Device = (*d).clone();
    with_deadline(120, "sync reads racing stream fills", move || {
        let s = dev.stream().unwrap();
        let sc = dev.stream_on(QueueKind::Compute).unwrap();
        std::thread::scope(|sc_| {
            let b1 = buf.clone();
            sc_.spawn(move || {
                for i in 0..300u32 {
                    s.fill_async(&b1, 0, n, i).unwrap();
                    if i % 7 == 0 {
                        s.synchronize().unwrap();
                    }
                }
                s.synchronize().unwrap();
            });
            let b2 = buf.clone();
            sc_.spawn(move || {
                for i in 0..300u32 {
                    sc.fill_u32(Binding::Device(&b2, 0, n), i).unwrap();
                }
                sc.synchronize().unwrap();
            });
            let mut out = vec![0u8; n];
            for i in 0..300u32 {
                buf.read(0, &mut out).unwrap();
                buf.write(i as usize % n, &[1, 2, 3]).unwrap();
            }
        });
    });
}

// ---- unregister/free_pinned: entry goes at once, range registrable again, objects go later ----

#[test]
fn release_with_work_in_flight_then_reregister() {
    let d = device().unwrap();
    let n = 32 << 20;
    let buf = d.alloc_buffer(n).unwrap();
    buf.write(0, &pattern(n, 12)).unwrap();
    let s = d.stream().unwrap();
    // Raw pinned block with a big async d2h in flight: free_pinned waits for it (as
    // cudaFreeHost), the entry is gone, and the memory goes after, in the background.
    let blk = host::alloc_pinned(&d, n).unwrap();
    // SAFETY: a live block, not touched until reaped (we never touch it again).
    unsafe { s.copy_to_host_async(&buf, 0, blk.as_ptr(), n) }.unwrap();
    s.flush().unwrap();
    let t = Instant::now();
    host::free_pinned(&d, blk).unwrap();
    eprintln!("free_pinned with work in flight returned in {:?}", t.elapsed());
    let ev = s.record().unwrap();
    assert!(ev.is_done().unwrap(), "free_pinned returned before the copy into the block was done");
    assert_eq!(host::find(&d, blk, 1), None);
    assert_eq!(host::free_pinned(&d, blk), Err(Error::NotPinned));
    // Registered range with an async h2d in flight: unregister waits; register again at once.
    let m = Pages::new(n);
    // SAFETY: ours until unmapped after the last unregister.
    unsafe { std::ptr::write_bytes(m.ptr, 0x5C, n) };
    // SAFETY: the mapping outlives the registration (unregistered before it goes).
    unsafe { host::register(&d, m.ptr, n) }.unwrap();
    let dst = d.alloc_buffer(n).unwrap();
    // SAFETY: registered bytes of the live mapping; the unregister below waits for the copy.
    unsafe { s.copy_to_device_async(m.ptr, n, &dst, 0) }.unwrap();
    s.flush().unwrap();
    host::unregister(&d, m.ptr).unwrap();
    // SAFETY: as the first registration.
    unsafe { host::register(&d, m.ptr, n) }.unwrap();
    assert!(host::find(&d, m.ptr, n).is_some());
    s.synchronize().unwrap();
    let mut out = vec![0u8; n];
    dst.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0x5C));
    host::unregister(&d, m.ptr).unwrap();
    drop(m);
}
