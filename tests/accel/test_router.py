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
import random
import struct
from collections.abc import Callable
from typing import Any

import msgspec
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
from tests.support.hooks import corrupt_check, require_hooks

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
        pair: list[ExternalHash] = [1000 + worker // 2, 5000 + worker, 2000 + worker // 4]
        batch: list[BlockStored | BlockRemoved | AllBlocksCleared] = [
            BlockStored(hashes, None, [0] * 6, 2, None, medium, None),
            BlockStored(pair, None, [0] * 6, 2, None, "GPU", None),
            BlockStored([worker % 5], None, [0] * 2, 2, None, medium, None),  # a copy more
            BlockStored(pair[::-1], None, [0] * 6, 2, None, "GPU", None),
        ]
        if worker == 9:  # stale fingerprints: one, then 300 (the next store compacts)
            batch.append(BlockRemoved([5000 + worker, 5000 + worker], "GPU"))
            churned: list[ExternalHash] = list(range(9000, 9300))
            batch.append(BlockStored(churned, None, [0] * 600, 2, None, "GPU", None))
            batch.append(BlockRemoved(churned, "GPU"))
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
    "record_twice": "another slot's",
    "overflow": "overflows its record",
    "free_live": "which is not free",
    "extras_count": "extras entries",
}


def test_every_check_fires() -> None:
    """Each invariant of the C table, broken in place, is caught; the break is undone
    (the test build's hooks)."""
    require_hooks()
    router_class: Any = accel.RouterIndex  # the stub leaves the test build's names out
    assert router_class._corrupt_kinds() == list(KINDS)
    shown = 0
    for kind, message in KINDS.items():
        index = rich()
        before = index.dump()
        try:
            got = corrupt_check(index, kind)
        except ValueError as refusal:  # this state cannot show it (a layout detail)
            assert "cannot show" in str(refusal), kind
            continue
        assert got is not None and message in got, (kind, got)
        index.check_invariants()
        assert index.dump() == before
        shown += 1
    assert shown >= len(KINDS) - 2
    with pytest.raises(ValueError, match="unknown kind"):
        corrupt_check(rich(), "nope")
    with pytest.raises(TypeError):
        corrupt_check(rich(), 3)
    with pytest.raises(ValueError, match="no slot"):
        corrupt_check(accel.RouterIndex(), "len")


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
    "remove_worker": lambda i: (i.remove_worker, (14,)),  # a set of 4 shrinks to an array
    "new_index": lambda i: (accel.RouterIndex, (BlockHasher(), 2)),
    "apply_payload": lambda i: (  # read by the C reader: no msgspec inside
        i.apply,
        (17, 1, encode_batch(_stored_batch(*range(3000, 3300), 0, 1, medium="GPU"))),
    ),
    "apply_shared": lambda i: (  # sets grow a class, set members get copies (extras)
        i.apply,
        (18, 1, _stored_batch(*[1000 + w // 2 for w in range(0, 70, 2)] * 2, medium="GPU")),
    ),
    "query_one_word": lambda i: (_one_word().query_hashes, ([1, 2, 3, 4],)),
    "apply_compacting": lambda i: (i.apply, (9, 1, _stored_batch(7, medium="GPU"))),
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


def _one_word() -> Any:
    """An index of one mask word and one medium (the queries' fast path)."""
    index = accel.RouterIndex(BlockHasher(), 2)
    for worker in range(5):
        index.apply(worker, 0, _stored_batch(*range(1, 2 + worker), medium="GPU"))
    return index


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


# ---------------------------------------------------------------------------- the payload reader


def _mp(value: Any) -> bytes:
    """Raw msgpack, every form spelled out: ("map16", [(k, v), ...]), ("array16", [...]),
    ("str8", "x"), ("u64", n), ("i8", n), ("f32", x), ("bin", b"..."), ("ext", b"..."),
    ("raw", b"...") taken as is; else msgspec's own encoding of the value."""
    if isinstance(value, tuple) and value and isinstance(value[0], str):
        kind, body = value
        if kind in ("map", "map16", "map32"):
            head = {
                "map": bytes([0x80 | len(body)]),
                "map16": b"\xde" + len(body).to_bytes(2, "big"),
                "map32": b"\xdf" + len(body).to_bytes(4, "big"),
            }[kind]
            return bytes(head + b"".join(_mp(k) + _mp(v) for k, v in body))
        if kind in ("array", "array16", "array32"):
            head = {
                "array": bytes([0x90 | len(body)]),
                "array16": b"\xdc" + len(body).to_bytes(2, "big"),
                "array32": b"\xdd" + len(body).to_bytes(4, "big"),
            }[kind]
            return bytes(head + b"".join(_mp(v) for v in body))
        if kind in ("str8", "str16", "str32"):
            data = body.encode() if isinstance(body, str) else body
            width = {"str8": 1, "str16": 2, "str32": 4}[kind]
            return bytes([0xD9 + width // 2]) + len(data).to_bytes(width, "big") + bytes(data)
        if kind == "fixstr":
            return bytes([0xA0 | len(body)]) + bytes(body)
        forms = {"u8": (0xCC, 1), "u16": (0xCD, 2), "u32": (0xCE, 4), "u64": (0xCF, 8),
                 "i8": (0xD0, 1), "i16": (0xD1, 2), "i32": (0xD2, 4), "i64": (0xD3, 8)}  # fmt: skip
        if kind in forms:
            code, width = forms[kind]
            return bytes([code]) + int(body).to_bytes(width, "big", signed=kind[0] == "i")
        if kind == "f32":
            return b"\xca" + struct.pack(">f", body)
        if kind == "bin":
            return b"\xc4" + bytes([len(body)]) + bytes(body)
        if kind == "ext":
            return b"\xd4\x01" + bytes(body[:1])
        if kind == "raw":
            return bytes(body)
    return bytes(msgspec.msgpack.encode(value))


def _stored_map(hashes: Any, extra: list[Any] | None = None, **fields: Any) -> Any:
    body = [("type", "BlockStored"), ("block_hashes", hashes), ("parent_block_hash", None)]
    body += [("medium", "GPU"), *(extra or [])]
    for name, value in fields.items():
        body = [(k, value if k == name else v) for k, v in body]
    return ("map", body)


#: Payloads in the shapes the reader takes and in every shape it hands to the reference's
#: decoder instead (each must get the reference's verdict).
ODD_PAYLOADS = [
    _mp(("array", [1.5, ("array", [_stored_map([1, 2])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1, 2])]), None])),
    _mp(("array", [1.5, ("array", [_stored_map([1, 2])]), 3])),
    _mp(("array", [1.5, ("array", [_stored_map([1, 2])]), "rank"])),
    _mp(
        ("array", [("f32", 1.5), ("array16", [_stored_map(("array16", [("u64", 7), ("i8", -3)]))])])
    ),
    _mp(("array32", [1.5, ("array32", [_stored_map([("u8", 200), ("u16", 7), ("u32", 9)])])])),
    _mp(("array", [1.5, ("array", [_stored_map([("i16", -300), ("i32", 5), ("i64", -(2**63))])])])),
    _mp(("array", [1.5, ("array", [_stored_map([2**64 - 1, -1, 2**63])])])),
    _mp(("array", [1, ("array", [_stored_map([1])])])),  # an int ts
    _mp(("array", [1.5])),
    _mp(("array", [1.5, ("array", []), None, None])),
    _mp(("map", [(1.5, 2)])),
    _mp(("array", [1.5, ("map", [])])),
    _mp(("array", [1.5, ("array", [("map", [])])])),
    _mp(("array", [1.5, ("array", [("map", [("medium", "GPU"), ("type", "BlockStored")])])])),
    _mp(("array", [1.5, ("array", [("map", [("type", "BlockMoved")])])])),
    _mp(("array", [1.5, ("array", [("map", [("type", 3)])])])),
    _mp(
        (
            "array",
            [1.5, ("array", [("map", [("type", "AllBlocksCleared"), ("x", [1, {"a": b"z"}])])])],
        )
    ),
    _mp(
        (
            "array",
            [1.5, ("array", [("map", [("type", "AllBlocksCleared"), ("type", "BlockStored")])])],
        )
    ),
    _mp(("array", [1.5, ("array", [_stored_map([1], [("block_hashes", [2])])])])),  # twice
    _mp(("array", [1.5, ("array", [_stored_map([1], [("medium", "GPU")])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], [("parent_block_hash", 1)])])])),
    _mp(("array", [1.5, ("array", [_stored_map([("bin", b"\x01" * 8)])])])),  # bytes hashes
    _mp(("array", [1.5, ("array", [_stored_map([1], parent_block_hash=("bin", b"\x02"))])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], parent_block_hash=4)])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], medium=None)])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], medium="NVME")])])),  # a new medium
    _mp(("array", [1.5, ("array", [_stored_map([1], medium=("str8", "GPU"))])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], medium=("str16", "GPU"))])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], medium=("str32", "GPU"))])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], medium=7)])])),
    _mp(("array", [1.5, ("array", [_stored_map([1.5])])])),
    _mp(("array", [1.5, ("array", [_stored_map("not a list")])])),
    _mp(
        (
            "array",
            [
                1.5,
                (
                    "array",
                    [("map", [("type", "BlockStored"), ("block_hashes", [1]), ("medium", "GPU")])],
                ),
            ],
        )
    ),
    _mp(
        (
            "array",
            [
                1.5,
                (
                    "array",
                    [("map", [("type", "BlockRemoved"), ("block_hashes", [1]), ("medium", "GPU")])],
                ),
            ],
        )
    ),
    _mp(("array", [1.5, ("array", [("map", [("type", "BlockRemoved"), ("medium", "GPU")])])])),
    _mp(("array", [1.5, ("array", [("map", [("type", "BlockRemoved"), ("block_hashes", [1])])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], [("token_ids", ("ext", b"\x00"))])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], [("lora", ("str8", b"\xff\xfe"))])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], [("lora", ("str8", "é€𝄞"))])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], [("lora", ("str8", b"\xc0\x80"))])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], [("lora", ("str8", b"\xed\xa0\x80"))])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], [("lora", ("str8", b"\xf4\x90\x80\x80"))])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], [("lora", ("str8", b"\xe2\x82"))])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], [("x", ("raw", b"\xc1"))])])])),
    _mp(
        (
            "array",
            [
                1.5,
                (
                    "array",
                    [
                        _stored_map(
                            [1], [("x", [True, False, None, 1.5, ("f32", 2.0), ("bin", b"ab")])]
                        )
                    ],
                ),
            ],
        )
    ),
    _mp(
        (
            "array",
            [
                1.5,
                ("array", [_stored_map([1], [("x", ("map16", [(1, 2), ("k", ("map32", []))]))])]),
            ],
        )
    ),
    _mp(
        ("array", [1.5, ("array", [_stored_map([1], [("deep", ("raw", b"\x91" * 40 + b"\x01"))])])])
    ),
    _mp(("array", [1.5, ("array", [_stored_map([1], [(("str8", "s8"), 1)])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], [(5, 1)])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1, ("raw", b"\xcf\x00")])])])),  # truncated
    _mp(("array", [1.5, ("array", [_stored_map([1])])])) + b"\x00",  # trailing
    _mp(("array", [1.5, ("raw", b"\xdd\xff\xff\xff\xff")])),  # a length beyond the payload
    _mp(("array", [1.5, ("array", [_stored_map(("raw", b"\xdd\xff\xff\xff\xff"))])])),
    _mp(("array", [1.5, ("array", [("map", [("type", ("raw", b"\xda\x00"))])])])),
    _mp(("array", [1.5, ("array", [("map", [("type", ("fixstr", b"BlockStored"[:5]))])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], [("x", ("raw", b"\xc4\x05ab"))])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], [("x", ("raw", b"\xca\x00"))])])])),
    _mp(("array", [1.5, ("array", [_stored_map([1], [("x", ("raw", b"\xde\x00"))])])])),
    b"",
    b"\x92",
    b"\x92\xcb",
]


@pytest.mark.parametrize("number", range(len(ODD_PAYLOADS)))
def test_the_c_payload_reader_agrees_with_the_reference_decoder(number: int) -> None:
    """Each payload, well formed or not, gets the same outcome and leaves the same state
    in both twins, read by the C reader or handed to the reference's decoder."""
    payload = ODD_PAYLOADS[number]
    twins: list[Any] = [RouterIndex(BlockHasher(), 2), accel.RouterIndex(BlockHasher(), 2)]
    outcomes = []
    for index in twins:
        index.apply("w", 0, _stored_batch(1, medium="GPU"))  # GPU is known
        index.apply("w", 1, _stored_batch(1, medium=None))  # and None
        outcomes.append(index.apply("w", 2, payload).outcome)
        index.check_invariants()
    assert outcomes[0] == outcomes[1]
    assert twins[0].dump() == twins[1].dump()


@settings(max_examples=200, deadline=None)
@given(events=st.lists(events(), max_size=4), cut=st.integers(0, 200), flip=st.integers(0, 255))
def test_mangled_payloads_get_the_reference_s_verdict(
    events: list[Any], cut: int, flip: int
) -> None:
    """Encoded batches, cut short or with a byte changed: the C reader never takes what
    the reference's decoder refuses, nor refuses what it takes."""
    try:
        payload = encode_batch(KVEventBatch(1.0, events))
    except TypeError:  # a Digest: msgspec encodes exact bytes only
        return
    mangled = [payload[: min(cut, len(payload))]]
    if payload:
        at = cut % len(payload)
        mangled.append(payload[:at] + bytes([payload[at] ^ flip]) + payload[at + 1 :])
    for data in mangled:
        twins: list[Any] = [RouterIndex(BlockHasher(), 2), accel.RouterIndex(BlockHasher(), 2)]
        results = []
        for index in twins:
            index.apply(
                "w",
                0,
                KVEventBatch(0.0, [BlockRemoved([], medium) for medium in ("GPU", "CPU", None)]),
            )
            results.append((index.apply("w", 1, data).outcome, index.dump()))
            index.check_invariants()
        assert results[0] == results[1]


# ---------------------------------------------------------------------------- the table at size


#: The inverse of the table's mix multiplier modulo 2**64: keys crafted to land anywhere.
MIX = 0x9E3779B97F4A7C15
MIX_INVERSE = pow(MIX, -1, 1 << 64)


def _key_at(fraction: float, offset: int = 0) -> int:
    """An int hash (medium id 0, not negative) whose mix is ``fraction`` of 2**64 (plus
    ``offset``): its home is that fraction of any table."""
    mix = (int(fraction * (1 << 64)) + offset) % (1 << 64)
    return ((mix * MIX_INVERSE) % (1 << 64)) ^ (0x80 << 56)


def test_clusters_that_wrap_around_the_table_s_end_survive_growth_and_removal() -> None:
    """Keys crafted to pile up at the end of the table and at its start, so runs wrap
    around the end, a rebuild starts in the middle of a cluster and meets its first key
    again: the C twin stays exact (check_invariants, holdings) through every growth."""
    keys = [_key_at(0.999999, i) for i in range(400)] + [_key_at(0.0, i) for i in range(400)]
    keys += [_key_at(i / 5000) for i in range(5000)]
    reference, c_twin = RouterIndex(BlockHasher(), 2), accel.RouterIndex(BlockHasher(), 2)
    for index in (reference, c_twin):
        for seq, first in enumerate(range(0, len(keys), 500)):
            index.apply("w", seq, _stored_batch(*keys[first : first + 500], medium="GPU"))
            index.check_invariants()
        index.apply(
            "w", 100, KVEventBatch(0.0, [BlockRemoved(list[ExternalHash](keys[::3]), "GPU")])
        )
        index.check_invariants()
    assert c_twin.holdings("w") == reference.holdings("w")
    assert c_twin.query_hashes(keys[1:4]) == reference.query_hashes(keys[1:4])


def test_a_large_index_under_churn_matches_a_model() -> None:
    """200,000 random hashes over 40 workers, with removals, copies, clears, losses and
    workers leaving: the C twin's holdings, copies and depths are the model's, and its
    invariants hold (fingerprint lists compacted, sets grown and shrunk on the way)."""
    rng = random.Random(7)
    index = accel.RouterIndex(BlockHasher(), 2)
    model: dict[int, dict[int, int]] = {w: {} for w in range(40)}
    seqs = dict.fromkeys(range(40), 0)
    shared = [rng.getrandbits(64) for _ in range(300)]
    for round_ in range(60):
        for worker in range(40):
            held = model[worker]
            fresh = [rng.getrandbits(64) for _ in range(60)] + rng.sample(shared, 20)
            stored = fresh + rng.sample(fresh, 5)  # copies
            events: list[Any] = [
                BlockStored(
                    list[ExternalHash](stored), None, [0] * 2 * len(stored), 2, None, "GPU", None
                )
            ]
            for h in stored:
                held[h] = min(held.get(h, 0) + 1, 65535)
            gone = rng.sample(sorted(held), min(len(held), 40))
            events.append(BlockRemoved(list[ExternalHash](gone), "GPU"))
            for h in gone:
                held[h] -= 1
                if not held[h]:
                    del held[h]
            if rng.random() < 0.05:
                events.append(AllBlocksCleared())
                held.clear()
            index.apply(worker, seqs[worker], KVEventBatch(0.0, events))
            seqs[worker] += 1
        if round_ % 20 == 19:
            index.check_invariants()
            victim = rng.randrange(40)
            if rng.random() < 0.5:
                index.lost(victim, seqs[victim])
            else:
                index.remove_worker(victim)
                seqs[victim] = 0
            model[victim] = {}
    index.check_invariants()
    for worker, held in model.items():
        if worker in index.workers():
            assert index.holdings(worker) == {(h, "GPU") for h in held}
            assert all(index.copies(worker, h, "GPU") == n for h, n in held.items())
    assert index.holder_blocks == sum(len(held) for held in model.values())


def test_holder_sets_grow_and_shrink_through_every_class() -> None:
    """One hash joined by 300 workers one after another (five mask words: arrays of 3,
    7, 15, 31 then a bitmask) and left again, each with copies, checked all the way;
    both twins agree on every depth and copy."""
    twins: list[Any] = [RouterIndex(BlockHasher(), 2), accel.RouterIndex(BlockHasher(), 2)]
    for worker in range(300):
        for index in twins:
            index.lost(worker, 0)  # five mask words from the start
    for worker in range(300):
        for index in twins:
            index.apply(worker, 0, _stored_batch(42, 42, 43, medium="GPU"))
        if worker % 7 == 0:
            twins[1].check_invariants()
            assert twins[1].query_hashes([42, 43]) == twins[0].query_hashes([42, 43])
    assert all(twins[1].copies(w, 42, "GPU") == 2 for w in range(300))
    for worker in range(299, -1, -1):
        for index in twins:
            index.apply(worker, 1, KVEventBatch(0.0, [BlockRemoved([42, 43], "GPU")]))
        if worker % 7 == 0:
            twins[1].check_invariants()
            assert twins[1].query_hashes([42, 43]) == twins[0].query_hashes([42, 43])
    reference, c_twin = twins
    assert c_twin.dump() == reference.dump()
    assert all(c_twin.copies(w, 42, "GPU") == 1 for w in range(300))


def test_copies_are_counted_up_to_their_cap() -> None:
    """R-ROUTE-5: 65,535 copies are counted, a store past them adds none; the removals
    take them away one by one, in both twins."""
    for index in (RouterIndex(BlockHasher(), 2), accel.RouterIndex(BlockHasher(), 2)):
        index.apply("a", 0, _stored_batch(*([9] * 70_000), medium="GPU"))
        index.apply("b", 0, _stored_batch(*([9] * 3), medium="GPU"))  # a set: extras
        assert index.copies("a", 9, "GPU") == 65_535 and index.copies("b", 9, "GPU") == 3
        assert index.counts("a")["duplicate_stores"] == 69_999
        index.apply("a", 1, KVEventBatch(0.0, [BlockRemoved([9] * 65_534, "GPU")]))
        assert index.copies("a", 9, "GPU") == 1 and index.query_hashes([9]) == {"a": 1, "b": 1}
        index.apply("b", 1, KVEventBatch(0.0, [BlockRemoved([9], "GPU")]))
        assert index.copies("b", 9, "GPU") == 2
        index.apply("a", 2, KVEventBatch(0.0, [BlockRemoved([9, 9], "GPU")]))
        assert index.query_hashes([9]) == {"b": 1} and index.copies("a", 9, "GPU") == 0
        assert index.counts("a")["unknown_removals"] == 1
        index.check_invariants()
        with pytest.raises(InvalidArgumentError, match="a block hash is an int or bytes"):
            index.copies("a", 1.5, "GPU")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="no worker"):
            index.copies("nobody", 9, "GPU")
        assert index.copies("b", 9, "elsewhere") == index.copies("b", 2**70, "GPU") == 0
        assert index.copies("b", b"never", "GPU") == index.copies("b", 9, 7) == 0  # type: ignore[arg-type]
        index.apply("b", 2, _stored_batch(b"digest", -5, medium="GPU"))
        assert index.copies("b", b"digest", "GPU") == index.copies("b", -5, "GPU") == 1


def test_states_that_cannot_show_a_break_say_so() -> None:
    """A break that needs a structure the index lacks is refused, naming the kind (the
    test build's hooks)."""
    require_hooks()
    empty = accel.RouterIndex(BlockHasher(), 2)
    empty.lost("w", 0)
    one = accel.RouterIndex(BlockHasher(), 2)
    one.apply("w", 0, _stored_batch(1, medium="GPU"))
    full = accel.RouterIndex(BlockHasher(), 2)
    full.apply("w", 0, _stored_batch(*range(13), medium="GPU"))  # 13 of 16 slots
    for index, kind in [
        (one, "free_list"),
        (one, "extra"),
        (empty, "fingerprint"),
        (one, "record_twice"),
        (one, "set_small"),
    ]:
        with pytest.raises(ValueError, match=r"cannot show|no slot to show"):
            corrupt_check(index, kind)
    twice = accel.RouterIndex(BlockHasher(), 2)
    for seq in range(10):
        twice.apply("w", 2 * seq, _stored_batch(7, medium="GPU"))
        twice.apply("w", 2 * seq + 1, KVEventBatch(0.0, [BlockRemoved([7], "GPU")]))
    twice.apply("w", 20, _stored_batch(7, medium="GPU"))
    with pytest.raises(ValueError, match="held 9 times"):
        corrupt_check(twice, "fingerprint")
    refused = 0
    for size in range(1, 14):  # tables of 16 slots: one whose first slot's next is taken
        crowded = accel.RouterIndex(BlockHasher(), 2)
        crowded.apply("w", 0, _stored_batch(*range(size), medium="GPU"))
        try:
            assert "same key" in str(corrupt_check(crowded, "duplicate"))
        except ValueError as refusal:
            assert "cannot show duplicate" in str(refusal)
            refused += 1
    assert refused and full.held("w") == 13


def test_a_worker_s_fingerprints_are_compacted_when_stale_ones_pile_up() -> None:
    """Stores and removals of ever new blocks leave fingerprints behind; the list is
    sorted, deduplicated and cut to the live ones once it is twice the entries, and the
    worker's holdings, a clear and a query stay exact."""
    twins: list[Any] = [RouterIndex(BlockHasher(), 2), accel.RouterIndex(BlockHasher(), 2)]
    for index in twins:
        index.apply("keep", 0, _stored_batch(*range(10**6, 10**6 + 50), medium="GPU"))
        for round_ in range(40):
            fresh = list(range(round_ * 100, round_ * 100 + 100))
            index.apply("w", 2 * round_, _stored_batch(*fresh, 7, medium="GPU"))
            removed = BlockRemoved(list[ExternalHash](fresh[:-3]), "GPU")
            index.apply("w", 2 * round_ + 1, KVEventBatch(0.0, [removed]))
            index.check_invariants()
        if index.implementation == "accel":  # 4,000 stored, 121 held: a list of about 500
            assert index.memory_bytes()["fingerprints"] < 4 * 1000
        index.apply("w", 80, KVEventBatch(0.0, [AllBlocksCleared()]))
        index.check_invariants()
        assert index.held("w") == 0 and index.held("keep") == 50
    reference, c_twin = twins
    assert c_twin.dump() == reference.dump()


def test_queries_read_only_the_words_of_the_workers_still_matching() -> None:
    """Workers of other mask words hold some of a query's blocks, inline and in sets:
    the C twin's depths are the reference's as the matching words narrow."""
    twins: list[Any] = [RouterIndex(BlockHasher(), 2), accel.RouterIndex(BlockHasher(), 2)]
    chain = list(range(500, 540))
    for index in twins:
        for worker in range(200):
            index.lost(worker, 0)
        for worker in range(130, 140):  # word 2: the prefix at depths 30 to 39
            index.apply(worker, 0, _stored_batch(*chain[: 30 + worker - 130], medium="GPU"))
        index.apply(0, 0, _stored_batch(*chain[5:9], medium="GPU"))  # word 0, inline
        for worker in (1, 2, 70):  # words 0 and 1: an array set
            index.apply(worker, 0, _stored_batch(*chain[10:12], medium="GPU"))
        index.apply(131, 1, _stored_batch(*chain[10:12], medium="GPU"))  # word 2 joins it
    reference, c_twin = twins
    queries = (chain, chain[:20], chain[5:], chain[10:], [chain[0], 9999, *chain[1:]])
    for media in (1, 2):  # one medium, then two (another path)
        for query in queries:
            assert c_twin.query_hashes(query) == reference.query_hashes(query)
        if media == 1:
            for index in twins:
                index.apply(190, 0, _stored_batch(*chain[:3], medium="CPU"))  # word 2, on CPU


def test_a_table_past_the_huge_page_size_and_its_queries() -> None:
    """A table of 650,000 slots or more (8 MB: the C twin asks for huge pages, and its
    queries prefetch) answers as the model says."""
    index = accel.RouterIndex(BlockHasher(), 2)
    keys = list(range(1 << 50, (1 << 50) + 600_000))
    index.apply("w", 0, _stored_batch(*keys, medium="GPU"))
    index.apply("v", 0, _stored_batch(*keys[:40], medium="GPU"))
    assert index.memory_bytes()["table"] > 8 * 2**20 and index.held("w") == 600_000
    assert index.query_hashes(keys[:64]) == {"w": 64, "v": 40}
    assert index.query_hashes([*keys[:30], 3]) == {"w": 30, "v": 30}
    index.check_invariants()


def test_long_clusters_near_the_table_s_end_survive_every_growth() -> None:
    """Clusters of 150 keys crafted near the end of the table (a rebuild reaches the
    end, wraps, and meets keys placed by probing): the table stays exact through every
    growth."""
    keys = [_key_at(fraction, i) for fraction in (0.93, 0.97, 0.995) for i in range(150)]
    keys += [_key_at(i / 700) for i in range(700)]
    reference, c_twin = RouterIndex(BlockHasher(), 2), accel.RouterIndex(BlockHasher(), 2)
    for index in (reference, c_twin):
        for seq, first in enumerate(range(0, len(keys), 50)):
            index.apply("w", seq, _stored_batch(*keys[first : first + 50], medium="GPU"))
            index.check_invariants()
    assert c_twin.holdings("w") == reference.holdings("w")
    assert c_twin.query_hashes(keys[::7]) == reference.query_hashes(keys[::7])
