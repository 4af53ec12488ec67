"""The KV cache that the crash test kills: ``python -m tests.tiers.kv_crash_worker``.

The shared half of ``tests/tiers/test_kv_cache_crash.py``: the cache's geometry, the seeded
workload (:func:`workload`), how one call is carried out (:func:`apply`) and what the disk
tier holds (:func:`disk_prefixes`) -- the test replays the same workload in-process with
these same functions, so the worker and the replay cannot drift apart.

Run as a module it is a *zygote* (as :mod:`tests.tiers.crash_writer` is for the store
alone): it imports NumPy, the cache and both tree twins once, then for each ``run`` line
on its standard input forks a worker (a real process the test kills with SIGKILL), waits
for it and reports how it ended. The worker reopens the cache on the slab file it is
given (the restart after the previous kill), then makes the workload's calls, each KV
block's bytes a function of its namespace and token prefix
(:func:`tests.tiers.test_kv_cache.kv_of`), and reports every call on standard output,
one line each, written with a single ``os.write`` (atomic on a pipe), *before* the call
starts and *after* it returns::

    pid PID                  the worker is running
    open REOPENED UNUSABLE   the cache is open: leaf paths put back, records left out
    begin K KIND             about to make call K (store, restore, evict, sync)
    done K DIGEST            call K returned; DIGEST names what it did (its moves, ids)
    finished                 every call made, the cache closed
    failed                   the worker raised (the traceback is on standard error)

As in the store's campaign, a worker never exits by itself: it sleeps after ``finished``
or ``failed`` until the test kills it, so that its pid stays its own. After the worker is
gone the zygote writes ``exit signal N`` or ``exit code N``.

Command: ``run PATH TWIN SEED CALLS [planted]`` (TWIN: ``reference`` or ``accel``, the tree
twin under the NumPy pool; ``planted``: the cache with a planted bug, to show the test
catches what only a crash reveals). ``quit`` or the end of input ends the zygote.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy.typing as npt
import xxhash

from kachedb_radix.reference.blockpool import PoolSpec
from kachedb_radix.reference.tiers import KVCache, TieredTree
from kachedb_radix.reference.tiers.persist import ROOT, chained_hash
from tests.tiers.test_kv_cache import MODEL, kv_of
from tests.tiers.zygote import say, serve

#: Tokens per block.
B = 4
#: The device pool: 6 blocks of 16 KiB (4 tokens x 2 layers x K,V x 4 heads x 64 x fp16).
SPEC = PoolSpec(num_blocks=6, block_size=B, num_layers=2, num_kv_heads=4, head_dim=64)
HOST_BLOCKS = 6
DISK_BLOCKS = 32
NAMESPACES = (None, "tenant")

Prefix = tuple[str | None, tuple[int, ...]]


def cache_class(twin: str) -> type[KVCache]:
    """The KV cache over the NumPy pool whose tiers are ``twin``'s trees."""
    if twin == "reference":
        return KVCache
    from kachedb_radix import accel

    tiers_type: type[TieredTree] = accel.TieredTree
    return type("AccelTreeKVCache", (KVCache,), {"tiers_type": tiers_type})


def _put_disk_with_a_gap(self: KVCache, blocks: Sequence[int], payloads: Sequence[Any]) -> None:
    """A planted bug for the campaign's own test: each batch of disk writes first takes
    another block's record out and puts it back after -- right at the end of every call,
    wrong for a moment in between, which only a kill can see."""
    store = self._store
    assert store is not None
    slots = {self._slot_of[block] for block in blocks}
    other = next((taken for taken in sorted(store.slots()) if taken not in slots), None)
    saved = None if other is None else store.get(other)
    if other is not None and saved is not None:
        store.delete(other)
    KVCache._put_disk(self, blocks, payloads)
    if other is not None and saved is not None:
        store.put(other, *saved)


def open_cache(
    path: str | os.PathLike[str], twin: str, device_blocks: int = 0, planted: bool = False
) -> KVCache:
    """The campaign's cache on slab ``path`` (created when absent, reopened warm when
    present); ``device_blocks`` overrides the device's size (the test's checks);
    ``planted`` plants :func:`_put_disk_with_a_gap`."""
    spec = SPEC.with_blocks(device_blocks) if device_blocks else SPEC
    cls = cache_class(twin)
    if planted:
        cls = type("PlantedKVCache", (cls,), {"_put_disk": _put_disk_with_a_gap})
    cache = cls(
        spec, model=MODEL, host_blocks=HOST_BLOCKS, disk_path=Path(path), disk_blocks=DISK_BLOCKS
    )
    assert cache.tiers.implementation == twin  # no silent fallback
    return cache


@dataclass(frozen=True)
class Call:
    """One call of the workload: ``kind`` is store, restore, evict or sync."""

    kind: str
    tokens: tuple[int, ...] = ()
    namespace: str | None = None
    count: int = 0
    tier: str = ""


def workload(seed: int, calls: int) -> list[Call]:
    """``calls`` calls from ``seed``, independent of the cache's state: stores of 1-4 block
    paths over a small alphabet (so paths share prefixes and the device, host and disk
    overflow), restores of earlier stores, evictions of each tier, syncs."""
    rng = random.Random(seed)
    made: list[Call] = []
    stored: list[Call] = []
    for _ in range(calls):
        action = rng.random()
        if action < 0.55 or not stored:
            blocks = [rng.randint(1, 5) for _ in range(rng.randint(1, 4))]
            tokens = tuple(token for block in blocks for token in (block,) * B)
            call = Call("store", tokens, rng.choice(NAMESPACES))
            stored.append(call)
        elif action < 0.72:
            earlier = rng.choice(stored)
            call = Call("restore", earlier.tokens, earlier.namespace)
        elif action < 0.95:
            tier = rng.choice(("device", "device", "host", "host", "disk"))
            call = Call("evict", count=rng.randint(1, 3), tier=tier)
        else:
            call = Call("sync")
        made.append(call)
    return made


def kv_for(call: Call) -> npt.NDArray[Any] | None:
    """The KV data a store call writes (made before the call: the call is the I/O)."""
    if call.kind != "store":
        return None
    return kv_of(SPEC, list(call.tokens), call.namespace)


def apply(cache: KVCache, call: Call, kv: npt.NDArray[Any] | None) -> str:
    """Make ``call`` on ``cache``; a digest of what it did (its moves and ids), which the
    replay must reproduce call for call."""
    done: object
    if call.kind == "store":
        stored = cache.store(list(call.tokens), kv, call.namespace)
        done = (stored.allocated, stored.evicted, stored.moves, stored.after, stored.dropped)
    elif call.kind == "restore":
        brought = cache.restore(list(call.tokens), call.namespace)
        brought.handle.wait()
        result = brought.result
        done = (result.blocks, result.restored, result.moves, result.dropped)
    elif call.kind == "evict":
        evicted = cache.evict(call.count, call.tier)
        done = (evicted.freed, evicted.moves, evicted.dropped)
    else:
        cache.sync()
        done = ()
    return xxhash.xxh64_hexdigest(repr(done).encode())


def disk_prefixes(cache: KVCache) -> set[Prefix]:
    """Every block the disk tier holds, named by its namespace and its whole token prefix
    (a block's bytes are a function of exactly that). O(disk blocks * depth * B)."""
    found: set[Prefix] = set()
    for space in cache.tiers.tree("disk").dump()["namespaces"]:
        stack: list[tuple[tuple[int, ...], Any]] = [((), node) for node in space["children"]]
        while stack:
            above, node = stack.pop()
            tokens = above + tuple(node["tokens"])
            start = len(above)
            for end in range(start + B, len(tokens) + 1, B):
                found.add((space["namespace"], tokens[:end]))
            stack.extend((tokens, child) for child in node["children"])
    return found


def chain_hash(namespace: str | None, tokens: tuple[int, ...]) -> bytes:
    """The chained hash the disk tier names the block ending ``tokens`` by (R-TIER-10).
    O(len(tokens))."""
    parent = ROOT
    for start in range(0, len(tokens), B):
        parent = chained_hash(parent, namespace, tokens[start : start + B])
    return parent


def work(path: str, twin: str, seed: int, calls: int, planted: bool) -> None:
    """One worker's life: reopen, then the seeded calls, reporting each."""
    say(f"pid {os.getpid()}")
    cache = open_cache(path, twin, planted=planted)
    stats = cache.stats()
    say(f"open {stats.reopened} {stats.unusable}")
    for number, call in enumerate(workload(seed, calls)):
        kv = kv_for(call)
        say(f"begin {number} {call.kind}")
        digest = apply(cache, call, kv)
        say(f"done {number} {digest}")
    cache.close()
    say("finished")


def main() -> None:
    serve(lambda args: work(args[0], args[1], int(args[2]), int(args[3]), args[4:] == ["planted"]))


if __name__ == "__main__":
    if os.environ.get("KACHEDB_RADIX_PURE") != "1":
        cache_class("accel")  # imports the C twin once here, not in every worker

    main()
