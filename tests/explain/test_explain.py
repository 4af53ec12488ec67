"""``kachedb-radix explain``: recording, the rules each step is explained by, folding,
the tidy layout, SVG, the page's data, the text mode and the command line.

The page itself is tested in a real browser by ``tests/explain/test_browser.py``.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import pytest

from kachedb_radix import reference
from kachedb_radix.reference.render import render_dump
from kachedb_radix.spec.cli.demo import run_demo
from kachedb_radix.spec.cli.main import main
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.candidate import CandidateError, CandidateFailure
from kachedb_radix.spec.conform.levels import LEVELS
from kachedb_radix.spec.conform.rules import RULE_ID, load_rules
from kachedb_radix.spec.explain import (
    SCENARIOS,
    RecordError,
    Recording,
    build_page,
    frame_views,
    record,
    scenario,
    slide,
    text_report,
)
from kachedb_radix.spec.explain.collapse import CHAIN, FANOUT, Shown, visible
from kachedb_radix.spec.explain.layout import GAP, layout
from kachedb_radix.spec.explain.model import (
    KeySpace,
    diff,
    empty_dump,
    eviction_order,
    index_dump,
    walk,
)
from kachedb_radix.spec.explain.page import page_data, rule_html, rules_html
from kachedb_radix.spec.explain.svg import pool_cells, pool_svg, tree_svg
from kachedb_radix.spec.explain.text import _complete
from kachedb_radix.spec.explain.view import Node, View, describe_outcome, describe_step
from kachedb_radix.spec.explain.view import all_nodes as nodes
from kachedb_radix.spec.explain.why import explain_step, ordinal
from kachedb_radix.spec.mutants.eviction import LruReversed
from tests.support.paths import ROOT

LRU_TRACE = ROOT / "docs" / "explain" / "lru-reversed.jsonl"

#: The "why" panel's eviction section on the spec's side, under lru.
SPEC_ORDER = "eviction, in the spec's order (least recently used leaf tail first)"


def run(name: str) -> tuple[Recording, list[list[View]]]:
    """A scenario recorded on the reference, and its views."""
    chosen = scenario(name)
    recording = record(chosen.steps, title=chosen.title, source=name, lesson=chosen.lesson)
    return recording, frame_views(recording)


def rules(view: View) -> list[str]:
    return [rule for rule, _ in view["rules"]]


def flagged(view: View, flag: str) -> list[list[int]]:
    return [node["blocks"] for node in nodes(view["tree"]) if flag in node["flags"]]


def step_of(name: str, note: str) -> int:
    """The index of the scenario step whose note starts with ``note``."""
    steps = scenario(name).steps
    return next(index for index, step in enumerate(steps) if step.get("note", "").startswith(note))


# ---------------------------------------------------------------------- scenarios


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_runs_as_written(name: str) -> None:
    """Each scenario is a valid trace: errors exactly where it means them, a note per step."""
    chosen = scenario(name)
    recording, views = run(name)
    assert recording.names == ["reference"]
    assert chosen.lesson and chosen.title
    for index, frame in enumerate(recording.frames):
        outcome = frame.sides[0].outcome
        assert outcome is not None
        assert outcome.get("error") == chosen.errors.get(index), (index, frame.step)
        if index:
            assert frame.step["note"], frame.step
            assert views[index][0]["rules"], frame.step
        for rule in rules(views[index][0]):
            assert RULE_ID.fullmatch(rule) and rule in load_rules()


def test_unknown_scenario_is_named() -> None:
    with pytest.raises(KeyError, match="unknown scenario 'nope': choose from demo"):
        scenario("nope")


def test_demo_scenario_ends_where_the_demo_does() -> None:
    """The page's demo is the demo: the same tree (R-DUMP-1) after the same requests."""
    recording, _ = run("demo")
    final = recording.frames[-1].sides[0].dump
    assert final is not None
    assert render_dump(final) in run_demo(reference.RadixTree)


def test_split_scenario_marks_splits_growth_and_new_blocks() -> None:
    """R-SPLIT-1, R-SPLIT-2, R-MATCH-2, R-INS-2..4: what each step of ``split`` shows."""
    _, views = run("split")
    diverge = views[step_of("split", "diverges after two")][0]
    assert {"R-SPLIT-1", "R-SPLIT-2", "R-INS-2", "R-INS-4"} <= set(rules(diverge))
    assert flagged(diverge, "split") == [[2]] and flagged(diverge, "new") == [[3]]
    assert flagged(diverge, "walk") == [[0, 1], [3]]
    walked = dict(diverge["why"])["match walk"]
    assert walked[1] == "→ #0-1: 2 of the 3 blocks of an edge"
    assert walked[-1] == "stop: the prompt's 3rd block [50 51 52 53] is not cached there"
    partial = views[step_of("split", "a match ending inside a block")][0]
    assert "R-SPLIT-1" not in rules(partial) and "R-MATCH-2" in rules(partial)
    assert dict(partial["why"])["match walk"][-1].startswith("2 trailing tokens")
    grows = views[step_of("split", "a leaf grows")][0]
    assert flagged(grows, "grown") == [[2, 5]]
    inside = views[step_of("split", "the block differs")][0]
    assert flagged(inside, "new") == [[6]]
    assert rules(views[-1][0]) == ["R-DUMP-1", "R-DUMP-2"]


def test_eviction_scenario_shows_candidates_ghosts_and_merges() -> None:
    """R-EVICT-1..4, R-INS-5, R-DUMP-2, R-NS-3: eviction as the page shows it."""
    _, views = run("eviction")
    short = views[step_of("eviction", "a new prompt")][0]
    assert {"R-INS-5", "R-EVICT-1", "R-EVICT-2"} <= set(rules(short))
    ghosts = [node for node in nodes(short["tree"]) if node["kind"] == "ghost"]
    assert [ghost["blocks"] for ghost in ghosts] == [[3, 4]]
    assert flagged(short, "trimmed") == []  # the whole edge went
    candidates = dict(short["why"])[SPEC_ORDER]
    # The order block by block: #3 becomes a leaf tail once #4 went, and goes second.
    assert candidates[:2] == [
        "1. #4  t=2  ← evicted 1st; then #3 is a leaf tail",
        "2. #3  t=2  ← evicted 2nd",
    ]
    assert candidates[2] == "next: #5  t=3"
    assert short["pool"]["evicted"] == [3, 4] and short["pool"]["allocated"] == [3, 4, 6, 7]
    merged = views[step_of("eviction", "evict one more")][0]
    assert "R-DUMP-2" in rules(merged) and flagged(merged, "merged") == [[0, 1, 2]]
    emptied = views[step_of("eviction", "evict(10)")][0]
    assert "R-NS-3" in rules(emptied)
    assert [node["flags"] for node in emptied["tree"]] == [["ghost"]]


def test_pinning_scenario_explains_pins_and_refusals() -> None:
    """R-PIN-1..5, R-INS-6, R-ERR-2: exact pins, eviction around them, refused calls."""
    _, views = run("pinning")
    first = views[step_of("pinning", "a request pins")][0]
    assert {"R-PIN-1", "R-PIN-2"} <= set(rules(first))
    assert flagged(first, "pin+") == [[0, 1, 2, 3]]
    assert dict(first["why"])["pins"] == ["pinned: #0-1 (pins 0→1)"]
    around = views[step_of("pinning", "two new blocks")][0]
    assert "R-PIN-3" in rules(around)
    assert flagged(around, "trimmed") == [[0, 1]]
    refused = views[step_of("pinning", "four blocks needed")][0]
    assert rules(refused) == ["R-INS-6", "R-ERR-2"] and refused["outcome"] == "error: out_of_blocks"
    assert rules(views[step_of("pinning", "releasing twice")][0])[0] == "R-PIN-4"
    assert rules(views[step_of("pinning", "a lease this tree")][0])[0] == "R-PIN-5"
    released = views[step_of("pinning", "the first request")][0]
    assert flagged(released, "pin-") and dict(released["why"])["pins"][0].startswith("unpinned")


def test_namespaces_scenario_has_one_root_each() -> None:
    """R-NS-1..4: roots side by side, nothing shared, emptied roots go, bad names refused."""
    _, views = run("namespaces")
    three = views[step_of("namespaces", "and for bob")][0]
    assert [node["lines"][0] for node in three["tree"]] == [
        "namespace (default)",
        "namespace 'alice'",
        "namespace 'bob'",
    ]
    assert "R-NS-1" in rules(views[step_of("namespaces", "the same tokens")][0])
    assert "R-NS-2" in rules(views[step_of("namespaces", "carol finds")][0])
    assert "R-NS-3" in rules(views[step_of("namespaces", "the two oldest")][0])
    assert rules(views[step_of("namespaces", "a namespace must")][0])[0] == "R-NS-4"
    assert views[-1][0]["outcome"] == 'namespaces: "alice", "bob"'


def test_snapshots_scenario_shows_the_quarantine() -> None:
    """R-EPOCH-1..4, R-SNAP-2: quarantined cells, a refused insert, reclaim, leave twice."""
    _, views = run("snapshots")
    evicted = views[step_of("snapshots", "evict two")][0]
    assert "R-EPOCH-1" in rules(evicted)
    states = [state for state, _ in pool_cells(evicted["pool"])]
    assert states == ["cached", "quarantined", "quarantined", "free", "free", "free"]
    readers = dict(evicted["why"])["readers and quarantine"]
    assert readers[0] == "readers inside: 1 (oldest epoch 1)"
    assert "R-SNAP-2" in rules(views[step_of("snapshots", "the reader still")][0])
    refused = views[step_of("snapshots", "four new blocks")][0]
    assert rules(refused)[:2] == ["R-EPOCH-3", "R-INS-6"]
    reclaimed = views[step_of("snapshots", "one block, none free")][0]
    assert reclaimed["pool"]["reclaimed"] == [2, 1] and "R-EPOCH-2" in rules(reclaimed)
    assert views[step_of("snapshots", "reclaim finds")][0]["outcome"] == "reclaimed nothing"
    assert rules(views[-1][0])[0] == "R-EPOCH-4"


def test_scale_scenario_folds_wide_fanouts_and_long_chains() -> None:
    """At 200+ edges the shown tree stays small; every fold opens to show all of it."""
    recording, views = run("scale")
    roots = views[-2][0]["tree"]  # before the document evicts anything
    everything = nodes(roots)
    assert len([node for node in everything if node["kind"] == "edge"]) >= 200
    folded = _shown(visible(roots))
    assert [shown.node["kind"] for shown in folded].count("more") == 1 and len(folded) < 50
    more = next(shown.node for shown in folded if shown.node["kind"] == "more")
    hidden = 41 - (FANOUT - 1) - 1  # 41 kids, 1 changed
    assert more["lines"][0] == f"+{hidden} more"
    # A fan-out opens a page of FANOUT at a time: never one row too wide to read.
    opened = set()
    for page in range(1, hidden // FANOUT + 1):
        opened.add(more["id"])
        shown = _shown(visible(roots, opened))
        mores = [item.node for item in shown if item.node["kind"] == "more"]
        left = hidden - page * FANOUT
        if left >= 2:
            assert [node["lines"][0] for node in mores] == [f"+{left} more"]
            more = mores[0]
        else:
            assert mores == []
    chain = next(item.node for item in shown if item.node["kind"] == "chain")
    assert chain["lines"][:2] == ["⋯ 9 levels", "18 nodes, 18 blocks"] and CHAIN <= 9
    everything_shown = _shown(visible(roots, {*opened, chain["id"]}))
    assert len(everything_shown) == len(everything)
    last = views[-1][0]
    ghosts = [
        shown.node for shown in _shown(visible(last["tree"])) if shown.node["kind"] == "ghost"
    ]
    # Changed subtrees are never folded away; a removed subtree is one ghost.
    assert sorted(len(node["blocks"]) for node in ghosts) == [1, 1, 21]
    assert sum(len(node["blocks"]) for node in ghosts) == 23
    # Focus (the page's follow): the unchanged subtrees beside the changes fold.
    focused = _shown(visible(last["tree"], focus=True))
    assert len(focused) < 12 and {"ghost", "more"} <= {item.node["kind"] for item in focused}
    assert recording.frames[-1].sides[0].outcome is not None


def _shown(roots: list[Shown]) -> list[Shown]:
    found: list[Shown] = []
    pending = list(roots)
    while pending:
        shown = pending.pop()
        found.append(shown)
        pending.extend(shown.children)
    return found


# ---------------------------------------------------------------------- layout


def test_tidy_layout_never_overlaps_and_centres_parents() -> None:
    """Subtrees keep GAP apart at every depth; a parent sits over its first and last child."""
    _, views = run("scale")
    roots = views[-2][0]["tree"]
    placed, width, height = layout(visible(roots, {"k2/more"}))
    assert width > 0 and height > 0
    by_depth: dict[int, list[tuple[float, float]]] = {}
    for node in placed:
        by_depth.setdefault(node.depth, []).append(
            (node.x - node.width / 2, node.x + node.width / 2)
        )
        kids = [child for child in placed if child.parent is node]
        if kids:
            assert node.x == pytest.approx((kids[0].x + kids[-1].x) / 2)
    for spans in by_depth.values():
        spans.sort()
        for (_, right), (left, _) in itertools.pairwise(spans):
            assert left - right >= GAP - 1e-9
    assert min(node.x - node.width / 2 for node in placed) == pytest.approx(10)


def test_layout_of_nothing_and_of_a_very_deep_tree() -> None:
    """An empty forest is a margin; a 3,000-level tree needs no recursion."""
    assert layout([]) == ([], 20.0, 20.0)
    root: Node = {"id": "r", "kind": "root", "lines": ["root"], "blocks": [], "flags": []}
    node = root
    for depth in range(3000):
        leaf: Node = {
            "id": f"l{depth}",
            "kind": "edge",
            "lines": ["x"],
            "blocks": [depth],
            "flags": ["new"],
            "children": [],
        }
        child: Node = {**leaf, "id": f"k{depth}", "children": []}
        node["children"] = [child, leaf]
        node = child
    node["children"] = []
    placed, _, _ = layout(visible([root]))
    assert len(placed) == 6001 and max(item.depth for item in placed) == 3001


# ---------------------------------------------------------------------- recording


def test_side_by_side_marks_where_a_mutant_parts_ways() -> None:
    """The committed shrunk disagreement: LruReversed evicts the newest leaf (R-EVICT-2)."""
    steps = [json.loads(line) for line in LRU_TRACE.read_text().splitlines()]
    recording = record(steps, TreeAdapter(LruReversed, "lru_reversed"), title="t", source="s")
    assert recording.names == ["reference", "lru_reversed"]
    assert recording.first_difference == 3
    assert recording.frames[3].difference == "outcome.ok.blocks[0]"
    views = frame_views(recording)
    ours, theirs = views[3]
    assert dict(ours["why"])[SPEC_ORDER][0] == "1. #0  t=1  ← evicted 1st"
    # The mutant's panel says what it took, beside the spec's order from the same state.
    taken = dict(theirs["why"])["eviction: what lru_reversed took, in its order"]
    assert taken == ["1. #1  t=2  (a leaf tail)", "the spec's order from the same state: 0"]
    verdicts = dict(zip(rules(theirs), theirs["verdicts"], strict=True))
    assert verdicts["R-EVICT-2"] == "departs" and verdicts["R-EVICT-1"] == "follows"
    # The same path is the same node on both sides: the differing one is marked in both.
    # (a block evicted on one side is a ghost there, g<key>, and an edge on the other, k<key>)
    marked = [
        {n["id"][1:] for n in nodes(view["tree"]) if "differs" in n["flags"]} for view in views[3]
    ]
    assert marked[0] == marked[1] != set()
    report = text_report(recording, views)
    assert "≠ lru_reversed parts ways with the reference at outcome.ok.blocks[0]" in report
    steps_run = len(recording.frames)  # the verdict says what it covered (issue 32)
    assert report.endswith(
        f"lru_reversed against the reference: first difference at step 4 of {steps_run}"
    )


def test_twins_agree_on_every_golden_vector() -> None:
    """accel beside the reference over a golden vector file: no step differs (R-DUMP-1)."""
    from kachedb_radix import accel

    vectors = (ROOT / "spec/vectors/snapshots.jsonl").read_text().splitlines()
    steps = [json.loads(line) for line in vectors]
    recording = record(steps, TreeAdapter(accel.RadixTree, "accel"), title="v", source="v")
    assert recording.first_difference is None
    assert recording.frames[0].levels == frozenset({"core", "eviction", "snapshots"})
    assert text_report(recording, frame_views(recording)).endswith(
        f"no difference in {len(recording.frames)} steps"
    )


def test_recording_refuses_a_trace_without_reset_or_with_a_broken_step() -> None:
    with pytest.raises(RecordError, match="starts with a reset"):
        record([{"op": "dump"}], title="t", source="s")
    with pytest.raises(RecordError, match="step 2 \\(insert\\): malformed"):
        record(
            [{"op": "reset", "num_blocks": 2, "block_size": 1}, {"op": "insert"}],
            title="",
            source="",
        )


class Flaky(TreeAdapter):
    """A target that stops answering at its second insert."""

    inserts = 0

    def insert(
        self,
        tokens: object,
        namespace: object,
        pin: bool,
        priority: object = None,
        retain_for: object = None,
    ) -> Any:
        Flaky.inserts += 1
        if Flaky.inserts == 2:
            raise CandidateFailure("the program died")
        return super().insert(tokens, namespace, pin, priority, retain_for)


def test_a_failing_target_stops_and_a_trace_it_cannot_run_is_skipped() -> None:
    """A protocol failure marks the step and stops the target; undeclared levels skip."""
    chosen = scenario("eviction")
    recording = record(chosen.steps, Flaky(reference.RadixTree, "flaky"), title="t", source="s")
    sides = [frame.sides[1] for frame in recording.frames]
    assert sides[2].note == "failed: the program died"
    assert recording.frames[2].difference == "failure" and recording.first_difference == 2
    assert sides[3].note == "stopped: the program died" and sides[3].outcome is None
    views = frame_views(recording)
    assert views[3][1]["outcome"] == "not run" and views[3][1]["tree"] == []
    assert "flaky: evict count=1  →  not run\n  stopped: the program died" in text_report(
        recording, views
    )
    plain = TreeAdapter(reference.RadixTree, "plain", levels=frozenset(LEVELS) - {"snapshots"})
    steps = [dict(scenario("snapshots").steps[0], levels=["core", "snapshots"])]
    steps += scenario("snapshots").steps[1:]
    skipped = record(steps, plain, title="t", source="s")
    assert skipped.frames[1].sides[1].note == "skipped: the trace needs levels snapshots"
    assert skipped.first_difference is None
    sized = TreeAdapter(reference.RadixTree, "b16", block_sizes=(16,))
    odd = record(scenario("split").steps, sized, title="t", source="s")
    assert odd.frames[0].sides[1].note == "skipped: block size 4 not supported"


class Undumpable(TreeAdapter):
    """A target whose dump is not a canonical dump."""

    def dump(self) -> dict[str, Any]:
        return {"block_size": 1, "namespaces": [{"namespace": None, "children": [{}]}]}


def test_an_undrawable_dump_is_reported_not_drawn() -> None:
    recording = record(
        scenario("split").steps[:2], Undumpable(reference.RadixTree, "odd"), title="t", source="s"
    )
    assert recording.frames[1].difference is not None
    view = frame_views(recording)[1][1]
    assert view["note"].startswith("its dump cannot be drawn: not a canonical dump")


# ---------------------------------------------------------------------- model and views


def test_index_refuses_what_is_not_a_dump() -> None:
    keys = KeySpace()
    with pytest.raises(ValueError, match="not a canonical dump"):
        index_dump({"namespaces": []}, keys)
    bad_edge = {"tokens": [1], "blocks": [0, 1], "children": []}
    dump = {**empty_dump(2, 1), "namespaces": [{"namespace": None, "children": [bad_edge]}]}
    with pytest.raises(ValueError, match="an edge of 2 blocks holds 1 tokens"):
        index_dump(dump, keys)


def test_walk_and_eviction_order_read_the_dump() -> None:
    """R-MATCH-1 and R-EVICT-2 recomputed from a dump alone; malformed input walks nothing."""
    tree = reference.RadixTree(8, 2)
    tree.insert([1, 2, 3, 4, 5, 6])
    tree.insert([1, 2, 9, 9], pin=True)
    keys = KeySpace()
    index = index_dump(tree.dump(), keys)
    assert [index.blocks[key].block for key in walk(index, keys, None, [1, 2, 3, 4, 7])] == [0, 1]
    assert walk(index, keys, "elsewhere", [1, 2]) == []
    assert walk(index, keys, None, "tokens") == walk(index, keys, 5, [1, 2]) == []
    assert [block.block for block in eviction_order(index)] == [2]
    assert index.quarantine == []


@pytest.mark.parametrize(
    ("op", "outcome", "text"),
    [
        ("match", None, "not run"),
        ("match", {"error": "token_type"}, "error: token_type"),
        ("release", {"ok": None}, "ok"),
        ("match", {"ok": {"length": 0, "blocks": [], "lease": None}}, "matched 0 tokens"),
        (
            "match",
            {"ok": {"length": 2, "blocks": [0, 1], "lease": 3}},
            "matched 2 tokens: #0-1, lease 3",
        ),
        ("evict", {"ok": {"freed": []}}, "freed nothing"),
        ("reclaim", {"ok": {"reclaimed": [2, 1]}}, "reclaimed 2,1"),
        (
            "reader",
            {"ok": {"snapshot": 1, "epoch": 2, "version": 3}},
            "reader 1 entered epoch 2 at version 3",
        ),
        ("snapshot", {"ok": {"snapshot": 1, "version": 3}}, "snapshot 1 of version 3"),
        ("stats", {"ok": {"free": 1, "cached": 2}}, "free 1, cached 2"),
        ("dump", {"ok": {"format": 2}}, "ok"),
    ],
)
def test_outcomes_in_words(op: str, outcome: dict[str, Any] | None, text: str) -> None:
    assert describe_outcome(op, outcome) == text


def test_steps_in_one_line() -> None:
    long = {"op": "insert", "tokens": list(range(20)), "namespace": "a", "pin": True, "note": "n"}
    assert describe_step(long) == 'insert [0 1 2 3 4 5 6 7 … (20 tokens)] namespace="a" pin'
    assert describe_step({"op": "match", "tokens": "abc", "namespace": None, "pin": False}) == (
        'match tokens="abc" no pin'
    )
    assert describe_step({"op": "evict", "count": 2, "expect": {}}) == "evict count=2"


def test_ordinals() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "111th",
    ]  # fmt: skip


def test_a_reset_that_the_tree_refuses_is_explained() -> None:
    """R-ERR-1: a bad pool size is refused; there is no state to draw."""
    recording = record([{"op": "reset", "num_blocks": 0, "block_size": 1}], title="t", source="s")
    (view,) = frame_views(recording)[0]
    assert view["outcome"] == "error: invalid_argument" and view["tree"] == []
    # The page embeds the rules it cites (the playground, every rule).
    page = build_page(recording, frame_views(recording))
    assert 'id="rule-R-ERR-1"' in page and page.count("<article") < len(load_rules())
    live = build_page(recording, frame_views(recording), all_rules=True)
    assert live.count("<article") == len(load_rules())


# ---------------------------------------------------------------------- drawings


def test_svg_slide_is_well_formed_and_marks_changes() -> None:
    _, views = run("eviction")
    view = views[step_of("eviction", "a new prompt")][0]
    text = slide(view, ["eviction: step 6/8", "a note"], 5)
    root = ElementTree.fromstring(text)
    ns = {"svg": "http://www.w3.org/2000/svg"}
    groups = root.findall(".//svg:g[@class]", ns)
    ghost = [g for g in groups if g.get("data-kind") == "ghost"]
    assert [g.get("data-blocks") for g in ghost] == ["3 4"]
    cells = root.findall(".//svg:rect[@data-block]", ns)
    assert [cell.get("data-change") for cell in cells][3:5] == ["allocated evicted"] * 2
    empty = {**view, "pool": None, "rules": []}
    assert ElementTree.fromstring(slide(empty, ["x"], 0)) is not None
    assert tree_svg([])[1:] == (20.0, 20.0)
    wide = pool_svg({"size": 130, "free": [], "quarantine": [], "pinned": [5]} | _no_changes())
    assert 'data-state="pinned"' in wide[0] and wide[2] == 36.0


def _no_changes() -> dict[str, list[int]]:
    return {name: [] for name in ("allocated", "freed", "evicted", "quarantined", "reclaimed")}


def test_page_is_self_contained_and_interns_nodes() -> None:
    """No address outside the page; equal subtrees stored once; the rules embedded."""
    recording, views = run("scale")
    page = build_page(recording, views)
    addresses = set(re.findall(r"(?:https?:)?//[\w.-]+", page))
    assert addresses <= {"http://www.w3.org"}  # the SVG namespace name, never fetched
    assert not re.search(r"<(?:script|link|img)[^>]+(?:src|href)=\"(?!data:|#)", page)
    data = page_data(recording, views)
    trees = [tree for row in views for view in row
             for tree in (view["tree"], *(sub["tree"] for sub in view["sub"]))]  # fmt: skip
    shown = sum(len(nodes(tree)) for tree in trees)
    assert len(data["nodes"]) < shown / 20
    assert (
        'id="rule-R-SPLIT-1"' in page
        and "</script>" not in page.split('id="explain-data">')[1].split("</script>")[0]
    )
    assert (
        rule_html("a `b`\n\n**Why.** c")
        == "<p>a <code>b</code></p>\n<p><strong>Why.</strong> c</p>\n"
    )
    # R-TOK-1, R-TOK-3: 2**32 in a code span is not bold; raw HTML is escaped.
    assert rule_html("in `[0, 2**32)`, <b>") == "<p>in <code>[0, 2**32)</code>, &lt;b&gt;</p>\n"
    assert "<code>[0, 2**32)</code>" in rules_html(["R-TOK-3"])


def test_text_report_prints_trees_only_when_something_changed() -> None:
    recording, views = run("split")
    report = text_report(recording, views)
    assert report.count("RadixTree  B=4") == 5
    assert "changed: allocated #3 · split before #2" in report
    assert "── step 9/9 · trace split ──  the canonical dump" in report
    bare = {"block_size": 1, "num_blocks": 1, "namespaces": [{"namespace": None, "children": [
        {"tokens": [1], "blocks": [0], "children": []}]}]}  # fmt: skip
    assert "1 block [1]  #0  t=0" in render_dump(_complete(bare))


# ---------------------------------------------------------------------- command line


def test_cli_writes_page_slides_text_and_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html, slides, saved = tmp_path / "p.html", tmp_path / "slides", tmp_path / "t.jsonl"
    args = ["explain", "--scenario", "pinning", "--html", str(html), "--svg", str(slides)]
    assert main([*args, "--text", "--save-trace", str(saved)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {html} (11 steps)" in out and "── step 11/11" in out
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert len(list(slides.glob("step-*-reference.svg"))) == 11
    assert main(["explain", str(saved)]) == 0
    assert "pins 0→1" in capsys.readouterr().out
    assert main(["explain", "--scenario", "split", "--html", str(html)]) == 0
    assert "── step" not in capsys.readouterr().out


def test_cli_side_by_side_exits_1_on_a_difference(capsys: pytest.CaptureFixture[str]) -> None:
    target = "kachedb_radix.spec.mutants.eviction:LruReversed"
    assert main(["explain", str(LRU_TRACE), "--target", target]) == 1
    assert "first difference at step 4" in capsys.readouterr().out
    serve = f"{sys.executable} -m kachedb_radix.spec.protocol.server --impl reference"
    assert main(["explain", "--scenario", "split", "--cmd", serve]) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give a TRACE file or --scenario NAME"),
        (["bad.jsonl", "--scenario", "split"], "give a TRACE file or --scenario NAME"),
        (["bad.jsonl"], "cannot read the trace: "),
        (["empty.jsonl"], "no steps (an empty trace checks nothing)"),
        (["noreset.jsonl"], "a trace starts with a reset step"),
        (["huge.jsonl"], "a pool of 99,999,999,999,999 blocks; explain draws every block"),
        (["refused.jsonl"], "step 2 follows a reset the reference refuses (invalid_argument"),
        (["alone.jsonl", "--target", "accel"], "step 1: the reference refuses this reset"),
        (["--scenario", "split", "--target", "nowhere"], "unknown target 'nowhere'"),
        (["--scenario", "split", "--target", "accel", "--cmd", "x"], "not both"),
        (["--scenario", "split", "--cmd", " "], "--cmd needs a program"),
        (["--scenario", "split", "--cmd", "/no/such/program"], "--cmd /no/such/program: "),
    ],
)
def test_cli_bad_input_is_exit_2_without_a_traceback(
    args: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.jsonl").write_text("not json\n")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "noreset.jsonl").write_text('{"op": "dump"}\n')
    # Issue 32: a MemoryError listing 10**14 free ids, and an AttributeError in the kit.
    (tmp_path / "huge.jsonl").write_text(
        '{"op": "reset", "num_blocks": 99999999999999, "block_size": 1}\n'
    )
    (tmp_path / "refused.jsonl").write_text(
        '{"op": "reset", "num_blocks": "x", "block_size": 4}\n{"op": "dump"}\n'
    )
    (tmp_path / "alone.jsonl").write_text('{"op": "reset", "num_blocks": 0, "block_size": 4}\n')
    assert main(["explain", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("explain: ") and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.jsonl"], "argument TRACE: missing.jsonl: no such file"),
        (["."], "argument TRACE: .: a directory, not a file"),
        (["--scenario", "split", "--html", "missing/dir/p.html"], "no directory missing/dir"),
        (["--scenario", "split", "--svg", "t.jsonl"], "t.jsonl: a file, not a directory"),
        (["--scenario", "split", "--save-trace", "."], "a directory; give a file name"),
        (["--scenario", "split", "--timeout", "nan"], "'nan' is not a finite number"),
        (["--scenario", "split", "--port", "70000"], "over the most allowed, 65,535"),
        (["--scenario", "split", "--events", "nope"], "invalid choice: 'nope'"),
    ],
)
def test_cli_options_are_checked_before_anything_runs(
    args: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 32: every option is refused at parse time, in one line, exit 2, writing
    nothing."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.jsonl").write_text("")
    with pytest.raises(SystemExit) as stop:
        main(["explain", *args])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["t.jsonl"]


def test_cli_a_write_that_fails_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that refuses the page after the checks passed (full, gone): one line."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", refuse)
    assert main(["explain", "--scenario", "split", "--html", str(tmp_path / "p.html")]) == 2
    assert "explain: cannot write: [Errno 28] No space left on device" in capsys.readouterr().err


def test_cli_unknown_scenario_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", "--scenario", "nope"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


class Sparse(TreeAdapter):
    """A target that keeps stamps to itself and cannot report stats."""

    def dump(self) -> dict[str, Any]:
        dump = super().dump()
        for space in dump["namespaces"]:
            for edge in nodes(space["children"]):
                edge.pop("stamps")
        return dump

    def stats(self) -> Any:
        raise CandidateError("unsupported", "no stats here")


def test_a_target_with_less_to_show_is_still_drawn() -> None:
    """No stamps: two label lines; no stats: the difference is in the stats."""
    recording = record(
        scenario("split").steps, Sparse(reference.RadixTree, "sparse"), title="t", source="s"
    )
    assert recording.frames[1].sides[1].stats is None
    assert recording.frames[1].difference == "dump.ok.namespaces[0].children[0].stamps"
    view = frame_views(recording)[1][1]
    assert view["tree"][0]["children"][0]["lines"] == ["3 blocks [10 11 12 13 …]", "#0-2"]


def test_a_tree_whose_dumps_disagree_with_the_trace_is_drawn_from_its_dumps() -> None:
    """A target whose block size is not the trace's: its own dumps decide what is drawn."""
    doubled = TreeAdapter(lambda blocks, size: reference.RadixTree(blocks, size * 2), "double")
    recording = record(scenario("split").steps[:2], doubled, title="t", source="s")
    view = frame_views(recording)[1][1]
    assert view["tree"][0]["children"][0]["lines"][0] == "1 block [10 11 12 13 …]"
    bad = record([{"op": "reset", "num_blocks": "x", "block_size": 1}], title="t", source="s")
    assert frame_views(bad)[0][0]["outcome"] == "error: invalid_argument"


def test_a_fan_out_folds_only_two_or_more() -> None:
    """Folding a single node into "+1 more" would hide it for nothing."""

    def leaf(index: int, flags: list[str]) -> Node:
        return {
            "id": f"n{index}",
            "kind": "edge",
            "lines": ["x"],
            "blocks": [index],
            "flags": flags,
            "children": [],
        }

    kids = [leaf(index, ["new"] if index == FANOUT else []) for index in range(FANOUT + 1)]
    root: Node = {
        "id": "r",
        "kind": "root",
        "lines": ["r"],
        "blocks": [],
        "flags": [],
        "children": kids,
    }
    (shown,) = visible([root])
    assert [child.node["id"] for child in shown.children] == [kid["id"] for kid in kids]
    kids.append(leaf(FANOUT + 1, []))
    (shown,) = visible([root])
    assert shown.children[-1].node["lines"][0] == "+2 more"


def test_readers_without_stats() -> None:
    keys = KeySpace()
    empty = index_dump(empty_dump(2, 1), keys)
    changes = diff(empty, empty)
    changes.quarantined = [1]
    assert explain_step(
        {"op": "evict", "count": 1}, {"ok": {"freed": []}}, empty, empty, changes, keys, None
    ) == [("readers and quarantine", ["quarantined now: 1", "quarantine: empty"])]


def test_the_eviction_key_of_each_policy_is_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R-POL-1, R-POL-3: under lfu the candidates are listed by their lfu keys, the
    victim's reason is stated, and the page carries each leaf's key for its block list."""
    trace = tmp_path / "lfu.jsonl"
    steps = [
        {"op": "reset", "num_blocks": 3, "block_size": 1, "policy": "lfu", "policy_options": None},
        {"op": "insert", "tokens": [1], "namespace": None, "pin": False},
        {"op": "match", "tokens": [1], "namespace": None, "pin": False},
        {"op": "insert", "tokens": [2], "namespace": None, "pin": False},
        {"op": "insert", "tokens": [3], "namespace": None, "pin": False},
        {"op": "insert", "tokens": [4], "namespace": None, "pin": False},
    ]
    trace.write_text("".join(json.dumps(step) + "\n" for step in steps))
    html = tmp_path / "p.html"
    assert main(["explain", str(trace), "--text", "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "eviction, in the spec's order (smallest lfu key leaf tail first)" in out
    assert "1. #1  hits=0 t=3  ← evicted 1st" in out and "next: #0  hits=1 t=2" in out
    assert "lfu: the fewest hits go first, then the least recently used (R-POL-3)" in out
    assert '"y":"hits=1 t=2"' in html.read_text()
