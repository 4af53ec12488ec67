"""The C twin's edge paths, each checked against what the reference (or a tuple) does.

Bad arguments to every C entry point (keyword spellings, a ``pin`` whose truth raises,
oversized pools, the hash hooks), ``Blocks`` answering like the tuple of its ids
(membership, ``index``/``count`` with non-int values, subscripts, comparisons, buffer
requests), leases, token buffers of every item format and byte order (``_testbuffer``
exports formats NumPy does not), int subclasses out of range, a buffer whose export
fails, children tries at every block size, and the collector running in the middle of a
call. Where a call is refused, the tree's dump is the same after as before (R-ERR-2).
"""

from __future__ import annotations

import ctypes
import gc
import io
import operator
import os
import struct
import sys
import zlib
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest

from kachedb_radix import reference

if os.environ.get("KACHEDB_RADIX_PURE") == "1":
    pytest.skip("KACHEDB_RADIX_PURE=1: the C twin is not under test", allow_module_level=True)

import kachedb_radix.accel._radix as radix
from kachedb_radix import accel
from tests.support.hooks import corrupt_check
from tests.support.twins import check_pair

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI.
pytestmark = pytest.mark.quick

TWINS: tuple[Callable[..., Any], Callable[..., Any]] = (reference.RadixTree, accel.RadixTree)


def both(call: Callable[[Any], Any], size: int = 2, blocks: int = 16) -> list[Any]:
    """``call`` on a small tree of each twin: its result, or its error's class."""
    outcomes = []
    for make in TWINS:
        tree = make(blocks, size)
        tree.insert([1, 1, 2, 2, 3, 3], pin=True)
        tree.insert([1, 1, 4, 4], "ns")
        before = tree.dump()
        try:
            outcomes.append(("ok", call(tree)))
        except Exception as error:  # the class is the outcome
            outcomes.append(("error", type(error)))
            assert tree.dump() == before
        tree.check_invariants()
    return outcomes


def match_length(tokens: object, tree: Any, snapshot: bool = False) -> int:
    """How much of ``tokens`` the tree (or a snapshot of it) matches."""
    length: int = (tree.snapshot() if snapshot else tree).match(tokens).length
    return length


def spelled(name: str) -> str:
    """``name`` as a new, not interned str (a keyword spelled at run time)."""
    return "".join([name[:1], name[1:]])


# ---------------------------------------------------------------------------- arguments


class RaisingBool:
    def __bool__(self) -> bool:
        raise ZeroDivisionError("no truth")


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t.match(**{spelled("tokens"): [1, 1], spelled("namespace"): None}).length,
        lambda t: t.insert([1, 1], **{spelled("pin"): True}).length,
        lambda t: t.insert([1, 1], "ns", **{spelled("namespace"): "x"}),
        lambda t: t.match([1, 1], tokens=[1, 1]),
        lambda t: t.match([1], None, True),
        lambda t: t.insert(),
        lambda t: t.match([1, 1], **{spelled("bogus"): 1}),
    ],
    ids=[
        "keywords-spelled",
        "pin-spelled",
        "namespace-twice",
        "tokens-twice",
        "three-positionals",
        "no-tokens",
        "unknown-keyword",
    ],
)
def test_call_arguments_as_the_reference(call: Callable[[Any], Any]) -> None:
    outcomes = both(call)
    assert outcomes[0] == outcomes[1]


def test_a_pin_whose_truth_raises() -> None:
    """The C twin asks ``pin`` for its truth before anything else (DESIGN.md, 'Known
    differences': the reference asks after stamping); the error changes nothing."""
    tree = accel.RadixTree(16, 2)
    tree.insert([1, 1, 2, 2])
    before = tree.dump()
    for call in (tree.match, tree.insert):
        with pytest.raises(ZeroDivisionError):
            call([1, 1, 2, 2, 3, 3], pin=RaisingBool())  # type: ignore[arg-type]
    assert tree.dump() == before


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.match(**{spelled("tokens"): [1, 1, 2, 2]}).length,
        lambda s: s.match([1, 1], **{spelled("namespace"): "ns"}).length,
        lambda s: s.match([1, 1], tokens=[1, 1]),
        lambda s: s.match(namespace=None),
        lambda s: s.match([1, 1], "ns", "x"),
        lambda s: s.match([1, 1], **{spelled("pin"): True}),
    ],
    ids=["tokens-kw", "namespace-kw", "tokens-twice", "no-tokens", "three", "pin"],
)
def test_snapshot_match_arguments_as_the_reference(call: Callable[[Any], Any]) -> None:
    outcomes = both(lambda t: call(t.snapshot()))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize(
    "args",
    [(10**30,), (2**31,), (2**24 + 1,), (8, 2**16 + 1), (8, 10**30), (8, -(10**30))],
    ids=["huge-pool", "pool-2-31", "pool-past-limit", "block-past-limit", "huge-block",
         "negative-huge"],
)  # fmt: skip
def test_constructor_limits(args: tuple[int, ...]) -> None:
    """Past the limits of R-LIMIT-* the refusal is the reference's, class and rule."""
    rule = "R-LIMIT" if args[-1] > 0 else ">= 1"
    for twin in (accel, reference):
        with pytest.raises(reference.InvalidArgumentError, match=rule):
            twin.RadixTree(*args)
        with pytest.raises(reference.InvalidArgumentError, match=r"R-LIMIT-1|>= 1"):
            twin.BlockAllocator(args[0] if len(args) == 1 else 10**30)


def test_constructor_refuses_a_pool_past_2_32_token_slots_before_allocating() -> None:
    with pytest.raises(reference.InvalidArgumentError, match="R-LIMIT-3"):
        accel.RadixTree(2**16 + 1, 2**16)
    assert accel.RadixTree(2**16, 2**16).num_blocks == 2**16  # at the cap: accepted
    with pytest.raises(TypeError, match="_hash_seed"):
        accel.RadixTree(8, 2, _hash_seed="seed")  # type: ignore[arg-type]
    assert accel.RadixTree(8, 2, _hash_seed=-1)._hash_seed == 2**64 - 1  # taken mod 2**64


def test_hash_hooks_arguments() -> None:
    bad: list[Callable[[], Any]] = [
        lambda: radix._block_hash(1),  # type: ignore[call-arg]
        lambda: radix._block_hash("seed", [1]),  # type: ignore[arg-type]
        lambda: radix._hash_keys(1),  # type: ignore[call-arg]
        lambda: radix._hash_keys("seed", 4),  # type: ignore[arg-type]
        lambda: radix._hash_keys(1, "four"),  # type: ignore[arg-type]
    ]
    for call in bad:
        with pytest.raises(TypeError):
            call()
    for call in (lambda: radix._block_hash(1, []), lambda: radix._hash_keys(1, 0)):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(ValueError):
        radix._hash_keys(1, 2**24 + 1)
    with pytest.raises(OverflowError):
        radix._hash_keys(1, 2**70)
    with pytest.raises(reference.TokenTypeError):
        radix._block_hash(1, "ab")
    assert len(radix._hash_keys(-5, 3)) == 4
    assert radix._block_hash(2**70, [5]) == radix._block_hash(2**70 % 2**64, [5])


def test_evict_counts_as_the_reference() -> None:
    for count in (-(10**30), 10**30, 0, -1):
        outcomes = both(operator.methodcaller("evict", count))
        assert outcomes[0] == outcomes[1]


def test_allocator_arguments_as_the_reference() -> None:
    def run(cls: Any) -> list[Any]:
        pool = cls(300)
        outcomes: list[Any] = []
        calls: list[Callable[[], Any]] = [
            lambda: pool.allocate(-(10**30)),
            lambda: pool.allocate(10**30),
            lambda: pool.allocate(280),  # ids past 256
            lambda: pool.free(iter([3, 2, 1])),  # any iterable
            lambda: pool.free([4, 5, "x", 6]),  # refused mid-list: the first two stay
            lambda: pool.free([7, 7]),
            lambda: pool.free(5),
            lambda: pool.free_ids()[:5],
            lambda: pool.allocated_count,
        ]
        for call in calls:
            try:
                outcomes.append(("ok", call()))
            except Exception as error:
                outcomes.append(("error", type(error)))
        pool.check_invariants()
        return outcomes

    assert run(accel.BlockAllocator) == run(reference.BlockAllocator)
    assert repr(accel.BlockAllocator(4)) == "<accel.BlockAllocator 4 free of 4>"


# ---------------------------------------------------------------------------- Blocks


class Exploding:
    """Equal to nothing, and its comparison raises."""

    def __eq__(self, other: object) -> bool:
        raise ArithmeticError("no comparison")

    __hash__ = object.__hash__


class Tok(int):
    pass


PROBES: list[Any] = [0, 2, 300, 2.0, 300.0, True, False, -1, 2**33, 2**70, -(2**70), "x", None]
PROBES += [Tok(2), Tok(-1), 2 + 0j, np.uint32(2), Exploding()]


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return ("ok", call())
    except Exception as error:
        return ("error", type(error))


@pytest.fixture
def pair() -> tuple[Any, tuple[int, ...]]:
    tree = accel.RadixTree(400, 1, _hash_seed=1)
    tree.insert(list(range(298)))
    done = tree.insert([*range(298), 7, 8, 9])
    blocks = done.blocks
    return blocks, tuple(blocks)


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: type(p).__name__)
def test_blocks_membership_as_the_tuple(pair: tuple[Any, tuple[int, ...]], probe: Any) -> None:
    blocks, ids = pair
    calls: list[Callable[[Any, Any], Any]] = [
        operator.contains,
        lambda seq, value: seq.index(value),
        lambda seq, value: seq.count(value),
    ]
    for call in calls:
        ours = _outcome(lambda call=call: call(blocks, probe))  # type: ignore[misc]
        assert ours == _outcome(lambda call=call: call(ids, probe))  # type: ignore[misc]


def test_blocks_subscripts_as_the_tuple(pair: tuple[Any, tuple[int, ...]]) -> None:
    blocks, ids = pair
    keys: list[Any] = [0, -1, -len(ids), -len(ids) - 1, len(ids), 2**100, -(2**100), Tok(3)]
    keys += [slice(None, None, -7), slice(5, 2), slice(None, None, 3), np.int64(4), "x", 1.5]
    keys += [slice("a", None)]
    for key in keys:
        assert _outcome(partial(operator.getitem, blocks, key)) == _outcome(
            partial(operator.getitem, ids, key)
        )
    assert list(reversed(blocks)) == list(reversed(ids))
    it = iter(blocks)
    next(it)
    assert operator.length_hint(it) == len(ids) - 1
    assert list(it) == list(ids[1:]) and operator.length_hint(it) == 0
    assert next(it, "end") == "end"
    assert blocks.tolist() == list(ids)


@pytest.mark.parametrize(
    "other",
    [(), (0,), (0, 1, 2), None, [0, 1], "abc", 5],
    ids=["empty", "one", "three", "none", "list", "str", "int"],
)
def test_blocks_comparisons_as_the_tuple(pair: tuple[Any, tuple[int, ...]], other: Any) -> None:
    blocks, ids = pair
    ops = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]
    for op in ops:
        assert _outcome(partial(op, blocks, other)) == _outcome(partial(op, ids, other))
        assert _outcome(partial(op, other, blocks)) == _outcome(partial(op, other, ids))


def test_blocks_against_blocks() -> None:
    tree = accel.RadixTree(16, 1)
    a = tree.insert([1, 2, 3]).blocks
    b = tree.match([1, 2]).blocks
    c = tree.match([1, 2, 3]).blocks
    d = tree.insert([1, 2, 4]).blocks  # as long as a, one id apart
    assert a != d and (a == d) is False and a < d
    empty, other_empty = tree.match([]).blocks, tree.match([9]).blocks
    assert a == c and (a != c) is False and a != b and b < a and a >= b and not (a < c)
    assert empty == other_empty and (empty != other_empty) is False and empty < a
    assert hash(a) == hash(c) == hash((0, 1, 2))
    assert a + b == (0, 1, 2, 0, 1) and a + (7,) == (0, 1, 2, 7)  # noqa: RUF005
    with pytest.raises(TypeError):
        operator.add(a, [7])  # as a tuple: no list concatenation
    with pytest.raises(TypeError):
        operator.add((7,), a)


def test_blocks_buffer_requests() -> None:
    tree = accel.RadixTree(16, 1)
    blocks: Any = tree.insert([5, 6, 7, 8]).blocks
    raw = np.array(tuple(blocks), dtype=np.uint32).tobytes()
    assert zlib.crc32(blocks) == zlib.crc32(raw)  # a plain contiguous request
    assert struct.unpack_from("4I", blocks) == tuple(blocks)
    view = memoryview(blocks)
    assert (view.format, view.itemsize, view.shape, view.strides) == ("I", 4, (4,), (4,))
    assert view.readonly and bytes(view) == raw
    # A writable request is refused (getargs turns the BufferError into a TypeError).
    with pytest.raises(TypeError, match="read-write"):
        struct.pack_into("I", blocks, 0, 1)
    with pytest.raises(TypeError, match="read-write"):
        io.BytesIO(b"abcd").readinto(blocks)


# ---------------------------------------------------------------------------- leases


def test_lease_protocol() -> None:
    tree = accel.RadixTree(16, 2)
    lease = tree.insert([1, 1, 2, 2], pin=True).lease
    assert lease is not None
    assert lease.tokens is lease.tokens == (1, 1, 2, 2)  # built once
    with pytest.raises(TypeError):
        lease.__exit__()  # type: ignore[call-arg]
    assert lease.__enter__() is lease
    lease.__exit__(None, None, None)
    assert lease.released and repr(lease) == "<Lease 1 released: 2 blocks, namespace=None>"
    lease.__exit__(None, None, None)  # already released: nothing happens
    with pytest.raises(reference.LeaseReleasedError):
        lease.release()
    named = tree.match([1, 1], "x", pin=True).lease
    assert named is not None and named.namespace == "x" and named.blocks == ()
    assert repr(named) == "<Lease 2 live: 0 blocks, namespace='x'>"
    with pytest.raises(TypeError):
        tree.reader().__exit__(None)  # type: ignore[call-arg]


# ---------------------------------------------------------------------------- tokens


_testbuffer = pytest.importorskip("_testbuffer", reason="CPython's _testbuffer is not installed")


@pytest.mark.parametrize(
    ("fmt", "accepted"),
    [
        ("=I", True),
        ("@I", True),
        ("<I", True),
        ("I", True),
        ("=i", True),
        ("=q", True),
        ("!I", False),
        (">I", False),
        ("<q", True),
        ("=Q", False),
        ("=H", False),
    ],
)
def test_every_format_spelling_as_the_reference(fmt: str, accepted: bool) -> None:
    """Byte-order prefixes '@', '=' and the native '<' are native; '!' and '>' are not
    (on a little-endian machine); the reference decides, the C twin agrees."""
    if not np.little_endian:  # pragma: no cover - the CI machines are little-endian
        pytest.skip("the prefixes' meaning is written for a little-endian machine")
    data = _testbuffer.ndarray([1, 1, 2, 2], shape=[4], format=fmt)
    outcomes = both(lambda t: t.match(data).length)
    assert outcomes[0] == outcomes[1]
    assert (outcomes[0][0] == "ok") is accepted


def test_structured_and_exotic_buffers_as_the_reference() -> None:
    inputs: list[Any] = [
        np.zeros(4, dtype=[("a", "<u4")]),  # a struct format: T{...}
        np.zeros(4, dtype="<u4").view("V4"),  # raw bytes
        (ctypes.c_uint32 * 4)(1, 1, 2, 2),  # '<I'
        (ctypes.c_uint32.__ctype_be__ * 4)(1, 1, 2, 2),  # '>I'
        _testbuffer.ndarray([1, 1, 2, 2], shape=[4], format="I", flags=_testbuffer.ND_GETBUF_FAIL),
        _testbuffer.ndarray(list(range(8)), shape=[2, 4], format="I"),  # 2-D
        _testbuffer.ndarray(list(range(8)), shape=[4], strides=[8], format="I"),  # strided
    ]
    released = memoryview(np.arange(4, dtype=np.uint32).tobytes())
    released.release()
    inputs.append(released)
    for data in inputs:
        outcomes = both(partial(match_length, data))
        assert outcomes[0] == outcomes[1], data
        outcomes = both(partial(match_length, data, snapshot=True))
        assert outcomes[0] == outcomes[1], data


def test_int_subclass_tokens_as_the_reference() -> None:
    """Int subclasses take the general conversion path (exact ints have a fast one)."""
    for tokens in ([Tok(1), Tok(1)], [Tok(1), Tok(-1)], [Tok(2**32)], [Tok(2**100)], [Tok(0)]):
        outcomes = both(partial(match_length, tokens))
        assert outcomes[0] == outcomes[1], tokens


def test_long_misaligned_buffers() -> None:
    """Longer than any scratch buffer the tree grew before: copied into a fresh one."""
    for dtype in (np.uint32, np.int32):
        values = np.arange(5000, dtype=dtype) % 7
        misaligned = memoryview(bytes(1) + values.tobytes())[1:].cast(
            "I" if dtype is np.uint32 else "i"
        )
        trees: list[Any] = [make(3000, 4) for make in TWINS]
        for tree in trees:
            tree.insert(values[:4000])
        assert trees[0].match(misaligned).length == trees[1].match(misaligned).length == 4000
        check_pair(trees[0], trees[1])


# ---------------------------------------------------------------------------- tries


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 8, 16])
def test_children_tries_at_every_block_size(size: int) -> None:
    """Past 15 children a node files them in a hash trie keyed by the block hash: its
    SIMD and scalar paths differ by block size (multiples of 4, odd sizes, 16)."""
    trees: list[Any] = [TWINS[0](400, size), TWINS[1](400, size)]
    rng = np.random.default_rng(size)
    snapshots = []
    for round_ in range(3):
        for first in rng.integers(0, 60, size=25):
            tokens = [int(first), *rng.integers(0, 3, size=3 * size - 1).tolist()]
            for tree in trees:
                tree.insert(tokens, "ns" if first % 2 else None)
        snapshots.append((trees[0].snapshot(), trees[1].snapshot()))
        for tree in trees:
            tree.evict(10 + round_)
        check_pair(trees[0], trees[1], snapshots)
    for first in range(60):
        probe = [first, 0, 1] * size
        assert trees[1].match(probe).length == trees[0].match(probe).length


# ---------------------------------------------------------------------------- the collector


class Finalizer:
    """Cyclic garbage whose finalizer changes a tree: what the collector may run in the
    middle of any allocation of a tracked object."""

    def __init__(self, action: Callable[[], Any]) -> None:
        self.action = action
        self.cycle = self

    def __del__(self) -> None:
        self.action()


@pytest.fixture
def eager_collector() -> Iterator[Callable[[int, Callable[[], Any]], None]]:
    """plant(n, action): n pieces of cyclic garbage whose finalizers run ``action`` once,
    made with the collector off; the next allocation of a tracked object (after plant
    returns) then collects them."""
    thresholds, enabled = gc.get_threshold(), gc.isenabled()
    gc.collect()

    def plant(count: int, action: Callable[[], Any]) -> None:
        gc.disable()
        armed = [action]

        def fire() -> None:
            while armed:
                armed.pop()()

        for _ in range(count):
            Finalizer(fire)
        gc.set_threshold(1, 1, 1)
        gc.enable()

    try:
        yield plant
    finally:
        gc.set_threshold(*thresholds)
        if not enabled:  # pragma: no cover - pytest runs with the collector on
            gc.disable()


#: Up to 3.11 an allocation of a tracked object collects right there, inside the C call
#: that makes it; from 3.12 on the collection waits for the next bytecode.
COLLECTS_INSIDE_C = sys.version_info < (3, 12)


@pytest.mark.skipif(not COLLECTS_INSIDE_C, reason="the collector runs between bytecodes")
def test_a_finalizer_changing_the_tree_while_evict_allocates(
    eager_collector: Callable[[int, Callable[[], Any]], None],
) -> None:
    """evict() allocates its tuple (of more than 20 ids: no free list) before it reads
    the tree; a finalizer run by that allocation may insert or release, and the eviction
    then follows the changed tree, exactly as the reference does when the same change
    comes first."""
    for action in ("insert", "release"):
        trees: list[Any] = [make(200, 1) for make in TWINS]
        leases = [tree.insert(list(range(30)), pin=True).lease for tree in trees]
        for tree in trees:
            tree.insert(list(range(100, 130)))
        changes: list[Callable[[], Any]] = {
            "insert": [partial(tree.insert, list(range(200, 240))) for tree in trees],
            "release": [lease.release for lease in leases],
        }[action]
        changes[0]()  # the reference: the change, then the eviction
        expected = trees[0].evict(50)
        fired: list[int] = []
        eager_collector(
            50, partial(lambda change, fired: (change(), fired.append(1)), changes[1], fired)
        )
        got = trees[1].evict(50)  # its tuple's allocation collects, and the change lands
        assert fired, "no collection ran during evict()"
        assert got == expected
        check_pair(trees[0], trees[1])


def test_collections_during_lease_and_clone_allocations(
    eager_collector: Callable[[int, Callable[[], Any]], None],
) -> None:
    """A collection inside match (its token sequence converted by Python code, after its
    lease is allocated) and inside clone (one lease copy at a time) traverses leases
    not yet linked to a tree, and a finalizer that pins a path meanwhile is copied too."""
    tree = accel.RadixTree(64, 1)
    for i in range(12):
        tree.insert([i, i + 1], pin=True)
    seen: list[int] = []
    eager_collector(20, lambda: seen.append(1))
    hit = tree.match(range(0, 2), pin=True)
    assert hit.length == 2 and hit.lease is not None and seen
    if COLLECTS_INSIDE_C:
        eager_collector(20, lambda: tree.match([3, 4], pin=True))  # a 14th lease, mid-clone
    twin = tree.clone()
    leases = 14 if COLLECTS_INSIDE_C else 13
    assert twin.stats() == tree.stats() and tree.stats().leases == leases
    twin.check_invariants()
    assert len(gc.get_referents(tree)) == leases  # the tree's leases, for the collector


def test_more_namespaces_than_the_roots_array_holds() -> None:
    """Past 8 namespaces the roots array grows; the order and the dump stay the
    reference's, and an emptied tree (and one with named namespaces only) checks clean."""
    trees: list[Any] = [make(64, 1) for make in TWINS]
    for tree in trees:
        tree.check_invariants()  # empty: no default namespace
        for name in ("z", "y", "x", "w", "v", "u", "t", "s", "r", "q"):
            tree.insert([1, 2], name)
        tree.check_invariants()
    check_pair(trees[0], trees[1])
    for tree in trees:
        tree.evict(20)
    check_pair(trees[0], trees[1])


def test_hash_hooks_take_every_int() -> None:
    assert radix._block_hash(-1, [1]) == radix._block_hash(2**64 - 1, [1])
    assert radix._hash_keys(-1, 4) == radix._hash_keys(2**64 - 1, 4)
    with pytest.raises(ValueError):
        radix._hash_keys(1, -1)


def test_allocator_search_hint_moves_back() -> None:
    """Freeing an id below the search hint (past 4,096 ids a summary word is passed by)
    moves the hint back, as the reference's smallest-first order needs."""
    ours, theirs = accel.BlockAllocator(10_000), reference.BlockAllocator(10_000)
    for pool in (ours, theirs):
        pool.allocate(9_000)
        pool.free([3, 5000])
    assert ours.allocate(3) == theirs.allocate(3) == [3, 5000, 9000]
    ours.check_invariants()
    with pytest.raises(TypeError):
        accel.BlockAllocator()  # type: ignore[call-arg]


def test_corrupt_check_kind_must_encode() -> None:
    for target in (accel.RadixTree(4), accel.BlockAllocator(4)):
        with pytest.raises(UnicodeEncodeError):
            corrupt_check(target, "\ud800")
