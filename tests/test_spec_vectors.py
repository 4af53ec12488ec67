"""Golden vectors: the committed files match the reference, and every implementation
replays them."""

from __future__ import annotations

import pytest

from spec.adapter import TreeAdapter
from spec.replay import read_trace, replay
from spec.vectors import SUITES, TRACES, path_of, render_suite, stale
from spec.vectors.__main__ import main
from tests.conftest import IMPLEMENTATIONS


def test_committed_vectors_match_the_reference() -> None:
    """Fails when the reference drifts: regenerate with python -m spec.vectors --write."""
    assert stale() == []
    assert main(["--check"]) == 0


def test_generation_is_deterministic() -> None:
    assert render_suite("core") == render_suite("core")


@pytest.mark.parametrize("suite", sorted(SUITES))
@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_implementations_replay_the_vectors(name: str, suite: str) -> None:
    steps = read_trace(path_of(suite))
    result = replay(steps, TreeAdapter(IMPLEMENTATIONS[name], name))
    assert result.passed, result.difference.explain() if result.difference else result.failure
    assert result.traces == TRACES and result.steps == len(steps)


def test_vectors_cover_each_level_and_error_kinds() -> None:
    steps = read_trace(path_of("full"))
    ops = {step["op"] for step in steps}
    assert ops == {"reset", "match", "insert", "release", "evict", "dump", "stats", "namespaces"}
    kinds = {step["expect"]["error"] for step in steps if "error" in step["expect"]}
    assert {"token_type", "token_range", "invalid_argument"} <= kinds
    assert any(
        step["op"] == "insert" and step["expect"].get("ok", {}).get("evicted") for step in steps
    )
    core = read_trace(path_of("core"))
    assert "clock" not in core[-3]["expect"]["ok"]  # reduced to the core level


def test_a_level_the_candidate_lacks_skips_the_trace() -> None:
    candidate = TreeAdapter(IMPLEMENTATIONS["reference"], "r", frozenset({"core"}))
    result = replay(read_trace(path_of("pinning")), candidate)
    assert result.passed and result.traces == 0 and len(result.skipped) == TRACES
