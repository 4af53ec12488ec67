"""Replay a recorded trace (JSON lines) against a candidate and show where it differs.

Each step's expected outcome is its recorded ``"expect"`` when present (golden
vectors, disagreement reports), else what the reference answers live. A
``reset`` step may carry ``"levels"``: the trace then needs those levels, and
outcomes are compared at them; a candidate that does not declare them skips the
trace (reported, not failed).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .candidate import Candidate, CandidateFailure
from .levels import parse_levels
from .lockstep import Difference, first_difference, reference_oracle
from .steps import OPS, LeaseBook, Step, apply_step, normalise


class TraceError(ValueError):
    """A trace file that is not a list of steps; the message names the line."""


@dataclass
class ReplayResult:
    """What a replay found.

    Attributes:
        candidate: the candidate's name.
        steps: steps replayed.
        traces: traces (reset-delimited runs) replayed.
        skipped: names of traces skipped for levels the candidate does not declare.
        difference: the first difference, if any.
        failure: a protocol failure, if any.
    """

    candidate: str
    steps: int = 0
    traces: int = 0
    skipped: list[str] = field(default_factory=list)
    difference: Difference | None = None
    failure: str | None = None

    @property
    def passed(self) -> bool:
        """No difference and no failure."""
        return self.difference is None and self.failure is None


def read_trace(path: Path) -> list[Step]:
    """Read a JSON-lines trace; blank lines are skipped. O(size of the file).

    Raises:
        TraceError: a line is not a JSON object with a known ``"op"``.
    """
    return parse_trace(path.read_text(encoding="utf-8").splitlines(), str(path))


def parse_trace(lines: Iterable[str], source: str = "<trace>") -> list[Step]:
    """Parse JSON lines into steps. O(size).

    Raises:
        TraceError: a line is not a JSON object with a known ``"op"``.
    """
    steps: list[Step] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            step = json.loads(line)
        except ValueError as exc:
            raise TraceError(f"{source}:{number}: not JSON ({exc})") from None
        if not isinstance(step, dict) or step.get("op") not in OPS:
            raise TraceError(f"{source}:{number}: not a step (needs an op from {list(OPS)})")
        steps.append(step)
    return steps


def replay(steps: list[Step], candidate: Candidate) -> ReplayResult:
    """Run ``steps`` on ``candidate``; stop at the first difference. Cost: the steps,
    twice (the live reference runs alongside for steps without ``"expect"``).

    Raises:
        TraceError: the trace does not start with a ``reset`` step.
    """
    if steps and steps[0]["op"] != "reset":
        raise TraceError("a trace starts with a reset step (it sets the pool and block size)")
    result = ReplayResult(candidate.name)
    oracle = reference_oracle()
    oracle_book, book = LeaseBook(), LeaseBook()
    levels = candidate.levels
    run: list[Step] = []
    skipping = False
    for step in steps:
        if step["op"] == "reset":
            needed = parse_levels(step.get("levels", []))
            skipping = not needed <= candidate.levels
            if skipping:
                result.skipped.append(str(step.get("trace", f"trace at step {result.steps + 1}")))
                continue
            levels = needed if "levels" in step else candidate.levels
            result.traces += 1
        elif skipping:
            continue
        op = step["op"]
        live = normalise(op, apply_step(oracle, step, oracle_book), levels)
        expected = normalise(op, step["expect"], levels) if "expect" in step else live
        try:
            actual = normalise(op, apply_step(candidate, step, book), levels)
        except CandidateFailure as exc:
            result.failure = f"{candidate.name} failed at step {result.steps + 1}: {exc}"
            return result
        result.steps += 1
        recorded = {key: value for key, value in step.items() if key != "actual"}
        recorded["expect"] = expected
        run.append(recorded)
        if first_difference(expected, actual, "") is not None:
            recorded["actual"] = actual
            result.difference = Difference(
                index=len(run) - 1,
                trace=run,
                expected=expected,
                actual=actual,
                reference="expected" if "expect" in step else oracle.name,
                candidate=candidate.name,
                levels=sorted(levels),
            )
            return result
    return result
