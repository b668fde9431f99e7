//! Kernel launches on a stream: bindings resolved to buffers and held as copies hold them,
//! descriptors pushed into the command buffer or written into a set from the stream's pools
//! (`descriptors`, by the device's [`DescriptorMode`]), and the built-in kernels' entry points.

use super::batch::Access;
use super::inner::{StreamInner, relock};
use super::{Event, Stream};
use crate::device::{DescriptorMode, Shared};
use crate::error::{Error, Result};
use crate::host;
use crate::kernel::{Binding, Kernel, Param, builtin};
use crate::resource::{Held, Resource};
use ash::vk;
use std::sync::Arc;

/// One binding, resolved to the buffer that covers it.
struct Bound {
    buffer: vk::Buffer,
    /// The aligned-down offset in `buffer`, the bound range from there, and the delta.
    offset: u64,
    range: u64,
    delta: u32,
    /// The binding's length in bytes (from the delta).
    len: u64,
    /// The bytes the binding names, and the bound range (what conflict tracking uses: the
    /// validation layer sees the whole bound range as accessed).
    exact: Access,
    bound: Access,
    res: Arc<Resource>,
    /// The hold on a host binding's import or block while the launch is recorded.
    _held: Option<Held>,
    host: bool,
    /// The launch must complete before the call returns: the binding borrows bytes that views
    /// made without waiting for this launch may reach once the call returned (see `launch`).
    wait: bool,
}

/// Resolves `b` on device `s`; `write` for bindings the kernel may write.
fn resolve(s: &Shared, b: &Binding<'_>, write: bool) -> Result<Bound> {
    let align = s.info.min_storage_buffer_offset_alignment.max(16);
    let (addr, len) = match b {
        Binding::Device(buf, off, len) => {
            if buf.shared.id != s.id {
                return Err(Error::invalid("a device buffer of another device"));
            }
            buf.mem.check_range(*off, *len)?;
            (None, *len)
        }
        Binding::Host(sl) => (Some(sl.as_ptr() as usize), sl.len()),
        Binding::HostMut(sl) => (Some(sl.as_ptr() as usize), sl.len()),
        Binding::Pinned(r) => {
            r.check()?;
            (Some(r.addr()), r.len)
        }
        Binding::Raw(h) => {
            host::check_host_range(h.addr, h.len)?;
            (Some(h.addr), h.len)
        }
    };
    if len == 0 {
        return Err(Error::invalid("a zero-length binding"));
    }
    if write && matches!(b, Binding::Host(_)) {
        return Err(Error::invalid("the kernel writes this binding: bind the slice with Binding::HostMut"));
    }
    if write && matches!(b, Binding::Pinned(r) if !r.write) {
        return Err(Error::invalid("the kernel writes this binding: bind the block with Binding::pinned_mut"));
    }
    let (buffer, base, res, held) = match (b, addr) {
        (Binding::Device(buf, off, _), _) => (buf.raw(), *off as u64, buf.mem.res.clone(), None),
        (_, Some(a)) => {
            let c = host::cover(s, a, len).ok_or(Error::NotRegistered)?;
            (c.held.0.obj.buffer, c.offset, c.held.0.clone(), Some(c.held))
        }
        (_, None) => return Err(Error::invalid("a host binding without an address")),
    };
    // Slices always; a pinned block only when what covers it on this device is not the block's
    // own import (a registration of its bytes, whose views do not wait for this launch).
    let wait = match b {
        Binding::Host(_) | Binding::HostMut(_) => true,
        Binding::Pinned(r) => !r.block.owns(&res),
        Binding::Device(..) | Binding::Raw(_) => false,
    };
    let delta = base % align;
    let offset = base - delta;
    let range = delta + len as u64;
    if range > u64::from(s.info.max_storage_buffer_range) {
        return Err(Error::invalid(format!(
            "a binding of {range} bytes (from its aligned-down offset) exceeds maxStorageBufferRange ({})",
            s.info.max_storage_buffer_range
        )));
    }
    let (exact, bound) = match addr {
        Some(a) => (Access::host(a, len as u64, write), Access::host(a - delta as usize, range, write)),
        None => (Access::buf(buffer, base, len as u64, write), Access::buf(buffer, offset, range, write)),
    };
    Ok(Bound { buffer, offset, range, delta: delta as u32, len: len as u64, exact, bound, res, _held: held, host: addr.is_some(), wait })
}

/// The checks of a launch's arguments that need no lock: binding and push-constant counts,
/// the device's push-constant, binding-count, workgroup-count, workgroup-size and
/// workgroup-memory limits.
fn check_args(s: &Shared, k: &Kernel, groups: [u32; 3], bindings: &[Binding<'_>], pc: &[u8]) -> Result<()> {
    let kd = &k.inner;
    if bindings.len() != kd.params.len() {
        return Err(Error::invalid(format!("kernel {} takes {} binding(s), {} given", kd.name, kd.params.len(), bindings.len())));
    }
    if pc.len() != kd.push_bytes {
        return Err(Error::invalid(format!("kernel {} takes {} bytes of push constants, {} given", kd.name, kd.push_bytes, pc.len())));
    }
    if kd.desc.push_bytes > s.info.max_push_constants_size {
        return Err(Error::unsupported(format!(
            "kernel {} needs {} bytes of push constants (deltas included); this device allows {}",
            kd.name, kd.desc.push_bytes, s.info.max_push_constants_size
        )));
    }
    let max = s.info.max_compute_work_group_count;
    if groups.iter().zip(max).any(|(&g, m)| g > m) {
        return Err(Error::invalid(format!("{groups:?} workgroups exceed maxComputeWorkGroupCount {max:?}")));
    }
    let most = match s.pipelines.mode() {
        DescriptorMode::Push => s.info.max_kernel_bindings.min(s.info.max_push_descriptors),
        DescriptorMode::Sets => s.info.max_kernel_bindings,
    };
    if kd.params.len() > most as usize {
        return Err(Error::invalid(format!(
            "kernel {} has {} bindings; this device allows {most} storage buffers per kernel (in {:?} mode)",
            kd.name,
            kd.params.len(),
            s.pipelines.mode()
        )));
    }
    if let Some(bytes) = kd.facts.shared_bytes {
        let most = s.info.max_compute_shared_memory_size;
        if bytes > u64::from(most) {
            return Err(Error::invalid(format!(
                "kernel {} uses at least {bytes} bytes of workgroup memory; this device allows {most} \
                 (maxComputeSharedMemorySize)",
                kd.name
            )));
        }
    }
    if let Some(size) = kd.facts.local_size {
        let (max, most) = (s.info.max_compute_work_group_size, s.info.max_compute_work_group_invocations);
        // Saturating: three dimensions of 2^31 or more multiply past u64 (a debug panic).
        let invocations = size.iter().try_fold(1u64, |p, &d| p.checked_mul(u64::from(d))).unwrap_or(u64::MAX);
        if size.iter().zip(max).any(|(&d, m)| d > m) || invocations > u64::from(most) {
            let why = format!(
                "kernel {}'s workgroup size {size:?} exceeds this device's maxComputeWorkGroupSize {max:?} or \
                 maxComputeWorkGroupInvocations {most}",
                kd.name
            );
            // A built-in's 256 invocations are vkhost's choice, not the caller's (Vulkan
            // guarantees 128): on such a device the built-ins are unsupported.
            return Err(if kd.check.is_some() { Error::unsupported(why) } else { Error::invalid(why) });
        }
    }
    Ok(())
}

/// Every binding resolved (each host binding's import held), and refused where two overlap
/// and the kernel writes one of them.
fn resolve_all(s: &Shared, k: &Kernel, bindings: &[Binding<'_>]) -> Result<Vec<Bound>> {
    let bound: Vec<Bound> =
        bindings.iter().zip(&k.inner.params).map(|(b, p)| resolve(s, b, *p == Param::ReadWrite)).collect::<Result<_>>()?;
    for (i, a) in bound.iter().enumerate() {
        if bound[..i].iter().any(|b| b.exact.overlaps(&a.exact) && (b.exact.is_write() || a.exact.is_write())) {
            return Err(Error::invalid("two bindings of one launch overlap, and the kernel writes one of them"));
        }
    }
    Ok(bound)
}

/// A built-in's own push constants checked against its bindings (see `KernelDef::check`).
/// Built-ins use a one-dimensional grid-stride loop over their element count (their first push
/// constant word): workgroups in y or z would repeat it (the checksum counted twice), and the
/// u32 index `i += invocations` must not wrap past the count (it would loop for ~2^32 more
/// rounds, counting elements again): invocations in x plus the count stay within 2^32. And
/// enough workgroups for the count: at most `builtin::MAX_ROUNDS` rounds per invocation (a
/// launch with elements and no workgroups would do nothing, and answer `Ok`).
fn check_builtin(k: &Kernel, groups: [u32; 3], bound: &[Bound], pc: &[u8]) -> Result<()> {
    let Some(f) = k.inner.check else { return Ok(()) };
    let count = builtin::push_word(pc, 0);
    let invocations = u64::from(groups[0]) * u64::from(builtin::WORKGROUP);
    let too_few = count > 0 && (invocations == 0 || count.div_ceil(invocations) > builtin::MAX_ROUNDS);
    if groups[1] != 1 || groups[2] != 1 || invocations + count > 1 << 32 || too_few {
        return Err(Error::invalid(format!(
            "built-in kernel {}: workgroups {groups:?} for {count} elements; use [n, 1, 1] with n * {} + elements <= 2^32 \
             and n * {} * {} >= elements",
            k.inner.name,
            builtin::WORKGROUP,
            builtin::WORKGROUP,
            builtin::MAX_ROUNDS
        )));
    }
    // Built-ins have at most two bindings: no heap allocation per launch.
    f(&bound.iter().map(|b| (b.delta, b.len)).collect::<smallvec::SmallVec<[(u32, u64); 2]>>(), pc)
}

impl StreamInner {
    /// Checks a launch as [`StreamInner::launch`] would, recording nothing: its arguments, the
    /// stream, and every binding (resolved, then let go). What a later launch then finds can
    /// differ only by what other threads changed meanwhile (an unregister, a teardown).
    fn check_launch(&self, k: &Kernel, groups: [u32; 3], bindings: &[Binding<'_>], pc: &[u8]) -> Result<()> {
        let s = &*self.shared;
        // A destroyed device answers that first, whatever the arguments (issue 2).
        let _l = s.live()?;
        check_args(s, k, groups, bindings, pc)?;
        self.check(&relock(&self.state))?;
        let bound = resolve_all(s, k, bindings)?;
        check_builtin(k, groups, &bound, pc)
    }

    /// Records a launch (see [`Stream::launch`]); returns the value that completes it and
    /// whether a safe slice binding lies in a registration.
    fn launch(&self, k: &Kernel, groups: [u32; 3], bindings: &[Binding<'_>], pc: &[u8]) -> Result<(u64, bool)> {
        let s = &*self.shared;
        let kd = &k.inner;
        // A destroyed device answers that first, whatever the arguments (issue 2).
        let l = s.live()?;
        check_args(s, k, groups, bindings, pc)?;
        if !self.runs_kernels(&l)? {
            return Err(Error::unsupported(
                "this stream runs on a transfer-only queue family (a copy engine): launch kernels on a stream from \
                 Device::stream_on(QueueKind::Compute)",
            ));
        }
        let push_desc = match s.pipelines.mode() {
            DescriptorMode::Push => match l.push_desc.as_ref() {
                Some(pd) => Some(pd),
                // The mode is chosen from `push_desc` at open: unreachable.
                None => return Err(Error::unsupported("push-descriptor mode without VK_KHR_push_descriptor")),
            },
            DescriptorMode::Sets => None,
        };
        // The bindings before the pipeline: a refused launch must not compile one, nor evict
        // another from a full cache (each binding's import is held from here on).
        let bound = resolve_all(s, k, bindings)?;
        check_builtin(k, groups, &bound, pc)?;
        // Held until the batch that launches it is reaped, even if the cache evicts it sooner.
        let pipe = s.pipelines.get(&self.shared, &l, &kd.desc)?;
        let mut st = relock(&self.state);
        self.check(&st)?;
        // Stream order for host bytes: an earlier pageable d2h of this stream into bytes a
        // binding names (queued before they were registered) lands before the kernel runs.
        for b in bindings {
            if let Some(a) = b.host_addr() {
                self.settle(&l, &mut st, a, b.len())?;
            }
        }
        let mut push = Vec::with_capacity(kd.desc.push_bytes as usize);
        for b in &bound {
            push.extend_from_slice(&b.delta.to_ne_bytes());
        }
        push.extend_from_slice(pc);
        let acc: Vec<Access> = bound.iter().map(|b| b.bound).collect();
        let owners: Vec<(&Arc<Resource>, bool)> = bound.iter().zip(&kd.params).map(|(b, p)| (&b.res, *p == Param::ReadWrite)).collect();
        let host_write = bound.iter().zip(&kd.params).any(|(b, p)| b.host && *p == Param::ReadWrite);
        let bytes = bound.iter().map(|b| b.range).sum();
        let infos: Vec<vk::DescriptorBufferInfo> =
            bound.iter().map(|b| vk::DescriptorBufferInfo { buffer: b.buffer, offset: b.offset, range: b.range }).collect();
        let d = &l.device;
        let writes = |set: vk::DescriptorSet| -> Vec<vk::WriteDescriptorSet<'_>> {
            infos
                .iter()
                .enumerate()
                .map(|(i, info)| {
                    vk::WriteDescriptorSet::default()
                        .dst_set(set)
                        .dst_binding(i as u32)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .buffer_info(std::slice::from_ref(info))
                })
                .collect()
        };
        // Descriptor-set mode: a set the open batch owns until it is reaped, written now (before
        // any command names it; it is never written again). A kernel without bindings needs none.
        let set = match push_desc {
            None if !infos.is_empty() => {
                let set = self.alloc_set(&l, &mut st, pipe.set_layout, kd.desc.bindings)?;
                // SAFETY: a fresh set of this stream's pool, under its lock, not yet named by any
                // command; its layout is live (`pipe` is held); the buffers are live (each is
                // held by `bound`, and the batch keeps them from `push_launch` on).
                unsafe { d.update_descriptor_sets(&writes(set), &[]) };
                Some(set)
            }
            _ => None,
        };
        let rec = |cmd| {
            // SAFETY: recording into the stream's open command buffer, under its lock, on a
            // compute-capable queue (checked); the pipeline and its layouts are held by the batch
            // (`push_launch`) until it is reaped, as are the descriptor set (from a pool of the
            // batch) and every buffer bound (noted and kept), each range-checked against
            // maxStorageBufferRange; push descriptors only where the extension is enabled
            // (`push_desc`); the push constants fill the layout's range exactly.
            unsafe {
                d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipe.pipeline);
                match (push_desc, set) {
                    (Some(pd), _) if !infos.is_empty() => {
                        pd.cmd_push_descriptor_set(cmd, vk::PipelineBindPoint::COMPUTE, pipe.layout, 0, &writes(vk::DescriptorSet::null()))
                    }
                    (None, Some(set)) => d.cmd_bind_descriptor_sets(cmd, vk::PipelineBindPoint::COMPUTE, pipe.layout, 0, &[set], &[]),
                    _ => {}
                }
                if !push.is_empty() {
                    d.cmd_push_constants(cmd, pipe.layout, vk::ShaderStageFlags::COMPUTE, 0, &push);
                }
                d.cmd_dispatch(cmd, groups[0], groups[1], groups[2]);
            }
        };
        self.push_launch(&l, &mut st, &pipe, bytes, host_write, &acc, &owners, rec)?;
        let value = if st.open.is_some() { st.submitted + 1 } else { st.submitted };
        // A launch that binds borrowed host bytes completes before it returns: the borrow ends
        // with the call, and a `&mut` to the same bytes taken before it is usable again at
        // once, so the kernel may not still read or write them (slices of pinned blocks
        // included). Bytes bound through their block are reached afterwards only through the
        // block's `Deref`/`DerefMut`, which wait for this launch.
        let borrowed = bound.iter().any(|b| b.wait);
        Ok((value, borrowed))
    }
}

/// Checks a built-in's binding: the whole range lies in its buffer or block (checked before the
/// built-in splits it, so a range that runs past the end is refused before any piece of it is
/// launched), and offset (as the device sees it) and length are multiples of 4. An empty binding
/// names no byte, so where it points does not matter (an empty `Vec`'s dangling pointer is 1):
/// only its bounds are checked, and the built-ins launch nothing for it.
fn check4(b: &Binding<'_>, what: &str) -> Result<()> {
    match b {
        Binding::Device(buf, off, len) => buf.mem.check_range(*off, *len)?,
        Binding::Pinned(r) => r.check()?,
        // A raw range must not run past the address space (the pieces' addresses are sums).
        Binding::Raw(h) => host::check_host_range(h.addr, h.len)?,
        Binding::Host(_) | Binding::HostMut(_) => {}
    }
    if (!b.is_empty() && b.phase() % 4 != 0) || b.len() % 4 != 0 {
        return Err(Error::invalid(format!("{what}: offsets and lengths of built-in kernels must be multiples of 4 bytes")));
    }
    Ok(())
}

/// `copy_sm`'s arguments: both in range and 4-byte multiples, equal lengths, no overlap.
fn check_copy_sm(src: &Binding<'_>, dst: &Binding<'_>) -> Result<()> {
    check4(src, "copy source")?;
    check4(dst, "copy destination")?;
    if src.len() != dst.len() {
        return Err(Error::invalid(format!("copy of {} bytes into {} bytes", src.len(), dst.len())));
    }
    if src.overlaps(dst) {
        return Err(Error::invalid("overlapping copy source and destination"));
    }
    Ok(())
}

/// `checksum_into`'s arguments: both in range and 4-byte multiples, an 8-byte result.
fn check_checksum(src: &Binding<'_>, out: &Binding<'_>) -> Result<()> {
    check4(src, "checksum source")?;
    check4(out, "checksum result")?;
    if out.len() != 8 {
        return Err(Error::invalid(format!("the checksum result is 8 bytes, not {}", out.len())));
    }
    Ok(())
}

/// The most bytes one launch of a built-in binds: maxStorageBufferRange less the alignment
/// slack, in 64 KiB steps (so pieces keep their phase for the vec4 copy), at most 1 GiB (so
/// word indices and loop counts stay small).
fn piece_bytes(s: &Shared) -> usize {
    let align = s.info.min_storage_buffer_offset_alignment.max(16);
    let max = u64::from(s.info.max_storage_buffer_range).saturating_sub(align) & !0xffff;
    max.clamp(1 << 16, 1 << 30) as usize
}

/// The length of the next piece of a built-in's binding `b`: at most `size` bytes, and within
/// the one import that covers its first byte (a registration or pinned block larger than one
/// import is several, `OpenOptions::max_import_piece`), so that one buffer covers the piece.
/// Host memory nothing covers: `size`, and the launch refuses it (`NotRegistered`).
fn piece_len(s: &Shared, b: &Binding<'_>, size: usize) -> usize {
    let left = b.host_addr().and_then(|a| host::part_left(s, a)).unwrap_or(usize::MAX);
    size.min(left).min(b.len())
}

/// `b` cut into the pieces a built-in launches ([`piece_len`]); none for an empty binding.
fn pieces<'a>(s: &Shared, mut b: Binding<'a>, size: usize) -> Vec<Binding<'a>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let n = piece_len(s, &b, size).max(1);
        let (head, rest) = b.split_at(n);
        out.push(head);
        b = rest;
    }
    out
}

/// Two bindings of equal length cut in step, each piece within one import on both sides.
fn pieces2<'a, 'b>(s: &Shared, mut a: Binding<'a>, mut b: Binding<'b>, size: usize) -> Vec<(Binding<'a>, Binding<'b>)> {
    let mut out = Vec::new();
    while !a.is_empty() && !b.is_empty() {
        let n = piece_len(s, &a, size).min(piece_len(s, &b, size)).max(1);
        let ((ha, ra), (hb, rb)) = (a.split_at(n), b.split_at(n));
        out.push((ha, hb));
        (a, b) = (ra, rb);
    }
    out
}

/// Workgroups for a built-in over `n` items with a grid-stride loop.
fn groups_for(n: usize, cap: usize) -> [u32; 3] {
    [n.div_ceil(builtin::WORKGROUP as usize).clamp(1, cap) as u32, 1, 1]
}

fn words(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

impl Stream {
    /// Enqueues a dispatch of `kernel` with `groups` workgroups on this stream's queue.
    ///
    /// `bindings[i]` is bound to binding i (aligned down, see [`crate::kernel`]);
    /// `push_constants` are the kernel's own (exactly [`Kernel::push_constant_bytes`]), placed
    /// after the one-`u32`-per-binding deltas. The launch orders against this stream's copies
    /// and launches by the bytes it binds, and owns what it binds until it completes.
    ///
    /// Async, except that a launch with a slice binding ([`Binding::Host`], [`Binding::HostMut`],
    /// any memory), or with a pinned block bound through another import than its own (a
    /// registration of its bytes on this stream's device), completes before the call returns
    /// (see [`crate::kernel`], **Safe launches and borrowed bytes**). Host bytes this stream
    /// still has a pageable device-to-host copy-out pending on (queued before they were
    /// registered) are copied out first: the call may then wait for that earlier work.
    ///
    /// Errors: a binding or push size that does not match the kernel, two bindings that overlap
    /// with a write, a zero-length binding, a shared [`Binding::Host`] or [`Binding::pinned`]
    /// for a binding the kernel writes, workgroups past maxComputeWorkGroupCount, a kernel whose
    /// workgroup size, workgroup memory or binding count exceeds the device's limits (see
    /// [`DeviceInfo`](crate::DeviceInfo)), a built-in's push constants or workgroups that do not
    /// fit its bindings and count (see [`crate::kernel::builtin`]) → `InvalidArgument`; a pinned
    /// range past its block → `OutOfRange`; a host range no registration or pinned block covers
    /// (or bytes of two registrations) → `NotRegistered`; a stream on a copy-only family, push
    /// constants past the device's limit, a built-in whose workgroup exceeds the device's limit
    /// → `Unsupported`.
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
    /// // SAFETY: `SCALE` (the WGSL of the module docs) reads binding 0 and writes binding 1 only
    /// // within the `n` words from their deltas and within the bound ranges (`arrayLength`),
    /// // whatever `n` a launch passes, nothing when a delta is not a multiple of 4, and has 8
    /// // bytes of its own push constants.
    /// let scale = unsafe { Kernel::from_spirv(&spirv(SCALE), "main", &[Param::ReadOnly, Param::ReadWrite], 8) }?;
    /// use vkhost::{Binding, QueueKind};
    /// let dev = vkhost::Device::open_default()?;
    /// let stream = dev.stream_on(QueueKind::Compute)?;
    /// let (src, dst) = (dev.alloc_buffer(1024)?, dev.alloc_buffer(1024)?);
    /// src.write_slice(0, &(0..256u32).collect::<Vec<_>>())?;
    /// let push: Vec<u8> = [256u32, 3].iter().flat_map(|w| w.to_ne_bytes()).collect(); // n, scale
    /// let bindings = [Binding::Device(&src, 0, 1024), Binding::Device(&dst, 0, 1024)];
    /// stream.launch(&scale, [4, 1, 1], &bindings, &push)?; // 4 groups of 64
    /// stream.synchronize()?;
    /// let mut out = vec![0u32; 256];
    /// dst.read_slice(0, &mut out)?;
    /// assert_eq!(out[100], 300);
    /// # Ok(()) }
    /// ```
    pub fn launch(&self, kernel: &Kernel, groups: [u32; 3], bindings: &[Binding<'_>], push_constants: &[u8]) -> Result<()> {
        let (value, now) = self.launch_settled(kernel, groups, bindings, push_constants)?;
        self.settle_launch(value, now)
    }

    /// [`StreamInner::launch`] after the wait a pinned block of another device needs (see
    /// [`Stream::launch`]); the caller settles the launch ([`Stream::settle_launch`]).
    fn launch_settled(&self, kernel: &Kernel, groups: [u32; 3], bindings: &[Binding<'_>], push_constants: &[u8]) -> Result<(u64, bool)> {
        for b in bindings {
            // A block of another device: bound here through another import of its bytes, the
            // launch first waits for the block's own device's work on them, as a slice of it
            // would (through its `Deref`/`DerefMut`). Before this device's lock: no two
            // devices' locks are held at once.
            if let Binding::Pinned(r) = b {
                self.settle_foreign(r.block, r.write);
            }
        }
        self.inner.launch(kernel, groups, bindings, push_constants)
    }

    /// Waits for `value` when `now` (the launch bound borrowed host bytes); a
    /// failed wait waits the queue idle before returning the error.
    fn settle_launch(&self, value: u64, now: bool) -> Result<()> {
        if !now {
            return Ok(());
        }
        let event = Event { inner: self.inner.clone(), value, own: true, call: 0, seen_done: std::sync::OnceLock::new() };
        if let Err(e) = event.wait() {
            if let Ok(l) = self.inner.shared.live_any() {
                self.inner.queue_idle(&l);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Fills `dst` with the repeated u32 `pattern` with the built-in `fill` kernel (any binding
    /// kind). Offset and length multiples of 4 bytes, else `InvalidArgument`. Async as
    /// [`Stream::launch`]. A call refused by the argument checks (for any of the pieces it is
    /// cut into) writes nothing. An empty `dst` (in range) is nothing to do and `Ok`, as a
    /// zero-length [`Stream::fill_async`]; only [`Stream::launch`] refuses an empty binding.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Binding, QueueKind};
    /// let dev = vkhost::Device::open_default()?;
    /// let stream = dev.stream_on(QueueKind::Compute)?;
    /// let mut pinned = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// // Any binding kind: here pinned host memory, written by the kernel in place.
    /// stream.fill_u32(Binding::HostMut(&mut pinned[64..]), 0xDEAD_BEEF)?;
    /// stream.fill_u32(Binding::HostMut(&mut pinned[..0]), 7)?; // empty: nothing to do
    /// stream.synchronize()?;
    /// assert_eq!(pinned.as_slice::<u32>()?[16], 0xDEAD_BEEF);
    /// # Ok(()) }
    /// ```
    pub fn fill_u32(&self, dst: Binding<'_>, pattern: u32) -> Result<()> {
        self.refuse(check4(&dst, "fill"))?;
        let mut dst = pieces(&self.inner.shared, dst, piece_bytes(&self.inner.shared));
        let dst_len = dst.len();
        let fill = builtin::fill()?;
        let args = |d: &Binding<'_>| (groups_for(d.len() / 4, 4096), words(&[(d.len() / 4) as u32, pattern]));
        // Every piece is checked before the first is launched: a call refused by the argument
        // checks for any piece (bytes nothing covers past a registration's end, ...) writes
        // nothing. One piece is checked by its launch.
        for d in dst.iter_mut().filter(|_| dst_len > 1) {
            let (groups, push) = args(d);
            self.inner.check_launch(fill, groups, &[d.reborrow()], &push)?;
        }
        for d in dst {
            let (groups, push) = args(&d);
            self.launch(fill, groups, &[d], &push)?;
        }
        Ok(())
    }

    /// Copies `src` into `dst` (equal lengths, not overlapping) with the built-in `copy` kernel
    /// (an SM copy, where the copy engines would use vkCmdCopyBuffer): 16-byte vector loads when
    /// both ranges start on 16 bytes and the length is a multiple of 16, u32 words otherwise.
    /// Offsets and lengths multiples of 4 bytes, else `InvalidArgument`. Async as
    /// [`Stream::launch`]. A call refused by the argument checks (for any of the pieces it is
    /// cut into) writes nothing.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Binding, QueueKind};
    /// let dev = vkhost::Device::open_default()?;
    /// let stream = dev.stream_on(QueueKind::Compute)?;
    /// let gpu = dev.alloc_buffer(4096)?;
    /// gpu.write(0, &[9; 4096])?;
    /// let mut pinned = vkhost::PinnedBuffer::new(&dev, 4096)?;
    /// // Device memory straight into pinned host memory, by the kernel.
    /// stream.copy_sm(Binding::Device(&gpu, 0, 4096), Binding::HostMut(&mut pinned))?;
    /// stream.synchronize()?;
    /// assert!(pinned.iter().all(|&b| b == 9));
    /// # Ok(()) }
    /// ```
    pub fn copy_sm(&self, src: Binding<'_>, dst: Binding<'_>) -> Result<()> {
        self.refuse(check_copy_sm(&src, &dst))?;
        let vec4 = src.phase() == 0 && dst.phase() == 0 && src.len() % 16 == 0;
        let (kernel, unit) = if vec4 { (builtin::copy_vec4()?, 16) } else { (builtin::copy()?, 4) };
        let size = piece_bytes(&self.inner.shared);
        let mut pairs = pieces2(&self.inner.shared, src, dst, size);
        let args = |s: &Binding<'_>| (groups_for(s.len() / unit, 4096), words(&[(s.len() / unit) as u32]));
        // Every piece is checked before the first is launched: a call refused by the argument
        // checks writes nothing. One piece is checked by its launch.
        let many = pairs.len() > 1;
        for (s, d) in pairs.iter_mut().filter(|_| many) {
            let (groups, push) = args(s);
            self.inner.check_launch(kernel, groups, &[s.reborrow(), d.reborrow()], &push)?;
        }
        for (s, d) in pairs {
            let (groups, push) = args(&s);
            self.launch(kernel, groups, &[s, d], &push)?;
        }
        Ok(())
    }

    /// Enqueues the built-in `checksum` of `src` into the 8 bytes of `out` (a little-endian u64,
    /// zeroed first by the `fill` kernel): see [`crate::kernel::builtin`] for the function,
    /// which [`checksum_cpu`](crate::kernel::checksum_cpu) computes on the host. Offsets and
    /// lengths multiples of 4 bytes, else `InvalidArgument`. Async as [`Stream::launch`].
    /// `src` may span the import pieces of a registration or pinned block larger than one
    /// import (the launches are cut there); the 8 result bytes are one binding, so host result
    /// bytes that straddle two pieces are `NotRegistered` (a refused call writes nothing).
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Binding, QueueKind};
    /// let dev = vkhost::Device::open_default()?;
    /// let stream = dev.stream_on(QueueKind::Compute)?;
    /// let data = dev.alloc_buffer(4096)?;
    /// data.write(0, &[0x5C; 4096])?;
    /// let sums = dev.alloc_buffer(16)?;
    /// stream.checksum_into(Binding::Device(&data, 0, 2048), Binding::Device(&sums, 0, 8))?;
    /// stream.checksum_into(Binding::Device(&data, 2048, 2048), Binding::Device(&sums, 8, 8))?;
    /// stream.synchronize()?;
    /// let mut got = [0u64; 2];
    /// sums.read_slice(0, &mut got)?;
    /// let want = vkhost::kernel::checksum_cpu(&[0x5C; 2048]);
    /// assert_eq!(got, [want, want]);
    /// # Ok(()) }
    /// ```
    pub fn checksum_into(&self, src: Binding<'_>, mut out: Binding<'_>) -> Result<()> {
        self.refuse(check_checksum(&src, &out))?;
        let mut src = pieces(&self.inner.shared, src, piece_bytes(&self.inner.shared));
        let sum = builtin::checksum()?;
        // Each piece's workgroups and push constants (its word count, and its first word's
        // index in the whole range).
        let mut first = 0usize;
        let args: Vec<([u32; 3], Vec<u8>)> = src
            .iter()
            .map(|s| {
                let n = s.len() / 4;
                first += n;
                (groups_for(n, 256), words(&[n as u32, (first - n) as u32]))
            })
            .collect();
        // Every checksum launch is checked before the zero fill writes `out`: a call refused
        // for any piece (an overlap with `out`, bytes nothing covers, ...) changes nothing.
        for (s, (groups, push)) in src.iter_mut().zip(&args) {
            self.inner.check_launch(sum, *groups, &[s.reborrow(), out.reborrow()], push)?;
        }
        let zero = words(&[2, 0]);
        let (zv, znow) = self.launch_settled(builtin::fill()?, [1, 1, 1], std::slice::from_mut(&mut out), &zero)?;
        let r = (|| {
            for (s, (groups, push)) in src.into_iter().zip(&args) {
                // `out` is bound again for each piece: the next launch reborrows it.
                self.launch(sum, *groups, &[s, out.reborrow()], push)?;
            }
            Ok(())
        })();
        // Even when a checksum launch failed: the zero fill of `out` is queued and may name the
        // caller's memory, so it must be done before this returns (see `Stream::launch`).
        let settled = self.settle_launch(zv, znow);
        r.and(settled)
    }

    /// The built-in `checksum` of `src`, computed on the device and read back: waits for this
    /// stream's work up to it. Lets tests and `vkhost check` verify device data without reading
    /// it all back.
    ///
    /// # Example
    ///
    /// ```
    /// # fn main() -> vkhost::Result<()> {
    /// use vkhost::{Binding, QueueKind};
    /// let dev = vkhost::Device::open_default()?;
    /// let stream = dev.stream_on(QueueKind::Compute)?;
    /// let gpu = dev.alloc_buffer(1 << 16)?;
    /// let data: Vec<u8> = (0..1 << 16).map(|i| (i % 251) as u8).collect();
    /// gpu.write(0, &data)?;
    /// let sum = stream.checksum(Binding::Device(&gpu, 0, 1 << 16))?;
    /// assert_eq!(sum, vkhost::kernel::checksum_cpu(&data));
    /// # Ok(()) }
    /// ```
    pub fn checksum(&self, src: Binding<'_>) -> Result<u64> {
        let out = self.device().alloc_buffer(8)?;
        self.checksum_into(src, Binding::Device(&out, 0, 8))?;
        self.record()?.wait()?;
        let mut v = [0u8; 8];
        out.read(0, &mut v)?;
        Ok(u64::from_le_bytes(v))
    }
}
