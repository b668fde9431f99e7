//! A pipeline over a large host array that is registered, never copied into staging: N chunks go
//! h2d → kernel (a per-element affine map, y = a·x + b over u32) → d2h.
//!
//! - **serial**: one stream, each chunk waited before the next;
//! - **pipelined**: two streams, chunk k on stream k % 2 with its own device buffers, so one
//!   chunk's copies overlap the other's kernel (double buffering);
//! - **zero-copy**: no device buffers at all: the kernel reads the registered input and writes
//!   the registered output directly, on two streams.
//!
//! Each variant's output is checked against the CPU. The async copies of the caller's memory use
//! the raw API (`unsafe`): the safe API completes every copy of registered memory before
//! returning, which would serialize the pipeline.
//!
//! On lavapipe (one queue, run by the CPU) nothing can overlap, so the three variants measure
//! about the same; on a GPU the pipelined variant overlaps copies with the kernel and the
//! zero-copy variant moves each byte across the bus once.
//!
//! This file is shared: `examples/pipeline/main.rs` (`cargo run --release --example pipeline`)
//! and `vkhost demo pipeline` (the CLI includes it with `#[path]`) both call [`run`], so the
//! example users read is the code the CLI runs.

use std::time::Instant;
use vkhost::kernel::{Binding, Kernel, Param};
use vkhost::{Device, QueueKind, Stream, host};

const AFFINE_WGSL: &str = r#"
struct Push { delta0: u32, delta1: u32, n: u32, a: u32, b: u32 }
var<push_constant> pc: Push;
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    // Whole words only: a binding that starts inside a word shares that word with bytes
    // before the binding (another owner's). This demo binds whole words; any code holding the
    // kernel may bind any range, and such a launch does nothing.
    if (pc.delta0 % 4u != 0u || pc.delta1 % 4u != 0u) {
        return;
    }
    let s = pc.delta0 / 4u;
    let d = pc.delta1 / 4u;
    // Bounded by the bindings as well as by n: any code holding the kernel may pass any n.
    let src_words = arrayLength(&src) - min(s, arrayLength(&src));
    let dst_words = arrayLength(&dst) - min(d, arrayLength(&dst));
    let n = min(pc.n, min(src_words, dst_words));
    for (var i = id.x; i < n; i += groups.x * 256u) {
        dst[d + i] = src[s + i] * pc.a + pc.b;
    }
}
"#;

const A: u32 = 2_654_435_761;
const B: u32 = 12_345;

fn affine_kernel() -> Kernel {
    let module = naga::front::wgsl::parse_str(AFFINE_WGSL).expect("WGSL parses");
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::PUSH_CONSTANT)
        .validate(&module)
        .expect("WGSL validates");
    let opts = naga::back::spv::Options { lang_version: (1, 3), ..Default::default() };
    let pipe = naga::back::spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: "main".into() };
    let words = naga::back::spv::write_vec(&module, &info, &opts, Some(&pipe)).expect("SPIR-V");
    // SAFETY: the kernel reads binding 0 and writes binding 1 only within [delta, delta + 4n)
    // and within the bound ranges (`arrayLength`) whatever n a launch passes, nothing when a
    // delta is not a multiple of 4, and writes only binding 1, declared read-write.
    unsafe { Kernel::from_spirv(&words, "main", &[Param::ReadOnly, Param::ReadWrite], 12) }.expect("kernel")
}

fn push(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

fn groups(words: usize) -> [u32; 3] {
    [words.div_ceil(256).clamp(1, 4096) as u32, 1, 1]
}

struct Job<'a> {
    dev: &'a Device,
    kernel: Kernel,
    src: *const u8,
    dst: *mut u8,
    len: usize,
    chunks: usize,
}

impl Job<'_> {
    fn chunk(&self, k: usize) -> (usize, usize) {
        let per = (self.len / self.chunks).max(1).next_multiple_of(4096);
        let off = k * per;
        (off, per.min(self.len.saturating_sub(off)))
    }

    /// h2d → kernel → d2h per chunk on `streams` (chunk k on stream k % n), waiting after each
    /// chunk when `serial`.
    fn staged(&self, streams: &[Stream], serial: bool) -> vkhost::Result<f64> {
        let per = self.chunk(0).1;
        let bufs: Vec<_> =
            (0..streams.len()).map(|_| Ok((self.dev.alloc_buffer(per)?, self.dev.alloc_buffer(per)?))).collect::<vkhost::Result<_>>()?;
        let t = Instant::now();
        for k in 0..self.chunks {
            let (off, n) = self.chunk(k);
            if n == 0 {
                break;
            }
            let s = &streams[k % streams.len()];
            let (din, dout) = &bufs[k % streams.len()];
            // SAFETY: src and dst are registered and outlive the streams' work (synchronized
            // below); nothing else touches dst until then.
            unsafe {
                s.copy_to_device_async(self.src.add(off), n, din, 0)?;
                s.launch(
                    &self.kernel,
                    groups(n / 4),
                    &[Binding::Device(din, 0, n), Binding::Device(dout, 0, n)],
                    &push(&[(n / 4) as u32, A, B]),
                )?;
                s.copy_to_host_async(dout, 0, self.dst.add(off), n)?;
            }
            if serial {
                s.synchronize()?;
            } else {
                s.flush()?;
            }
        }
        for s in streams {
            s.synchronize()?;
        }
        Ok(t.elapsed().as_secs_f64())
    }

    /// The kernel reads the registered input and writes the registered output directly. A
    /// host binding must lie in one buffer: a chunk is cut where either array's registration
    /// changes import piece (a registration larger than one allocation is several imports) and
    /// at the device's maxStorageBufferRange.
    fn zero_copy(&self, streams: &[Stream]) -> vkhost::Result<f64> {
        // A launch binds from the offset aligned down to minStorageBufferOffsetAlignment, so
        // that slack counts against the range too.
        let align = (self.dev.info().min_storage_buffer_offset_alignment as usize).max(4);
        let most = (self.dev.info().max_storage_buffer_range as usize).saturating_sub(align) & !(align - 1);
        let t = Instant::now();
        for k in 0..self.chunks {
            let (off, n) = self.chunk(k);
            if n == 0 {
                break;
            }
            let s = &streams[k % streams.len()];
            let mut at = off;
            while at < off + n {
                let len = self.one_buffer(at, (off + n - at).min(most));
                // SAFETY: as in `staged`: registered, outliving the work, synchronized below.
                let b = unsafe { [Binding::host(self.src.add(at), len), Binding::host(self.dst.add(at), len)] };
                s.launch(&self.kernel, groups(len / 4), &b, &push(&[(len / 4) as u32, A, B]))?;
                at += len;
            }
            s.flush()?;
        }
        for s in streams {
            s.synchronize()?;
        }
        Ok(t.elapsed().as_secs_f64())
    }

    /// The longest run of whole words from byte `at`, at most `most` bytes, that one buffer
    /// covers in both arrays (`host::find`; shorter runs are covered too, so a binary search).
    fn one_buffer(&self, at: usize, most: usize) -> usize {
        let covered = |len: usize| {
            // SAFETY: pointer arithmetic within the arrays (`at + len <= self.len`).
            let (a, b) = unsafe { (self.src.add(at), self.dst.add(at)) };
            host::find(self.dev, a, len).is_some() && host::find(self.dev, b, len).is_some()
        };
        let (mut lo, mut hi) = (1, most / 4); // words: `lo` always covered (one page, one buffer)
        if covered(hi * 4) {
            return hi * 4;
        }
        while lo + 1 < hi {
            let mid = (lo + hi) / 2;
            if covered(mid * 4) { lo = mid } else { hi = mid }
        }
        lo * 4
    }
}

/// The largest array `run` takes, in MiB: the demo indexes u32 words with u32.
pub const MAX_MIB: usize = 8192;

/// What to run.
pub struct Options {
    /// The array's size in MiB (0 is taken as 1; above [`MAX_MIB`] is an error).
    pub mib: usize,
    /// How many chunks it is cut into (at least 1).
    pub chunks: usize,
    /// Test hook: compare against a CPU result with one word changed, so every variant must
    /// report WRONG (the CLI's `--plant-mismatch`, to test its exit code).
    pub plant_mismatch: bool,
}

/// Runs the three variants on `dev`, printing a line per variant, then destroys `dev`. Returns
/// whether every output matched the CPU (and, when the validation layer is on, it reported no
/// errors).
pub fn run(dev: Device, o: &Options) -> vkhost::Result<bool> {
    let mib = o.mib.max(1);
    if mib > MAX_MIB {
        return Err(vkhost::Error::InvalidArgument { reason: format!("the pipeline demo takes at most {MAX_MIB} MiB, asked for {mib}") });
    }
    let len = mib << 20;
    // Chunks are whole pages: at most one per 4 KiB, so fewer than asked for a small array.
    let per = (len / o.chunks.max(1)).max(1).next_multiple_of(4096);
    let chunks = len.div_ceil(per);
    let asked = if chunks == o.chunks.max(1) { String::new() } else { format!(" (asked for {}; chunks are whole 4 KiB pages)", o.chunks) };
    println!("{} ({}), {mib} MiB in {chunks} chunks of {} KiB{asked}", dev.info().name, dev.info().driver_name, per >> 10);
    let input: Vec<u32> = (0..(len / 4) as u32).map(|i| i.wrapping_mul(0x9E37_79B9) ^ 0x5bd1_e995).collect();
    let mut want: Vec<u32> = input.iter().map(|x| x.wrapping_mul(A).wrapping_add(B)).collect();
    if o.plant_mismatch {
        want[len / 8] ^= 1;
    }
    let mut output = vec![0u32; len / 4];
    // SAFETY: both Vecs outlive the registrations: they are unregistered below before they drop,
    // on every path (leaked if unregistering fails), and only touched by the host after each
    // variant synchronized.
    unsafe { host::register(&dev, input.as_ptr(), len)? };
    // SAFETY: as above.
    if let Err(e) = unsafe { host::register(&dev, output.as_mut_ptr(), len) } {
        host::unregister(&dev, input.as_ptr())?;
        return Err(e);
    }
    let job = Job { dev: &dev, kernel: affine_kernel(), src: input.as_ptr().cast(), dst: output.as_mut_ptr().cast(), len, chunks };
    let r = variants(&job, &mut output, &want);
    drop(job);
    // Unregistering waits for any work still naming the bytes (after an error, say).
    let freed = host::unregister(&dev, input.as_ptr()).and(host::unregister(&dev, output.as_ptr()));
    if freed.is_err() {
        // Still registered: the device may still name the bytes, so they must never be freed.
        std::mem::forget(input);
        std::mem::forget(output);
    }
    let mut ok = r?;
    freed?;
    dev.destroy()?;
    if dev.validation_enabled() {
        println!("  validation errors: {}", dev.validation_errors());
        ok &= dev.validation_errors() == 0;
    }
    Ok(ok)
}

/// Warms up, then runs serial, pipelined and zero-copy, checking `output` against `want` after
/// each.
fn variants(job: &Job<'_>, output: &mut [u32], want: &[u32]) -> vkhost::Result<bool> {
    let two = [job.dev.stream_on(QueueKind::Compute)?, job.dev.stream_on(QueueKind::Compute)?];
    // Warm up: pipeline creation, first-touch of the device buffers.
    job.staged(&two[..1], true)?;
    let gbs = |t: f64| job.len as f64 / t / 1e9;
    let mut ok = true;
    let mut report = |name: &str, r: vkhost::Result<f64>, out: &mut [u32]| -> vkhost::Result<()> {
        let t = r?;
        let good = out == want;
        ok &= good;
        println!("  {name:<11} {:8.2} ms  {:6.2} GB/s  {}", t * 1e3, gbs(t), if good { "matches the CPU" } else { "WRONG" });
        out.fill(0);
        Ok(())
    };
    report("serial", job.staged(&two[..1], true), output)?;
    report("pipelined", job.staged(&two, false), output)?;
    report("zero-copy", job.zero_copy(&two), output)?;
    Ok(ok)
}
