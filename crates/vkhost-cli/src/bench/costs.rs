//! Costs: register/unregister and alloc_pinned/free_pinned per size, and `find` with 1, 100
//! and 10 000 live registrations.

use super::paths::touched_pages;
use super::{Ctx, point};
use crate::devices::anyhow_free::Result;
use crate::stats::{Summary, size_label, summarize};
use std::time::Instant;
use vkhost::host;

/// register/unregister, alloc_pinned/free_pinned per size; find at 1, 100, 10 000 entries.
pub(super) fn costs(cx: &mut Ctx, sizes: &[u64], notes: &mut Vec<String>) -> Result<()> {
    let dev = cx.dev.clone();
    let iters = cx.iters;
    let can_register = dev.host_registration().is_ok();
    for &size in sizes {
        if super::interrupted() {
            return Ok(());
        }
        let n = size as usize;
        cx.pb.set_message(format!("costs {}", size_label(size)));
        if can_register {
            let mut pages = touched_pages(n, false)?;
            let (mut reg, mut unreg, mut released) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..iters.max(1) {
                let t = Instant::now();
                // SAFETY: `pages` outlives the unregister below.
                unsafe { host::register(&dev, pages.slice().as_mut_ptr(), n) }?;
                reg.push(t.elapsed().as_secs_f64());
                let t = Instant::now();
                host::unregister(&dev, pages.ptr)?;
                unreg.push(t.elapsed().as_secs_f64());
                // `unregister` returns once no work can touch the pages and hands the import to
                // the background releaser, which unpins them. Wait for that here
                // (`Device::release_queued`), outside the timed register: otherwise the next
                // `register` is timed while the previous import is being unpinned on another
                // thread, a cost of the loop and not of `register`.
                // The wait is reported too: unregister + release, the whole cost of the pages.
                dev.release_queued();
                released.push(t.elapsed().as_secs_f64());
            }
            for (op, v) in [("register", &reg), ("unregister", &unreg), ("unregister+release", &released)] {
                if let Some(s) = summarize(v) {
                    let mut p = point("vulkan", "cost", "registered", op, size, size, s);
                    p.warmup = 0;
                    cx.points.push(p);
                }
            }
        }
        let (mut al, mut fr) = (Vec::new(), Vec::new());
        for _ in 0..iters.max(1) {
            let t = Instant::now();
            let p = host::alloc_pinned(&dev, n)?;
            al.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            host::free_pinned(&dev, p)?;
            fr.push(t.elapsed().as_secs_f64());
        }
        for (op, v) in [("alloc_pinned", &al), ("free_pinned", &fr)] {
            if let Some(s) = summarize(v) {
                let mut p = point("vulkan", "cost", "pinned", op, size, size, s);
                p.warmup = 0;
                cx.points.push(p);
            }
        }
    }
    if !can_register {
        notes.push("register costs and find: skipped, host registration unavailable".into());
        return Ok(());
    }
    let counts: &[usize] = &[1, 100, 10_000];
    for &count in counts {
        if super::interrupted() {
            return Ok(());
        }
        cx.pb.set_message(format!("find with {count} registrations"));
        let page = host::page_size();
        let mut pages = touched_pages(2 * count * page, false)?;
        let base = pages.slice().as_mut_ptr() as usize;
        let mut done = 0;
        let mut r: Result<()> = Ok(());
        for i in 0..count {
            // SAFETY: `pages` outlives the unregisters below.
            if let Err(e) = unsafe { host::register(&dev, base + 2 * i * page, page) } {
                r = Err(e.into());
                break;
            }
            done += 1;
        }
        if r.is_ok() {
            let lookups = 200_000usize;
            let mut x = 12345usize;
            let mut hits = 0usize;
            let t = Instant::now();
            for _ in 0..lookups {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let i = (x >> 33) % count;
                hits += host::find(&dev, base + 2 * i * page + 64, 256).is_some() as usize;
            }
            let per = t.elapsed().as_secs_f64() / lookups as f64;
            if hits != lookups {
                cx.failures += 1;
                eprintln!("FAIL find: {hits} of {lookups} lookups found their registration");
            }
            let s = Summary::single(per, lookups);
            let mut p = point("vulkan", "find", "registered", "find", count as u64, 0, s);
            p.verified = Some(hits == lookups);
            p.warmup = 0;
            p.note = format!("{count} live registrations");
            cx.points.push(p);
        }
        for i in 0..done {
            host::unregister(&dev, base + 2 * i * page)?;
        }
        r?;
    }
    // The testcases after these start with no release still queued.
    dev.release_queued();
    Ok(())
}
