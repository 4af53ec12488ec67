"""A CPU stand-in for the part of CuPy the accel block pool uses, kernels included.

"Device" memory is one NumPy byte arena; device addresses are ``DEVICE_BASE`` plus an
offset into it, so they can never be mistaken for host addresses.  Host (pinned) memory
is ordinary process memory, reached by address with ctypes, as the CUDA runtime would.
Every operation completes at once (streams and events are trivially in order); events
time on the host clock, so the benchmarks run on the fake too (their figures mean nothing).
Freed arrays give their memory back, as CuPy's memory pool does.

The kernels are not re-implemented: :class:`FakeFunction` decodes the launch's parameter bytes by
the declarations of the CUDA source (its structs laid out by C's rules, parsed from
:data:`kachedb_radix.accel.blockpool.kernels.KERNEL_SOURCE`, not from the Python that fills them),
reads tables, index arrays and status words from the arena, and runs
:func:`kachedb_radix.accel.blockpool.kernels.emulate`, which follows the kernel's addressing formula
and refuses a launch whose chunks overlap.  So the whole pool -- validation, cached plans, inline
ids, the staging ring, device-checked ids -- runs end to end on the CPU; only the CUDA bodies
themselves are left to the GPU run (and NVRTC compiles them).

Both launch paths of CuPy 13 and 14 are there, with their real signatures and refusals:
``cupy.cuda.driver.launchKernel`` (eleven integers; the parameters read through the
``kernelParams`` pointer array at the call, as ``cuLaunchKernel`` copies them then; the
function handle, the stream and the calling thread's current context checked) and the
kernel call (``RawKernel.__call__(grid, block, args, **kwargs)``: ``shared_mem`` and
``stream`` by keyword only; arguments marshalled as CuPy does, a NumPy array only of one
element).  A thread has no current context until it makes a runtime call, as with the
driver, so the pool's handling of a fresh thread is exercised too.
"""

from __future__ import annotations

import ctypes
import operator
import re
import threading
import time
import types
import weakref
from collections import defaultdict
from typing import Any, ClassVar

import numpy as np

from kachedb_radix.accel.blockpool import kernels

DEVICE_BASE = 1 << 44
ARENA_BYTES = 1 << 28


class CUDARuntimeError(RuntimeError):
    """Stand-in for ``cupy.cuda.runtime.CUDARuntimeError``."""


class CUDADriverError(RuntimeError):
    """Stand-in for ``cupy.cuda.driver.CUDADriverError``."""


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
    FakeFunction.routes.clear()


class _Memory:
    """``cupy.cuda.MemoryPointer``: the address and the device of an array's memory."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr
        self.device_id = 0


class _Device:
    def __init__(self, device_id: int = 0) -> None:
        self.id = device_id

    def __enter__(self) -> _Device:
        _ensure_context()  # cudaSetDevice makes the primary context current (CUDA 12+)
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
    _ensure_context()  # an allocation makes the device's context current
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
    """``cupy.cuda.Stream(null=False, non_blocking=False, ptds=False, priority=None)``;
    ``ptr`` is its handle (0: the legacy default stream)."""

    known: ClassVar[set[int]] = {0}

    def __init__(
        self, null: bool = False, non_blocking: bool = False, ptds: bool = False,
        priority: int | None = None,
    ) -> None:  # fmt: skip
        self.ptr = 0 if null else 0x5700 + 16 * len(_Stream.known)
        _Stream.known.add(self.ptr)

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def wait_event(self, event: Any) -> None:
        return None


_STREAM = _Stream(null=True)


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
        _ensure_context()
        return ARENA_BYTES - ARENA.top, ARENA_BYTES

    @staticmethod
    def deviceSynchronize() -> None:
        _ensure_context()

    @staticmethod
    def memcpyAsync(dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
        _ensure_context()
        if kind == 1:  # host to device
            ARENA.view(dst - DEVICE_BASE, nbytes)[:] = np.frombuffer(
                ctypes.string_at(src, nbytes), dtype=np.uint8
            )
        elif kind == 2:  # device to host
            chunk = ARENA.view(src - DEVICE_BASE, nbytes)
            ctypes.memmove(dst, chunk.ctypes.data, nbytes)
        else:
            ARENA.view(dst - DEVICE_BASE, nbytes)[:] = ARENA.view(src - DEVICE_BASE, nbytes)


# ----------------------------------------------------------------------------- contexts

#: The handle of the (one) device's primary context.
CONTEXT = 0xC0C0_0000


class _ThreadState(threading.local):
    context = 0  # a thread starts with no current context, as with the CUDA driver


_THREAD = _ThreadState()


def _ensure_context() -> None:
    """What a runtime call does on a thread: make the primary context current."""
    _THREAD.context = CONTEXT


# ----------------------------------------------------------------------------- kernels

_C_SIZES = {"unsigned long long": 8, "long long": 8, "int": 4}
_C_FORMATS = {"unsigned long long": "<u8", "long long": "<i8", "int": "<i4"}


class CStruct:
    """A plain C struct of the kernel source, laid out by C's rules (each member aligned to
    its size, the whole padded to its largest member), independently of the NumPy mirror the
    pool builds: a disagreement shows as wrong values in the emulated launch."""

    def __init__(self, name: str, body: str) -> None:
        self.name = name
        self.fields: list[tuple[str, str, int, int]] = []  # name, C type, count, offset
        offset, align = 0, 1
        member = re.compile(r"(unsigned long long|long long|int) (\w+)(?:\[(\d+)\])?;")
        for line in (x.strip() for x in body.strip().splitlines()):
            found = member.fullmatch(line)
            if found is None:
                raise ValueError(f"struct {name}: cannot lay out {line!r}")
            ctype, field, count = found.group(1), found.group(2), int(found.group(3) or 1)
            size = _C_SIZES[ctype]
            offset = -(-offset // size) * size
            self.fields.append((field, ctype, count, offset))
            offset += size * count
            align = max(align, size)
        self.size = -(-offset // align) * align

    def decode(self, raw: bytes) -> dict[str, Any]:
        if len(raw) != self.size:
            raise ValueError(f"struct {self.name} is {self.size} bytes, got {len(raw)}")
        out: dict[str, Any] = {}
        for field, ctype, count, offset in self.fields:
            values = np.frombuffer(raw, dtype=_C_FORMATS[ctype], count=count, offset=offset)
            out[field] = int(values[0]) if count == 1 else [int(v) for v in values]
        return out


def _structs() -> dict[str, CStruct]:
    """Every plain data struct of the kernel source (no member functions)."""
    pattern = re.compile(r"struct (\w+) \{([^{}]*)\};")
    return {name: CStruct(name, body) for name, body in pattern.findall(kernels.KERNEL_SOURCE)}


STRUCTS = _structs()


def _signatures() -> dict[str, list[tuple[str, str, int]]]:
    """Parameters (name, C type, size in bytes) of every extern "C" kernel, in declaration
    order, from the source."""
    out: dict[str, list[tuple[str, str, int]]] = {}
    pattern = re.compile(
        r'extern "C" __global__ void(?: __launch_bounds__\(\d+\))?\s+(\w+)\(([^)]*)\)'
    )
    for name, params in pattern.findall(kernels.KERNEL_SOURCE):
        decoded = []
        for param in (p.split() for p in params.replace("\n", " ").split(",") if p.strip()):
            ctype = " ".join(t for t in param[:-1] if t != "const")
            size = STRUCTS[ctype].size if ctype in STRUCTS else _C_SIZES[ctype]
            decoded.append((param[-1], ctype, size))
        out[name] = decoded
    return out


SIGNATURES = _signatures()
MAX_BLOCK_THREADS = 1024
MAX_GRID = (2**31 - 1, 65535, 65535)


def _marshal(value: Any) -> bytes:
    """The bytes CuPy's kernel call passes for one argument (``cupy.cuda.function``'s
    ``_pointer``): a device array by its address, a NumPy array of exactly one element by
    its contents, a NumPy scalar as itself, a Python int as int64."""
    if isinstance(value, ndarray):
        return np.uint64(value.data.ptr).tobytes()
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise TypeError(
                f"You are trying to pass a numpy.ndarray of shape {value.shape} as a kernel "
                "parameter. Only numpy.ndarrays of size one can be passed by value."
            )
        return bytes(np.ascontiguousarray(value).view(np.uint8))
    if isinstance(value, np.generic):
        return value.tobytes()
    if isinstance(value, bool):
        return np.bool_(value).tobytes()
    if isinstance(value, int):
        return np.int64(value).tobytes()
    raise TypeError(f"Unsupported type {type(value)}")


class FakeFunction:
    """A kernel of the module (``cupy.cuda.function.Function``): ``ptr`` is its handle for
    :func:`launchKernel`; calling it is CuPy's launch.  Either way the parameter bytes are
    decoded by the source's declarations and the launch is emulated."""

    launches: ClassVar[list[str]] = []  # the kernels launched, in order (a class-wide log)
    routes: ClassVar[list[str]] = []  # how each was launched: "driver" or "call"
    by_ptr: ClassVar[dict[int, FakeFunction]] = {}

    def __init__(self, name: str) -> None:
        if name not in SIGNATURES:
            raise CUDARuntimeError(f"no kernel named {name}")
        self.name = name
        self.params = SIGNATURES[name]
        self.ptr = 0xF0_0000 + 16 * len(FakeFunction.by_ptr)
        FakeFunction.by_ptr[self.ptr] = self

    def __call__(
        self, grid: tuple[int, ...], block: tuple[int, ...], args: Any, shared_mem: int = 0,
        stream: Any = None, enable_cooperative_groups: bool = False,
    ) -> None:  # fmt: skip
        # cupy.cuda.function.Function.__call__: grid and block are typed tuples.
        if not isinstance(grid, tuple) or not isinstance(block, tuple):
            raise TypeError("grid and block must be tuples")
        _ensure_context()
        raw = [_marshal(v) for v in args]
        if len(raw) != len(self.params):
            raise TypeError(f"{self.name} takes {len(self.params)} arguments, got {len(raw)}")
        for (param, _, size), got in zip(self.params, raw, strict=True):
            if len(got) != size:
                raise TypeError(f"{self.name}: {param} is {size} bytes, got {len(got)}")
        self.run(grid, block, raw, "call")

    def run(
        self, grid: tuple[int, ...], block: tuple[int, ...], raw: list[bytes], route: str
    ) -> None:
        """Check the geometry as the driver would, decode the parameter, emulate."""
        grid3 = (*grid, 1, 1)[:3]
        block3 = (*block, 1, 1)[:3]
        if any(g < 1 or g > m for g, m in zip(grid3, MAX_GRID, strict=True)):
            raise CUDADriverError(f"CUDA_ERROR_INVALID_VALUE: grid {grid3}")
        if min(block3) < 1 or int(np.prod(block3)) > MAX_BLOCK_THREADS:
            raise CUDADriverError(f"CUDA_ERROR_INVALID_VALUE: block {block3}")
        if int(np.prod(block3)) > kernels.THREADS_PER_BLOCK:  # __launch_bounds__
            raise CUDADriverError(f"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: block {block3}")
        ((_, ctype, _),) = self.params  # every kernel of the pool takes one struct
        a = STRUCTS[ctype].decode(raw[0])
        FakeFunction.launches.append(self.name)
        FakeFunction.routes.append(route)
        if self.name == kernels.CHECK_KERNEL:
            if a["n"] == 0:
                return
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
            if plan.n_pairs > kernels.INLINE_PAIRS:
                raise AssertionError(f"{self.name} launched for {plan.n_pairs} pairs")
            src = a["src_ids"][: plan.n_pairs] if a["flags"] & 1 else None
            dst = a["dst_ids"][: plan.n_pairs] if a["flags"] & 2 else None
        plan = kernels.LaunchPlan(
            plan.src, plan.dst, src is not None, dst is not None,
            plan.n_pairs, plan.n_segments, plan.chunk_bytes,
        )  # fmt: skip
        if plan.vector_width % width:
            raise AssertionError(f"{self.name} launched where only {plan.vector_width} fits")
        kernels.emulate(ARENA.mem, plan, src, dst)

    @staticmethod
    def _side(a: dict[str, Any], side: str) -> kernels.Side:
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
    def _array(a: dict[str, Any], side: str, n: int) -> list[int] | None:
        address = a[f"{side}_idx"]
        if not address:
            return None
        dtype = np.int32 if a[f"{side}_idx_bytes"] == 4 else np.int64
        return [int(x) for x in ARENA.read(address, dtype, n)]


class _NoopFunction:
    """A kernel outside the pool's source (the benchmarks' busy-wait): launching it does
    nothing, as every launch completes at once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ptr = 0

    def __call__(
        self, grid: tuple[int, ...], block: tuple[int, ...], args: Any, shared_mem: int = 0,
        stream: Any = None, enable_cooperative_groups: bool = False,
    ) -> None:  # fmt: skip
        if not isinstance(grid, tuple) or not isinstance(block, tuple):
            raise TypeError("grid and block must be tuples")
        for value in args:
            _marshal(value)


class RawKernel:
    """``cupy.RawKernel``: ``kernel`` is the device's Function (compiled on first use);
    calling it takes ``shared_mem`` and ``stream`` as keywords only, as CuPy 13 and 14 do
    (``__call__(self, grid, block, args, **kwargs)``)."""

    def __init__(
        self, code: str, name: str, options: tuple[str, ...] = (), backend: str = "nvrtc", *,
        translate_cucomplex: bool = False, enable_cooperative_groups: bool = False,
        jitify: Any = None,
    ) -> None:  # fmt: skip
        self.code = code
        self.name = name
        self._function: FakeFunction | _NoopFunction | None = None

    @property
    def kernel(self) -> FakeFunction | _NoopFunction:
        if self._function is None:
            _ensure_context()  # loading a module needs a context
            if self.code == kernels.KERNEL_SOURCE:
                self._function = FakeFunction(self.name)
            else:
                self._function = _NoopFunction(self.name)
        return self._function

    def __call__(
        self, grid: tuple[int, ...], block: tuple[int, ...], args: Any, **kwargs: Any
    ) -> None:
        self.kernel(grid, block, args, enable_cooperative_groups=False, **kwargs)


class RawModule:
    def __init__(self, code: str, options: tuple[str, ...] = ()) -> None:
        if code != kernels.KERNEL_SOURCE:
            raise CUDARuntimeError("unexpected kernel source")
        self.code = code

    def get_function(self, name: str) -> RawKernel:
        kernel = RawKernel(self.code, name)
        kernel.kernel  # noqa: B018  (CuPy looks the function up here, failing for a bad name)
        return kernel


def _unsigned(name: str, value: Any) -> int:
    v = operator.index(value)
    if v < 0:
        raise OverflowError(f"can't convert negative value to unsigned int ({name})")
    if v >= 2**32:
        raise OverflowError(f"value too large to convert to unsigned int ({name})")
    return v


def _intptr(name: str, value: Any) -> int:
    v = operator.index(value)
    if not -(2**63) <= v < 2**63:
        raise OverflowError(f"Python int too large to convert to C long ({name})")
    return v


class _Driver:
    """``cupy.cuda.driver`` (``cupy_backends.cuda.api.driver``): the calls the pool makes."""

    CUDADriverError = CUDADriverError

    @staticmethod
    def ctxGetCurrent() -> int:
        return _THREAD.context

    @staticmethod
    def launchKernel(
        f: int, grid_dim_x: int, grid_dim_y: int, grid_dim_z: int, block_dim_x: int,
        block_dim_y: int, block_dim_z: int, shared_mem_bytes: int, stream: int,
        kernel_params: int, extra: int,
    ) -> None:  # fmt: skip
        """``cuLaunchKernel``, with CuPy's argument conversion (all eleven positional or by
        name, no defaults): the parameters are read from ``kernel_params`` (an array of one
        pointer per kernel parameter) now, as the driver copies them at the call."""
        dims = [_unsigned(n, v) for n, v in (
            ("grid_dim_x", grid_dim_x), ("grid_dim_y", grid_dim_y), ("grid_dim_z", grid_dim_z),
            ("block_dim_x", block_dim_x), ("block_dim_y", block_dim_y),
            ("block_dim_z", block_dim_z), ("shared_mem_bytes", shared_mem_bytes))]  # fmt: skip
        fn_ptr, stream_ptr = _intptr("f", f), _intptr("stream", stream)
        params_ptr, extra_ptr = _intptr("kernel_params", kernel_params), _intptr("extra", extra)
        if _THREAD.context != CONTEXT:
            raise CUDADriverError("CUDA_ERROR_INVALID_CONTEXT: invalid device context")
        function = FakeFunction.by_ptr.get(fn_ptr)
        if function is None:
            raise CUDADriverError("CUDA_ERROR_INVALID_HANDLE: invalid resource handle")
        if stream_ptr not in _Stream.known:
            raise CUDADriverError("CUDA_ERROR_INVALID_HANDLE: unknown stream")
        if dims[6] > 48 * 1024:
            raise CUDADriverError("CUDA_ERROR_INVALID_VALUE: shared memory")
        if extra_ptr:
            if params_ptr:
                raise CUDADriverError("CUDA_ERROR_INVALID_VALUE: kernelParams and extra")
            raise NotImplementedError("the fake reads kernelParams only")
        if not params_ptr:
            raise CUDADriverError("CUDA_ERROR_INVALID_VALUE: no kernel parameters")
        pointers = (ctypes.c_uint64 * len(function.params)).from_address(params_ptr)
        raw = [ctypes.string_at(int(p), size)
               for p, (_, _, size) in zip(pointers, function.params, strict=True)]  # fmt: skip
        function.run(tuple(dims[:3]), tuple(dims[3:6]), raw, "driver")


def _elapsed_ms(start: _Event, end: _Event) -> float:
    return (end.ns - start.ns) / 1e6


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
        driver=_Driver,
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
