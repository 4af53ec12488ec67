"""Eviction policies (R-POL-1..7), for every implementation: one test per decision, and a
property that holds for all of them -- the block evicted next is the evictable leaf tail
with the smallest ``eviction_key`` -- checked against the dump after every step."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kachedb_radix.reference.errors import InvalidArgumentError
from kachedb_radix.reference.policies import HITS_CAP, POLICIES
from tests.conftest import IMPLEMENTATIONS, TreeFactory

pytestmark = pytest.mark.quick

NAMES = sorted(POLICIES)


def edges(tree: Any) -> Iterator[dict[str, Any]]:
    """Every edge of the tree's dump, depth first."""
    pending = [edge for space in tree.dump()["namespaces"] for edge in space["children"]]
    while pending:
        edge = pending.pop()
        yield edge
        pending.extend(edge["children"])


def fields(tree: Any, name: str) -> dict[int, int]:
    """Block id -> the dump's per-block field ``name``, over every cached block."""
    return {
        block: value
        for edge in edges(tree)
        for block, value in zip(edge["blocks"], edge[name], strict=True)
    }


def evictable_tails(tree: Any) -> list[int]:
    """The unpinned last blocks of leaf edges, from the dump (R-EVICT-1)."""
    return [
        edge["blocks"][-1] for edge in edges(tree) if not edge["children"] and edge["pins"][-1] == 0
    ]


# ---------------------------------------------------------------- R-POL-1: the frame


@pytest.mark.parametrize("policy", NAMES)
def test_a_tree_reports_its_policy_and_options(make_tree: TreeFactory, policy: str) -> None:
    """R-POL-1: ``policy`` and ``policy_options`` (defaults filled in); the dump names a
    policy other than lru, with its per-block fields; an lru dump is unchanged."""
    tree = make_tree(8, 2, policy=policy)
    assert tree.policy == policy
    assert tree.policy_options == POLICIES[policy].check_options({})
    tree.insert([1, 1, 2, 2])
    dump = tree.dump()
    edge = dump["namespaces"][0]["children"][0]
    if policy == "lru":
        assert "policy" not in dump
        assert set(edge) == {"tokens", "blocks", "pins", "stamps", "children"}
        plain = make_tree(8, 2)
        plain.insert([1, 1, 2, 2])
        assert dump == plain.dump()
    else:
        assert dump["policy"] == {"name": policy, "options": tree.policy_options}
        for name in POLICIES[policy].dump_fields:
            assert len(edge[name]) == 2
    tree.check_invariants()


@pytest.mark.parametrize(
    ("policy", "options"),
    [
        ("mru", None),
        (3, None),
        ("lru", {"x": 1}),
        ("lru", [("x", 1)]),
        ("priority", {"default": 101}),
        ("priority", {"default": True}),
        ("priority", {"namespaces": {"a": -1}}),
        ("priority", {"namespaces": {3: 50}}),
        ("priority", {"namespaces": [1]}),
        ("slru", {"protected_percent": 101}),
        ("slru", {"protected_percent": 0.5}),
    ],
)
def test_unknown_policies_and_bad_options_are_refused(
    make_tree: TreeFactory, policy: object, options: object
) -> None:
    """R-POL-1, R-ERR-1: the tree is not built; the message names what was wrong."""
    with pytest.raises(InvalidArgumentError, match="polic"):
        make_tree(8, 2, policy=policy, policy_options=options)


@pytest.mark.parametrize("policy", NAMES)
@pytest.mark.parametrize(
    ("priority", "retain_for"),
    [(101, None), (-1, None), (True, None), (1.0, None), (None, 3), (50, 0), (50, True), (50, "2")],
)
def test_bad_retention_is_refused_under_every_policy(
    make_tree: TreeFactory, policy: str, priority: object, retain_for: object
) -> None:
    """R-POL-8, R-ERR-2: every policy checks ``priority`` and ``retain_for``; a refused
    insert changes nothing (dump before == dump after)."""
    tree = make_tree(8, 2, policy=policy)
    tree.insert([1, 1, 2, 2], priority=60, retain_for=2)
    before = json.dumps(tree.dump())
    with pytest.raises(InvalidArgumentError):
        tree.insert([1, 1, 3, 3], priority=priority, retain_for=retain_for)
    assert json.dumps(tree.dump()) == before
    tree.check_invariants()


def _drive(tree: Any, steps: list[tuple[int, int, int, int]]) -> None:
    """Apply drawn steps, checking after each eviction that the victim was the smallest
    key among the evictable leaf tails (R-POL-1)."""
    leases: list[Any] = []
    for kind, a, b, c in steps:
        tokens = [a % 3, b % 3, c % 3, (a + b) % 3][: 1 + (a + c) % 4]
        namespace = None if b % 4 else "t"
        if kind == 0:
            retention = {"priority": c % 101, "retain_for": 1 + b % 4} if a % 2 else {}
            try:
                result = tree.insert(tokens, namespace, pin=c % 5 == 0, **retention)
            except Exception as exc:  # a full pool: R-INS-6
                assert type(exc).__name__ == "OutOfBlocksError"
            else:
                if result.lease is not None:
                    leases.append(result.lease)
        elif kind == 1:
            result = tree.match(tokens, namespace, pin=c % 4 == 0)
            if result.lease is not None:
                leases.append(result.lease)
        elif kind == 2 and leases:
            tree.release(leases.pop(a % len(leases)))
        else:
            tails = evictable_tails(tree)
            expected = min(tails, key=tree.eviction_key) if tails else None
            freed = tree.evict(1)
            assert freed == (() if expected is None else (expected,))
        tree.check_invariants()


STEPS = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 50), st.integers(0, 50), st.integers(0, 50)),
    max_size=60,
)


@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
@pytest.mark.parametrize("policy", NAMES)
@settings(max_examples=60, deadline=None)
@given(steps=STEPS)
def test_the_smallest_key_goes_first(impl: str, policy: str, steps: list[Any]) -> None:
    """R-POL-1, R-EVICT-1: under every policy each eviction frees the evictable leaf tail
    with the smallest eviction key, and every invariant holds after every step."""
    options = {"protected_percent": 40} if policy == "slru" else None
    tree = IMPLEMENTATIONS[impl](7, 1, policy=policy, policy_options=options)
    assert tree.implementation == impl
    _drive(tree, steps)


@pytest.mark.skipif("accel" not in IMPLEMENTATIONS, reason="KACHEDB_RADIX_PURE=1: no C twin")
@pytest.mark.parametrize("policy", NAMES)
@settings(max_examples=40, deadline=None)
@given(steps=STEPS)
def test_the_twins_agree_under_every_policy(policy: str, steps: list[Any]) -> None:
    """R-POL-1, R-DUMP-1: the same steps leave both twins in the same state (equal dumps,
    policy fields included), and their clones too."""
    options = {"protected_percent": 40} if policy == "slru" else None
    trees = [
        IMPLEMENTATIONS[name](7, 1, policy=policy, policy_options=options)
        for name in ("reference", "accel")
    ]
    for tree in trees:
        _drive(tree, steps)
    assert trees[0].dump() == trees[1].dump()
    assert trees[0].clone().dump() == trees[1].clone().dump()


@pytest.mark.parametrize("policy", NAMES)
def test_a_clone_keeps_the_policy_state(make_tree: TreeFactory, policy: str) -> None:
    """R-POL-1: a clone evicts as its original would, and neither changes the other."""
    tree = make_tree(6, 1, policy=policy)
    for tokens in ([1, 2], [1, 3], [4]):
        tree.insert(tokens, priority=70, retain_for=3)
    tree.match([1, 2])
    twin = tree.clone()
    assert twin.policy == policy and twin.dump() == tree.dump()
    twin.match([4])
    assert twin.dump() != tree.dump()
    assert twin.evict(5) != () and tree.evict(1) != ()
    twin.check_invariants()
    tree.check_invariants()


# ---------------------------------------------------------------- one policy each


def test_lru_is_the_default(make_tree: TreeFactory) -> None:
    """R-POL-2, R-EVICT-2: ``policy="lru"`` is the tree built without a policy."""
    named, plain = make_tree(6, 1, policy="lru"), make_tree(6, 1)
    for tree in (named, plain):
        tree.insert([1, 2])
        tree.insert([3])
        tree.match([1])
        assert tree.eviction_key(1) == (1, 1)
    assert named.evict(2) == plain.evict(2) == (1, 2)
    assert named.dump() == plain.dump()


def test_lfu_counts_matches_and_reinserts_not_releases(make_tree: TreeFactory) -> None:
    """R-POL-3: a new block has 0 hits; each match or insert that finds it adds one;
    a release adds none; the key is (hits, stamp, block)."""
    tree = make_tree(8, 1, policy="lfu")
    tree.insert([1, 2])
    assert fields(tree, "hits") == {0: 0, 1: 0}
    hit = tree.match([1, 2, 9], pin=True)
    tree.insert([1, 3])  # finds block 0
    tree.release(hit.lease)
    assert fields(tree, "hits") == {0: 2, 1: 1, 2: 0}
    stamp = tree.dump()["namespaces"][0]["children"][0]["children"][0]["stamps"][0]
    assert tree.eviction_key(1) == (1, stamp, 1)
    tree.check_invariants()
    assert HITS_CAP == 2**20 - 1


def test_lfu_keeps_the_often_found_over_the_recent(make_tree: TreeFactory) -> None:
    """R-POL-3: the prefix found twice outlives a newer one found once; among equal
    counts the least recently used goes first."""
    tree = make_tree(3, 1, policy="lfu")
    tree.insert([1])
    tree.match([1])
    tree.match([1])
    tree.insert([2])
    tree.insert([3])
    tree.match([3])
    assert tree.insert([4]).evicted == (1,)  # [2]: 0 hits; [3] has 1, [1] has 2
    assert tree.insert([5]).evicted == (1,)  # [4], in block 1: 0 hits, however recent
    tree.match([5])
    assert tree.insert([6]).evicted == (2,)  # [3] and [5] have 1 hit: the older goes
    tree.check_invariants()


def test_fifo_ignores_use(make_tree: TreeFactory) -> None:
    """R-POL-4: the tail cached first goes first, however recently it was used."""
    tree = make_tree(3, 1, policy="fifo")
    tree.insert([1])
    tree.insert([2])
    for _ in range(3):
        tree.match([1])
    assert fields(tree, "born") == {0: 1, 1: 2}
    tree.insert([3])
    assert tree.evict(1) == (0,)
    assert tree.eviction_key(1) == (2, 1)
    tree.check_invariants()


def test_priority_keeps_the_high_tier_then_falls_back(make_tree: TreeFactory) -> None:
    """R-POL-5: lower priority first, LRU within one; ``retain_for`` ticks later the block
    returns to its namespace's default, at exactly that tick."""
    tree = make_tree(8, 1, policy="priority")
    tree.insert([1], priority=90, retain_for=3)  # t=1: until 4
    tree.insert([2])  # t=2: the default, 35
    assert fields(tree, "priority") == {0: 90, 1: 35} and fields(tree, "until") == {0: 4, 1: 0}
    tree.match([7])  # t=3: still held
    assert tree.eviction_key(0) == (90, 1, 0)
    tree.match([7])  # t=4: falls back before anything else at t=4
    assert fields(tree, "priority") == {0: 35, 1: 35} and fields(tree, "until") == {0: 0, 1: 0}
    assert tree.evict(1) == (0,)  # now plain LRU: [1] is older
    tree.check_invariants()


def test_priority_is_raised_never_lowered(make_tree: TreeFactory) -> None:
    """R-POL-5: a cached block takes a higher priority; an equal one extends its expiry
    (forever counts as the latest); a lower one leaves it alone."""
    tree = make_tree(8, 1, policy="priority")
    tree.insert([1, 2], priority=60, retain_for=5)  # t=1: until 6
    tree.insert([1, 3], priority=20)  # t=2: block 0 stays at 60
    assert fields(tree, "priority") == {0: 60, 1: 60, 2: 20}
    tree.insert([1, 2], priority=60, retain_for=9)  # t=3: until 12
    assert fields(tree, "until")[0] == 12
    tree.insert([1, 2], priority=60, retain_for=2)  # t=4: 6 is earlier, kept at 12
    assert fields(tree, "until")[0] == 12
    tree.insert([1], priority=60)  # t=5: forever is the latest
    assert fields(tree, "until")[0] == 0
    tree.insert([1, 2], priority=80)  # t=6
    assert fields(tree, "priority") == {0: 80, 1: 80, 2: 20}
    tree.check_invariants()


def test_a_namespace_carries_its_tier(make_tree: TreeFactory) -> None:
    """R-POL-5: option ``namespaces`` gives a namespace its default priority, which its
    blocks get without one and fall back to."""
    tree = make_tree(3, 1, policy="priority", policy_options={"namespaces": {"gold": 80}})
    tree.insert([1], "gold")
    tree.insert([1], "free")
    tree.insert([2], "gold", priority=10, retain_for=1)  # t=3: falls back to 80 at t=4
    assert tree.eviction_key(2)[0] == 10
    tree.match([9])  # t=4
    assert tree.eviction_key(2)[0] == 80
    assert tree.insert([3], "free").evicted == (1,)  # the free tier's block goes first
    assert tree.policy_options == {"default": 35, "namespaces": {"gold": 80}}
    tree.check_invariants()


def test_slru_protects_the_found_and_demotes_the_oldest(make_tree: TreeFactory) -> None:
    """R-POL-6: a hit promotes to the protected segment (P = 4 * 50 // 100 = 2 blocks);
    a third promotion demotes the least recently used protected block, keeping its stamp;
    probation goes first; a release promotes nothing."""
    tree = make_tree(4, 1, policy="slru", policy_options={"protected_percent": 50})
    for tokens in ([1], [2], [3]):
        tree.insert(tokens)
    lease = tree.match([1], pin=True).lease  # t=4: [1] protected
    tree.match([2])  # t=5: [2] protected
    tree.release(lease)  # t=6: restamps [1], promotes nothing
    assert fields(tree, "protected") == {0: 1, 1: 1, 2: 0}
    tree.match([3])  # t=7: [3] protected; [2] (stamp 5) is demoted
    assert fields(tree, "protected") == {0: 1, 1: 0, 2: 1}
    assert tree.eviction_key(1) == (0, 5, 1)
    tree.insert([4])
    assert tree.evict(2) == (1, 3)  # probation, least recent first: [2] (5), then [4] (8)
    tree.check_invariants()


def test_slru_without_a_protected_segment_is_lru(make_tree: TreeFactory) -> None:
    """R-POL-6: with ``protected_percent = 0`` every promotion is demoted at once."""
    tree = make_tree(3, 1, policy="slru", policy_options={"protected_percent": 0})
    tree.insert([1])
    tree.insert([2])
    tree.match([1])
    assert fields(tree, "protected") == {0: 0, 1: 0}
    assert tree.evict(1) == (1,)
    tree.check_invariants()


@pytest.mark.parametrize("policy", ["lfu", "fifo", "priority", "slru"])
def test_state_is_per_block_across_splits_and_fresh_after_eviction(
    make_tree: TreeFactory, policy: str
) -> None:
    """R-POL-7: a split leaves every block's policy state where it was; an extension's
    blocks start as new; a block evicted and cached again starts afresh."""
    tree = make_tree(4, 1, policy=policy)
    tree.insert([1, 2, 3], priority=70)  # t=1
    tree.match([1, 2, 3])  # t=2: a hit on each
    name = POLICIES[policy].dump_fields[0]
    before = fields(tree, name)
    tree.insert([1, 2, 9])  # t=3: splits after [1, 2]: a hit on 0 and 1, block 3 is new
    after = fields(tree, name)
    if policy == "fifo":
        assert after == {**before, 3: 3}
    elif policy == "lfu":
        assert after == {0: 2, 1: 2, 2: 1, 3: 0}
    elif policy == "priority":
        assert after == {**before, 3: 35}
    else:
        assert after == {**before, 3: 0}
    assert tree.evict(2) == ((2, 3) if policy == "fifo" else (3, 2))  # fifo: older first
    tree.insert([1, 2, 5])  # t=4: block 2 is cached again, for other tokens
    again = fields(tree, name)
    fresh = {"lfu": 0, "fifo": 4, "priority": 35, "slru": 0}[policy]
    assert again[2] == fresh
    tree.check_invariants()


def test_slru_keeps_its_segment_order_through_many_hits(make_tree: TreeFactory) -> None:
    """R-POL-6: hundreds of hits on a few protected blocks leave one live entry each in
    the segment's recency order (stale ones are dropped as they pile up), and the least
    recently used protected block is still the one demoted."""
    tree = make_tree(10, 1, policy="slru", policy_options={"protected_percent": 30})
    for tokens in ([1], [2], [3], [4]):
        tree.insert(tokens)
    for round_ in range(200):
        tree.match([1 + round_ % 3])  # [1], [2], [3] protected: P = 3
    tree.check_invariants()
    assert fields(tree, "protected") == {0: 1, 1: 1, 2: 1, 3: 0}
    tree.match([4])  # a fourth promotion demotes the least recently used: [3] at t=200
    assert fields(tree, "protected") == {0: 1, 1: 1, 2: 0, 3: 1}
    tree.check_invariants()


def test_priority_expiries_come_due_in_time_order(make_tree: TreeFactory) -> None:
    """R-POL-5: an expiry set later but due sooner falls back first."""
    tree = make_tree(8, 1, policy="priority")
    tree.insert([1], priority=90, retain_for=10)  # t=1: until 11
    tree.insert([2], priority=90, retain_for=2)  # t=2: until 4
    tree.insert([3], priority=90, retain_for=5)  # t=3: until 8
    tree.match([9])  # t=4
    assert fields(tree, "priority") == {0: 90, 1: 35, 2: 90}
    for _ in range(4):
        tree.match([9])  # t=5..8
    assert fields(tree, "priority") == {0: 90, 1: 35, 2: 35}
    tree.check_invariants()


@pytest.mark.parametrize(
    ("policy", "attribute", "value", "message"),
    [
        ("lfu", "_hits", -1, "hits"),
        ("fifo", "_born", 0, "was born at"),
        ("priority", "_priority", 101, "has priority"),
        ("slru", "_count", 3, "protected blocks, counted"),
    ],
)
def test_the_reference_checks_each_policys_state(
    policy: str, attribute: str, value: int, message: str
) -> None:
    """R-POL-1: ``check_invariants`` checks the policy's own state, and that every key
    is the one its dumped fields give (``key_from``)."""
    from kachedb_radix.reference import InvariantViolation, RadixTree

    tree = RadixTree(8, 1, policy=policy)
    tree.insert([1, 2])
    tree.match([1, 2])
    state = getattr(tree._policy, attribute)
    saved = state if isinstance(state, int) else list(state)
    if isinstance(state, int):
        setattr(tree._policy, attribute, value)
    else:
        state[0] = value
    with pytest.raises(InvariantViolation, match=message):
        tree.check_invariants()
    if isinstance(saved, int):
        setattr(tree._policy, attribute, saved)
    else:
        state[:] = saved
    tree.check_invariants()
    assert tree._policy.check_keys([0, 1]) is None
    tree._policy.key = lambda block: (-1, block)  # type: ignore[method-assign]
    assert "is not the dump's" in str(tree._policy.check_keys([0, 1]))
