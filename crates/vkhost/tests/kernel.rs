//! Kernels that name host memory: built-ins over every binding kind at aligned and unaligned
//! offsets with guard bytes, the checksum against the CPU, a user kernel over a Registration,
//! unregister during a launch, teardown with launches in flight; each in both descriptor modes
//! (modules `push` and `sets`: VK_KHR_push_descriptor, and descriptor sets from stream pools
//! with `OpenOptions::push_descriptors: false`). The bounded pipeline cache: eviction, a
//! pipeline evicted while its launch runs, and pipelines, streams and kernels dropped on other
//! threads while their device is destroyed. Validation on (run with
//! VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT); zero errors.

mod common;
use common::*;
use vkhost::kernel::{Binding, DescriptorMode, Kernel, Param, checksum_cpu};
use vkhost::{Device, DeviceBuffer, Error, OpenOptions, PinnedBuffer, QueueKind, Registration, Stream, host};

/// A device whose launches use `mode`, with `max_pipelines` cached pipelines.
fn device_in(mode: DescriptorMode, max_pipelines: usize) -> Checked {
    let o = OpenOptions { push_descriptors: mode == DescriptorMode::Push, max_pipelines, ..opts() };
    let d = device_with(o).unwrap();
    if mode == DescriptorMode::Push && !d.info().push_descriptor {
        eprintln!("note: the driver does not offer VK_KHR_push_descriptor: this run uses descriptor sets");
        assert_eq!(d.descriptor_mode(), DescriptorMode::Sets);
    } else {
        assert_eq!(d.descriptor_mode(), mode);
    }
    d
}

/// Runs each body as a test in both descriptor modes (`push::name`, `sets::name`), on a device
/// that caches `max_pipelines` pipelines.
macro_rules! both_modes {
    ($($name:ident: $max_pipelines:expr_2021),* $(,)?) => {
        mod push {
            $(#[test]
            fn $name() {
                super::$name(&super::device_in(vkhost::kernel::DescriptorMode::Push, $max_pipelines));
            })*
        }
        mod sets {
            $(#[test]
            fn $name() {
                super::$name(&super::device_in(vkhost::kernel::DescriptorMode::Sets, $max_pipelines));
            })*
        }
    };
}

both_modes!(
    fill_every_kind_aligned_and_not_with_guards: 256,
    copy_between_every_pair_of_kinds_with_guards: 256,
    checksum_on_the_device_equals_the_cpu_for_every_kind: 256,
    launches_order_against_copies_on_one_stream: 256,
    user_kernel_writes_the_users_vec_in_place: 256,
    unregister_during_a_launch_that_binds_the_range_waits: 256,
    free_pinned_and_drops_wait_for_the_work_that_names_the_block: 256,
    destroying_the_device_with_launches_in_flight_is_clean: 256,
    many_launches_in_a_batch_and_across_batches: 256,
    pipeline_cache_is_bounded: 4,
    a_pipeline_evicted_while_its_launch_runs_stays_until_it_completes: 1,
);

/// SPIR-V from WGSL, as a user would make it.
fn spirv(src: &str) -> Vec<u32> {
    let module = naga::front::wgsl::parse_str(src).unwrap_or_else(|e| panic!("{}", e.emit_to_string(src)));
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::PUSH_CONSTANT)
        .validate(&module)
        .unwrap_or_else(|e| panic!("{}", e.emit_to_string(src)));
    let opts = naga::back::spv::Options { lang_version: (1, 3), ..Default::default() };
    let pipe = naga::back::spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: "main".into() };
    naga::back::spv::write_vec(&module, &info, &opts, Some(&pipe)).unwrap()
}

/// Memory of one binding kind, with a host copy of what it should hold.
enum Mem {
    Device(DeviceBuffer),
    Pinned(PinnedBuffer),
    /// A pinned block bound through the block (`Binding::pinned`, `Binding::pinned_mut`).
    Block(PinnedBuffer),
    Registered(Registration<'static>),
    /// Raw-registered pages (unregistered by `Region::release`).
    Raw(Pages),
}

const KINDS: [&str; 5] = ["device", "pinned", "block", "registered", "raw"];

struct Region {
    mem: Mem,
    len: usize,
}

impl Region {
    fn new(d: &vkhost::Device, kind: &str, len: usize) -> Region {
        let mem = match kind {
            "device" => Mem::Device(d.alloc_buffer(len).unwrap()),
            "pinned" => Mem::Pinned(PinnedBuffer::new(d, len).unwrap()),
            "block" => Mem::Block(PinnedBuffer::new(d, len).unwrap()),
            "registered" => {
                // Leaked pages, so the Registration may be 'static in this test.
                let p = Pages::new(len.next_multiple_of(4096));
                // SAFETY: the mapping is never unmapped (forgotten below).
                let v: &'static mut [u8] = unsafe { std::slice::from_raw_parts_mut(p.ptr, len) };
                std::mem::forget(p);
                Mem::Registered(d.register(v).unwrap())
            }
            _ => {
                let p = Pages::new(len.next_multiple_of(4096));
                // SAFETY: the pages stay mapped until `release` unregisters them.
                unsafe { host::register(d, p.ptr, p.len) }.unwrap();
                Mem::Raw(p)
            }
        };
        Region { mem, len }
    }

    fn write(&mut self, data: &[u8]) {
        match &mut self.mem {
            Mem::Device(b) => b.write(0, data).unwrap(),
            Mem::Pinned(p) | Mem::Block(p) => p.copy_from_slice(data),
            Mem::Registered(r) => r.copy_from_slice(data),
            Mem::Raw(p) => p.slice()[..self.len].copy_from_slice(data),
        }
    }

    /// Read after the stream synchronized.
    fn read(&mut self) -> Vec<u8> {
        match &mut self.mem {
            Mem::Device(b) => {
                let mut v = vec![0u8; self.len];
                b.read(0, &mut v).unwrap();
                v
            }
            Mem::Pinned(p) | Mem::Block(p) => p.to_vec(),
            Mem::Registered(r) => r.to_vec(),
            Mem::Raw(p) => p.slice()[..self.len].to_vec(),
        }
    }

    fn bind(&mut self, off: usize, len: usize, write: bool) -> Binding<'_> {
        match &mut self.mem {
            Mem::Device(b) => Binding::Device(b, off, len),
            Mem::Pinned(p) => match write {
                true => Binding::HostMut(&mut p[off..off + len]),
                false => Binding::Host(&p[off..off + len]),
            },
            Mem::Block(p) => match write {
                true => Binding::pinned_mut(p, off, len),
                false => Binding::pinned(p, off, len),
            },
            Mem::Registered(r) => match write {
                true => Binding::HostMut(&mut r[off..off + len]),
                false => Binding::Host(&r[off..off + len]),
            },
            // SAFETY: registered until `release`, and the tests synchronize before touching it.
            Mem::Raw(p) => unsafe { Binding::host(p.ptr.add(off), len) },
        }
    }

    fn release(self, d: &vkhost::Device) {
        if let Mem::Raw(p) = &self.mem {
            host::unregister(d, p.ptr).unwrap();
        }
    }
}

fn compute_stream(d: &vkhost::Device) -> Stream {
    d.stream_on(QueueKind::Compute).unwrap()
}

/// Offsets that are and are not aligned to minStorageBufferOffsetAlignment (and to 16).
fn offsets(d: &vkhost::Device) -> [usize; 3] {
    let a = d.info().min_storage_buffer_offset_alignment.max(16) as usize;
    [a, a + 4, 2 * a + 12]
}

const LEN: usize = 4000 + 16 * 7; // a multiple of 16 and of 4
const GUARD: usize = 96;

fn fill_every_kind_aligned_and_not_with_guards(d: &Device) {
    let s = compute_stream(d);
    for kind in KINDS {
        for off in offsets(d) {
            for len in [LEN, LEN - 4] {
                let total = off + len + GUARD;
                let mut r = Region::new(d, kind, total);
                let init = pattern(total, 9);
                r.write(&init);
                s.fill_u32(r.bind(off, len, true), 0xA1B2_C3D4).unwrap();
                s.synchronize().unwrap();
                let got = r.read();
                assert_eq!(got[..off], init[..off], "{kind} off {off}: guard before");
                assert_eq!(got[off + len..], init[off + len..], "{kind} off {off}: guard after");
                assert!(got[off..off + len].chunks(4).all(|c| c == 0xA1B2_C3D4u32.to_ne_bytes()), "{kind} off {off}: filled");
                r.release(d);
            }
        }
    }
}

fn copy_between_every_pair_of_kinds_with_guards(d: &Device) {
    let s = compute_stream(d);
    let [a0, a1, a2] = offsets(d);
    for src_kind in KINDS {
        for dst_kind in KINDS {
            // (src offset, dst offset, len): the vec4 path, and u32 paths with unaligned deltas.
            for (so, dof, len) in [(a0, a0, LEN), (a1, a2, LEN), (a2, a0, LEN - 4)] {
                let total = a2 + LEN + GUARD;
                let mut src = Region::new(d, src_kind, total);
                let mut dst = Region::new(d, dst_kind, total);
                let (sp, dp) = (pattern(total, 1), pattern(total, 2));
                src.write(&sp);
                dst.write(&dp);
                s.copy_sm(src.bind(so, len, false), dst.bind(dof, len, true)).unwrap();
                s.synchronize().unwrap();
                let got = dst.read();
                let what = format!("{src_kind}+{so} -> {dst_kind}+{dof}, {len} bytes");
                assert_eq!(got[..dof], dp[..dof], "{what}: guard before");
                assert_eq!(got[dof + len..], dp[dof + len..], "{what}: guard after");
                assert!(got[dof..dof + len] == sp[so..so + len], "{what}: copied bytes");
                assert_eq!(src.read(), sp, "{what}: the source changed");
                src.release(d);
                dst.release(d);
            }
        }
    }
}

fn checksum_on_the_device_equals_the_cpu_for_every_kind(d: &Device) {
    let s = compute_stream(d);
    for kind in KINDS {
        for off in offsets(d) {
            // 1 MiB: enough terms that the low half carries many times.
            let len = (1 << 20) - 4 * (off % 3);
            let total = off + len + GUARD;
            let mut r = Region::new(d, kind, total);
            let data = pattern(total, 5);
            r.write(&data);
            let gpu = s.checksum(r.bind(off, len, false)).unwrap();
            assert_eq!(gpu, checksum_cpu(&data[off..off + len]), "{kind} off {off}");
            // Into host memory of each kind, at an unaligned offset, with guards.
            let mut out = Region::new(d, kind, 64);
            let oinit = pattern(64, 6);
            out.write(&oinit);
            s.checksum_into(r.bind(off, len, false), out.bind(20, 8, true)).unwrap();
            s.synchronize().unwrap();
            let o = out.read();
            assert_eq!(u64::from_le_bytes(o[20..28].try_into().unwrap()), gpu, "{kind}: checksum_into");
            assert_eq!((&o[..20], &o[28..]), (&oinit[..20], &oinit[28..]), "{kind}: checksum_into guards");
            r.release(d);
            out.release(d);
        }
    }
    let z = d.alloc_buffer(16).unwrap();
    z.write(0, &[0; 16]).unwrap();
    assert_eq!(s.checksum(Binding::Device(&z, 0, 16)).unwrap(), checksum_cpu(&[0u8; 16]));
}

fn launches_order_against_copies_on_one_stream(d: &Device) {
    let s = compute_stream(d);
    let n = 1 << 18;
    let (g1, g2) = (d.alloc_buffer(n).unwrap(), d.alloc_buffer(n).unwrap());
    let mut p = PinnedBuffer::new(d, n).unwrap();
    let want = pattern(n, 3);
    p.copy_from_slice(&want);
    for _ in 0..3 {
        std::mem::forget(s.upload_pinned(&p, 0..n, &g1, 0).unwrap()); // copy engine: pinned -> g1 (async)
        s.copy_sm(Binding::Device(&g1, 0, n), Binding::Device(&g2, 0, n)).unwrap(); // kernel: g1 -> g2
        s.fill_async(&g1, 0, n, 0).unwrap(); // copy engine overwrites what the kernel read
        std::mem::forget(s.download_pinned(&g2, 0, &mut p, 0..n).unwrap()); // g2 -> pinned, after the kernel
    }
    s.synchronize().unwrap();
    assert!(p[..] == want[..], "stream order across copies and launches");
}

const SCALE_WGSL: &str = r#"
struct Push { delta0: u32, n: u32, mul: u32, add: u32 }
var<push_constant> pc: Push;
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < pc.n {
        let i = pc.delta0 / 4u + id.x;
        data[i] = data[i] * pc.mul + pc.add;
    }
}
"#;

fn push(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

fn user_kernel_writes_the_users_vec_in_place(d: &Device) {
    let s = compute_stream(d);
    // SAFETY: the kernel touches binding 0 only in [delta, delta + 4n), declared read-write.
    // It trusts n: it stays in this test file, whose launches pass n within the binding.
    let k = unsafe { Kernel::from_spirv(&spirv(SCALE_WGSL), "main", &[Param::ReadWrite], 12) }.unwrap();
    let n = 10_001usize;
    let mut v: Vec<u32> = (0..n as u32 + 2).collect();
    let want: Vec<u32> = v.iter().enumerate().map(|(i, &x)| if (1..=n).contains(&i) { x * 3 + 7 } else { x }).collect();
    {
        // SAFETY: u32 → bytes of the same allocation.
        let bytes = unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 4) };
        let mut reg = d.register(bytes).unwrap();
        // Words 1..=n: an unaligned offset (4) into the registration.
        s.launch(&k, [(n as u32).div_ceil(64), 1, 1], &[Binding::HostMut(&mut reg[4..4 + 4 * n])], &push(&[n as u32, 3, 7])).unwrap();
        // The launch completed before `launch` returned (registered memory).
    }
    assert!(v == want, "the kernel's writes are in the user's Vec");
}

/// The module docs' pattern for a kernel that takes a count from its push constants: bounded by
/// `arrayLength` of its binding too, a launch with `n` past the binding (safe code may pass any
/// `n`) writes nothing past the bound range, neither the rest of the same buffer nor the rest of
/// a pinned block. lavapipe clamps storage accesses to the descriptor range by itself, so here
/// this passes with an unbounded kernel too (a review's reproduction, session 35); on a driver
/// without robust buffer access (vkhost enables none) it is the bound that keeps the bytes.
#[test]
fn a_kernel_bounded_by_array_length_stays_in_its_binding_whatever_n() {
    const BOUNDED: &str = r#"
struct Push { delta0: u32, n: u32 }
var<push_constant> pc: Push;
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = pc.delta0 / 4u + id.x;
    if id.x < pc.n && i < arrayLength(&data) {
        data[i] = 0xdeadbeefu;
    }
}
"#;
    let d = device().unwrap();
    let s = compute_stream(&d);
    // SAFETY: the kernel writes binding 0 only from its delta and below `arrayLength` (the
    // bound range's end), whatever n, and binding 0 is declared read-write.
    let k = unsafe { Kernel::from_spirv(&spirv(BOUNDED), "main", &[Param::ReadWrite], 4) }.unwrap();
    let n = 3 * 1024u32; // 12 KiB of words for a 4 KiB binding
    let buf = d.alloc_buffer(16 << 10).unwrap();
    buf.write(0, &[7u8; 16 << 10]).unwrap();
    s.launch(&k, [n / 64, 1, 1], &[Binding::Device(&buf, 4096, 4096)], &push(&[n])).unwrap();
    s.synchronize().unwrap();
    let mut back = vec![0u8; 16 << 10];
    buf.read(0, &mut back).unwrap();
    assert!(back[..4096].iter().all(|&b| b == 7) && back[8192..].iter().all(|&b| b == 7), "bytes outside the binding changed");
    assert!(back[4096..8192].chunks_exact(4).all(|w| w == 0xdead_beefu32.to_ne_bytes()), "the binding is written");
    let mut block = vkhost::PinnedBuffer::new(&d, 16 << 10).unwrap();
    block.fill(7);
    s.launch(&k, [n / 64, 1, 1], &[Binding::pinned_mut(&mut block, 0, 4096)], &push(&[n])).unwrap();
    s.synchronize().unwrap();
    assert!(block[4096..].iter().all(|&b| b == 7), "the rest of the pinned block changed");
    assert!(block[..4096].chunks_exact(4).all(|w| w == 0xdead_beefu32.to_ne_bytes()), "the block's binding is written");
    drop(s);
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

#[test]
fn bad_arguments_are_refused_before_the_driver() {
    let d = device().unwrap();
    let s = compute_stream(&d);
    let b = d.alloc_buffer(4096).unwrap();
    let r = |e: vkhost::Result<()>| matches!(e, Err(Error::InvalidArgument { .. }));
    assert!(r(s.fill_u32(Binding::Device(&b, 2, 8), 0)), "unaligned offset");
    assert!(r(s.fill_u32(Binding::Device(&b, 0, 6), 0)), "unaligned length");
    assert!(r(s.copy_sm(Binding::Device(&b, 0, 64), Binding::Device(&b, 32, 64))), "overlapping copy");
    assert!(r(s.copy_sm(Binding::Device(&b, 0, 64), Binding::Device(&b, 64, 32))), "length mismatch");
    assert!(matches!(s.fill_u32(Binding::Device(&b, 4000, 200), 0), Err(Error::OutOfRange)));
    let plain = vec![0u8; 256];
    assert!(matches!(s.checksum(Binding::Host(&plain)), Err(Error::NotRegistered)), "uncovered host range");
    let mut p = PinnedBuffer::new(&d, 256).unwrap();
    assert!(r(s.fill_u32(Binding::Host(&p), 0)), "a shared slice for a written binding");
    // SAFETY: (both) the words are checked and refused before any use.
    let bad = unsafe { Kernel::from_spirv(&[1, 2, 3, 4, 5, 6], "main", &[], 0) };
    assert!(matches!(bad, Err(Error::InvalidArgument { .. })), "no SPIR-V magic");
    let words = spirv(SCALE_WGSL);
    // SAFETY: as above.
    let few = unsafe { Kernel::from_spirv(&words, "main", &[], 12) };
    assert!(matches!(few, Err(Error::InvalidArgument { .. })), "binding 0 undeclared");
    // SAFETY: as in user_kernel_writes_the_users_vec_in_place.
    let k = unsafe { Kernel::from_spirv(&words, "main", &[Param::ReadWrite], 12) }.unwrap();
    assert!(r(s.launch(&k, [1, 1, 1], &[], &push(&[1, 1, 1]))), "binding count");
    assert!(r(s.launch(&k, [1, 1, 1], &[Binding::HostMut(&mut p)], &[0; 4])), "push size");
    assert!(r(s.launch(&k, [u32::MAX, 1, 1], &[Binding::HostMut(&mut p)], &push(&[1, 1, 1]))), "group count");
    s.synchronize().unwrap();
}

/// The module docs' example kernel (`DOCS_SCALE_WGSL`, the WGSL of `crate::kernel`, of
/// `Kernel::from_spirv` and of `Stream::launch`), launched by safe code over bindings that do
/// not start on a word, with guard bytes held as live views around them: it must write nothing
/// outside its binding. Its first version indexed from `delta / 4` whatever the delta, so a
/// binding at byte 2 of a word had the word's first 2 bytes, another owner's, overwritten (a
/// review found it; this test failed on that kernel: `[.., ee, ee, 1, 1]` before the binding).
const DOCS_SCALE_WGSL: &str = r#"
struct Push { delta0: u32, delta1: u32, n: u32, scale: u32 }
var<push_constant> pc: Push;
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    // Whole words only: a binding that starts inside a word shares it with bytes
    // before the binding, another owner's. Such a launch does nothing.
    let whole = pc.delta0 % 4u == 0u && pc.delta1 % 4u == 0u;
    let s = pc.delta0 / 4u + id.x;
    let d = pc.delta1 / 4u + id.x;
    if whole && id.x < pc.n && s < arrayLength(&src) && d < arrayLength(&dst) {
        dst[d] = src[s] * pc.scale;
    }
}
"#;

#[test]
fn the_docs_kernel_writes_nothing_outside_bindings_that_start_inside_a_word() {
    let d = device().unwrap();
    let s = compute_stream(&d);
    // SAFETY: the docs' kernel (see DOCS_SCALE_WGSL's comment): binding 1 read-write, 8 bytes of
    // its own push constants; what it touches is what this test checks.
    let k = unsafe { Kernel::from_spirv(&spirv(DOCS_SCALE_WGSL), "main", &[Param::ReadOnly, Param::ReadWrite], 8) }.unwrap();
    let src = d.alloc_buffer(256).unwrap();
    src.write(0, &[1u8; 256]).unwrap();
    let mut out = PinnedBuffer::new(&d, 256).unwrap();
    let dev_out = d.alloc_buffer(256).unwrap();
    for (src_off, dst_off) in [(0usize, 18usize), (2, 16), (0, 17), (3, 19)] {
        out.fill(0xEE);
        {
            let (before, rest) = out.split_at_mut(dst_off);
            let (bound, after) = rest.split_at_mut(8);
            let views: (&[u8], &[u8]) = (before, after); // views the caller holds through the launch
            let bindings = [Binding::Device(&src, src_off, 8), Binding::HostMut(bound)];
            s.launch(&k, [1, 1, 1], &bindings, &push(&[2, 1])).unwrap();
            assert!(views.0.iter().all(|&b| b == 0xEE), "({src_off}, {dst_off}): bytes before the binding: {:x?}", views.0);
            assert!(views.1.iter().all(|&b| b == 0xEE), "({src_off}, {dst_off}): bytes after the binding: {:x?}", views.1);
        }
        dev_out.write(0, &[0xEE; 256]).unwrap();
        s.launch(&k, [1, 1, 1], &[Binding::Device(&src, src_off, 8), Binding::Device(&dev_out, dst_off, 8)], &push(&[2, 1])).unwrap();
        s.synchronize().unwrap();
        let mut back = vec![0u8; 256];
        dev_out.read(0, &mut back).unwrap();
        let outside = back[..dst_off].iter().chain(&back[dst_off + 8..]).all(|&b| b == 0xEE);
        assert!(outside, "({src_off}, {dst_off}): device bytes outside the binding: {:x?}", &back[..dst_off + 12]);
    }
    drop(s);
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// A module whose workgroup size multiplies past u64 (each dimension 2^31 or more, which
/// SPIR-V allows): the launch's check of maxComputeWorkGroupInvocations multiplied the three
/// dimensions in u64, which overflows (a panic where overflow checks are on, as in debug
/// builds: this test panicked with `attempt to multiply with overflow` in check_args under
/// CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true). Now an `InvalidArgument` like any workgroup
/// past the device's limits.
#[test]
fn a_workgroup_size_whose_product_overflows_is_refused_without_a_panic() {
    let mut words = spirv(SCALE_WGSL);
    let mut i = 5;
    let mut patched = false;
    while i < words.len() {
        let (count, op) = ((words[i] >> 16) as usize, words[i] & 0xffff);
        if op == 16 && count == 6 && words[i + 2] == 17 {
            words[i + 3..i + 6].copy_from_slice(&[1 << 31, 1 << 31, 1 << 31]);
            patched = true;
        }
        i += count;
    }
    assert!(patched, "the module has an OpExecutionMode LocalSize");
    let d = device().unwrap();
    let s = compute_stream(&d);
    // SAFETY: refused at launch (its workgroup size exceeds every device's limit), never run.
    let k = unsafe { Kernel::from_spirv(&words, "main", &[Param::ReadWrite], 12) }.unwrap();
    let b = d.alloc_buffer(256).unwrap();
    let r = s.launch(&k, [1, 1, 1], &[Binding::Device(&b, 0, 256)], &push(&[1, 1, 1]));
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    drop(s);
    assert_eq!(d.validation_errors(), 0, "{:?}", d.last_validation_error());
}

/// A workgroup larger than the device allows.
const BIG_WORKGROUP_WGSL: &str = r#"
struct Push { delta0: u32, n: u32 }
var<push_constant> pc: Push;
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@compute @workgroup_size(1024, 2, 1)
fn main(@builtin(local_invocation_index) i: u32) {
    if i < pc.n { data[pc.delta0 / 4u + i] = i; }
}
"#;

/// `words` u32s of workgroup memory; each of the 64 invocations uses word `i * stride`.
fn shared_wgsl(words: u32, stride: u32) -> String {
    format!(
        r#"
struct Push {{ delta0: u32, n: u32 }}
var<push_constant> pc: Push;
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
var<workgroup> big: array<u32, {words}>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) i: u32) {{
    big[i * {stride}u] = i + 1u;
    workgroupBarrier();
    if i < pc.n {{ data[pc.delta0 / 4u + i] = big[i * {stride}u]; }}
}}
"#
    )
}

/// Kernel arguments only the module or the device can refuse, refused before the driver sees
/// them (found by an audit: each reached the driver before, the workgroup size as a validation
/// error, VUID-RuntimeSpirv-x-06432, with `launch` answering Ok; workgroup memory past the
/// limit likewise, VUID-RuntimeSpirv-Workgroup-06530, and on lavapipe 64 KiB of it compiled for
/// minutes; the push size wrapped to 0).
#[test]
fn module_and_device_limits_are_refused_before_the_driver() {
    let d = device().unwrap();
    let s = compute_stream(&d);
    let words = spirv(BIG_WORKGROUP_WGSL);
    // SAFETY: (all) refused by the checks, never run.
    let k = unsafe { Kernel::from_spirv(&words, "main", &[Param::ReadWrite], 4) }.unwrap();
    let b = d.alloc_buffer(8192).unwrap();
    let info = d.info();
    let r = s.launch(&k, [1, 1, 1], &[Binding::Device(&b, 0, 8192)], &push(&[2048]));
    if info.max_compute_work_group_invocations < 2048 {
        assert!(
            matches!(r, Err(Error::InvalidArgument { .. })),
            "a 1024x2 workgroup on a device allowing {}: {r:?}",
            info.max_compute_work_group_invocations
        );
    } else {
        eprintln!("this device allows {} invocations: the 1024x2 kernel runs", info.max_compute_work_group_invocations);
        r.unwrap();
    }
    // SAFETY: refused by the checks, never run.
    let huge = unsafe { Kernel::from_spirv(&words, "main", &[Param::ReadWrite], usize::MAX - 3) };
    assert!(matches!(huge, Err(Error::InvalidArgument { .. })), "push constants past usize: {huge:?}");
    // SAFETY: refused by the checks, never run.
    let missing = unsafe { Kernel::from_spirv(&words, "not_there", &[Param::ReadWrite], 4) };
    assert!(matches!(missing, Err(Error::InvalidArgument { .. })), "no such entry point: {missing:?}");
    assert!(info.max_kernel_bindings >= 1 && info.max_compute_work_group_size.iter().all(|&m| m >= 1));
    // Workgroup memory: one u32 past the limit is refused (never compiled); 1 KiB runs and is
    // right (a large array is slow to compile on lavapipe).
    let over = info.max_compute_shared_memory_size / 4 + 1;
    let words = spirv(&shared_wgsl(over, 64));
    // SAFETY: refused at launch by the workgroup-memory check, never run.
    let k = unsafe { Kernel::from_spirv(&words, "main", &[Param::ReadWrite], 4) }.unwrap();
    let r = s.launch(&k, [1, 1, 1], &[Binding::Device(&b, 0, 256)], &push(&[64]));
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{} bytes of workgroup memory: {r:?}", 4 * over);
    let words = spirv(&shared_wgsl(256, 4));
    // SAFETY: the kernel writes data[delta0/4 + i] for i < n = 64, inside the 256-byte binding.
    let k = unsafe { Kernel::from_spirv(&words, "main", &[Param::ReadWrite], 4) }.unwrap();
    s.launch(&k, [1, 1, 1], &[Binding::Device(&b, 0, 256)], &push(&[64])).unwrap();
    s.synchronize().unwrap();
    assert_eq!(words_of(&b, 0, 64), (1..=64).collect::<Vec<u32>>());
}

const SPIN_WGSL: &str = r#"
struct Push { delta0: u32, n: u32, iters: u32 }
var<push_constant> pc: Push;
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < pc.n {
        var x = id.x;
        // iters < 65535: llvmpipe ends loops after about that many iterations in all.
        for (var k = 0u; k < pc.iters; k++) {
            x = x * 1664525u + 1013904223u;
        }
        data[pc.delta0 / 4u + id.x] = x;
    }
}
"#;

/// The spin kernel's word `i` after `iters` steps of its LCG, by squaring the affine map (so a
/// long GPU run is checked in O(log iters)).
fn spin_cpu(i: u32, iters: u32) -> u32 {
    let (mut a, mut c) = (1664525u32, 1013904223u32);
    let (mut ra, mut rc) = (1u32, 0u32);
    let mut n = iters;
    while n > 0 {
        if n & 1 == 1 {
            ra = a.wrapping_mul(ra);
            rc = a.wrapping_mul(rc).wrapping_add(c);
        }
        c = a.wrapping_mul(c).wrapping_add(c);
        a = a.wrapping_mul(a);
        n >>= 1;
    }
    ra.wrapping_mul(i).wrapping_add(rc)
}

#[test]
fn spin_cpu_is_the_lcg() {
    for (i, n) in [(0u32, 0u32), (7, 1), (12345, 1000), (4095, 50_000)] {
        let slow = (0..n).fold(i, |x, _| x.wrapping_mul(1664525).wrapping_add(1013904223));
        assert_eq!(spin_cpu(i, n), slow, "{i} after {n}");
    }
}

/// A kernel that runs long enough (tens of ms on lavapipe) to still run when the test acts.
fn spin_kernel() -> Kernel {
    // SAFETY: the kernel writes binding 0 only in [delta, delta + 4n), declared read-write.
    // It trusts n: it stays in this test file, whose launches pass n within the binding.
    unsafe { Kernel::from_spirv(&spirv(SPIN_WGSL), "main", &[Param::ReadWrite], 8) }.unwrap()
}

const SPIN_N: u32 = 4096;
const SPIN_ITERS: u32 = 50_000;

fn unregister_during_a_launch_that_binds_the_range_waits(d: &Device) {
    let s = compute_stream(d);
    let k = spin_kernel();
    let mut m = Pages::new(5 * 4096);
    m.slice().fill(0);
    // SAFETY: the pages outlive the registration; the launch is waited for by unregister,
    // which is what this test checks.
    unsafe {
        host::register(d, m.ptr, m.len).unwrap();
        s.launch(&k, [SPIN_N / 64, 1, 1], &[Binding::host(m.ptr.add(12), 4 * SPIN_N as usize)], &push(&[SPIN_N, SPIN_ITERS])).unwrap();
    }
    let ev = s.record().unwrap();
    assert!(!ev.is_done().unwrap(), "the kernel finished before unregister: make it longer");
    host::unregister(d, m.ptr).unwrap();
    // Unregister returned: the kernel must be done, its writes in place. Without the wait the
    // bytes would still be zero here (and the import destroyed under the running kernel).
    assert!(ev.is_done().unwrap(), "unregister returned while the launch ran");
    let got = &m.slice()[12..12 + 4 * SPIN_N as usize];
    for (i, c) in got.chunks(4).enumerate() {
        assert_eq!(u32::from_ne_bytes(c.try_into().unwrap()), spin_cpu(i as u32, SPIN_ITERS), "word {i}");
    }
}

/// Issue 11: "`unregister`/`free_pinned`/drops wait for launches that name the memory". The raw
/// `free_pinned` and a `PinnedBuffer`'s drop returned at once, the launch still running (the
/// memory itself was safe: the batch owned it); now they return once it is done, as
/// `cudaFreeHost` does. An async copy that names a block likewise.
fn free_pinned_and_drops_wait_for_the_work_that_names_the_block(d: &Device) {
    let s = compute_stream(d);
    let k = spin_kernel();
    let spin = |s: &Stream, b: Binding<'_>| s.launch(&k, [SPIN_N / 64, 1, 1], &[b], &push(&[SPIN_N, SPIN_ITERS])).unwrap();
    let n = 4 * SPIN_N as usize;

    let block = host::alloc_pinned(d, 1 << 16).unwrap();
    // SAFETY: the block stays allocated until free_pinned, which waits for the launch.
    spin(&s, unsafe { Binding::host(block.as_ptr().add(8), n) });
    let ev = s.record().unwrap();
    assert!(!ev.is_done().unwrap(), "the kernel finished before free_pinned: make it longer");
    host::free_pinned(d, block).unwrap();
    assert!(ev.is_done().unwrap(), "free_pinned returned while a launch that binds the block ran");

    let mut pinned = PinnedBuffer::new(d, 1 << 16).unwrap();
    spin(&s, Binding::pinned_mut(&mut pinned, 8, n));
    let ev = s.record().unwrap();
    assert!(!ev.is_done().unwrap(), "the kernel finished before the drop: make it longer");
    drop(pinned);
    assert!(ev.is_done().unwrap(), "a PinnedBuffer's drop returned while a launch that binds it ran");

    // A copy out of a block, queued behind a long launch on other memory.
    let g = d.alloc_buffer(1 << 16).unwrap();
    let block = host::alloc_pinned(d, 1 << 16).unwrap();
    spin(&s, Binding::Device(&g, 0, n));
    // SAFETY: the block holds 4096 bytes and stays allocated until free_pinned, which waits.
    unsafe { s.copy_to_device_async(block.as_ptr(), 4096, &g, n) }.unwrap();
    let ev = s.record().unwrap();
    assert!(!ev.is_done().unwrap(), "the kernel finished before free_pinned: make it longer");
    host::free_pinned(d, block).unwrap();
    assert!(ev.is_done().unwrap(), "free_pinned returned while a copy out of the block was queued");
    s.synchronize().unwrap();
}

fn destroying_the_device_with_launches_in_flight_is_clean(d: &Device) {
    let s = compute_stream(d);
    let k = spin_kernel();
    let g = d.alloc_buffer(1 << 15).unwrap();
    let block = host::alloc_pinned(d, 1 << 15).unwrap();
    for i in 0..4usize {
        s.launch(&k, [SPIN_N / 64, 1, 1], &[Binding::Device(&g, i * 4096 + 4, 4 * SPIN_N as usize)], &push(&[SPIN_N, SPIN_ITERS / 4]))
            .unwrap();
        // SAFETY: the block stays allocated past the device's destroy (freed after it).
        let hb = unsafe { Binding::host(block.as_ptr().add(i * 4096 + 8), 4 * SPIN_N as usize) };
        s.launch(&k, [SPIN_N / 64, 1, 1], &[hb], &push(&[SPIN_N, SPIN_ITERS / 4])).unwrap();
    }
    s.flush().unwrap();
    drop(g); // the batches own it
    d.destroy().unwrap();
    assert_eq!(d.live_objects(), vkhost::LiveObjects::default(), "everything destroyed");
    assert!(matches!(s.flush(), Err(Error::DeviceDestroyed)));
    host::free_pinned(d, block).unwrap();
    drop(s);
}
#[test]
fn builtins_split_ranges_longer_than_max_storage_buffer_range() {
    let d = device().unwrap();
    let s = compute_stream(&d);
    let max = d.info().max_storage_buffer_range as usize;
    if max > 256 << 20 {
        eprintln!("SKIPPED: maxStorageBufferRange is {max} bytes; this test splits ranges longer than it (lavapipe: 128 MiB)");
        return;
    }
    let len = max + (1 << 20) + 12;
    let g = d.alloc_buffer(len + 8).unwrap();
    s.fill_u32(Binding::Device(&g, 4, len), 0x0123_4567).unwrap();
    let want: Vec<u8> = std::iter::repeat_n(0x0123_4567u32.to_ne_bytes(), len / 4).flatten().collect();
    assert_eq!(s.checksum(Binding::Device(&g, 4, len)).unwrap(), checksum_cpu(&want), "checksum over chunks");
    let mut p = PinnedBuffer::new(&d, len + 8).unwrap();
    p.fill(0xEE);
    s.copy_sm(Binding::Device(&g, 4, len), Binding::HostMut(&mut p[8..8 + len])).unwrap();
    s.synchronize().unwrap();
    assert!(p[8..] == want[..] && p[..8] == [0xEE; 8], "copy over chunks");
    // A range that runs past its buffer or block is refused before any piece of it runs.
    p.fill(0xEE);
    assert!(matches!(s.fill_u32(Binding::pinned_mut(&mut p, 8, len + 4), 0), Err(Error::OutOfRange)));
    assert!(matches!(s.fill_u32(Binding::Device(&g, 8, len + 4), 0), Err(Error::OutOfRange)));
    assert!(matches!(s.copy_sm(Binding::Device(&g, 0, len + 8), Binding::pinned_mut(&mut p, 4, len + 8)), Err(Error::OutOfRange)));
    s.synchronize().unwrap();
    assert!(p.iter().all(|&b| b == 0xEE), "a refused pinned range wrote nothing");
    assert_eq!(s.checksum(Binding::Device(&g, 4, len)).unwrap(), checksum_cpu(&want), "a refused device range wrote nothing");
}

/// A pinned block and a registration larger than one import (`max_import_piece`, here 64 KiB)
/// are one range to the API: the built-ins cut their launches at the import boundaries too,
/// for every binding kind, and a copy whose two sides are cut at different places.
#[test]
fn builtins_cut_at_the_imports_of_a_range_made_of_several() {
    let d = device_with(OpenOptions { max_import_piece: Some(64 << 10), ..opts() }).unwrap();
    if let Err(e) = d.host_registration() {
        eprintln!("SKIPPED: this test needs host registration ({e})");
        return;
    }
    let s = compute_stream(&d);
    let n = 256 << 10;
    let mut p = PinnedBuffer::new(&d, n).unwrap();
    p.fill(0);
    s.fill_u32(Binding::pinned_mut(&mut p, 0, n), 0x0101_0101).unwrap();
    s.synchronize().unwrap();
    assert!(p.iter().all(|&b| b == 1), "the whole block through the block");
    s.fill_u32(Binding::HostMut(&mut p[4096..4096 + (128 << 10)]), 0x0202_0202).unwrap();
    assert!(p[4096..4096 + (128 << 10)].iter().all(|&b| b == 2) && p[..4096].iter().all(|&b| b == 1), "a slice across two imports");
    // A registration of several imports, copied into the block at another phase (the two sides
    // cross their import boundaries at different offsets), and summed.
    let mut pages = Pages::new(n);
    for (i, b) in pages.slice().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let r = d.register(pages.slice()).unwrap();
    let len = n - (8 << 10);
    s.copy_sm(Binding::Host(&r[4 << 10..(4 << 10) + len]), Binding::pinned_mut(&mut p, 8 << 10, len)).unwrap();
    s.synchronize().unwrap();
    assert!(p[8 << 10..] == r[4 << 10..(4 << 10) + len], "copy across imports on both sides");
    let want = checksum_cpu(&r[4 << 10..(4 << 10) + len]);
    assert_eq!(s.checksum(Binding::Host(&r[4 << 10..(4 << 10) + len])).unwrap(), want, "checksum across imports");
    assert_eq!(s.checksum(Binding::pinned(&p, 8 << 10, len)).unwrap(), want);
    drop(r);
}

/// A refused `checksum_into` changes nothing: every launch is checked before the zero fill of
/// the result (which was launched first, and ran, before).
#[test]
fn a_refused_checksum_into_writes_nothing() {
    let d = device().unwrap();
    let s = compute_stream(&d);
    let b = d.alloc_buffer(64).unwrap();
    b.write(0, &[0xAB; 64]).unwrap();
    let r = s.checksum_into(Binding::Device(&b, 0, 64), Binding::Device(&b, 8, 8));
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "result overlapping the source: {r:?}");
    s.synchronize().unwrap();
    let mut back = [0u8; 64];
    b.read(0, &mut back).unwrap();
    assert_eq!(back, [0xAB; 64], "a refused call wrote the device buffer");
    let mut p = PinnedBuffer::new(&d, 4096).unwrap();
    p.fill(0xCD);
    let unregistered = vec![1u8; 64];
    let r = s.checksum_into(Binding::Host(&unregistered), Binding::HostMut(&mut p[0..8]));
    assert!(matches!(r, Err(Error::NotRegistered)), "{r:?}");
    assert!(p.iter().all(|&x| x == 0xCD), "a refused call wrote the block: {:?}", &p[..8]);
}

/// A raw range that would run past the end of the address space is refused
/// (`InvalidArgument`) before the built-in cuts it into pieces. Before, the cut added to the
/// address first: "attempt to add with overflow" in builds with overflow checks (debug), a
/// wrapped address in release builds (then refused by the first piece's launch).
#[test]
fn a_raw_binding_past_the_address_space_is_refused() {
    let d = device().unwrap();
    let s = compute_stream(&d);
    // SAFETY: no registration covers it: the launch is refused before anything runs.
    let raw = unsafe { Binding::host((usize::MAX - 15) as *const u8, 1 << 31) };
    assert!(matches!(s.fill_u32(raw, 0), Err(Error::InvalidArgument { .. })));
}

#[test]
fn safe_launches_never_leave_the_callers_memory_to_a_destructor() {
    let d = device().unwrap();
    let s = compute_stream(&d);
    // Registered (the caller's memory): the launch completed before `launch` returned, so a
    // forgotten Registration hands back bytes the device no longer writes. Without that wait
    // the fill would still sit in the unsubmitted batch here.
    let mut v = vec![0u8; 3 * 4096];
    let mut reg = d.register(&mut v).unwrap();
    s.fill_u32(Binding::HostMut(&mut reg[8..8 + 8192]), 0x7777_7777).unwrap();
    std::mem::forget(reg);
    assert!(v[8..8 + 8192].iter().all(|&b| b == 0x77) && v[..8] == [0; 8], "the fill is in place when the call returns");
    // Pinned (vkhost's memory): async, and the view waits for the pending write.
    let mut p = PinnedBuffer::new(&d, 1 << 20).unwrap();
    p.fill(0);
    s.fill_u32(Binding::HostMut(&mut p[..]), 0x5555_5555).unwrap();
    s.flush().unwrap();
    assert!(p.iter().all(|&b| b == 0x55), "Deref waited for the launch's write");
    drop(p);
    d.destroy().unwrap(); // the forgotten registration goes with the device, before `v` drops
}

/// Bindings through a pinned block (`Binding::pinned`, `Binding::pinned_mut`) are async, and
/// every view of the block made after the call waits for the launch: the fill's bytes are in
/// place when `Deref` hands them out, and `DerefMut` lets the kernel's read finish before the
/// bytes change. Bound on a second device through a raw registration of its bytes there (whose
/// views know nothing of the launch), the launch completes before the call returns.
#[test]
fn pinned_block_bindings_are_async_and_the_blocks_views_wait_for_them() {
    let d = device().unwrap();
    let s = compute_stream(&d);
    let n = 64 << 20;
    let mut block = PinnedBuffer::new(&d, n).unwrap();
    block.fill(0);
    s.fill_u32(Binding::pinned_mut(&mut block, 0, n), 0x3C3C_3C3C).unwrap();
    s.flush().unwrap(); // submitted, not waited for
    assert!(block.iter().all(|&b| b == 0x3C), "Deref waited for the kernel's writes");
    let gpu = d.alloc_buffer(n).unwrap();
    s.copy_sm(Binding::pinned(&block, 0, n), Binding::Device(&gpu, 0, n)).unwrap();
    s.flush().unwrap();
    block.fill(0x11); // DerefMut: waits for the kernel's read first
    assert_eq!(
        s.checksum(Binding::Device(&gpu, 0, n)).unwrap(),
        checksum_cpu(&vec![0x3C; n]),
        "the kernel read the bytes before they changed"
    );
    // Ranges and access are checked.
    assert!(
        matches!(s.fill_u32(Binding::pinned(&block, 0, 4096), 0), Err(Error::InvalidArgument { .. })),
        "a written binding needs pinned_mut"
    );
    assert!(matches!(s.fill_u32(Binding::pinned_mut(&mut block, n - 4096, 8192), 0), Err(Error::OutOfRange)));
    assert!(matches!(s.fill_u32(Binding::pinned_mut(&mut block, usize::MAX & !15, 16), 0), Err(Error::OutOfRange)));
    assert!(block.iter().all(|&b| b == 0x11), "refused launches wrote nothing");
    // The block's bytes registered on a second device: a launch there completes before it returns.
    let d2 = device().unwrap();
    if let Err(e) = d2.host_registration() {
        eprintln!("skipped the second-device part: host registration unavailable ({e})");
        return;
    }
    let s2 = compute_stream(&d2);
    let ptr = block.as_ptr() as *mut u8;
    // SAFETY: the block stays allocated, and is not accessed, until the unregister below.
    unsafe { host::register(&d2, ptr, n) }.unwrap();
    s2.fill_u32(Binding::pinned_mut(&mut block, 0, n), 0x4B4B_4B4B).unwrap();
    assert!(s2.record().unwrap().is_done().unwrap(), "the launch through another device's import completed before it returned");
    // And it comes after the block's own device's pending writes, as a slice of it would.
    s.fill_u32(Binding::pinned_mut(&mut block, 0, n), 0x5D5D_5D5D).unwrap(); // recorded, not submitted
    let g2 = d2.alloc_buffer(n).unwrap();
    s2.copy_sm(Binding::pinned(&block, 0, n), Binding::Device(&g2, 0, n)).unwrap();
    assert_eq!(
        s2.checksum(Binding::Device(&g2, 0, n)).unwrap(),
        checksum_cpu(&vec![0x5D; n]),
        "the other device read the bytes after the block's own device wrote them"
    );
    host::unregister(&d2, ptr).unwrap();
    assert!(block.iter().all(|&b| b == 0x5D));
}

#[test]
fn public_kernel_types_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Kernel>();
    check::<Param>();
    check::<Binding<'static>>();
}

/// The built-ins are reached through typed results (a built-in failing its own checks, which a
/// correct build never does, is an error, not a panic): each is there, with its name and
/// bindings, and launches through `Stream::launch` like a user kernel. Before: the accessors
/// returned `&Kernel` after an `expect` (this test did not compile).
#[test]
fn builtins_are_typed_results_and_launch() {
    use vkhost::kernel::builtin;
    let want: [(vkhost::Result<&'static Kernel>, &str, usize); 4] = [
        (builtin::fill(), "fill", 1),
        (builtin::copy(), "copy", 2),
        (builtin::copy_vec4(), "copy4", 2),
        (builtin::checksum(), "checksum", 2),
    ];
    for (k, name, n) in want {
        let k = k.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((k.name(), k.params().len()), (name, n));
    }
    let d = device().unwrap();
    let s = compute_stream(&d);
    let buf = d.alloc_buffer(4096).unwrap();
    let words = [1024u32, 0x0102_0304];
    let push: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    s.launch(builtin::fill().unwrap(), [4, 1, 1], &[Binding::Device(&buf, 0, 4096)], &push).unwrap();
    s.synchronize().unwrap();
    let mut out = vec![0u8; 4096];
    buf.read(0, &mut out).unwrap();
    assert!(out.chunks_exact(4).all(|w| w == 0x0102_0304u32.to_ne_bytes()));
}

const ADD_WGSL: &str = r#"
struct Push { delta0: u32, n: u32 }
var<push_constant> pc: Push;
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < pc.n {
        let i = pc.delta0 / 4u + id.x;
        data[i] = data[i] + ADDENDu;
    }
}
"#;

/// A distinct kernel per `addend`: adds it to each of the `n` words of binding 0.
fn add_kernel(addend: u32) -> Kernel {
    let src = ADD_WGSL.replace("ADDEND", &addend.to_string());
    // SAFETY: the kernel touches binding 0 only in [delta, delta + 4n), declared read-write.
    // It trusts n: it stays in this test file, whose launches pass n within the binding.
    unsafe { Kernel::from_spirv(&spirv(&src), "main", &[Param::ReadWrite], 4) }.unwrap()
}

/// A launch refused for its bindings compiles and caches no pipeline: with a cache of one, it
/// evicted the kernel that was there (found by an audit: a refused launch of another kernel
/// left its pipeline, and the next launch of the cached one compiled it again).
#[test]
fn a_refused_launch_leaves_the_pipeline_cache_alone() {
    for mode in [DescriptorMode::Push, DescriptorMode::Sets] {
        let d = device_in(mode, 1);
        let s = compute_stream(&d);
        let buf = d.alloc_buffer(256).unwrap();
        buf.write(0, &[0; 256]).unwrap();
        assert_eq!(d.live_objects().pipelines, 0);
        let mut not_registered = vec![0u8; 256];
        let r = s.launch(&add_kernel(2), [1, 1, 1], &[Binding::HostMut(&mut not_registered)], &push(&[64]));
        assert!(matches!(r, Err(Error::NotRegistered)), "{mode:?}: {r:?}");
        assert_eq!(d.live_objects().pipelines, 0, "{mode:?}: the refused launch made a pipeline");
        let k1 = add_kernel(1);
        s.launch(&k1, [1, 1, 1], &[Binding::Device(&buf, 0, 256)], &push(&[64])).unwrap();
        let r = s.launch(&add_kernel(5), [1, 1, 1], &[Binding::Device(&buf, 3, 256)], &push(&[64]));
        assert!(r.is_err(), "{mode:?}: a binding past the end: {r:?}");
        s.synchronize().unwrap();
        assert_eq!(d.live_objects().pipelines, 1, "{mode:?}: only the launched kernel's pipeline");
        assert!(words_of(&buf, 0, 64).iter().all(|&w| w == 1));
    }
}

fn words_of(b: &DeviceBuffer, off: usize, n: usize) -> Vec<u32> {
    let mut v = vec![0u8; 4 * n];
    b.read(off, &mut v).unwrap();
    v.chunks(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect()
}

/// More launches than one batch holds (512 commands) and than one descriptor pool serves (64
/// sets), on two buffers, with several batches in flight before one wait: every launch's set
/// (or pushed descriptors) names its own buffer, and pools are recycled, not accumulated.
fn many_launches_in_a_batch_and_across_batches(d: &Device) {
    let s = compute_stream(d);
    let (k1, k3) = (add_kernel(1), add_kernel(3));
    let n = 64usize;
    let (a, b) = (d.alloc_buffer(4 * n + 16).unwrap(), d.alloc_buffer(4 * n + 16).unwrap());
    a.write(0, &vec![0; 4 * n + 16]).unwrap();
    b.write(0, &vec![0; 4 * n + 16]).unwrap();
    for round in 0..2 {
        for i in 0..700 {
            s.launch(&k1, [1, 1, 1], &[Binding::Device(&a, 4, 4 * n)], &push(&[n as u32])).unwrap();
            if i % 7 == 0 {
                s.launch(&k3, [1, 1, 1], &[Binding::Device(&b, 8, 4 * n)], &push(&[n as u32])).unwrap();
            }
        }
        s.synchronize().unwrap();
        let r = round as u32 + 1;
        let (wa, wb) = (words_of(&a, 0, n + 4), words_of(&b, 0, n + 4));
        assert!(wa[0] == 0 && wa[1..=n].iter().all(|&w| w == 700 * r) && wa[n + 1..].iter().all(|&w| w == 0), "{wa:?}");
        assert!(wb[..2] == [0, 0] && wb[2..n + 2].iter().all(|&w| w == 300 * r) && wb[n + 2..].iter().all(|&w| w == 0), "{wb:?}");
        let pools = d.live_objects().descriptor_pools;
        match d.descriptor_mode() {
            DescriptorMode::Push => assert_eq!(pools, 0, "push descriptors need no pool"),
            // The free pools a stream keeps, once its batches are reaped.
            DescriptorMode::Sets => assert!((1..=8).contains(&pools), "{pools} descriptor pools"),
        }
    }
    drop(s);
    assert_eq!(d.live_objects().descriptor_pools, 0, "a stream's pools go with it");
}

/// Three times more distinct kernels than the cache holds, twice over: the cache evicts, the
/// batch that launched them keeps every one alive until it is reaped, and then only the cached
/// ones are left.
fn pipeline_cache_is_bounded(d: &Device) {
    let cap = d.options().max_pipelines;
    assert_eq!(cap, 4);
    let s = compute_stream(d);
    let kernels: Vec<Kernel> = (1..=3 * cap as u32).map(add_kernel).collect();
    let n = 64usize;
    let g = d.alloc_buffer(4 * n + 16).unwrap();
    g.write(0, &vec![0; 4 * n + 16]).unwrap();
    let mut want = 0u32;
    for round in 0..2 {
        for (k, c) in kernels.iter().zip(1u32..) {
            s.launch(k, [1, 1, 1], &[Binding::Device(&g, 16, 4 * n)], &push(&[n as u32])).unwrap();
            want += c;
        }
        // Not submitted yet: the open batch holds all of them, evicted or not.
        assert_eq!(d.live_objects().pipelines, 3 * cap as i64, "round {round}: held by the open batch");
        s.synchronize().unwrap();
        assert_eq!(d.live_objects().pipelines, cap as i64, "round {round}: reaped, only the cached ones are left");
        let w = words_of(&g, 0, n + 4);
        assert!(w[..4] == [0; 4] && w[4..].iter().all(|&x| x == want), "round {round}: {w:?}");
    }
    // A cache hit creates nothing: the last `cap` kernels are the cached ones.
    for k in &kernels[2 * cap..] {
        s.launch(k, [1, 1, 1], &[Binding::Device(&g, 16, 4 * n)], &push(&[n as u32])).unwrap();
        assert_eq!(d.live_objects().pipelines, cap as i64, "a cached kernel");
    }
    s.synchronize().unwrap();
}

/// With room for one pipeline: a long kernel runs on one stream while another stream launches
/// a second kernel, which evicts the first one's pipeline. The running batch still owns it (the
/// validation layer would report a pipeline destroyed under its command buffer), the kernel
/// completes with the right words, and the pipeline goes when the batch is reaped.
fn a_pipeline_evicted_while_its_launch_runs_stays_until_it_completes(d: &Device) {
    assert_eq!(d.options().max_pipelines, 1);
    let (s1, s2) = (compute_stream(d), compute_stream(d));
    let (spin, other) = (spin_kernel(), add_kernel(5));
    let n = 64usize;
    let g = d.alloc_buffer(4 * SPIN_N as usize + 64).unwrap();
    let h = d.alloc_buffer(4 * n).unwrap();
    // A GPU runs the spin kernel's SPIN_ITERS steps faster than the second launch builds its
    // pipeline: run longer (x8 each time) until the kernel is still running at the eviction.
    // llvmpipe ends loops after about 65535 iterations, so a CPU device gets one try (where
    // SPIN_ITERS runs for tens of ms).
    let mut iters = SPIN_ITERS;
    let ev = loop {
        h.write(0, &vec![0; 4 * n]).unwrap();
        s1.launch(&spin, [SPIN_N / 64, 1, 1], &[Binding::Device(&g, 20, 4 * SPIN_N as usize)], &push(&[SPIN_N, iters])).unwrap();
        let ev = s1.record().unwrap();
        s1.flush().unwrap();
        // The eviction happens here, when `other` is looked up (not when s2's work runs: on a
        // driver with one queue it runs after the long kernel).
        s2.launch(&other, [1, 1, 1], &[Binding::Device(&h, 0, 4 * n)], &push(&[n as u32])).unwrap();
        s2.flush().unwrap();
        if !ev.is_done().unwrap() {
            break ev;
        }
        assert!(
            d.info().device_type != vkhost::DeviceType::Cpu && iters < SPIN_ITERS * 4096,
            "the long kernel ({iters} steps) finished before the eviction"
        );
        s1.synchronize().unwrap();
        s2.synchronize().unwrap();
        iters *= 8;
    };
    assert_eq!(d.live_objects().pipelines, 2, "evicted from the cache, still owned by the running batch");
    s1.synchronize().unwrap();
    assert_eq!(d.live_objects().pipelines, 1, "destroyed once its batch was reaped");
    s2.synchronize().unwrap();
    let got = words_of(&g, 20, SPIN_N as usize);
    for (i, &w) in got.iter().enumerate() {
        assert_eq!(w, spin_cpu(i as u32, iters), "word {i}");
    }
    assert!(words_of(&h, 0, n).iter().all(|&w| w == 5));
    drop(ev);
    // Launched again, the evicted kernel gets a new pipeline (evicting the other one).
    s1.launch(&spin, [1, 1, 1], &[Binding::Device(&g, 20, 4 * 64)], &push(&[64, 10])).unwrap();
    s1.synchronize().unwrap();
    assert_eq!(d.live_objects().pipelines, 1);
    let got = words_of(&g, 20, 64);
    assert!(got.iter().enumerate().all(|(i, &w)| w == spin_cpu(i as u32, 10)));
}

/// The built-ins are safe kernels: launched directly (`Stream::launch`), their push constants
/// are checked against their bindings. Each launch here made the kernel touch bytes outside its
/// bindings (bytes a live `&[u8]` held, or another range of the buffer) or count twice before
/// the checks: a word count past the binding, a binding off the kernel's unit, workgroups in y.
#[test]
fn builtins_launched_directly_stay_inside_their_bindings() {
    use vkhost::kernel::builtin;
    let d = device().unwrap();
    let s = d.stream_on(QueueKind::Compute).unwrap();
    let invalid = |r: vkhost::Result<()>, what: &str| assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{what}: {r:?}");
    let mut block = PinnedBuffer::new(&d, 4096).unwrap();
    block.fill(0);
    {
        let (a, b) = block.split_at_mut(64);
        let b: &[u8] = b;
        // 64 bytes bound, 1024 words named.
        invalid(
            s.launch(builtin::fill().unwrap(), [1, 1, 1], &[Binding::HostMut(a)], &push(&[1024, 0xAAAA_AAAA])),
            "fill past its binding",
        );
        s.synchronize().unwrap();
        assert!(b.iter().all(|&x| x == 0), "bytes past the binding");
    }
    {
        let (a, b) = block.split_at_mut(2);
        let a: &[u8] = a;
        invalid(
            s.launch(builtin::fill().unwrap(), [1, 1, 1], &[Binding::HostMut(&mut b[..8])], &push(&[2, 0xBBBB_BBBB])),
            "fill off a word",
        );
        s.synchronize().unwrap();
        assert_eq!(a, [0, 0], "bytes before the binding");
    }
    let src = d.alloc_buffer(256).unwrap();
    src.write(0, &[7u8; 256]).unwrap();
    let dst = d.alloc_buffer(256).unwrap();
    dst.write(0, &[0u8; 256]).unwrap();
    let copy4 = builtin::copy_vec4().unwrap();
    invalid(s.launch(copy4, [1, 1, 1], &[Binding::Device(&src, 0, 16), Binding::Device(&dst, 4, 16)], &push(&[1])), "copy4 off 16 bytes");
    invalid(
        s.launch(copy4, [1, 1, 1], &[Binding::Device(&src, 0, 16), Binding::Device(&dst, 0, 16)], &push(&[2])),
        "copy4 past its binding",
    );
    let pat = pattern(4096, 9);
    let data = d.alloc_buffer(4096).unwrap();
    data.write(0, &pat).unwrap();
    let out = d.alloc_buffer(8).unwrap();
    out.write(0, &[0; 8]).unwrap();
    let sum = builtin::checksum().unwrap();
    let binds = [Binding::Device(&data, 0, 4096), Binding::Device(&out, 0, 8)];
    invalid(s.launch(sum, [1, 2, 1], &binds, &push(&[1024, 0])), "checksum with workgroups in y");
    invalid(
        s.launch(sum, [1, 1, 1], &[Binding::Device(&data, 0, 4096), Binding::Device(&out, 0, 4)], &push(&[1024, 0])),
        "a 4-byte result",
    );
    // In bounds, on the units: as before.
    s.launch(copy4, [1, 1, 1], &[Binding::Device(&src, 0, 16), Binding::Device(&dst, 16, 16)], &push(&[1])).unwrap();
    s.launch(sum, [1, 1, 1], &binds, &push(&[1024, 0])).unwrap();
    s.synchronize().unwrap();
    let mut back = [0u8; 256];
    dst.read(0, &mut back).unwrap();
    assert!(back[..16].iter().all(|&x| x == 0) && back[16..32].iter().all(|&x| x == 7) && back[32..].iter().all(|&x| x == 0));
    let mut v = [0u8; 8];
    out.read(0, &mut v).unwrap();
    assert_eq!(u64::from_le_bytes(v), checksum_cpu(&pat));
}

/// Every entry point of `src`, as SPIR-V `version`.
fn spirv_all(src: &str, version: (u8, u8)) -> Vec<u32> {
    let module = naga::front::wgsl::parse_str(src).unwrap_or_else(|e| panic!("{}", e.emit_to_string(src)));
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::PUSH_CONSTANT)
        .validate(&module)
        .unwrap_or_else(|e| panic!("{}", e.emit_to_string(src)));
    let opts = naga::back::spv::Options { lang_version: version, ..Default::default() };
    naga::back::spv::write_vec(&module, &info, &opts, None).unwrap()
}

/// A module of entry points: `small` (64 invocations, 256 bytes of workgroup memory), `wide`
/// (a 1024x2 workgroup) and, with `hog_limit`, `hog` (one u32 more workgroup memory than that).
fn entries(hog_limit: Option<u32>) -> String {
    let hog = match hog_limit {
        Some(limit) => format!(
            r#"
var<workgroup> many: array<u32, {}>;
@compute @workgroup_size(64)
fn hog(@builtin(local_invocation_index) i: u32) {{
    many[i * 64u] = i;
    workgroupBarrier();
    if i < pc.n {{ data[pc.delta0 / 4u + i] = many[i * 64u]; }}
}}
"#,
            limit / 4 + 1
        ),
        None => String::new(),
    };
    format!(
        r#"
struct Push {{ delta0: u32, n: u32 }}
var<push_constant> pc: Push;
@group(0) @binding(0) var<storage, read_write> data: array<u32>;
var<workgroup> few: array<u32, 64>;
@compute @workgroup_size(64)
fn small(@builtin(local_invocation_index) i: u32) {{
    few[i] = i + 7u;
    workgroupBarrier();
    if i < pc.n {{ data[pc.delta0 / 4u + i] = few[i]; }}
}}
@compute @workgroup_size(1024, 2, 1)
fn wide(@builtin(local_invocation_index) i: u32) {{
    if i < pc.n {{ data[pc.delta0 / 4u + i] = i; }}
}}
{hog}"#
    )
}

/// The limits are read per entry point of a module of several: one entry's workgroup size or
/// workgroup memory refuses that entry (SPIR-V 1.4 lists each entry's workgroup variables;
/// before 1.4, with several entry points, vkhost cannot tell whose they are and checks no
/// workgroup memory, rather than refuse a valid entry), and a valid entry beside a refused one
/// runs. (The validation layer of Vulkan 1.3.239 sums a module's workgroup variables over all
/// its entry points, so `small` runs from a module without `hog`.)
#[test]
fn limits_are_per_entry_point() {
    let d = device().unwrap();
    let s = compute_stream(&d);
    let info = d.info();
    let b = d.alloc_buffer(256).unwrap();
    let refused = |r: vkhost::Result<()>| matches!(r, Err(Error::InvalidArgument { .. }));
    for version in [(1, 3), (1, 4)] {
        let words = spirv_all(&entries(None), version);
        // SAFETY: (all) `small` writes data[delta0/4 + i] for i < n = 64, inside the 256-byte
        // binding; the others are refused before they run.
        let small = unsafe { Kernel::from_spirv(&words, "small", &[Param::ReadWrite], 4) }.unwrap();
        s.launch(&small, [1, 1, 1], &[Binding::Device(&b, 0, 256)], &push(&[64])).unwrap();
        s.synchronize().unwrap();
        assert_eq!(words_of(&b, 0, 64), (7..71).collect::<Vec<u32>>(), "SPIR-V {version:?}");
        if info.max_compute_work_group_invocations < 2048 {
            // SAFETY: refused at launch by the workgroup-size check, never run.
            let wide = unsafe { Kernel::from_spirv(&words, "wide", &[Param::ReadWrite], 4) }.unwrap();
            assert!(refused(s.launch(&wide, [1, 1, 1], &[Binding::Device(&b, 0, 256)], &push(&[64]))), "wide, {version:?}");
        }
        if version >= (1, 4) {
            let words = spirv_all(&entries(Some(info.max_compute_shared_memory_size)), version);
            // SAFETY: refused at launch by the workgroup-memory check, never run.
            let hog = unsafe { Kernel::from_spirv(&words, "hog", &[Param::ReadWrite], 4) }.unwrap();
            assert!(refused(s.launch(&hog, [1, 1, 1], &[Binding::Device(&b, 0, 256)], &push(&[64]))), "hog, {version:?}");
        }
    }
    s.synchronize().unwrap();
}

/// A SPIR-V instruction: `opcode` with its operands.
fn op(opcode: u32, operands: &[u32]) -> Vec<u32> {
    let mut v = vec![((operands.len() as u32 + 1) << 16) | opcode];
    v.extend_from_slice(operands);
    v
}

/// A module whose entry point "main" (LocalSize 1 1 1) has one Workgroup variable of struct
/// type `%(10 + depth)`, each struct `%(11 + k)` made of `fan` members of `%(10 + k)`, and `%10`
/// a bool: valid type declarations, `fan^depth` bytes at least (no function body: never given
/// to a driver).
fn nested_structs(fan: usize, depth: u32) -> Vec<u32> {
    let mut w = vec![0x0723_0203, 0x0001_0300, 0, 1 << 20, 0];
    w.extend(op(17, &[1])); // OpCapability Shader
    w.extend(op(14, &[0, 1])); // OpMemoryModel Logical GLSL450
    w.extend(op(15, &[5, 1, u32::from_le_bytes(*b"main"), 0])); // OpEntryPoint GLCompute %1 "main"
    w.extend(op(16, &[1, 17, 1, 1, 1])); // OpExecutionMode %1 LocalSize 1 1 1
    w.extend(op(20, &[10])); // %10 = OpTypeBool
    for k in 0..depth {
        let mut ops = vec![11 + k];
        ops.extend(std::iter::repeat_n(10 + k, fan));
        w.extend(op(30, &ops)); // OpTypeStruct
    }
    w.extend(op(32, &[900, 4, 10 + depth])); // OpTypePointer Workgroup
    w.extend(op(59, &[900, 901, 4])); // OpVariable Workgroup
    w
}

/// Sizing a module's workgroup memory walks each type once: a 211-word module of ten levels of
/// structs of 16 members each (16^10 paths to its leaf) took hours in `from_spirv` when each
/// member's type was sized again (found by an audit). Its 2^40 bytes are refused at launch.
#[test]
fn nested_struct_types_are_sized_in_linear_time() {
    let words = nested_structs(16, 10);
    let (tx, rx) = std::sync::mpsc::channel();
    let w = words.clone();
    std::thread::spawn(move || {
        // SAFETY: never launched on a driver (refused by the workgroup-memory check below).
        let _ = tx.send(unsafe { Kernel::from_spirv(&w, "main", &[], 0) }.map(|_| ()));
    });
    let made = rx.recv_timeout(std::time::Duration::from_secs(60));
    assert!(made.is_ok(), "from_spirv of a {}-word module did not return within 60 s", words.len());
    made.unwrap().unwrap();
    let d = device().unwrap();
    let s = compute_stream(&d);
    // SAFETY: refused before the driver sees the module.
    let k = unsafe { Kernel::from_spirv(&words, "main", &[], 0) }.unwrap();
    let r = s.launch(&k, [1, 1, 1], &[], &[]);
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "16^10 bytes of workgroup memory: {r:?}");
}

/// A built-in launched directly with too few workgroups for its element count is refused: on
/// lavapipe a `fill` of 24 Mi words in one workgroup set 16 Mi of them and answered `Ok`
/// (llvmpipe ends loops after ~65 535 rounds; found by an audit), and no workgroups at all did
/// nothing. With enough workgroups every word is set.
#[test]
fn builtins_launched_with_too_few_workgroups_are_refused() {
    use vkhost::kernel::builtin;
    let d = device().unwrap();
    let s = d.stream_on(QueueKind::Compute).unwrap();
    let words = 24usize << 20;
    let buf = d.alloc_buffer(words * 4).unwrap();
    let all = || Binding::Device(&buf, 0, words * 4);
    s.fill_u32(all(), 0).unwrap();
    for groups in [[1, 1, 1], [0, 1, 1], [2, 1, 1]] {
        let r = s.launch(builtin::fill().unwrap(), groups, &[all()], &push(&[words as u32, 0x0101_0101]));
        assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{groups:?} for {words} words: {r:?}");
    }
    // 1 << 15 rounds of 256 invocations per workgroup: 3 workgroups cover 24 Mi words.
    s.launch(builtin::fill().unwrap(), [3, 1, 1], &[all()], &push(&[words as u32, 0x0101_0101])).unwrap();
    let small = 100 * 256;
    s.launch(builtin::fill().unwrap(), [1, 1, 1], &[Binding::Device(&buf, 0, small * 4)], &push(&[small as u32, 7])).unwrap();
    s.synchronize().unwrap();
    let mut back = vec![0u32; words];
    buf.read_slice(0, &mut back).unwrap();
    assert!(back[..small].iter().all(|&w| w == 7), "the small fill");
    let unset = back[small..].iter().filter(|&&w| w != 0x0101_0101).count();
    assert_eq!(unset, 0, "words the 3-workgroup fill left");
    // A zero count with no workgroups is an empty launch, as before.
    s.launch(builtin::fill().unwrap(), [0, 1, 1], &[all()], &push(&[0, 9])).unwrap();
    s.synchronize().unwrap();
    assert_eq!(d.validation_errors(), 0);
}

/// `fill_u32` and `copy_sm` over host bytes only partly registered are refused before any
/// piece runs: the first pieces (inside the registration) were launched and written before a
/// later piece answered `NotRegistered` (found by an audit). A refused call writes nothing, as
/// `checksum_into`'s.
#[test]
fn a_refused_fill_or_copy_writes_nothing() {
    let page = host::page_size();
    // One import per page, so the registered part is several pieces.
    let d = device_with(OpenOptions { max_import_piece: Some(page), ..opts() }).unwrap();
    let s = compute_stream(&d);
    let mut p = Pages::new(3 * page);
    p.slice().fill(0xCD);
    // SAFETY: `p` stays mapped until after the unregister below.
    unsafe { host::register(&d, p.ptr, 2 * page) }.unwrap();
    let r = s.fill_u32(Binding::HostMut(p.slice()), 0x0101_0101);
    assert!(matches!(r, Err(Error::NotRegistered)), "fill over bytes nothing covers: {r:?}");
    s.synchronize().unwrap();
    assert!(p.slice().iter().all(|&x| x == 0xCD), "a refused fill wrote the registered pages");
    let src = d.alloc_buffer(3 * page).unwrap();
    src.write(0, &vec![0x11; 3 * page]).unwrap();
    let r = s.copy_sm(Binding::Device(&src, 0, 3 * page), Binding::HostMut(p.slice()));
    assert!(matches!(r, Err(Error::NotRegistered)), "copy over bytes nothing covers: {r:?}");
    s.synchronize().unwrap();
    assert!(p.slice().iter().all(|&x| x == 0xCD), "a refused copy wrote the registered pages");
    host::unregister(&d, p.ptr).unwrap();
    assert_eq!(d.validation_errors(), 0);
}

/// A raw binding over bytes of two registrations that share a page is refused
/// (`NotRegistered`): the launch holds one import and notes its use there, so an unregister of
/// the other registration would not have waited for the kernel writing its bytes (found by an
/// audit). Bindings inside one registration, or in the page's bytes no one registered, launch.
#[test]
fn a_raw_binding_over_two_registrations_of_one_page_is_refused() {
    // Mapped before the device: a failed assertion unwinds through the device's teardown (which
    // ends the imports) before the pages are unmapped.
    let page = host::page_size();
    let mut p = Pages::new(page);
    let d = device().unwrap();
    let s = compute_stream(&d);
    p.slice().fill(0);
    let base = p.ptr;
    // SAFETY: (both) `p` stays mapped until after the unregisters below.
    unsafe { host::register(&d, base.add(16), 16) }.unwrap();
    // SAFETY: as above.
    unsafe { host::register(&d, base.add(48), 16) }.unwrap();
    // SAFETY: refused before any work is recorded.
    let r = s.fill_u32(unsafe { Binding::host(base.add(24), 32) }, 0x0101_0101);
    assert!(matches!(r, Err(Error::NotRegistered)), "a binding over both registrations' bytes: {r:?}");
    // SAFETY: (both) the bytes stay registered and untouched by the host until `synchronize`.
    s.fill_u32(unsafe { Binding::host(base.add(16), 16) }, 0x0202_0202).unwrap();
    // SAFETY: as above.
    s.fill_u32(unsafe { Binding::host(base.add(32), 16) }, 0x0303_0303).unwrap();
    s.synchronize().unwrap();
    let bytes = p.slice();
    assert!(bytes[16..32].iter().all(|&b| b == 2) && bytes[32..48].iter().all(|&b| b == 3), "{:?}", &bytes[..64]);
    assert!(bytes[..16].iter().chain(&bytes[48..]).all(|&b| b == 0), "bytes outside the fills");
    // SAFETY: (both) nothing uses them after the synchronize.
    host::unregister(&d, unsafe { base.add(16) }).unwrap();
    // SAFETY: as above.
    host::unregister(&d, unsafe { base.add(48) }).unwrap();
    assert_eq!(d.validation_errors(), 0);
}

/// Zero-length built-in calls do nothing and answer `Ok` wherever the empty range points: an
/// empty `Vec`'s dangling pointer (address 1) or an empty slice off a 4-byte boundary was
/// refused as unaligned, while the same call over an empty device range succeeded (audit).
#[test]
fn empty_builtin_calls_do_nothing_wherever_they_point() {
    let d = device().unwrap();
    let s = d.stream_on(QueueKind::Compute).unwrap();
    let g = d.alloc_buffer(64).unwrap();
    g.write(0, &[0x5A; 64]).unwrap();
    let mut empty: Vec<u8> = Vec::new();
    let words = [0u32; 4];
    // SAFETY: 16 bytes of a live array of u32, read only.
    let bytes = unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), 16) };
    s.fill_u32(Binding::HostMut(&mut empty), 1).unwrap();
    s.fill_u32(Binding::Device(&g, 5, 0), 1).unwrap();
    assert_eq!(s.checksum(Binding::Host(&[])).unwrap(), checksum_cpu(&[]));
    assert_eq!(s.checksum(Binding::Host(&bytes[5..5])).unwrap(), 0);
    s.copy_sm(Binding::Host(&bytes[3..3]), Binding::Device(&g, 7, 0)).unwrap();
    s.copy_sm(Binding::Host(&[]), Binding::HostMut(&mut empty)).unwrap();
    s.synchronize().unwrap();
    let mut back = [0u8; 64];
    g.read(0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0x5A), "an empty call wrote bytes");
    // Still refused: a non-empty unaligned range, and an empty one past the buffer's end.
    assert!(matches!(s.checksum(Binding::Host(&bytes[1..5])), Err(Error::InvalidArgument { .. })));
    assert!(s.fill_u32(Binding::Device(&g, 68, 0), 1).is_err());
}

/// `Stream::copy_async` between device buffers runs the copy kernel from
/// `OpenOptions::d2d_kernel_min` on a compute-capable stream when both offsets and the length are
/// multiples of 4, and vkCmdCopyBuffer otherwise (a kernel's pipeline appears in `live_objects`
/// only when it runs: one device per case); every route copies the right bytes, in stream order
/// with the fills and copies around it, a synchronous read right after one sees its bytes, and
/// CPU stores into the mapped buffer right after one land after it. The default: never on a CPU
/// device, from 2 MiB on a GPU. Both descriptor modes.
#[test]
fn copy_async_runs_the_copy_kernel_from_d2d_kernel_min() {
    let n = 1 << 16;
    let src = pattern(n, 21);
    // (src offset, dst offset, length, runs the kernel)
    let cases = [
        (0, 0, 2048, false),    // below the minimum
        (64, 128, 8192, true),  // 16-byte phase and length
        (4, 8, 4100, true),     // words
        (1, 3, 8192, false),    // unaligned offsets
        (0, 0, 4097, false),    // a length not a multiple of 4
        (8, 4100, 40000, true), // crossing into the buffer's second half
    ];
    for push in [true, false] {
        for (so, dof, len, kernel) in cases {
            let d = device_with(OpenOptions { d2d_kernel_min: Some(4096), push_descriptors: push, ..opts() }).unwrap();
            let s = d.stream_on(QueueKind::Compute).unwrap();
            let (a, b, c) = (d.alloc_buffer(n).unwrap(), d.alloc_buffer(n).unwrap(), d.alloc_buffer(n).unwrap());
            a.write(0, &src).unwrap();
            let before = d.live_objects().pipelines;
            s.fill_async(&b, 0, n, 0xEEEE_EEEE).unwrap();
            s.copy_async(&a, so, &b, dof, len).unwrap();
            // The pipeline is made when the launch is recorded.
            let ran = d.live_objects().pipelines > before;
            // Stream order after it: a whole-buffer copy of what it wrote (by the kernel).
            s.copy_async(&b, 0, &c, 0, n).unwrap();
            // A synchronous read of `c` right after, with no synchronize: it waits for both.
            let mut got = vec![0u8; n];
            c.read(0, &mut got).unwrap();
            let what = format!("copy {so} -> {dof}, {len} bytes (push descriptors {push})");
            assert_eq!(got[dof..dof + len], src[so..so + len], "{what}");
            assert!(got[..dof].iter().chain(&got[dof + len..]).all(|&x| x == 0xEE), "{what}: bytes outside it changed");
            assert_eq!(ran, kernel, "{what}: ran the kernel?");
        }
        // CPU stores into mapped device memory (`BarWrites::On`) right after a kernel copy into
        // the same buffer: the write waits for the kernel, so its bytes are not overwritten.
        let d =
            device_with(OpenOptions { d2d_kernel_min: Some(4096), push_descriptors: push, bar_writes: vkhost::BarWrites::On, ..opts() })
                .unwrap();
        let s = d.stream_on(QueueKind::Compute).unwrap();
        let (a, b) = (d.alloc_buffer(n).unwrap(), d.alloc_buffer(n).unwrap());
        a.write(0, &src).unwrap();
        let before = (d.live_objects().pipelines, host::device_stats(&d).mapped_bytes);
        s.copy_async(&a, 0, &b, 0, n).unwrap();
        b.write(100, &[0x77; 64]).unwrap();
        let after = (d.live_objects().pipelines, host::device_stats(&d).mapped_bytes);
        assert_eq!((after.0 - before.0, after.1 - before.1), (1, 64), "a kernel copy, then 64 bytes of stores");
        let mut got = vec![0u8; n];
        b.read(0, &mut got).unwrap();
        let mut want = src.clone();
        want[100..164].fill(0x77);
        assert!(got == want, "a CPU write after a kernel copy_async (push descriptors {push})");
        drop(s);
        // The default: the CPU driver's vkCmdCopyBuffer is faster than its kernel.
        let e = device_with(OpenOptions { d2d_kernel_min: None, push_descriptors: push, ..opts() }).unwrap();
        let s = e.stream_on(QueueKind::Compute).unwrap();
        let big = OpenOptions::D2D_KERNEL_MIN;
        let (x, y) = (e.alloc_buffer(big).unwrap(), e.alloc_buffer(big).unwrap());
        x.write(0, &pattern(big, 5)).unwrap();
        let before = e.live_objects().pipelines;
        s.copy_async(&x, 0, &y, 0, big).unwrap();
        s.synchronize().unwrap();
        let cpu = e.info().device_type == vkhost::DeviceType::Cpu;
        assert_eq!(e.live_objects().pipelines > before, !cpu, "default d2d_kernel_min on a {:?} device", e.info().device_type);
        let mut got = vec![0u8; big];
        y.read(0, &mut got).unwrap();
        assert!(got == pattern(big, 5), "default route's bytes");
    }
}

/// Pipelines, their layouts, descriptor pools and kernels dropped while their device is
/// destroyed on another thread. Each round opens two devices (push descriptors with a cache of
/// one pipeline; descriptor sets with a cache of two) and runs two threads per device that
/// launch four add kernels, shared by all threads and devices, through those caches, so nearly
/// every launch evicts a pipeline that an in-flight batch may still hold. The threads also drop
/// streams with launches in flight (their shutdown reaps the batches and drops the last owners
/// of evicted pipelines, possibly while a destroy waits for the device lock), keep events past
/// their stream, replace their kernel clones with fresh kernels of the same words (a cache hit
/// from another `Kernel`), release queued garbage and check their words after a synchronize.
/// The main thread destroys each device at a random point under them. Every launch answers
/// `Ok` or `DeviceDestroyed`; afterwards each device counts no object (no pipeline, layout or
/// pool outlived the teardown) and its validation layer reported nothing (a pipeline destroyed
/// under a running batch, or left alive at vkDestroyDevice, would be both). Last owners do go
/// while a destroy waits for the device lock here: with `Shared::pipeline_garbage` made to
/// forget what it is given, every run failed on the object count in its first round.
///
/// The validation layer on Debian 12 (1.3.239) races vkDestroyDevice against calls on *other*
/// devices (see tests/lifecycle.rs): each device's threads hold its gate (read) around every
/// call, and a destroy takes the other device's gate (write), so only the destroyed device's
/// own threads race its teardown.
#[test]
fn pipelines_and_kernels_dropped_while_the_device_is_destroyed() {
    use std::sync::RwLock;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const N: usize = 64;
    let kernels: Vec<Kernel> = (1..=4).map(add_kernel).collect();
    let words: Vec<Vec<u32>> = (1..=4).map(|a| spirv(&ADD_WGSL.replace("ADDEND", &a.to_string()))).collect();
    let launched = AtomicU64::new(0);
    let checked = AtomicU64::new(0);
    let destroyed_mid_launch = AtomicU64::new(0);
    let t0 = std::time::Instant::now();
    for round in 0..12u64 {
        let devs = [device_in(DescriptorMode::Push, 1), device_in(DescriptorMode::Sets, 2)];
        let gates = [RwLock::new(()), RwLock::new(())];
        let started = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        std::thread::scope(|sc| {
            for t in 0..4usize {
                let (devs, gates, kernels, words) = (&devs, &gates, &kernels, &words);
                let (launched, checked, destroyed_mid_launch, started, stop) =
                    (&launched, &checked, &destroyed_mid_launch, &started, &stop);
                sc.spawn(move || {
                    let di = t % 2;
                    let d: &Device = &devs[di];
                    let gate = || gates[di].read().unwrap();
                    let mut r = Rng(0x9E37_79B9_7F4A_7C15 ^ (round * 8 + t as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
                    // DeviceDestroyed ends the thread; anything else fails the test.
                    macro_rules! ok {
                        ($e:expr) => {
                            match $e {
                                Ok(v) => v,
                                Err(Error::DeviceDestroyed) => break,
                                Err(e) => panic!("round {round} thread {t}: {e:?}"),
                            }
                        };
                    }
                    let mut mine: Vec<Kernel> = kernels.clone();
                    let mut events = Vec::new();
                    let mut stream = None;
                    let mut g = None;
                    let mut want = 0u32;
                    let mut n = 0u64;
                    loop {
                        let _g = gate();
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let Some(buf) = &g else {
                            let b = ok!(d.alloc_buffer(4 * N));
                            ok!(b.write(0, &[0; 4 * N]));
                            g = Some(b);
                            continue;
                        };
                        let Some(s) = &stream else {
                            stream = Some(ok!(d.stream_on(QueueKind::Compute)));
                            continue;
                        };
                        if n == 0 {
                            started.fetch_add(1, Ordering::Relaxed);
                        }
                        n += 1;
                        match r.below(20) {
                            0..=11 => {
                                let k = r.below(4);
                                match s.launch(&mine[k], [1, 1, 1], &[Binding::Device(buf, 0, 4 * N)], &push(&[N as u32])) {
                                    Ok(()) => {
                                        want = want.wrapping_add(k as u32 + 1);
                                        launched.fetch_add(1, Ordering::Relaxed);
                                    }
                                    Err(Error::DeviceDestroyed) => {
                                        destroyed_mid_launch.fetch_add(1, Ordering::Relaxed);
                                        break;
                                    }
                                    Err(e) => panic!("round {round} thread {t}: launch: {e:?}"),
                                }
                            }
                            12 => events.push(ok!(s.record())),
                            // Launches in flight: the shutdown waits for them and drops their
                            // batches (and the last owners of evicted pipelines) here.
                            13 => stream = None,
                            14 => events.clear(),
                            15 => {
                                ok!(s.synchronize());
                                let w = words_of_or_destroyed(buf, N);
                                let Some(w) = w else { break };
                                assert!(w.iter().all(|&x| x == want), "round {round} thread {t}: want {want}: {w:?}");
                                checked.fetch_add(1, Ordering::Relaxed);
                            }
                            16 => {
                                // Another `Kernel` of the same words: the same cache entry.
                                let k = r.below(4);
                                // SAFETY: as for `add_kernel`.
                                mine[k] = unsafe { Kernel::from_spirv(&words[k], "main", &[Param::ReadWrite], 4) }.unwrap();
                            }
                            17 => d.release_queued(),
                            _ => ok!(s.flush()),
                        }
                    }
                    // Dropped on this thread, around or after the destroy: the streams (with
                    // whatever they still hold), the events, the buffer, the kernels.
                    let _g = gate();
                    drop((stream, events, g, mine));
                });
            }
            let mut r = Rng(0xD1B5_4A32_D192_ED03 ^ (round + 1));
            // Let every thread get to work, then a little more (0-30 ms), then destroy.
            while started.load(Ordering::Relaxed) < 4 && t0.elapsed() < std::time::Duration::from_secs(60) {
                std::thread::yield_now();
            }
            for di in [round as usize % 2, 1 - round as usize % 2] {
                std::thread::sleep(std::time::Duration::from_millis(r.below(30) as u64));
                let _other = gates[1 - di].write().unwrap();
                devs[di].destroy().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        for (di, d) in devs.iter().enumerate() {
            assert_eq!(d.live_objects(), vkhost::LiveObjects::default(), "round {round} device {di}: objects left after destroy");
            assert_eq!(d.validation_errors(), 0, "round {round} device {di}: {:?}", d.last_validation_error());
        }
    }
    eprintln!(
        "{} launches, {} checks of the words, {} launches answered DeviceDestroyed, in {:.1?}",
        launched.load(Ordering::Relaxed),
        checked.load(Ordering::Relaxed),
        destroyed_mid_launch.load(Ordering::Relaxed),
        t0.elapsed()
    );
    assert!(launched.load(Ordering::Relaxed) > 0);
}

/// `n` words of `b` from its start, or `None` once its device is destroyed.
fn words_of_or_destroyed(b: &DeviceBuffer, n: usize) -> Option<Vec<u32>> {
    let mut v = vec![0u8; 4 * n];
    match b.read(0, &mut v) {
        Ok(()) => Some(v.chunks(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect()),
        Err(Error::DeviceDestroyed) => None,
        Err(e) => panic!("read: {e:?}"),
    }
}
