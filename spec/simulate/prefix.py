"""Prefix ids: every distinct (namespace, block prefix) of a trace numbered once.

The bounds (:mod:`kachedb_radix.spec.simulate.bounds`) and the sweep's working-set size need to
know when two requests share a block. In the tree, block ``i`` of a request is
identified by the whole prefix up to and including it, within its namespace
(R-NS-1). This module numbers those prefixes: node ``j`` of a request's path has
an id equal to another request's node id exactly when they have the same
namespace and the same first ``j + 1`` blocks. The ids form a forest: each id's
parent is the id of the prefix one block shorter (-1 at a namespace's root).

Cost: O(total tokens inserted) time, one dict entry per distinct prefix.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from .trace import Trace


@dataclass(frozen=True)
class PrefixPaths:
    """Each request's inserted blocks as prefix ids.

    Attributes:
        nodes: the prefix ids of every request's inserted sequence, concatenated in
            trace order.
        starts: request ``i``'s ids are ``nodes[starts[i]:starts[i + 1]]``.
        prompt_blocks: how many of request ``i``'s ids belong to its prompt (only
            those can hit; the rest are its output).
        parents: the parent id of each id, -1 for a first block.
    """

    nodes: array[int]
    starts: array[int]
    prompt_blocks: array[int]
    parents: array[int]

    @property
    def count(self) -> int:
        """Distinct prefixes: the blocks an infinite cache ends up holding. O(1)."""
        return len(self.parents)

    def path(self, request: int) -> array[int]:
        """Request ``request``'s prefix ids, root first. O(path length)."""
        return self.nodes[self.starts[request] : self.starts[request + 1]]


def prefix_paths(trace: Trace) -> PrefixPaths:
    """Number the prefixes of ``trace`` (see the module docstring). O(total tokens)."""
    ids: dict[tuple[int, object], int] = {}
    parents = array("q")
    roots: dict[str | None, int] = {}
    nodes = array("q")
    starts = array("q", [0])
    prompt_blocks = array("q")
    size = trace.block_size
    for request in trace.requests:
        # A namespace's root gets a negative id, so first blocks of different
        # namespaces never share a key.
        parent = roots.setdefault(request.namespace, -1 - len(roots))
        sequence = request.sequence
        keys: list[object]
        if size == 1:
            keys = list(sequence)
        else:
            raw = sequence.tobytes()
            step = 4 * size
            keys = [raw[at : at + step] for at in range(0, len(sequence) // size * step, step)]
        for key in keys:
            node = ids.get((parent, key))
            if node is None:
                node = ids[(parent, key)] = len(parents)
                parents.append(max(parent, -1))
            nodes.append(node)
            parent = node
        starts.append(len(nodes))
        prompt_blocks.append(len(request.tokens) // size)
    return PrefixPaths(nodes, starts, prompt_blocks, parents)
