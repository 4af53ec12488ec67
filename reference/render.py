"""Draw a tree as text, from its canonical dump (so every implementation draws alike).

Each edge is one line: its block count, its first tokens, its block ids, its pins
and its recency (stamps), e.g.::

    RadixTree  B=4  blocks: 6 cached (2 pinned, 4 evictable), 2 free of 8  clock=5
    namespace (default)
    └── 2 blocks [1 2 3 4 …]  #0-1  pin 1  t=5
        ├── 1 block [9 9 9 9]  #2  t=3
        └── 1 block [7 7 7 7]  #3  pin 1  t=5

Pins and stamps are per block: a uniform run prints once (``pin 1``), a varying one
prints first..last (``pins 2..1``, ``t=5..3``), as both only decrease going deeper.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_SHOWN_TOKENS = 4


def render_dump(dump: dict[str, Any]) -> str:
    """Render a dump (see :mod:`kachedb_radix.reference.dump`) as lines of text. O(size of the
    dump)."""
    cached = 0
    pinned = 0
    for space in dump["namespaces"]:
        for edge in _edges(space["children"]):
            cached += len(edge["blocks"])
            pinned += sum(1 for pin in edge["pins"] if pin > 0)
    lines = [
        f"RadixTree  B={dump['block_size']}  blocks: {cached} cached ({pinned} pinned, "
        f"{cached - pinned} evictable), {len(dump['free'])} free of {dump['num_blocks']}  "
        f"clock={dump['clock']}"
    ]
    if not dump["namespaces"]:
        lines.append("(empty)")
    for space in dump["namespaces"]:
        name = space["namespace"]
        lines.append("namespace (default)" if name is None else f"namespace {name!r}")
        _render_children(space["children"], "", dump["block_size"], lines)
    return "\n".join(lines)


def _edges(children: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    stack = list(children)
    while stack:
        edge = stack.pop()
        found.append(edge)
        stack.extend(edge["children"])
    return found


def _render_children(
    children: list[dict[str, Any]], indent: str, block_size: int, lines: list[str]
) -> None:
    # An explicit stack, not recursion: a tree may be thousands of nodes deep.
    pending = [(edge, indent, index == len(children) - 1) for index, edge in enumerate(children)]
    pending.reverse()
    while pending:
        edge, prefix, last = pending.pop()
        lines.append(f"{prefix}{'└── ' if last else '├── '}{describe_edge(edge, block_size)}")
        below = prefix + ("    " if last else "│   ")
        kids = edge["children"]
        pending.extend(
            (kid, below, index == len(kids) - 1) for index, kid in reversed(list(enumerate(kids)))
        )


def describe_edge(edge: dict[str, Any], block_size: int) -> str:
    """One edge as ``2 blocks [1 2 3 4 …]  #0-1  pin 1  t=5``. O(edge length)."""
    blocks: list[int] = edge["blocks"]
    tokens: list[int] = edge["tokens"]
    shown = " ".join(str(token) for token in tokens[:_SHOWN_TOKENS])
    more = " …" if len(tokens) > _SHOWN_TOKENS else ""
    noun = "block" if len(blocks) == 1 else "blocks"
    parts = [f"{len(blocks)} {noun} [{shown}{more}]", f"#{id_ranges(blocks)}"]
    pins: list[int] = edge["pins"]
    if pins[0] > 0:
        parts.append(f"pin {pins[0]}" if pins[0] == pins[-1] else f"pins {pins[0]}..{pins[-1]}")
    stamps: list[int] = edge["stamps"]
    parts.append(f"t={stamps[0]}" if stamps[0] == stamps[-1] else f"t={stamps[0]}..{stamps[-1]}")
    return "  ".join(parts)


def id_ranges(ids: Sequence[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``0-2,5,7-8``: block ids are mostly consecutive runs.

    ``""`` for no ids. O(len(ids)).
    """
    if not ids:
        return ""
    runs: list[str] = []
    start = previous = ids[0]
    for block_id in [*ids[1:], None]:
        if block_id is not None and block_id == previous + 1:
            previous = block_id
            continue
        runs.append(str(start) if start == previous else f"{start}-{previous}")
        if block_id is not None:
            start = previous = block_id
    return ",".join(runs)
