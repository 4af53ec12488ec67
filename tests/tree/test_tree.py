"""The tree's decisions, one test each, for every implementation (R-MATCH, R-INS,
R-SPLIT, R-EDGE, R-ALLOC, R-PIN, R-LRU, R-EVICT, R-NS, R-DUMP, R-INV)."""

from __future__ import annotations

import json

import pytest

from kachedb_radix.reference.errors import (
    ForeignBlockError,
    ForeignLeaseError,
    InvalidArgumentError,
    LeaseReleasedError,
    OutOfBlocksError,
)
from tests.conftest import TreeFactory
from tests.support.trees import blocks, flatten

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI.
pytestmark = pytest.mark.quick


def edges(tree: object) -> list[tuple[list[int], list[int]]]:
    """(tokens, blocks) of every edge of the default namespace in dump order, depth first."""
    found: list[tuple[list[int], list[int]]] = []

    def visit(edge: dict[str, list[int] | list[dict[str, object]]]) -> None:
        found.append((edge["tokens"], edge["blocks"]))  # type: ignore[arg-type]
        for child in edge["children"]:
            visit(child)  # type: ignore[arg-type]

    for space in tree.dump()["namespaces"]:  # type: ignore[attr-defined]
        for edge in space["children"]:
            visit(edge)
    return found


# ---------------------------------------------------------------- match and insert


def test_empty_tree_matches_nothing(make_tree: TreeFactory) -> None:
    """R-MATCH-1: nothing cached, nothing matched."""
    tree = make_tree(8, 4)
    found = tree.match(blocks(1, 2))
    assert (found.length, tuple(found.blocks), found.lease) == (0, (), None)


def test_match_returns_longest_whole_block_prefix(make_tree: TreeFactory) -> None:
    """R-MATCH-1: the longest cached prefix made of whole blocks, ids root first."""
    tree = make_tree(8, 4)
    tree.insert(blocks(1, 2, 3))
    assert tuple(tree.match(blocks(1, 2, 3)).blocks) == (0, 1, 2)
    # A partial trailing block never counts, even when its tokens agree.
    assert tree.match([*blocks(1, 2), 3, 3]).length == 8
    # Divergence inside the second block stops the match before that block.
    diverging = [*blocks(1), 2, 2, 9, 2, *blocks(3)]
    found = tree.match(diverging)
    assert (found.length, tuple(found.blocks)) == (4, (0,))
    assert tree.match(blocks(2, 1)).length == 0


def test_match_length_is_always_a_multiple_of_block_size(make_tree: TreeFactory) -> None:
    """R-MATCH-1: every length is a multiple of B."""
    tree = make_tree(32, 3)
    tree.insert(list(range(20)))
    for cut in range(21):
        assert tree.match(list(range(cut))).length == cut // 3 * 3


def test_match_never_changes_the_shape(make_tree: TreeFactory) -> None:
    """R-MATCH-2: a match ending inside an edge does not split it; only stamps move."""
    tree = make_tree(8, 4)
    tree.insert(blocks(1, 2, 3, 4))
    shape = [(key, info[0], info[1]) for key, info in flatten(tree.dump()).items()]
    tree.match(blocks(1, 2))
    assert [(key, info[0], info[1]) for key, info in flatten(tree.dump()).items()] == shape
    assert len(edges(tree)) == 1


def test_insert_caches_whole_blocks_and_ignores_the_partial_tail(make_tree: TreeFactory) -> None:
    """R-INS-1, R-INS-3: all whole blocks are cached; a trailing partial block is not."""
    tree = make_tree(8, 4)
    done = tree.insert([*blocks(5, 6), 7, 7, 7])
    assert (done.length, tuple(done.blocks), done.reused) == (8, (0, 1), 0)
    assert tuple(done.allocated) == (0, 1)
    assert tuple(done.evicted) == ()
    assert tree.match(blocks(5, 6, 7)).length == 8
    short = tree.insert([1, 2, 3])
    assert (short.length, tuple(short.blocks), tuple(short.allocated)) == (0, (), ())


def test_insert_reuses_the_cached_prefix(make_tree: TreeFactory) -> None:
    """R-INS-2: cached blocks are reused, only the new tail is allocated."""
    tree = make_tree(8, 4)
    tree.insert(blocks(1, 2))
    done = tree.insert(blocks(1, 2, 3, 4))
    assert done.reused == 2
    assert tuple(done.allocated) == (2, 3)
    assert tuple(done.blocks) == (0, 1, 2, 3)
    again = tree.insert(blocks(1, 2, 3, 4))
    assert (again.reused, tuple(again.allocated)) == (4, ())
    # Extending a leaf keeps one edge: the chain is stored and dumped as one.
    assert edges(tree) == [(blocks(1, 2, 3, 4), [0, 1, 2, 3])]


def test_new_blocks_get_the_smallest_free_ids_in_path_order(make_tree: TreeFactory) -> None:
    """R-INS-4, R-ALLOC-2: the n smallest free ids, ascending along the path."""
    tree = make_tree(6, 1)
    tree.insert([1, 2, 3])  # ids 0, 1, 2
    tree.insert([7])  # id 3
    assert tree.evict(2) == (2, 1)  # [1,2,3] is older than [7]: its tail goes first
    done = tree.insert([1, 5, 6, 8])
    assert tuple(done.allocated) == (1, 2, 4)
    assert tuple(done.blocks) == (0, 1, 2, 4)


def test_next_block_ids_foretell_an_insert_that_does_not_evict(make_tree: TreeFactory) -> None:
    """R-ALLOC-2: ``next_block_ids(n)`` names the ids the next insert of ``n`` new blocks
    hands out, in path order, when it evicts nothing; fewer when fewer are free. It
    changes nothing."""
    tree = make_tree(6, 1)
    tree.insert([1, 2, 3])
    tree.insert([7])
    assert tree.evict(2) == (2, 1)
    before = tree.dump()
    assert tree.next_block_ids(3) == [1, 2, 4]
    assert tree.next_block_ids(9) == [1, 2, 4, 5] and tree.next_block_ids(0) == []
    assert tree.dump() == before
    assert tuple(tree.insert([1, 5, 6, 8]).allocated) == (1, 2, 4)
    with pytest.raises(InvalidArgumentError):
        tree.next_block_ids(-1)
    assert tree.dump()["free"] == [5]
    tree.check_invariants()


def test_divergence_inside_an_edge_splits_at_the_block_boundary(make_tree: TreeFactory) -> None:
    """R-SPLIT-1, R-EDGE-1, R-EDGE-2: the shared blocks become the parent edge."""
    tree = make_tree(8, 4)
    tree.insert(blocks(1, 2, 3))
    done = tree.insert([*blocks(1, 2), 3, 3, 9, 3])
    assert done.reused == 2
    assert tuple(done.blocks) == (0, 1, 3)
    assert edges(tree) == [
        (blocks(1, 2), [0, 1]),
        (blocks(3), [2]),
        ([3, 3, 9, 3], [3]),
    ]
    for tokens, ids in edges(tree):
        assert len(tokens) == 4 * len(ids) and ids  # R-EDGE-1
    tree.check_invariants()


def test_split_carries_pins_and_stamps_with_their_blocks(make_tree: TreeFactory) -> None:
    """R-SPLIT-2: after a split each block keeps its pin count and stamp."""
    tree = make_tree(8, 2)
    held = tree.insert([1, 1, 2, 2, 3, 3], pin=True).lease
    before = flatten(tree.dump())
    tree.insert([1, 1, 2, 2, 4, 4])
    after = flatten(tree.dump())
    old_leaf = (None, ((1, 1), (2, 2), (3, 3)))
    assert after[old_leaf] == before[old_leaf]  # id, pin 1, stamp 1: untouched
    assert after[(None, ((1, 1),))][:2] == (0, 1)  # still pinned, now restamped
    held.release()
    assert all(pins == 0 for _, pins, _ in flatten(tree.dump()).values())
    tree.check_invariants()


def test_insert_makes_room_by_evicting_exactly_the_shortfall(make_tree: TreeFactory) -> None:
    """R-INS-5: only the missing blocks are evicted, LRU first, and reported in order."""
    tree = make_tree(4, 1)
    tree.insert([9])  # id 0, oldest
    tree.insert([1, 2, 3])  # ids 1..3: the pool is full
    done = tree.insert([1, 2, 3, 4])
    assert tuple(done.evicted) == (0,)
    assert tuple(done.allocated) == (0,)
    assert tree.stats().free == 0


def test_insert_never_evicts_the_prefix_it_extends(make_tree: TreeFactory) -> None:
    """R-INS-5, R-INS-6: the reused path is off limits; if nothing else frees, refuse."""
    tree = make_tree(3, 1)
    tree.insert([1, 2, 3])
    before = tree.dump()
    with pytest.raises(OutOfBlocksError):
        tree.insert([1, 2, 3, 4])
    assert tree.dump() == before


def test_insert_may_trim_the_unused_tail_of_the_edge_it_diverges_from(
    make_tree: TreeFactory,
) -> None:
    """R-INS-5, R-SPLIT-1: the tail past the divergence is not on the path and may go."""
    tree = make_tree(4, 1)
    tree.insert([1, 2, 3, 4])
    done = tree.insert([1, 2, 9])
    assert tuple(done.evicted) == (3,)
    assert tuple(done.allocated) == (3,)
    assert edges(tree) == [([1, 2], [0, 1]), ([3], [2]), ([9], [3])]
    tree.check_invariants()


def test_out_of_blocks_changes_nothing(make_tree: TreeFactory) -> None:
    """R-INS-6, R-ALLOC-3, R-ERR-2: pinned blocks cannot make room; the insert is refused."""
    tree = make_tree(4, 2)
    tree.insert([1, 1, 2, 2, 3, 3], pin=True)
    before = tree.dump()
    with pytest.raises(OutOfBlocksError) as raised:
        tree.insert([5, 5, 6, 6])
    assert raised.value.kind == "out_of_blocks"
    assert "2 new blocks" in str(raised.value)
    assert tree.dump() == before
    assert tree.clock == before["clock"]


# ---------------------------------------------------------------- pinning


def test_lease_covers_exactly_the_returned_blocks(make_tree: TreeFactory) -> None:
    """R-PIN-1: the lease pins what the call returned, nothing more."""
    tree = make_tree(8, 4)
    tree.insert(blocks(1, 2, 3))
    found = tree.match(blocks(1, 2, 7), pin=True)
    lease = found.lease
    assert tuple(lease.blocks) == tuple(found.blocks) == (0, 1)
    assert lease.length == 8
    assert not lease.released
    assert tree.stats().pinned == 2
    assert [info[1] for info in flatten(tree.dump()).values()] == [1, 1, 0]


def test_pins_inside_an_edge_protect_only_those_blocks(make_tree: TreeFactory) -> None:
    """R-PIN-2: a pin on part of an edge does not protect the rest of it."""
    tree = make_tree(8, 4)
    tree.insert(blocks(1, 2, 3, 4))
    tree.match(blocks(1, 2), pin=True)
    assert tree.evict(8) == (3, 2)
    assert tree.stats().cached == 2


def test_pinned_blocks_and_their_ancestors_are_never_evicted(make_tree: TreeFactory) -> None:
    """R-PIN-3: eviction skips pinned leaves and everything above them."""
    tree = make_tree(8, 1)
    tree.insert([1, 2, 3], pin=True)
    tree.insert([1, 2, 4])
    tree.insert([5, 6])
    freed = tree.evict(8)
    assert sorted(freed) == [3, 4, 5]
    assert set(tree.match([1, 2, 3]).blocks) == {0, 1, 2}


def test_two_leases_stack_and_release_one_at_a_time(make_tree: TreeFactory) -> None:
    """R-PIN-1, R-PIN-4: pins count leases; each release removes one."""
    tree = make_tree(8, 2)
    first = tree.insert([1, 1, 2, 2], pin=True).lease
    second = tree.match([1, 1], pin=True).lease
    assert [info[1] for info in flatten(tree.dump()).values()] == [2, 1]
    first.release()
    assert [info[1] for info in flatten(tree.dump()).values()] == [1, 0]
    tree.release(second)
    assert tree.stats().pinned == 0
    assert tree.stats().leases == 0


def test_releasing_twice_is_an_error(make_tree: TreeFactory) -> None:
    """R-PIN-4: the second release raises and changes nothing."""
    tree = make_tree(8, 2)
    with tree.insert([1, 1], pin=True).lease as lease:
        assert not lease.released
    assert lease.released
    before = tree.dump()
    with pytest.raises(LeaseReleasedError):
        lease.release()
    with pytest.raises(LeaseReleasedError):
        tree.release(lease)
    assert tree.dump() == before


def test_foreign_lease_is_refused(make_tree: TreeFactory) -> None:
    """R-PIN-5: a lease works only on the tree that issued it."""
    tree = make_tree(8, 2)
    other = make_tree(8, 2)
    lease = other.insert([1, 1], pin=True).lease
    tree.insert([1, 1])
    before = tree.dump()
    for bogus in (lease, None, "lease", 1):
        with pytest.raises(ForeignLeaseError):
            tree.release(bogus)
    assert tree.dump() == before
    assert not lease.released


# ---------------------------------------------------------------- recency and eviction


def test_clock_advances_once_per_successful_match_insert_release(make_tree: TreeFactory) -> None:
    """R-LRU-3: match, insert and release tick; evict, reads and failures do not."""
    tree = make_tree(2, 1)
    assert tree.clock == 0
    lease = tree.insert([1, 2], pin=True).lease
    assert tree.clock == 1
    tree.match([1])
    assert tree.clock == 2
    with pytest.raises(OutOfBlocksError):
        tree.insert([3])
    tree.evict(1)
    tree.stats()
    tree.dump()
    assert tree.clock == 2
    lease.release()
    assert tree.clock == 3


def test_calls_stamp_the_blocks_they_use(make_tree: TreeFactory) -> None:
    """R-LRU-1, R-LRU-2: used blocks get the new time; deeper stamps never exceed shallower."""
    tree = make_tree(8, 1)
    tree.insert([1, 2, 3])
    tree.match([1, 2])
    assert [info[2] for info in flatten(tree.dump()).values()] == [2, 2, 1]
    lease = tree.match([1], pin=True).lease
    lease.release()
    assert [info[2] for info in flatten(tree.dump()).values()] == [4, 2, 1]


def test_leaf_tails_never_share_a_stamp(make_tree: TreeFactory) -> None:
    """R-LRU-4: one tick per call stamps one path, so leaf tails are totally ordered."""
    tree = make_tree(16, 1)
    for tokens in ([1, 2], [1, 3], [4], [1, 2, 5], [4, 6]):
        tree.insert(tokens)
        tree.match(tokens[:1])
    dump = tree.dump()
    tails: list[int] = []

    def visit(edge: dict[str, list[int] | list[dict[str, object]]]) -> None:
        if not edge["children"]:
            tails.append(edge["stamps"][-1])  # type: ignore[arg-type]
        for child in edge["children"]:
            visit(child)  # type: ignore[arg-type]

    for edge in dump["namespaces"][0]["children"]:
        visit(edge)
    assert len(tails) == len(set(tails)) == 3
    tree.check_invariants()


def test_eviction_frees_single_blocks_from_leaf_tails(make_tree: TreeFactory) -> None:
    """R-EVICT-1: one block at a time, deepest first; the leaf shrinks in place."""
    tree = make_tree(8, 2)
    tree.insert([1, 1, 2, 2, 3, 3])
    assert tree.evict(1) == (2,)
    assert tree.match([1, 1, 2, 2, 3, 3]).length == 4
    assert tree.evict(1) == (1,)
    assert tree.evict(1) == (0,)
    assert tree.evict(1) == ()


def test_least_recently_used_leaf_goes_first(make_tree: TreeFactory) -> None:
    """R-EVICT-2: the oldest leaf tail is freed first; a match makes a path young."""
    tree = make_tree(8, 1)
    tree.insert([1, 2])  # 0, 1
    tree.insert([3, 4])  # 2, 3
    tree.insert([1, 5])  # 4 under [1]
    tree.match([3, 4])
    # Leaf tails: [1,2] at t=1, [1,5] at t=3, [3,4] at t=4.
    assert tree.evict(4) == (1, 4, 0, 3)
    assert tree.evict(1) == (2,)


def test_evict_returns_what_it_could_free(make_tree: TreeFactory) -> None:
    """R-EVICT-4: at most the evictable blocks, in order; the clock does not move."""
    tree = make_tree(8, 1)
    tree.insert([1, 2, 3], pin=True)
    tree.insert([4, 5])
    clock = tree.clock
    assert tree.evict(0) == ()
    assert tree.evict(10) == (4, 3)
    assert tree.clock == clock
    assert tree.stats().evictable == 0


# ---------------------------------------------------------------- namespaces


def test_namespaces_never_share_blocks(make_tree: TreeFactory) -> None:
    """R-NS-1, R-NS-2: each namespace has its own root; nothing matches across them."""
    tree = make_tree(8, 2)
    tree.insert([1, 1, 2, 2], "tenant-a")
    assert tree.match([1, 1, 2, 2]).length == 0
    assert tree.match([1, 1, 2, 2], "tenant-b").length == 0
    assert tree.match([1, 1, 2, 2], "tenant-a").length == 4
    done = tree.insert([1, 1, 2, 2])
    assert (done.reused, tuple(done.allocated)) == (0, (2, 3))
    assert tree.namespaces() == [None, "tenant-a"]


def test_an_emptied_namespace_disappears(make_tree: TreeFactory) -> None:
    """R-NS-3: when its last block is evicted, a namespace leaves namespaces() and dump()."""
    tree = make_tree(8, 2)
    tree.insert([1, 1], "b")
    tree.insert([2, 2], "a")
    assert tree.namespaces() == ["a", "b"]
    tree.evict(1)
    assert tree.namespaces() == ["a"]
    assert [space["namespace"] for space in tree.dump()["namespaces"]] == ["a"]
    tree.check_invariants()


def test_namespace_must_be_none_or_str(make_tree: TreeFactory) -> None:
    """R-NS-4: any other namespace is an invalid argument."""
    tree = make_tree(8, 2)
    with pytest.raises(InvalidArgumentError):
        tree.match([1, 1], 3)
    with pytest.raises(InvalidArgumentError):
        tree.insert([1, 1], b"a")


# ---------------------------------------------------------------- dump, counters, render


def test_dump_is_canonical_json(make_tree: TreeFactory) -> None:
    """R-DUMP-1: plain JSON data with the documented fields; same calls, same dump."""

    def build() -> object:
        tree = make_tree(8, 2)
        tree.insert([1, 1, 2, 2], pin=True)
        tree.insert([1, 1, 3, 3], "x")
        tree.match([1, 1])
        return tree

    first, second = build(), build()
    dump = first.dump()  # type: ignore[attr-defined]
    assert dump == second.dump()  # type: ignore[attr-defined]
    assert json.loads(json.dumps(dump)) == dump
    assert set(dump) == {
        "format",
        "block_size",
        "num_blocks",
        "clock",
        "free",
        "quarantine",
        "namespaces",
    }
    assert dump["free"] == [4, 5, 6, 7]
    assert [space["namespace"] for space in dump["namespaces"]] == [None, "x"]


def test_dump_merges_one_child_chains(make_tree: TreeFactory) -> None:
    """R-DUMP-2: after the sibling is evicted, parent and only child dump as one edge."""
    tree = make_tree(8, 1)
    tree.insert([1, 2, 3])
    tree.insert([1, 2, 4])
    assert edges(tree) == [([1, 2], [0, 1]), ([3], [2]), ([4], [3])]
    assert tree.evict(1) == (2,)
    assert edges(tree) == [([1, 2, 4], [0, 1, 3])]
    tree.check_invariants()


def test_dump_sorts_children_by_first_block(make_tree: TreeFactory) -> None:
    """R-DUMP-2: children appear in ascending order of their first block's tokens."""
    tree = make_tree(8, 2)
    for first in (5, 1, 3):
        tree.insert([0, 0, first, first])
    assert [tokens[:2] for tokens, _ in edges(tree)[1:]] == [[1, 1], [3, 3], [5, 5]]


def test_counters_add_up(make_tree: TreeFactory) -> None:
    """R-INV-1: free + cached = pool, pinned + evictable = cached."""
    tree = make_tree(10, 2)
    tree.insert([1, 1, 2, 2, 3, 3], pin=True)
    tree.insert([4, 4])
    stats = tree.stats()
    assert (stats.num_blocks, stats.free, stats.cached, stats.pinned) == (10, 6, 4, 3)
    assert stats.evictable == 1
    assert stats.leases == 1
    assert stats.free + stats.cached == stats.num_blocks
    assert (tree.block_size, tree.num_blocks) == (2, 10)


def test_render_draws_every_edge(make_tree: TreeFactory) -> None:
    """R-DUMP-1: the picture is drawn from the dump: counts, first tokens, ids, pins, stamps."""
    tree = make_tree(8, 2)
    tree.insert([1, 1, 2, 2, 3, 3], pin=True)
    tree.insert([1, 1, 4, 4])
    text = tree.render()
    assert text.splitlines() == [
        "RadixTree  B=2  blocks: 4 cached (3 pinned, 1 evictable), 4 free of 8  clock=2",
        "namespace (default)",
        "└── 1 block [1 1]  #0  pin 1  t=2",
        "    ├── 2 blocks [2 2 3 3]  #1-2  pin 1  t=1",
        "    └── 1 block [4 4]  #3  t=2",
    ]


@pytest.mark.slow  # no branch only it covers: the CI coverage run leaves it out (.ci/run)
def test_dump_and_render_survive_a_very_deep_tree(make_tree: TreeFactory) -> None:
    """R-DUMP-1, R-DUMP-2: thousands of branching levels dump and draw without recursion."""
    tree = make_tree(4000, 1)
    base = [index % 3 for index in range(3000)]
    tree.insert(base)
    for cut in range(0, 3000, 3):
        tree.insert([*base[:cut], 5])
    dump = tree.dump()
    depth = 0
    children = dump["namespaces"][0]["children"]
    while children:
        depth += 1
        children = children[-1]["children"] if children[-1]["children"] else children[0]["children"]
    assert depth >= 1000
    assert len(tree.render().splitlines()) == 2 + 2000


def test_eviction_key_is_the_stamp_then_the_block(make_tree: TreeFactory) -> None:
    """R-EVICT-2, R-EVICT-3: each block's eviction key is (its last stamp, its id), and an
    evicted block keeps the key it had; an id outside the pool is refused."""
    tree = make_tree(4, 1)
    tree.insert([1, 2])
    tree.match([1])
    assert tree.eviction_key(0) == (2, 0) and tree.eviction_key(1) == (1, 1)
    assert tree.evict(1) == (1,) and tree.eviction_key(1) == (1, 1)
    assert tree.eviction_key(3) == (0, 3)  # never used
    for bad in (4, -1, True, 1.0):
        with pytest.raises(ForeignBlockError):
            tree.eviction_key(bad)
    tree.check_invariants()
