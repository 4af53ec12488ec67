"""The mutant catalogue: every planted bug is killed by the kit with its default settings."""

from __future__ import annotations

import pytest

import reference
from spec.adapter import TreeAdapter
from spec.levels import LEVEL_GROUPS
from spec.mutants import MUTANT_SETTINGS, MUTANTS, Mutant, check_mutant
from spec.mutants.base import MutantTree
from spec.rules import load_rules
from spec.runner import KitSettings, run_kit

RULES = load_rules()


def test_catalogue_is_large_and_covers_every_rule_group() -> None:
    assert len(MUTANTS) >= 25
    groups = {rule.split("-")[1] for mutant in MUTANTS.values() for rule in mutant.rules}
    every = {group for groups_of in LEVEL_GROUPS.values() for group in groups_of}
    assert every <= groups, every - groups
    for mutant in MUTANTS.values():
        assert set(mutant.rules) <= set(RULES), mutant.name
        assert mutant.description and mutant.tree.implementation == f"mutant:{mutant.name}"


def test_unmutated_base_conforms() -> None:
    """The hookable copy of the reference is the reference: mutants differ by their bug only."""
    assert run_kit(TreeAdapter(MutantTree, "base"), kit=KitSettings(examples=100)).passed
    assert MutantTree.__mro__[1] is reference.RadixTree


@pytest.mark.parametrize("mutant", list(MUTANTS.values()), ids=list(MUTANTS))
def test_mutant_is_killed(mutant: Mutant) -> None:
    result = check_mutant(mutant, MUTANT_SETTINGS)
    assert result.killed, (
        f"{mutant.name} ({', '.join(mutant.rules)}) survived: {mutant.description}"
    )
