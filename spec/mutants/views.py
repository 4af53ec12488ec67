"""Mutants of what a tree reports about itself: stats and the dump (R-INV-*, R-DUMP-*)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kachedb_radix.reference.dump import DUMP_FORMAT
from kachedb_radix.reference.lease import Lease
from kachedb_radix.reference.node import Node
from kachedb_radix.reference.results import TreeStats
from kachedb_radix.reference.walk import Path

from .base import MutantTree, mutant


@mutant("stats_evictable_counts_pinned", "R-INV-1")
class StatsEvictableCountsPinned(MutantTree):
    """``stats().evictable`` counts pinned blocks too."""

    def stats(self) -> TreeStats:
        stats = super().stats()
        return replace(stats, evictable=stats.cached)


@mutant("stats_leases_never_drop", "R-INV-2")
class StatsLeasesNeverDrop(MutantTree):
    """``stats().leases`` counts every lease ever issued, released ones included."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._issued = 0

    def _pin(self, namespace: str | None, tokens: list[int], count: int, path: Path) -> Lease:
        self._issued += 1
        return super()._pin(namespace, tokens, count, path)

    def stats(self) -> TreeStats:
        return replace(super().stats(), leases=self._issued)


class _StoredShapeDump(MutantTree):
    def _children(self, node: Node) -> list[Node]:
        return [node.children[key] for key in sorted(node.children)]

    def _edge(self, node: Node) -> dict[str, Any]:
        blocks = node.edge_blocks()
        return {
            "tokens": node.tokens[: node.count * self._block_size],
            "blocks": blocks,
            "pins": [self._pins[block] for block in blocks],
            "stamps": [self._stamps[block] for block in blocks],
            "children": [self._edge(child) for child in self._children(node)],
        }

    def dump(self) -> dict[str, Any]:
        return {
            "format": DUMP_FORMAT,
            "block_size": self._block_size,
            "num_blocks": self.num_blocks,
            "clock": self._clock,
            "free": self._allocator.free_ids(),
            "quarantine": [block for _, batch in self._quarantine for block in batch],
            "namespaces": [
                {
                    "namespace": name,
                    "children": [self._edge(c) for c in self._children(self._roots[name])],
                }
                for name in self.namespaces()
            ],
        }


@mutant("dump_not_path_compressed", "R-DUMP-2")
class DumpNotPathCompressed(_StoredShapeDump):
    """The dump shows nodes as stored, so a one-child chain left by eviction shows split."""


@mutant("dump_children_unsorted", "R-DUMP-2", "R-DUMP-1")
class DumpChildrenUnsorted(MutantTree):
    """The dump lists children in descending order of their first block."""

    def dump(self) -> dict[str, Any]:
        state = super().dump()

        def unsort(edges: list[dict[str, Any]]) -> list[dict[str, Any]]:
            for edge in edges:
                edge["children"] = unsort(edge["children"])
            return edges[::-1]

        for space in state["namespaces"]:
            space["children"] = unsort(space["children"])
        return state
