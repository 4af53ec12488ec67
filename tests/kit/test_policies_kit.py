"""The kit under eviction policies (R-POL-*): profiles declare the policy, the oracle follows
it, traces carry it in their reset, protocol 4 carries it over stdio, and a candidate that
evicts by another policy's keys is caught, naming the policy's rule."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from kachedb_radix import accel, reference
from kachedb_radix.spec.cli.main import main as cli_main
from kachedb_radix.spec.conform.adapter import TreeAdapter, supported_levels
from kachedb_radix.spec.conform.levels import LevelError
from kachedb_radix.spec.conform.profile import STRICT, ProfileError, parse
from kachedb_radix.spec.conform.replay import replay
from kachedb_radix.spec.conform.run import KitSettings, run_kit
from kachedb_radix.spec.protocol.client import StdioCandidate
from kachedb_radix.spec.protocol.messages import OPTIONAL_FIELDS, request_problem

SMALL = KitSettings(examples=40, budget=1500, shrink=False)


def test_a_profile_declares_the_policy_and_its_options() -> None:
    """R-POL-1: ``policy`` and ``[policy_options]`` are checked as a tree checks them, and
    a reset step then carries them; plain lru adds nothing to a reset."""
    profile = parse({"policy": "slru", "policy_options": {"protected_percent": 50}}, "p")
    assert profile.policy == "slru" and profile.strict
    assert profile.reset_fields() == {"policy": "slru", "policy_options": {"protected_percent": 50}}
    assert profile.to_json()["policy"] == "slru"
    assert STRICT.reset_fields() == {}
    with pytest.raises(ProfileError, match="protected_percent"):
        parse({"policy": "slru", "policy_options": {"protected_percent": 101}}, "p")
    with pytest.raises(ProfileError, match="policy must be one of"):
        STRICT.with_policy("mru")


def test_a_tree_without_policies_does_not_declare_the_level() -> None:
    """R-POL-1: the ``policies`` level needs a ``policy`` attribute; a policy asked of a
    candidate without the level is a usage error, not a finding."""

    class Plain:
        def __init__(self, num_blocks: int, block_size: int) -> None:
            pass

    assert "policies" in supported_levels(reference.RadixTree)
    assert "policies" in supported_levels(accel.RadixTree)
    assert "policies" not in supported_levels(Plain)
    levels = frozenset({"core", "eviction"})
    with pytest.raises(LevelError, match="needs the policies level"):
        run_kit(
            TreeAdapter(reference.RadixTree, "r", levels),
            kit=SMALL,
            profile=STRICT.with_policy("lfu"),
        )


@pytest.mark.parametrize("policy", ["lfu", "priority"])
def test_the_accelerated_twin_conforms_under_a_policy(policy: str) -> None:
    """R-POL-1, R-POL-3, R-POL-5: accel passes a short search under the policy, its
    inserts carrying retention requests and bad ones."""
    report = run_kit(
        TreeAdapter(accel.RadixTree, "accel"), kit=SMALL, profile=STRICT.with_policy(policy)
    )
    assert report.passed, report.explain()
    assert "policies" in report.levels


class LruUnderAnyName(reference.RadixTree):
    """Claims any policy, evicts least recently used (and dumps no policy fields)."""

    def __init__(self, num_blocks: int, block_size: int = 16, **options: Any) -> None:
        super().__init__(num_blocks, block_size)


def test_evicting_by_another_policy_names_the_policys_rule() -> None:
    """R-POL-3, R-POL-1: an LRU tree checked as lfu differs in its dump (no hit counts)
    or its victims; the finding names lfu's rule or R-POL-1."""
    report = run_kit(
        TreeAdapter(LruUnderAnyName, "lru-as-lfu"),
        kit=KitSettings(first=True, shrink=False),
        profile=STRICT.with_policy("lfu"),
    )
    assert not report.passed
    assert report.findings[0].rules[0] in ("R-POL-1", "R-POL-3")


def test_a_trace_carries_its_policy_in_the_reset() -> None:
    """R-POL-3: replaying a recorded lfu trace builds the trees under lfu."""
    steps: list[dict[str, Any]] = [
        {"op": "reset", "num_blocks": 2, "block_size": 1, "policy": "lfu", "policy_options": None},
        {"op": "insert", "tokens": [1], "namespace": None, "pin": False},
        {"op": "match", "tokens": [1], "namespace": None, "pin": False},
        {"op": "insert", "tokens": [2], "namespace": None, "pin": False},
        {"op": "insert", "tokens": [3], "namespace": None, "pin": False},
        {"op": "dump"},
    ]
    assert replay(steps, TreeAdapter(accel.RadixTree, "accel")).passed
    result = replay(steps, TreeAdapter(LruUnderAnyName, "lru"))
    assert result.difference is not None


def test_protocol_4_fields_may_be_left_out() -> None:
    """R-POL-1, R-POL-8: a request may leave out what protocol 4 added (its default); the
    older fields stay required."""
    assert set(OPTIONAL_FIELDS["reset"]) == {"policy", "policy_options", "events", "tiers"}
    assert set(OPTIONAL_FIELDS["insert"]) == {"priority", "retain_for"}
    assert request_problem({"id": 1, "op": "reset", "num_blocks": 2, "block_size": 1}) is None
    assert (
        request_problem({"id": 1, "op": "insert", "tokens": [], "namespace": None, "pin": False})
        is None
    )
    assert request_problem({"id": 1, "op": "reset", "num_blocks": 2}) is not None


@pytest.fixture
def served() -> Iterator[list[str]]:
    yield [sys.executable, "-m", "kachedb_radix.spec.protocol.server", "--impl", "accel"]


def test_a_policy_travels_over_stdio(served: list[str]) -> None:
    """R-POL-1, R-POL-6: ``serve`` declares the policies level at protocol 4 and builds
    its tree under the policy a reset names; at protocol 3 it does not declare it."""
    program = StdioCandidate(served)
    try:
        assert "policies" in program.levels
        program.reset(4, 1, "slru", {"protected_percent": 50})
        program.insert([1], None, False, 70, 2)
        program.match([1], None, False)
        edge = program.dump()["namespaces"][0]["children"][0]
        assert edge["protected"] == [1]
    finally:
        program.close()
    old = StdioCandidate([*served, "--protocol", "3"])
    try:
        assert "policies" not in old.levels
        old.reset(4, 1)
        assert old.insert([1], None, False)["allocated"] == [0]
    finally:
        old.close()


def test_conform_takes_a_policy_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """R-POL-1: ``conform TARGET --policy NAME`` runs the target and the oracle under it;
    an unknown policy is a usage error naming it."""
    assert cli_main(["conform", "accel", "--policy", "fifo", "--budget", "800"]) == 0
    assert "policies" in capsys.readouterr().out
    for refused in (["--policy", "mru"], ["--policy-options", "{not json"]):
        with pytest.raises(SystemExit) as stop:  # refused while parsing (issue 32)
            cli_main(["conform", "accel", *refused])
        assert stop.value.code == 2
        assert refused[1].split()[0] in capsys.readouterr().err
