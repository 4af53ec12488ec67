"""Shrinking: findings shrink to short traces, handles stay valid (a ``leave`` always names
a reader, a ``release`` a lease the candidate issued), and crashes and garbage answers
shrink too."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.candidate import CandidateFailure
from kachedb_radix.spec.conform.lockstep import Difference
from kachedb_radix.spec.conform.run import KitSettings, run_kit
from kachedb_radix.spec.conform.shrink import (
    Ref,
    Shrinker,
    _Invalid,
    concrete,
    plain_trace,
    symbolic,
)
from kachedb_radix.spec.mutants import MUTANTS
from kachedb_radix.spec.mutants.recency import ClockFrozenOnMatch
from kachedb_radix.spec.protocol.client import StdioCandidate
from tests.support.paths import ROOT

LEVELS = frozenset({"core", "pinning", "eviction", "namespaces", "snapshots"})


def _valid_handles(trace: list[dict[str, Any]]) -> None:
    """Every handle names something issued, and every leave a reader."""
    kinds: list[str] = []
    leases = 0
    for step in trace:
        op = step["op"]
        answer = step.get("expect", {}).get("ok")
        if op == "reset":
            kinds, leases = [], 0
        if op in ("snapshot", "reader") and isinstance(answer, dict):
            kinds.append(op)
        if op in ("match", "insert") and isinstance(answer, dict) and answer.get("lease"):
            leases += 1
        if op == "leave":
            assert kinds[step["snapshot"] - 1] == "reader", trace
        if op in ("snapshot_match", "snapshot_dump"):
            assert 1 <= step["snapshot"] <= len(kinds), trace
        if op == "release":
            assert 0 <= step["lease"] <= leases, trace


def test_symbolic_handles_follow_their_steps() -> None:
    trace: list[dict[str, Any]] = [
        {"op": "reset", "num_blocks": 4, "block_size": 1},
        {
            "op": "insert",
            "tokens": [1],
            "namespace": None,
            "pin": True,
            "expect": {"ok": {"lease": 1}},
        },
        {"op": "reader", "expect": {"ok": {"snapshot": 1}}},
        {"op": "release", "lease": 1},
        {"op": "release", "lease": 0},
        {"op": "leave", "snapshot": 1},
    ]
    steps = symbolic(trace)
    assert steps[3]["lease"] == Ref(1) and steps[4]["lease"] == Ref(-1)
    assert steps[5]["snapshot"] == Ref(2)
    assert concrete(steps[4], {}) == {"op": "release", "lease": 0}
    assert concrete(steps[5], {2: 7})["snapshot"] == 7 and "_sid" not in concrete(steps[0], {})
    with pytest.raises(_Invalid):
        concrete(steps[5], {})
    assert plain_trace(steps)[3]["lease"] == 1


def test_a_dropped_reader_takes_its_leave_along() -> None:
    """R-EPOCH-4, R-LRU-3: shrinking a finding whose trace holds readers, snapshots and
    leases never names a plain snapshot in a leave, nor a lease never issued."""
    steps: list[dict[str, Any]] = [
        {"op": "reset", "num_blocks": 6, "block_size": 1},
        {"op": "snapshot"},
        {"op": "reader"},
        {"op": "insert", "tokens": [1, 2], "namespace": None, "pin": True},
        {"op": "reader"},
        {"op": "leave", "snapshot": 2},
        {"op": "release", "lease": 1},
        {"op": "leave", "snapshot": 3},
        {"op": "match", "tokens": [1, 2], "namespace": None, "pin": False},
    ]
    from kachedb_radix.spec.conform.lockstep import Disagreement, Lockstep

    lockstep = Lockstep(TreeAdapter(ClockFrozenOnMatch, "frozen"), LEVELS)
    with pytest.raises(Disagreement) as raised:
        for step in steps:
            lockstep.run(step)
    finding = raised.value.difference
    shrunk = Shrinker(TreeAdapter(ClockFrozenOnMatch, "frozen"), LEVELS).shrink(finding, 20)
    assert shrunk.rule == finding.rule == "R-LRU-3"
    assert len(shrunk.trace) < len(finding.trace)
    _valid_handles(shrunk.trace)


@pytest.mark.parametrize(
    "name", ["early_reuse", "leave_twice_accepted", "reclaim_checks_newest_reader"]
)
def test_snapshot_mutants_shrink_without_crashing_the_kit(name: str) -> None:
    """R-EPOCH-1, R-EPOCH-2, R-EPOCH-4: with shrinking on, the kit used to crash on these
    (a shrunk trace left a leave naming a plain snapshot)."""
    mutant = MUTANTS[name]
    report = run_kit(TreeAdapter(mutant.tree, name), kit=KitSettings(first=True, shrink_seconds=10))
    assert report.findings, report.explain()
    for found in report.findings:
        _valid_handles(found.trace)
        assert len(found.trace) <= 12


def test_a_finding_that_does_not_replay_is_kept_as_it_is() -> None:
    finding = Difference(
        index=1,
        trace=[{"op": "reset", "num_blocks": 2, "block_size": 1}, {"op": "dump"}],
        expected={"ok": {}},
        actual={"ok": {}},
        reference="reference",
        candidate="x",
        rules=("R-DUMP-1",),
    )
    assert Shrinker(TreeAdapter(ClockFrozenOnMatch, "x"), LEVELS).shrink(finding, 1) is finding


def _server(tmp_path: Path, misbehaviour: str) -> list[str]:
    """A stdio server for the reference that misbehaves on an insert with a pin."""
    script = tmp_path / "server.py"
    root = ROOT
    script.write_text(
        textwrap.dedent(
            f"""
            import json, sys
            sys.path.insert(0, {str(root)!r})
            from kachedb_radix import reference
            from kachedb_radix.spec.conform.adapter import TreeAdapter
            from kachedb_radix.spec.protocol.server import answer
            tree = TreeAdapter(reference.RadixTree, "shaky")
            for line in sys.stdin:
                request = json.loads(line)
                if request.get("op") == "insert" and request.get("pin") is True:
                    {misbehaviour}
                print(json.dumps(answer(tree, line)), flush=True)
            """
        )
    )
    return [sys.executable, str(script)]


@pytest.mark.parametrize(
    "misbehaviour",
    ["sys.exit(3)", "print('garbage', flush=True); continue"],
    ids=["crash", "garbage"],
)
def test_crash_and_garbage_traces_shrink(tmp_path: Path, misbehaviour: str) -> None:
    """A program that dies (or answers garbage) is restarted for each trial, and the
    failure is reported with the few steps that cause it, not the whole example."""
    argv = _server(tmp_path, misbehaviour)

    def reopen() -> StdioCandidate:
        return StdioCandidate(argv, timeout=5)

    candidate = reopen()
    try:
        report = run_kit(
            candidate,
            frozenset({"core", "pinning"}),
            KitSettings(first=True, shrink_seconds=8),
            reopen=reopen,
        )
    finally:
        candidate.close()
    assert report.verdict == "failure" and report.failure is not None
    found = report.findings[0]
    assert found.kind == "failure" and found.rule == "R-INS-1"
    assert len(found.trace) <= 3, found.trace  # reset, maybe one step, the pinned insert
    assert found.trace[-1]["op"] == "insert" and found.trace[-1]["pin"] is True


def test_a_failure_without_a_restart_is_reported_unshrunk(tmp_path: Path) -> None:
    candidate = StdioCandidate(_server(tmp_path, "sys.exit(3)"), timeout=5)
    try:
        report = run_kit(candidate, frozenset({"core", "pinning"}), KitSettings(first=True))
    finally:
        candidate.close()
    assert report.verdict == "failure" and report.findings[0].kind == "failure"
    with pytest.raises(CandidateFailure):
        candidate.reset(1, 1)


def test_a_finding_after_a_long_bulk_fill_shrinks_to_its_few_steps() -> None:
    """A split bug found after a 300-insert fill (reads deferred: more than 96 blocks
    cached) shrinks, within a small time budget, to the few steps that show it: the fill
    goes in one trial."""
    from kachedb_radix.spec.conform.levels import LEVELS
    from kachedb_radix.spec.conform.lockstep import Disagreement, Lockstep
    from kachedb_radix.spec.mutants.structure import SplitDropsStamps

    steps: list[dict[str, Any]] = [{"op": "reset", "num_blocks": 2000, "block_size": 1}]
    steps += [
        {"op": "insert", "tokens": [10_000 + i, 1, 2, 3], "namespace": None, "batch": True}
        for i in range(300)
    ]
    steps += [
        {"op": "insert", "tokens": [9, 9, 9, 9], "namespace": None},
        {"op": "insert", "tokens": [9, 9, 8], "namespace": None},
        {"op": "dump"},
    ]
    candidate = TreeAdapter(SplitDropsStamps, "stamps")
    lockstep = Lockstep(candidate, frozenset(LEVELS))
    with pytest.raises(Disagreement) as raised:
        for step in steps:
            lockstep.run(step)
        lockstep.finish(final=True)
    finding = raised.value.difference
    assert len(finding.trace) > 300
    shrunk = Shrinker(candidate, frozenset(LEVELS)).shrink(finding, seconds=3)
    assert shrunk.rule == finding.rule == "R-SPLIT-2"
    assert len(shrunk.trace) <= 4, [step["op"] for step in shrunk.trace]
