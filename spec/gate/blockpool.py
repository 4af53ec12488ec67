"""The CPU side of a GPU block-pool call, timed without a GPU.

A call of the accel pool costs, before the kernel starts, what its host does: check the
ids (:func:`reference.blockpool.validation.normalize_ids`, shared with the reference
pool), find the cached launch plan, and pack the ids into the launch arguments (16 blocks
or fewer) or into the pinned staging ring (more).  These cases run exactly that code --
the pool's own helpers, with the CuPy launch itself left out -- so a CI machine without a
GPU catches a regression of the per-call cost.  Geometry: Llama-3-8B, 16-token blocks,
a pool of 8,192 blocks (16 GiB).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from reference.blockpool.layout import PoolSpec
from reference.blockpool.validation import normalize_ids

from .shapes import Workload

NUM_BLOCKS = 8192
#: Fake device addresses: the plans only do arithmetic on them.
POOL_ADDRESS = 1 << 40
BUFFER_ADDRESS = 1 << 41


def _ids(n: int) -> list[int]:
    return [int(i) for i in np.random.default_rng(n).permutation(NUM_BLOCKS)[:n]]


def validate_list(n: int) -> Workload:
    """Checking ``n`` ids given as a Python list."""
    ids = _ids(n)
    return Workload(lambda: normalize_ids(ids, NUM_BLOCKS, "ids"))


def validate_array(n: int) -> Workload:
    """Checking ``n`` ids given as a NumPy int64 array."""
    ids = np.asarray(_ids(n), dtype=np.int64)
    return Workload(lambda: normalize_ids(ids, NUM_BLOCKS, "ids"))


class _Finished:
    """An event of a launch that has long completed."""

    done = True

    def synchronize(self) -> None:
        return None


def accel_gather(n: int) -> Workload:
    """The accel pool's host work for a gather of ``n`` blocks: ids checked, plan looked
    up, ids packed into the arguments (n <= 16: ids as a list, as an engine passes a few)
    or staged (more: ids as a NumPy array, as an engine holds a large batch -- a list of
    thousands of ints costs its conversion, ~50 ns an id, whatever the pool does)."""
    from accel.blockpool.kernels import (
        INLINE_PAIRS,
        array_args,
        inline_args,
        pack_inline,
        pool_side,
    )
    from accel.blockpool.plans import GATHER, PlanCache, host_ids
    from accel.blockpool.staging import StagingRing

    spec = PoolSpec.from_preset("llama-3-8b", num_blocks=NUM_BLOCKS, block_size=16)
    plans = PlanCache(spec, pool_side(spec, [POOL_ADDRESS]), lambda side: 0)
    ids: Any = _ids(n) if n <= INLINE_PAIRS else np.asarray(_ids(n), dtype=np.int64)
    words = np.zeros(INLINE_PAIRS, dtype=np.int32)
    ring = StagingRing(np.zeros(1 << 16, dtype=np.int32), 1 << 42)
    finished = _Finished()

    def inline() -> tuple[Any, ...]:
        checked = host_ids(ids, NUM_BLOCKS, "ids")
        prep = plans.get(GATHER, len(checked), BUFFER_ADDRESS)
        src = pack_inline(checked, words)
        return inline_args(prep.plan, prep.static, POOL_ADDRESS, BUFFER_ADDRESS, src, src)

    def staged() -> tuple[Any, ...]:
        checked = host_ids(ids, NUM_BLOCKS, "ids")
        prep = plans.get(GATHER, len(checked), BUFFER_ADDRESS)
        span = ring.take(len(checked))
        (address,) = ring.write(span, [checked])
        ring.retire(span, finished)
        return array_args(prep.static, POOL_ADDRESS, BUFFER_ADDRESS, address, 4)

    run: Callable[[], object] = inline if n <= INLINE_PAIRS else staged
    return Workload(run)


def host_side_cases(pool: str) -> dict[str, Callable[[], Workload]]:
    """The cases for ``pool`` (``"reference"`` or ``"accel"``), by name."""
    cases: dict[str, Callable[[], Workload]] = {
        "gpu-host/ids/list/16": lambda: validate_list(16),
        "gpu-host/ids/numpy/4096": lambda: validate_array(4096),
    }
    if pool == "accel":
        cases["gpu-host/gather/16"] = lambda: accel_gather(16)
        cases["gpu-host/gather/4096"] = lambda: accel_gather(4096)
    return cases
