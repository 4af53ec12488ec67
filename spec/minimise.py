"""Greedy trace minimisation after Hypothesis has shrunk a disagreement.

Hypothesis shrinks the *choices* that generated a run; some steps it cannot delete
(an ``insert`` of an empty list is harmless but keeps the clock moving). This pass
replays the trace with each step removed in turn and keeps every removal after
which the candidate still disagrees, so the reported trace has no step that can be
dropped on its own. Cost: O(n^2) steps for an n-step trace (n is small after
shrinking).
"""

from __future__ import annotations

from .candidate import Candidate, CandidateFailure
from .lockstep import Difference, Disagreement, Lockstep
from .steps import Step, bare


def _disagreement(
    candidate: Candidate, levels: frozenset[str], steps: list[Step]
) -> Difference | None:
    lockstep = Lockstep(candidate, levels)
    try:
        for step in steps:
            lockstep.run(step)
    except Disagreement as exc:
        return exc.difference
    return None


def minimise(difference: Difference, candidate: Candidate, levels: frozenset[str]) -> Difference:
    """A difference whose trace has no single removable step (the first is the reset).

    Returns ``difference`` itself when no step can be removed, or when the
    candidate fails (hangs, crashes) during a trial: minimisation never turns a
    disagreement into a failure report.
    """
    steps = [bare(step) for step in difference.trace]
    best = difference
    index = 1
    try:
        while index < len(steps):
            trial = steps[:index] + steps[index + 1 :]
            found = _disagreement(candidate, levels, trial)
            if found is None or len(found.trace) >= len(steps):
                index += 1
                continue
            best = found
            steps = [bare(step) for step in found.trace]
    except CandidateFailure:
        return difference
    return best
