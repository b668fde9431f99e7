"""Tests of the Python package on whatever device vkhost picks (lavapipe in CI), with the
Khronos validation layer on and zero validation errors asserted."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import numpy as np
import pytest

import vkhost

MiB = 1 << 20


@pytest.fixture(scope="module")
def dev() -> Iterator[vkhost.Device]:
    d = vkhost.Device(validation=True)
    yield d
    gc.collect()
    d.destroy()
    errors = d.validation_errors  # teardown's errors count too
    d.close()
    assert errors == 0


@pytest.fixture(scope="module", autouse=True)
def no_validation_errors() -> Iterator[None]:
    yield
    gc.collect()
    assert vkhost.validation_errors() == 0


def test_devices_lists_at_least_one() -> None:
    infos = vkhost.devices()
    assert infos and infos[0].index == 0 and infos[0].name
    assert infos[0].device_type in ("discrete", "integrated", "virtual", "cpu", "other")


def test_acceptance_register_256mib_copies_direct(dev: vkhost.Device) -> None:
    """A 256 MiB NumPy array, registered, to a device buffer and back: direct_bytes grows by
    512 MiB, staged_bytes not at all."""
    n = 256 * MiB
    src = np.arange(n // 4, dtype=np.uint32)
    back = np.zeros_like(src)
    buf = dev.alloc_buffer(n)
    before = vkhost.stats()
    with dev.register(src), dev.register(back):
        assert buf.write(src) == "direct"
        buf.read(back)
    after = vkhost.stats()
    assert after.direct_bytes - before.direct_bytes == 512 * MiB
    assert after.staged_bytes == before.staged_bytes
    assert np.array_equal(src, back)
    buf.free()


def test_register_is_a_context_manager(dev: vkhost.Device) -> None:
    a = np.arange(10000, dtype=np.float64)
    buf = dev.alloc_buffer(a.nbytes)
    with dev.register(a) as arr:
        assert arr is a
        vkbuf, off = dev.find(a)
        assert vkbuf != 0 and off < dev.registration_granule
        assert dev.stats().live_imports == 1
        assert buf.write(a) == "direct"
    with pytest.raises(vkhost.NotRegisteredError):
        dev.find(a)
    assert buf.write(a) == "staged"
    assert np.array_equal(buf.read(dtype=np.float64), a)


def test_pinned_array_is_numpy_over_pinned_memory(dev: vkhost.Device) -> None:
    live = dev.stats().live_pinned
    p = dev.pinned((4, 1024), np.float32)
    assert isinstance(p, vkhost.PinnedArray) and isinstance(p, np.ndarray)
    assert p.shape == (4, 1024) and p.dtype == np.float32 and p.vkhost_device is dev
    assert dev.stats().live_pinned == live + 1
    p[:] = np.arange(4096, dtype=np.float32).reshape(4, 1024)
    buf = dev.alloc_buffer(p.nbytes)
    assert buf.write(p) == "direct"
    q = vkhost.PinnedArray(dev, 4096, np.float32)
    buf.read(q)
    assert np.array_equal(q, p.ravel())
    row = p[1]  # a view keeps the block alive
    assert row.block is p.block
    s = p * 2  # arithmetic gives ordinary arrays
    assert type(s) is np.ndarray
    del p, q, s
    gc.collect()
    assert dev.stats().live_pinned == live + 1  # `row` still holds its block
    del row
    gc.collect()
    assert dev.stats().live_pinned == live


def test_freed_pinned_blocks_are_kept_and_trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    # The cache of freed pinned blocks is off on CPU drivers by default: turned on here.
    monkeypatch.setenv("VKHOST_PINNED_CACHE", str(MiB))
    with vkhost.Device(validation=True) as d:
        p = d.pinned(4096, np.uint8)
        p[:] = 7
        at = p.ctypes.data
        del p
        gc.collect()
        again = d.pinned(4096, np.uint8)
        assert again.ctypes.data == at  # the kept block, with its old contents
        assert (again == 7).all()
        del again
        gc.collect()
        assert d.trim_pinned_cache() == 4096
        assert d.trim_pinned_cache() == 0
        d.destroy()
        assert d.trim_pinned_cache() == 0
        assert d.validation_errors == 0


def test_device_buffer_write_read(dev: vkhost.Device) -> None:
    buf = dev.alloc_buffer(MiB)
    assert buf.nbytes == MiB and buf.handle != 0
    data = np.random.default_rng(1).integers(0, 255, MiB, dtype=np.uint8)
    assert buf.write(data) == "staged"
    out = np.empty(MiB // 2, dtype=np.uint8)
    assert buf.read(out, offset=MiB // 2) is out
    assert np.array_equal(out, data[MiB // 2 :])
    assert np.array_equal(buf.read(count=16, offset=16), data[16:32])
    buf.write([1, 2, 3])  # any array-like
    with pytest.raises(vkhost.OutOfRangeError) as e:
        buf.write(data, offset=1)
    assert "out of range" in str(e.value) and e.value.status == 10
    with pytest.raises(vkhost.InvalidArgumentError):
        buf.read(np.empty((4, 4))[:, 0])  # not contiguous


def test_streams_and_events(dev: vkhost.Device) -> None:
    n = MiB
    src = dev.pinned(n // 4, np.uint32)
    src[:] = np.arange(n // 4, dtype=np.uint32)
    a, b = dev.alloc_buffer(n), dev.alloc_buffer(n)
    dst_pageable = np.zeros(n // 4, dtype=np.uint32)
    dst_registered = np.zeros(n // 4, dtype=np.uint32)
    with dev.stream() as up, dev.stream("compute") as down, dev.register(dst_registered):
        up.upload(src, a)
        up.fill(b, 0x01010101)
        ev = up.record()
        down.wait_event(ev)
        down.copy(a, b, n // 2)
        down.download(b, dst_pageable)
        down.download(a, dst_registered)
        done = down.record()
        done.wait()
        assert done.done and ev.done
        down.synchronize()
        up.flush()
    assert np.array_equal(dst_registered, src)
    assert np.array_equal(dst_pageable[: n // 8], src[: n // 8])
    assert (dst_pageable[n // 8 :] == 0x01010101).all()
    with pytest.raises(vkhost.InvalidArgumentError):
        dev.stream("sideways")
    del src
    gc.collect()


def test_one_error_class_per_status(dev: vkhost.Device) -> None:
    with pytest.raises(vkhost.NoDeviceError):
        vkhost.Device(99)
    with pytest.raises(vkhost.InvalidArgumentError):
        dev.alloc_buffer(0)
    a = np.zeros(4096, dtype=np.uint8)
    with dev.register(a):
        with pytest.raises(vkhost.AlreadyRegisteredError) as e:
            dev.register(a)
        assert e.value.status == 13 and "overlaps" in str(e.value)
    with pytest.raises(vkhost.NotRegisteredError):
        dev.find(a)
    with pytest.raises(vkhost.InvalidArgumentError):
        dev.register(np.zeros(10)[::2])
    for cls in vkhost.errors.BY_STATUS.values():
        assert issubclass(cls, vkhost.Error)


def test_import_off_is_unsupported() -> None:
    with vkhost.Device(validation=True, import_host=False) as d:
        assert d.registration_granule is None
        with pytest.raises(vkhost.UnsupportedError):
            d.register(np.zeros(4096, dtype=np.uint8))
        assert d.alloc_buffer(4096).write(np.zeros(4096, dtype=np.uint8)) == "staged"


def test_teardown_busy_destroyed_and_tombstones() -> None:
    d = vkhost.Device(validation=True)
    p = d.pinned(4096)
    with pytest.raises(vkhost.BusyError):
        d.destroy()  # would unmap the PinnedArray
    del p
    gc.collect()
    a = np.zeros(8192, dtype=np.uint8)
    reg = d.register(a)
    buf = d.alloc_buffer(4096)
    s = d.stream()
    d.destroy()
    assert d.is_destroyed
    with pytest.raises(vkhost.DeviceDestroyedError):
        d.alloc_buffer(4096)
    with pytest.raises(vkhost.DeviceDestroyedError):
        buf.write(a[:4096])
    with pytest.raises(vkhost.DeviceDestroyedError):
        s.synchronize()
    assert d.stats().tombstones == 1 and d.stats().live_imports == 0
    reg.close()  # the tombstone: unregister succeeds once
    assert d.stats().tombstones == 0
    buf.free()
    s.close()
    errors = d.validation_errors
    d.close()
    assert errors == 0


def test_bench_returns_a_dict(dev: vkhost.Device) -> None:
    r = vkhost.bench(MiB, iters=2, device=dev)
    assert r["nbytes"] == MiB and r["device"] == dev.info.name
    assert r["paths"]["pinned"] == {"h2d": "direct", "d2h": "direct"}
    assert r["paths"]["pageable"] == {"h2d": "staged", "d2h": "staged"}
    assert r["paths"]["registered"]["h2d"] == "direct"
    assert all(v > 0 for path in r["gbps"].values() for v in path.values())


def test_freeing_while_another_thread_copies_is_safe(dev: vkhost.Device) -> None:
    """ctypes lets go of the GIL during a copy: a free() or close() on another thread waits for
    the copies in flight instead of releasing a handle they use (a segfault before), and later
    calls raise."""
    import threading

    for what in ("buffer", "stream"):
        buf = dev.alloc_buffer(64 * MiB)
        s = dev.stream()
        out = np.empty(64 * MiB, dtype=np.uint8)
        errors: list[BaseException] = []
        started = threading.Event()

        def copy_until_refused() -> None:
            try:
                while True:
                    if what == "buffer":
                        buf.read(out)
                    else:
                        s.download(buf, out)
                        s.synchronize()
                    started.set()
            except vkhost.InvalidArgumentError as e:
                errors.append(e)
            except BaseException as e:  # anything else fails the test below
                errors.append(e)
                started.set()

        t = threading.Thread(target=copy_until_refused)
        t.start()
        assert started.wait(30)
        if what == "buffer":
            buf.free()
        else:
            s.close()
        t.join(30)
        assert not t.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], vkhost.InvalidArgumentError), errors
        s.close()
        buf.free()
        buf.free()  # once only: a second free is a no-op


def test_arrays_of_python_objects_are_refused(dev: vkhost.Device) -> None:
    """The device copies raw bytes: over an object array it would write made-up pointers."""
    buf = dev.alloc_buffer(64)
    buf.write(np.full(64, 0x41, np.uint8))
    objs = np.empty(8, dtype=object)
    with pytest.raises(vkhost.InvalidArgumentError):
        buf.read(dtype=object)
    with pytest.raises(vkhost.InvalidArgumentError):
        buf.read(out=objs)
    with pytest.raises(vkhost.InvalidArgumentError):
        buf.write(objs)
    with pytest.raises(vkhost.InvalidArgumentError):
        dev.register(objs)
    with dev.stream() as s, pytest.raises(vkhost.InvalidArgumentError):
        s.download(buf, objs)
    assert all(o is None for o in objs)
    buf.free()


def test_find_refuses_views_that_are_not_contiguous(dev: vkhost.Device) -> None:
    """A reversed or strided view's data pointer and nbytes do not describe its bytes."""
    p = dev.pinned(8192)
    (b0, off0), (b1, off1) = dev.find(p), dev.find(p[4096:])
    assert b0 == b1 and off1 - off0 == 4096
    for view in (p[:4096][::-1], p[::2]):
        with pytest.raises(vkhost.InvalidArgumentError):
            dev.find(view)
    del p
    gc.collect()


def test_with_block_left_while_a_pinned_array_lives_closes_it_once_freed() -> None:
    # The natural form: the array outlives the block. Leaving it raises nothing (a BusyError
    # there would also replace an exception raised in the block); the device stays open, so
    # the array's memory stays mapped, until the last PinnedArray goes, then it closes.
    with vkhost.Device(validation=True) as dev:
        p = dev.pinned(4096)
        p[:] = 7
        view = p[100:200]
    assert not dev.is_destroyed
    assert int(p.sum()) == 7 * 4096
    del p
    gc.collect()
    assert not dev.is_destroyed, "a view keeps the block, and so the device, open"
    assert int(view.sum()) == 7 * 100
    del view
    gc.collect()
    with pytest.raises(vkhost.DeviceDestroyedError):
        _ = dev.is_destroyed  # closed: the handle was released
    assert vkhost.validation_errors() == 0


def test_with_block_exception_is_not_replaced_by_busy() -> None:
    with pytest.raises(KeyError):
        with vkhost.Device(validation=True) as dev:
            p = dev.pinned(64)
            raise KeyError("from the block")
    del p
    gc.collect()
    with pytest.raises(vkhost.DeviceDestroyedError):
        dev.stats()


def test_with_block_close_runs_from_the_collector() -> None:
    # A PinnedArray kept only by a reference cycle dies in a collection, not at a `del`: its
    # finalizer, run by the collector, closes the device the `with` block left open for it.
    gc.disable()
    try:
        with vkhost.Device(validation=True) as dev:
            cycle: list[object] = [dev.pinned(4096)]
            cycle.append(cycle)
            del cycle
        assert not dev.is_destroyed, "the block in the cycle is still live"
        gc.collect()
        with pytest.raises(vkhost.DeviceDestroyedError):
            dev.stats()
    finally:
        gc.enable()


def _stderr_of(code: str, **env: str) -> str:
    """Runs ``code`` in a fresh interpreter with ``env`` added; returns its standard error."""
    import os
    import subprocess
    import sys

    full = dict(os.environ, **env)
    r = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stderr


def test_malformed_settings_are_reported_once_on_stderr() -> None:
    # Up to 665758d a malformed VKHOST_* value was ignored silently through the C ABI (vkhost
    # warns through Rust's `log`, which nothing printed there); then it warned at every read.
    code = "import vkhost\nfor _ in range(3):\n    vkhost.Device().close()\n"
    err = _stderr_of(code, VKHOST_STAGING_CHUNK="16M")
    lines = [line for line in err.splitlines() if "VKHOST_STAGING_CHUNK" in line]
    assert len(lines) == 1, err
    assert lines[0].startswith("vkhost: warn: ") and "ignored, the default applies" in lines[0], err
    assert "VKHOST_STAGING_CHUNK" not in _stderr_of(code, VKHOST_STAGING_CHUNK="16M", VKHOST_LOG="off")
    assert "VKHOST_LOG" in _stderr_of(code, VKHOST_LOG="verbose")
