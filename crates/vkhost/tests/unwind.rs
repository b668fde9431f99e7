//! A panic unwinding through vkhost (a user's logger that panics on an error message, here
//! armed per thread) in the middle of a registration leaves nothing behind: no registry entry,
//! no import, no count. Fault injection makes the call fail (and log) at a chosen point.
//! Before the fix (`HostRange::register`'s undo ran only on `Err`; `import_pieces` held the
//! other pieces' imports as plain handles until every piece was done) these failed: an entry
//! owned by a guard that no longer existed, 15 of 16 pieces' buffers and memories leaked.

mod common;
use common::*;
use std::cell::Cell as StdCell;
use std::sync::Once;
use vkhost::host::{self, entries_of};
use vkhost::{Device, HostRange, OpenOptions, PinnedBuffer};

const PIECE: usize = 64 << 10;

fn small_pieces() -> OpenOptions {
    OpenOptions { max_import_piece: Some(PIECE), ..opts() }
}

// ---- a user logger that can be told to panic (a panicking user callback) ----
thread_local! { static PANIC_ON_ERROR: StdCell<bool> = const { StdCell::new(false) }; }
struct PanicLogger;
impl log::Log for PanicLogger {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        if r.level() <= log::Level::Error && PANIC_ON_ERROR.with(|p| p.get()) {
            PANIC_ON_ERROR.with(|p| p.set(false));
            panic!("user logger panicked on: {}", r.args());
        }
    }
    fn flush(&self) {}
}
fn install_logger() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_boxed_logger(Box::new(PanicLogger)).unwrap();
        log::set_max_level(log::LevelFilter::Warn);
    });
}

fn dev_with(o: OpenOptions) -> Checked {
    install_logger();
    device_with(o).expect("device")
}

/// A panicking user callback (the process logger) during the second device's registration:
/// nothing must stay registered on the first device.
#[test]
fn host_range_panic_during_second_device_leaves_nothing() {
    let a = dev_with(opts());
    // b is not Checked: it will be lost.
    let b = Device::open_with(a.info().index, &opts()).unwrap();
    let mut v = vec![3u8; 64 << 10];
    let addr = v.as_ptr() as usize;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // a's import takes CreateBuffer call 0 on this thread; b's is call 1.
        vkhost::fault::inject(vkhost::fault::Point::CreateBuffer, 1, vkhost::vk::Result::ERROR_DEVICE_LOST);
        PANIC_ON_ERROR.with(|p| p.set(true));
        let r = HostRange::register(&[&a, &b], &mut v);
        r.map(|_| ())
    }));
    vkhost::fault::disarm();
    PANIC_ON_ERROR.with(|p| p.set(false));
    eprintln!("register result: {:?}", r.as_ref().map_err(|_| "panicked"));
    let left_a = entries_of(&a);
    let found = host::find(&a, addr, 8).is_some();
    let raw = host::unregister(&a, addr);
    eprintln!("after unwind: entries_of(a) = {left_a}, find(a) = {found}, raw unregister(a) = {raw:?}");
    let _ = b.destroy();
    assert!(r.is_err(), "expected the panic to unwind");
    assert_eq!(left_a, 0, "a registration of the (no longer borrowed) slice stayed on device a");
    drop(v);
}

/// A panic unwinding out of a multi-piece import (the first piece, on the caller's thread)
/// while the other pieces imported on helper threads: nothing may leak.
#[test]
fn panic_in_multi_piece_import_leaks_nothing() {
    let d = dev_with(small_pieces());
    let n = 16 * PIECE;
    let m = Pages::new(n);
    let before = d.live_objects();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        vkhost::fault::inject(vkhost::fault::Point::CreateBuffer, 0, vkhost::vk::Result::ERROR_DEVICE_LOST);
        PANIC_ON_ERROR.with(|p| p.set(true));
        // SAFETY: mapping outlives the device.
        unsafe { host::register(&d, m.ptr, n) }
    }));
    vkhost::fault::disarm();
    PANIC_ON_ERROR.with(|p| p.set(false));
    assert!(r.is_err(), "expected a panic");
    assert_eq!(entries_of(&d), 0, "reservation left behind");
    let after = d.live_objects();
    eprintln!("before {before:?}\nafter  {after:?}");
    assert_eq!((after.buffers, after.memories), (before.buffers, before.memories), "imports of the other pieces leaked");
}

/// A panic unwinding through `Device::register` and through a multi-piece `PinnedBuffer::new`:
/// no reservation, no count, no leaked import.
#[test]
fn panic_through_register_and_pinned_leaves_nothing() {
    let d = dev_with(small_pieces());
    let mut v = vec![0u8; 3 * PIECE];
    let before = d.live_objects();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        vkhost::fault::inject(vkhost::fault::Point::CreateBuffer, 0, vkhost::vk::Result::ERROR_DEVICE_LOST);
        PANIC_ON_ERROR.with(|p| p.set(true));
        d.register(&mut v).map(|_| ())
    }));
    vkhost::fault::disarm();
    PANIC_ON_ERROR.with(|p| p.set(false));
    assert!(r.is_err());
    assert_eq!(entries_of(&d), 0, "reservation left behind");
    let after = d.live_objects();
    assert_eq!((after.buffers, after.memories), (before.buffers, before.memories));
    drop(v);

    let e = dev_with(small_pieces());
    if e.host_registration().is_err() {
        return;
    }
    let before = e.live_objects();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        vkhost::fault::inject(vkhost::fault::Point::CreateBuffer, 0, vkhost::vk::Result::ERROR_DEVICE_LOST);
        PANIC_ON_ERROR.with(|p| p.set(true));
        PinnedBuffer::new(&e, 8 * PIECE).map(|_| ())
    }));
    vkhost::fault::disarm();
    PANIC_ON_ERROR.with(|p| p.set(false));
    assert!(r.is_err());
    assert_eq!(entries_of(&e), 0);
    let after = e.live_objects();
    eprintln!("pinned: before {before:?} after {after:?}");
    assert_eq!((after.buffers, after.memories), (before.buffers, before.memories));
    assert_eq!(e.destroy(), Ok(()), "a PinnedBuffer count left behind");
}

/// A panic out of a later step of one import or driver allocation (`vkAllocateMemory` or
/// `vkBindBufferMemory` failing with device loss, whose log line panics): the buffer (and the
/// memory) made before it are released, through `register`, a one-piece `PinnedBuffer::new`
/// (the driver's block) and `alloc_buffer`. Before the `Fresh` guard, the cleanup ran only on an
/// `Err` and the buffer leaked.
#[test]
fn panic_after_the_buffer_was_made_leaks_nothing() {
    use vkhost::fault::{self, Point};
    let page = host::page_size();
    let m = Pages::new(4 * page);
    for point in [Point::AllocateMemory, Point::BindBufferMemory] {
        for what in ["register", "PinnedBuffer::new", "alloc_buffer"] {
            // A device per attempt: the injected loss marks it lost for good.
            let d = dev_with(opts());
            let before = d.live_objects();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                fault::inject(point, 0, vkhost::vk::Result::ERROR_DEVICE_LOST);
                PANIC_ON_ERROR.with(|p| p.set(true));
                match what {
                    // SAFETY: the mapping outlives the device; nothing stays registered.
                    "register" => drop(unsafe { host::register(&d, m.ptr, 4 * page) }),
                    "PinnedBuffer::new" => drop(PinnedBuffer::new(&d, 4 * page)),
                    _ => drop(d.alloc_buffer(4 * page)),
                }
            }));
            fault::disarm();
            PANIC_ON_ERROR.with(|p| p.set(false));
            assert!(r.is_err(), "{point:?} in {what}: expected the logger's panic");
            let after = d.live_objects();
            assert_eq!((after.buffers, after.memories), (before.buffers, before.memories), "{point:?} in {what}: objects leaked");
            assert_eq!(entries_of(&d), 0, "{point:?} in {what}: an entry left");
            // Lost (the injected error said so): it still tears down cleanly.
            let _ = d.destroy();
        }
    }
}
