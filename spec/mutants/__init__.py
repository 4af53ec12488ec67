"""The mutant catalogue: planted-bug variants of the reference the kit must catch.

Each mutant (see :mod:`kachedb_radix.spec.mutants.base`) is the reference with exactly one bug,
named, described, and tagged with the rules it violates; together they cover every
rule group. ``kachedb-radix conform --mutants`` runs the kit against each and
reports killed/total with the time each took to kill; ``tests/kit/test_mutants.py``
requires all of them to be killed with the default settings.

Mutants are killed, not explained: the search stops at the first finding and does
not shrink it. Each kill names the rule the finding was attributed to
(:mod:`kachedb_radix.spec.conform.rulemap`); it is *right* when that rule is one the mutant
declares it violates. To see a minimal trace for one, run the kit on it directly:
``kachedb-radix conform kachedb_radix.spec.mutants.eviction:LruReversed``.

A tie-break mutant (ties to the larger block id) is deliberately absent: with the
clock advanced once per operation no two leaf tails ever share a stamp (R-LRU-4),
so the tie-break is unobservable on its own and such a mutant would be equivalent.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import cast

from ..conform.adapter import TreeAdapter
from ..conform.errors import KitError
from ..conform.levels import TIERS_EXCLUDE
from ..conform.profile import STRICT, parse
from ..conform.run import KitSettings, run_kit
from . import (
    allocation,
    clear,
    events,
    eviction,
    namespaces,
    pinning,
    policies,
    recency,
    snapshots,
    state,
    structure,
    tiers,
    tokens,
    views,
)
from .base import REGISTRY, Mutant

#: Every mutant, by name.
MUTANTS: dict[str, Mutant] = dict(REGISTRY)

#: Modules holding mutants, for readers.
MODULES = (
    tokens,
    structure,
    allocation,
    pinning,
    recency,
    eviction,
    clear,
    policies,
    namespaces,
    views,
    snapshots,
    state,
    events,
    tiers,
)

#: The profile event mutants run under: the spec's, but Dynamo's XXH3 hashes (fast) for
#: the scheme -- a bug of the stream shows whatever the hashes are.
EVENT_MUTANT_PROFILE = parse({"name": "events-xxh3", "events": {"scheme": "xxh3_64"}})

#: The settings mutant runs use by default: the kit's defaults, stopping at the first
#: finding, without shrinking.
MUTANT_SETTINGS = KitSettings(shrink=False, first=True)


@dataclass(frozen=True)
class MutantResult:
    """How the kit fared against one mutant.

    Attributes:
        mutant: the mutant.
        killed: the kit found a disagreement.
        seconds: time to the first disagreement (or to give up).
        examples: examples run.
        step: the step of the first finding, described, when killed.
        rules: the rules the first finding was attributed to, the primary first.
        kit_error: an error of the kit itself that stopped the run (the mutant is then
            not killed: nothing was judged).
    """

    mutant: Mutant
    killed: bool
    seconds: float
    examples: int
    step: str = ""
    rules: tuple[str, ...] = ()
    kit_error: KitError | None = None

    @property
    def right_rule(self) -> bool:
        """Killed, and the finding's primary rule is one the mutant declares."""
        return self.killed and bool(self.rules) and self.rules[0] in self.mutant.rules


def check_mutant(mutant: Mutant, kit: KitSettings = MUTANT_SETTINGS) -> MutantResult:
    """Run the kit against one mutant. Cost: up to ``kit.examples`` examples."""
    start = time.perf_counter()
    adapter = TreeAdapter(mutant.tree, f"mutant:{mutant.name}", tier_factory=mutant.tiers)
    if mutant.tiers is not None:
        # A bug of the tier layer: the opt-in tiers level, without the policies' probes.
        levels = frozenset(adapter.levels) - TIERS_EXCLUDE - {"policies"}
        report = run_kit(adapter, levels, kit)
    elif mutant.events:
        # A bug of the event stream: the opt-in events level, with the fastest hashes.
        levels = frozenset(adapter.levels) - {"policies"}
        report = run_kit(adapter, levels, kit, profile=EVENT_MUTANT_PROFILE)
    elif mutant.policy == "lru" and mutant.policy_options is None:
        # An lru bug is searched for at every level but policies (their probes, retention
        # requests, R-POL-8, would only thin out the search for it) and events (opt-in).
        levels = frozenset(adapter.levels) - {"policies", "events"}
        report = run_kit(adapter, levels, kit)
    else:
        profile = STRICT.with_policy(mutant.policy, mutant.policy_options)
        report = run_kit(adapter, kit=kit, profile=profile)
    seconds = time.perf_counter() - start
    step, rules = "", cast(tuple[str, ...], ())
    if report.findings:
        from ..conform.steps import describe

        found = report.findings[0]
        step, rules = describe(found.trace[found.index]), found.rules
    killed = report.kit_error is None and not report.passed
    return MutantResult(
        mutant, killed, seconds, report.examples, step, rules, kit_error=report.kit_error
    )


__all__ = ["MODULES", "MUTANTS", "MUTANT_SETTINGS", "Mutant", "MutantResult", "check_mutant"]
