"""Eviction cost per freed block against tree size (10^3 to 10^6 cached blocks).

The cost must stay flat as the tree grows (O(log n) per block at most): the gate
allows 3x between 10^6 and 10^3. Each round refills the tree to its size (untimed)
and times one ``evict(64)``; the summary at the end divides by 64 and prints the
growth per implementation. Block size 1 keeps the 10^6-block tree cheap to build.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import shapes
from benchmarks.conftest import IMPLEMENTATIONS, Records

pytestmark = pytest.mark.benchmark(disable_gc=True)

ROUNDS = 200


def test_evict(benchmark: Any, tree_impl: str, evict_size: int, bench_records: Records) -> None:
    work = shapes.evict_workload(IMPLEMENTATIONS.factories[tree_impl], tree_impl, evict_size)
    assert work.setup is not None
    benchmark.group = f"evict({shapes.EVICT_BATCH}) per call, {tree_impl}, by cached blocks"
    benchmark.extra_info.update(impl=tree_impl, cached_blocks=evict_size, batch=work.units)
    freed = benchmark.pedantic(work.run, setup=work.setup, rounds=ROUNDS, warmup_rounds=5)
    assert len(freed) == shapes.EVICT_BATCH
    if benchmark.stats is not None:  # None under --benchmark-disable
        per_block = benchmark.stats.stats.median * 1e9 / work.units
        benchmark.extra_info["per_block_ns"] = per_block
        bench_records.setdefault("evict", []).append(
            {"impl": tree_impl, "size": evict_size, "per_block_ns": per_block}
        )
