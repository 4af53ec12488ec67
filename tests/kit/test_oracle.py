"""The oracle follows a candidate's admissible choices and refuses inadmissible ones
(R-EVICT-1, R-EVICT-2, R-EVICT-4, R-INS-5, R-PIN-3, R-ALLOC-1)."""

from __future__ import annotations

from typing import Any

import pytest

from kachedb_radix.reference.errors import InvalidArgumentError, OutOfBlocksError
from kachedb_radix.spec.conform.lockstep import adopting_outcome
from kachedb_radix.spec.conform.operations import BY_NAME
from kachedb_radix.spec.conform.oracle import FollowingTree, Inadmissible, OracleAdapter
from kachedb_radix.spec.conform.profile import STRICT, Profile, parse
from kachedb_radix.spec.conform.steps import LeaseBook

COVERING = parse(
    {
        "tolerate": {
            "eviction_granularity": "whole_leaf_node",
            "evicted_set": "covering",
            "recency": "not_compared",
        }
    }
)
PER_BLOCK_ANY = parse({"tolerate": {"recency": "not_compared"}})


def _tree() -> FollowingTree:
    """0 -> 1 -> {2, 3} (tokens 1 2 3 / 1 2 4), then 5 6 as blocks 4, 5; pool of 8."""
    tree = FollowingTree(8, 1)
    tree.insert([1, 2, 3])
    tree.insert([1, 2, 4])
    tree.insert([5, 6])
    return tree


def _evicting(tree: FollowingTree, count: Any, freed: list[int], profile: Profile) -> Any:
    """``evict(count)`` following a candidate that answered ``freed``: the one way the
    oracle adopts (``adopting``, then the call); a refusal found after the call too."""
    tree.adopting(BY_NAME["evict"], {"freed": freed}, profile)
    result = tree.evict(count)
    if tree.refused is not None:
        raise tree.refused
    return result


def _inserting(
    tree: FollowingTree,
    tokens: list[int],
    evicted: list[int] | None,
    allocated: list[int] | None,
    profile: Profile,
) -> Any:
    """``insert(tokens)`` following a candidate that evicted and allocated these."""
    tree.adopting(BY_NAME["insert"], {"evicted": evicted, "allocated": allocated}, profile)
    result = tree.insert(tokens)
    if tree.refused is not None:
        raise tree.refused
    return result


def _refused(call: Any, *args: Any) -> tuple[str, ...]:
    with pytest.raises(Inadmissible) as raised:
        call(*args)
    assert raised.value.cause
    return raised.value.rules


def test_evictions_are_adopted_when_admissible() -> None:
    """R-EVICT-1, R-EVICT-4: whole leaf nodes, descendants first, the last one overshooting."""
    tree = _tree()
    _evicting(tree, 1, [5, 4], COVERING)  # the whole edge 5 6
    assert tree.stats().cached == 4 and sorted(tree.dump()["free"]) == [4, 5, 6, 7]
    _evicting(tree, 3, [3, 2, 0, 1], COVERING)  # the last node overshoots by one
    assert tree.stats().cached == 0
    tree.check_invariants()


@pytest.mark.parametrize(
    ("count", "freed", "profile", "rule"),
    [
        (2, [5], STRICT, "R-EVICT-4"),  # exact: one too few
        (1, [], COVERING, "R-EVICT-4"),  # fewer than asked
        (0, [5], COVERING, "R-EVICT-4"),  # none was needed
        (1, [5, 4, 3], COVERING, "R-EVICT-4"),  # a node more than needed
        (2, [5, 5], COVERING, "R-ALLOC-1"),
        (1, [7], COVERING, "R-ALLOC-1"),  # not cached
        (2, [1, 0], COVERING, "R-EVICT-1"),  # ancestors first
        (1, [4], PER_BLOCK_ANY, "R-EVICT-1"),  # per block: the head of an edge
    ],
)
def test_inadmissible_evictions_are_refused(
    count: int, freed: list[int], profile: Any, rule: str
) -> None:
    assert _refused(_evicting, _tree(), count, freed, profile)[0] == rule


def test_exact_recency_requires_the_least_recent_leaf() -> None:
    """R-EVICT-2: tolerating whole nodes but keeping recency exact, the LRU leaf goes."""
    whole_exact = parse(
        {"tolerate": {"eviction_granularity": "whole_leaf_node", "evicted_set": "covering"}}
    )
    tree = _tree()
    assert _refused(_evicting, tree, 1, [5, 4], whole_exact)[0] == "R-EVICT-2"
    _evicting(tree, 1, [2], whole_exact)  # block 2, stamped first, is the LRU tail
    with pytest.raises(InvalidArgumentError):
        _evicting(tree, -1, [], whole_exact)


def test_pinned_and_path_blocks_are_never_adopted() -> None:
    """R-PIN-3, R-INS-5."""
    tree = _tree()
    lease = tree.match([5, 6], pin=True).lease
    assert lease is not None
    assert _refused(_evicting, tree, 1, [5], COVERING)[0] == "R-PIN-3"
    full = FollowingTree(4, 1)
    full.insert([1, 2, 3, 4])
    refused = _refused(_inserting, full, [1, 2, 3, 9], [3, 2], None, COVERING)
    assert refused[0] == "R-INS-5"


def test_inserts_adopt_evictions_and_allocations() -> None:
    """R-INS-5, R-ALLOC-1: the candidate's evicted and allocated ids are followed."""
    tree = FollowingTree(4, 1)
    tree.insert([1, 2])
    tree.insert([3, 4])
    result = _inserting(tree, [9, 9], [1, 0], [1, 0], COVERING)
    assert result.blocks == (1, 0) and result.allocated == (1, 0)
    tree.check_invariants()
    # Evicting although the free blocks sufficed is not a choice.
    roomy = FollowingTree(8, 1)
    roomy.insert([1])
    assert _refused(_inserting, roomy, [2], [0], None, COVERING)[0] == "R-INS-5"
    # A refused insert is refused before anything is adopted.
    with pytest.raises(OutOfBlocksError):
        _inserting(FollowingTree(1, 1), [1, 2], [], None, COVERING)


def test_the_oracle_hands_out_the_candidates_ids_once() -> None:
    """R-ALLOC-1: through the reference's extension point, the ids a candidate allocated
    (checked free and distinct); the next insert allocates smallest first again."""
    tree = FollowingTree(4, 1)
    assert _inserting(tree, [5, 6], None, [2, 0], COVERING).allocated == (2, 0)
    assert tree.insert([7]).allocated == (1,)  # not followed: the smallest free
    assert _inserting(tree, [8], None, [3, 1], COVERING).allocated == (3,)
    tree.check_invariants()  # two ids for one new block: not a choice to follow
    for ids in ([0], [9]):
        with pytest.raises(Inadmissible) as raised:
            _inserting(FollowingTree(4, 1), [1, 2], None, ids * 2, COVERING)
        assert raised.value.rules == ("R-ALLOC-1",)
    taken = FollowingTree(4, 1)
    taken.insert([1])
    with pytest.raises(Inadmissible):
        _inserting(taken, [2], None, [0], COVERING)  # 0 holds [1]
    assert taken.dump()["free"] == [1, 2, 3]  # nothing taken by the refused choice


def test_the_oracle_adapter_answers_as_plain_data() -> None:
    """Through the lockstep's one adoption path: the candidate's eviction adopted and
    shown in its order, the lease filed, a refusal its kind."""
    oracle, book = OracleAdapter(), LeaseBook()
    oracle.reset(4, 1)
    oracle.insert([1, 2], None, False)
    step = {"op": "insert", "tokens": [3, 4, 5], "namespace": None, "pin": True}
    answer = {"evicted": [1], "allocated": [1, 2, 3]}
    adopted = adopting_outcome(oracle, book, step, {"ok": answer}, COVERING)
    assert adopted is not None and adopted["ok"]["evicted"] == [1]
    assert adopted["ok"]["lease"] == 1
    evict = {"op": "evict", "count": 1}
    assert adopting_outcome(oracle, book, evict, {"ok": {"freed": [0]}}, COVERING) == {
        "ok": {"freed": [0]}
    }
    bad = {"op": "insert", "tokens": ["x"], "namespace": None, "pin": False}
    assert adopting_outcome(oracle, book, bad, {"ok": {"evicted": []}}, COVERING) == {
        "error": "token_type"
    }
    assert oracle.dump()["format"] == 2 and oracle.following.facts()["block_size"] == 1
