"""The conformance kit in-process: lockstep, reports, levels, targets, replay and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import reference
from kachedb_radix import conform
from spec.adapter import TreeAdapter
from spec.levels import LevelError, parse_levels
from spec.lockstep import Disagreement, Lockstep
from spec.mutants.eviction import EvictedIdsSorted
from spec.mutants.recency import ClockFrozenOnMatch
from spec.replay import TraceError, parse_trace, replay
from spec.runner import KitSettings, run_kit
from spec.steps import LeaseBook, apply_step, normalise
from spec.targets import TargetError, resolve, wrap
from tests.conftest import IMPLEMENTATIONS

SMALL = KitSettings(examples=40)


@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_every_implementation_conforms(name: str) -> None:
    """The differential machine finds no disagreement (all levels, default search)."""
    report = run_kit(TreeAdapter(IMPLEMENTATIONS[name], name), kit=KitSettings(examples=150))
    assert report.passed, report.explain()
    assert report.levels == ["core", "pinning", "eviction", "namespaces"]


def test_a_bug_is_reported_as_a_short_trace() -> None:
    report = run_kit(TreeAdapter(EvictedIdsSorted, "sorted"))
    assert report.verdict == "disagreement"
    difference = report.difference
    assert difference is not None
    last = difference.trace[-1]
    assert last["op"] == "evict" and last["expect"] != last["actual"]
    assert difference.trace[0]["op"] == "reset"
    assert len(difference.trace) <= 5  # reset, one or two inserts, the evict
    text = report.explain()
    assert "sorted disagrees with reference" in text and '"op": "evict"' in text
    assert json.loads(json.dumps(report.to_json()))["difference"]["step"] == len(difference.trace)
    # The reported trace replays: the candidate still differs at the same step.
    again = replay(difference.trace, TreeAdapter(EvictedIdsSorted, "sorted"))
    assert again.difference is not None
    assert again.difference.index == difference.index
    assert replay(difference.trace, TreeAdapter(reference.RadixTree, "ref")).passed


def test_search_is_deterministic() -> None:
    first = run_kit(TreeAdapter(ClockFrozenOnMatch, "m"), kit=SMALL)
    second = run_kit(TreeAdapter(ClockFrozenOnMatch, "m"), kit=SMALL)
    assert first.difference is not None and second.difference is not None
    assert first.difference.trace == second.difference.trace


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
    assert resolve("spec.mutants.recency:ClockFrozenOnMatch").name.endswith("ClockFrozenOnMatch")
    direct = TreeAdapter(reference.RadixTree, "direct")
    assert wrap(direct, "x") is direct
    assert wrap(lambda: direct, "x") is direct
    for bad in ("nonsense", "no_such_module_xyz:Tree", "reference:NoSuchThing", "json:dumps"):
        with pytest.raises(TargetError):
            resolve(bad)


def test_accel_target_is_clear_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "accel", None)  # makes `import accel` fail
    with pytest.raises(TargetError, match="C twin"):
        resolve("accel")


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
        ["conform", "spec.mutants.eviction:EvictedIdsSorted", "--examples", "100", "--json"]
    )
    assert status == 1
    result = json.loads(capsys.readouterr().out)["results"][0]
    assert result["verdict"] == "disagreement"
    trace = tmp_path / "bug.jsonl"
    trace.write_text("\n".join(json.dumps(step) for step in result["difference"]["trace"]))

    assert conform.main(["replay", str(trace), "--target", "reference"]) == 0
    assert "every answer as expected" in capsys.readouterr().out
    assert (
        conform.main(["replay", str(trace), "--target", "spec.mutants.eviction:EvictedIdsSorted"])
        == 1
    )
    assert "disagrees" in capsys.readouterr().out

    assert conform.main(["conform", "nonsense"]) == 2
    assert conform.main(["conform"]) == 2
    assert conform.main(["conform", "reference", "--levels", "warp"]) == 2
    assert "unknown level" in capsys.readouterr().err
