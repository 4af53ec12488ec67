"""Power loss, simulated sector by sector through the one I/O layer, at every layer.

A real power cut needs hardware or root (a device-mapper target that drops writes); these
tests build the disk states one can leave instead. Every system call of the store goes
through :class:`~kachedb_radix.reference.tiers.disk_io.DiskIO`; the recording layer of
:mod:`tests.tiers.powerloss` makes each call for real and records what a disk would keep,
then builds, for a cut after *any* recorded call, a folder a restarted machine could
find: each sector of each file at any version it had since that file's last flush, the
folder's names as its last flush left them plus any prefix of the changes since, every
process dead. Each image is reopened as a restarted process would, and held to the
promise of its layer (R-TIER-12, R-TIER-13):

* **the store** (puts, deletes, syncs): each slot holds what the last sync left or what a
  step after it would have left (an empty slot included: a torn record is left out, as a
  delete would have left it); every block returned is exactly the block its metadata
  names; ``check_invariants(deep=True)`` passes;
* **creation** (the temporary file, its flush, the link or rename, the folder's flush):
  the store's name holds nothing, or a complete store -- never a torn one -- and, when
  an old store is replaced (``overwrite``), the old one intact or the new one; a
  temporary file left behind is removed by the next open;
* **the identity header**: written only into the temporary file, flushed before the name
  points to it, so a torn header never lies under the store's name (a planted creator
  that skips that flush shows the simulation catches one);
* **a KV cache** whose evictions cascade device -> host -> disk between syncs: every disk
  block the cache held at its last ``sync()`` and every call since kept is there after
  the cut; nothing is there that no call left on disk since; every block served has
  exactly the bytes stored for its prefix.

Each test prints its tally (``pytest -s``); docs/tiers.md quotes them.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kachedb_radix.reference.blockpool import PoolSpec
from kachedb_radix.reference.tiers import (
    CorruptBlockError,
    DiskBlockStore,
    KVCache,
    SlabIdentity,
    StoreFormatError,
)
from kachedb_radix.reference.tiers.disk_format import PAGE
from tests.tiers import blocks
from tests.tiers.powerloss import Rebooted, RecordingIO, fresh_folder
from tests.tiers.test_kv_cache import kv_of

SLOTS = 4
BLOCK = 2 * PAGE + 300  # three pages of payload, the last one partly
META = 1000  # metadata over the first three sectors of the header page
State = dict[int, int | None]
IMAGES_PER_CUT = 3


def _report(layer: str, tally: Counter[str]) -> None:
    print(f"\npower cuts, {layer}: {dict(sorted(tally.items()))}")


# -- the store: puts, deletes, syncs ----------------------------------------------------


def _run_steps(
    folder: Path, steps: int, seed: int
) -> tuple[RecordingIO, list[int], list[State], list[int]]:
    """Random steps on a new store, recorded; the event count, the model and the last sync
    after each step."""
    path = folder / "live.store"
    DiskBlockStore.create(path, SLOTS, BLOCK, META).close()  # durable before recording
    recorder = RecordingIO(folder)
    rng = random.Random(seed)
    marks, states, synced_at = [0], [dict.fromkeys(range(SLOTS))], [0]
    state: State = dict.fromkeys(range(SLOTS))
    last_sync = 0
    with DiskBlockStore.open(path, io=recorder) as store:
        for step in range(1, steps + 1):
            slot = rng.randrange(SLOTS)
            if rng.random() < 0.25:
                store.sync()
                last_sync = step
            elif state[slot] is None:
                store.put(slot, blocks.meta(slot, step, META), blocks.payload(step, BLOCK))
                state[slot] = step
            else:
                store.delete(slot)
                state[slot] = None
            marks.append(len(recorder.events))
            states.append(dict(state))
            synced_at.append(last_sync)
    marks.append(len(recorder.events))  # close syncs: the last state is durable
    states.append(dict(state))
    synced_at.append(len(states) - 1)
    return recorder, marks, states, synced_at


def _check_store(path: Path, allowed: dict[int, set[int | None]], tally: Counter[str]) -> None:
    with DiskBlockStore.open(path, io=Rebooted()) as store:
        tally["records left out at open (torn header or metadata)"] += store.stats().dropped_at_open
        for slot in range(SLOTS):
            try:
                block = store.get(slot)
            except CorruptBlockError:
                block = None
                tally["records dropped at read (torn payload)"] += 1
            found = None
            if block is not None:
                found = blocks.parse(slot, block[0], META)
                assert np.array_equal(block[1], blocks.payload(found, BLOCK)), (slot, found)
                tally["blocks served, all verified"] += 1
            assert found in allowed[slot], f"slot {slot}: gen {found}, allowed {allowed[slot]}"
        store.check_invariants(deep=True)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_power_loss_keeps_every_synced_block(tmp_path: Path, seed: int) -> None:
    live = fresh_folder(tmp_path / "live")
    recorder, marks, states, synced_at = _run_steps(live, steps=40, seed=seed)
    rng = random.Random(seed)
    tally: Counter[str] = Counter()
    for cut in range(len(recorder.events) + 1):
        step = next(j for j, mark in enumerate(marks) if mark >= cut)  # the step under way
        since = max(synced_at[v] for v in range(step + 1) if marks[synced_at[v]] <= cut)
        allowed = {s: {states[v][s] for v in range(since, step + 1)} for s in range(SLOTS)}
        for _ in range(IMAGES_PER_CUT):
            image = fresh_folder(tmp_path / "image")
            recorder.image(cut, rng, image)
            _check_store(image / "live.store", allowed, tally)
            tally["power cuts"] += 1
    _report(f"the store, seed {seed}", tally)
    assert tally["power cuts"] == IMAGES_PER_CUT * (len(recorder.events) + 1)
    torn = sum(count for key, count in tally.items() if key.startswith("records"))
    assert torn > 0, "no image tore a record: the simulation tests nothing"


def test_sync_is_the_flush_and_put_is_not(tmp_path: Path) -> None:
    """What makes the power-loss promise true on a real disk: ``sync()`` flushes the
    store's file, a put or a delete alone does not (every call goes through the layer)."""
    DiskBlockStore.create(tmp_path / "s", 2, BLOCK, META).close()
    recorder = RecordingIO(tmp_path)
    with DiskBlockStore.open(tmp_path / "s", io=recorder) as store:
        store.put(0, b"", bytes(BLOCK))
        store.delete(0)
        store.put(1, b"", bytes(BLOCK))
        kinds = [type(event).__name__ for event in recorder.events]
        assert kinds == ["Write"] * 5 and store.stats().unsynced == 3
        store.sync()
        assert type(recorder.events[-1]).__name__ == "Flush"
        store.sync()  # nothing new since
        assert len(recorder.events) == 6
    assert len(recorder.events) == 6  # close had nothing left to flush


# -- creation and the identity header ---------------------------------------------------

OLD = SlabIdentity(model="old-model", layers=2, kv_heads=4, head_dim=8, dtype="fp16",
                   tokens_per_block=16, hash_scheme="h")  # fmt: skip
NEW = SlabIdentity(model="new-model", layers=2, kv_heads=4, head_dim=8, dtype="bf16",
                   tokens_per_block=16, hash_scheme="h")  # fmt: skip


def _leftovers(folder: Path) -> list[str]:
    return [name for name in os.listdir(folder) if name.endswith(".new")]


def _creation_images(
    folder: Path, replace: bool, skip_fsync: bool = False, seed: int = 7
) -> Counter[str]:
    """Record one creation of ``kv.slab`` (``replace``: over an old store holding two
    synced blocks) and check every image of every cut; the tally."""
    live = fresh_folder(folder / "live")
    slab = live / "kv.slab"
    if replace:
        with DiskBlockStore.create(slab, SLOTS, BLOCK, META, identity=OLD) as old:
            for slot in (0, 2):
                old.put(slot, blocks.meta(slot, slot + 1, META), blocks.payload(slot + 1, BLOCK))
    recorder = RecordingIO(live, skip_fsync=skip_fsync)
    DiskBlockStore.create(
        slab, SLOTS, BLOCK, META, identity=NEW, overwrite=replace, io=recorder
    ).close()
    rng = random.Random(seed)
    tally: Counter[str] = Counter()
    for cut in range(len(recorder.events) + 1):
        for _ in range(IMAGES_PER_CUT):
            image = fresh_folder(folder / "image")
            recorder.image(cut, rng, image)
            tally["power cuts"] += 1
            _check_creation(image, tally, replace)
    return tally


def _check_creation(image: Path, tally: Counter[str], replace: bool) -> None:
    left = _leftovers(image)
    for name in left:  # what a creator's own file may hold: anything
        try:
            DiskBlockStore.open(image / name, readonly=True, io=Rebooted()).close()
            tally["temporary file left, complete"] += 1
        except StoreFormatError:
            tally["temporary file left, header torn or missing"] += 1
    slab = image / "kv.slab"
    if not slab.exists():
        assert not replace, "the old store vanished"
        tally["no store under the name yet"] += 1
        store = DiskBlockStore.create(slab, SLOTS, BLOCK, META, identity=NEW, io=Rebooted())
    else:
        try:
            store = DiskBlockStore.open(slab, io=Rebooted())
        except StoreFormatError:
            tally["a torn store under the name"] += 1
            return
        if store.identity == NEW:
            assert len(store) == 0
            tally["the new store, complete"] += 1
        else:
            assert store.identity == OLD and sorted(store.slots()) == [0, 2]
            for slot in (0, 2):
                got = store.get(slot)
                assert got is not None and blocks.parse(slot, got[0], META) == slot + 1
            tally["the old store, intact"] += 1
    assert store.stats().removed_leftovers == tuple(sorted(left))
    assert _leftovers(image) == []
    tally["temporary files removed at the next open"] += len(left)
    store.check_invariants(deep=True)
    store.close()


@pytest.mark.parametrize("replace", [False, True], ids=["create", "start-afresh"])
def test_power_loss_during_creation_leaves_no_store_or_a_whole_one(
    tmp_path: Path, replace: bool
) -> None:
    tally = _creation_images(tmp_path, replace)
    _report("creation" + (" over an old store" if replace else ""), tally)
    assert tally["a torn store under the name"] == 0
    assert tally["the new store, complete"] > 0
    assert tally["temporary file left, header torn or missing"] > 0  # the header did tear
    assert tally["temporary files removed at the next open"] > 0
    assert tally["the old store, intact" if replace else "no store under the name yet"] > 0


def test_the_simulation_catches_a_creator_that_links_before_its_flush(tmp_path: Path) -> None:
    """The checks can fail: a creator whose flush of the new file does nothing links a
    file whose header may not be on the disk, and some power cut shows it."""
    tally = _creation_images(tmp_path, replace=False, skip_fsync=True)
    _report("creation, planted: no flush before the link", tally)
    assert tally["a torn store under the name"] > 0


# -- a KV cache, its evictions cascading to disk between syncs ------------------------------

B = 2
SPEC = PoolSpec(num_blocks=3, block_size=B, num_layers=2, num_kv_heads=2, head_dim=64)
HOST, DISK = 3, 8
MODEL = "powerloss-model"
Prefix = tuple[str | None, tuple[int, ...]]


def _disk_prefixes(cache: KVCache) -> set[Prefix]:
    """Every block the disk tier holds, named by its namespace and whole token prefix."""
    found: set[Prefix] = set()
    for space in cache.tiers.tree("disk").dump()["namespaces"]:
        stack: list[tuple[tuple[int, ...], Any]] = [((), node) for node in space["children"]]
        while stack:
            above, node = stack.pop()
            tokens = above + tuple(node["tokens"])
            for end in range(len(above) + B, len(tokens) + 1, B):
                found.add((space["namespace"], tokens[:end]))
            stack.extend((tokens, child) for child in node["children"])
    return found


Call = tuple[str, Callable[[KVCache], object]]


def _store(tokens: list[int], namespace: str | None) -> Call:
    return "store", lambda cache: cache.store(tokens, kv_of(SPEC, tokens, namespace), namespace)


def _restore(tokens: list[int], namespace: str | None) -> Call:
    return "restore", lambda cache: cache.restore(tokens, namespace)


def _evict(count: int, tier: str) -> Call:
    return "evict", lambda cache: cache.evict(count, tier)


def _workload(rng: random.Random, calls: int) -> list[Call]:
    """Stores of 1-3 block paths over a small alphabet (the device, host and disk overflow,
    so evictions cascade device -> host -> disk), restores, evictions, syncs."""
    made: list[Call] = []
    stored: list[tuple[list[int], str | None]] = []
    for _ in range(calls):
        action = rng.random()
        if action < 0.5 or not stored:
            tokens = [t for block in range(rng.randint(1, 3)) for t in [rng.randint(1, 4)] * B]
            namespace = rng.choice([None, "tenant"])
            stored.append((tokens, namespace))
            made.append(_store(tokens, namespace))
        elif action < 0.65:
            made.append(_restore(*rng.choice(stored)))
        elif action < 0.85:
            made.append(_evict(rng.randint(1, 3), rng.choice(["device", "host", "host", "disk"])))
        else:
            made.append(("sync", KVCache.sync))
    return made


def _check_cache(image: Path, kept: set[Prefix], allowed: set[Prefix], tally: Counter[str]) -> None:
    """Reopen the image's cache and hold it to R-TIER-13 (the module docstring)."""
    spec = SPEC.with_blocks(DISK)  # room to restore every disk path
    with KVCache(spec, model=MODEL, disk_path=image / "kv.slab", disk_io=Rebooted()) as cache:
        cache.check_invariants()
        store = cache.disk
        assert store is not None
        tally["records left out at open (torn)"] += store.stats().dropped_at_open
        tally["records left out at reopen (orphans)"] += cache.stats().unusable
        found = _disk_prefixes(cache)
        stray = found - allowed
        assert not stray, f"blocks no call left on disk: {sorted(stray)[:3]}"
        for namespace, tokens in sorted(found, key=lambda prefix: -len(prefix[1])):
            brought = cache.restore(list(tokens), namespace)
            got = cache.read(list(tokens), namespace)
            want = kv_of(spec, list(tokens[: len(got) * B]), namespace)
            assert got.tobytes() == want.tobytes(), f"wrong bytes served for {tokens}"
            if brought.stopped is not None:
                tally["blocks lost at read (torn payload)"] += 1
        served = {(ns, t) for ns, t in found if cache.lookup(list(t), ns).length == len(t)}
        lost = kept - served
        assert not lost, f"synced disk blocks lost: {sorted(lost)[:3]}"
        tally["synced disk blocks, all there"] += len(kept)
        tally["disk blocks verified byte for byte"] += len(served)
        cache.check_invariants()


@pytest.mark.parametrize("seed", [4, 5])
def test_power_loss_keeps_what_kv_cache_sync_promised(tmp_path: Path, seed: int) -> None:
    live = fresh_folder(tmp_path / "live")
    slab = live / "kv.slab"
    recorder = RecordingIO(live)
    rng = random.Random(seed)
    cache = KVCache(SPEC, model=MODEL, host_blocks=HOST, disk_path=slab, disk_blocks=DISK,
                    disk_io=recorder)  # fmt: skip
    deleted: set[bytes] = set()
    forget = cache._forget_disk

    def forget_and_note(block: int) -> None:
        deleted.add(cache._hash_of[block])
        forget(block)

    setattr(cache, "_forget_disk", forget_and_note)  # noqa: B010 (a method, replaced)
    marks, states, synced = [len(recorder.events)], [_disk_prefixes(cache)], [0]
    removed: list[set[Prefix]] = [set()]
    for number, (kind, call) in enumerate(_workload(rng, 40), start=1):
        call(cache)
        cache.check_invariants()
        marks.append(len(recorder.events))
        states.append(_disk_prefixes(cache))
        removed.append({p for p in states[-2] if _chain_hash(*p) in deleted})
        deleted.clear()
        synced.append(number if kind == "sync" else synced[-1])
    cache.close()  # a sync: the last state is durable
    marks.append(len(recorder.events))
    states.append(states[-1])
    removed.append(set())
    synced.append(len(states) - 1)
    tally: Counter[str] = Counter()
    for cut in range(marks[0], len(recorder.events) + 1):
        under_way = next(j for j, mark in enumerate(marks) if mark >= cut)
        since = max(synced[v] for v in range(under_way + 1) if marks[synced[v]] <= cut)
        span = range(since, under_way + 1)
        kept = set.intersection(*(states[v] for v in span))
        kept -= set().union(*(removed[v] for v in range(since + 1, under_way + 1)))
        allowed = set().union(*(states[v] for v in span))
        for _ in range(2):
            image = fresh_folder(tmp_path / "image")
            recorder.image(cut, rng, image)
            _check_cache(image, kept, allowed, tally)
            tally["power cuts"] += 1
    _report(f"a KV cache, seed {seed}", tally)
    assert tally["synced disk blocks, all there"] > 0
    torn = sum(count for key, count in tally.items() if "torn" in key)
    assert torn > 0, "no image tore a record: the simulation tests nothing"


def _chain_hash(namespace: str | None, tokens: tuple[int, ...]) -> bytes:
    from kachedb_radix.reference.tiers.persist import ROOT, chained_hash

    parent = ROOT
    for start in range(0, len(tokens), B):
        parent = chained_hash(parent, namespace, tokens[start : start + B])
    return parent
