//! The soundness scenarios of the ownership issue, each with the validation layer on (and its
//! synchronization validation under `make test`). Each names what it proves; "Before:" says
//! how it failed on 2fa5c19, the code before tracked ownership (run there with the same file).

mod common;
use common::*;
use std::mem::forget;
use vkhost::host;
use vkhost::{Error, PinnedBuffer};

/// Case 1. A Registration dropped while another thread's upload, which names bytes in the
/// registration's rounded page, is being enqueued across two batches. Before: validation
/// reported VUID-vkCmdCopyBuffer-srcBuffer-parameter and lavapipe crashed (the import was
/// destroyed under the open batch's later copies); this test died with SIGSEGV there.
#[test]
fn registration_dropped_during_an_upload_that_names_its_page() {
    let d = device().unwrap();
    let split = (32 << 20) + 100;
    for round in 0..12 {
        let mut v = pattern(split + (1 << 20), round as u8);
        let want = v.clone();
        let buf = d.alloc_buffer(split).unwrap();
        let stream = d.stream().unwrap();
        let (first, second) = v.split_at_mut(split);
        let reg = d.register(second).unwrap();
        std::thread::scope(|s| {
            let up = s.spawn(|| stream.upload(first, &buf, 0).and_then(|p| p.wait()));
            std::thread::sleep(std::time::Duration::from_micros(1500 * round));
            drop(reg);
            up.join().unwrap().unwrap();
        });
        let mut out = vec![0u8; split];
        buf.read(0, &mut out).unwrap();
        assert!(out[..] == want[..split], "round {round}: the upload's bytes");
        assert_eq!(d.validation_errors(), 0, "round {round}: {:?}", d.last_validation_error());
    }
}

/// Case 2. `mem::forget` on a download's guard, then the destination freed and its memory
/// reused: nothing writes the new owner's bytes. Before: `synchronize` wrote into `w`.
#[test]
fn forgotten_download_never_writes_freed_memory() {
    let d = device().unwrap();
    let n = 1 << 20;
    let buf = d.alloc_buffer(n).unwrap();
    buf.write(0, &pattern(n, 7)).unwrap();
    let s = d.stream().unwrap();
    for _ in 0..4 {
        let mut v = vec![0u8; n];
        forget(s.download(&buf, 0, &mut v).unwrap());
        drop(v);
        let w = vec![0x5Au8; n];
        s.synchronize().unwrap();
        assert!(w.iter().all(|&b| b == 0x5A), "a forgotten download wrote freed memory now owned by `w`");
    }
}

/// Case 3. The raw free_pinned (and unregister) of a range a safe guard owns is refused and
/// changes nothing. Before: it returned Ok and the PinnedBuffer dangled.
#[test]
fn raw_release_of_guarded_entries_is_refused() {
    let d = device().unwrap();
    let mut a = PinnedBuffer::new(&d, 8192).unwrap();
    let r = host::free_pinned(&d, a.as_ptr());
    assert!(matches!(r, Err(Error::OwnedByGuard { what: "PinnedBuffer" })), "{r:?}");
    a.fill(3);
    let buf = d.alloc_buffer(8192).unwrap();
    buf.write(0, &a).unwrap();
    let mut mine = vec![1u8; 8192];
    let reg = d.register(&mut mine).unwrap();
    let r = host::unregister(&d, reg.as_ptr());
    assert!(matches!(r, Err(Error::OwnedByGuard { what: "Registration" })), "{r:?}");
    assert!(host::find(&d, reg.as_ptr(), 8192).is_some(), "the registration is still there");
    drop(reg);
    assert!(host::find(&d, mine.as_ptr(), 8192).is_none());
    drop(a);
}

/// A synchronous read after `fill_async` on a stream sees the fill (the copy waits for stream
/// work already enqueued on the buffer). Before: it returned the stale bytes.
#[test]
fn sync_read_sees_earlier_stream_work() {
    let d = device().unwrap();
    let n = 256 << 10;
    let buf = d.alloc_buffer(n).unwrap();
    buf.write(0, &vec![0u8; n]).unwrap();
    let s = d.stream().unwrap();
    s.fill_async(&buf, 0, n, 0xA5A5_A5A5).unwrap();
    let mut out = vec![0u8; n];
    buf.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0xA5), "read did not see the fill");
    // And a write is ordered after a pending stream copy out of the buffer.
    let other = d.alloc_buffer(n).unwrap();
    s.copy_async(&buf, 0, &other, 0, n).unwrap();
    buf.write(0, &vec![1u8; n]).unwrap();
    other.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0xA5), "the stream copy read the later write");
}

/// Polling alone finishes a small upload (like cudaStreamQuery). Before: `is_done` stayed false
/// forever, the copy waiting in the stream's unsubmitted batch.
#[test]
fn polling_alone_completes_a_small_upload() {
    let d = device().unwrap();
    let buf = d.alloc_buffer(4096).unwrap();
    let mut p = PinnedBuffer::new(&d, 4096).unwrap();
    p.fill(9);
    let s = d.stream().unwrap();
    let pending = s.upload_pinned(&p, 0..4096, &buf, 0).unwrap();
    let t = std::time::Instant::now();
    while !pending.is_done().unwrap() {
        assert!(t.elapsed() < std::time::Duration::from_secs(30), "is_done never became true");
        std::hint::spin_loop();
    }
    drop(pending);
    let mut out = vec![0u8; 4096];
    buf.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 9));
}

/// Two imports that share a page reach the same bytes through different VkBuffers: a d2h into
/// bytes through one and an h2d from them through the other are ordered (the stream tracks
/// host bytes by address). Synchronization validation would report a hazard otherwise; it did
/// not on 2fa5c19 with lavapipe either, so this one guards the ordering, it did not reproduce.
#[test]
fn imports_sharing_a_page_conflict_by_bytes() {
    let d = device().unwrap();
    let page = host::page_size();
    let m = Pages::new(4 * page);
    let p = m.ptr as usize;
    // A covers pages 0..2, B pages 1..3: B's import reaches farther, so bytes early in page 1
    // (A's own) are planned through B when a copy starts there, and through A when it starts
    // in page 0.
    let (a, b) = (p + 100, p + page + 200);
    // SAFETY: the mapping outlives both registrations (unregistered below).
    unsafe {
        host::register(&d, a, page).unwrap();
        host::register(&d, b, 2 * page - 300).unwrap();
    }
    let src = d.alloc_buffer(page).unwrap();
    let dst = d.alloc_buffer(page).unwrap();
    src.write(0, &pattern(page, 5)).unwrap();
    let s = d.stream().unwrap();
    let x = p + page + 40;
    // SAFETY: both host ranges lie in the mapping, untouched until synchronize returns.
    unsafe {
        s.copy_to_host_async(&src, 0, x as *mut u8, 20).unwrap();
        s.copy_to_device_async((p + page - 96) as *const u8, 200, &dst, 0).unwrap();
    }
    s.synchronize().unwrap();
    let mut out = vec![0u8; 200];
    dst.read(0, &mut out).unwrap();
    assert_eq!(&out[136..156], &pattern(page, 5)[..20], "the h2d read the bytes the d2h wrote");
    host::unregister(&d, a).unwrap();
    host::unregister(&d, b).unwrap();
}

/// `mem::forget` on every guard type: the process stays memory-safe (valgrind runs this file)
/// and no unrelated memory changes. Before: the forgotten pageable download wrote `w`.
#[test]
fn forgetting_every_guard_is_memory_safe() {
    let d = device().unwrap();
    let n = 64 << 10;
    let buf = d.alloc_buffer(n).unwrap();
    buf.write(0, &pattern(n, 1)).unwrap();
    let s = d.stream().unwrap();

    // Pending of an upload and a download through pinned memory: the bytes are the block's,
    // owned by the work; reading them waits for the device's writes.
    let mut pinned = PinnedBuffer::new(&d, n).unwrap();
    pinned.fill(4);
    forget(s.upload_pinned(&pinned, 0..n, &buf, 0).unwrap());
    forget(s.download_pinned(&buf, 0, &mut pinned, 0..n).unwrap());
    assert!(pinned.iter().all(|&b| b == 4), "Deref waited for the forgotten download");
    forget(s.upload(&pinned, &buf, 0).unwrap());
    forget(s.download(&buf, 0, &mut pinned).unwrap());
    drop(pinned); // the block goes once the work is reaped

    // Pending of a pageable upload and download, then the memory reused.
    let mut v = pattern(n, 2);
    forget(s.upload(&v, &buf, 0).unwrap());
    forget(s.download(&buf, 0, &mut v).unwrap());
    drop(v);
    let w = vec![0x77u8; n];

    // Registration: forgotten, then its memory freed and reused.
    let mut r = vec![3u8; n];
    let reg = d.register(&mut r).unwrap();
    forget(reg);
    drop(r);
    let x = vec![0x66u8; n];

    // A forgotten PinnedBuffer keeps its block (and its device busy) for good.
    let leaked = PinnedBuffer::new(&d, 4096).unwrap();
    forget(leaked);

    // Streams and events: a forgotten stream is torn down with its device.
    let s2 = d.stream().unwrap();
    s2.fill_async(&buf, 0, n, 0x0101_0101).unwrap();
    forget(s2.record().unwrap());
    forget(s2);
    s.synchronize().unwrap();

    assert!(w.iter().all(|&b| b == 0x77) && x.iter().all(|&b| b == 0x66), "unrelated memory changed");
    // The device still works; destroy is Busy (the forgotten PinnedBuffer), the last drop at
    // the end of the test tears everything down.
    let mut out = vec![0u8; n];
    buf.read(0, &mut out).unwrap();
    assert!(matches!(d.destroy(), Err(Error::Busy { .. })));
}

/// A safe download into registered memory (the caller's, which a leaked guard cannot protect)
/// is complete when it returns. Before: it was still pending.
#[test]
fn download_into_registered_memory_returns_after_the_copy() {
    let d = device().unwrap();
    let n = 1 << 20;
    let buf = d.alloc_buffer(n).unwrap();
    buf.write(0, &pattern(n, 8)).unwrap();
    let s = d.stream().unwrap();
    let mut mine = vec![0u8; n];
    let mut reg = d.register(&mut mine).unwrap();
    let p = s.download(&buf, 0, &mut reg).unwrap();
    assert!(p.is_done().unwrap(), "a download into registered memory completes before it returns");
    drop(p);
    assert!(reg[..] == pattern(n, 8)[..]);
}

/// A `&mut` taken from a pinned block before a borrowed-slice download, reborrowed for it, is
/// usable again once the guard is forgotten: the download must be complete by then, or the
/// device writes behind a live `&mut` (undefined behaviour). Before (4c7aaf5, found by a review
/// in the eighth session): the download was async into pinned memory and the bytes read 0 here.
#[test]
fn a_borrowed_download_is_complete_when_its_guard_is_forgotten() {
    let d = device().unwrap();
    // Large enough that an async copy is still running when the call returns (lavapipe copies
    // on a CPU thread); the last byte is written last.
    let n = 64 << 20;
    let gpu = d.alloc_buffer(n).unwrap();
    gpu.write(0, &vec![6u8; n]).unwrap();
    let stream = d.stream().unwrap();
    let mut pinned = PinnedBuffer::new(&d, n).unwrap();
    let s: &mut [u8] = &mut pinned; // one DerefMut, before the download
    s.fill(0);
    forget(stream.download(&gpu, 0, &mut s[..]).unwrap());
    let last = std::hint::black_box(&*s)[n - 1];
    assert_eq!(last, 6, "the device was still writing behind a live &mut");
    assert!(s.iter().all(|&b| b == 6), "the device was still writing behind a live &mut");
    // Through another device's registration of the block: its Deref settles only its own
    // device's work, so the download (on the block's device) must be done at the return.
    let d2 = device().unwrap();
    let s2 = d.stream().unwrap();
    pinned.fill(0);
    let mut reg = d2.register(&mut pinned).unwrap();
    forget(s2.download(&gpu, 0, &mut reg).unwrap());
    assert!(reg.iter().all(|&b| b == 6), "Registration::deref showed bytes another device was writing");
    drop(reg);
    stream.synchronize().unwrap();
    s2.synchronize().unwrap();
}

/// An upload from a borrowed slice has read its bytes when it returns (issue 9: "the bytes are
/// read before the call returns"): writes through a `&mut` taken before the call, once the
/// guard is gone, do not reach the device. Before (4c7aaf5): the upload from pinned memory
/// waited in the stream's open batch, and the device copied the bytes written after it.
#[test]
fn a_borrowed_upload_has_read_its_bytes_when_it_returns() {
    let d = device().unwrap();
    let n = 64 << 10;
    let gpu = d.alloc_buffer(n).unwrap();
    let stream = d.stream().unwrap();
    let mut pinned = PinnedBuffer::new(&d, n).unwrap();
    let s: &mut [u8] = &mut pinned;
    s.fill(1);
    forget(stream.upload(&s[..], &gpu, 0).unwrap());
    s.fill(2);
    stream.synchronize().unwrap();
    let mut out = vec![0u8; n];
    gpu.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 1), "the device read bytes written after the upload returned");
}

/// A kernel launch that binds borrowed host bytes (`Binding::Host`/`HostMut`) is complete when
/// it returns: the borrow ends with the call. Before (4c7aaf5): a launch writing a pinned block
/// through `HostMut` returned at once, and the kernel wrote behind the caller's live `&mut`.
#[test]
fn a_launch_on_borrowed_host_bytes_is_complete_when_it_returns() {
    let d = device().unwrap();
    let n = 1 << 20;
    let gpu = d.alloc_buffer(n).unwrap();
    gpu.write(0, &vec![5u8; n]).unwrap();
    let stream = d.stream_on(vkhost::QueueKind::Compute).unwrap();
    let mut pinned = PinnedBuffer::new(&d, n).unwrap();
    let s: &mut [u8] = &mut pinned;
    s.fill(0);
    stream.copy_sm(vkhost::Binding::Device(&gpu, 0, n), vkhost::Binding::HostMut(&mut s[..])).unwrap();
    assert!(s.iter().all(|&b| b == 5), "the kernel was still writing behind a live &mut");
    stream.synchronize().unwrap();
}

/// The async forms on the block itself: they return before the copy ran, and every view of the
/// block made after the guard is gone (even forgotten) waits for it.
#[test]
fn pinned_forms_are_async_and_views_wait_after_forgetting_their_guards() {
    let d = device().unwrap();
    let n = 8 << 20;
    let gpu = d.alloc_buffer(n).unwrap();
    gpu.write(0, &vec![3u8; n]).unwrap();
    let stream = d.stream().unwrap();
    let mut pinned = PinnedBuffer::new(&d, n).unwrap();
    pinned.fill(0);
    forget(stream.download_pinned(&gpu, 0, &mut pinned, 0..n).unwrap());
    assert!(pinned.iter().all(|&b| b == 3), "Deref waited for the forgotten download");
    pinned.fill(7);
    let up = stream.upload_pinned(&pinned, 0..n, &gpu, 0).unwrap();
    up.wait().unwrap();
    let mut out = vec![0u8; n];
    gpu.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 7));
    assert!(matches!(stream.upload_pinned(&pinned, 0..n + 1, &gpu, 0), Err(Error::OutOfRange)));
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = 8..4;
    assert!(matches!(stream.download_pinned(&gpu, 0, &mut pinned, backwards), Err(Error::OutOfRange)));
}
