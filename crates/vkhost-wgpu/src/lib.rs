//! # vkhost-wgpu
//!
//! wgpu interop for [vkhost]: registered host memory (your own `Vec`) and pinned blocks as
//! wgpu storage buffers that compute shaders and copies use directly, with no staging buffer
//! and no memcpy. wgpu has no way to wrap host memory itself (gfx-rs/wgpu#7819).
//!
//! [`Interop::open`] opens a wgpu device whose VkDevice has VK_EXT_external_memory_host enabled
//! (through wgpu-hal's `Adapter::device_from_raw`), and a vkhost [`Device`](vkhost::Device) over
//! the same VkDevice in vkhost's borrowed mode without queues
//! ([`vkhost::Device::from_raw_borrowed`]): vkhost imports and pins, wgpu alone submits.
//! [`Interop::scope`] hands a [`vkhost::Registration`] or [`vkhost::PinnedBuffer`] to wgpu as a
//! [`HostBuffer`] (a `wgpu::Buffer` over exactly the guard's bytes) and finishes all device work
//! before the guard is released.
//!
//! ## Supported wgpu version: 24, exactly
//!
//! `wgpu = "24"` (24.0.x, with wgpu-hal 24.0.x). The crate names wgpu-hal's Vulkan types
//! (`Adapter::device_from_raw` and its arguments, `Device::buffer_from_raw`,
//! `CommandEncoder::raw_handle`), which wgpu changes in every major release, and passes ash
//! handles between wgpu-hal and vkhost, which works only while both use the same ash (0.38 for
//! wgpu-hal 24 and vkhost). Another wgpu major needs a new release of this crate. Use
//! [`vkhost_wgpu::wgpu`](wgpu) (re-exported) so your wgpu is this one.
//!
//! ## Layers
//!
//! | module | what | `unsafe` inside |
//! |---|---|---|
//! | `open` ([`Interop`], [`Options`]) | the adapter choice, the VkDevice created as wgpu-hal's `Adapter::open` does plus VK_EXT_external_memory_host, wgpu's device and queue over it, vkhost's borrowed device over that | wgpu-hal and vkhost's raw constructors |
//! | `scope` ([`Scope`], [`HostBuffer`]) | a VkBuffer per wrap, bound to vkhost's memory and given to wgpu; the end of a scope: destroy, host barrier, wait | buffer creation and binding, `create_buffer_from_hal`, one recorded barrier |
//! | `error` ([`Error`]) | the one error enum | none |
//!
//! ## Soundness
//!
//! Safe code cannot make the device touch memory that is gone, leaks (`mem::forget`) included:
//!
//! - **The VkDevice outlives vkhost.** vkhost's device keeps a clone of the `wgpu::Device`
//!   ([`vkhost::Device::keep_alive`]) and drops it after its own teardown, so a `PinnedBuffer`
//!   or `Registration` that outlives the [`Interop`] still frees its memory on a live VkDevice.
//! - **wgpu never owns vkhost's buffers.** wgpu destroys the VkBuffers it is given, so each
//!   [`HostBuffer`] is a new VkBuffer bound to vkhost's memory (`scope` module docs).
//! - **Device work on the memory ends with the scope.** `wgpu::Buffer` is `Clone` and bind
//!   groups keep it, so no lifetime can bound wgpu's use of it. Instead the guard stays borrowed
//!   for the whole [`Interop::scope`] call, which destroys every buffer it handed out and waits
//!   for all submitted work before returning (or unwinding); wgpu refuses to submit any later
//!   use of an escaped clone or bind group. Like `std::thread::scope`, nothing the caller holds
//!   can skip this.
//! - **No destroy under wgpu's feet.** A scope holds a [`vkhost::DeviceHold`], so
//!   `vkhost::Device::destroy` answers `Busy` while wgpu may use vkhost's imports.
//! - **Exactly the guard's bytes.** A [`HostBuffer`] starts at the guard's first byte and is
//!   as long as the guard (refused when Vulkan's alignment does not allow that), so a shader
//!   cannot reach bytes outside the registration; wgpu bounds-checks every access within it.
//!
//! ## Example
//!
//! A compute shader doubling a registered `Vec<f32>` into another, in place in host memory
//! (`examples/wgpu_compute.rs` is the full program, with its checks). A registration must start
//! at [`Interop::host_buffer_alignment`] (64 bytes on lavapipe; glibc's `malloc` aligns large
//! blocks to 16 only), so each vector is a little longer and its aligned run is registered:
//!
//! ```
//! # fn main() -> vkhost_wgpu::Result<()> {
//! use vkhost_wgpu::{wgpu, Interop};
//! let interop = Interop::open(&Default::default())?;
//! let (dev, queue) = (interop.device(), interop.queue());
//! let (n, align) = (1 << 16, interop.host_buffer_alignment());
//! let skip = |v: &[f32]| (align - v.as_ptr() as usize % align) % align / 4;
//! let mut input = vec![1.5f32; n + align / 4];
//! let mut output = vec![0.0f32; n + align / 4];
//! let (i, o) = (skip(&input), skip(&output));
//! let mut reg_in = interop.vkhost().register(bytemuck::cast_slice_mut(&mut input[i..i + n]))?;
//! let mut reg_out = interop.vkhost().register(bytemuck::cast_slice_mut(&mut output[o..o + n]))?;
//! let module = dev.create_shader_module(wgpu::ShaderModuleDescriptor {
//!     label: None,
//!     source: wgpu::ShaderSource::Wgsl(
//!         "@group(0) @binding(0) var<storage, read> a: array<f32>;
//!          @group(0) @binding(1) var<storage, read_write> b: array<f32>;
//!          @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
//!              if (i.x < arrayLength(&a)) { b[i.x] = 2.0 * a[i.x]; }
//!          }".into(),
//!     ),
//! });
//! let pipeline = dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
//!     label: None, layout: None, module: &module, entry_point: Some("main"),
//!     compilation_options: Default::default(), cache: None,
//! });
//! interop.scope(|s| -> vkhost_wgpu::Result<()> {
//!     let (a, b) = (s.registration(&mut reg_in)?, s.registration(&mut reg_out)?);
//!     let group = dev.create_bind_group(&wgpu::BindGroupDescriptor {
//!         label: None,
//!         layout: &pipeline.get_bind_group_layout(0),
//!         entries: &[
//!             wgpu::BindGroupEntry { binding: 0, resource: a.as_entire_binding() },
//!             wgpu::BindGroupEntry { binding: 1, resource: b.as_entire_binding() },
//!         ],
//!     });
//!     let mut enc = dev.create_command_encoder(&Default::default());
//!     {
//!         let mut pass = enc.begin_compute_pass(&Default::default());
//!         pass.set_pipeline(&pipeline);
//!         pass.set_bind_group(0, &group, &[]);
//!         pass.dispatch_workgroups(n as u32 / 64, 1, 1);
//!     }
//!     queue.submit([enc.finish()]);
//!     Ok(())
//! })?; // the work has completed here
//! drop((reg_in, reg_out));
//! assert!(output[o..o + n].iter().all(|&x| x == 3.0));
//! # Ok(()) }
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod error;
mod open;
mod scope;

pub use error::{Error, Result};
pub use open::{Interop, Options};
pub use scope::{HostBuffer, Scope, USAGES};
pub use vkhost;
pub use wgpu;
