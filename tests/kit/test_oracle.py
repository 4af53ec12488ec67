"""The oracle follows a candidate's admissible choices and refuses inadmissible ones
(R-EVICT-1, R-EVICT-2, R-EVICT-4, R-INS-5, R-PIN-3, R-ALLOC-1)."""

from __future__ import annotations

from typing import Any

import pytest

from kachedb_radix.reference.errors import InvalidArgumentError, OutOfBlocksError
from kachedb_radix.spec.conform.candidate import CandidateError
from kachedb_radix.spec.conform.oracle import FollowingTree, Inadmissible, OracleAdapter
from kachedb_radix.spec.conform.profile import STRICT, parse

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


def _refused(call: Any, *args: Any) -> tuple[str, ...]:
    with pytest.raises(Inadmissible) as raised:
        call(*args)
    assert raised.value.cause
    return raised.value.rules


def test_evictions_are_adopted_when_admissible() -> None:
    """R-EVICT-1, R-EVICT-4: whole leaf nodes, descendants first, the last one overshooting."""
    tree = _tree()
    tree.evict_following(1, [5, 4], COVERING)  # the whole edge 5 6
    assert tree.stats().cached == 4 and sorted(tree.dump()["free"]) == [4, 5, 6, 7]
    tree.evict_following(3, [3, 2, 0, 1], COVERING)  # the last node overshoots by one
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
    assert _refused(_tree().evict_following, count, freed, profile)[0] == rule


def test_exact_recency_requires_the_least_recent_leaf() -> None:
    """R-EVICT-2: tolerating whole nodes but keeping recency exact, the LRU leaf goes."""
    whole_exact = parse(
        {"tolerate": {"eviction_granularity": "whole_leaf_node", "evicted_set": "covering"}}
    )
    tree = _tree()
    assert _refused(tree.evict_following, 1, [5, 4], whole_exact)[0] == "R-EVICT-2"
    tree.evict_following(1, [2], whole_exact)  # block 2, stamped first, is the LRU tail
    with pytest.raises(InvalidArgumentError):
        tree.evict_following(-1, [], whole_exact)


def test_pinned_and_path_blocks_are_never_adopted() -> None:
    """R-PIN-3, R-INS-5."""
    tree = _tree()
    lease = tree.match([5, 6], pin=True).lease
    assert lease is not None
    assert _refused(tree.evict_following, 1, [5], COVERING)[0] == "R-PIN-3"
    full = FollowingTree(4, 1)
    full.insert([1, 2, 3, 4])
    refused = _refused(full.insert_following, [1, 2, 3, 9], None, False, [3, 2], None, COVERING)
    assert refused[0] == "R-INS-5"


def test_inserts_adopt_evictions_and_allocations() -> None:
    """R-INS-5, R-ALLOC-1: the candidate's evicted and allocated ids are followed."""
    tree = FollowingTree(4, 1)
    tree.insert([1, 2])
    tree.insert([3, 4])
    result = tree.insert_following([9, 9], None, False, [1, 0], [1, 0], COVERING)
    assert result.blocks == (1, 0) and result.allocated == (1, 0)
    tree.check_invariants()
    # Evicting although the free blocks sufficed is not a choice.
    roomy = FollowingTree(8, 1)
    roomy.insert([1])
    assert _refused(roomy.insert_following, [2], None, False, [0], None, COVERING)[0] == "R-INS-5"
    # A refused insert is refused before anything is adopted.
    with pytest.raises(OutOfBlocksError):
        FollowingTree(1, 1).insert_following([1, 2], None, False, [], None, COVERING)


def test_the_oracle_hands_out_the_candidates_ids_once() -> None:
    """R-ALLOC-1: through the reference's extension point, the ids a candidate allocated
    (checked free and distinct); the next insert allocates smallest first again."""
    tree = FollowingTree(4, 1)
    assert tree.insert_following([5, 6], None, False, None, [2, 0], COVERING).allocated == (2, 0)
    assert tree.insert([7]).allocated == (1,)  # not followed: the smallest free
    assert tree.insert_following([8], None, False, None, [3, 1], COVERING).allocated == (3,)
    tree.check_invariants()  # two ids for one new block: not a choice to follow
    for ids in ([0], [9]):
        with pytest.raises(Inadmissible) as raised:
            FollowingTree(4, 1).insert_following([1, 2], None, False, None, ids * 2, COVERING)
        assert raised.value.rules == ("R-ALLOC-1",)
    taken = FollowingTree(4, 1)
    taken.insert([1])
    with pytest.raises(Inadmissible):
        taken.insert_following([2], None, False, None, [0], COVERING)  # 0 holds [1]
    assert taken.dump()["free"] == [1, 2, 3]  # nothing taken by the refused choice


def test_the_oracle_adapter_answers_as_plain_data() -> None:
    oracle = OracleAdapter()
    oracle.reset(4, 1)
    oracle.insert([1, 2], None, False)
    answer = oracle.insert_following([3, 4, 5], None, True, [1], None, COVERING)
    assert answer["evicted"] == [1] and answer["lease"] == 1
    assert oracle.evict_following(1, [0], COVERING) == {"freed": [0]}
    with pytest.raises(CandidateError) as raised:
        oracle.insert_following(["x"], None, False, [], None, COVERING)
    assert raised.value.kind == "token_type"
    assert oracle.dump()["format"] == 2 and oracle.following.facts()["block_size"] == 1
