"""An eviction queue with a planted bug, for the eviction mutants (R-EVICT-*).

The reference's queue (:class:`reference.eviction.EvictionQueue`) orders leaf tails
by ``(stamp, block_id)`` and checks each popped entry against the tree with an
``is_current(stamp, block_id, nid)`` predicate. :class:`ReversedQueue` files every
entry under the negated stamp, so the newest tail comes out first, and translates
the predicate back so staleness is still judged on the true stamp.
"""

from __future__ import annotations

from reference.eviction import EvictionQueue, IsCurrent


def _negated(is_current: IsCurrent) -> IsCurrent:
    def check(stamp: int, block_id: int, nid: int) -> bool:
        return is_current(-stamp, block_id, nid)

    return check


class ReversedQueue(EvictionQueue):
    """Most recently used first."""

    __slots__ = ()

    def push(
        self, stamp: int, block_id: int, nid: int, live_nodes: int, is_current: IsCurrent
    ) -> None:
        """Queue the tail under its negated stamp."""
        super().push(-stamp, block_id, nid, live_nodes, _negated(is_current))

    def pop_lru(self, is_current: IsCurrent) -> int | None:
        """The newest current tail's node."""
        return super().pop_lru(_negated(is_current))

    def covered(self, is_current: IsCurrent) -> set[int]:
        """The nids holding a valid entry."""
        return super().covered(_negated(is_current))
