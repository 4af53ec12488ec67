"""The C router index against the reference, call for call (R-ROUTE-1..4).

Hypothesis draws streams of every kind of call -- batches in order, repeated, ahead
(gaps), restarted, malformed (as bytes and as objects), lost, removed workers -- over
hashes of every form an event can carry (small and 64-bit ints, negative ones as SGLang
sends, bytes digests), several media and parents known and unknown; after every call
both twins must give the same answer and the same dump, and pass their own
``check_invariants()``.  A second test crosses the C twin's 64-worker mask word.
"""

from __future__ import annotations

import os
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

pytestmark = [
    pytest.mark.quick,
    pytest.mark.skipif(
        os.environ.get("KACHEDB_RADIX_PURE") == "1", reason="KACHEDB_RADIX_PURE=1: no C twin"
    ),
]

#: Hashes of every form: small ints (so streams collide), 64-bit extremes, negative
#: int64s (SGLang), and bytes (BlockHasher(wire="bytes")).
HASHES = st.one_of(
    st.integers(0, 5),
    st.sampled_from([2**64 - 1, 2**63, -1, -(2**63), 2**32]),
    st.sampled_from([b"\x00" * 8, b"\x01" * 32, b""]),
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
            result = index.apply(worker, expected, encode_batch(KVEventBatch(1.0, list(arg))))
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
    from kachedb_radix import accel

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
    from kachedb_radix import accel

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
