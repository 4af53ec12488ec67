"""The C router index (accel/router.c) against the reference, call for call (R-ROUTE-1..4),
its invariant checks shown to fire, and every call under allocation failure.

Hypothesis draws streams of every kind of call -- batches in order, repeated, ahead
(gaps), restarted, malformed (as bytes and as objects), lost, removed workers -- over
hashes of every form an event can carry (small and 64-bit ints, negative ones as SGLang
sends, bytes digests), several media and parents known and unknown; after every call
both twins must give the same answer and the same dump, and pass their own
``check_invariants()``.  Another test crosses the C twin's 64-worker mask word.  The
shared behaviour tests (tests/events/test_router_index.py) run both twins too.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kachedb_radix.reference.errors import InvalidArgumentError
from kachedb_radix.reference.events import (
    AllBlocksCleared,
    BlockHasher,
    BlockRemoved,
    BlockStored,
    ExternalHash,
    KVEventBatch,
    encode_batch,
)
from kachedb_radix.reference.router import RouterIndex

if os.environ.get("KACHEDB_RADIX_PURE") == "1":
    pytest.skip("KACHEDB_RADIX_PURE=1: the C twin is not under test", allow_module_level=True)

from kachedb_radix import accel
from tests.accel.test_alloc_failures import LIMIT, attempt

pytestmark = pytest.mark.quick


class Digest(bytes):
    """A bytes subclass: a hash both twins take as the bytes it holds."""


#: Hashes of every form: small ints (so streams collide), 64-bit extremes, negative
#: int64s (SGLang), and bytes (BlockHasher(wire="bytes")).
HASHES = st.one_of(
    st.integers(0, 5),
    st.sampled_from([2**64 - 1, 2**63, -1, -(2**63), 2**32]),
    st.sampled_from([b"\x00" * 8, b"\x01" * 32, b"", Digest(b"\x01" * 32)]),
)
MEDIA = st.sampled_from(["GPU", "CPU", None])


@st.composite
def events(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["store", "store", "remove", "clear"]))
    hashes: list[ExternalHash] = draw(st.lists(HASHES, min_size=0, max_size=4))
    if kind == "store":
        parent = draw(st.one_of(st.none(), HASHES))
        return BlockStored(hashes, parent, [0] * 2 * len(hashes), 2, None, draw(MEDIA), None)
    if kind == "remove":
        return BlockRemoved(hashes, draw(MEDIA))
    return AllBlocksCleared()


#: A batch that breaks the schema as an object: a hash out of msgpack's range, a float
#: hash, a medium that is not a str, an event of another type.
BAD_OBJECTS = [
    KVEventBatch(0.0, [BlockStored([2**64], None, [0, 0], 2, None, "GPU", None)]),
    KVEventBatch(0.0, [BlockRemoved([1.5], "GPU")]),  # type: ignore[list-item]
    KVEventBatch(0.0, [BlockRemoved([1], 7)]),  # type: ignore[arg-type]
    KVEventBatch(0.0, ["not an event"]),  # type: ignore[list-item]
    KVEventBatch(0.0, [BlockStored([True], None, [0, 0], 2, None, "GPU", None)]),
    KVEventBatch(0.0, (AllBlocksCleared(),)),  # type: ignore[arg-type]
    KVEventBatch(0.0, [BlockRemoved((1, 2), "GPU")]),  # type: ignore[arg-type]
]


CALLS = st.lists(
    st.one_of(
        st.tuples(st.just("next"), st.sampled_from("abc"), st.lists(events(), max_size=3)),
        st.tuples(st.just("wire"), st.sampled_from("abc"), st.lists(events(), max_size=3)),
        st.tuples(st.just("seq"), st.sampled_from("abc"), st.integers(0, 6)),
        st.tuples(st.just("bad"), st.sampled_from("abc"), st.integers(0, len(BAD_OBJECTS))),
        st.tuples(st.just("lost"), st.sampled_from("abc"), st.integers(0, 6)),
        st.tuples(st.just("remove"), st.sampled_from("abc"), st.none()),
        st.tuples(st.just("query"), st.none(), st.lists(HASHES, max_size=5)),
    ),
    max_size=30,
)


def _call(index: Any, op: str, worker: Any, arg: Any) -> Any:
    """Make one call on ``index``; what it returned or raised, comparable across twins."""
    known = worker is not None and worker in index.workers()
    expected = index.expected(worker) if known else 0
    try:
        if op == "next":
            result = index.apply(worker, expected, KVEventBatch(1.0, list(arg)))
        elif op == "wire":
            try:
                payload = encode_batch(KVEventBatch(1.0, list(arg)))
            except TypeError:  # a Digest: msgspec encodes exact bytes only
                return ("unencodable",)
            result = index.apply(worker, expected, payload)
        elif op == "seq":  # a repeat, a restart (0) or a gap
            result = index.apply(worker, arg, KVEventBatch(1.0, []))
        elif op == "bad":
            bad: Any = BAD_OBJECTS[arg] if arg < len(BAD_OBJECTS) else b"\x93garbage"
            result = index.apply(worker, expected, bad)
        elif op == "lost":
            result = index.lost(worker, arg)
        elif op == "remove":
            result = index.remove_worker(worker)
        else:
            result = index.query_hashes(arg)
    except InvalidArgumentError as exc:
        return ("raised", type(exc).__name__)
    return ("ok", getattr(result, "outcome", result), getattr(result, "missing", None))


@settings(max_examples=300, deadline=None)
@given(calls=CALLS)
def test_the_c_index_answers_every_call_as_the_reference(calls: list[Any]) -> None:
    hasher = BlockHasher()
    reference, c_twin = RouterIndex(hasher, 2), accel.RouterIndex(hasher, 2)
    assert (reference.implementation, c_twin.implementation) == ("reference", "accel")
    for op, worker, arg in calls:
        assert _call(c_twin, op, worker, arg) == _call(reference, op, worker, arg), op
        reference.check_invariants()
        c_twin.check_invariants()
        assert c_twin.dump() == reference.dump()
        assert len(c_twin) == len(reference) and c_twin.holder_blocks == reference.holder_blocks
        for name in reference.workers():
            assert c_twin.held(name) == reference.held(name) == len(reference.holdings(name))
            assert c_twin.holdings(name) == reference.holdings(name)


def test_more_workers_than_a_mask_word() -> None:
    """The C twin widens every slot's mask past 64 workers, and frees worker slots for
    reuse; both twins agree throughout."""
    hasher = BlockHasher("xxh3_64")
    twins: list[Any] = [RouterIndex(hasher, 2), accel.RouterIndex(hasher, 2)]
    chain = [hasher.external(h) for h in hasher.chain(list(range(20)), 2)]
    for index in twins:
        for worker in range(150):
            depth = 1 + worker % len(chain)
            stored = BlockStored(chain[:depth], None, [0] * 2 * depth, 2, None, "GPU", None)
            index.apply(worker, 0, KVEventBatch(0.0, [stored]))
        for worker in range(0, 150, 7):
            index.remove_worker(worker)
        index.apply(
            "late", 0, KVEventBatch(0.0, [BlockStored(chain, None, [0] * 20, 2, None, "GPU", None)])
        )
        index.check_invariants()
    reference, c_twin = twins
    assert c_twin.query_hashes(chain) == reference.query_hashes(chain)
    assert c_twin.query_tokens(list(range(20))) == reference.query_tokens(list(range(20)))
    assert c_twin.dump() == reference.dump() and c_twin.workers() == reference.workers()
    assert c_twin.memory_bytes()["slots"] >= len(c_twin)


def rich() -> Any:
    """An index with every structure a break or a failure needs: 70 workers (two mask
    words), int, negative and bytes hashes, two media, blocks held by one worker, by two
    (array sets) and by many (bitmask sets), copies inline and of set members, stale
    fingerprints and a stale worker."""
    index = accel.RouterIndex(BlockHasher(), 2)
    for worker in range(70):
        medium = "GPU" if worker % 2 else "CPU"
        hashes: list[ExternalHash] = [worker % 5, -1 - worker % 3, bytes([worker % 4]) * 8]
        pair: list[ExternalHash] = [1000 + worker // 2, 5000 + worker]
        batch: list[BlockStored | BlockRemoved | AllBlocksCleared] = [
            BlockStored(hashes, None, [0] * 6, 2, None, medium, None),
            BlockStored(pair, None, [0] * 4, 2, None, "GPU", None),
            BlockStored([worker % 5], None, [0] * 2, 2, None, medium, None),  # a copy more
            BlockStored(pair[::-1], None, [0] * 4, 2, None, "GPU", None),
        ]
        if worker == 9:  # a stale fingerprint
            batch.append(BlockRemoved([5000 + worker, 5000 + worker], "GPU"))
        index.apply(worker, 0, KVEventBatch(0.0, batch))
    index.lost(3, 5)
    return index


KINDS = {
    "bad_tag": "has a bad tag",
    "free_worker": "which is free",
    "bytes_free": "names bytes id",
    "misplaced": "is not where probing puts it",
    "duplicate": "hold the same key",
    "len": "slots used",
    "entries": "entries, counted",
    "bytes_unnamed": "is named by no slot",
    "bytes_rc": "is named by",
    "registry": "workers registered",
    "copies": "copies",
    "set_small": "member",
    "set_twice": "twice",
    "record": "which is not one",
    "free_list": "records live",
    "extra": "is not a set member's",
    "fingerprint": "fingerprints",
}


def test_every_check_fires() -> None:
    """Each invariant of the C table, broken in place, is caught; the break is undone."""
    assert accel.RouterIndex._corrupt_kinds() == list(KINDS)
    shown = 0
    for kind, message in KINDS.items():
        index = rich()
        before = index.dump()
        try:
            got = index._corrupt_check(kind)
        except ValueError as refusal:  # this state cannot show it (a layout detail)
            assert "cannot show" in str(refusal), kind
            continue
        assert got is not None and message in got, (kind, got)
        index.check_invariants()
        assert index.dump() == before
        shown += 1
    assert shown >= len(KINDS) - 2
    with pytest.raises(ValueError, match="unknown kind"):
        rich()._corrupt_check("nope")
    with pytest.raises(TypeError):
        rich()._corrupt_check(3)
    with pytest.raises(ValueError, match="no slot"):
        accel.RouterIndex()._corrupt_check("len")


def _stored_batch(*hashes: ExternalHash, medium: str | None = "GPU") -> KVEventBatch:
    return KVEventBatch(
        0.0, [BlockStored(list(hashes), None, [0] * 2 * len(hashes), 2, None, medium, None)]
    )


#: Each call of the index, made on a fresh ``rich()`` index.
CALLS_UNDER_FAILURE: dict[str, Callable[[Any], tuple[Callable[..., Any], tuple[Any, ...]]]] = {
    "apply_new_worker": lambda i: (i.apply, ("new", 0, _stored_batch(1, b"x" * 32, 2**64 - 1))),
    "apply_new_medium": lambda i: (i.apply, (5, 1, _stored_batch(-7, b"y", medium="DISK"))),
    "apply_many": lambda i: (i.apply, (6, 1, _stored_batch(*range(1000, 1400)))),
    "apply_many_bytes": lambda i: (  # the interned ids' arrays grow
        i.apply,
        (6, 1, _stored_batch(*(bytes([n]) * 32 for n in range(100)))),
    ),
    "apply_remove": lambda i: (
        i.apply,
        (8, 1, KVEventBatch(0.0, [BlockRemoved([3, b"\x00" * 8, -1], "GPU"), AllBlocksCleared()])),
    ),
    "apply_restart": lambda i: (i.apply, (9, 0, _stored_batch(4))),
    # Payloads as bytes are left out: msgspec 0.23's decoder (which decodes them, in the
    # reference's decode_batch) crashes when an allocation inside it fails. A malformed
    # batch object takes the same path in the C code after decoding.
    "apply_malformed": lambda i: (
        i.apply,
        (
            10,
            1,
            KVEventBatch(
                0.0,
                [
                    BlockStored(
                        [*(bytes([n]) * 9 for n in range(99)), 2**64],
                        None,
                        [0] * 200,
                        2,
                        None,
                        "NEW",
                        None,
                    )
                ],
            ),
        ),
    ),
    "apply_gap": lambda i: (i.apply, (11, 9, _stored_batch(4))),
    "apply_repeat": lambda i: (
        i.apply,
        (12, 0, _stored_batch(4)) if False else (12, 3, _stored_batch(4)),
    ),
    "lost": lambda i: (i.lost, (13, 4)),
    "lost_new": lambda i: (i.lost, ("fresh", 4)),
    "remove_worker": lambda i: (i.remove_worker, (14,)),
    "query_hashes": lambda i: (i.query_hashes, ([4, -2, b"\x01" * 8],)),
    # query_tokens is left out: it hashes the tokens in Python first (cbor2's Rust core
    # panics when an allocation inside it fails); the C part after it is query_hashes.
    "holdings": lambda i: (i.holdings, (15,)),
    # The dump of ten workers (the rest removed first): all 70 make more allocations
    # than the sweep's limit.
    "dump": lambda i: (_only_ten(i).dump, ()),
    "workers": lambda i: (i.workers, ()),
    "counts": lambda i: (i.counts, (16,)),
}


def _only_ten(index: Any) -> Any:
    for worker in range(10, 70):
        index.remove_worker(worker)
    return index


def _observe(index: Any) -> Any:
    return (index.dump(), len(index), index.holder_blocks)


@pytest.mark.parametrize("name", sorted(CALLS_UNDER_FAILURE))
def test_every_call_under_allocation_failure(name: str) -> None:
    """Fail each allocation of the call in turn: a MemoryError leaves the index exactly as
    before; a call that succeeds anyway gives the result and state of a clean run."""
    make = CALLS_UNDER_FAILURE[name]
    clean = rich()
    fn, args = make(clean)
    outcome, value, _ = attempt(LIMIT * 10, (fn, args, {}))
    assert outcome == "ok"
    expected, expected_after = repr(value), _observe(clean)
    failures = 0
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for k in range(LIMIT):
            index = rich()
            fn, args = make(index)
            before = _observe(index)
            outcome, value, done = attempt(k, (fn, args, {}))
            if outcome == "MemoryError":
                assert _observe(index) == before, f"allocation {k}: a failed call changed the index"
                failures += 1
            else:
                assert repr(value) == expected, f"allocation {k}: another result"
                assert _observe(index) == expected_after, f"allocation {k}: another state"
            index.check_invariants()
            if done:
                break
        else:
            pytest.fail("the sweep did not reach the end of the call")
    finally:
        if was_enabled:
            gc.enable()
    # (failures == 0 only when the call allocates nothing: the first run, failing the
    # first allocation, then found none inside the call.)


def test_arguments_limits_and_reads() -> None:
    """The C twin's own argument checks, its worker limit and its plain reads."""
    hasher = BlockHasher()
    index = accel.RouterIndex(hasher, 4)
    assert index.hasher is hasher and index.block_size == 4
    with pytest.raises(TypeError, match="at most 3 arguments"):
        index.apply(1, 2, 3, 4)  # type: ignore[call-arg, arg-type]
    with pytest.raises(TypeError, match="unexpected or repeated argument 'nope'"):
        index.apply(1, 0, KVEventBatch(0.0, []), nope=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing required argument 'batch'"):
        index.apply(1, seq=0)  # type: ignore[call-arg]
    with pytest.raises(InvalidArgumentError, match=r"above 2\*\*63 is not supported"):
        index.lost(1, 2**64)
    assert index.apply(worker=1, seq=0, batch=KVEventBatch(0.0, [])).outcome == "applied"
    assert "1 workers" in repr(index)
    for worker in range(2, 64 * 64 + 1):
        index.lost(worker, 0)
    with pytest.raises(InvalidArgumentError, match="at most 4096 workers"):
        index.lost("one too many", 0)
    with pytest.raises(InvalidArgumentError, match="at most 4096 workers"):
        index.apply("one too many", 0, KVEventBatch(0.0, []))
    assert len(index.workers()) == 4096
    index.check_invariants()
