"""The policy-free safety check (R-MATCH-3, R-PIN-3, R-ALLOC-1, R-NS-2, R-INV-1, R-ERR-2):
each property, from the candidate's own answers, and through the kit."""

from __future__ import annotations

from typing import Any

import pytest

from kachedb_radix import reference
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.lockstep import Disagreement, Lockstep
from kachedb_radix.spec.conform.profile import parse
from kachedb_radix.spec.conform.safety import SafetyMonitor, SafetyViolation, policy_free
from kachedb_radix.spec.mutants.eviction import FailedInsertHalfApplied
from kachedb_radix.spec.mutants.snapshots import InsertEvictsUnderReader
from kachedb_radix.spec.mutants.state import LeakBeforeRoomCheck

LEVELS = frozenset({"core", "pinning", "eviction", "namespaces", "snapshots"})


def _insert(
    tokens: list[int],
    blocks: list[int],
    *,
    reused: int = 0,
    evicted: list[int] | None = None,
    lease: int | None = None,
    namespace: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    step = {"op": "insert", "tokens": tokens, "namespace": namespace, "pin": lease is not None}
    answer = {
        "length": len(blocks),
        "blocks": blocks,
        "reused": reused,
        "allocated": blocks[reused:],
        "evicted": evicted or [],
        "lease": lease,
    }
    return step, {"ok": answer}


def _match(
    tokens: list[int], blocks: list[int], namespace: str | None = None, lease: int | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    step = {"op": "match", "tokens": tokens, "namespace": namespace, "pin": lease is not None}
    return step, {"ok": {"length": len(blocks), "blocks": blocks, "lease": lease}}


def _monitor() -> SafetyMonitor:
    monitor = SafetyMonitor()
    monitor.check({"op": "reset", "num_blocks": 8, "block_size": 1}, {"ok": None})
    monitor.check(*_insert([1, 2, 3], [0, 1, 2], lease=1))
    return monitor


def _violation(monitor: SafetyMonitor, step: dict[str, Any], outcome: dict[str, Any]) -> str:
    with pytest.raises(SafetyViolation) as raised:
        monitor.check(step, outcome)
    return raised.value.prop


def test_matches_return_only_blocks_holding_the_prefix() -> None:
    """R-MATCH-3, R-NS-2, R-ALLOC-1: content, namespace, freed blocks."""
    monitor = _monitor()
    monitor.check(*_match([1, 2, 9], [0, 1]))  # a correct partial match
    assert _violation(monitor, *_match([1, 9], [0, 2])) == "content"
    assert _violation(monitor, *_match([1, 2], [0, 1], namespace="a")) == "namespace"
    assert _violation(monitor, *_match([7], [5])) == "freed"
    monitor.check(*_insert([4], [3]))
    monitor.check({"op": "evict", "count": 1}, {"ok": {"freed": [3]}})
    assert _violation(monitor, *_match([4], [3])) == "freed"
    # Reused blocks are held to the same standard.
    assert _violation(monitor, *_insert([9, 9], [0, 4], reused=1)) == "content"


def test_pinned_blocks_are_never_evicted_nor_handed_out() -> None:
    """R-PIN-3, R-ALLOC-1: a live lease protects its blocks; a cached block is not free."""
    monitor = _monitor()
    assert _violation(monitor, {"op": "evict", "count": 1}, {"ok": {"freed": [2]}}) == (
        "pinned_evicted"
    )
    assert _violation(monitor, *_insert([5], [2])) == "pinned_reused"
    assert _violation(monitor, *_insert([5, 6], [5, 6], evicted=[0])) == "pinned_evicted"
    monitor.check(*_insert([4], [3]))
    assert _violation(monitor, *_insert([6], [3])) == "handed_twice"
    # Released, the blocks may go.
    monitor.check({"op": "release", "lease": 1}, {"ok": None})
    monitor.check({"op": "release", "lease": 1}, {"error": "lease_released"})
    monitor.check({"op": "evict", "count": 2}, {"ok": {"freed": [2, 1]}})
    monitor.check(*_insert([5], [2]))


def test_counters_add_up() -> None:
    """R-INV-1: free + cached + quarantined is the pool; pinned + evictable is cached."""
    monitor = _monitor()
    stats = {"num_blocks": 8, "free": 5, "cached": 3, "pinned": 3, "evictable": 0}
    monitor.check({"op": "stats"}, {"ok": stats})
    monitor.check({"op": "stats"}, {"ok": {**stats, "free": 4, "quarantined": 1}})
    assert _violation(monitor, {"op": "stats"}, {"ok": {**stats, "free": 4}}) == "accounting"
    assert _violation(monitor, {"op": "stats"}, {"ok": {**stats, "pinned": 2}}) == "accounting"


def test_malformed_answers_are_left_to_the_comparison() -> None:
    monitor = _monitor()
    monitor.check({"op": "match", "tokens": [1], "namespace": None}, {"ok": {"blocks": None}})
    monitor.check({"op": "stats"}, {"ok": {"free": 1}})
    monitor.check({"op": "dump"}, {"ok": None})
    monitor.check({"op": "match"}, {"error": "token_type"})


def test_policy_free_state_ignores_recency_only() -> None:
    dump = {"clock": 3, "namespaces": [{"children": [{"stamps": [1], "pins": [0]}]}]}
    assert policy_free(dump) == {"namespaces": [{"children": [{"pins": [0]}]}]}
    monitor = SafetyMonitor()
    monitor.check_unchanged({"dump": dump}, {"dump": {**dump, "clock": 9}}, "match")
    with pytest.raises(SafetyViolation, match="failed match changed its dump"):
        monitor.check_unchanged({"dump": dump}, {"dump": {**dump, "free": [1]}}, "match")


@pytest.mark.parametrize(
    ("tree", "last"),
    [
        (FailedInsertHalfApplied, [4, 5, 6]),
        (LeakBeforeRoomCheck, [4, 5, 6]),
        (InsertEvictsUnderReader, [4, 5]),
    ],
)
def test_a_failed_insert_that_changed_the_state_is_caught(tree: Any, last: list[int]) -> None:
    """R-ERR-2, R-INS-6, R-EPOCH-3: even with recency not compared, a refused insert
    must leave the cached state as it was."""
    profile = parse({"tolerate": {"recency": "not_compared"}})
    lockstep = Lockstep(TreeAdapter(tree, "t"), LEVELS, profile=profile)
    lockstep.run({"op": "reset", "num_blocks": 4, "block_size": 1})
    lockstep.run({"op": "insert", "tokens": [1, 2], "namespace": None, "pin": True})
    lockstep.run({"op": "insert", "tokens": [3], "namespace": None, "pin": False})
    if tree is InsertEvictsUnderReader:
        lockstep.run({"op": "reader"})
    with pytest.raises(Disagreement) as raised:
        lockstep.run({"op": "insert", "tokens": last, "namespace": None, "pin": False})
    found = raised.value.difference
    assert found.kind == "safety" and found.rule == "R-INS-6" and "R-ERR-2" in found.rules
    if tree is InsertEvictsUnderReader:
        assert "R-EPOCH-3" in found.rules


def test_the_reference_keeps_every_property() -> None:
    lockstep = Lockstep(TreeAdapter(reference.RadixTree, "r"), LEVELS)
    lockstep.run({"op": "reset", "num_blocks": 3, "block_size": 1})
    for tokens in ([1, 2], [1, 3], [4], [9, 9, 9, 9]):
        lockstep.run({"op": "insert", "tokens": tokens, "namespace": None, "pin": False})
    lockstep.run({"op": "match", "tokens": [4], "namespace": None, "pin": False})


def test_dump_problem_names_what_makes_a_dump_not_a_tree() -> None:
    """R-INV-1, R-DUMP-1: a well-formed dump passes; each way of breaking one is named."""
    import copy

    from kachedb_radix import reference
    from kachedb_radix.spec.conform.safety import dump_problem

    tree = reference.RadixTree(6, 2)
    tree.insert([1, 2, 3, 4])
    tree.insert([1, 2, 5, 6], "t")
    good = tree.dump()
    assert dump_problem(good, 2) is None
    edge = good["namespaces"][0]["children"][0]

    def broken(change: Any) -> Any:
        dump = copy.deepcopy(good)
        change(dump)
        return dump

    cases = {
        "not an object": [],
        "'namespaces' are missing": broken(lambda d: d.pop("namespaces")),
        "block_size is 2, the tree's 4": good,
        "listed twice": broken(lambda d: d["namespaces"].append(d["namespaces"][0])),
        "neither free, cached nor quarantined": broken(lambda d: d["namespaces"].pop()),
        "cached in namespace None at once": broken(lambda d: d["free"].append(edge["blocks"][0])),
        "not a block id of a pool of 6": broken(lambda d: d["free"].append(6)),
        "holds 3 tokens": broken(lambda d: d["namespaces"][0]["children"][0]["tokens"].pop()),
        "'children' is missing": broken(
            lambda d: d["namespaces"][0]["children"][0].pop("children")
        ),
        "'pins' do not match": broken(lambda d: d["namespaces"][0]["children"][0]["pins"].pop()),
    }
    for words, dump in cases.items():
        size = 4 if "block_size" in words else 2
        found = dump_problem(dump, size)
        assert found is not None and words in found, (words, found)
