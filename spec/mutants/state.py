"""Mutants that wait for a state: a large, deep or wide tree, many evictions, a high
clock, the eviction queue's internal maintenance, a full pool.

Each is correct until its state is reached -- which a kit drawing small pools and
short traces never does. They are the catalogue's check that the search reaches
such states at its default settings (swarm examples, wide pool and length ranges,
bulk fills, ``target()``; see :mod:`kachedb_radix.spec.conform.search`). The thresholds are the kind
found in real code: a fixed-size buffer, a counter, a table sized for the common
case.
"""

from __future__ import annotations

from collections.abc import Iterator

from kachedb_radix.reference.eviction import EvictionQueue
from kachedb_radix.reference.walk import Path

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

    def _walk(self, namespace: str | None, tokens: list[int], limit: int) -> tuple[Path, int]:
        if self.calling == "match" and self._cached > LARGE_TREE and limit >= 2:
            limit -= 1
        return super()._walk(namespace, tokens, limit)


@mutant("deep_match_truncated", "R-MATCH-1")
class DeepMatchTruncated(MutantTree):
    """A match returns at most 32 blocks (a fixed-size path buffer)."""

    def _walk(self, namespace: str | None, tokens: list[int], limit: int) -> tuple[Path, int]:
        if self.calling == "match":
            limit = min(limit, PATH_BUFFER)
        return super()._walk(namespace, tokens, limit)


@mutant("wide_node_loses_children", "R-MATCH-1", "R-EDGE-2")
class WideNodeLosesChildren(MutantTree):
    """A match through a node with more than 8 children finds only the first 8 (in key
    order): a child table sized for the common case."""

    def _walk(self, namespace: str | None, tokens: list[int], limit: int) -> tuple[Path, int]:
        path, matched = super()._walk(namespace, tokens, limit)
        if self.calling != "match":
            return path, matched
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

    def _evict_blocks(self, count: int, protected: Path) -> list[int]:
        if self._evicted_so_far >= EVICTIONS and not isinstance(self._queue, ReversedQueue):
            self._queue = ReversedQueue()
            for nid in list(self._nodes):
                self._offer(nid)
        evicted = super()._evict_blocks(count, protected)
        self._evicted_so_far += len(evicted)
        return evicted


class _WithdrawWithoutRestore(EvictionQueue):
    """Withdrawing an entry moves the heap's last entry into the hole and stops there."""

    __slots__ = ()

    def withdraw(self, nid: int) -> None:
        index = self._position.pop(nid, None)
        if index is None:
            return
        del self._owner[self._heap[index][1]]
        last = self._heap.pop()
        if index < len(self._heap):
            self._put(index, last)  # the bug: no _restore(index)


@mutant("withdraw_leaves_heap_unordered", "R-EVICT-2", "R-EVICT-4")
class WithdrawLeavesHeapUnordered(MutantTree):
    """The eviction queue's withdraw fills the hole with its last entry without moving
    it up: correct while the heap is shallow, but once a leaf deep in one subtree is
    withdrawn (pinned, given a child) an older leaf from another subtree can sit below
    a newer one, and eviction takes the newer one first."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._queue = _WithdrawWithoutRestore()


#: Entries past which :class:`_WideWithdrawWithoutRestore` stops restoring heap order.
WIDE_HEAP = 48


class _WideWithdrawWithoutRestore(EvictionQueue):
    """Withdrawing an entry from the middle of a heap of more than :data:`WIDE_HEAP`
    entries moves the last entry into the hole and stops there (a fast path taken for
    a large heap); the root's withdrawal (an eviction) and smaller heaps are right."""

    __slots__ = ()

    def withdraw(self, nid: int) -> None:
        index = self._position.get(nid)
        if index is None or index == 0 or len(self._heap) <= WIDE_HEAP:
            super().withdraw(nid)
            return
        del self._position[nid]
        del self._owner[self._heap[index][-2]]
        last = self._heap.pop()
        if index < len(self._heap):
            self._put(index, last)  # the bug: no _restore(index)

    def check(self) -> str | None:
        """The reference's checks, less heap order, which is the bug."""
        return None


def _wide_heap_mutant(policy: str) -> type[MutantTree]:
    """The wide-heap withdraw bug, run under ``policy`` (the queue orders every policy's
    keys, so each one's order breaks the same way)."""

    class WideHeapWithdrawUnordered(MutantTree):
        def __init__(self, num_blocks: int, block_size: int = 16, **options: object) -> None:
            super().__init__(num_blocks, block_size, **options)  # type: ignore[arg-type]
            self._queue = _WideWithdrawWithoutRestore()

    WideHeapWithdrawUnordered.__doc__ = (
        f"Under {policy}, withdrawing a leaf from the middle of an eviction queue of more "
        f"than {WIDE_HEAP} leaves (pinned, refreshed or given a child) leaves the heap "
        "unordered: right in small trees, wrong once hundreds of leaves are evictable."
    )
    suffix = "" if policy == "lru" else f"_{policy}"
    name = f"wide_heap_withdraw_unordered{suffix}"
    WideHeapWithdrawUnordered.__qualname__ = WideHeapWithdrawUnordered.__name__ = (
        "WideHeapWithdrawUnordered" + suffix.title().replace("_", "")
    )
    rules = ("R-EVICT-2", "R-EVICT-4", "R-POL-1", WIDE_HEAP_POLICIES[policy])
    return mutant(name, *rules, policy=policy)(WideHeapWithdrawUnordered)


#: The policies the wide-heap withdraw bug is planted under, with the rule of each one's
#: order (every policy's order is one heap of its keys).
WIDE_HEAP_POLICIES = {
    "lru": "R-POL-2",
    "lfu": "R-POL-3",
    "fifo": "R-POL-4",
    "priority": "R-POL-5",
    "slru": "R-POL-6",
}

WIDE_HEAP_MUTANTS = tuple(_wide_heap_mutant(policy) for policy in WIDE_HEAP_POLICIES)


class _RekeyOnlyUp(EvictionQueue):
    """Re-keying an entry moves it towards the root only, never down."""

    __slots__ = ()

    def _restore(self, index: int) -> None:
        heap = self._heap
        entry = heap[index]
        while index > 0:
            parent = (index - 1) // 2
            if heap[parent] <= entry:
                break
            self._put(index, heap[parent])
            index = parent
        self._put(index, entry)  # the bug: an entry whose key grew stays where it is


@mutant("rekey_never_sifts_down", "R-EVICT-2", "R-EVICT-4")
class RekeyNeverSiftsDown(MutantTree):
    """The eviction queue moves a re-keyed entry up but never down: a leaf refreshed
    by a match (or an entry filled into a hole) keeps its old place, so a recently
    used leaf can be evicted before older ones."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._queue = _RekeyOnlyUp()


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


#: Evictable leaves a sampled eviction looks at (the first ones filed).
SAMPLE = 256

#: Entries the eviction queue of :class:`LeafTableOverflows` has room for.
LEAF_TABLE = 256

#: Pin counts are kept modulo this in :class:`PinCountWraps` (a 4-bit field).
PIN_RANGE = 16


@mutant("sampled_lru", "R-EVICT-2")
class SampledLru(MutantTree):
    """Eviction takes the least recently used of the first 256 evictable leaves, in the
    order they became evictable (an approximate LRU that samples): exact while at most 256
    leaves are evictable, wrong once churn has refreshed the early ones and the least
    recently used leaf is further down."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._filed: dict[int, None] = {}  # nid -> None, in the order they were queued

    def _offer(self, nid: int) -> None:
        super()._offer(nid)
        if nid in self._queue:
            self._filed.setdefault(nid)
        else:
            self._filed.pop(nid, None)

    def choose_victims(self, count: int, protected: Path) -> Iterator[int]:
        for _ in range(count):
            self._filed = {nid: None for nid in self._filed if nid in self._queue}
            sample = list(self._filed)[:SAMPLE]
            if not sample:
                return
            tails = [self._nodes[nid].tail() for nid in sample]
            yield min(tails, key=self.eviction_key)


class _BoundedQueue(EvictionQueue):
    """An eviction queue with room for :data:`LEAF_TABLE` leaves: filing one more is
    silently dropped (the leaf is never evicted while it is left out)."""

    __slots__ = ()

    def file(self, nid: int, key: tuple[int, ...]) -> None:
        if nid not in self._position and len(self._heap) >= LEAF_TABLE:
            return
        super().file(nid, key)


@mutant("leaf_table_overflows", "R-EVICT-2", "R-EVICT-4")
class LeafTableOverflows(MutantTree):
    """The eviction queue has room for 256 leaves; a leaf that becomes evictable while
    it is full is never filed, so once more than 256 leaves are evictable, eviction passes
    over older leaves left out (a table sized for the common case)."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._queue = _BoundedQueue()

    def check_invariants(self) -> None:
        """The reference's checks, less the queue's completeness, which is the bug."""
        if len(self._queue) < LEAF_TABLE:
            super().check_invariants()


@mutant("pin_count_wraps", "R-PIN-3", "R-PIN-2")
class PinCountWraps(MutantTree):
    """Pin counts are stored in 4 bits: the 16th live lease on one block wraps its count
    to 0, so a shared head pinned by many requests at once becomes evictable while they
    all still hold it."""

    def _adjust_pins(self, path: Path, delta: int) -> None:
        super()._adjust_pins(path, delta)
        wrapped = False
        for node, used in path:
            for block in node.blocks[:used]:
                if self._pins[block] >= PIN_RANGE:
                    self._pins[block] %= PIN_RANGE
                    wrapped = True
                    if self._pins[block] == 0:
                        self._pinned -= 1
        if wrapped and path:
            self._offer(path[-1][0].nid)
