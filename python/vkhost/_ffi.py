"""ctypes declarations of include/vkhost.h, and finding libvkhost_capi.so.

The library is looked up in this order:
1. ``$VKHOST_LIB`` (a path to the .so);
2. next to this file (``pip install ./python`` copies it there at build time);
3. ``release/`` of the source checkout's target directory (``$CARGO_TARGET_DIR``, relative to
   the checkout, else ``target/``; the checkout this package sits in: ``python/vkhost`` ->
   ``../..``), for running from a clone without installing.
"""

from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, c_bool, c_char, c_char_p, c_int, c_int32, c_size_t, c_uint32, c_uint64, c_void_p
from pathlib import Path

LIB_NAME = "libvkhost_capi.so"


def _candidates() -> list[Path]:
    out = []
    env = os.environ.get("VKHOST_LIB")
    if env:
        out.append(Path(env))
    here = Path(__file__).resolve().parent
    out.append(here / LIB_NAME)
    checkout = here.parent.parent
    out.append(checkout / (os.environ.get("CARGO_TARGET_DIR") or "target") / "release" / LIB_NAME)
    return out


def find_library() -> Path:
    """The path of libvkhost_capi.so that the package loads (see the module docs)."""
    tried = _candidates()
    for p in tried:
        if p.is_file():
            return p
    raise OSError(
        f"{LIB_NAME} not found (tried {', '.join(str(p) for p in tried)}). Build it with "
        "`cargo build --release -p vkhost-capi` and set VKHOST_LIB to its path, or reinstall with "
        "`pip install ./python` from a checkout where it is built."
    )


class DeviceInfoC(ctypes.Structure):
    _fields_ = [
        ("index", c_size_t),
        ("name", c_char * 256),
        ("driver_name", c_char * 256),
        ("device_type", c_int),
        ("vendor_id", c_uint32),
        ("device_id", c_uint32),
        ("api_major", c_uint32),
        ("api_minor", c_uint32),
        ("api_patch", c_uint32),
        ("host_import_alignment", c_size_t),
        ("max_memory_allocation_size", c_uint64),
        ("timeline_semaphore", c_bool),
    ]


class OpenOptionsC(ctypes.Structure):
    _fields_ = [
        ("validation", c_uint32),
        ("import_policy", c_uint32),
        ("copy_queue", c_uint32),
        ("staging_chunk", c_size_t),
        ("staging_slots", c_size_t),
        ("max_import_piece", c_size_t),
    ]


class HostStatsC(ctypes.Structure):
    _fields_ = [
        ("direct_bytes", c_uint64),
        ("staged_bytes", c_uint64),
        ("live_imports", c_size_t),
        ("live_pinned", c_size_t),
    ]


class HostCountersC(ctypes.Structure):
    """``vkhost_host_counters``: set ``struct_size`` to ``ctypes.sizeof`` before a call."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("direct_bytes", c_uint64),
        ("staged_bytes", c_uint64),
        ("mapped_bytes", c_uint64),
        ("gathered_bytes", c_uint64),
        ("live_imports", c_size_t),
        ("live_pinned", c_size_t),
        ("tombstones", c_size_t),
    ]


VKHOST_DEFAULT_DEVICE = ctypes.c_size_t(-1).value
IMPORT_AUTO, IMPORT_NEVER = 0, 1
QUEUE_COPY, QUEUE_COMPUTE = 0, 1

_P = c_void_p  # opaque handles
_S = c_int  # vkhost_status

# name: (argtypes, restype): every function of the header the package calls (not
# vkhost_device_from_vulkan and vkhost_device_raw, which take Vulkan handles).
_SIGNATURES: dict[str, tuple[list[object], object]] = {
    "vkhost_last_error_message": ([], c_char_p),
    "vkhost_status_name": ([c_int32], c_char_p),
    "vkhost_device_count": ([POINTER(c_size_t)], _S),
    "vkhost_device_enumerate": ([c_size_t, POINTER(DeviceInfoC)], _S),
    "vkhost_open_options_default": ([POINTER(OpenOptionsC)], _S),
    "vkhost_device_open": ([c_size_t, POINTER(_P)], _S),
    "vkhost_device_open_default": ([POINTER(_P)], _S),
    "vkhost_device_open_with": ([c_size_t, POINTER(OpenOptionsC), POINTER(_P)], _S),
    "vkhost_device_get_info": ([_P, POINTER(DeviceInfoC)], _S),
    "vkhost_device_registration": ([_P, POINTER(c_size_t)], _S),
    "vkhost_device_destroy": ([_P], _S),
    "vkhost_device_release": ([_P], _S),
    "vkhost_device_is_destroyed": ([_P, POINTER(c_bool)], _S),
    "vkhost_device_validation_errors": ([_P, POINTER(c_uint64)], _S),
    "vkhost_device_trim_pinned_cache": ([_P, POINTER(c_uint64)], _S),
    "vkhost_validation_errors": ([], c_uint64),
    "vkhost_alloc_pinned": ([_P, c_size_t, POINTER(c_void_p)], _S),
    "vkhost_free_pinned": ([_P, c_void_p], _S),
    "vkhost_register": ([_P, c_void_p, c_size_t], _S),
    "vkhost_unregister": ([_P, c_void_p], _S),
    "vkhost_find": ([_P, c_void_p, c_size_t, POINTER(c_uint64), POINTER(c_uint64)], _S),
    "vkhost_copy_to_device": ([_P, c_void_p, c_size_t, _P, c_size_t, POINTER(c_int)], _S),
    "vkhost_copy_to_host": ([_P, _P, c_size_t, c_void_p, c_size_t, POINTER(c_int)], _S),
    "vkhost_stats": ([POINTER(HostStatsC)], _S),
    "vkhost_device_stats": ([_P, POINTER(HostStatsC)], _S),
    "vkhost_counters": ([POINTER(HostCountersC)], _S),
    "vkhost_device_counters": ([_P, POINTER(HostCountersC)], _S),
    "vkhost_buffer_alloc": ([_P, c_size_t, POINTER(_P)], _S),
    "vkhost_buffer_free": ([_P], _S),
    "vkhost_buffer_len": ([_P, POINTER(c_size_t)], _S),
    "vkhost_buffer_handle": ([_P, POINTER(c_uint64)], _S),
    "vkhost_stream_create": ([_P, c_uint32, POINTER(_P)], _S),
    "vkhost_stream_destroy": ([_P], _S),
    "vkhost_stream_copy_to_device_async": ([_P, c_void_p, c_size_t, _P, c_size_t], _S),
    "vkhost_stream_copy_to_host_async": ([_P, _P, c_size_t, c_void_p, c_size_t], _S),
    "vkhost_stream_copy_buffer_async": ([_P, _P, c_size_t, _P, c_size_t, c_size_t], _S),
    "vkhost_stream_fill_async": ([_P, _P, c_size_t, c_size_t, c_uint32], _S),
    "vkhost_stream_flush": ([_P], _S),
    "vkhost_stream_record": ([_P, POINTER(_P)], _S),
    "vkhost_stream_wait_event": ([_P, _P], _S),
    "vkhost_stream_synchronize": ([_P], _S),
    "vkhost_event_wait": ([_P], _S),
    "vkhost_event_query": ([_P, POINTER(c_bool)], _S),
    "vkhost_event_release": ([_P], _S),
}


def load() -> ctypes.CDLL:
    """Loads the library and declares every function."""
    lib = ctypes.CDLL(str(find_library()))
    for name, (args, res) in _SIGNATURES.items():
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = res
    return lib


lib = load()
