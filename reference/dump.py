"""The canonical dump: the whole observable state as plain JSON data (R-DUMP-*).

Two implementations in the same state must produce *equal* dumps, so the dump
describes what is observable, not how it is stored:

* the **block trie**: which whole-block token paths are cached in which namespace,
  with each block's id, pin count and stamp;
* the logical clock, the block size, the pool size and the sorted free ids.

The trie is written path-compressed in one canonical way (R-DUMP-2): a node's edge
runs on while a block has exactly one cached child, so a chain of blocks is one
edge however the implementation happens to store it (an implementation that leaves
a one-child node behind after an eviction dumps the same as one that merges it).
Children are sorted by their first block's tokens, namespaces with None first and
then by name. Shape::

    {"format": 1, "block_size": 2, "num_blocks": 8, "clock": 3,
     "free": [5, 6, 7],
     "namespaces": [{"namespace": null, "children": [
        {"tokens": [1, 2, 3, 4], "blocks": [0, 1], "pins": [1, 0],
         "stamps": [3, 2], "children": []}]}]}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .node import Node

#: Version of the dump format; bumped on any incompatible change.
DUMP_FORMAT = 1


def dump_state(
    *,
    block_size: int,
    num_blocks: int,
    clock: int,
    free_blocks: Sequence[int],
    roots: Sequence[Node],
) -> dict[str, Any]:
    """Build the canonical dump from a tree's parts. O(cached tokens + num_blocks)."""
    return {
        "format": DUMP_FORMAT,
        "block_size": block_size,
        "num_blocks": num_blocks,
        "clock": clock,
        "free": sorted(free_blocks),
        "namespaces": [
            {"namespace": root.namespace, "children": _dump_children(root)} for root in roots
        ],
    }


def _dump_children(node: Node) -> list[dict[str, Any]]:
    # Children are filed under their first block's tokens: sort by that key.
    return [_dump_edge(node.children[key]) for key in sorted(node.children)]


def _dump_edge(node: Node) -> dict[str, Any]:
    tokens: list[int] = []
    blocks: list[int] = []
    pins: list[int] = []
    stamps: list[int] = []
    # Follow one-child chains so the edge is maximal (R-DUMP-2).
    while True:
        tokens.extend(node.tokens)
        blocks.extend(node.blocks)
        pins.extend(node.pins)
        stamps.extend(node.stamps)
        if len(node.children) != 1:
            break
        (node,) = node.children.values()
    return {
        "tokens": tokens,
        "blocks": blocks,
        "pins": pins,
        "stamps": stamps,
        "children": _dump_children(node),
    }
