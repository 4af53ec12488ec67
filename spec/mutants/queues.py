"""Eviction queues with a planted bug, for the eviction mutants (R-EVICT-*).

:class:`KeyedQueue` is the reference's lazy-deletion heap with its two decisions made
overridable: which nodes are evictable leaves and the order key of a leaf tail.
"""

from __future__ import annotations

import heapq

from reference.eviction import EvictionQueue
from reference.node import Node


class KeyedQueue(EvictionQueue):
    """The reference's queue with the evictable test and the order key as methods."""

    __slots__ = ()

    def eligible(self, node: Node) -> bool:
        """Whether ``node``'s tail may be evicted now."""
        return node.is_evictable_leaf()

    def key(self, node: Node) -> tuple[int, int]:
        """Order of leaf tails: smaller first."""
        return (node.stamps[-1], node.blocks[-1])

    def offer(self, node: Node, live_nodes: int) -> None:
        """Queue ``node`` if it is eligible now."""
        if self.eligible(node):
            first, second = self.key(node)
            heapq.heappush(self._heap, (first, second, next(self._order), node))

    def pop_lru(self) -> Node | None:
        """Remove and return the first eligible leaf whose entry is current."""
        while self._heap:
            first, second, _, node = heapq.heappop(self._heap)
            if self.eligible(node) and self.key(node) == (first, second):
                return node
        return None


class ReversedQueue(KeyedQueue):
    """Most recently used first."""

    __slots__ = ()

    def key(self, node: Node) -> tuple[int, int]:
        """Newest stamp first."""
        return (-node.stamps[-1], node.blocks[-1])


class UnpinnedBlindQueue(KeyedQueue):
    """Any leaf tail is evictable, pinned or not."""

    __slots__ = ()

    def eligible(self, node: Node) -> bool:
        """A non-empty leaf, pins ignored."""
        return bool(node.blocks) and not node.children
