"""Edges of the reference the main tests pass by: corrupted state caught by the
invariant checks, token inputs of int subclasses, the block pool's buffer checks,
and the small accessors of snapshots, readers and leases."""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import pytest

from kachedb_radix.reference import BlockAllocator, BlockPool, RadixTree
from kachedb_radix.reference.blockpool import (
    BlockIdTypeError,
    BufferDTypeError,
    BufferLayoutError,
    BufferShapeError,
    PoolSpec,
)
from kachedb_radix.reference.blockpool.validation import validate_copy
from kachedb_radix.reference.errors import InvariantViolation, TokenRangeError
from tests.conftest import TreeFactory


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda a: a._free_heap.append(a._free_heap[0]), "holds an id twice"),
        (lambda a: a._free_heap.append(99), "allocated or foreign"),
        (lambda a: a._free_heap.pop(), "free \\+ allocated != num_blocks"),
    ],
    ids=["twice", "foreign", "lost"],
)
def test_allocator_invariants_catch_corruption(corrupt: Any, message: str) -> None:
    """R-ALLOC-1: each id free xor allocated, none lost, none foreign."""
    allocator = BlockAllocator(4)
    allocator.allocate(1)
    allocator.check_invariants()
    corrupt(allocator)
    with pytest.raises(InvariantViolation, match=message):
        allocator.check_invariants()


def test_tree_invariants_catch_a_wrong_counter() -> None:
    """R-INV-1: check_invariants() recounts what stats() reports."""
    tree = RadixTree(4, 1)
    tree.insert([1, 2])
    tree._cached += 1
    with pytest.raises(InvariantViolation):
        tree.check_invariants()


class Token(enum.IntEnum):
    """Token ids as an int subclass (an enum of special tokens, say)."""

    BOS = 1
    EOS = 2


def test_int_subclasses_are_tokens(make_tree: TreeFactory) -> None:
    """R-TOK-2: an int subclass (not bool) is an int; the slow path checks each."""
    tree = make_tree(4, 1)
    assert tree.insert([Token.BOS, Token.EOS, 3]).length == 3
    assert tree.match((Token.BOS, Token.EOS)).length == 2
    with pytest.raises(TokenRangeError):
        tree.match([Token.BOS, -1])


def test_snapshot_and_reader_accessors(make_tree: TreeFactory) -> None:
    """R-SNAP-2: a snapshot knows its block size; a reader says whether it left."""
    tree = make_tree(4, 2)
    assert tree.snapshot().block_size == 2
    reader = tree.reader()
    assert "inside" in repr(reader) and f"epoch={reader.epoch}" in repr(reader)
    reader.leave()
    assert "left" in repr(reader)


def test_a_lease_left_twice_through_with(make_tree: TreeFactory) -> None:
    """R-PIN-4: leaving a lease's with block after releasing it inside is quiet."""
    tree = make_tree(4, 1)
    with tree.insert([1, 2], pin=True).lease as lease:
        lease.release()
    assert lease.released and tree.stats().pinned == 0


SPEC = PoolSpec(num_blocks=4, block_size=2, num_layers=1, num_kv_heads=1, head_dim=2)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ([0.0] * 8, BufferLayoutError),
        (np.zeros(SPEC.block_shape, dtype=np.float64), BufferDTypeError),
        (np.zeros((3,), dtype=SPEC.storage_dtype), BufferShapeError),
    ],
    ids=["not-an-array", "dtype", "shape"],
)
def test_block_pool_refuses_bad_blocks_and_pools(data: Any, error: type[Exception]) -> None:
    """A block or a whole pool of the wrong kind is refused before anything is written."""
    pool = BlockPool(SPEC)
    before = pool.to_numpy()
    with pytest.raises(error):
        pool.write_block(0, data)
    with pytest.raises(error):
        pool.load(data)
    with pytest.raises(error):
        BlockPool.from_canonical(SPEC, data)
    assert np.array_equal(pool.to_numpy(), before)


def test_block_pool_pairs_must_be_pairs() -> None:
    pool = BlockPool(SPEC)
    with pytest.raises(BlockIdTypeError, match="sequence of"):
        pool.copy_pairs("01")  # type: ignore[arg-type]
    with pytest.raises(BlockIdTypeError, match="is not a"):
        pool.copy_pairs([(0, 1), 5])  # type: ignore[list-item]
    assert validate_copy(SPEC, [0, 1], [1, 2]).overlapping
    assert not validate_copy(SPEC, [0], [3]).overlapping
