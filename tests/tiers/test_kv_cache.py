"""The KV cache over device, host and disk, byte for byte (R-TIER-*).

The end-to-end test writes known KV data (each block's bytes a function of its namespace
and token prefix), forces it down to the host and to the disk with a small device and
host, brings it back, and compares every byte of everything the cache serves. It runs on
each tree twin over the NumPy pool, and on the GPU twin (CuPy pool, pinned host, C trees),
which skips with the reason where no CUDA device is usable; each cache built asserts
which parts it runs.
"""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import xxhash

from kachedb_radix.reference.blockpool import BufferShapeError, KVDType, Layout, PoolSpec
from kachedb_radix.reference.errors import InvalidArgumentError, OutOfBlocksError
from kachedb_radix.reference.tiers import (
    DiskBlockStore,
    KVCache,
    StoreClosedError,
    StoreFormatError,
    StoreIdentityError,
    StoreIOError,
    TieredTree,
)
from tests.conftest import TIER_IMPLEMENTATIONS
from tests.support.blockpool import requires_gpu

B = 2
SPEC = PoolSpec(num_blocks=6, block_size=B, num_layers=2, num_kv_heads=2, head_dim=4)
#: The model the tests' disk tiers record (R-TIER-11).
MODEL = "test-model"

Build = Callable[..., KVCache]


def _cache_class(tree: str, pool: str) -> type[KVCache]:
    if pool == "cupy":
        from kachedb_radix import accel

        return accel.KVCache
    tiers_type = TIER_IMPLEMENTATIONS[tree]
    if tiers_type is TieredTree:
        return KVCache
    return type("AccelTreeKVCache", (KVCache,), {"tiers_type": tiers_type})


CACHES = [
    pytest.param(("reference", "numpy"), id="reference-tree-numpy"),
    *(
        [pytest.param(("accel", "numpy"), id="accel-tree-numpy")]
        if "accel" in TIER_IMPLEMENTATIONS
        else []
    ),
    pytest.param(("accel", "cupy"), id="accel-gpu", marks=requires_gpu),
]


@pytest.fixture(params=CACHES)
def make_cache(request: pytest.FixtureRequest, tmp_path: Path) -> Build:
    tree, pool = request.param
    cls = _cache_class(tree, pool)

    def build(spec: PoolSpec = SPEC, **options: Any) -> KVCache:
        if "disk_blocks" in options:
            options.setdefault("disk_path", tmp_path / "kv.slab")
        if "disk_path" in options:
            options.setdefault("model", MODEL)
        cache = cls(spec, **options)
        assert cache.tiers.implementation == tree  # no silent fallback
        assert type(cache.pool).__module__.startswith(
            "kachedb_radix.accel" if pool == "cupy" else "kachedb_radix.reference"
        )
        return cache

    return build


def block_bytes(spec: PoolSpec, namespace: str | None, prefix: list[int]) -> npt.NDArray[Any]:
    """The KV data of the block ending ``prefix``: a function of the prefix alone."""
    seed = xxhash.xxh64_intdigest(repr((namespace, prefix)).encode())
    raw = np.random.default_rng(seed).integers(0, 256, spec.bytes_per_block, dtype=np.uint8)
    return raw.view(spec.storage_dtype).reshape(spec.block_shape)


def kv_of(spec: PoolSpec, tokens: list[int], namespace: str | None = None) -> npt.NDArray[Any]:
    count = len(tokens) // spec.block_size
    kv = np.empty(spec.buffer_shape(count), dtype=spec.storage_dtype)
    for i in range(count):
        kv[i] = block_bytes(spec, namespace, tokens[: (i + 1) * spec.block_size])
    return kv


def assert_served_right(cache: KVCache, tokens: list[int], namespace: str | None = None) -> int:
    """Restore ``tokens``' cached prefix and compare every byte the device then holds."""
    before = cache.lookup(tokens, namespace).length
    brought = cache.restore(tokens, namespace)
    brought.handle.wait()
    assert brought.result.length == before
    got = cache.read(tokens, namespace)
    want = kv_of(cache.spec, tokens[: len(got) * B], namespace)
    assert got.tobytes() == want.tobytes(), f"wrong bytes served for {tokens}"
    return int(brought.result.length)


def path(*blocks: int) -> list[int]:
    return [token for block in blocks for token in (block, block)]


@pytest.mark.parametrize(
    ("host_blocks", "disk_blocks"),
    [(5, 24), (2, 1)],
    ids=["roomy-disk", "one-call-refills-the-disk"],
)
def test_every_byte_survives_the_trip_down_and_back(
    make_cache: Build, host_blocks: int, disk_blocks: int
) -> None:
    """The end-to-end test: known bytes forced down to host and disk, restored, compared.
    With two host blocks and one disk block, some calls write the disk block, drop it
    and write it again (R-TIER-3, R-TIER-8; the old code failed this walk)."""
    cache = make_cache(host_blocks=host_blocks, disk_blocks=disk_blocks)
    rng = random.Random(7)
    stored: list[tuple[list[int], str | None]] = []
    for _ in range(60):
        tokens = path(*(rng.randint(1, 4) for _ in range(rng.randint(1, 4))))
        namespace = rng.choice([None, "tenant"])
        action = rng.random()
        if action < 0.5:
            try:
                cache.store(tokens, kv_of(SPEC, tokens, namespace), namespace)
            except OutOfBlocksError:
                continue
            stored.append((tokens, namespace))
        elif action < 0.8 and stored:
            assert_served_right(cache, *rng.choice(stored))
        else:
            cache.evict(rng.randint(1, 3), rng.choice(["device", "host", "device"]))
        cache.check_invariants()
    moved = cache.stats().bytes_moved
    assert moved["host"] and moved["disk"] and moved["device"]  # every tier was crossed
    for tokens, namespace in stored:
        assert_served_right(cache, tokens, namespace)
    cache.close()


def test_a_disk_block_written_dropped_and_written_again_in_one_call(make_cache: Build) -> None:
    """Three device blocks, one host and one disk block: a three-block store demotes all
    three cached paths; the first reaches the disk and is pushed off it by the second in
    the same call. The disk ends holding the second path's bytes under its name
    (R-TIER-3, R-TIER-8, R-TIER-10)."""
    spec = PoolSpec(num_blocks=3, block_size=B, num_layers=1, num_kv_heads=1, head_dim=2)
    cache = make_cache(spec, host_blocks=1, disk_blocks=1)
    for block in (1, 2, 3):
        cache.store(path(block), kv_of(spec, path(block)))
    result = cache.store(path(9, 8, 7), kv_of(spec, path(9, 8, 7)))
    to_disk = [move.target for move in result.moves if move.target_tier == "disk"]
    assert to_disk == [0, 0] and result.dropped == (("disk", 0),)
    cache.check_invariants()
    assert cache.tiers.lookup(path(2)).tiers == ("disk",)
    assert cache.tiers.lookup(path(1)).length == 0
    assert cache.stats().bytes_moved["disk"] == spec.bytes_per_block  # written once
    cache.close()
    reopened = make_cache(spec, host_blocks=1, disk_blocks=1)
    reopened.check_invariants()
    assert assert_served_right(reopened, path(2)) == B


def test_write_through_and_bf16_layer_major(make_cache: Build) -> None:
    spec = PoolSpec(
        num_blocks=3, block_size=B, num_layers=3, num_kv_heads=1, head_dim=2,
        dtype=KVDType.BF16, layout=Layout.LAYER_MAJOR,
    )  # fmt: skip
    cache = make_cache(spec, host_blocks=6, write_through=True)
    for blocks in ((1, 2, 3), (4, 5), (1, 2, 6)):
        tokens = path(*blocks)
        done = cache.store(tokens, kv_of(spec, tokens))
        assert done.after  # the new blocks the host lacked, copied at insert
        assert cache.tiers.tree("host").snapshot().match(tokens).length == len(tokens)
        cache.check_invariants()
    for blocks in ((1, 2, 3), (4, 5), (1, 2, 6)):
        assert cache.lookup(path(*blocks)).length == 2 * len(blocks)
        assert_served_right(cache, path(*blocks))


def test_a_restarted_process_reopens_the_disk_tier_warm(make_cache: Build, tmp_path: Path) -> None:
    """R-TIER-10: the records are the index; the reopened cache serves the same bytes."""
    cache = make_cache(host_blocks=4, disk_blocks=16)
    paths = [(path(1, 2, 3), None), (path(1, 2, 4), None), (path(5), "tenant"), (path(6, 7), None)]
    for tokens, namespace in paths:
        cache.store(tokens, kv_of(SPEC, tokens, namespace), namespace)
    cache.evict(6)
    cache.evict(4, "host")
    on_disk = {repr(p): cache.lookup(*p).length for p in paths}
    assert all(on_disk.values())
    cache.close()
    again = make_cache(host_blocks=4, disk_blocks=16)
    again.check_invariants()
    assert again.stats().reopened == 4  # four leaf paths (1-2-3 and 1-2-4 share two blocks)
    for tokens, namespace in paths:
        found = again.lookup(tokens, namespace)
        assert found.length == on_disk[repr((tokens, namespace))]
        assert set(found.tiers) == {"disk"}
    for tokens, namespace in paths:
        assert_served_right(again, tokens, namespace)
    again.check_invariants()
    again.close()


def test_a_corrupted_disk_block_is_never_served(make_cache: Build, tmp_path: Path) -> None:
    """R-TIER-10: a payload failing its checksum stops the restore before it; counted."""
    tokens = path(1, 2, 3)
    fresh = make_cache(SPEC.with_blocks(4), host_blocks=4, disk_blocks=8)
    fresh.store(tokens, kv_of(SPEC, tokens))
    fresh.evict(3)
    fresh.evict(3, "host")
    found = fresh.lookup(tokens)
    assert found.tiers == ("disk",) * 3
    slab = str(tmp_path / "kv.slab")
    slot = fresh._slot_of[found.blocks[1]]  # flip one byte of the middle block's payload
    record_offset = _payload_offset(fresh, slot)
    with open(slab, "r+b") as handle:
        handle.seek(record_offset)
        byte = handle.read(1)
        handle.seek(record_offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
    brought = fresh.restore(tokens)
    assert brought.result.length == B  # the restore stopped before the bad block
    assert fresh.read(tokens).tobytes() == kv_of(SPEC, tokens[:B]).tobytes()
    assert fresh.stats().lost == 1
    assert fresh.lookup(path(9)).length == 0
    fresh.check_invariants()
    fresh.evict(4)  # the device empties to the host, which keeps the first block
    found = fresh.lookup(tokens)
    assert found.length == B  # the lost block is cut from every lookup
    pinned = fresh.lookup(tokens, pin=True)  # the lease pins only what it serves (R-TIER-7)
    assert pinned.length == B and pinned.lease is not None
    fresh.evict(8, "disk")  # evicting the lost block forgets it without a record to delete
    assert fresh.stats().lost == 0
    fresh.release(pinned.lease)
    fresh.check_invariants()


@pytest.mark.parametrize("room", [True, False], ids=["device-has-room", "device-full"])
def test_a_disk_restore_lands_in_the_device_blocks_it_is_given(
    make_cache: Build, room: bool
) -> None:
    """On a device that is host memory (the NumPy pool) with a free block for each block
    to bring up, a disk restore reads each block straight into the device block the
    tree then gives it (R-ALLOC-2: the smallest free ids, in path order) and verifies it
    there: no staging buffer. On a full device (the insert evicts first, its ids not
    known before) and on the GPU twin, through the staging rows. The same bytes either
    way (R-TIER-10)."""
    tokens = path(1, 2, 3)
    cache = make_cache(SPEC.with_blocks(4), host_blocks=4, disk_blocks=8)
    cache.store(tokens, kv_of(SPEC, tokens))
    cache.evict(3)
    cache.evict(3, "host")
    if not room:
        other = path(7, 8)
        cache.store(other, kv_of(SPEC, other))  # two of the four device blocks taken
    assert cache.lookup(tokens).tiers == ("disk",) * 3
    assert assert_served_right(cache, tokens) == len(tokens)
    in_place = room and isinstance(cache.pool.arrays[0], np.ndarray)
    assert (cache.memory._staging is None) == in_place
    cache.check_invariants()


def test_ids_the_tree_did_not_foretell_cost_a_copy_never_a_wrong_byte(
    make_cache: Build, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should the device ids foretold for the in-place read differ from those the tree
    gives (they cannot under R-ALLOC-2; here they are foretold reversed), the blocks
    read are moved once more, before anything else writes the device: no wrong byte."""
    tokens = path(1, 2, 3)
    cache = make_cache(SPEC.with_blocks(4), host_blocks=4, disk_blocks=8)
    cache.store(tokens, kv_of(SPEC, tokens))
    cache.evict(3)
    cache.evict(3, "host")
    foretell = cache._device_ids_ahead
    monkeypatch.setattr(cache, "_device_ids_ahead", lambda found: foretell(found)[::-1])
    assert assert_served_right(cache, tokens) == len(tokens)
    cache.check_invariants()


def _payload_offset(cache: KVCache, slot: int) -> int:
    store = cache._store
    assert store is not None
    geometry = store._geometry
    return int(geometry.slot_offset(slot) + geometry.payload_offset)


def test_reopen_leaves_out_orphans_keeps_them_and_refuses_foreign_files(
    make_cache: Build, tmp_path: Path
) -> None:
    """R-TIER-10, R-TIER-12: an orphan is left out, and left in the file until its slot is
    needed (after every free slot); another geometry is refused whole, the file untouched."""
    cache = make_cache(host_blocks=4, disk_blocks=8)
    cache.store(path(1, 2, 3), kv_of(SPEC, path(1, 2, 3)))
    cache.evict(3)
    cache.evict(3, "host")
    middle = cache._slot_of[cache.lookup(path(1, 2, 3)).blocks[1]]
    last = cache._slot_of[cache.lookup(path(1, 2, 3)).blocks[2]]
    cache.close()
    with DiskBlockStore.open(tmp_path / "kv.slab") as store:
        store.delete(middle)  # as if its record had been torn
    again = make_cache(host_blocks=4, disk_blocks=8)
    stats = again.stats()
    assert (stats.unusable, stats.unusable_left) == (1, 1)  # block 3 is an orphan, kept
    assert again.lookup(path(1, 2, 3)).length == B
    assert again.disk is not None and last in again.disk  # still in the file
    again.check_invariants()
    for block in range(4, 11):  # fill the disk tier: the orphan's slot is the last used
        again.store(path(block), kv_of(SPEC, path(block)))
        again.evict(1)
        again.evict(1, "host")
        again.check_invariants()
        assert again.stats().unusable_left == (0 if block == 10 else 1), block
    again.close()
    wrong = PoolSpec(num_blocks=2, block_size=B, num_layers=1, num_kv_heads=2, head_dim=4)
    before = (tmp_path / "kv.slab").read_bytes()
    with pytest.raises(StoreIdentityError, match="layers is 2 in the file, 1 here") as raised:
        make_cache(wrong, disk_blocks=8)
    assert raised.value.mismatches[0] == ("layers", 2, 1)
    assert (tmp_path / "kv.slab").read_bytes() == before  # refused whole, not wiped
    (tmp_path / "kv.slab").write_bytes(b"not a store" * 100)
    with pytest.raises(StoreFormatError):
        make_cache(SPEC.with_blocks(2), disk_blocks=8)


def test_bad_calls_change_nothing(make_cache: Build) -> None:
    cache = make_cache(host_blocks=2, disk_blocks=4, namespace_bytes=8)
    cache.store(path(1), kv_of(SPEC, path(1)))
    before = cache.tiers.dump()
    with pytest.raises(BufferShapeError):
        cache.store(path(2, 3), kv_of(SPEC, path(2)))
    with pytest.raises(InvalidArgumentError, match="longer than the disk tier records"):
        cache.store(path(2), kv_of(SPEC, path(2)), "a namespace too long")
    with pytest.raises(InvalidArgumentError):
        make_cache(host_blocks=-1)
    assert cache.tiers.dump() == before
    cache.check_invariants()


def test_bad_arguments_leave_no_file_behind(make_cache: Build, tmp_path: Path) -> None:
    """The disk tier's file is created only once every argument was accepted."""
    slab = tmp_path / "kv.slab"
    for bad in ({"host_blocks": -1}, {"policy": "nonesuch"}, {"write_through": "yes"}):
        with pytest.raises(InvalidArgumentError):
            make_cache(disk_blocks=4, **bad)
        assert not slab.exists(), bad
    with pytest.raises(InvalidArgumentError, match="disk_path must be a str or a path"):
        make_cache(disk_path=["kv.slab"], disk_blocks=4)
    with pytest.raises(InvalidArgumentError, match="disk_blocks must be an int >= 1"):
        make_cache(disk_blocks=0)
    assert not slab.exists()


def test_a_namespace_no_record_can_name_is_refused(make_cache: Build) -> None:
    """Refused before anything changes (R-ERR-2), not inside a later demotion."""
    cache = make_cache(disk_blocks=4)
    before = cache.tiers.dump()
    with pytest.raises(InvalidArgumentError, match="not valid UTF-8"):
        cache.store(path(1), kv_of(SPEC, path(1)), "lone \ud800 surrogate")
    assert cache.tiers.dump() == before
    cache.check_invariants()


def test_a_closed_cache_refuses_every_call_and_changes_nothing(make_cache: Build) -> None:
    cache = make_cache(SPEC.with_blocks(1), disk_blocks=4)
    cache.store(path(1), kv_of(SPEC, path(1)))
    lease = cache.lookup(path(1), pin=True).lease
    assert lease is not None
    before = cache.tiers.dump()
    cache.close()
    calls: list[Callable[[], object]] = [
        lambda: cache.store(path(2), kv_of(SPEC, path(2))),  # would demote path(1) to disk
        lambda: cache.lookup(path(1)),
        lambda: cache.restore(path(1)),
        lambda: cache.read(path(1)),
        lambda: cache.evict(1),
        lambda: cache.release(lease),
    ]
    for call in calls:
        with pytest.raises(StoreClosedError):
            call()
    assert cache.tiers.dump() == before
    cache.close()  # twice is harmless


def test_a_failed_disk_batch_names_only_the_blocks_it_wrote(
    make_cache: Build, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's eviction writes three disk blocks in one batch; the second payload's
    write fails: the error reaches the caller, the first block's record is in the file and
    a chained hash names it, the blocks not written get none."""
    cache = make_cache(host_blocks=3, disk_blocks=3)
    tokens = path(1, 2, 3)
    cache.store(tokens, kv_of(SPEC, tokens))
    cache.evict(3)  # to the host
    real_pwrite = os.pwrite
    calls = 0

    def flaky(fd: int, data: Any, offset: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise OSError(errno.EIO, "Input/output error")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", flaky)
    with pytest.raises(StoreIOError, match="Input/output error"):
        cache.evict(3, "host")
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    store = cache.disk
    assert store is not None and len(store) == 1
    named = set(cache._hash_of)
    assert len(named) == 1 and all(cache._slot_of[block] in store for block in named)
