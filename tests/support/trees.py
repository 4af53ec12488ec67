"""Helpers shared by the tree tests: canonical views of a dump and small token makers."""

from __future__ import annotations

from typing import Any

#: A cached block seen from outside: (namespace, path of block token tuples).
BlockKey = tuple[str | None, tuple[tuple[int, ...], ...]]
#: What the spec says a cached block carries: (block id, pins, stamp).
BlockInfo = tuple[int, int, int]


def flatten(dump: dict[str, Any]) -> dict[BlockKey, BlockInfo]:
    """The block-level view of a canonical dump: every cached block by its full path."""
    size = dump["block_size"]
    flat: dict[BlockKey, BlockInfo] = {}

    def visit(
        namespace: str | None, prefix: tuple[tuple[int, ...], ...], edge: dict[str, Any]
    ) -> None:
        path = prefix
        for index, block_id in enumerate(edge["blocks"]):
            chunk = tuple(edge["tokens"][index * size : (index + 1) * size])
            path = (*path, chunk)
            flat[(namespace, path)] = (block_id, edge["pins"][index], edge["stamps"][index])
        for child in edge["children"]:
            visit(namespace, path, child)

    for space in dump["namespaces"]:
        for edge in space["children"]:
            visit(space["namespace"], (), edge)
    return flat


def blocks(*values: int, size: int = 4) -> list[int]:
    """Tokens made of whole blocks, each block filled with one value: ``blocks(1, 2)``."""
    return [value for value in values for _ in range(size)]
