"""Mutants of the block allocator (R-ALLOC-*, R-INS-4)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from kachedb_radix.reference.allocator import BlockAllocator
from kachedb_radix.reference.errors import OutOfBlocksError

from .base import MutantTree, mutant


class _LargestFirst(BlockAllocator):
    __slots__ = ()

    def allocate(self, count: int) -> list[int]:
        if count > len(self._free_heap):
            raise OutOfBlocksError(f"asked for {count} blocks")
        taken = sorted(self._free_heap, reverse=True)[:count]
        self._free_heap = [block for block in self._free_heap if block not in taken]
        heapq.heapify(self._free_heap)
        for block in taken:
            self._allocated[block] = 1
        return taken


class _Descending(BlockAllocator):
    __slots__ = ()

    def allocate(self, count: int) -> list[int]:
        return super().allocate(count)[::-1]


class _Fifo(BlockAllocator):
    """Free ids kept in a queue: freed ids go to the back, allocation takes the front."""

    __slots__ = ()

    def allocate(self, count: int) -> list[int]:
        if count > len(self._free_heap):
            raise OutOfBlocksError(f"asked for {count} blocks")
        taken, self._free_heap = self._free_heap[:count], self._free_heap[count:]
        for block in taken:
            self._allocated[block] = 1
        return taken

    def free(self, block_ids: Iterable[int]) -> None:
        ids = list(block_ids)
        for block in ids:
            self._allocated[block] = 0
        self._free_heap.extend(ids)


class _Leaky(BlockAllocator):
    __slots__ = ()

    def free(self, block_ids: Iterable[int]) -> None:
        list(block_ids)  # accepted, but never returned to the pool


class _DoubleHandout(BlockAllocator):
    __slots__ = ()

    def free(self, block_ids: Iterable[int]) -> None:
        ids = list(block_ids)
        super().free(ids)
        for block in ids:
            heapq.heappush(self._free_heap, block)  # now free twice


@mutant("alloc_largest_first", "R-ALLOC-2")
class AllocLargestFirst(MutantTree):
    """Allocation hands out the largest free ids first."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._allocator = _LargestFirst(num_blocks)


@mutant("alloc_descending", "R-ALLOC-2", "R-INS-4")
class AllocDescending(MutantTree):
    """The smallest free ids are used, but laid along the path in descending order."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._allocator = _Descending(num_blocks)


@mutant("alloc_fifo", "R-ALLOC-2")
class AllocFifo(MutantTree):
    """Freed ids are reused in the order they were freed (a FIFO, as in vLLM)."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._allocator = _Fifo(num_blocks)


@mutant("freed_blocks_leak", "R-ALLOC-1", "R-INV-1")
class FreedBlocksLeak(MutantTree):
    """Evicted blocks leave the tree but are never returned to the pool."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._allocator = _Leaky(num_blocks)


@mutant("block_given_twice", "R-ALLOC-1")
class BlockGivenTwice(MutantTree):
    """A freed id enters the free pool twice, so it can be handed out twice."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._allocator = _DoubleHandout(num_blocks)
