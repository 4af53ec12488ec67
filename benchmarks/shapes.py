"""The benchmark suite's shapes: the gate's standard shapes, plus what only the suite uses.

The trees and workloads are the gate's (:mod:`kachedb_radix.spec.gate.shapes`, re-exported here, so
the suite, the plot and the gate measure exactly the same things).  Here beside them:

* :func:`find_implementations` -- which tree implementations run, and why any does not;
* :func:`build_flat` -- the flat hash-map baseline holding a shape's sequences;
* :func:`measure_memory` -- bytes per cached block at large sizes, three ways
  (the tree's own ``memory_bytes()``, tracemalloc, RSS).
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Mapping
from dataclasses import dataclass

from kachedb_radix.spec.gate.memory import grouped
from kachedb_radix.spec.gate.shapes import *  # noqa: F403 - the shared shapes, re-exported
from kachedb_radix.spec.gate.shapes import BLOCK_SIZE, Shape, TreeFactory, _check_full_match
from kachedb_radix.spec.twins import find_twins, pure

from .flat_index import FlatIndex


@dataclass(frozen=True)
class Implementations:
    """The tree implementations that run, and the reason for each that does not.

    Attributes:
        factories: name -> ``RadixTree`` class, for each implementation that runs.
        missing: name -> why it does not run (never silently dropped).
        pure: whether ``KACHEDB_RADIX_PURE=1`` was set (the only switch that drops accel).
    """

    factories: dict[str, TreeFactory]
    missing: dict[str, str]
    pure: bool

    def describe(self) -> str:
        """One line naming what ran and what did not, and why."""
        ran = ", ".join(self.factories) or "none"
        text = f"implementations: {ran}"
        for name, why in self.missing.items():
            text += f"; {name} NOT RUN ({why})"
        return text


def find_implementations(environ: Mapping[str, str] | None = None) -> Implementations:
    """The reference always; accel when importable, unless ``KACHEDB_RADIX_PURE=1``."""
    factories, missing = find_twins("RadixTree", environ)  # the one picker: spec/twins.py
    return Implementations(factories, missing, pure(environ))


def build_flat(shape: Shape) -> FlatIndex:
    """The flat hash-map baseline holding the same sequences."""
    index = FlatIndex(BLOCK_SIZE)
    for tokens in shape.sequences:
        index.insert(tokens)
    _check_full_match(index.match(shape.query).length, shape, index.implementation)
    return index


@dataclass(frozen=True)
class MemoryFigure:
    """Bytes per cached block, and how it was measured.

    Attributes:
        impl: implementation name.
        cached_blocks: blocks cached when measured.
        bytes_per_block: the headline figure.
        method: how the headline was measured.
        tracemalloc_bytes: growth of traced Python allocations while building.
        rss_bytes: growth of the process's resident set while building.
        reported_bytes: the implementation's own ``memory_bytes()``, when it has one.
    """

    impl: str
    cached_blocks: int
    bytes_per_block: float
    method: str
    tracemalloc_bytes: int
    rss_bytes: int
    reported_bytes: int | None


def _rss_bytes() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _total_bytes(reported: object) -> int:
    # memory_bytes() may return an int or a breakdown by part with a "total" entry.
    if isinstance(reported, dict):
        return int(reported["total"])
    if isinstance(reported, int):
        return reported
    raise TypeError(f"memory_bytes() returned {type(reported).__name__}, not int or dict")


def measure_memory(factory: TreeFactory, impl: str, cached_blocks: int) -> MemoryFigure:
    """Build a tree of ``cached_blocks`` blocks (the gate's ``grouped`` memory shape, B=16)
    and size it.

    The tree is built twice, from the same seed. Pass 1 runs untraced and records the
    growth of the resident set (RSS) and, if the tree has one, its own
    ``memory_bytes()``. Pass 2 runs under tracemalloc and records the growth of traced
    allocations. Token lists are made inside the measured region and dropped at once,
    so what is counted is what the tree itself keeps.

    The headline, in order of preference: the tree's ``memory_bytes()`` total (tokens
    included, as the other methods include them); for the reference, the tracemalloc
    delta (exact for pure Python); otherwise the larger of the tracemalloc and RSS deltas
    (tracemalloc misses plain ``malloc``; RSS misses pages freed earlier in the process
    and reused, so each can only undercount).
    """
    gc.collect()
    rss_before = _rss_bytes()
    tree = grouped(factory, impl, cached_blocks)
    gc.collect()
    rss = _rss_bytes() - rss_before
    cached = int(tree.stats().cached)
    reported: int | None = None
    if callable(getattr(tree, "memory_bytes", None)):
        reported = _total_bytes(tree.memory_bytes())
    del tree
    gc.collect()

    tracemalloc.start()
    try:
        traced_before = tracemalloc.get_traced_memory()[0]
        tree = grouped(factory, impl, cached_blocks)
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0] - traced_before
    finally:
        tracemalloc.stop()
    del tree

    if reported is not None:
        total, method = reported, f"{impl}.RadixTree.memory_bytes() total"
    elif impl == "reference":
        total, method = traced, "tracemalloc delta"
    elif traced >= rss:
        total, method = traced, "max(tracemalloc, RSS) delta: tracemalloc"
    else:
        total, method = rss, "max(tracemalloc, RSS) delta: RSS"
    return MemoryFigure(impl, cached, total / cached, method, traced, rss, reported)
