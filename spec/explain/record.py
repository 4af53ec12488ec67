"""Recording a run: each step of a trace applied to the reference (and a target), with
the state after it.

A *recording* is the raw material of every view: for each step, its outcome and
the canonical dump and stats after it, per implementation. Steps are the kit's
trace steps (:mod:`kachedb_radix.spec.conform.steps`), applied through the plain-data
:class:`~kachedb_radix.spec.conform.candidate.Candidate` interface, so the reference and
any target -- ``accel``, a Python class, a program over stdio -- are recorded the same
way.

Beside the reference a target runs on the kit's own lockstep, and each frame is made of
the record the lockstep keeps of the step
(:meth:`kachedb_radix.spec.conform.lockstep.Lockstep.observe`, a
:class:`~kachedb_radix.spec.conform.lockstep.StepRecord`: both outcomes, the adopted state
and the spec's own, the finding and where it shows), so each step is judged exactly as
``conform`` judges it, by the same code: under the target's deviation profile (its error names
mapped, recency left out when declared, its admissible eviction and allocation choices
adopted by the reference so a declared policy difference is not marked and what
follows it is still compared), with the policy-free safety check on every answer, the
reads after each step, and every finding named by its rule and likely cause
(:mod:`kachedb_radix.spec.conform.rulemap`). Unlike ``conform``, the recording goes on
past a finding, so the page shows what followed. A finding the profile waives (a plain
difference attributed to a rule it waives, or relaxes by a tolerance mode) is shown as
waived, with the rule and the reason; the two trees may have parted there, so until the
next reset a later difference is shown as following it -- the kit, too, ends an example
at a waived finding. A safety finding or an inadmissible choice is never waived. A
target that fails (hangs, crashes, breaks the protocol) stops there; the reference goes
on alone. A trace that needs levels or a block size the target does not declare is
skipped for the target, as ``replay`` does.

When a reset names an events scheme (and the ``events`` level is compared), each side
also carries the KV event batches it emitted during each step, and the frame how the two
sides' batches compare (:mod:`kachedb_radix.spec.explain.events`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..conform.adapter import TreeAdapter
from ..conform.candidate import Candidate, CandidateError, CandidateFailure
from ..conform.levels import parse_levels
from ..conform.lockstep import Difference, Lockstep, StepRecord, reference_oracle, waived
from ..conform.operations import COUNTERS, SHAPE
from ..conform.profile import STRICT, Profile
from ..conform.steps import LeaseBook, Outcome, Step, StepError, apply_step, check_step, resets
from .events import Batch, Tap, batches_of, compare, payloads, scheme_of, tapped


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
        adopted: the reference's side only, at a declared step: the state the kit goes on
            from after adopting the target's choice (outcome, dump, stats), while
            ``outcome``/``dump``/``stats`` are the spec's own.
        events: the KV event batches it emitted during the step, decoded
            (:func:`kachedb_radix.spec.explain.events.batches_of`); None when events are
            off for the trace or it did not run the step.
        event_marks: the (batch, event) positions of its events the other side's do not
            match (event -1: the batch's timestamp), as the kit compares them.
    """

    name: str
    outcome: Outcome | None = None
    dump: dict[str, Any] | None = None
    stats: dict[str, Any] | None = None
    note: str | None = None
    adopted: Side | None = None
    events: list[Batch] | None = None
    event_marks: set[tuple[int, int]] = field(default_factory=set)


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
            (a path such as ``outcome.ok.evicted[0]``; ``failure`` when it failed), None
            when they agree or the difference is waived.
        waived: why a difference is not marked: the waived rule and the profile's
            reason, or the earlier waived step it follows.
        finding: what the kit found at this step (rules, cause, kind: a safety finding
            is ``kind == "safety"``), None when nothing was found.
        declared: a difference the target's profile declares: each rule the kit names
            for it, with the profile's reason (empty when none).
        minor: the only difference is in recency (stamps, the clock): shown folded.
        events: the events scheme of the trace (its reset's ``"events"``), None when
            events are off.
        events_differ: where the target's events of the step first differ from the
            reference's, as the kit compares them (None when they agree).
        events_late: the earlier step whose batches the kit read only at this step (it
            stopped at that step's finding before its reads): a finding on events here
            may be about them. None when it read none late.
    """

    number: int
    step: Step
    trace: str | None
    levels: frozenset[str]
    sides: list[Side]
    difference: str | None = None
    waived: str | None = None
    finding: Difference | None = None
    declared: list[tuple[str, str]] = field(default_factory=list)
    minor: bool = False
    events: dict[str, Any] | None = None
    events_differ: str | None = None
    events_late: int | None = None


@dataclass
class Recording:
    """A whole run.

    Attributes:
        title: what it shows (a scenario's title, a trace's file name).
        source: where the steps came from.
        frames: one per step.
        lesson: the one idea a scenario teaches ("" for traces).
        compares_recency: whether stamps and the clock are compared (not under a profile
            declaring ``recency = "not_compared"``).
        profile: the name of the profile the target is compared under (None: strict).
        deviations: the rules that profile declares, each with its reason.
    """

    title: str
    source: str
    frames: list[Frame] = field(default_factory=list)
    lesson: str = ""
    compares_recency: bool = True
    profile: str | None = None
    deviations: dict[str, str] = field(default_factory=dict)

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

    @property
    def first_major(self) -> int | None:
        """The index of the first frame where the target differs in more than recency
        (stamps, the clock), or None. O(frames)."""
        return next(
            (
                index
                for index, frame in enumerate(self.frames)
                if frame.difference is not None and not frame.minor
            ),
            None,
        )


class _Runner:
    """Applies steps to the reference alone, keeping its lease and snapshot handles: for
    a trace the target does not run, or after the target failed (then it goes on with
    the lockstep's handles)."""

    def __init__(
        self, candidate: Candidate, apply: Callable[[Step], Outcome] | None = None
    ) -> None:
        self.candidate = candidate
        book = LeaseBook()
        self.apply = apply or (lambda step: apply_step(candidate, step, book))

    def run(self, step: Step) -> Side:
        """Apply ``step`` and read the state after it."""
        side = Side(self.candidate.name, self.apply(step))
        if resets(step) and side.outcome is not None and "error" in side.outcome:
            return side  # no tree was built: nothing to read
        side.dump = _ok_dict(self.apply({"op": SHAPE.name}))
        side.stats = _ok_dict(self.apply({"op": COUNTERS.name}))
        return side


def _ok_dict(outcome: Outcome) -> dict[str, Any] | None:
    found = outcome.get("ok")
    return dict(found) if isinstance(found, dict) else None


def record(
    steps: list[Step],
    target: Candidate | None = None,
    *,
    title: str,
    source: str,
    lesson: str = "",
    oracle: TreeAdapter | None = None,
    profile: Profile | None = None,
) -> Recording:
    """Apply ``steps`` to the reference (and ``target``, on the kit's lockstep under
    ``profile``, default the strict spec) and record each state (module docstring).

    Cost: each step on each implementation with the kit's reads, plus a dump and stats
    read after it: O(steps * state size).

    Raises:
        RecordError: the steps do not start with a ``reset``, or one is malformed
            (a missing argument, an unknown operation).
    """
    if not steps or not resets(steps[0]):
        raise RecordError("a trace starts with a reset step (it sets the pool and block size)")
    profile = profile or STRICT
    reference = oracle if oracle is not None else reference_oracle()
    recording = Recording(title, source, lesson=lesson)
    recording.compares_recency = profile.compares_recency
    recording.profile = None if profile.strict else profile.name
    recording.deviations = {} if profile.strict else profile.deviations()
    levels, trace = reference.levels, None
    lockstep: Lockstep | None = None  # the target beside the reference
    alone = _Runner(reference)  # the reference without the target
    absent: str | None = None  # why the target does not run this trace
    parted: str | None = None  # the waived step the trees may differ since
    scheme: dict[str, Any] | None = None  # the trace's events scheme (None: events off)
    held: int | None = None  # the first step whose batches wait for the lockstep's read
    sides = [reference] if target is None else [reference, target]
    with tapped(*sides) as taps:
        for number, step in enumerate(steps, 1):
            try:
                starts = check_step(step).resets
            except StepError as exc:
                raise RecordError(f"step {number} ({step.get('op')}): malformed ({exc})") from None
            if starts:
                trace, parted = step.get("trace"), None
                declared = reference.levels & (target.levels if target else levels)
                levels = parse_levels(step["levels"]) if "levels" in step else declared
                absent = None if target is None else _absent(step, levels, target)
                scheme = scheme_of(step, levels)
                lockstep = None
                if target is not None and absent is None:
                    lockstep = Lockstep(target, levels, profile=profile, oracle=reference)
                else:
                    alone = _Runner(reference)
            for tap in taps:
                tap.start(reset=starts)
            try:
                if lockstep is None:
                    sides_run = [alone.run(step)]
                    if target is not None:
                        sides_run.append(Side(target.name, note=absent))
                    frame = Frame(number, step, trace, levels, sides_run)
                else:
                    assert target is not None
                    frame = _observed(number, step, trace, levels, lockstep, target,
                                      events=scheme is not None)  # fmt: skip
            except (KeyError, ValueError, TypeError) as exc:
                raise RecordError(
                    f"step {number} ({step.get('op')}): malformed ({exc!r})"
                ) from None
            if starts:
                held = None
            if scheme is not None:
                holds = lockstep is not None and frame.difference != "failure"
                if any(tap.delivered for tap in taps):
                    frame.events_late, held = held, None
                _read_events(frame, taps, scheme, profile, hold=holds)
                if held is None and any(tap.holding for tap in taps):
                    held = number
            if frame.difference == "failure" and lockstep is not None:
                # The target is gone: the reference goes on alone, with the handles it has.
                absent = "stopped: " + (frame.sides[1].note or "").removeprefix("failed: ")
                alone, lockstep = _Runner(reference, lockstep.reference_only), None
            elif frame.finding is not None or (
                frame.difference is not None and parted is not None
            ):
                parted = _judge(frame, profile, parted)
            recording.frames.append(frame)
    return recording


def _read_events(
    frame: Frame, taps: list[Tap], scheme: dict[str, Any], profile: Profile, *, hold: bool
) -> None:
    """Give each side that ran the step the event batches it emitted during it, and the
    frame how they compare. A side the lockstep did not read (no lockstep, or it stopped
    at a finding before its reads) is read here, the payloads held for the lockstep's
    next read when ``hold`` (:class:`~kachedb_radix.spec.explain.events.Tap`). O(batches).
    """
    frame.events = scheme
    for side, tap in zip(frame.sides, taps, strict=False):
        if side.outcome is None:
            continue  # the side did not run the step (skipped, stopped, failed)
        if not tap.answers:
            try:
                tap.read_now(hold)
            except CandidateError as exc:
                tap.answers.append({"error": exc.kind})
            except CandidateFailure as exc:
                side.note = f"its events could not be read: {exc.message}"
                continue
        emitted = batches_of(payloads(tap.answers))
        if side.adopted is not None and side.events is not None:
            side.adopted.events = emitted  # at a declared step: the spec's own are shown
        else:
            side.events = emitted
    if len(frame.sides) == 2 and all(side.events is not None for side in frame.sides):
        found = compare(
            payloads(taps[0].answers),
            payloads(taps[1].answers),
            profile,
            frame.levels,
            after_reset=resets(frame.step),
        )
        frame.events_differ = found.path
        frame.sides[0].event_marks, frame.sides[1].event_marks = found.marks
        if frame.sides[0].adopted is not None:
            frame.sides[0].event_marks = set()  # the marks are the adopted batches'



def _absent(reset: Step, levels: frozenset[str], target: Candidate) -> str | None:
    """Why ``target`` cannot run the trace this ``reset`` starts; None when it can."""
    missing = sorted(levels - target.levels)
    sizes = target.block_sizes
    if missing:
        return f"skipped: the trace needs levels {', '.join(missing)}"
    if sizes is not None and reset.get("block_size") not in sizes:
        return f"skipped: block size {reset.get('block_size')} not supported"
    return None


def _observed(
    number: int,
    step: Step,
    trace: str | None,
    levels: frozenset[str],
    lockstep: Lockstep,
    target: Candidate,
    *,
    events: bool = False,
) -> Frame:
    """One step on the lockstep: the frame of its record -- both sides as they answered,
    the finding if any and where it shows, and at a declared step the spec's own answer
    beside the state the kit adopted."""
    try:
        seen = lockstep.observe(step, own=True, events=events)
    except CandidateFailure as exc:
        # Run on the reference alone: the target could not answer.
        reference = _Runner(lockstep.oracle, lockstep.reference_only).run(step)
        failed = Side(target.name, note=f"failed: {exc.message}")
        return Frame(number, step, trace, levels, [reference, failed], difference="failure")
    reference = Side(
        lockstep.oracle.name,
        seen.expected,
        _plain(seen.reference.get(SHAPE.name)),
        _plain(seen.reference.get(COUNTERS.name)),
        seen.note,
    )
    theirs = Side(
        target.name,
        seen.actual,
        _plain(seen.candidate.get(SHAPE.name)),
        _plain(seen.candidate.get(COUNTERS.name)),
    )
    frame = Frame(number, step, trace, levels, [reference, theirs], finding=seen.finding)
    frame.difference = seen.where
    frame.minor = seen.recency_only
    if seen.own is not None:
        _declare(frame, seen)
    return frame


def finding_line(finding: Difference) -> str:
    """One line for a step's finding: what kind, which rules, the likely cause; a
    safety finding said as such (no profile waives it). O(1)."""
    rules = ", ".join(finding.rules) or "?"
    kind = {
        "safety": "breaks a safety rule (never waived)",
        "inadmissible": "makes a choice no declared mode allows",
        "failure": "fails",
    }.get(finding.kind, "differs")
    cause = f": {finding.cause}" if finding.cause else ""
    return f"{kind}: {rules}{cause}"


def _plain(answer: Any) -> dict[str, Any] | None:
    return dict(answer) if isinstance(answer, dict) else None


def _judge(frame: Frame, profile: Profile, parted: str | None) -> str | None:
    """Move ``frame``'s difference to ``frame.waived`` when the profile waives its rule
    (a plain difference, as the kit files it), or when it follows an earlier waived step
    (``parted``); returns the new ``parted``. A safety finding or an inadmissible choice
    stays marked whatever the profile. O(1)."""
    finding = frame.finding
    if finding is not None and finding.kind != "disagreement":
        return parted  # the kit reports these whatever the profile
    if parted is not None:
        frame.waived = f"follows {parted}; differs at {frame.difference}"
        frame.difference = None
        return parted
    assert finding is not None
    reason = waived(finding, profile)
    if reason is None:
        return None
    frame.waived = f"{finding.rule} waived by profile {profile.name!r}: {reason}"
    frame.declared = [(finding.rule, reason)]
    frame.difference = None
    return f"the waived {finding.rule} difference at step {frame.number}"


def _declare(frame: Frame, seen: StepRecord) -> None:
    """Where the kit adopted the target's choice and the spec's own differs: show the
    spec's outcome and tree on the reference's side, keep the adopted state beside it,
    and name the declared rules (the record's :class:`~kachedb_radix.spec.conform.lockstep.Own`).
    O(1)."""
    own = seen.own
    assert own is not None
    reference, theirs = frame.sides[0], frame.sides[1]
    reference.adopted = Side(
        reference.name, reference.outcome, reference.dump, reference.stats, reference.note
    )
    reference.outcome, reference.dump, reference.stats = own.outcome, own.dump, own.stats
    if own.events is not None:
        # The spec's own batches; the kit's reference emits the adopted ones (read later).
        reference.events = batches_of(own.events)
    reference.note = f"the spec's own outcome; the kit adopts {theirs.name}'s choice after it"
    frame.declared = list(own.declared)
