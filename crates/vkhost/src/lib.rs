//! # vkhost
//!
//! Pinned and registered host memory for Vulkan compute: what `cudaHostAlloc` and
//! `cudaHostRegister` give CUDA.
//!
//! Copies between host memory and a Vulkan device are usually staged: the CPU memcpys into a
//! driver staging buffer, then the device copies from there. vkhost removes the staging:
//!
//! - **pinned blocks** ([`host::alloc_pinned`], [`PinnedBuffer`]): driver-allocated host memory,
//!   mapped and bound to a VkBuffer;
//! - **registered ranges** ([`host::register`], [`Device::register`]): the caller's own memory,
//!   imported with VK_EXT_external_memory_host;
//! - **find** ([`host::find`]): for any host range, the VkBuffer and offset that cover it;
//! - **direct copies** ([`host::copy_to_device`], [`DeviceBuffer::write`]): one
//!   vkCmdCopyBuffer, no staging buffer, no memcpy.
//!
//! ## Layers
//!
//! | layer | what | safety |
//! |---|---|---|
//! | [`PinnedBuffer`], [`Registration`], [`DeviceBuffer::write`]/[`read`](DeviceBuffer::read) | owning types and slice copies | safe |
//! | [`host`] functions | the seed's address-based API, for runtimes and FFI | `register` and the copies are `unsafe` |
//! | [`Stream`], [`Event`], [`Pending`] | async copies on a queue, timeline-semaphore events | `Pending` guards are safe; raw async copies are `unsafe` |
//! | [`Device`], [`DeviceBuffer`] | the Vulkan device: queues, submission, teardown, interop ([`Device::raw`]) | safe |
//! | `host::registry`, `memtype` | pure data: the interval registry, memory-type ranking | no Vulkan |
//!
//! ## Example
//!
//! ```no_run
//! # fn main() -> vkhost::Result<()> {
//! let dev = vkhost::Device::open_default()?;
//! let gpu = dev.alloc_buffer(1 << 20)?;
//!
//! // Pinned memory: the device reads it directly.
//! let mut pinned = vkhost::PinnedBuffer::new(&dev, 1 << 20)?;
//! pinned.fill(7);
//! gpu.write(0, &pinned)?; // one vkCmdCopyBuffer, no staging
//!
//! // Your own memory, registered for as long as the guard lives.
//! let mut mine = vec![0u8; 1 << 20];
//! let mut reg = dev.register(&mut mine)?;
//! gpu.read(0, &mut reg)?; // direct into your pages
//! drop(reg);
//!
//! // Async: enqueue, keep working, wait when the bytes are needed.
//! let stream = dev.stream()?;
//! let pending = stream.upload(&pinned, &gpu, 0)?;
//! pending.wait()?;
//!
//! println!("{:?}", vkhost::host::stats()); // direct_bytes, staged_bytes, live entries
//! drop(pinned);
//! dev.destroy()?;
//! # Ok(()) }
//! ```
//!
//! Environment: `VKHOST_DEVICE=<index>` picks the default device, `VKHOST_VALIDATION=1`
//! enables the Khronos validation layer (errors counted by [`Device::validation_errors`]),
//! `VKHOST_IMPORT=never` turns registration off (copies stage).

#![deny(unsafe_op_in_unsafe_fn, missing_docs)]
#![warn(missing_debug_implementations)]

mod buffer;
mod device;
mod error;
pub mod fault;
pub mod host;
pub mod memtype;
mod resource;
mod stream;
mod track;

/// The sync primitives of the ownership protocol (`track`): `std` here, `loom` in its model
/// test, which includes `track.rs` itself.
mod sync_prims {
    pub(crate) use std::sync::atomic::{AtomicBool, Ordering};
    pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
}

pub use ash;
pub use ash::vk;
pub use buffer::DeviceBuffer;
pub use device::info::{fmt_bytes, ApiVersion, DeviceInfo, DeviceType, MemoryHeap, MemoryType, QueueFamily};
pub use device::{devices, Device, DeviceId, ImportPolicy, LiveObjects, MemoryChoices, OpenOptions, Ownership, QueueKind, RawDevice};
pub use error::{Error, Result};
pub use host::safe::{PinnedBuffer, Registration};
pub use host::{CopyPath, HostStats};
pub use stream::{Event, Pending, Stream};
