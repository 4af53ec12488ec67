"""What only the CuPy twin has: a lazy CuPy import, streams, and differential runs.

The shared behaviour of both twins is checked by ``tests/blockpool/test_pool.py``; here the accel
twin (``kachedb_radix.accel.BlockPool``) runs random programs beside the reference twin
(``kachedb_radix.reference.BlockPool``) and must leave bit-identical contents. GPU tests skip
with the reason from :func:`kachedb_radix.accel.blockpool.cupy_unavailable_reason` ("cupy not
installed" or "no CUDA device: ..."). The import-without-CuPy tests always run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kachedb_radix import accel, reference
from kachedb_radix.reference.blockpool import (
    BackendUnavailableError,
    BufferLayoutError,
    Layout,
    PoolSpec,
    PoolTooLargeError,
)
from tests.support.blockpool import (
    ERROR_SPEC_KW,
    GPU_SKIP_REASON,
    assert_same_bits,
    ops,
    pool_specs,
    random_canonical,
    requires_gpu,
    run_program,
)
from tests.support.paths import ROOT

LAYOUTS = list(Layout)
REPO_ROOT = ROOT


def test_package_imports_without_cupy() -> None:
    """With ``cupy`` unimportable, accel imports, reports why, and refuses to build a pool."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["cupy"] = None  # makes `import cupy` raise ImportError
        from kachedb_radix import accel
        from kachedb_radix.reference.blockpool import BackendUnavailableError, PoolSpec
        assert accel.blockpool.cupy_unavailable_reason() == "cupy not installed"
        try:
            accel.BlockPool(PoolSpec(2, 1, 1, 1, 8))
        except BackendUnavailableError as exc:
            assert "cupy not installed" in str(exc), exc
        else:
            raise SystemExit("constructed a CuPy pool without cupy")
        assert "cupy" not in {m for m in sys.modules if sys.modules[m] is not None}
        print("ok")
        """
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=REPO_ROOT
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


def test_importing_accel_does_not_import_cupy() -> None:
    code = "import sys, kachedb_radix.accel.blockpool.pool; print('cupy' in sys.modules)"
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    )
    assert res.stdout.strip() == "False"


@pytest.mark.skipif(GPU_SKIP_REASON is None, reason="a CUDA device is present")
def test_without_device_the_pool_is_refused_with_the_reason() -> None:
    assert GPU_SKIP_REASON is not None
    assert GPU_SKIP_REASON == "cupy not installed" or GPU_SKIP_REASON.startswith("no CUDA device")
    with pytest.raises(BackendUnavailableError, match="cannot run") as info:
        accel.BlockPool(PoolSpec(2, 1, 1, 1, 8))
    assert GPU_SKIP_REASON in str(info.value)


# ----------------------------------------------------------------------------- GPU only
def _cp() -> Any:
    import cupy

    return cupy


def _pair(spec: PoolSpec, seed: int) -> tuple[reference.BlockPool, accel.BlockPool]:
    """The reference twin and the accel twin, both holding the same random contents."""
    data = random_canonical(spec, seed)
    gpu = accel.BlockPool.from_canonical(spec, data)
    assert gpu.implementation == "accel"
    return reference.BlockPool.from_canonical(spec, data), gpu


GPU_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@requires_gpu
@GPU_SETTINGS
@given(data=st.data(), spec=pool_specs(max_blocks=24), seed=st.integers(0, 2**32 - 1))
def test_random_programs_bit_identical(data: st.DataObject, spec: PoolSpec, seed: int) -> None:
    cp = _cp()
    ref, gpu = _pair(spec, seed)
    assert_same_bits(gpu.to_numpy(), ref.to_numpy())
    program = data.draw(st.lists(ops(spec.num_blocks), max_size=6))
    run_program(
        gpu, ref, spec, program, cp, lambda: assert_same_bits(gpu.to_numpy(), ref.to_numpy())
    )


@requires_gpu
@GPU_SETTINGS
@given(spec=pool_specs(max_blocks=24), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_offload_restore_bit_identical(spec: PoolSpec, seed: int, data: st.DataObject) -> None:
    ref, gpu = _pair(spec, seed)
    ids = data.draw(st.lists(st.integers(0, spec.num_blocks - 1), unique=True))
    target = data.draw(st.permutations(range(spec.num_blocks)))[: len(ids)]
    handle = gpu.offload(ids)
    host = handle.wait()
    assert handle.done()
    assert_same_bits(host, ref.offload(ids).wait())
    gpu.restore(target, host).wait()
    ref.restore(target, host)
    assert_same_bits(gpu.to_numpy(), ref.to_numpy())


@requires_gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_overlapping_copy_is_parallel_assignment(layout: Layout) -> None:
    spec = PoolSpec(**{**ERROR_SPEC_KW, "num_blocks": 6, "layout": layout})
    ref, gpu = _pair(spec, 3)
    for src, dst in (([1, 2], [2, 3]), ([0, 1, 2, 3], [1, 2, 3, 0]), ([4, 4, 5], [5, 0, 4])):
        gpu.copy(src, dst)
        ref.copy(src, dst)
        assert_same_bits(gpu.to_numpy(), ref.to_numpy())


@requires_gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_realistic_geometry(layout: Layout) -> None:
    """Llama-3-8B geometry, 16-token blocks (2 MiB each), 16-byte vector path."""
    spec = PoolSpec.from_preset("llama-3-8b", num_blocks=48, block_size=16, layout=layout)
    ref, gpu = _pair(spec, 4)
    rng = np.random.default_rng(4)
    ids = [int(i) for i in rng.permutation(48)[:20]]
    assert_same_bits(gpu.gather(ids), ref.gather(ids))
    gpu.copy(ids[:10], ids[10:])
    ref.copy(ids[:10], ids[10:])
    host = gpu.alloc_host_buffer(5)
    gpu.offload(ids[:5], host_out=host).wait()
    gpu.restore(ids[15:], host).wait()
    ref.restore(ids[15:], ref.gather(ids[:5]))
    assert_same_bits(gpu.to_numpy(), ref.to_numpy())


@requires_gpu
def test_offload_on_explicit_stream_and_stream_wait() -> None:
    cp = _cp()
    spec = PoolSpec(**{**ERROR_SPEC_KW, "num_blocks": 8, "layout": Layout.LAYER_MAJOR})
    ref, gpu = _pair(spec, 5)
    stream = cp.cuda.Stream(non_blocking=True)
    h = gpu.offload([7, 1], stream=stream)
    h.stream_wait(cp.cuda.get_current_stream())
    r = gpu.restore([0, 2], h.wait(), stream=stream)
    r.wait()
    ref.copy([7, 1], [0, 2])
    gpu.synchronize()
    assert_same_bits(gpu.to_numpy(), ref.to_numpy())


@requires_gpu
def test_host_array_as_device_buffer_refused() -> None:
    spec = PoolSpec(**ERROR_SPEC_KW)
    _, gpu = _pair(spec, 7)
    before = gpu.to_numpy()
    host = np.zeros(spec.buffer_shape(1), dtype=spec.storage_dtype)
    with pytest.raises(BufferLayoutError, match="device"):
        gpu.scatter([0], host)
    with pytest.raises(BufferLayoutError, match="device"):
        gpu.gather([0], out=host)
    assert_same_bits(gpu.to_numpy(), before)


@requires_gpu
def test_pool_larger_than_device_refused_before_allocating() -> None:
    cp = _cp()
    free, total = cp.cuda.runtime.memGetInfo()
    spec = PoolSpec.from_preset("llama-3-8b", num_blocks=1, block_size=16)
    spec = spec.with_blocks(int(total) // spec.bytes_per_block + 1)
    with pytest.raises(PoolTooLargeError, match="device free memory") as info:
        accel.BlockPool(spec)
    assert info.value.required_bytes == spec.total_bytes
    with pytest.raises(PoolTooLargeError, match="memory_budget"):
        accel.BlockPool(PoolSpec(**ERROR_SPEC_KW), memory_budget=10)
    assert int(free) > 0
