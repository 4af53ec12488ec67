"""The view of one step: plain data the page, the SVG slides and the text mode draw.

For each frame of a :class:`~kachedb_radix.spec.explain.record.Recording` and each implementation,
:func:`frame_views` builds a JSON-able dict:

* ``tree`` -- one root node per namespace; each node is one edge of the canonical
  dump with its display lines (block count and first tokens, block ids and pins,
  stamps), its blocks, pins and stamps (for expanding it), its ``flags`` and its
  children. Flags mark what the step changed: ``new`` (all its blocks are new),
  ``grown`` (some are: a leaf extended in place), ``split`` (the edge starts at a
  split point, R-SPLIT-1), ``merged``, ``pin+``/``pin-`` (pins taken and released),
  ``walk`` (on the path the operation used), ``trimmed`` (lost tail blocks); and
  the state ``pinned``. Blocks the step removed are drawn as ``ghost`` nodes where
  they hung, so an eviction shows what it took;
* ``pool`` -- the block pool as cells: free, cached, pinned, quarantined, and
  what the step allocated, freed, evicted, quarantined or reclaimed;
* ``step``, ``outcome``, ``rules`` (:mod:`kachedb_radix.spec.explain.decide`) and ``why``
  (:mod:`kachedb_radix.spec.explain.why`).

Node ids are stable across steps (``k`` + the key of the edge's first block), so
a node expanded on the page stays expanded while stepping.
"""

from __future__ import annotations

import json
from typing import Any

from kachedb_radix.reference.render import describe_edge, id_ranges

from .decide import StepFacts, decide
from .model import Changes, DumpIndex, KeySpace, diff, empty_dump, index_dump
from .record import Frame, Recording, Side
from .why import explain_step, key_text

Node = dict[str, Any]
View = dict[str, Any]

#: Tokens of a step shown before "…".
SHOWN_TOKENS = 8

#: Flags that mark a change (the rest describe the state).
CHANGE_FLAGS = frozenset({"new", "grown", "split", "merged", "pin+", "pin-", "walk", "trimmed"})


def frame_views(recording: Recording) -> list[list[View]]:
    """Per frame, per implementation, the view (see the module docstring).

    Cost: O(frames * state size).
    """
    columns = len(recording.names)
    keys = [KeySpace() for _ in range(columns)]
    before: list[DumpIndex | None] = [None] * columns
    views: list[list[View]] = []
    for frame in recording.frames:
        row = []
        for column, side in enumerate(frame.sides):
            if frame.step["op"] == "reset":
                before[column] = _fresh(frame.step, keys[column])
            view, after = side_view(frame, side, before[column], keys[column])
            before[column] = after if after is not None else before[column]
            row.append(view)
        views.append(row)
    return views


def _fresh(step: dict[str, Any], keys: KeySpace) -> DumpIndex | None:
    try:
        return index_dump(empty_dump(int(step["num_blocks"]), int(step["block_size"])), keys)
    except (KeyError, TypeError, ValueError):
        return None


def side_view(
    frame: Frame, side: Side, before: DumpIndex | None, keys: KeySpace
) -> tuple[View, DumpIndex | None]:
    """One implementation's view of one frame, and its state index after it. O(state)."""
    view: View = {
        "name": side.name,
        "note": side.note,
        "step": describe_step(frame.step),
        "outcome": describe_outcome(frame.step["op"], side.outcome),
        "ok": side.outcome is not None and "error" not in side.outcome,
        "tree": [],
        "pool": None,
        "rules": [],
        "why": [],
    }
    if side.dump is None or side.outcome is None:
        return view, None
    try:
        after = index_dump(side.dump, keys)
    except ValueError as exc:
        view["note"] = f"its dump cannot be drawn: {exc}"
        return view, None
    if before is None or before.block_size != after.block_size:
        before = index_dump(empty_dump(after.dump["num_blocks"], after.block_size), keys)
    changes = diff(before, after)
    facts = StepFacts(frame.step, side.outcome, before, after, changes, side.stats)
    view["tree"] = build_tree(frame.step, side.outcome, before, after, changes)
    view["pool"] = build_pool(before, after, changes)
    view["rules"] = [[decision.rule, decision.reason] for decision in decide(facts)]
    view["why"] = [
        [title, lines]
        for title, lines in explain_step(
            frame.step, side.outcome, before, after, changes, keys, side.stats
        )
    ]
    view["clock"] = after.dump.get("clock")
    return view, after


def describe_step(step: dict[str, Any]) -> str:
    """``insert [100 101 … (12 tokens)] ns='a' pin``: a step in one line. O(shown)."""
    parts = [step["op"]]
    for name, value in step.items():
        if name in ("op", "expect", "actual", "trace", "levels", "note"):
            continue
        if name == "tokens" and isinstance(value, list) and len(value) > SHOWN_TOKENS:
            shown = " ".join(json.dumps(token) for token in value[:SHOWN_TOKENS])
            parts.append(f"[{shown} … ({len(value)} tokens)]")
        elif name == "tokens" and isinstance(value, list):
            parts.append("[" + " ".join(json.dumps(token) for token in value) + "]")
        elif name == "pin":
            parts.append("pin" if value else "no pin")
        elif name == "namespace" and value is None:
            continue
        else:
            parts.append(f"{name}={json.dumps(value)}")
    return " ".join(parts)


def describe_outcome(op: str, outcome: dict[str, Any] | None) -> str:
    """The outcome in words: ``matched 8 tokens: #0-1, lease 1``. O(size)."""
    if outcome is None:
        return "not run"
    if "error" in outcome:
        return f"error: {outcome['error']}"
    answer = outcome.get("ok")
    if not isinstance(answer, dict):
        return "ok"
    lease = f", lease {answer['lease']}" if answer.get("lease") is not None else ""
    if op in ("match", "snapshot_match"):
        blocks = id_ranges(answer.get("blocks", []))
        return f"matched {answer.get('length')} tokens" + (f": #{blocks}" if blocks else "") + lease
    if op == "insert":
        return (
            f"cached {answer.get('length')} tokens: reused {answer.get('reused')}, "
            f"allocated {id_ranges(answer.get('allocated', [])) or 'none'}, "
            f"evicted {id_ranges(answer.get('evicted', [])) or 'none'}{lease}"
        )
    if op in ("evict", "reclaim"):
        field = "freed" if op == "evict" else "reclaimed"
        return f"{field} {id_ranges(answer.get(field, [])) or 'nothing'}"
    if op == "reader":
        return (
            f"reader {answer.get('snapshot')} entered epoch {answer.get('epoch')} "
            f"at version {answer.get('version')}"
        )
    if op == "snapshot":
        return f"snapshot {answer.get('snapshot')} of version {answer.get('version')}"
    if op == "stats":
        return ", ".join(f"{name} {value}" for name, value in answer.items())
    if op == "namespaces":
        return "namespaces: " + ", ".join(json.dumps(name) for name in answer["namespaces"])
    return "ok"


def build_tree(
    step: dict[str, Any],
    outcome: dict[str, Any],
    before: DumpIndex,
    after: DumpIndex,
    changes: Changes,
) -> list[Node]:
    """The display tree: namespace roots, edges and ghosts (see the module docstring).

    O(cached blocks before and after).
    """
    used: set[int] = set()
    answer = outcome.get("ok")
    if step["op"] in ("match", "insert") and isinstance(answer, dict):
        used = {after.by_id[block] for block in answer.get("blocks", []) if block in after.by_id}
    by_key: dict[int, Node] = {}
    roots: dict[str | None, Node] = {}
    size = after.block_size
    for space in after.dump["namespaces"]:
        name = space["namespace"]
        fresh = "new" if name in changes.namespaces_added else ""
        root = _root_node(after.roots[name], name, fresh)
        roots[name] = root
        pending = [(edge, root) for edge in reversed(space["children"])]
        while pending:
            edge, parent = pending.pop()
            node = _edge_node(edge, size, after, changes, used)
            parent["children"].append(node)
            for block in edge["blocks"]:
                by_key[after.by_id[block]] = node
            pending.extend((child, node) for child in reversed(edge["children"]))
    for name in changes.namespaces_removed:
        roots[name] = _root_node(before.roots[name], name, "ghost")
    _hang_ghosts(before, changes, by_key, roots)
    return [roots[name] for name in [*after.roots, *changes.namespaces_removed]]


def _root_node(key: int, name: str | None, flag: str) -> Node:
    label = "namespace (default)" if name is None else f"namespace {name!r}"
    lines = [label, "removed: no blocks left" if flag == "ghost" else "root"]
    return {
        "id": f"r{key}",
        "kind": "root",
        "lines": lines,
        "blocks": [],
        "flags": [flag] if flag else [],
        "children": [],
    }


def _edge_node(
    edge: dict[str, Any], size: int, after: DumpIndex, changes: Changes, used: set[int]
) -> Node:
    blocks: list[int] = edge["blocks"]
    keys = [after.by_id[block] for block in blocks]
    pins = edge.get("pins") or [0] * len(blocks)
    stamps = edge.get("stamps")
    parts = describe_edge({**edge, "pins": pins, "stamps": stamps or [0]}, size).split("  ")
    lines = [parts[0], "  ".join(parts[1:-1])]
    if stamps is not None:
        lines.append(parts[-1])
    flags = []
    fresh = sum(1 for key in keys if key in changes.new)
    if fresh:
        flags.append("new" if fresh == len(keys) else "grown")
    if keys[0] in changes.split:
        flags.append("split")
    for flag, marked in (
        ("merged", changes.merged),
        ("pin+", changes.pinned),
        ("pin-", changes.unpinned),
        ("walk", used),
    ):
        if any(key in marked for key in keys):
            flags.append(flag)
    if any(pins):
        flags.append("pinned")
    tail = after.blocks[keys[-1]]
    return {
        "id": f"k{keys[0]}",
        "kind": "edge",
        "lines": lines,
        "blocks": blocks,
        "pins": pins,
        "stamps": stamps,
        # R-POL-1: a leaf's eviction key under the tree's policy, shown with its blocks
        "key": key_text(after, tail) if after.is_leaf_tail(tail.key) else None,
        "flags": flags,
        "children": [],
    }


def _hang_ghosts(
    before: DumpIndex, changes: Changes, by_key: dict[int, Node], roots: dict[str | None, Node]
) -> None:
    """Draw each removed run of blocks where it hung before the step."""
    edges: dict[int, list[int]] = {}
    for key, block in before.blocks.items():
        edges.setdefault(block.edge, []).append(key)
    ghosts: dict[int, Node] = {}
    for first, members in edges.items():
        gone = [key for key in members if key in changes.gone]
        if not gone:
            continue
        kept = [key for key in members if key not in changes.gone]
        parent = before.blocks[members[0]].parent
        if kept:
            # Only a leaf edge loses its tail, and one after-node holds it.
            anchor = by_key[kept[-1]]
            anchor["flags"].append("trimmed")
        elif parent in before.blocks and parent in changes.gone:
            anchor = ghosts[before.blocks[parent].edge]
        elif parent in by_key:
            anchor = by_key[parent]
        else:
            anchor = roots[before.blocks[members[0]].namespace]
        ids = [before.blocks[key].block for key in gone]
        noun = "block" if len(ids) == 1 else "blocks"
        ghost: Node = {
            "id": f"g{gone[0]}",
            "kind": "ghost",
            "lines": [f"removed {len(ids)} {noun}", f"#{id_ranges(ids)}"],
            "blocks": ids,
            "flags": ["ghost"],
            "children": [],
        }
        anchor["children"].append(ghost)
        ghosts[first] = ghost


def build_pool(before: DumpIndex, after: DumpIndex, changes: Changes) -> dict[str, Any]:
    """The pool strip's data: every id's state and what the step did to it. O(pool)."""
    return {
        "size": after.dump["num_blocks"],
        "free": after.free,
        "quarantine": after.quarantine,
        "pinned": sorted(block.block for block in after.blocks.values() if block.pin),
        "allocated": changes.allocated,
        "freed": changes.freed,
        "quarantined": changes.quarantined,
        "reclaimed": changes.reclaimed,
        "evicted": sorted(before.blocks[key].block for key in changes.gone),
    }


def is_hot(node: Node) -> bool:
    """Whether the step changed this node (it carries a change flag or is a ghost). O(1)."""
    return node["kind"] == "ghost" or any(flag in CHANGE_FLAGS for flag in node["flags"])


def all_nodes(roots: list[Node]) -> list[Node]:
    """Every node of a display tree, parents first, left to right. O(n), no recursion."""
    found: list[Node] = []
    pending = list(reversed(roots))
    while pending:
        node = pending.pop()
        found.append(node)
        pending.extend(reversed(node["children"]))
    return found
