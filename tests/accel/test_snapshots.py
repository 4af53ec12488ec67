"""accel-specific snapshot and reader checks: the compiled types, the GIL released during
a long snapshot match, snapshots outliving their tree, the published shape surviving
block reuse, path copying only while snapshots are alive, and reference-count churn.

The behaviour itself (versions, quarantine, reclaim) is specified by
tests/snapshots/test_snapshots.py, tests/snapshots/test_stress.py and tests/tree/test_model.py,
which run on both implementations."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
import weakref
from typing import Any

import numpy as np
import pytest

from kachedb_radix import reference
from kachedb_radix.reference import snapshot as reference_snapshot

if os.environ.get("KACHEDB_RADIX_PURE") == "1":
    pytest.skip("KACHEDB_RADIX_PURE=1: the C twin is not under test", allow_module_level=True)

import kachedb_radix.accel._radix as radix
from kachedb_radix import accel


def test_snapshot_and_reader_are_compiled_types() -> None:
    tree = accel.RadixTree(8, 2)
    snap = tree.snapshot()
    reader = tree.reader()
    assert type(snap) is radix.Snapshot and type(reader) is radix.Reader
    assert issubclass(radix.Reader, radix.Snapshot)
    assert accel.Snapshot is radix.Snapshot and accel.Reader is radix.Reader
    for cls in (radix.Snapshot, radix.Reader):
        assert cls.__module__ == "kachedb_radix.accel._radix"
        with pytest.raises(TypeError):
            cls()
    hit = snap.match([1, 2])
    assert type(hit) is radix.MatchResult and hit.lease is None
    assert repr(reader).startswith("<Reader epoch=1 version=0 inside")
    reader.leave()
    assert "left" in repr(reader)


def test_snapshot_match_arguments() -> None:
    tree = accel.RadixTree(8, 2)
    tree.insert([1, 2, 3, 4], "ns")
    snap = tree.snapshot()
    assert snap.match(tokens=[1, 2, 3, 4], namespace="ns").length == 4
    assert snap.match([1, 2, 3, 4], "ns").blocks == (0, 1)
    assert snap.match([1, 2, 3, 4]).length == 0

    class Name(str):
        pass

    assert snap.match([1, 2], Name("ns")).length == 2
    with pytest.raises(reference.InvalidArgumentError):
        snap.match([1, 2], 5)  # type: ignore[arg-type]
    with pytest.raises(reference.TokenTypeError):
        snap.match("12", 5)  # type: ignore[arg-type]  # tokens are checked before the namespace, as in the reference
    with pytest.raises(TypeError):
        snap.match()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        snap.match([1], None, "x")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        snap.match([1], pin=True)  # type: ignore[call-arg]


def test_long_snapshot_match_releases_the_gil() -> None:
    """While a long match runs on a snapshot, another Python thread makes progress.

    The switch interval is raised so that the matching thread never hands the GIL over
    on its own: the helper thread can only run while a match has released it (or while
    the main thread blocks, which it does not do between the marks)."""
    block = 16
    blocks = 1 << 14
    tokens = np.arange(blocks * block, dtype=np.uint32)
    tree = accel.RadixTree(blocks, block)
    tree.insert(tokens)
    snap = tree.snapshot()
    woke = threading.Event()
    release = threading.Lock()
    release.acquire()
    progress: list[int] = []

    def helper() -> None:
        woke.set()
        with release:  # blocks (without the GIL) until the main thread lets it go
            progress.append(1)

    thread = threading.Thread(target=helper)
    old = sys.getswitchinterval()
    thread.start()
    woke.wait()
    try:
        sys.setswitchinterval(30.0)
        release.release()  # the helper is now runnable but needs the GIL
        seen_during_matches = False
        # Each match gives the waiting helper one window of a few tens of microseconds;
        # on a loaded machine waking it can take longer, so keep offering windows for a
        # while rather than a fixed number of them.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert snap.match(tokens).length == blocks * block
            if progress:
                seen_during_matches = True
                break
    finally:
        sys.setswitchinterval(old)
    thread.join()
    assert seen_during_matches


def test_short_snapshot_match_keeps_the_gil() -> None:
    """The control for the test above: a short match never lets the helper in."""
    tree = accel.RadixTree(64, 16)
    tokens = np.arange(64 * 16, dtype=np.uint32)
    tree.insert(tokens)
    snap = tree.snapshot()
    woke = threading.Event()
    release = threading.Lock()
    release.acquire()
    progress: list[int] = []

    def helper() -> None:
        woke.set()
        with release:
            progress.append(1)

    thread = threading.Thread(target=helper)
    old = sys.getswitchinterval()
    thread.start()
    woke.wait()
    try:
        sys.setswitchinterval(30.0)
        release.release()
        for _ in range(2000):
            snap.match(tokens)
        seen = bool(progress)
    finally:
        sys.setswitchinterval(old)
    thread.join()
    assert not seen


def test_readers_in_threads_match_while_the_writer_writes() -> None:
    tree = accel.RadixTree(4096, 4)
    base = np.arange(1024 * 4, dtype=np.uint32)
    tree.insert(base)
    stop = threading.Event()
    failures: list[str] = []

    def read() -> None:
        while not stop.is_set():
            with tree.reader() as reader:
                dump = reader.dump()
                hit = reader.match(base)
                # The answer agrees with the reader's own version, whatever the writer does.
                edge = dump["namespaces"][0]["children"][0] if dump["namespaces"] else None
                want = 0 if edge is None else len(edge["blocks"])
                if hit.length != min(want, 1024) * 4 and edge is not None:
                    first = edge["tokens"][: 4 * want]
                    if list(base[: len(first)]) == first:
                        failures.append(f"{hit.length} vs {want}")

    threads = [threading.Thread(target=read) for _ in range(3)]
    for thread in threads:
        thread.start()
    rng = np.random.default_rng(1)
    try:
        for _ in range(300):
            tree.evict(int(rng.integers(0, 64)))
            tree.reclaim()
            with contextlib.suppress(reference.OutOfBlocksError):
                tree.insert(base[: int(rng.integers(1, 1024)) * 4])
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not failures
    tree.check_invariants()


def test_snapshot_survives_its_tree() -> None:
    tree = accel.RadixTree(8, 2)
    tree.insert([1, 2, 3, 4], "x")
    snap = tree.snapshot()
    expected = snap.dump()
    alive = weakref.ref(tree)
    del tree
    gc.collect()
    assert alive() is None
    assert snap.dump() == expected
    assert snap.match([1, 2, 3, 4], "x").blocks == (0, 1)
    assert snap.namespaces() == ["x"]


def test_reader_keeps_its_tree_alive_like_the_reference() -> None:
    tree = accel.RadixTree(8, 2)
    reader = tree.reader()
    alive = weakref.ref(tree)
    del tree
    gc.collect()
    assert alive() is not None
    reader.leave()
    del reader
    gc.collect()
    assert alive() is None


def test_snapshot_survives_block_reuse_and_edge_changes() -> None:
    """Block ids reused by later inserts, splits, extensions and trims do not show
    through: the snapshot has its own copy of every edge it shows."""
    twin = reference.RadixTree(6, 2)
    tree = accel.RadixTree(6, 2)
    steps: list[Any] = [
        ("insert", [1, 1, 2, 2, 3, 3, 4, 4]),  # extend the leaf
        ("insert", [1, 1, 9, 9]),  # split it
        ("evict", 6),  # trim and remove everything
        ("insert", [7] * 12),  # every id reused with other tokens
    ]
    snaps = []
    for each in (twin, tree):
        each.insert([1, 1, 2, 2, 3, 3])
        snaps.append(each.snapshot())
    before = snaps[1].dump()
    assert before == snaps[0].dump()
    for name, arg in steps:
        for each in (twin, tree):
            getattr(each, name)(arg)
        assert tree.dump() == twin.dump()
    assert tree.stats().free == 0  # all six ids are in use again, none for the old tokens
    assert snaps[1].dump() == before == snaps[0].dump()
    assert snaps[1].match([1, 1, 2, 2, 3, 3]).blocks == (0, 1, 2)
    tree.check_invariants()


def test_blocks_return_after_readers_leave() -> None:
    tree = accel.RadixTree(4, 1)
    tree.insert([1, 2, 3, 4])
    reader = tree.reader()
    assert tree.evict(2) == (3, 2)
    assert tree.stats().quarantined == 2
    with pytest.raises(reference.OutOfBlocksError):
        tree.insert([5, 6])  # a reader is inside: no eviction, nothing reclaimable
    assert reader.match([1, 2, 3, 4]).blocks == (0, 1, 2, 3)
    reader.leave()
    done = tree.insert([5, 6])
    assert done.allocated == (2, 3) and done.evicted == ()
    assert tree.stats().quarantined == 0
    tree.check_invariants()


def test_no_path_copying_without_snapshots() -> None:
    """check_invariants verifies that with no snapshot alive every published node has
    exactly one owner (the writer changes it in place); with one alive, sharing."""
    tree = accel.RadixTree(64, 2)
    rng = np.random.default_rng(3)
    for _ in range(200):
        tree.insert(rng.integers(0, 3, size=int(rng.integers(2, 20)), dtype=np.uint32))
        tree.check_invariants()
        snap = tree.snapshot()
        tree.insert(rng.integers(0, 3, size=int(rng.integers(2, 20)), dtype=np.uint32))
        tree.check_invariants()
        tree.evict(int(rng.integers(0, 4)))
        tree.check_invariants()
        assert snap.dump()["version"] == snap.version
        del snap
        tree.check_invariants()


def test_published_shape_is_rebuilt_after_a_drop() -> None:
    """After an allocation failure while mirroring (simulated by the test hook), the
    writer keeps going without a published shape (children found by scanning its node
    records) and the next walking call or snapshot rebuilds it."""
    twin = reference.RadixTree(32, 2)
    tree = accel.RadixTree(32, 2)
    rng = np.random.default_rng(5)
    old = tree.snapshot()
    old_dump = old.dump()
    for round_ in range(40):
        if round_ % 3 == 0:
            tree._drop_published()
            tree.check_invariants()  # nothing to compare while dropped
        for _ in range(3):
            tokens = rng.integers(0, 3, size=int(rng.integers(2, 16))).tolist()
            for each in (twin, tree):
                with contextlib.suppress(reference.OutOfBlocksError):
                    each.insert(tokens, "ns" if len(tokens) % 2 else None)
            count = int(rng.integers(0, 3))
            for each in (twin, tree):
                each.evict(count)
        pair = (twin.reader(), tree.reader()) if round_ % 2 else (twin.snapshot(), tree.snapshot())
        assert pair[1].dump() == pair[0].dump()
        tree.check_invariants()  # the rebuilt shape equals the writer's, node by node
        for view in pair:
            if isinstance(view, (radix.Reader, reference_snapshot.Reader)):
                view.leave()
    assert old.dump() == old_dump


def test_without_a_published_shape_the_writer_scans_its_records() -> None:
    """The published shape is also the writer's child index.  While it is dropped (an
    allocation failure while mirroring, simulated by the test hook) eviction still
    works and child lookups scan the node records: check_invariants, which walks every
    live lease, agrees, and so does the reference; the next walking call rebuilds it."""
    twin = reference.RadixTree(48, 2)
    tree = accel.RadixTree(48, 2)
    rng = np.random.default_rng(11)
    for _ in range(30):
        leases: list[tuple[Any, Any]] = []
        for _ in range(4):
            tokens = rng.integers(0, 3, size=int(rng.integers(2, 14))).tolist()
            pin = bool(rng.random() < 0.5)
            try:
                done = (twin.insert(tokens, pin=pin), tree.insert(tokens, pin=pin))
            except reference.OutOfBlocksError:
                with pytest.raises(reference.OutOfBlocksError):
                    tree.insert(tokens, pin=pin)
                continue
            if pin:
                leases.append((done[0].lease, done[1].lease))
        tree._drop_published()
        tree.check_invariants()  # every lease walked by scanning the records
        count = int(rng.integers(0, 4))
        assert tree.evict(count) == twin.evict(count)
        tree.check_invariants()
        assert tree.dump() == twin.dump()
        for ref_lease, lease in leases:
            twin.release(ref_lease)
            tree.release(lease)  # walks: rebuilds the published shape first
            tree.check_invariants()
        assert tree.snapshot().dump() == twin.snapshot().dump()


def test_fan_out_crossing_between_array_and_trie_under_snapshots() -> None:
    """A node's children move from a sorted array to a hash trie past 15 and back: the
    fan-out of one prefix goes up and down across that line, with snapshots and readers
    taken (and kept) along the way, in lockstep with the reference; every snapshot keeps
    the shape it saw."""
    twin = reference.RadixTree(200, 1)
    tree = accel.RadixTree(200, 1)
    rng = np.random.default_rng(17)
    views: list[tuple[Any, Any, dict[str, Any]]] = []
    for step in range(400):
        if rng.random() < 0.6:
            tokens = [7, 7, int(rng.integers(0, 60)), int(rng.integers(0, 3))]
            for each in (twin, tree):
                each.insert(tokens)
        else:
            count = int(rng.integers(1, 6))
            assert tree.evict(count) == twin.evict(count)
        tree.check_invariants()
        if step % 25 == 0:
            kind = "snapshot" if step % 50 else "reader"
            pair = (getattr(twin, kind)(), getattr(tree, kind)())
            views.append((*pair, pair[1].dump()))
            assert pair[1].dump() == pair[0].dump()
        if len(views) > 4:
            ref_view, view, seen = views.pop(0)
            assert view.dump() == seen == ref_view.dump()
            assert view.match([7, 7, 3, 1]).blocks == ref_view.match([7, 7, 3, 1]).blocks
            for each in (ref_view, view):
                if isinstance(each, (radix.Reader, reference_snapshot.Reader)):
                    each.leave()
    assert tree.dump() == twin.dump()


def test_tokens_are_stored_once_for_the_writer_and_its_snapshots() -> None:
    """The published shape reads the writer's chunks: it holds nodes, never tokens, and
    a split under a live snapshot shares the chunk instead of copying it."""
    tree = accel.RadixTree(512, 16)
    edge = np.arange(256 * 16, dtype=np.uint32)
    tree.insert(edge)
    parts = tree.memory_bytes()
    header = 12  # one chunk header
    assert parts["tokens"] == 256 * 16 * 4
    assert parts["edges"] == header + 256 * 4  # the block ids beside the tokens
    assert 0 < parts["published_shape"] < 512  # a node, a root, the shared context
    snap = tree.snapshot()
    tree.insert(np.concatenate([edge[: 128 * 16], np.full(16, 7, dtype=np.uint32)]))
    parts = tree.memory_bytes()
    assert parts["tokens"] == 257 * 16 * 4
    assert parts["edges"] == 2 * header + 257 * 4  # the split halves share one chunk
    assert snap.match(edge).length == 256 * 16
    tree.check_invariants()


def _churn(tree: Any, rng: np.random.Generator, held: list[Any]) -> None:
    action = rng.random()
    if action < 0.3:
        with contextlib.suppress(reference.OutOfBlocksError):
            tree.insert(rng.integers(0, 4, size=int(rng.integers(1, 40)), dtype=np.uint32))
    elif action < 0.45:
        tree.evict(int(rng.integers(0, 8)))
    elif action < 0.6:
        held.append(tree.snapshot() if rng.random() < 0.5 else tree.reader())
    elif action < 0.8 and held:
        item = held.pop(int(rng.integers(0, len(held))))
        item.match(rng.integers(0, 4, size=30, dtype=np.uint32).tolist())
        if isinstance(item, radix.Reader):
            item.leave()
    elif action < 0.9:
        tree.reclaim()
    else:
        tree.match(rng.integers(0, 4, size=20, dtype=np.uint32))


def test_snapshot_churn_frees_what_it_takes() -> None:
    """Reference counts: after heavy churn and dropping every snapshot, no published
    node is shared (check_invariants) and the tree's own bytes did not grow."""
    rng = np.random.default_rng(7)
    tree = accel.RadixTree(128, 2)
    held: list[Any] = []
    for _ in range(3000):
        _churn(tree, rng, held)
    for item in held:
        if isinstance(item, radix.Reader) and not item.left:
            item.leave()
    held.clear()
    tree.reclaim()
    tree.check_invariants()
    snap = tree.snapshot()
    ref_counts = sys.getrefcount(snap)
    assert snap.version == tree.version
    assert sys.getrefcount(snap) == ref_counts
