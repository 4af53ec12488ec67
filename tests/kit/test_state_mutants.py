"""The state-dependent planted bugs the catalogue kills only in its slow runs
(``SLOW_TO_KILL`` in test_mutants.py), shown directly: each is built into the state its
docstring names, beside the reference, and goes wrong there -- and not before.

These are fast checks that the mutants are what they claim (so the slow kit runs that
kill them test the search, not a mutant that never bites)."""

from __future__ import annotations

from kachedb_radix import reference
from kachedb_radix.reference import RadixTree
from kachedb_radix.spec.mutants import MUTANTS
from kachedb_radix.spec.mutants.state import LEAF_TABLE, PATH_BUFFER, SAMPLE


def _pair(name: str, num_blocks: int) -> tuple[RadixTree, RadixTree]:
    """The mutant ``name`` and the reference, both empty, block size 1."""
    mutant = MUTANTS[name].tree(num_blocks, 1)
    assert type(mutant) is not reference.RadixTree
    return mutant, reference.RadixTree(num_blocks, 1)


def _fill(trees: tuple[RadixTree, RadixTree], leaves: int, refreshed: int) -> None:
    """Insert ``leaves`` single-block leaves (token ``i``, in order) into both trees, then
    match the first ``refreshed`` of them again, oldest first."""
    for tree in trees:
        for leaf in range(leaves):
            tree.insert([leaf])
        for leaf in range(refreshed):
            tree.match([leaf])
        tree.check_invariants()


def _cached(tree: RadixTree) -> set[int]:
    """The leaves (tokens) still cached, read from the dump (a match would stamp them)."""
    (default,) = tree.dump()["namespaces"]
    return {child["tokens"][0] for child in default["children"]}


def _evict_one(trees: tuple[RadixTree, RadixTree], leaves: int) -> tuple[set[int], set[int]]:
    """Evict one block from each tree; the leaves each lost (the mutant's, the spec's).

    Only the reference's invariants are checked after: a mutant past its threshold may
    break its own (a leaf left out of a full queue is unqueued once the queue has room).
    """
    lost = []
    for tree in trees:
        assert len(tree.evict(1)) == 1
        lost.append(set(range(leaves)) - _cached(tree))
    trees[1].check_invariants()
    return lost[0], lost[1]


def test_sampled_lru_agrees_while_its_sample_holds_every_evictable_leaf() -> None:
    trees = _pair("sampled_lru", SAMPLE)
    _fill(trees, SAMPLE, refreshed=SAMPLE // 2)
    assert _evict_one(trees, SAMPLE) == ({SAMPLE // 2}, {SAMPLE // 2})


def test_sampled_lru_misses_the_least_recent_leaf_past_its_sample() -> None:
    # The first SAMPLE leaves (the sample) are refreshed; the least recently used leaf
    # is the first one past the sample, which the mutant never looks at (R-EVICT-2).
    trees = _pair("sampled_lru", SAMPLE + 8)
    _fill(trees, SAMPLE + 8, refreshed=SAMPLE)
    assert _evict_one(trees, SAMPLE + 8) == ({0}, {SAMPLE})


def test_leaf_table_overflows_passes_over_the_leaves_it_never_filed() -> None:
    trees = _pair("leaf_table_overflows", LEAF_TABLE + 8)
    _fill(trees, LEAF_TABLE + 8, refreshed=LEAF_TABLE)
    assert _evict_one(trees, LEAF_TABLE + 8) == ({0}, {LEAF_TABLE})


def test_leaf_table_overflows_agrees_below_its_table_size() -> None:
    trees = _pair("leaf_table_overflows", LEAF_TABLE - 1)
    _fill(trees, LEAF_TABLE - 1, refreshed=3)
    assert _evict_one(trees, LEAF_TABLE - 1) == ({3}, {3})


def test_deep_match_truncated_stops_at_its_path_buffer() -> None:
    mutant, spec = _pair("deep_match_truncated", 2 * PATH_BUFFER)
    tokens = list(range(PATH_BUFFER + 5))
    for tree in (mutant, spec):
        tree.insert(tokens)
    assert spec.match(tokens).length == PATH_BUFFER + 5
    assert mutant.match(tokens).length == PATH_BUFFER  # R-MATCH-1
    assert mutant.match(tokens[:PATH_BUFFER]).length == PATH_BUFFER
