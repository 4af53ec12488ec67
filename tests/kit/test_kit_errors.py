"""The kit never dies with a traceback (issue 32.4): an exception inside the kit is a kit
error -- its own verdict and exit status (3), its trace and traceback saved, never a pass
-- and the two crashes found by hand are fixed: a safety failure under ``match_cap``
(the adoption step ran anyway and raised an uncaught Inadmissible), and a tiers-level run
without the eviction level (the dry run asked a tiered oracle for a snapshot)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kachedb_radix import reference
from kachedb_radix.reference.walk import Path as TreePath
from kachedb_radix.spec.cli import conform
from kachedb_radix.spec.conform import rulemap
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.candidate import CandidateFailure
from kachedb_radix.spec.conform.errors import EXIT_KIT_ERROR, KitError
from kachedb_radix.spec.conform.lockstep import Disagreement, Lockstep
from kachedb_radix.spec.conform.profile import parse
from kachedb_radix.spec.conform.replay import TraceError, parse_trace, replay
from kachedb_radix.spec.conform.run import KitSettings, run_kit
from kachedb_radix.spec.conform.steps import (
    LeaseBook,
    StepError,
    apply_step,
    check_step,
    resets,
)

QUICK = KitSettings(examples=20, budget=2_000, shrink_seconds=2)
LEVELS = frozenset({"core", "eviction", "namespaces"})


class CrossingTree(reference.RadixTree):
    """An insert into an empty namespace walks another namespace's path (R-NS-2)."""

    def _walk(self, namespace: str | None, tokens: list[int], limit: int) -> tuple[TreePath, int]:
        if namespace not in self._roots and self._roots:
            namespace = next(iter(self._roots))
        return super()._walk(namespace, tokens, limit)


CAPPED = parse(
    {
        "name": "capped",
        "match_cap": "last_token",
        "tolerate": {"eviction_granularity": "whole_leaf_node", "evicted_set": "covering"},
    }
)


def test_a_safety_failure_under_match_cap_is_reported_not_raised() -> None:
    """The minimal trace of the crash: the candidate's insert reuses namespace a's block
    for the default namespace, a safety failure; judging it must not adopt its eviction
    (the oracle would be told to free 1 block where 2 are due, and raise)."""
    lockstep = Lockstep(TreeAdapter(CrossingTree, "crossing"), LEVELS, profile=CAPPED)
    lockstep.run({"op": "reset", "num_blocks": 2, "block_size": 1})
    lockstep.run({"op": "insert", "tokens": [1, 5], "namespace": "a", "pin": False})
    with pytest.raises(Disagreement) as raised:
        lockstep.run({"op": "insert", "tokens": [1, 6], "namespace": None, "pin": False})
    found = raised.value.difference
    assert (found.kind, found.rule) == ("safety", "R-NS-2")
    # the reference's own outcome, not one adopted from the unsafe answer
    assert found.expected["ok"]["reused"] == 0 and found.expected["ok"]["evicted"] == [1, 0]


def test_a_tiers_run_without_eviction_draws_its_inserts() -> None:
    """``conform accel --levels tiers --examples 2`` crashed: the dry run that keeps inserts
    from evicting asked the tiered oracle for a snapshot; it asks its device tree."""
    assert conform.main(["conform", "accel", "--levels", "tiers", "--examples", "2"]) == 0


def _broken_rules(monkeypatch: pytest.MonkeyPatch, after: int = 3) -> None:
    """Make the kit's own rule map raise after ``after`` steps were judged."""
    real = rulemap.exercised
    calls = {"n": 0}

    def exercised(*args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > after:
            raise RuntimeError("planted bug in the kit")
        return real(*args)

    monkeypatch.setattr("kachedb_radix.spec.conform.lockstep.exercised", exercised)


def test_a_kit_bug_is_a_kit_error_never_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    _broken_rules(monkeypatch)
    report = run_kit(TreeAdapter(reference.RadixTree, "reference"), kit=QUICK)
    assert report.kit_error is not None and not report.passed
    assert report.verdict == "kit error"
    assert report.kit_error.error == "RuntimeError: planted bug in the kit"
    assert report.kit_error.example == 1 and report.kit_error.trace[0]["op"] == "reset"
    assert "planted bug in the kit" in report.kit_error.traceback
    assert report.headline().startswith("kit error: RuntimeError")
    assert "KIT ERROR while a step at step" in report.explain()
    assert report.to_json()["kit_error"]["where"] == "a step"


def test_the_cli_exits_3_and_saves_the_trace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _broken_rules(monkeypatch)
    status = conform.main(
        ["conform", "reference", "--examples", "5", "--save-traces", str(tmp_path)]
    )
    assert status == EXIT_KIT_ERROR == 3
    err = capsys.readouterr().err
    assert "a bug in the kit, not in reference" in err
    trace = tmp_path / "kit-error-reference.jsonl"
    steps = [json.loads(line) for line in trace.read_text().splitlines()]
    assert steps[0]["op"] == "reset"
    assert "RuntimeError: planted bug" in (tmp_path / "kit-error-reference.txt").read_text()
    # the saved trace replays, and meets the same bug: exit 3 again
    assert conform.main(["replay", str(trace), "--target", "reference"]) == EXIT_KIT_ERROR
    assert "KIT ERROR" in capsys.readouterr().out


def test_a_kit_error_kills_no_mutant(monkeypatch: pytest.MonkeyPatch) -> None:
    from kachedb_radix.spec.mutants import MUTANTS, check_mutant

    _broken_rules(monkeypatch, after=0)
    result = check_mutant(MUTANTS["token_limit_off_by_one"], QUICK)
    assert result.kit_error is not None and not result.killed


def test_a_kit_error_while_shrinking_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    from kachedb_radix.spec.conform import shrink

    def broken(self: Any, finding: Any, seconds: float = 10.0) -> Any:
        raise KitError.of(ValueError("shrinker bug"), finding.trace)

    monkeypatch.setattr(shrink.Shrinker, "shrink", broken)
    from kachedb_radix.spec.mutants import MUTANTS

    report = run_kit(TreeAdapter(MUTANTS["token_limit_off_by_one"].tree, "m"), kit=QUICK)
    assert report.kit_error is not None and report.kit_error.where == "shrinking a finding"
    assert report.findings and report.verdict == "kit error"


def test_a_replay_kit_error_is_no_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    _broken_rules(monkeypatch, after=0)
    steps = parse_trace(['{"op": "reset", "num_blocks": 4, "block_size": 1}'])
    result = replay(steps, TreeAdapter(reference.RadixTree, "r"))
    assert result.kit_error is not None and not result.passed


class Raising(TreeAdapter):
    """A plain-data candidate whose match raises a plain exception."""

    def match(self, tokens: object, namespace: object, pin: bool) -> Any:
        raise ZeroDivisionError("oops")


def test_a_candidate_raising_a_plain_exception_fails_it_is_no_kit_error() -> None:
    lockstep = Lockstep(Raising(reference.RadixTree, "raising"), frozenset({"core"}))
    lockstep.run({"op": "reset", "num_blocks": 4, "block_size": 1})
    with pytest.raises(CandidateFailure, match="raised ZeroDivisionError"):
        lockstep.run({"op": "match", "tokens": [1], "namespace": None, "pin": False})
    # the kit's own oracle raising is the kit's: apply_step lets it through
    with pytest.raises(ZeroDivisionError):
        apply_step(Raising(reference.RadixTree, "r"), {"op": "match", "tokens": []}, LeaseBook())


def test_a_malformed_step_is_refused_naming_what_is_wrong() -> None:
    assert check_step({"op": "insert", "tokens": [1]}).name == "insert"
    for step, message in (
        ({"op": "insert"}, "insert lacks tokens"),
        ({"op": "release"}, "release lacks lease"),
        ({"op": "fly"}, "unknown operation 'fly'"),
        ({"op": ["insert"]}, "unknown operation"),
        ([1], "a step is a JSON object"),
    ):
        with pytest.raises(StepError, match=message):
            check_step(step)
    with pytest.raises(TraceError, match="line 2: not a step \\(insert lacks tokens\\)"):
        parse_trace(['{"op": "reset", "num_blocks": 2, "block_size": 1}', '{"op": "insert"}'])
    lockstep = Lockstep(TreeAdapter(reference.RadixTree, "r"), frozenset({"core"}))
    with pytest.raises(StepError):  # a caller's bad step, not a kit error
        lockstep.run({"op": "reset"})


def test_a_kit_error_without_a_trace_and_one_that_cannot_be_saved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kit error met before any step says so without a trace; when its files cannot be
    written the command still says what happened, on one line."""
    error = KitError.of(RuntimeError("early"), [])
    assert error.headline() == "KIT ERROR while a step: RuntimeError: early"
    assert "trace (JSON lines)" not in error.explain()
    blocked = tmp_path / "file"
    blocked.write_text("x")
    conform._save_kit_error(error, blocked / "sub", "t")
    assert "its trace could not be saved" in capsys.readouterr().err
    assert not resets([1]) and not resets({"op": "fly"}) and resets({"op": "reset"})  # type: ignore[arg-type]
