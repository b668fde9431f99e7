"""One exception class per vkhost_status, all subclasses of :class:`Error`."""

from __future__ import annotations


class Error(Exception):
    """A vkhost call failed. ``status`` is the C status code, ``args[0]`` the library's message."""

    status: int = -1

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class NullArgumentError(Error):
    """A handle or out-pointer was NULL (a bug in these bindings if it reaches you)."""

    status = 1


class LoaderMissingError(Error):
    """libvulkan.so.1 could not be loaded."""

    status = 2


class NoDeviceError(Error):
    """No Vulkan device, or none at the requested index."""

    status = 3


class OutOfHostMemoryError(Error):
    """Out of host memory."""

    status = 4


class OutOfDeviceMemoryError(Error):
    """Out of device memory, or no memory type fits."""

    status = 5


class DeviceLostError(Error):
    """The device was lost."""

    status = 6


class DeviceDestroyedError(Error):
    """The device was destroyed."""

    status = 7


class UnsupportedError(Error):
    """The device or the import policy does not allow this."""

    status = 8


class InvalidArgumentError(Error, ValueError):
    """An argument was refused before anything reached the driver."""

    status = 9


class OutOfRangeError(Error, IndexError):
    """An offset or length runs past the end of a buffer."""

    status = 10


class NotPinnedError(Error):
    """Not the start of a live pinned block."""

    status = 11


class NotRegisteredError(Error):
    """Not the start of a registration, or no registration covers the range."""

    status = 12


class AlreadyRegisteredError(Error):
    """The bytes overlap a registration or pinned block of this device."""

    status = 13


class OwnedByGuardError(Error):
    """The entry is owned by a safe guard."""

    status = 14


class BusyError(Error):
    """The device cannot be destroyed while owners of its memory (e.g. PinnedArrays) live."""

    status = 15


class VulkanError(Error):
    """Any other Vulkan failure."""

    status = 16


class InternalError(Error):
    """A bug in vkhost (a panic caught at the C boundary)."""

    status = 17


BY_STATUS: dict[int, type[Error]] = {
    c.status: c
    for c in (
        NullArgumentError,
        LoaderMissingError,
        NoDeviceError,
        OutOfHostMemoryError,
        OutOfDeviceMemoryError,
        DeviceLostError,
        DeviceDestroyedError,
        UnsupportedError,
        InvalidArgumentError,
        OutOfRangeError,
        NotPinnedError,
        NotRegisteredError,
        AlreadyRegisteredError,
        OwnedByGuardError,
        BusyError,
        VulkanError,
        InternalError,
    )
}
