//! `--baseline cuda`: the same sweep through CUDA on the same GPU, in the same process.
//!
//! Built only with the cargo feature `cuda` (cudarc, loading libcuda at run time, so the
//! default build needs no CUDA). Where libcuda is absent it says so and the rest runs.
//!
//! Measured: pinned (cudaHostAlloc) and pageable h2d, d2h, bidir (pinned), device to device
//! (cudaMemcpy between two device allocations, size counted once, for `device_to_device_ce`),
//! and the small-async figures. There is no CUDA kernel copy to set beside the `_sm` testcases.

use crate::bench::{DirKind, Point};
use std::time::Duration;

#[cfg(not(feature = "cuda"))]
pub fn run(_sizes: &[u64], _iters: usize, _budget: Duration, _dirs: &[DirKind], notes: &mut Vec<String>) -> Vec<Point> {
    notes.push("CUDA baseline: this vkhost was built without the `cuda` feature (cargo build --release --features cuda)".into());
    Vec::new()
}

#[cfg(feature = "cuda")]
pub fn run(sizes: &[u64], iters: usize, budget: Duration, dirs: &[DirKind], notes: &mut Vec<String>) -> Vec<Point> {
    if !libcuda_present() {
        notes.push("CUDA baseline: libcuda.so.1 not found; CUDA columns left empty".into());
        return Vec::new();
    }
    match std::panic::catch_unwind(|| imp::run(sizes, iters, budget, dirs)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            notes.push(format!("CUDA baseline failed: {e}"));
            Vec::new()
        }
        Err(_) => {
            notes.push("CUDA baseline: cudarc panicked (driver too old?)".into());
            Vec::new()
        }
    }
}

#[cfg(feature = "cuda")]
fn libcuda_present() -> bool {
    // SAFETY: dlopen/dlclose of a library by name; RTLD_LAZY defers symbol resolution.
    unsafe {
        let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_LAZY);
        if h.is_null() {
            return false;
        }
        libc::dlclose(h);
    }
    true
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::bench::{measure, point};
    use crate::devices::anyhow_free::Result;
    use cudarc::driver::CudaContext;
    use serde_json::json;

    pub fn run(sizes: &[u64], iters: usize, budget: Duration, dirs: &[DirKind]) -> Result<Vec<Point>> {
        let ctx = CudaContext::new(0)?;
        let s1 = ctx.new_stream()?;
        let s2 = ctx.new_stream()?;
        // At least the small-async figure's 1000 x 4 KiB, whatever the sweep.
        let max = (*sizes.iter().max().unwrap_or(&4096) as usize).max(1000 * 4096);
        let mut d1 = s1.alloc_zeros::<u8>(max)?;
        let mut d2 = s1.alloc_zeros::<u8>(max)?;
        // SAFETY: pinned host memory of u8, fully written below before any read.
        let mut p1 = unsafe { ctx.alloc_pinned::<u8>(max) }?;
        // SAFETY: as above.
        let mut p2 = unsafe { ctx.alloc_pinned::<u8>(max) }?;
        p1.as_mut_slice()?.fill(7);
        p2.as_mut_slice()?.fill(7);
        let mut v1 = vec![7u8; max];
        let mut out = Vec::new();
        for &size in sizes {
            let n = size as usize;
            for &dir in dirs {
                for pinned in [true, false] {
                    let path = match dir {
                        DirKind::D2d if !pinned => continue,
                        DirKind::D2d => "device",
                        _ if pinned => "pinned",
                        _ => "pageable",
                    };
                    let s = match dir {
                        DirKind::H2d => measure(iters, budget, || {
                            let mut dv = d1.slice_mut(..n);
                            if pinned {
                                s1.memcpy_htod(&p1.as_slice()?[..n], &mut dv)?;
                            } else {
                                s1.memcpy_htod(&v1[..n], &mut dv)?;
                            }
                            s1.synchronize()?;
                            Ok(())
                        })?,
                        DirKind::D2h => measure(iters, budget, || {
                            let dv = d1.slice(..n);
                            if pinned {
                                s1.memcpy_dtoh(&dv, &mut p1.as_mut_slice()?[..n])?;
                            } else {
                                s1.memcpy_dtoh(&dv, &mut v1[..n])?;
                            }
                            s1.synchronize()?;
                            Ok(())
                        })?,
                        // Two streams, one h2d and one d2h at once, as cuda_baseline.py does.
                        DirKind::Bidir if pinned => measure(iters, budget, || {
                            let mut dv = d1.slice_mut(..n);
                            s1.memcpy_htod(&p1.as_slice()?[..n], &mut dv)?;
                            let dv2 = d2.slice(..n);
                            s2.memcpy_dtoh(&dv2, &mut p2.as_mut_slice()?[..n])?;
                            s1.synchronize()?;
                            s2.synchronize()?;
                            Ok(())
                        })?,
                        DirKind::Bidir => continue,
                        // cudaMemcpy device to device, as nvbandwidth's device-local copy.
                        DirKind::D2d => measure(iters, budget, || {
                            let src = d1.slice(..n);
                            let mut dst = d2.slice_mut(..n);
                            s1.memcpy_dtod(&src, &mut dst)?;
                            s1.synchronize()?;
                            Ok(())
                        })?,
                    };
                    let moved = if dir == DirKind::Bidir { 2 * size } else { size };
                    let mut p = point("cuda", "copy", path, dir.name(), size, moved, s);
                    if dir == DirKind::Bidir {
                        p.extra = json!({"mode": "two CUDA streams"});
                    }
                    out.push(p);
                }
            }
        }
        // The small-async figures: 1000 async 4 KiB copies + one synchronize vs 1000
        // synchronous, to consecutive and to scattered offsets, as the Vulkan ones.
        let k = 4096usize;
        let many = 1000usize;
        type Offset<'a> = &'a dyn Fn(usize) -> usize;
        let patterns: [(&str, Offset); 2] = [("", &|i| i * k), ("-scattered", &|i| (i * 617) % many * k)];
        for (suffix, dst_of) in patterns {
            let mut run = |sync_each: bool| {
                measure(iters.min(5), budget, || {
                    for i in 0..many {
                        let mut dv = d1.slice_mut(dst_of(i)..dst_of(i) + k);
                        s1.memcpy_htod(&p1.as_slice()?[i * k..(i + 1) * k], &mut dv)?;
                        if sync_each {
                            s1.synchronize()?;
                        }
                    }
                    s1.synchronize()?;
                    Ok(())
                })
            };
            let a = run(false)?;
            let sy = run(true)?;
            let offsets = if suffix.is_empty() { "consecutive" } else { "scattered" };
            for (dir, s, note) in [
                (format!("async{suffix}"), a, format!("{many} x 4K async to {offsets} offsets + synchronize")),
                (format!("sync{suffix}"), sy, format!("{many} x 4K synchronous to {offsets} offsets")),
            ] {
                let mut p = point("cuda", "small-async", "pinned", &dir, k as u64, (many * k) as u64, s);
                p.note = note;
                out.push(p);
            }
        }
        Ok(out)
    }
}
