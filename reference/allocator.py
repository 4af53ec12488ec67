"""The block allocator: a fixed pool of physical KV block ids.

A pool of ``num_blocks`` blocks has the ids ``0 .. num_blocks - 1``. Each id is
either free or allocated, never both (R-ALLOC-1).

Allocation order is part of the spec (R-ALLOC-2) so that two implementations fed
the same operations hand out the same ids, block for block: ``allocate(n)`` returns
the ``n`` smallest free ids, in ascending order. "Smallest first" depends only on
which ids are free, not on the order they were freed in, which makes it the easiest
policy to state and to reproduce. vLLM instead hands out blocks from the head of a
free queue that evictions append to (a FIFO over freed blocks); SGLang's allocators
pop from a free list. Neither order is observable to their users; ours is, because
the conformance kit compares block ids.

Invariants (checked by :meth:`BlockAllocator.check_invariants`):

* every id in ``[0, num_blocks)`` is exactly one of free or allocated;
* ``free_count + allocated_count == num_blocks``;
* the free heap holds exactly the free ids, each once.

Misuse is a typed error and changes nothing (R-ALLOC-3, R-ALLOC-4): asking for more
blocks than are free, or to :meth:`BlockAllocator.take` an id that is not free, raises
:class:`OutOfBlocksError`; freeing a free id (or one id
twice in a call) raises :class:`DoubleFreeError`; freeing an id outside the pool, or
something that is not an int, raises :class:`ForeignBlockError`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from .errors import (
    DoubleFreeError,
    ForeignBlockError,
    InvalidArgumentError,
    InvariantViolation,
    OutOfBlocksError,
)
from .limits import check_num_blocks


class BlockAllocator:
    """A fixed pool of block ids, handed out smallest-first.

    Args:
        num_blocks: pool size, an int from 1 to 2**24 (R-LIMIT-1).

    Raises:
        InvalidArgumentError: ``num_blocks`` is not an int from 1 to 2**24.

    Cost: O(num_blocks) to build.
    """

    __slots__ = ("_allocated", "_free_heap", "_num_blocks")

    def __init__(self, num_blocks: int) -> None:
        self._num_blocks = check_num_blocks(num_blocks)  # R-LIMIT-1
        # Ascending ids already form a valid min-heap.
        self._free_heap: list[int] = list(range(num_blocks))
        self._allocated = bytearray(num_blocks)

    @property
    def num_blocks(self) -> int:
        """Pool size. O(1)."""
        return self._num_blocks

    @property
    def free_count(self) -> int:
        """Number of free blocks. O(1)."""
        return len(self._free_heap)

    @property
    def allocated_count(self) -> int:
        """Number of allocated blocks. O(1)."""
        return self._num_blocks - len(self._free_heap)

    def is_allocated(self, block_id: int) -> bool:
        """Whether ``block_id`` is currently allocated. O(1).

        Raises:
            ForeignBlockError: ``block_id`` is not an id of this pool.
        """
        self._check_id(block_id)
        return bool(self._allocated[block_id])

    def allocate(self, count: int) -> list[int]:
        """Take the ``count`` smallest free ids, in ascending order (R-ALLOC-2).

        All or nothing: on error no id is taken. Cost: O(count log num_blocks).

        Raises:
            InvalidArgumentError: ``count`` is not an int >= 0.
            OutOfBlocksError: fewer than ``count`` ids are free.
        """
        if not _is_int(count) or count < 0:
            raise InvalidArgumentError(f"block count must be an int >= 0, got {count!r}")
        if count > len(self._free_heap):
            raise OutOfBlocksError(
                f"asked for {count} blocks but only {len(self._free_heap)} of "
                f"{self._num_blocks} are free"
            )
        taken = [heapq.heappop(self._free_heap) for _ in range(count)]
        for block_id in taken:
            self._allocated[block_id] = 1
        return taken

    def take(self, block_ids: Iterable[int]) -> list[int]:
        """Take exactly these free ids, in the order given (for a tree that follows
        another's allocation, :meth:`RadixTree.choose_new_blocks`).

        All or nothing: every id is checked before any is taken (R-ALLOC-1). Cost:
        O(k + f) for k ids and f free ids (the free heap is rebuilt without them).

        Raises:
            ForeignBlockError: an id is not an int in ``[0, num_blocks)``.
            OutOfBlocksError: an id is already allocated, or appears twice.
        """
        ids = list(block_ids)
        seen: set[int] = set()
        for block_id in ids:
            self._check_id(block_id)
            if self._allocated[block_id] or block_id in seen:
                raise OutOfBlocksError(f"block {block_id} is not free to take")
            seen.add(block_id)
        self._free_heap = [block_id for block_id in self._free_heap if block_id not in seen]
        heapq.heapify(self._free_heap)
        for block_id in ids:
            self._allocated[block_id] = 1
        return ids

    def free(self, block_ids: Iterable[int]) -> None:
        """Return ``block_ids`` to the pool.

        All or nothing (R-ALLOC-4): every id is checked before any is freed.
        Cost: O(k log num_blocks) for k ids.

        Raises:
            ForeignBlockError: an id is not an int in ``[0, num_blocks)``.
            DoubleFreeError: an id is already free, or appears twice.
        """
        ids = list(block_ids)
        seen: set[int] = set()
        for block_id in ids:
            self._check_id(block_id)
            if not self._allocated[block_id] or block_id in seen:
                raise DoubleFreeError(f"block {block_id} is already free")
            seen.add(block_id)
        for block_id in ids:
            self._allocated[block_id] = 0
            heapq.heappush(self._free_heap, block_id)

    def clone(self) -> BlockAllocator:
        """An independent allocator in the same state. O(num_blocks)."""
        twin = BlockAllocator.__new__(BlockAllocator)
        twin._num_blocks = self._num_blocks
        twin._free_heap = list(self._free_heap)  # still a valid heap: same order
        twin._allocated = bytearray(self._allocated)
        return twin

    def next_ids(self, count: int) -> list[int]:
        """The ids ``allocate(count)`` would take: the ``count`` smallest free ids,
        ascending (R-ALLOC-2), fewer when fewer are free. Takes nothing.
        Cost: O(f log count) for f free ids.

        Raises:
            InvalidArgumentError: ``count`` is not an int >= 0.
        """
        if not _is_int(count) or count < 0:
            raise InvalidArgumentError(f"block count must be an int >= 0, got {count!r}")
        return heapq.nsmallest(count, self._free_heap)

    def free_ids(self) -> list[int]:
        """The free ids, ascending. O(f log f) for f free ids."""
        return sorted(self._free_heap)

    def check_invariants(self) -> None:
        """Assert the invariants in the module docstring. O(num_blocks).

        Raises:
            InvariantViolation: an invariant is broken.
        """
        free = self._free_heap
        if len(set(free)) != len(free):
            raise InvariantViolation("allocator free heap holds an id twice")
        for block_id in free:
            if not 0 <= block_id < self._num_blocks or self._allocated[block_id]:
                raise InvariantViolation(f"allocator: free id {block_id} is allocated or foreign")
        if sum(self._allocated) + len(free) != self._num_blocks:
            raise InvariantViolation("allocator: free + allocated != num_blocks")

    def _check_id(self, block_id: object) -> None:
        if not _is_int(block_id) or not 0 <= block_id < self._num_blocks:  # type: ignore[operator]
            raise ForeignBlockError(
                f"{block_id!r} is not a block id of this pool (ids are 0..{self._num_blocks - 1})"
            )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
