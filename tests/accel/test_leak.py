"""Leak test: 200,000 mixed operations on accel.RadixTree with process memory flat.

Every path that allocates is exercised -- inserts and matches from lists and NumPy
arrays, pinned and not, releases (and double releases), evictions, every error path,
reading results, leases and their ``blocks``/``tokens``, snapshots and readers taken,
matched on (short and long, GIL-free matches), dumped, left (and left twice) and dropped
while the writer keeps changing the shape, reclaim -- first for a warm-up, then for the
measured run. ``tracemalloc`` (which also sees the extension's own PyMem
allocations) and the resident set size from ``/proc/self/statm`` must not grow.
Runs in about 10 s, so it stays in the CI run (marked ``slow``).
"""

from __future__ import annotations

import gc
import os
import random
import tracemalloc
from typing import Any

import numpy as np
import pytest

from kachedb_radix import reference
from kachedb_radix.reference.errors import ReaderLeftError

if os.environ.get("KACHEDB_RADIX_PURE") == "1":
    pytest.skip("KACHEDB_RADIX_PURE=1: the C twin is not under test", allow_module_level=True)

from kachedb_radix import accel

WARMUP = 20_000
MEASURED = 180_000


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - not Linux
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class _Workload:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.tree = accel.RadixTree(512, 4)
        self.leases: list[Any] = []
        self.prompts = [
            np.array(
                [self.rng.randrange(4) for _ in range(self.rng.randrange(4, 120))], dtype=np.uint32
            )
            for _ in range(64)
        ]
        self.bad: list[Any] = [
            "x",
            [1, -1],
            [1, True],
            np.zeros(3, dtype=np.float32),
            np.zeros((2, 2), dtype=np.uint32),
            np.array([-1], dtype=np.int64),
        ]
        self.too_big = np.zeros(4 * 600, dtype=np.uint32) + 9
        self.views: list[Any] = []
        self.long_probe = np.zeros(4 * 1100, dtype=np.uint32)

    def snapshot_step(self) -> None:
        rng, tree = self.rng, self.tree
        if len(self.views) < 6 and rng.random() < 0.5:
            self.views.append(tree.snapshot() if rng.random() < 0.5 else tree.reader())
            return
        if not self.views:
            return
        view = self.views.pop(rng.randrange(len(self.views)))
        prompt = self.prompts[rng.randrange(len(self.prompts))]
        hit = view.match(prompt if rng.random() < 0.5 else prompt.tolist(), rng.choice([None, "a"]))
        _ = (hit.length, tuple(hit.blocks), view.namespaces(), view.version, repr(view))
        if rng.random() < 0.05:
            _ = (view.match(self.long_probe).length, view.dump())
        if isinstance(view, accel.Reader):
            with view:
                pass
            try:
                view.leave()
            except ReaderLeftError:
                pass
            else:  # pragma: no cover - a bug
                raise AssertionError("left twice")
        tree.reclaim()

    def step(self) -> None:
        rng, tree = self.rng, self.tree
        if rng.random() < 0.15:
            self.snapshot_step()
        action = rng.random()
        prompt = self.prompts[rng.randrange(len(self.prompts))]
        namespace = rng.choice([None, "a", "b"])
        tokens: Any = prompt if rng.random() < 0.5 else prompt.tolist()
        if action < 0.35:
            try:
                done = tree.insert(tokens, namespace, pin=rng.random() < 0.2)
            except reference.OutOfBlocksError:
                return
            assert len(done.blocks) == done.length // 4
            _ = (tuple(done.allocated), tuple(done.evicted), done.reused)
            if done.lease is not None:
                self.leases.append(done.lease)
        elif action < 0.7:
            hit = tree.match(tokens, namespace, pin=rng.random() < 0.2)
            _ = (hit.length, list(hit.blocks), hit.blocks[0] if hit.blocks else None)
            if hit.lease is not None:
                self.leases.append(hit.lease)
        elif action < 0.85 and self.leases:
            lease = self.leases.pop(rng.randrange(len(self.leases)))
            _ = (lease.tokens, tuple(lease.blocks), lease.length, repr(lease))
            with lease:
                pass
            try:
                tree.release(lease)
            except reference.LeaseReleasedError:
                pass
            else:  # pragma: no cover - a bug
                raise AssertionError("released twice")
        elif action < 0.92:
            tree.evict(rng.randrange(8))
        elif action < 0.99:
            bad = self.bad[rng.randrange(len(self.bad))]
            for call, data in ((tree.match, bad), (tree.insert, self.too_big)):
                try:
                    call(data)
                except reference.RadixError:
                    pass
                else:  # pragma: no cover - a bug
                    raise AssertionError("accepted bad input")
        elif action < 0.9995:
            _ = (tree.stats(), tree.namespaces(), tree.clock)
        else:
            _ = (tree.stats(), tree.namespaces(), tree.dump())
            tree.check_invariants()
        if len(self.leases) > 32:
            self.leases.pop(0).release()


@pytest.mark.slow
def test_two_hundred_thousand_operations_keep_memory_flat() -> None:
    work = _Workload(2024)
    tracemalloc.start()
    try:
        for _ in range(WARMUP):
            work.step()
        gc.collect()
        traced_before = tracemalloc.get_traced_memory()[0]
        rss_before = _rss_bytes()
        for _ in range(MEASURED):
            work.step()
        gc.collect()
        traced_after = tracemalloc.get_traced_memory()[0]
        rss_after = _rss_bytes()
    finally:
        tracemalloc.stop()
    work.tree.check_invariants()
    assert work.tree.clock > MEASURED // 2
    # A leak of even 8 bytes per operation would show as >= 1.4 MB here.
    assert traced_after - traced_before < 256 * 1024, (traced_before, traced_after)
    assert rss_after - rss_before < 4 * 1024 * 1024, (rss_before, rss_after)
