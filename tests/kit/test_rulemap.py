"""The rule map: every rule of SPEC.md is in it, and findings are attributed to the rule
that decides the differing value, with a likely cause and the rule's peer note."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kachedb_radix import reference
from kachedb_radix.spec.conform.rulemap import (
    Observation,
    RuleMapError,
    attribute,
    exercised,
    kind_rules,
    load_map,
    peer_note,
    safety_attribution,
)
from kachedb_radix.spec.conform.rules import load_rules
from tests.support.paths import ROOT

RULES = load_rules()


def test_the_map_covers_every_rule_and_names_only_real_ones() -> None:
    rule_map = load_map()
    assert rule_map.mentioned() == set(RULES)
    assert set(rule_map.unexercised) <= set(RULES)
    assert kind_rules("token_range") == ("R-TOK-3",) and kind_rules("nonsense") == ()
    assert "SGLang" in peer_note("R-EVICT-1") and peer_note("R-" + "NOPE-1") == ""


def test_a_bad_map_is_refused(tmp_path: Path) -> None:
    text = (ROOT / "spec" / "conform" / "rulemap.toml").read_text()
    for old, new, message in [
        ('token_type = ["R-TOK-2"]', 'token_type = ["R-' + 'NOPE-9"]', "not in SPEC.md"),
        ('op = "snapshot"', 'op = "snapshop"', "unknown operation 'snapshop'"),
        ('when = ["one_more"]', 'when = ["no_such_predicate"]', "unknown predicate"),
        ('when = ["one_more"]', 'when = ["wat:x"]', "unknown predicate"),
        ('rules = ["@expected", "R-ERR-2", "R-ERR-3"]', 'rules = ["@nobody"]', "placeholder"),
    ]:
        path = tmp_path / "map.toml"
        path.write_text(text.replace(old, new, 1))
        load_map.cache_clear()
        try:
            with pytest.raises(RuleMapError, match=message):
                load_map(path)
        finally:
            load_map.cache_clear()


def _observe(
    step: dict[str, Any],
    expected: dict[str, Any],
    actual: dict[str, Any] | None,
    previous: dict[str, Any] | None = None,
    **facts: Any,
) -> tuple[str, ...]:
    from kachedb_radix.spec.conform.lockstep import first_difference

    path = first_difference(expected, actual, "") if actual is not None else ""
    found = attribute(
        Observation(
            step,
            expected,
            actual,
            path or "",
            previous,
            frozenset({"core", "pinning", "eviction", "namespaces", "snapshots"}),
            {"block_size": 1, **facts},
        )
    )
    assert found.cause and found.rule == found.rules[0]
    return found.rules


MATCH = {"op": "match", "tokens": [1, 2], "namespace": None, "pin": False}
INSERT = {"op": "insert", "tokens": [1, 2], "namespace": None, "pin": False}


def _insert_answer(**fields: Any) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "length": 2,
        "blocks": [0, 1],
        "reused": 0,
        "allocated": [0, 1],
        "evicted": [],
        "lease": None,
    }
    answer.update(fields)
    return {"ok": answer}


@pytest.mark.parametrize(
    ("step", "expected", "actual", "rule"),
    [
        # R-TOK-*: bad inputs, accepted or misreported
        ({**MATCH, "tokens": [1, -1]}, {"error": "token_range"}, {"ok": {}}, "R-TOK-3"),
        ({**MATCH, "tokens": [True]}, {"error": "token_type"}, {"ok": {}}, "R-TOK-2"),
        (
            {**MATCH, "tokens": [2**32, "x"]},
            {"error": "token_range"},
            {"error": "token_type"},
            "R-TOK-3",
        ),
        ({**MATCH, "tokens": [1, 2, "x"]}, {"error": "token_type"}, {"ok": {}}, "R-TOK-2"),
        (
            {**MATCH, "tokens": [1, "x", -1]},
            {"error": "token_type"},
            {"error": "token_range"},
            "R-TOK-5",
        ),
        (
            {**MATCH, "tokens": [-1], "namespace": 3},
            {"error": "token_range"},
            {"error": "invalid_argument"},
            "R-TOK-5",
        ),
        (
            {**MATCH, "tokens": [-1]},
            {"error": "token_range"},
            {"error": "unexpected:Crash"},
            "R-TOK-3",
        ),
        ({**MATCH, "tokens": "abc"}, {"error": "token_type"}, {"error": "token_range"}, "R-TOK-2"),
        (
            {**MATCH, "tokens": [1], "namespace": 0},
            {"error": "invalid_argument"},
            {"ok": {}},
            "R-NS-4",
        ),
        (
            {"op": "evict", "count": -1},
            {"error": "invalid_argument"},
            {"ok": {"freed": []}},
            "R-ERR-1",
        ),
        ({"op": "release", "lease": 1}, {"error": "lease_released"}, {"ok": None}, "R-PIN-4"),
        # refused calls
        (INSERT, _insert_answer(), {"error": "out_of_blocks"}, "R-INS-5"),
        ({**MATCH, "tokens": [2**32 - 1]}, {"ok": {}}, {"error": "token_range"}, "R-TOK-1"),
        (MATCH, {"ok": {}}, {"error": "unexpected:KeyError"}, "R-MATCH-1"),
        (MATCH, {"ok": {}}, {"error": "token_type"}, "R-TOK-2"),
        # answers
        (
            {**MATCH, "pin": True},
            {"ok": {"length": 0, "blocks": [], "lease": 1}},
            {"ok": {"length": 0, "blocks": [], "lease": None}},
            "R-PIN-1",
        ),
        (
            MATCH,
            {"ok": {"length": 2, "blocks": [0, 1], "lease": None}},
            {"ok": {"length": 1, "blocks": [0], "lease": None}},
            "R-MATCH-1",
        ),
        (INSERT, _insert_answer(reused=1), _insert_answer(evicted=[1], reused=1), "R-INS-5"),
        (INSERT, _insert_answer(evicted=[3]), _insert_answer(evicted=[3, 4]), "R-INS-5"),
        (INSERT, _insert_answer(evicted=[3, 4]), _insert_answer(evicted=[3, 4, 5, 6]), "R-INS-5"),
        (INSERT, _insert_answer(evicted=[3, 4]), _insert_answer(evicted=[3]), "R-INS-5"),
        (INSERT, _insert_answer(evicted=[3, 4]), _insert_answer(evicted=[4, 3]), "R-EVICT-1"),
        (INSERT, _insert_answer(evicted=[3]), _insert_answer(evicted=[4]), "R-EVICT-2"),
        (INSERT, _insert_answer(allocated=[0, 1]), _insert_answer(allocated=[1, 0]), "R-ALLOC-2"),
        (INSERT, _insert_answer(allocated=[0, 1]), _insert_answer(allocated=[2, 3]), "R-ALLOC-2"),
        (INSERT, _insert_answer(allocated=[0, 1]), _insert_answer(allocated=[0]), "R-INS-2"),
        (INSERT, _insert_answer(), _insert_answer(reused=1), "R-INS-2"),
        ({**INSERT, "tokens": [1, 2, 3]}, _insert_answer(), _insert_answer(length=3), "R-INS-1"),
        (
            {**INSERT, "tokens": [1, 2, 3]},
            _insert_answer(),
            _insert_answer(allocated=[0, 1, 2]),
            "R-INS-2",
        ),
        (INSERT, _insert_answer(), _insert_answer(blocks=[0, 2]), "R-INS-1"),
        (
            {"op": "evict", "count": 1},
            {"ok": {"freed": [3]}},
            {"ok": {"freed": [3, 4]}},
            "R-EVICT-4",
        ),
        (
            {"op": "evict", "count": 2},
            {"ok": {"freed": [3, 4]}},
            {"ok": {"freed": [3]}},
            "R-EVICT-4",
        ),
        (
            {"op": "evict", "count": 2},
            {"ok": {"freed": [4, 3]}},
            {"ok": {"freed": [3, 4]}},
            "R-EVICT-4",
        ),
        (
            {"op": "evict", "count": 3},
            {"ok": {"freed": [5, 3, 4]}},
            {"ok": {"freed": [3, 5, 4]}},
            "R-EVICT-1",
        ),
        ({"op": "evict", "count": 1}, {"ok": {"freed": [3]}}, {"ok": {"freed": [4]}}, "R-EVICT-2"),
        # snapshots
        (
            {"op": "reader"},
            {"ok": {"snapshot": 1, "epoch": 2, "version": 0}},
            {"ok": {"snapshot": 1, "epoch": 1, "version": 0}},
            "R-EPOCH-1",
        ),
        (
            {"op": "snapshot"},
            {"ok": {"snapshot": 1, "version": 2}},
            {"ok": {"snapshot": 1, "version": 1}},
            "R-SNAP-1",
        ),
        (
            {"op": "snapshot_match", "snapshot": 1, "tokens": [1], "namespace": None},
            {"ok": {"length": 1, "blocks": [0]}},
            {"ok": {"length": 0, "blocks": []}},
            "R-SNAP-2",
        ),
        ({"op": "reclaim"}, {"ok": {"reclaimed": [1]}}, {"ok": {"reclaimed": []}}, "R-EPOCH-2"),
        ({"op": "leave", "snapshot": 1}, {"ok": None}, {"ok": {}}, "R-EPOCH-4"),
    ],
)
def test_answers_are_attributed(
    step: dict[str, Any], expected: dict[str, Any], actual: dict[str, Any], rule: str
) -> None:
    """R-TOK-1..5, R-NS-4, R-ERR-1, R-ERR-3, R-PIN-1, R-PIN-4, R-MATCH-1, R-INS-1..5,
    R-ALLOC-2, R-EVICT-1, R-EVICT-2, R-EVICT-4, R-SNAP-1, R-SNAP-2, R-EPOCH-1, R-EPOCH-2,
    R-EPOCH-4: each finding names the rule deciding the differing value."""
    assert _observe(step, expected, actual)[0] == rule


def _keys(stamps: list[int]) -> Any:
    """The reference's eviction key of each block, given the blocks' stamps."""
    return lambda block: (stamps[block], block)


def test_attribution_uses_the_state_before_the_step() -> None:
    """R-EVICT-1, R-EPOCH-2, R-EPOCH-3: evictions judged against the reference's shape."""
    tree = reference.RadixTree(8, 1)
    tree.insert([1, 2, 3])
    tree.insert([1, 2, 4])
    before = tree.snapshot()  # 1 -> 2 -> {3, 4}: blocks 0 -> 1 -> {2, 3}
    evict = {"op": "evict", "count": 3}
    facts: dict[str, Any] = {"before": before, "key": _keys([1, 1, 1, 2])}
    # An ancestor freed first.
    assert _observe(evict, {"ok": {"freed": [2, 3, 1]}}, {"ok": {"freed": [1, 2, 3]}}, **facts)[
        0
    ] in ("R-EVICT-1", "R-EVICT-4")
    # The candidate freed both children but not the parent that became a leaf.
    assert (
        _observe(evict, {"ok": {"freed": [2, 3, 1]}}, {"ok": {"freed": [2, 3, 0]}}, **facts)[0]
        == "R-EVICT-1"
    )
    # ... unless it is not even least recent first: the order itself is wrong.
    assert (
        _observe(
            evict,
            {"ok": {"freed": [2, 3, 1]}},
            {"ok": {"freed": [3, 2, 6]}},
            **{**facts, "key": _keys([5, 5, 1, 2, 0, 0, 0])},
        )[0]
        == "R-EVICT-2"
    )
    # Whole edges freed, more than the shortfall.
    assert (
        _observe(
            INSERT, _insert_answer(evicted=[2]), _insert_answer(evicted=[2, 3, 1, 0]), **facts
        )[0]
        == "R-EVICT-1"
    )
    readers = {"op": "insert", "tokens": [7], "namespace": None, "pin": False}
    assert (
        _observe(readers, {"error": "out_of_blocks"}, _insert_answer(evicted=[5]), readers=1)[0]
        == "R-EPOCH-3"
    )
    assert _observe(readers, {"error": "out_of_blocks"}, _insert_answer(), readers=1)[0] == (
        "R-EPOCH-2"
    )


def test_partial_blocks_judged_by_block_size() -> None:
    """R-TOK-5, R-INS-3: with B = 2 a third token is a trailing partial block."""
    step = {**MATCH, "tokens": [1, 2, "x"]}
    assert _observe(step, {"error": "token_type"}, {"ok": {}}, block_size=2)[0] == "R-TOK-5"
    insert = {**INSERT, "tokens": [1, 2, 3, 4, 5]}
    more = _insert_answer(allocated=[0, 1, 2])
    assert _observe(insert, _insert_answer(), more, block_size=2)[0] == "R-INS-3"


def _dump(children: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    dump: dict[str, Any] = {
        "format": 2,
        "block_size": 1,
        "num_blocks": 4,
        "clock": 1,
        "free": [],
        "quarantine": [],
        "namespaces": [{"namespace": None, "children": children}],
    }
    dump.update(fields)
    return dump


def _edge(tokens: list[int], blocks: list[int], **fields: Any) -> dict[str, Any]:
    edge: dict[str, Any] = {
        "tokens": tokens,
        "blocks": blocks,
        "pins": [0] * len(blocks),
        "stamps": [1] * len(blocks),
        "children": [],
    }
    edge.update(fields)
    return edge


@pytest.mark.parametrize(
    ("after", "expected", "actual", "rule", "facts"),
    [
        ("match", _dump([_edge([1], [0])]), _dump([_edge([1], [0])], clock=2), "R-LRU-3", {}),
        ("match", _dump([_edge([1], [0])]), _dump([_edge([1], [0], stamps=[0])]), "R-LRU-1", {}),
        ("release", _dump([_edge([1], [0])]), _dump([_edge([1], [0], stamps=[0])]), "R-LRU-1", {}),
        (
            "insert",
            _dump([_edge([1], [0])]),
            _dump([_edge([1], [0], stamps=[0])]),
            "R-SPLIT-2",
            {"split": True},
        ),
        ("insert", _dump([_edge([1], [0])]), _dump([_edge([1], [0], stamps=[0])]), "R-LRU-1", {}),
        ("evict", _dump([_edge([1], [0])]), _dump([_edge([1], [0], stamps=[0])]), "R-LRU-1", {}),
        (
            "match",
            _dump([_edge([1, 2], [0, 1], pins=[1, 1])]),
            _dump([_edge([1, 2], [0, 1], pins=[0, 1])]),
            "R-PIN-3",
            {},
        ),
        (
            "insert",
            _dump([_edge([1], [0], pins=[1])]),
            _dump([_edge([1], [0])]),
            "R-SPLIT-2",
            {"split": True},
        ),
        ("match", _dump([_edge([1], [0], pins=[1])]), _dump([_edge([1], [0])]), "R-PIN-2", {}),
        (
            "insert",
            _dump([_edge([1], [0]), _edge([2], [1])]),
            _dump([_edge([2], [1]), _edge([1], [0])]),
            "R-DUMP-2",
            {},
        ),
        (
            "evict",
            _dump([_edge([1, 2], [0, 1])]),
            _dump([_edge([1], [0], children=[_edge([2], [1])])]),
            "R-DUMP-2",
            {},
        ),
        (
            "insert",
            _dump([_edge([1, 2], [0, 1])]),
            _dump([_edge([1, 2], [1, 0])]),
            "R-SPLIT-2",
            {"split": True},
        ),
        (
            "evict",
            _dump([_edge([1], [0])], free=[1]),
            _dump([_edge([1], [0])], free=[]),
            "R-ALLOC-1",
            {},
        ),
        (
            "evict",
            _dump([_edge([1], [0])], quarantine=[1]),
            _dump([_edge([1], [0])], free=[1]),
            "R-EPOCH-1",
            {},
        ),
        (
            "evict",
            _dump([]),
            _dump([], namespaces=[{"namespace": "a", "children": []}]),
            "R-NS-3",
            {},
        ),
        (
            "evict",
            _dump([_edge([1], [0])]),
            _dump(
                [_edge([1], [0])], namespaces=[{"namespace": "b", "children": [_edge([1], [0])]}]
            ),
            "R-NS-3",
            {},
        ),
        (
            "match",
            _dump([_edge([1, 2], [0, 1])]),
            _dump([_edge([1, 2, 3], [0, 1, 2])]),
            "R-MATCH-2",
            {},
        ),
        ("evict", _dump([_edge([1, 2], [0, 1])]), _dump([_edge([1], [0])]), "R-EVICT-1", {}),
        ("insert", _dump([_edge([1, 2], [0, 1])]), _dump([_edge([1], [0])]), "R-SPLIT-1", {}),
        ("stats", _dump([_edge([1, 2], [0, 1])]), _dump([_edge([1], [0])]), "R-DUMP-1", {}),
    ],
)
def test_dump_differences_are_attributed(
    after: str, expected: dict[str, Any], actual: dict[str, Any], rule: str, facts: dict[str, Any]
) -> None:
    """R-LRU-1, R-LRU-3, R-SPLIT-1, R-SPLIT-2, R-PIN-2, R-PIN-3, R-DUMP-1, R-DUMP-2,
    R-ALLOC-1, R-EPOCH-1, R-NS-3, R-MATCH-2, R-EVICT-1: a dump read after a step is
    judged by what that step was."""
    previous = {"op": after, "expect": {"ok": None}}
    assert _observe({"op": "dump"}, {"ok": expected}, {"ok": actual}, previous, **facts)[0] == rule


STATS = {
    "num_blocks": 4,
    "free": 2,
    "cached": 2,
    "pinned": 1,
    "evictable": 1,
    "leases": 1,
    "clock": 3,
    "quarantined": 0,
    "readers": 0,
    "oldest_reader": None,
    "version": 3,
}


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("free", 1, "R-INV-1"),
        ("cached", 1, "R-INV-1"),
        ("pinned", 0, "R-INV-1"),
        ("evictable", 0, "R-INV-1"),
        ("leases", 2, "R-INV-2"),
        ("version", 4, "R-SNAP-1"),
        ("quarantined", 1, "R-EPOCH-3"),
        ("readers", 1, "R-EPOCH-3"),
        ("num_blocks", 5, "R-INV-2"),
    ],
)
def test_stats_differences_are_attributed(field: str, value: int, rule: str) -> None:
    """R-INV-1, R-INV-2, R-SNAP-1, R-EPOCH-3: each counter names its rule."""
    previous = {"op": "insert", "expect": {"ok": None}}
    actual = {**STATS, field: value}
    assert _observe({"op": "stats"}, {"ok": STATS}, {"ok": actual}, previous)[0] == rule


def test_other_reads_and_fallbacks() -> None:
    """R-NS-3, R-SNAP-2: namespaces and snapshot dumps; an op without entries falls back."""
    previous = {"op": "evict", "expect": {"ok": None}}
    names = ({"ok": {"namespaces": [None]}}, {"ok": {"namespaces": [None, "a"]}})
    assert _observe({"op": "namespaces"}, *names, previous)[0] == "R-NS-3"
    shape = ({"ok": {"version": 1, "namespaces": []}}, {"ok": {"version": 1, "namespaces": [1]}})
    assert _observe({"op": "snapshot_dump", "snapshot": 1}, *shape, previous)[0] == "R-SNAP-2"
    assert _observe({"op": "reset"}, {"ok": None}, {"ok": 1})[0] == "R-INV-2"


def test_safety_attribution_and_exercised_rules() -> None:
    """R-PIN-3, R-MATCH-3: safety properties have their rules; exercised() marks rules."""
    found = safety_attribution("pinned_evicted", "block 3")
    assert found.rules == ("R-PIN-3",) and found.cause.endswith(": block 3")
    assert safety_attribution("accounting", "").cause.startswith("free + cached")
    with pytest.raises(KeyError):
        safety_attribution("nonsense", "")
    levels = frozenset({"core", "eviction", "pinning", "namespaces"})
    insert = Observation(
        {"op": "insert", "tokens": [1, 2, 4294967295], "namespace": "a", "pin": True},
        _insert_answer(reused=1, allocated=[1, 2], evicted=[5]),
        levels=levels,
        facts={"block_size": 2, "split": True, "pinned": 1},
    )
    found_rules = exercised(insert)
    assert {
        "R-INS-1",
        "R-INS-2",
        "R-INS-3",
        "R-INS-4",
        "R-INS-5",
        "R-SPLIT-1",
        "R-PIN-3",
        "R-TOK-1",
        "R-NS-2",
        "R-LRU-1",
    } <= found_rules
    already = set(found_rules)
    assert exercised(insert, already) is already
    error = Observation(
        {"op": "match", "tokens": [1, "x", -1], "namespace": 3},
        {"error": "token_type"},
        levels=levels,
    )
    assert {"R-TOK-2", "R-TOK-5", "R-ERR-2", "R-ERR-3", "R-NS-4"} <= exercised(error)


def test_observations_and_predicates_on_odd_shapes() -> None:
    """The helpers behind attribution tolerate what a broken candidate answers: a
    missing side, missing keys, lists of mixed types, non-dict answers."""
    from kachedb_radix.spec.conform.rulemap import PREDICATES, Observation

    step = {"op": "evict", "count": 1}
    focused = Observation(step, {"ok": {"freed": [1]}}, {"ok": {"freed": [2]}}, focus="freed")
    assert focused.fields == ("freed",)
    asking = Observation(step, {"ok": {"freed": [1]}})
    assert asking.differing == frozenset()
    missing = Observation(step, {"ok": {"freed": [1]}}, {"ok": {"other": 1}}, ".ok")
    assert missing.differing == {"freed", "other"}
    mixed = Observation(step, {"ok": {"freed": [1, 2]}}, {"ok": {"freed": ["a", 1]}}, ".ok.freed")
    assert not PREDICATES["reordered"](mixed)
    scalar = Observation(step, {"ok": {"freed": [1]}}, {"ok": {"freed": 3}}, ".ok.freed")
    assert not PREDICATES["reordered"](scalar)
    assert not PREDICATES["quarantine_differs"](Observation(step, {"ok": None}, {"ok": 1}))
    assert not PREDICATES["unsorted"](Observation({"op": "dump"}, {"ok": {}}, {"ok": [1]}))
    found = attribute(Observation({"op": "match"}, {"ok": {"length": 1}}, None, ".ok"))
    assert found.rules
