"""The events level's checks of a stream against the candidate itself, each made to fire
by a stream that breaks it (R-EVENT-1..4, R-ROUTE-3, R-ROUTE-4): what a candidate must
never send, whatever its profile."""

from __future__ import annotations

from typing import Any

import pytest

from kachedb_radix.reference import RadixTree
from kachedb_radix.reference.events import (
    BlockHasher,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    encode_batch,
)
from kachedb_radix.spec.conform.events import EventStream
from kachedb_radix.spec.conform.safety import SafetyViolation

B = 2
HASHER = BlockHasher("xxh3_64")


def _stream_of(tree: RadixTree) -> list[bytes]:
    return [encode_batch(batch) for batch in tree.take_events()]


def _tree() -> RadixTree:
    return RadixTree(8, B, events=HASHER)


def _prop(call: Any) -> str:
    with pytest.raises(SafetyViolation) as raised:
        call()
    return raised.value.prop


def test_a_payload_no_router_reads() -> None:
    stream = EventStream(HASHER, B)
    assert _prop(lambda: stream.feed([b"\x93not msgpack"])) == "events_stream"


def test_a_store_repeated_a_parent_never_stored_a_removal_of_nothing() -> None:
    tree = _tree()
    tree.insert([1, 1, 2, 2])
    [stored] = _stream_of(tree)
    stream = EventStream(HASHER, B)
    stream.feed([stored])
    assert _prop(lambda: stream.feed([stored])) == "events_duplicate"
    orphan = KVEventBatch(1.0, [BlockStored([7], 99, [5, 5], B, None, "GPU", None)])
    assert _prop(lambda: EventStream(HASHER, B).feed([encode_batch(orphan)])) == ("events_unknown")
    gone = KVEventBatch(1.0, [BlockRemoved([12345], "GPU")])
    assert _prop(lambda: EventStream(HASHER, B).feed([encode_batch(gone)])) == "events_unknown"


def test_an_index_fed_the_stream_must_hold_the_candidate_s_blocks() -> None:
    tree = _tree()
    tree.insert([1, 1, 2, 2])
    stream = EventStream(HASHER, B)
    stream.feed(_stream_of(tree))
    stream.check_dump(tree.dump())
    empty = RadixTree(8, B).dump()
    with pytest.raises(SafetyViolation, match="still holds 2 block"):
        stream.check_dump(empty)
    tree.insert([3, 3])  # its store never fed
    with pytest.raises(SafetyViolation, match="misses 1 cached block"):
        stream.check_dump(tree.dump())


def test_two_namespaces_one_hash_and_a_path_the_index_cannot_find() -> None:
    dump = RadixTree(8, B).dump()
    dump["namespaces"] = [
        {"namespace": "a", "children": [{"tokens": [1, 1], "blocks": [0], "pins": [0],
                                         "children": []}]},
        {"namespace": "b", "children": [{"tokens": [1, 1], "blocks": [1], "pins": [0],
                                         "children": []}]},
    ]  # fmt: skip
    unsalted = EventStream(BlockHasher("xxh3_64"), B)
    unsalted.hasher = _Unsalted()
    assert _prop(lambda: unsalted.check_namespaces(dump)) == "events_namespace"
    tree = _tree()
    tree.insert([1, 1, 2, 2])
    stream = EventStream(HASHER, B)
    stream.feed(_stream_of(tree))
    tree.insert([1, 1, 2, 2, 3, 3])  # the dump's first path is longer than the index knows
    assert _prop(lambda: stream._check_depths(tree.dump())) == "events_query"


class _Unsalted(BlockHasher):
    """Dynamo's hashes with the namespace left out: two tenants, one hash."""

    def __init__(self) -> None:
        super().__init__("xxh3_64")

    def block_hash(self, parent: Any, tokens: Any, salt: str | None = None) -> Any:
        return super().block_hash(parent, tokens, None)


def test_recovery_of_a_well_behaved_stream_is_exact() -> None:
    """R-ROUTE-1, R-ROUTE-2: a dropped batch, a restart and a late subscriber, over a
    stream longer than the replay buffer."""
    tree = _tree()
    stream = EventStream(HASHER, B)
    for token in range(12):
        tree.insert([token, token])
        stream.feed(_stream_of(tree))
    stream.check_recovery(tree.dump())
    stream.restart(B)
    stream.check_recovery(tree.dump())  # nothing since the reset: nothing to replay
