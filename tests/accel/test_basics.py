"""accel-specific tests: the compiled type is what runs, its result/lease/sequence types,
token buffers of every dtype, the allocator twin, the hash-seed hook under crafted
collisions, atomicity, garbage collection of lease cycles and deep trees."""

from __future__ import annotations

import array
import gc
import os
import random
import weakref
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import pytest

from kachedb_radix import reference
from kachedb_radix.reference.allocator import BlockAllocator as RefAllocator

if os.environ.get("KACHEDB_RADIX_PURE") == "1":
    pytest.skip("KACHEDB_RADIX_PURE=1: the C twin is not under test", allow_module_level=True)

import kachedb_radix.accel._radix as radix
from kachedb_radix import accel

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI.
pytestmark = pytest.mark.quick


def test_make_tree_builds_the_compiled_type(make_tree: Any, impl_name: str) -> None:
    tree = make_tree(8, 2)
    if impl_name == "accel":
        assert type(tree).__module__ == "kachedb_radix.accel._radix"
        assert type(tree) is radix.RadixTree
        assert radix.__file__ is not None and radix.__file__.endswith((".so", ".pyd"))
        assert tree.implementation == "accel"
    else:
        assert type(tree) is reference.RadixTree


def test_properties_and_constructor_errors() -> None:
    tree = accel.RadixTree(10, 4)
    assert (tree.num_blocks, tree.block_size, tree.clock) == (10, 4, 0)
    assert accel.RadixTree(3).block_size == 16
    for bad in [(0,), (-1,), (True,), (2.0,), ("8",), (8, 0), (8, True), (8, 1.5)]:
        with pytest.raises(reference.InvalidArgumentError):
            accel.RadixTree(*bad)  # type: ignore[arg-type]
        with pytest.raises(reference.InvalidArgumentError):
            reference.RadixTree(*bad)  # type: ignore[arg-type]


def test_blocks_is_a_compact_sequence() -> None:
    tree = accel.RadixTree(16, 2)
    result = tree.insert(list(range(10)))
    blocks = result.blocks
    assert isinstance(blocks, Sequence)
    assert len(blocks) == 5
    assert blocks == (0, 1, 2, 3, 4)
    assert tuple(blocks) == (0, 1, 2, 3, 4)
    assert list(blocks) == [0, 1, 2, 3, 4]
    assert blocks != [0, 1, 2, 3, 4]  # like a tuple: not equal to a list
    assert blocks[0] == 0 and blocks[-1] == 4
    assert blocks[1:3] == (1, 2) and blocks[::-1] == (4, 3, 2, 1, 0)
    assert 3 in blocks and 9 not in blocks and "x" not in blocks
    assert blocks.index(2) == 2 and blocks.count(2) == 1 and blocks.count(9) == 0
    assert hash(blocks) == hash((0, 1, 2, 3, 4))
    assert repr(blocks) == "(0, 1, 2, 3, 4)"
    assert blocks + (5,) == (0, 1, 2, 3, 4, 5)  # noqa: RUF005
    assert list(reversed(blocks)) == [4, 3, 2, 1, 0]
    assert np.frombuffer(blocks, dtype=np.uint32).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(IndexError):
        blocks[5]
    with pytest.raises(ValueError):
        blocks.index(9)
    assert result.allocated == (0, 1, 2, 3, 4) and result.evicted == ()
    assert tree.match(list(range(4))).blocks == tree.match(list(range(5))).blocks


def test_results_and_lease() -> None:
    tree = accel.RadixTree(8, 2)
    done = tree.insert([1, 2, 3, 4, 5], "ns", pin=True)
    assert (done.length, done.reused) == (4, 0)
    lease = done.lease
    assert isinstance(lease, accel.Lease)
    assert (lease.id, lease.namespace, lease.tokens, lease.length) == (1, "ns", (1, 2, 3, 4), 4)
    assert lease.blocks == (0, 1) and not lease.released
    assert repr(lease) == "<Lease 1 live: 2 blocks, namespace='ns'>"
    assert "MatchResult(length=2" in repr(tree.match([1, 2], "ns"))
    with tree.match([1, 2, 3, 4], "ns", pin=True).lease as second:  # type: ignore[union-attr]
        assert tree.stats().pinned == 2 and second.id == 2
    assert second.released and tree.stats().leases == 1
    lease.release()
    assert lease.released and tree.stats().pinned == 0
    with pytest.raises(reference.LeaseReleasedError):
        lease.release()
    with pytest.raises(reference.LeaseReleasedError):
        tree.release(lease)
    other = accel.RadixTree(8, 2)
    for foreign in (
        None,
        3,
        other.match([], pin=True).lease,
        reference.RadixTree(8, 2).match([], pin=True).lease,
    ):
        with pytest.raises(reference.ForeignLeaseError):
            tree.release(foreign)
    with pytest.raises(reference.ForeignLeaseError):
        reference.RadixTree(8, 2).release(tree.match([], pin=True).lease)
    tree.check_invariants()


def test_keyword_arguments() -> None:
    tree: Any = accel.RadixTree(8, 2)
    assert tree.insert(tokens=[1, 2], namespace="x", pin=False).length == 2
    assert tree.match([1, 2], namespace="x").length == 2
    with pytest.raises(TypeError):
        tree.match([1, 2], "x", namespace="y")
    with pytest.raises(TypeError):
        tree.match([1, 2], bogus=1)
    with pytest.raises(TypeError):
        tree.match()
    with pytest.raises(TypeError):
        tree.match([1], None, True)


GOOD_BUFFERS = [
    np.arange(12, dtype=np.uint32),
    np.arange(12, dtype=np.int32),
    np.arange(12, dtype=np.int64),
    np.arange(12, dtype="=u4"),
    np.arange(12, dtype="<u4" if np.little_endian else ">u4"),
    array.array("I", range(12)),
    array.array("i", range(12)),
    array.array("l", range(12)),
    array.array("q", range(12)),
    memoryview(array.array("I", range(12))),
    memoryview(np.arange(12, dtype=np.int64)),  # type: ignore[arg-type]
    # A misaligned uint32 view: copied, never read misaligned.
    memoryview(bytes(1) + np.arange(12, dtype=np.uint32).tobytes())[1:].cast("I"),
    memoryview(bytes(1) + np.arange(12, dtype=np.int64).tobytes())[1:].cast("q"),
    np.arange(24, dtype=np.uint32)[:12],
]


@pytest.mark.parametrize("data", GOOD_BUFFERS, ids=lambda d: f"{type(d).__name__}")
def test_every_accepted_buffer(data: Any) -> None:
    results = []
    for tree in (reference.RadixTree(16, 4), accel.RadixTree(16, 4)):
        tree.insert(list(range(8)))
        hit = tree.match(data)
        results.append((hit.length, tuple(hit.blocks), tree.insert(data).allocated == (2,)))
        assert tree.dump()["namespaces"][0]["children"][0]["tokens"] == list(range(12))
    assert results[0] == results[1] == (8, (0, 1), True)


BAD_BUFFERS: list[tuple[Any, type[Exception]]] = [
    (np.arange(4, dtype=np.uint64), reference.TokenTypeError),
    (np.arange(4, dtype=np.float32), reference.TokenTypeError),
    (np.arange(4, dtype=np.float64), reference.TokenTypeError),
    (np.arange(4, dtype=np.int16), reference.TokenTypeError),
    (np.arange(4, dtype=np.uint8), reference.TokenTypeError),
    (np.zeros(4, dtype=np.bool_), reference.TokenTypeError),
    (b"\x00\x01\x02\x03", reference.TokenTypeError),
    (bytearray(8), reference.TokenTypeError),
    (np.arange(4, dtype=">u4" if np.little_endian else "<u4"), reference.TokenTypeError),
    (np.arange(4, dtype=">i8" if np.little_endian else "<i8"), reference.TokenTypeError),
    (
        array.array("L", [1]) if array.array("L").itemsize == 8 else array.array("Q", [1]),
        reference.TokenTypeError,
    ),
    (np.zeros((2, 4), dtype=np.uint32), reference.TokenLayoutError),
    (np.zeros((2, 4), dtype=np.uint32).T, reference.TokenLayoutError),
    (np.arange(8, dtype=np.uint32)[::2], reference.TokenLayoutError),
    (np.array(3, dtype=np.uint32), reference.TokenLayoutError),
    (np.array([1, -1], dtype=np.int32), reference.TokenRangeError),
    (np.array([1, 2**32], dtype=np.int64), reference.TokenRangeError),
    (np.array([1, -(2**40)], dtype=np.int64), reference.TokenRangeError),
    ([1, True], reference.TokenTypeError),
    ([1, 1.0], reference.TokenTypeError),
    ([1, np.uint32(1)], reference.TokenTypeError),
    ([1, -1], reference.TokenRangeError),
    ([1, 2**32], reference.TokenRangeError),
    ([1, 2**100], reference.TokenRangeError),
    ([1, -(2**100)], reference.TokenRangeError),
    ([1, -1, "a"], reference.TokenRangeError),
    ([1, "a", -1], reference.TokenTypeError),
    ("abcd", reference.TokenTypeError),
    (42, reference.TokenTypeError),
    (None, reference.TokenTypeError),
    ({1, 2}, reference.TokenTypeError),
    (iter([1, 2]), reference.TokenTypeError),
    (range(-1, 3), reference.TokenRangeError),
]


@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
def test_int64_range_errors_name_the_first_bad_token(misaligned: bool) -> None:
    """accel narrows int64 buffers 64 tokens at a time with one range test per block; the
    error still names the first bad token and its value, as the reference does,
    wherever it lies (R-TOK-5)."""
    for bad_at in (0, 3, 63, 64, 65, 127, 128, 255, 299):
        for value in (-1, 2**32, -(2**40)):
            data = np.arange(300, dtype=np.int64)
            data[bad_at] = value
            data[-1] = -7  # a later bad token is not the one reported
            buffer: Any = data
            if misaligned:
                buffer = memoryview(bytes(1) + data.tobytes())[1:].cast("q")
            messages = []
            for tree in (reference.RadixTree(8, 4), accel.RadixTree(8, 4)):
                with pytest.raises(reference.TokenRangeError) as info:
                    tree.match(buffer)
                messages.append(str(info.value))
            assert messages[0] == messages[1]


@pytest.mark.parametrize(("data", "error"), BAD_BUFFERS, ids=lambda d: type(d).__name__)
@pytest.mark.parametrize("call", ["match", "insert"])
def test_every_refused_input(data: Any, error: type[Exception], call: str) -> None:
    for tree in (reference.RadixTree(8, 2), accel.RadixTree(8, 2)):
        tree.insert([1, 2, 3, 4])
        before = tree.dump()
        with pytest.raises(error) as caught:
            getattr(tree, call)(data)
        assert type(caught.value) is error
        assert tree.dump() == before


def test_whole_list_is_validated_after_a_short_match() -> None:
    """R-TOK-5: the match stops after one block but the 10,000th element still counts."""
    tree = accel.RadixTree(8, 2)
    tree.insert([1, 2])
    tokens: list[Any] = [1, 2, *([7] * 10_000)]
    assert tree.match(tokens).length == 2
    for bad, error in (("x", reference.TokenTypeError), (-3, reference.TokenRangeError)):
        tokens[-1] = bad
        with pytest.raises(error):
            tree.match(tokens)
    int_subclass = type("Tok", (int,), {})
    assert tree.match([int_subclass(1), int_subclass(2)]).length == 2
    assert tree.match(range(1, 3)).length == 2
    assert tree.clock == 4


def test_out_of_blocks_is_atomic() -> None:
    for tree in (reference.RadixTree(4, 2), accel.RadixTree(4, 2)):
        lease = tree.insert([1, 2, 3, 4], pin=True).lease
        tree.insert([5, 6, 7, 8])
        before = tree.dump()
        with pytest.raises(reference.OutOfBlocksError):
            tree.insert([9, 9, 9, 9, 9, 9])
        assert tree.dump() == before
        assert lease is not None
        done = tree.insert([9, 9, 9, 9])
        assert done.evicted == (3, 2) and done.allocated == (2, 3)
        tree.check_invariants()


def test_namespaces_and_str_subclass() -> None:
    class Name(str):
        pass

    evicted = []
    for tree in (reference.RadixTree(16, 1), accel.RadixTree(16, 1)):
        tree.insert([1], Name("b"))
        tree.insert([1], "a")
        tree.insert([1])
        assert tree.namespaces() == [None, "a", "b"]
        assert tree.match([1], "b").length == 1
        evicted.append(tree.evict(3))
        assert tree.namespaces() == []
    assert evicted[0] == evicted[1] == (1, 2, 0)
    for bad in (1, b"a", ["a"]):
        with pytest.raises(reference.InvalidArgumentError):
            tree.match([1], bad)  # type: ignore[arg-type]


def test_evict_arguments() -> None:
    tree = accel.RadixTree(8, 1)
    tree.insert([1, 2, 3])
    for bad in (-1, True, 1.0, "1", None):
        with pytest.raises(reference.InvalidArgumentError):
            tree.evict(bad)  # type: ignore[arg-type]
    assert tree.evict(0) == ()
    assert tree.evict(10**40) == (2, 1, 0)


def test_allocator_twin_matches_reference() -> None:
    rng = random.Random(7)
    for size in (1, 5, 64, 65, 200):
        ours, theirs = accel.BlockAllocator(size), RefAllocator(size)
        for _ in range(300):
            action = rng.random()
            calls: list[Any]
            if action < 0.45:
                count: Any = rng.choice([0, 1, 2, 3, size, -1, True, 1.5])
                calls = [partial(a.allocate, count) for a in (ours, theirs)]
            elif action < 0.9:
                ids: Any = rng.sample(range(size), min(size, rng.randint(0, 3)))
                if rng.random() < 0.2:
                    ids = [*ids, rng.choice([-1, size, True, "x", ids[0] if ids else 0])]
                calls = [partial(a.free, list(ids)) for a in (ours, theirs)]
            else:
                probe: Any = rng.choice([0, size - 1, size, -1, True])
                calls = [partial(a.is_allocated, probe) for a in (ours, theirs)]
            outcomes: list[tuple[str, Any]] = []
            for call in calls:
                try:
                    outcomes.append(("ok", call()))
                except reference.RadixError as error:
                    outcomes.append(("error", type(error)))
            assert outcomes[0] == outcomes[1]
            assert ours.free_ids() == theirs.free_ids()
            assert (ours.free_count, ours.allocated_count, ours.num_blocks) == (
                theirs.free_count,
                theirs.allocated_count,
                theirs.num_blocks,
            )
            ours.check_invariants()
    with pytest.raises(reference.InvalidArgumentError):
        accel.BlockAllocator(0)


def _colliding_blocks(seed: int, count: int, block_size: int) -> list[list[int]]:
    """Blocks whose NH hashes are all equal under the keys drawn from ``seed``.

    NH adds (m0 + k0) * (m1 + k1) (mod 2**32 sums); m0 = -k0 zeroes that product for
    every m1, so varying m1 gives ``count`` distinct blocks with one hash.
    """
    keys = radix._hash_keys(seed, block_size)
    zero = (-keys[0]) % 2**32
    return [[zero, i, *([0] * (block_size - 2))] for i in range(count)]


def test_crafted_collisions_need_the_seed() -> None:
    blocks = _colliding_blocks(0, 500, 4)
    assert len({radix._block_hash(0, block) for block in blocks}) == 1
    seed = accel.RadixTree(1)._hash_seed  # drawn from os.urandom
    assert len({radix._block_hash(seed, block) for block in blocks}) == 500


def test_colliding_siblings_still_work() -> None:
    """2,000 siblings in one hash collision list (seed 0): lookups, splits and evictions
    stay right."""
    blocks = _colliding_blocks(0, 2000, 4)
    tree = accel.RadixTree(4200, 4, _hash_seed=0)
    ref = reference.RadixTree(4200, 4)
    for block in blocks:
        for t in (tree, ref):
            t.insert([*block, 1, 1, 1, 1])
    for block in blocks[::97]:
        assert tree.match([*block, 1, 1, 1, 1]).blocks == tuple(
            ref.match([*block, 1, 1, 1, 1]).blocks
        )
    assert tree.evict(2500) == ref.evict(2500)
    tree.check_invariants()
    assert tree.dump() == ref.dump()


def test_lease_cycles_are_collected() -> None:
    tree = accel.RadixTree(8, 2)
    tree.insert([1, 2], pin=True)
    alive = weakref.ref(tree)
    del tree
    gc.collect()
    assert alive() is None


def _branchy(tree: Any, length: int, step: int) -> None:
    base = np.arange(length, dtype=np.uint32) % 3
    tree.insert(base)
    for cut in range(0, length, step):
        tree.insert(np.append(base[:cut], np.uint32(5)))


def test_deep_tree_dump_and_check() -> None:
    """A 3,000-level tree (token-level, a branch every 3 tokens) is walked iteratively."""
    tree = accel.RadixTree(20_000, 1)
    _branchy(tree, 9_000, 3)
    tree.check_invariants()
    dump = tree.dump()
    edges, blocks, depth = 0, 0, 0
    stack = [(edge, 1) for edge in dump["namespaces"][0]["children"]]
    while stack:
        edge, level = stack.pop()
        edges, blocks, depth = edges + 1, blocks + len(edge["blocks"]), max(depth, level)
        stack.extend((child, level + 1) for child in edge["children"])
    assert blocks == tree.stats().cached == 9_000 + 3_000
    assert (depth, edges) == (3_000, 6_000)
    # The reference's dump recurses, so compare the two where it can go.
    ref, small = reference.RadixTree(4_000, 1), accel.RadixTree(4_000, 1)
    for t in (ref, small):
        _branchy(t, 600, 3)
    assert small.dump() == ref.dump()


def test_memory_bytes_accounts_every_part() -> None:
    tree = accel.RadixTree(1024, 16)
    tree.insert(np.arange(1024 * 16, dtype=np.uint32))
    parts = tree.memory_bytes()
    assert parts["tokens"] == 1024 * 16 * 4
    assert parts["cached_blocks"] == 1024 and parts["live_nodes"] == 1
    summed = sum(v for k, v in parts.items() if k not in ("total", "cached_blocks", "live_nodes"))
    assert parts["total"] == summed
