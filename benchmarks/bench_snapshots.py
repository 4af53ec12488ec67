"""Benchmarks of snapshots and readers, for both implementations (pytest-benchmark).

Run::

    python -m pytest benchmarks/bench_snapshots.py -p no:cacheprovider --benchmark-only \\
        -o python_files='bench_*.py'

* ``acquire``: ``snapshot()`` and ``reader()`` + ``leave()`` on a tree of 64 one-block
  nodes with 8 siblings per level (the bench_accel tree).
* ``match``: the 1,024-token match on that tree, live versus on a snapshot; and a
  131,072-token match on a snapshot (GIL released in accel).
* ``writer``: ``evict(4)`` then the insert of a fresh 4-block prompt into the full pool,
  with no snapshot alive, with an old snapshot alive (path copying), and with a reader
  inside (it leaves and a new one enters each round: the evicted blocks go to the
  quarantine and the insert reclaims the previous round's batch).
* ``reader_threads``: accel only; 1-4 threads each matching 131,072 tokens on its own
  reader for 2,000 rounds; ``matches_per_second_median`` in extra_info (the column to
  read; the time column is per round of all threads). The walks run without the GIL,
  so on an idle machine the rate can grow up to the number of free cores.

Numbers go to benchmarks/SNAPSHOTS.md. Unit tests never assert timings.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from kachedb_radix import accel, reference

B = 16
LEVELS = 64
SIBLINGS = 8
IMPLS: dict[str, Any] = {"accel": accel.RadixTree, "reference": reference.RadixTree}


def _branchy(factory: Any) -> tuple[Any, np.ndarray]:
    """64 one-block nodes deep, 8 siblings per level; returns the tree and the prompt."""
    rng = np.random.default_rng(11)
    prompt = rng.integers(0, 50_000, size=LEVELS * B, dtype=np.uint32)
    tree = factory(LEVELS * SIBLINGS + 64, B)
    for level in range(LEVELS):
        for sibling in range(1, SIBLINGS):
            branch = prompt[: (level + 1) * B].copy()
            branch[level * B] = 60_000 + sibling
            tree.insert(branch)
    tree.insert(prompt)
    assert tree.match(prompt).length == LEVELS * B
    return tree, prompt


def _long_edges(factory: Any, blocks: int) -> tuple[Any, np.ndarray]:
    """A 131,072-token prompt cached with a branch every 64 blocks."""
    rng = np.random.default_rng(12)
    prompt = rng.integers(0, 50_000, size=blocks * B, dtype=np.uint32)
    tree = factory(blocks + blocks // 64 + 8, B)
    tree.insert(prompt)
    for at in range(64, blocks, 64):
        branch = prompt[: (at + 1) * B].copy()
        branch[at * B] = 60_001
        tree.insert(branch)
    return tree, prompt


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_acquire_snapshot(benchmark: Any, impl: str) -> None:
    tree, _ = _branchy(IMPLS[impl])
    snap = benchmark(tree.snapshot)
    assert snap.version == tree.version


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_acquire_reader_and_leave(benchmark: Any, impl: str) -> None:
    tree, _ = _branchy(IMPLS[impl])

    def enter_leave() -> None:
        tree.reader().leave()

    benchmark(enter_leave)
    assert tree.stats().readers == 0


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_match_live_1024(benchmark: Any, impl: str) -> None:
    tree, prompt = _branchy(IMPLS[impl])
    assert benchmark(tree.match, prompt).length == LEVELS * B


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_match_snapshot_1024(benchmark: Any, impl: str) -> None:
    tree, prompt = _branchy(IMPLS[impl])
    snap = tree.snapshot()
    assert benchmark(snap.match, prompt).length == LEVELS * B


@pytest.mark.parametrize("impl", sorted(IMPLS))
def test_match_snapshot_131072(benchmark: Any, impl: str) -> None:
    tree, prompt = _long_edges(IMPLS[impl], 8192)
    snap = tree.snapshot()
    assert benchmark(snap.match, prompt).length == 8192 * B


def test_match_live_131072_accel(benchmark: Any) -> None:
    tree, prompt = _long_edges(accel.RadixTree, 8192)
    assert benchmark(tree.match, prompt).length == 8192 * B


def _writer_setup(factory: Any) -> tuple[Any, Any]:
    """A full pool of 4-block prompts and a generator of fresh ones."""
    tree = factory(1024, B)
    rng = np.random.default_rng(13)
    while tree.stats().free >= 4:
        tree.insert(rng.integers(0, 50_000, size=4 * B, dtype=np.uint32))

    def fresh() -> np.ndarray:
        return rng.integers(0, 50_000, size=4 * B, dtype=np.uint32)

    return tree, fresh


@pytest.mark.parametrize("impl", sorted(IMPLS))
@pytest.mark.parametrize("mode", ["no_snapshot", "old_snapshot", "reader"])
def test_writer_insert_evict(benchmark: Any, impl: str, mode: str) -> None:
    tree, fresh = _writer_setup(IMPLS[impl])
    held: list[Any] = []
    if mode == "old_snapshot":
        held.append(tree.snapshot())  # every change now path-copies once per node
    prompts = [fresh() for _ in range(4096)]
    index = iter(range(10**9))

    if mode == "reader":

        def step() -> None:
            # Leave, re-enter: the insert reclaims the previous round's quarantine.
            held[0].leave()
            held[0] = tree.reader()
            tree.evict(4)
            tree.insert(prompts[next(index) % len(prompts)])

        held.append(tree.reader())
        tree.evict(4)  # the first round's insert reclaims this batch
    else:

        def step() -> None:
            tree.evict(4)
            tree.insert(prompts[next(index) % len(prompts)])

    benchmark(step)
    tree.check_invariants()


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
def test_reader_threads_accel(benchmark: Any, threads: int) -> None:
    tree, prompt = _long_edges(accel.RadixTree, 8192)
    rounds = 2000

    def run() -> float:
        barrier = threading.Barrier(threads + 1)

        def work() -> None:
            with tree.reader() as reader:
                barrier.wait()
                for _ in range(rounds):
                    reader.match(prompt)

        pool = [threading.Thread(target=work) for _ in range(threads)]
        for thread in pool:
            thread.start()
        barrier.wait()
        start = time.perf_counter()
        for thread in pool:
            thread.join()
        return threads * rounds / (time.perf_counter() - start)

    rates: list[float] = []

    def measured() -> None:
        rates.append(run())

    benchmark.pedantic(measured, rounds=7, iterations=1, warmup_rounds=1)
    benchmark.extra_info["matches_per_second_median"] = round(float(np.median(rates)), 1)
