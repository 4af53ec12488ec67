"""Which nodes are shown: long chains and wide fan-outs fold into counted placeholders.

A tree of a few hundred edges stays legible only if the eye is not asked to read
all of them at once. Two shapes make trees unreadable, and each folds into one
*placeholder* node that says what it hides and opens on a click:

* a **wide fan-out** -- a node with more than :data:`FANOUT` children shows its
  first ``FANOUT - 1`` and every child whose subtree the step changed; the others
  (at least two) fold into ``+n more`` (id ``<parent id>/more``). Opening it shows
  the next :data:`FANOUT` of them, and a new placeholder (``<parent id>/more2``,
  ``/more3``, ...) holds the rest: a fan-out of hundreds opens a page at a time
  instead of into one row too wide to read;
* a **long chain** -- a run of at least :data:`CHAIN` *spine* nodes, each with one
  child that goes on and only leaves beside it (a conversation edited turn after
  turn), folds into ``⋯ n levels`` (id ``<first id>/chain``), under which the tree
  goes on where the run ends. (The dump already writes a chain of single blocks
  as one edge, R-DUMP-2; a long edge is one node whose blocks open on a click.)

Nothing the step changed is ever folded: a node that is changed (see
:func:`kachedb_radix.spec.explain.view.is_hot`) is never a spine node, and a changed subtree is
never hidden in a fan-out. A placeholder whose id is in ``expanded`` stays open
(and an opened chain opens all of its run).

With ``focus`` (the page's "follow" mode, used when the step's changes are spread wider
than the view), every node with a changed subtree below it folds *all* its unchanged
children into its ``+n more`` (when there are two or more), so a step that changed a few
places in a tree of hundreds of edges draws those places side by side.

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


def visible(
    roots: list[Node], expanded: Collection[str] = (), *, focus: bool = False
) -> list[Shown]:
    """The shown forest of ``roots`` with placeholders for what is folded. O(n)."""
    hot = _hot_subtrees(roots)
    opened: set[str] = set()  # nodes of opened chains: they never fold again
    shown_roots = [Shown(root) for root in roots]
    pending = list(shown_roots)
    while pending:
        shown = pending.pop()
        node = shown.node
        kids = node["children"] if node["kind"] != "chain" else node["continues"]
        kept, hidden = _fan_out(node, kids, hot, expanded, focus)
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
            shown.children.append(Shown(_more(node, hidden, _pages(node["id"], expanded))))
    return shown_roots


def more_id(parent: str, pages: int) -> str:
    """The id of ``parent``'s fan-out placeholder after ``pages`` pages were opened."""
    return f"{parent}/more" if pages == 0 else f"{parent}/more{pages + 1}"


def _pages(parent: str, expanded: Collection[str]) -> int:
    pages = 0
    while more_id(parent, pages) in expanded:
        pages += 1
    return pages


def _hot_subtrees(roots: list[Node]) -> set[str]:
    """Ids of the nodes whose subtree holds a changed node."""
    hot: set[str] = set()
    for node in reversed(all_nodes(roots)):  # children before parents
        if is_hot(node) or any(child["id"] in hot for child in node["children"]):
            hot.add(node["id"])
    return hot


def _fan_out(
    node: Node, kids: list[Node], hot: set[str], expanded: Collection[str], focus: bool
) -> tuple[list[Node], list[Node]]:
    """The children shown and those folded into the placeholder."""
    changed = [kid for kid in kids if kid["id"] in hot]
    focused = focus and bool(changed) and len(kids) - len(changed) >= 2
    if len(kids) <= FANOUT and not focused:
        return kids, []
    if focused:
        kept = changed
    else:
        kept = [kid for index, kid in enumerate(kids) if index < FANOUT - 1 or kid["id"] in hot]
        if len(kids) - len(kept) < 2:
            return kids, []
    shown = {id(kid) for kid in kept}
    hidden = [kid for kid in kids if id(kid) not in shown]
    opened = _pages(node["id"], expanded) * FANOUT
    if opened:
        revealed = {id(kid) for kid in hidden[:opened]}
        kept = [kid for kid in kids if id(kid) in shown or id(kid) in revealed]
        hidden = hidden[opened:]
        if len(hidden) < 2:
            return kids, []
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


def _more(parent: Node, hidden: list[Node], pages: int) -> Node:
    below = all_nodes(hidden)
    blocks = sum(len(node["blocks"]) for node in below)
    lines = [f"+{len(hidden)} more", f"{len(below)} nodes, {blocks} blocks"]
    node = _placeholder(more_id(parent["id"], pages), "more", lines)
    node["lines"][-1] = f"click: {min(FANOUT, len(hidden))} more"
    return node


def _placeholder(node_id: str, kind: str, lines: list[str]) -> Node:
    return {
        "id": node_id,
        "kind": kind,
        "lines": [*lines, "click to open"],
        "blocks": [],
        "flags": [],
        "children": [],
    }
