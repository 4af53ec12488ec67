"""Targets and profiles as plain functions (for conform, replay and other tools), the
per-call timeout of in-process candidates, and the conform command line's flags."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

import kachedb_radix.spec.mutants as mutants_package
from kachedb_radix import reference
from kachedb_radix.spec.cli import conform
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.candidate import CandidateFailure
from kachedb_radix.spec.conform.levels import KIT_LEVELS
from kachedb_radix.spec.conform.profile import STRICT, ProfileError
from kachedb_radix.spec.conform.run import KitSettings, run_kit
from kachedb_radix.spec.conform.targets import TargetError, command, load_profile, resolve, wrap
from kachedb_radix.spec.mutants import MUTANTS
from kachedb_radix.spec.protocol.timeout import TimedCandidate, available, limit


def test_targets_resolve_to_openers_with_profiles(tmp_path: Path) -> None:
    target = resolve("reference")
    assert target.name == "reference" and target.profile is STRICT
    assert target.open().name == "reference" and target.open() is not target.open()
    mutant = resolve("kachedb_radix.spec.mutants.recency:ClockFrozenOnMatch")
    assert mutant.open().name.endswith("ClockFrozenOnMatch")
    direct = TreeAdapter(reference.RadixTree, "direct")
    assert wrap(direct, "x") is direct and wrap(lambda: direct, "x") is direct
    profile = tmp_path / "p.toml"
    profile.write_text('[waive]\nR-TOK-3 = "because"\n')
    custom = resolve("reference", profile=profile, timeout=5)
    assert custom.profile.waived == {"R-TOK-3": "because"}
    opened = custom.open()
    assert isinstance(opened, TimedCandidate) and opened.name == "reference"
    assert load_profile(str(profile)).waived == custom.profile.waived
    for bad in ("nonsense", "no_such_module_xyz:Tree", "reference:NoSuchThing", "json:dumps"):
        with pytest.raises(TargetError):
            resolve(bad)
    with pytest.raises(ProfileError):
        resolve("reference", profile=tmp_path / "missing.toml")


def test_commands_are_targets_that_restart() -> None:
    import sys

    server = f"{sys.executable} -m kachedb_radix.spec.protocol.server"
    target = command(f"{server} --levels core", timeout=10)
    first = target.open()
    try:
        assert first.levels == frozenset({"core"})
    finally:
        first.close()
    with pytest.raises(TargetError, match="needs a program"):
        command("   ")
    with pytest.raises(TargetError):
        command("'unclosed")


@pytest.mark.usefixtures("without_accel")
def test_accel_target_is_clear_when_missing() -> None:
    with pytest.raises(TargetError, match="C twin"):
        resolve("accel")


class Spinner(reference.RadixTree):
    """A tree whose match on the token 7 never returns."""

    def match(self, tokens: object, namespace: str | None = None, *, pin: bool = False) -> Any:
        if tokens == [7]:
            while True:
                pass
        return super().match(tokens, namespace, pin=pin)


def test_in_process_calls_have_a_time_limit() -> None:
    """A hanging in-process call is interrupted and reported like a hanging program."""
    candidate = TimedCandidate(TreeAdapter(Spinner, "spinner"), 0.2)
    candidate.reset(4, 1)
    assert candidate.insert([7], None, False)["blocks"] == [0]
    with pytest.raises(CandidateFailure, match=r"spinner: match: no answer within 0.2 s"):
        candidate.match([7], None, False)
    assert candidate.match([1], None, False)["length"] == 0  # the limit is per call
    assert candidate.levels == frozenset(KIT_LEVELS) - {"tiers"} and candidate.block_sizes is None
    for call in ("stats", "namespaces", "dump", "snapshot", "reader", "reclaim"):
        getattr(candidate, call)()
    candidate.snapshot_match(1, [1], None)
    candidate.snapshot_dump(1)
    candidate.leave(2)
    candidate.evict(1)
    lease = candidate.insert([1], None, True)["lease"]
    assert lease is not None
    candidate.release(lease)
    candidate.close()


def test_without_a_main_thread_there_is_no_limit() -> None:
    seen: list[bool] = []

    def body() -> None:
        seen.append(available())
        with limit(0.01, "x"):
            seen.append(True)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [False, True]
    with limit(0, "no limit"):
        pass


def test_cli_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--profile, --block-sizes, --pool-sizes, --first, --report, --json, --timeout."""
    profile = tmp_path / "profile.toml"
    profile.write_text('[tolerate]\nrecency = "not_compared"\n')
    args = ["conform", "kachedb_radix.spec.mutants.recency:ClockFrozenOnMatch", "--budget", "2000"]
    assert conform.main([*args, "--profile", str(profile)]) == 0
    assert "CONFORMS WITH DECLARED DEVIATIONS" in capsys.readouterr().out
    report_dir = tmp_path / "report"
    status = conform.main(
        [
            *args,
            "--first",
            "--json",
            "--block-sizes",
            "2",
            "--pool-sizes",
            "3-5",
            "--report",
            str(report_dir),
            "--timeout",
            "5",
        ]
    )
    assert status == 1
    output = json.loads(capsys.readouterr().out)
    result = output["results"][0]
    assert result["findings"][0]["rule"] == "R-LRU-3"
    reset = result["findings"][0]["trace"][0]
    assert reset["block_size"] == 2 and 3 <= reset["num_blocks"] <= 5
    assert (report_dir / "index.html").exists() and (report_dir / "report.json").exists()
    assert (
        conform.main(["conform", "reference", "--budget", "500", "--report", str(report_dir)]) == 0
    )
    assert "report:" in capsys.readouterr().out
    for bad in (
        ["--block-sizes", "0"],
        ["--pool-sizes", "9-2"],
        ["--pool-sizes", "x"],
        ["--profile", str(tmp_path / "missing.toml")],
    ):
        with pytest.raises(SystemExit) as stop:  # refused while parsing (issue 32)
            conform.main(["conform", "reference", *bad])
        assert stop.value.code == 2
    assert conform.main(["conform", "--cmd", "'unclosed"]) == 2
    assert conform.main(["conform", "--cmd", str(tmp_path / "no-such-program")]) == 2
    assert (
        conform.main(
            [
                "conform",
                "reference",
                "--levels",
                "snapshots",
                "--examples",
                "1",
                "--cmd",
                "python -m kachedb_radix.spec.protocol.server --levels core",
            ]
        )
        == 2
    )


def test_cli_mutants(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The catalogue's report names the rule of each kill and whether it is the right one."""
    chosen = {name: MUTANTS[name] for name in ("evicted_ids_sorted", "lru_reversed")}
    monkeypatch.setattr(mutants_package, "MUTANTS", chosen)
    assert conform.main(["conform", "--mutants", "--json"]) == 0
    mutants = json.loads(capsys.readouterr().out)["mutants"]
    assert mutants["killed"] == 2 and mutants["right_rule"] == 2
    assert mutants["mutants"][0]["found_rules"][0] == "R-EVICT-4"
    assert conform.main(["conform", "--mutants"]) == 0
    assert "2 with the right rule" in capsys.readouterr().out


class SpinsOnThirdMatch(reference.RadixTree):
    """A tree whose third match never returns."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self.matches = 0

    def match(self, tokens: object, namespace: str | None = None, *, pin: bool = False) -> Any:
        self.matches += 1
        if self.matches == 3:
            while True:
                pass
        return super().match(tokens, namespace, pin=pin)


def test_run_kit_reopens_after_a_failure_and_shrinks_it() -> None:
    """A hang is a failure; the kit restarts the candidate, goes on, and shrinks the
    failure by replaying it on fresh candidates."""
    opened: list[int] = []

    def reopen() -> TimedCandidate:
        opened.append(1)
        return TimedCandidate(TreeAdapter(SpinsOnThirdMatch, "spinner"), 0.2)

    report = run_kit(
        reopen(), frozenset({"core"}), KitSettings(budget=300, shrink_seconds=5), reopen=reopen
    )
    assert report.verdict == "failure"
    found = report.findings[0]
    assert found.kind == "failure" and found.rule == "R-MATCH-1"
    assert [step["op"] for step in found.trace].count("match") == 3
    assert len(opened) > 2


class _CoreOnly(TreeAdapter):
    """A candidate declaring only the core level."""

    def __init__(self) -> None:
        super().__init__(reference.RadixTree, "core-only", frozenset({"core"}))


def test_undeclared_levels_are_named_under_their_target(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The note on levels a target does not declare follows that target's own lines,
    not the next target's."""
    status = conform.main(
        ["conform", "tests.kit.test_targets:_CoreOnly", "reference", "--budget", "300"]
    )
    assert status == 0
    lines = capsys.readouterr().out.splitlines()
    note = next(i for i, line in enumerate(lines) if "not checked (not declared)" in line)
    assert "pinning, eviction, namespaces, snapshots" in lines[note]
    header = next(i for i, line in enumerate(lines) if line.startswith("core-only"))
    following = next(i for i, line in enumerate(lines) if line.startswith("reference"))
    assert header < note < following
