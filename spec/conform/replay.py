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
from typing import Any

from ..inputs import LIMITS, InputError, iter_lines, loads_json, quote
from .candidate import Candidate, CandidateError, CandidateFailure
from .errors import KitError
from .levels import LevelError, parse_levels
from .lockstep import Difference, Disagreement, Lockstep, StepRecord, first_difference
from .operations import REQUIRED, operation
from .oracle import OracleAdapter
from .profile import STRICT, Profile
from .steps import Step, StepError, bare, check_step, describe, normalise, resets


class TraceError(InputError):
    """A trace that is not a list of steps the reference can run; the message, one line,
    names the file and line (or step) and what is wrong."""


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
        record: the lockstep's :class:`~kachedb_radix.spec.conform.lockstep.StepRecord`
            of the step that found ``difference`` (both outcomes, both sides' dump and
            stats after it, where they differ); None when the finding was in reads a
            fill deferred, or there is none.
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
    record: StepRecord | None = None

    @property
    def passed(self) -> bool:
        """No finding, no failure, no kit error (a stale expectation is reported, not
        failed)."""
        return self.difference is None and self.failure is None and self.kit_error is None


def read_trace(path: Path) -> list[Step]:
    """Read a JSON-lines trace; blank lines are skipped. O(size of the file), which is at
    most ``LIMITS["trace_bytes"]`` (each line at most ``LIMITS["line_bytes"]``).

    Raises:
        TraceError: the file cannot be read (missing, a directory, binary, not UTF-8,
            over a cap), holds no step (an empty trace checks nothing), or a line is not
            a step (:func:`parse_trace`).
    """
    cap = LIMITS["trace_bytes"].maximum
    lines: list[str] = []
    size = 0
    try:
        for _, line in iter_lines(path, "trace"):
            size += len(line.encode("utf-8")) + 1
            if size > cap:
                raise TraceError(f"trace {path}: over the cap of {cap:,} bytes")
            lines.append(line)
    except TraceError:
        raise
    except InputError as exc:
        raise TraceError(str(exc)) from None
    steps = parse_trace(lines, f"trace {path}")
    if not steps:
        raise TraceError(f"trace {path}: no steps (an empty trace checks nothing)")
    return steps


def parse_trace(lines: Iterable[str], source: str = "<trace>") -> list[Step]:
    """Parse JSON lines into steps, each checked by :func:`check_trace_step`; at most
    ``LIMITS["trace_steps"]`` of them. O(size).

    Raises:
        TraceError: a line is not JSON (nested too deeply, a non-finite number), not a
            step (:func:`check_trace_step`), or one step too many.
    """
    cap = LIMITS["trace_steps"].maximum
    steps: list[Step] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            step = loads_json(line, where)
        except InputError as exc:
            raise TraceError(str(exc)) from None
        steps.append(check_trace_step(step, where))
        if len(steps) > cap:
            raise TraceError(f"{source}: more than {cap:,} steps (the cap of a trace)")
    return steps


def check_trace_step(step: Any, where: str) -> Step:
    """``step`` if it is one the kit can apply: a call of an operation with every
    argument its row requires (:func:`~kachedb_radix.spec.conform.steps.check_step`),
    handles that are integers >= 0, ``levels`` a list of level names, ``expect`` an
    outcome. Argument *values* are
    the implementations' to judge (R-ERR-1), so they are not checked here. O(size).

    Raises:
        TraceError: naming ``where`` and what is wrong.
    """
    try:
        op = check_step(step)
    except StepError as exc:
        raise TraceError(f"{where}: not a step ({exc})") from None
    for argument in op.arguments:
        value = step.get(argument.name, 0)
        if argument.handle is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise TraceError(
                f"{where}: {argument.name} names a {argument.handle} by its handle, an "
                f"integer >= 0, not {quote(json.dumps(value))}"
            )
    levels = step.get("levels", [])
    if not isinstance(levels, list) or not all(isinstance(level, str) for level in levels):
        raise TraceError(f"{where}: levels must be a list of level names")
    try:
        parse_levels(levels)
    except LevelError as exc:
        raise TraceError(f"{where}: {exc}") from None
    expect = step.get("expect", {"ok": None})
    if not (
        isinstance(expect, dict)
        and len(expect) == 1
        and ("ok" in expect or isinstance(expect.get("error"), str))
    ):
        raise TraceError(f'{where}: expect must be {{"ok": ANSWER}} or {{"error": KIND}}')
    checked: Step = step  # every check above has passed
    return checked


def refusal(reset: Step) -> str | None:
    """Why the reference refuses ``reset`` (its error kind and message), or None when it
    builds that tree. A trace whose reset the reference refuses cannot be replayed:
    there is no tree to compare with. Cost: building the tree (O(num_blocks)).
    """
    oracle = OracleAdapter()
    arguments = [
        reset[argument.name] if argument.default is REQUIRED
        else reset.get(argument.name, argument.default)
        for argument in operation("reset").arguments
    ]  # fmt: skip
    try:
        oracle.reset(*arguments)
    except CandidateError as exc:
        return str(exc)
    finally:
        oracle.close()
    return None


def replay(steps: list[Step], candidate: Candidate, *, profile: Profile = STRICT) -> ReplayResult:
    """Run ``steps`` on ``candidate`` in lockstep with the reference under ``profile``;
    stop at the first finding (module docstring). Cost: the steps on both, with the
    kit's reads after each.

    Raises:
        TraceError: the trace does not start with a ``reset`` step, or the reference
            refuses one of its resets (:func:`refusal`).
    """
    if steps and not resets(steps[0]):
        raise TraceError("a trace starts with a reset step (it sets the pool and block size)")
    result = ReplayResult(candidate.name, profile)
    lockstep: Lockstep | None = None
    skipping = False
    try:
        for number, step in enumerate(steps, 1):
            if resets(step):
                refused = refusal(step)
                if refused is not None:
                    raise TraceError(
                        f"step {number} ({describe(bare(step))}): the reference refuses "
                        f"this reset ({refused}), so there is nothing to compare with"
                    )
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
            record = lockstep.step(bare(step))
            if record.finding is not None:
                result.difference, result.record = record.finding, record
                break
            expected = record.expected
            result.steps += 1
            if "expect" in step and profile.strict:
                recorded = normalise(step["op"], step["expect"], lockstep.levels)
                if first_difference(recorded, expected, "") is not None:
                    result.stale.append(
                        f"step {number} ({describe(bare(step))}): recorded "
                        f"{json.dumps(recorded)}, the reference now {json.dumps(expected)}"
                    )
        else:
            if lockstep is not None and not skipping:
                lockstep.finish(final=True)
    except Disagreement as exc:  # a read a fill deferred, judged by finish()
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
