"""Shared helpers for the block-pool tests: the twins, strategies, an obvious model, the error
matrix.

:data:`TWINS` holds one :class:`Twin` per implementation of ``BlockPool`` (``reference``:
NumPy, ``accel``: CuPy); a test parametrized over it (:data:`TWIN_PARAMS`) runs on both,
the accel twin skipping with the reason when no CUDA device is usable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import strategies as st

from kachedb_radix import accel, reference
from kachedb_radix.accel.blockpool import cupy_unavailable_reason
from kachedb_radix.reference.blockpool import (
    BlockIdRangeError,
    BlockIdTypeError,
    BufferDTypeError,
    BufferLayoutError,
    BufferShapeError,
    DuplicateDestinationError,
    KVDType,
    KVPoolError,
    Layout,
    LengthMismatchError,
    PoolSpec,
)

Array = npt.NDArray[Any]

GPU_SKIP_REASON = cupy_unavailable_reason()
requires_gpu = pytest.mark.skipif(
    GPU_SKIP_REASON is not None, reason=f"the CuPy twin cannot run: {GPU_SKIP_REASON}"
)


@dataclass(frozen=True)
class Twin:
    """One implementation of ``BlockPool`` and how to hand it device buffers.

    ``xp`` is the array module of its "device" memory (numpy for the reference, cupy for
    accel); :meth:`device` puts a host array there; :meth:`host` brings one back.
    """

    name: str

    @property
    def pool_class(self) -> Any:
        return (reference if self.name == "reference" else accel).BlockPool

    @property
    def xp(self) -> Any:
        if self.name == "reference":
            return np
        import cupy

        return cupy

    def device(self, array: Array) -> Any:
        return array if self.name == "reference" else self.xp.asarray(array)

    def host(self, array: Any) -> Array:
        return array if isinstance(array, np.ndarray) else array.get()

    def pool(self, spec: PoolSpec, data: Array | None = None, **kw: Any) -> Any:
        """A fresh pool of this twin (contents ``data`` when given); asserts which twin ran."""
        cls = self.pool_class
        made = cls(spec, **kw) if data is None else cls.from_canonical(spec, data, **kw)
        assert made.implementation == self.name, (made.implementation, self.name)
        return made


TWINS = (Twin("reference"), Twin("accel"))
TWIN_PARAMS = [
    pytest.param(TWINS[0], id="reference"),
    pytest.param(TWINS[1], id="accel", marks=requires_gpu),
]


def random_canonical(spec: PoolSpec, seed: int, n: int | None = None) -> Array:
    """Random raw bytes viewed as ``n`` canonical blocks (default: the whole pool).

    Random fp16 bytes include NaNs with payloads, infinities and negative zeros, so comparing
    bit patterns checks that moves are bit-exact.
    """
    rows = spec.num_blocks if n is None else n
    nbytes = spec.buffer_bytes(rows)
    raw = np.random.default_rng(seed).integers(0, 256, size=nbytes, dtype=np.uint8)
    return raw.view(np.dtype(spec.storage_dtype)).reshape(spec.buffer_shape(rows))


def bits(a: Any) -> Array:
    """Raw bytes of an array (host or device), for bit-exact comparison."""
    host = a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else a
    return np.ascontiguousarray(host).view(np.uint8)


def assert_same_bits(actual: Any, expected: Any) -> None:
    a, e = bits(actual), bits(expected)
    assert a.shape == e.shape, f"shapes differ: {a.shape} vs {e.shape}"
    if not np.array_equal(a, e):
        diff = np.flatnonzero(a.reshape(-1) != e.reshape(-1))
        raise AssertionError(f"{diff.size} bytes differ, first at byte {int(diff[0])}")


# ----------------------------------------------------------------------------- obvious model
def model_gather(data: Array, ids: list[int]) -> Array:
    """Per-block slice semantics of gather on a canonical array."""
    out = np.empty((len(ids), *data.shape[1:]), dtype=data.dtype)
    for i, b in enumerate(ids):
        out[i] = data[b]
    return out


def model_copy(data: Array, src: list[int], dst: list[int]) -> Array:
    """Parallel assignment: every destination gets the *old* contents of its source."""
    new = data.copy()
    for s, d in zip(src, dst, strict=True):
        new[d] = data[s]
    return new


def model_scatter(data: Array, ids: list[int], buf: Array) -> Array:
    new = data.copy()
    for i, b in enumerate(ids):
        new[b] = buf[i]
    return new


# ----------------------------------------------------------------------------- strategies
@st.composite
def pool_specs(draw: st.DrawFn, layout: Layout | None = None, max_blocks: int = 12) -> PoolSpec:
    return PoolSpec(
        num_blocks=draw(st.integers(1, max_blocks)),
        block_size=draw(st.integers(1, 4)),
        num_layers=draw(st.integers(1, 3)),
        num_kv_heads=draw(st.integers(1, 2)),
        head_dim=draw(st.sampled_from([1, 3, 4, 8, 16])),
        dtype=draw(st.sampled_from(list(KVDType))),
        layout=layout if layout is not None else draw(st.sampled_from(list(Layout))),
    )


@dataclass(frozen=True)
class Op:
    """One pool operation in a random program."""

    kind: str  # "copy" | "gather" | "scatter"
    a: tuple[int, ...]
    b: tuple[int, ...] = ()
    seed: int = 0


@st.composite
def ops(draw: st.DrawFn, num_blocks: int) -> Op:
    kind = draw(st.sampled_from(["copy", "gather", "scatter"]))
    ids = st.integers(0, num_blocks - 1)
    if kind == "gather":
        return Op(kind, tuple(draw(st.lists(ids, max_size=2 * num_blocks))))
    dst = tuple(draw(st.lists(ids, unique=True, max_size=num_blocks)))
    if kind == "scatter":
        return Op(kind, dst, seed=draw(st.integers(0, 2**32 - 1)))
    src = tuple(draw(st.lists(ids, min_size=len(dst), max_size=len(dst))))
    return Op(kind, src, dst)


def run_program(
    gpu: Any,
    ref: Any,
    spec: PoolSpec,
    program: list[Op],
    xp: Any,
    after_each: Callable[[], None] | None = None,
) -> None:
    """Run ``program`` on both pools (gathers compared bit for bit); ``xp`` uploads buffers."""
    for op in program:
        if op.kind == "gather":
            assert_same_bits(gpu.gather(op.a), ref.gather(op.a))
        elif op.kind == "copy":
            gpu.copy(op.a, op.b)
            ref.copy(op.a, op.b)
        else:
            buf = random_canonical(spec, op.seed, len(op.a))
            gpu.scatter(op.a, xp.asarray(buf))
            ref.scatter(op.a, buf)
        if after_each is not None:
            after_each()


# ----------------------------------------------------------------------------- error matrix
@dataclass(frozen=True)
class ErrorCase:
    """A call that must raise ``error`` (message containing ``fragment``) and write nothing.

    ``call(pool, xp)`` performs it; ``xp`` is the array module of device buffers (numpy for
    the reference pool, cupy for the CuPy pool).  ``spec`` pools have 4 blocks.
    """

    name: str
    call: Callable[[Any, Any], object]
    error: type[KVPoolError]
    fragment: str


def _buf(pool: Any, xp: Any, n: int, dtype: str | None = None) -> Any:
    spec: PoolSpec = pool.spec
    return xp.zeros(spec.buffer_shape(n), dtype=dtype or spec.storage_dtype)


def _host(pool: Any, n: int) -> Array:
    spec: PoolSpec = pool.spec
    return np.zeros(spec.buffer_shape(n), dtype=spec.storage_dtype)


def _wrong_dtype(pool: Any) -> str:
    return "float32" if pool.spec.storage_dtype != "float32" else "float16"


def _noncontig(pool: Any, xp: Any, n: int) -> Any:
    spec: PoolSpec = pool.spec
    big = xp.zeros((2 * n, *spec.block_shape), dtype=spec.storage_dtype)
    return big[::2]


def _readonly(pool: Any, n: int) -> Array:
    h = _host(pool, n)
    h.flags.writeable = False
    return h


ERROR_CASES: list[ErrorCase] = [
    ErrorCase("copy src too big", lambda p, xp: p.copy([0, 4], [1, 2]), BlockIdRangeError,
              "src_ids[1] = 4"),
    ErrorCase("copy dst negative", lambda p, xp: p.copy([0, 1], [2, -1]), BlockIdRangeError,
              "dst_ids[1] = -1"),
    ErrorCase("copy float id", lambda p, xp: p.copy([1.0], [2]), BlockIdTypeError,
              "src_ids[0] = 1.0"),
    ErrorCase("copy bool id", lambda p, xp: p.copy([0, True], [2, 3]), BlockIdTypeError,
              "src_ids[1] = True"),
    ErrorCase("copy numpy bool id", lambda p, xp: p.copy([0], [np.bool_(True)]),
              BlockIdTypeError, "dst_ids[0]"),
    ErrorCase("copy str id", lambda p, xp: p.copy(["1"], [2]), BlockIdTypeError, "'1'"),
    ErrorCase("copy None id", lambda p, xp: p.copy([0], [None]), BlockIdTypeError, "None"),
    ErrorCase("copy ids not a list", lambda p, xp: p.copy(3, [2]), BlockIdTypeError, "int"),
    ErrorCase("copy ids a string", lambda p, xp: p.copy("01", "23"), BlockIdTypeError, "str"),
    ErrorCase("copy 2-D id array", lambda p, xp: p.copy(np.zeros((1, 1), dtype=np.int64), [1]),
              BlockIdTypeError, "one-dimensional"),
    ErrorCase("copy float id array", lambda p, xp: p.copy(np.array([0.0]), [1]),
              BlockIdTypeError, "float64"),
    ErrorCase("copy bool id array", lambda p, xp: p.copy(np.array([True]), [1]),
              BlockIdTypeError, "bool"),
    ErrorCase("copy length mismatch", lambda p, xp: p.copy([0, 1], [2]), LengthMismatchError,
              "2 ids"),
    ErrorCase("copy duplicate dst", lambda p, xp: p.copy([0, 1, 2], [3, 2, 3]),
              DuplicateDestinationError, "block 3 twice"),
    ErrorCase("copy bad id after valid ones", lambda p, xp: p.copy([0, 1, 2], [1, 2, 99]),
              BlockIdRangeError, "dst_ids[2] = 99"),
    ErrorCase("copy_pairs not a pair", lambda p, xp: p.copy_pairs([(0, 1), (1, 2, 3)]),
              BlockIdTypeError, "pairs[1]"),
    ErrorCase("copy_pairs bad id", lambda p, xp: p.copy_pairs([(0, 1), (1, 7)]),
              BlockIdRangeError, "dst_ids[1] = 7"),
    ErrorCase("gather bad id", lambda p, xp: p.gather([0, 5], out=_buf(p, xp, 2)),
              BlockIdRangeError, "ids[1] = 5"),
    ErrorCase("gather out wrong dtype",
              lambda p, xp: p.gather([0], out=_buf(p, xp, 1, _wrong_dtype(p))),
              BufferDTypeError, "dtype"),
    ErrorCase("gather out wrong count", lambda p, xp: p.gather([0, 1], out=_buf(p, xp, 3)),
              BufferShapeError, "shape"),
    ErrorCase("gather out not contiguous",
              lambda p, xp: p.gather([0, 1], out=_noncontig(p, xp, 2)),
              BufferLayoutError, "C-contiguous"),
    ErrorCase("gather out a list", lambda p, xp: p.gather([0], out=[0]), BufferLayoutError,
              "list"),
    ErrorCase("scatter duplicate ids", lambda p, xp: p.scatter([1, 1], _buf(p, xp, 2)),
              DuplicateDestinationError, "block 1 twice"),
    ErrorCase("scatter bad id", lambda p, xp: p.scatter([1, -2], _buf(p, xp, 2)),
              BlockIdRangeError, "ids[1] = -2"),
    ErrorCase("scatter wrong dtype",
              lambda p, xp: p.scatter([1], _buf(p, xp, 1, _wrong_dtype(p))),
              BufferDTypeError, "dtype"),
    ErrorCase("scatter wrong count", lambda p, xp: p.scatter([1, 2], _buf(p, xp, 1)),
              BufferShapeError, "shape"),
    ErrorCase("scatter not contiguous",
              lambda p, xp: p.scatter([1, 2], _noncontig(p, xp, 2)),
              BufferLayoutError, "C-contiguous"),
    ErrorCase("offload host_out wrong count",
              lambda p, xp: p.offload([0, 1], host_out=_host(p, 1)), BufferShapeError, "shape"),
    ErrorCase("offload host_out read-only",
              lambda p, xp: p.offload([0], host_out=_readonly(p, 1)), BufferLayoutError,
              "read-only"),
    ErrorCase("offload bad id", lambda p, xp: p.offload([9]), BlockIdRangeError, "ids[0] = 9"),
    ErrorCase("restore duplicate ids", lambda p, xp: p.restore([2, 2], _host(p, 2)),
              DuplicateDestinationError, "block 2 twice"),
    ErrorCase("restore wrong count", lambda p, xp: p.restore([2, 3], _host(p, 3)),
              BufferShapeError, "shape"),
    ErrorCase("restore bool id", lambda p, xp: p.restore([False], _host(p, 1)),
              BlockIdTypeError, "False"),
    ErrorCase("write_block wrong shape",
              lambda p, xp: p.write_block(0, np.zeros((1,), dtype=p.spec.storage_dtype)),
              BufferShapeError, "shape"),
    ErrorCase("read_block bad id", lambda p, xp: p.read_block(4), BlockIdRangeError, "= 4"),
]  # fmt: skip

ERROR_SPEC_KW: dict[str, Any] = {
    "num_blocks": 4,
    "block_size": 2,
    "num_layers": 2,
    "num_kv_heads": 2,
    "head_dim": 4,
    "dtype": KVDType.FP16,
}
