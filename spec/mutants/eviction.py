"""Mutants of eviction, alone and inside insert (R-EVICT-*, R-INS-5, R-INS-6)."""

from __future__ import annotations

from reference.errors import OutOfBlocksError
from reference.node import Node
from reference.tree import _Path

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
        parent = leaf.parent
        assert parent is not None
        del parent.children[leaf.first_block(self._block_size)]
        leaf.parent = None
        self._nodes -= 1
        if parent.is_root and not parent.children:
            del self._roots[parent.namespace]


@mutant("evict_edge_head_first", "R-EVICT-1")
class EvictEdgeHeadFirst(MutantTree):
    """Eviction frees a leaf edge's first block (an ancestor) before its deeper ones."""

    def _evict_blocks(self, count: int) -> list[int]:
        freed: list[int] = []
        size = self._block_size
        while len(freed) < count:
            leaf = self._queue.pop_lru()
            if leaf is None:
                break
            if len(leaf.blocks) == 1:
                self._remove_leaf(leaf)
                freed.append(leaf.blocks.pop())
                leaf.tokens.clear()
                leaf.pins.pop()
                leaf.stamps.pop()
            else:
                parent = leaf.parent
                assert parent is not None
                del parent.children[leaf.first_block(size)]
                del leaf.tokens[:size]
                freed.append(leaf.blocks.pop(0))
                leaf.pins.pop(0)
                leaf.stamps.pop(0)
                parent.children[leaf.first_block(size)] = leaf
                self._queue.offer(leaf, self._nodes)
            self._cached -= 1
        self._allocator.free(freed)
        return freed


@mutant("evict_whole_leaf", "R-EVICT-1", "R-EVICT-4")
class EvictWholeLeaf(MutantTree):
    """``evict(n)`` frees whole leaf edges, possibly more than n blocks."""

    def evict(self, count: int) -> tuple[int, ...]:
        freed: list[int] = []
        while len(freed) < count:
            leaf = self._queue.pop_lru()
            if leaf is None:
                break
            self._queue.offer(leaf, self._nodes)
            freed.extend(self._evict_blocks(len(leaf.blocks)))
        return tuple(freed)


@mutant("evicted_ids_sorted", "R-EVICT-4")
class EvictedIdsSorted(MutantTree):
    """``evict`` returns the freed ids sorted, not in eviction order."""

    def evict(self, count: int) -> tuple[int, ...]:
        return tuple(sorted(super().evict(count)))


@mutant("insert_evicts_extra", "R-INS-5")
class InsertEvictsExtra(MutantTree):
    """An insert short of blocks evicts one block more than the shortfall."""

    def _make_room(self, path: _Path, needed: int) -> list[int]:
        shortfall = needed - self._allocator.free_count
        if shortfall <= 0:
            return []
        self._adjust_pins(path, +1)
        evictable = self._cached - self._pinned
        if shortfall > evictable:
            self._adjust_pins(path, -1)
            raise OutOfBlocksError(f"insert needs {needed} new blocks")
        evicted = self._evict_blocks(min(shortfall + 1, evictable))
        self._adjust_pins(path, -1)
        return evicted


@mutant("insert_evicts_own_path", "R-INS-5")
class InsertEvictsOwnPath(MutantTree):
    """An insert short of blocks may evict the cached prefix it is extending."""

    def _make_room(self, path: _Path, needed: int) -> list[int]:
        shortfall = needed - self._allocator.free_count
        if shortfall <= 0:
            return []
        if shortfall > self._cached - self._pinned:
            raise OutOfBlocksError(f"insert needs {needed} new blocks")
        return self._evict_blocks(shortfall)


@mutant("insert_never_evicts", "R-INS-5", "R-INS-6")
class InsertNeverEvicts(MutantTree):
    """An insert raises out_of_blocks as soon as the free pool is short."""

    def _make_room(self, path: _Path, needed: int) -> list[int]:
        if needed > self._allocator.free_count:
            raise OutOfBlocksError(f"insert needs {needed} new blocks")
        return []


@mutant("failed_insert_half_applied", "R-INS-6", "R-ERR-2")
class FailedInsertHalfApplied(MutantTree):
    """An insert that cannot get enough blocks evicts all it can before raising."""

    def _make_room(self, path: _Path, needed: int) -> list[int]:
        shortfall = needed - self._allocator.free_count
        if shortfall <= 0:
            return []
        self._adjust_pins(path, +1)
        evictable = self._cached - self._pinned
        evicted = self._evict_blocks(min(shortfall, evictable))
        self._adjust_pins(path, -1)
        if shortfall > evictable:
            raise OutOfBlocksError(f"insert needs {needed} new blocks")
        return evicted
