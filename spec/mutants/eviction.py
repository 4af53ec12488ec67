"""Mutants of eviction, alone and inside insert (R-EVICT-*, R-INS-5, R-INS-6)."""

from __future__ import annotations

from kachedb_radix.reference.errors import OutOfBlocksError
from kachedb_radix.reference.node import Node
from kachedb_radix.reference.walk import Path

from .base import MutantTree, mutant
from .queues import ReversedQueue


@mutant("lru_reversed", "R-EVICT-2")
class LruReversed(MutantTree):
    """Eviction takes the most recently used leaf tail first."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._queue = ReversedQueue()


@mutant("parent_not_requeued", "R-EVICT-1", "R-EVICT-4")
class ParentNotRequeued(MutantTree):
    """A node whose last child is evicted never becomes evictable itself."""

    def _remove_leaf(self, leaf: Node) -> None:
        parent_id = self._parents[leaf.nid]
        assert parent_id is not None
        parent = self._nodes[parent_id]
        del self._nodes[leaf.nid], self._parents[leaf.nid]
        self._replace(
            parent.with_children(parent.children.delete(leaf.first_block(self._block_size)))
        )


@mutant("evict_edge_head_first", "R-EVICT-1")
class EvictEdgeHeadFirst(MutantTree):
    """Eviction frees a leaf edge's first block (an ancestor) before its deeper ones."""

    def _free_tail(self, tail: int) -> int:
        nid = self._queue.owner(tail)
        assert nid is not None
        leaf = self._nodes[nid]
        if leaf.count == 1:
            return super()._free_tail(tail)
        self._queue.withdraw(nid)
        size = self._block_size
        head = leaf.blocks[0]
        rest = Node(
            leaf.nid,
            leaf.tokens[size : leaf.count * size],
            leaf.blocks[1 : leaf.count],
            leaf.count - 1,
            leaf.children,
        )
        parent_id = self._parents[leaf.nid]
        assert parent_id is not None
        parent = self._nodes[parent_id]
        children = parent.children.delete(leaf.first_block(size))
        self._nodes[leaf.nid] = rest
        self._replace(parent.with_children(children.set(rest.first_block(size), rest)))
        self._offer(leaf.nid)
        self._cached -= 1
        return head


@mutant("evict_whole_leaf", "R-EVICT-1", "R-EVICT-4", "R-INS-5")
class EvictWholeLeaf(MutantTree):
    """``evict(n)`` frees whole leaf edges, possibly more than n blocks, pinned ones too."""

    def _evict_blocks(self, count: int, protected: Path) -> list[int]:
        evicted: list[int] = []
        while len(evicted) < count and (tail := self._queue.first()) is not None:
            nid = self._queue.owner(tail)
            assert nid is not None
            self._queue.withdraw(nid)
            for _ in range(self._nodes[nid].count):  # the whole edge, pins or not
                leaf = self._nodes[nid]
                evicted.append(leaf.tail())
                if leaf.count == 1:
                    self._remove_leaf(leaf)
                else:
                    self._replace(leaf.without_tail())
                self._cached -= 1
        if evicted:
            self._publish()
            self._retire(evicted)
        return evicted


@mutant("evicted_ids_sorted", "R-EVICT-4")
class EvictedIdsSorted(MutantTree):
    """``evict`` returns the freed ids sorted, not in eviction order."""

    def evict(self, count: int) -> tuple[int, ...]:
        return tuple(sorted(super().evict(count)))


@mutant("insert_evicts_extra", "R-INS-5")
class InsertEvictsExtra(MutantTree):
    """An insert short of blocks evicts one block more than the shortfall."""

    def _evict_blocks(self, count: int, protected: Path) -> list[int]:
        return super()._evict_blocks(count + 1 if self.calling == "insert" else count, protected)


@mutant("insert_evicts_own_path", "R-INS-5")
class InsertEvictsOwnPath(MutantTree):
    """An insert short of blocks may evict the cached prefix it is extending."""

    def _make_room(self, path: Path, needed: int) -> list[int]:
        # Without its path, the room check counts the path's blocks as evictable and
        # nothing protects them while the insert evicts.
        return super()._make_room([], needed)


@mutant("insert_never_evicts", "R-INS-5", "R-INS-6")
class InsertNeverEvicts(MutantTree):
    """An insert raises out_of_blocks as soon as the free pool is short."""

    def _make_room(self, path: Path, needed: int) -> list[int]:
        if needed > self._allocator.free_count:
            raise OutOfBlocksError(f"insert needs {needed} new blocks")
        return []


@mutant("failed_insert_half_applied", "R-INS-6", "R-ERR-2")
class FailedInsertHalfApplied(MutantTree):
    """An insert that cannot get enough blocks evicts all it can before raising."""

    def _check_room(self, path: Path, needed: int) -> None:
        return None  # no room check: it evicts all it can, then finds it is still short
