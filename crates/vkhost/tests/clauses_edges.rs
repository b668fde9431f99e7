//! Edge inputs of the raw seed API (`host::register`/`unregister`/`find`/`alloc_pinned`/
//! `free_pinned`, `round_out`): adjacent and page-sharing registrations (one imported in
//! pieces), one range on two devices through a teardown (tombstones per device), odd block
//! lengths, find at the ends.
//! lavapipe with the validation layer on; zero errors asserted by `Checked` on drop.
mod common;
use common::*;
use vkhost::host::{self, device_stats, entries_of};
use vkhost::{CopyPath, Error};

#[test]
fn e_adjacent_registrations() {
    let d = device().unwrap();
    let mut m = Pages::new(4 * 4096);
    let b = m.ptr as usize;
    // SAFETY: mapping outlives the registrations.
    unsafe {
        host::register(&d, b, 4096).unwrap();
        host::register(&d, b + 4096, 4096).unwrap();
    }
    let (ba, _) = host::find(&d, b, 4096).unwrap();
    let (bb, o) = host::find(&d, b + 4096, 4096).unwrap();
    assert_ne!(ba, bb);
    assert_eq!(o, 0);
    assert_eq!(host::find(&d, b + 4095, 2), None);
    assert_eq!(host::find(&d, b + 4096, 0), Some((bb, 0)));
    assert_eq!(host::find(&d, b + 8192, 0), None);
    assert_eq!(host::find(&d, b + 8191, 1), Some((bb, 4095)));
    let g = d.alloc_buffer(8192).unwrap();
    m.slice()[..8192].fill(3);
    // SAFETY: inside the mapping.
    let p = unsafe { host::copy_to_device(&d, b as *const u8, 8192, &g, 0) }.unwrap();
    assert_eq!(p, CopyPath::Direct);
    host::unregister(&d, b).unwrap();
    host::unregister(&d, b + 4096).unwrap();
}

#[test]
fn e_same_range_two_devices_teardown() {
    let a = device().unwrap();
    let c = device().unwrap();
    let mut m = Pages::new(4 * 4096);
    let b = m.ptr as usize;
    // SAFETY: mapping outlives.
    unsafe {
        host::register(&a, b + 10, 5000).unwrap();
        host::register(&c, b + 10, 5000).unwrap();
    }
    let pa = host::alloc_pinned(&a, 100).unwrap();
    a.destroy().unwrap();
    assert_eq!(host::find(&a, b + 10, 1), None);
    assert_eq!(host::find(&a, b + 10, 0), None);
    assert!(host::find(&c, b + 10, 5000).is_some());
    assert_eq!(host::find(&c, b, 8192).map(|x| x.1), Some(0));
    let s = device_stats(&a);
    assert_eq!((s.live_imports, s.live_pinned, s.tombstones, entries_of(&a)), (0, 0, 2, 2));
    assert_eq!(host::unregister(&a, b + 11), Err(Error::NotRegistered));
    assert_eq!(host::free_pinned(&a, b + 10), Err(Error::NotPinned));
    assert_eq!(host::unregister(&a, pa), Err(Error::NotRegistered));
    assert_eq!(host::free_pinned(&a, pa.as_ptr() as usize + 1), Err(Error::NotPinned));
    assert_eq!(host::unregister(&a, b + 10), Ok(()));
    assert_eq!(host::unregister(&a, b + 10), Err(Error::NotRegistered));
    assert_eq!(host::free_pinned(&a, pa), Ok(()));
    assert_eq!(host::free_pinned(&a, pa), Err(Error::NotPinned));
    assert_eq!(entries_of(&a), 0);
    let g = c.alloc_buffer(5000).unwrap();
    // SAFETY: inside the mapping.
    let p = unsafe { host::copy_to_device(&c, (b + 10) as *const u8, 5000, &g, 0) }.unwrap();
    assert_eq!(p, CopyPath::Direct);
    host::unregister(&c, b + 10).unwrap();
    m.slice()[0] = 1;
}

#[test]
fn e_pinned_odd_lengths() {
    let d = device().unwrap();
    for len in [1usize, 100, 4095, 4097, 12345] {
        let p = host::alloc_pinned(&d, len).unwrap();
        let a = p.as_ptr() as usize;
        assert_eq!(host::find(&d, a + len - 1, 1).map(|x| x.1), Some(len as u64 - 1), "{len}");
        assert_eq!(host::find(&d, a + len - 1, 0).map(|x| x.1), Some(len as u64 - 1), "{len}");
        assert_eq!(host::find(&d, a + len, 0), None, "{len}");
        assert_eq!(host::find(&d, a + len, 1), None, "{len}");
        assert_eq!(host::find(&d, a, len + 1), None, "{len}");
        assert_eq!(host::find(&d, a, usize::MAX), None);
        assert_eq!(host::find(&d, usize::MAX, 1), None);
        assert_eq!(host::find(&d, 0usize, 0), None);
        assert_eq!(host::find(&d, a.wrapping_sub(1), 1), None);
        host::free_pinned(&d, p).unwrap();
    }
    assert_eq!(host::free_pinned(&d, 0usize), Err(Error::NotPinned));
    assert_eq!(host::unregister(&d, 0usize), Err(Error::NotRegistered));
    // SAFETY: refused before touching memory.
    unsafe {
        assert!(matches!(host::register(&d, usize::MAX, 1), Err(Error::InvalidArgument { .. })));
        assert!(matches!(host::register(&d, usize::MAX - 4095, 4096), Err(Error::InvalidArgument { .. })));
        assert!(matches!(host::register(&d, 1usize, 1), Err(Error::InvalidArgument { .. })));
        assert!(matches!(host::register(&d, 4096usize, usize::MAX - 4096), Err(Error::InvalidArgument { .. })));
    }
    assert_eq!(entries_of(&d), 0);
}

#[test]
fn e_register_tail_of_shared_page_then_find() {
    let d = device().unwrap();
    let mut m = Pages::new(3 * 4096);
    let b = m.ptr as usize;
    // SAFETY: mapping outlives.
    unsafe {
        host::register(&d, b + 4000, 200).unwrap(); // covers [b, b+8192)
        host::register(&d, b + 4200, 100).unwrap(); // covers [b+4096, b+8192)
    }
    // A range in the first registration's page 0, which only its import covers.
    let (ba, o) = host::find(&d, b, 100).unwrap();
    assert_eq!(o, 0);
    let (bx, o) = host::find(&d, b + 4200, 100).unwrap();
    assert_ne!(ba, bx, "each registration's own bytes are found through its own import");
    assert_eq!(o, 104);
    assert!(host::find(&d, b + 4150, 100).is_some(), "across both registrations' bytes, inside the first's import");
    host::unregister(&d, b + 4000).unwrap();
    assert_eq!(host::find(&d, b, 100), None);
    assert_eq!(host::find(&d, b + 4096, 4096).map(|x| x.1), Some(0));
    host::unregister(&d, b + 4200).unwrap();
    m.slice()[0] = 0;
}

/// A registration imported in several pieces whose last page it shares with a neighbour: a
/// range in the shared page is found (pieces are whole pages, so no piece boundary falls
/// inside it), a range across a piece boundary of the first is not (no one buffer covers it),
/// and a copy over both registrations goes direct.
#[test]
fn e_multi_piece_registration_sharing_a_page() {
    let Some(d) = device_with(vkhost::OpenOptions { max_import_piece: Some(8192), ..opts() }) else { return };
    let mut m = Pages::new(4 * 4096);
    let b = m.ptr as usize;
    // SAFETY: the mapping outlives both registrations.
    unsafe {
        host::register(&d, b + 100, 3 * 4096 - 200).unwrap(); // covers [b, b+12K): pieces 8K and 4K
        host::register(&d, b + 3 * 4096 - 50, 4096).unwrap(); // covers [b+8K, b+16K)
    }
    assert_eq!(device_stats(&d).live_imports, 2);
    let (first, o) = host::find(&d, b + 100, 8192 - 100).unwrap();
    assert_eq!(o, 100);
    assert_eq!(host::find(&d, b + 8000, 400), None, "across the first registration's two pieces");
    // In the shared page: the first registration's own bytes through its second piece, the
    // neighbour's through its own import, the bytes between them through either.
    let (second, o) = host::find(&d, b + 8192, 100).unwrap();
    assert_ne!(second, first);
    assert_eq!(o, 0);
    let (nb, o) = host::find(&d, b + 3 * 4096 - 50, 50).unwrap();
    assert_eq!(o, 4096 - 50);
    // The neighbour's import, known by its own last page, which no piece of the first covers.
    let (neighbour, o) = host::find(&d, b + 3 * 4096, 4096).unwrap();
    assert_eq!(o, 4096);
    assert_eq!(nb, neighbour, "the neighbour's bytes through its own import");
    assert_ne!(second, neighbour, "the first's bytes in the shared page through its own piece");
    assert!(host::find(&d, b + 3 * 4096 - 150, 150).is_some(), "between both registrations' bytes, in the shared page");
    assert!(host::find(&d, b + 8192, 4096).is_some(), "the whole shared page");
    let g = d.alloc_buffer(4 * 4096).unwrap();
    m.slice().iter_mut().enumerate().for_each(|(i, x)| *x = (i % 251) as u8);
    let n = 4 * 4096 - 200;
    // SAFETY: inside the mapping.
    let p = unsafe { host::copy_to_device(&d, (b + 100) as *const u8, n, &g, 0) }.unwrap();
    assert_eq!(p, CopyPath::Direct);
    let mut back = vec![0u8; n];
    g.read(0, &mut back).unwrap();
    assert!(back.iter().enumerate().all(|(i, &x)| x == ((i + 100) % 251) as u8));
    host::unregister(&d, b + 100).unwrap();
    assert!(host::find(&d, b + 8192, 4096).is_some(), "the neighbour's import alone covers the shared page");
    host::unregister(&d, b + 3 * 4096 - 50).unwrap();
}

/// The seed's `round_up : int -> int -> int` takes any alignment; `round_out` takes a power of
/// two only. Any other granule (0 included) is `None`, never a panic (debug) or a range that is
/// not a multiple of it (release).
#[test]
fn e_round_out_refuses_a_granule_that_is_not_a_power_of_two() {
    assert_eq!(host::round_out(4100, 10, 0), None);
    assert_eq!(host::round_out(4100, 10, 3), None);
    assert_eq!(host::round_out(4100, 10, 4096 + 1), None);
    assert_eq!(host::round_out(4100, 10, 1), Some(4100..4110));
    assert_eq!(host::round_out(0, 0, 4096), Some(0..0));
    assert_eq!(host::round_out(usize::MAX - 8191 + 100, 3996, 4096), Some(usize::MAX - 8191..usize::MAX - 4095));
}
