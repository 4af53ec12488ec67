"""Snapshots and reader epochs (R-SNAP-1..2, R-EPOCH-1..4), for every implementation."""

from __future__ import annotations

import pytest

from kachedb_radix.reference.errors import OutOfBlocksError, ReaderLeftError
from tests.conftest import TreeFactory

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI.
pytestmark = pytest.mark.quick


def test_every_successful_call_publishes_one_version(make_tree: TreeFactory) -> None:
    """R-SNAP-1: +1 per match, insert, release and eviction that frees something."""
    tree = make_tree(3, 1)
    assert tree.version == 0
    lease = tree.insert([1, 2], pin=True).lease
    assert tree.version == 1
    tree.match([1])
    assert tree.version == 2
    tree.evict(0)
    tree.evict(5)  # everything is pinned: nothing freed, nothing published
    assert tree.version == 2
    lease.release()
    assert tree.version == 3
    assert tree.evict(1) == (1,)
    assert tree.version == 4
    tree.insert([7, 8, 9])
    # The insert evicted one block (published), then inserted (published).
    assert tree.version == 6
    with pytest.raises(OutOfBlocksError):
        tree.insert([4, 5, 6, 9])
    assert tree.version == 6
    assert tree.stats().version == 6


def test_snapshot_keeps_answering_for_its_version(make_tree: TreeFactory) -> None:
    """R-SNAP-2: later inserts, splits, extensions and evictions do not show through."""
    tree = make_tree(8, 2)
    tree.insert([1, 1, 2, 2, 3, 3])
    snap = tree.snapshot()
    before = snap.dump()
    assert (snap.version, snap.clock) == (1, 1)
    tree.insert([1, 1, 2, 2, 9, 9])  # splits the edge snap sees
    tree.insert([1, 1, 2, 2, 3, 3, 4, 4])  # extends it
    tree.evict(8)
    assert tree.match([1, 1, 2, 2, 3, 3]).length == 0
    found = snap.match([1, 1, 2, 2, 3, 3, 4, 4])
    assert (found.length, tuple(found.blocks), found.lease) == (6, (0, 1, 2), None)
    assert snap.match([1, 1, 2, 2, 9, 9]).length == 4
    assert snap.dump() == before
    assert before["namespaces"][0]["children"][0] == {
        "tokens": [1, 1, 2, 2, 3, 3],
        "blocks": [0, 1, 2],
        "children": [],
    }


def test_snapshot_match_touches_nothing(make_tree: TreeFactory) -> None:
    """R-SNAP-2: readers neither stamp nor pin: the LRU order and the clock stay put."""
    tree = make_tree(8, 2)
    tree.insert([1, 1, 2, 2])
    before = tree.dump()
    with tree.reader() as reader:
        assert reader.match([1, 1, 2, 2]).length == 4
        assert tree.snapshot().match([1, 1]).length == 2
        assert tree.dump() == before
    assert tree.clock == 1


def test_snapshot_namespaces_are_separate(make_tree: TreeFactory) -> None:
    """R-SNAP-2, R-NS-2: a snapshot matches per namespace like the tree."""
    tree = make_tree(8, 2)
    tree.insert([1, 1], "a")
    snap = tree.snapshot()
    assert snap.match([1, 1]).length == 0
    assert snap.match([1, 1], "a").length == 2
    assert snap.namespaces() == ["a"]


def test_blocks_freed_under_a_reader_wait_in_quarantine(make_tree: TreeFactory) -> None:
    """R-EPOCH-1, R-EPOCH-2: freed while a reader is inside, reused only after it leaves."""
    tree = make_tree(4, 1)
    tree.insert([1, 2, 3, 4])
    reader = tree.reader()
    assert tree.evict(2) == (3, 2)
    stats = tree.stats()
    assert (stats.free, stats.cached, stats.quarantined) == (0, 2, 2)
    assert stats.readers == 1 and stats.oldest_reader == reader.epoch
    assert tree.dump()["quarantine"] == [3, 2]
    assert reader.match([1, 2, 3, 4]).length == 4  # still sees them, safely
    assert tree.reclaim() == ()
    reader.leave()
    assert tree.reclaim() == (3, 2)
    assert tree.stats().free == 2
    tree.check_invariants()


def test_readers_entering_after_a_free_do_not_hold_it(make_tree: TreeFactory) -> None:
    """R-EPOCH-2: only readers that entered before the free delay its reuse."""
    tree = make_tree(4, 1)
    tree.insert([1, 2, 3])
    early = tree.reader()
    tree.evict(1)  # block 2 quarantined for `early`
    late = tree.reader()
    assert late.match([1, 2, 3]).length == 2
    tree.evict(1)  # block 1 quarantined for both
    early.leave()
    assert tree.reclaim() == (2,)
    late.leave()
    assert tree.reclaim() == (1,)


def test_insert_reclaims_before_it_evicts(make_tree: TreeFactory) -> None:
    """R-EPOCH-2, R-INS-5: a short insert first takes back what the grace period allows."""
    tree = make_tree(3, 1)
    tree.insert([1, 2])
    tree.insert([5])
    with tree.reader():
        tree.evict(1)  # [1,2]'s tail, block 1, into quarantine
    done = tree.insert([7, 8])
    # Block 1 came back from quarantine; block 0 ([1]'s last block) was evicted.
    assert (tuple(done.allocated), tuple(done.evicted)) == ((0, 1), (0,))


def test_with_a_reader_inside_insert_does_not_evict(make_tree: TreeFactory) -> None:
    """R-EPOCH-3: evicting would only fill the quarantine; out of blocks, nothing changes."""
    tree = make_tree(3, 1)
    tree.insert([1, 2, 3])
    reader = tree.reader()
    before = tree.dump()
    with pytest.raises(OutOfBlocksError, match="reclaimed"):
        tree.insert([4])
    assert tree.dump() == before
    reader.leave()
    assert tuple(tree.insert([4]).evicted) == (2,)


def test_a_reader_that_never_leaves_holds_but_loses_nothing(make_tree: TreeFactory) -> None:
    """R-EPOCH-3: its quarantine stays visible; free + cached + quarantined = pool."""
    tree = make_tree(6, 1)
    tree.insert([1, 2, 3, 4, 5, 6])
    kept = tree.reader()  # kept: a reader nobody holds would leave (R-EPOCH-5)
    tree.evict(4)
    for _ in range(3):
        tree.reclaim()
    stats = tree.stats()
    assert (stats.free, stats.cached, stats.quarantined) == (0, 2, 4)
    assert stats.free + stats.cached + stats.quarantined == stats.num_blocks
    tree.check_invariants()
    assert not kept.left


def test_leaving_twice_is_an_error(make_tree: TreeFactory) -> None:
    """R-EPOCH-4: a reader leaves once."""
    tree = make_tree(4, 1)
    with tree.reader() as reader:
        assert not reader.left
    assert reader.left
    with pytest.raises(ReaderLeftError):
        reader.leave()
    assert tree.stats().readers == 0
