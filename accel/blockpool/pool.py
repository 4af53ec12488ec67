"""The KV block pool's accelerated twin: blocks in CUDA device memory, moved with CuPy.

Its reference twin is :class:`kachedb_radix.reference.blockpool.pool.BlockPool` (NumPy); the two
share the public API, and the tests run both through one suite, selected by parameter.

Importing this module never imports CuPy: CuPy is loaded on first use, so the package imports
cleanly on machines without CuPy or without a GPU.  :func:`cupy_unavailable_reason` says why
the backend cannot run (``"cupy not installed"`` or ``"no CUDA device: <message>"``); every
constructor raises :class:`~kachedb_radix.reference.blockpool.BackendUnavailableError` with that
reason.

Semantics are those of :class:`kachedb_radix.reference.blockpool.pool.BlockPool`, bit for bit:

* Ids given on the host (lists, NumPy arrays) are validated on the host before any
  device work is queued; a call that raises a
  :class:`~kachedb_radix.reference.blockpool.KVPoolError` has written nothing.
* ``copy`` is a parallel assignment.  When the source and destination sets are disjoint it is
  one fused kernel launch; when they overlap the sources are first gathered into a temporary
  buffer and then scattered (two launches, ``n * bytes_per_block`` bytes of scratch).
* ``gather``, ``scatter`` and disjoint ``copy`` are one launch of the fused kernel of
  :mod:`kachedb_radix.accel.blockpool.kernels` whatever the layout; for LAYER_MAJOR the
  launch covers all ``2 * layers`` chunks of every block through a device table of
  per-layer base pointers.

The host's part of a call, kept small (a serving engine issues many small calls):

* ids are checked in NumPy (:mod:`kachedb_radix.reference.blockpool.validation`), never per
  element in Python;
* the launch plan comes from a per-pool cache (:mod:`kachedb_radix.accel.blockpool.plans`), with its
  argument block (one C struct, the kernel's only parameter) already filled;
* up to 16 pairs travel in that argument block itself; larger batches go through a pinned
  staging ring (:mod:`kachedb_radix.accel.blockpool.staging`) with an asynchronous
  host-to-device copy queued ahead of the launch.  No call synchronizes the host with the device;
* the launch is one call of ``cupy.cuda.driver.launchKernel`` (``cuLaunchKernel``) with the
  address of that block: nothing is converted per argument.  Where this CuPy lacks that
  path, or its self-test at construction fails, kernels are launched by CuPy's kernel call
  with the same block passed by value (:attr:`BlockPool.launch_path` says which, and
  :attr:`BlockPool.launch_note` why).

**Ids already on the device.**  ``ids``, ``src_ids`` and ``dst_ids`` may be any one-dimensional
int32 or int64 device array (a CuPy array, a ``torch.cuda`` tensor, anything exposing
``__cuda_array_interface__``) on the pool's device; they are read in place, with no host round trip.
Their values are then checked on the device: a small launch queued first compares every id with the
pool size and records the first bad position; the copy launch reads that record and writes nothing
if an id was bad.  The error cannot be raised by the call itself (that would mean waiting for the
device): it is raised, as the same :class:`~kachedb_radix.reference.blockpool.BlockIdRangeError` a
host id would give, by the next :meth:`BlockPool.check_device_ids` or :meth:`BlockPool.synchronize`.
What is *not* checked for device ids: repeated destinations (like ``torch.index_copy_``, the caller
guarantees them unique; a repeat leaves one of the sources there, unspecified which).  A ``copy``
with device ids always stages through a temporary buffer, since whether its sets overlap is not
known on the host.  The array's dtype, shape and device are metadata and are checked on the host,
with the usual typed errors.

Streams: ``gather``/``scatter``/``copy`` run on the current CuPy stream (or ``stream``) and are
asynchronous like any CuPy operation.  ``offload`` gathers on the current stream, then copies
device->host on a transfer stream; ``restore`` copies host->device on the transfer stream,
waits for work already queued on the current stream, then scatters on the transfer stream.
Both return a :class:`CupyTransfer`; the caller must wait on it (``wait()``, or
``stream_wait(stream)`` for device-side ordering) before relying on the data, and must not
modify a restore's host buffer until it is done.  Host buffers should be pinned
(:meth:`BlockPool.alloc_host_buffer`) for the copies to be truly asynchronous.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from kachedb_radix.accel.blockpool.kernels import (
    CHECK_ARGS_DTYPE,
    CHECK_KERNEL,
    INLINE_PAIRS,
    KERNEL_SOURCE,
    STATUS_OK,
    THREADS_PER_BLOCK,
    kernel_name,
    pool_side,
)
from kachedb_radix.accel.blockpool.plans import COPY, GATHER, SCATTER, PlanCache, Prepared, host_ids
from kachedb_radix.accel.blockpool.staging import Span, StagingRing
from kachedb_radix.reference.blockpool.errors import (
    BackendUnavailableError,
    BlockIdRangeError,
    BlockIdTypeError,
    BufferLayoutError,
    ConfigError,
    LengthMismatchError,
)
from kachedb_radix.reference.blockpool.layout import Layout, PoolSpec
from kachedb_radix.reference.blockpool.pool import check_block, check_canonical
from kachedb_radix.reference.blockpool.validation import (
    BlockIds,
    IdArray,
    check_buffer,
    overlap,
    small_disjoint_copy,
    small_ids,
    split_pairs,
)

T = TypeVar("T")
HostArray = npt.NDArray[Any]

_MEMCPY_H2D = 1
_MEMCPY_D2H = 2
#: Ids the staging ring holds at first (int32: 256 KiB pinned, as much on the device);
#: it doubles when a batch needs more.
RING_IDS = 1 << 16
#: :attr:`BlockPool.launch_path` when kernels go through ``cupy.cuda.driver.launchKernel``
#: with one pre-filled parameter block (the fast path) ...
LAUNCH_DRIVER = "driver"
#: ... and when they go through CuPy's kernel call (``RawKernel.__call__``; the fallback).
LAUNCH_CUPY = "cupy"
#: Blocks a pool may hold: ids reach the kernels as int32.
MAX_BLOCKS = 2**31 - 1
#: Device-checked calls whose outcome may be pending at once (one 16-byte status slot
#: each); when they come round, the pool reads them all (a synchronization).
STATUS_SLOTS = 4096


@functools.cache
def cupy_unavailable_reason() -> str | None:
    """``None`` if CuPy imports and sees a CUDA device, else the reason.  Computed once."""
    try:
        cupy = importlib.import_module("cupy")
    except ImportError:
        return "cupy not installed"
    except Exception as exc:  # a broken CUDA install can raise anything at import
        return f"cupy failed to import: {exc}"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        return f"no CUDA device: {exc}"
    if count < 1:
        return "no CUDA device: device count is 0"
    return None


def _cupy() -> Any:
    reason = cupy_unavailable_reason()
    if reason is not None:
        raise BackendUnavailableError(f"the CuPy backend cannot run: {reason}")
    return importlib.import_module("cupy")


@functools.cache
def _module(device_id: int) -> Any:
    """Compiled kernel module for one device (compiled once per process and device)."""
    cp = _cupy()
    with cp.cuda.Device(device_id):
        return cp.RawModule(code=KERNEL_SOURCE, options=("-std=c++14",))


class CupyTransfer(Generic[T]):
    """Handle of an asynchronous offload/restore; keeps its buffers alive until done."""

    def __init__(self, event: Any, result: T, keepalive: tuple[Any, ...]) -> None:
        self._event = event
        self._result = result
        self._keepalive: tuple[Any, ...] | None = keepalive

    def done(self) -> bool:
        """True once every queued copy has finished.  Never blocks."""
        finished = bool(self._event.done)
        if finished:
            self._keepalive = None
        return finished

    def wait(self) -> T:
        """Block the host until the transfer finished; return its result (host buffer or None)."""
        self._event.synchronize()
        self._keepalive = None
        return self._result

    def stream_wait(self, stream: Any) -> None:
        """Make ``stream`` wait for this transfer without blocking the host."""
        stream.wait_event(self._event)


@dataclass(frozen=True)
class DeviceIds:
    """Ids in a device array (int32 or int64, contiguous), checked on the device."""

    array: Any
    role: str

    @property
    def address(self) -> int:
        return int(self.array.data.ptr)

    @property
    def itemsize(self) -> int:
        return int(self.array.dtype.itemsize)

    def __len__(self) -> int:
        return int(self.array.shape[0])


Ids = IdArray | DeviceIds


def is_device_array(ids: object) -> bool:
    """Whether ``ids`` lives in device memory (exposes ``__cuda_array_interface__``)."""
    return hasattr(ids, "__cuda_array_interface__")


@dataclass
class _Check:
    """A device-checked call whose outcome the host has not read yet."""

    slot: int
    sides: tuple[DeviceIds | None, DeviceIds | None]


class BlockPool:
    """KV block pool in device memory (see the module docstring for semantics).

    Construction cost: one zero-filled allocation of ``spec.total_bytes`` (LAYER_MAJOR: one per
    layer) on the current device, the kernels' compilation (once per process and device; NVRTC,
    cached on disk by CuPy) and one self-test launch with its synchronization.  Raises
    :class:`~kachedb_radix.reference.blockpool.BackendUnavailableError` without CuPy or a device,
    :class:`~kachedb_radix.reference.blockpool.ConfigError` for more than :data:`MAX_BLOCKS` blocks,
    and :class:`~kachedb_radix.reference.blockpool.PoolTooLargeError` (before allocating) if the
    pool exceeds ``memory_budget`` or the device's free memory (free memory reported by the driver
    plus bytes cached free in CuPy's memory pool).

    Not safe for calls from several threads at once (the argument blocks of the cached
    plans are shared); one thread after another is fine.
    """

    #: Which twin this is ("reference" or "accel"), so a test can tell which one ran.
    implementation = "accel"
    #: How kernels are launched: :data:`LAUNCH_DRIVER` or :data:`LAUNCH_CUPY` (set at
    #: construction; :attr:`launch_note` says why).
    launch_path: str
    launch_note: str

    def __init__(self, spec: PoolSpec, *, memory_budget: int | None = None) -> None:
        cp = _cupy()
        self._cp = cp
        if memory_budget is not None:
            spec.check_fits(memory_budget, "memory_budget")
        if spec.num_blocks > MAX_BLOCKS:
            raise ConfigError(
                f"the CuPy pool names blocks with int32 ids: at most {MAX_BLOCKS} blocks, "
                f"got {spec.num_blocks}"
            )
        free, _total = cp.cuda.runtime.memGetInfo()
        spec.check_fits(
            int(free) + int(cp.get_default_memory_pool().free_bytes()), "device free memory"
        )
        self._spec = spec
        self._device_id = int(cp.cuda.runtime.getDevice())
        dt = np.dtype(spec.storage_dtype)
        if spec.layout is Layout.BLOCK_MAJOR:
            self._arrays: list[Any] = [cp.zeros(spec.pool_shape, dtype=dt)]
        else:
            self._arrays = [cp.zeros(spec.layer_shape, dtype=dt) for _ in range(spec.num_layers)]
        self._side = pool_side(spec, [int(a.data.ptr) for a in self._arrays])
        self._pool_base = self._side.base
        self._tables: dict[tuple[int, ...], Any] = {}
        self._plans = PlanCache(spec, self._side, self._table_ptr)
        self._kernels: dict[str, Any] = {}
        self._function_ptrs: dict[str, int] = {}
        self._dtype = np.dtype(spec.storage_dtype)
        self._shapes: dict[int, tuple[int, ...]] = {}
        self._check_args = np.zeros(1, dtype=CHECK_ARGS_DTYPE)
        self._check_params = np.array([self._check_args.ctypes.data], dtype=np.uint64)
        self._ring: StagingRing | None = None
        self._ring_keep: tuple[Any, ...] = ()
        self._status: Any = None
        self._checks: dict[int, _Check] = {}
        self._next_slot = 0
        self._pending: list[CupyTransfer[Any]] = []
        self._transfer_stream: Any = None
        self._driver_launch: Any = None
        self._current_context: Any = None
        self._context = 0
        self.launch_path = LAUNCH_CUPY
        self.launch_note = ""
        self._choose_launch()

    @classmethod
    def from_canonical(
        cls, spec: PoolSpec, data: HostArray, *, memory_budget: int | None = None
    ) -> BlockPool:
        """New pool whose contents equal canonical ``data``.  Cost O(total_bytes) host->device."""
        check_canonical(spec, data)
        pool = cls(spec, memory_budget=memory_budget)
        pool.load(data)
        return pool

    # ----------------------------------------------------------------- inspection
    @property
    def spec(self) -> PoolSpec:
        return self._spec

    @property
    def tile_major(self) -> bool:
        """Whether launches walk their work tile-major (the default) or chunk-major (see
        :attr:`kachedb_radix.accel.blockpool.kernels.LaunchPlan.geometry`): a tuning knob of the
        accel twin, for measuring one order against the other.  Setting it drops the cached plans;
        results are the same either way."""
        return self._plans.tile_major

    @tile_major.setter
    def tile_major(self, value: bool) -> None:
        self._plans.tile_major = value

    @property
    def arrays(self) -> list[Any]:
        """The device storage arrays (not copies): one, or one per layer."""
        return list(self._arrays)

    def to_numpy(self) -> HostArray:
        """Host copy of the whole pool in canonical shape.  Synchronises the current stream."""
        cp = self._cp
        if self._spec.layout is Layout.BLOCK_MAJOR:
            return np.asarray(self._arrays[0].get())
        stacked = cp.stack(self._arrays, axis=0).transpose(2, 0, 1, 3, 4, 5)
        return np.ascontiguousarray(cp.ascontiguousarray(stacked).get())

    def load(self, data: HostArray) -> None:
        """Overwrite the whole pool from canonical host ``data``.  Cost O(total_bytes)."""
        check_canonical(self._spec, data)
        cp = self._cp
        if self._spec.layout is Layout.BLOCK_MAJOR:
            self._arrays[0].set(np.ascontiguousarray(data))
            return
        for layer, arr in enumerate(self._arrays):
            arr[...] = cp.asarray(np.ascontiguousarray(data[:, layer].transpose(1, 0, 2, 3, 4)))

    def read_block(self, block_id: int) -> HostArray:
        """Host copy of one block in canonical shape.  Synchronises the current stream."""
        return np.asarray(self.gather([block_id]).get()[0])

    def write_block(self, block_id: int, data: HostArray) -> None:
        """Overwrite one block from canonical host ``data``."""
        ids = host_ids([block_id], self._spec.num_blocks, "block_id")
        check_block(self._spec, data)
        buf = self._cp.asarray(np.ascontiguousarray(data)[None])
        self._scatter(ids, buf, None)

    # ----------------------------------------------------------------- ids
    def _ids(self, ids: BlockIds, role: str, *, unique: bool = False) -> Ids:
        """Host ids validated on the host; device ids checked for shape, dtype and device
        (their values are checked on the device by the launch)."""
        if not is_device_array(ids):
            return host_ids(ids, self._spec.num_blocks, role, unique=unique)
        cp = self._cp
        arr = cp.asarray(ids)  # zero copy: it already lives on the device
        if arr.ndim != 1:
            raise BlockIdTypeError(f"{role} must be one-dimensional, got shape {arr.shape}")
        if arr.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise BlockIdTypeError(
                f"{role} must hold int32 or int64 ids on the device, got {arr.dtype}"
            )
        if int(arr.device.id) != self._device_id:
            raise BlockIdTypeError(
                f"{role} is on device {int(arr.device.id)} but the pool is on device "
                f"{self._device_id}"
            )
        if not arr.flags.c_contiguous:
            arr = cp.ascontiguousarray(arr)  # a device-side copy, queued like any other
        return DeviceIds(arr, role)

    # ----------------------------------------------------------------- launching
    def _stream(self, stream: Any) -> Any:
        return self._cp.cuda.get_current_stream() if stream is None else stream

    def _table_ptr(self, side: Any) -> int:
        if side.table is None:
            return 0
        dev = self._tables.get(side.table)
        if dev is None:
            dev = self._cp.asarray(np.asarray(side.table, dtype=np.uint64))
            self._tables[side.table] = dev
        return int(dev.data.ptr)

    def _kernel(self, name: str) -> Any:
        """The module's kernel ``name`` (a ``cupy.RawKernel``), compiled once per device."""
        kernel = self._kernels.get(name)
        if kernel is None:
            kernel = _module(self._device_id).get_function(name)
            self._kernels[name] = kernel
        return kernel

    def _function_ptr(self, name: str) -> int:
        """The ``CUfunction`` handle of kernel ``name`` on the pool's device (looked up once:
        ``RawKernel.kernel`` is the ``cupy.cuda.function.Function`` of the current device,
        whose ``ptr`` is the handle)."""
        ptr = self._function_ptrs.get(name)
        if ptr is None:
            with self._cp.cuda.Device(self._device_id):
                ptr = int(self._kernel(name).kernel.ptr)
            self._function_ptrs[name] = ptr
        return ptr

    def _on_device(self) -> Any:
        """A context manager making the pool's device current, when it is not already."""
        cp = self._cp
        if int(cp.cuda.runtime.getDevice()) == self._device_id:
            return _NO_CONTEXT
        return cp.cuda.Device(self._device_id)

    def _choose_launch(self) -> None:
        """Launch through the CUDA driver with pre-filled argument blocks where this CuPy
        allows it, else through CuPy's kernel call; say which in :attr:`launch_path`.

        The driver path is taken only if ``cupy.cuda.driver`` has ``launchKernel`` and
        ``ctxGetCurrent``, a context is current, and a self-test launch through it (the id
        check kernel on two ids, one bad) records the bad position; any failure leaves the
        CuPy path, with the reason in :attr:`launch_note`.  Cost: one small launch and one
        synchronization, at construction.
        """
        cp = self._cp
        self._driver_launch = None
        try:
            driver = cp.cuda.driver
            launch, current = driver.launchKernel, driver.ctxGetCurrent
            context = int(current())
            if context == 0:
                raise RuntimeError("no CUDA context is current after allocating the pool")
            self._driver_launch, self._current_context, self._context = launch, current, context
            ids = cp.asarray(np.asarray([0, self._spec.num_blocks], dtype=np.int64))
            status = cp.full(1, STATUS_OK, dtype=np.uint64)
            self._check_launch(ids.data.ptr, 8, 2, status.data.ptr, self._stream(None))
            found = int(status.get()[0])
            if found != 1:
                raise RuntimeError(f"the self-test launch recorded {found}, expected 1")
        except Exception as exc:  # an unexpected CuPy or driver: keep CuPy's own launch
            self._driver_launch = None
            self.launch_path = LAUNCH_CUPY
            self.launch_note = (
                f"kernels launched by CuPy's kernel call: the driver launch is unavailable "
                f"({type(exc).__name__}: {exc})"
            )
            return
        self.launch_path = LAUNCH_DRIVER
        self.launch_note = "kernels launched by cupy.cuda.driver.launchKernel, one parameter block"

    def _run(
        self, name: str, grid: tuple[int, int, int], args: Any, params_address: int, stream: Any
    ) -> None:
        """Launch kernel ``name`` on ``stream`` with the argument block ``args`` (whose
        ``kernelParams`` array is at ``params_address``).

        Through the driver when the pool's context is current on this thread (the common
        case: one call of ``cuLaunchKernel``); otherwise -- a thread that has not used CUDA
        yet, another device current, or the CuPy launch path -- through CuPy's kernel call
        on the pool's device, which makes the context current first.
        """
        launch = self._driver_launch
        if launch is not None and self._current_context() == self._context:
            fn = self._function_ptrs.get(name) or self._function_ptr(name)
            launch(fn, grid[0], grid[1], grid[2], THREADS_PER_BLOCK, 1, 1, 0, stream.ptr,
                   params_address, 0)  # fmt: skip
            return
        with self._on_device():
            self._kernel(name)(grid, (THREADS_PER_BLOCK,), (args,), shared_mem=0, stream=stream)

    def _check_launch(self, idx: int, idx_bytes: int, n: int, status: int, stream: Any) -> None:
        """Queue the check of ``n`` device ids at ``idx`` against the pool size."""
        args, params = self._check_args, self._check_params
        args[0] = (idx, idx_bytes, n, self._spec.num_blocks, status)
        grid = (min(1024, -(-n // THREADS_PER_BLOCK)), 1, 1)
        self._run(CHECK_KERNEL, grid, args, int(params.ctypes.data), stream)

    def _launch(
        self,
        prep: Prepared,
        stream: Any,
        src_base: int,
        dst_base: int,
        src: Ids | None,
        dst: Ids | None,
        status: int = 0,
    ) -> None:
        """Queue one fused launch of ``prep`` on ``stream`` (None: the current stream).

        ``src`` / ``dst``: the ids of the indexed sides (None for a buffer side).  Host ids
        of a small batch travel in the argument block; others through the staging ring;
        device ids in place (``status``: the address of their check's status words).
        """
        plan = prep.plan
        if plan.n_pairs == 0:
            return
        s = self._cp.cuda.get_current_stream() if stream is None else stream
        if (
            plan.inline
            and not isinstance(src, DeviceIds)
            and not isinstance(dst, DeviceIds)
            and not status  # the inline kernel reads no status
        ):
            prep.set_inline(src_base, dst_base, src, dst)
            self._run(prep.kernel, prep.grid, prep.args, prep.params_address, s)
            return
        prep.set_bases(src_base, dst_base)
        staged = [x for x in (src, dst) if x is not None and not isinstance(x, DeviceIds)]
        with self._on_device():
            span, addresses = self._stage(staged, s) if staged else (None, [])
        found = iter(addresses)

        def where(ids: Ids | None) -> tuple[int, int]:
            if ids is None:
                return 0, 8
            if isinstance(ids, DeviceIds):
                return ids.address, ids.itemsize
            return next(found), 4

        (src_idx, src_bytes), (dst_idx, dst_bytes) = where(src), where(dst)
        prep.set_arrays(src_idx, src_bytes, dst_idx, dst_bytes, status)
        self._run(kernel_name(plan.vector_width), prep.grid, prep.args, prep.params_address, s)
        if span is not None and self._ring is not None:
            event = self._cp.cuda.Event(block=False, disable_timing=True)
            event.record(s)
            self._ring.retire(span, event)

    def _stage(self, lists: list[IdArray], stream: Any) -> tuple[Span, list[int]]:
        """Write host id lists into one span of the pinned ring and queue its upload on
        ``stream``; return the span and each list's device address.  Never synchronizes
        (unless the ring came round to a span a launch still reads)."""
        total = sum(len(ids) for ids in lists)
        ring = self._ring_for(total)
        span = ring.take(total)
        addresses = ring.write(span, lists)
        host_base = int(self._ring_keep[0].ctypes.data)
        self._cp.cuda.runtime.memcpyAsync(
            ring.device_address + span.start * 4,
            ring.host_address(span, host_base),
            total * 4,
            _MEMCPY_H2D,
            stream.ptr,
        )
        return span, addresses

    def _ring_for(self, count: int) -> StagingRing:
        ring = self._ring
        if ring is not None and count <= ring.capacity:
            return ring
        cp = self._cp
        capacity = RING_IDS
        while capacity < count:
            capacity *= 2
        if ring is not None:
            cp.cuda.runtime.deviceSynchronize()  # the old ring may still be read
        mem = cp.cuda.alloc_pinned_memory(capacity * 4)
        host = np.frombuffer(mem, dtype=np.int32, count=capacity)
        with cp.cuda.Device(self._device_id):
            dev = cp.empty(capacity, dtype=np.int32)
        self._ring_keep = (host, mem, dev)
        self._ring = StagingRing(host, int(dev.data.ptr))
        return self._ring

    # ----------------------------------------------------------------- device-checked ids
    def _check(self, stream: Any, sides: tuple[DeviceIds | None, DeviceIds | None]) -> int:
        """Queue the device check of each device id list; return the status address the
        copy launch reads."""
        cp = self._cp
        if self._status is None:
            with cp.cuda.Device(self._device_id):
                self._status = cp.full(2 * STATUS_SLOTS, STATUS_OK, dtype=np.uint64)
        slot = self._next_slot
        if slot in self._checks:
            self.check_device_ids()  # the slots came round: read them all first
        self._next_slot = (slot + 1) % STATUS_SLOTS
        self._checks[slot] = _Check(slot, sides)
        base = int(self._status.data.ptr) + 16 * slot
        s = self._stream(stream)
        for word, ids in enumerate(sides):
            if ids is not None and len(ids):
                self._check_launch(ids.address, ids.itemsize, len(ids), base + 8 * word, s)
        return base

    def check_device_ids(self) -> None:
        """Raise for the first device-checked call (in call order) that had a bad id.

        Such a call wrote nothing (see the module docstring).  Synchronizes the device. Raises
        :class:`~kachedb_radix.reference.blockpool.BlockIdRangeError` naming the argument, the
        position and the value; the calls checked so far are forgotten either way.
        """
        if not self._checks:
            return
        cp = self._cp
        with cp.cuda.Device(self._device_id):
            cp.cuda.runtime.deviceSynchronize()
            words = self._status.get()
            order = list(self._checks.values())  # insertion order: call order
            self._checks = {}
            self._status.fill(STATUS_OK)
            for check in order:
                for word, ids in enumerate(check.sides):
                    pos = int(words[2 * check.slot + word])
                    if ids is not None and pos != STATUS_OK:
                        value = int(ids.array[pos].get())
                        raise BlockIdRangeError(ids.role, pos, value, self._spec.num_blocks)

    # ----------------------------------------------------------------- buffers
    def _check_device_buffer(self, buf: Any, n: int, role: str) -> None:
        check_buffer(self._spec, buf, n, role, self._cp.ndarray, writable=True, where="device")
        if int(buf.device.id) != self._device_id:
            raise BufferLayoutError(
                f"{role} is on device {int(buf.device.id)} but the pool is on device "
                f"{self._device_id}"
            )

    def _empty(self, n: int, stream: Any) -> Any:
        """A new device buffer for ``n`` blocks, allocated in ``stream``'s order."""
        cp = self._cp
        with cp.cuda.Device(self._device_id), self._stream(stream):
            return cp.empty(self._spec.buffer_shape(n), dtype=self._spec.storage_dtype)

    def _buffer_fits(self, buf: Any, n: int) -> bool:
        """Whether ``buf`` is plainly a buffer for ``n`` blocks: a ``cupy.ndarray`` of the
        storage dtype and the canonical shape, C-contiguous, on the pool's device.  A
        subset of what :meth:`_check_device_buffer` accepts, in a few attribute reads; on
        False the caller runs that check, which raises the precise error.  O(1)."""
        shape = self._shapes.get(n)
        if shape is None:
            shape = self._shapes[n] = self._spec.buffer_shape(n)
        return (
            type(buf) is self._cp.ndarray
            and buf.dtype == self._dtype
            and buf.shape == shape
            and buf.flags.c_contiguous
            and buf.data.device_id == self._device_id
        )

    def _launch_small(
        self,
        op: str,
        n: int,
        buffer: int,
        src_base: int,
        dst_base: int,
        src: Sequence[int] | None,
        dst: Sequence[int] | None,
        stream: Any,
    ) -> None:
        """The fast path of a call with few host ids, already checked: one cached plan,
        its argument block given this call's pointers and ids, one launch."""
        prep = self._plans.get(op, n, buffer)
        prep.set_inline(src_base, dst_base, src, dst)
        s = self._cp.cuda.get_current_stream() if stream is None else stream
        self._run(prep.kernel, prep.grid, prep.args, prep.params_address, s)

    # ----------------------------------------------------------------- operations
    def _gather(self, ids: Ids, out: Any, stream: Any) -> None:
        ptr = int(out.data.ptr)
        status = self._check(stream, (ids, None)) if isinstance(ids, DeviceIds) else 0
        prep = self._plans.get(GATHER, len(ids), ptr)
        self._launch(prep, stream, self._pool_base, ptr, ids, None, status)

    def _scatter(self, ids: Ids, buf: Any, stream: Any) -> None:
        ptr = int(buf.data.ptr)
        status = self._check(stream, (None, ids)) if isinstance(ids, DeviceIds) else 0
        prep = self._plans.get(SCATTER, len(ids), ptr)
        self._launch(prep, stream, ptr, self._pool_base, None, ids, status)

    def copy(self, src_ids: BlockIds, dst_ids: BlockIds, stream: Any = None) -> None:
        """Copy block ``src_ids[i]`` to ``dst_ids[i]`` for all ``i`` (parallel assignment).

        Cost: one launch moving ``n * bytes_per_block`` bytes (disjoint sets), or two launches
        and a temporary buffer of that size (overlapping sets, or device ids).  Errors: as
        :meth:`BlockPool.copy`; nothing is queued if it raises.
        """
        small = small_disjoint_copy(src_ids, dst_ids, self._spec.num_blocks, INLINE_PAIRS)
        if small is not None:
            base = self._pool_base
            self._launch_small(COPY, len(small[0]), 0, base, base, *small, stream)
            return
        src = self._ids(src_ids, "src_ids")
        dst = self._ids(dst_ids, "dst_ids", unique=True)
        if len(src) != len(dst):
            raise LengthMismatchError(
                f"src_ids has {len(src)} ids but dst_ids has {len(dst)}; copies pair them up"
            )
        if len(src) == 0:
            return
        src_dev = src if isinstance(src, DeviceIds) else None
        dst_dev = dst if isinstance(dst, DeviceIds) else None
        if (
            not isinstance(src, DeviceIds)
            and not isinstance(dst, DeviceIds)
            and not overlap(src, dst)
        ):
            prep = self._plans.get(COPY, len(src))
            self._launch(prep, stream, self._pool_base, self._pool_base, src, dst)
            return
        # Overlapping sets (or sets only the device knows): through a temporary buffer.
        tmp = self._empty(len(src), stream)
        status = 0
        if src_dev is not None or dst_dev is not None:
            status = self._check(stream, (src_dev, dst_dev))
        ptr = int(tmp.data.ptr)
        self._launch(self._plans.get(GATHER, len(src), ptr), stream, self._pool_base, ptr, src,
                     None, status)  # fmt: skip
        self._launch(self._plans.get(SCATTER, len(dst), ptr), stream, ptr, self._pool_base,
                     None, dst, status)  # fmt: skip

    def copy_pairs(self, pairs: Iterable[tuple[int, int]], stream: Any = None) -> None:
        """:meth:`copy` taking ``[(src, dst), ...]``."""
        src, dst = split_pairs(pairs)
        self.copy(src, dst, stream)

    def gather(self, ids: BlockIds, out: Any = None, stream: Any = None) -> Any:
        """Gather blocks ``ids`` into a contiguous device buffer (``out`` or a new array).

        ``out`` must be a C-contiguous ``cupy.ndarray`` on the pool's device with shape
        ``spec.buffer_shape(len(ids))`` and the storage dtype.  Cost: one launch moving
        ``n * bytes_per_block`` bytes.  Errors: as :meth:`BlockPool.gather`.
        """
        small = small_ids(ids, self._spec.num_blocks, INLINE_PAIRS)
        if small is not None:
            if out is None:
                out = self._empty(len(small), stream)
            elif not self._buffer_fits(out, len(small)):
                self._check_device_buffer(out, len(small), "out")
            ptr = out.data.ptr
            self._launch_small(GATHER, len(small), ptr, self._pool_base, ptr, small, None, stream)
            return out
        b_ids = self._ids(ids, "ids")
        if out is None:
            out = self._empty(len(b_ids), stream)
        else:
            self._check_device_buffer(out, len(b_ids), "out")
        self._gather(b_ids, out, stream)
        return out

    def scatter(self, ids: BlockIds, buffer: Any, stream: Any = None) -> None:
        """Write device ``buffer[i]`` into block ``ids[i]``; ids must be unique.

        Cost: one launch moving ``n * bytes_per_block`` bytes.  Errors: as
        :meth:`BlockPool.scatter`, plus
        :class:`~kachedb_radix.reference.blockpool.BufferLayoutError` for a buffer that is not a
        device array on the pool's device.
        """
        small = small_ids(ids, self._spec.num_blocks, INLINE_PAIRS)
        if small is not None and len(set(small)) == len(small):
            if not self._buffer_fits(buffer, len(small)):
                self._check_device_buffer(buffer, len(small), "buffer")
            ptr = buffer.data.ptr
            self._launch_small(SCATTER, len(small), ptr, ptr, self._pool_base, None, small, stream)
            return
        b_ids = self._ids(ids, "ids", unique=True)
        self._check_device_buffer(buffer, len(b_ids), "buffer")
        self._scatter(b_ids, buffer, stream)

    # ----------------------------------------------------------------- host transfers
    def alloc_host_buffer(self, n: int) -> HostArray:
        """Pinned (page-locked) host buffer for ``n`` blocks, contents undefined."""
        shape = self._spec.buffer_shape(n)
        dtype = np.dtype(self._spec.storage_dtype)
        nbytes = self._spec.buffer_bytes(n)
        if nbytes == 0:
            return np.empty(shape, dtype=dtype)
        mem = self._cp.cuda.alloc_pinned_memory(nbytes)  # the array keeps `mem` alive
        return np.frombuffer(mem, dtype=dtype, count=nbytes // dtype.itemsize).reshape(shape)

    def _get_transfer_stream(self, stream: Any) -> Any:
        if stream is not None:
            return stream
        if self._transfer_stream is None:
            with self._cp.cuda.Device(self._device_id):
                self._transfer_stream = self._cp.cuda.Stream(non_blocking=True)
        return self._transfer_stream

    def _track(self, handle: CupyTransfer[T]) -> CupyTransfer[T]:
        self._pending = [h for h in self._pending if not h.done()]
        self._pending.append(handle)
        return handle

    def offload(
        self, ids: BlockIds, host_out: HostArray | None = None, stream: Any = None
    ) -> CupyTransfer[HostArray]:
        """Asynchronously copy blocks ``ids`` into host memory (``host_out`` or a new pinned
        buffer); ``handle.wait()`` returns it.

        Cost: one gather launch on the current stream into a device staging buffer of
        ``n * bytes_per_block`` bytes, then one device->host copy of that size on ``stream``
        (default: the pool's transfer stream).  Errors: as :meth:`gather`, with
        ``host_out`` checked as a host (numpy) buffer; nothing is queued if it raises.
        """
        cp = self._cp
        b_ids = self._ids(ids, "ids")
        n = len(b_ids)
        if host_out is not None:
            check_buffer(
                self._spec, host_out, n, "host_out", np.ndarray, writable=True, where="host"
            )
            host = host_out
        else:
            host = self.alloc_host_buffer(n)
        staging = self._empty(n, None)
        self._gather(b_ids, staging, None)
        gathered = cp.cuda.Event(disable_timing=True)
        gathered.record(cp.cuda.get_current_stream())
        side = self._get_transfer_stream(stream)
        side.wait_event(gathered)
        if host.nbytes:
            cp.cuda.runtime.memcpyAsync(
                host.ctypes.data, staging.data.ptr, host.nbytes, _MEMCPY_D2H, side.ptr
            )
        done = cp.cuda.Event(disable_timing=True)
        done.record(side)
        return self._track(CupyTransfer(done, host, (staging, host)))

    def restore(
        self, ids: BlockIds, host_buffer: HostArray, stream: Any = None
    ) -> CupyTransfer[None]:
        """Asynchronously write host ``host_buffer[i]`` into block ``ids[i]``.

        Cost: one host->device copy of ``n * bytes_per_block`` bytes into a staging buffer
        and one scatter launch, both on ``stream`` (default: the transfer stream), the scatter
        ordered after work already queued on the current stream.  Errors: as :meth:`scatter`,
        with ``host_buffer`` checked as a host (numpy) buffer; nothing is queued if it raises.
        """
        cp = self._cp
        b_ids = self._ids(ids, "ids", unique=True)
        n = len(b_ids)
        check_buffer(
            self._spec, host_buffer, n, "host_buffer", np.ndarray, writable=False, where="host"
        )
        before = cp.cuda.Event(disable_timing=True)
        before.record(cp.cuda.get_current_stream())
        side = self._get_transfer_stream(stream)
        staging = self._empty(n, side)
        if host_buffer.nbytes:
            cp.cuda.runtime.memcpyAsync(
                staging.data.ptr,
                host_buffer.ctypes.data,
                host_buffer.nbytes,
                _MEMCPY_H2D,
                side.ptr,
            )
        side.wait_event(before)
        self._scatter(b_ids, staging, side)
        done = cp.cuda.Event(disable_timing=True)
        done.record(side)
        return self._track(CupyTransfer(done, None, (staging, host_buffer)))

    def synchronize(self) -> None:
        """Wait for every outstanding transfer and for the current stream, then raise for a
        device-checked call that had a bad id (:meth:`check_device_ids`)."""
        for h in self._pending:
            h.wait()
        self._pending = []
        self._cp.cuda.get_current_stream().synchronize()
        self.check_device_ids()


class _NoContext:
    """A context manager that does nothing (the pool's device is already current)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_CONTEXT = _NoContext()
