"""The block allocator on its own (R-ALLOC-1..4), and the eviction queue's order (R-EVICT-3).

These exercise reference components directly; the tree-level behaviour they support
is tested for every implementation in test_tree.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference import BlockAllocator
from reference.errors import (
    DoubleFreeError,
    ForeignBlockError,
    InvalidArgumentError,
    OutOfBlocksError,
)
from reference.eviction import EvictionQueue


def test_allocation_hands_out_the_smallest_free_ids_ascending() -> None:
    """R-ALLOC-2: smallest free first, whatever order the ids were freed in."""
    pool = BlockAllocator(6)
    assert pool.allocate(4) == [0, 1, 2, 3]
    pool.free([3, 0, 2])
    assert pool.allocate(2) == [0, 2]
    assert pool.allocate(3) == [3, 4, 5]
    assert (pool.free_count, pool.allocated_count) == (0, 6)
    pool.check_invariants()


def test_over_allocation_takes_nothing() -> None:
    """R-ALLOC-3: all or nothing."""
    pool = BlockAllocator(3)
    pool.allocate(2)
    with pytest.raises(OutOfBlocksError, match="asked for 2 blocks but only 1"):
        pool.allocate(2)
    assert pool.free_ids() == [2]


@pytest.mark.parametrize(
    ("ids", "error"),
    [
        ([1, 1], DoubleFreeError),
        ([2], DoubleFreeError),
        ([0, 9], ForeignBlockError),
        ([-1], ForeignBlockError),
        ([True], ForeignBlockError),
        (["0"], ForeignBlockError),
    ],
)
def test_bad_free_is_refused_whole(ids: list[object], error: type[Exception]) -> None:
    """R-ALLOC-4: double frees and foreign ids raise; no id of the call is freed."""
    pool = BlockAllocator(4)
    pool.allocate(2)
    with pytest.raises(error):
        pool.free(ids)  # type: ignore[arg-type]
    assert pool.free_ids() == [2, 3]
    pool.check_invariants()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, None])
def test_pool_size_must_be_a_positive_int(bad: object) -> None:
    """R-ERR-1: the pool size is validated."""
    with pytest.raises(InvalidArgumentError):
        BlockAllocator(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 1.0, False])
def test_allocation_count_must_be_a_non_negative_int(bad: object) -> None:
    """R-ERR-1: so is the count."""
    with pytest.raises(InvalidArgumentError):
        BlockAllocator(4).allocate(bad)  # type: ignore[arg-type]


def test_is_allocated_rejects_foreign_ids() -> None:
    """R-ALLOC-1, R-ALLOC-4: each id is free xor allocated; ids outside the pool are foreign."""
    pool = BlockAllocator(2)
    pool.allocate(1)
    assert (pool.is_allocated(0), pool.is_allocated(1)) == (True, False)
    with pytest.raises(ForeignBlockError):
        pool.is_allocated(2)


@settings(max_examples=200, derandomize=True, database=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=40))
def test_allocator_agrees_with_a_sorted_set(steps: list[tuple[bool, int]]) -> None:
    """R-ALLOC-1, R-ALLOC-2: against a plain set of free ids."""
    pool = BlockAllocator(8)
    free = set(range(8))
    for allocating, count in steps:
        if allocating:
            if count > len(free):
                with pytest.raises(OutOfBlocksError):
                    pool.allocate(count)
                continue
            expected = sorted(free)[:count]
            assert pool.allocate(count) == expected
            free.difference_update(expected)
        else:
            taken = sorted(set(range(8)) - free)[:count]
            pool.free(taken)
            free.update(taken)
        assert pool.free_ids() == sorted(free)
        pool.check_invariants()


class _Tails:
    """A stand-in tree for the queue: each node id has one tail (block, stamp, pinned)."""

    def __init__(self) -> None:
        self.tails: dict[int, tuple[int, int, bool]] = {}

    def is_current(self, stamp: int, block_id: int, nid: int) -> bool:
        return self.tails.get(nid) == (block_id, stamp, False)


def test_equal_stamps_break_ties_by_smaller_block_id() -> None:
    """R-EVICT-3, R-EVICT-2: the queue orders by (stamp, block id)."""
    queue = EvictionQueue()
    tails = _Tails()
    for nid, (block_id, stamp) in enumerate([(7, 3), (2, 5), (5, 3), (1, 9)]):
        tails.tails[nid] = (block_id, stamp, False)
        queue.push(stamp, block_id, nid, live_nodes=4, is_current=tails.is_current)
    order = []
    while (popped := queue.pop_lru(tails.is_current)) is not None:
        order.append(tails.tails.pop(popped)[0])  # as if evicted: its entries go stale
    assert order == [5, 7, 2, 1]


def test_stale_entries_are_skipped_and_compacted() -> None:
    """R-EVICT-2: a node whose tail changed is found under its new key only."""
    queue = EvictionQueue()
    tails = _Tails()
    for stamp in range(1, 200):
        tails.tails[0] = (4, stamp, False)
        queue.push(stamp, 4, 0, live_nodes=1, is_current=tails.is_current)
    assert len(queue) < 2 * 1 + 64 + 1
    assert queue.pop_lru(tails.is_current) == 0
    tails.tails[0] = (4, 199, True)  # pinned: no longer evictable
    queue.push(199, 4, 0, live_nodes=1, is_current=tails.is_current)
    assert queue.pop_lru(tails.is_current) is None
