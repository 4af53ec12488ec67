"""The search and its report: every finding in one run, one per rule; the rule table;
the JSON under its published schema; the HTML report page; swarm examples that reach
large, deep and wide trees; the operation budget."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kachedb_radix import reference
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.candidate import CandidateFailure
from kachedb_radix.spec.conform.generate import RandomChooser
from kachedb_radix.spec.conform.levels import LEVELS
from kachedb_radix.spec.conform.lockstep import Difference
from kachedb_radix.spec.conform.page import render, write_report
from kachedb_radix.spec.conform.profile import parse
from kachedb_radix.spec.conform.run import (
    KitReport,
    KitSettings,
    choose_block_sizes,
    choose_pool,
    dumps,
    run_kit,
)
from kachedb_radix.spec.conform.search import (
    Session,
    StopSearch,
    Swarm,
    _reopen,
    draw_swarm,
    run_example,
)
from kachedb_radix.spec.mutants.eviction import EvictedIdsSorted
from kachedb_radix.spec.mutants.recency import ClockFrozenOnMatch
from tests.support.paths import ROOT

SCHEMA = json.loads((ROOT / "spec" / "conform" / "report.schema.json").read_text())
QUICK = KitSettings(examples=80, budget=10_000)


class TwoBugs(reference.RadixTree):
    """Evicted ids reported sorted (R-EVICT-4) and the clock frozen on matches (R-LRU-3)."""

    def evict(self, count: int) -> tuple[int, ...]:
        return tuple(sorted(super().evict(count)))

    def match(self, tokens: object, namespace: str | None = None, *, pin: bool = False) -> Any:
        result = super().match(tokens, namespace, pin=pin)
        self._clock -= 1
        return result


@pytest.mark.slow  # no branch only it covers: the CI coverage run leaves it out (.ci/run)
def test_every_finding_in_one_run_one_trace_per_rule() -> None:
    """R-EVICT-4, R-LRU-3: the search goes on after a finding and reports each rule once,
    shrunk; ``first`` stops at the first."""
    report = run_kit(TreeAdapter(TwoBugs, "two"), kit=QUICK)
    rules = [found.rule for found in report.findings]
    assert {"R-EVICT-4", "R-LRU-3"} <= set(rules) and len(rules) == len(set(rules))
    for found in report.findings:
        assert len(found.trace) <= 8 and found.cause
    rows = {row.rule: row for row in report.table()}
    assert rows["R-EVICT-4"].status == "fail" and rows["R-MATCH-1"].status == "pass"
    assert rows["R-TOK-4"].status == "not exercised" and "buffer" in rows["R-TOK-4"].reason
    assert report.first_finding_seconds is not None and report.verdict == "disagreement"
    assert report.headline().startswith("disagreement: ")
    first = run_kit(TreeAdapter(TwoBugs, "two"), kit=KitSettings(first=True))
    assert len(first.findings) == 1 and first.examples < report.examples


def test_the_json_follows_its_published_schema(tmp_path: Path) -> None:
    """R-DUMP-1: --json and report.json validate against spec/conform/report.schema.json."""
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    reports = [
        run_kit(TreeAdapter(reference.RadixTree, "reference"), kit=KitSettings(budget=3_000)),
        run_kit(TreeAdapter(EvictedIdsSorted, "sorted"), kit=KitSettings(first=True)),
    ]
    document = json.loads(dumps(reports))
    validator.validate(document)
    ok, bad = document["results"]
    assert ok["verdict"] == "pass" and ok["rules_exercised"] > 30
    assert bad["findings"][0]["rule"] == "R-EVICT-4"
    failing = [row for row in bad["table"] if row["status"] == "fail"]
    assert failing and failing[0]["finding"] == 0
    written = write_report(reports, tmp_path / "report")
    assert [path.name for path in written] == ["index.html", "report.json"]
    validator.validate(json.loads(written[1].read_text()))
    page = written[0].read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert "R-EVICT-4" in page and 'href="#sorted-R-EVICT-4"' in page and "<details>" in page


def _profile_schema(node: Any) -> Any:
    if isinstance(node, dict):
        properties = node.get("properties", {})
        if "tolerate" in properties and "index" in properties:
            return node
        for value in node.values():
            found = _profile_schema(value)
            if found is not None:
                return found
    return None


def test_the_schema_names_every_profile_value() -> None:
    """A profile's tolerances and ``[index]`` choices, in the schema exactly as the
    profile tables allow them (a value added to one must reach the other)."""
    from kachedb_radix.spec.conform.profile import INDEX_MODES, MODES

    profile = _profile_schema(SCHEMA)
    tolerate = profile["properties"]["tolerate"]["properties"]
    assert {key: tuple(value["enum"]) for key, value in tolerate.items()} == MODES
    index = profile["properties"]["index"]["properties"]
    assert {key: tuple(value["enum"]) for key, value in index.items()} == INDEX_MODES


def test_the_page_shows_waivers_and_unchecked_levels() -> None:
    """R-TOK-3, R-SNAP-1: waived rules show their reason; undeclared levels are marked."""
    profile = parse({"waive": {"R-TOK-3": "ids are <int64>"}})
    candidate = TreeAdapter(reference.RadixTree, "plain", frozenset({"core"}))
    report = run_kit(candidate, kit=KitSettings(examples=10), profile=profile)
    page = render([report])
    assert "ids are &lt;int64&gt;" in page and "not checked" in page
    assert report.verdict == "conforms with declared deviations"
    assert report.headline() == "conforms with declared deviations: R-TOK-3"
    assert "profile" in page


def test_swarm_examples_vary_and_reach_far() -> None:
    """Swarm configurations: every pool scale and length scale, kinds left out."""
    session = Session(TreeAdapter(reference.RadixTree, "r"), frozenset(LEVELS), max_steps=300)
    swarms = [draw_swarm(RandomChooser(seed), session) for seed in range(200)]
    pools = [swarm.num_blocks for swarm in swarms]
    assert min(pools) <= 12 and max(pools) > 1000
    assert (
        max(swarm.length for swarm in swarms) > 120 and min(swarm.length for swarm in swarms) < 10
    )
    assert any("reader" not in swarm.kinds for swarm in swarms)
    assert any("fill" in swarm.kinds for swarm in swarms)
    narrow = Session(session.candidate, frozenset({"core"}), pool=(5, 6))
    assert {draw_swarm(RandomChooser(seed), narrow).num_blocks for seed in range(40)} <= {5, 6}


def test_fills_build_large_trees_without_eviction_when_it_is_not_declared() -> None:
    """R-INS-5: at the core level a fill never issues an insert that would evict."""
    session = Session(TreeAdapter(reference.RadixTree, "r"), frozenset({"core"}))
    swarm = Swarm(2, 200, 3, ("fill",))
    import kachedb_radix.spec.conform.search as machine

    original = machine.draw_swarm
    machine.draw_swarm = lambda chooser, ses: swarm  # type: ignore[assignment]
    try:
        run_example(session, RandomChooser(3))
    finally:
        machine.draw_swarm = original
    assert not session.findings and session.operations > 3


def test_the_budget_stops_the_search() -> None:
    report = run_kit(TreeAdapter(reference.RadixTree, "r"), kit=KitSettings(budget=300))
    assert report.passed and report.examples < 300


def test_a_failing_candidate_without_restart_stops_the_search() -> None:
    session = Session(TreeAdapter(reference.RadixTree, "r"), frozenset({"core"}))
    with pytest.raises(StopSearch):
        _reopen(session)

    def refuse() -> Any:
        raise CandidateFailure("will not start")

    session.reopen = refuse
    with pytest.raises(StopSearch, match="cannot be restarted"):
        _reopen(session)


def test_waived_findings_are_kept_apart() -> None:
    """R-LRU-3: a disagreement on a waived rule is not a failure."""
    profile = parse({"waive": {"R-LRU-3": "our clock is our own"}})
    report = run_kit(
        TreeAdapter(ClockFrozenOnMatch, "m"), kit=KitSettings(budget=3_000), profile=profile
    )
    assert report.passed, report.explain()
    assert [found.rule for found in report.waived] == ["R-LRU-3"]
    assert json.loads(dumps([report]))["results"][0]["waived_findings"][0]["rule"] == "R-LRU-3"


def test_block_sizes_and_pools_follow_candidate_and_profile() -> None:
    candidate = TreeAdapter(reference.RadixTree, "r", block_sizes=(2, 16))
    assert choose_block_sizes(candidate, (1, 2, 3)) == (2,)
    assert choose_block_sizes(candidate, (1, 3)) == (2,)
    profile = parse({"block_sizes": [16], "pool_sizes": [10, 20]})
    assert choose_block_sizes(candidate, (1, 2, 16), profile) == (16,)
    assert choose_block_sizes(TreeAdapter(reference.RadixTree, "any"), (1, 2), profile) == (16,)
    assert choose_block_sizes(TreeAdapter(reference.RadixTree, "any"), (1, 2)) == (1, 2)
    assert choose_pool((2, 4096), profile) == (10, 20)
    assert choose_pool((30, 40), profile) == (10, 20)


def test_failures_in_a_report() -> None:
    failure = Difference(
        index=1,
        trace=[{"op": "reset"}, {"op": "dump"}],
        expected={"ok": None},
        actual={"failure": "dump: no answer"},
        reference="reference",
        candidate="x",
        kind="failure",
        rules=("R-DUMP-1",),
        cause="could not answer",
    )
    report = KitReport("x", ["core"], findings=[failure])
    assert report.verdict == "failure" and report.difference is None
    assert report.failure == "x failed at dump: no answer" and report.failure_trace
    assert "fails at step 2" in report.explain()


def test_a_run_depends_on_its_seed_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hypothesis draws constants found in imported local modules; the kit's seeds come
    from a range no literal falls in, so importing more code changes nothing."""
    before = run_kit(TreeAdapter(TwoBugs, "two"), kit=KitSettings(first=True, shrink=False))
    module = tmp_path / "kit_constants_probe.py"
    module.write_text("VALUES = [" + ", ".join(str(value) for value in range(0, 5000, 7)) + "]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("kit_constants_probe")

    after = run_kit(TreeAdapter(TwoBugs, "two"), kit=KitSettings(first=True, shrink=False))
    assert before.findings[0].trace == after.findings[0].trace
    assert before.examples == after.examples
