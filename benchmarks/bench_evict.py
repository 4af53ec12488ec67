"""Eviction cost per freed block against tree size (10^3 to 10^6 cached blocks).

The worst case of an eviction queue: the *first* ``evict(64)`` after a fill, which pays
for the fill's history if the queue is cleaned lazily.  Each round fills a fresh tree of
the wide shared-prefix shape (untimed: 8 shared heads, leaves of 8 blocks under them,
:func:`kachedb_radix.spec.gate.shapes.first_evict_workload`) and times that one call; the summary at
the end divides by 64 and prints the growth per implementation.  The cost must stay flat
as the tree grows (O(log n) per block): the gate allows 3x from 10^3 to 10^6.  Block size
1 keeps the 10^6-block fill affordable.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import shapes
from benchmarks.conftest import IMPLEMENTATIONS, Records

pytestmark = pytest.mark.benchmark(disable_gc=True)

ROUNDS = 5


def test_evict(benchmark: Any, tree_impl: str, evict_size: int, bench_records: Records) -> None:
    work = shapes.first_evict_workload(IMPLEMENTATIONS.factories[tree_impl], tree_impl, evict_size)
    assert work.setup is not None
    benchmark.group = f"first evict({shapes.EVICT_BATCH}) after a fill, {tree_impl}"
    benchmark.extra_info.update(impl=tree_impl, cached_blocks=evict_size, batch=work.units)
    freed = benchmark.pedantic(work.run, setup=work.setup, rounds=ROUNDS, warmup_rounds=0)
    assert len(freed) == shapes.EVICT_BATCH
    if benchmark.stats is not None:  # None under --benchmark-disable
        per_block = benchmark.stats.stats.median * 1e9 / work.units
        benchmark.extra_info["per_block_ns"] = per_block
        bench_records.setdefault("evict", []).append(
            {"impl": tree_impl, "size": evict_size, "per_block_ns": per_block}
        )
