"""The conformance kit in-process: lockstep, reports, levels, targets, replay and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kachedb_radix import reference
from kachedb_radix.spec.cli import conform
from kachedb_radix.spec.conform.adapter import TreeAdapter, supported_levels
from kachedb_radix.spec.conform.levels import (
    KIT_LEVELS,
    LEVELS,
    OPT_IN_LEVELS,
    LevelError,
    ordered,
    parse_levels,
)
from kachedb_radix.spec.conform.lockstep import Disagreement, Lockstep
from kachedb_radix.spec.conform.replay import TraceError, parse_trace, replay
from kachedb_radix.spec.conform.run import KitSettings, run_kit
from kachedb_radix.spec.conform.steps import LeaseBook, apply_step, normalise
from kachedb_radix.spec.conform.targets import TargetError, resolve, wrap
from kachedb_radix.spec.mutants.eviction import EvictedIdsSorted
from kachedb_radix.spec.mutants.recency import ClockFrozenOnMatch
from kachedb_radix.spec.mutants.snapshots import EvictTrimsInPlace, SnapshotReadsLiveTree
from tests.conftest import IMPLEMENTATIONS

SMALL = KitSettings(examples=40, budget=5_000, shrink_seconds=5)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_every_implementation_conforms(name: str) -> None:
    """The differential machine finds no disagreement (all levels; the committed report,
    tests/kit/test_committed_report.py, and CI's long run search further)."""
    settings = KitSettings(examples=150, budget=15_000)
    report = run_kit(TreeAdapter(IMPLEMENTATIONS[name], name), kit=settings)
    assert report.passed, report.explain()
    assert report.levels == ordered(supported_levels(IMPLEMENTATIONS[name]) - OPT_IN_LEVELS)
    assert report.levels[:4] == ["core", "pinning", "eviction", "namespaces"]


def test_snapshots_level_is_declared_by_trees_that_offer_it() -> None:
    """R-SNAP-2: the level is optional; a tree class without snapshots is checked without it."""

    class Unpublished(reference.RadixTree):
        snapshot = None  # type: ignore[assignment]

    assert supported_levels(reference.RadixTree) == frozenset(KIT_LEVELS) - {"tiers"}
    assert supported_levels(reference.RadixTree, reference.TieredTree) == frozenset(KIT_LEVELS)
    assert "snapshots" not in supported_levels(type("Plain", (), {"reader": 1}))
    adapter = TreeAdapter(Unpublished, "plain", levels=supported_levels(reference.RadixTree))
    assert "snapshots" in adapter.levels
    report = run_kit(TreeAdapter(type("Bare", (), {}), "bare"), kit=KitSettings(examples=1))
    assert "snapshots" not in report.levels


def test_snapshot_steps_in_lockstep() -> None:
    """R-SNAP-1, R-SNAP-2, R-EPOCH-1..4: handles, versions, epochs, quarantine and reclaim."""
    lockstep = Lockstep(TreeAdapter(reference.RadixTree, "twin"), frozenset(LEVELS))
    lockstep.run({"op": "reset", "num_blocks": 3, "block_size": 1})
    lockstep.run({"op": "insert", "tokens": [1, 2, 3], "namespace": None, "pin": False})
    assert lockstep.run({"op": "snapshot"}) == {"ok": {"snapshot": 1, "version": 1}}
    assert lockstep.run({"op": "reader"}) == {"ok": {"snapshot": 2, "epoch": 1, "version": 1}}
    assert lockstep.inside == [2]
    assert lockstep.run({"op": "evict", "count": 2}) == {"ok": {"freed": [2, 1]}}
    stats = lockstep.run({"op": "stats"})["ok"]
    assert (stats["quarantined"], stats["readers"], stats["oldest_reader"]) == (2, 1, 1)
    assert stats["version"] == 2 and stats["free"] + stats["cached"] + 2 == 3
    assert lockstep.run({"op": "dump"})["ok"]["quarantine"] == [2, 1]
    found = {"op": "snapshot_match", "snapshot": 1, "tokens": [1, 2, 3], "namespace": None}
    assert lockstep.run(found) == {"ok": {"length": 3, "blocks": [0, 1, 2]}}
    shape = lockstep.run({"op": "snapshot_dump", "snapshot": 2})["ok"]
    assert (shape["version"], shape["namespaces"][0]["children"][0]["blocks"]) == (1, [0, 1, 2])
    assert lockstep.run({"op": "insert", "tokens": [7], "namespace": None, "pin": False}) == {
        "error": "out_of_blocks"
    }
    assert lockstep.run({"op": "reclaim"}) == {"ok": {"reclaimed": []}}
    assert lockstep.run({"op": "leave", "snapshot": 2}) == {"ok": None}
    assert lockstep.inside == [] and lockstep.left == [2]
    assert lockstep.run({"op": "leave", "snapshot": 2}) == {"error": "reader_left"}
    assert lockstep.run({"op": "reclaim"}) == {"ok": {"reclaimed": [2, 1]}}
    bad = {"op": "snapshot_match", "snapshot": 1, "tokens": [1, -1], "namespace": 3}
    assert lockstep.run(bad) == {"error": "token_range"}


def test_a_snapshot_changed_by_a_later_write_is_caught_at_that_write() -> None:
    """R-SNAP-2: the latest snapshots are dumped after every step, so an in-place change
    of a published node shows at the eviction that made it."""
    lockstep = Lockstep(TreeAdapter(EvictTrimsInPlace, "trim"), frozenset(LEVELS))
    lockstep.run({"op": "reset", "num_blocks": 4, "block_size": 1})
    lockstep.run({"op": "insert", "tokens": [1, 2, 3], "namespace": None, "pin": False})
    lockstep.run({"op": "snapshot"})
    with pytest.raises(Disagreement) as raised:
        lockstep.run({"op": "evict", "count": 1})
    difference = raised.value.difference
    assert difference.trace[-1]["op"] == "snapshot_dump"
    assert _diff_path(difference.expected, difference.actual) == (
        ".ok.namespaces[0].children[0].tokens (length 3 vs 2)"
    )


@pytest.mark.slow
def test_a_torn_snapshot_read_is_reported() -> None:
    """R-SNAP-2: the kit finds a snapshot match that walks the live tree."""
    settings = KitSettings(examples=100, budget=10_000, shrink_seconds=5)
    report = run_kit(TreeAdapter(SnapshotReadsLiveTree, "torn"), kit=settings)
    assert report.verdict == "disagreement"
    assert report.difference is not None
    assert report.difference.trace[-1]["op"] == "snapshot_match"
    # Without the snapshots level the same tree conforms.
    old = run_kit(
        TreeAdapter(SnapshotReadsLiveTree, "torn"),
        parse_levels(["pinning,eviction,namespaces"]),
        SMALL,
    )
    assert old.passed, old.explain()


def _diff_path(expected: Any, actual: Any) -> str | None:
    from kachedb_radix.spec.conform.lockstep import first_difference

    return first_difference(expected, actual, "")


def test_a_bug_is_reported_as_a_short_trace() -> None:
    """R-EVICT-4: the finding names its rule and cause, and shrinks to a few steps."""
    report = run_kit(TreeAdapter(EvictedIdsSorted, "sorted"), kit=KitSettings(first=True))
    assert report.verdict == "disagreement"
    difference = report.difference
    assert difference is not None
    last = difference.trace[-1]
    assert last["op"] == "evict" and last["expect"] != last["actual"]
    assert difference.trace[0]["op"] == "reset"
    assert len(difference.trace) <= 5  # reset, one or two inserts, the evict
    text = report.explain()
    assert "sorted disagrees with reference" in text and '"op": "evict"' in text
    found = json.loads(json.dumps(report.to_json()))["findings"][0]
    assert found["step"] == len(difference.trace) and found["rule"] == "R-EVICT-4"
    assert "R-EVICT-4" in text and "ascending order, not eviction order" in text
    # The reported trace replays: the candidate still differs at the same step.
    again = replay(difference.trace, TreeAdapter(EvictedIdsSorted, "sorted"))
    assert again.difference is not None
    assert again.difference.index == difference.index
    assert replay(difference.trace, TreeAdapter(reference.RadixTree, "ref")).passed


@pytest.mark.slow
def test_search_is_deterministic() -> None:
    first = run_kit(TreeAdapter(ClockFrozenOnMatch, "m"), kit=SMALL)
    second = run_kit(TreeAdapter(ClockFrozenOnMatch, "m"), kit=SMALL)
    assert first.difference is not None and second.difference is not None
    assert first.difference.trace == second.difference.trace


@pytest.mark.slow
def test_core_level_ignores_clock_and_stamps() -> None:
    """Without the eviction level a clock bug is not a disagreement (and no evict runs)."""
    core = run_kit(TreeAdapter(ClockFrozenOnMatch, "m"), parse_levels(["core"]), SMALL)
    assert core.passed, core.explain()
    assert core.levels == ["core"]
    assert not run_kit(
        TreeAdapter(ClockFrozenOnMatch, "m"), parse_levels(["eviction"]), SMALL
    ).passed


def test_undeclared_level_is_refused() -> None:
    candidate = TreeAdapter(reference.RadixTree, "r", frozenset({"core"}))
    with pytest.raises(LevelError, match="does not declare"):
        run_kit(candidate, parse_levels(["pinning"]), SMALL)
    with pytest.raises(LevelError, match="unknown level"):
        parse_levels(["core,snapshot"])


def test_normalise_strips_clock_and_stamps_without_eviction() -> None:
    tree = TreeAdapter(reference.RadixTree, "r")
    book = LeaseBook()
    apply_step(tree, {"op": "reset", "num_blocks": 4, "block_size": 1}, book)
    apply_step(tree, {"op": "insert", "tokens": [1, 2], "namespace": None, "pin": True}, book)
    dump = normalise("dump", apply_step(tree, {"op": "dump"}, book), frozenset({"core"}))
    assert "clock" not in dump["ok"]
    assert "stamps" not in dump["ok"]["namespaces"][0]["children"][0]
    stats = normalise("stats", apply_step(tree, {"op": "stats"}, book), frozenset({"core"}))
    assert "clock" not in stats["ok"] and stats["ok"]["leases"] == 1
    assert "version" not in stats["ok"] and "quarantined" not in stats["ok"]
    apply_step(tree, {"op": "snapshot"}, book)
    shape = normalise(
        "snapshot_dump",
        apply_step(tree, {"op": "snapshot_dump", "snapshot": 1}, book),
        frozenset({"core", "snapshots"}),
    )
    assert "clock" not in shape["ok"] and shape["ok"]["version"] == 1
    full = normalise("stats", apply_step(tree, {"op": "stats"}, book), frozenset(LEVELS))
    assert full["ok"]["version"] == 1 and full["ok"]["oldest_reader"] is None


def test_lease_handles_and_foreign_leases() -> None:
    """Handles number leases per reset; handle 0 is foreign (R-PIN-5), reuse is R-PIN-4."""
    lockstep = Lockstep(TreeAdapter(reference.RadixTree, "twin"), frozenset({"core", "pinning"}))
    lockstep.run({"op": "reset", "num_blocks": 4, "block_size": 1})
    hit = lockstep.run({"op": "insert", "tokens": [1], "namespace": None, "pin": True})
    assert hit["ok"]["lease"] == 1 and lockstep.live == [1]
    assert lockstep.run({"op": "release", "lease": 0}) == {"error": "foreign_lease"}
    assert lockstep.run({"op": "release", "lease": 1}) == {"ok": None}
    assert lockstep.run({"op": "release", "lease": 1}) == {"error": "lease_released"}
    assert lockstep.live == []


def test_strict_comparison_of_types() -> None:
    class BoolLength(TreeAdapter):
        def match(self, tokens: object, namespace: object, pin: bool) -> Any:
            answer = dict(super().match(tokens, namespace, pin))
            answer["length"] = float(answer["length"])  # type: ignore[arg-type]
            return answer

    lockstep = Lockstep(BoolLength(reference.RadixTree, "float"), frozenset({"core"}))
    lockstep.run({"op": "reset", "num_blocks": 4, "block_size": 1})
    with pytest.raises(Disagreement, match="float disagrees"):
        lockstep.run({"op": "match", "tokens": [1], "namespace": None, "pin": False})


def test_targets() -> None:
    assert resolve("reference").name == "reference"
    frozen = resolve("kachedb_radix.spec.mutants.recency:ClockFrozenOnMatch")
    assert frozen.name.endswith("ClockFrozenOnMatch")
    direct = TreeAdapter(reference.RadixTree, "direct")
    assert wrap(direct, "x") is direct
    assert wrap(lambda: direct, "x") is direct
    for bad in ("nonsense", "no_such_module_xyz:Tree", "reference:NoSuchThing", "json:dumps"):
        with pytest.raises(TargetError):
            resolve(bad)


def test_replay_rejects_malformed_traces(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="not JSON"):
        parse_trace(["{"])
    with pytest.raises(TraceError, match="not a step"):
        parse_trace(['{"op": "fly"}'])
    with pytest.raises(TraceError, match="starts with a reset"):
        replay([{"op": "dump"}], TreeAdapter(reference.RadixTree, "r"))


def test_cli_conform_and_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert conform.main(["conform", "reference", "--examples", "10"]) == 0
    out = capsys.readouterr().out
    assert "reference: PASS" in out and "summary:" in out

    status = conform.main(
        ["conform", "kachedb_radix.spec.mutants.eviction:EvictedIdsSorted", "--first", "--json"]
    )
    assert status == 1
    result = json.loads(capsys.readouterr().out)["results"][0]
    assert result["verdict"] == "disagreement" and result["findings"][0]["rule"] == "R-EVICT-4"
    trace = tmp_path / "bug.jsonl"
    trace.write_text("\n".join(json.dumps(step) for step in result["findings"][0]["trace"]))

    assert conform.main(["replay", str(trace), "--target", "reference"]) == 0
    assert "every answer as expected" in capsys.readouterr().out
    assert (
        conform.main(
            [
                "replay",
                str(trace),
                "--target",
                "kachedb_radix.spec.mutants.eviction:EvictedIdsSorted",
            ]
        )
        == 1
    )
    assert "disagrees" in capsys.readouterr().out

    assert conform.main(["conform", "nonsense"]) == 2
    assert conform.main(["conform"]) == 2
    with pytest.raises(SystemExit) as stop:  # refused while parsing (issue 32)
        conform.main(["conform", "reference", "--levels", "warp"])
    assert stop.value.code == 2 and "unknown 'warp'" in capsys.readouterr().err
