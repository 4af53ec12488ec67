"""Run the kit against one candidate and report: pass, a shrunk disagreement, or a failure.

Deterministic: Hypothesis is seeded (``KitSettings.seed``, default 0) and uses no
example database, so the same candidate and settings give the same report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, seed, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from .candidate import Candidate, CandidateFailure
from .levels import LevelError, ordered
from .lockstep import Difference, Disagreement
from .machine import LockstepMachine, Session, ShrinkBudgetSpent
from .minimise import minimise
from .steps import Step


@dataclass(frozen=True)
class KitSettings:
    """How hard the kit searches.

    Attributes:
        examples: random operation sequences to try (Hypothesis ``max_examples``).
        seed: the search seed; the same seed replays the same search.
        steps: most operations per sequence.
        shrink: shrink a disagreement to a minimal trace (off for mutant runs,
            which only need to know that a disagreement exists).
        shrink_seconds: time allowed for Hypothesis's shrinking; past it the
            shortest trace seen so far is reported (after greedy minimisation).
        block_sizes: block sizes to draw from (intersected with the candidate's).
        pool: smallest and largest pool size.
    """

    examples: int = 300
    seed: int = 0
    steps: int = 50
    shrink: bool = True
    shrink_seconds: float = 10.0
    block_sizes: tuple[int, ...] = (1, 2, 3, 4)
    pool: tuple[int, int] = (2, 12)


@dataclass
class Report:
    """The result of one kit run.

    Attributes:
        candidate: its name.
        levels: the levels checked.
        passed: no disagreement and no failure.
        examples: sequences run (including shrinking's replays).
        seconds: wall time of the run.
        difference: the shrunk disagreement, when one was found.
        failure: a protocol failure (hang, crash, malformed answer), named by step.
        failure_trace: the steps up to the failure.
    """

    candidate: str
    levels: list[str]
    passed: bool
    examples: int
    seconds: float
    difference: Difference | None = None
    failure: str | None = None
    failure_trace: list[Step] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """``"pass"``, ``"disagreement"`` or ``"failure"``."""
        if self.failure is not None:
            return "failure"
        return "disagreement" if self.difference is not None else "pass"

    def to_json(self) -> dict[str, Any]:
        """The report as JSON data. O(size of the trace)."""
        data: dict[str, Any] = {
            "candidate": self.candidate,
            "levels": self.levels,
            "verdict": self.verdict,
            "examples": self.examples,
            "seconds": round(self.seconds, 3),
        }
        if self.difference is not None:
            difference = self.difference
            data["difference"] = {
                "step": difference.index + 1,
                "reference": difference.reference,
                "expected": difference.expected,
                "actual": difference.actual,
                "trace": difference.trace,
            }
        if self.failure is not None:
            data["failure"] = self.failure
            data["trace"] = self.failure_trace
        return data

    def explain(self) -> str:
        """A human-readable report."""
        head = (
            f"{self.candidate}: {self.verdict.upper()} at levels {', '.join(self.levels)} "
            f"({self.examples} examples, {self.seconds:.1f} s)"
        )
        if self.difference is not None:
            return head + "\n" + self.difference.explain()
        if self.failure is not None:
            import json

            lines = [head, self.failure, "steps up to the failure (JSON lines):"]
            lines.extend(json.dumps(step) for step in self.failure_trace)
            return "\n".join(lines)
        return head


def choose_levels(candidate: Candidate, requested: frozenset[str] | None) -> frozenset[str]:
    """The levels to check: ``requested`` (default: all the candidate declares).

    Raises:
        LevelError: a requested level is not declared by the candidate.
    """
    declared = candidate.levels | {"core"}
    if requested is None:
        return frozenset(declared)
    missing = set(requested) - declared
    if missing:
        raise LevelError(
            f"{candidate.name} does not declare level(s) {', '.join(ordered(missing))} "
            f"(it declares {', '.join(ordered(declared))})"
        )
    return frozenset(requested | {"core"})


def choose_block_sizes(candidate: Candidate, wanted: tuple[int, ...]) -> tuple[int, ...]:
    """The block sizes to draw: ``wanted`` that the candidate supports, else its smallest."""
    supported = candidate.block_sizes
    if supported is None:
        return wanted
    common = tuple(size for size in wanted if size in supported)
    return common or (min(supported),)


def run_kit(
    candidate: Candidate,
    levels: frozenset[str] | None = None,
    kit: KitSettings | None = None,
) -> Report:
    """Drive ``candidate`` against the reference and report. Cost: up to
    ``examples * steps`` operations on each, plus shrinking when they disagree.

    Raises:
        LevelError: ``levels`` asks for a level the candidate does not declare.
    """
    kit = kit or KitSettings()
    chosen = choose_levels(candidate, levels)
    session = Session(
        candidate=candidate,
        levels=chosen,
        block_sizes=choose_block_sizes(candidate, kit.block_sizes),
        pool=kit.pool,
        shrink_seconds=kit.shrink_seconds,
    )
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if kit.shrink else [])
    search = settings(
        max_examples=kit.examples,
        stateful_step_count=kit.steps,
        deadline=None,
        database=None,
        phases=phases,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )

    class SessionMachine(LockstepMachine):
        def __init__(self) -> None:
            super().__init__(session)

    report = Report(candidate.name, ordered(chosen), passed=False, examples=0, seconds=0.0)
    start = time.perf_counter()
    try:
        run_state_machine_as_test(seed(kit.seed)(SessionMachine), settings=search)
    except Disagreement as exc:
        report.difference = exc.difference
        if kit.shrink:
            report.difference = minimise(exc.difference, candidate, chosen)
    except CandidateFailure as exc:
        report.failure = f"{candidate.name} failed at {exc}"
        report.failure_trace = exc.trace
    except (ShrinkBudgetSpent, Flaky) as exc:
        if session.best is not None:
            # Shrinking was cut short (Hypothesis may report the cut as flakiness):
            # report the shortest disagreement seen, minimised greedily.
            report.difference = minimise(session.best, candidate, chosen)
        else:
            report.failure = (
                f"{candidate.name} is not deterministic: the same operations gave different "
                f"answers on a rerun ({type(exc).__name__}: {exc})"
            )
    else:
        report.passed = True
    report.seconds = time.perf_counter() - start
    report.examples = session.examples
    return report
