"""Mutants that wait for a state: a large, deep or wide tree, many evictions, a high
clock, the eviction queue's internal maintenance, a full pool.

Each is correct until its state is reached -- which a kit drawing small pools and
short traces never does. They are the catalogue's check that the search reaches
such states at its default settings (swarm examples, wide pool and length ranges,
bulk fills, ``target()``; see :mod:`spec.machine`). The thresholds are the kind
found in real code: a fixed-size buffer, a counter, a table sized for the common
case.
"""

from __future__ import annotations

import heapq

from reference.eviction import EvictionQueue, IsCurrent, _Entry
from reference.walk import Path

from .base import MutantTree, mutant
from .queues import ReversedQueue

#: Cached blocks past which :class:`LargeTreeMatchShort` goes wrong.
LARGE_TREE = 300

#: Blocks a match can return before :class:`DeepMatchTruncated` truncates it.
PATH_BUFFER = 32

#: Children a node can have before :class:`WideNodeLosesChildren` misses some.
FAN_OUT = 8

#: Clock values :class:`ClockWraps` stores stamps modulo (an 8-bit field).
STAMP_RANGE = 256

#: Blocks evicted after which :class:`LruAfterManyEvictions` evicts newest first.
EVICTIONS = 96


@mutant("large_tree_match_short", "R-MATCH-1")
class LargeTreeMatchShort(MutantTree):
    """Once more than 300 blocks are cached, a match of two blocks or more stops one
    block early."""

    def _match_limit(self, tokens: list[int]) -> int:
        limit = super()._match_limit(tokens)
        return limit - 1 if self._cached > LARGE_TREE and limit >= 2 else limit


@mutant("deep_match_truncated", "R-MATCH-1")
class DeepMatchTruncated(MutantTree):
    """A match returns at most 32 blocks (a fixed-size path buffer)."""

    def _match_limit(self, tokens: list[int]) -> int:
        return min(super()._match_limit(tokens), PATH_BUFFER)


@mutant("wide_node_loses_children", "R-MATCH-1", "R-EDGE-2")
class WideNodeLosesChildren(MutantTree):
    """A match through a node with more than 8 children finds only the first 8 (in key
    order): a child table sized for the common case."""

    def _match_walk(self, namespace: str | None, tokens: list[int], limit: int) -> tuple[Path, int]:
        path, _ = self._walk(namespace, tokens, limit)
        size = self._block_size
        parent = self._roots.get(namespace)
        kept: Path = []
        blocks = 0
        for node, used in path:
            if parent is not None and len(parent.children) > FAN_OUT:
                visible = sorted(parent.children.keys())[:FAN_OUT]
                if node.first_block(size) not in visible:
                    break
            kept.append((node, used))
            blocks += used
            parent = node
        return kept, blocks


@mutant("clock_wraps", "R-LRU-1", "R-EVICT-2")
class ClockWraps(MutantTree):
    """Stamps are stored in 8 bits: past clock 255, fresh blocks look old."""

    def _stamp(self, path: Path, now: int) -> None:
        super()._stamp(path, now % STAMP_RANGE)


@mutant("lru_after_many_evictions", "R-EVICT-2")
class LruAfterManyEvictions(MutantTree):
    """After 96 blocks have been evicted, eviction takes the most recently used leaf
    first (a queue rebuilt with the wrong order)."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._evicted_so_far = 0

    def _evict_blocks(self, count: int) -> list[int]:
        if self._evicted_so_far >= EVICTIONS and not isinstance(self._queue, ReversedQueue):
            self._queue = ReversedQueue()
            for nid in list(self._nodes):
                self._offer(nid)
        evicted = super()._evict_blocks(count)
        self._evicted_so_far += len(evicted)
        return evicted


class _KeepsFirstEntry(EvictionQueue):
    """Compaction keeps each node's first entry in heap order, valid or stale."""

    __slots__ = ()

    def _compact(self, is_current: IsCurrent) -> None:
        kept: dict[int, _Entry] = {}
        for entry in self._heap:
            kept.setdefault(entry[3], entry)  # the bug: no is_current check
        self._heap = list(kept.values())
        heapq.heapify(self._heap)


@mutant("compaction_keeps_stale_entries", "R-EVICT-2", "R-EVICT-4")
class CompactionKeepsStaleEntries(MutantTree):
    """When the eviction queue compacts its stale entries, it may keep a node's stale
    entry and drop its valid one, so that leaf is never evicted again."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._queue = _KeepsFirstEntry()


class _DropsOldHalf(EvictionQueue):
    """Compaction keeps only the valid entries stamped in the newer half."""

    __slots__ = ()

    def _compact(self, is_current: IsCurrent) -> None:
        valid = [entry for entry in self._heap if is_current(entry[0], entry[1], entry[3])]
        stamps = sorted(entry[0] for entry in valid)
        middle = stamps[len(stamps) // 2] if stamps else 0
        self._heap = [entry for entry in valid if entry[0] >= middle]
        heapq.heapify(self._heap)


@mutant("compaction_drops_old_leaves", "R-EVICT-2", "R-EVICT-4")
class CompactionDropsOldLeaves(MutantTree):
    """Compacting the eviction queue drops the older half of its valid entries: the
    least recently used leaves are never evicted again."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._queue = _DropsOldHalf()


@mutant("leak_before_room_check", "R-ERR-2", "R-INS-6", "R-ALLOC-1")
class LeakBeforeRoomCheck(MutantTree):
    """An insert short of blocks reserves a free block before it checks for room, and
    loses it when the check fails."""

    def _make_room(self, path: Path, needed: int) -> list[int]:
        if needed <= self._allocator.free_count:
            return []
        reserved = self._allocator.allocate(1) if self._allocator.free_count else []
        # The check counts the reserved block as found: right when it passes, but a
        # failure leaves the block reserved for ever.
        self._check_room(path, needed - len(reserved))
        self._allocator.free(reserved)
        return super()._make_room(path, needed)
