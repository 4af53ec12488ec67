"""Which nodes are shown: long chains and wide fan-outs fold into counted placeholders.

A tree of a few hundred edges stays legible only if the eye is not asked to read
all of them at once. Two shapes make trees unreadable, and each folds into one
*placeholder* node that says what it hides and opens on a click:

* a **wide fan-out** -- a node with more than :data:`FANOUT` children shows its
  first ``FANOUT - 1`` and every child whose subtree the step changed; the others
  (at least two) fold into ``+n more`` (id ``<parent id>/more``);
* a **long chain** -- a run of at least :data:`CHAIN` *spine* nodes, each with one
  child that goes on and only leaves beside it (a conversation edited turn after
  turn), folds into ``⋯ n levels`` (id ``<first id>/chain``), under which the tree
  goes on where the run ends. (The dump already writes a chain of single blocks
  as one edge, R-DUMP-2; a long edge is one node whose blocks open on a click.)

Nothing the step changed is ever folded: a node that is changed (see
:func:`kachedb_radix.spec.explain.view.is_hot`) is never a spine node, and a changed subtree is
never hidden in a fan-out. A placeholder whose id is in ``expanded`` stays open
(and an opened chain opens all of its run).

The page's script repeats this function step for step (``visibleTree`` in
``page.js``); the browser test checks both show the same nodes at the same places.
Cost: O(n) for n nodes (one pass to find changed subtrees, one to fold).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from .view import Node, all_nodes, is_hot

#: Children shown under one node before the rest fold into "+n more".
FANOUT = 8

#: Spine nodes in a row that fold into "⋯ n levels".
CHAIN = 4


@dataclass
class Shown:
    """A node as shown: the node (or a placeholder) and its shown children."""

    node: Node
    children: list[Shown] = field(default_factory=list)


def visible(roots: list[Node], expanded: Collection[str] = ()) -> list[Shown]:
    """The shown forest of ``roots`` with placeholders for what is folded. O(n)."""
    hot = _hot_subtrees(roots)
    opened: set[str] = set()  # nodes of opened chains: they never fold again
    shown_roots = [Shown(root) for root in roots]
    pending = list(shown_roots)
    while pending:
        shown = pending.pop()
        node = shown.node
        kids = node["children"] if node["kind"] != "chain" else node["continues"]
        kept, hidden = _fan_out(node, kids, hot, expanded)
        for kid in kept:
            run = [] if kid["id"] in opened else _spine_run(kid)
            if len(run) >= CHAIN and f"{kid['id']}/chain" in expanded:
                opened.update(node["id"] for node in run)
            child = Shown(
                _chain(kid, run) if len(run) >= CHAIN and kid["id"] not in opened else kid
            )
            shown.children.append(child)
            pending.append(child)
        if hidden:
            shown.children.append(Shown(_more(node, hidden)))
    return shown_roots


def _hot_subtrees(roots: list[Node]) -> set[str]:
    """Ids of the nodes whose subtree holds a changed node."""
    hot: set[str] = set()
    for node in reversed(all_nodes(roots)):  # children before parents
        if is_hot(node) or any(child["id"] in hot for child in node["children"]):
            hot.add(node["id"])
    return hot


def _fan_out(
    node: Node, kids: list[Node], hot: set[str], expanded: Collection[str]
) -> tuple[list[Node], list[Node]]:
    if len(kids) <= FANOUT or f"{node['id']}/more" in expanded:
        return kids, []
    kept = [kid for index, kid in enumerate(kids) if index < FANOUT - 1 or kid["id"] in hot]
    if len(kids) - len(kept) < 2:
        return kids, []
    shown = {id(kid) for kid in kept}
    hidden = [kid for kid in kids if id(kid) not in shown]
    return kept, hidden


def _is_spine(node: Node) -> bool:
    kids = node["children"]
    going_on = [kid for kid in kids if kid["children"]]
    return (
        node["kind"] == "edge"
        and not is_hot(node)
        and len(kids) >= 2
        and len(going_on) == 1
        and not any(is_hot(kid) for kid in kids if not kid["children"])
    )


def _spine_run(node: Node) -> list[Node]:
    run = []
    while _is_spine(node):
        run.append(node)
        node = next(kid for kid in node["children"] if kid["children"])
    return run


def _chain(first: Node, run: list[Node]) -> Node:
    end = next(kid for kid in run[-1]["children"] if kid["children"])
    leaves = [kid for node in run for kid in node["children"] if not kid["children"]]
    count = len(run) + len(leaves)
    blocks = sum(len(node["blocks"]) for node in [*run, *leaves])
    lines = [f"⋯ {len(run)} levels", f"{count} nodes, {blocks} blocks"]
    return {**_placeholder(f"{first['id']}/chain", "chain", lines), "continues": [end]}


def _more(parent: Node, hidden: list[Node]) -> Node:
    below = all_nodes(hidden)
    blocks = sum(len(node["blocks"]) for node in below)
    lines = [f"+{len(hidden)} more", f"{len(below)} nodes, {blocks} blocks"]
    return _placeholder(f"{parent['id']}/more", "more", lines)


def _placeholder(node_id: str, kind: str, lines: list[str]) -> Node:
    return {
        "id": node_id,
        "kind": kind,
        "lines": [*lines, "click to open"],
        "blocks": [],
        "flags": [],
        "children": [],
    }
