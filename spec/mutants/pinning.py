"""Mutants of pinning and leases (R-PIN-*)."""

from __future__ import annotations

from kachedb_radix.reference.errors import ForeignLeaseError, LeaseReleasedError
from kachedb_radix.reference.lease import Lease
from kachedb_radix.reference.walk import Path

from .base import MutantTree, lease_of, mutant


@mutant("pin_whole_edge", "R-PIN-2")
class PinWholeEdge(MutantTree):
    """A pin that ends inside an edge pins the whole edge."""

    def _adjust_pins(self, path: Path, delta: int) -> None:
        super()._adjust_pins([(node, node.count) for node, _ in path], delta)


@mutant("pin_last_node_only", "R-PIN-3", "R-PIN-1", "R-PIN-2")
class PinLastNodeOnly(MutantTree):
    """Only the last node of a path is pinned, not its ancestors."""

    def _adjust_pins(self, path: Path, delta: int) -> None:
        super()._adjust_pins(path[-1:], delta)


@mutant("release_twice_accepted", "R-PIN-4")
class ReleaseTwiceAccepted(MutantTree):
    """Releasing a lease a second time is silently ignored."""

    def release(self, lease: Lease) -> None:
        own = lease_of(self, lease)
        if own is not None and own.released:
            return
        super().release(lease)


@mutant("foreign_lease_wrong_kind", "R-PIN-5", "R-ERR-3")
class ForeignLeaseWrongKind(MutantTree):
    """A lease from another tree is reported as already released."""

    def release(self, lease: Lease) -> None:
        try:
            super().release(lease)
        except ForeignLeaseError as exc:
            raise LeaseReleasedError(str(exc)) from None


@mutant("pinned_block_evicted", "R-PIN-3", "R-EVICT-1")
class PinnedBlockEvicted(MutantTree):
    """Eviction ignores pins: a pinned leaf tail can be evicted."""

    def _offer(self, nid: int) -> None:
        node = self._nodes.get(nid)
        if node is None or node.count == 0 or node.children:
            self._queue.withdraw(nid)
        else:
            tail = node.tail()
            self._queue.file(nid, (self._stamps[tail], tail))
