"""``reset_prefix_cache()``: the whole prefix cache dropped at once when no block is in use
(R-CLEAR-1), nothing changed while one is (R-CLEAR-2), one ``AllBlocksCleared`` (R-EVENT-7);
on every twin, the invariants checked after every call."""

from __future__ import annotations

from typing import Any

import pytest

from kachedb_radix.reference.events import AllBlocksCleared, BlockHasher, dump_hashes
from kachedb_radix.reference.policies import POLICIES
from tests.conftest import TreeFactory


def _filled(make_tree: TreeFactory, **options: Any) -> Any:
    tree = make_tree(8, 2, **options)
    tree.insert([1, 2, 3, 4])
    tree.insert([1, 2, 5, 6], "a")
    tree.check_invariants()
    return tree


def test_with_nothing_in_use_every_cached_block_is_freed(make_tree: TreeFactory) -> None:
    """R-CLEAR-1: nothing cached after, every namespace gone (R-NS-3), the whole pool free,
    one version published, the clock where it was; the next insert starts afresh."""
    tree = _filled(make_tree)
    before = tree.stats()
    assert tree.reset_prefix_cache() is True
    tree.check_invariants()
    after = tree.stats()
    assert (after.cached, after.free, after.pinned) == (0, 8, 0)
    assert after.clock == before.clock and after.version == before.version + 1
    assert tree.namespaces() == [] and tree.dump()["namespaces"] == []
    assert tree.match([1, 2, 3, 4]).length == 0 and tree.match([1, 2], "a").length == 0
    assert tree.insert([7, 8, 9, 10]).allocated == (0, 1)  # the smallest free ids (R-ALLOC-2)
    tree.check_invariants()


def test_an_empty_cache_clears_without_a_new_version(make_tree: TreeFactory) -> None:
    tree = make_tree(4, 1)
    assert tree.reset_prefix_cache() is True
    assert tree.stats().version == 0 and tree.stats().free == 4
    tree.check_invariants()


@pytest.mark.parametrize("use", ["lease", "reader", "quarantine"])
def test_while_a_block_is_in_use_nothing_changes(make_tree: TreeFactory, use: str) -> None:
    """R-CLEAR-2: a live lease's pins, a reader inside, a block waiting in quarantine:
    False, and the dump and stats as they were."""
    tree = _filled(make_tree)
    held: Any = None
    if use == "lease":
        held = tree.match([1, 2], pin=True).lease
    elif use == "reader":
        held = tree.reader()
    else:
        reader = tree.reader()
        tree.evict(1)
        reader.leave()  # gone, but its quarantine waits for reclaim
        assert tree.stats().quarantined == 1
    dump, stats = tree.dump(), tree.stats()
    assert tree.reset_prefix_cache() is False
    assert tree.dump() == dump and tree.stats() == stats
    tree.check_invariants()
    if use == "lease":
        held.release()
    elif use == "reader":
        held.leave()
    else:
        tree.reclaim()
    assert tree.reset_prefix_cache() is True
    tree.check_invariants()


def test_a_lease_over_no_block_stays_live(make_tree: TreeFactory) -> None:
    """R-CLEAR-1: a lease pinning nothing (an empty prompt) is not a block in use."""
    tree = _filled(make_tree)
    lease = tree.match([], pin=True).lease
    assert lease is not None and tree.reset_prefix_cache() is True
    assert tree.stats().leases == 1
    lease.release()
    tree.check_invariants()


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_forgets_the_cleared_blocks(make_tree: TreeFactory, policy: str) -> None:
    """R-POL-7: each block's policy state goes with it, as an eviction's does."""
    tree = make_tree(6, 1, policy=policy)
    tree.insert([1, 2, 3])
    tree.match([1, 2])
    assert tree.reset_prefix_cache() is True
    tree.check_invariants()
    tree.insert([4, 5])
    tree.insert([4, 6])
    tree.check_invariants()  # the policy's own check: its state covers the cached blocks
    assert len(tree.evict(1)) == 1
    tree.check_invariants()


def test_one_all_blocks_cleared_and_nothing_when_refused(make_tree: TreeFactory) -> None:
    """R-EVENT-7: one batch with one AllBlocksCleared, no BlockRemoved; a refused clear emits
    nothing; the stream so far, applied to an index, holds the (empty) cache."""
    tree = _filled(make_tree, events=BlockHasher("xxh3_64"))
    tree.take_events()
    lease = tree.match([1, 2], pin=True).lease
    assert tree.reset_prefix_cache() is False and tree.take_events() == []
    lease.release()
    tree.take_events()
    assert tree.reset_prefix_cache() is True
    batches = tree.take_events()
    assert len(batches) == 1 and batches[0].events == [AllBlocksCleared()]
    assert batches[0].ts == tree.clock
    assert dump_hashes(tree.dump(), BlockHasher("xxh3_64")) == {}
    tree.check_invariants()


def test_the_clone_is_cleared_alone(make_tree: TreeFactory) -> None:
    tree = _filled(make_tree)
    twin = tree.clone()
    assert twin.reset_prefix_cache() is True
    assert tree.stats().cached == 4 and twin.stats().cached == 0
    tree.check_invariants()
    twin.check_invariants()
