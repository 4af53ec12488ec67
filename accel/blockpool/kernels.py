"""Addressing plans and CUDA source for the fused block-copy kernel.

One launch moves ``n_pairs * n_segments`` chunks of ``chunk_bytes`` bytes.  Chunk ``(p, s)``
is read from ``src.address(s, src_index(p))`` and written to ``dst.address(s, dst_index(p))``
where, for each side,

    address(s, b) = (table[s] if table else base + s * seg_stride) + b * block_stride

* A BLOCK_MAJOR pool is one segment per block: ``base`` = storage pointer,
  ``block_stride`` = ``bytes_per_block``.
* A LAYER_MAJOR pool has ``2 * layers`` segments; ``table[2 * l + kv]`` is the address of
  block 0 of K (kv=0) or V (kv=1) in layer ``l``'s tensor, and ``block_stride`` is
  ``chunk_bytes``.  The table lives in device memory so one launch covers every layer.
* A contiguous buffer (canonical ``[n, layers, 2, ...]``) uses ``base`` = buffer pointer,
  ``seg_stride`` = ``segment_bytes`` and ``block_stride`` = ``bytes_per_block``.

A side is *indexed* (pool blocks named by ids) or not (the identity: buffer row ``p``).  The
ids of an indexed side reach the kernel one of two ways:

* **inline** -- up to :data:`INLINE_PAIRS` pairs travel in the launch's own parameter (int32
  arrays inside :data:`ARGS_DTYPE`): no index upload at all, so a small batch costs one
  launch and nothing else;
* **array** -- a device array of int32 or int64 ids (staged from pinned host memory by the
  pool, or the caller's own device array); with a device array from the caller, a separate
  launch of :data:`CHECK_KERNEL` first checks every id against the pool size and records the
  first bad position in a status word, which the copy launch reads before anything else:
  a batch with a bad id writes nothing.

**One parameter per kernel.**  Every kernel takes a single struct, passed by value: the copy
kernels a ``KvpoolArgs`` (:data:`ARGS_DTYPE`), the check kernel a ``KvpoolCheckArgs``
(:data:`CHECK_ARGS_DTYPE`).  The C structs and their NumPy mirrors are generated from one
field table (:data:`ARG_FIELDS`, :data:`CHECK_ARG_FIELDS`), with C's layout rules (NumPy's
``align=True``), so the bytes the host fills are the bytes the kernel reads.  A launch then
marshals one pointer, not thirty arguments: the host keeps one filled argument block per
cached plan and hands the driver its address (``cuLaunchKernel`` copies the parameter bytes
when it is called, so the block can be refilled for the next call at once).

A :class:`LaunchPlan` is everything about a launch that does not change from call to call
(sides, strides, counts, vector width, grid); the pool caches plans by (operation, batch
size, the buffer pointer's alignment) with their argument blocks already filled but for
the per-call pointers and ids (:class:`kachedb_radix.accel.blockpool.plans.Prepared`).

Invariants: plans are pure data built from integer addresses, so they can be checked on the
CPU by :func:`emulate` over a flat byte arena; the CUDA kernel and :func:`emulate` implement the
same formula.  Within one launch no two chunks may write overlapping bytes and no chunk may
read bytes another writes (callers stage overlapping copies through a buffer).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from kachedb_radix.reference.blockpool.layout import Layout, PoolSpec

THREADS_PER_BLOCK = 256
UNROLL = 4
MAX_GRID_X = 2**31 - 1
MAX_GRID_Y = 65535
#: Batches of at most this many pairs pass their ids in the launch arguments.
INLINE_PAIRS = 16
#: A device status word's value while no bad id was found.
STATUS_OK = 2**64 - 1

VECTOR_TYPES: dict[int, str] = {
    16: "uint4",
    8: "uint2",
    4: "unsigned int",
    2: "unsigned short",
    1: "unsigned char",
}

IndexArray = npt.NDArray[np.integer[Any]]


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
    """Everything one fused launch needs but the ids and the device copy of the tables.

    ``src_indexed`` / ``dst_indexed``: whether that side's blocks are named by ids (else
    pair ``p`` uses row ``p``).  ``tile_major``: the order in which the launch grid walks
    the work (:attr:`geometry`).
    """

    src: Side
    dst: Side
    src_indexed: bool
    dst_indexed: bool
    n_pairs: int
    n_segments: int
    chunk_bytes: int
    tile_major: bool = True

    @cached_property
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

    @cached_property
    def geometry(self) -> tuple[int, int]:
        """Grid ``(x, y)``: one dimension walks the chunks (grid-stride), the other the
        tiles of one chunk (``THREADS_PER_BLOCK * UNROLL`` vectors each, grid-stride).

        Tile-major (the default): x walks the tiles, so the blocks the GPU dispatches one
        after the other (x fastest) sweep one chunk from start to end before the next, as
        a contiguous copy does -- the blocks in flight touch a few chunks, consecutively.
        Chunk-major: x walks the chunks, so the blocks in flight read the same tile of up
        to a thousand chunks, each at the same offset of its block (the order before
        issue 14; kept for measuring one against the other).  The y dimension is capped
        at ``MAX_GRID_Y``; the kernel's grid-stride loops cover the rest.
        """
        vecs = self.chunk_bytes // self.vector_width
        n_chunks = self.n_pairs * self.n_segments
        tiles = -(-vecs // (THREADS_PER_BLOCK * UNROLL))
        if self.tile_major:
            return max(1, min(MAX_GRID_X, tiles)), max(1, min(MAX_GRID_Y, n_chunks))
        return max(1, min(MAX_GRID_X, n_chunks)), max(1, min(MAX_GRID_Y, tiles))

    @property
    def inline(self) -> bool:
        """Whether the ids travel in the launch arguments (a batch of few pairs)."""
        return self.n_pairs <= INLINE_PAIRS

    @property
    def kernel(self) -> str:
        """The name of the kernel this plan launches."""
        return kernel_name(self.vector_width, inline=self.inline)

    def index_flags(self) -> int:
        """Bit 0: the source is indexed; bit 1: the destination is; bit 2: the grid is
        tile-major."""
        return int(self.src_indexed) | int(self.dst_indexed) << 1 | int(self.tile_major) << 2


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


def gather_plan(
    spec: PoolSpec, pool: Side, buf: Side, n: int, *, tile_major: bool = True
) -> LaunchPlan:
    """Pool blocks (ids) -> buffer rows ``0..n-1``."""
    return LaunchPlan(pool, buf, True, False, n, spec.num_segments, spec.segment_bytes, tile_major)


def scatter_plan(
    spec: PoolSpec, pool: Side, buf: Side, n: int, *, tile_major: bool = True
) -> LaunchPlan:
    """Buffer rows ``0..n-1`` -> pool blocks (ids, unique)."""
    return LaunchPlan(buf, pool, False, True, n, spec.num_segments, spec.segment_bytes, tile_major)


def copy_plan(spec: PoolSpec, pool: Side, n: int, *, tile_major: bool = True) -> LaunchPlan:
    """Pool blocks (source ids) -> pool blocks (destination ids; sets disjoint, unique)."""
    return LaunchPlan(pool, pool, True, True, n, spec.num_segments, spec.segment_bytes, tile_major)


def kernel_name(width: int, *, inline: bool = False) -> str:
    return f"kvpool_copy_{'inline' if inline else 'array'}_v{width}"


CHECK_KERNEL = "kvpool_check_ids"
"""Name of the kernel that checks a device array of ids against the pool size."""


# ----------------------------------------------------------------------------- arguments

#: C spelling of each field type of the argument structs (NumPy type code -> C type).
C_TYPES = {"u8": "unsigned long long", "i8": "long long", "i4": "int"}

ARG_FIELDS: tuple[tuple[str, str, int], ...] = (
    # (name, NumPy type code, count): the parameter of every copy kernel, in order.
    ("src_table", "u8", 1),  # device address of the source's segment table (0: none)
    ("src_base", "u8", 1),
    ("src_seg_stride", "i8", 1),
    ("src_block_stride", "i8", 1),
    ("dst_table", "u8", 1),
    ("dst_base", "u8", 1),
    ("dst_seg_stride", "i8", 1),
    ("dst_block_stride", "i8", 1),
    ("n_pairs", "i8", 1),
    ("n_segments", "i8", 1),
    ("chunk_vecs", "i8", 1),
    ("src_idx", "u8", 1),  # array kernels: device address of the source ids (0: identity)
    ("src_idx_bytes", "i8", 1),  # 4 (int32) or 8 (int64)
    ("dst_idx", "u8", 1),
    ("dst_idx_bytes", "i8", 1),
    ("status", "u8", 1),  # array kernels: the device check's status words (0: none)
    ("flags", "i8", 1),  # inline kernels: bit 0 source indexed, bit 1 destination indexed
    ("src_ids", "i4", INLINE_PAIRS),  # inline kernels: the ids themselves
    ("dst_ids", "i4", INLINE_PAIRS),
)
"""Fields of ``KvpoolArgs``, the one parameter of every copy kernel."""

CHECK_ARG_FIELDS: tuple[tuple[str, str, int], ...] = (
    ("idx", "u8", 1),
    ("idx_bytes", "i8", 1),
    ("n", "i8", 1),
    ("num_blocks", "i8", 1),
    ("status", "u8", 1),
)
"""Fields of ``KvpoolCheckArgs``, the one parameter of :data:`CHECK_KERNEL`."""


def _numpy_struct(fields: tuple[tuple[str, str, int], ...]) -> np.dtype[np.void]:
    """The NumPy mirror of a C struct: C's alignment and padding rules (``align=True``),
    little-endian like every CUDA host."""
    spec = [(name, f"<{code}", (count,)) if count > 1 else (name, f"<{code}")
            for name, code, count in fields]  # fmt: skip
    return np.dtype(spec, align=True)


def _c_struct(name: str, fields: tuple[tuple[str, str, int], ...]) -> str:
    lines = [f"    {C_TYPES[code]} {field}{f'[{count}]' if count > 1 else ''};"
             for field, code, count in fields]  # fmt: skip
    return f"struct {name} {{\n" + "\n".join(lines) + "\n};\n"


ARGS_DTYPE = _numpy_struct(ARG_FIELDS)
"""Bytes of a ``KvpoolArgs`` as NumPy lays them out (the same as C's)."""
CHECK_ARGS_DTYPE = _numpy_struct(CHECK_ARG_FIELDS)
"""Bytes of a ``KvpoolCheckArgs``."""
#: Index of each 8-byte field in an argument block seen as uint64 words (the per-call
#: fields are written through such a view: one store each).
WORD = {name: int(offset) // 8 for name, (_, offset, *_) in (ARGS_DTYPE.fields or {}).items()
        if name not in ("src_ids", "dst_ids")}  # fmt: skip


def _kernels(width: int) -> str:
    t = VECTOR_TYPES[width]
    return f"""
extern "C" __global__ void __launch_bounds__({THREADS_PER_BLOCK})
{kernel_name(width)}(const KvpoolArgs a)
{{
    // Ids checked on the device (a caller's device array): a bad one was recorded in the
    // status words by the check launch queued before this one; then nothing is written.
    if (a.status) {{
        const volatile unsigned long long* st =
            reinterpret_cast<const volatile unsigned long long*>(a.status);
        if (st[0] != {STATUS_OK}ULL || st[1] != {STATUS_OK}ULL) return;
    }}
    kvpool_copy_body<{t}, KvpoolArrayIds>(a);
}}

extern "C" __global__ void __launch_bounds__({THREADS_PER_BLOCK})
{kernel_name(width, inline=True)}(const KvpoolArgs a)
{{
    kvpool_copy_body<{t}, KvpoolInlineIds>(a);
}}
"""


KERNEL_SOURCE = (
    r"""
// Fused scattered block copy; see accel/blockpool/kernels.py for the addressing formula.
#define KVPOOL_UNROLL """
    + str(UNROLL)
    + "\n#define KVPOOL_INLINE_PAIRS "
    + str(INLINE_PAIRS)
    + "\n\n// Each kernel's one parameter (from kernels.ARG_FIELDS / CHECK_ARG_FIELDS).\n"
    + _c_struct("KvpoolArgs", ARG_FIELDS)
    + _c_struct("KvpoolCheckArgs", CHECK_ARG_FIELDS)
    + r"""
// Block ids of pair p, read from device arrays of int32 (bytes == 4) or int64; address 0:
// the identity (a buffer side).
struct KvpoolArrayIds {
    static __device__ __forceinline__ long long one(
        unsigned long long ptr, long long bytes, long long p) {
        if (!ptr) return p;
        return bytes == 4 ? (long long)reinterpret_cast<const int*>(ptr)[p]
                          : reinterpret_cast<const long long*>(ptr)[p];
    }
    static __device__ __forceinline__ long long src(const KvpoolArgs& a, long long p) {
        return one(a.src_idx, a.src_idx_bytes, p);
    }
    static __device__ __forceinline__ long long dst(const KvpoolArgs& a, long long p) {
        return one(a.dst_idx, a.dst_idx_bytes, p);
    }
};

// Block ids of pair p, read from the parameter itself (up to KVPOOL_INLINE_PAIRS of them).
// The ids are selected with constant indices only, so the parameter is read in place and
// never copied to local memory; a side whose flag is off is the identity.
struct KvpoolInlineIds {
    static __device__ __forceinline__ long long pick(const int (&ids)[KVPOOL_INLINE_PAIRS],
                                                     long long p) {
        int id = 0;
#pragma unroll
        for (int i = 0; i < KVPOOL_INLINE_PAIRS; ++i) id = (i == p) ? ids[i] : id;
        return (long long)id;
    }
    static __device__ __forceinline__ long long src(const KvpoolArgs& a, long long p) {
        return (a.flags & 1) ? pick(a.src_ids, p) : p;
    }
    static __device__ __forceinline__ long long dst(const KvpoolArgs& a, long long p) {
        return (a.flags & 2) ? pick(a.dst_ids, p) : p;
    }
};

__device__ __forceinline__ unsigned long long kvpool_addr(
    unsigned long long table, unsigned long long base, long long seg_stride,
    long long block_stride, long long seg, long long block)
{
    unsigned long long start = table
        ? reinterpret_cast<const unsigned long long*>(table)[seg]
        : base + (unsigned long long)(seg * seg_stride);
    return start + (unsigned long long)(block * block_stride);
}

template <typename T, typename Ids>
__device__ __forceinline__ void kvpool_copy_body(const KvpoolArgs& a)
{
    const long long n_segments = a.n_segments;
    const long long chunk_vecs = a.chunk_vecs;
    const long long n_chunks = a.n_pairs * n_segments;
    const long long bd = blockDim.x;
    // Which grid dimension walks the chunks and which the tiles of a chunk (flags bit 2:
    // tile-major, x the tiles; see LaunchPlan.geometry).  Uniform over the launch.
    const bool tile_major = (a.flags & 4) != 0;
    const long long first_chunk = tile_major ? blockIdx.y : blockIdx.x;
    const long long chunk_step = tile_major ? gridDim.y : gridDim.x;
    const long long tile = tile_major ? blockIdx.x : blockIdx.y;
    const long long step = (long long)(tile_major ? gridDim.x : gridDim.y) * bd * KVPOOL_UNROLL;
    for (long long c = first_chunk; c < n_chunks; c += chunk_step) {
        const long long pair = c / n_segments;
        const long long seg = c - pair * n_segments;
        const long long sb = Ids::src(a, pair);
        const long long db = Ids::dst(a, pair);
        const T* __restrict__ s = reinterpret_cast<const T*>(kvpool_addr(
            a.src_table, a.src_base, a.src_seg_stride, a.src_block_stride, seg, sb));
        T* __restrict__ d = reinterpret_cast<T*>(kvpool_addr(
            a.dst_table, a.dst_base, a.dst_seg_stride, a.dst_block_stride, seg, db));
        long long v = tile * bd * KVPOOL_UNROLL + threadIdx.x;
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

// Check n device ids (int32 or int64) against the pool size; the first bad position is
// kept in *status (all ones while none): atomicMin keeps the smallest over all threads.
extern "C" __global__ void kvpool_check_ids(const KvpoolCheckArgs a)
{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += stride) {
        const long long v = a.idx_bytes == 4 ? (long long)reinterpret_cast<const int*>(a.idx)[i]
                                             : reinterpret_cast<const long long*>(a.idx)[i];
        if (v < 0 || v >= a.num_blocks)
            atomicMin(reinterpret_cast<unsigned long long*>(a.status), (unsigned long long)i);
    }
}
"""
    + "".join(_kernels(w) for w in sorted(VECTOR_TYPES, reverse=True))
)
"""CUDA C++ source: the argument structs, per vector width an array-index and an
inline-index copy kernel (see :func:`kernel_name`), and the id check kernel
(:data:`CHECK_KERNEL`)."""


def new_args(plan: LaunchPlan, src_table: int, dst_table: int) -> npt.NDArray[np.void]:
    """A fresh argument block (one ``KvpoolArgs``, as a 1-element array) holding every field
    of ``plan`` that is the same for each of its calls; the pointers of the buffer side
    and the ids are left for the call.  ``src_table`` / ``dst_table``: device addresses of
    the segment tables (0 when absent).  Cost O(1); built once per cached plan."""
    block = np.zeros(1, dtype=ARGS_DTYPE)
    rec = block[0]
    rec["src_table"], rec["dst_table"] = src_table, dst_table
    rec["src_base"], rec["dst_base"] = plan.src.base, plan.dst.base
    rec["src_seg_stride"], rec["src_block_stride"] = plan.src.seg_stride, plan.src.block_stride
    rec["dst_seg_stride"], rec["dst_block_stride"] = plan.dst.seg_stride, plan.dst.block_stride
    rec["n_pairs"], rec["n_segments"] = plan.n_pairs, plan.n_segments
    rec["chunk_vecs"] = plan.chunk_bytes // plan.vector_width
    rec["src_idx_bytes"] = rec["dst_idx_bytes"] = 8
    rec["flags"] = plan.index_flags()
    return block


def read_args(raw: bytes, dtype: np.dtype[np.void] = ARGS_DTYPE) -> dict[str, Any]:
    """The fields of an argument block's bytes, by name (ints; id arrays as lists): what a
    kernel would read.  For checks on the CPU.  Cost O(size)."""
    rec = np.frombuffer(raw, dtype=dtype, count=1)[0]
    names = dtype.names or ()
    return {name: rec[name].tolist() for name in names}


# ----------------------------------------------------------------------------- CPU checks


def kernel_vector_schedule(
    chunk_vecs: int, n_tiles: int, threads: int = THREADS_PER_BLOCK
) -> npt.NDArray[np.int64]:
    """Vector indices of one chunk in the order the kernel's loops visit them.

    A literal port of the kernel's ``v`` loops (full tiles, then tail) for every (tile
    block, ``threadIdx.x``), ``n_tiles`` being the grid's size in the tile dimension (x
    when tile-major, y when chunk-major); used on the CPU to check that the loops cover
    each vector of a chunk exactly once.  Cost O(chunk_vecs + n_tiles * threads).
    """
    out: list[int] = []
    step = n_tiles * threads * UNROLL
    for tile in range(n_tiles):
        for t in range(threads):
            v = tile * threads * UNROLL + t
            while v + (UNROLL - 1) * threads < chunk_vecs:
                out.extend(v + u * threads for u in range(UNROLL))
                v += step
            out.extend(v + u * threads for u in range(UNROLL) if v + u * threads < chunk_vecs)
    return np.asarray(out, dtype=np.int64)


def emulate(
    arena: npt.NDArray[np.uint8],
    plan: LaunchPlan,
    src_idx: Sequence[int] | IndexArray | None = None,
    dst_idx: Sequence[int] | IndexArray | None = None,
) -> None:
    """Execute ``plan`` on the CPU, treating addresses as offsets into the byte ``arena``.

    ``src_idx`` / ``dst_idx`` are the ids of the indexed sides (None for the identity).
    Follows the kernel's chunk formula exactly; raises ``ValueError`` if an indexed side has
    no ids, if two chunks of the launch write overlapping bytes or one reads bytes another
    writes (which the kernel forbids).  Cost O(plan.total_bytes).
    """
    if plan.src_indexed != (src_idx is not None) or plan.dst_indexed != (dst_idx is not None):
        raise ValueError("ids must be given for exactly the indexed sides of the plan")
    n = plan.chunk_bytes
    moves: list[tuple[int, int]] = []
    for p in range(plan.n_pairs):
        sb = int(src_idx[p]) if src_idx is not None else p
        db = int(dst_idx[p]) if dst_idx is not None else p
        for s in range(plan.n_segments):
            moves.append((plan.src.address(s, sb), plan.dst.address(s, db)))
    writes = sorted(d for _, d in moves)
    for a, b in itertools.pairwise(writes):
        if b < a + n:
            raise ValueError(f"chunks written at {a} and {b} overlap")
    for s_addr, _ in moves:
        # The written chunks are disjoint and sorted: only the last one starting before
        # this read ends can overlap it.
        i = bisect.bisect_left(writes, s_addr + n) - 1
        if i >= 0 and writes[i] + n > s_addr:
            raise ValueError(f"chunk read at {s_addr} overlaps a chunk written in the launch")
    for s_addr, d in moves:
        arena[d : d + n] = arena[s_addr : s_addr + n]
