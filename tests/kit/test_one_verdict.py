"""One verdict per step: the lockstep's :meth:`Lockstep.step` is the only place a step is
judged, and the search (``conform`` and its report), ``replay`` and ``explain`` all
consume the :class:`StepRecord` it makes (issue 36: "one record per step that explain,
replay and the report consume").

These tests would fail if any of them went back to judging a step on its own: every
judgement of a step (``Lockstep._run``) is counted inside ``Lockstep.step``, and one
planted difference gets the same finding entry from all three."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.lockstep import Lockstep, StepRecord
from kachedb_radix.spec.conform.replay import replay
from kachedb_radix.spec.conform.run import KitSettings, run_kit
from kachedb_radix.spec.explain.record import record
from kachedb_radix.spec.mutants.eviction import EvictedIdsSorted

pytestmark = pytest.mark.quick


@contextlib.contextmanager
def _judgements(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Count the steps judged inside :meth:`Lockstep.step` and outside it."""
    counts = {"inside": 0, "outside": 0, "records": 0}
    depth = [0]
    step, run = Lockstep.step, Lockstep._run

    def counted_step(self: Lockstep, *args: Any, **options: Any) -> StepRecord:
        depth[0] += 1
        try:
            made = step(self, *args, **options)
        finally:
            depth[0] -= 1
        counts["records"] += 1
        return made

    def counted_run(self: Lockstep, *args: Any, **options: Any) -> Any:
        counts["inside" if depth[0] else "outside"] += 1
        return run(self, *args, **options)

    monkeypatch.setattr(Lockstep, "step", counted_step)
    monkeypatch.setattr(Lockstep, "_run", counted_run)
    yield counts


def _sorted() -> TreeAdapter:
    return TreeAdapter(EvictedIdsSorted, "sorted")


def test_the_search_replay_and_explain_judge_only_through_the_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R-EVICT-4 planted (evicted ids sorted): the search finds it, replay and explain
    show it, each through ``Lockstep.step``, and their finding entries agree: the rule,
    the step, both outcomes and where the views differ."""
    with _judgements(monkeypatch) as counts:
        report = run_kit(_sorted(), kit=KitSettings(first=True))
    assert counts["outside"] == 0 and counts["inside"] == counts["records"] > 0
    found = report.difference
    assert found is not None and found.rule == "R-EVICT-4"
    assert found.where is not None and found.where.startswith("outcome")
    entry = report.to_json()["findings"][0]
    assert entry["where"] == found.where  # the report carries what the record says

    with _judgements(monkeypatch) as counts:
        replayed = replay(found.trace, _sorted())
    assert counts["outside"] == 0 and counts["records"] == len(found.trace)
    assert replayed.difference is not None and replayed.record is not None
    assert replayed.record.finding is replayed.difference
    assert set(replayed.record.reference) == {"dump", "stats"}
    shown = replayed.difference.to_json()
    for key in ("rule", "rules", "kind", "step", "expected", "actual", "where"):
        assert shown[key] == entry[key], key

    with _judgements(monkeypatch) as counts:
        recording = record(found.trace, _sorted(), title="t", source="test")
    assert counts["outside"] == 0 and counts["records"] >= len(found.trace)
    [frame] = [frame for frame in recording.frames if frame.finding is not None]
    assert frame.finding is not None
    assert {key: frame.finding.to_json()[key] for key in ("rule", "where")} == {
        "rule": entry["rule"],
        "where": entry["where"],
    }
    assert frame.number == entry["step"]


def test_a_record_reads_both_sides_only_when_asked_or_at_a_finding() -> None:
    """The kit's speed: a plain step's record carries no extra reads; ``observe`` adds
    both sides' dump and stats (a finding's record always has them: the test above)."""
    lockstep = Lockstep(_sorted(), frozenset({"core"}))
    assert lockstep.step({"op": "reset", "num_blocks": 4, "block_size": 1}).reference == {}
    assert lockstep.step({"op": "insert", "tokens": [1, 2]}).candidate == {}
    seen = lockstep.observe({"op": "insert", "tokens": [3, 4]})
    assert set(seen.reference) == set(seen.candidate) == {"dump", "stats"}
    assert seen.finding is None and seen.expected == lockstep.trace[-1]["expect"]
