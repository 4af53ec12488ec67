"""Golden vectors: the committed files match the reference, and every implementation
replays them."""

from __future__ import annotations

import pytest

from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.replay import read_trace, replay
from kachedb_radix.spec.vectors import SUITES, TRACES, path_of, render_suite, stale
from kachedb_radix.spec.vectors.__main__ import main
from tests.conftest import IMPLEMENTATIONS

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI.
pytestmark = pytest.mark.quick


def test_committed_vectors_match_the_reference() -> None:
    """Fails when the reference drifts: regenerate with python -m kachedb_radix.spec.vectors
    --write."""
    assert stale() == []
    assert main(["--check"]) == 0


def test_generation_is_deterministic() -> None:
    assert render_suite("core") == render_suite("core")


@pytest.mark.parametrize("suite", sorted(SUITES))
@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_implementations_replay_the_vectors(name: str, suite: str) -> None:
    steps = read_trace(path_of(suite))
    candidate = TreeAdapter(IMPLEMENTATIONS[name], name)
    result = replay(steps, candidate)
    assert result.passed, result.difference.explain() if result.difference else result.failure
    if SUITES[suite] <= candidate.levels:
        assert result.traces == TRACES and result.steps == len(steps)
    else:  # a level it does not declare (snapshots, for a tree without them)
        assert result.traces == 0 and len(result.skipped) == TRACES


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
    assert all(step["expect"]["ok"]["quarantine"] == [] for step in core if step["op"] == "dump")


def test_snapshot_vectors_cover_epochs_and_reclamation() -> None:
    """R-SNAP-1, R-SNAP-2, R-EPOCH-1..4 all show up in the snapshots vectors."""
    steps = read_trace(path_of("snapshots"))
    ops = {step["op"] for step in steps}
    assert {"snapshot", "reader", "leave", "snapshot_match", "snapshot_dump", "reclaim"} <= ops
    kinds = {step["expect"]["error"] for step in steps if "error" in step["expect"]}
    assert {"reader_left", "out_of_blocks"} <= kinds
    assert any(step["op"] == "dump" and step["expect"]["ok"]["quarantine"] for step in steps)
    assert any(step["op"] == "reclaim" and step["expect"]["ok"]["reclaimed"] for step in steps)
    stats = [step["expect"]["ok"] for step in steps if step["op"] == "stats"]
    assert all(answer["readers"] == 0 and answer["version"] > 0 for answer in stats)


def test_a_level_the_candidate_lacks_skips_the_trace() -> None:
    candidate = TreeAdapter(IMPLEMENTATIONS["reference"], "r", frozenset({"core"}))
    result = replay(read_trace(path_of("pinning")), candidate)
    assert result.passed and result.traces == 0 and len(result.skipped) == TRACES
