"""One ruling per step: what the kit found, said once, read by the banner, the target's
panel, the timeline, the text mode and the exit status alike.

A step beside a target is judged by the kit's lockstep (:mod:`kachedb_radix.spec.explain.record`:
its finding, the rules it names and its likely cause, the rules the profile declares for a
choice the kit adopted, the difference the profile waives). The target's panel also checks
each rule the step touched against the target's own states
(:mod:`kachedb_radix.spec.explain.verdict`), to say *what the target did*. The two never
say different things: a :class:`Ruling` is the kit's finding list for the step, and the
panel's marks are taken from it --

* a rule the kit names is marked as the kit marks it (✗ departs, or declared); where the
  panel's own check shows the rule kept and another rule the kit names still says what
  differs, the kept one leaves the ruling (the kit names likely rules; the check is the
  evidence); where none would be left, the kit's mark stands, in the kit's words;
* a rule the panel finds departing that the kit does not name joins the ruling: declared,
  where the profile declares that rule (a policy difference the kit tolerates, such as
  SGLang's whole-node eviction freeing more than the shortfall, R-INS-5); a departure
  too, where the kit found the step to differ; otherwise it is not marked (the kit's
  comparison found nothing: the panel's fact is a note, never a ✗ the exit status would
  contradict);
* a refused reset (the target refuses a reset the spec accepts) is a difference, never a
  waived one: the target builds no tree, so every step after it is *not compared* until
  the next reset, and says why;
* a difference after an earlier one the states never recovered from says so (``since``):
  the trees have differed since that step, whatever the kit's guess for this step alone.

The exit status of ``explain`` beside a target is 1 exactly when a ruling
:attr:`~Ruling.differs`. Cost: O(steps * rules).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..conform.operations import BY_NAME
from ..conform.steps import normalise
from .decide import ERROR_RULES
from .record import Frame, Recording

#: How each kind of ruling is drawn on the timeline (page.css's tick classes).
TICKS: dict[str, str] = {
    "differs": "diff", "minor": "minor", "failed": "diff", "declared": "declared",
    "not compared": "waived",
}  # fmt: skip


@dataclass
class Mark:
    """One rule of a ruling: ``departs``, ``declared`` (the profile declares the difference,
    with its reason) -- and the kit's cause or the profile's reason."""

    rule: str
    status: str
    reason: str

    @property
    def declared(self) -> bool:
        """Whether the profile declares this difference."""
        return self.status == "declared"


@dataclass
class Ruling:
    """The kit's verdict on one step beside a target (module docstring).

    Attributes:
        kind: ``agrees``, ``differs``, ``minor`` (recency alone), ``failed``, ``declared``
            (a difference the profile declares: the kit adopted the target's choice, or
            waives the rule), ``not compared`` (the target did not run the step, or the
            trees have parted at a declared or refused step), or ``alone`` (no target).
        marks: the rules, each marked once, in the order the kit names them.
        cause: the kit's likely cause (or why the step is not compared).
        where: the path into the step's views where the target first differs.
        since: the earlier step the states have differed since, if any.
        safety: the kit's finding is a safety finding (never waived).
        refused: the target refused this step's reset (a difference).
    """

    kind: str
    marks: list[Mark] = field(default_factory=list)
    cause: str = ""
    where: str | None = None
    since: int | None = None
    safety: bool = False
    refused: bool = False

    @property
    def differs(self) -> bool:
        """Whether this step counts as a difference (the exit status is 1)."""
        return self.kind in ("differs", "minor", "failed")

    def rules(self, status: str) -> list[str]:
        """The rules marked ``status``, in order."""
        return [mark.rule for mark in self.marks if mark.status == status]

    def mark(self, rule: str) -> Mark | None:
        """The rule's mark, if the ruling names it."""
        return next((mark for mark in self.marks if mark.rule == rule), None)


def _resets(step: dict[str, Any]) -> bool:
    """Whether the step starts a tree afresh (its row of the operation table says so)."""
    operation = BY_NAME.get(step.get("op", ""))
    return operation is not None and operation.resets


def rulings(recording: Recording) -> list[Ruling]:
    """Each frame's ruling from the kit's record alone (the panel's checks are folded in
    by :func:`settle`). O(steps)."""
    found: list[Ruling] = []
    refused: tuple[int, str] | None = None  # the step whose reset the target refused
    parted: tuple[int, str] | None = None  # the step the states have differed since
    for frame in recording.frames:
        if len(frame.sides) < 2:
            found.append(Ruling("alone"))
            continue
        if _resets(frame.step):
            refused, parted = None, None
        ruling = _ruling(frame, refused, parted)
        if ruling.refused:
            refused = (frame.number, frame.sides[1].name)
        if ruling.kind == "differs" and parted is None:
            parted = (frame.number, ruling.cause)
        elif parted is not None and _same_state(frame, recording):
            parted = None
        found.append(ruling)
    return found


def _ruling(
    frame: Frame, refused: tuple[int, str] | None, parted: tuple[int, str] | None
) -> Ruling:
    reference, theirs = frame.sides[0], frame.sides[1]
    finding = frame.finding
    if frame.difference == "failure":
        return Ruling("failed", cause=theirs.note or "it failed", where="failure")
    if refused is not None:
        number, name = refused
        return Ruling("not compared", cause=f"{name} refused the reset at step {number}: it "
                      "has no tree, nothing is compared until the next reset")  # fmt: skip
    if theirs.outcome is None:
        return Ruling("not compared", cause=theirs.note or "it did not run the step")
    spec_ok, their_error = "ok" in (reference.outcome or {}), (theirs.outcome or {}).get("error")
    if _resets(frame.step) and spec_ok and their_error is not None:
        named = finding.rules if finding is not None else ERROR_RULES.get(their_error, ())
        cause = (
            f"refuses the reset the spec accepts ({their_error}): it builds no tree, so no "
            "step is compared until the next reset"
        )
        return Ruling("differs", [Mark(rule, "departs", cause) for rule in named], cause,
                      "outcome", refused=True)  # fmt: skip
    if frame.difference is not None:
        assert finding is not None
        cause = finding.cause or "parts ways with the reference"
        since = None
        if parted is not None and not frame.minor:
            since, first = parted
            cause = f"has differed from the spec since step {since} ({first})"
        kind = "minor" if frame.minor else "differs"
        marks = [Mark(rule, "departs", finding.cause or cause) for rule in finding.rules]
        return Ruling(kind, marks, cause, frame.difference, since, finding.kind == "safety")
    if frame.declared:
        marks = [Mark(rule, "declared", reason) for rule, reason in frame.declared]
        return Ruling("declared", marks, frame.waived or "")
    if frame.waived is not None:
        return Ruling("not compared", cause=frame.waived)
    return Ruling("agrees")


def _same_state(frame: Frame, recording: Recording) -> bool:
    """Whether the two sides' states are equal again (recency left out where the profile
    does not compare it). O(state)."""
    dumps = [side.dump for side in frame.sides]
    if None in dumps:
        return False
    recency = recording.compares_recency
    left, right = (normalise("dump", {"ok": dump}, frame.levels, recency=recency) for dump in dumps)
    return bool(left == right)


#: What the target's panel says of a rule, by its mark.
PANEL_MARKS = ("follows", "departs", "declared", "note")


def settle(ruling: Ruling, view: dict[str, Any], deviations: dict[str, str]) -> None:
    """Fold the target panel ``view``'s own checks into ``ruling`` and mark the panel from
    it (module docstring): afterwards each of the panel's rules is ``follows``,
    ``departs``, ``declared`` or ``note``, agreeing with the ruling. O(rules)."""
    if ruling.kind in ("alone", "failed", "not compared"):
        return
    rules: list[list[str]] = view["rules"]
    verdicts: list[str] = view["verdicts"]
    # A rule the kit names as a likely one that the panel shows kept (R-EVICT-1 beside an
    # LRU bug that takes the wrong leaf tail) leaves the ruling, as long as another of the
    # kit's rules still says what differs.
    kept = {
        rule for (rule, _), verdict in zip(rules, verdicts, strict=True) if verdict == "follows"
    }
    if any(mark.rule not in kept for mark in ruling.marks):
        ruling.marks = [mark for mark in ruling.marks if mark.rule not in kept]
    for index, ((rule, text), verdict) in enumerate(zip(rules, verdicts, strict=True)):
        mark = ruling.mark(rule)
        if mark is None and verdict == "departs":
            if rule in deviations:
                mark = Mark(rule, "declared", deviations[rule])
                ruling.marks.append(mark)
                if ruling.kind == "agrees":
                    ruling.kind = "declared"
            elif ruling.differs:
                mark = Mark(rule, "departs", text)
                ruling.marks.append(mark)
            else:
                verdicts[index] = "note"
                rules[index][1] = f"{text} (not a difference the kit's comparison reports)"
                continue
        if mark is None:
            continue
        verdicts[index] = mark.status
        if verdict == "follows":
            # The kit marks it; the panel's own check did not see it: the kit's words.
            rules[index][1] = mark.reason
        elif mark.status == "declared" and "(declared" not in text:
            rules[index][1] = f"{text} (declared: {mark.reason.removeprefix('declared: ')})"
    named = {rule for rule, _ in rules}
    for mark in ruling.marks:
        if mark.rule not in named:
            rules.append([mark.rule, mark.reason])
            verdicts.append(mark.status)
