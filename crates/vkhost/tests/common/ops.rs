//! The operations the fault sweeps run (tests/fault.rs, tests/unwind_sweep.rs), and the state
//! they share, made before a fault is armed.
//!
//! Every destination a read or download writes lies in memory the test owns past the
//! operation (`Env::scratch`, `Env::mem`, the pinned block), and every stream an operation
//! makes stays in `Env::keep` until the operation succeeds, so that a test can check that
//! nothing writes there after a failed or unwound call.

use super::{Pages, opts, pattern};
use vkhost::host;
use vkhost::{Device, OpenOptions, PinnedBuffer, Stream};

/// Small staging chunks so staged copies span several batches and slots.
pub fn fopts() -> OpenOptions {
    OpenOptions { staging_chunk: 256 << 10, staging_slots: 2, ..opts() }
}
/// One cached pipeline (each launch of `op_launch` makes its kernel's again), descriptors pushed
/// or written into sets.
pub fn launch_opts(push: bool) -> OpenOptions {
    OpenOptions { max_pipelines: 1, push_descriptors: push, ..fopts() }
}

/// Bytes of `Env::scratch`.
pub const SCRATCH: usize = 1 << 20;

/// State an operation may use, made before the fault window.
pub struct Env {
    pub dev: Device,
    /// 16 pages; pages 8-11 are registered (`reg_base`).
    pub mem: Pages,
    pub reg_base: usize,
    pub pinned: PinnedBuffer,
    pub buf: vkhost::DeviceBuffer,
    /// Host destination of downloads and reads: checked for late writes.
    pub scratch: Pages,
    /// Streams the op made, kept past an unwind or a failure (cleared when the op succeeds).
    pub keep: Vec<Stream>,
    /// A registration of op_register, between its register and unregister.
    pub extra_reg: Option<usize>,
}

impl Env {
    pub fn with(o: &OpenOptions) -> Env {
        let dev = Device::open_default_with(o).expect("device");
        let mem = Pages::new(16 * 4096);
        let reg_base = mem.ptr as usize + 8 * 4096;
        // SAFETY: the mapping outlives the registration (Env drops it after destroy).
        unsafe { host::register(&dev, reg_base, 4 * 4096) }.unwrap();
        let pinned = PinnedBuffer::new(&dev, 1 << 20).unwrap();
        let buf = dev.alloc_buffer(1 << 20).unwrap();
        Env { dev, mem, reg_base, pinned, buf, scratch: Pages::new(SCRATCH), keep: Vec::new(), extra_reg: None }
    }
}

pub type Op = fn(&mut Env) -> vkhost::Result<()>;

/// A registration of 3 pages (not page-aligned) and its unregister.
pub fn op_register(e: &mut Env) -> vkhost::Result<()> {
    let p = e.mem.ptr as usize + 100;
    // SAFETY: inside the live mapping, not overlapping the Env registration.
    unsafe { host::register(&e.dev, p, 3 * 4096) }?;
    e.extra_reg = Some(p);
    host::unregister(&e.dev, p)?;
    e.extra_reg = None;
    Ok(())
}
/// A 64 KiB pinned block and its free.
pub fn op_alloc_pinned(e: &mut Env) -> vkhost::Result<()> {
    let p = host::alloc_pinned(&e.dev, 64 << 10)?;
    host::free_pinned(&e.dev, p)
}
/// A device buffer, dropped.
pub fn op_alloc_buffer(e: &mut Env) -> vkhost::Result<()> {
    e.dev.alloc_buffer(4096).map(drop)
}
/// Staged write and read of 700 KiB (several chunks of `fopts`' ring).
pub fn op_staged(e: &mut Env) -> vkhost::Result<()> {
    let v = pattern(700 << 10, 1);
    e.buf.write(3, &v)?;
    let buf = &e.buf;
    let out = &mut e.scratch.slice()[..v.len()];
    buf.read(3, out)?;
    assert!(*out == v[..], "staged round trip");
    Ok(())
}
/// Direct copies: registered memory to the device, the device to the pinned block.
pub fn op_direct(e: &mut Env) -> vkhost::Result<()> {
    let n = 4 * 4096;
    e.mem.slice()[8 * 4096..12 * 4096].copy_from_slice(&pattern(n, 2));
    // SAFETY: the registered range lies in the live mapping.
    unsafe { host::copy_to_device(&e.dev, e.reg_base as *const u8, n, &e.buf, 0) }?;
    // SAFETY: the pinned block holds n bytes and outlives the call.
    unsafe { host::copy_to_host(&e.dev, &e.buf, 0, e.pinned.as_mut_ptr(), n) }?;
    assert!(e.pinned[..n] == pattern(n, 2)[..]);
    Ok(())
}
/// Mixed copies: half staged, half direct, both ways.
pub fn op_mixed(e: &mut Env) -> vkhost::Result<()> {
    // 2 pages before the registration (staged) + 2 registered pages.
    let from = e.reg_base - 2 * 4096;
    let n = 4 * 4096;
    // SAFETY: inside the live mapping.
    let p = unsafe { host::copy_to_device(&e.dev, from as *const u8, n, &e.buf, 0) }?;
    assert_eq!(p, vkhost::CopyPath::Mixed);
    // SAFETY: inside the live mapping.
    unsafe { host::copy_to_host(&e.dev, &e.buf, 0, from as *mut u8, n) }?;
    Ok(())
}
/// Stream work: an upload and a download waited on, an async direct copy, a fill, an event
/// another stream waits for, a device copy there.
pub fn op_stream(e: &mut Env) -> vkhost::Result<()> {
    // Streams an earlier failed call left in `keep` stay before this call's.
    let k = e.keep.len();
    let s = e.dev.stream()?;
    e.keep.push(s);
    let s = &e.keep[k];
    let v = pattern(600 << 10, 3);
    s.upload(&v, &e.buf, 0)?.wait()?;
    let out = &mut e.scratch.slice()[..v.len()];
    s.download(&e.buf, 0, out)?.wait()?;
    assert!(*out == v[..], "stream round trip");
    // SAFETY: registered range in the live mapping; synchronized before return.
    unsafe { s.copy_to_device_async(e.reg_base as *const u8, 4096, &e.buf, 0) }?;
    s.fill_async(&e.buf, 4096, 4096, 7)?;
    let ev = s.record()?;
    let t = e.dev.stream()?;
    e.keep.push(t);
    let (s, t) = (&e.keep[k], &e.keep[k + 1]);
    t.wait_event(&ev)?;
    t.copy_async(&e.buf, 0, &e.buf, 8192, 4096)?;
    t.synchronize()?;
    s.synchronize()?;
    e.keep.clear();
    Ok(())
}
/// Kernel launches: three built-ins through a one-pipeline cache (`launch_opts`), so every call
/// creates each pipeline again, on a fresh stream (fresh descriptor pools in `Sets` mode), one
/// of them binding the pinned block.
pub fn op_launch(e: &mut Env) -> vkhost::Result<()> {
    use vkhost::kernel::{Binding, builtin};
    // A compute queue's stream: a GPU's default stream may be a copy engine's, which cannot launch.
    let s = e.dev.stream_on(vkhost::QueueKind::Compute)?;
    let k = e.keep.len();
    e.keep.push(s);
    let s = &e.keep[k];
    let n = 64 << 10;
    s.fill_u32(Binding::Device(&e.buf, 0, n), 0xA5C3_0F01)?;
    s.copy_sm(Binding::Device(&e.buf, 0, n), Binding::Device(&e.buf, n, n))?;
    let sum = s.checksum(Binding::Device(&e.buf, n, n))?;
    let want: Vec<u8> = 0xA5C3_0F01u32.to_le_bytes().iter().copied().cycle().take(n).collect();
    assert_eq!(sum, builtin::checksum_cpu(&want), "launch results");
    s.fill_u32(Binding::pinned_mut(&mut e.pinned, 0, 4096), 0x0102_0304)?;
    s.synchronize()?;
    assert!(e.pinned[..4096].chunks(4).all(|w| w == [4, 3, 2, 1]), "pinned fill");
    e.keep.clear();
    Ok(())
}

/// `Device::copy_floor` both ways, 4 KiB, twice each.
pub fn op_floor(e: &mut Env) -> vkhost::Result<()> {
    let up = e.dev.copy_floor(true, 4096, 2)?;
    let down = e.dev.copy_floor(false, 4096, 2)?;
    assert_eq!((up.times.len(), down.times.len()), (2, 2));
    Ok(())
}
