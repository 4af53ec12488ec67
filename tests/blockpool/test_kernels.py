"""The fused kernel's addressing plans, checked on the CPU.

The CuPy twin builds :class:`kachedb_radix.accel.blockpool.kernels.LaunchPlan` objects from device
pointers; here the same plan builders run on fake addresses inside a byte arena and :func:`emulate`
executes them, so the addressing (segment tables, strides, index lists) is verified against the
NumPy reference without a GPU.  The kernel's loop structure is checked by a literal port, and the
CUDA source is compiled with NVRTC when CuPy's NVRTC binding can load.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kachedb_radix.accel.blockpool.kernels import (
    ARG_FIELDS,
    ARGS_DTYPE,
    CHECK_ARGS_DTYPE,
    CHECK_KERNEL,
    INLINE_PAIRS,
    KERNEL_SOURCE,
    MAX_GRID_Y,
    THREADS_PER_BLOCK,
    UNROLL,
    VECTOR_TYPES,
    WORD,
    LaunchPlan,
    Side,
    buffer_side,
    copy_plan,
    emulate,
    gather_plan,
    kernel_name,
    kernel_vector_schedule,
    pool_side,
    read_args,
    scatter_plan,
)
from kachedb_radix.accel.blockpool.plans import Prepared
from kachedb_radix.reference.blockpool import BlockPool, Layout, PoolSpec
from tests.support.blockpool import assert_same_bits, ops, pool_specs, random_canonical


class Arena:
    """A flat byte space holding a pool's storage arrays at (possibly misaligned) offsets."""

    def __init__(self, spec: PoolSpec, ref: BlockPool, rng: np.random.Generator) -> None:
        self.spec = spec
        self.misalign = bool(rng.integers(0, 2))
        self.mem = np.zeros(0, dtype=np.uint8)
        self.rng = rng
        self.pool_offsets = [self.alloc(a.nbytes) for a in ref.arrays]
        for off, arr in zip(self.pool_offsets, ref.arrays, strict=True):
            self.mem[off : off + arr.nbytes] = arr.reshape(-1).view(np.uint8)
        self.side = pool_side(spec, self.pool_offsets)

    def alloc(self, nbytes: int) -> int:
        """Append a region after a random gap; aligned to 256 unless misaligning."""
        start = self.mem.size + int(self.rng.integers(0, 64))
        start = start + 1 if self.misalign else -(-start // 256) * 256
        self.mem = np.concatenate([self.mem, np.zeros(start + nbytes - self.mem.size, np.uint8)])
        return start

    def region(self, off: int, nbytes: int) -> npt.NDArray[np.uint8]:
        return self.mem[off : off + nbytes]

    def assert_matches(self, ref: BlockPool) -> None:
        for off, arr in zip(self.pool_offsets, ref.arrays, strict=True):
            assert_same_bits(self.region(off, arr.nbytes), arr.reshape(-1).view(np.uint8))


def staged_copy(arena: Arena, src: tuple[int, ...], dst: tuple[int, ...]) -> None:
    """What BlockPool.copy does: one launch if disjoint, else gather+scatter via a temp."""
    spec = arena.spec
    n = len(src)
    if set(src).isdisjoint(dst):
        emulate(arena.mem, copy_plan(spec, arena.side, n), src, dst)
        return
    tmp = buffer_side(spec, arena.alloc(spec.buffer_bytes(n)))
    emulate(arena.mem, gather_plan(spec, arena.side, tmp, n), src_idx=src)
    emulate(arena.mem, scatter_plan(spec, arena.side, tmp, n), dst_idx=dst)


@settings(max_examples=120, deadline=None)
@given(data=st.data(), spec=pool_specs(), seed=st.integers(0, 2**32 - 1))
def test_emulated_plans_match_reference(data: st.DataObject, spec: PoolSpec, seed: int) -> None:
    ref = BlockPool.from_canonical(spec, random_canonical(spec, seed))
    arena = Arena(spec, ref, np.random.default_rng(seed))
    arena.assert_matches(ref)
    for op in data.draw(st.lists(ops(spec.num_blocks), max_size=5)):
        n = len(op.a)
        if op.kind == "gather":
            off = arena.alloc(spec.buffer_bytes(n))
            plan = gather_plan(spec, arena.side, buffer_side(spec, off), n)
            emulate(arena.mem, plan, src_idx=op.a)
            expected = ref.gather(op.a).reshape(-1).view(np.uint8)
            assert_same_bits(arena.region(off, spec.buffer_bytes(n)), expected)
        elif op.kind == "scatter":
            buf = random_canonical(spec, op.seed, n)
            off = arena.alloc(buf.nbytes)
            arena.region(off, buf.nbytes)[:] = buf.reshape(-1).view(np.uint8)
            plan = scatter_plan(spec, arena.side, buffer_side(spec, off), n)
            emulate(arena.mem, plan, dst_idx=op.a)
            ref.scatter(op.a, buf)
        else:
            staged_copy(arena, op.a, op.b)
            ref.copy(op.a, op.b)
        arena.assert_matches(ref)


def test_emulator_refuses_overlapping_launch() -> None:
    spec = PoolSpec(4, 1, 1, 1, 8)
    ref = BlockPool(spec)
    arena = Arena(spec, ref, np.random.default_rng(0))
    with pytest.raises(ValueError, match="overlaps"):
        emulate(arena.mem, copy_plan(spec, arena.side, 2), (1, 2), (2, 3))
    with pytest.raises(ValueError, match="overlap"):
        emulate(arena.mem, LaunchPlan(arena.side, arena.side, True, True, 2, 1, 64), (0, 1), (2, 2))
    with pytest.raises(ValueError, match="indexed sides"):
        emulate(arena.mem, copy_plan(spec, arena.side, 2), (1, 2))


def test_layer_major_table_points_at_each_k_and_v() -> None:
    spec = PoolSpec(num_blocks=10, block_size=2, num_layers=3, num_kv_heads=1, head_dim=4,
                    layout=Layout.LAYER_MAJOR)  # fmt: skip
    ptrs = [1000, 5000, 9000]
    side = pool_side(spec, ptrs)
    assert side.table is not None and len(side.table) == 6
    kv_stride = 10 * spec.chunk_bytes
    assert side.table == (1000, 1000 + kv_stride, 5000, 5000 + kv_stride, 9000, 9000 + kv_stride)
    # layer 1, V, block 7
    assert side.address(3, 7) == 5000 + kv_stride + 7 * spec.chunk_bytes
    buf = buffer_side(spec, 64)
    # buffer row 2, layer 1, V: canonical [n, L, 2, ...] order
    assert buf.address(3, 2) == 64 + 2 * spec.bytes_per_block + 3 * spec.chunk_bytes


def test_block_major_is_one_segment_per_block() -> None:
    spec = PoolSpec(num_blocks=10, block_size=2, num_layers=3, num_kv_heads=1, head_dim=4)
    side = pool_side(spec, [4096])
    assert spec.num_segments == 1 and spec.segment_bytes == spec.bytes_per_block
    assert side.address(0, 9) == 4096 + 9 * spec.bytes_per_block
    with pytest.raises(ValueError, match="1 storage array"):
        pool_side(spec, [0, 1])


@pytest.mark.parametrize(
    ("chunk", "ptr", "width"),
    [(32 * 1024, 256, 16), (32 * 1024, 264, 8), (12, 256, 4), (6, 256, 2), (3, 256, 1),
     (32 * 1024, 257, 1)],
)  # fmt: skip
def test_vector_width(chunk: int, ptr: int, width: int) -> None:
    a = Side(ptr, chunk, chunk)
    b = Side(512, chunk, chunk)
    assert LaunchPlan(a, b, True, False, 1, 1, chunk).vector_width == width


@pytest.mark.parametrize("layout", list(Layout))
def test_realistic_spec_uses_16_byte_vectors(layout: Layout) -> None:
    spec = PoolSpec.from_preset("llama-3-8b", num_blocks=64, block_size=16, layout=layout)
    if layout is Layout.BLOCK_MAJOR:
        ptrs = [2**32]
    else:  # one 256-aligned allocation per layer, with gaps between them
        layer_bytes = spec.total_bytes // spec.num_layers
        ptrs = [2**32 + i * (layer_bytes + 4096) for i in range(spec.num_layers)]
    side = pool_side(spec, ptrs)
    plan = gather_plan(spec, side, buffer_side(spec, 2**33), 64)
    assert plan.vector_width == 16 and not plan.inline
    gx, gy = plan.geometry  # tile-major: x the tiles of a chunk, y the chunks
    assert gy == 64 * spec.num_segments
    assert gx * THREADS_PER_BLOCK * UNROLL * 16 >= spec.segment_bytes
    chunk_major = gather_plan(spec, side, buffer_side(spec, 2**33), 64, tile_major=False)
    assert chunk_major.geometry == (gy, gx) and chunk_major.index_flags() == 1
    prep = Prepared(plan, 777, 0)
    prep.set_bases(5, 2**33)
    prep.set_arrays(111, 4, 0, 8, 0)
    a = read_args(prep.args.tobytes())
    assert (a["src_table"], a["dst_table"], a["src_base"], a["dst_base"]) == (777, 0, 5, 2**33)
    assert a["chunk_vecs"] == spec.segment_bytes // 16 and a["n_pairs"] == 64
    assert (a["src_idx"], a["src_idx_bytes"], a["dst_idx"], a["dst_idx_bytes"]) == (111, 4, 0, 8)
    assert a["flags"] == plan.index_flags() == 1 | 4 and prep.grid == (gx, gy, 1)


def test_grid_y_is_capped() -> None:
    """The y dimension (65,535 at most) holds the chunks when tile-major, the tiles when
    chunk-major; the kernel's grid-stride loops cover the rest."""
    huge = 16 * THREADS_PER_BLOCK * UNROLL * (MAX_GRID_Y + 10)
    plan = LaunchPlan(Side(0, 0, huge), Side(huge, 0, huge), False, False, 1, 1, huge, False)
    assert plan.geometry == (1, MAX_GRID_Y)
    many = LaunchPlan(Side(0, 0, 64), Side(64, 0, 64), False, False, 70_000, 1, 64)
    assert many.geometry == (1, MAX_GRID_Y)


@settings(max_examples=200, deadline=None)
@given(
    chunk_vecs=st.integers(0, 3000),
    tiles=st.integers(1, 4),
    threads=st.sampled_from([1, 2, 3, 8, 32]),
)
def test_kernel_loops_cover_each_vector_once(chunk_vecs: int, tiles: int, threads: int) -> None:
    sched = kernel_vector_schedule(chunk_vecs, tiles, threads)
    assert np.array_equal(np.sort(sched), np.arange(chunk_vecs))


def test_kernel_loops_cover_with_real_geometry() -> None:
    for chunk_vecs in (1, 255, 1024, 2048, 2049, 131072):
        plan = LaunchPlan(Side(0, 0, 0), Side(0, 0, 0), False, False, 1, 1, 16 * chunk_vecs)
        tiles, _ = plan.geometry
        sched = kernel_vector_schedule(chunk_vecs, tiles)
        assert np.array_equal(np.sort(sched), np.arange(chunk_vecs))


def _nvrtc() -> Any:
    try:
        nvrtc = importlib.import_module("cupy_backends.cuda.libs.nvrtc")
    except ImportError:
        pytest.skip("cupy not installed (NVRTC binding unavailable)")
    try:
        nvrtc.getVersion()
    except Exception as exc:  # library missing: no CUDA toolkit / nvrtc wheel
        pytest.skip(f"NVRTC library not loadable: {exc}")
    return nvrtc


def test_kernel_source_compiles_with_nvrtc() -> None:
    nvrtc = _nvrtc()
    prog = nvrtc.createProgram(KERNEL_SOURCE, "kvpool_kernels.cu", [], [])
    try:
        nvrtc.compileProgram(prog, ["-std=c++14"])
    except Exception as exc:
        raise AssertionError(f"{exc}\n{nvrtc.getProgramLog(prog)}") from exc
    ptx = nvrtc.getPTX(prog)
    text = ptx.decode() if isinstance(ptx, bytes) else str(ptx)
    assert f".entry {CHECK_KERNEL}(" in text
    # each kernel moves data with global-space loads/stores of its vector width
    suffix = {16: "v4.u32", 8: "v2.u32", 4: "u32", 2: "u16", 1: "u8"}
    for inline in (False, True):
        for width, sfx in suffix.items():
            name = kernel_name(width, inline=inline)
            body = text.split(f".entry {name}(")[1].split(".entry")[0]
            assert f"ld.global.nc.{sfx}" in body, name
            assert f"st.global.wb.{sfx}" in body, name
    assert set(suffix) == set(VECTOR_TYPES)


@settings(max_examples=100, deadline=None)
@given(
    ids=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=INLINE_PAIRS),
    base=st.integers(0, 2**64 - 1),
)
def test_inline_ids_land_where_the_kernel_reads_them(ids: list[int], base: int) -> None:
    """A prepared block of an inline plan holds, after a call's stores, the ids in its
    int32 arrays and the pointers in their words, at the offsets C gives the struct; the
    driver's kernelParams array points at the block."""
    spec = PoolSpec(8, 1, 1, 1, 8)
    plan = scatter_plan(spec, pool_side(spec, [0]), buffer_side(spec, 4096), len(ids))
    assert plan.inline and plan.kernel == kernel_name(plan.vector_width, inline=True)
    prep = Prepared(plan, 0, 0)
    prep.dst_ids[:] = ids
    prep.set_bases(base, 12)
    a = read_args(prep.args.tobytes())
    assert a["dst_ids"][: len(ids)] == ids and a["src_base"] == base and a["dst_base"] == 12
    assert a["flags"] == 2 | 4 and len(prep.src_ids) == len(ids)
    assert int(prep.params[0]) == prep.args.ctypes.data
    assert prep.params_address == prep.params.ctypes.data


def test_argument_structs_follow_c_layout() -> None:
    """The NumPy mirror of each struct has C's offsets: 8-byte fields first, then the two
    int32 id arrays; the struct text in the source is generated from the same table."""
    assert ARGS_DTYPE.itemsize == 17 * 8 + 2 * 4 * INLINE_PAIRS
    assert CHECK_ARGS_DTYPE.itemsize == 5 * 8
    assert [WORD[name] for name, code, _ in ARG_FIELDS if code != "i4"] == list(range(17))
    fields: Any = ARGS_DTYPE.fields
    assert fields["src_ids"][1] == 17 * 8 and fields["dst_ids"][1] == 17 * 8 + 4 * INLINE_PAIRS
    assert "struct KvpoolArgs {" in KERNEL_SOURCE and "int src_ids[16];" in KERNEL_SOURCE
    assert "kvpool_check_ids(const KvpoolCheckArgs a)" in KERNEL_SOURCE


def test_nvrtc_lays_the_parameter_out_as_numpy_does() -> None:
    """Each kernel's one parameter has, in NVRTC's PTX, the size of its NumPy mirror, and
    no kernel copies it to local memory (the inline ids are read in place)."""
    nvrtc = _nvrtc()
    prog = nvrtc.createProgram(KERNEL_SOURCE, "kvpool_kernels.cu", [], [])
    nvrtc.compileProgram(prog, ["-std=c++14"])
    ptx = nvrtc.getPTX(prog)
    text = ptx.decode() if isinstance(ptx, bytes) else str(ptx)
    for inline in (False, True):
        for width in VECTOR_TYPES:
            name = kernel_name(width, inline=inline)
            assert f"{name}_param_0[{ARGS_DTYPE.itemsize}]" in text, name
            assert f"{name}_param_1" not in text, name
    assert f"{CHECK_KERNEL}_param_0[{CHECK_ARGS_DTYPE.itemsize}]" in text
    assert "ld.local" not in text and "st.local" not in text
