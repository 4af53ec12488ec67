"""Recording a run: each step of a trace applied to the reference (and a target), with
the state after it.

A *recording* is the raw material of every view: for each step, its outcome and the canonical dump
and stats after it, per implementation. Steps are the kit's trace steps
(:mod:`kachedb_radix.spec.conform.steps`), applied through the plain-data
:class:`~kachedb_radix.spec.conform.candidate.Candidate` interface, so the reference and any target
-- ``accel``, a Python class, a program over stdio -- are recorded the same way.

Beside the reference a target runs in lockstep. After each step its outcome, dump and stats are
compared with the reference's at the levels in force (:func:`compare`); every differing step is
marked and the first one is where "my cache and the spec part ways". With a deviation profile
(:mod:`kachedb_radix.spec.conform.profile`) the comparison is the kit's under that profile: the
target's error names are mapped to kinds, stamps and the clock are left out when it declares its own
recency, and the reference adopts the target's admissible eviction and allocation choices, so a
declared policy difference is not marked and what follows it is still compared
(:func:`compare_under`). A difference the kit would attribute to a rule the profile waives
(:func:`kachedb_radix.spec.conform.rulemap.attribute`; a token the target accepts where the spec
refuses it, say) is shown as waived, with the rule and the profile's reason, not as a difference;
the two trees may have parted there, so until the next reset a later difference is shown as
following it -- the kit, too, ends an example at a waived finding. Unlike ``replay``, the recording
goes on past a difference, so the page shows what followed; a target that fails (hangs, crashes,
breaks the protocol) stops there. A trace that needs levels or a block size the target does not
declare is skipped for the target, as ``replay`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..conform.adapter import TreeAdapter
from ..conform.candidate import Candidate, CandidateError, CandidateFailure
from ..conform.levels import parse_levels
from ..conform.lockstep import adopting_outcome, first_difference, reference_oracle
from ..conform.oracle import Inadmissible
from ..conform.profile import Profile
from ..conform.rulemap import Observation, attribute
from ..conform.steps import LeaseBook, Outcome, Step, apply_step, normalise


class RecordError(ValueError):
    """A trace that cannot be recorded (it does not start with a reset)."""


@dataclass
class Side:
    """One implementation after one step.

    Attributes:
        name: the implementation's name.
        outcome: the step's outcome (None when the implementation did not run it).
        dump: its canonical dump after the step (None when not run or refused).
        stats: its stats after the step (None likewise).
        note: why it did not run, or how it failed.
    """

    name: str
    outcome: Outcome | None = None
    dump: dict[str, Any] | None = None
    stats: dict[str, Any] | None = None
    note: str | None = None


@dataclass
class Frame:
    """One step and what each implementation made of it.

    Attributes:
        number: the step's number in the recording, from 1.
        step: the step as the trace gives it (recorded outcomes left in).
        trace: the name of the trace it belongs to (its reset's ``"trace"``), if any.
        levels: the levels its outcomes are compared at.
        sides: the reference's side, then the target's when there is one.
        difference: where the target's view first differs from the reference's
            (a path such as ``outcome.ok.evicted[0]``), None when they agree or the
            difference is waived.
        waived: with a profile, why a difference is not marked: the waived rule and
            the profile's reason, or the earlier waived step it follows.
    """

    number: int
    step: Step
    trace: str | None
    levels: frozenset[str]
    sides: list[Side]
    difference: str | None = None
    waived: str | None = None


@dataclass
class Recording:
    """A whole run.

    Attributes:
        title: what it shows (a scenario's title, a trace's file name).
        source: where the steps came from.
        frames: one per step.
        lesson: the one idea a scenario teaches ("" for traces).
    """

    title: str
    source: str
    frames: list[Frame] = field(default_factory=list)
    lesson: str = ""

    @property
    def names(self) -> list[str]:
        """The implementations recorded: the reference first."""
        return [side.name for side in self.frames[0].sides] if self.frames else []

    @property
    def first_difference(self) -> int | None:
        """The index of the first frame where the target differs, or None."""
        return next(
            (index for index, frame in enumerate(self.frames) if frame.difference is not None),
            None,
        )


#: ``compare(op, reference, target, levels)``: where two sides' views of a step
#: first differ, or None. A deviation profile would supply its own.
Compare = Callable[[str, Side, Side, frozenset[str]], "str | None"]


def compare(
    op: str, reference: Side, target: Side, levels: frozenset[str], *, recency: bool = True
) -> str | None:
    """Where ``target``'s outcome, dump or stats first differ from ``reference``'s at ``levels`` (as
    the kit compares them, :func:`kachedb_radix.spec.conform.steps.normalise`; stamps and the clock
    only with ``recency``), else None. O(size of the state)."""
    views = [
        ("outcome", op, reference.outcome, target.outcome),
        ("dump", "dump", _ok(reference.dump), _ok(target.dump)),
        ("stats", "stats", _ok(reference.stats), _ok(target.stats)),
    ]
    for name, view_op, expected, actual in views:
        found = first_difference(
            normalise(view_op, expected or {}, levels, recency=recency),
            normalise(view_op, actual or {}, levels, recency=recency),
            name,
        )
        if found is not None:
            return found
    return None


def compare_under(profile: Profile) -> Compare:
    """:func:`compare` as the kit compares under ``profile``: stamps and the clock only
    when it compares recency. (Error kinds are mapped, and eviction and allocation
    choices adopted, by :func:`record` given the profile.) O(1)."""

    def compared(op: str, reference: Side, target: Side, levels: frozenset[str]) -> str | None:
        return compare(op, reference, target, levels, recency=profile.compares_recency)

    return compared


def _ok(answer: dict[str, Any] | None) -> Outcome | None:
    return None if answer is None else {"ok": answer}


#: Decides a runner's outcome of a step: ``(outcome, note)``, or None for the plain call.
Follow = Callable[["_Runner"], "tuple[Outcome, str | None] | None"]


class _Runner:
    """Applies steps to one candidate, keeping its lease and snapshot handles."""

    def __init__(self, candidate: Candidate) -> None:
        self.candidate = candidate
        self.book = LeaseBook()
        self.stopped: str | None = None
        self.skipping: str | None = None

    def run(self, step: Step, follow: Follow | None = None) -> Side:
        """Apply ``step``; with ``follow``, let it decide the outcome first (the oracle
        adopting a target's choice), falling back to the plain call when it returns
        None."""
        side = Side(self.candidate.name)
        if self.stopped is not None or self.skipping is not None:
            side.note = self.stopped or self.skipping
            return side
        try:
            followed = None if follow is None else follow(self)
            if followed is not None:
                side.outcome, side.note = followed
            else:
                side.outcome = apply_step(self.candidate, step, self.book)
            if step["op"] == "reset" and "error" in side.outcome:
                return side  # no tree was built: nothing to read
            side.dump = self._read(self.candidate.dump)
            side.stats = self._read(self.candidate.stats)
        except CandidateFailure as exc:
            self.stopped = f"stopped: {exc}"
            side.note = f"failed: {exc}"
        return side

    @staticmethod
    def _read(read: Callable[[], Any]) -> dict[str, Any] | None:
        try:
            return dict(read())
        except CandidateError:
            return None

    def enter(self, step: Step, levels: frozenset[str]) -> None:
        """Decide at a reset whether this candidate can run the trace that follows."""
        missing = sorted(levels - self.candidate.levels)
        sizes = self.candidate.block_sizes
        if missing:
            self.skipping = f"skipped: the trace needs levels {', '.join(missing)}"
        elif sizes is not None and step.get("block_size") not in sizes:
            self.skipping = f"skipped: block size {step.get('block_size')} not supported"
        else:
            self.skipping = None


def record(
    steps: list[Step],
    target: Candidate | None = None,
    *,
    title: str,
    source: str,
    lesson: str = "",
    oracle: TreeAdapter | None = None,
    comparison: Compare = compare,
    profile: Profile | None = None,
) -> Recording:
    """Apply ``steps`` to the reference (and ``target``) and record each state.

    With ``profile`` the target is compared as the kit compares it under that
    deviation profile (module docstring); ``comparison`` then defaults to
    :func:`compare_under`.

    Cost: each step on each implementation, plus a dump and stats read after it:
    O(steps * state size).

    Raises:
        RecordError: the steps do not start with a ``reset``, or one is malformed
            (a missing argument, an unknown operation).
    """
    if not steps or steps[0].get("op") != "reset":
        raise RecordError("a trace starts with a reset step (it sets the pool and block size)")
    if profile is not None and comparison is compare:
        comparison = compare_under(profile)
    reference = _Runner(oracle if oracle is not None else reference_oracle())
    other = _Runner(target) if target is not None else None
    recording = Recording(title, source, lesson=lesson)
    levels, trace = reference.candidate.levels, None
    block_size, parted = 1, None  # parted: the waived step the trees may differ since
    for number, step in enumerate(steps, 1):
        if step["op"] == "reset":
            trace, parted = step.get("trace"), None
            block_size = step.get("block_size", block_size)
            declared = reference.candidate.levels & (other.candidate.levels if other else levels)
            levels = parse_levels(step["levels"]) if "levels" in step else declared
            if other is not None:
                other.enter(step, levels)
        try:
            if other is not None and profile is not None:
                theirs = other.run(step)
                _map_kind(theirs, profile)
                sides = [reference.run(step, _adopting(step, theirs, profile)), theirs]
            else:
                sides = [reference.run(step)]
                if other is not None:
                    sides.append(other.run(step))
        except (KeyError, ValueError, TypeError) as exc:
            raise RecordError(f"step {number} ({step.get('op')}): malformed ({exc!r})") from None
        frame = Frame(number, step, trace, levels, sides)
        if len(sides) == 2 and sides[1].outcome is not None:
            frame.difference = comparison(step["op"], sides[0], sides[1], levels)
        elif len(sides) == 2 and sides[1].note and sides[1].note.startswith("failed"):
            frame.difference = "failure"
        if profile is not None and frame.difference not in (None, "failure"):
            parted = _waive(frame, profile, block_size, parted)
        recording.frames.append(frame)
    return recording


def _waive(frame: Frame, profile: Profile, block_size: int, parted: str | None) -> str | None:
    """Move ``frame``'s difference to ``frame.waived`` when the profile waives its rule,
    or when it follows an earlier waived step (``parted``); returns the new ``parted``.
    A choice the reference could not adopt (inadmissible) stays marked. O(size of the
    state)."""
    assert frame.difference is not None
    note = frame.sides[0].note
    if note is not None and note.startswith("not adopted"):
        return parted  # an inadmissible choice: the kit reports it whatever the profile
    if parted is not None:
        frame.waived = f"follows {parted}; differs at {frame.difference}"
        frame.difference = None
        return parted
    rule = _attributed_rule(frame, profile, block_size)
    reason = profile.deviations().get(rule)
    if reason is None:
        return None
    frame.waived = f"{rule} waived by profile {profile.name!r}: {reason}"
    frame.difference = None
    return f"the waived {rule} difference at step {frame.number}"


def _attributed_rule(frame: Frame, profile: Profile, block_size: int) -> str:
    """The rule the kit names first for ``frame``'s difference
    (:mod:`kachedb_radix.spec.conform.rulemap`). O(size of the state)."""
    assert frame.difference is not None
    view, _, rest = frame.difference.partition(".")
    step, previous = frame.step, None
    reference, target = frame.sides
    if view == "outcome":
        expected, actual = reference.outcome, target.outcome
    else:  # a dump or stats read after the step, as the kit reads one
        step, previous = {"op": view}, frame.step
        expected, actual = _ok(getattr(reference, view)), _ok(getattr(target, view))
    recency = profile.compares_recency
    observation = Observation(
        step,
        normalise(step["op"], expected or {}, frame.levels, recency=recency),
        normalise(step["op"], actual or {}, frame.levels, recency=recency),
        "." + rest if rest else "",
        previous,
        frame.levels,
        {"block_size": block_size},
    )
    return attribute(observation).rule


def _map_kind(side: Side, profile: Profile) -> None:
    """The target's error name as the kind its profile maps it to."""
    if side.outcome is not None and "error" in side.outcome:
        side.outcome = {"error": profile.map_kind(side.outcome["error"])}


def _adopting(step: Step, theirs: Side, profile: Profile) -> Follow | None:
    """How the reference follows the target's admissible choice at ``step``."""
    if theirs.outcome is None:
        return None
    actual = theirs.outcome

    def follow(runner: _Runner) -> tuple[Outcome, str | None] | None:
        try:
            adopted = adopting_outcome(runner.candidate, runner.book, step, actual, profile)
        except Inadmissible as exc:
            return _plain(runner, step, f"not adopted: {exc}")
        return None if adopted is None else (adopted, f"adopted {theirs.name}'s choice")

    return follow


def _plain(runner: _Runner, step: Step, note: str) -> tuple[Outcome, str | None]:
    """The plain call, with a note saying why the target's choice was not followed."""
    return apply_step(runner.candidate, step, runner.book), note
