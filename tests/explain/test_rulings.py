"""The phases and the one ruling per step, beside planted bugs (no browser).

Each mutant below is the reference with one bug (:mod:`kachedb_radix.spec.mutants`); the demo and
the snapshots scenario are explained beside it. Whatever the bug, every side's sub-steps
end in the dump it reported (a step whose dumps cannot be taken apart into moves -- a
dump not path-compressed, a split that loses pins -- says so in one last phase), the walk
is drawn on the state before the step, and the target's panel says what the ruling says:
each rule it marks ✗ is a departure of the ruling, each declared one declared, and the
exit status follows the rulings.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.explain import frame_views, record, scenario
from kachedb_radix.spec.explain.ruling import Mark, Ruling, settle
from kachedb_radix.spec.explain.view import View, describe_step, exit_differs
from kachedb_radix.spec.mutants import MUTANTS

#: Bugs whose dumps cannot always be taken apart into moves, and some that can.
NAMES = (
    "block_given_twice", "evict_edge_head_first", "reuse_trusts_first_block",
    "split_misplaces_blocks", "split_drops_pins", "dump_not_path_compressed",
    "dump_children_unsorted", "lru_reversed",
)  # fmt: skip


@functools.cache
def _explained(name: str) -> tuple[Any, list[list[View]]]:
    steps = scenario("demo").steps + scenario("snapshots").steps
    mutant = MUTANTS[name]
    recording = record(steps, TreeAdapter(mutant.tree, name), title=name, source=name)
    return recording, frame_views(recording)


@pytest.mark.parametrize("name", NAMES)
def test_every_side_s_phases_end_in_its_dump(name: str) -> None:
    """Each side's last sub-step is the dump it reported; its walk, the state before."""
    recording, views = _explained(name)
    fallbacks = 0
    for index, (frame, row) in enumerate(zip(recording.frames, views, strict=True)):
        for number, (side, view) in enumerate(zip(frame.sides, row, strict=True)):
            if not view["sub"]:
                continue
            assert view["sub"][-1]["dump"] == side.dump, (index, side.name)
            previous = recording.frames[index - 1].sides[number].dump if index else None
            for sub in view["sub"]:
                if sub["k"] == "walk" and previous is not None:
                    assert sub["dump"] == previous
            fallbacks += sum(sub["k"] == "after" for sub in view["sub"])
            if number == 0:
                assert all(sub["k"] != "after" for sub in view["sub"])  # the spec's never
    assert fallbacks or name in ("lru_reversed",)


@pytest.mark.parametrize("name", NAMES)
def test_the_panel_says_what_the_ruling_says(name: str) -> None:
    """The target's ✗ are the ruling's departures, its declared marks the ruling's, and the
    exit status is 1 exactly when a ruling differs (each of these bugs differs)."""
    _, views = _explained(name)
    for row in views:
        ruling: Ruling = row[0]["ruling"]
        theirs = row[1]
        for (rule, _), verdict in zip(theirs["rules"], theirs["verdicts"], strict=True):
            if verdict == "departs":
                assert rule in ruling.rules("departs"), (name, rule)
            if verdict == "declared":
                assert rule in ruling.rules("declared"), (name, rule)
        if ruling.differs:
            assert ruling.rules("departs") or ruling.kind == "failed"
    assert exit_differs(views)


def test_a_panel_departure_the_kit_does_not_see_is_a_note() -> None:
    """Where the kit found nothing, the panel's own check cannot mark a ✗ the exit status
    would contradict: it is a note; a rule the profile declares is declared (and the step
    with it); a rule the kit names that the panel's check shows kept, with another left,
    leaves the ruling; with none left the kit's mark stands, in its words."""
    agrees = Ruling("agrees")
    view: dict[str, Any] = {"rules": [["R-A", "did a"], ["R-B", "did b"]],
                            "verdicts": ["departs", "departs"]}  # fmt: skip
    settle(agrees, view, {"R-B": "declared: its own way"})
    assert view["verdicts"] == ["note", "declared"] and agrees.kind == "declared"
    assert view["rules"][0][1].endswith("(not a difference the kit's comparison reports)")
    assert view["rules"][1][1] == "did b (declared: its own way)"
    differs = Ruling("differs", [Mark("R-A", "departs", "the kit: a"),
                                 Mark("R-C", "departs", "the kit: c")])  # fmt: skip
    view = {"rules": [["R-A", "kept a"], ["R-D", "did d"]], "verdicts": ["follows", "departs"]}
    settle(differs, view, {})
    assert differs.rules("departs") == ["R-C", "R-D"]
    assert view["verdicts"] == ["follows", "departs", "departs"]  # R-C added from the kit
    alone = Ruling("differs", [Mark("R-A", "departs", "the kit: a")])
    view = {"rules": [["R-A", "kept a"]], "verdicts": ["follows"]}
    settle(alone, view, {})
    assert view == {"rules": [["R-A", "the kit: a"]], "verdicts": ["departs"]}
    skipped = Ruling("not compared", cause="why")
    view = {"rules": [["R-A", "x"]], "verdicts": ["departs"]}
    settle(skipped, view, {})
    assert view["verdicts"] == ["departs"]  # a step not compared is not judged


def test_a_step_shows_what_utf8_can_write() -> None:
    """A namespace is shown with its characters as they are; one no UTF-8 page can hold
    (a lone surrogate) escaped."""
    step = {"op": "match", "tokens": [1], "namespace": "ténant 🌍", "pin": False}
    assert 'namespace="ténant 🌍"' in describe_step(step)
    step["namespace"] = "a\ud800"
    assert 'namespace="a\\ud800"' in describe_step(step)


def _states(steps: list[dict[str, Any]]) -> tuple[Any, Any, Any, Any, Any]:
    """The reference's states before and after the last step, indexed, and its outcome."""
    from kachedb_radix.spec.explain.model import KeySpace, diff, index_dump

    recording = record(steps, title="t", source="s")
    keys = KeySpace()
    before = index_dump(recording.frames[-2].sides[0].dump, keys)  # type: ignore[arg-type]
    after = index_dump(recording.frames[-1].sides[0].dump, keys)  # type: ignore[arg-type]
    return recording.frames[-1].sides[0].outcome, before, after, diff(before, after), keys


def test_an_answer_the_dumps_do_not_bear_out_is_not_taken_apart() -> None:
    """Where a side's answer and its dumps cannot be taken apart into moves -- a victim
    that is not an id or not cached, an id allocated that was not free, an insert without
    tokens, a path not ending in the allocated blocks, a reclaim of an id never
    quarantined -- its sub-steps are the walk, then its state after the step, said as such
    (with no walk either, none); an operation the table does not know has no phases."""
    from kachedb_radix.spec.explain.phases import phases

    reset: dict[str, Any] = {"op": "reset", "num_blocks": 3, "block_size": 1}
    fill = {"op": "insert", "tokens": [1, 2], "namespace": None, "pin": False}
    evicting = {"op": "insert", "tokens": [7, 8], "namespace": None, "pin": False}
    outcome, before, after, changes, keys = _states([reset, fill, evicting])
    answer = outcome["ok"]
    for tampered in (
        {**answer, "evicted": ["x"]},
        {**answer, "evicted": [9]},
        {**answer, "allocated": [2, 2]},
        {**answer, "blocks": [0, 0]},
    ):
        found = phases(evicting, {"ok": tampered}, before, after, changes, keys, name="bug")
        assert found[-1].kind == "after" and found[-1].state == after.dump
        assert "cannot be taken apart" in found[-1].text
    bare = {"op": "insert", "namespace": None, "pin": False}
    assert phases(bare, {"ok": answer}, before, after, changes, keys) == []  # no walk either
    changes.reclaimed = [1]
    assert phases(evicting, outcome, before, after, changes, keys)[-1].kind == "after"
    assert phases({"op": "nowhere"}, {"ok": {}}, before, after, changes, keys) == []
