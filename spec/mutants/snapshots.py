"""Mutants of publication, snapshots and reader epochs (R-SNAP-*, R-EPOCH-*).

Each breaks one promise of :mod:`kachedb_radix.reference.snapshot`: a block handed out again
while a reader that could see it is inside, a snapshot that shows a later write
(by reading the live tree, or because a published node was changed in place), a
reclaim or an insert that does not wait for readers, a call that is not
published, a reader that may leave twice, a counter that hides the quarantine, a
reader that stays inside after it was dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kachedb_radix.reference.namespaces import check_namespace
from kachedb_radix.reference.node import Node
from kachedb_radix.reference.results import MatchResult, TreeStats
from kachedb_radix.reference.snapshot import Reader, Snapshot
from kachedb_radix.reference.tokens import as_token_list
from kachedb_radix.reference.tree import RadixTree
from kachedb_radix.reference.walk import Path, path_blocks, walk

from .base import MutantTree, mutant

if TYPE_CHECKING:
    from kachedb_radix.reference.lease import Lease


@mutant("early_reuse", "R-EPOCH-1", "R-EPOCH-2")
class EarlyReuse(MutantTree):
    """Evicted blocks go straight back to the allocator even while a reader is inside."""

    def _retire(self, blocks: list[int]) -> None:
        next(self._epochs)  # the free still takes its epoch number
        self._allocator.free(blocks)


def _rewrap(tree: MutantTree, cls: type[Reader]) -> Reader:
    """A reader of class ``cls`` in a fresh epoch of ``tree``.

    The epoch is entered by the reference's ``reader()`` and handed over: the inner
    reader is marked as gone so that dropping it does not end the epoch (R-EPOCH-5).
    """
    inner = RadixTree.reader(tree)
    inner._left = True
    return cls(tree, inner.epoch, inner._version)


class _LiveSnapshot(Snapshot):
    """A snapshot whose match walks the tree's current roots, not its version's."""

    __slots__ = ("_live",)

    def __init__(self, tree: MutantTree, snapshot: Snapshot) -> None:
        super().__init__(snapshot._version, tree.block_size)
        self._live = tree

    def match(self, tokens: object, namespace: str | None = None) -> MatchResult:
        token_list = as_token_list(tokens)
        check_namespace(namespace)
        size = self._block_size
        path, matched = walk(
            self._live._roots, namespace, token_list, len(token_list) // size, size
        )
        return MatchResult(matched * size, path_blocks(path))


class _LiveReader(Reader):
    """A reader whose match walks the tree's current roots (a torn read)."""

    __slots__ = ()

    def match(self, tokens: object, namespace: str | None = None) -> MatchResult:
        token_list = as_token_list(tokens)
        check_namespace(namespace)
        size = self._block_size
        path, matched = walk(
            self._tree._roots, namespace, token_list, len(token_list) // size, size
        )
        return MatchResult(matched * size, path_blocks(path))


@mutant("snapshot_reads_live_tree", "R-SNAP-2")
class SnapshotReadsLiveTree(MutantTree):
    """A snapshot's match walks the live roots, so it sees writes made after it was taken."""

    def snapshot(self) -> Snapshot:
        return _LiveSnapshot(self, super().snapshot())

    def reader(self) -> Reader:
        return _rewrap(self, _LiveReader)


@mutant("extend_overwrites_shared_tail", "R-SNAP-2")
class ExtendOverwritesSharedTail(MutantTree):
    """Extending a leaf appends to its shared lists in place even after a newer version
    cut them shorter, overwriting blocks an older snapshot still shows."""

    def _attach(
        self,
        namespace: str | None,
        path: Path,
        tokens: list[int],
        reused: int,
        wanted: int,
        new_blocks: list[int],
    ) -> None:
        if path:
            leaf, used = path[-1]
            if used == leaf.count and not leaf.children:
                size = self._block_size
                del leaf.tokens[leaf.count * size :]
                del leaf.blocks[leaf.count :]
        super()._attach(namespace, path, tokens, reused, wanted, new_blocks)


@mutant("evict_trims_in_place", "R-SNAP-2")
class EvictTrimsInPlace(MutantTree):
    """Evicting a leaf's tail shortens the lists it shares with published versions."""

    def _free_tail(self, tail: int) -> int:
        nid = self._queue.owner(tail)
        assert nid is not None
        leaf = self._nodes[nid]
        freed = super()._free_tail(tail)
        if leaf.count > 1:
            size = self._block_size
            del leaf.tokens[(leaf.count - 1) * size :]
            del leaf.blocks[leaf.count - 1 :]
        return freed


@mutant("attach_mutates_published_node", "R-SNAP-2", "R-SNAP-1")
class AttachMutatesPublishedNode(MutantTree):
    """A new child is added to the published version of its parent in place."""

    def _attach(
        self,
        namespace: str | None,
        path: Path,
        tokens: list[int],
        reused: int,
        wanted: int,
        new_blocks: list[int],
    ) -> None:
        if path:
            parent: Node | None = path[-1][0] if path[-1][1] == path[-1][0].count else None
        else:
            parent = self._roots.get(namespace)
        if parent is not None and parent.children:
            size = self._block_size
            self._cached += len(new_blocks)
            child = self._new_node(
                parent.nid, tokens[reused * size : wanted * size], list(new_blocks)
            )
            parent.children = parent.children.set(child.first_block(size), child)
            self._replace(parent)
            self._offer(child.nid)
            return
        super()._attach(namespace, path, tokens, reused, wanted, new_blocks)


@mutant("reclaim_checks_newest_reader", "R-EPOCH-2")
class ReclaimChecksNewestReader(MutantTree):
    """Reclamation waits only for the newest reader, not for every reader that entered
    before the free."""

    def _guard(self) -> int | None:
        return max(self._readers, default=None)

    def _reclaimable(self) -> int:
        guard = self._guard()
        return sum(
            len(batch) for epoch, batch in self._quarantine if guard is None or epoch < guard
        )

    def _reclaim(self) -> list[int]:
        guard = self._guard()
        reclaimed: list[int] = []
        while self._quarantine and (guard is None or self._quarantine[0][0] < guard):
            reclaimed.extend(self._quarantine.popleft()[1])
        self._quarantined -= len(reclaimed)
        self._allocator.free(reclaimed)
        return reclaimed


@mutant("insert_evicts_under_reader", "R-EPOCH-3", "R-INS-6")
class InsertEvictsUnderReader(MutantTree):
    """An insert short of blocks evicts while a reader is inside, though the evicted
    blocks can only go to the quarantine."""

    def _check_room(self, path: Path, needed: int) -> None:
        readers, self._readers = self._readers, {}
        try:
            super()._check_room(path, needed)
        finally:
            self._readers = readers


class _QuietCalls(MutantTree):
    """Publication can be switched off for the duration of one call."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._quiet = False

    def _publish(self) -> None:
        if not self._quiet:
            super()._publish()


@mutant("release_not_published", "R-SNAP-1")
class ReleaseNotPublished(_QuietCalls):
    """A release changes pins and stamps but publishes no new version."""

    def release(self, lease: Lease) -> None:
        self._quiet = True
        try:
            super().release(lease)
        finally:
            self._quiet = False


@mutant("insert_eviction_not_published", "R-SNAP-1")
class InsertEvictionNotPublished(_QuietCalls):
    """The eviction inside an insert is not published before its blocks are reused."""

    def _make_room(self, path: Path, needed: int) -> list[int]:
        self._quiet = True
        try:
            return super()._make_room(path, needed)
        finally:
            self._quiet = False


class _ForgivingReader(Reader):
    __slots__ = ()

    def leave(self) -> None:
        if not self._left:
            super().leave()


@mutant("leave_twice_accepted", "R-EPOCH-4")
class LeaveTwiceAccepted(MutantTree):
    """A reader that already left may leave again, silently."""

    def reader(self) -> Reader:
        return _rewrap(self, _ForgivingReader)


class _StickyReader(Reader):
    __slots__ = ()

    def __del__(self) -> None:
        pass  # dropped without leave(): stays registered for ever


@mutant("dropped_reader_stays", "R-EPOCH-5")
class DroppedReaderStays(MutantTree):
    """A reader nobody references any more stays inside: its quarantine never drains."""

    def reader(self) -> Reader:
        return _rewrap(self, _StickyReader)


@mutant("quarantine_counted_free", "R-EPOCH-3", "R-INV-1")
class QuarantineCountedFree(MutantTree):
    """``stats()`` counts quarantined blocks as free."""

    def stats(self) -> TreeStats:
        stats = super().stats()
        return TreeStats(
            num_blocks=stats.num_blocks,
            free=stats.free + stats.quarantined,
            cached=stats.cached,
            pinned=stats.pinned,
            evictable=stats.evictable,
            leases=stats.leases,
            clock=stats.clock,
            quarantined=0,
            readers=stats.readers,
            oldest_reader=stats.oldest_reader,
            version=stats.version,
        )
