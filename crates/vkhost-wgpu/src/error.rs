//! The crate's one error type.

use vkhost::vk;

/// Why opening an [`Interop`](crate::Interop) or wrapping memory as a wgpu buffer failed.
///
/// # Example
///
/// ```
/// # fn main() -> vkhost_wgpu::Result<()> {
/// use vkhost_wgpu::{Error, Interop, vkhost::PinnedBuffer};
/// let interop = Interop::open(&Default::default())?;
/// let mut odd = PinnedBuffer::new(interop.vkhost(), 6)?; // not a multiple of 4 bytes
/// let err = interop.scope(|s| s.pinned(&mut odd).map(drop)).unwrap_err();
/// assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
/// # Ok(()) }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No Vulkan adapter that can import host memory (VK_EXT_external_memory_host, Vulkan
    /// 1.1 or later), or none at `VKHOST_DEVICE`.
    #[error("no usable Vulkan adapter: {reason}")]
    NoAdapter {
        /// What was looked for and found.
        reason: String,
    },
    /// The adapter, device or memory cannot do what was asked (the reason says what).
    #[error("unsupported: {reason}")]
    Unsupported {
        /// What is missing.
        reason: String,
    },
    /// A bad argument: memory of another device, a length wgpu cannot use, bytes that do not
    /// start at the alignment a VkBuffer over them needs.
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// What is wrong with it.
        reason: String,
    },
    /// A Vulkan call this crate makes itself failed.
    #[error("{call} failed: {code:?}")]
    Vulkan {
        /// The entry point.
        call: &'static str,
        /// Its result.
        code: vk::Result,
    },
    /// wgpu-hal could not set up its device over the VkDevice.
    #[error("wgpu-hal device setup: {0}")]
    Hal(#[from] wgpu::hal::DeviceError),
    /// wgpu refused the device (features or limits the adapter does not offer).
    #[error("wgpu device: {0}")]
    RequestDevice(#[from] wgpu::RequestDeviceError),
    /// vkhost failed (wrapping the device, or the memory's device is destroyed).
    #[error(transparent)]
    Vkhost(#[from] vkhost::Error),
}

impl Error {
    pub(crate) fn unsupported(reason: impl Into<String>) -> Error {
        Error::Unsupported { reason: reason.into() }
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> Error {
        Error::InvalidArgument { reason: reason.into() }
    }
}

/// `Result` with this crate's [`Error`].
///
/// # Example
///
/// ```
/// use vkhost_wgpu::{Interop, Result};
/// fn alignment() -> Result<usize> {
///     Ok(Interop::open(&Default::default())?.host_buffer_alignment())
/// }
/// assert!(alignment().unwrap().is_power_of_two());
/// ```
pub type Result<T> = std::result::Result<T, Error>;
