"""The tier layer's edges: adoption, bad arguments, every invariant firing, the disk
tier's metadata refused field by field, records that cannot be linked (R-TIER-1,
R-TIER-10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kachedb_radix.reference.blockpool import BufferDTypeError, PoolSpec
from kachedb_radix.reference.errors import (
    InvalidArgumentError,
    InvariantViolation,
    OutOfBlocksError,
)
from kachedb_radix.reference.tiers import DiskBlockStore, KVCache, StoreConfigError
from kachedb_radix.reference.tiers.cache import slab_identity
from kachedb_radix.reference.tiers.identity import ModelIdentity
from kachedb_radix.reference.tiers.persist import (
    ROOT,
    chained_hash,
    decode_meta,
    encode_meta,
    meta_size,
    rebuild,
)
from kachedb_radix.reference.tiers.registry import BlockKey
from kachedb_radix.spec.conform.contents import ContentError, TierContents
from kachedb_radix.spec.conform.safety import SafetyMonitor
from tests.conftest import TreeFactory

B = 2
SPEC = PoolSpec(num_blocks=4, block_size=B, num_layers=1, num_kv_heads=1, head_dim=2)


def kv(count: int, fill: int = 1) -> Any:
    return np.full(SPEC.buffer_shape(count), fill, dtype=SPEC.storage_dtype)


def test_adopt_puts_a_path_in_a_slower_tier(make_tiers: TreeFactory) -> None:
    """R-TIER-10's mechanism: a restarted cache adopts what its disk persisted."""
    tiers = make_tiers(2, 0, 3, B, events=True)
    assert tiers.adopt("disk", [1, 1, 2, 2]) == ((0, 1), 0)
    assert tiers.adopt("disk", [1, 1, 3, 3]) == ((0, 2), 1)
    assert tiers.lookup([1, 1, 3, 3]).tiers == ("disk", "disk")
    [batch, _] = tiers.take_events()
    assert batch.events[0].medium == "STORAGE"
    before = tiers.dump()
    with pytest.raises(OutOfBlocksError, match="0 free blocks, 1 needed"):
        tiers.adopt("disk", [5, 5])
    with pytest.raises(InvalidArgumentError, match="come from insert"):
        tiers.adopt("device", [5, 5])
    with pytest.raises(InvalidArgumentError, match="no host tier"):
        tiers.adopt("host", [5, 5])
    assert tiers.dump() == before
    assert (tiers.write_through, tiers.policy, tiers.events is not None) == (False, "lru", True)
    tiers.check_invariants()


def test_every_tier_invariant_fires(make_tiers: TreeFactory) -> None:
    tiers = make_tiers(2, 2, 0, B)
    held = tiers.insert([1, 1, 2, 2], pin=True)
    tiers.check_invariants()
    registry = tiers._registry["device"]
    right = registry._at[0]
    registry._at[0] = ("wrong", *right[1:])
    assert registry.key(0) == BlockKey("wrong", None, (1, 1))
    with pytest.raises(InvariantViolation, match="registry disagrees"):
        tiers.check_invariants()
    registry._at[0] = right
    held.lease._released = True
    with pytest.raises(InvariantViolation, match="still filed"):
        tiers.check_invariants()
    held.lease._released = False
    stray = tiers.tree("host").match([], None, pin=True)  # a pin no tiered lease holds
    with pytest.raises(InvariantViolation, match="live leases"):
        tiers.check_invariants()
    tiers.tree("host").release(stray.lease)
    held.lease.leases["disk"] = held.lease.leases["device"]
    with pytest.raises(InvariantViolation, match="absent disk tier"):
        tiers.check_invariants()


def test_contents_and_safety_name_what_is_wrong() -> None:
    contents = TierContents(B)
    with pytest.raises(ContentError, match="holds nothing"):
        contents.check(("host",), (0,), None, [1, 1])
    monitor = SafetyMonitor()
    monitor.check({"op": "reset", "block_size": B, "tiers": {"host": 1}}, {"ok": None})
    bad = {"freed": [], "moves": [["device", 0]], "dropped": []}  # not four fields
    monitor.check({"op": "evict", "count": 1}, {"ok": bad})  # malformed: left to the compare


def test_the_cache_refuses_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="spec must be a PoolSpec"):
        KVCache("spec")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="namespace_bytes must be an int"):
        KVCache(SPEC, namespace_bytes=True)
    with pytest.raises(InvalidArgumentError, match="namespace_bytes must be in"):
        KVCache(SPEC, namespace_bytes=70000)
    with pytest.raises(InvalidArgumentError, match="disk_blocks and disk_afresh need a disk_path"):
        KVCache(SPEC, disk_blocks=4)
    with pytest.raises(InvalidArgumentError, match="disk_blocks must be an int >= 1"):
        KVCache(SPEC, model="m", disk_path=tmp_path / "a.slab")
    with pytest.raises(InvalidArgumentError, match="host_blocks"):
        KVCache(SPEC, model="m", host_blocks=-1, disk_path=tmp_path / "b.slab", disk_blocks=2)
    assert not (tmp_path / "b.slab").exists()  # created only once every argument is right
    KVCache(SPEC, model="m", disk_path=tmp_path / "b.slab", disk_blocks=2).close()
    with KVCache(SPEC, model="m", disk_path=tmp_path / "b.slab") as reopened:  # closed before
        assert reopened.tiers.capacity("disk") == 2
    identity = slab_identity(SPEC, ModelIdentity("m"))
    with DiskBlockStore.create(tmp_path / "c.slab", 2, SPEC.bytes_per_block, 8, identity=identity):
        pass
    with pytest.raises(StoreConfigError, match="too few for 2 tokens"):
        KVCache(SPEC, model="m", disk_path=tmp_path / "c.slab")
    cache = KVCache(SPEC, host_blocks=2, events=True)
    with pytest.raises(BufferDTypeError):
        cache.store([1, 1], kv(1).astype(np.float32))
    held = cache.store([1, 1], kv(1), pin=True)
    cache.sync()  # no disk: nothing to do
    assert held.lease is not None
    cache.release(held.lease)
    assert [type(e).__name__ for b in cache.take_events() for e in b.events] == ["BlockStored"]
    assert cache.spec is SPEC and cache.pool is not None
    cache.check_invariants()


def test_every_cache_invariant_fires(tmp_path: Path) -> None:
    def fresh() -> KVCache:
        cache = KVCache(
            SPEC, model="m", host_blocks=2, disk_path=tmp_path / "kv.slab", disk_blocks=4
        )
        cache.store([1, 1, 2, 2], kv(2))
        cache.evict(2)
        cache.evict(2, "host")
        cache.check_invariants()
        return cache

    cache = fresh()
    cache._slot_of[0] = cache._slot_of[1]
    with pytest.raises(InvariantViolation, match="one to one"):
        cache.check_invariants()
    cache.close()
    (tmp_path / "kv.slab").unlink()
    cache = fresh()
    cache._lost.add(3)
    with pytest.raises(InvariantViolation, match="records disagree"):
        cache.check_invariants()
    cache._lost.clear()
    cache._hash_of[3] = ROOT
    with pytest.raises(InvariantViolation, match="chained hashes"):
        cache.check_invariants()
    del cache._hash_of[3]
    right = cache._hash_of[1]
    cache._hash_of[1] = ROOT
    with pytest.raises(InvariantViolation, match="chained hash is stale"):
        cache.check_invariants()
    cache._hash_of[1] = right
    store = cache._store
    assert store is not None
    slot = cache._slot_of[1]
    got = store.get(slot)
    assert got is not None
    store.delete(slot)  # block 1's slot now holds a record naming another block
    store.put(slot, encode_meta(None, ROOT, (7, 7)), got[1])
    with pytest.raises(InvariantViolation, match="does not name it"):
        cache.check_invariants()
    cache.close()


def test_metadata_is_refused_field_by_field() -> None:
    good = encode_meta("ns", ROOT, (1, 2))
    key = decode_meta(good, B)
    assert not isinstance(key, str) and (key.namespace, key.tokens) == ("ns", (1, 2))
    assert len(good) <= meta_size(B, 2)
    assert "too short" in str(decode_meta(good[:5], B))
    assert "format 9" in str(decode_meta(b"\x09" + good[1:], B))
    assert "bad metadata flags" in str(decode_meta(good[:1] + b"\x00" + good[2:], B))
    assert "its fields say" in str(decode_meta(good + b"x", B))
    broken = bytearray(encode_meta("é", ROOT, (1, 2)))
    broken[-1] = 0xFF
    assert "not UTF-8" in str(decode_meta(bytes(broken), B))


def test_rebuild_links_records_and_leaves_out_what_it_cannot_use() -> None:
    """Duplicates, namespace mismatches and orphans are left out with their reason."""
    root = encode_meta(None, ROOT, (1, 1))
    parent = chained_hash(ROOT, None, (1, 1))
    child = encode_meta(None, parent, (2, 2))
    foreign = encode_meta("t", parent, (3, 3))  # a child in another namespace: no link
    orphan = encode_meta(None, chained_hash(ROOT, None, (9, 9)), (4, 4))
    found = rebuild(
        [(0, 1, root), (1, 2, child), (2, 3, root), (3, 4, foreign), (4, 5, orphan),
         (5, 6, b"junk")],
        B,
    )  # fmt: skip
    assert found.paths == [(None, [1, 1, 2, 2], [0, 1])]
    reasons = dict(found.unusable)
    assert "same block as slot 0" in reasons[2] and "too short" in reasons[5]
    assert "orphan" in reasons[3] and "orphan" in reasons[4]


def test_a_tier_name_that_is_no_string_is_refused(make_tiers: TreeFactory) -> None:
    tiers = make_tiers(2, 2)
    bad: Any
    for bad in ([], {}, None, 3):
        with pytest.raises(InvalidArgumentError, match="tier must be one of"):
            tiers.capacity(bad)
        with pytest.raises(InvalidArgumentError, match="tier must be one of"):
            tiers.evict(1, bad)
    assert not tiers.holds("host", 0) and not tiers.holds("host", True)
    tiers.insert([1] * 16)
    assert tiers.holds("device", 0)
    with pytest.raises(InvalidArgumentError, match="no disk tier"):
        tiers.holds("disk", 0)
