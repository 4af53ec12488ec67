"""The walk: following a token sequence down one version of the tree (R-MATCH-1).

Both the live tree and its snapshots match by this one function, so a snapshot
answers exactly as the tree did at its version.

Cost: O(n) for the first n tokens examined. The sequence is indexed by position --
never re-sliced from the current hop to its end, which is what makes SGLang's pure
Python tree quadratic over deep paths -- with one map probe per node and one slice
comparison per edge.
"""

from __future__ import annotations

from collections.abc import Mapping

from .node import Node

#: A walked path: each node on it with how many of its leading blocks the path uses.
Path = list[tuple[Node, int]]


def walk(
    roots: Mapping[str | None, Node],
    namespace: str | None,
    tokens: list[int],
    limit: int,
    block_size: int,
) -> tuple[Path, int]:
    """Follow ``tokens``' first ``limit`` whole blocks from ``namespace``'s root.

    Returns the nodes visited, each with how many of its blocks matched, and the
    total number of blocks matched. Reads only; safe on any published version.
    """
    path: Path = []
    node = roots.get(namespace)
    size = block_size
    matched = 0
    while node is not None and matched < limit:
        start = matched * size
        child = node.children.get(tuple(tokens[start : start + size]))
        if child is None:
            break
        # The first block matched through the map key. Compare the rest of the
        # usable edge in one slice comparison; only on a mismatch look for the
        # first differing block.
        edge = child.tokens
        usable = min(child.count, limit - matched)
        span = usable * size
        if tokens[start : start + span] == edge[:span]:
            taken = usable
        else:
            taken = 1
            while (
                tokens[start + taken * size : start + (taken + 1) * size]
                == edge[taken * size : (taken + 1) * size]
            ):
                taken += 1
        path.append((child, taken))
        matched += taken
        node = child if taken == child.count else None
    return path, matched


def path_blocks(path: Path) -> tuple[int, ...]:
    """The block ids along a walked path, root first. O(blocks)."""
    blocks: list[int] = []
    for node, used in path:
        blocks.extend(node.blocks[:used])
    return tuple(blocks)
