//! `--baseline cuda`: the same sweep through CUDA on the same GPU, in the same process.
//!
//! Built only with the cargo feature `cuda` (cudarc, loading libcuda at run time, so the
//! default build needs no CUDA). Where libcuda is absent it says so and the rest runs.
//!
//! Measured, for the copy-engine testcases: pinned (cudaHostAlloc) and pageable h2d, d2h,
//! bidir (pinned), device to device (cudaMemcpy between two device allocations, size counted
//! once, for `device_to_device_ce`), and the small-async figures.
//!
//! For `host_to_device_sm` and `device_to_host_sm` (and their `_registered_sm` kin, compared
//! like `_registered_ce` with CUDA's pinned figure), CUDA's SM copy: pinned host memory
//! allocated mapped (`cuMemHostAlloc` with `DEVICEMAP`), its device address
//! (`cuMemHostGetDevicePointer`), and a copy kernel on the SMs reading or writing it across the
//! link, as nvbandwidth's `_sm` testcases do. The kernel is hand-written PTX (`COPY_PTX`: a
//! grid-stride loop of 16-byte vectors and a byte tail) that the driver JIT-compiles
//! (`cuModuleLoadData`), so no CUDA toolkit is needed to build. Timed like the other points:
//! launch + stream synchronize, wall clock.
//!
//! Any CUDA failure (no libcuda, a JIT error, a launch error, a panic in cudarc) becomes a note
//! and leaves the Vulkan results alone; a copy that does not verify is marked FAIL.

use crate::bench::{DirKind, Point};
use std::time::Duration;

/// What the CUDA baseline measures: the counterparts of the selected testcases.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct Plan<'a> {
    pub sizes: &'a [u64],
    pub iters: usize,
    pub budget: Duration,
    /// cudaMemcpy directions, for the copy-engine (`_ce`) testcases.
    pub dirs: Vec<DirKind>,
    /// h2d and d2h by CUDA's SM copy kernel over mapped pinned memory, for the `_sm` testcases.
    pub sm: Vec<DirKind>,
    /// The small-async figures.
    pub small_async: bool,
    /// The Vulkan device's PCI address (`dddd:bb:dd.f`): the CUDA device measured is the one
    /// at that address, so that the ratios compare one GPU. `None` (no VK_EXT_pci_bus_info):
    /// CUDA device 0, with a note.
    pub pci: Option<String>,
}

impl Plan<'_> {
    fn is_empty(&self) -> bool {
        self.dirs.is_empty() && self.sm.is_empty() && !self.small_async
    }
}

/// The entry point of `COPY_PTX`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const COPY_ENTRY: &str = "vkhost_copy_v4";

/// CUDA's SM copy kernel, `vkhost_copy_v4(src, dst, n)`: `dst[0, n) = src[0, n)`, 16-byte
/// vectors over a grid-stride loop, then the `n % 16` tail bytes, one per thread, by the
/// grid's first threads (a grid has at least `THREADS` of them). Both addresses must be
/// 16-byte aligned. PTX ISA 7.0 for sm_52 and later, so any current driver JIT-compiles it;
/// nothing in it needs more.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const COPY_PTX: &str = r#"//
// vkhost CUDA SM copy baseline: vkhost_copy_v4(src, dst, n) copies n bytes.
//
.version 7.0
.target sm_52
.address_size 64

.visible .entry vkhost_copy_v4(
	.param .u64 p_src,
	.param .u64 p_dst,
	.param .u64 p_n
)
{
	.reg .pred 	%p<4>;
	.reg .b16 	%rs<2>;
	.reg .b32 	%r<11>;
	.reg .b64 	%rd<14>;

	ld.param.u64 	%rd1, [p_src];
	ld.param.u64 	%rd2, [p_dst];
	ld.param.u64 	%rd3, [p_n];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd2, %rd2;
	// r5: this thread's index in the grid; r6: threads in the grid
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mov.u32 	%r4, %nctaid.x;
	mad.lo.u32 	%r5, %r1, %r2, %r3;
	mul.lo.u32 	%r6, %r4, %r2;
	// rd4: vector index, rd5: stride in vectors, rd6: whole vectors (n / 16)
	cvt.u64.u32 	%rd4, %r5;
	cvt.u64.u32 	%rd5, %r6;
	shr.u64 	%rd6, %rd3, 4;
	setp.ge.u64 	%p1, %rd4, %rd6;
	@%p1 bra 	$L_tail;
$L_vec:
	shl.b64 	%rd7, %rd4, 4;
	add.s64 	%rd8, %rd1, %rd7;
	add.s64 	%rd9, %rd2, %rd7;
	ld.global.v4.u32 	{%r7, %r8, %r9, %r10}, [%rd8];
	st.global.v4.u32 	[%rd9], {%r7, %r8, %r9, %r10};
	add.s64 	%rd4, %rd4, %rd5;
	setp.lt.u64 	%p2, %rd4, %rd6;
	@%p2 bra 	$L_vec;
$L_tail:
	// byte rd11 = (n / 16) * 16 + thread index, copied when below n
	shl.b64 	%rd10, %rd6, 4;
	cvt.u64.u32 	%rd11, %r5;
	add.s64 	%rd11, %rd10, %rd11;
	setp.ge.u64 	%p3, %rd11, %rd3;
	@%p3 bra 	$L_done;
	add.s64 	%rd12, %rd1, %rd11;
	add.s64 	%rd13, %rd2, %rd11;
	ld.global.u8 	%rs1, [%rd12];
	st.global.u8 	[%rd13], %rs1;
$L_done:
	ret;
}
"#;

/// Threads per block of the SM copy.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const THREADS: u32 = 256;

/// Blocks per SM at most: 4 x 256 threads keep about 16 KiB of loads in flight per SM, far
/// above what the link needs to stay busy (an H200: 132 SMs, 528 blocks).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
const BLOCKS_PER_SM: u32 = 4;

/// Blocks for an `n`-byte copy on `sms` SMs: one vector per thread where that is fewer than the
/// device's fill, at least one block (the tail needs up to 15 threads).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn grid(n: u64, sms: u32) -> u32 {
    let need = (n / 16).div_ceil(u64::from(THREADS)).max(1);
    need.min(u64::from(sms.max(1)) * u64::from(BLOCKS_PER_SM)) as u32
}

#[cfg(not(feature = "cuda"))]
pub fn run(plan: &Plan, notes: &mut Vec<String>) -> Vec<Point> {
    if !plan.is_empty() {
        notes.push(
            "CUDA baseline: this vkhost was built without the `cuda` feature (cargo build --release --features vkhost-cli/cuda)".into(),
        );
    }
    Vec::new()
}

#[cfg(feature = "cuda")]
pub fn run(plan: &Plan, notes: &mut Vec<String>) -> Vec<Point> {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    if plan.is_empty() {
        notes.push("CUDA baseline: none of the selected testcases has a CUDA counterpart".into());
        return Vec::new();
    }
    if !libcuda_present() {
        notes.push("CUDA baseline: libcuda.so.1 not found; CUDA columns left empty".into());
        return Vec::new();
    }
    let ordinal = match catch_unwind(|| ordinal(plan.pci.as_deref())) {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => {
            notes.push(format!("CUDA baseline: {e}; CUDA columns left empty"));
            return Vec::new();
        }
        Err(_) => {
            notes.push("CUDA baseline: cudarc panicked (driver too old?)".into());
            return Vec::new();
        }
    };
    if plan.pci.is_none() {
        notes.push("CUDA baseline: the Vulkan device's PCI address is unknown (no VK_EXT_pci_bus_info): CUDA device 0 measured".into());
    }
    let mut out = Vec::new();
    if !plan.dirs.is_empty() || plan.small_async {
        match catch_unwind(|| imp::run(plan, ordinal)) {
            Ok(Ok(v)) => out = v,
            Ok(Err(e)) => notes.push(format!("CUDA baseline failed: {e}")),
            Err(_) => notes.push("CUDA baseline: cudarc panicked (driver too old?)".into()),
        }
    }
    if !plan.sm.is_empty() {
        // The points measured before a failure stay (a panic leaves them as they were pushed).
        let mut sm_notes = Vec::new();
        let r = catch_unwind(AssertUnwindSafe(|| sm::run(plan, ordinal, &mut out, &mut sm_notes)));
        notes.append(&mut sm_notes);
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => notes.push(format!("CUDA SM copy baseline failed: {e}")),
            Err(_) => notes.push("CUDA SM copy baseline: cudarc panicked (driver too old?)".into()),
        }
    }
    out
}

/// The CUDA ordinal of the GPU at PCI address `pci` (as [`Plan::pci`]); 0 when it is unknown.
/// An address no CUDA device has (a GPU of another vendor, or CUDA_VISIBLE_DEVICES hiding it)
/// is an error: the baseline would measure another GPU.
#[cfg(feature = "cuda")]
fn ordinal(pci: Option<&str>) -> crate::devices::anyhow_free::Result<usize> {
    use cudarc::driver::{CudaContext, result, sys::CUdevice_attribute as A};
    let Some(pci) = pci else { return Ok(0) };
    let n = CudaContext::device_count()?;
    for i in 0..n {
        let d = result::device::get(i)?;
        // SAFETY: `d` came from cuDeviceGet just above.
        let attr = |a| unsafe { result::device::get_attribute(d, a) };
        let at = format!(
            "{:04x}:{:02x}:{:02x}.",
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?
        );
        if pci.starts_with(&at) {
            return Ok(i as usize);
        }
    }
    Err(format!("no CUDA device at the Vulkan device's PCI address {pci} ({n} CUDA device(s))").into())
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

    pub fn run(plan: &Plan, ordinal: usize) -> Result<Vec<Point>> {
        let (sizes, iters, budget, dirs) = (plan.sizes, plan.iters, plan.budget, &plan.dirs[..]);
        let ctx = CudaContext::new(ordinal)?;
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
                    // Ctrl-C: the points so far, as the Vulkan sweep and the SM copies stop.
                    if crate::bench::interrupted() {
                        return Ok(out);
                    }
                    let path = match dir {
                        DirKind::D2d if !pinned => continue,
                        DirKind::D2d => "device",
                        _ if pinned => "pinned",
                        _ => "pageable",
                    };
                    let mut warm = 0;
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
                        // Two streams, one h2d and one d2h at once, as cuda_baseline.py does;
                        // warmed up for as long as the Vulkan pairs are.
                        DirKind::Bidir if pinned => {
                            let mut pair = || -> Result<()> {
                                let mut dv = d1.slice_mut(..n);
                                s1.memcpy_htod(&p1.as_slice()?[..n], &mut dv)?;
                                let dv2 = d2.slice(..n);
                                s2.memcpy_dtoh(&dv2, &mut p2.as_mut_slice()?[..n])?;
                                s1.synchronize()?;
                                s2.synchronize()?;
                                Ok(())
                            };
                            warm = crate::bench::warm_up(crate::bench::BIDIR_WARM_UP, budget, &mut pair)?;
                            measure(iters, budget, pair)?
                        }
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
                        // `measure`'s own untimed run after the warm-up pairs.
                        p.warmup = warm + 1;
                    }
                    out.push(p);
                }
            }
        }
        if !plan.small_async || crate::bench::interrupted() {
            return Ok(out);
        }
        // The small-async figures: 1000 async 4 KiB copies + one synchronize vs 1000
        // synchronous, to consecutive and to scattered offsets, as the Vulkan ones.
        let k = 4096usize;
        let many = 1000usize;
        type Offset<'a> = &'a dyn Fn(usize) -> usize;
        let patterns: [(&str, Offset); 2] = [("", &|i| i * k), ("-scattered", &|i| (i * 617) % many * k)];
        for (suffix, dst_of) in patterns {
            if crate::bench::interrupted() {
                return Ok(out);
            }
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

/// CUDA's SM copy over mapped pinned memory (the `_sm` testcases' counterpart).
#[cfg(feature = "cuda")]
mod sm {
    use super::*;
    use crate::bench::{interrupted, measure, pattern, point};
    use crate::devices::anyhow_free::Result;
    use crate::stats::size_label;
    use cudarc::driver::{CudaContext, CudaFunction, CudaStream, DevicePtr, LaunchConfig, PushKernelArg, result, sys};
    use cudarc::nvrtc::Ptx;
    use serde_json::json;
    use std::ffi::c_void;
    use std::sync::Arc;

    /// Pinned host memory allocated mapped, with the address kernels reach it by. Holds the
    /// context so that it is freed before the context goes.
    struct Mapped {
        ctx: Arc<CudaContext>,
        ptr: *mut u8,
        len: usize,
        dptr: sys::CUdeviceptr,
    }

    impl Mapped {
        fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Mapped> {
            ctx.bind_to_thread()?;
            let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
            // SAFETY: a fresh allocation of `len` bytes, freed once, by Drop.
            let ptr = unsafe { result::malloc_host(len, flags) }.map_err(|e| format!("cuMemHostAlloc(DEVICEMAP) of {len} bytes: {e}"))?;
            if ptr.is_null() {
                return Err("cuMemHostAlloc returned null".into());
            }
            // From here Drop frees it, whatever fails below.
            let mut m = Mapped { ctx: ctx.clone(), ptr: ptr.cast(), len, dptr: 0 };
            // SAFETY: `len` writable bytes just allocated; zeroing makes them initialized for
            // `bytes`.
            unsafe { std::ptr::write_bytes(m.ptr, 0, len) };
            let mut d: sys::CUdeviceptr = 0;
            // SAFETY: a pointer returned by cuMemHostAlloc with DEVICEMAP in the current
            // context; the flags argument must be 0.
            unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, ptr, 0) }.result().map_err(|e| format!("cuMemHostGetDevicePointer: {e}"))?;
            if d == 0 {
                return Err("cuMemHostGetDevicePointer returned address 0".into());
            }
            m.dptr = d;
            Ok(m)
        }

        /// The memory, for the CPU. Only between kernels: every launch here is synchronized
        /// before this is called.
        fn bytes(&mut self) -> &mut [u8] {
            // SAFETY: `len` bytes allocated and initialized in `new`, alive until Drop; `&mut
            // self` makes this the only CPU view, and no kernel runs while it lives.
            unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
        }
    }

    impl Drop for Mapped {
        fn drop(&mut self) {
            // Not bind_to_thread: it fails on an error recorded earlier (a faulted kernel), and
            // the memory would leak. Failures are logged, never a panic.
            // SAFETY: the context is alive (held); `ptr` came from cuMemHostAlloc and is freed
            // only here.
            let r = unsafe { result::ctx::set_current(self.ctx.cu_ctx()).and_then(|()| result::free_host(self.ptr.cast())) };
            if let Err(e) = r {
                log::warn!("CUDA SM baseline: cuMemFreeHost failed: {e}");
            }
        }
    }

    /// The copy kernel, JIT-compiled from `COPY_PTX`.
    fn load(ctx: &Arc<CudaContext>) -> Result<CudaFunction> {
        let module = match ctx.load_module(Ptx::from_src(COPY_PTX)) {
            Ok(m) => m,
            Err(e) => return Err(format!("loading the PTX copy kernel (cuModuleLoadData): {e}{}", jit_log(ctx)).into()),
        };
        Ok(module.load_function(COPY_ENTRY).map_err(|e| format!("cuModuleGetFunction({COPY_ENTRY}): {e}"))?)
    }

    /// After a failed load: the JIT's error log, from loading the PTX again with a log buffer.
    fn jit_log(ctx: &Arc<CudaContext>) -> String {
        let Ok(src) = std::ffi::CString::new(COPY_PTX) else { return String::new() };
        if ctx.bind_to_thread().is_err() {
            return String::new();
        }
        let mut log = vec![0u8; 16 << 10];
        let mut opts = [sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER, sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        // The size option's value is the number itself, in the pointer's place.
        let mut vals: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
        let mut module: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: a NUL-terminated image, two options with their values (a buffer of the size
        // given), and an out-pointer for the module, unloaded at once if it loads.
        let r = unsafe { sys::cuModuleLoadDataEx(&mut module, src.as_ptr().cast(), 2, opts.as_mut_ptr(), vals.as_mut_ptr()) };
        if r == sys::CUresult::CUDA_SUCCESS {
            // SAFETY: the module just loaded, used by nothing.
            unsafe { sys::cuModuleUnload(module) };
            return String::new();
        }
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]).trim().replace('\n', "; ");
        if text.is_empty() { String::new() } else { format!("; JIT log: {text}") }
    }

    /// One launch of the copy kernel: `n` bytes from device address `src` to `dst`.
    fn launch(s: &Arc<CudaStream>, f: &CudaFunction, src: u64, dst: u64, n: u64, blocks: u32) -> Result<()> {
        let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut b = s.launch_builder(f);
        b.arg(&src).arg(&dst).arg(&n);
        // SAFETY: the entry takes (.u64 src, .u64 dst, .u64 n), pushed in that order as u64s;
        // it reads [src, src + n) and writes [dst, dst + n), which the caller guarantees are
        // 16-aligned allocations of at least n bytes that outlive the launch (every launch is
        // synchronized before anything is freed).
        unsafe { b.launch(cfg) }.map_err(|e| format!("cuLaunchKernel({COPY_ENTRY}, {blocks} x {THREADS}): {e}"))?;
        Ok(())
    }

    /// Every size in `plan.sm`'s directions: a checked copy, then the timed ones. Points go to
    /// `out` as they are measured; a copy that does not verify is a FAIL point with a note.
    pub fn run(plan: &Plan, ordinal: usize, out: &mut Vec<Point>, notes: &mut Vec<String>) -> Result<()> {
        let max = plan.sizes.iter().copied().max().unwrap_or(0) as usize;
        if max == 0 {
            return Ok(());
        }
        let ctx = CudaContext::new(ordinal)?;
        let s = ctx.new_stream()?;
        let f = load(&ctx)?;
        let sms = ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let sms = u32::try_from(sms).ok().filter(|&n| n > 0).ok_or_else(|| format!("the device reports {sms} SMs"))?;
        let mut host = Mapped::new(&ctx, max)?;
        let mut dev = s.alloc_zeros::<u8>(max)?;
        let dptr = {
            let (p, _record) = dev.device_ptr(&s);
            p
        };
        if host.dptr % 16 != 0 || dptr % 16 != 0 {
            return Err(format!("buffers not 16-byte aligned (host {:#x}, device {dptr:#x})", host.dptr).into());
        }
        let (mut want, mut got) = (vec![0u8; max], vec![0u8; max]);
        for &size in plan.sizes {
            for &dir in &plan.sm {
                if interrupted() {
                    return Ok(());
                }
                let n = size as usize;
                let blocks = grid(size, sms);
                let (src, dst) = if dir == DirKind::H2d { (host.dptr, dptr) } else { (dptr, host.dptr) };
                let copy = || -> Result<()> {
                    launch(&s, &f, src, dst, size, blocks)?;
                    s.synchronize()?;
                    Ok(())
                };
                let (want, got) = (&mut want[..n], &mut got[..n]);
                pattern(want, size ^ (dir as u64) << 40 ^ 0xC0DA << 48);
                let bad = if dir == DirKind::H2d {
                    host.bytes()[..n].copy_from_slice(want);
                    // Zeroed first, so a copy that did nothing cannot pass on an earlier point's bytes.
                    s.memset_zeros(&mut dev.slice_mut(..n))?;
                    copy()?;
                    s.memcpy_dtoh(&dev.slice(..n), got)?;
                    s.synchronize()?;
                    first_difference(got, want)
                } else {
                    s.memcpy_htod(&*want, &mut dev.slice_mut(..n))?;
                    s.synchronize()?;
                    host.bytes()[..n].fill(0);
                    copy()?;
                    first_difference(&host.bytes()[..n], want)
                };
                if let Some((i, g, w)) = bad {
                    notes.push(format!(
                        "CUDA SM copy {} {}: FAIL, round trip mismatch, first difference at byte {i}: got {g:#04x}, want {w:#04x}",
                        dir.name(),
                        size_label(size)
                    ));
                }
                let t = measure(plan.iters, plan.budget, copy)?;
                let mut p = point("cuda", "copy", "pinned", dir.name(), size, size, t);
                p.sm = true;
                p.verified = Some(bad.is_none());
                p.extra = json!({
                    "kernel": COPY_ENTRY,
                    "blocks": blocks,
                    "threads_per_block": THREADS,
                    "host_memory": "cuMemHostAlloc(DEVICEMAP|PORTABLE)",
                });
                out.push(p);
            }
        }
        Ok(())
    }

    /// The first byte where `got` differs from `want`: (index, got, want).
    fn first_difference(got: &[u8], want: &[u8]) -> Option<(usize, u8, u8)> {
        got.iter().zip(want).position(|(a, b)| a != b).map(|i| (i, got[i], want[i]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Register files declared by `.reg .TYPE %name<N>;`: (name, N).
    fn declared_registers(ptx: &str) -> Vec<(String, usize)> {
        ptx.lines()
            .filter_map(|l| l.trim().strip_prefix(".reg "))
            .filter_map(|l| {
                let decl = l.split_whitespace().nth(1)?.trim_end_matches(';');
                let (name, count) = decl.split_once('<')?;
                Some((name.to_string(), count.trim_end_matches('>').parse().ok()?))
            })
            .collect()
    }

    /// The statements of the entry's body, comments and blank lines removed.
    fn body(ptx: &str) -> Vec<&str> {
        let start = ptx.find('{').expect("a body");
        let end = ptx.rfind('}').expect("a closed body");
        ptx[start + 1..end].lines().map(|l| l.split("//").next().unwrap_or("").trim()).filter(|l| !l.is_empty()).collect()
    }

    #[test]
    fn the_copy_ptx_is_well_formed() {
        let ptx = COPY_PTX;
        // Brackets balance and never close before they open.
        for (open, close) in [('{', '}'), ('(', ')'), ('[', ']'), ('<', '>')] {
            let mut depth = 0i32;
            for c in ptx.chars() {
                depth += i32::from(c == open) - i32::from(c == close);
                assert!(depth >= 0, "{close} before its {open}");
            }
            assert_eq!(depth, 0, "unbalanced {open}{close}");
        }
        assert_eq!(ptx.matches('{').count(), 3, "the body and the two vector operands");
        // The module header, in the order PTX requires, before anything else.
        let directives: Vec<&str> = ptx.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("//")).take(3).collect();
        assert_eq!(directives, [".version 7.0", ".target sm_52", ".address_size 64"]);
        // The entry the loader asks for, with three u64 parameters, each loaded once.
        assert_eq!(ptx.matches(&format!(".visible .entry {COPY_ENTRY}(")).count(), 1);
        let params: Vec<&str> =
            ptx.lines().filter_map(|l| l.trim().strip_prefix(".param .u64 ")).map(|p| p.trim_end_matches(',')).collect();
        assert_eq!(params, ["p_src", "p_dst", "p_n"]);
        assert_eq!(ptx.matches("ld.param.u64").count(), 3);
        for p in &params {
            assert_eq!(ptx.matches(&format!("[{p}];")).count(), 1, "{p} loaded once");
        }
        // Every statement ends with ';', labels with ':'; every branch has its label.
        let stmts = body(ptx);
        let labels: Vec<&str> = stmts.iter().filter_map(|s| s.strip_suffix(':')).collect();
        assert_eq!(labels, ["$L_vec", "$L_tail", "$L_done"]);
        for s in &stmts {
            assert!(s.ends_with(';') || s.ends_with(':'), "unterminated: {s}");
            if let Some((_, target)) = s.split_once(" bra") {
                let target = target.trim().trim_end_matches(';');
                assert!(labels.contains(&target), "branch to an undefined label: {s}");
            }
        }
        assert_eq!(stmts.last(), Some(&"ret;"));
        // Every register used is declared, within its count; only the special registers
        // (thread and block indices) are not.
        let regs = declared_registers(ptx);
        assert_eq!(regs.len(), 4);
        let special = ["%tid.x", "%ntid.x", "%ctaid.x", "%nctaid.x"];
        for s in stmts.iter().filter(|s| !s.starts_with(".reg")) {
            for (at, _) in s.match_indices('%') {
                let word: String = s[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '%' || *c == '.').collect();
                if special.contains(&word.as_str()) {
                    continue;
                }
                let word = word.trim_end_matches('.');
                let split = word.find(|c: char| c.is_ascii_digit()).unwrap_or_else(|| panic!("register without index: {word} in {s}"));
                let (name, index) = word.split_at(split);
                let index: usize = index.parse().unwrap_or_else(|_| panic!("bad register {word} in {s}"));
                let count = regs.iter().find(|r| r.0 == name).unwrap_or_else(|| panic!("undeclared {name} in {s}")).1;
                assert!(index < count, "{word} past its declaration {name}<{count}> in {s}");
            }
        }
        // The 16-byte vector copy, and a byte copy for the tail.
        for op in ["ld.global.v4.u32", "st.global.v4.u32", "ld.global.u8", "st.global.u8", "cvta.to.global.u64"] {
            assert!(ptx.contains(op), "{op}");
        }
        assert!(!ptx.contains('\0'), "cuModuleLoadData takes a NUL-terminated string");
    }

    #[test]
    fn the_grid_fills_the_device_and_no_more() {
        assert_eq!(grid(0, 132), 1);
        assert_eq!(grid(15, 132), 1);
        assert_eq!(grid(4096, 132), 1);
        assert_eq!(grid(16 * 256 + 16, 132), 2);
        assert_eq!(grid(256 << 20, 132), 132 * BLOCKS_PER_SM);
        assert_eq!(grid(1 << 40, 132), 132 * BLOCKS_PER_SM);
        assert_eq!(grid(1 << 20, 0), BLOCKS_PER_SM);
    }

    /// The kernel's index arithmetic, step for step in Rust: every byte is written exactly
    /// once, whatever the size and grid.
    #[test]
    fn the_grid_stride_loop_and_tail_cover_every_byte_once() {
        for n in [0u64, 1, 15, 16, 17, 255, 4096, 4097, 4111, 70_001] {
            for blocks in [1u32, 2, 3] {
                let threads = u64::from(blocks * THREADS);
                let mut hits = vec![0u8; n as usize];
                for t in 0..threads {
                    let nvec = n / 16;
                    let mut i = t;
                    while i < nvec {
                        for b in &mut hits[(i * 16) as usize..(i * 16 + 16) as usize] {
                            *b += 1;
                        }
                        i += threads;
                    }
                    let byte = nvec * 16 + t;
                    if byte < n {
                        hits[byte as usize] += 1;
                    }
                }
                assert!(hits.iter().all(|&h| h == 1), "n {n}, {blocks} blocks");
            }
        }
    }
}
