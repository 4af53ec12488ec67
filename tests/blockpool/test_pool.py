"""Both BlockPool twins against obvious per-block slice semantics (one suite, by parameter).

Every test runs on the reference twin (NumPy, on the CPU) and on the accel twin (CuPy),
which skips with the reason where no CUDA device is usable; each pool built asserts
which twin it is, so a fallback cannot pass as accel. GPU-only concerns (streams, the
import without CuPy, differential runs against the reference) are in
``tests/blockpool/test_gpu.py``.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kachedb_radix.reference.blockpool import (
    BlockIdError,
    BlockIdTypeError,
    BufferMismatchError,
    KVDType,
    KVPoolError,
    Layout,
    PoolSpec,
    PoolTooLargeError,
)
from kachedb_radix.reference.blockpool import errors as kv_errors
from tests.support.blockpool import (
    ERROR_CASES,
    ERROR_SPEC_KW,
    TWIN_PARAMS,
    ErrorCase,
    Op,
    Twin,
    assert_same_bits,
    model_copy,
    model_gather,
    model_scatter,
    ops,
    pool_specs,
    random_canonical,
)

LAYOUTS = list(Layout)


def make_pool(twin: Twin, spec: PoolSpec, seed: int = 0) -> tuple[Any, Any]:
    data = random_canonical(spec, seed)
    return twin.pool(spec, data), data


def small_spec(layout: Layout, **kw: Any) -> PoolSpec:
    args: dict[str, Any] = {**ERROR_SPEC_KW, "layout": layout}
    args.update(kw)
    return PoolSpec(**args)


# ----------------------------------------------------------------------------- storage layout
@pytest.mark.parametrize("twin", TWIN_PARAMS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_round_trip_through_canonical(twin: Twin, layout: Layout) -> None:
    spec = small_spec(layout, num_blocks=5)
    pool, data = make_pool(twin, spec, 1)
    assert_same_bits(pool.to_numpy(), data)
    for b in range(spec.num_blocks):
        assert_same_bits(pool.read_block(b), data[b])


@pytest.mark.parametrize("twin", TWIN_PARAMS)
def test_layer_major_physical_layout(twin: Twin) -> None:
    """Layer-major storage puts block b's (layer l, K/V kv) chunk at layers[l][kv, b]."""
    spec = small_spec(Layout.LAYER_MAJOR, num_blocks=5, num_layers=3)
    pool, data = make_pool(twin, spec, 2)
    arrays = pool.arrays
    assert len(arrays) == spec.num_layers
    for layer, arr in enumerate(arrays):
        assert arr.shape == spec.layer_shape
        for kv in (0, 1):
            for b in range(spec.num_blocks):
                assert_same_bits(twin.host(arr[kv, b]), data[b, layer, kv])


@pytest.mark.parametrize("twin", TWIN_PARAMS)
def test_block_major_physical_layout(twin: Twin) -> None:
    spec = small_spec(Layout.BLOCK_MAJOR, num_blocks=5)
    pool, data = make_pool(twin, spec, 3)
    (arr,) = pool.arrays
    assert arr.shape == spec.pool_shape
    assert arr.nbytes == spec.total_bytes
    assert_same_bits(twin.host(arr), data)


@pytest.mark.parametrize("twin", TWIN_PARAMS)
def test_write_block_then_read_block(twin: Twin) -> None:
    spec = small_spec(Layout.LAYER_MAJOR)
    pool, data = make_pool(twin, spec, 4)
    new = random_canonical(spec, 99, n=1)[0]
    pool.write_block(2, new)
    assert_same_bits(pool.read_block(2), new)
    expected = data.copy()
    expected[2] = new
    assert_same_bits(pool.to_numpy(), expected)


# ----------------------------------------------------------------------------- random programs
@pytest.mark.parametrize("twin", TWIN_PARAMS)
@settings(max_examples=150, deadline=None)
@given(data=st.data(), spec=pool_specs(), seed=st.integers(0, 2**32 - 1))
def test_random_programs_match_slice_model(
    twin: Twin, data: st.DataObject, spec: PoolSpec, seed: int
) -> None:
    pool, model = make_pool(twin, spec, seed)
    program: list[Op] = data.draw(st.lists(ops(spec.num_blocks), max_size=6))
    for op in program:
        if op.kind == "gather":
            assert_same_bits(pool.gather(op.a), model_gather(model, list(op.a)))
        elif op.kind == "copy":
            pool.copy(op.a, op.b)
            model = model_copy(model, list(op.a), list(op.b))
        else:
            buf = random_canonical(spec, op.seed, n=len(op.a))
            pool.scatter(op.a, twin.device(buf))
            model = model_scatter(model, list(op.a), buf)
        assert_same_bits(pool.to_numpy(), model)


@pytest.mark.parametrize("twin", TWIN_PARAMS)
@settings(max_examples=60, deadline=None)
@given(data=st.data(), spec=pool_specs(layout=Layout.BLOCK_MAJOR), seed=st.integers(0, 2**32))
def test_layouts_agree(twin: Twin, data: st.DataObject, spec: PoolSpec, seed: int) -> None:
    """The same program on both layouts leaves identical canonical contents."""
    other = PoolSpec(
        spec.num_blocks,
        spec.block_size,
        spec.num_layers,
        spec.num_kv_heads,
        spec.head_dim,
        spec.dtype,
        Layout.LAYER_MAJOR,
    )
    a, _ = make_pool(twin, spec, seed)
    b, _ = make_pool(twin, other, seed)
    for op in data.draw(st.lists(ops(spec.num_blocks), max_size=5)):
        if op.kind == "copy":
            a.copy(op.a, op.b)
            b.copy(op.a, op.b)
        elif op.kind == "gather":
            assert_same_bits(a.gather(op.a), b.gather(op.a))
        else:
            # Buffers are layout independent: gather from one layout, scatter into the other.
            buf_a = a.gather(op.a)
            buf_b = b.gather(op.a)
            a.scatter(op.a, buf_b)
            b.scatter(op.a, buf_a)
        assert_same_bits(a.to_numpy(), b.to_numpy())


# ----------------------------------------------------------------------------- copy semantics
@pytest.mark.parametrize("twin", TWIN_PARAMS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_copy_chain_is_parallel_assignment(twin: Twin, layout: Layout) -> None:
    """(1->2), (2->3): block 3 receives the OLD block 2, not the new one."""
    spec = small_spec(layout, num_blocks=5)
    pool, data = make_pool(twin, spec, 5)
    pool.copy_pairs([(1, 2), (2, 3)])
    out = pool.to_numpy()
    assert_same_bits(out[2], data[1])
    assert_same_bits(out[3], data[2])
    for b in (0, 1, 4):
        assert_same_bits(out[b], data[b])


@pytest.mark.parametrize("twin", TWIN_PARAMS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_copy_swap_and_cycle(twin: Twin, layout: Layout) -> None:
    spec = small_spec(layout, num_blocks=4)
    pool, data = make_pool(twin, spec, 6)
    pool.copy([0, 1], [1, 0])
    out = pool.to_numpy()
    assert_same_bits(out[0], data[1])
    assert_same_bits(out[1], data[0])
    pool2, _ = make_pool(twin, spec, 6)
    pool2.copy([0, 1, 2, 3], [1, 2, 3, 0])  # rotate
    assert_same_bits(pool2.to_numpy(), np.roll(data, 1, axis=0))


@pytest.mark.parametrize("twin", TWIN_PARAMS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_copy_result_independent_of_pair_order(twin: Twin, layout: Layout) -> None:
    spec = small_spec(layout, num_blocks=5)
    pairs = [(0, 1), (1, 2), (2, 0), (2, 3)]  # sources repeat, destinations unique
    results = []
    for perm in itertools.permutations(pairs):
        pool, _ = make_pool(twin, spec, 7)
        pool.copy_pairs(perm)
        results.append(pool.to_numpy())
    for r in results[1:]:
        assert_same_bits(r, results[0])


@pytest.mark.parametrize("twin", TWIN_PARAMS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_copy_to_self_and_fan_out(twin: Twin, layout: Layout) -> None:
    spec = small_spec(layout)
    pool, data = make_pool(twin, spec, 8)
    pool.copy([2, 0, 0], [2, 1, 3])
    out = pool.to_numpy()
    for b, src in ((0, 0), (1, 0), (2, 2), (3, 0)):
        assert_same_bits(out[b], data[src])


@pytest.mark.parametrize("twin", TWIN_PARAMS)
def test_bit_exact_special_values(twin: Twin) -> None:
    spec = small_spec(Layout.LAYER_MAJOR, dtype=KVDType.FP16)
    pool = twin.pool(spec)
    block = np.zeros(spec.block_shape, dtype=np.float16)
    raw = block.view(np.uint16)
    raw.reshape(-1)[:4] = [0x7E01, 0xFE55, 0x8000, 0x7C00]  # NaN payloads, -0.0, +inf
    pool.write_block(0, block)
    pool.copy([0], [3])
    assert_same_bits(pool.read_block(3), block)
    assert_same_bits(pool.gather([3, 0]), np.stack([block, block]))


# ----------------------------------------------------------------------------- id forms, empties
@pytest.mark.parametrize("twin", TWIN_PARAMS)
def test_numpy_integer_ids_accepted(twin: Twin) -> None:
    spec = small_spec(Layout.BLOCK_MAJOR)
    pool, data = make_pool(twin, spec, 9)
    out = pool.gather(np.array([3, 1], dtype=np.uint8))
    assert_same_bits(out, data[[3, 1]])
    pool.copy([np.int64(3)], (np.int32(0),))
    assert_same_bits(pool.read_block(0), data[3])


@pytest.mark.parametrize("twin", TWIN_PARAMS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_empty_batches_are_no_ops(twin: Twin, layout: Layout) -> None:
    spec = small_spec(layout)
    pool, data = make_pool(twin, spec, 10)
    pool.copy([], [])
    out = pool.gather([])
    assert out.shape == spec.buffer_shape(0)
    pool.scatter([], out)
    pool.restore([], pool.offload([]).wait()).wait()
    assert_same_bits(pool.to_numpy(), data)


@pytest.mark.parametrize("twin", TWIN_PARAMS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gather_into_given_out(twin: Twin, layout: Layout) -> None:
    spec = small_spec(layout)
    pool, data = make_pool(twin, spec, 11)
    out = twin.xp.zeros(spec.buffer_shape(3), dtype=spec.storage_dtype)
    res = pool.gather([2, 2, 0], out=out)
    assert res is out
    assert_same_bits(out, data[[2, 2, 0]])


# ----------------------------------------------------------------------------- offload/restore
@pytest.mark.parametrize("twin", TWIN_PARAMS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_offload_restore_round_trip(twin: Twin, layout: Layout) -> None:
    spec = small_spec(layout, num_blocks=6)
    pool, data = make_pool(twin, spec, 12)
    host = pool.alloc_host_buffer(3)
    handle = pool.offload([5, 0, 3], host_out=host)
    assert handle.wait() is host
    assert handle.done()
    assert_same_bits(host, data[[5, 0, 3]])
    # Evict: overwrite the blocks, then restore the prefix into different blocks.
    pool.scatter([5, 0, 3], twin.device(np.zeros_like(host)))
    done = pool.restore([1, 2, 4], host)
    assert done.wait() is None
    assert done.done()
    out = pool.to_numpy()
    for dst, src in ((1, 5), (2, 0), (4, 3)):
        assert_same_bits(out[dst], data[src])
    pool.synchronize()


@pytest.mark.parametrize("twin", TWIN_PARAMS)
@settings(max_examples=50, deadline=None)
@given(spec=pool_specs(), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_offload_restore_property(
    twin: Twin, spec: PoolSpec, seed: int, data: st.DataObject
) -> None:
    pool, model = make_pool(twin, spec, seed)
    ids = data.draw(st.lists(st.integers(0, spec.num_blocks - 1), unique=True))
    host = pool.offload(ids).wait()
    assert_same_bits(host, model_gather(model, ids))
    target = data.draw(st.permutations(range(spec.num_blocks)))[: len(ids)]
    pool.restore(target, host).wait()
    assert_same_bits(pool.to_numpy(), model_scatter(model, list(target), host))


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("twin", TWIN_PARAMS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.name)
def test_error_matrix_writes_nothing(twin: Twin, case: ErrorCase, layout: Layout) -> None:
    spec = small_spec(layout)
    pool, data = make_pool(twin, spec, 13)
    with pytest.raises(case.error) as info:
        case.call(pool, twin.xp)
    assert isinstance(info.value, KVPoolError)
    assert case.fragment in str(info.value), str(info.value)
    assert_same_bits(pool.to_numpy(), data)


@pytest.mark.parametrize("twin", TWIN_PARAMS)
def test_gather_out_untouched_when_ids_bad(twin: Twin) -> None:
    spec = small_spec(Layout.BLOCK_MAJOR)
    pool, _ = make_pool(twin, spec, 14)
    out = twin.xp.full(spec.buffer_shape(2), 7, dtype=spec.storage_dtype)
    with pytest.raises(BlockIdError):
        pool.gather([1, 4], out=out)
    assert (twin.host(out) == 7).all()


def test_error_hierarchy() -> None:
    classes = [
        obj
        for obj in vars(kv_errors).values()
        if isinstance(obj, type)
        and issubclass(obj, Exception)
        and obj.__module__ == kv_errors.__name__
    ]
    assert len(classes) >= 12
    for cls in classes:
        assert issubclass(cls, KVPoolError)
    assert issubclass(BlockIdTypeError, TypeError)
    assert issubclass(BufferMismatchError, ValueError)
    assert issubclass(PoolTooLargeError, MemoryError)


@pytest.mark.parametrize("twin", TWIN_PARAMS)
def test_memory_budget_refused_before_allocating(twin: Twin) -> None:
    spec = PoolSpec.from_preset("llama-3-8b", num_blocks=10**6)  # 2 TB: allocating would fail
    with pytest.raises(PoolTooLargeError) as info:
        twin.pool(spec, memory_budget=2**30)
    assert info.value.required_bytes == spec.total_bytes == 10**6 * 16 * 128 * 1024
    assert info.value.available_bytes == 2**30
    assert "memory_budget" in str(info.value)


@pytest.mark.parametrize("twin", TWIN_PARAMS)
def test_memory_budget_exact_fit_allowed(twin: Twin) -> None:
    spec = small_spec(Layout.LAYER_MAJOR)
    pool = twin.pool(spec, memory_budget=spec.total_bytes)
    assert sum(a.nbytes for a in pool.arrays) == spec.total_bytes
    with pytest.raises(PoolTooLargeError):
        twin.pool(spec, memory_budget=spec.total_bytes - 1)
