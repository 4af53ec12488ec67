"""The router index (R-ROUTE-1..4): sequence numbers, lost batches, bad events, and
queries checked against a brute-force index on generated multi-worker streams."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kachedb_radix.reference import InvalidArgumentError, RadixTree
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
from kachedb_radix.reference.router.index import brute_force_depths
from tests.conftest import TreeFactory

pytestmark = pytest.mark.quick

#: Each example of a property test builds its own index from the (stateless) factory.
FACTORY_OK = [HealthCheck.function_scoped_fixture]


@pytest.fixture
def new_index(make_index: TreeFactory) -> Callable[[], Any]:
    """An empty index of the twin under test, over the default hasher and B = 2."""
    return lambda: make_index(BlockHasher(), 2)


def _stored(*hashes: int, parent: int | None = None) -> KVEventBatch:
    return KVEventBatch(
        0.0, [BlockStored(list(hashes), parent, [0] * 2 * len(hashes), 2, None, "GPU", None)]
    )


def _removed(*hashes: int) -> KVEventBatch:
    return KVEventBatch(0.0, [BlockRemoved(list(hashes), "GPU")])


def test_batches_apply_in_sequence_repeats_are_ignored_gaps_reported(
    new_index: Callable[[], Any],
) -> None:
    """R-ROUTE-1: the expected number is applied, a lower one ignored, a higher one a gap."""
    index = new_index()
    assert index.apply("a", 0, _stored(1, 2)).outcome == "applied"
    assert index.apply("a", 0 + 1, _stored(3, parent=2)).outcome == "applied"
    assert index.apply("a", 1, _removed(3)).outcome == "repeat"
    gap = index.apply("a", 5, _removed(1))
    assert gap.outcome == "gap" and gap.missing == (2, 4)
    assert index.holdings("a") == {(1, "GPU"), (2, "GPU"), (3, "GPU")}
    assert index.counts("a")["repeats"] == 1 and index.counts("a")["gaps"] == 1
    for seq in (2, 3, 4):  # the replay fills the gap, then the held batch applies
        assert index.apply("a", seq, KVEventBatch(0.0, [])).outcome == "applied"
    assert index.apply("a", 5, _removed(1)).outcome == "applied" and index.expected("a") == 6
    index.check_invariants()


def test_a_restarted_publisher_starts_again_from_empty(new_index: Callable[[], Any]) -> None:
    """R-ROUTE-1: number 0 again is a restart: the worker's old entries are cleared."""
    index = new_index()
    index.apply("a", 0, _stored(1, 2))
    index.apply("a", 1, _stored(3, parent=2))
    assert index.apply("a", 0, _stored(9)).outcome == "restart"
    assert index.holdings("a") == {(9, "GPU")} and index.expected("a") == 1
    assert index.counts("a")["restarts"] == 1


def test_a_first_batch_after_zero_is_a_gap(new_index: Callable[[], Any]) -> None:
    """R-ROUTE-1: a subscriber that joins late misses the stores before it."""
    index = new_index()
    assert index.apply("late", 7, _stored(1)).missing == (0, 6)
    assert index.holdings("late") == set()


def test_lost_batches_make_a_worker_stale_never_wrong(new_index: Callable[[], Any]) -> None:
    """R-ROUTE-2: cleared, stale, a subset from then on; a clear makes it exact again."""
    index = new_index()
    index.apply("a", 0, _stored(1, 2))
    index.apply("b", 0, _stored(1))
    assert index.apply("a", 3, _stored(5)).outcome == "gap"
    index.lost("a", resume_at=3)
    assert index.is_stale("a") and index.holdings("a") == set() and index.expected("a") == 3
    assert index.apply("a", 3, _stored(5)).outcome == "applied"
    assert index.holdings("a") == {(5, "GPU")} and index.is_stale("a")
    assert index.holdings("b") == {(1, "GPU")} and not index.is_stale("b")
    index.apply("a", 4, KVEventBatch(0.0, [AllBlocksCleared(), *_stored(7).events]))
    assert not index.is_stale("a") and index.holdings("a") == {(7, "GPU")}
    index.check_invariants()


def test_a_worker_first_heard_of_through_a_loss_starts_stale(new_index: Callable[[], Any]) -> None:
    """R-ROUTE-2: batches gone before the router ever saw the worker."""
    index = new_index()
    index.lost("new", 4)
    assert index.is_stale("new") and index.expected("new") == 4 and index.holdings("new") == set()
    assert index.apply("new", 4, _stored(1)).outcome == "applied"


def test_a_malformed_batch_makes_its_worker_stale(new_index: Callable[[], Any]) -> None:
    """R-ROUTE-2: a payload that cannot be decoded takes its number and the worker's
    certainty; no other worker is touched."""
    index = new_index()
    index.apply("a", 0, encode_batch(_stored(1)))
    index.apply("b", 0, encode_batch(_stored(1)))
    assert index.apply("a", 1, b"\x93garbage").outcome == "malformed"
    assert index.is_stale("a") and index.holdings("a") == set() and index.expected("a") == 2
    assert index.counts("a")["malformed"] == 1 and index.holdings("b") == {(1, "GPU")}


def test_bad_events_are_counted_and_change_nothing_else(new_index: Callable[[], Any]) -> None:
    """R-ROUTE-3: a duplicate store wipes nothing (it adds a copy, R-ROUTE-5), an unknown
    parent is kept, an unknown removal is ignored, and another worker is never touched."""
    index = new_index()
    index.apply("a", 0, _stored(1, 2))
    index.apply("b", 0, _stored(1, 2))
    index.apply("a", 1, _stored(1, 2, parent=0))  # duplicate (a parent: not a report)
    index.apply("a", 2, _stored(8, parent=77))  # unknown parent
    index.apply("a", 3, _removed(99, 2))  # one unknown, one real: a copy of 2 remains
    counts = index.counts("a")
    assert counts["duplicate_stores"] == 2 and counts["unknown_parents"] == 2
    assert counts["unknown_removals"] == 1 and counts["removed"] == 1
    assert index.holdings("a") == {(1, "GPU"), (2, "GPU"), (8, "GPU")}
    assert [index.copies("a", h, "GPU") for h in (1, 2, 8, 99)] == [2, 1, 1, 0]
    index.apply("a", 4, _removed(2))
    assert index.holdings("a") == {(1, "GPU"), (8, "GPU")}
    assert index.holdings("b") == {(1, "GPU"), (2, "GPU")}
    index.check_invariants()


def test_a_report_of_held_blocks_adds_no_copy(new_index: Callable[[], Any]) -> None:
    """R-ROUTE-5: a store with no parent of blocks the worker all holds on its medium is a
    report (vLLM's ``full`` report of reused blocks), not copies: counted, nothing
    changed; with one block not held, or a parent, or another medium, it is a store."""
    index = new_index()
    index.apply("a", 0, _stored(1, 2))
    index.apply("a", 1, _stored(1, 2))  # the report
    assert index.counts("a")["reports"] == 1 and index.counts("a")["duplicate_stores"] == 0
    assert index.holdings("a") == {(1, "GPU"), (2, "GPU")}
    assert [index.copies("a", h, "GPU") for h in (1, 2)] == [1, 1]
    index.apply("a", 2, _removed(2, 1))  # the worker evicts each block once
    assert index.holdings("a") == set() and index.query_hashes([1, 2]) == {}
    index.apply("a", 3, _stored(1, 2))
    index.apply("a", 4, _stored(1, 3))  # 3 not held: a store (1 gets a copy)
    assert index.copies("a", 1, "GPU") == 2 and index.counts("a")["reports"] == 1
    index.apply("a", 5, KVEventBatch(0.0, [BlockStored([1], None, [0, 0], 2, None, "CPU", None)]))
    assert index.copies("a", 1, "CPU") == 1 and index.counts("a")["reports"] == 1
    index.check_invariants()


def test_bad_arguments_change_nothing(
    new_index: Callable[[], Any], make_index: TreeFactory
) -> None:
    """R-ERR-2's spirit for the index: a bad call raises and changes nothing."""
    index = new_index()
    index.apply("a", 0, _stored(1))
    before = index.dump()
    for bad in (-1, True, "1"):
        with pytest.raises(InvalidArgumentError, match="a sequence number"):
            index.apply("a", bad, _stored(2))
        with pytest.raises(InvalidArgumentError, match="a sequence number"):
            index.lost("a", bad)
    calls: list[Callable[[], object]] = [
        lambda: index.remove_worker("x"),
        lambda: index.is_stale("x"),
        lambda: index.holdings("x"),
        lambda: index.counts("x"),
        lambda: index.expected("x"),
    ]
    for call in calls:
        with pytest.raises(InvalidArgumentError, match="no worker 'x'"):
            call()
    with pytest.raises(InvalidArgumentError, match="block_size"):
        make_index(block_size=0)
    with pytest.raises(InvalidArgumentError, match="a batch is a KVEventBatch"):
        index.apply("a", 1, [1, 2])
    with pytest.raises(InvalidArgumentError, match="a block hash is an int or bytes"):
        index.query_hashes([1, 2.5])
    assert index.dump() == before


def test_queries_give_depths_per_worker_and_keep_namespaces_apart(
    make_index: TreeFactory,
) -> None:
    """R-ROUTE-4: depth = leading blocks held; tokens hashed as the workers hash them."""
    hasher = BlockHasher()
    index = make_index(hasher, 2)
    workers = {name: RadixTree(16, 2, events=hasher) for name in ("w0", "w1", "w2")}
    workers["w0"].insert([1, 2, 3, 4, 5, 6])
    workers["w1"].insert([1, 2, 3, 4])
    workers["w2"].insert([1, 2, 3, 4], namespace="tenant")
    for name, tree in workers.items():
        for seq, batch in enumerate(tree.take_events()):
            index.apply(name, seq, batch)
    assert index.query_tokens([1, 2, 3, 4, 5, 6, 7]) == {"w0": 3, "w1": 2}
    assert index.query_tokens([1, 2, 3, 4], namespace="tenant") == {"w2": 2}
    assert index.query_tokens([1, 2, 9, 9]) == {"w0": 1, "w1": 1}
    assert index.query_tokens([9]) == {} and index.query_hashes([]) == {}
    assert len(index) == 3 + 2 and index.holder_blocks == 3 + 2 + 2
    index.remove_worker("w0")
    assert index.query_tokens([1, 2, 3, 4, 5, 6]) == {"w1": 2} and index.workers() == ["w1", "w2"]
    index.check_invariants()


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["store", "remove", "clear"]),
        st.lists(st.integers(0, 6), min_size=1, max_size=4),
        st.sampled_from(["GPU", "CPU"]),
        st.none() | st.integers(0, 6),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=FACTORY_OK)
@given(events=EVENTS, query=st.lists(st.integers(0, 6), max_size=6))
def test_the_index_agrees_with_a_brute_force_one(
    events: list[tuple[str, str, list[int], str, int | None]],
    query: list[int],
    new_index: Callable[[], Any],
) -> None:
    """R-ROUTE-3, R-ROUTE-4, R-ROUTE-5: any stream, bad events and repeated blocks
    included, leaves each worker with the copies a plain model counts -- a store adds
    one (but a report, a store with no parent of blocks all held, adds none), a removal
    takes one away, a clear drops them all -- and queries give the model's depths over
    the entries with a copy left."""
    index = new_index()
    model: dict[Hashable, Counter[tuple[ExternalHash, str | None]]] = {}
    seqs: dict[str, int] = {}
    reports: Counter[Hashable] = Counter()
    for worker, kind, hashes, medium, parent in events:
        held = model.setdefault(worker, Counter())
        if kind == "store":
            wire: list[ExternalHash] = list(hashes)
            event: object = BlockStored(wire, parent, [0] * 2 * len(hashes), 2, None, medium, None)
            if parent is None and all(held[h, medium] > 0 for h in hashes):
                reports[worker] += 1
            else:
                held.update((h, medium) for h in hashes)
        elif kind == "remove":
            event = BlockRemoved(list[ExternalHash](hashes), medium)
            held.subtract((h, medium) for h in hashes if held[h, medium] > 0)
        else:
            event = AllBlocksCleared()
            held.clear()
        seq = seqs.get(worker, 0)
        seqs[worker] = seq + 1
        assert index.apply(worker, seq, KVEventBatch(0.0, [event])).outcome == "applied"  # type: ignore[list-item]
        index.check_invariants()
    for name, held in model.items():
        live = {entry for entry, copies in held.items() if copies > 0}
        assert index.holdings(name) == live and index.held(name) == len(live)
        assert {e: index.copies(name, *e) for e in held} == {e: max(n, 0) for e, n in held.items()}
        assert index.counts(name)["reports"] == reports[name]
    holdings = {name: [e for e, n in held.items() if n > 0] for name, held in model.items()}
    assert index.query_hashes(query) == brute_force_depths(holdings, query)


def test_check_invariants_catches_a_broken_table() -> None:
    """The reference's check (the C twin's: test_the_c_index_check_fires)."""
    index = RouterIndex(BlockHasher(), 2)
    index.apply("a", 0, _stored(1, 2))
    index._workers["a"].expected = -1
    with pytest.raises(Exception, match="expects -1"):
        index.check_invariants()
    index._workers["a"].expected = 1
    index._holders[1]["ghost"] = 1
    with pytest.raises(Exception, match="holders table disagrees"):
        index.check_invariants()


def test_an_index_tells_apart_32_media(make_index: TreeFactory) -> None:
    """R-ROUTE-3: a batch naming a 33rd medium is malformed; the 32 before it apply."""
    index = make_index(BlockHasher(), 2)
    media: list[str | None] = [None, *(f"tier{n}" for n in range(31))]
    for seq, medium in enumerate(media):
        batch = KVEventBatch(0.0, [BlockStored([seq], None, [0, 0], 2, None, medium, None)])
        assert index.apply("w", seq, batch).outcome == "applied"
    extra = KVEventBatch(0.0, [BlockRemoved([0], "one too many")])
    assert index.apply("w", 32, extra).outcome == "malformed"
    assert index.is_stale("w") and index.held("w") == 0
    again = KVEventBatch(0.0, [BlockStored([7], None, [0, 0], 2, None, "tier5", None)])
    assert index.apply("w", 33, again).outcome == "applied" and len(index) == 1
    with pytest.raises(TypeError):
        index.query_hashes(7)
    index.check_invariants()
