"""Readers that cannot leak (R-EPOCH-5), for every implementation.

A reader nobody references leaves by itself: dropped in this thread or another,
freed by the cyclic collector (even in the middle of a writer call), or still alive
when the interpreter shuts down. A reader kept on purpose stays, and
``stats().oldest_reader_age`` says for how many versions.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest

from kachedb_radix.reference.errors import OutOfBlocksError
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.lockstep import Lockstep
from tests.conftest import IMPLEMENTATIONS, TreeFactory
from tests.support.paths import ROOT


def _fill_and_evict_under(tree: Any) -> Any:
    """A reader inside while two cached blocks are evicted into the quarantine."""
    tree.insert([1, 2])
    reader = tree.reader()
    assert tree.evict(2) == (1, 0)
    assert tree.stats().quarantined == 2
    return reader


class _Request:
    """A request object in a reference cycle, holding a reader: only the cyclic
    collector frees it."""

    def __init__(self, tree: Any) -> None:
        self.me = self
        self.reader = tree.reader()


def _forgotten_request(tree: Any) -> None:
    _Request(tree)


def _drained(tree: Any) -> None:
    """No reader is registered any more, so the whole quarantine can be reclaimed."""
    assert tree.stats().readers == 0
    tree.reclaim()
    assert tree.stats().quarantined == 0
    tree.check_invariants()


def test_a_dropped_reader_leaves_and_its_quarantine_drains(make_tree: TreeFactory) -> None:
    """R-EPOCH-5: dropping the last reference is a leave()."""
    tree = make_tree(2, 1)
    reader = _fill_and_evict_under(tree)
    epoch = reader.epoch
    assert tree.stats().oldest_reader == epoch
    with pytest.raises(OutOfBlocksError):
        tree.insert([3])  # the reader guards both blocks
    del reader
    stats = tree.stats()
    assert (stats.readers, stats.oldest_reader, stats.oldest_reader_age) == (0, None, None)
    assert tree.insert([3, 4]).allocated == (0, 1)  # the short insert reclaimed them
    tree.check_invariants()


def test_a_reader_that_left_is_dropped_quietly(make_tree: TreeFactory) -> None:
    """R-EPOCH-4, R-EPOCH-5: a reader that left does not leave again when dropped."""
    tree = make_tree(4, 1)
    first = tree.reader()
    second = tree.reader()
    first.leave()
    del first
    assert tree.stats().oldest_reader == second.epoch
    with second:
        pass
    del second
    assert tree.stats().readers == 0
    tree.check_invariants()


def test_a_reader_dropped_in_another_thread_leaves(make_tree: TreeFactory) -> None:
    """R-EPOCH-5: the thread that drops the last reference makes the reader leave,
    while this thread keeps writing."""
    tree = make_tree(1024, 1)  # room for everything the readers may hold back
    handed: list[Any] = [tree.reader() for _ in range(8)]
    go = threading.Event()

    def drop_them() -> None:
        go.wait()
        while handed:
            handed.pop()  # the last reference goes here, in this thread
        for _ in range(50):
            tree.reader()  # entered and dropped at once, in this thread

    worker = threading.Thread(target=drop_them)
    worker.start()
    go.set()
    for value in range(200):
        tree.insert([value % 50, value % 7])
        tree.evict(1)
    worker.join()
    _drained(tree)


def test_a_reader_in_a_reference_cycle_leaves_when_collected(make_tree: TreeFactory) -> None:
    """R-EPOCH-5: the cyclic collector frees a forgotten request holding a reader."""
    tree = make_tree(4, 1)
    _forgotten_request(tree)
    assert tree.stats().readers == 1
    gc.collect()
    assert tree.stats().readers == 0


def test_a_reader_collected_during_a_writer_call(make_tree: TreeFactory) -> None:
    """R-EPOCH-5: a collection triggered by an allocation inside insert or evict may
    free a reader mid-call; the call and the invariants survive it."""
    tree = make_tree(512, 1)  # inserts never need to evict (a reader may be inside)
    threshold = gc.get_threshold()
    gc.collect()
    gc.set_threshold(1, 1, 1)  # collect at nearly every allocation of a tracked object
    try:
        for value in range(300):
            _forgotten_request(tree)
            tree.insert([value % 13, value % 5, value % 3])
            if value % 4 == 0:
                tree.evict(2)
            tree.check_invariants()
    finally:
        gc.set_threshold(*threshold)
    gc.collect()
    _drained(tree)


def test_a_reader_kept_on_purpose_ages_in_versions(make_tree: TreeFactory) -> None:
    """R-EPOCH-5, R-EPOCH-3: a kept reader stays inside for as long as it is kept;
    ``oldest_reader_age`` counts the versions published since it took its snapshot."""
    tree = make_tree(32, 1)
    assert tree.stats().oldest_reader_age is None
    tree.insert([1, 2, 3])
    kept = tree.reader()
    assert tree.stats().oldest_reader_age == 0
    for value in range(10):
        tree.match([1, 2])
        tree.insert([4, value])
    stats = tree.stats()
    assert stats.oldest_reader_age == stats.version - kept.version == 20
    later = tree.reader()
    tree.insert([5])
    stats = tree.stats()
    assert stats.readers == 2 and stats.oldest_reader == kept.epoch
    assert stats.oldest_reader_age == stats.version - kept.version  # the oldest one's age
    assert tree.evict(3) and tree.stats().quarantined == 3  # kept: nothing drains
    kept.leave()
    assert tree.stats().oldest_reader_age == tree.version - later.version == 2  # insert, evict
    later.leave()
    assert tree.reclaim() and tree.stats().oldest_reader_age is None
    tree.check_invariants()


SHUTDOWN = textwrap.dedent(
    """
    import sys, threading, time
    from kachedb_radix.{module} import RadixTree

    tree = RadixTree(8, 1)
    tree.insert([1, 2, 3])
    kept = tree.reader()              # a module global, alive at shutdown
    tree.evict(1)                     # something in the quarantine for it to guard

    class Request:
        def __init__(self):
            self.me = self
            self.reader = tree.reader()

    cycle = Request()                 # a reader in a cycle, collected at shutdown

    def hold():
        reader = tree.reader()        # a daemon thread still inside when the main exits
        time.sleep(60)

    threading.Thread(target=hold, daemon=True).start()
    time.sleep(0.05)
    print(tree.stats().readers, flush=True)
    """
)


@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_readers_alive_at_interpreter_shutdown(name: str) -> None:
    """R-EPOCH-5: readers still alive at exit (a global, a cycle, a daemon thread's)
    finalize without an error, a warning or a hang."""
    module = "reference" if name == "reference" else "accel"
    code = SHUTDOWN.format(module=module)
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3"
    assert done.stderr == ""


@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_the_kit_drops_a_reader_without_leave(name: str) -> None:
    """R-EPOCH-5 through the kit: the ``drop`` step, compared in lockstep."""
    candidate = TreeAdapter(IMPLEMENTATIONS[name], name)
    lockstep = Lockstep(candidate, frozenset({"core", "eviction", "snapshots"}))
    lockstep.run({"op": "reset", "num_blocks": 3, "block_size": 1})
    lockstep.run({"op": "insert", "tokens": [1, 2, 3], "namespace": None, "pin": False})
    lockstep.run({"op": "reader"})
    lockstep.run({"op": "snapshot"})
    lockstep.run({"op": "evict", "count": 2})
    assert lockstep.run({"op": "stats"})["ok"]["readers"] == 1
    lockstep.run({"op": "drop", "snapshot": 1})
    assert lockstep.dropped == [1] and lockstep.inside == []
    stats = lockstep.run({"op": "stats"})["ok"]
    assert (stats["readers"], stats["quarantined"]) == (0, 2)
    assert lockstep.run({"op": "reclaim"})["ok"]["reclaimed"] == [2, 1]
    # The snapshot taken after the dropped reader still answers.
    assert lockstep.run({"op": "snapshot_match", "snapshot": 2, "tokens": [1], "namespace": None})
