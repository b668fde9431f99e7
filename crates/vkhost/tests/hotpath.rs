//! Issue 10: synchronous copies allocate nothing on their hot path. After a warm-up (which
//! records command buffers, creates staging and starts the staging threads), a synchronous
//! copy, direct or staged, small or mid-size, in either direction, through the safe types or the
//! raw API, makes no heap allocation on any thread. A global allocator counts them; the
//! validation layer's own allocations are C++ and not counted.
//!
//! Its own test binary: the counting allocator is this binary's global allocator.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use vkhost::{OpenOptions, PinnedBuffer, host};

struct Counting;

/// Counts one allocation while counting is on.
fn note() {
    if COUNTING.load(Ordering::Relaxed) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; the counter is an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        note();
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.realloc(p, l, new) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Heap allocations (every thread) made by 10 runs of `f` after 3 untimed ones, the fewest of
/// three such rounds. The pause lets staging threads spawned by the warm-up start: a new thread
/// allocates its own bookkeeping when it first runs, which on a loaded machine can be well after
/// its spawn. Three rounds, because on a loaded machine a copy may find both of its thread's
/// spare work records still held by a worker descheduled just after it finished (the copy then
/// allocates a fresh one, by design); a hot path that allocates does so in every round.
fn allocations(mut f: impl FnMut()) -> usize {
    let mut fewest = usize::MAX;
    for _ in 0..3 {
        for _ in 0..3 {
            f();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        ALLOCATIONS.store(0, Ordering::SeqCst);
        COUNTING.store(true, Ordering::SeqCst);
        for _ in 0..10 {
            f();
        }
        COUNTING.store(false, Ordering::SeqCst);
        fewest = fewest.min(ALLOCATIONS.load(Ordering::SeqCst));
        if fewest == 0 {
            break;
        }
    }
    fewest
}

#[test]
fn synchronous_copies_allocate_nothing_after_warm_up() {
    // Staging threads (2) so that mid-size staged copies split their memcpy across threads.
    let Some(d) = common::device_with(OpenOptions { staging_threads: 2, ..common::opts() }) else { return };
    let dev = &d.0;
    const MAX: usize = 4 << 20;
    let buf = dev.alloc_buffer(MAX).unwrap();
    let mut pinned = PinnedBuffer::new(dev, MAX).unwrap();
    pinned.fill(3);
    let mut reg_mem = vec![5u8; MAX];
    let mut pageable = vec![7u8; MAX];
    let mut failures = Vec::new();
    for n in [4 << 10, 64 << 10, 1 << 20, MAX] {
        let p = pinned.as_mut_ptr();
        // SAFETY: (here and below) `p` is the pinned block's first byte, `n` <= its length; the
        // slices made from it do not outlive the block, and no other reference to it is used
        // while one lives.
        let pin = || unsafe { std::slice::from_raw_parts_mut(p, n) };
        let cases: [(&str, usize); 4] = [
            ("pinned write", allocations(|| buf.write(0, pin()).unwrap())),
            ("pinned read", allocations(|| buf.read(0, pin()).unwrap())),
            ("pageable write", allocations(|| buf.write(0, &pageable[..n]).unwrap())),
            ("pageable read", allocations(|| buf.read(0, &mut pageable[..n]).unwrap())),
        ];
        for (what, a) in cases {
            if a != 0 {
                failures.push(format!("{what} of {n} bytes: {a} allocations in 10 copies"));
            }
        }
        // The raw API's copies (the seed's copy_to_device / copy_to_host).
        // SAFETY: the pinned block is readable and writable for n bytes throughout.
        let raw_up = allocations(|| unsafe { host::copy_to_device(dev, p as *const u8, n, &buf, 0) }.map(|_| ()).unwrap());
        // SAFETY: as above.
        let raw_down = allocations(|| unsafe { host::copy_to_host(dev, &buf, 0, p, n) }.map(|_| ()).unwrap());
        for (what, a) in [("raw copy_to_device", raw_up), ("raw copy_to_host", raw_down)] {
            if a != 0 {
                failures.push(format!("{what} of {n} bytes: {a} allocations in 10 copies"));
            }
        }
    }
    // A registration's bytes, and a copy that crosses from it into unregistered memory (one
    // direct piece and one staged piece in one copy).
    let base = reg_mem.as_mut_ptr();
    // SAFETY: the first half of `reg_mem` stays allocated and unmoved until the unregister below.
    unsafe { host::register(dev, base, MAX / 2) }.unwrap();
    // SAFETY: both ranges lie in `reg_mem` (MAX bytes from `base`), which nothing else touches
    // meanwhile.
    let whole = unsafe { std::slice::from_raw_parts(base as *const u8, 1 << 20) };
    // SAFETY: as above.
    let crossing = unsafe { std::slice::from_raw_parts(base.add(MAX / 2 - (64 << 10)) as *const u8, 128 << 10) };
    for (what, a) in [
        ("registered write", allocations(|| buf.write(0, whole).unwrap())),
        ("mixed write", allocations(|| buf.write(0, crossing).unwrap())),
    ] {
        if a != 0 {
            failures.push(format!("{what}: {a} allocations in 10 copies"));
        }
    }
    host::unregister(dev, base).unwrap();
    drop(pinned);
    drop(buf);
    assert!(failures.is_empty(), "the hot path allocated:\n{}", failures.join("\n"));
}
