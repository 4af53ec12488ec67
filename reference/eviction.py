"""The eviction queue: evictable leaves ordered least recently used first.

Eviction frees one block at a time from the tail of a leaf (R-EVICT-1): only a
leaf's last block has no cached descendant, so "deeper blocks before their
ancestors" holds by construction. The victim is the evictable leaf tail with the
smallest key ``(stamp, block_id)`` (R-EVICT-2, R-EVICT-3): oldest first, and among
equal stamps the smallest block id. (With the clock advanced once per operation two
leaf tails never share a stamp -- R-LRU-4 -- but the tie-break keeps the order total
for any state.)

The queue is a binary heap with lazy deletion. Whenever a leaf's tail changes (new
stamp, pin dropped to zero, block evicted, child removed, edge extended) the tree
*offers* the node again; entries whose node no longer has that tail are discarded
when popped. Each eviction therefore costs O(log h) amortised for a heap of h
entries -- never a scan of all leaves (SGLang's original tree heapified every leaf
on each call; the seed sorted them).

Invariant: every evictable leaf has at least one valid entry. Stale entries are
compacted away when they outnumber the nodes, keeping the heap O(nodes).
"""

from __future__ import annotations

import heapq
import itertools

from .node import Node

_Entry = tuple[int, int, int, Node]  # (stamp, block id, insertion order, node)


class EvictionQueue:
    """Min-heap of evictable leaf tails keyed by ``(stamp, block_id)``."""

    __slots__ = ("_heap", "_order")

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        # Distinguishes duplicate entries so nodes themselves are never compared.
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def offer(self, node: Node, live_nodes: int) -> None:
        """Queue ``node`` if it is an evictable leaf now. O(log h) amortised.

        ``live_nodes`` (the tree's node count) decides when to compact stale entries.
        """
        if node.is_evictable_leaf():
            heapq.heappush(self._heap, (node.stamps[-1], node.blocks[-1], next(self._order), node))
            if len(self._heap) > 2 * live_nodes + 64:
                self._compact()

    def pop_lru(self) -> Node | None:
        """Remove and return the leaf whose tail is least recently used, or None. O(log h)."""
        heap = self._heap
        while heap:
            stamp, block_id, _, node = heapq.heappop(heap)
            if _is_current(stamp, block_id, node):
                return node
        return None

    def covered(self) -> set[int]:
        """``id()`` of every node holding a valid entry. O(h); for ``check_invariants``."""
        return {id(entry[3]) for entry in self._heap if _is_current(entry[0], entry[1], entry[3])}

    def _compact(self) -> None:
        # Keep one valid entry per node; the rest are stale.
        kept: dict[int, _Entry] = {}
        for entry in self._heap:
            if _is_current(entry[0], entry[1], entry[3]):
                kept.setdefault(id(entry[3]), entry)
        self._heap = list(kept.values())
        heapq.heapify(self._heap)


def _is_current(stamp: int, block_id: int, node: Node) -> bool:
    return node.is_evictable_leaf() and node.blocks[-1] == block_id and node.stamps[-1] == stamp
