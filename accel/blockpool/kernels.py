"""Addressing plans and CUDA source for the fused block-copy kernel.

One launch moves ``n_pairs * n_segments`` chunks of ``chunk_bytes`` bytes.  Chunk ``(p, s)``
is read from ``src.address(s, src_idx[p])`` and written to ``dst.address(s, dst_idx[p])``
where, for each side,

    address(s, b) = (table[s] if table else base + s * seg_stride) + b * block_stride

* A BLOCK_MAJOR pool is one segment per block: ``base`` = storage pointer,
  ``block_stride`` = ``bytes_per_block``.
* A LAYER_MAJOR pool has ``2 * layers`` segments; ``table[2 * l + kv]`` is the address of
  block 0 of K (kv=0) or V (kv=1) in layer ``l``'s tensor, and ``block_stride`` is
  ``chunk_bytes``.  The table lives in device memory so one launch covers every layer.
* A contiguous buffer (canonical ``[n, layers, 2, ...]``) uses ``base`` = buffer pointer,
  ``seg_stride`` = ``segment_bytes`` and ``block_stride`` = ``bytes_per_block``.

An absent index list means the identity (``idx[p] == p``), used for the buffer side.

Invariants: plans are pure data built from integer addresses, so they can be checked on the
CPU by :func:`emulate` over a flat byte arena; the CUDA kernel and :func:`emulate` implement the
same formula.  Within one launch no two chunks may write overlapping bytes and no chunk may
read bytes another writes (callers stage overlapping copies through a buffer).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from reference.blockpool.layout import Layout, PoolSpec

THREADS_PER_BLOCK = 256
UNROLL = 4
MAX_GRID_X = 2**31 - 1
MAX_GRID_Y = 65535

VECTOR_TYPES: dict[int, str] = {
    16: "uint4",
    8: "uint2",
    4: "unsigned int",
    2: "unsigned short",
    1: "unsigned char",
}


@dataclass(frozen=True)
class Side:
    """Address formula of one side (source or destination) of a launch."""

    base: int
    seg_stride: int
    block_stride: int
    table: tuple[int, ...] | None = None

    def address(self, seg: int, block: int) -> int:
        start = self.table[seg] if self.table is not None else self.base + seg * self.seg_stride
        return start + block * self.block_stride

    def alignment_terms(self) -> tuple[int, ...]:
        """Every integer whose divisibility bounds the usable vector width."""
        starts = self.table if self.table is not None else (self.base, self.seg_stride)
        return (*starts, self.block_stride)


@dataclass(frozen=True)
class LaunchPlan:
    """Everything one fused launch needs (except the device copies of tables and indices)."""

    src: Side
    dst: Side
    src_idx: tuple[int, ...] | None
    dst_idx: tuple[int, ...] | None
    n_pairs: int
    n_segments: int
    chunk_bytes: int

    @property
    def vector_width(self) -> int:
        """Widest access (16, 8, 4, 2 or 1 bytes) that every chunk address allows."""
        terms = (self.chunk_bytes, *self.src.alignment_terms(), *self.dst.alignment_terms())
        for width in (16, 8, 4, 2):
            if all(t % width == 0 for t in terms):
                return width
        return 1

    @property
    def total_bytes(self) -> int:
        return self.n_pairs * self.n_segments * self.chunk_bytes


def pool_side(spec: PoolSpec, pointers: Sequence[int]) -> Side:
    """Side for a pool whose storage array(s) start at ``pointers`` (1, or one per layer)."""
    if spec.layout is Layout.BLOCK_MAJOR:
        if len(pointers) != 1:
            raise ValueError(f"block-major pool has 1 storage array, got {len(pointers)}")
        return Side(pointers[0], 0, spec.bytes_per_block)
    if len(pointers) != spec.num_layers:
        raise ValueError(f"layer-major pool has {spec.num_layers} arrays, got {len(pointers)}")
    kv_stride = spec.num_blocks * spec.chunk_bytes  # distance from K to V inside one layer
    table = tuple(p + kv * kv_stride for p in pointers for kv in (0, 1))
    return Side(0, 0, spec.chunk_bytes, table)


def buffer_side(spec: PoolSpec, pointer: int) -> Side:
    """Side for a canonical contiguous buffer starting at ``pointer``."""
    return Side(pointer, spec.segment_bytes, spec.bytes_per_block)


def _plan(
    spec: PoolSpec,
    src: Side,
    dst: Side,
    src_idx: tuple[int, ...] | None,
    dst_idx: tuple[int, ...] | None,
    n: int,
) -> LaunchPlan:
    return LaunchPlan(src, dst, src_idx, dst_idx, n, spec.num_segments, spec.segment_bytes)


def gather_plan(spec: PoolSpec, pool: Side, buf: Side, ids: tuple[int, ...]) -> LaunchPlan:
    """Pool blocks ``ids`` -> buffer rows ``0..n-1``."""
    return _plan(spec, pool, buf, ids, None, len(ids))


def scatter_plan(spec: PoolSpec, pool: Side, buf: Side, ids: tuple[int, ...]) -> LaunchPlan:
    """Buffer rows ``0..n-1`` -> pool blocks ``ids`` (ids must be unique)."""
    return _plan(spec, buf, pool, None, ids, len(ids))


def copy_plan(spec: PoolSpec, pool: Side, src: tuple[int, ...], dst: tuple[int, ...]) -> LaunchPlan:
    """Pool blocks ``src`` -> pool blocks ``dst`` (sets must be disjoint, dst unique)."""
    return _plan(spec, pool, pool, src, dst, len(src))


def launch_geometry(plan: LaunchPlan) -> tuple[int, int]:
    """Grid ``(x, y)``: x walks chunks (grid-stride), y tiles one chunk's vectors."""
    vecs = plan.chunk_bytes // plan.vector_width
    n_chunks = plan.n_pairs * plan.n_segments
    per_y = THREADS_PER_BLOCK * UNROLL
    gy = max(1, min(MAX_GRID_Y, -(-vecs // per_y)))
    gx = max(1, min(MAX_GRID_X, n_chunks))
    return gx, gy


def kernel_name(width: int) -> str:
    return f"kvpool_copy_chunks_v{width}"


def _kernel(width: int) -> str:
    return f"""
extern "C" __global__ void __launch_bounds__({THREADS_PER_BLOCK})
{kernel_name(width)}(
    unsigned long long src_table, unsigned long long src_base,
    long long src_seg_stride, long long src_block_stride, unsigned long long src_idx,
    unsigned long long dst_table, unsigned long long dst_base,
    long long dst_seg_stride, long long dst_block_stride, unsigned long long dst_idx,
    long long n_pairs, long long n_segments, long long chunk_vecs)
{{
    kvpool_copy_body<{VECTOR_TYPES[width]}>(
        src_table, src_base, src_seg_stride, src_block_stride, src_idx,
        dst_table, dst_base, dst_seg_stride, dst_block_stride, dst_idx,
        n_pairs, n_segments, chunk_vecs);
}}
"""


KERNEL_SOURCE = (
    r"""
// Fused scattered block copy; see accel/blockpool/kernels.py for the addressing formula.
#define KVPOOL_UNROLL """
    + str(UNROLL)
    + r"""

__device__ __forceinline__ unsigned long long kvpool_addr(
    unsigned long long table, unsigned long long base, long long seg_stride,
    long long block_stride, long long seg, long long block)
{
    unsigned long long start = table
        ? reinterpret_cast<const unsigned long long*>(table)[seg]
        : base + (unsigned long long)(seg * seg_stride);
    return start + (unsigned long long)(block * block_stride);
}

template <typename T>
__device__ __forceinline__ void kvpool_copy_body(
    unsigned long long src_table, unsigned long long src_base,
    long long src_seg_stride, long long src_block_stride, unsigned long long src_idx,
    unsigned long long dst_table, unsigned long long dst_base,
    long long dst_seg_stride, long long dst_block_stride, unsigned long long dst_idx,
    long long n_pairs, long long n_segments, long long chunk_vecs)
{
    const long long* sidx = reinterpret_cast<const long long*>(src_idx);
    const long long* didx = reinterpret_cast<const long long*>(dst_idx);
    const long long n_chunks = n_pairs * n_segments;
    const long long bd = blockDim.x;
    const long long step = (long long)gridDim.y * bd * KVPOOL_UNROLL;
    for (long long c = blockIdx.x; c < n_chunks; c += gridDim.x) {
        const long long pair = c / n_segments;
        const long long seg = c - pair * n_segments;
        const long long sb = sidx ? sidx[pair] : pair;
        const long long db = didx ? didx[pair] : pair;
        const T* __restrict__ s = reinterpret_cast<const T*>(
            kvpool_addr(src_table, src_base, src_seg_stride, src_block_stride, seg, sb));
        T* __restrict__ d = reinterpret_cast<T*>(
            kvpool_addr(dst_table, dst_base, dst_seg_stride, dst_block_stride, seg, db));
        long long v = (long long)blockIdx.y * bd * KVPOOL_UNROLL + threadIdx.x;
        // Full tiles: issue every load before any store so UNROLL loads are in flight.
        // __ldg / __stwb make the accesses global-space (the pointers come from integers);
        // __ldg's read-only path is valid because no chunk read here is written in the launch.
        for (; v + (KVPOOL_UNROLL - 1) * bd < chunk_vecs; v += step) {
            T r[KVPOOL_UNROLL];
#pragma unroll
            for (int u = 0; u < KVPOOL_UNROLL; ++u) r[u] = __ldg(s + v + u * bd);
#pragma unroll
            for (int u = 0; u < KVPOOL_UNROLL; ++u) __stwb(d + v + u * bd, r[u]);
        }
        // Ragged tail of this thread's last tile.
#pragma unroll
        for (int u = 0; u < KVPOOL_UNROLL; ++u) {
            const long long w = v + u * bd;
            if (w < chunk_vecs) __stwb(d + w, __ldg(s + w));
        }
    }
}
"""
    + "".join(_kernel(w) for w in sorted(VECTOR_TYPES, reverse=True))
)
"""CUDA C++ source defining one kernel per vector width (see :func:`kernel_name`)."""


def kernel_vector_schedule(
    chunk_vecs: int, grid_y: int, threads: int = THREADS_PER_BLOCK
) -> npt.NDArray[np.int64]:
    """Vector indices of one chunk in the order the kernel's loops visit them.

    A literal port of the kernel's ``v`` loops (full tiles, then tail) for every
    ``(blockIdx.y, threadIdx.x)``; used on the CPU to check that the loops cover each vector of
    a chunk exactly once.  Cost O(chunk_vecs + grid_y * threads).
    """
    out: list[int] = []
    step = grid_y * threads * UNROLL
    for by in range(grid_y):
        for t in range(threads):
            v = by * threads * UNROLL + t
            while v + (UNROLL - 1) * threads < chunk_vecs:
                out.extend(v + u * threads for u in range(UNROLL))
                v += step
            out.extend(v + u * threads for u in range(UNROLL) if v + u * threads < chunk_vecs)
    return np.asarray(out, dtype=np.int64)


def emulate(arena: npt.NDArray[np.uint8], plan: LaunchPlan) -> None:
    """Execute ``plan`` on the CPU, treating addresses as offsets into the byte ``arena``.

    Follows the kernel's chunk formula exactly; raises ``ValueError`` if two chunks of the
    launch write overlapping bytes or one reads bytes another writes (which the kernel
    forbids).  Cost O(plan.total_bytes).
    """
    n = plan.chunk_bytes
    moves: list[tuple[int, int]] = []
    for p in range(plan.n_pairs):
        sb = plan.src_idx[p] if plan.src_idx is not None else p
        db = plan.dst_idx[p] if plan.dst_idx is not None else p
        for s in range(plan.n_segments):
            moves.append((plan.src.address(s, sb), plan.dst.address(s, db)))
    writes = sorted(d for _, d in moves)
    for a, b in itertools.pairwise(writes):
        if b < a + n:
            raise ValueError(f"chunks written at {a} and {b} overlap")
    write_set = np.zeros(arena.size, dtype=bool)
    for _, d in moves:
        write_set[d : d + n] = True
    for s_addr, _ in moves:
        if write_set[s_addr : s_addr + n].any():
            raise ValueError(f"chunk read at {s_addr} overlaps a chunk written in the launch")
    for s_addr, d in moves:
        arena[d : d + n] = arena[s_addr : s_addr + n]


def as_index_array(ids: tuple[int, ...]) -> npt.NDArray[np.int64]:
    return np.asarray(ids, dtype=np.int64)


def launch_args(
    plan: LaunchPlan, src_table: int, src_idx: int, dst_table: int, dst_idx: int
) -> tuple[Any, ...]:
    """Kernel argument tuple; table/index arguments are device addresses (0 = absent)."""
    u64, i64 = np.uint64, np.int64
    return (
        u64(src_table),
        u64(plan.src.base),
        i64(plan.src.seg_stride),
        i64(plan.src.block_stride),
        u64(src_idx),
        u64(dst_table),
        u64(plan.dst.base),
        i64(plan.dst.seg_stride),
        i64(plan.dst.block_stride),
        u64(dst_idx),
        i64(plan.n_pairs),
        i64(plan.n_segments),
        i64(plan.chunk_bytes // plan.vector_width),
    )
