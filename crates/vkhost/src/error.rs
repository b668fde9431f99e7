//! The one error type of the crate.
//!
//! Variants classify what went wrong so callers can match on them; `Vulkan { call, code }`
//! keeps the entry point and the raw result for everything that has no better name.

use ash::vk;

/// Everything a vkhost call can fail with.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost::Result<()> {
/// use vkhost::Error;
///
/// let dev = vkhost::Device::open_default()?;
/// let buf = dev.alloc_buffer(64)?;
/// // Refused before anything reaches the driver:
/// assert!(matches!(dev.alloc_buffer(0), Err(Error::InvalidArgument { .. })));
/// assert_eq!(buf.read(60, &mut [0u8; 8]), Err(Error::OutOfRange));
/// dev.destroy()?;
/// assert_eq!(buf.write(0, &[1]), Err(Error::DeviceDestroyed));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// libvulkan could not be loaded.
    #[error("the Vulkan loader (libvulkan.so.1) could not be loaded: {reason}")]
    LoaderMissing {
        /// What the loader said.
        reason: String,
    },
    /// No physical device, or none at the requested index.
    #[error("no Vulkan device available (or none at the requested index)")]
    NoDevice,
    /// VK_ERROR_OUT_OF_HOST_MEMORY, or a host allocation failed.
    #[error("out of host memory")]
    OutOfHostMemory,
    /// VK_ERROR_OUT_OF_DEVICE_MEMORY, or no memory type fits.
    #[error("out of device memory")]
    OutOfDeviceMemory,
    /// VK_ERROR_DEVICE_LOST: the device is unusable until it is destroyed.
    #[error("the Vulkan device was lost")]
    DeviceLost,
    /// The device was destroyed; nothing more can run on it.
    #[error("the device has been destroyed")]
    DeviceDestroyed,
    /// The device or the policy does not allow this.
    #[error("unsupported: {reason}")]
    Unsupported {
        /// What is missing or refused.
        reason: String,
    },
    /// An argument was refused before anything reached the driver.
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// Which argument, and what is wrong with it.
        reason: String,
    },
    /// An offset or length runs past the end of a buffer.
    #[error("offset or length out of range")]
    OutOfRange,
    /// `free_pinned` of an address that is not the start of a live pinned block.
    #[error("address is not the start of a pinned block")]
    NotPinned,
    /// `unregister` of an address that is not the start of a registration; also a host range
    /// that must be covered by one registration or pinned block (a kernel's host binding, a
    /// recorded copy) and is not.
    #[error("not registered: no registration starts at the address, or no one registration or pinned block covers the host range")]
    NotRegistered,
    /// `register` of bytes that overlap a registration or pinned block on the same device.
    #[error("range overlaps a registration or pinned block on this device")]
    AlreadyRegistered,
    /// The raw `free_pinned`/`unregister` named an entry that a safe guard owns (`what`: a
    /// `PinnedBuffer`, a `Registration` or a `HostRange`); nothing changed. Drop the guard
    /// instead.
    #[error("that range is owned by a {what}: drop it instead of freeing it through the raw API")]
    OwnedByGuard {
        /// The guard type that owns the entry.
        what: &'static str,
    },
    /// `Device::destroy` refused: a `PinnedBuffer` of the device lives (its memory would be
    /// freed under a live reference), a `RecordedCopy` ticket without a completion hook, or a
    /// `DeviceHold`. A live `Registration` does not refuse it: the bytes are the caller's, and
    /// the registration outlives the device as an inert guard.
    #[error("device is busy: {reason}")]
    Busy {
        /// What still holds the device.
        reason: String,
    },
    /// Any other Vulkan failure, with the entry point that returned it.
    #[error("{call} failed: {code:?}")]
    Vulkan {
        /// The Vulkan entry point, e.g. `"vkQueueSubmit"`.
        call: &'static str,
        /// The result it returned.
        code: vk::Result,
    },
}

/// `Result` with [`Error`].
///
/// # Example
///
/// ```
/// fn round_trip(dev: &vkhost::Device, data: &[u8]) -> vkhost::Result<Vec<u8>> {
///     let buf = dev.alloc_buffer(data.len())?;
///     buf.write(0, data)?;
///     let mut out = vec![0; data.len()];
///     buf.read(0, &mut out)?;
///     Ok(out)
/// }
///
/// # fn main() -> vkhost::Result<()> {
/// let dev = vkhost::Device::open_default()?;
/// assert_eq!(round_trip(&dev, b"vkhost")?, b"vkhost");
/// # Ok(()) }
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Classifies a failed Vulkan call.
    pub(crate) fn vk(call: &'static str, code: vk::Result) -> Error {
        log::debug!("{call} returned {code:?}");
        match code {
            vk::Result::ERROR_OUT_OF_HOST_MEMORY => Error::OutOfHostMemory,
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => Error::OutOfDeviceMemory,
            vk::Result::ERROR_DEVICE_LOST => Error::DeviceLost,
            code => Error::Vulkan { call, code },
        }
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> Error {
        Error::InvalidArgument { reason: reason.into() }
    }

    pub(crate) fn unsupported(reason: impl Into<String>) -> Error {
        Error::Unsupported { reason: reason.into() }
    }
}

/// Extension to turn `VkResult`s into [`Error`]s with the call's name.
pub(crate) trait VkResultExt<T> {
    fn call(self, name: &'static str) -> Result<T>;
}

impl<T> VkResultExt<T> for std::result::Result<T, vk::Result> {
    fn call(self, name: &'static str) -> Result<T> {
        self.map_err(|code| Error::vk(name, code))
    }
}
