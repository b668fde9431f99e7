//! Helpers for the wgpu interop tests: every test opens its pair with wgpu's validation flag
//! (the Khronos validation layer on the device wgpu and vkhost share) and asserts that the layer
//! reported no error. wgpu-hal reports the layer's messages through `log` (target
//! `wgpu_hal::vulkan::instance`, errors at `Error` level): a logger counts them.
//!
//! A test never passes silently without a device: if none can be opened (or the layer is
//! missing) it fails with the reason, unless VKHOST_SKIP_NO_DEVICE=1, in which case it prints
//! why it skips.
#![allow(dead_code)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use vkhost_wgpu::{Interop, Options, wgpu};

static ERRORS: AtomicU64 = AtomicU64::new(0);
static LAST: Mutex<Option<String>> = Mutex::new(None);
/// Whether the last message was `BOGUS` (its "\tobjects: ..." lines are records of their own).
static SKIPPING: AtomicBool = AtomicBool::new(false);

struct Counter;

/// The one message not counted. wgpu's `InstanceFlags::DEBUG` (needed: without it wgpu-hal
/// installs no debug messenger, and the layer's messages bypass `log`) makes naga write debug
/// info with `OpSource WGSL`, SPIR-V source language 10 (added to SPIR-V in 2023). The layer
/// Debian 12 ships (1.3.239) runs an older spirv-val that rejects that operand
/// (UNASSIGNED-CoreValidation-Shader-InconsistentSpirv); newer layers accept it.
const BOGUS: &str = "SPIR-V module not valid: Invalid source language operand: 10";

impl log::Log for Counter {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let msg = r.args().to_string();
        let cont = msg.starts_with('\t');
        if !cont {
            SKIPPING.store(msg.contains(BOGUS), Ordering::Relaxed);
        }
        if SKIPPING.load(Ordering::Relaxed) {
            eprintln!("[ignored: Debian 12's validation layer does not know SPIR-V's WGSL source language] {msg}");
            return;
        }
        eprintln!("[{} {}] {msg}", r.level(), r.target());
        // One error is one record; its "\tobjects: ..." and label lines are records of their own.
        if r.level() == log::Level::Error && r.target().starts_with("wgpu_hal::vulkan") && !cont {
            ERRORS.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut g) = LAST.lock() {
                *g = Some(msg);
            }
        }
    }
    fn flush(&self) {}
}

/// Validation errors the layer reported since the last call (and the last message).
pub fn take_validation_errors() -> (u64, Option<String>) {
    (ERRORS.swap(0, Ordering::Relaxed), LAST.lock().ok().and_then(|mut g| g.take()))
}

fn skip_or_fail(why: String) -> Option<Checked> {
    if std::env::var("VKHOST_SKIP_NO_DEVICE").as_deref() == Ok("1") {
        eprintln!("SKIPPED: {why}; VKHOST_SKIP_NO_DEVICE=1 allows skipping");
        return None;
    }
    panic!("{why}. Run scripts/setup (installs lavapipe and the validation layer).");
}

fn validation_layer_installed() -> Result<bool, String> {
    // SAFETY: loading libvulkan to list layers; nothing else is called through it.
    let entry = unsafe { vkhost::ash::Entry::load() }.map_err(|e| format!("no Vulkan loader: {e}"))?;
    // SAFETY: plain enumeration.
    let layers = unsafe { entry.enumerate_instance_layer_properties() }.unwrap_or_default();
    Ok(layers.iter().any(|l| l.layer_name_as_c_str() == Ok(c"VK_LAYER_KHRONOS_validation")))
}

/// Opens the pair with validation on, or explains why not.
pub fn open() -> Option<Checked> {
    let _ = log::set_logger(&Counter).map(|()| log::set_max_level(log::LevelFilter::Warn));
    match validation_layer_installed() {
        Ok(true) => {}
        Ok(false) => return skip_or_fail("the Khronos validation layer is not installed".into()),
        Err(why) => return skip_or_fail(why),
    }
    take_validation_errors();
    // DEBUG too: without it wgpu-hal installs no messenger, and the layer's messages bypass `log`.
    let opts = Options { instance_flags: wgpu::InstanceFlags::VALIDATION | wgpu::InstanceFlags::DEBUG, ..Options::default() };
    match Interop::open(&opts) {
        Ok(i) => Some(Checked(i)),
        Err(e) => skip_or_fail(format!("no wgpu device with VK_EXT_external_memory_host could be opened ({e})")),
    }
}

/// A pair whose validation error count is asserted zero on drop.
pub struct Checked(pub Interop);

impl std::ops::Deref for Checked {
    type Target = Interop;
    fn deref(&self) -> &Interop {
        &self.0
    }
}

impl Drop for Checked {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let (n, last) = take_validation_errors();
        assert_eq!(n, 0, "validation errors; last: {last:?}");
    }
}

/// A `Vec<f32>` of `n + pad` values, `f(i)` at index `i`, and the index `k` at which the run
/// `[k, k + n)` starts at a multiple of `align` bytes (what `Scope::registration` needs; glibc's
/// large blocks start 16 bytes into a page).
pub fn aligned_vec(n: usize, align: usize, f: impl Fn(usize) -> f32) -> (Vec<f32>, usize) {
    let v: Vec<f32> = (0..n + align / 4).map(f).collect();
    let k = (align - v.as_ptr() as usize % align) % align / 4;
    assert_eq!((v.as_ptr() as usize + 4 * k) % align, 0, "f32 data is at least 4-byte aligned");
    (v, k)
}

/// Waits for a future that wgpu completes by itself on native (error scopes).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
    fn clone(_: *const ()) -> RawWaker {
        RawWaker::new(std::ptr::null(), &VTABLE)
    }
    fn noop(_: *const ()) {}
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, noop, noop, noop);
    // SAFETY: the vtable's functions do nothing and ignore the data pointer.
    let waker = unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) };
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

/// A compute pipeline from WGSL `src` (entry `main`, layout from the shader).
pub fn pipeline(dev: &wgpu::Device, src: &str) -> wgpu::ComputePipeline {
    let module = dev.create_shader_module(wgpu::ShaderModuleDescriptor { label: None, source: wgpu::ShaderSource::Wgsl(src.into()) });
    dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    })
}

/// Builds a pipeline from WGSL `src`, binds `buffers` to bindings 0.., and submits one
/// dispatch of `groups` workgroups.
pub fn dispatch(interop: &Interop, src: &str, buffers: &[&wgpu::Buffer], groups: u32) {
    let dev = interop.device();
    let p = pipeline(dev, src);
    let entries: Vec<wgpu::BindGroupEntry<'_>> =
        buffers.iter().enumerate().map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() }).collect();
    let group = dev.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &p.get_bind_group_layout(0), entries: &entries });
    let mut enc = dev.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&Default::default());
        pass.set_pipeline(&p);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(groups, 1, 1);
    }
    interop.queue().submit([enc.finish()]);
}

/// A kernel that loops `b[1]` times on one invocation, then writes 0xDEADBEEF to word 3.
pub const SLOW: &str = "
@group(0) @binding(0) var<storage, read_write> b: array<u32>;
@compute @workgroup_size(1) fn main() {
  var x = b[0];
  for (var i = 0u; i < b[1]; i++) { x = x * 1664525u + 1013904223u; }
  b[2] = x | 1u;
  b[3] = 0xdeadbeefu;
}";
