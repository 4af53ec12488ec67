"""Insert cost per implementation: a fresh sequence, a shared prefix, a divergence
inside an edge (a node split), and the acquire-pin-release cycle of one request.

Each round runs an untimed setup (a new sequence; room made by evicting, so the timed
insert never evicts) and then the timed call; see the workloads in
``benchmarks/shapes.py``. Inputs are uint32 arrays, as a serving engine holds them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from benchmarks import shapes
from benchmarks.conftest import IMPLEMENTATIONS

pytestmark = pytest.mark.benchmark(disable_gc=True)

MAKERS: dict[str, Callable[..., shapes.Workload]] = {
    "fresh": shapes.insert_fresh,
    "shared": shapes.insert_shared,
    "split": shapes.insert_split,
    "cycle": shapes.serving_cycle,
}
ROUNDS = 200


def test_insert(benchmark: Any, tree_impl: str, insert_case: tuple[str, int]) -> None:
    kind, length = insert_case
    work = MAKERS[kind](IMPLEMENTATIONS.factories[tree_impl], tree_impl, length)
    assert work.setup is not None
    what = "match(pin) + insert + release" if kind == "cycle" else "insert"
    benchmark.group = f"insert {kind:<6} {length:>6} tokens ({what})"
    benchmark.extra_info.update(impl=tree_impl, kind=kind, length=length)
    benchmark.pedantic(work.run, setup=work.setup, rounds=ROUNDS, warmup_rounds=5)
