"""Every structural invariant of the tree, checked in one place (R-INV-*).

``RadixTree.check_invariants()`` calls :func:`check_tree`; tests call it after every
mutation. Each check raises :class:`InvariantViolation` naming what broke:

1. Edges (R-EDGE-1): a non-root node's version has ``count >= 1`` blocks, its lists
   hold at least ``count`` blocks and ``count * B`` tokens; a root has no edge, at
   least one child, and is filed under its own namespace (R-NS-3).
2. Children (R-EDGE-2): each child is filed under its first block's tokens, is the
   current version of its node, and the parent table points back to its parent.
3. Blocks (R-INV-1, R-EPOCH-3): every cached block id is allocated and appears
   once; quarantined ids are allocated, not cached, and appear once;
   ``free + cached + quarantined == num_blocks``; the counters match a recount;
   blocks that are not cached have no pins.
4. Monotone paths (R-PIN-3, R-LRU-2): pins and stamps never increase going deeper;
   stamps are <= the clock.
5. Pins are exact (R-PIN-2): each block's pin count equals the number of live
   leases whose path covers it.
6. Eviction queue (R-EVICT-2, R-POL-1): the queue holds exactly the evictable
   leaves, each under its tail's current eviction key, in heap order; the policy's
   own state is consistent (its ``check``).
7. Recency is total (R-LRU-4): no two leaf tails share a stamp.
8. Side tables hold exactly the reachable nodes; the published version is the
   current shape (R-SNAP-1); quarantine batches are in epoch order (R-EPOCH-2).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from .errors import InvariantViolation
from .node import Node

if TYPE_CHECKING:
    from .tree import RadixTree


def check_tree(tree: RadixTree) -> None:
    """Check the invariants listed in the module docstring. O(N + h + leases * length)."""
    size = tree._block_size
    allocator = tree._allocator
    pins, stamps = tree._pins, tree._stamps
    allocator.check_invariants()
    _require(tree._published.roots is tree._roots, "the current shape is not published")
    _require(tree._published.clock == tree._clock, "the published clock is stale")

    seen_blocks: set[int] = set()
    reached: set[int] = set()
    pinned_recount = 0
    leaf_stamps: list[int] = []
    evictable_leaves: dict[int, tuple[int, ...]] = {}  # nid -> its tail's key

    for namespace, root in tree._roots.items():
        _require(
            tree._root_names.get(root.nid, "?") == namespace, f"root of {namespace!r} misfiled"
        )
        _require(tree._parents.get(root.nid, 0) is None, "a root has a parent")
        _require(tree._nodes.get(root.nid) is root, "a root is not its current version")
        _require(root.count == 0, "a root has an edge")
        _require(bool(root.children), f"namespace {namespace!r} has an empty root")
        reached.add(root.nid)
        stack: list[tuple[Node, int, int]] = [(root, 2**62, tree._clock)]
        while stack:
            node, pin_above, stamp_above = stack.pop()
            for key, child in node.children.items():
                reached.add(child.nid)
                k = child.count
                _require(k >= 1, "a non-root node has no blocks")
                _require(
                    len(child.blocks) >= k and len(child.tokens) >= k * size,
                    f"node {child.nid}: {k} blocks but lists of {len(child.blocks)} blocks "
                    f"and {len(child.tokens)} tokens",
                )
                _require(key == child.first_block(size), "child filed under a wrong key")
                _require(tree._nodes.get(child.nid) is child, "a child is not its current version")
                _require(tree._parents.get(child.nid) == node.nid, "parent table is wrong")
                last_pin, last_stamp = pin_above, stamp_above
                for block_id in child.edge_blocks():
                    _require(block_id not in seen_blocks, f"block {block_id} cached twice")
                    seen_blocks.add(block_id)
                    _require(allocator.is_allocated(block_id), f"cached block {block_id} is free")
                    pin, stamp = pins[block_id], stamps[block_id]
                    _require(0 <= pin <= last_pin, f"pins increase or go negative at {block_id}")
                    _require(stamp <= last_stamp, f"stamps increase at block {block_id}")
                    pinned_recount += pin > 0
                    last_pin, last_stamp = pin, stamp
                if not child.children:
                    leaf_stamps.append(stamps[child.tail()])
                    if pins[child.tail()] == 0:
                        evictable_leaves[child.nid] = tree._policy.key(child.tail())
                stack.append((child, last_pin, last_stamp))

    _require(reached == set(tree._nodes), "the node table holds unreachable nodes")
    _require(set(tree._parents) == reached, "the parent table holds unreachable nodes")
    _require(len(seen_blocks) == tree._cached, f"cached counter {tree._cached} is wrong")
    quarantined = [block for _, batch in tree._quarantine for block in batch]
    epochs = [epoch for epoch, _ in tree._quarantine]
    _require(epochs == sorted(epochs), "quarantine batches out of epoch order")
    _require(len(quarantined) == tree._quarantined, "quarantined counter is wrong")
    _require(len(set(quarantined)) == len(quarantined), "a block quarantined twice")
    _require(not seen_blocks & set(quarantined), "a quarantined block is cached")
    _require(all(allocator.is_allocated(b) for b in quarantined), "a quarantined block is free")
    _require(
        allocator.allocated_count == tree._cached + tree._quarantined,
        f"{allocator.allocated_count} blocks allocated but {tree._cached} cached and "
        f"{tree._quarantined} quarantined",
    )
    _require(pinned_recount == tree._pinned, f"pinned counter {tree._pinned} is wrong")
    _require(
        all(pin == 0 for block, pin in enumerate(pins) if block not in seen_blocks),
        "a block that is not cached has pins",
    )
    _require(len(set(leaf_stamps)) == len(leaf_stamps), "two leaf tails share a stamp")

    broken = tree._queue.check()
    _require(broken is None, f"eviction queue: {broken}")
    queued = {entry[-1]: entry[:-1] for entry in tree._queue.entries()}
    for nid, key in evictable_leaves.items():
        _require(queued.get(nid) == key, f"evictable leaf {nid} is not queued under {key}")
    extra = sorted(queued.keys() - evictable_leaves.keys())
    _require(not extra, f"nodes {extra} are queued but are not evictable leaves")

    broken = tree._policy.check(seen_blocks, tree._clock) or tree._policy.check_keys(seen_blocks)
    _require(broken is None, f"policy {tree._policy.name}: {broken}")

    _check_lease_pins(tree, seen_blocks)


def _check_lease_pins(tree: RadixTree, cached: set[int]) -> None:
    expected: Counter[int] = Counter()
    for lease in tree._leases.values():
        _require(not lease.released, f"released lease {lease.id} still registered")
        path, matched = tree._walk(lease.namespace, list(lease.tokens), len(lease.blocks))
        _require(matched == len(lease.blocks), f"lease {lease.id}'s path is no longer cached")
        blocks = [block for node, used in path for block in node.blocks[:used]]
        _require(tuple(blocks) == lease.blocks, f"lease {lease.id}'s blocks changed")
        expected.update(blocks)
    for block_id in cached:
        pin = tree._pins[block_id]
        _require(
            pin == expected[block_id],
            f"block {block_id} has {pin} pins but {expected[block_id]} live leases",
        )


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvariantViolation(message)
