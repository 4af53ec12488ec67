"""The bad-input matrix: every public call, each refusal typed and atomic (R-ERR-1, R-ERR-2).

Each case makes a small tree with pins, a namespace and free blocks, takes its dump,
makes one bad call, and checks the documented error class, its kind, a message that
names the offending value, and a dump identical to the one before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kachedb_radix.reference.errors import (
    ForeignLeaseError,
    InvalidArgumentError,
    LeaseReleasedError,
    OutOfBlocksError,
    RadixError,
    TokenLayoutError,
    TokenRangeError,
    TokenTypeError,
)
from tests.conftest import TreeFactory

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI.
pytestmark = pytest.mark.quick

Call = Callable[[Any, dict[str, Any]], object]


def _released_lease(tree: Any, held: dict[str, Any]) -> object:
    return tree.release(held["released"])


CASES: list[tuple[str, Call, type[RadixError], str]] = [
    ("match: not a sequence", lambda t, h: t.match(7), TokenTypeError, "int"),
    ("match: bool token", lambda t, h: t.match([1, False]), TokenTypeError, "False"),
    ("match: float token", lambda t, h: t.match([0.5]), TokenTypeError, "0.5"),
    ("match: negative token", lambda t, h: t.match([3, -7]), TokenRangeError, "-7"),
    ("match: token 2**32", lambda t, h: t.match([2**32]), TokenRangeError, "4294967296"),
    ("match: float64 array", lambda t, h: t.match(np.ones(4)), TokenTypeError, "'d'"),
    ("match: strided array", lambda t, h: t.match(np.arange(8)[::2]), TokenLayoutError, "strides"),
    ("match: namespace int", lambda t, h: t.match([1, 1], 12), InvalidArgumentError, "12"),
    ("insert: not a sequence", lambda t, h: t.insert(None), TokenTypeError, "NoneType"),
    ("insert: str token", lambda t, h: t.insert([1, "x"]), TokenTypeError, "'x'"),
    ("insert: token too large", lambda t, h: t.insert([2**40, 1]), TokenRangeError, str(2**40)),
    (
        "insert: int64 negative",
        lambda t, h: t.insert(np.array([-2], dtype=np.int64)),
        TokenRangeError,
        "-2",
    ),
    (
        "insert: uint64 array",
        lambda t, h: t.insert(np.ones(2, dtype=np.uint64)),
        TokenTypeError,
        "uint32",
    ),
    (
        "insert: 2-D array",
        lambda t, h: t.insert(np.ones((2, 2), dtype=np.uint32)),
        TokenLayoutError,
        "ndim=2",
    ),
    (
        "insert: namespace bytes",
        lambda t, h: t.insert([1, 1], b"ns"),
        InvalidArgumentError,
        "b'ns'",
    ),
    (
        "insert: out of blocks",
        lambda t, h: t.insert(list(range(100, 120))),
        OutOfBlocksError,
        "10 new blocks",
    ),
    ("evict: negative", lambda t, h: t.evict(-1), InvalidArgumentError, "-1"),
    ("evict: float", lambda t, h: t.evict(1.0), InvalidArgumentError, "1.0"),
    ("evict: bool", lambda t, h: t.evict(True), InvalidArgumentError, "True"),
    ("evict: str", lambda t, h: t.evict("2"), InvalidArgumentError, "'2'"),
    ("release: twice", _released_lease, LeaseReleasedError, "already released"),
    ("release: None", lambda t, h: t.release(None), ForeignLeaseError, "None"),
    (
        "release: other tree's lease",
        lambda t, h: t.release(h["foreign"]),
        ForeignLeaseError,
        "not issued",
    ),
]


@pytest.mark.parametrize(("case", "call", "error", "named"), CASES, ids=[c[0] for c in CASES])
def test_bad_call_is_refused_and_changes_nothing(
    make_tree: TreeFactory, case: str, call: Call, error: type[RadixError], named: str
) -> None:
    """R-ERR-1, R-ERR-2: typed error, helpful message, identical dump."""
    tree = make_tree(8, 2)
    other = make_tree(8, 2)
    held = {
        "live": tree.insert([1, 1, 2, 2, 3, 3], pin=True).lease,
        "released": tree.insert([1, 1, 4, 4], pin=True).lease,
        "foreign": other.insert([1, 1], pin=True).lease,
    }
    tree.insert([5, 5], "tenant")
    held["released"].release()
    before = tree.dump()
    with pytest.raises(error) as raised:
        call(tree, held)
    assert type(raised.value) is error
    assert raised.value.kind == error.kind
    assert named in str(raised.value)
    assert tree.dump() == before
    tree.check_invariants()


CONSTRUCTOR_CASES: list[tuple[str, tuple[object, object]]] = [
    ("zero blocks", (0, 16)),
    ("negative blocks", (-4, 16)),
    ("float blocks", (8.0, 16)),
    ("bool blocks", (True, 16)),
    ("zero block size", (8, 0)),
    ("str block size", (8, "16")),
    ("bool block size", (8, False)),
]


@pytest.mark.parametrize(("case", "args"), CONSTRUCTOR_CASES, ids=[c[0] for c in CONSTRUCTOR_CASES])
def test_bad_constructor_arguments(
    make_tree: TreeFactory, case: str, args: tuple[object, object]
) -> None:
    """R-ERR-1: pool and block sizes are ints >= 1; anything else names the value."""
    with pytest.raises(InvalidArgumentError) as raised:
        make_tree(*args)
    assert repr(args[0]) in str(raised.value) or repr(args[1]) in str(raised.value)


# ---------------------------------------------------------------- pool sizes (R-LIMIT-*)

#: Sizes past a cap, each with the rule its refusal names; both twins refuse every one
#: with the same class before reserving anything (issue 32: the reference raised a bare
#: MemoryError or grew to 23 GB, the C twin refused some and took others).
LIMIT_CASES: list[tuple[str, tuple[int, int], str]] = [
    ("pool past 2**24", (2**24 + 1, 1), "R-LIMIT-1"),
    ("pool 99999999999", (99_999_999_999, 1), "R-LIMIT-1"),
    ("pool 2**31", (2**31, 1), "R-LIMIT-1"),
    ("pool of 5000 digits", (10**5000, 1), "R-LIMIT-1"),
    ("block past 2**16", (2, 2**16 + 1), "R-LIMIT-2"),
    ("block 99999999999", (2, 99_999_999_999), "R-LIMIT-2"),
    ("tokens past 2**32", (2**16 + 1, 2**16), "R-LIMIT-3"),
    ("negative of 5000 digits", (-(10**5000), 1), ">= 1"),
]


@pytest.mark.parametrize(("case", "sizes", "rule"), LIMIT_CASES, ids=[c[0] for c in LIMIT_CASES])
def test_a_pool_past_a_cap_is_refused_by_both_twins(
    make_tree: TreeFactory, case: str, sizes: tuple[int, int], rule: str
) -> None:
    """R-LIMIT-1, R-LIMIT-2, R-LIMIT-3, R-ERR-1: the refusal is ``invalid_argument``, and
    says which cap."""
    with pytest.raises(InvalidArgumentError) as raised:
        make_tree(*sizes)
    assert type(raised.value) is InvalidArgumentError and rule in str(raised.value)


def test_a_pool_at_the_caps_is_built(make_tree: TreeFactory) -> None:
    """R-LIMIT-2, R-LIMIT-3: the caps themselves are accepted (2**16 blocks of 2**16
    tokens is 2**32 token slots; the 2**24-block pool costs the reference about 1 GB and
    is built below for the C twin only)."""
    tree = make_tree(2**16, 2**16)
    assert tree.num_blocks == 2**16 and tree.block_size == 2**16
    tree.insert(list(range(2 * 2**16)))
    tree.check_invariants()
    assert make_tree(3, 2**16).stats().free == 3


def test_the_c_twin_builds_the_largest_pool() -> None:
    accel = pytest.importorskip("kachedb_radix.accel")
    tree = accel.RadixTree(2**24, 1)
    assert tree.num_blocks == 2**24 and tree.insert([1, 2, 3]).allocated == (0, 1, 2)
    assert accel.BlockAllocator(2**24).free_count == 2**24


def test_a_refused_pool_reserves_nothing() -> None:
    """The reference checks the sizes before its first list: refusing 2**31 blocks
    allocates next to nothing (it used to grow to 23 GB)."""
    import tracemalloc

    from kachedb_radix.reference import BlockAllocator, RadixTree

    tracemalloc.start()
    try:
        for build in (lambda: RadixTree(2**31, 1), lambda: BlockAllocator(10**12)):
            with pytest.raises(InvalidArgumentError, match="R-LIMIT-1"):
                build()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


@pytest.mark.parametrize("twin", ["reference", "accel"])
def test_the_allocators_share_the_pool_cap(twin: str) -> None:
    """R-LIMIT-1: a ``BlockAllocator`` is a pool too."""
    module = pytest.importorskip(f"kachedb_radix.{twin}")
    for size in (2**24 + 1, 99_999_999_999, 2**31):
        with pytest.raises(InvalidArgumentError, match="R-LIMIT-1"):
            module.BlockAllocator(size)
    assert module.BlockAllocator(1).free_count == 1


TIER_LIMIT_CASES: list[tuple[tuple[int, ...], str]] = [
    ((2, 4, 10**12, 2), "disk_blocks must be at most"),
    ((2**24 + 1,), "device_blocks must be at most"),
    ((2, 2**24 + 1), "host_blocks must be at most"),
    ((2, 0, 0, 2**16 + 1), "R-LIMIT-2"),
    ((2**16 + 1, 0, 0, 2**16), "device_blocks * block_size"),
    ((2, 2**16 + 1, 0, 2**16), "host_blocks * block_size"),
    ((2, -1), "host_blocks must be an int >= 0"),
]


@pytest.mark.parametrize(("sizes", "named"), TIER_LIMIT_CASES)
def test_each_tier_is_a_pool_under_the_caps(
    make_tiers: TreeFactory, sizes: tuple[int, ...], named: str
) -> None:
    """R-LIMIT-1, R-LIMIT-3 per tier, the tier named (``TieredTree(2, 4, 10**12, 2)`` was
    a bare MemoryError)."""
    with pytest.raises(InvalidArgumentError, match=named.replace("*", r"\*")):
        make_tiers(*sizes)


def test_a_kv_cache_past_a_cap_creates_nothing(tmp_path: Any) -> None:
    """R-LIMIT-1: ``KVCache(spec, host_blocks=10**12)`` was a bare MemoryError; a disk
    tier past the cap is refused before its file exists."""
    from kachedb_radix.reference.blockpool import PoolSpec
    from kachedb_radix.reference.tiers import KVCache

    spec = PoolSpec(num_blocks=4, block_size=2, num_layers=1, num_kv_heads=1, head_dim=2)
    with pytest.raises(InvalidArgumentError, match="host_blocks must be at most"):
        KVCache(spec, host_blocks=10**12)
    disk = tmp_path / "disk"
    with pytest.raises(InvalidArgumentError, match="disk_blocks must be at most"):
        KVCache(spec, disk_path=disk, disk_blocks=2**24 + 1, model="m")
    assert not disk.exists()
