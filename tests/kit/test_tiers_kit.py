"""The kit's ``tiers`` level (R-TIER-*): both twins conform, bad tier requests are
refused with a kind, and the safety check catches a candidate whose moves are wrong
even where its answers could not be compared (the mutants are in test_mutants.py)."""

from __future__ import annotations

from typing import Any

import pytest

from kachedb_radix import reference
from kachedb_radix.reference.tiers import Move, TieredTree
from kachedb_radix.spec.cli.main import main as cli
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.candidate import CandidateError
from kachedb_radix.spec.conform.levels import TIERS_EXCLUDE
from kachedb_radix.spec.conform.run import KitSettings, choose_levels, run_kit
from kachedb_radix.spec.conform.safety import SafetyMonitor, SafetyViolation
from tests.conftest import IMPLEMENTATIONS, TIER_IMPLEMENTATIONS

TIERS = frozenset({"core", "pinning", "eviction", "namespaces", "policies", "tiers"})
QUICK = KitSettings(examples=30, budget=3_000)


@pytest.mark.slow  # no branch only it covers: the CI coverage run leaves it out (.ci/run)
@pytest.mark.parametrize("name", sorted(TIER_IMPLEMENTATIONS))
def test_both_twins_conform_at_the_tiers_level(name: str) -> None:
    adapter = TreeAdapter(IMPLEMENTATIONS[name], name, tier_factory=TIER_IMPLEMENTATIONS[name])
    assert "tiers" in adapter.levels
    report = run_kit(adapter, TIERS, QUICK)
    assert report.passed, report.explain()
    wanted = {f"R-TIER-{n}" for n in range(1, 9)}
    assert wanted <= report.exercised, wanted - report.exercised
    assert adapter.tree.tree("device").implementation == name  # the twin that ran


def test_a_tiers_run_leaves_snapshots_and_events_out() -> None:
    adapter = TreeAdapter(reference.RadixTree, "r", tier_factory=TieredTree)
    chosen = choose_levels(adapter, frozenset({"tiers", "snapshots", "events"}))
    assert "tiers" in chosen and not chosen & TIERS_EXCLUDE
    assert "tiers" not in choose_levels(adapter, None)  # opt-in


@pytest.mark.parametrize(
    "tiers",
    [{"host": 2, "gpu": 1}, [2], {"host": -1}, {"disk": 1.5}, {"host": 0, "write_through": True}],
)
def test_a_reset_with_bad_tiers_is_refused(tiers: Any) -> None:
    adapter = TreeAdapter(reference.RadixTree, "r", tier_factory=TieredTree)
    with pytest.raises(CandidateError) as raised:
        adapter.reset(4, 1, tiers=tiers)
    assert raised.value.kind == "invalid_argument"


def test_tiers_asked_of_a_candidate_without_them_are_refused() -> None:
    plain = TreeAdapter(reference.RadixTree, "r")
    assert "tiers" not in plain.levels
    with pytest.raises(CandidateError, match="keeps no slower tiers"):
        plain.reset(4, 1, tiers={"host": 2})
    plain.reset(4, 1)
    with pytest.raises(CandidateError, match="named no tiers"):
        plain.lookup([1], None, False)


def _monitor() -> SafetyMonitor:
    monitor = SafetyMonitor()
    monitor.check({"op": "reset", "block_size": 1, "tiers": {"host": 2}}, {"ok": None})
    return monitor


def test_safety_follows_every_move_to_what_each_slot_holds() -> None:
    """R-TIER-8: a restore that names a host slot holding another prefix is caught from the
    candidate's answers alone; so is one from another namespace (R-NS-2)."""
    monitor = _monitor()
    store = {"length": 1, "blocks": [0], "reused": 0, "allocated": [0], "evicted": [],
             "moves": [], "after": [], "dropped": [], "lease": None}  # fmt: skip
    monitor.check({"op": "insert", "tokens": [7], "namespace": None}, {"ok": store})
    other = {**store, "blocks": [1], "allocated": [1]}
    monitor.check({"op": "insert", "tokens": [8], "namespace": "t"}, {"ok": other})
    down = {"freed": [0, 1], "moves": [["device", 0, "host", 0], ["device", 1, "host", 1]],
            "dropped": []}  # fmt: skip
    monitor.check({"op": "evict", "count": 2}, {"ok": down})
    wrong = {"length": 1, "blocks": [0], "restored": [["host", 1, "device", 0]], "evicted": [],
             "moves": [], "dropped": [], "lease": None}  # fmt: skip
    with pytest.raises(SafetyViolation) as raised:
        monitor.check({"op": "restore", "tokens": [7], "namespace": None}, {"ok": wrong})
    assert raised.value.prop == "tier_namespace"
    monitor = _monitor()
    monitor.check({"op": "insert", "tokens": [7], "namespace": None}, {"ok": store})
    unread = {"freed": [0], "moves": [["device", 0, "host", 0], ["host", 1, "disk", 0]],
              "dropped": []}  # fmt: skip
    with pytest.raises(SafetyViolation, match="holds nothing") as raised:
        monitor.check({"op": "evict", "count": 1}, {"ok": unread})
    assert raised.value.prop == "tier_content"


def test_safety_sees_a_pinned_block_leave_its_tier() -> None:
    """R-TIER-7: a lease from a pinned lookup holds its host block."""
    monitor = _monitor()
    store = {"length": 1, "blocks": [0], "reused": 0, "allocated": [0], "evicted": [],
             "moves": [], "after": [], "dropped": [], "lease": None}  # fmt: skip
    monitor.check({"op": "insert", "tokens": [7], "namespace": None}, {"ok": store})
    monitor.check(
        {"op": "evict", "count": 1},
        {"ok": {"freed": [0], "moves": [["device", 0, "host", 1]], "dropped": []}},
    )
    found = {"length": 1, "tiers": ["host"], "blocks": [1], "lease": 1}
    monitor.check({"op": "lookup", "tokens": [7], "namespace": None, "pin": True}, {"ok": found})
    tree = TieredTree(2, 2, 0, 1)
    empty = tree.dump()
    with pytest.raises(SafetyViolation) as raised:
        monitor.check({"op": "dump"}, {"ok": empty})
    assert raised.value.prop == "tier_pinned"
    assert Move("host", 1, "device", 0).target_tier == "device"


def test_conform_tiers_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    status = cli(["conform", "reference", "--tiers", "--budget", "800", "--examples", "8"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "tiers" in out and "PASS" in out


def test_conform_events_and_saved_traces_from_the_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    """``--events SCHEME`` adds the opt-in level; a bad scheme is a usage message; a
    finding's shrunk trace is saved with ``--save-traces``."""
    assert cli(["conform", "reference", "--events", "xxh3_64", "--budget", "300",
                "--examples", "4"]) == 0  # fmt: skip
    assert "events" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:  # refused while parsing (issue 32)
        cli(["conform", "reference", "--events", "no-such-scheme", "--budget", "50"])
    assert stop.value.code == 2 and "no-such-scheme" in capsys.readouterr().err
    target = "kachedb_radix.spec.mutants.eviction:LruReversed"
    status = cli(["conform", target, "--first", "--budget", "2000",
                  "--save-traces", str(tmp_path)])  # fmt: skip
    assert status == 1
    assert "trace: " in capsys.readouterr().out
    assert list(tmp_path.glob("*.jsonl"))
