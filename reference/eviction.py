"""The eviction queue: evictable leaves ordered least recently used first.

Eviction frees one block at a time from the tail of a leaf (R-EVICT-1): only a
leaf's last block has no cached descendant, so "deeper blocks before their
ancestors" holds by construction. The victim is the evictable leaf tail with the
smallest key ``(stamp, block_id)`` (R-EVICT-2, R-EVICT-3): oldest first, and among
equal stamps the smallest block id. (With the clock advanced once per operation two
leaf tails never share a stamp -- R-LRU-4 -- but the tie-break keeps the order total
for any state.)

The queue is a binary heap with lazy deletion. Entries name a node by its stable
id (``nid``), since nodes are persistent and each change makes a new version.
Whenever a leaf's tail changes (new stamp, pin dropped to zero, block evicted,
child removed, edge extended) the tree *offers* the node again; when popped, an
entry is checked against the tree's current state by a caller-supplied predicate
and discarded if stale. Each eviction therefore costs O(log h) amortised for a heap
of h entries -- never a scan of all leaves (SGLang's original tree heapified every
leaf on each call; the seed sorted them).

Invariant: every evictable leaf has at least one valid entry. Stale entries are
compacted away when they outnumber the nodes, keeping the heap O(nodes).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

#: ``is_current(stamp, block_id, nid)``: is this entry still the node's evictable tail?
IsCurrent = Callable[[int, int, int], bool]

_Entry = tuple[int, int, int, int]  # (stamp, block id, insertion order, nid)


class EvictionQueue:
    """Min-heap of evictable leaf tails keyed by ``(stamp, block_id)``."""

    __slots__ = ("_heap", "_order")

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        # Keeps duplicate entries distinct and the heap order total.
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(
        self, stamp: int, block_id: int, nid: int, live_nodes: int, is_current: IsCurrent
    ) -> None:
        """Queue node ``nid`` whose evictable tail is ``block_id`` stamped ``stamp``.

        O(log h) amortised; ``live_nodes`` (the tree's node count) decides when to
        compact stale entries, judged by ``is_current``.
        """
        heapq.heappush(self._heap, (stamp, block_id, next(self._order), nid))
        if len(self._heap) > 2 * live_nodes + 64:
            self._compact(is_current)

    def pop_lru(self, is_current: IsCurrent) -> int | None:
        """Remove and return the nid of the least recently used tail, or None. O(log h)."""
        heap = self._heap
        while heap:
            stamp, block_id, _, nid = heapq.heappop(heap)
            if is_current(stamp, block_id, nid):
                return nid
        return None

    def covered(self, is_current: IsCurrent) -> set[int]:
        """The nids holding a valid entry. O(h); for ``check_invariants``."""
        return {entry[3] for entry in self._heap if is_current(entry[0], entry[1], entry[3])}

    def _compact(self, is_current: IsCurrent) -> None:
        # Keep one valid entry per node; the rest are stale.
        kept: dict[int, _Entry] = {}
        for entry in self._heap:
            if is_current(entry[0], entry[1], entry[3]):
                kept.setdefault(entry[3], entry)
        self._heap = list(kept.values())
        heapq.heapify(self._heap)
