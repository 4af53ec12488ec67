"""The mutant catalogue: every planted bug is killed by the kit with its default settings."""

from __future__ import annotations

from typing import Any

import pytest

from kachedb_radix import reference
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.levels import KIT_LEVELS, LEVEL_GROUPS
from kachedb_radix.spec.conform.rulemap import load_map
from kachedb_radix.spec.conform.rules import load_rules
from kachedb_radix.spec.conform.run import KitSettings, run_kit
from kachedb_radix.spec.mutants import MUTANT_SETTINGS, MUTANTS, Mutant, MutantResult, check_mutant
from kachedb_radix.spec.mutants.base import MutantTree

RULES = load_rules()


def test_catalogue_is_large_and_covers_every_rule_group() -> None:
    assert len(MUTANTS) >= 60
    groups = {rule.split("-")[1] for mutant in MUTANTS.values() for rule in mutant.rules}
    # Every group of the levels the kit drives: the events level's planted bugs come
    # with the kit's event mode (conform --events, issue 23).
    every = {group for level in KIT_LEVELS for group in LEVEL_GROUPS[level]}
    # ... but a group the kit never judges (R-LIMIT-*: every rule in [unexercised], the
    # suite checks both twins), which no planted bug could be killed for.
    unexercised = load_map().unexercised
    every -= {
        group for group in every
        if all(rule in unexercised for rule in RULES if rule.split("-")[1] == group)
    }  # fmt: skip
    assert every <= groups, every - groups
    for mutant in MUTANTS.values():
        assert set(mutant.rules) <= set(RULES), mutant.name
        assert mutant.description and mutant.target.implementation == f"mutant:{mutant.name}"


@pytest.mark.slow
def test_unmutated_base_conforms() -> None:
    """The hookable copy of the reference is the reference: mutants differ by their bug only."""
    settings = KitSettings(examples=100, budget=10_000)
    assert run_kit(TreeAdapter(MutantTree, "base"), kit=settings).passed
    assert MutantTree.__mro__[1] is reference.RadixTree


#: Results of the parametrised runs, reused by the catalogue-wide check.
RESULTS: dict[str, MutantResult] = {}


def _result(mutant: Mutant) -> MutantResult:
    if mutant.name not in RESULTS:
        RESULTS[mutant.name] = check_mutant(mutant, MUTANT_SETTINGS)
    return RESULTS[mutant.name]


#: The mutants that take longest to kill at defaults (seconds each, not fractions): the
#: wide-tree bugs and the 33-block match. Marked slow (CI's coverage run leaves them out).
SLOW_TO_KILL = frozenset(
    {
        "sampled_lru",
        "leaf_table_overflows",
        "deep_match_truncated",
        "wide_heap_withdraw_unordered",
        "wide_heap_withdraw_unordered_priority",
    }
)


def _catalogue() -> list[Any]:
    return [
        pytest.param(mutant, marks=pytest.mark.slow) if name in SLOW_TO_KILL else mutant
        for name, mutant in MUTANTS.items()
    ]


@pytest.mark.parametrize("mutant", _catalogue(), ids=list(MUTANTS))
def test_mutant_is_killed(mutant: Mutant) -> None:
    result = _result(mutant)
    assert result.killed, (
        f"{mutant.name} ({', '.join(mutant.rules)}) survived: {mutant.description}"
    )
    assert result.rules, "every kill names the rules of its finding"


@pytest.mark.slow
def test_kills_name_the_right_rule() -> None:
    """At least 90% of the kills are attributed to a rule the mutant declares."""
    results = [_result(mutant) for mutant in MUTANTS.values()]
    right = [result.mutant.name for result in results if result.right_rule]
    wrong = {
        result.mutant.name: (result.rules[:1], result.mutant.rules)
        for result in results
        if not result.right_rule
    }
    assert len(right) >= 0.9 * len(results), wrong


def test_state_dependent_mutants_are_in_the_catalogue() -> None:
    """Bugs that wait for a large, deep or wide tree, many evictions, a high clock, the
    eviction queue's maintenance or a full pool are part of what default settings kill."""
    from kachedb_radix.spec.mutants import state

    names = {mutant.name for mutant in MUTANTS.values() if mutant.tree.__module__ == state.__name__}
    assert len(names) >= 8
