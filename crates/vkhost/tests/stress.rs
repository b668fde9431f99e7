//! Stress: 16 threads mixing register, unregister, find, sync and async copies, alloc_pinned
//! and free_pinned, on shared and private ranges; some threads unregister ranges that others
//! are copying. Every copy completes with the right bytes or returns a typed error; at the end
//! the registry is empty and the byte counters match the bytes copied.
//!
//! A fixed operation count in CI; `VKHOST_SOAK_SECS=N` runs the same mix for N seconds.

mod common;
use common::*;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use vkhost::Error;
use vkhost::host::{self, device_stats, entries_of};

const THREADS: usize = 16;
const OPS_PER_THREAD: usize = 400;
const SHARED_PAGES: usize = 64;

#[test]
fn sixteen_threads_mixed() {
    let d = device().unwrap();
    let soak = std::env::var("VKHOST_SOAK_SECS").ok().and_then(|s| s.parse::<u64>().ok());
    let deadline = soak.map(|s| Instant::now() + Duration::from_secs(s));
    let page = host::page_size();
    let mut shared = Pages::new(SHARED_PAGES * page);
    let content = pattern(shared.len, 0x3C);
    shared.slice().copy_from_slice(&content);
    let base = shared.ptr as usize;
    let keys: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    let moved = AtomicU64::new(0);
    let before = device_stats(&d);
    let errors = AtomicU64::new(0);
    let ops = AtomicU64::new(0);

    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (d, keys, moved, content, errors, ops) = (&d, &keys, &moved, &content, &errors, &ops);
            s.spawn(move || {
                let mut r = Rng(0x9E37_79B9_7F4A_7C15 ^ ((t as u64 + 1) * 0x1234_5678_9ABC_DEF1));
                let dbuf = d.alloc_buffer(1 << 20).unwrap();
                let stream = d.stream().unwrap();
                let mut private = Pages::new(16 * page);
                let mut my_reg: Option<usize> = None;
                let mut i = 0;
                loop {
                    match deadline {
                        Some(dl) if Instant::now() >= dl => break,
                        None if i >= OPS_PER_THREAD => break,
                        _ => {}
                    }
                    i += 1;
                    ops.fetch_add(1, Ordering::Relaxed);
                    let off = r.below(shared_len() - 1);
                    let len = 1 + r.below((shared_len() - off).min(3 * page));
                    let check = |got: &[u8], from: usize| assert!(got == &content[from..from + got.len()], "thread {t}: wrong bytes");
                    match r.below(8) {
                        0 => {
                            // register a shared range (may overlap another's: typed refusal)
                            // SAFETY: the shared mapping outlives every registration.
                            match unsafe { host::register(d, base + off, len) } {
                                Ok(()) => keys.lock().unwrap().push(base + off),
                                Err(Error::AlreadyRegistered) => {}
                                Err(e) => panic!("register: {e}"),
                            }
                        }
                        1 => {
                            // unregister anyone's shared registration, maybe while it is copied
                            let k = {
                                let mut g = keys.lock().unwrap();
                                if g.is_empty() {
                                    None
                                } else {
                                    let n = r.below(g.len());
                                    Some(g.swap_remove(n))
                                }
                            };
                            if let Some(k) = k {
                                host::unregister(d, k).unwrap();
                            }
                        }
                        2 => {
                            if let Some((_, o)) = host::find(d, base + off, len) {
                                assert!(o < (SHARED_PAGES * page + page) as u64);
                            }
                        }
                        3 => {
                            // sync h2d from shared, verify through a staged read
                            // SAFETY: inside the shared mapping, which is never written.
                            match unsafe { host::copy_to_device(d, (base + off) as *const u8, len, &dbuf, 7) } {
                                Ok(_) => {
                                    let mut out = vec![0u8; len];
                                    dbuf.read(7, &mut out).unwrap();
                                    moved.fetch_add(2 * len as u64, Ordering::Relaxed);
                                    check(&out, off);
                                }
                                Err(e) => {
                                    errors.fetch_add(1, Ordering::Relaxed);
                                    eprintln!("typed error: {e}");
                                }
                            }
                        }
                        4 => {
                            // sync d2h into private memory, registered or not
                            let n = len.min(private.len - 1);
                            dbuf.write(0, &content[off..off + n]).unwrap();
                            if my_reg.is_none() && r.below(2) == 0 {
                                let p = private.ptr as usize + r.below(page);
                                // SAFETY: private mapping, outlives the registration.
                                unsafe { host::register(d, p, 4 * page) }.unwrap();
                                my_reg = Some(p);
                            }
                            let dst = private.ptr as usize + 1;
                            // SAFETY: inside the private mapping.
                            unsafe { host::copy_to_host(d, &dbuf, 0, dst as *mut u8, n) }.unwrap();
                            moved.fetch_add(2 * n as u64, Ordering::Relaxed);
                            check(&private.slice()[1..1 + n], off);
                            if let Some(p) = my_reg.take_if(|_| r.below(3) == 0) {
                                host::unregister(d, p).unwrap();
                            }
                        }
                        5 | 6 => {
                            // async: upload from shared (direct or staged), download to a Vec
                            // SAFETY: shared memory is never written and outlives the stream.
                            unsafe { stream.copy_to_device_async((base + off) as *const u8, len, &dbuf, 100) }.unwrap();
                            let mut out = vec![0u8; len];
                            stream.download(&dbuf, 100, &mut out).unwrap().wait().unwrap();
                            moved.fetch_add(2 * len as u64, Ordering::Relaxed);
                            check(&out, off);
                        }
                        _ => {
                            let n = 1 + r.below(64 << 10);
                            let p = host::alloc_pinned(d, n).unwrap();
                            // SAFETY: the block is n bytes, alive until free_pinned.
                            let blk = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), n) };
                            let m = n.min(content.len() - off);
                            blk[..m].copy_from_slice(&content[off..off + m]);
                            dbuf.write(0, &blk[..m]).unwrap();
                            blk[..m].fill(0);
                            dbuf.read(0, &mut blk[..m]).unwrap();
                            moved.fetch_add(2 * m as u64, Ordering::Relaxed);
                            check(&blk[..m], off);
                            host::free_pinned(d, p).unwrap();
                        }
                    }
                }
                if let Some(p) = my_reg {
                    host::unregister(d, p).unwrap();
                }
                stream.synchronize().unwrap();
            });
        }
    });
    for k in keys.into_inner().unwrap() {
        host::unregister(&d, k).unwrap();
    }
    assert_eq!(entries_of(&d), 0, "registry not empty at the end");
    let after = device_stats(&d);
    assert_eq!(after.live_imports, 0);
    assert_eq!(after.live_pinned, 0);
    let counted = (after.direct_bytes - before.direct_bytes) + (after.staged_bytes - before.staged_bytes);
    assert_eq!(counted, moved.load(Ordering::Relaxed), "byte counters disagree with the bytes copied");
    eprintln!(
        "{} operations, {} bytes, {} typed errors, direct {} staged {}",
        ops.load(Ordering::Relaxed),
        counted,
        errors.load(Ordering::Relaxed),
        after.direct_bytes - before.direct_bytes,
        after.staged_bytes - before.staged_bytes
    );
    drop(shared);
}

fn shared_len() -> usize {
    SHARED_PAGES * host::page_size()
}

/// Freed pinned blocks kept for reuse (`OpenOptions::pinned_cache`) while the device is
/// destroyed: three threads allocate, copy from (a stream upload and a synchronous copy),
/// free and now and then trim, and the main thread destroys the device under them. Nothing
/// outlives the teardown (no object counted, no validation error: a block kept after the
/// teardown freed the cache would be both), and the threads see typed errors only.
#[test]
fn pinned_cache_racing_destroy() {
    for round in 0..5 {
        let d = device_with(vkhost::OpenOptions { pinned_cache: Some(1 << 20), ..opts() }).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let reused = std::thread::scope(|sc| {
            let workers: Vec<_> = (0..3)
                .map(|t| {
                    let (d, stop) = (&*d, &stop);
                    sc.spawn(move || {
                        let Ok(gpu) = d.alloc_buffer(16384) else { return 0 };
                        let s = d.stream().ok();
                        let mut n = 0usize;
                        while !stop.load(Ordering::Relaxed) {
                            let len = 4096 * (1 + (n + t) % 3);
                            let Ok(p) = host::alloc_pinned(d, len) else { break };
                            // SAFETY: a live block of `len` bytes until the free_pinned below.
                            let bytes = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len) };
                            bytes.fill(n as u8);
                            if let Some(s) = &s {
                                let _ = s.upload(bytes, &gpu, 0);
                            }
                            // SAFETY: as above.
                            let _ = unsafe { host::copy_to_device(d, p.as_ptr(), len, &gpu, 0) };
                            let _ = host::free_pinned(d, p);
                            if n % 7 == 0 {
                                d.trim_pinned_cache();
                            }
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(150));
            let r = d.destroy();
            stop.store(true, Ordering::Relaxed);
            let ops: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
            assert!(ops > 0, "round {round}: no thread got to work");
            if r.is_err() {
                d.destroy().unwrap();
            }
            d.pinned_cache().reused
        });
        assert_eq!(d.live_objects(), vkhost::LiveObjects::default(), "round {round}");
        assert_eq!(d.validation_errors(), 0, "round {round}: {:?}", d.last_validation_error());
        eprintln!("pinned_cache_racing_destroy round {round}: {reused} blocks reused");
    }
}
