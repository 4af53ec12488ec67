"""An eviction queue with a planted bug, for the eviction mutants (R-EVICT-*).

The reference's queue (:class:`kachedb_radix.reference.eviction.EvictionQueue`) orders leaf tails
by ``(stamp, block_id)``. :class:`ReversedQueue` files every entry under the negated
stamp, so the newest tail comes out first, and shows the true stamps to
``check_invariants`` so that only the eviction order differs.
"""

from __future__ import annotations

from collections.abc import Iterator

from kachedb_radix.reference.eviction import Entry, EvictionQueue


class ReversedQueue(EvictionQueue):
    """Most recently used first."""

    __slots__ = ()

    def file(self, nid: int, key: tuple[int, ...]) -> None:
        """Queue the tail under its negated stamp."""
        stamp, block_id = key
        super().file(nid, (-stamp, block_id))

    def entries(self) -> Iterator[Entry]:
        """The entries with their true stamps."""
        return ((-stamp, block_id, nid) for stamp, block_id, nid in super().entries())
