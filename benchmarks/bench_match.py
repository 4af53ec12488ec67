"""Match latency against prompt length, tree shape and input kind, per implementation.

Each shape (``benchmarks/shapes.py``) is built once per implementation to serve the
longest prompt of the sweep; a case matches the first L tokens of its cached query
path, so every match is a full match of L tokens. ``flat-hash`` is the vLLM-style
hash-map baseline (``benchmarks/flat_index.py``) holding the same sequences.
Cases of one (shape, length, input) form a pytest-benchmark group: the implementations
appear side by side, with ratios to the fastest.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import shapes
from benchmarks.conftest import match_tree

pytestmark = pytest.mark.benchmark(max_time=0.25, min_rounds=5, disable_gc=True, warmup=True)


def test_match(
    benchmark: Any, match_impl: str, match_case: tuple[str, int, str], match_max_tokens: int
) -> None:
    shape, length, kind = match_case
    tree, built = match_tree(match_impl, shape, match_max_tokens)
    work = shapes.match_workload(tree, built.query[:length], kind)
    benchmark.group = f"match {shape:<14} {length:>6} tokens, {kind:<6}"
    benchmark.extra_info.update(impl=match_impl, shape=shape, length=length, input=kind)
    found = benchmark(work.run)
    assert found.length == length
