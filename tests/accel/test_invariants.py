"""check_invariants() catches every broken invariant it checks, in the C twin.

No sequence of public calls breaks the tree, so each check of ``check_invariants()`` is
shown to fire through a test hook: ``RadixTree._corrupt_check(kind)`` (accel/corrupt.c, in
the test build only: tests/support/hooks.py) breaks one invariant in place, runs the
check, undoes the break and returns the check's message. For every kind the hook knows,
the message must be the one that names that break; afterwards the tree must check clean
and dump as before. The kinds run on two trees that between them have everything a break
needs: children in an array, in a hash trie and in a collision list, a split edge,
leases, free node records, a quarantine (readers gone, so the tree is its published
shape's only holder), and two readers inside.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from kachedb_radix import reference

if os.environ.get("KACHEDB_RADIX_PURE") == "1":
    pytest.skip("KACHEDB_RADIX_PURE=1: the C twin is not under test", allow_module_level=True)

import kachedb_radix.accel._radix as radix
from kachedb_radix import accel
from tests.support.hooks import corrupt_check, corrupt_kinds, require_hooks

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI,
#: whose C twin has no test hooks: there the hook's tests skip (tests/support/hooks.py).
pytestmark = pytest.mark.quick


@pytest.fixture(autouse=True)
def _test_build() -> None:
    require_hooks()


#: What check_invariants() must say for each kind of break.
MESSAGES = {
    "alloc_summary": "summary bitmap disagrees",
    "alloc_hint": "below the search hint",
    "alloc_pad": "outside the pool is free",
    "alloc_count": "free + allocated != num_blocks",
    "parent_foreign": "hangs off a free or foreign node",
    "parent_free": "hangs off a free or foreign node",
    "live_count": "node counter",
    "free_list_foreign": "free list is corrupt",
    "free_list_live": "free list is corrupt",
    "free_list_cycle": "free list is corrupt",
    "free_list_short": "free list misses",
    "dump_live_count": "node counter",
    "roots_count": "root records for",
    "registry": "namespace registry disagrees",
    "root_index": "misfiled",
    "root_parent": "misfiled",
    "root_slot": "misfiled",
    "root_edge": "root has an edge",
    "empty_default_root": "namespace None has an empty root",
    "empty_named_root": "has an empty root",
    "root_lookup": "root of None misfiled",
    "nchildren": "counts 1 children but has 0",
    "no_blocks": "has no blocks",
    "edge_past_used": "lies outside its chunk",
    "used_past_cap": "lies outside its chunk",
    "chunk_rc": "lies outside its chunk",
    "wrong_key": "wrong key",
    "foreign_id": "foreign block id",
    "cached_twice": "cached twice",
    "cached_free": "is free",
    "pins_increase": "pins increase",
    "stamps_increase": "stamps increase",
    "heap_pos_past": "not queued",
    "heap_other_node": "not queued",
    "heap_stamp": "not queued",
    "queued_inner": "is queued but is not an evictable leaf",
    "unreachable": "not reachable from a root",
    "leaf_count": "leaf counter",
    "heap_len_over": "eviction heap of",
    "heap_cap_under": "eviction heap of",
    "cached_count": "cached counter",
    "batches_order": "out of epoch order",
    "batch_future": "future epoch",
    "batch_size": "quarantined counter is wrong",
    "quarantined_count": "quarantined counter is wrong",
    "quarantine_foreign": "is foreign",
    "quarantine_cached": "a quarantined block is cached",
    "quarantine_twice": "quarantined twice",
    "quarantine_free": "a quarantined block is free",
    "readers_order": "reader registry out of order",
    "allocated_count": "blocks allocated but",
    "chunk_refs": "a chunk has",
    "pinned_count": "pinned counter",
    "tail_stamps": "share a stamp",
    "heap_node_foreign": "is stale",
    "heap_pos_stale": "is stale",
    "heap_order": "out of order",
    "policy_hits": "hits",
    "policy_born": "was born at",
    "policy_priority": "has priority",
    "policy_until": "which is past",
    "policy_protected_uncached": "protected but not cached",
    "policy_protected_count": "protected blocks, counted",
    "policy_heap_order": "heap is out of order",
    "policy_heap_block": "heap names block",
    "policy_heap_live": "live entries",
    "lease_released": "still registered",
    "lease_unlinked": "still registered",
    "lease_path": "no longer cached",
    "lease_blocks": "blocks changed",
    "lease_count": "lease counter",
    "pins_vs_leases": "live leases",
    "trie_rc_zero": "trie node shared",
    "trie_shared": "trie node shared",
    "trie_empty": "empty or overfull",
    "trie_overfull": "empty or overfull",
    "trie_total": "a trie node's count is",
    "trie_bitmap": "bitmaps disagree",
    "trie_lone": "lone child",
    "collision_bitmap": "bad collision node",
    "collision_small": "bad collision node",
    "trie_child_no_edge": "without an edge",
    "trie_child_no_chunk": "without an edge",
    "trie_wrong_hash": "wrong hash",
    "trie_not_current_nid": "not current",
    "trie_not_current_parent": "not current",
    "trie_not_current_pub": "not current",
    "roots_shared": "published roots shared",
    "published_roots_count": "namespaces, the tree",
    "roots_unsorted": "unsorted",
    "root_stale_ns": "is stale",
    "root_stale_node": "is stale",
    "root_has_count": "published root has an edge",
    "root_has_chunk": "published root has an edge",
    "pub_missing": "has no published version",
    "pub_rc_zero": "has no published version",
    "pub_shared": "is shared with no snapshot",
    "pub_count": "published edge of",
    "pub_nkids": "published children, writer",
    "pub_empty_kids": "an empty block of children",
    "pub_trie_count": "its trie holds",
    "array_child_no_edge": "bad child key",
    "array_child_no_chunk": "bad child key",
    "array_key": "bad child key",
    "array_unsorted": "published children unsorted",
    "pub_nid": "names node",
    "pub_chunk": "not in the writer's chunk",
    "pub_off": "not in the writer's chunk",
    "pub_parent_missing": "not found under its parent",
    "pub_not_found": "not found under its parent",
    "events_open": "R-EVENT-5: events logged outside an operation",
    "events_hash": "R-EVENT-2: block 1 has a hash its path does not give",
    "events_known": "R-EVENT-1: block 1 is cached without a hash",
}

#: The kinds shown only on a tree that emits KV events (R-EVENT-*).
EVENT_KINDS = ("events_open", "events_hash", "events_known")


def rich(with_readers: bool) -> tuple[Any, list[Any]]:
    """A tree with every structure a break needs (see the module docstring)."""
    tree = accel.RadixTree(600, 2, _hash_seed=0)
    zero = (-radix._hash_keys(0, 2)[0]) % 2**32
    for child in range(100, 140):  # the default namespace's one child holds a trie
        tree.insert([9, 9, child, 1, 3, 3])
    for i in range(4):  # siblings whose first blocks all hash alike: a collision list
        tree.insert([9, 9, zero, i, 4, 4])
    tree.insert([9, 9, 200, 1, 201, 1, 202, 1])
    tree.insert([9, 9, 200, 1, 201, 1, 203, 1])  # split: the upper half is the newer node
    tree.insert([1, 1, 5, 5], "a")
    tree.insert([2, 2, 6, 6], "a")  # "a": an array of two children
    tree.insert([3, 3], "b")  # "b": a root with one child
    lease = tree.match([9, 9, 100, 1, 3, 3], pin=True).lease  # a pinned leaf
    tree.evict(4)  # two whole leaves go: two free node records
    # A namespace made now reuses the freed records, the newest first: its root the
    # higher, its child the lower; a split of that child takes a fresh, higher record.
    # So the lower half precedes both its parent and its grandparent.
    tree.insert([8, 8, 7, 7], "c")
    tree.insert([8, 8, 6, 6], "c")
    readers = [tree.reader(), tree.reader()]
    tree.evict(3)
    tree.evict(2)  # two quarantine batches
    if not with_readers:
        for reader in readers:
            reader.leave()
        readers = []  # the tree is its published shape's only holder again
    return tree, [lease, *readers]


#: The policy each policy_* kind breaks, and what else it can be shown on (R-POL-1).
KIND_POLICIES: dict[str, tuple[str, ...]] = {
    "policy_hits": ("lfu",),
    "policy_born": ("fifo",),
    "policy_priority": ("priority",),
    "policy_until": ("priority",),
    "policy_protected_uncached": ("slru",),
    "policy_protected_count": ("slru",),
    "policy_heap_order": ("slru", "priority"),
    "policy_heap_block": ("slru", "priority"),
    "policy_heap_live": ("slru", "priority"),
}


def policy_tree(policy: str) -> Any:
    """A tree under ``policy`` with inner blocks, hits, protected blocks, pending expiries
    and free blocks: every policy_* break has something to break."""
    tree = accel.RadixTree(64, 2, policy=policy, policy_options=None)
    for tail in range(6):
        tree.insert([9, 9, 8, 8, tail, tail], priority=40 + tail, retain_for=50 + tail)
    for _ in range(3):
        tree.match([9, 9, 8, 8, 1, 1])
        tree.match([9, 9, 8, 8, 2, 2])
    return tree


def test_every_kind_is_listed_in_check_order() -> None:
    assert corrupt_kinds() == list(MESSAGES)


@pytest.mark.parametrize("kind", sorted(KIND_POLICIES))
def test_check_invariants_catches_a_broken_policy(kind: str) -> None:
    """R-POL-1: each policy's own state is checked: hit counts, birth times, priorities
    and expiries, the SLRU segment, the lazy heap of either."""
    for policy in KIND_POLICIES[kind]:
        tree = policy_tree(policy)
        before = tree.dump()
        message = corrupt_check(tree, kind)
        assert message is not None and MESSAGES[kind] in message, (kind, policy, message)
        assert f"policy {policy}" in message
        tree.check_invariants()  # the break was undone
        assert tree.dump() == before
    with pytest.raises(ValueError, match="this tree has no"):
        corrupt_check(policy_tree("lru"), kind)


@pytest.mark.parametrize("kind", EVENT_KINDS)
@pytest.mark.parametrize("scheme", ["sha256_cbor", "xxh3_64", "sglang_dynamo"])
def test_check_invariants_catches_broken_events(kind: str, scheme: str) -> None:
    """R-EVENT-5: records logged but not closed into a batch are a bug; R-EVENT-2: a
    cached block's hash is the one its path gives; R-EVENT-1: exactly the cached blocks
    have one."""
    tree = accel.RadixTree(8, 2, events=reference.events.BlockHasher(scheme))
    tree.insert([1, 2, 3, 4], "ns")
    before = tree.dump()
    message = corrupt_check(tree, kind)
    assert message is not None and MESSAGES[kind] in message
    tree.check_invariants()  # the break was undone
    assert tree.dump() == before and len(tree.take_events()) == 1
    with pytest.raises(ValueError, match="emits no events"):
        corrupt_check(accel.RadixTree(8, 2), kind)
    if kind != "events_open":
        with pytest.raises(ValueError, match="no cached block"):
            corrupt_check(accel.RadixTree(8, 2, events=True), kind)


@pytest.mark.parametrize(
    "kind", [kind for kind in MESSAGES if kind not in KIND_POLICIES and kind not in EVENT_KINDS]
)
def test_check_invariants_catches_the_break(kind: str) -> None:
    messages = []
    for with_readers in (False, True):
        tree, held = rich(with_readers)
        before = tree.dump()
        try:
            messages.append(corrupt_check(tree, kind))
        except ValueError as refusal:
            assert "this tree has no" in str(refusal) or "cannot show" in str(refusal)
            continue
        finally:
            tree.check_invariants()  # the break was undone
            assert tree.dump() == before
            assert held  # the lease (and readers) outlive the check
    assert messages, f"neither tree can show {kind}"
    for message in messages:
        assert message is not None and MESSAGES[kind] in message, (kind, message)


def test_hook_refusals() -> None:
    empty = accel.RadixTree(64, 2)
    with pytest.raises(ValueError, match="unknown kind"):
        corrupt_check(empty, "no_such_break")
    with pytest.raises(TypeError):
        corrupt_check(empty, 3)
    refused = 0
    for kind in MESSAGES:
        try:
            corrupt_check(empty, kind)
        except ValueError:
            refused += 1
    assert refused > 40  # an empty tree has nothing for most breaks
    empty._drop_published()
    with pytest.raises(ValueError, match="dropped"):
        corrupt_check(empty, "trie_rc_zero")
    empty.check_invariants()


def test_allocator_hook() -> None:
    pool = accel.BlockAllocator(100)
    pool.allocate(30)
    for kind in ("alloc_summary", "alloc_hint", "alloc_pad", "alloc_count"):
        message = corrupt_check(pool, kind)
        assert message is not None and MESSAGES[kind] in message
        pool.check_invariants()
    with pytest.raises(ValueError, match="unknown kind"):
        corrupt_check(pool, "registry")
    with pytest.raises(TypeError):
        corrupt_check(pool, None)
    full = accel.BlockAllocator(64)
    full.allocate(64)
    for kind in ("alloc_hint", "alloc_pad"):  # no free id; no id past the last word
        with pytest.raises(ValueError, match="cannot show"):
            corrupt_check(full, kind)
    assert reference.BlockAllocator(3).free_count == 3
