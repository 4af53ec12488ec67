"""The conformance kit's copy of the reference: ``RadixTree.clone()`` against the
``copy.deepcopy`` it replaced (pytest-benchmark).

Run::

    python -m pytest benchmarks/bench_clone.py -p no:cacheprovider --benchmark-only \\
        -o python_files='bench_*.py' --benchmark-columns=median,iqr,rounds

``Lockstep.would_evict`` dry-runs an insert on a copy of the oracle before the kit draws
it (levels without ``eviction``). Before, that copy was ``copy.deepcopy`` of the
oracle's adapter (tree, leases, snapshots), which Python 3.14 refuses (the tree held
``itertools.count`` objects); now it is ``clone()`` of the tree plus a fresh adapter.
Both are measured in the same run, on three states:

* ``kit``: a pool of 12 blocks of 2 tokens after 40 random operations in two
  namespaces, with a live lease and a reader inside -- the size the kit draws
  (``kachedb_radix.spec.conform.run.KitSettings.pool``);
* ``1k`` and ``16k``: pools of 1,024 and 16,384 blocks of 16 tokens, filled by
  conversations that share system prompts, to show how each copy grows.

The ``deepcopy`` cases skip on Python 3.14 and later, where they raise. Numbers go to
benchmarks/README.md ("Headline figures"). Unit tests never assert timings.
"""

from __future__ import annotations

import copy
import random
import sys
import warnings
from typing import Any

import pytest

from kachedb_radix import reference
from kachedb_radix.spec.conform.adapter import TreeAdapter

pytestmark = pytest.mark.benchmark(min_rounds=20, warmup=True)

STATES = ("kit", "1k", "16k")


def _kit_state() -> reference.RadixTree:
    rng = random.Random(7)
    tree = reference.RadixTree(12, 2)
    for step in range(40):
        tokens = [rng.randrange(3) for _ in range(rng.randrange(2, 9))]
        namespace = rng.choice((None, "b"))
        call = tree.insert if step % 3 else tree.match
        try:
            call(tokens, namespace)
        except reference.OutOfBlocksError:
            tree.evict(4)
    tree.match([0, 0], pin=True)
    tree.reader()
    return tree


def _chat_state(num_blocks: int) -> reference.RadixTree:
    """Conversations on 16 system prompts until the pool is nearly full."""
    rng = random.Random(num_blocks)
    size = 16
    tree = reference.RadixTree(num_blocks, size)
    systems = [[rng.randrange(50_000) for _ in range(4 * size)] for _ in range(16)]
    while tree.stats().free > 8 * size:
        turns = rng.choice(systems) + [rng.randrange(50_000) for _ in range(6 * size)]
        tree.insert(turns)
    return tree


def _adapter(state: str) -> TreeAdapter:
    tree = _kit_state() if state == "kit" else _chat_state(1024 if state == "1k" else 16_384)
    adapter = TreeAdapter(lambda _blocks, _size: tree, "reference")
    adapter.reset(tree.num_blocks, tree.block_size)
    return adapter


def clone_copy(adapter: TreeAdapter) -> TreeAdapter:
    """The kit's copy now (``kachedb_radix.spec.conform.lockstep.Lockstep.would_evict``)."""
    tree = adapter.tree.clone()
    trial = TreeAdapter(lambda _blocks, _size: tree, adapter.name)
    trial.reset(tree.num_blocks, tree.block_size)
    return trial


def deepcopy_copy(adapter: TreeAdapter) -> TreeAdapter:
    """The kit's copy before: Python 3.12 and 3.13 warn on the eviction queue's counter."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "Pickle, copy, and deepcopy support will be removed", DeprecationWarning
        )
        trial: TreeAdapter = copy.deepcopy(adapter)
    return trial


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("how", ["clone", "deepcopy"])
def test_copy_of_the_reference(benchmark: Any, how: str, state: str) -> None:
    if how == "deepcopy" and sys.version_info >= (3, 14):
        pytest.skip("copy.deepcopy of itertools.count was removed in Python 3.14")
    adapter = _adapter(state)
    copier = clone_copy if how == "clone" else deepcopy_copy
    trial = benchmark(copier, adapter)
    assert trial.tree is not adapter.tree
    assert trial.tree.dump() == adapter.tree.dump()
    benchmark.extra_info["blocks cached"] = adapter.tree.stats().cached
