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
//! | [`kernel`]: [`Kernel`], [`Binding`], [`Stream::launch`], built-ins ([`Stream::fill_u32`], [`Stream::copy_sm`], [`Stream::checksum`]) | compute launches over device buffers, pinned blocks and registrations, zero-copy | built-ins and launches are safe; `Kernel::from_spirv` and raw `Binding::host` are `unsafe` |
//! | tracked resources (internal) | every import, pinned block and device buffer is an `Arc` owner with the uses submitted work made of it | |
//! | borrowed devices: [`Device::from_raw_borrowed`], [`host::record_copy`], [`host::RecordedCopy`] | a caller's VkDevice with no queues for vkhost: registry and imports only; copies recorded into the caller's command buffers, completion told by a timeline value or fence | wrapping, recording and the hooks are `unsafe` |
//! | [`Device`], [`DeviceBuffer`] | the Vulkan device: queues, submission, teardown, interop ([`Device::raw`]) | safe |
//! | `host::registry`, `memtype`, the ownership protocol | pure data: the interval registry, memory-type ranking, owners and uses | no Vulkan |
//!
//! ## Soundness: what a leaked guard can and cannot do
//!
//! `mem::forget` is safe, and so are `Rc` cycles: a destructor is not guaranteed to run. A
//! guard whose `Drop` is the only thing keeping the device off freed memory is unsound; that is
//! why `std::thread::scoped` was removed before Rust 1.0 (the "leakpocalypse") and replaced by
//! `std::thread::scope`, whose closure waits before it returns. vkhost follows the same rule:
//! no safe call's soundness depends on a destructor running.
//!
//! - **Submitted work owns what it names.** A stream batch (or a synchronous copy) keeps an
//!   `Arc` of every import, pinned block and device buffer it names until its completion is
//!   reaped, so dropping a [`DeviceBuffer`] or [`PinnedBuffer`], or calling
//!   [`host::free_pinned`], never frees memory the device still uses.
//! - **A borrowed slice is never lent past a call by safe code.** [`Stream::upload`],
//!   [`Stream::download`] and launches that bind [`Binding::Host`]/[`Binding::HostMut`] take
//!   `&[u8]`/`&mut [u8]`, which may be a reborrow of a `&mut` the caller took before the call
//!   (from any memory, a [`PinnedBuffer`]'s included) and uses again as soon as the returned
//!   guard is gone, forgotten or not. So an upload has read its bytes when it returns (pageable
//!   bytes copied into the staging ring, direct bytes waited for), and a download or a launch
//!   that binds borrowed bytes is complete when it returns. The returned [`Pending`] still
//!   borrows the slice, but forgetting it exposes nothing.
//! - **Async copies borrow the owner.** [`Stream::upload_pinned`] and
//!   [`Stream::download_pinned`] return at once: they borrow the [`PinnedBuffer`] itself
//!   (shared for an upload, exclusively for a download) for the guard's life, so no view of
//!   the block made before the call outlives the borrow, and every view made after it comes
//!   from the block's `Deref` (which waits for the device's pending writes to it) or `DerefMut`
//!   (which waits for any device access): a forgotten guard cannot let the CPU see or change
//!   bytes the device is using. Kernel launches bind a block the same way, async:
//!   [`Binding::pinned`] (shared) and [`Binding::pinned_mut`] (exclusive). Device work on two
//!   streams is unordered, as in CUDA (see [`Stream`]): a kernel on one stream that reads a
//!   block while a copy on another writes it may read old bytes, new ones or a mix, unless
//!   the caller orders them with an [`Event`]; no CPU view sees the bytes while either runs.
//!   Likewise a synchronous [`DeviceBuffer::write`] (which may be CPU stores into a full-BAR
//!   mapping) waits for work already enqueued on the buffer, but not for work another thread
//!   enqueues on it while the write runs: those device bytes are racy until the threads order
//!   themselves, and no Rust reference ever sees them.
//! - **Releases the caller makes are exact.** [`host::unregister`] (and a [`Registration`]'s
//!   drop) returns only once no submitted work can read or write the registered bytes. Raw
//!   [`host::free_pinned`]/[`host::unregister`] refuse entries a guard owns
//!   ([`Error::OwnedByGuard`]); in a forked child, where every call on the parent's device is
//!   inert, they return without changing anything.
//! - **Recorded copies are owned by their completion, not their ticket.** A
//!   [`host::RecordedCopy`] notes its uses and hands its `Arc`s to vkhost when it is recorded;
//!   `unregister` waits for the caller's semaphore or fence. A forgotten ticket without a hook
//!   makes the raw `unregister` of its bytes and [`Device::destroy`] `Busy`, and a guard's drop
//!   over them block: a refusal or a hang, not a use-after-free. vkhost reports a recorded
//!   copy complete only once none of its calls on the caller's semaphore or fence runs, so the
//!   caller may destroy or reset it then.
//! - **Leaks leak.** A forgotten [`Pending`], [`Event`] or [`Stream`] leaves its work to be
//!   finished at device teardown; a forgotten [`PinnedBuffer`] keeps its block and makes
//!   [`Device::destroy`] `Busy`; a forgotten [`Registration`] leaves its range registered (see
//!   its docs). Each of these holds the device, so after one is forgotten dropping the last
//!   handle no longer tears it down: an explicit [`Device::destroy`] does (finishing the
//!   forgotten work) after a forgotten `Pending`, `Event`, `Stream` or `Registration`; after a
//!   forgotten `PinnedBuffer`, [`DeviceHold`] or unhooked [`host::RecordedCopy`] it is `Busy`
//!   for good, and the device, its instance and their memory leak. None of these lets safe
//!   code touch memory the device uses.
//! - **fork.** Everything made before `fork()` is inert in the child: the parent's device
//!   answers `DeviceDestroyed` there, drops and releases do nothing (the objects are the
//!   parent's), and the bytes of a [`PinnedBuffer`] a GPU driver allocated are not the child's
//!   to touch (the driver's mapping may be shared with the parent or absent): its
//!   `Deref`/`DerefMut` panic there, and the streams and kernels of any device, the child's own
//!   included, refuse it with `Unsupported` (a CPU driver's block, heap memory, is the child's
//!   private copy). A child opens a device of its own.
//!
//! Fully async copies of the caller's own memory remain available through the `unsafe` raw
//! calls ([`Stream::copy_to_device_async`], [`Stream::copy_to_host_async`]), whose contracts
//! state what the caller must keep alive.
//!
//! ## Example
//!
//! ```
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
//! assert!(mine.iter().all(|&b| b == 7));
//!
//! // Async: enqueue, keep working, wait when the bytes are needed.
//! let stream = dev.stream()?;
//! let pending = stream.upload_pinned(&pinned, 0..pinned.len(), &gpu, 0)?;
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
pub mod kernel;
mod maps;
pub mod memtype;
mod open;
mod par;
mod resource;
mod reuse;
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
pub use device::info::{ApiVersion, DeviceInfo, DeviceType, MemoryHeap, MemoryType, QueueFamily, fmt_bytes};
pub use device::queues::{CopyFloor, CopyQueues, QueueFigures};
pub use device::{
    BarAssist, BarWrites, BorrowedDevice, Device, DeviceHold, DeviceId, ImportPolicy, LiveObjects, MemoryChoices, OpenOptions, Ownership,
    QueueKind, RawDevice, ValidationCounter, devices, validation_layer_installed,
};
pub use error::{Error, Result};
pub use host::range::{HostRange, broadcast, gather};
pub use host::safe::{PinnedBuffer, RawMemory, Registration};
pub use host::{CopyPath, HostStats};
pub use kernel::{Binding, Kernel, Param};
pub use reuse::PinnedCacheStats;
pub use stream::{Event, Pending, Stream};
