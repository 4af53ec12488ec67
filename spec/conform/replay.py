"""Replay a recorded trace (JSON lines) against a candidate and show where it differs.

A replay runs the kit's own :class:`~kachedb_radix.spec.conform.lockstep.Lockstep`, step
by step, so it judges exactly as ``conform`` judges: the candidate beside the live
reference under the candidate's deviation profile (its error names mapped, its declared
eviction and allocation choices adopted, recency left out when declared), the
policy-free safety check on every answer, the reads after each step, and every finding
named by its rule with a likely cause. It stops at the first finding.

A ``reset`` step may carry ``"levels"``: the trace then needs those levels, and is
judged at them; a candidate that does not declare them (or the trace's block size)
skips the trace (reported, not failed). A step's recorded ``"expect"`` (golden vectors,
saved findings) is the reference's outcome when the trace was made: under the strict
profile, where the live reference must give the same, a recorded outcome that differs is
reported as a stale trace (regenerate it), apart from any finding on the candidate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .candidate import Candidate, CandidateFailure
from .errors import KitError
from .levels import parse_levels
from .lockstep import Difference, Disagreement, Lockstep, first_difference
from .profile import STRICT, Profile
from .steps import Step, StepError, bare, check_step, describe, normalise, resets


class TraceError(ValueError):
    """A trace file that is not a list of steps; the message names the line."""


@dataclass
class ReplayResult:
    """What a replay found.

    Attributes:
        candidate: the candidate's name.
        profile: the profile it was judged under.
        steps: steps replayed.
        traces: traces (reset-delimited runs) replayed.
        skipped: names of traces skipped for levels or a block size the candidate does not
            declare.
        difference: the first finding, if any (its rule, cause and shrunk-as-recorded trace).
        failure: a protocol failure, if any.
        stale: steps whose recorded ``expect`` differs from the live reference (strict
            profile only): the trace was made by another version of the spec.
        kit_error: the kit's own error that stopped the replay (nothing after it was
            judged; never a pass).
    """

    candidate: str
    profile: Profile = STRICT
    steps: int = 0
    traces: int = 0
    skipped: list[str] = field(default_factory=list)
    difference: Difference | None = None
    failure: str | None = None
    stale: list[str] = field(default_factory=list)
    kit_error: KitError | None = None

    @property
    def passed(self) -> bool:
        """No finding, no failure, no kit error (a stale expectation is reported, not
        failed)."""
        return self.difference is None and self.failure is None and self.kit_error is None


def read_trace(path: Path) -> list[Step]:
    """Read a JSON-lines trace; blank lines are skipped. O(size of the file).

    Raises:
        TraceError: a line is not a JSON object with a known ``"op"``.
    """
    return parse_trace(path.read_text(encoding="utf-8").splitlines(), str(path))


def parse_trace(lines: Iterable[str], source: str = "<trace>") -> list[Step]:
    """Parse JSON lines into steps. O(size).

    Raises:
        TraceError: a line is not a JSON object calling a known operation with every
            argument it requires (:func:`~kachedb_radix.spec.conform.steps.check_step`).
    """
    steps: list[Step] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            step = json.loads(line)
        except ValueError as exc:
            raise TraceError(f"{source}:{number}: not JSON ({exc})") from None
        try:
            check_step(step)
        except StepError as exc:
            raise TraceError(f"{source}:{number}: not a step ({exc})") from None
        steps.append(step)
    return steps


def replay(steps: list[Step], candidate: Candidate, *, profile: Profile = STRICT) -> ReplayResult:
    """Run ``steps`` on ``candidate`` in lockstep with the reference under ``profile``;
    stop at the first finding (module docstring). Cost: the steps on both, with the
    kit's reads after each.

    Raises:
        TraceError: the trace does not start with a ``reset`` step.
    """
    if steps and not resets(steps[0]):
        raise TraceError("a trace starts with a reset step (it sets the pool and block size)")
    result = ReplayResult(candidate.name, profile)
    lockstep: Lockstep | None = None
    skipping = False
    try:
        for number, step in enumerate(steps, 1):
            if resets(step):
                if lockstep is not None:
                    lockstep.finish(final=True)
                skipping = _skips(step, candidate, profile)
                if skipping:
                    name = step.get("trace", f"trace at step {number}")
                    result.skipped.append(str(name))
                    continue
                levels = (
                    parse_levels(step["levels"]) if "levels" in step else candidate.levels
                )
                lockstep = Lockstep(candidate, frozenset(levels), profile=profile)
                result.traces += 1
            elif skipping or lockstep is None:
                continue
            expected = lockstep.run(bare(step))
            result.steps += 1
            if "expect" in step and profile.strict:
                recorded = normalise(step["op"], step["expect"], lockstep.levels)
                if first_difference(recorded, expected, "") is not None:
                    result.stale.append(
                        f"step {number} ({describe(bare(step))}): recorded "
                        f"{json.dumps(recorded)}, the reference now {json.dumps(expected)}"
                    )
        if lockstep is not None and not skipping:
            lockstep.finish(final=True)
    except Disagreement as exc:
        result.difference = exc.difference
    except CandidateFailure as exc:
        result.failure = f"{candidate.name} failed at step {result.steps + 1}: {exc}"
    except KitError as exc:
        result.kit_error = exc
    return result


def _skips(reset: Step, candidate: Candidate, profile: Profile) -> bool:
    """Whether ``candidate`` cannot run the trace this ``reset`` starts (its levels, its
    block size, its pool size under the profile)."""
    needed = parse_levels(reset.get("levels", []))
    sizes = candidate.block_sizes or profile.block_sizes
    pool = profile.pool_sizes
    return (
        not needed <= candidate.levels
        or (sizes is not None and reset.get("block_size") not in sizes)
        or (pool is not None and not pool[0] <= reset.get("num_blocks", 0) <= pool[1])
    )
