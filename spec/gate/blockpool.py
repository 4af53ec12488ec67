"""The CPU side of a GPU block-pool call, timed without a GPU.

A call of the accel pool costs, before the kernel starts, what its host does: check the ids, find
the cached launch plan, store this call's pointers and ids into the plan's argument block (16 blocks
or fewer: the ids themselves; more: their place in the pinned staging ring), and hand the block's
address to ``cuLaunchKernel``.  These cases run exactly the pool's own functions for that --
:func:`kachedb_radix.reference.blockpool.validation.small_ids` and
:func:`~kachedb_radix.reference.blockpool.validation.normalize_ids` (shared with the reference
pool), :class:`kachedb_radix.accel.blockpool.plans.PlanCache` and
:class:`~kachedb_radix.accel.blockpool.plans.Prepared`, the staging ring -- and end in a stand-in
for the driver call that takes its eleven integers, so a CI machine without a GPU catches a
regression of the per-call cost.  Left out: the CuPy calls themselves (current stream, current
context, the launch, about 3 us on a GPU host) and the output buffer's metadata check.  Geometry:
Llama-3-8B, 16-token blocks, a pool of 8,192 blocks (16 GiB).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from kachedb_radix.reference.blockpool.layout import PoolSpec
from kachedb_radix.reference.blockpool.validation import normalize_ids

from .shapes import Workload

T = TypeVar("T")

NUM_BLOCKS = 8192
#: Fake device addresses: the plans only do arithmetic on them.
POOL_ADDRESS = 1 << 40
BUFFER_ADDRESS = 1 << 41


def _ids(n: int, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(n + seed)
    return [int(i) for i in rng.permutation(NUM_BLOCKS)[:n]]


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


def _driver_launch(
    f: int, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, shared: int, stream: int,
    params: int, extra: int,
) -> None:  # fmt: skip
    """Stands in for ``cupy.cuda.driver.launchKernel`` (the same eleven integers)."""


def taken(found: T | None) -> T:
    """What the pool's fast path took; a case whose ids it would not take is a broken
    case (the pool would time its general path instead)."""
    if found is None:
        raise ValueError("these ids do not take the pool's fast path")
    return found


def accel_call(op: str, n: int) -> Workload:
    """The accel pool's host work for one call of ``op`` ("gather" or "copy") on ``n``
    blocks, as :class:`kachedb_radix.accel.blockpool.BlockPool` does it: for ``n <= 16`` (ids as a
    list, as an engine passes a few) its fast path -- ids checked by ``small_ids``
    (copy: both lists, destinations unique, the sets disjoint), the plan looked up, the
    ids stored in its argument block, the launch; for more (ids as a NumPy array, as an
    engine holds a large batch -- a list of thousands of ints costs its conversion, ~50 ns
    an id, whatever the pool does) the general path through the staging ring."""
    from kachedb_radix.accel.blockpool.kernels import INLINE_PAIRS, THREADS_PER_BLOCK, pool_side
    from kachedb_radix.accel.blockpool.plans import COPY, GATHER, PlanCache, host_ids
    from kachedb_radix.accel.blockpool.staging import StagingRing
    from kachedb_radix.reference.blockpool.validation import small_disjoint_copy, small_ids

    spec = PoolSpec.from_preset("llama-3-8b", num_blocks=NUM_BLOCKS, block_size=16)
    plans = PlanCache(spec, pool_side(spec, [POOL_ADDRESS]), lambda side: 0)
    both = _ids(2 * n)
    src, dst = both[:n], both[n:]
    ring = StagingRing(np.zeros(1 << 16, dtype=np.int32), 1 << 42)
    finished = _Finished()
    launch = _driver_launch

    def gather_small() -> None:
        ids = taken(small_ids(src, NUM_BLOCKS, INLINE_PAIRS))
        prep = plans.get(GATHER, len(ids), BUFFER_ADDRESS)
        prep.set_inline(POOL_ADDRESS, BUFFER_ADDRESS, ids, None)
        gx, gy, gz = prep.grid
        launch(1, gx, gy, gz, THREADS_PER_BLOCK, 1, 1, 0, 0, prep.params_address, 0)

    def copy_small() -> None:
        a, b = taken(small_disjoint_copy(src, dst, NUM_BLOCKS, INLINE_PAIRS))
        prep = plans.get(COPY, len(a))
        prep.set_inline(POOL_ADDRESS, POOL_ADDRESS, a, b)
        gx, gy, gz = prep.grid
        launch(1, gx, gy, gz, THREADS_PER_BLOCK, 1, 1, 0, 0, prep.params_address, 0)

    array = np.asarray(src, dtype=np.int64)

    def gather_staged() -> None:
        checked = host_ids(array, NUM_BLOCKS, "ids")
        prep = plans.get(GATHER, len(checked), BUFFER_ADDRESS)
        span = ring.take(len(checked))
        (address,) = ring.write(span, [checked])
        prep.set_bases(POOL_ADDRESS, BUFFER_ADDRESS)
        prep.set_arrays(address, 4, 0, 8, 0)
        gx, gy, gz = prep.grid
        launch(1, gx, gy, gz, THREADS_PER_BLOCK, 1, 1, 0, 0, prep.params_address, 0)
        ring.retire(span, finished)

    small: Callable[[], Any] = gather_small if op == "gather" else copy_small
    return Workload(gather_staged if n > INLINE_PAIRS else small)


def host_side_cases(pool: str) -> dict[str, Callable[[], Workload]]:
    """The cases for ``pool`` (``"reference"`` or ``"accel"``), by name."""
    cases: dict[str, Callable[[], Workload]] = {
        "gpu-host/ids/list/16": lambda: validate_list(16),
        "gpu-host/ids/numpy/4096": lambda: validate_array(4096),
    }
    if pool == "accel":
        cases["gpu-host/gather/16"] = lambda: accel_call("gather", 16)
        cases["gpu-host/copy/16"] = lambda: accel_call("copy", 16)
        cases["gpu-host/gather/4096"] = lambda: accel_call("gather", 4096)
    return cases
