"""Benchmarks of the C twin (accel) against the reference (pytest-benchmark).

Run::

    python -m pytest benchmarks/bench_accel.py -p no:cacheprovider --benchmark-only \\
        -o python_files='bench_*.py'

Shapes (block size 16, tokens from a uint32 NumPy array, Python call included):

* ``one_block_nodes``: a 1,024-token prompt cached as 64 one-block nodes, each level
  with 8 siblings (the path's block and 7 others): 64 hash probes. Target <= 1.0 us.
* ``one_edge``: the same prompt cached as one 64-block edge. Target <= 0.5 us.
* both again on the reference (accel must be >= 30x faster);
* ``long``: a 131,072-token match (8,192 blocks, branching every 64 blocks).
  Target <= 64 us.
* ``adversarial``: thousands of sibling blocks crafted to share one hash under the
  keys of seed 0 (``RadixTree(..., _hash_seed=0)``): with that seed a lookup scans the
  whole collision list of their parent's hash trie; with the default per-tree random
  seed it stays flat.
* ``bytes_per_block``: the tree's own C memory beyond the 4*B token bytes, per cached
  block (``RadixTree.memory_bytes()``), on the gate's memory shapes
  (:mod:`kachedb_radix.spec.gate.memory`), reported in ``extra_info``.

Unit tests never assert timings; these numbers go to benchmarks/ACCEL.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kachedb_radix.accel._radix as radix
from kachedb_radix import accel, reference
from kachedb_radix.spec.gate import memory

B = 16
PROMPT_BLOCKS = 64
SIBLINGS = 8


def _prompt(blocks: int, seed: int = 1) -> np.ndarray[Any, np.dtype[np.uint32]]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 50_000, size=blocks * B, dtype=np.uint32)


def _one_block_nodes(factory: Any) -> tuple[Any, np.ndarray[Any, np.dtype[np.uint32]]]:
    """64 one-block nodes on the path, 8 children at every level."""
    prompt = _prompt(PROMPT_BLOCKS)
    tree = factory(PROMPT_BLOCKS * SIBLINGS + 8, B)
    tree.insert(prompt)
    rng = np.random.default_rng(2)
    for level in range(PROMPT_BLOCKS):
        for _ in range(SIBLINGS - 1):
            other = rng.integers(50_000, 100_000, size=B, dtype=np.uint32)
            tree.insert(np.concatenate([prompt[: level * B], other]))
    assert tree.match(prompt).length == PROMPT_BLOCKS * B
    return tree, prompt


def _one_edge(factory: Any) -> tuple[Any, np.ndarray[Any, np.dtype[np.uint32]]]:
    prompt = _prompt(PROMPT_BLOCKS)
    tree = factory(PROMPT_BLOCKS + 8, B)
    tree.insert(prompt)
    return tree, prompt


IMPLS: dict[str, Any] = {"accel": accel.RadixTree, "reference": reference.RadixTree}


@pytest.mark.parametrize("impl", ["accel", "reference"])
def test_match_1024_one_block_nodes(benchmark: Any, impl: str) -> None:
    tree, prompt = _one_block_nodes(IMPLS[impl])
    result = benchmark(tree.match, prompt)
    assert result.length == 1024


@pytest.mark.parametrize("impl", ["accel", "reference"])
def test_match_1024_one_edge(benchmark: Any, impl: str) -> None:
    tree, prompt = _one_edge(IMPLS[impl])
    result = benchmark(tree.match, prompt)
    assert result.length == 1024


def test_match_1024_one_block_nodes_list_input(benchmark: Any) -> None:
    """The same match from a Python list (validated and narrowed in C)."""
    tree, prompt = _one_block_nodes(accel.RadixTree)
    tokens = prompt.tolist()
    assert benchmark(tree.match, tokens).length == 1024


def test_match_131072(benchmark: Any) -> None:
    blocks = 131_072 // B
    prompt = _prompt(blocks, seed=3)
    tree = accel.RadixTree(blocks + blocks // 64 + 8, B)
    tree.insert(prompt)
    rng = np.random.default_rng(4)
    for cut in range(64, blocks, 64):
        other = rng.integers(50_000, 100_000, size=B, dtype=np.uint32)
        tree.insert(np.concatenate([prompt[: cut * B], other]))
    result = benchmark(tree.match, prompt)
    assert result.length == 131_072


def test_insert_1024_hit(benchmark: Any) -> None:
    """Re-inserting a fully cached 1,024-token prompt (reuse only, no allocation)."""
    tree, prompt = _one_block_nodes(accel.RadixTree)
    assert benchmark(tree.insert, prompt).reused == PROMPT_BLOCKS


def test_match_pin_release_1024(benchmark: Any) -> None:
    tree, prompt = _one_block_nodes(accel.RadixTree)

    def pin_and_release() -> None:
        lease = tree.match(prompt, pin=True).lease
        tree.release(lease)

    benchmark(pin_and_release)


def _colliding(count: int) -> list[np.ndarray[Any, np.dtype[np.uint32]]]:
    keys = radix._hash_keys(0, B)
    zero = (-keys[0]) % 2**32
    blocks = []
    for i in range(count):
        block = np.zeros(B, dtype=np.uint32)
        block[0], block[1] = zero, i
        blocks.append(block)
    return blocks


@pytest.mark.parametrize("siblings", [100, 1000, 4000])
@pytest.mark.parametrize("seed", ["zero", "random"])
def test_adversarial_siblings(benchmark: Any, siblings: int, seed: str) -> None:
    blocks = _colliding(siblings)
    if seed == "zero":
        tree = accel.RadixTree(siblings + 8, B, _hash_seed=0)
        assert len({radix._block_hash(0, b) for b in blocks[:50]}) == 1
    else:
        tree = accel.RadixTree(siblings + 8, B)
    for block in blocks:
        tree.insert(block)
    probe = blocks[-1]
    benchmark.extra_info["siblings"] = siblings
    assert benchmark(tree.match, probe).length == B


@pytest.mark.parametrize("shape", list(memory.memory_shapes(quick=True)))
def test_bytes_per_block(benchmark: Any, shape: str) -> None:
    """Own C bytes per cached block beyond the 4*B token bytes (the gate's memory shapes)."""
    tree = memory.memory_shapes(quick=True)[shape](accel.RadixTree, "accel")
    benchmark.extra_info["bytes_per_block"] = round(memory.bytes_per_block(tree), 1)
    benchmark.extra_info["live_nodes"] = tree.memory_bytes()["live_nodes"]
    benchmark.extra_info["cached_blocks"] = tree.stats().cached
    benchmark.pedantic(tree.memory_bytes, rounds=3, iterations=1)
