//! Compute kernels that name host memory: launches over device buffers, pinned blocks,
//! registrations and raw registered ranges.
//!
//! A [`Kernel`] is SPIR-V words with an entry point, its storage-buffer bindings (set 0,
//! bindings `0..n`, each [`Param::ReadOnly`] or [`Param::ReadWrite`]) and the size of its own
//! push constants. It is not tied to a device: each device keeps a bounded pipeline cache keyed
//! by a hash of the kernel, filled on a kernel's first launch there (see **Pipelines** below).
//! [`Stream::launch`](crate::Stream::launch) records a dispatch on a stream; a [`Binding`] names
//! the memory of each binding.
//!
//! ## The binding convention
//!
//! Vulkan binds a storage buffer at an offset that must be a multiple of
//! minStorageBufferOffsetAlignment; a host range lies wherever the caller's data lies. So each
//! binding is bound at its range's offset in the covering buffer *aligned down* to
//! `max(minStorageBufferOffsetAlignment, 16)` (16: so `vec4` loads stay aligned), spanning to the
//! range's end, and the kernel is told the difference. **The push-constant block starts with
//! one `u32` per storage binding, in binding order: that binding's delta in bytes (0 when
//! aligned, always present). The kernel's own push constants follow.** A kernel indexes its
//! binding from `delta / 4` (u32 words) or `delta / 16` (vec4) and must touch nothing before it:
//! the bytes between the aligned-down offset and the range belong to someone else. That
//! indexing is exact only when the range starts on the element's size: `delta / 4` needs a
//! range that starts on a multiple of 4 bytes, `delta / 16` one that starts on a multiple of
//! 16 (`delta % 16 == 0`); otherwise it rounds down to bytes before the range. `launch` does not
//! refuse such ranges for a user kernel (one may skip the partial element, or check `delta`
//! itself), as it does for the built-ins, which need whole words. Safe code may bind any range
//! to any kernel, so a kernel that indexes elements checks `delta % size == 0` itself and does
//! nothing otherwise, as the example below does (without that check, a safe launch over bytes
//! 18..26 of a block writes bytes 16 and 17, outside its binding); only a kernel private to
//! code that binds ranges starting on its element size may leave it out.
//!
//! The kernel's own push constants are laid out as its shading language lays out the push
//! block (WGSL and GLSL's std430: a `vec4` member starts on 16 bytes, after padding): declare
//! their size ([`Kernel::from_spirv`]'s `push_constant_bytes`) and pack the bytes you pass with that
//! padding. vkhost does not read the layout out of the module; a size or layout that does not
//! match the shader's is a validation error, not a refusal.
//!
//! A zero workgroup count in any dimension dispatches nothing (as `vkCmdDispatch`, where CUDA
//! refuses a zero grid): `Ok`, and no work.
//!
//! ```wgsl
//! struct Push {
//!     delta0: u32,   // vkhost: binding 0's delta, bytes
//!     delta1: u32,   // vkhost: binding 1's delta, bytes
//!     n: u32,        // the kernel's own push constants follow
//!     scale: u32,
//! }
//! var<push_constant> pc: Push;
//! @group(0) @binding(0) var<storage, read> src: array<u32>;
//! @group(0) @binding(1) var<storage, read_write> dst: array<u32>;
//!
//! @compute @workgroup_size(64)
//! fn main(@builtin(global_invocation_id) id: vec3<u32>) {
//!     // Bounded by the bindings too (`arrayLength`: the bound range's end), not by `n` alone:
//!     // any code holding the Kernel may launch it with any `n`.
//!     // Whole words only: a binding that starts inside a word shares it with bytes
//!     // before the binding, another owner's. Such a launch does nothing.
//!     let whole = pc.delta0 % 4u == 0u && pc.delta1 % 4u == 0u;
//!     let s = pc.delta0 / 4u + id.x;
//!     let d = pc.delta1 / 4u + id.x;
//!     if whole && id.x < pc.n && s < arrayLength(&src) && d < arrayLength(&dst) {
//!         dst[d] = src[s] * pc.scale;
//!     }
//! }
//! ```
//!
//! The built-in kernels ([`builtin`]: `fill`, `copy`, `checksum`, written in WGSL under
//! `src/kernel/wgsl/` and compiled to SPIR-V at build time with naga) follow it.
//!
//! ## Bindings and ownership
//!
//! - [`Binding::Device`]: bytes of a [`DeviceBuffer`].
//! - [`Binding::Host`] / [`Binding::HostMut`]: a slice of a [`PinnedBuffer`](crate::PinnedBuffer)
//!   or a [`Registration`](crate::Registration) (or of any memory that one registration or
//!   pinned block covers), shared for bindings the kernel only reads, exclusive for bindings it
//!   writes.
//! - [`Binding::pinned`] / [`Binding::pinned_mut`]: bytes of a
//!   [`PinnedBuffer`](crate::PinnedBuffer), named through the block itself (shared for bindings
//!   the kernel only reads, exclusive for bindings it writes): async.
//! - [`Binding::host`] (`unsafe`): a raw host range, async whatever covers it.
//!
//! A host range that no single registration or pinned block covers is
//! [`Error::NotRegistered`], never staged; so is a range that crosses from one import of a
//! registration or block into the next (one larger than the device's maxMemoryAllocationSize
//! or [`OpenOptions::max_import_piece`](crate::OpenOptions::max_import_piece) is imported in
//! pieces, and a binding is one buffer): bind such a range piece by piece (the built-ins' own
//! wrappers do that). "Covers" is [`host::find`](crate::host::find)'s
//! meaning: a registration covers its rounded import (the whole pages, or import granules,
//! around the registered bytes), so a raw [`Binding::host`] range that runs a few bytes past the
//! registered ones but stays in those pages is accepted. The caller owns those bytes too
//! ([`host::register`](crate::host::register)'s contract); the safe slice bindings only reach
//! bytes a Rust reference already grants.
//!
//! A launch owns what it binds, as stream copies do: while recording it holds the covering
//! import or block, notes its use (a write for [`Param::ReadWrite`] bindings) and keeps an `Arc`
//! in the batch until it is reaped, so `unregister` of a range a launch names waits for the
//! launch, and dropping a [`DeviceBuffer`] or
//! [`PinnedBuffer`](crate::PinnedBuffer) never frees memory it uses. Launches order against the
//! stream's copies and other launches by the bytes they bind (a barrier with compute and
//! transfer accesses goes only between commands that touch the same bytes with a write), and a
//! batch whose launch writes host memory ends with a host-read barrier.
//!
//! **Safe launches and borrowed bytes.** A safe launch with a slice binding
//! ([`Binding::Host`], [`Binding::HostMut`]) completes before
//! [`Stream::launch`](crate::Stream::launch) returns, whatever memory the slice lies in: the
//! borrow ends with the call, and the slice may reborrow a `&mut` (of a pinned block too) that
//! the caller uses again at once, so the kernel must be done with the bytes by then. Launches
//! over device buffers and pinned blocks bound through the block (below) are async. Raw host
//! bindings are async; their contract says for how long the bytes must stay valid.
//!
//! **Async zero-copy over pinned blocks.** [`Binding::pinned`] and [`Binding::pinned_mut`] bind
//! a block's bytes by borrowing the [`PinnedBuffer`](crate::PinnedBuffer), not a slice of it,
//! and the launch returns once enqueued. That is sound without trusting any destructor: no view
//! of the bytes made before the call can outlive the borrow (exclusive for `pinned_mut`), and
//! every view made after it comes from the block's `Deref` (which first waits for the device's
//! pending writes to it) or `DerefMut` (which waits for every pending use). The one exception is
//! a block of another device, bound through a registration of its bytes on the stream's
//! device: that registration's views know nothing of this launch, so it completes before the
//! call returns, as slice bindings do (and, as a slice of the block would through its `Deref`,
//! it first waits for the block's own device's pending work on the bytes).
//!
//! **Queues.** Launches need a compute-capable queue family. A stream on a transfer-only family
//! (the copy engines, [`QueueKind::Copy`](crate::QueueKind::Copy) on a device that has them)
//! refuses them with `Unsupported`: make kernel streams with
//! [`Device::stream_on`](crate::Device::stream_on)`(QueueKind::Compute)`.
//!
//! **Descriptors** ([`DescriptorMode`], fixed per device, see
//! [`Device::descriptor_mode`](crate::Device::descriptor_mode)). Where vkhost enabled
//! VK_KHR_push_descriptor (devices it opens whose driver offers it, unless
//! [`OpenOptions::push_descriptors`](crate::OpenOptions::push_descriptors) is false), they are
//! pushed into the command buffer: no descriptor pool. Elsewhere (drivers without the extension,
//! devices wrapped by [`Device::from_raw`](crate::Device::from_raw)) each launch writes a
//! descriptor set allocated from a pool of its stream and binds it: the batch that records the
//! launch owns the pool until the batch is reaped, then the pool is reset and reused, so a set is
//! never freed or rewritten while the device may read it. Both modes behave the same for the
//! caller.
//!
//! **Pipelines** are created on a kernel's first launch on a device and cached per device, at
//! most [`OpenOptions::max_pipelines`](crate::OpenOptions::max_pipelines) of them (default 256):
//! a launch of a kernel not in a full cache evicts the least recently launched pipeline. A launch
//! and the batch that records it own the pipeline they use until the batch is reaped, so an
//! eviction only drops the cache's reference: a pipeline (with its layouts) is destroyed when
//! its last owner goes, never under work in flight. Launching an evicted kernel again creates
//! its pipeline again. [`LiveObjects::pipelines`](crate::LiveObjects::pipelines) counts the
//! cached pipelines and the evicted ones still in use.
//!
//! Driver notes:
//! - llvmpipe (lavapipe) ends a shader's loops after about 65535 iterations in all
//!   (gallivm's loop limiter), silently. The built-ins' grid-stride loops run far fewer
//!   (ranges are split at maxStorageBufferRange, 128 MiB there, and a direct launch with too
//!   few workgroups for its count is refused); a user kernel that loops longer computes
//!   something else on lavapipe.
//! - maxStorageBufferRange bounds one binding's bound range (delta included): `launch` refuses
//!   longer ones (`InvalidArgument`); the built-in entry points split them.
//!
//! # Example
//!
//! ```
//! # fn main() -> vkhost::Result<()> {
//! # // SPIR-V from WGSL with naga (a dev-dependency here; any compiler will do).
//! # fn spirv(src: &str) -> Vec<u32> {
//! #     let module = naga::front::wgsl::parse_str(src).unwrap();
//! #     let caps = naga::valid::Capabilities::PUSH_CONSTANT;
//! #     let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps).validate(&module).unwrap();
//! #     let opts = naga::back::spv::Options { lang_version: (1, 3), ..Default::default() };
//! #     let pipe = naga::back::spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: "main".into() };
//! #     naga::back::spv::write_vec(&module, &info, &opts, Some(&pipe)).unwrap()
//! # }
//! # const SCALE: &str = r#"
//! # struct Push { delta0: u32, delta1: u32, n: u32, scale: u32 }
//! # var<push_constant> pc: Push;
//! # @group(0) @binding(0) var<storage, read> src: array<u32>;
//! # @group(0) @binding(1) var<storage, read_write> dst: array<u32>;
//! # @compute @workgroup_size(64)
//! # fn main(@builtin(global_invocation_id) id: vec3<u32>) {
//! #     let whole = pc.delta0 % 4u == 0u && pc.delta1 % 4u == 0u;
//! #     let s = pc.delta0 / 4u + id.x;
//! #     let d = pc.delta1 / 4u + id.x;
//! #     if whole && id.x < pc.n && s < arrayLength(&src) && d < arrayLength(&dst) {
//! #         dst[d] = src[s] * pc.scale;
//! #     }
//! # }
//! # "#;
//! use vkhost::kernel::{Kernel, Param};
//! // SAFETY: `SCALE` (the WGSL of the module docs) reads binding 0 and writes binding 1 only
//! // within the `n` words from their deltas and within the bound ranges (`arrayLength`),
//! // whatever `n` a launch passes, nothing when a delta is not a multiple of 4, and has 8
//! // bytes of its own push constants.
//! let scale = unsafe { Kernel::from_spirv(&spirv(SCALE), "main", &[Param::ReadOnly, Param::ReadWrite], 8) }?;
//! use vkhost::{Binding, QueueKind};
//! let dev = vkhost::Device::open_default()?;
//! let stream = dev.stream_on(QueueKind::Compute)?;
//! let mut v: Vec<u32> = (0..1000).collect();
//! let mut out = vkhost::PinnedBuffer::new(&dev, 4000)?;
//! {
//!     let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
//!     let reg = dev.register(bytes)?; // the kernel reads my Vec in place
//!     let push: Vec<u8> = [1000u32, 2].iter().flat_map(|w| w.to_ne_bytes()).collect();
//!     let bindings = [Binding::Host(&reg), Binding::HostMut(&mut out)];
//!     stream.launch(&scale, [16, 1, 1], &bindings, &push)?; // done on return: registered memory
//! }
//! assert_eq!(out.as_slice::<u32>()?[999], 1998);
//! # Ok(()) }
//! ```

mod builtin_spirv {
    include!(concat!(env!("OUT_DIR"), "/builtin_spirv.rs"));
}
pub mod builtin;

use crate::buffer::DeviceBuffer;
use crate::device::pipeline::PipelineDesc;
use crate::error::{Error, Result};
use std::ffi::CString;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

pub use crate::device::DescriptorMode;
pub use builtin::checksum_cpu;

/// How a kernel uses one storage binding. Conflict tracking and the uses noted on the bound
/// memory follow it: a kernel must not write a binding declared `ReadOnly`.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::kernel::{Param, builtin};
/// // `copy` reads binding 0 and writes binding 1.
/// assert_eq!(builtin::copy()?.params(), [Param::ReadOnly, Param::ReadWrite]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Param {
    /// The kernel only reads the binding.
    ReadOnly,
    /// The kernel may read and write the binding.
    ReadWrite,
}

/// SPIR-V words with an entry point, declared bindings and push-constant size. Cheap to clone;
/// not tied to a device (see the module docs).
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::{Binding, QueueKind};
/// let dev = vkhost::Device::open_default()?;
/// let stream = dev.stream_on(QueueKind::Compute)?;
/// let fill: &vkhost::Kernel = vkhost::kernel::builtin::fill()?;
/// let gpu = dev.alloc_buffer(1024)?;
/// let push: Vec<u8> = [256u32, 0x0707_0707].iter().flat_map(|w| w.to_ne_bytes()).collect(); // words, pattern
/// stream.launch(fill, [1, 1, 1], &[Binding::Device(&gpu, 0, 1024)], &push)?;
/// stream.synchronize()?;
/// let mut back = vec![0u8; 1024];
/// gpu.read(0, &mut back)?;
/// assert!(back.iter().all(|&b| b == 7));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Kernel {
    pub(crate) inner: Arc<KernelDef>,
}

/// A built-in's check of a launch's own push constants against its bindings, each given as
/// `(delta, len)`: the binding's byte offset from its bound range's start and its length.
pub(crate) type ArgCheck = fn(&[(u32, u64)], &[u8]) -> Result<()>;

pub(crate) struct KernelDef {
    pub(crate) name: String,
    pub(crate) params: Vec<Param>,
    /// Bytes of the kernel's own push constants (after the deltas).
    pub(crate) push_bytes: usize,
    pub(crate) desc: PipelineDesc,
    /// For built-ins (safe kernels whose push constants name element counts): checks a launch's
    /// own push constants against each binding's `(delta, len)`, so that a safe launch cannot
    /// make the kernel touch bytes outside its bindings.
    pub(crate) check: Option<ArgCheck>,
    /// The entry point's workgroup size and workgroup memory, checked against the device's
    /// limits at launch where the module tells them (else the caller of `from_spirv` vouches).
    pub(crate) facts: EntryFacts,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = &self.inner;
        f.debug_struct("Kernel").field("name", &k.name).field("params", &k.params).field("push_bytes", &k.push_bytes).finish()
    }
}

const SPIRV_MAGIC: u32 = 0x0723_0203;

impl Kernel {
    /// A kernel from SPIR-V `words` (a compute shader), entry point `entry`, storage buffers
    /// `params` (set 0, binding i is `params[i]`) and `push_constant_bytes` of its own push
    /// constants (a multiple of 4), which follow the binding deltas (see the module docs).
    ///
    /// Checked here: the SPIR-V magic, a non-empty entry name without NUL, a GLCompute entry
    /// point of that name, the push size, and that every DescriptorSet/Binding decoration in the
    /// module names set 0 and a binding below `params.len()`. `InvalidArgument` otherwise.
    /// Checked at each launch, against the stream's device: the entry point's workgroup size
    /// (where the module gives it as `LocalSize`), its workgroup memory (where vkhost can size
    /// it: a lower bound, without padding) and the binding count. The rest is the caller's
    /// contract, the device's limits included where vkhost cannot check them.
    ///
    /// # Safety
    /// vkhost cannot check what a shader does. The module must be valid SPIR-V for Vulkan with a
    /// compute entry point `entry` whose resources are exactly: storage buffers at set 0,
    /// bindings `0..params.len()`, and one push-constant block of at most
    /// `4 * params.len() + push_constant_bytes` bytes laid out as the convention says. Every
    /// launch must access binding i only within `[delta_i, delta_i + len_i)` of its bound range
    /// (the bytes the [`Binding`] names) and write only bindings declared [`Param::ReadWrite`].
    /// Launching is safe: any code the `Kernel` reaches may launch it with any bindings and push
    /// constants, so this must hold whatever they are. A kernel that takes a count from its
    /// push constants bounds its indices by the binding too: the bound range ends where the
    /// binding's bytes end, so `arrayLength` (GLSL's `.length()`) of the binding, in elements
    /// from the aligned-down offset, is where its bytes stop (as the module docs' example does).
    /// Likewise a kernel that indexes elements from `delta / size` does nothing for a delta that
    /// is not a multiple of `size`: the element it would start on holds bytes before the range.
    /// A kernel that trusts its push constants instead may only be launched by code that passes
    /// values within the bindings: keep it private to that code. Why: the bytes before a delta,
    /// or past a range, may be another owner's memory (a registration is imported with whole
    /// pages), and a write the declaration hides escapes the tracking that keeps safe views of
    /// pinned memory from racing the device. vkhost enables no robust buffer access, so a
    /// device does not clamp an access past the bound range for you (lavapipe happens to).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// # // SPIR-V from WGSL with naga (a dev-dependency here; any compiler will do).
    /// # fn spirv(src: &str) -> Vec<u32> {
    /// #     let module = naga::front::wgsl::parse_str(src).unwrap();
    /// #     let caps = naga::valid::Capabilities::PUSH_CONSTANT;
    /// #     let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps).validate(&module).unwrap();
    /// #     let opts = naga::back::spv::Options { lang_version: (1, 3), ..Default::default() };
    /// #     let pipe = naga::back::spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: "main".into() };
    /// #     naga::back::spv::write_vec(&module, &info, &opts, Some(&pipe)).unwrap()
    /// # }
    /// # const SCALE: &str = r#"
    /// # struct Push { delta0: u32, delta1: u32, n: u32, scale: u32 }
    /// # var<push_constant> pc: Push;
    /// # @group(0) @binding(0) var<storage, read> src: array<u32>;
    /// # @group(0) @binding(1) var<storage, read_write> dst: array<u32>;
    /// # @compute @workgroup_size(64)
    /// # fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    /// #     let whole = pc.delta0 % 4u == 0u && pc.delta1 % 4u == 0u;
    /// #     let s = pc.delta0 / 4u + id.x;
    /// #     let d = pc.delta1 / 4u + id.x;
    /// #     if whole && id.x < pc.n && s < arrayLength(&src) && d < arrayLength(&dst) {
    /// #         dst[d] = src[s] * pc.scale;
    /// #     }
    /// # }
    /// # "#;
    /// use vkhost::kernel::{Kernel, Param};
    /// let words = spirv(SCALE);
    /// // SAFETY: `SCALE` (the WGSL of the module docs) reads binding 0 and writes binding 1 only
    /// // within the `n` words from their deltas and within the bound ranges (`arrayLength`),
    /// // whatever `n` a launch passes, nothing when a delta is not a multiple of 4, and has 8
    /// // bytes of its own push constants.
    /// let k = unsafe { Kernel::from_spirv(&words, "main", &[Param::ReadOnly, Param::ReadWrite], 8) }?;
    /// assert_eq!((k.name(), k.push_constant_bytes()), ("main", 8));
    /// // The module uses binding 1: declaring one binding is refused before any device sees it.
    /// // SAFETY: refused by the checks, never launched.
    /// let few = unsafe { Kernel::from_spirv(&words, "main", &[Param::ReadWrite], 8) };
    /// assert!(matches!(few, Err(vkhost::Error::InvalidArgument { .. })));
    /// # Ok(()) }
    /// ```
    pub unsafe fn from_spirv(words: &[u32], entry: &str, params: &[Param], push_constant_bytes: usize) -> Result<Kernel> {
        Self::build(entry, words, entry, params, push_constant_bytes, None)
    }

    pub(crate) fn build(
        name: &str,
        words: &[u32],
        entry: &str,
        params: &[Param],
        push_bytes: usize,
        check: Option<ArgCheck>,
    ) -> Result<Kernel> {
        if words.len() < 5 || words[0] != SPIRV_MAGIC {
            return Err(Error::invalid("kernel: not SPIR-V (missing magic number 0x07230203)"));
        }
        if push_bytes % 4 != 0 {
            return Err(Error::invalid(format!("kernel: push_constant_bytes = {push_bytes}, not a multiple of 4")));
        }
        let entry_c = CString::new(entry).map_err(|_| Error::invalid("kernel: entry point name contains NUL"))?;
        if entry.is_empty() {
            return Err(Error::invalid("kernel: empty entry point name"));
        }
        let facts = scan_module(words, params.len(), entry)?;
        let total = params.len().checked_mul(4).and_then(|d| d.checked_add(push_bytes));
        let total = total.and_then(|t| u32::try_from(t).ok()).ok_or_else(|| Error::invalid("kernel: push constants too large"))?;
        let bindings = u32::try_from(params.len()).map_err(|_| Error::invalid("kernel: too many bindings"))?;
        let mut h = std::hash::DefaultHasher::new();
        (words, entry, bindings, total).hash(&mut h);
        let desc = PipelineDesc { words: words.into(), entry: entry_c, bindings, push_bytes: total, hash: h.finish() };
        Ok(Kernel { inner: Arc::new(KernelDef { name: name.to_string(), params: params.to_vec(), push_bytes, desc, check, facts }) })
    }

    /// The declared bindings.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::kernel::{Param, builtin};
    /// assert_eq!(builtin::fill()?.params(), [Param::ReadWrite]);
    /// # Ok(()) }
    /// ```
    pub fn params(&self) -> &[Param] {
        &self.inner.params
    }

    /// Bytes of the kernel's own push constants (after the one `u32` delta per binding).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// // `checksum`'s own push constants: `words: u32, first: u32`.
    /// assert_eq!(vkhost::kernel::builtin::checksum()?.push_constant_bytes(), 8);
    /// # Ok(()) }
    /// ```
    pub fn push_constant_bytes(&self) -> usize {
        self.inner.push_bytes
    }

    /// The kernel's name (its entry point, or the built-in's name).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// assert_eq!(vkhost::kernel::builtin::copy_vec4()?.name(), "copy4");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }
}

/// What [`scan_module`] learns of an entry point, for the checks at launch.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EntryFacts {
    /// The workgroup size (`OpExecutionMode LocalSize`); `None` where the module gives it
    /// another way (`LocalSizeId`, or a constant decorated `BuiltIn WorkgroupSize`).
    pub(crate) local_size: Option<[u32; 3]>,
    /// At least how many bytes of workgroup (shared) memory the entry point uses: the sum of
    /// its `Workgroup` variables' sizes without padding, a lower bound of what the device
    /// counts. `None` where it cannot be told (a type it does not size; a module of SPIR-V
    /// before 1.4, whose entry points do not list their workgroup variables, with several
    /// entry points).
    pub(crate) shared_bytes: Option<u64>,
}

/// Walks the SPIR-V instructions: every `OpDecorate %x DescriptorSet s` must have s = 0, every
/// `OpDecorate %x Binding b` b < `n`, and a GLCompute `OpEntryPoint` named `entry` must exist.
/// Returns what the launch checks need of that entry point ([`EntryFacts`]).
fn scan_module(words: &[u32], n: usize, entry: &str) -> Result<EntryFacts> {
    const OP_ENTRY_POINT: u32 = 15;
    const OP_EXECUTION_MODE: u32 = 16;
    const OP_TYPE_BOOL: u32 = 20;
    const OP_TYPE_INT: u32 = 21;
    const OP_TYPE_FLOAT: u32 = 22;
    const OP_TYPE_VECTOR: u32 = 23;
    const OP_TYPE_MATRIX: u32 = 24;
    const OP_TYPE_ARRAY: u32 = 28;
    const OP_TYPE_STRUCT: u32 = 30;
    const OP_TYPE_POINTER: u32 = 32;
    const OP_CONSTANT: u32 = 43;
    const OP_SPEC_CONSTANT: u32 = 50;
    const OP_VARIABLE: u32 = 59;
    const OP_DECORATE: u32 = 71;
    const GL_COMPUTE: u32 = 5;
    const LOCAL_SIZE: u32 = 17;
    const BINDING: u32 = 33;
    const DESCRIPTOR_SET: u32 = 34;
    const BUILT_IN: u32 = 11;
    const WORKGROUP_SIZE: u32 = 25;
    const WORKGROUP: u32 = 4;
    let mut function = None;
    let mut interface: &[u32] = &[];
    let mut entries = 0usize;
    let mut sizes: Vec<(u32, [u32; 3])> = Vec::new();
    let mut builtin_size = false;
    let mut types: std::collections::HashMap<u32, &[u32]> = std::collections::HashMap::new();
    let mut constants: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
    let mut shared_vars: Vec<(u32, u32)> = Vec::new();
    let mut i = 5;
    while i < words.len() {
        let (count, op) = ((words[i] >> 16) as usize, words[i] & 0xffff);
        if count == 0 || i + count > words.len() {
            return Err(Error::invalid("kernel: malformed SPIR-V (instruction past the end)"));
        }
        let ins = &words[i..i + count];
        match op {
            OP_DECORATE if count >= 4 => {
                let (what, value) = (ins[2], ins[3]);
                if what == DESCRIPTOR_SET && value != 0 {
                    return Err(Error::invalid(format!("kernel: a resource in descriptor set {value}; kernels use set 0 only")));
                }
                if what == BINDING && value as usize >= n {
                    return Err(Error::invalid(format!("kernel: the module uses binding {value}, but {n} binding(s) were declared")));
                }
                builtin_size |= what == BUILT_IN && value == WORKGROUP_SIZE;
            }
            OP_ENTRY_POINT if count >= 4 => {
                entries += 1;
                if ins[1] == GL_COMPUTE && literal_is(&ins[3..], entry) {
                    function = Some(ins[2]);
                    // The name takes its bytes and a nul, rounded up to whole words.
                    interface = ins.get(3 + (entry.len() + 1).div_ceil(4)..).unwrap_or(&[]);
                }
            }
            OP_EXECUTION_MODE if count >= 6 && ins[2] == LOCAL_SIZE => sizes.push((ins[1], [ins[3], ins[4], ins[5]])),
            OP_TYPE_BOOL | OP_TYPE_INT | OP_TYPE_FLOAT | OP_TYPE_VECTOR | OP_TYPE_MATRIX | OP_TYPE_ARRAY | OP_TYPE_STRUCT
            | OP_TYPE_POINTER
                if count >= 2 =>
            {
                types.insert(ins[1], ins);
            }
            OP_CONSTANT | OP_SPEC_CONSTANT if count >= 4 => {
                let high = if count >= 5 { u64::from(ins[4]) << 32 } else { 0 };
                constants.insert(ins[2], u64::from(ins[3]) | high);
            }
            OP_VARIABLE if count >= 4 && ins[3] == WORKGROUP => shared_vars.push((ins[2], ins[1])),
            _ => {}
        }
        i += count;
    }
    let Some(function) = function else {
        return Err(Error::invalid(format!("kernel: the module has no compute entry point named {entry:?}")));
    };
    let local_size = if builtin_size { None } else { sizes.iter().find(|s| s.0 == function).map(|s| s.1) };
    // SPIR-V 1.4 and later list every global variable an entry point uses in its interface;
    // before, only its inputs and outputs, so the module's workgroup variables are the entry
    // point's only if it is the module's one entry point.
    let lists_all = words[1] >= 0x0001_0400;
    let shared_bytes = if lists_all || entries == 1 {
        let interface: std::collections::HashSet<u32> = interface.iter().copied().collect();
        let mut sizes = TypeSizes { types: &types, constants: &constants, memo: std::collections::HashMap::new() };
        shared_vars
            .iter()
            .filter(|(var, _)| !lists_all || interface.contains(var))
            .map(|&(_, ptr)| {
                let pointee = types.get(&ptr).filter(|t| t[0] & 0xffff == OP_TYPE_POINTER && t.len() >= 4)?[3];
                sizes.bytes(pointee, 0)
            })
            .try_fold(0u64, |sum, b| b.and_then(|b| sum.checked_add(b)))
    } else {
        None
    };
    Ok(EntryFacts { local_size, shared_bytes })
}

/// Sizes of a module's types, each computed once: a type named by many members of many
/// structs is walked once, not once per path to it (a 211-word module of nested structs took
/// hours before).
struct TypeSizes<'a> {
    types: &'a std::collections::HashMap<u32, &'a [u32]>,
    constants: &'a std::collections::HashMap<u32, u64>,
    memo: std::collections::HashMap<u32, Option<u64>>,
}

impl TypeSizes<'_> {
    /// The size in bytes of type `id` without padding (a lower bound of its size in any
    /// layout); `None` for a type it cannot size (a runtime array, an opaque type, a length it
    /// cannot read, a cycle, nesting deeper than 32).
    fn bytes(&mut self, id: u32, depth: u32) -> Option<u64> {
        if depth > 32 {
            return None;
        }
        if let Some(&known) = self.memo.get(&id) {
            return known;
        }
        // A type met again while it is being sized is a cycle: `None` until it is done.
        self.memo.insert(id, None);
        let t = *self.types.get(&id)?;
        let mut sub = |k: usize| t.get(k).and_then(|&x| self.bytes(x, depth + 1));
        let size = match t[0] & 0xffff {
            // A boolean's size is the implementation's: count one byte, a lower bound.
            20 => Some(1),
            21 | 22 => t.get(2).map(|&bits| u64::from(bits) / 8),
            23 | 24 => sub(2).and_then(|b| b.checked_mul(u64::from(*t.get(3)?))),
            28 => sub(2).and_then(|b| b.checked_mul(*self.constants.get(t.get(3)?)?)),
            30 => (2..t.len()).try_fold(0u64, |sum, k| sub(k).and_then(|b| sum.checked_add(b))),
            _ => None,
        };
        self.memo.insert(id, size);
        size
    }
}

/// Whether the SPIR-V literal string at the start of `words` (UTF-8, nul-terminated, packed
/// little-endian into words) is `s`.
fn literal_is(words: &[u32], s: &str) -> bool {
    let bytes = words.iter().flat_map(|w| w.to_le_bytes());
    let mut got = bytes.take_while(|&b| b != 0);
    s.bytes().all(|c| got.next() == Some(c)) && got.next().is_none()
}

/// A raw range of host memory, for [`Binding::host`].
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::kernel::Binding;
/// let dev = vkhost::Device::open_default()?;
/// let block = vkhost::host::alloc_pinned(&dev, 4096)?;
/// // SAFETY: nothing is launched with it (its contract binds launches only).
/// let binding = unsafe { Binding::host(block.as_ptr(), 256) };
/// let Binding::Raw(range) = binding else { unreachable!() };
/// println!("{range:?}"); // address and length
/// assert_eq!(Binding::Raw(range).len(), 256);
/// vkhost::host::free_pinned(&dev, block)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct HostRange {
    pub(crate) addr: usize,
    pub(crate) len: usize,
}

/// The memory bound to one storage binding of a launch.
///
/// Host memory is named by slices: a slice of a [`PinnedBuffer`](crate::PinnedBuffer) or a
/// [`Registration`](crate::Registration) (through their `Deref`/`DerefMut`), or of any memory
/// one registration or pinned block covers; launches with slice bindings complete before they
/// return. Or through a pinned block itself ([`Binding::pinned`], [`Binding::pinned_mut`]):
/// those launches are async. A binding the kernel writes ([`Param::ReadWrite`]) must be
/// [`Binding::HostMut`] or [`Binding::pinned_mut`]: a kernel writing through a shared borrow
/// would change bytes that other `&[u8]` views of them may be reading (`InvalidArgument`
/// otherwise).
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::{Binding, QueueKind};
/// let dev = vkhost::Device::open_default()?;
/// let stream = dev.stream_on(QueueKind::Compute)?;
/// let gpu = dev.alloc_buffer(256)?;
/// let mut pinned = vkhost::PinnedBuffer::new(&dev, 256)?;
/// let mut mine = vec![0u8; 256];
/// let mut reg = dev.register(&mut mine)?;
/// stream.fill_u32(Binding::Device(&gpu, 0, 256), 1)?;
/// stream.copy_sm(Binding::Device(&gpu, 0, 256), Binding::HostMut(&mut pinned))?;
/// stream.copy_sm(Binding::Host(&pinned), Binding::HostMut(&mut reg))?;
/// assert!(stream.fill_u32(Binding::Host(&pinned), 0).is_err(), "a written binding needs HostMut");
/// stream.synchronize()?;
/// assert_eq!(reg.len(), 256);
/// drop(reg);
/// assert_eq!(&mine[..4], 1u32.to_ne_bytes());
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Binding<'a> {
    /// `(buffer, offset, len)`: bytes of a device buffer.
    Device(&'a DeviceBuffer, usize, usize),
    /// Host bytes the kernel only reads.
    Host(&'a [u8]),
    /// Host bytes the kernel may write.
    HostMut(&'a mut [u8]),
    /// Bytes of a pinned block, named through the block (made by [`Binding::pinned`] or
    /// [`Binding::pinned_mut`]): launches that bind it are async.
    Pinned(PinnedRange<'a>),
    /// A raw host range (made by the `unsafe` [`Binding::host`]).
    Raw(HostRange),
}

/// Bytes of a [`PinnedBuffer`](crate::PinnedBuffer) bound through the block (see
/// [`Binding::pinned`] and [`Binding::pinned_mut`]); its fields are private, so a binding the
/// kernel may write can only be made from an exclusive borrow of the block.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::Binding;
/// let dev = vkhost::Device::open_default()?;
/// let block = vkhost::PinnedBuffer::new(&dev, 4096)?;
/// let Binding::Pinned(r) = Binding::pinned(&block, 256, 1024) else { unreachable!() };
/// assert_eq!((r.offset(), r.len(), r.writable()), (256, 1024, false));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct PinnedRange<'a> {
    pub(crate) block: &'a crate::PinnedBuffer,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) write: bool,
}

impl PinnedRange<'_> {
    /// The offset of the range in the block.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let block = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// let vkhost::Binding::Pinned(r) = vkhost::Binding::pinned(&block, 64, 128) else { unreachable!() };
    /// assert_eq!(r.offset(), 64);
    /// # Ok(()) }
    /// ```
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The byte length of the range.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let block = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// let vkhost::Binding::Pinned(r) = vkhost::Binding::pinned(&block, 64, 128) else { unreachable!() };
    /// assert_eq!(r.len(), 128);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let block = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// let vkhost::Binding::Pinned(r) = vkhost::Binding::pinned(&block, 64, 0) else { unreachable!() };
    /// assert!(r.is_empty(), "Stream::launch refuses a zero-length binding");
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a kernel may write it (made by [`Binding::pinned_mut`]).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let mut block = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// let vkhost::Binding::Pinned(r) = vkhost::Binding::pinned_mut(&mut block, 0, 4096) else { unreachable!() };
    /// assert!(r.writable());
    /// # Ok(()) }
    /// ```
    pub fn writable(&self) -> bool {
        self.write
    }

    /// The address of its first byte (wrapping, never dereferenced: a range past the block is
    /// refused at launch with `OutOfRange`).
    pub(crate) fn addr(&self) -> usize {
        (self.block.as_ptr() as usize).wrapping_add(self.offset)
    }

    /// `OutOfRange` unless the range lies in the block.
    pub(crate) fn check(&self) -> crate::Result<()> {
        self.block.range_addr(self.offset, self.len).map(|_| ())
    }
}

impl<'a> Binding<'a> {
    /// A raw host range `[ptr, ptr+len)` that one registration or pinned block covers (its
    /// rounded import, as [`host::find`](crate::host::find) answers; else the
    /// launch is `NotRegistered`, as it is for a range over bytes of two registrations that
    /// share a page: a binding is one import). Launches that bind it are async. A binding is one buffer: in a
    /// registration or block made of several imports (larger than one allocation, or
    /// `OpenOptions::max_import_piece`), a user kernel's binding must lie inside one of them
    /// (as [`host::find`](crate::host::find) answers); the built-ins' wrappers cut their ranges
    /// there themselves.
    ///
    /// # Safety
    /// The promise covers every launch made with the returned binding, with a copy of its
    /// [`HostRange`] (which is `Copy`), or with a binding rebuilt from one (`Binding::Raw`),
    /// not only the next: for each such launch, the bytes must stay registered (or the block
    /// allocated) and valid until it completes (an event recorded after it, or `synchronize`),
    /// and the host must not access them meanwhile in a way that conflicts with the kernel's (a
    /// write on either side). Keep the binding no longer than that holds: a range kept after
    /// its block is freed names whatever is allocated there next.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Binding, QueueKind, host};
    /// let dev = vkhost::Device::open_default()?;
    /// let stream = dev.stream_on(QueueKind::Compute)?;
    /// let block = host::alloc_pinned(&dev, 4096)?;
    /// // SAFETY: the block stays allocated, and the host leaves it alone, until `synchronize` returned.
    /// let raw = unsafe { Binding::host(block.as_ptr(), 4096) };
    /// stream.fill_u32(raw, 0xFFFF_FFFF)?; // async, whatever covers the range
    /// stream.synchronize()?;
    /// // SAFETY: the fill completed; the block is live.
    /// assert!(unsafe { std::slice::from_raw_parts(block.as_ptr(), 4096) }.iter().all(|&b| b == 0xFF));
    /// host::free_pinned(&dev, block)?;
    /// # Ok(()) }
    /// ```
    pub unsafe fn host(ptr: *const u8, len: usize) -> Binding<'static> {
        Binding::Raw(HostRange { addr: ptr as usize, len })
    }

    /// `len` bytes at `offset` in a pinned block, for a binding the kernel only reads. Launches
    /// that bind it are async (see **Async zero-copy over pinned blocks** in [`crate::kernel`]):
    /// the block stays borrowed for the binding's life, and its `DerefMut` waits for the launch.
    /// A range past the block is refused at launch (`OutOfRange`), before any of it runs. On a
    /// stream of another device than the block's (through a registration of its bytes there)
    /// the launch completes before the call returns.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Binding, QueueKind};
    /// let dev = vkhost::Device::open_default()?;
    /// let stream = dev.stream_on(QueueKind::Compute)?;
    /// let mut block = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// block.fill(7);
    /// let gpu = dev.alloc_buffer(4096)?;
    /// stream.copy_sm(Binding::pinned(&block, 0, 4096), Binding::Device(&gpu, 0, 4096))?; // async
    /// block.fill(1); // `DerefMut` waited for the kernel's read first
    /// stream.synchronize()?;
    /// let mut back = vec![0u8; 4096];
    /// gpu.read(0, &mut back)?;
    /// assert!(back.iter().all(|&b| b == 7));
    /// # Ok(()) }
    /// ```
    pub fn pinned(block: &'a crate::PinnedBuffer, offset: usize, len: usize) -> Binding<'a> {
        Binding::Pinned(PinnedRange { block, offset, len, write: false })
    }

    /// `len` bytes at `offset` in a pinned block, for a binding the kernel may write. Launches
    /// that bind it are async: the block is borrowed exclusively for the binding's life, and
    /// afterwards its `Deref` and `DerefMut` wait for the kernel's writes before handing out
    /// the bytes, whether or not anything waited for the launch. Refusals and other devices as
    /// for [`Binding::pinned`].
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Binding, QueueKind};
    /// let dev = vkhost::Device::open_default()?;
    /// let stream = dev.stream_on(QueueKind::Compute)?;
    /// let mut block = vkhost::PinnedBuffer::new(&dev, 1 << 20)?;
    /// stream.fill_u32(Binding::pinned_mut(&mut block, 0, 1 << 20), 0x0101_0101)?; // async
    /// assert!(block.iter().all(|&b| b == 1), "Deref waited for the fill");
    /// # Ok(()) }
    /// ```
    pub fn pinned_mut(block: &'a mut crate::PinnedBuffer, offset: usize, len: usize) -> Binding<'a> {
        Binding::Pinned(PinnedRange { block, offset, len, write: true })
    }

    /// The byte length of the range.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// let dev = vkhost::Device::open_default()?;
    /// let gpu = dev.alloc_buffer(1024)?;
    /// assert_eq!(vkhost::Binding::Device(&gpu, 256, 512).len(), 512);
    /// assert_eq!(vkhost::Binding::Host(&[0u8; 12]).len(), 12);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        match self {
            Binding::Device(_, _, n) => *n,
            Binding::Host(s) => s.len(),
            Binding::HostMut(s) => s.len(),
            Binding::Pinned(r) => r.len,
            Binding::Raw(h) => h.len,
        }
    }

    /// Whether the range is empty.
    ///
    /// # Example
    ///
    /// ```
    /// assert!(vkhost::Binding::Host(&[]).is_empty());
    /// assert!(!vkhost::Binding::Host(&[1, 2, 3, 4]).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first `n` bytes (all of them when `n` is larger) and the rest.
    pub(crate) fn split_at(self, n: usize) -> (Binding<'a>, Binding<'a>) {
        let n = n.min(self.len());
        match self {
            Binding::Device(b, off, len) => (Binding::Device(b, off, n), Binding::Device(b, off.saturating_add(n), len - n)),
            Binding::Host(s) => {
                let (a, b) = s.split_at(n);
                (Binding::Host(a), Binding::Host(b))
            }
            Binding::HostMut(s) => {
                let (a, b) = s.split_at_mut(n);
                (Binding::HostMut(a), Binding::HostMut(b))
            }
            Binding::Pinned(r) => (
                Binding::Pinned(PinnedRange { len: n, ..r }),
                Binding::Pinned(PinnedRange { offset: r.offset.saturating_add(n), len: r.len - n, ..r }),
            ),
            // Wrapping: never dereferenced; a range past the address space is refused first.
            Binding::Raw(h) => {
                (Binding::Raw(HostRange { addr: h.addr, len: n }), Binding::Raw(HostRange { addr: h.addr.wrapping_add(n), len: h.len - n }))
            }
        }
    }

    /// The same binding for a shorter borrow (to bind it again in the next launch).
    pub(crate) fn reborrow(&mut self) -> Binding<'_> {
        match self {
            Binding::HostMut(b) => Binding::HostMut(b),
            Binding::Host(b) => Binding::Host(b),
            Binding::Device(b, off, len) => Binding::Device(b, *off, *len),
            Binding::Pinned(r) => Binding::Pinned(*r),
            Binding::Raw(h) => Binding::Raw(*h),
        }
    }

    /// Where the range starts: a device buffer and the offset in it, or (`None`) a host
    /// address.
    fn start(&self) -> (Option<ash::vk::Buffer>, usize) {
        match self {
            Binding::Device(buf, off, _) => (Some(buf.raw()), *off),
            Binding::Host(s) => (None, s.as_ptr() as usize),
            Binding::HostMut(s) => (None, s.as_ptr() as usize),
            Binding::Pinned(r) => (None, r.addr()),
            Binding::Raw(h) => (None, h.addr),
        }
    }

    /// The host address of its first byte; `None` for a device buffer.
    pub(crate) fn host_addr(&self) -> Option<usize> {
        match self.start() {
            (None, a) => Some(a),
            (Some(_), _) => None,
        }
    }

    /// Whether two bindings name a common byte (of one device buffer, or of host memory).
    pub(crate) fn overlaps(&self, o: &Binding<'_>) -> bool {
        let span = |b: &Binding<'_>| {
            let (k, a) = b.start();
            (k, a, a.saturating_add(b.len()))
        };
        let ((k1, s1, e1), (k2, s2, e2)) = (span(self), span(o));
        k1 == k2 && s1 < e2 && s2 < e1
    }

    /// The range's start modulo 16 as the device sees it: device offsets, and host addresses
    /// (imports start on a page, pinned blocks on minMemoryMapAlignment ≥ 64 bytes).
    pub(crate) fn phase(&self) -> usize {
        self.start().1 % 16
    }
}
