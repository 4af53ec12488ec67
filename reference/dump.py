"""The canonical dump: the whole observable state as plain JSON data (R-DUMP-*).

Two implementations in the same state must produce *equal* dumps, so the dump
describes what is observable, not how it is stored:

* the **block trie**: which whole-block token paths are cached in which namespace,
  with each block's id, pin count and stamp;
* the logical clock, the block size, the pool size, the sorted free ids and the
  quarantined ids in the order they were freed (R-EPOCH-2).

The trie is written path-compressed in one canonical way (R-DUMP-2): a node's edge
runs on while a block has exactly one cached child, so a chain of blocks is one
edge however the implementation happens to store it (an implementation that leaves
a one-child node behind after an eviction dumps the same as one that merges it).
Children are sorted by their first block's tokens, namespaces with None first and
then by name. Shape::

    {"format": 2, "block_size": 2, "num_blocks": 8, "clock": 3,
     "free": [5, 6, 7], "quarantine": [],
     "namespaces": [{"namespace": null, "children": [
        {"tokens": [1, 2, 3, 4], "blocks": [0, 1], "pins": [1, 0],
         "stamps": [3, 2], "children": []}]}]}

A snapshot's dump (:func:`dump_shape`) has the same trie without pins and stamps,
and the version number instead of the allocator's state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .node import Node

#: Version of the dump format; bumped on any incompatible change.
DUMP_FORMAT = 2

#: Extra per-block fields of an edge, given its block ids (pins, stamps and the
#: policy's own, R-POL-1).
BlockFields = Callable[[list[int]], dict[str, list[int]]]


def dump_state(
    *,
    block_size: int,
    num_blocks: int,
    clock: int,
    free_blocks: Sequence[int],
    quarantine: Sequence[int],
    roots: Sequence[tuple[str | None, Node]],
    block_fields: BlockFields,
    policy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The tree's canonical dump. O(cached tokens + num_blocks).

    ``policy`` (``{"name", "options"}``) is written only for a policy other than
    ``lru`` (R-POL-1), whose per-block fields ``block_fields`` adds beside the pins
    and stamps: an ``lru`` tree's dump is what it was before policies.
    """
    dump: dict[str, Any] = {
        "format": DUMP_FORMAT,
        "block_size": block_size,
        "num_blocks": num_blocks,
        "clock": clock,
        "free": sorted(free_blocks),
        "quarantine": list(quarantine),
    }
    if policy is not None:
        dump["policy"] = policy
    dump["namespaces"] = _dump_namespaces(roots, block_size, block_fields)
    return dump


def dump_shape(
    *, block_size: int, version: int, clock: int, roots: Sequence[tuple[str | None, Node]]
) -> dict[str, Any]:
    """A snapshot's canonical dump: the trie of one version, shape only. O(cached tokens)."""
    return {
        "format": DUMP_FORMAT,
        "block_size": block_size,
        "version": version,
        "clock": clock,
        "namespaces": _dump_namespaces(roots, block_size, None),
    }


def _dump_namespaces(
    roots: Sequence[tuple[str | None, Node]], size: int, block_fields: BlockFields | None
) -> list[dict[str, Any]]:
    spaces: list[dict[str, Any]] = []
    for name, root in roots:
        children: list[dict[str, Any]] = []
        spaces.append({"namespace": name, "children": children})
        # An explicit stack, not recursion: a tree may be thousands of nodes deep.
        pending: list[tuple[Node, list[dict[str, Any]]]] = [(root, children)]
        while pending:
            node, into = pending.pop()
            # Children are filed under their first block's tokens: sort by that key.
            for key in sorted(node.children):
                edge, last = _dump_edge(node.children[key], size, block_fields)
                into.append(edge)
                pending.append((last, edge["children"]))
    return spaces


def _dump_edge(
    node: Node, size: int, block_fields: BlockFields | None
) -> tuple[dict[str, Any], Node]:
    """One maximal edge starting at ``node``, and the node where it ends."""
    tokens: list[int] = []
    blocks: list[int] = []
    # Follow one-child chains so the edge is maximal (R-DUMP-2).
    while True:
        tokens.extend(node.tokens[: node.count * size])
        blocks.extend(node.edge_blocks())
        if len(node.children) != 1:
            break
        (node,) = node.children.values()
    edge: dict[str, Any] = {"tokens": tokens, "blocks": blocks}
    if block_fields is not None:
        edge.update(block_fields(blocks))
    edge["children"] = []
    return edge, node


def dump_blocks(dump: dict[str, Any]) -> set[int]:
    """The ids of every block a dump's trie caches, in any namespace (a tree's dump or a
    snapshot's: only the trie is read). O(cached blocks)."""
    found: set[int] = set()
    for space in dump["namespaces"]:
        pending = list(space["children"])
        while pending:
            edge = pending.pop()
            found.update(edge["blocks"])
            pending.extend(edge["children"])
    return found
