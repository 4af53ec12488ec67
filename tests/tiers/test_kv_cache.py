"""The KV cache over device, host and disk, byte for byte (R-TIER-*).

The end-to-end test writes known KV data (each block's bytes a function of its namespace
and token prefix), forces it down to the host and to the disk with a small device and
host, brings it back, and compares every byte of everything the cache serves. It runs on
each tree twin over the NumPy pool, and on the GPU twin (CuPy pool, pinned host, C trees),
which skips with the reason where no CUDA device is usable; each cache built asserts
which parts it runs.
"""

from __future__ import annotations

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
    StoreConfigError,
    StoreFormatError,
    TieredTree,
)
from tests.conftest import TIER_IMPLEMENTATIONS
from tests.support.blockpool import requires_gpu

B = 2
SPEC = PoolSpec(num_blocks=6, block_size=B, num_layers=2, num_kv_heads=2, head_dim=4)

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


def test_every_byte_survives_the_trip_down_and_back(make_cache: Build) -> None:
    """The end-to-end test: known bytes forced down to host and disk, restored, compared."""
    cache = make_cache(host_blocks=5, disk_blocks=24)
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
    fresh.evict(8, "disk")  # evicting the lost block forgets it without a record to delete
    assert fresh.stats().lost == 0
    fresh.check_invariants()


def _payload_offset(cache: KVCache, slot: int) -> int:
    store = cache._store
    assert store is not None
    geometry = store._geometry
    return int(geometry.slot_offset(slot) + geometry.payload_offset)


def test_reopen_leaves_out_orphans_and_refuses_foreign_files(
    make_cache: Build, tmp_path: Path
) -> None:
    cache = make_cache(host_blocks=4, disk_blocks=8)
    cache.store(path(1, 2, 3), kv_of(SPEC, path(1, 2, 3)))
    cache.evict(3)
    cache.evict(3, "host")
    middle = cache._slot_of[cache.lookup(path(1, 2, 3)).blocks[1]]
    cache.close()
    with DiskBlockStore.open(tmp_path / "kv.slab") as store:
        store.delete(middle)  # as if its record had been torn
    again = make_cache(host_blocks=4, disk_blocks=8)
    assert again.stats().unusable == 1  # block 3 is an orphan: deleted, counted
    assert again.lookup(path(1, 2, 3)).length == B
    again.check_invariants()
    again.close()
    other = SPEC.with_blocks(2)
    wrong = PoolSpec(num_blocks=2, block_size=B, num_layers=1, num_kv_heads=2, head_dim=4)
    with pytest.raises(StoreConfigError, match="not this cache's disk tier"):
        make_cache(wrong, disk_blocks=8)
    (tmp_path / "kv.slab").write_bytes(b"not a store" * 100)
    with pytest.raises(StoreFormatError):
        make_cache(other, disk_blocks=8)


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
