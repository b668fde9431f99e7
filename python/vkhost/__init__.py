"""vkhost for Python: pinned and registered host memory for Vulkan compute, over NumPy arrays.

ctypes bindings of vkhost's C ABI (``libvkhost_capi.so``; see ``vkhost._ffi`` for how it is
found). Copies between registered or pinned memory and a device buffer are direct (one
vkCmdCopyBuffer, no staging); everything else is staged.

    import numpy as np, vkhost
    with vkhost.Device() as dev:
        a = np.arange(1 << 20, dtype=np.float32)
        buf = dev.alloc_buffer(a.nbytes)
        with dev.register(a):
            buf.write(a)                       # direct from your array
            b = buf.read(dtype=np.float32)     # staged into a new array

vkhost's warnings and errors (a malformed ``VKHOST_*`` variable ignored, validation-layer
messages) go to standard error as ``vkhost: <level>: <message>``; ``VKHOST_LOG=off`` (or
``error``, ``warn``, the default, ``info``, ``debug``, ``trace``) sets what is printed.
"""

from __future__ import annotations

import atexit
import math
import operator
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from ctypes import byref, c_bool, c_int, c_size_t, c_uint64, c_void_p, sizeof
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from . import _ffi
from ._ffi import lib
from .errors import (
    BY_STATUS,
    AlreadyRegisteredError,
    BusyError,
    DeviceDestroyedError,
    DeviceLostError,
    Error,
    InternalError,
    InvalidArgumentError,
    LoaderMissingError,
    NoDeviceError,
    NotPinnedError,
    NotRegisteredError,
    NullArgumentError,
    OutOfDeviceMemoryError,
    OutOfHostMemoryError,
    OutOfRangeError,
    OwnedByGuardError,
    UnsupportedError,
    VulkanError,
)

__all__ = [
    "Device",
    "DeviceBuffer",
    "DeviceInfo",
    "Event",
    "PinnedArray",
    "Registration",
    "Stats",
    "Stream",
    "bench",
    "devices",
    "stats",
    "validation_errors",
    "library_path",
    "Error",
    "AlreadyRegisteredError",
    "BusyError",
    "DeviceDestroyedError",
    "DeviceLostError",
    "InternalError",
    "InvalidArgumentError",
    "LoaderMissingError",
    "NoDeviceError",
    "NotPinnedError",
    "NotRegisteredError",
    "NullArgumentError",
    "OutOfDeviceMemoryError",
    "OutOfHostMemoryError",
    "OutOfRangeError",
    "OwnedByGuardError",
    "UnsupportedError",
    "VulkanError",
]

CopyPath = Literal["direct", "staged", "mixed", "mapped"]
_PATHS: tuple[CopyPath, ...] = ("direct", "staged", "mixed", "mapped")
_DEVICE_TYPES = ("discrete", "integrated", "virtual", "cpu", "other")


def _error(status: int) -> Error | None:
    """The Error subclass of a non-OK status, with the library's message (this thread's last:
    read it before any other vkhost call on the thread, such as a release deferred to the end
    of a ``_use`` block); None for OK."""
    if status == 0:
        return None
    msg = (lib.vkhost_last_error_message() or b"").decode(errors="replace")
    return BY_STATUS.get(status, Error)(msg, status)


def _check(status: int) -> None:
    """Raises the Error subclass of a non-OK status, with the library's message."""
    err = _error(status)
    if err is not None:
        raise err


def library_path() -> str:
    """The path of the loaded libvkhost_capi.so."""
    return str(_ffi.find_library())


_U64 = 1 << 64


def _size(v: Any, what: str) -> int:
    """A size, offset or index for a size_t argument: ctypes would reduce anything outside
    [0, 2^64) modulo 2^64 without a word (2^64 + 16 bytes would allocate 16)."""
    try:
        n = operator.index(v)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(v).__name__}") from None
    if not 0 <= n < _U64:
        raise OutOfRangeError(f"{what} = {n}: out of range [0, 2^64)", 10)
    return n


def _u32(v: Any, what: str) -> int:
    """A 32-bit fill value: a uint32, or an int32 taken as its two's complement."""
    try:
        n = operator.index(v)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(v).__name__}") from None
    if not -(1 << 31) <= n < (1 << 32):
        raise OutOfRangeError(f"{what} = {n}: out of range [-2^31, 2^32) for a 32-bit value", 10)
    return n & 0xFFFFFFFF


def _require_buffer(b: Any, what: str) -> None:
    if not isinstance(b, DeviceBuffer):
        raise TypeError(f"{what} must be a vkhost.DeviceBuffer, not {type(b).__name__}")


def _plain(dt: np.dtype[Any], what: str) -> None:
    # The device reads and writes raw bytes: over an array of Python objects it would write
    # made-up pointers (a crash when NumPy follows them) or read the objects' addresses.
    if dt.hasobject:
        raise InvalidArgumentError(f"{what} holds Python objects (dtype {dt}): only plain data can be copied", 9)


def _item_dtype(dtype: npt.DTypeLike, what: str) -> np.dtype[Any]:
    """The dtype of new arrays vkhost makes: plain data, items of at least one byte."""
    dt = np.dtype(dtype)
    _plain(dt, what)
    if dt.itemsize == 0:
        raise InvalidArgumentError(f"{what} {dt} has items of 0 bytes", 9)
    if dt.subdtype is not None:
        raise InvalidArgumentError(f"{what} {dt} is a subarray dtype: give the item dtype and a count", 9)
    return dt


def _contiguous(a: np.ndarray, what: str, writable: bool = False) -> np.ndarray:
    """``a`` checked, as a plain ``numpy.ndarray`` view (use the result): a subclass could
    report another size, address or flags than its memory has (``nbytes``, ``ctypes`` and
    ``flags`` are overridable properties), and the device would copy past its end."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what} must be a numpy.ndarray, not {type(a).__name__}")
    if type(a) is not np.ndarray:
        a = a.view(np.ndarray)
    _plain(a.dtype, what)
    if not a.flags.c_contiguous:
        raise InvalidArgumentError(f"{what} must be C-contiguous", 9)
    if writable and not a.flags.writeable:
        raise InvalidArgumentError(f"{what} must be writable", 9)
    return a


class _Handle:
    """A C handle that several threads may use: every call holds it (``with h.use() as raw``)
    and ``release`` hands it, once, to a function that releases it, after the calls in flight
    returned. ctypes lets go of the GIL during each C call, so without this a ``free()`` or
    ``close()`` on one thread could release a handle another thread's call is still using,
    which the C ABI leaves undefined (a crash).

    A release asked for on a thread that is itself inside a call on the handle (a signal
    handler, or a finalizer the garbage collector runs between the bytecodes of that call)
    cannot wait for that call: it would wait for itself. The handle is then marked released at
    once (later calls raise) and the release runs when the last call in flight returns.

    An exception raised asynchronously (KeyboardInterrupt from Ctrl-C, delivered between
    bytecodes) must not lose the release: a use is counted and marked entered with no call in
    between (CPython delivers signals only at calls and backward jumps), a release interrupted
    while it waits leaves itself owed to the last call out, and one owed when the handle is
    collected runs then. What a stream's work names is kept alive apart from this bookkeeping
    (``_STREAM_KEEPS``), so even a release lost to a second interrupt leaks, never frees
    memory the library still writes. No single interrupt may hang a later close either: the
    lock is an ``RLock`` entered at C level (a ``Condition``'s Python ``__exit__`` could be cut
    short holding it), and the use count and the "release running" mark drop inline, with no
    call before them (a test interrupts each call of a close in turn).

    A second release on another thread (two threads closing one object) returns only once the
    first is done: it waits while the first waits for the calls in flight or runs ``fn``, and
    runs an owed release itself when no call is in flight and nobody runs it. It does not wait
    on the thread running ``fn`` (a signal handler there) nor on one inside a call on the
    handle, nor where its caller says this thread holds a lock ``fn`` takes (``join=False``):
    each of those would wait for itself, and returns at once as before."""

    __slots__ = ("_raw", "_users", "_threads", "_deferred", "_waiters", "_runner", "_lock", "_cv", "_gone")

    def __init__(self, raw: int, gone: type[Error], what: str) -> None:
        self._raw: int | None = raw
        self._users = 0
        self._threads: dict[int, int] = {}
        self._deferred: tuple[int, Callable[[int], Any]] | None = None
        # Releases waiting for the calls in flight (one of them runs the owed release: the last
        # call out leaves it to them).
        self._waiters = 0
        # The thread running the release's ``fn`` now (taken out of ``_deferred``), if any.
        self._runner: int | None = None
        # Held with `with self._lock` (an RLock's C-level enter and exit: Ctrl-C is delivered
        # only at Python calls, and a Condition's own `__exit__` is one, which an interrupt
        # there left returning without releasing: every later close on another thread then
        # blocked for good); `_cv` over it only waits and notifies.
        self._lock = threading.RLock()
        self._cv = threading.Condition(self._lock)
        self._gone = (gone, what)

    @contextmanager
    def use(self) -> Iterator[int]:
        me = threading.get_ident()
        entered = False
        try:
            with self._lock:
                if self._raw is None:
                    cls, what = self._gone
                    raise cls(what, 7 if cls is DeviceDestroyedError else 9)
                n = self._threads.get(me, 0)
                raw = self._raw
                # No call between these three stores: the count and the mark that undoes it
                # change together.
                self._users += 1
                self._threads[me] = n + 1
                entered = True
            yield raw
        finally:
            # Inline, not a method: Ctrl-C comes at Python calls, and one at a `_leave(me)`'s
            # entry kept the use counted for good (every later close waited for it).
            deferred = None
            try:
                if entered:
                    with self._lock:
                        self._users -= 1
                        n = self._threads[me] - 1
                        if n:
                            self._threads[me] = n
                        else:
                            del self._threads[me]
                        self._cv.notify_all()  # an interrupt here: the count is down already
                        if self._users == 0 and not self._waiters and self._deferred is not None:
                            # No call between these two stores: `finally` below undoes the
                            # second.
                            deferred, self._deferred = self._deferred, None
                            self._runner = me
                    if deferred is not None:
                        # The release its caller asked for earlier (and returned from): a
                        # failure here has nobody to report to, and must not replace this
                        # call's outcome.
                        try:
                            deferred[1](deferred[0])
                        except Exception:
                            pass
            finally:
                if deferred is not None:
                    # First, with no call before it: a mark left set made every later close on
                    # another thread wait for good.
                    self._runner = None
                    self._wake()

    def _wake(self) -> None:
        """Wakes the releases waiting for the one that ran. An interrupt here loses the
        wake-up only: they wait with a timeout and see the mark cleared."""
        with self._lock:
            self._cv.notify_all()

    def release(self, fn: Callable[[int], Any], join: bool = True) -> None:
        """Ends the handle's use: calls ``fn(raw)`` once the calls in flight returned (at once
        when there are none), and returns once it did. On a thread inside a call on the
        handle, ``fn`` runs when the last call returns (see the class). Interrupted while it
        waits, the release is left to the last call out (and the exception raised).

        Released already: waits until the release under way on another thread is done (or
        runs it, owed, once no call is in flight), and returns; at once on the thread running
        it, on a thread inside a call on the handle, or with ``join=False``."""
        me = threading.get_ident()
        todo = None
        interrupted: BaseException | None = None
        try:
            with self._lock:
                raw, self._raw = self._raw, None
                if raw is not None:
                    self._deferred = (raw, fn)
                elif not join or me == self._runner:
                    return
                if me in self._threads:
                    return
                self._waiters += 1
                try:
                    while self._runner is not None or (self._deferred is not None and self._users):
                        self._cv.wait(0.05)  # timed: a wake-up lost to an interrupt only delays
                except BaseException as e:
                    interrupted = e
                self._waiters -= 1
                if self._deferred is not None and self._users == 0 and self._runner is None:
                    # No call between these two stores: `finally` below undoes the second.
                    todo, self._deferred = self._deferred, None
                    self._runner = me
            if todo is not None:
                todo[1](todo[0])
        finally:
            if todo is not None:
                self._runner = None  # first, with no call before it: see `use`
                self._wake()
            if interrupted is not None:
                raise interrupted

    def __del__(self) -> None:
        # A release owed and never run (its waiter and the last call out both interrupted):
        # run it now, when nothing can use the handle any more.
        d = getattr(self, "_deferred", None)
        if d is not None and not getattr(self, "_users", 0):
            self._deferred = None
            try:
                d[1](d[0])
            except Exception:
                pass

    @property
    def live(self) -> bool:
        return self._raw is not None


def _holds(lock: Any) -> bool:
    """Whether this thread holds ``lock`` (an RLock, or a Condition over one). A close that
    would wait for another thread's close does not where it holds a lock that close takes."""
    owned = getattr(lock, "_is_owned", None)
    return bool(owned()) if owned is not None else False


_NO_HANDLE = _Handle(0, InvalidArgumentError, "not created")
_NO_HANDLE.release(lambda h: None)


class _Owner:
    """An object that owns a C handle or memory: there is one of it. ``copy.copy`` and
    ``copy.deepcopy`` return the object itself (a second Python object over the same handle or
    pointer would release it, or outlive it, on its own), pickling is refused, and ``__init__``
    runs once (called again on a live object it would drop the handle it holds)."""

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: Any) -> Any:
        return self

    def __reduce__(self) -> Any:
        raise TypeError(f"a vkhost.{type(self).__name__} owns a vkhost handle or memory and cannot be pickled")

    def _init_once(self) -> None:
        if "_init_begun" in self.__dict__:
            raise TypeError(f"vkhost.{type(self).__name__}.__init__ called on a live object")
        self.__dict__["_init_begun"] = True


@dataclass(frozen=True)
class DeviceInfo:
    """What a physical device is and offers."""

    index: int
    name: str
    device_type: str
    vendor_id: int
    device_id: int
    driver_name: str
    api_version: tuple[int, int, int]
    host_import_alignment: int | None
    max_memory_allocation_size: int
    timeline_semaphore: bool

    @staticmethod
    def _from_c(c: _ffi.DeviceInfoC) -> DeviceInfo:
        return DeviceInfo(
            index=c.index,
            name=c.name.decode(errors="replace"),
            device_type=_DEVICE_TYPES[c.device_type] if 0 <= c.device_type < len(_DEVICE_TYPES) else "other",
            vendor_id=c.vendor_id,
            device_id=c.device_id,
            driver_name=c.driver_name.decode(errors="replace"),
            api_version=(c.api_major, c.api_minor, c.api_patch),
            host_import_alignment=c.host_import_alignment or None,
            max_memory_allocation_size=c.max_memory_allocation_size,
            timeline_semaphore=bool(c.timeline_semaphore),
        )


@dataclass(frozen=True)
class Stats:
    """Copy-path counters (bytes since process start), live entries and tombstones
    (``vkhost_host_counters``)."""

    direct_bytes: int
    staged_bytes: int
    live_imports: int
    live_pinned: int
    #: Bytes written by CPU stores into mapped device memory (small writes on full-BAR GPUs).
    mapped_bytes: int = 0
    #: Bytes stream copies moved through a stream's scratch buffer (gathered small copies).
    gathered_bytes: int = 0
    #: Entries of destroyed devices still listed (a late unregister/free takes each out once).
    tombstones: int = 0

    @staticmethod
    def _new_c() -> _ffi.HostCountersC:
        c = _ffi.HostCountersC()
        c.struct_size = sizeof(c)
        return c

    @staticmethod
    def _from_c(c: _ffi.HostCountersC) -> Stats:
        return Stats(
            c.direct_bytes,
            c.staged_bytes,
            c.live_imports,
            c.live_pinned,
            c.mapped_bytes,
            c.gathered_bytes,
            c.tombstones,
        )


def devices() -> list[DeviceInfo]:
    """The physical devices, in the loader's order (the index ``Device(index)`` takes)."""
    n = c_size_t()
    _check(lib.vkhost_device_count(byref(n)))
    out = []
    for i in range(n.value):
        c = _ffi.DeviceInfoC()
        _check(lib.vkhost_device_enumerate(i, byref(c)))
        out.append(DeviceInfo._from_c(c))
    return out


def stats() -> Stats:
    """Process-wide counters: bytes copied by each path, live registrations and blocks,
    tombstones."""
    c = Stats._new_c()
    _check(lib.vkhost_counters(byref(c)))
    return Stats._from_c(c)


def validation_errors() -> int:
    """Validation-layer errors reported by every device opened so far (0 without validation)."""
    return int(lib.vkhost_validation_errors())


class Device(_Owner):
    """A Vulkan device opened by vkhost.

    ``Device()`` opens the preferred device (discrete > integrated > virtual > cpu;
    ``VKHOST_DEVICE=<index>`` overrides), ``Device(index)`` a given one. ``validation=True``
    enables the Khronos validation layer (default: ``VKHOST_VALIDATION=1``);
    ``import_host=False`` turns registration off (copies stage).

    ``close()`` destroys the Vulkan device; it raises :class:`BusyError` while a
    :class:`PinnedArray` of this device lives, because destroying the device unmaps pinned
    memory. Leaving a ``with`` block closes the device too, but never raises for that: while
    PinnedArrays of it live (``p = dev.pinned(n)`` inside the block, still referenced after
    it), the close waits until the last of them is freed (which the garbage collector may do
    on any thread), and the device stays usable until then; a call on it racing that close
    raises :class:`DeviceDestroyedError`. A close (or ``with`` block's end) while another
    thread closes the device waits for that close and returns.
    """

    def __init__(
        self,
        index: int | None = None,
        *,
        validation: bool | None = None,
        import_host: bool | None = None,
        copy_queue: Literal["copy", "compute"] | None = None,
    ) -> None:
        self._init_once()
        self._hd = _NO_HANDLE
        self._pinned: weakref.WeakSet[_PinnedBlock] = weakref.WeakSet()
        # Set by leaving a ``with`` block while PinnedArrays lived: the last one's free closes.
        self._close_when_unpinned = False
        # Held across "no PinnedArray live" + destroy, and across a pinned allocation + its
        # entry in _pinned: a block made on another thread in between would be unmapped.
        self._pin_lock = threading.RLock()
        opts = _ffi.OpenOptionsC()
        _check(lib.vkhost_open_options_default(byref(opts)))
        if validation is not None:
            opts.validation = int(validation)
        if import_host is not None:
            opts.import_policy = _ffi.IMPORT_AUTO if import_host else _ffi.IMPORT_NEVER
        if copy_queue is not None:
            opts.copy_queue = _queue_kind(copy_queue)
        h = c_void_p()
        if index is not None:
            index = operator.index(index)  # TypeError for a float or a str, as list indices
        idx = _ffi.VKHOST_DEFAULT_DEVICE if index is None else index
        if index is not None and not 0 <= index < _ffi.VKHOST_DEFAULT_DEVICE:
            raise NoDeviceError(f"no device at index {idx}", 3)
        _check(lib.vkhost_device_open_with(idx, byref(opts), byref(h)))
        assert h.value is not None
        self._hd = _Handle(h.value, DeviceDestroyedError, "the device handle was released")
        c = _ffi.DeviceInfoC()
        with self._use() as d:
            _check(lib.vkhost_device_get_info(d, byref(c)))
        self.info: DeviceInfo = DeviceInfo._from_c(c)

    def __repr__(self) -> str:
        state = " destroyed" if not self._hd.live or self.is_destroyed else ""
        return f"<vkhost.Device {self.info.name!r}{state}>"

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        # Not BusyError out of a ``with`` block (it would also replace an exception raised in
        # the block): with PinnedArrays live, the last one's free closes the device instead.
        # The flag is set before the liveness test, both under the lock that a block's free
        # takes to read it: a block dying in between (on another thread, or by a collection
        # this code triggers) then either sees the flag or is not counted live. The destroy runs
        # under the same hold of the lock, as a block's free runs it: a PinnedArray made on
        # another thread right after the test would make a destroy that took the lock again
        # raise BusyError (and the device never close). The handle is released after the lock
        # is let go (the release waits for other threads' calls, which may wait for the lock).
        with self._pin_lock:
            self._close_when_unpinned = True
            if any(True for _ in self._pinned):
                return
            self._close_when_unpinned = False
            self._destroy_unless_released()
        self._release()

    def _use(self) -> Any:
        """The device handle, held for one C call (see ``_Handle``)."""
        return self._hd.use()

    @property
    def registration_granule(self) -> int | None:
        """Bytes a registration is rounded out to, or None when registration is unavailable."""
        g = c_size_t()
        with self._use() as d:
            st = lib.vkhost_device_registration(d, byref(g))
        return g.value if st == 0 else None

    @property
    def is_destroyed(self) -> bool:
        """Whether ``destroy`` has run."""
        b = c_bool()
        with self._use() as d:
            _check(lib.vkhost_device_is_destroyed(d, byref(b)))
        return bool(b.value)

    @property
    def validation_errors(self) -> int:
        """Validation-layer errors this device reported (counted after ``destroy()`` too;
        after ``close()`` the handle is released and this raises
        :class:`DeviceDestroyedError`: read :func:`validation_errors` for every device)."""
        n = c_uint64()
        with self._use() as d:
            _check(lib.vkhost_device_validation_errors(d, byref(n)))
        return n.value

    def trim_pinned_cache(self) -> int:
        """Frees the freed pinned blocks this device keeps for reuse; returns their bytes, each
        block counted in whole 4 KiB pages (0 when nothing is kept, e.g. on CPU drivers by
        default, or after ``destroy``)."""
        n = c_uint64()
        with self._use() as d:
            _check(lib.vkhost_device_trim_pinned_cache(d, byref(n)))
        return n.value

    def stats(self) -> Stats:
        """This device's counters (bytes copied through it, its live entries and
        tombstones)."""
        c = Stats._new_c()
        with self._use() as d:
            _check(lib.vkhost_device_counters(d, byref(c)))
        return Stats._from_c(c)

    def alloc_buffer(self, nbytes: int) -> DeviceBuffer:
        """A device-local buffer of ``nbytes`` bytes."""
        return DeviceBuffer(self, nbytes)

    def pinned(self, shape: int | tuple[int, ...], dtype: npt.DTypeLike = np.uint8) -> PinnedArray:
        """A :class:`PinnedArray` (a NumPy array over pinned memory) of this device."""
        return PinnedArray(self, shape, dtype)

    def register(self, array: np.ndarray) -> Registration:
        """Registers ``array``'s memory (C-contiguous, writable) so copies to and from it go
        direct. Use as a context manager: the memory is unregistered on exit (after copies that
        use it are done)."""
        return Registration(self, array)

    def find(self, array: np.ndarray) -> tuple[int, int]:
        """The VkBuffer handle and byte offset that cover ``array``'s bytes (C-contiguous, so
        that they are ``array.nbytes`` bytes from its data pointer; a strided or reversed view
        is :class:`InvalidArgumentError`); :class:`NotRegisteredError` if no registration or
        pinned block covers them all. A registration covers its import, the whole pages around
        the registered bytes: bytes beside them in those pages are found too (and copies of
        them go direct)."""
        array = _contiguous(array, "array")
        buf, off = c_uint64(), c_uint64()
        with self._use() as d:
            _check(lib.vkhost_find(d, array.ctypes.data, array.nbytes, byref(buf), byref(off)))
        return buf.value, off.value

    def stream(self, kind: Literal["copy", "compute"] = "copy") -> Stream:
        """A stream on the copy engines (default) or the compute queue."""
        return Stream(self, kind)

    def destroy(self) -> None:
        """Waits idle and destroys the Vulkan device. Handles stay usable for cleanup:
        unregistering and freeing succeed, other calls raise :class:`DeviceDestroyedError`."""
        with self._pin_lock:
            live = len(self._pinned)
            if live and not self.is_destroyed:
                raise BusyError(f"{live} PinnedArray(s) of this device still live: destroying would unmap them", 15)
            with self._use() as d:
                _check(lib.vkhost_device_destroy(d))

    def close(self) -> None:
        """``destroy`` (see there), then release the handle (once calls on other threads that
        use it have returned; later calls raise :class:`DeviceDestroyedError`). Closed
        already: returns, once a close under way on another thread is done."""
        self._destroy_unless_released()
        self._release()

    def _destroy_unless_released(self) -> None:
        # A close on another thread may release the handle between the test and the destroy's
        # use of it: not an error here, the caller's `_release` then waits for that close.
        if not self._hd.live:
            return
        try:
            self.destroy()
        except DeviceDestroyedError:
            if self._hd.live:
                raise

    def _release(self) -> None:
        if self._hd.live and len(getattr(self, "_pinned", ())) and not self.is_destroyed:
            # Only an explicit __del__ gets here (each block holds this object): releasing
            # the last reference would destroy the device and unmap the blocks.
            return
        # Not waiting for another thread's close while this thread holds the pin lock (a
        # finalizer run inside it): calls that close waits for may be waiting for the lock.
        self._hd.release(
            lambda h: lib.vkhost_device_release(h) if lib is not None else None,
            join=not _holds(getattr(self, "_pin_lock", None)),
        )

    def __del__(self) -> None:
        # Children keep the Device object alive, so this runs after them. Releasing the last
        # reference destroys the Vulkan device, which unmaps pinned blocks: none can be left,
        # since each block holds this object.
        try:
            self._release()
        except Exception:
            pass


def _queue_kind(kind: str) -> int:
    if kind == "copy":
        return _ffi.QUEUE_COPY
    if kind == "compute":
        return _ffi.QUEUE_COMPUTE
    raise InvalidArgumentError(f"queue kind must be 'copy' or 'compute', not {kind!r}", 9)


class DeviceBuffer(_Owner):
    """A device-local buffer; ``write``/``read`` copy from and to NumPy arrays synchronously
    (direct where the array is registered or pinned, staged elsewhere)."""

    def __init__(self, device: Device, nbytes: int) -> None:
        self._init_once()
        self.device = device
        self._hb = _NO_HANDLE
        nbytes = _size(nbytes, "nbytes")
        h = c_void_p()
        with device._use() as d:
            _check(lib.vkhost_buffer_alloc(d, nbytes, byref(h)))
        assert h.value is not None
        self._hb = _Handle(h.value, InvalidArgumentError, "the buffer was freed")
        self.nbytes: int = nbytes

    def __repr__(self) -> str:
        return f"<vkhost.DeviceBuffer {self.nbytes} bytes>"

    def _use(self) -> Any:
        """The buffer handle, held for one C call (see ``_Handle``)."""
        return self._hb.use()

    @property
    def handle(self) -> int:
        """The VkBuffer handle, for the caller's own command buffers."""
        v = c_uint64()
        with self._use() as b:
            _check(lib.vkhost_buffer_handle(b, byref(v)))
        return v.value

    def write(self, src: npt.ArrayLike, offset: int = 0) -> CopyPath:
        """Copies ``src``'s bytes into the buffer at byte ``offset``; returns the path taken."""
        # A plain ndarray (a subclass could misreport its size: see `_contiguous`).
        a = src if type(src) is np.ndarray and src.flags.c_contiguous else np.ascontiguousarray(src)
        if type(a) is not np.ndarray:
            a = a.view(np.ndarray)
        _plain(a.dtype, "src")
        offset = _size(offset, "offset")
        path = c_int()
        with self.device._use() as d, self._use() as b:
            _check(lib.vkhost_copy_to_device(d, a.ctypes.data, a.nbytes, b, offset, byref(path)))
        return _PATHS[path.value]

    def read(
        self,
        out: np.ndarray | None = None,
        offset: int = 0,
        *,
        dtype: npt.DTypeLike = np.uint8,
        count: int | None = None,
    ) -> np.ndarray:
        """Copies from the buffer at byte ``offset`` into ``out`` (C-contiguous, writable), or
        into a new array of ``count`` items of ``dtype`` (default: the rest of the buffer).
        Returns the array. The bytes are taken as they are: for a dtype that not every bit
        pattern is a value of (``bool``, ``U`` strings), read only what was written as such."""
        offset = _size(offset, "offset")
        if out is None:
            dt = _item_dtype(dtype, "dtype")
            n = max((self.nbytes - offset) // dt.itemsize, 0) if count is None else _size(count, "count")
            out = np.empty(n, dtype=dt)
        target = _contiguous(out, "out", writable=True)
        path = c_int()
        with self.device._use() as d, self._use() as b:
            _check(lib.vkhost_copy_to_host(d, b, offset, target.ctypes.data, target.nbytes, byref(path)))
        return out

    def free(self) -> None:
        """Frees the buffer now (stream work that uses it keeps its memory until done). Waits
        for this buffer's calls in flight on other threads (and for a free under way on
        another thread); later calls raise :class:`InvalidArgumentError`."""
        self._hb.release(lambda h: lib.vkhost_buffer_free(h) if lib is not None else None)

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:
            pass


# The address each live Registration holds, per device: a Registration interrupted around its
# C call undoes the registration at its address only if no other Registration owns it.
# Reentrant: a garbage collection that runs while the lock is held (at an allocation) may
# finalize another Registration on this thread, whose close() takes the lock again.
_owners_lock = threading.RLock()
_owners: dict[tuple[int, int], weakref.ref[Registration]] = {}


class Registration(_Owner):
    """A registered NumPy array (from :meth:`Device.register`). Holds the array; unregisters on
    ``close()``, on leaving a ``with`` block, or when collected."""

    # Class defaults: close() reads these with no call (an attribute read, never `getattr`, a
    # call where Ctrl-C is delivered), also on an object whose __init__ raised early.
    _ptr: int | None = None
    _maybe: int | None = None
    # The thread whose close() is unregistering now: a close on another thread waits for it.
    _closer: int | None = None

    def __init__(self, device: Device, array: np.ndarray) -> None:
        self._init_once()
        view = _contiguous(array, "array", writable=True)
        if view.nbytes == 0:
            raise InvalidArgumentError("cannot register an empty array", 9)
        self.device = device
        self.array = array
        # A plain lock (C-level enter and exit: no point for Ctrl-C to leave it held); a close
        # on another thread polls `_closer` rather than waiting on a Condition, whose Python
        # `__exit__` an interrupt could cut short with the lock still held.
        self._lock = threading.Lock()
        addr = view.ctypes.data
        self._key = (id(device), addr)
        # An exception from a signal handler (Ctrl-C) can land right after the C call returned,
        # and a registration nobody records is never undone (its import would outlive the
        # array). So `_maybe` is set before the call and cleared only once the outcome is
        # recorded: close() on a Registration left `_maybe` undoes the registration at `addr`
        # unless another live Registration owns that address (`_owners`).
        self._maybe: int | None = addr
        with device._use() as d:
            st = lib.vkhost_register(d, addr, view.nbytes)
            err = _error(st)  # the message now: the block's end may call vkhost (a deferred release)
        if err is not None:
            self._maybe = None
            raise err
        ref = weakref.ref(self)
        with _owners_lock:
            _owners[self._key] = ref
        self._ptr, self._maybe = addr, None

    def __enter__(self) -> np.ndarray:
        return self.array

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Unregisters; returns once no device work can touch the array's bytes (also when
        another thread's close is unregistering it: this one waits for that)."""
        me = threading.get_ident()
        # First, so that the unregistering below takes no lock but the device handle's.
        with _owners_lock:
            ref = _owners.get(getattr(self, "_key", None))  # type: ignore[arg-type]
            owner = ref() if ref is not None else None
            if ref is not None and owner in (self, None):
                del _owners[self._key]
        closing = False
        try:
            with self._lock:
                # No call in this block (an interrupt here would lose `p`, and a signal
                # handler's close on this thread would block on the lock). Another close
                # running (on another thread, or this one's below a signal handler or
                # finalizer) owns the unregister, `_maybe` included.
                busy = self._closer is not None
                maybe = self._maybe
                p, self._ptr = (None, self._ptr) if busy else (self._ptr, None)
                done = busy or (p is None and maybe is None)
                if not done:
                    # No call between these stores: `finally` below undoes the `_closer` one.
                    # The address stays in `_maybe` until the unregister's outcome is
                    # recorded: an interrupt before that (Ctrl-C at `_use()`, say) lost the
                    # unregister, and the import outlived the close. A later close retries it
                    # as an interrupted register's, unless another Registration owns the
                    # address by then.
                    self._maybe = maybe if p is None else p
                    self._closer, closing = me, True
            if done:
                # Closed, or closing on another thread: wait for that close, unless it is this
                # thread's (a signal handler inside it), or this thread holds the device
                # handle's lock, which that close takes (a finalizer run there).
                if self._closer not in (None, me) and not _holds(self.device._hd._lock):
                    while self._closer is not None:
                        time.sleep(0.002)
                    # That close was interrupted before its unregister's outcome was recorded:
                    # this one retries it, so that it too returns with the bytes released.
                    if self._maybe is not None:
                        self.close()
                return
            # Interrupted around the C call (a register's, or an earlier close's unregister):
            # ours unless another Registration owns the address, read again now. (A retry of
            # an unregister that had succeeded answers NOT_REGISTERED, tolerated below; one
            # that races a new Registration of the address between this read and the call
            # removes that one's import: its copies then go staged and its close raises
            # NotRegisteredError, never wrong bytes. Losing the unregister instead left an
            # import of pages the array may give back.)
            if p is None and maybe is not None:
                with _owners_lock:
                    ref = _owners.get(self._key)
                    owner = ref() if ref is not None else None
                if owner in (self, None):
                    p = maybe
            # After Device.close() the device is gone: its registrations are tombstones that
            # vkhost drops once no handle names the device and another device lists an entry.
            # Nothing to undo here (raising would turn every `with dev.register(a)` around a
            # close into an error).
            if p is not None and self.device._hd.live:
                try:
                    with self.device._use() as d:
                        st = lib.vkhost_unregister(d, p)
                        err = _error(st)  # the message now, as in __init__
                except DeviceDestroyedError:
                    # Another thread's Device.close() released the handle since the test
                    # above: as after that close, nothing to undo.
                    if self.device._hd.live:
                        raise
                    self._maybe = None
                    return
                self._maybe = None
                if err is not None and not (maybe is not None and st == NotRegisteredError.status):
                    raise err
            else:
                self._maybe = None
        finally:
            if closing:
                self._closer = None  # no call before it: see `_Handle.use`

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class _PinnedBlock(_Owner):
    """One pinned allocation; the base of every PinnedArray view over it. Freed when the last
    view goes (NumPy keeps the base alive)."""

    def __init__(self, device: Device, nbytes: int) -> None:
        self._init_once()
        self.device = device
        self.ptr: int | None = None
        nbytes = _size(nbytes, "nbytes")
        p = c_void_p()
        # Armed before the call, on the out-pointer the call fills: an exception from a signal
        # handler right after the C call returned must not leak the block.
        weakref.finalize(self, _PinnedBlock._free, device, p).atexit = False
        with device._pin_lock:
            with device._use() as d:
                _check(lib.vkhost_alloc_pinned(d, nbytes, byref(p)))
            self.ptr = p.value
            device._pinned.add(self)
        self.nbytes = nbytes
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3}

    # A finalizer rather than __del__: an explicit ``block.__del__()`` (pure Python) would free
    # the memory under the arrays that view it. Not run at exit (arrays may still be read by
    # other exit-time code; the process unmaps everything anyway).
    @staticmethod
    def _free(device: Device, cell: c_void_p) -> None:
        p = cell.value
        if p is not None and lib is not None:
            try:
                with device._use() as d:
                    lib.vkhost_free_pinned(d, p)
            except Exception:
                pass
        # The device's ``with`` block ended while this block lived: close it once none is
        # left (this block is dead, so iterating the WeakSet no longer yields it). The flag is
        # read and the device destroyed under the lock (no block can be allocated in between);
        # the handle is released after it is let go: the release waits for other threads'
        # calls on the handle, and one of them may be waiting for this lock (a block freed by
        # a collection inside its call).
        if lib is None:
            return
        destroyed = False
        try:
            with device._pin_lock:
                if getattr(device, "_close_when_unpinned", False) and not any(True for _ in device._pinned):
                    device._close_when_unpinned = False
                    device.destroy()
                    destroyed = True
        except Exception:
            pass
        if destroyed:
            try:
                device._release()
            except Exception:
                pass


class PinnedArray(np.ndarray):
    """A NumPy array over pinned host memory (driver memory the device reads and writes
    directly). ``PinnedArray(device, shape, dtype)`` or ``device.pinned(shape, dtype)``.

    Slices and views share the pinned memory and keep it alive; the block is freed when the
    last of them goes. On GPUs a driver block is kept instead, up to 64 MiB in all, for the
    next block of exactly its size, which gets it back with its old contents (``VKHOST_PINNED_CACHE=N|off`` sets the bytes kept;
    ``Device.trim_pinned_cache()`` frees them). Results of arithmetic are ordinary arrays. ``copy()`` is not pinned.
    """

    def __new__(cls, device: Device, shape: int | tuple[int, ...], dtype: npt.DTypeLike = np.uint8) -> PinnedArray:
        dt = _item_dtype(dtype, "dtype")
        # An integer of any kind (a NumPy integer, say `np.prod(dims)`) is a length, as NumPy
        # takes it; anything else a sequence of them.
        try:
            shp: tuple[Any, ...] = (operator.index(shape),)
        except TypeError:
            shp = tuple(shape)
        dims = [operator.index(n) for n in shp]
        if any(n < 0 for n in dims):
            raise InvalidArgumentError(f"negative dimension in shape {shp}", 9)
        nbytes = _size(math.prod(dims) * dt.itemsize, "nbytes")
        block = _PinnedBlock(device, max(nbytes, 1))
        raw = np.asarray(block)
        return raw[:nbytes].view(dt).reshape(shp).view(cls)

    def __array_wrap__(self, obj: Any, context: Any = None, return_scalar: bool = False) -> Any:
        # Ufunc results are new memory, not pinned: hand them back as plain arrays.
        if return_scalar:
            return obj[()]
        return np.asarray(obj).view(np.ndarray)

    @property
    def block(self) -> _PinnedBlock | None:
        """The pinned block under this array (None for a non-pinned copy)."""
        b: Any = self
        while isinstance(b, np.ndarray):
            b = b.base
        return b if isinstance(b, _PinnedBlock) else None

    @property
    def vkhost_device(self) -> Device | None:
        """The device the memory is pinned for (not ``device``: NumPy's array-API attribute)."""
        b = self.block
        return b.device if b is not None else None


class Event(_Owner):
    """A point in a stream's work (:meth:`Stream.record`)."""

    _h: _Handle
    device: Device

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("vkhost.Event objects come from Stream.record()")

    @classmethod
    def _adopt(cls, handle: int, stream: Stream) -> Event:
        """The event for a handle ``vkhost_stream_record`` returned (owned from now on)."""
        ev = object.__new__(cls)
        ev._h = _Handle(handle, InvalidArgumentError, "the event was released")
        ev.device = stream.device
        return ev

    def _use(self) -> Any:
        """The event handle, held for one C call (see ``_Handle``)."""
        return self._h.use()

    def wait(self) -> None:
        """Blocks until the work before the event is done. In a child of ``os.fork()``, raises
        ``DeviceDestroyedError`` unless the parent saw the work done before the fork (nothing
        of the parent's runs in the child)."""
        with self._use() as e:
            _check(lib.vkhost_event_wait(e))

    @property
    def done(self) -> bool:
        """Whether the work before the event is done (never blocks). In a child of
        ``os.fork()``, raises ``DeviceDestroyedError`` as ``wait`` does."""
        b = c_bool()
        with self._use() as e:
            _check(lib.vkhost_event_query(e, byref(b)))
        return bool(b.value)

    def __del__(self) -> None:
        h = getattr(self, "_h", None)
        if h is not None:
            try:
                h.release(lambda e: lib.vkhost_event_release(e) if lib is not None else None)
            except Exception:
                pass


# The arrays each live C stream's work names, by stream handle: kept here, not only on the
# Python object, and let go only once ``vkhost_stream_destroy`` returned, so that a stream whose
# destroy never ran (its release lost to an interrupt) leaks them rather than letting the
# library write into freed memory when the device's teardown runs its copy-outs.
_STREAM_KEEPS: dict[int, list[Any]] = {}

# Every live Stream, for the exit hook below.
_LIVE_STREAMS: weakref.WeakSet[Stream] = weakref.WeakSet()


def _quiesce_at_exit() -> None:
    """Waits for every live stream's work when the interpreter exits, before it tears down
    modules. Objects that outlive this module's globals (held from ``sys``, say) are finalized
    after those globals are cleared: their ``close()`` then fails (swallowed), so a stream is
    never destroyed and a registration never undone, and the arrays they hold are freed with
    them. Without this wait, a copy still running on the device then wrote into freed memory
    (SIGSEGV at exit, found by a review). Work enqueued after this hook (a daemon thread, or an
    ``atexit`` hook registered before ``vkhost`` was imported, which runs later) is not waited for."""
    for s in list(_LIVE_STREAMS):
        try:
            s.synchronize()
        except Exception:
            pass


atexit.register(_quiesce_at_exit)


class Stream(_Owner):
    """Ordered async work on one queue. Copies return at once where the array is registered or
    pinned; the stream keeps a reference to every array it was given until ``synchronize``
    (a destination's bytes are in place only then, or after an event recorded later is waited).
    The device reads a registered or pinned source when the copy runs, so do not change its
    bytes until then (``synchronize``, or an event recorded after the upload): a change before
    may or may not reach the device. A pageable array's bytes are read before the call returns.
    When the interpreter exits, every live stream's work is waited for before modules are torn
    down."""

    def __init__(self, device: Device, kind: Literal["copy", "compute"] = "copy") -> None:
        self._init_once()
        self.device = device
        self._hs = _NO_HANDLE
        self._keep: list[Any] = []
        # How many entries were ever let go from the front of _keep: an entry's position in the
        # stream's history is _gone + its index, so two synchronize calls at once each let go
        # of what came before their own wait, never twice as many.
        self._gone = 0
        # Held from "keep the array" to "the C enqueue returned": synchronize takes its mark
        # under it, so the mark never covers an array whose copy is enqueued after its wait.
        # Reentrant: a finalizer run by the GC inside an enqueue may use this stream
        # (`_in_enq` then tells synchronize that an array is kept but not yet enqueued).
        self._enq = threading.RLock()
        self._in_enq = 0
        h = c_void_p()
        with device._use() as d:
            _check(lib.vkhost_stream_create(d, _queue_kind(kind), byref(h)))
        assert h.value is not None
        _STREAM_KEEPS[h.value] = self._keep
        self._hs = _Handle(h.value, InvalidArgumentError, "the stream was closed")
        _LIVE_STREAMS.add(self)

    def _use(self) -> Any:
        """The stream handle, held for one C call (see ``_Handle``)."""
        return self._hs.use()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def upload(self, src: np.ndarray, dst: DeviceBuffer, offset: int = 0) -> None:
        """Enqueues a copy of ``src``'s bytes into ``dst`` at byte ``offset``. A registered or
        pinned ``src`` is read when the copy runs: leave its bytes unchanged until
        ``synchronize`` (or an event recorded after this) says it is done; a pageable one is
        read before this returns."""
        src = _contiguous(src, "src")
        _require_buffer(dst, "dst")
        offset = _size(offset, "offset")
        # Kept before the enqueue: a `synchronize` on another thread meanwhile must not let go
        # of an array whose copy it did not wait for.
        with self._enq, self._enqueuing():
            self._keep.append(src)
            with self._use() as s, dst._use() as b:
                _check(lib.vkhost_stream_copy_to_device_async(s, src.ctypes.data, src.nbytes, b, offset))

    def download(self, src: DeviceBuffer, dst: np.ndarray, offset: int = 0) -> None:
        """Enqueues a copy from ``src`` at byte ``offset`` into ``dst`` (C-contiguous, writable);
        the bytes are there after ``synchronize`` (or an event recorded after this call)."""
        dst = _contiguous(dst, "dst", writable=True)
        _require_buffer(src, "src")
        offset = _size(offset, "offset")
        with self._enq, self._enqueuing():
            self._keep.append(dst)
            with self._use() as s, src._use() as b:
                _check(lib.vkhost_stream_copy_to_host_async(s, b, offset, dst.ctypes.data, dst.nbytes))

    def copy(self, src: DeviceBuffer, dst: DeviceBuffer, nbytes: int, src_offset: int = 0, dst_offset: int = 0) -> None:
        """Enqueues a device-to-device copy."""
        _require_buffer(src, "src")
        _require_buffer(dst, "dst")
        nbytes, src_offset, dst_offset = _size(nbytes, "nbytes"), _size(src_offset, "src_offset"), _size(dst_offset, "dst_offset")
        with self._enq, self._enqueuing():
            self._keep += [src, dst]
            with self._use() as s, src._use() as a, dst._use() as b:
                _check(lib.vkhost_stream_copy_buffer_async(s, a, src_offset, b, dst_offset, nbytes))

    def fill(self, dst: DeviceBuffer, value: int, offset: int = 0, nbytes: int | None = None) -> None:
        """Enqueues a fill with the repeated 32-bit ``value`` (offset and size multiples of 4).
        ``value`` is a uint32 or an int32 (a negative value fills with its two's complement);
        anything outside [-2^31, 2^32) raises :class:`OutOfRangeError` rather than being cut."""
        _require_buffer(dst, "dst")
        value = _u32(value, "value")
        offset = _size(offset, "offset")
        n = _size(max(dst.nbytes - offset, 0) if nbytes is None else nbytes, "nbytes")
        with self._enq, self._enqueuing():
            self._keep.append(dst)
            with self._use() as s, dst._use() as b:
                _check(lib.vkhost_stream_fill_async(s, b, offset, n, value))

    @contextmanager
    def _enqueuing(self) -> Iterator[None]:
        # Held under `_enq`: only this thread can see it non-zero.
        self._in_enq += 1
        try:
            yield
        finally:
            self._in_enq -= 1

    def flush(self) -> None:
        """Submits recorded work without waiting."""
        with self._use() as s:
            _check(lib.vkhost_stream_flush(s))

    def record(self) -> Event:
        """An event at the current end of the stream."""
        h = c_void_p()
        with self._use() as s:
            _check(lib.vkhost_stream_record(s, byref(h)))
        assert h.value is not None
        return Event._adopt(h.value, self)

    def wait_event(self, event: Event) -> None:
        """Makes later work on this stream wait (on the device) for ``event``."""
        if not isinstance(event, Event):
            raise TypeError(f"event must be a vkhost.Event, not {type(event).__name__}")
        with self._use() as s, event._use() as e:
            _check(lib.vkhost_stream_wait_event(s, e))

    def synchronize(self) -> None:
        """Waits for all enqueued work; destinations are filled."""
        # Only what was enqueued before the wait began may go: another thread's copy enqueued
        # meanwhile keeps its array.
        with self._enq:
            # Inside this thread's own enqueue (a finalizer the GC ran there called this), the
            # array being enqueued is kept but not yet enqueued: let nothing go this time.
            mark = self._gone + (0 if self._in_enq else len(self._keep))
        with self._use() as s:
            _check(lib.vkhost_stream_synchronize(s))
        with self._enq:
            n = mark - self._gone
            if n > 0:
                del self._keep[:n]
                self._gone += n

    def close(self) -> None:
        """Waits for the stream's work (and for its calls in flight on other threads) and
        destroys it; later calls raise :class:`InvalidArgumentError`. Closed already: returns,
        once a close under way on another thread is done."""
        def destroy(h: int) -> None:
            if lib is None:
                return
            _check(lib.vkhost_stream_destroy(h))
            # Only now: the arrays of the stream's work stay alive until it is done.
            _STREAM_KEEPS.pop(h, None)
            with self._enq:
                self._gone += len(self._keep)
                self._keep.clear()

        # Not waiting for another thread's close while this thread holds `_enq` (a finalizer
        # run inside an enqueue): that close's destroy takes it.
        self._hs.release(destroy, join=not _holds(getattr(self, "_enq", None)))

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _time_copies(dev: Device, buf: DeviceBuffer, arr: np.ndarray, h2d: bool, iters: int) -> tuple[float, CopyPath]:
    """Median GB/s of ``iters`` synchronous copies of ``arr`` (after a warm-up), and the path."""
    nbytes = arr.nbytes
    path = c_int()

    def once() -> None:
        with dev._use() as d, buf._use() as b:
            if h2d:
                _check(lib.vkhost_copy_to_device(d, arr.ctypes.data, nbytes, b, 0, byref(path)))
            else:
                _check(lib.vkhost_copy_to_host(d, b, 0, arr.ctypes.data, nbytes, byref(path)))

    once()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    return nbytes / sorted(times)[len(times) // 2] / 1e9, _PATHS[path.value]


def bench(nbytes: int = 16 << 20, iters: int = 5, device: Device | None = None) -> dict[str, Any]:
    """A small bandwidth measurement: synchronous copies of ``nbytes`` from and to pinned,
    registered and pageable (plain NumPy) memory, median of ``iters`` each after a warm-up.

    Returns ``{"device": name, "nbytes": n, "iters": k, "gbps": {path: {"h2d": x, "d2h": y}},
    "paths": {path: {"h2d": "direct"|"staged"|"mixed", "d2h": ...}}}`` with GB/s = 1e9 bytes/s.
    Registered is left out where the device cannot register host memory.
    """
    if operator.index(iters) < 1:
        raise InvalidArgumentError(f"bench of {iters} iterations: at least one is needed for a median", 9)
    own = device is None
    dev = Device() if device is None else device
    gbps: dict[str, dict[str, float]] = {}
    paths: dict[str, dict[str, str]] = {}

    def measure(name: str, arr: np.ndarray) -> None:
        gbps[name], paths[name] = {}, {}
        for direction in ("h2d", "d2h"):
            gbps[name][direction], paths[name][direction] = _time_copies(dev, buf, arr, direction == "h2d", iters)

    try:
        buf = dev.alloc_buffer(nbytes)
        try:
            pinned = dev.pinned(nbytes)
            pinned[:] = 1
            measure("pinned", pinned)
            del pinned  # frees the block before a possible close()
            if dev.registration_granule:
                with dev.register(np.ones(nbytes, dtype=np.uint8)) as registered:
                    measure("registered", registered)
            measure("pageable", np.ones(nbytes, dtype=np.uint8))
        finally:
            buf.free()
        return {"device": dev.info.name, "nbytes": nbytes, "iters": iters, "gbps": gbps, "paths": paths}
    finally:
        if own:
            # As leaving a ``with`` block: never BusyError, which would replace an error raised
            # above while its traceback still holds the pinned array (its frames do); the
            # device then closes once that array is freed.
            dev.__exit__(None, None, None)
