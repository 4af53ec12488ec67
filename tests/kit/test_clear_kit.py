"""The kit on ``reset_prefix_cache`` (R-CLEAR-1, R-CLEAR-2, R-EVENT-7): drawn now and then
besides the swarm's kinds, judged like any operation, its mutants found with their rules;
a candidate that lacks it (an optional operation) is judged at its levels without it."""

from __future__ import annotations

import pytest

from kachedb_radix import reference
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.generate import KINDS, closing_kinds, kinds_for
from kachedb_radix.spec.conform.lockstep import Disagreement, Lockstep
from kachedb_radix.spec.conform.operations import BY_NAME
from kachedb_radix.spec.conform.run import KitSettings, run_kit
from kachedb_radix.spec.mutants import MUTANTS, check_mutant

QUICK = KitSettings(examples=60, budget=12_000, shrink=False)
LEVELS = frozenset({"core", "pinning", "eviction", "namespaces", "snapshots"})


def test_a_clear_closes_each_example_of_the_eviction_level_not_of_the_tiers() -> None:
    """Its row says how it is drawn: once at the end of an example, besides the swarm's
    kinds, so every example up to its end is as before it existed; never at the tiers
    level, whose resets do not offer it."""
    assert not any("reset_prefix_cache" in kinds for kinds in KINDS.values())
    assert closing_kinds(LEVELS) == ("reset_prefix_cache",)
    assert closing_kinds(frozenset({"core"})) == ()
    assert closing_kinds(LEVELS | {"tiers"}) == ()
    assert "reset_prefix_cache" not in kinds_for(LEVELS)
    row = BY_NAME["reset_prefix_cache"]
    assert row.optional and row.since == 7 and row.clears == "cleared" and not row.adopts


@pytest.mark.slow  # no branch only it covers: the CI coverage run leaves it out (.ci/run)
def test_the_reference_passes_and_exercises_both_rules() -> None:
    report = run_kit(TreeAdapter(reference.RadixTree, "reference"), LEVELS, QUICK)
    assert report.passed, report.explain()
    assert {"R-CLEAR-1", "R-CLEAR-2"} <= report.exercised


def test_a_clear_in_lockstep_and_its_refusal() -> None:
    """R-CLEAR-1 with nothing in use, R-CLEAR-2 while a lease pins a block: both sides
    answer alike, and the reads after agree."""
    lockstep = Lockstep(TreeAdapter(reference.RadixTree, "r"), LEVELS)
    lockstep.run({"op": "reset", "num_blocks": 4, "block_size": 1})
    lockstep.run({"op": "insert", "tokens": [1, 2], "namespace": "a", "pin": True})
    assert lockstep.run({"op": "reset_prefix_cache"}) == {"ok": {"cleared": False}}
    lockstep.run({"op": "release", "lease": 1})
    assert lockstep.run({"op": "reset_prefix_cache"}) == {"ok": {"cleared": True}}
    assert lockstep.run({"op": "stats"})["ok"]["cached"] == 0
    assert {"R-CLEAR-1", "R-CLEAR-2"} <= lockstep.exercised


def test_the_clear_mutants_are_found_with_their_rules() -> None:
    """Each names its own rule (the catalogue, tests/kit/test_mutants.py, kills all four;
    clear_ignores_readers, which needs a reader inside at an example's end, is left to it:
    it takes some 40 examples)."""
    for name, rule in (
        ("clear_ignores_pins", "R-CLEAR-2"),
        ("clear_ticks_the_clock", "R-CLEAR-1"),
        ("clear_removes_each_block", "R-EVENT-7"),
    ):
        result = check_mutant(MUTANTS[name])
        assert result.killed and result.rules[0] == rule, (name, result.rules)


def test_a_clear_of_pinned_blocks_is_a_safety_finding() -> None:
    """A candidate that clears while a lease pins blocks hands out KV a request reads:
    never waived (R-CLEAR-2, R-PIN-3)."""
    lockstep = Lockstep(TreeAdapter(MUTANTS["clear_ignores_pins"].tree, "m"), LEVELS)
    lockstep.run({"op": "reset", "num_blocks": 4, "block_size": 1})
    lockstep.run({"op": "insert", "tokens": [1, 2], "namespace": None, "pin": True})
    try:
        lockstep.run({"op": "reset_prefix_cache"})
    except Disagreement as exc:
        assert (exc.difference.kind, exc.difference.rule) == ("safety", "R-CLEAR-2")
    else:  # pragma: no cover - the assertion's message
        raise AssertionError("a clear of pinned blocks went unnoticed")


@pytest.mark.slow  # no branch only it covers: the CI coverage run leaves it out (.ci/run)
def test_a_candidate_without_it_is_judged_without_it() -> None:
    """Optional: a tree class without the method is not offered it, and the rules only it
    exercises read "not exercised (unsupported)"."""

    class Older(reference.RadixTree):
        reset_prefix_cache = None  # type: ignore[assignment]

    report = run_kit(TreeAdapter(Older, "older"), LEVELS, QUICK)
    assert report.passed and "reset_prefix_cache" in report.unsupported
    rows = {row.rule: row for row in report.table()}
    assert rows["R-CLEAR-1"].status == "not exercised"
    assert rows["R-CLEAR-1"].reason.startswith("unsupported")


def test_a_tree_answering_no_bool_is_an_unexpected_answer() -> None:
    """The adapter hands on True or False only: anything else is the tree's bug."""
    import pytest

    from kachedb_radix.spec.conform.candidate import CandidateError

    class Vague(reference.RadixTree):
        def reset_prefix_cache(self) -> bool:
            return None  # type: ignore[return-value]

    adapter = TreeAdapter(Vague, "vague")
    adapter.reset(2, 1)
    with pytest.raises(CandidateError) as raised:
        adapter.reset_prefix_cache()
    assert raised.value.kind == "unexpected:answer"
