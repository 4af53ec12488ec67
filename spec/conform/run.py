"""Run the kit against one candidate and report rule by rule.

:func:`run_kit` searches (:mod:`kachedb_radix.spec.conform.search`) -- by default through every
example, recording the first finding of each rule; with ``first`` stopping at the first -- then
shrinks each finding (:mod:`kachedb_radix.spec.conform.shrink`) and builds a :class:`KitReport`: the
findings, and a table of every rule of the levels checked: ``pass`` (exercised, never broken),
``fail`` (with its shrunk trace), ``waived`` (with the profile's reason) or ``not exercised`` (with
why, when the kit cannot reach it).

Deterministic: Hypothesis is seeded (``KitSettings.seed``, default 0) and uses no
example database, so the same candidate, profile and settings give the same report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .candidate import Candidate
from .errors import KitError
from .levels import (
    GROUP_LEVEL,
    OPT_IN_LEVELS,
    POLICIES,
    TIERS,
    TIERS_EXCLUDE,
    LevelError,
    ordered,
)
from .lockstep import Difference
from .operations import LATEST, offered, operations_of
from .profile import STRICT, Profile
from .rulemap import load_map
from .rules import load_rules
from .search import Session, search
from .shrink import Shrinker

#: Rule statuses in a report's table.
STATUSES = ("pass", "fail", "waived", "not exercised", "not checked")


@dataclass(frozen=True)
class KitSettings:
    """How hard the kit searches.

    Attributes:
        examples: examples to run (Hypothesis ``max_examples``); shrinking replays
            are not counted.
        seed: the search seed; the same seed replays the same search.
        steps: most operations per example (each draws its own length up to it).
        shrink: shrink each finding to a short trace (off for mutant runs).
        shrink_seconds: time allowed for shrinking all findings of a run.
        block_sizes: block sizes to draw from (intersected with the candidate's).
        pool: smallest and largest pool size to draw from.
        first: stop at the first finding (``--first``).
        budget: most operations the whole search runs (fill inserts included); it
            bounds the run's time when the search steers towards large examples.
    """

    examples: int = 300
    seed: int = 0
    steps: int = 300
    shrink: bool = True
    shrink_seconds: float = 20.0
    block_sizes: tuple[int, ...] = (1, 2, 3, 4)
    pool: tuple[int, int] = (2, 4096)
    first: bool = False
    budget: int = 40_000


@dataclass(frozen=True)
class RuleResult:
    """One row of a report's table.

    Attributes:
        rule: the rule id.
        title: its title in SPEC.md.
        level: its level.
        status: one of :data:`STATUSES`.
        reason: why it is waived, not exercised or not checked ("" otherwise).
    """

    rule: str
    title: str
    level: str
    status: str
    reason: str = ""


@dataclass
class KitReport:
    """The result of one kit run.

    Attributes:
        candidate: its name.
        levels: the levels checked.
        profile: the deviations it declared.
        passed: no finding (deviations declared by the profile allowed).
        examples: examples run (shrinking replays not counted).
        operations: operations they ran, fills included (the budget's count).
        seconds: wall time of the run, shrinking included.
        first_finding_seconds: time from the start to the first finding.
        findings: the shrunk findings, one per rule, in the order found.
        waived: findings attributed to waived rules (not failures).
        exercised: the rules the run exercised.
        unsupported: operations of its levels the candidate does not offer (the rules
            only they exercise are not exercised, for that reason).
        kit_error: an error of the kit itself that stopped the run: the verdict is then
            ``kit error`` whatever was found before it (never a pass).
    """

    candidate: str
    levels: list[str]
    profile: Profile = STRICT
    passed: bool = False
    examples: int = 0
    operations: int = 0
    seconds: float = 0.0
    first_finding_seconds: float | None = None
    findings: list[Difference] = field(default_factory=list)
    waived: list[Difference] = field(default_factory=list)
    exercised: set[str] = field(default_factory=set)
    unsupported: frozenset[str] = frozenset()
    kit_error: KitError | None = None

    @property
    def difference(self) -> Difference | None:
        """The first finding that is not a failure (None when there is none)."""
        return next((found for found in self.findings if found.kind != "failure"), None)

    @property
    def failure(self) -> str | None:
        """The first failure's message (a candidate that could not answer), if any."""
        found = next((found for found in self.findings if found.kind == "failure"), None)
        return None if found is None else f"{self.candidate} failed at {found.actual['failure']}"

    @property
    def failure_trace(self) -> list[dict[str, Any]]:
        """The steps up to the first failure."""
        found = next((found for found in self.findings if found.kind == "failure"), None)
        return [] if found is None else found.trace

    @property
    def verdict(self) -> str:
        """``kit error``, ``failure``, ``disagreement``, ``conforms with declared deviations``
        or ``pass``."""
        if self.kit_error is not None:
            return "kit error"
        if any(found.kind == "failure" for found in self.findings):
            return "failure"
        if self.findings:
            return "disagreement"
        return "conforms with declared deviations" if self.deviations() else "pass"

    def deviations(self) -> dict[str, str]:
        """The declared deviations of the levels checked: rule -> reason."""
        return {
            rule: reason
            for rule, reason in self.profile.deviations().items()
            if _level_of(rule) in self.levels
        }

    def table(self) -> list[RuleResult]:
        """Every rule of SPEC.md with its status in this run. O(rules)."""
        rules, unexercised = load_rules(), load_map().unexercised
        failed = {found.rule for found in self.findings}
        deviations = self.deviations()
        rows = []
        for rule in rules.values():
            if rule.level not in self.levels:
                status, reason = "not checked", "level not checked"
            elif rule.id in failed:
                status, reason = "fail", ""
            elif rule.id in deviations:
                status, reason = "waived", deviations[rule.id]
            elif rule.id in self.exercised:
                status, reason = "pass", ""
            else:
                status = "not exercised"
                reason = unexercised.get(rule.id) or self._unsupported_reason(rule.id)
            rows.append(RuleResult(rule.id, rule.title, rule.level, status, reason))
        return rows

    def _unsupported_reason(self, rule: str) -> str:
        """Why ``rule`` was not exercised: the profile waives every rule whose probes are
        its inputs, only operations the candidate lacks exercise it, or the run did not
        reach it."""
        needs = load_map().needs.get(rule)
        if needs and all(need in self.profile.deviations() for need in needs):
            waived = ", ".join(needs)
            return f"no input left: its inputs are the probes of {waived}, which the profile waives"
        ops = load_map().exercised_by(rule)
        if ops and "*" not in ops and ops <= self.unsupported:
            missing = ", ".join(sorted(ops))
            return f"unsupported: the candidate does not offer {missing} (its handshake says so)"
        return "not reached in this run"

    def headline(self) -> str:
        """One line: the verdict, and what it rests on."""
        verdict = self.verdict
        if self.kit_error is not None:
            return f"{verdict}: {self.kit_error.error}"
        if verdict == "conforms with declared deviations":
            verdict += ": " + ", ".join(self.deviations())
        elif self.findings:
            verdict += ": " + ", ".join(found.rule for found in self.findings)
        return verdict

    def to_json(self) -> dict[str, Any]:
        """The report as JSON data (``#/$defs/result`` of ``report.schema.json``)."""
        findings = {found.rule: index for index, found in enumerate(self.findings)}
        return {
            "candidate": self.candidate,
            "levels": self.levels,
            "profile": self.profile.to_json(),
            "verdict": self.verdict,
            "headline": self.headline(),
            "deviations": self.deviations(),
            "examples": self.examples,
            "seconds": round(self.seconds, 3),
            "first_finding_seconds": None
            if self.first_finding_seconds is None
            else round(self.first_finding_seconds, 3),
            "rules_exercised": len(self.exercised),
            "findings": [found.to_json() for found in self.findings],
            "waived_findings": [found.to_json() for found in self.waived],
            "kit_error": None if self.kit_error is None else self.kit_error.to_json(),
            "table": [
                {
                    "rule": row.rule,
                    "title": row.title,
                    "level": row.level,
                    "status": row.status,
                    "reason": row.reason,
                    "finding": findings.get(row.rule),
                }
                for row in self.table()
            ],
        }

    def explain(self) -> str:
        """A human-readable report: headline, findings, then the table's summary."""
        lines = [
            f"{self.candidate}: {self.headline().upper() if not self.findings else self.headline()}"
            f" at levels {', '.join(self.levels)} ({self.examples} examples, "
            f"{self.operations} operations, {self.seconds:.1f} s, "
            f"{len(self.exercised)} rules exercised)"
        ]
        if self.profile.shown_source is not None:
            lines.append(f"  profile: {self.profile.name} ({self.profile.shown_source})")
        if self.kit_error is not None:
            lines.append("")
            lines.append(self.kit_error.explain())
        for found in self.findings:
            lines.append("")
            lines.append(found.explain())
        counts: dict[str, int] = {}
        for row in self.table():
            counts[row.status] = counts.get(row.status, 0) + 1
        lines.append(
            "  rules: "
            + ", ".join(f"{counts[status]} {status}" for status in STATUSES if status in counts)
        )
        return "\n".join(lines)


def _level_of(rule: str) -> str:
    return GROUP_LEVEL.get(rule.split("-")[1], "core")


def choose_levels(candidate: Candidate, requested: frozenset[str] | None) -> frozenset[str]:
    """The levels to check: ``requested`` (default: all the candidate declares, but the
    opt-in ``events`` and ``tiers``). With ``tiers``, ``snapshots`` and ``events`` are
    left out (:data:`~kachedb_radix.spec.conform.levels.TIERS_EXCLUDE`).

    Raises:
        LevelError: a requested level is not declared by the candidate.
    """
    declared = candidate.levels | {"core"}
    if requested is None:
        return frozenset(declared - OPT_IN_LEVELS)
    missing = set(requested) - declared
    if missing:
        raise LevelError(
            f"{candidate.name} does not declare level(s) {', '.join(ordered(missing))} "
            f"(it declares {', '.join(ordered(declared))})"
        )
    chosen = frozenset(requested | {"core"})
    return chosen - TIERS_EXCLUDE if TIERS in chosen else chosen


def choose_block_sizes(
    candidate: Candidate, wanted: tuple[int, ...], profile: Profile = STRICT
) -> tuple[int, ...]:
    """The block sizes to draw: ``wanted`` that the candidate and its profile support,
    else the smallest size both support (or the candidate's smallest)."""
    supported = set(candidate.block_sizes or ()) or None
    if profile.block_sizes is not None:
        declared = set(profile.block_sizes)
        supported = declared if supported is None else (supported & declared) or supported
    if supported is None:
        return wanted
    common = tuple(size for size in wanted if size in supported)
    return common or (min(supported),)


def choose_pool(wanted: tuple[int, int], profile: Profile = STRICT) -> tuple[int, int]:
    """The pool range to draw: ``wanted`` within the profile's supported sizes."""
    if profile.pool_sizes is None:
        return wanted
    low, high = max(wanted[0], profile.pool_sizes[0]), min(wanted[1], profile.pool_sizes[1])
    return (low, high) if low <= high else profile.pool_sizes


def run_kit(
    candidate: Candidate,
    levels: frozenset[str] | None = None,
    kit: KitSettings | None = None,
    *,
    profile: Profile = STRICT,
    reopen: Callable[[], Candidate] | None = None,
) -> KitReport:
    """Drive ``candidate`` against the reference and report. Cost: up to
    ``examples * steps`` operations on each, plus shrinking (``shrink_seconds``).

    ``reopen`` makes a fresh candidate after one fails (a program that died);
    without it the search stops at a failure.

    Raises:
        LevelError: ``levels`` asks for a level the candidate does not declare.
    """
    kit = kit or KitSettings()
    chosen = choose_levels(candidate, levels)
    if profile.reset_fields() and POLICIES not in chosen:
        raise LevelError(
            f"policy {profile.policy!r} needs the policies level, which {candidate.name} "
            "does not declare (or --levels leaves out)"
        )
    session = Session(
        candidate=candidate,
        levels=chosen,
        profile=profile,
        reopen=reopen,
        block_sizes=choose_block_sizes(candidate, kit.block_sizes, profile),
        pool=choose_pool(kit.pool, profile),
        max_steps=kit.steps,
        first=kit.first,
        budget=kit.budget,
    )
    search(session, examples=kit.examples, seed_value=kit.seed)
    findings = list(session.findings.values())
    kit_error = session.kit_error
    if kit.shrink and findings and kit_error is None:
        shrinker = Shrinker(
            session.candidate, chosen, profile, reopen, session.pool, session.block_sizes
        )
        budget = time.perf_counter() + kit.shrink_seconds
        shrunk = []
        for index, found in enumerate(findings):
            if found.kind == "failure" and reopen is None:
                shrunk.append(found)  # a program that died cannot be asked again
                continue
            share = (budget - time.perf_counter()) / (len(findings) - index)
            try:
                shrunk.append(shrinker.shrink(found, max(share, 0.5)))
            except KitError as exc:  # the kit's own bug, met while shrinking: reported
                exc.where = "shrinking a finding"
                kit_error = exc
                shrunk.extend(findings[index:])
                break
        findings = shrunk
        session.candidate = shrinker.candidate
    if session.candidate is not candidate:
        session.candidate.close()  # a restarted program; the caller closes its own
    return KitReport(
        candidate=candidate.name,
        levels=ordered(chosen),
        profile=profile,
        passed=not findings and kit_error is None,
        examples=session.examples,
        operations=session.operations,
        seconds=time.perf_counter() - session.started,
        first_finding_seconds=session.first_at,
        findings=findings,
        waived=list(session.waived.values()),
        exercised=session.exercised,
        unsupported=operations_of(chosen, LATEST) - offered(candidate),
        kit_error=kit_error,
    )


def kit_json(kit: KitSettings) -> dict[str, Any]:
    """``kit`` as JSON data (for a report's ``made_by``); :func:`kit_settings` reads it
    back. O(1)."""
    return {
        "examples": kit.examples,
        "seed": kit.seed,
        "steps": kit.steps,
        "shrink": kit.shrink,
        "shrink_seconds": kit.shrink_seconds,
        "block_sizes": list(kit.block_sizes),
        "pool": list(kit.pool),
        "first": kit.first,
        "budget": kit.budget,
    }


def kit_settings(data: dict[str, Any]) -> KitSettings:
    """The settings :func:`kit_json` wrote. O(1)."""
    return KitSettings(
        **{
            **data,
            "block_sizes": tuple(data["block_sizes"]),
            "pool": (data["pool"][0], data["pool"][1]),
        }
    )


def dumps(reports: list[KitReport], **extra: Any) -> str:
    """Reports as the JSON document of ``report.schema.json``. O(size)."""
    return json.dumps({"results": [report.to_json() for report in reports], **extra}, indent=2)
