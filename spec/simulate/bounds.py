"""The bounds beside LRU: infinite capacity and an offline farthest-next-use policy.

Both replay the trace in the order the mode serves it, with the sequential model's
rules -- each request matches its prompt, then inserts its sequence -- over the
prefix ids of :mod:`kachedb_radix.spec.simulate.prefix`, so a block is a prefix and the cache is
always a set of whole root paths (a block is cached only with its parent).

**Infinite capacity** (the ceiling): nothing is ever evicted; a request hits every
block some earlier request inserted. No policy at any capacity does better.

**Belady** (the offline bound): the policy that knows the future. When the pool is
full and a request needs a block, it evicts, among evictable blocks -- cached leaf
blocks (no cached child, so the cache stays a set of root paths) not on the
request's own path -- the one whose next use is farthest in the future; and it
declines to cache the new block (and so the rest of the path) when that block's
next use is no sooner than the victim's ("with bypass": caching it would only
evict something needed sooner). A block's next use is the next request whose
*prompt* contains it (only prompts can hit). A parent is used whenever its child is,
so leaves carry the farthest next uses and restricting eviction to leaves costs
nothing. Ties go to the larger prefix id (the more recently created prefix).

Farthest-next-use with bypass is Belady's MIN, optimal for a cache of independent
blocks; with the prefix constraint it is the natural offline reference, not a proof
of optimality -- the tests check it against an exhaustive search on small traces.
Requests longer than the pool cache their first ``capacity`` blocks, as in LRU.

Cost: infinite O(total blocks); Belady O(total blocks * log capacity).
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Sequence

import numpy as np

from .prefix import PrefixPaths

#: The next use of a block that is never used again.
NEVER = 1 << 62


def _positions(paths: PrefixPaths, order: Sequence[int]) -> tuple[np.ndarray, ...]:
    """Per position of ``paths.nodes``: its prefix id, its request, the step that
    request is served at, and whether the position is in the prompt. O(blocks)."""
    count = len(paths.starts) - 1
    starts = np.frombuffer(paths.starts, dtype=np.int64)
    lengths = np.diff(starts)
    requests = np.repeat(np.arange(count, dtype=np.int64), lengths)
    step_of = np.empty(count, dtype=np.int64)
    step_of[np.asarray(order, dtype=np.int64)] = np.arange(count, dtype=np.int64)
    offsets = np.arange(len(paths.nodes), dtype=np.int64) - starts[:-1][requests]
    prompt = offsets < np.frombuffer(paths.prompt_blocks, dtype=np.int64)[requests]
    nodes = np.frombuffer(paths.nodes, dtype=np.int64)
    return nodes, requests, step_of[requests], prompt


def infinite_lengths(paths: PrefixPaths, order: Sequence[int], block_size: int) -> list[int]:
    """Matched tree length of each request (by trace index) with an unbounded pool.

    A prompt block hits when its prefix was inserted by an earlier request; those
    are always a leading run of the prompt (a prefix is inserted with its parent).
    O(blocks), vectorised.
    """
    nodes, requests, steps, prompt = _positions(paths, order)
    first = np.full(paths.count, NEVER, dtype=np.int64)
    np.minimum.at(first, nodes, steps)
    hits = prompt & (first[nodes] < steps)
    counts = np.bincount(requests[hits], minlength=len(paths.starts) - 1)
    return (counts * block_size).tolist()  # type: ignore[no-any-return]


def next_uses(paths: PrefixPaths, order: Sequence[int]) -> array[int]:
    """For each position of ``paths.nodes``: the step (index into ``order``) of the
    next request after this one whose prompt holds the same prefix, or :data:`NEVER`.

    A prefix occurs at most once per request, so sorting positions by (prefix,
    step) puts each prefix's uses in serving order; the next use of a position is
    the next prompt position of the same prefix in that order. O(blocks log blocks),
    vectorised.
    """
    nodes, _, steps, prompt = _positions(paths, order)
    ranked = np.lexsort((steps, nodes))
    ranked_nodes, ranked_steps = nodes[ranked], steps[ranked]
    prompt_ranks = np.flatnonzero(prompt[ranked])
    upcoming = np.full(len(nodes), NEVER, dtype=np.int64)
    if len(prompt_ranks):  # else nothing is ever used again
        candidate = np.searchsorted(prompt_ranks, np.arange(1, len(ranked) + 1))
        found = candidate < len(prompt_ranks)
        target = prompt_ranks[np.minimum(candidate, len(prompt_ranks) - 1)]
        found &= ranked_nodes[target] == ranked_nodes
        upcoming[ranked[found]] = ranked_steps[target[found]]
    result = array("q")
    result.frombytes(upcoming.tobytes())
    return result


def belady_lengths(
    paths: PrefixPaths,
    order: Sequence[int],
    capacity: int,
    block_size: int,
    upcoming: array[int] | None = None,
) -> list[int]:
    """Matched tree length of each request (by trace index) under Belady at ``capacity``.

    ``upcoming`` is :func:`next_uses` for this order (computed when not given; pass
    it to share it across capacities). Cost: O(total blocks * log capacity).

    Raises:
        ValueError: ``capacity`` < 1.
    """
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    if upcoming is None:
        upcoming = next_uses(paths, order)
    nodes, starts, prompts, parents = paths.nodes, paths.starts, paths.prompt_blocks, paths.parents
    count = paths.count
    cached = bytearray(count)
    children = array("q", [0]) * count  # cached children per prefix
    next_use = array("q", [NEVER]) * count
    touched = array("q", [-1]) * count  # the last step whose path held the prefix
    # Candidate victims: (-next use, -id, touched when pushed). An entry is current
    # while its prefix is cached, childless and untouched since; touching a prefix
    # (its request's path) retires its old entries, so the path is never a victim.
    leaves: list[tuple[int, int, int]] = []
    size = 0
    lengths = [0] * len(order)

    def victim() -> int:
        """Pop the current entry with the farthest next use.

        One always exists when called: the pool is full and the path (cut to the
        capacity) still needs a block, so some cached prefix is off the path, and
        the off-path prefixes, closed under descendants, include a leaf.
        """
        while True:
            _, negative, when = heapq.heappop(leaves)
            node = -negative
            if cached[node] and not children[node] and touched[node] == when:
                return node
            # else stale: evicted, extended, or touched since it was pushed

    for step, index in enumerate(order):
        start, end = starts[index], starts[index + 1]
        end = min(end, start + capacity)  # a request longer than the pool: its head only
        hit = 0
        while hit < prompts[index] and start + hit < end and cached[nodes[start + hit]]:
            hit += 1
        lengths[index] = hit * block_size
        position = start
        while position < end and cached[nodes[position]]:
            node = nodes[position]
            next_use[node] = upcoming[position]
            touched[node] = step
            position += 1
        deepest = nodes[position - 1] if position > start else -1
        while position < end:
            node = nodes[position]
            wanted = upcoming[position]
            if size >= capacity:
                out = victim()
                if next_use[out] <= wanted:
                    heapq.heappush(leaves, (-next_use[out], -out, touched[out]))  # stays
                    break  # bypass: the block is needed no sooner than the victim
                cached[out] = 0
                size -= 1
                parent = parents[out]
                if parent >= 0:
                    children[parent] -= 1
                    if not children[parent] and touched[parent] != step:
                        heapq.heappush(leaves, (-next_use[parent], -parent, touched[parent]))
            cached[node] = 1
            size += 1
            next_use[node] = wanted
            touched[node] = step
            parent = parents[node]
            if parent >= 0:
                children[parent] += 1
            deepest = node
            position += 1
        if deepest >= 0 and not children[deepest]:
            heapq.heappush(leaves, (-next_use[deepest], -deepest, step))
    return lengths
