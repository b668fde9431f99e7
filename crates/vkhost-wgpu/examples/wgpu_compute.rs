//! A wgpu compute shader reading one registered `Vec<f32>` and writing another, with no
//! staging: wgpu binds the caller's own pages as storage buffers (vkhost imports them with
//! VK_EXT_external_memory_host). Checks every output value and exits non-zero on a mismatch.
//!
//! `VKHOST_VALIDATION=1` turns on the Khronos validation layer (with synchronization validation,
//! which wgpu-hal enables along with it); the example then also exits non-zero if the layer
//! reported an error. `make test` runs it so on lavapipe.
//!
//! ```sh
//! VKHOST_VALIDATION=1 cargo run --release -p vkhost-wgpu --example wgpu_compute
//! ```

use std::process::ExitCode;
use std::time::Instant;
use vkhost_wgpu::{Interop, Options, wgpu};

const SHADER: &str = "
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < arrayLength(&x)) {
        y[i] = 2.0 * x[i] + 1.0;
    }
}
";

fn main() -> ExitCode {
    let validation = std::env::var("VKHOST_VALIDATION").as_deref() == Ok("1");
    validation::install();
    match run(validation) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("wgpu_compute: FAILED: {e}");
            return ExitCode::FAILURE;
        }
    }
    let (errors, last) = validation::errors();
    if validation && validation::layer_missing() {
        eprintln!(
            "wgpu_compute: FAILED: VKHOST_VALIDATION=1 but the Khronos validation layer is not installed (scripts/setup installs it)"
        );
        return ExitCode::FAILURE;
    }
    if errors > 0 {
        eprintln!("wgpu_compute: FAILED: {errors} validation error(s); last: {last:?}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn run(validation: bool) -> Result<(), Box<dyn std::error::Error>> {
    let mut opts = Options::default();
    if validation {
        // DEBUG too: wgpu-hal installs its debug messenger (which logs the layer's messages
        // through `log`) only with it.
        opts.instance_flags |= wgpu::InstanceFlags::VALIDATION | wgpu::InstanceFlags::DEBUG;
    }
    let interop = Interop::open(&opts)?;
    let info = interop.adapter().get_info();
    println!("wgpu_compute: {} ({:?}, {}), validation {}", info.name, info.device_type, info.driver, if validation { "on" } else { "off" });

    // The data: 2^20 + 100 values (the last workgroup is partial), in plain vectors. A
    // registration must start at `host_buffer_alignment` (64 bytes on lavapipe; glibc's malloc
    // aligns large blocks to 16), so each vector is a little longer and its aligned run is
    // registered.
    let n = (1 << 20) + 100;
    let align = interop.host_buffer_alignment();
    let skip = |v: &[f32]| (align - v.as_ptr() as usize % align) % align / 4;
    let mut input: Vec<f32> = (0..n + align / 4).map(|k| k as f32 * 0.5 - 4096.0).collect();
    let mut output: Vec<f32> = vec![f32::NAN; n + align / 4];
    let (i, o) = (skip(&input), skip(&output));

    let dev = interop.device();
    let module = dev
        .create_shader_module(wgpu::ShaderModuleDescriptor { label: Some("y = 2x + 1"), source: wgpu::ShaderSource::Wgsl(SHADER.into()) });
    let pipeline = dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("y = 2x + 1"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });

    let t = Instant::now();
    {
        let mut reg_x = interop.vkhost().register(bytemuck::cast_slice_mut(&mut input[i..i + n]))?;
        let mut reg_y = interop.vkhost().register(bytemuck::cast_slice_mut(&mut output[o..o + n]))?;
        interop.scope(|s| -> vkhost_wgpu::Result<()> {
            // The registered bytes as wgpu storage buffers: no staging buffer, no copy.
            let x = s.registration(&mut reg_x)?;
            let y = s.registration(&mut reg_y)?;
            let group = dev.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(0),
                entries: &[
                    wgpu::BindGroupEntry { binding: 0, resource: x.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: y.as_entire_binding() },
                ],
            });
            let mut enc = dev.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&pipeline);
                pass.set_bind_group(0, &group, &[]);
                pass.dispatch_workgroups((n as u32).div_ceil(64), 1, 1);
            }
            interop.queue().submit([enc.finish()]);
            Ok(())
        })?; // the scope waited for the shader: the results are in `output`
    } // the registrations end here
    let secs = t.elapsed().as_secs_f64();

    let mut wrong = 0usize;
    for (k, (&x, &y)) in input[i..i + n].iter().zip(&output[o..o + n]).enumerate() {
        if y != 2.0 * x + 1.0 {
            if wrong < 5 {
                eprintln!("wgpu_compute: y[{k}] = {y}, want {}", 2.0 * x + 1.0);
            }
            wrong += 1;
        }
    }
    if wrong > 0 {
        return Err(format!("{wrong} of {n} values wrong").into());
    }
    if output[..o].iter().chain(&output[o + n..]).any(|v| !v.is_nan()) {
        return Err("values outside the registered run changed".into());
    }
    let stats = vkhost_wgpu::vkhost::host::device_stats(interop.vkhost());
    println!(
        "wgpu_compute: OK: {n} values, y = 2x + 1 read from and written to registered Vec<f32>s in {:.1} ms, {} bytes staged",
        secs * 1e3,
        stats.staged_bytes
    );
    Ok(())
}

/// Counts the validation layer's errors, which wgpu-hal logs at `Error` level (target
/// `wgpu_hal::vulkan::instance`), and prints warnings and errors.
mod validation {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    static ERRORS: AtomicU64 = AtomicU64::new(0);
    static LAST: Mutex<Option<String>> = Mutex::new(None);
    /// Whether the last message was `BOGUS` (its "\tobjects: ..." lines are records of their own).
    static SKIPPING: AtomicBool = AtomicBool::new(false);
    /// wgpu-hal warns and goes on when the layer it was asked for is not installed.
    static LAYER_MISSING: AtomicBool = AtomicBool::new(false);

    /// Not counted: with `InstanceFlags::DEBUG` naga writes `OpSource WGSL` (SPIR-V source
    /// language 10, added in 2023), which the spirv-val inside Debian 12's layer (1.3.239)
    /// rejects; newer layers accept it.
    const BOGUS: &str = "SPIR-V module not valid: Invalid source language operand: 10";

    struct Counter;

    impl log::Log for Counter {
        fn enabled(&self, m: &log::Metadata<'_>) -> bool {
            m.level() <= log::Level::Warn
        }
        fn log(&self, r: &log::Record<'_>) {
            let msg = r.args().to_string();
            let cont = msg.starts_with('\t');
            if !cont {
                SKIPPING.store(msg.contains(BOGUS), Ordering::Relaxed);
            }
            if !self.enabled(r.metadata()) || SKIPPING.load(Ordering::Relaxed) {
                return;
            }
            eprintln!("[{} {}] {msg}", r.level(), r.target());
            if msg.contains("VALIDATION requested, but unable to find layer") {
                LAYER_MISSING.store(true, Ordering::Relaxed);
            }
            if r.level() == log::Level::Error && r.target().starts_with("wgpu_hal::vulkan") && !cont {
                ERRORS.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut g) = LAST.lock() {
                    *g = Some(msg);
                }
            }
        }
        fn flush(&self) {}
    }

    pub fn install() {
        if log::set_logger(&Counter).is_ok() {
            log::set_max_level(log::LevelFilter::Warn);
        }
    }

    pub fn layer_missing() -> bool {
        LAYER_MISSING.load(Ordering::Relaxed)
    }

    pub fn errors() -> (u64, Option<String>) {
        (ERRORS.load(Ordering::Relaxed), LAST.lock().ok().and_then(|g| g.clone()))
    }
}
