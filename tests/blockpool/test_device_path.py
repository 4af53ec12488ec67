"""The accel block pool's host side, end to end: on a CUDA device, and on the CPU fake.

Every test here runs twice: with ``cuda`` (real CuPy on a GPU; skipped without one) and with
``fake`` (:mod:`tests.support.fake_cupy`: the same pool code over a CPU stand-in whose kernels
decode their arguments from the CUDA source's signatures and run the addressing emulator).
The fake run checks, without a GPU, everything the Python side of a call does: ids
validated in NumPy, cached plans, ids in the launch arguments (<= 16 pairs), the pinned
staging ring (larger batches, the ring coming round), ids given as device arrays and
checked on the device, the shared error matrix.  Results are compared bit for bit with the
reference twin.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kachedb_radix import accel, reference
from kachedb_radix.accel.blockpool import pool as pool_module
from kachedb_radix.accel.blockpool.kernels import (
    ARGS_DTYPE,
    CHECK_ARGS_DTYPE,
    CHECK_KERNEL,
    INLINE_PAIRS,
    KERNEL_SOURCE,
)
from kachedb_radix.reference.blockpool import (
    BlockIdRangeError,
    BlockIdTypeError,
    ConfigError,
    KVPoolError,
    Layout,
    LengthMismatchError,
    PoolSpec,
)
from tests.support import fake_cupy
from tests.support.blockpool import (
    ERROR_CASES,
    ERROR_SPEC_KW,
    GPU_SKIP_REASON,
    ErrorCase,
    assert_same_bits,
    ops,
    pool_specs,
    random_canonical,
    run_program,
)


@dataclass(frozen=True)
class Backend:
    """Which CuPy the pool runs on, and its array module."""

    name: str
    cp: Any

    @property
    def fake(self) -> bool:
        return self.name == "fake"


def _clear_caches() -> None:
    pool_module.cupy_unavailable_reason.cache_clear()
    pool_module._module.cache_clear()


@pytest.fixture(params=["fake", "cuda"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
    if request.param == "cuda":
        if GPU_SKIP_REASON is not None:
            pytest.skip(f"the CuPy twin cannot run: {GPU_SKIP_REASON}")
        import cupy

        yield Backend("cuda", cupy)
        return
    fake = fake_cupy.module()
    fake_cupy.reset()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    _clear_caches()
    try:
        yield Backend("fake", fake)
    finally:
        monkeypatch.undo()
        _clear_caches()


def _pair(spec: PoolSpec, seed: int) -> tuple[Any, Any]:
    data = random_canonical(spec, seed)
    gpu = accel.BlockPool.from_canonical(spec, data)
    assert gpu.implementation == "accel"
    return reference.BlockPool.from_canonical(spec, data), gpu


def _same(gpu: Any, ref: Any) -> None:
    gpu.synchronize()
    assert_same_bits(gpu.to_numpy(), ref.to_numpy())


SPEC_KW: dict[str, Any] = {**ERROR_SPEC_KW, "num_blocks": 64}
SPEC = PoolSpec(**SPEC_KW)


@pytest.mark.parametrize("layout", list(Layout))
@pytest.mark.parametrize("n", [1, INLINE_PAIRS, INLINE_PAIRS + 1, 40])
def test_batches_inline_and_staged(backend: Backend, layout: Layout, n: int) -> None:
    """<= 16 pairs go in the launch arguments, more through the staging ring; both paths
    give the reference's bytes for gather, scatter, disjoint and overlapping copy."""
    spec = PoolSpec(**{**SPEC_KW, "layout": layout})
    ref, gpu = _pair(spec, n)
    rng = np.random.default_rng(n)
    perm = [int(i) for i in rng.permutation(spec.num_blocks)]
    src, dst = perm[:n], perm[n : 2 * n] if 2 * n <= spec.num_blocks else perm[-n:]
    assert_same_bits(gpu.gather(src), ref.gather(src))
    buf = random_canonical(spec, 99, n)
    gpu.scatter(dst, backend.cp.asarray(buf))
    ref.scatter(dst, buf)
    _same(gpu, ref)
    if set(src).isdisjoint(dst):
        gpu.copy(src, dst)
        ref.copy(src, dst)
        _same(gpu, ref)
    gpu.copy(src, src[1:] + src[:1])  # overlapping: staged through a buffer
    ref.copy(src, src[1:] + src[:1])
    _same(gpu, ref)
    if backend.fake:
        inline = [name for name in fake_cupy.FakeFunction.launches if "inline" in name]
        assert bool(inline) == (n <= INLINE_PAIRS)


@pytest.mark.parametrize("layout", list(Layout))
def test_both_grid_orders_give_the_same_bytes(backend: Backend, layout: Layout) -> None:
    """Chunk-major and tile-major launches (a tuning knob) move the same bytes."""
    spec = PoolSpec(**{**SPEC_KW, "layout": layout})
    ref, gpu = _pair(spec, 13)
    assert gpu.tile_major
    for tile_major in (False, True):
        gpu.tile_major = tile_major
        for n in (3, 20):
            src, dst = list(range(n)), list(range(40, 40 + n))
            assert_same_bits(gpu.gather(src), ref.gather(src))
            gpu.copy(src, dst)
            ref.copy(src, dst)
            _same(gpu, ref)
    assert gpu.tile_major and len(gpu._plans) == 4  # the chunk-major plans were dropped


def test_staging_ring_comes_round(backend: Backend) -> None:
    """Many staged batches reuse the ring's spans and stay correct."""
    spec = SPEC
    ref, gpu = _pair(spec, 1)
    rng = np.random.default_rng(1)
    for _ in range(40):
        ids = [int(i) for i in rng.integers(0, spec.num_blocks, size=50)]
        assert_same_bits(gpu.gather(ids), ref.gather(ids))
    if backend.fake:
        assert gpu._ring is not None and gpu._ring.capacity == pool_module.RING_IDS


def test_plans_are_cached(backend: Backend) -> None:
    """The second call of a shape builds no plan."""
    ref, gpu = _pair(SPEC, 2)
    out = backend.cp.empty(SPEC.buffer_shape(3), dtype=SPEC.storage_dtype)
    gpu.gather([1, 2, 3], out=out)
    misses = gpu._plans.misses
    for ids in ([4, 5, 6], [7, 8, 9], [1, 1, 1]):
        gpu.gather(ids, out=out)
        assert_same_bits(out, ref.gather(ids))
    assert gpu._plans.misses == misses


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("layout", list(Layout))
def test_device_ids_are_read_in_place(backend: Backend, dtype: Any, layout: Layout) -> None:
    """Ids in a device array (int32 or int64) give the same results as host ids."""
    spec = PoolSpec(**{**SPEC_KW, "layout": layout})
    ref, gpu = _pair(spec, 3)
    cp = backend.cp
    for n in (3, 30):
        ids = [int(i) for i in np.random.default_rng(n).permutation(spec.num_blocks)[: 2 * n]]
        src, dst = ids[:n], ids[n:]
        dev_src = cp.asarray(np.asarray(src, dtype=dtype))
        dev_dst = cp.asarray(np.asarray(dst, dtype=dtype))
        assert_same_bits(gpu.gather(dev_src), ref.gather(src))
        buf = random_canonical(spec, n, n)
        gpu.scatter(dev_dst, cp.asarray(buf))
        ref.scatter(dst, buf)
        gpu.copy(dev_src, dst)  # one side on the device, one on the host
        ref.copy(src, dst)
        gpu.copy(src, dev_dst)
        ref.copy(src, dst)
        _same(gpu, ref)
    gpu.check_device_ids()  # nothing bad was given


@pytest.mark.parametrize("op", ["gather", "scatter", "copy_src", "copy_dst"])
def test_bad_device_ids_write_nothing_and_raise_later(backend: Backend, op: str) -> None:
    """A device array holding an out-of-range id: the call writes nothing; the next
    check_device_ids() (or synchronize()) raises the typed error with position and value."""
    ref, gpu = _pair(SPEC, 4)
    cp = backend.cp
    bad = cp.asarray(np.asarray([3, 5, 64, -1], dtype=np.int64))
    good = [10, 11, 12, 13]
    before = gpu.to_numpy()
    out = cp.zeros(SPEC.buffer_shape(4), dtype=SPEC.storage_dtype)
    role = {"gather": "ids", "scatter": "ids", "copy_src": "src_ids", "copy_dst": "dst_ids"}[op]
    if op == "gather":
        gpu.gather(bad, out=out)
    elif op == "scatter":
        gpu.scatter(bad, cp.asarray(random_canonical(SPEC, 5, 4)))
    elif op == "copy_src":
        gpu.copy(bad, good)
    else:
        gpu.copy(good, bad)
    with pytest.raises(BlockIdRangeError, match=rf"{role}\[2\] = 64") as info:
        gpu.synchronize()
    assert (info.value.role, info.value.index, info.value.value) == (role, 2, 64)
    assert_same_bits(gpu.to_numpy(), before)
    assert not np.asarray(out.get()).any()  # the gather wrote nothing either
    gpu.check_device_ids()  # reported once
    gpu.copy(good, [20, 21, 22, 23])  # the pool works on
    ref.copy(good, [20, 21, 22, 23])
    _same(gpu, ref)


def test_device_id_metadata_is_checked_on_the_host(backend: Backend) -> None:
    _, gpu = _pair(SPEC, 6)
    cp = backend.cp
    with pytest.raises(BlockIdTypeError, match="one-dimensional"):
        gpu.gather(cp.zeros((2, 2), dtype=np.int64))
    with pytest.raises(BlockIdTypeError, match="int32 or int64"):
        gpu.gather(cp.zeros(2, dtype=np.float32))
    with pytest.raises(LengthMismatchError, match="3 ids"):
        gpu.copy(cp.zeros(3, dtype=np.int32), [1, 2])


def test_many_device_checks_before_reading_them(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More device-checked calls than status slots: the pool reads the slots when they come
    round, and a bad call among them is still reported, in order."""
    monkeypatch.setattr(pool_module, "STATUS_SLOTS", 8)
    _, gpu = _pair(SPEC, 7)
    cp = backend.cp
    ids = cp.asarray(np.asarray([1, 2, 3], dtype=np.int32))
    for _ in range(pool_module.STATUS_SLOTS + 5):
        gpu.gather(ids)
    gpu.gather(cp.asarray(np.asarray([1, 99], dtype=np.int32)))
    with pytest.raises(BlockIdRangeError, match=r"ids\[1\] = 99"):
        gpu.check_device_ids()
    if backend.fake:
        assert CHECK_KERNEL in fake_cupy.FakeFunction.launches


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.name)
def test_error_matrix(backend: Backend, case: ErrorCase) -> None:
    """The shared error matrix: the typed error, its message, nothing written."""
    spec = PoolSpec(**ERROR_SPEC_KW)
    _, gpu = _pair(spec, 8)
    before = gpu.to_numpy()
    with pytest.raises(case.error, match=None) as info:
        case.call(gpu, backend.cp)
    assert isinstance(info.value, KVPoolError)
    assert case.fragment in str(info.value)
    assert_same_bits(gpu.to_numpy(), before)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), spec=pool_specs(max_blocks=40), seed=st.integers(0, 2**32 - 1))
def test_random_programs_match_reference(
    backend: Backend, data: st.DataObject, spec: PoolSpec, seed: int
) -> None:
    if backend.fake:
        fake_cupy.reset()
    ref, gpu = _pair(spec, seed)
    run_program(gpu, ref, spec, data.draw(st.lists(ops(spec.num_blocks), max_size=5)), backend.cp)
    host = gpu.alloc_host_buffer(2)
    ids = [0, spec.num_blocks - 1] if spec.num_blocks > 1 else [0, 0]
    gpu.offload(ids, host_out=host).wait()
    assert_same_bits(host, ref.gather(ids))
    _same(gpu, ref)


# ----------------------------------------------------------------------------- launch paths


def test_kernels_go_through_the_driver(backend: Backend) -> None:
    """The pool launches through ``cupy.cuda.driver.launchKernel`` with one parameter block
    (on the GPU too: a silent fallback to CuPy's kernel call fails here)."""
    ref, gpu = _pair(SPEC, 9)
    assert gpu.launch_path == pool_module.LAUNCH_DRIVER, gpu.launch_note
    assert "launchKernel" in gpu.launch_note
    if backend.fake:
        fake_cupy.FakeFunction.routes.clear()
    for n in (1, INLINE_PAIRS, INLINE_PAIRS + 3):
        ids = list(range(n))
        assert_same_bits(gpu.gather(ids), ref.gather(ids))
    gpu.gather(backend.cp.asarray(np.asarray([1, 2], dtype=np.int32)))  # a device check too
    gpu.synchronize()
    if backend.fake:
        assert fake_cupy.FakeFunction.routes == ["driver"] * 5


def test_a_fresh_thread_gets_its_context_first(backend: Backend) -> None:
    """A thread that has not used CUDA has no current context: its first launch goes
    through CuPy's kernel call (which makes the context current), the next through the
    driver; both give the reference's bytes."""
    ref, gpu = _pair(SPEC, 10)
    if backend.fake:
        fake_cupy.FakeFunction.routes.clear()
    results: list[Any] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for ids in ([3, 4], [5, 6, 7]):
                results.append(np.asarray(gpu.gather(ids).get()))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert not errors, errors
    assert_same_bits(results[0], ref.gather([3, 4]))
    assert_same_bits(results[1], ref.gather([5, 6, 7]))
    if backend.fake:
        # the output buffer's allocation already made the context current
        assert fake_cupy.FakeFunction.routes == ["driver", "driver"]


def test_a_launch_without_context_takes_cupys_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whenever the pool's context is not current, the launch goes through CuPy's kernel
    call on the pool's device (fake only: the context is switched off by hand)."""
    fake = fake_cupy.module()
    fake_cupy.reset()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    _clear_caches()
    try:
        ref, gpu = _pair(SPEC, 11)
        out = fake.empty(SPEC.buffer_shape(2), dtype=SPEC.storage_dtype)
        fake_cupy.FakeFunction.routes.clear()
        fake_cupy._THREAD.context = 0
        gpu.gather([8, 9], out=out)
        assert fake_cupy.FakeFunction.routes == ["call"]
        gpu.gather([9, 8], out=out)
        assert fake_cupy.FakeFunction.routes == ["call", "driver"]
        assert_same_bits(out, ref.gather([9, 8]))
    finally:
        monkeypatch.undo()
        _clear_caches()


@pytest.mark.parametrize("breakage", ["no launchKernel", "self-test writes nothing"])
def test_falls_back_to_cupys_call(monkeypatch: pytest.MonkeyPatch, breakage: str) -> None:
    """A CuPy without the driver launch, or a driver launch that fails its self-test at
    construction: the pool says so and launches every kernel through CuPy's call, with the
    same results (fake only)."""
    fake = fake_cupy.module()
    fake_cupy.reset()
    driver = types.SimpleNamespace(ctxGetCurrent=fake_cupy._Driver.ctxGetCurrent)
    if breakage == "self-test writes nothing":
        driver.launchKernel = lambda *args: None
    monkeypatch.setattr(fake.cuda, "driver", driver)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    _clear_caches()
    try:
        ref, gpu = _pair(SPEC, 12)
        assert gpu.launch_path == pool_module.LAUNCH_CUPY
        reason = "AttributeError" if breakage == "no launchKernel" else "self-test"
        assert reason in gpu.launch_note and "CuPy's kernel call" in gpu.launch_note
        fake_cupy.FakeFunction.routes.clear()
        for n in (2, 30):
            src, dst = list(range(n)), list(range(n, 2 * n))
            assert_same_bits(gpu.gather(src), ref.gather(src))
            gpu.copy(src, dst)
            ref.copy(src, dst)
        _same(gpu, ref)
        assert set(fake_cupy.FakeFunction.routes) == {"call"}
    finally:
        monkeypatch.undo()
        _clear_caches()


def test_the_fake_refuses_what_cupy_and_the_driver_refuse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fake's launch calls fail where the real ones do: shared_mem or stream given
    positionally to a RawKernel, a NumPy argument of more than one element, a negative or
    missing launch dimension, an unknown function, kernelParams together with extra, a
    thread without a current context."""
    fake = fake_cupy.module()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    kernel = fake.RawModule(code=KERNEL_SOURCE).get_function(CHECK_KERNEL)
    block = np.zeros(1, dtype=CHECK_ARGS_DTYPE)
    stream = fake.cuda.get_current_stream()
    with pytest.raises(TypeError):
        kernel((1,), (32,), (block,), 0, stream)
    with pytest.raises(TypeError, match="size one"):
        kernel((1,), (32,), (np.zeros(2, dtype=CHECK_ARGS_DTYPE),), shared_mem=0, stream=stream)
    with pytest.raises(TypeError, match="40 bytes"):
        kernel((1,), (32,), (np.int64(0),), shared_mem=0, stream=stream)
    kernel((1,), (32,), (block,), shared_mem=0, stream=stream)  # n = 0: does nothing
    launch = fake.cuda.driver.launchKernel
    params = np.array([block.ctypes.data], dtype=np.uint64)
    fn = kernel.kernel.ptr
    good = [fn, 1, 1, 1, 32, 1, 1, 0, 0, int(params.ctypes.data), 0]
    launch(*good)
    with pytest.raises(TypeError):
        launch(*good[:-1])
    with pytest.raises(OverflowError):
        launch(fn, -1, *good[2:])
    with pytest.raises(fake_cupy.CUDADriverError, match="INVALID_VALUE"):
        launch(fn, 0, *good[2:])
    with pytest.raises(fake_cupy.CUDADriverError, match="OUT_OF_RESOURCES"):
        launch(fn, 1, 1, 1, 512, 1, 1, *good[7:])
    with pytest.raises(fake_cupy.CUDADriverError, match="INVALID_HANDLE"):
        launch(fn + 1, *good[1:])
    with pytest.raises(fake_cupy.CUDADriverError, match="kernelParams and extra"):
        launch(*good[:-1], int(params.ctypes.data))
    monkeypatch.setattr(fake_cupy._THREAD, "context", 0)
    with pytest.raises(fake_cupy.CUDADriverError, match="INVALID_CONTEXT"):
        launch(*good)


def test_fake_lays_structs_out_like_numpy() -> None:
    """The fake's own C layout of each struct (from the source text) matches the NumPy
    mirror the pool fills, field by field."""
    for name, dtype in (("KvpoolArgs", ARGS_DTYPE), ("KvpoolCheckArgs", CHECK_ARGS_DTYPE)):
        struct = fake_cupy.STRUCTS[name]
        fields: Any = dtype.fields
        assert struct.size == dtype.itemsize
        assert [(f, off) for f, _, _, off in struct.fields] == [
            (f, int(fields[f][1])) for f in dtype.names or ()
        ]


def test_more_blocks_than_int32_ids_name_is_refused(backend: Backend) -> None:
    """Ids reach the kernels as int32: a pool of 2**31 blocks is refused before it
    allocates anything."""
    spec = PoolSpec(num_blocks=2**31, block_size=1, num_layers=1, num_kv_heads=1, head_dim=1)
    with pytest.raises(ConfigError, match="int32 ids"):
        accel.BlockPool(spec)
