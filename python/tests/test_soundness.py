"""Pure-Python misuse that must raise a typed error, never crash or corrupt memory. Each test
failed before its fix (an audit's reproducers, 2026-12-03): ctypes reduced integers modulo
2^64, two `synchronize` calls let go of a pending download's destination (a segfault),
`close()` unmapped a pinned array made meanwhile on another thread (a segfault), an exception
right after `vkhost_register` returned leaked the registration, and an explicit `__del__`
released a device under live pinned memory (a segfault). Later (2026-12-03, thirteenth session):
a copied `Event` or pinned block was a second owner of one handle or block (a double release,
writes into another block), `__init__` called again dropped a live handle, and zero-byte
dtypes raised untyped errors."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from typing import Any

import numpy as np
import pytest

import vkhost

MiB = 1 << 20


class _Proxy:
    """vkhost's ctypes library with hooks around chosen calls (a forced thread switch, or an
    exception right after the call, as a signal handler can raise there)."""

    def __init__(self, lib: Any, after: dict[str, Any]) -> None:
        self._lib, self._after = lib, after

    def __getattr__(self, name: str) -> Any:
        f = getattr(self._lib, name)
        hook = self._after.get(name)
        if hook is None:
            return f

        def call(*a: Any) -> Any:
            r = f(*a)
            hook()
            return r

        return call


@pytest.fixture
def patch_lib() -> Any:
    real = vkhost.lib

    def install(after: dict[str, Any]) -> None:
        vkhost.lib = _Proxy(real, after)

    yield install
    vkhost.lib = real


def test_integers_outside_u64_are_refused() -> None:
    with pytest.raises(vkhost.NoDeviceError):
        vkhost.Device(2**64)
    with pytest.raises(vkhost.NoDeviceError):
        vkhost.Device(-1)
    dev = vkhost.Device(validation=True)
    try:
        with pytest.raises(vkhost.OutOfRangeError):
            dev.alloc_buffer(2**64 + 16)
        with pytest.raises(TypeError):
            dev.alloc_buffer(4096.0)  # type: ignore[arg-type]
        b = dev.alloc_buffer(64)
        b.write(np.arange(64, dtype=np.uint8))
        with pytest.raises(vkhost.OutOfRangeError):
            b.write(np.full(8, 0xEE, np.uint8), offset=2**64 + 8)
        with pytest.raises(vkhost.OutOfRangeError):
            b.read(offset=2**64 + 1, count=4)
        s = dev.stream()
        with pytest.raises(vkhost.OutOfRangeError):
            s.fill(b, 0x11111111, offset=2**64, nbytes=16)
        s.synchronize()
        assert b.read().tolist() == list(range(64)), "nothing written at a wrapped offset"
        with pytest.raises(vkhost.InvalidArgumentError):
            dev.pinned((-5,))
        with pytest.raises(vkhost.OutOfRangeError):
            dev.pinned((2**61 + 2,), np.float64)
        s.close()
        del b
    finally:
        gc.collect()
        dev.close()


def test_two_synchronize_calls_keep_a_later_download_alive() -> None:
    n = 8 * MiB
    dev = vkhost.Device(validation=True)
    buf = dev.alloc_buffer(n)
    s = dev.stream()
    s.upload(np.full(n, 7, np.uint8), buf)
    s.synchronize()
    s.download(buf, np.empty(n, np.uint8))
    s.download(buf, np.empty(n, np.uint8))
    # Both synchronize calls are inside their C wait (their marks taken) before the main
    # thread's download, and neither lets go until that download is enqueued.
    real = vkhost.lib
    started = {"A": threading.Event(), "B": threading.Event()}
    downloaded = threading.Event()

    class Lib:
        def __getattr__(self, name: str) -> Any:
            f = getattr(real, name)
            if name != "vkhost_stream_synchronize":
                return f

            def sync(*a: Any) -> Any:
                me = threading.current_thread().name
                if me in started:
                    started[me].set()
                r = f(*a)
                if me in started:
                    downloaded.wait(10)
                return r

            return sync

    vkhost.lib = Lib()
    try:
        ta = threading.Thread(target=s.synchronize, name="A")
        tb = threading.Thread(target=s.synchronize, name="B")
        ta.start()
        tb.start()
        assert started["A"].wait(10) and started["B"].wait(10)
        dst = np.empty(n, np.uint8)
        ref = weakref.ref(dst)
        s.download(buf, dst)  # enqueued after both waits began: neither may let it go
        del dst
        downloaded.set()
        ta.join()
        tb.join()
    finally:
        vkhost.lib = real
    gc.collect()
    assert ref() is not None, "a pending download's destination was let go (its copy-out would write freed memory)"
    s.synchronize()
    s.close()
    del buf
    gc.collect()
    dev.close()


def test_close_and_a_pinned_allocation_on_another_thread(patch_lib: Any) -> None:
    dev = vkhost.Device(validation=True)
    # close() is preempted right before the C destroy, after its "no PinnedArray live" check.
    real_destroy = vkhost.lib.vkhost_device_destroy

    class Slow:
        def __getattr__(self, name: str) -> Any:
            if name == "vkhost_device_destroy":

                def slow(*a: Any) -> Any:
                    time.sleep(0.4)
                    return real_destroy(*a)

                return slow
            return getattr(real_lib, name)

    real_lib = vkhost.lib
    vkhost.lib = Slow()  # restored by the fixture
    t = threading.Thread(target=dev.close)
    t.start()
    time.sleep(0.1)
    try:
        p = dev.pinned(4 * MiB)
    except vkhost.DeviceDestroyedError:
        p = None  # the allocation waited for the close: right
    t.join()
    if p is not None:
        # Before the fix this array was unmapped by the close that was under way.
        assert not dev.is_destroyed, "close() destroyed the device under a live PinnedArray"
        p[:] = 2
        assert int(p[0]) == 2


def test_an_exception_right_after_register_leaks_nothing(patch_lib: Any) -> None:
    class Interrupt(Exception):
        pass

    def interrupt() -> None:
        raise Interrupt()

    dev = vkhost.Device(validation=True)
    a = np.ones(MiB, np.uint8)
    patch_lib({"vkhost_register": interrupt})
    with pytest.raises(Interrupt):
        dev.register(a)
    vkhost.lib = vkhost._ffi.lib
    gc.collect()
    assert dev.stats().live_imports == 0, "an interrupted registration stayed registered"
    with dev.register(a):
        pass
    dev.close()


def test_an_explicit_del_keeps_pinned_memory_mapped() -> None:
    dev = vkhost.Device(validation=True)
    p = dev.pinned(MiB)
    p[:] = 1
    dev.__del__()  # pure Python: must not release the device under `p`
    # The handle stays: the device (and the block's mapping) lives while `p` does. Before the
    # fix the handle went here and, with a 16 MiB block, writing `p` segfaulted.
    assert dev.stats().live_pinned == 1
    p[:] = 2
    assert int(p.sum()) == 2 * MiB
    del p
    gc.collect()
    dev.close()


def test_an_exception_before_register_leaves_another_registration_alone(patch_lib: Any) -> None:
    class Interrupt(Exception):
        pass

    dev = vkhost.Device(validation=True)
    a = np.ones(MiB, np.uint8)
    first = dev.register(a)

    def refuse(*_: Any) -> Any:
        raise Interrupt()  # as if a signal landed before the C call ran

    class Lib:
        def __getattr__(self, name: str) -> Any:
            return refuse if name == "vkhost_register" else getattr(vkhost._ffi.lib, name)

    vkhost.lib = Lib()  # restored by the fixture
    with pytest.raises(Interrupt):
        dev.register(a)
    vkhost.lib = vkhost._ffi.lib
    gc.collect()  # the half-made Registration goes: it must not undo `first`'s
    assert dev.stats().live_imports == 1, "an interrupted Registration unregistered another one's bytes"
    first.close()  # NotRegistered here if it had
    assert dev.stats().live_imports == 0
    dev.close()


def test_a_copied_event_shares_one_handle() -> None:
    # Before: `copy.copy(event)` duplicated the raw handle; the first copy collected released
    # it, and the other waited on freed memory, then released it again (a segfault).
    import copy

    dev = vkhost.Device(validation=True)
    s = dev.stream()
    buf = dev.alloc_buffer(4096)
    s.fill(buf, 7)
    ev = s.record()
    assert copy.copy(ev) is ev and copy.deepcopy(ev) is ev
    ev2 = copy.copy(ev)
    del ev
    gc.collect()
    ev2.wait()
    assert ev2.done
    s.wait_event(ev2)
    del ev2
    gc.collect()
    for i in range(20):
        s.fill(buf, i)
        e = s.record()
        e.wait()
        del e
    with pytest.raises(TypeError):
        vkhost.Event(1, s)  # no event from a raw integer
    s.close()
    dev.close()


def test_a_released_event_raises() -> None:
    dev = vkhost.Device(validation=True)
    s = dev.stream()
    ev = s.record()
    ev.__del__()  # pure Python, as another thread's explicit release
    with pytest.raises(vkhost.InvalidArgumentError):
        ev.wait()
    with pytest.raises(vkhost.InvalidArgumentError):
        s.wait_event(ev)
    s.close()
    dev.close()


def test_a_copied_pinned_block_is_the_block() -> None:
    # Before: `copy.copy(array.block)` made a second block object over the same memory with no
    # finalizer: arrays on it outlived the real block's free and wrote another block's memory.
    import copy
    import pickle

    dev = vkhost.Device(validation=True)
    p = dev.pinned(MiB)
    blk = p.block
    assert blk is not None and copy.copy(blk) is blk and copy.deepcopy(blk) is blk
    arr = np.asarray(copy.copy(blk))
    del p, blk
    gc.collect()
    assert dev.stats().live_pinned == 1, "the array over the copy keeps the block"
    arr[:] = 1
    assert int(arr.sum()) == MiB
    for obj in (dev, dev.alloc_buffer(16), dev.stream()):
        assert copy.copy(obj) is obj
        with pytest.raises(TypeError):
            pickle.dumps(obj)
    with pytest.raises(vkhost.BusyError):
        dev.close()
    del arr
    gc.collect()
    dev.close()


def test_init_again_on_a_live_object_is_refused() -> None:
    dev = vkhost.Device(validation=True)
    buf = dev.alloc_buffer(64)
    with pytest.raises(TypeError):
        buf.__init__(dev, 64)
    with pytest.raises(TypeError):
        dev.__init__()
    a = np.zeros(4096, np.uint8)
    r = dev.register(a)
    with pytest.raises(TypeError):
        r.__init__(dev, a)
    r.close()
    buf.free()
    assert dev.stats().live_imports == 0
    dev.close()


def test_zero_size_items_are_refused() -> None:
    dev = vkhost.Device(validation=True)
    buf = dev.alloc_buffer(64)
    for dt in ("V0", "S0"):
        with pytest.raises(vkhost.InvalidArgumentError):
            buf.read(dtype=dt)
        with pytest.raises(vkhost.InvalidArgumentError):
            dev.pinned(4, dtype=dt)
    buf.free()
    dev.close()


def _run_with_deadline(f: Any, seconds: float = 20.0) -> None:
    """Runs ``f`` on a thread; fails (instead of hanging the suite) if it does not finish."""
    err: list[BaseException] = []

    def run() -> None:
        try:
            f()
        except BaseException as e:  # noqa: BLE001 - reported below
            err.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "deadlock: cleanup inside a call on the same thread waited for itself"
    if err:
        raise err[0]


def test_cleanup_inside_a_call_on_the_same_thread_does_not_deadlock(patch_lib: Any) -> None:
    # A signal handler or a finalizer runs between the bytecodes of a call, still inside its
    # use of the handle: free() and close() there waited for that use to end, forever (a
    # SIGTERM handler cleaning up, a __del__ collected during buf.write; found by an audit).
    dev = vkhost.Device(validation=True)
    buf = dev.alloc_buffer(MiB)
    s = dev.stream()
    a = np.ones(MiB, np.uint8)
    done: list[str] = []

    def cleanup() -> None:
        buf.free()
        s.close()
        dev.close()
        done.append("cleaned up")

    patch_lib({"vkhost_copy_to_device": cleanup})
    _run_with_deadline(lambda: buf.write(a))
    vkhost.lib = vkhost._ffi.lib
    assert done == ["cleaned up"]
    assert not dev._hd.live and not buf._hb.live and not s._hs.live, "a deferred release did not run"
    for call in (lambda: buf.write(a), s.synchronize):
        with pytest.raises(vkhost.Error):
            call()


def test_an_ndarray_subclass_cannot_misreport_its_size() -> None:
    # nbytes, ctypes and flags are properties a subclass can override: vkhost took them at
    # their word and read 64 MiB into a 16-byte array (a segfault; found by an audit).
    class Liar(np.ndarray):
        @property
        def nbytes(self) -> int:  # type: ignore[override]
            return 64 * MiB

    dev = vkhost.Device(validation=True)
    buf = dev.alloc_buffer(64 * MiB)
    buf.write(np.full(64 * MiB, 7, np.uint8))
    small = np.zeros(16, np.uint8).view(Liar)
    out = buf.read(out=small)
    assert out is small, "read returns the caller's array"
    assert np.asarray(out).tolist() == [7] * 16
    assert buf.write(np.arange(16, dtype=np.uint8).view(Liar)) is not None
    assert buf.read(count=16).tolist() == list(range(16))
    s = dev.stream()
    s.download(buf, np.zeros(16, np.uint8).view(Liar))
    s.upload(np.zeros(16, np.uint8).view(Liar), buf)
    s.synchronize()
    arr = np.zeros(4096, np.uint8).view(Liar)
    with dev.register(arr):
        pass
    s.close()
    buf.free()
    dev.close()


def test_wrong_argument_types_raise_type_or_vkhost_errors() -> None:
    with pytest.raises(TypeError):
        vkhost.Device(1.5)  # type: ignore[arg-type]
    dev = vkhost.Device(validation=True)
    buf = dev.alloc_buffer(64)
    s = dev.stream()
    with pytest.raises(TypeError):
        s.wait_event(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        s.upload(np.zeros(4, np.uint8), object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        s.download(object(), np.zeros(4, np.uint8))  # type: ignore[arg-type]
    with pytest.raises(vkhost.InvalidArgumentError):
        dev.pinned(3, "(2,3)f4")
    with pytest.raises(vkhost.InvalidArgumentError):
        vkhost.bench(4096, 0, dev)
    s.close()
    buf.free()
    dev.close()


def test_stream_copy_fill_and_read_check_their_arguments() -> None:
    """An audit (2026-12-04): `Stream.copy`/`fill` took any object (AttributeError, and `copy`
    kept it), `fill(b, 1 << 32)` filled with 0 (the value cut to 32 bits), and
    `read(count=-1)` returned an empty array."""
    dev = vkhost.Device(validation=True)
    buf = dev.alloc_buffer(64)
    s = dev.stream()
    with pytest.raises(TypeError):
        s.copy(object(), buf, 4)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        s.copy(buf, object(), 4)  # type: ignore[arg-type]
    assert s._keep == [], "a refused copy keeps nothing"
    with pytest.raises(TypeError):
        s.fill(object(), 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        s.fill(buf, 1.5)  # type: ignore[arg-type]
    for bad in (1 << 32, -(1 << 31) - 1):
        with pytest.raises(vkhost.OutOfRangeError):
            s.fill(buf, bad)
    s.fill(buf, -1)  # an int32: all ones
    s.fill(buf, 0x0102_0304, 32, 32)
    s.synchronize()
    got = buf.read(dtype=np.uint32)
    assert list(got[:8]) == [0xFFFF_FFFF] * 8 and list(got[8:]) == [0x0102_0304] * 8
    with pytest.raises(vkhost.OutOfRangeError):
        buf.read(count=-1)
    with pytest.raises(TypeError):
        buf.read(count=2.0)  # type: ignore[arg-type]
    assert buf.read(count=3, dtype=np.uint32).tolist() == [0xFFFF_FFFF] * 3
    s.close()
    buf.free()
    assert dev.validation_errors == 0
    dev.close()


def test_the_loader_and_the_build_look_in_cargo_target_dir(monkeypatch: Any) -> None:
    """An audit (2026-12-04): with CARGO_TARGET_DIR set, the loader (and `pip install
    ./python`, which shares the rule) looked for the library in target/ only."""
    from pathlib import Path

    import vkhost._ffi as ffi

    monkeypatch.setenv("CARGO_TARGET_DIR", "/elsewhere/tgt")
    assert Path("/elsewhere/tgt/release/libvkhost_capi.so") in ffi._candidates()
    monkeypatch.delenv("CARGO_TARGET_DIR")
    assert any(p.parts[-3:] == ("target", "release", "libvkhost_capi.so") for p in ffi._candidates())


def test_a_stream_whose_destroy_never_ran_keeps_its_arrays() -> None:
    # The release of a stream lost to an interrupt (simulated: its handle marked released
    # without running the destroy) must not free the arrays its work names: the device's
    # teardown runs the pending copy-outs into them. Before, they went with the Stream object
    # and the teardown wrote into freed memory (SIGSEGV in a review).
    import vkhost as vk

    dev = vk.Device(validation=True)
    buf = dev.alloc_buffer(64 << 20)
    s = dev.stream()
    s.fill(buf, 0x05050505)
    big = np.zeros(64 << 20, np.uint8)
    s.download(buf, big)  # pageable: copied out of staging at a later reap
    raw = s._hs._raw
    assert raw in vk._STREAM_KEEPS
    s._hs._raw = None  # the bookkeeping lost; vkhost_stream_destroy never runs
    del s
    gc.collect()
    assert any(a is big for a in vk._STREAM_KEEPS[raw]), "the array stays kept"
    del big
    gc.collect()
    dev.close()  # the teardown's copy-outs land in the kept array, not in freed memory
    kept = [a for a in vk._STREAM_KEEPS.pop(raw) if isinstance(a, np.ndarray) and a.nbytes == 64 << 20]
    assert kept and int(kept[0][-1]) in (0, 5)


def test_objects_that_outlive_the_module_at_exit_leave_no_device_write_behind(tmp_path: Any) -> None:
    # At interpreter exit, objects held from `sys` are finalized after vkhost's module globals
    # were cleared: their close() fails (swallowed), the stream is never destroyed nor the
    # registration undone, and the array is freed while the device still writes into it.
    # Before the exit hook that waits for live streams, this script died of SIGSEGV (5 of 5
    # runs on lavapipe, in the driver's memcpy into the unmapped array; found by a review).
    script = tmp_path / "exit_with_work.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            import numpy as np
            import vkhost
            dev = vkhost.Device()
            buf = dev.alloc_buffer(128 << 20)
            a = np.empty(buf.nbytes, np.uint8)  # its own mmap, unmapped when freed
            reg = dev.register(a)
            s = dev.stream()
            s.download(buf, a)  # direct into the registered array
            s.flush()  # submitted: the device writes the array from now on
            sys._keep = [dev, buf, reg, s, a]
            sys._vk = vkhost
            del dev, buf, reg, s, a
            print("exiting", flush=True)
            """
        )
    )
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert (r.returncode, r.stdout.strip()) == (0, "exiting"), f"rc {r.returncode}: {r.stdout}{r.stderr}"


def test_a_close_interrupted_while_waiting_still_destroys_the_stream() -> None:
    # Ctrl-C while close() waits for another thread's call on the stream: the exception comes
    # out of close(), and the destroy it owes runs when that call ends. Before, the release was
    # lost: the stream never destroyed.
    import signal

    import vkhost as vk

    dev = vkhost.Device(validation=True)
    s = dev.stream()
    raw = s._hs._raw
    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with s._hs.use():  # a call in flight on the stream
            inside.set()
            leave.wait()

    t = threading.Thread(target=hold)
    t.start()
    inside.wait()
    # Python's own Ctrl-C handler, whatever this process inherited (a background job of a
    # non-interactive shell starts with SIGINT ignored, and then Python installs none).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(0.2, lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT))
        timer.start()
        # Should the interrupt never come, the call in flight ends after 20 s and the test
        # fails (close() then returns without raising) instead of hanging.
        watchdog = threading.Timer(20, leave.set)
        watchdog.daemon = True
        watchdog.start()
        with pytest.raises(KeyboardInterrupt):
            s.close()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert raw in vk._STREAM_KEEPS, "not destroyed while the call is in flight"
    leave.set()
    t.join()
    assert raw not in vk._STREAM_KEEPS, "the last call out ran the destroy close() owed"
    dev.close()
    assert vkhost.validation_errors() == 0


def test_leaving_a_with_block_while_another_thread_allocates_pinned_memory() -> None:
    # Leaving a `with` block tests "no PinnedArray live" under the pin lock, then let go of the
    # lock and called close(), whose destroy takes it again: a PinnedArray made on another
    # thread in between made that destroy raise BusyError out of the block (which promises
    # never to raise for that, and would have replaced an exception raised in the block), and
    # the device was then never closed. The lock below runs that other thread right after
    # each time the lock is let go, until it ran once.
    dev = vkhost.Device(validation=True)
    real = dev._pin_lock
    got: list[object] = []

    def allocate() -> None:
        try:
            got.append(dev.pinned(4096))
        except vkhost.DeviceDestroyedError as e:
            got.append(e)  # the close came first: right

    class Lock:
        def __enter__(self) -> Any:
            return real.__enter__()

        def __exit__(self, *exc: object) -> Any:
            r = real.__exit__(*exc)
            if not got and not threads:
                t = threading.Thread(target=allocate)
                threads.append(t)
                t.start()
                t.join(0.5)  # blocked on the lock when the exit still holds it
            return r

        def acquire(self, *a: Any) -> Any:
            return real.acquire(*a)

        def release(self) -> None:
            real.release()

    threads: list[threading.Thread] = []
    with dev:
        dev._pin_lock = Lock()  # type: ignore[assignment]
    for t in threads:
        t.join()
    assert len(got) == 1
    if isinstance(got[0], vkhost.DeviceDestroyedError):
        with pytest.raises(vkhost.DeviceDestroyedError):
            dev.stats()  # closed by the with block
    else:
        # The array came first: the block's close waits for it, and runs when it goes.
        assert not dev.is_destroyed
        got.clear()
        gc.collect()
        with pytest.raises(vkhost.DeviceDestroyedError):
            dev.stats()
    assert vkhost.validation_errors() == 0


def test_a_numpy_integer_is_a_pinned_length() -> None:
    # `dev.pinned(np.prod(shape))` raised TypeError ("'numpy.int64' object is not iterable"):
    # only a Python int was taken as a length, as NumPy takes any integer.
    dev = vkhost.Device(validation=True)
    p = dev.pinned(np.int64(16), np.float32)
    q = dev.pinned((np.int32(2), 3))
    assert p.shape == (16,) and p.nbytes == 64 and q.shape == (2, 3)
    with pytest.raises(TypeError):
        dev.pinned(1.5)  # type: ignore[arg-type]
    del p, q
    gc.collect()
    dev.close()


def test_bench_lets_its_error_through_and_closes_its_own_device(monkeypatch: Any) -> None:
    # An error during the pinned measurement (a failing copy, or Ctrl-C) reached bench's
    # `finally: dev.close()` while the traceback still held the PinnedArray: close() raised
    # BusyError, which replaced the error (a KeyboardInterrupt became a BusyError), and the
    # device was left open. Now the original error comes out and the device closes once the
    # block is freed, as leaving a `with` block does.
    made: list[weakref.ref[vkhost.Device]] = []
    real = vkhost.Device

    class Recorded(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            made.append(weakref.ref(self))

    def boom(*a: Any, **k: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(vkhost, "Device", Recorded)
    monkeypatch.setattr(vkhost, "_time_copies", boom)
    with pytest.raises(RuntimeError, match="boom") as excinfo:
        vkhost.bench(MiB, iters=1)
    del excinfo  # the traceback holds the pinned array
    gc.collect()
    assert len(made) == 1
    d = made[0]()
    assert d is None or not d._hd.live, "bench's own device was left open"
    assert vkhost.validation_errors() == 0


class _GatedLib:
    """vkhost's ctypes library with chosen calls held at their start until their gate opens
    (on whatever thread they come); ``log`` records each one's return, in order."""

    def __init__(self, real: Any, names: set[str]) -> None:
        self._real = real
        self.inside = {n: threading.Event() for n in names}
        self.gate = {n: threading.Event() for n in names}
        self.log: list[str] = []

    def __getattr__(self, name: str) -> Any:
        f = getattr(self._real, name)
        if name not in self.gate:
            return f

        def call(*a: Any) -> Any:
            self.inside[name].set()
            self.gate[name].wait(30)  # never forever: a test that fails must not hang the suite
            r = f(*a)
            self.log.append(f"{name} returned")
            return r

        return call


def _close_twice(close: Any, name: str) -> tuple[list[str], list[BaseException]]:
    """Runs ``close`` on a thread and holds it inside the C call ``name``; runs ``close`` again
    on a second thread, gives it a second to return, then lets the first go. Returns the
    order of the C call's return and the second close's, and what the second raised."""
    real = vkhost.lib
    lib = _GatedLib(real, {name})
    errors: list[BaseException] = []

    def second() -> None:
        try:
            close()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            errors.append(e)
        lib.log.append("second close returned")

    vkhost.lib = lib  # type: ignore[assignment]
    try:
        t1 = threading.Thread(target=close)
        t1.start()
        assert lib.inside[name].wait(20), f"{name} never called"
        t2 = threading.Thread(target=second, daemon=True)
        t2.start()
        t2.join(1.0)  # a close that does not wait returns well within this
        lib.gate[name].set()
        t1.join(20)
        t2.join(20)
        assert not t1.is_alive() and not t2.is_alive(), "a close never returned"
    finally:
        lib.gate[name].set()
        vkhost.lib = real
    return lib.log, errors


def _closables() -> tuple[vkhost.Device, Any, Any, np.ndarray, Any]:
    """A device with one of each object a close test closes: a buffer, a stream, an array and
    its registration (None where the device cannot register host memory)."""
    dev = vkhost.Device(validation=True)
    buf = dev.alloc_buffer(MiB)
    s = dev.stream()
    a = np.ones(MiB, np.uint8)
    r = dev.register(a) if dev.registration_granule else None
    return dev, buf, s, a, r


@pytest.mark.parametrize("what", ["stream", "buffer", "registration", "device"])
def test_a_second_close_on_another_thread_returns_after_the_first(what: str) -> None:
    # Two threads closing one object: the second close() returned at once, while the first was
    # still inside the C call that waits for device work and destroys, frees or unregisters.
    # A caller relying on "close() returned, so it is closed" (a Registration's "no device work
    # can touch the array's bytes") then reused memory the device could still write. A device's
    # second close returned before the first released its handle (see also the next test).
    dev, buf, s, a, r = _closables()
    if what == "registration" and r is None:
        pytest.skip("the device cannot register host memory")
    s.upload(a, buf)  # work the destroy (or unregister) waits for
    if what == "stream":
        close, name = s.close, "vkhost_stream_destroy"
    elif what == "buffer":
        s.synchronize()
        close, name = buf.free, "vkhost_buffer_free"
    elif what == "registration":
        assert r is not None
        close, name = r.close, "vkhost_unregister"
    else:
        close, name = dev.close, "vkhost_device_release"
    log, errors = _close_twice(close, name)
    assert errors == []
    assert log == [f"{name} returned", "second close returned"], "the second close returned first"
    s.close()
    if r is not None:
        r.close()
    buf.free()
    dev.close()
    assert vkhost.validation_errors() == 0


def test_a_second_device_close_on_another_thread_waits_and_returns_normally() -> None:
    # The second of two Device.close() calls at once passed "the handle is live" while the first
    # was destroying, then waited for the pin lock; by the time it got it the first had released
    # the handle, and it raised DeviceDestroyedError (or, a moment later, returned before the
    # first's release). It now waits for the first and returns, as a second close on one thread
    # does. The pin lock below holds the second close until the first is inside its release.
    dev = vkhost.Device(validation=True)
    real = vkhost.lib
    lib = _GatedLib(real, {"vkhost_device_destroy", "vkhost_device_release"})
    real_lock = dev._pin_lock
    at_lock = threading.Event()

    class Lock:
        def __enter__(self) -> Any:
            if threading.current_thread().name == "second":
                at_lock.set()
                lib.inside["vkhost_device_release"].wait(20)
            return real_lock.__enter__()

        def __exit__(self, *exc: Any) -> Any:
            return real_lock.__exit__(*exc)

    errors: list[BaseException] = []

    def second() -> None:
        try:
            dev.close()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        lib.log.append("second close returned")

    vkhost.lib = lib  # type: ignore[assignment]
    dev._pin_lock = Lock()  # type: ignore[assignment]
    try:
        t1 = threading.Thread(target=dev.close, name="first")
        t1.start()
        assert lib.inside["vkhost_device_destroy"].wait(20)
        t2 = threading.Thread(target=second, name="second", daemon=True)
        t2.start()
        assert at_lock.wait(20)  # past "the handle is live", before the first released it
        lib.gate["vkhost_device_destroy"].set()
        t2.join(1.0)
        lib.gate["vkhost_device_release"].set()
        t1.join(20)
        t2.join(20)
        assert not t1.is_alive() and not t2.is_alive(), "a close never returned"
    finally:
        for g in lib.gate.values():
            g.set()
        vkhost.lib = real
    assert errors == [], f"the second close raised {errors!r}"
    assert lib.log == [
        "vkhost_device_destroy returned",
        "vkhost_device_release returned",
        "second close returned",
    ]
    assert vkhost.validation_errors() == 0


def test_a_close_again_inside_the_first_on_its_own_thread_returns(patch_lib: Any) -> None:
    # A signal handler (or finalizer) running on the closing thread, right after the C call,
    # closes the object again: that close must not wait for the close it interrupts (itself).
    dev, buf, s, a, r = _closables()
    again: list[str] = []

    def hook(what: str, close: Any) -> Any:
        def run() -> None:
            close()
            again.append(what)

        return run

    patch_lib(
        {
            "vkhost_stream_destroy": hook("stream", s.close),
            "vkhost_buffer_free": hook("buffer", buf.free),
            "vkhost_unregister": hook("registration", r.close if r is not None else None),
            "vkhost_device_release": hook("device", dev.close),
        }
    )

    def close_all() -> None:
        if r is not None:
            r.close()
        s.close()
        buf.free()
        dev.close()

    _run_with_deadline(close_all)
    vkhost.lib = vkhost._ffi.lib
    assert again == (["registration"] if r is not None else []) + ["stream", "buffer", "device"]


def test_a_close_runs_a_release_left_owed_with_nothing_in_flight() -> None:
    # A release owed (its close interrupted while it waited, and the last call out interrupted
    # too) with no call in flight and nobody running it: a later close() must not wait for it
    # forever, and runs it. Before, the later close returned and left it to the collector.
    import vkhost as vk

    dev = vk.Device(validation=True)
    s = dev.stream()
    h = s._hs
    raw = h._raw
    me = threading.get_ident()
    # The close below runs "inside a call" on this thread (faked), so it leaves the destroy
    # owed to the last call out; that call then "ends" without running it.
    with h._cv:
        h._users, h._threads = 1, {me: 1}
    s.close()
    with h._cv:
        h._users, h._threads = 0, {}
    assert not h.live and raw in vk._STREAM_KEEPS, "the destroy is owed"
    _run_with_deadline(s.close)
    assert raw not in vk._STREAM_KEEPS, "the later close ran the destroy owed"
    dev.close()
    assert vkhost.validation_errors() == 0


def test_an_interrupt_while_a_second_close_waits_comes_out_of_it() -> None:
    # Ctrl-C while close() waits for another thread's close: the KeyboardInterrupt comes out of
    # it, and the first close still finishes.
    import signal

    import vkhost as vk

    dev = vk.Device(validation=True)
    s = dev.stream()
    raw = s._hs._raw
    real = vk.lib
    lib = _GatedLib(real, {"vkhost_stream_destroy"})
    returned = threading.Event()

    def interrupt() -> None:
        if not returned.is_set():  # never a stray interrupt after close() returned
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # type: ignore[arg-type]

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    vk.lib = lib  # type: ignore[assignment]
    t1 = threading.Thread(target=s.close)
    try:
        t1.start()
        assert lib.inside["vkhost_stream_destroy"].wait(20)
        timer = threading.Timer(0.3, interrupt)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                try:
                    s.close()
                finally:
                    returned.set()
        finally:
            timer.join()
        assert lib.log == [], "the first close is still inside its destroy"
    finally:
        lib.gate["vkhost_stream_destroy"].set()
        t1.join(20)
        vk.lib = real
        signal.signal(signal.SIGINT, previous)
    assert lib.log == ["vkhost_stream_destroy returned"]
    assert raw not in vk._STREAM_KEEPS
    dev.close()
    assert vkhost.validation_errors() == 0


def test_a_registration_closed_as_another_thread_closes_its_device_does_not_raise() -> None:
    # Registration.close after Device.close has nothing to undo and returns (the device's
    # registrations are tombstones). A Device.close on another thread landing between the
    # registration's "the device handle is live" test and its use of the handle made the
    # registration's close raise DeviceDestroyedError instead. The other thread's close is
    # placed exactly there: the device's `_use` closes the device first.
    dev = vkhost.Device(validation=True)
    a = np.ones(MiB, np.uint8)
    reg = dev.register(a)
    real_use = dev._use

    def use_after_a_close() -> Any:
        del dev._use  # once: the close below uses the device's own
        dev.close()
        return real_use()

    dev._use = use_after_a_close  # type: ignore[method-assign]
    reg.close()
    assert not dev._hd.live
    reg.close()  # and again: nothing
    assert vkhost.validation_errors() == 0


def _close_interrupted_at(k: int, close: Any) -> tuple[bool, bool]:
    """Runs ``close`` on a thread with a KeyboardInterrupt raised at the k-th point where
    CPython delivers Ctrl-C (1-based): the entry of a Python function it calls, and the return
    of a built-in one (``getattr``, a lock's ``acquire``, a ctypes call: the check follows the
    call, before its result is stored). Then ``close`` again on another thread. Returns
    whether the interrupt fired and whether the second close returned within 5 s (a hang
    there is the failure)."""
    fired = threading.Event()

    def first() -> None:
        n = 0

        # A profile function, not a trace one: it sees built-ins return ("c_return") too, and
        # an exception it raises comes out of the call it was told of.
        def profiler(frame: Any, event: str, arg: Any) -> Any:
            nonlocal n
            if event in ("call", "c_return") and not fired.is_set():
                n += 1
                if n == k:
                    fired.set()
                    raise KeyboardInterrupt
            return None

        sys.setprofile(profiler)
        try:
            close()
        except KeyboardInterrupt:
            pass
        finally:
            sys.setprofile(None)

    t1 = threading.Thread(target=first, daemon=True)
    t1.start()
    t1.join(5)
    if t1.is_alive():
        return fired.is_set(), False
    t2 = threading.Thread(target=close, daemon=True)
    t2.start()
    t2.join(5)
    return fired.is_set(), not t2.is_alive()


@pytest.mark.parametrize("what", ["stream", "registration", "buffer", "device"])
def test_a_close_interrupted_at_any_call_leaves_later_closes_returning(what: str) -> None:
    # Ctrl-C lands at any Python function call. A close interrupted anywhere may leak its
    # release (documented), but must not leave a lock held or a "release running" mark set:
    # a later close on another thread (a finalizer on the collector's thread, say) then waited
    # for good. Found by a review of the second-close wait: an interrupt at `_Handle._ran`
    # left the mark set, one at a Condition's `__exit__` in Registration.close left its lock
    # held. Swept over every call the close makes, until a close runs to the end unhurt.
    for k in range(1, 400):
        dev = vkhost.Device(validation=True)
        a = np.ones(MiB, np.uint8)
        if what == "stream":
            s = dev.stream()
            buf = dev.alloc_buffer(MiB)
            s.upload(a, buf)
            close = s.close
        elif what == "buffer":
            close = dev.alloc_buffer(MiB).free
        elif what == "device":
            # Kept: a stream dropped at once waits for its work, and the close would find none.
            s, buf = dev.stream(), dev.alloc_buffer(MiB)
            s.upload(a, buf)
            close = dev.close
        else:
            if not dev.registration_granule:
                pytest.skip("the device cannot register host memory")
            close = dev.register(a).close
        fired, returned = _close_interrupted_at(k, close)
        assert returned, f"{what}: a close after one interrupted at its call {k} never returned"
        if what == "registration":
            # The later close undid the registration: the array registers again. (An interrupt
            # between taking the pointer and the unregister lost it, and the import outlived
            # the close: the register below was refused as an overlap.)
            dev.register(a).close()
        dev.close()
        if not fired:
            break
    else:
        pytest.fail(f"{what}: the close made more than 400 calls")
    assert k > 1
