"""The KV block pool's accelerated twin: blocks in CUDA device memory, moved with CuPy.

Its reference twin is :class:`reference.blockpool.pool.BlockPool` (NumPy); the two share
the public API, and the tests run both through one suite, selected by parameter.

Importing this module never imports CuPy: CuPy is loaded on first use, so the package imports
cleanly on machines without CuPy or without a GPU.  :func:`cupy_unavailable_reason` says why
the backend cannot run (``"cupy not installed"`` or ``"no CUDA device: <message>"``); every
constructor raises :class:`~reference.blockpool.BackendUnavailableError` with that reason.

Semantics are those of :class:`reference.blockpool.pool.BlockPool`, bit for bit:

* All arguments are validated on the host before any device work is queued; a call that
  raises a :class:`~reference.blockpool.KVPoolError` has written nothing.
* ``copy`` is a parallel assignment.  When the source and destination sets are disjoint it is
  one fused kernel launch; when they overlap the sources are first gathered into a temporary
  buffer and then scattered (two launches, ``n * bytes_per_block`` bytes of scratch).
* ``gather``, ``scatter`` and disjoint ``copy`` are one launch of the fused kernel of
  :mod:`accel.blockpool.kernels` whatever the layout; for LAYER_MAJOR the launch covers all
  ``2 * layers`` chunks of every block through a device table of per-layer base pointers.

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
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from accel.blockpool.kernels import (
    KERNEL_SOURCE,
    THREADS_PER_BLOCK,
    LaunchPlan,
    Side,
    buffer_side,
    copy_plan,
    gather_plan,
    kernel_name,
    launch_args,
    launch_geometry,
    pool_side,
    scatter_plan,
)
from reference.blockpool.errors import BackendUnavailableError, BufferLayoutError
from reference.blockpool.layout import Layout, PoolSpec
from reference.blockpool.pool import check_block, check_canonical
from reference.blockpool.validation import (
    BlockIds,
    check_buffer,
    check_unique,
    normalize_ids,
    split_pairs,
    validate_copy,
)

T = TypeVar("T")
HostArray = npt.NDArray[Any]

_MEMCPY_H2D = 1
_MEMCPY_D2H = 2


@functools.cache
def cupy_unavailable_reason() -> str | None:
    """``None`` if CuPy imports and sees a CUDA device, else the reason.  Computed once."""
    try:
        import cupy
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
    import cupy

    return cupy


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


class BlockPool:
    """KV block pool in device memory (see the module docstring for semantics).

    Construction cost: one zero-filled allocation of ``spec.total_bytes`` (LAYER_MAJOR: one
    per layer) on the current device.  Raises :class:`~reference.blockpool.BackendUnavailableError`
    without CuPy or a device, and :class:`~reference.blockpool.PoolTooLargeError` (before
    allocating) if the pool exceeds ``memory_budget`` or the device's free memory (free
    memory reported by the driver plus bytes cached free in CuPy's memory pool).
    """

    #: Which twin this is ("reference" or "accel"), so a test can tell which one ran.
    implementation = "accel"

    def __init__(self, spec: PoolSpec, *, memory_budget: int | None = None) -> None:
        cp = _cupy()
        self._cp = cp
        if memory_budget is not None:
            spec.check_fits(memory_budget, "memory_budget")
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
        self._tables: dict[tuple[int, ...], Any] = {}
        if self._side.table is not None:
            self._tables[self._side.table] = cp.asarray(
                np.asarray(self._side.table, dtype=np.uint64)
            )
        self._pending: list[CupyTransfer[Any]] = []
        self._transfer_stream: Any = None

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
        (b,) = normalize_ids([block_id], self._spec.num_blocks, "block_id")
        check_block(self._spec, data)
        buf = self._cp.asarray(np.ascontiguousarray(data)[None])
        self._launch(scatter_plan(self._spec, self._side, self._buf_side(buf), (b,)), None)

    # ----------------------------------------------------------------- launching
    def _stream(self, stream: Any) -> Any:
        return self._cp.cuda.get_current_stream() if stream is None else stream

    def _buf_side(self, buf: Any) -> Side:
        return buffer_side(self._spec, int(buf.data.ptr))

    def _table_ptr(self, side: Side) -> int:
        if side.table is None:
            return 0
        dev = self._tables.get(side.table)
        if dev is None:
            dev = self._cp.asarray(np.asarray(side.table, dtype=np.uint64))
            self._tables[side.table] = dev
        return int(dev.data.ptr)

    def _launch(self, plan: LaunchPlan, stream: Any) -> None:
        """Queue one fused launch of ``plan`` on ``stream`` (None: the current stream)."""
        if plan.n_pairs == 0:
            return
        cp = self._cp
        stream = self._stream(stream)
        lists = [ids for ids in (plan.src_idx, plan.dst_idx) if ids is not None]
        host_idx = np.asarray([i for ids in lists for i in ids], dtype=np.int64)
        with cp.cuda.Device(self._device_id), stream:
            # Allocated on `stream`, so the memory pool cannot reuse it before the kernel ran.
            dev_idx = cp.asarray(host_idx)
            base = int(dev_idx.data.ptr)
            src_idx = base if plan.src_idx is not None else 0
            dst_idx = 0
            if plan.dst_idx is not None:
                dst_idx = base + (8 * plan.n_pairs if plan.src_idx is not None else 0)
            args = launch_args(
                plan, self._table_ptr(plan.src), src_idx, self._table_ptr(plan.dst), dst_idx
            )
            fn = _module(self._device_id).get_function(kernel_name(plan.vector_width))
            fn(launch_geometry(plan), (THREADS_PER_BLOCK,), args)

    def _check_device_buffer(self, buf: Any, n: int, role: str) -> None:
        check_buffer(self._spec, buf, n, role, self._cp.ndarray, writable=True, where="device")
        if int(buf.device.id) != self._device_id:
            raise BufferLayoutError(
                f"{role} is on device {int(buf.device.id)} but the pool is on device "
                f"{self._device_id}"
            )

    # ----------------------------------------------------------------- operations
    def copy(self, src_ids: BlockIds, dst_ids: BlockIds, stream: Any = None) -> None:
        """Copy block ``src_ids[i]`` to ``dst_ids[i]`` for all ``i`` (parallel assignment).

        Cost: one launch moving ``n * bytes_per_block`` bytes (disjoint sets), or two launches
        and a temporary buffer of that size (overlapping sets).  Errors: as
        :meth:`BlockPool.copy`; nothing is queued if it raises.
        """
        plan = validate_copy(self._spec, src_ids, dst_ids)
        if not plan.src:
            return
        if not plan.overlapping:
            self._launch(copy_plan(self._spec, self._side, plan.src, plan.dst), stream)
            return
        cp = self._cp
        with cp.cuda.Device(self._device_id), self._stream(stream):
            tmp = cp.empty(self._spec.buffer_shape(len(plan.src)), dtype=self._spec.storage_dtype)
        tmp_side = self._buf_side(tmp)
        self._launch(gather_plan(self._spec, self._side, tmp_side, plan.src), stream)
        self._launch(scatter_plan(self._spec, self._side, tmp_side, plan.dst), stream)

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
        b_ids = normalize_ids(ids, self._spec.num_blocks, "ids")
        cp = self._cp
        if out is None:
            with cp.cuda.Device(self._device_id), self._stream(stream):
                out = cp.empty(self._spec.buffer_shape(len(b_ids)), dtype=self._spec.storage_dtype)
        else:
            self._check_device_buffer(out, len(b_ids), "out")
        self._launch(gather_plan(self._spec, self._side, self._buf_side(out), b_ids), stream)
        return out

    def scatter(self, ids: BlockIds, buffer: Any, stream: Any = None) -> None:
        """Write device ``buffer[i]`` into block ``ids[i]``; ids must be unique.

        Cost: one launch moving ``n * bytes_per_block`` bytes.  Errors: as
        :meth:`BlockPool.scatter`, plus :class:`~reference.blockpool.BufferLayoutError` for a
        buffer that is not a device array on the pool's device.
        """
        b_ids = normalize_ids(ids, self._spec.num_blocks, "ids")
        check_unique(b_ids, "ids")
        self._check_device_buffer(buffer, len(b_ids), "buffer")
        self._launch(scatter_plan(self._spec, self._side, self._buf_side(buffer), b_ids), stream)

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
        b_ids = normalize_ids(ids, self._spec.num_blocks, "ids")
        n = len(b_ids)
        if host_out is not None:
            check_buffer(
                self._spec, host_out, n, "host_out", np.ndarray, writable=True, where="host"
            )
            host = host_out
        else:
            host = self.alloc_host_buffer(n)
        staging = self.gather(b_ids)
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
        b_ids = normalize_ids(ids, self._spec.num_blocks, "ids")
        check_unique(b_ids, "ids")
        n = len(b_ids)
        check_buffer(
            self._spec, host_buffer, n, "host_buffer", np.ndarray, writable=False, where="host"
        )
        before = cp.cuda.Event(disable_timing=True)
        before.record(cp.cuda.get_current_stream())
        side = self._get_transfer_stream(stream)
        with cp.cuda.Device(self._device_id), side:
            staging = cp.empty(self._spec.buffer_shape(n), dtype=self._spec.storage_dtype)
        if host_buffer.nbytes:
            cp.cuda.runtime.memcpyAsync(
                staging.data.ptr,
                host_buffer.ctypes.data,
                host_buffer.nbytes,
                _MEMCPY_H2D,
                side.ptr,
            )
        side.wait_event(before)
        self._launch(scatter_plan(self._spec, self._side, self._buf_side(staging), b_ids), side)
        done = cp.cuda.Event(disable_timing=True)
        done.record(side)
        return self._track(CupyTransfer(done, None, (staging, host_buffer)))

    def synchronize(self) -> None:
        """Wait for every outstanding transfer and for the current stream."""
        for h in self._pending:
            h.wait()
        self._pending = []
        self._cp.cuda.get_current_stream().synchronize()
