"""A CPU stand-in for the part of CuPy the accel block pool uses, kernels included.

"Device" memory is one NumPy byte arena; device addresses are ``DEVICE_BASE`` plus an
offset into it, so they can never be mistaken for host addresses.  Host (pinned) memory
is ordinary process memory, reached by address with ctypes, as the CUDA runtime would.
Every operation completes at once (streams and events are trivially in order); events
time on the host clock, so the benchmarks run on the fake too (their figures mean nothing).
Freed arrays give their memory back, as CuPy's memory pool does.

The kernels are not re-implemented: :class:`FakeFunction` decodes the launch arguments in
the order the CUDA source declares them (parsed from
:data:`accel.blockpool.kernels.KERNEL_SOURCE`, not from the Python that builds them), reads
tables, index arrays and status words from the arena, and runs
:func:`accel.blockpool.kernels.emulate`, which follows the kernel's addressing formula and
refuses a launch whose chunks overlap.  So the whole pool -- validation, cached plans,
inline ids, the staging ring, device-checked ids -- runs end to end on the CPU; only the
CUDA bodies themselves are left to the GPU run (and NVRTC compiles them).
"""

from __future__ import annotations

import ctypes
import re
import time
import types
import weakref
from collections import defaultdict
from typing import Any, ClassVar

import numpy as np

from accel.blockpool import kernels

DEVICE_BASE = 1 << 44
ARENA_BYTES = 1 << 28


class CUDARuntimeError(RuntimeError):
    """Stand-in for ``cupy.cuda.runtime.CUDARuntimeError``."""


class _Arena:
    def __init__(self, nbytes: int) -> None:
        self.mem = np.zeros(nbytes, dtype=np.uint8)
        self.top = 256
        self.base = int(self.mem.ctypes.data)
        self.generation = 0
        self.free: defaultdict[int, list[int]] = defaultdict(list)

    def alloc(self, nbytes: int) -> int:
        size = -(-max(nbytes, 1) // 256) * 256
        if self.free[size]:
            return self.free[size].pop()
        start = self.top
        if start + size > self.mem.size:
            raise MemoryError("fake device arena exhausted")
        self.top = start + size
        return start

    def release(self, generation: int, offset: int, nbytes: int) -> None:
        """Give an allocation back (ignored when the arena was reset since)."""
        if generation == self.generation:
            self.free[-(-max(nbytes, 1) // 256) * 256].append(offset)

    def reset(self) -> None:
        self.top = 256
        self.generation += 1
        self.free.clear()

    def view(self, offset: int, nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        return self.mem[offset : offset + nbytes]

    def read(self, address: int, dtype: Any, count: int) -> np.ndarray[Any, Any]:
        dt = np.dtype(dtype)
        off = address - DEVICE_BASE
        out: np.ndarray[Any, Any] = self.mem[off : off + count * dt.itemsize].view(dt).copy()
        return out


ARENA = _Arena(ARENA_BYTES)


def reset() -> None:
    """Forget every allocation (between tests; nothing allocated before may be used)."""
    ARENA.reset()
    FakeFunction.launches.clear()


class _Memory:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class _Device:
    def __init__(self, device_id: int = 0) -> None:
        self.id = device_id

    def __enter__(self) -> _Device:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def synchronize(self) -> None:
        return None


class ndarray:
    """A device array: a NumPy array living in the arena (or a derived host-side array)."""

    def __init__(self, a: np.ndarray[Any, Any], owner: ndarray | None = None) -> None:
        self._a = a
        self._owner = owner  # the array whose allocation this one views (kept alive)

    def _root(self) -> ndarray:
        return self if self._owner is None else self._owner

    # metadata
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._a.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        dt: np.dtype[Any] = self._a.dtype
        return dt

    @property
    def ndim(self) -> int:
        return int(self._a.ndim)

    @property
    def size(self) -> int:
        return int(self._a.size)

    @property
    def nbytes(self) -> int:
        return int(self._a.nbytes)

    @property
    def flags(self) -> Any:
        return self._a.flags

    @property
    def device(self) -> _Device:
        return _Device(0)

    @property
    def data(self) -> _Memory:
        return _Memory(DEVICE_BASE + int(self._a.ctypes.data) - ARENA.base)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "typestr": self._a.dtype.str,
            "data": (self.data.ptr, False),
            "version": 3,
            "strides": None if self._a.flags.c_contiguous else self._a.strides,
        }

    # contents
    def get(self) -> np.ndarray[Any, Any]:
        return self._a.copy()

    def set(self, host: np.ndarray[Any, Any]) -> None:
        self._a[...] = host

    def fill(self, value: Any) -> None:
        self._a.fill(value)

    def view(self, dtype: Any) -> ndarray:
        return ndarray(self._a.view(dtype), self._root())

    def transpose(self, *axes: int) -> ndarray:
        return ndarray(self._a.transpose(*axes), self._root())

    def __len__(self) -> int:
        return len(self._a)

    def __getitem__(self, key: Any) -> ndarray:
        return ndarray(np.asarray(self._a[key]), self._root())

    def __setitem__(self, key: Any, value: Any) -> None:
        self._a[key] = value._a if isinstance(value, ndarray) else value


def _new(shape: Any, dtype: Any) -> ndarray:
    dt = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    count = int(np.prod(shape, dtype=np.int64))
    off = ARENA.alloc(count * dt.itemsize)
    out = ndarray(ARENA.view(off, count * dt.itemsize).view(dt).reshape(shape))
    weakref.finalize(out, ARENA.release, ARENA.generation, off, count * dt.itemsize)
    return out


def empty(shape: Any, dtype: Any = np.float64) -> ndarray:
    return _new(shape, dtype)


def zeros(shape: Any, dtype: Any = np.float64) -> ndarray:
    out = _new(shape, dtype)
    out.fill(0)
    return out


def full(shape: Any, value: Any, dtype: Any = np.float64) -> ndarray:
    out = _new(shape, dtype)
    out.fill(value)
    return out


def asarray(a: Any, dtype: Any = None) -> ndarray:
    if isinstance(a, ndarray):
        return a
    if hasattr(a, "__cuda_array_interface__"):
        cai = a.__cuda_array_interface__
        dt = np.dtype(cai["typestr"])
        count = int(np.prod(cai["shape"], dtype=np.int64))
        off = cai["data"][0] - DEVICE_BASE
        return ndarray(ARENA.view(off, count * dt.itemsize).view(dt).reshape(cai["shape"]))
    host = np.asarray(a, dtype=dtype)
    out = _new(host.shape, host.dtype)
    out._a[...] = host
    return out


def ascontiguousarray(a: ndarray) -> ndarray:
    if a._a.flags.c_contiguous and ARENA.base <= int(a._a.ctypes.data) < ARENA.base + ARENA_BYTES:
        return a
    out = _new(a.shape, a.dtype)
    out._a[...] = a._a
    return out


def stack(arrays: list[ndarray], axis: int = 0) -> ndarray:
    return ndarray(np.stack([x._a for x in arrays], axis=axis))


class _Stream:
    def __init__(self, non_blocking: bool = False) -> None:
        self.ptr = 0

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None


_STREAM = _Stream()


class _Event:
    def __init__(self, block: bool = False, disable_timing: bool = False) -> None:
        self.done = True
        self.ns = time.perf_counter_ns()

    def record(self, stream: Any = None) -> None:
        self.ns = time.perf_counter_ns()

    def synchronize(self) -> None:
        return None


class _Runtime:
    CUDARuntimeError = CUDARuntimeError

    @staticmethod
    def getDeviceCount() -> int:
        return 1

    @staticmethod
    def getDevice() -> int:
        return 0

    @staticmethod
    def getDeviceProperties(device: int) -> dict[str, Any]:
        # no clockRate, as with CUDA 13
        return {"name": b"fake CuPy on the CPU", "totalGlobalMem": ARENA_BYTES}

    @staticmethod
    def memGetInfo() -> tuple[int, int]:
        return ARENA_BYTES - ARENA.top, ARENA_BYTES

    @staticmethod
    def deviceSynchronize() -> None:
        return None

    @staticmethod
    def memcpyAsync(dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
        if kind == 1:  # host to device
            ARENA.view(dst - DEVICE_BASE, nbytes)[:] = np.frombuffer(
                ctypes.string_at(src, nbytes), dtype=np.uint8
            )
        elif kind == 2:  # device to host
            chunk = ARENA.view(src - DEVICE_BASE, nbytes)
            ctypes.memmove(dst, chunk.ctypes.data, nbytes)
        else:
            ARENA.view(dst - DEVICE_BASE, nbytes)[:] = ARENA.view(src - DEVICE_BASE, nbytes)


# ----------------------------------------------------------------------------- kernels


def _signatures() -> dict[str, list[str]]:
    """Parameter names of every extern "C" kernel, in declaration order, from the source."""
    out: dict[str, list[str]] = {}
    pattern = re.compile(
        r'extern "C" __global__ void(?: __launch_bounds__\(\d+\))?\s+(\w+)\(([^)]*)\)'
    )
    for name, params in pattern.findall(kernels.KERNEL_SOURCE):
        out[name] = [p.split()[-1] for p in params.replace("\n", " ").split(",") if p.strip()]
    return out


SIGNATURES = _signatures()


class FakeFunction:
    """A kernel of the module: decodes its arguments by name and emulates the launch."""

    launches: ClassVar[list[str]] = []  # the kernels launched, in order (a class-wide log)

    def __init__(self, name: str) -> None:
        if name not in SIGNATURES:
            raise CUDARuntimeError(f"no kernel named {name}")
        self.name = name
        self.params = SIGNATURES[name]

    def __call__(
        self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...], *,
        shared_mem: int = 0, stream: Any = None,
    ) -> None:  # fmt: skip
        # Keyword-only like cupy.RawKernel.__call__ (CuPy 14), so a positional call fails here.
        if len(args) != len(self.params):
            raise TypeError(f"{self.name} takes {len(self.params)} arguments, got {len(args)}")
        for value in args:
            if not isinstance(value, np.integer):
                raise TypeError(f"{self.name}: argument {value!r} is not a numpy integer")
        a = {p: int(v) for p, v in zip(self.params, args, strict=True)}
        FakeFunction.launches.append(self.name)
        if self.name == kernels.CHECK_KERNEL:
            ids = ARENA.read(a["idx"], np.int32 if a["idx_bytes"] == 4 else np.int64, a["n"])
            bad = np.flatnonzero((ids < 0) | (ids >= a["num_blocks"]))
            if bad.size:
                status = ARENA.read(a["status"], np.uint64, 1)[0]
                new = np.uint64(min(int(status), int(bad[0])))
                off = a["status"] - DEVICE_BASE
                ARENA.view(off, 8).view(np.uint64)[0] = new
            return
        width = int(self.name.rsplit("_v", 1)[1])
        plan = kernels.LaunchPlan(
            self._side(a, "src"),
            self._side(a, "dst"),
            True,
            True,
            a["n_pairs"],
            a["n_segments"],
            a["chunk_vecs"] * width,
        )
        if self.name.startswith("kvpool_copy_array"):
            if a["status"]:
                words = ARENA.read(a["status"], np.uint64, 2)
                if any(int(w) != kernels.STATUS_OK for w in words):
                    return
            src = self._array(a, "src", plan.n_pairs)
            dst = self._array(a, "dst", plan.n_pairs)
        else:
            half = kernels.INLINE_PAIRS // 2
            s_words = [a[f"s{i}"] for i in range(half)]
            d_words = [a[f"d{i}"] for i in range(half)]
            src = kernels.unpack_inline(s_words, plan.n_pairs) if a["flags"] & 1 else None
            dst = kernels.unpack_inline(d_words, plan.n_pairs) if a["flags"] & 2 else None
        plan = kernels.LaunchPlan(
            plan.src, plan.dst, src is not None, dst is not None,
            plan.n_pairs, plan.n_segments, plan.chunk_bytes,
        )  # fmt: skip
        if plan.vector_width % width:
            raise AssertionError(f"{self.name} launched where only {plan.vector_width} fits")
        kernels.emulate(ARENA.mem, plan, src, dst)

    @staticmethod
    def _side(a: dict[str, int], side: str) -> kernels.Side:
        table = a[f"{side}_table"]
        entries = None
        if table:
            # the number of segments bounds the table's length
            raw = ARENA.read(table, np.uint64, a["n_segments"])
            entries = tuple(int(x) - DEVICE_BASE for x in raw)
        base = a[f"{side}_base"]
        return kernels.Side(
            base - DEVICE_BASE if base else 0,
            a[f"{side}_seg_stride"],
            a[f"{side}_block_stride"],
            entries,
        )

    @staticmethod
    def _array(a: dict[str, int], side: str, n: int) -> list[int] | None:
        address = a[f"{side}_idx"]
        if not address:
            return None
        dtype = np.int32 if a[f"{side}_idx_bytes"] == 4 else np.int64
        return [int(x) for x in ARENA.read(address, dtype, n)]


class RawKernel:
    """A kernel outside the pool's source (the benchmarks' busy-wait): launching it does
    nothing, as every launch completes at once."""

    def __init__(self, code: str, name: str, options: tuple[str, ...] = ()) -> None:
        self.name = name

    def __call__(
        self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]
    ) -> None:
        return None


def _elapsed_ms(start: _Event, end: _Event) -> float:
    return (end.ns - start.ns) / 1e6


class RawModule:
    def __init__(self, code: str, options: tuple[str, ...] = ()) -> None:
        if code != kernels.KERNEL_SOURCE:
            raise CUDARuntimeError("unexpected kernel source")

    def get_function(self, name: str) -> FakeFunction:
        return FakeFunction(name)


class _MemoryPool:
    def free_bytes(self) -> int:
        return 0

    def free_all_blocks(self) -> None:
        return None


def _alloc_pinned_memory(nbytes: int) -> bytearray:
    return bytearray(nbytes)


def module() -> types.ModuleType:
    """A module object that stands in for ``cupy`` (install it in ``sys.modules``)."""
    cp = types.ModuleType("cupy")
    cuda = types.SimpleNamespace(
        runtime=_Runtime,
        Device=_Device,
        Stream=_Stream,
        Event=_Event,
        get_current_stream=lambda: _STREAM,
        get_elapsed_time=_elapsed_ms,
        alloc_pinned_memory=_alloc_pinned_memory,
    )
    names = {
        "cuda": cuda,
        "ndarray": ndarray,
        "empty": empty,
        "zeros": zeros,
        "full": full,
        "asarray": asarray,
        "ascontiguousarray": ascontiguousarray,
        "stack": stack,
        "RawModule": RawModule,
        "RawKernel": RawKernel,
        "get_default_memory_pool": _MemoryPool,
        "uint8": np.uint8,
        "__version__": "fake",
    }
    for key, value in names.items():
        setattr(cp, key, value)
    return cp
