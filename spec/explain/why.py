"""The "why" panel: the evidence behind a step, read off the states around it.

Where a step made a choice, the panel shows what it chose from:

* **match walk** (match, insert): the edges the walk went through, how many
  blocks of each it used, and why it stopped (R-MATCH-1, R-SPLIT-1);
* **eviction candidates** (an evicting insert, evict): the unpinned leaf tails in
  the order of the tree's eviction policy, each with its key before the step (its
  stamp under LRU), the order actually taken, and why the first goes first
  (R-EVICT-1..3, R-POL-*, R-PIN-3);
* **free list** (allocation, frees): the allocator's ids before and what was
  taken or returned (R-ALLOC-2, R-INS-4);
* **pins** (pinning, release): which blocks a lease took or gave back (R-PIN-*);
* **readers and quarantine** (snapshots level): who is inside, what waits
  (R-EPOCH-*).

Each section is a title and lines of text; the page and the text mode print them.
"""

from __future__ import annotations

from typing import Any

from kachedb_radix.reference.policies import POLICIES
from kachedb_radix.reference.render import id_ranges

from .model import CachedBlock, Changes, DumpIndex, KeySpace, eviction_order, walk

#: Eviction candidates listed before "... and n more".
SHOWN_CANDIDATES = 8

Section = tuple[str, list[str]]


def explain_step(
    step: dict[str, Any],
    outcome: dict[str, Any],
    before: DumpIndex,
    after: DumpIndex,
    changes: Changes,
    keys: KeySpace,
    stats: dict[str, Any] | None,
) -> list[Section]:
    """The panel's sections for one step of one implementation. O(state)."""
    op = step["op"]
    answer = outcome.get("ok") if isinstance(outcome.get("ok"), dict) else {}
    sections: list[Section] = []
    if op in ("match", "insert") and "ok" in outcome:
        sections.append(("match walk", _walk_lines(step, before, keys)))
    evicted = (answer or {}).get("evicted") or (answer or {}).get("freed") or []
    if evicted:
        title = (
            "eviction candidates, LRU first"
            if before.policy == "lru"
            else f"eviction candidates, smallest {before.policy} key first"
        )
        sections.append((title, _candidates(before, evicted)))
    if changes.allocated or changes.freed:
        sections.append(("free list", _free_lines(before, changes)))
    if changes.pinned or changes.unpinned:
        sections.append(("pins", _pin_lines(before, after, changes)))
    if changes.quarantined or changes.reclaimed or (stats and stats.get("readers")):
        sections.append(("readers and quarantine", _reader_lines(after, changes, stats)))
    return sections


def _walk_lines(step: dict[str, Any], before: DumpIndex, keys: KeySpace) -> list[str]:
    tokens, namespace, size = step.get("tokens"), step.get("namespace"), before.block_size
    path = walk(before, keys, namespace, tokens)
    name = "(default)" if namespace is None else repr(namespace)
    lines = [f"root {name}"]
    edges: dict[int, list[int]] = {}
    for key in path:
        block = before.blocks[key]
        edges.setdefault(block.edge, []).append(block.block)
    for first, ids in edges.items():
        length = sum(1 for block in before.blocks.values() if block.edge == first)
        lines.append(f"→ #{id_ranges(ids)}: {len(ids)} of the {length} blocks of an edge")
    wanted = len(tokens) // size if isinstance(tokens, list) else 0
    if len(path) < wanted:
        assert isinstance(tokens, list)
        missing = tokens[len(path) * size : (len(path) + 1) * size]
        lines.append(f"stop: block {len(path) + 1} {_tokens(missing)} is not cached there")
    else:
        lines.append(f"stop: all {wanted} whole blocks are cached")
    if isinstance(tokens, list) and len(tokens) % size:
        lines.append(f"{len(tokens) % size} trailing tokens: a partial block, ignored")
    return lines


def _candidates(before: DumpIndex, evicted: list[int]) -> list[str]:
    order = {block: index for index, block in enumerate(evicted, 1)}
    lines = []
    for shown, block in enumerate(eviction_order(before)):
        if shown == SHOWN_CANDIDATES:
            lines.append("…")
            break
        taken = f"  ← evicted {_ordinal(order[block.block])}" if block.block in order else ""
        lines.append(f"#{block.block}  {key_text(before, block)}{taken}")
    pinned = sum(1 for block in before.blocks.values() if block.pin)
    if pinned:
        lines.append(f"{pinned} pinned blocks are never candidates")
    if before.policy != "lru":
        lines.append(f"{before.policy}: {POLICY_ORDER[before.policy]}")
    lines.append(f"evicted, in order: {', '.join(str(block) for block in evicted)}")
    lines.append("(each eviction makes the block above a leaf tail: deeper blocks go first)")
    return lines


#: Why the first candidate goes first, per policy (R-POL-2 .. R-POL-6).
POLICY_ORDER: dict[str, str] = {
    "lru": "the least recently used goes first (R-POL-2)",
    "lfu": "the fewest hits go first, then the least recently used (R-POL-3)",
    "fifo": "the earliest cached goes first, however recently used (R-POL-4)",
    "priority": "the lowest retention priority goes first, then the least recently used "
    "(R-POL-5)",
    "slru": "probation (0) before protected (1), least recently used first in each (R-POL-6)",
}

#: How a key's items are shown: the stamp as ``t``, the others by their field name.
_SHORT = {"stamp": "t"}


def key_text(index: DumpIndex, block: CachedBlock) -> str:
    """``block``'s eviction key as the panel and the page show it: ``t=5`` under lru,
    ``hits=2 t=5`` under lfu, ... (R-POL-1). O(1)."""
    names = POLICIES[index.policy].key_names
    key = index.eviction_key(block)
    shown = zip(names, key[:-1], strict=True)
    return " ".join(f"{_SHORT.get(name, name)}={value}" for name, value in shown)


def _free_lines(before: DumpIndex, changes: Changes) -> list[str]:
    lines = [f"free before: {id_ranges(before.free) or 'none'}"]
    if changes.allocated:
        lines.append(f"allocated: {id_ranges(changes.allocated)} (the smallest free ids)")
    if changes.freed:
        lines.append(f"returned: {id_ranges(changes.freed)}")
    return lines


def _pin_lines(before: DumpIndex, after: DumpIndex, changes: Changes) -> list[str]:
    lines = []
    for label, keys in (("pinned", changes.pinned), ("unpinned", changes.unpinned)):
        ids = sorted(after.blocks[key].block for key in keys)
        counts = {(before.blocks[key].pin, after.blocks[key].pin) for key in keys}
        change = ", ".join(f"{old}→{new}" for old, new in sorted(counts, key=str))
        if ids:
            lines.append(f"{label}: #{id_ranges(ids)} (pins {change})")
    return lines


def _reader_lines(after: DumpIndex, changes: Changes, stats: dict[str, Any] | None) -> list[str]:
    lines = []
    if stats is not None and "readers" in stats:
        oldest = stats.get("oldest_reader")
        lines.append(
            f"readers inside: {stats['readers']}"
            + (f" (oldest epoch {oldest})" if oldest is not None else "")
        )
    if changes.quarantined:
        lines.append(f"quarantined now: {id_ranges(changes.quarantined)}")
    if changes.reclaimed:
        lines.append(f"reclaimed: {id_ranges(changes.reclaimed)}")
    lines.append(f"quarantine: {id_ranges(after.quarantine) or 'empty'}")
    return lines


def _tokens(tokens: list[Any]) -> str:
    return "[" + " ".join(str(token) for token in tokens) + "]"


def _ordinal(number: int) -> str:
    teens = 10 <= number % 100 <= 20
    suffix = "th" if teens else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"
