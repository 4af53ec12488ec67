"""What the tree emits (R-EVENT-1..6): one batch per operation that caches or evicts
blocks, whose stream always rebuilds exactly the tree's blocks.

Every test runs on both twins (``make_tree``), but the one on the reference's
``choose_victims`` extension point, which the C twin does not have.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kachedb_radix.reference import InvalidArgumentError, OutOfBlocksError, RadixTree
from kachedb_radix.reference.events import (
    AllBlocksCleared,
    BlockHasher,
    BlockRemoved,
    BlockStored,
    EventDecodeError,
    ExternalHash,
    KVEventBatch,
    decode_batch,
    dump_hashes,
    encode_batch,
)
from kachedb_radix.reference.events.recorder import EventRecorder
from kachedb_radix.reference.router import RouterIndex
from tests.conftest import TreeFactory
from tests.support.hooks import corrupt_check
from tests.support.vllm import require_vllm

#: ``events_tree(num_blocks=8, block_size=2, events=True)``: a tree of the twin under test.
EventsTree = Any


@pytest.fixture
def events_tree(make_tree: TreeFactory) -> Any:
    """A factory of trees that emit events, of the implementation under test."""

    def build(num_blocks: int = 8, block_size: int = 2, events: object = True) -> Any:
        return make_tree(num_blocks, block_size, events=events)

    return build


def hash_of(tree: Any, block: int) -> ExternalHash | None:
    """The external hash ``tree``'s events name cached ``block`` by (None: not cached): the
    reference's recorder, or the C twin's own table (its ``_event_hash`` hook)."""
    if tree.implementation == "reference":
        recorder = tree._events
        assert isinstance(recorder, EventRecorder)
        return recorder.hash_of(block)
    found: ExternalHash | None = tree._event_hash(block)
    return found


def test_events_are_off_by_default_and_asked_for_by_name(
    events_tree: EventsTree, make_tree: TreeFactory
) -> None:
    """R-EVENT-1: without ``events`` nothing is recorded and take_events refuses."""
    plain = make_tree(8, 2)
    assert plain.events is None
    plain.insert([1, 2, 3, 4])
    with pytest.raises(InvalidArgumentError, match="emits no events"):
        plain.take_events()
    assert make_tree(8, 2, events=False).events is None
    assert events_tree().events == BlockHasher()
    assert events_tree(events=BlockHasher("xxh3_64")).events == BlockHasher("xxh3_64")
    with pytest.raises(InvalidArgumentError, match="events must be None, True or a BlockHasher"):
        make_tree(8, 2, events="sha256")


def test_an_insert_emits_one_block_stored_for_its_new_blocks(events_tree: EventsTree) -> None:
    """R-EVENT-3: the new blocks' hashes in path order, the parent's hash, their tokens."""
    tree = events_tree()
    hasher = tree.events
    assert hasher is not None
    tree.insert([1, 2, 3, 4])
    tree.insert([1, 2, 3, 4, 5, 6, 7])  # reuses two blocks, caches one, a partial ignored
    first, second = tree.take_events()
    chain = [hasher.external(h) for h in hasher.chain([1, 2, 3, 4, 5, 6], 2)]
    assert first == KVEventBatch(
        1.0, [BlockStored(chain[:2], None, [1, 2, 3, 4], 2, None, "GPU", None)]
    )
    assert second.events == [BlockStored(chain[2:], chain[1], [5, 6], 2, None, "GPU", None)]
    assert second.ts == 2.0 and tree.take_events() == []
    tree.insert([1, 2, 3, 4])  # nothing new: nothing emitted
    assert tree.take_events() == []


def test_payloads_are_the_batches_encoded(events_tree: EventsTree) -> None:
    """R-EVENT-6: take_event_payloads() hands over what take_events() would, each batch as
    the msgpack payload a publisher sends; either takes the batches."""
    tree = events_tree(events=BlockHasher(wire="bytes"))
    tree.insert([1, 2, 3, 4], "ns")
    tree.insert([1, 2, 5, 6])
    twin = tree.clone()
    payloads, batches = tree.take_event_payloads(), twin.take_events()
    assert len(payloads) == 2 and payloads == [encode_batch(batch) for batch in batches]
    assert [decode_batch(payload) for payload in payloads] == batches
    assert tree.take_event_payloads() == [] and tree.take_events() == []
    with pytest.raises(InvalidArgumentError, match="emits no events"):
        events_tree(events=None).take_event_payloads()


def test_a_namespace_is_the_first_blocks_extra_key(events_tree: EventsTree) -> None:
    """R-EVENT-2, R-EVENT-3: the namespace salts a path's first block; the event lists
    it untagged, one entry per block."""
    tree = events_tree()
    tree.insert([1, 2, 3, 4], namespace="tenant")
    tree.insert([1, 2, 3, 4])
    (salted,), (plain,) = (batch.events for batch in tree.take_events())
    assert isinstance(salted, BlockStored) and isinstance(plain, BlockStored)
    assert salted.extra_keys == [("tenant",), None] and plain.extra_keys is None
    assert not set(salted.block_hashes) & set(plain.block_hashes)


def test_splits_matches_releases_and_readers_emit_nothing(events_tree: EventsTree) -> None:
    """R-EVENT-1: only a change in the set of cached blocks is an event."""
    tree = events_tree()
    tree.insert([1, 2, 3, 4, 5, 6])
    tree.take_events()
    hit = tree.match([1, 2, 3, 4], pin=True)
    assert hit.lease is not None
    tree.release(hit.lease)
    reader = tree.reader()
    tree.snapshot()
    reader.leave()
    tree.insert([1, 2, 3, 4, 9, 9])  # splits the edge: only the new block is stored
    (batch,) = tree.take_events()
    assert [type(e) for e in batch.events] == [BlockStored]
    assert isinstance(batch.events[0], BlockStored) and batch.events[0].token_ids == [9, 9]
    tree.check_invariants()


def test_an_eviction_emits_block_removed_in_eviction_order(events_tree: EventsTree) -> None:
    """R-EVENT-4: the evicted blocks' hashes in eviction order, at eviction time, even
    while a reader keeps them in quarantine."""
    tree = events_tree()
    tree.insert([1, 2, 3, 4])
    tree.insert([5, 6])
    tree.take_events()
    hashes: dict[int, ExternalHash] = {}
    for block in range(3):
        found = hash_of(tree, block)
        assert found is not None
        hashes[block] = found
    reader = tree.reader()
    freed = tree.evict(3)
    (batch,) = tree.take_events()
    assert batch.events == [BlockRemoved([hashes[b] for b in freed], "GPU")]
    assert tree.stats().quarantined == 3  # quarantined, yet removed for routing
    reader.leave()
    assert tree.evict(1) == () and tree.take_events() == []


def test_an_insert_that_evicts_emits_one_batch_removal_first(events_tree: EventsTree) -> None:
    """R-EVENT-5: one batch per operation, its events in order; a failed call emits none."""
    tree = events_tree(num_blocks=3)
    tree.insert([1, 2, 3, 4])
    tree.take_events()
    result = tree.insert([7, 7, 8, 8])
    (batch,) = tree.take_events()
    assert [type(e) for e in batch.events] == [BlockRemoved, BlockStored]
    assert batch.ts == tree.clock and len(result.evicted) == 1
    pinned = tree.match([7, 7, 8, 8], pin=True)
    with pytest.raises(OutOfBlocksError):
        tree.insert([9, 9, 8, 8, 7, 7])
    assert tree.take_events() == []
    assert pinned.lease is not None
    tree.release(pinned.lease)
    tree.check_invariants()


def test_an_eviction_whose_chooser_raises_emits_what_it_freed() -> None:
    """R-EVENT-5: blocks freed before the chooser raised were freed, so they are emitted."""

    class Refuses(RadixTree):
        def choose_victims(self, count: int, protected: object) -> object:  # type: ignore[override]
            yield from list(super().choose_victims(1, protected))  # type: ignore[arg-type]
            raise RuntimeError("refused")

    tree = Refuses(8, 2, events=True)  # the reference's extension point: no C twin of it
    tree.insert([1, 2, 3, 4])
    tree.take_events()
    with pytest.raises(RuntimeError, match="refused"):
        tree.evict(2)
    (batch,) = tree.take_events()
    assert isinstance(batch.events[0], BlockRemoved) and len(batch.events[0].block_hashes) == 1
    tree.check_invariants()


def test_a_clone_has_its_own_event_log(events_tree: EventsTree) -> None:
    """A clone copies the batches not yet taken and the records not yet named."""
    tree = events_tree()
    tree.insert([1, 2])
    tree.take_events()
    tree.insert([5, 6])  # logged, not yet taken (nor, in the C twin, named)
    twin = tree.clone()
    twin.insert([3, 4])
    tree.insert([7, 8], "n")
    mine, theirs = tree.take_events(), twin.take_events()
    assert len(mine) == 2 and len(theirs) == 2 and mine[0] == theirs[0]
    assert mine[1] != theirs[1]
    twin.check_invariants()
    tree.check_invariants()
    del tree  # the clone's log holds its own references (the namespace of a record)
    twin.insert([9, 9], "m")
    assert len(twin.take_events()) == 1


def test_the_invariant_catches_a_wrong_hash(events_tree: EventsTree) -> None:
    """R-EVENT-1, R-EVENT-2: check_invariants compares the known hashes with the tree:
    the reference's recorder against the dump; the C twin's table (a hash changed, one
    forgotten, through its test hooks) against its node records."""
    tree = events_tree()
    tree.insert([1, 2, 3, 4])
    if tree.implementation == "accel":
        assert "R-EVENT-2" in (corrupt_check(tree, "events_hash") or "")
        assert "R-EVENT-1" in (corrupt_check(tree, "events_known") or "")
        tree.check_invariants()  # both breaks were undone
        return
    log = tree._events
    assert isinstance(log, EventRecorder)
    log._hashes[0] = b"wrong"
    with pytest.raises(Exception, match="R-EVENT-2"):
        tree.check_invariants()
    del log._hashes[0]
    with pytest.raises(Exception, match="R-EVENT-1"):
        tree.check_invariants()


OPS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "match", "pin", "evict", "release"]),
        st.lists(st.integers(0, 3), min_size=0, max_size=9),
        st.sampled_from([None, "a"]),
    ),
    max_size=25,
)


# The fixture is a stateless factory: each example builds its own tree.
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, scheme=st.sampled_from(["sha256_cbor", "xxh3_64"]))
def test_the_stream_rebuilds_exactly_the_trees_blocks(
    events_tree: EventsTree, ops: list[tuple[str, list[int], str | None]], scheme: str
) -> None:
    """R-EVENT-1..5: after every step, an index fed every batch so far (in msgpack, as
    the wire carries it) holds exactly the tree's cached blocks, by hash."""
    hasher = BlockHasher(scheme)
    tree = events_tree(10, 2, hasher)
    index = RouterIndex(hasher, 2)
    leases = []
    seq = 0
    for op, tokens, namespace in ops:
        try:
            if op == "insert":
                tree.insert(tokens, namespace)
            elif op == "match":
                tree.match(tokens, namespace)
            elif op == "pin":
                lease = tree.match(tokens, namespace, pin=True).lease
                leases.append(lease)
            elif op == "evict":
                tree.evict(len(tokens))
            elif leases:
                lease = leases.pop()
                assert lease is not None
                tree.release(lease)
        except OutOfBlocksError:
            pass
        tree.check_invariants()
        for batch in tree.take_events():
            assert index.apply("w", seq, encode_batch(batch)).outcome == "applied"
            seq += 1
        expected = dump_hashes(tree.dump(), hasher)
        if "w" not in index.workers():
            assert not expected
            continue
        assert {h for h, _medium in index.holdings("w")} == set(expected)
        counts = index.counts("w")
        assert counts["duplicate_stores"] == counts["unknown_parents"] == 0
        assert counts["unknown_removals"] == 0
        index.check_invariants()


def test_batches_round_trip_and_bad_payloads_are_named() -> None:
    """R-EVENT-6: our msgpack decodes to the same batch; anything else is refused."""
    batch = KVEventBatch(
        3.0,
        [
            BlockStored([1, 2], None, [5, 6, 7, 8], 2, None, "GPU", None, [("t",), None]),
            BlockRemoved([b"\x00" * 32], "GPU"),
            AllBlocksCleared(),
        ],
        data_parallel_rank=1,
    )
    assert decode_batch(encode_batch(batch)) == batch
    assert msgspec.msgpack.decode(encode_batch(KVEventBatch(0.0, []))) == [0.0, [], None]
    for payload, message in [
        (b"\xc1", "not a KVEventBatch"),
        (msgspec.msgpack.encode({"ts": 1.0, "events": []}), "Expected `array`"),
        (msgspec.msgpack.encode([1.0]), "at least length 2"),
        (msgspec.msgpack.encode([1.0, [{"type": "Nope"}]]), "Nope"),
        (msgspec.msgpack.encode(["x", []]), "float"),
        (msgspec.msgpack.encode([1.0, [{"type": "BlockRemoved"}]]), "block_hashes"),
    ]:
        with pytest.raises(EventDecodeError, match=message):
            decode_batch(payload)


def test_vllms_own_structs_read_our_batches_and_we_read_theirs(events_tree: EventsTree) -> None:
    """R-EVENT-6, against vLLM 0.33's kv_events module: its decoder reads a tree's
    batch field for field, and ours reads what its encoder writes."""
    vllm = require_vllm()
    theirs = vllm.kv_events
    tree = events_tree(num_blocks=3)
    tree.insert([1, 2, 3, 4], namespace="t")
    tree.insert([7, 7, 8, 8])
    batches = tree.take_events()
    decoder = msgspec.msgpack.Decoder(theirs.KVEventBatch)
    for batch in batches:
        decoded = decoder.decode(encode_batch(batch))
        assert [type(e).__name__ for e in decoded.events] == [
            type(e).__name__ for e in batch.events
        ]
        for mine, their in zip(batch.events, decoded.events, strict=True):
            for name in mine.__struct_fields__:
                if name == "extra_keys" and getattr(mine, name) is not None:
                    assert [
                        None if k is None else tuple(k) for k in getattr(their, name)
                    ] == getattr(mine, name)
                else:
                    assert getattr(their, name) == getattr(mine, name), name
    stored = theirs.BlockStored(
        block_hashes=[11, 12], parent_block_hash=None, token_ids=[1, 2, 3, 4], block_size=2,
        lora_id=None, medium="GPU", lora_name=None,
    )  # fmt: skip
    sent = theirs.KVEventBatch(
        ts=1.5,
        events=[
            stored,
            theirs.BlockRemoved(block_hashes=[12], medium="GPU"),
            theirs.AllBlocksCleared(),
        ],
    )
    got = decode_batch(msgspec.msgpack.Encoder().encode(sent))
    assert got.ts == 1.5 and got.events[0] == BlockStored(
        [11, 12], None, [1, 2, 3, 4], 2, None, "GPU", None
    )
    assert got.events[1] == BlockRemoved([12], "GPU") and got.events[2] == AllBlocksCleared()


def test_the_invariant_catches_an_operation_left_open() -> None:
    """R-EVENT-5: events recorded but never closed into a batch are a bug (the C twin's
    log: tests/accel/test_invariants.py, ``events_open``)."""
    tree = RadixTree(8, 2, events=True)
    assert tree._events is not None
    tree._events._pending.append(AllBlocksCleared())
    with pytest.raises(Exception, match="R-EVENT-5"):
        tree.check_invariants()
