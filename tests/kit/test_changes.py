"""The rows' ``changes`` hold for the reference: the kit reads a view after a step only
when the step's row says it can have changed what the view shows
(:attr:`~kachedb_radix.spec.conform.operations.Operation.changes`), so a row that
understated them would let a changed view go unread. Every recorded step of a search is
replayed on a fresh reference with every view read before and after it."""

from __future__ import annotations

from typing import Any

import pytest

from kachedb_radix.spec.conform.lockstep import Lockstep
from kachedb_radix.spec.conform.operations import (
    BY_NAME,
    COUNTER_STATE,
    ENDS_READER,
    NAMES_STATE,
    SHAPE_STATE,
    SNAPSHOT,
    SNAPSHOT_SHAPE,
    SNAPSHOTS_STATE,
)
from kachedb_radix.spec.conform.oracle import OracleAdapter
from kachedb_radix.spec.conform.run import KitSettings, run_kit
from kachedb_radix.spec.conform.steps import LeaseBook, Step, apply_step, bare

QUICK = KitSettings(examples=25, budget=3_000, shrink=False)

LEVELS = {
    "snapshots": frozenset({"core", "pinning", "eviction", "namespaces", "snapshots", "policies"}),
    "tiers": frozenset({"core", "pinning", "eviction", "namespaces", "policies", "tiers"}),
}


def _traces(levels: frozenset[str], monkeypatch: pytest.MonkeyPatch) -> list[list[Step]]:
    """The recorded traces of a short search of the reference against itself."""
    traces: list[list[Step]] = []
    finish = Lockstep.finish

    def keep(self: Lockstep, *, final: bool = False) -> None:
        finish(self, final=final)
        if final:
            traces.append(list(self.trace))

    monkeypatch.setattr(Lockstep, "finish", keep)
    report = run_kit(OracleAdapter(), levels, QUICK)
    assert report.passed, report.explain()
    return traces


def _views(
    adapter: OracleAdapter, book: LeaseBook, snapshots: int, dropped: set[int]
) -> dict[str, Any]:
    """Every view of the state, by what it shows (the dumps of the snapshots not
    dropped, which the kit reads no more)."""
    assert SNAPSHOT_SHAPE.handle is not None
    handle = SNAPSHOT_SHAPE.handle.name
    return {
        COUNTER_STATE: apply_step(adapter, {"op": "stats"}, book),
        NAMES_STATE: apply_step(adapter, {"op": "namespaces"}, book),
        SHAPE_STATE: apply_step(adapter, {"op": "dump"}, book),
        SNAPSHOTS_STATE: {
            number: apply_step(adapter, {"op": SNAPSHOT_SHAPE.name, handle: number}, book)
            for number in range(1, snapshots + 1)
            if number not in dropped
        },
    }


@pytest.mark.slow  # no branch only it covers: the CI coverage run leaves it out (.ci/run)
@pytest.mark.parametrize("level", sorted(LEVELS))
def test_a_step_changes_only_what_its_row_says(level: str, monkeypatch: pytest.MonkeyPatch) -> None:
    traces = _traces(LEVELS[level], monkeypatch)
    seen: dict[str, set[str]] = {}
    for trace in traces:
        adapter, book, snapshots, dropped = OracleAdapter(), LeaseBook(), 0, set[int]()
        before: dict[str, Any] | None = None
        for recorded in trace:
            step = bare(recorded)
            row = BY_NAME[step["op"]]
            outcome = apply_step(adapter, step, book)
            if row.resets:
                snapshots, before = 0, None
                dropped.clear()
            if row.issues == SNAPSHOT and "ok" in outcome:
                snapshots += 1
            if row.ends == ENDS_READER and "ok" in outcome:
                dropped.add(step["snapshot"])
            after = _views(adapter, book, snapshots, dropped)
            if before is not None and not row.reads:
                # A dropped snapshot's dump is read no more: the others must stay.
                kept = after[SNAPSHOTS_STATE]
                was = {n: dump for n, dump in before[SNAPSHOTS_STATE].items() if n in kept}
                before = {**before, SNAPSHOTS_STATE: was}
                changed = {state for state in after if after[state] != before[state]}
                assert changed <= set(row.changes), (step, changed - set(row.changes))
                seen.setdefault(row.name, set()).update(changed)
            before = after
    # The search ran the steps whose rows claim the most, and they changed something.
    assert {"insert", "evict", "match"} <= set(seen), sorted(seen)
    assert SHAPE_STATE in seen["insert"]
