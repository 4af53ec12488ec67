"""Every structural invariant of the tree, checked in one place (R-INV-*).

``RadixTree.check_invariants()`` calls :func:`check_tree`; tests call it after every
mutation. Each check raises :class:`InvariantViolation` naming what broke:

1. Edges (R-EDGE-1): a non-root node has k >= 1 blocks, ``k * B`` tokens and k pins
   and stamps; a root has none of them, at least one child, and is filed under its
   own namespace (R-NS-3).
2. Children (R-EDGE-2): each child is filed under its first block's tokens and
   points back to its parent.
3. Blocks (R-INV-1): every cached block id is allocated, none appears twice, and
   ``free + cached == num_blocks``; the cached and pinned counters match a recount.
4. Monotone paths (R-PIN-3, R-LRU-2): pins and stamps never increase going deeper;
   pins are >= 0; stamps are <= the clock.
5. Pins are exact (R-PIN-2): each block's pin count equals the number of live
   leases whose path covers it.
6. Eviction queue (R-EVICT-2): every evictable leaf has a valid queue entry.
7. Recency is total (R-LRU-4): no two leaf tails share a stamp.
8. The node counter matches a recount.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from .allocator import BlockAllocator
from .errors import InvariantViolation
from .eviction import EvictionQueue
from .lease import Lease
from .node import Node

Walk = Callable[[str | None, list[int], int], tuple[list[tuple[Node, int]], int]]


def check_tree(
    *,
    block_size: int,
    allocator: BlockAllocator,
    roots: Mapping[str | None, Node],
    queue: EvictionQueue,
    clock: int,
    cached: int,
    pinned: int,
    node_count: int,
    leases: Sequence[Lease],
    walk: Walk,
) -> None:
    """Check the invariants listed in the module docstring. O(N + h + leases * length)."""
    allocator.check_invariants()
    seen_blocks: set[int] = set()
    pinned_recount = 0
    nodes = 0
    leaf_stamps: list[int] = []
    evictable_leaves: list[Node] = []

    for namespace, root in roots.items():
        _require(root.is_root and root.namespace == namespace, f"root of {namespace!r} misfiled")
        _require(not (root.tokens or root.blocks or root.pins or root.stamps), "root has an edge")
        _require(bool(root.children), f"namespace {namespace!r} has an empty root")
        stack: list[tuple[Node, int, int]] = [(root, 2**62, clock)]
        while stack:
            node, pin_above, stamp_above = stack.pop()
            for key, child in node.children.items():
                nodes += 1
                k = len(child.blocks)
                _require(k >= 1, "a non-root node has no blocks")
                _require(
                    len(child.tokens) == k * block_size
                    and len(child.pins) == k
                    and len(child.stamps) == k,
                    f"edge arrays disagree: {len(child.tokens)} tokens, {k} blocks, "
                    f"{len(child.pins)} pins, {len(child.stamps)} stamps",
                )
                _require(key == child.first_block(block_size), "child filed under a wrong key")
                _require(child.parent is node, "child does not point back to its parent")
                last_pin, last_stamp = pin_above, stamp_above
                for block_id, pin, stamp in zip(
                    child.blocks, child.pins, child.stamps, strict=True
                ):
                    _require(block_id not in seen_blocks, f"block {block_id} cached twice")
                    seen_blocks.add(block_id)
                    _require(allocator.is_allocated(block_id), f"cached block {block_id} is free")
                    _require(0 <= pin <= last_pin, f"pins increase or go negative at {block_id}")
                    _require(stamp <= last_stamp, f"stamps increase at block {block_id}")
                    pinned_recount += pin > 0
                    last_pin, last_stamp = pin, stamp
                if not child.children:
                    leaf_stamps.append(child.stamps[-1])
                if child.is_evictable_leaf():
                    evictable_leaves.append(child)
                stack.append((child, last_pin, last_stamp))

    _require(len(seen_blocks) == cached, f"cached counter {cached} != {len(seen_blocks)} blocks")
    _require(
        allocator.allocated_count == cached,
        f"{allocator.allocated_count} blocks allocated but {cached} cached",
    )
    _require(pinned_recount == pinned, f"pinned counter {pinned} != recount {pinned_recount}")
    _require(nodes == node_count, f"node counter {node_count} != recount {nodes}")
    _require(len(set(leaf_stamps)) == len(leaf_stamps), "two leaf tails share a stamp")

    covered = queue.covered()
    for leaf in evictable_leaves:
        _require(
            id(leaf) in covered, f"evictable leaf ending in block {leaf.blocks[-1]} not queued"
        )

    _check_lease_pins(roots, leases, walk, block_size)


def _check_lease_pins(
    roots: Mapping[str | None, Node], leases: Sequence[Lease], walk: Walk, block_size: int
) -> None:
    expected: Counter[int] = Counter()
    for lease in leases:
        _require(not lease.released, f"released lease {lease.id} still registered")
        path, matched = walk(lease.namespace, list(lease.tokens), len(lease.blocks))
        _require(matched == len(lease.blocks), f"lease {lease.id}'s path is no longer cached")
        blocks = [block for node, used in path for block in node.blocks[:used]]
        _require(tuple(blocks) == lease.blocks, f"lease {lease.id}'s blocks changed")
        expected.update(blocks)
    for root in roots.values():
        stack = list(root.children.values())
        while stack:
            node = stack.pop()
            for block_id, pin in zip(node.blocks, node.pins, strict=True):
                _require(
                    pin == expected[block_id],
                    f"block {block_id} has {pin} pins but {expected[block_id]} live leases",
                )
            stack.extend(node.children.values())


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvariantViolation(message)
