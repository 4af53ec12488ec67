"""The block allocator on its own (R-ALLOC-1..4), and the eviction queue's order (R-EVICT-3).

These exercise reference components directly; the tree-level behaviour they support
is tested for every implementation in tests/tree/test_tree.py.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kachedb_radix.reference import BlockAllocator
from kachedb_radix.reference.errors import (
    DoubleFreeError,
    ForeignBlockError,
    InvalidArgumentError,
    OutOfBlocksError,
)
from kachedb_radix.reference.eviction import EvictionQueue
from tests.conftest import IMPLEMENTATIONS

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI.
pytestmark = pytest.mark.quick

#: Both twins' allocators, by implementation (accel's unless KACHEDB_RADIX_PURE=1).
ALLOCATORS: dict[str, Any] = {
    name: importlib.import_module(f"kachedb_radix.{name}").BlockAllocator
    for name in IMPLEMENTATIONS
}


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


def test_equal_stamps_break_ties_by_smaller_block_id() -> None:
    """R-EVICT-3, R-EVICT-2: the queue orders by (stamp, block id)."""
    queue = EvictionQueue()
    for nid, (block_id, stamp) in enumerate([(7, 3), (2, 5), (5, 3), (1, 9)]):
        queue.file(nid, (stamp, block_id))
    assert queue.check() is None
    order = []
    while (popped := queue.pop_first()) is not None:
        order.append(popped)
        assert queue.check() is None
    assert order == [2, 0, 1, 3]  # blocks 5, 7, 2, 1


def test_re_keying_and_withdrawing_keep_one_entry_per_node() -> None:
    """R-EVICT-2: a node whose tail changed is found under its new key only."""
    queue = EvictionQueue()
    for stamp in range(1, 200):
        queue.file(0, (stamp, 4))
    assert len(queue) == 1 and 0 in queue
    assert list(queue.entries()) == [(199, 4, 0)]
    queue.withdraw(0)  # pinned: no longer evictable
    queue.withdraw(0)  # withdrawing twice is harmless
    assert queue.pop_first() is None and 0 not in queue


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["file", "withdraw", "pop"]),
            st.integers(0, 12),  # nid
            st.integers(0, 20),  # stamp
        ),
        max_size=80,
    )
)
def test_queue_against_a_sorted_model(ops: list[tuple[str, int, int]]) -> None:
    """R-EVICT-2, R-EVICT-3: every operation keeps the heap exact (one entry per
    node, heap order, positions); pops come out in (stamp, block id) order."""
    queue = EvictionQueue()
    model: dict[int, tuple[int, int]] = {}  # nid -> (stamp, block id); block id = nid
    for op, nid, stamp in ops:
        if op == "file":
            queue.file(nid, (stamp, nid))
            model[nid] = (stamp, nid)
        elif op == "withdraw":
            queue.withdraw(nid)
            model.pop(nid, None)
        else:
            expected = min(model, key=model.__getitem__) if model else None
            assert queue.pop_first() == expected
            if expected is not None:
                del model[expected]
        assert queue.check() is None
        assert {n: (s, b) for s, b, n in queue.entries()} == model


def test_check_reports_a_broken_heap() -> None:
    """The checker used by check_invariants catches each kind of damage."""
    queue = EvictionQueue()
    for nid in range(3):
        queue.file(nid, (nid, nid))
    queue._heap[0], queue._heap[1] = queue._heap[1], queue._heap[0]
    assert "position" in str(queue.check())
    queue._position[queue._heap[0][2]], queue._position[queue._heap[1][2]] = 0, 1
    assert "smaller than its parent" in str(queue.check())
    queue._position[99] = 5
    assert "positions for" in str(queue.check())


@pytest.mark.parametrize("twin", sorted(ALLOCATORS))
def test_take_hands_out_exactly_the_ids_asked_or_nothing(twin: str) -> None:
    """R-ALLOC-1: ``take`` takes free ids in the order given; an id that is not free
    (taken, twice in one call) or not of the pool is refused and nothing is taken."""
    pool = ALLOCATORS[twin](5)
    assert type(pool).__module__.startswith(f"kachedb_radix.{twin}")
    assert pool.take([3, 1]) == [3, 1]
    assert pool.free_ids() == [0, 2, 4] and pool.allocate(2) == [0, 2]
    for bad, error in (([4, 3], OutOfBlocksError), ([4, 4], OutOfBlocksError),
                       ([4, 5], ForeignBlockError), ([True], ForeignBlockError)):  # fmt: skip
        with pytest.raises(error):
            pool.take(bad)
        assert pool.free_ids() == [4]
        pool.check_invariants()
    assert pool.take([]) == [] and pool.take([4]) == [4] and pool.free_count == 0


@pytest.mark.parametrize("twin", sorted(ALLOCATORS))
@settings(max_examples=60, derandomize=True, database=None)
@given(
    st.lists(st.integers(0, 4999), max_size=300),
    st.lists(st.integers(0, 5100), min_size=1, max_size=4),
)
def test_next_ids_are_what_allocate_takes_and_take_nothing(
    twin: str, freed: list[int], counts: list[int]
) -> None:
    """R-ALLOC-2: ``next_ids(n)`` is the ``n`` smallest free ids (fewer when fewer are
    free), what ``allocate(n)`` then takes, and takes nothing; over a pool of several
    summary words of the C twin's bitmap, its holes anywhere."""
    pool = ALLOCATORS[twin](5000)
    assert type(pool).__module__.startswith(f"kachedb_radix.{twin}")
    pool.allocate(5000)
    pool.free(sorted(set(freed)))
    for count in counts:
        ahead = pool.next_ids(count)
        assert ahead == sorted(pool.free_ids())[:count]
        assert pool.free_count == len(pool.free_ids())  # nothing taken
        pool.check_invariants()
        if len(ahead) == count:
            assert pool.allocate(count) == ahead
    for bad in (-1, True, 1.0, "2"):
        with pytest.raises(InvalidArgumentError):
            pool.next_ids(bad)
