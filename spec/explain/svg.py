"""SVG drawings of one step: the tree as laid out, and the block pool as a strip.

The markup is the page's (``page.js`` builds the same elements in the browser),
so what a test or a stylesheet finds in one it finds in the other:

* the tree: ``<svg class="tree">`` holding ``path.link`` elements (parent's
  bottom centre to child's top centre; ``ghost`` links dashed) and one
  ``g.node`` per shown node with ``data-node`` (its stable id), ``data-kind``
  (``root``, ``edge``, ``ghost``, ``more``, ``chain``), ``data-blocks`` (its block
  ids), ``data-flags`` (what the step changed, see :mod:`kachedb_radix.spec.explain.view`) and
  ``data-x``/``data-y`` (its box's top centre); its classes are its kind and flags;
* the pool: ``<svg class="pool">`` holding one ``rect.cell`` per block id,
  :data:`POOL_COLUMNS` to a row, with ``data-block``, ``data-state`` (``free``,
  ``cached``, ``pinned``, ``quarantined``) and ``data-change`` (what the step did:
  ``allocated``, ``freed``, ``evicted``, ``quarantined``, ``reclaimed``).

:func:`slide` puts both, a heading and a stylesheet in one standalone file: one
per step for ``--svg DIR``.
"""

from __future__ import annotations

from collections.abc import Collection
from html import escape
from typing import Any

from .collapse import visible
from .layout import LINE_H, PAD_X, PAD_Y, layout
from .view import Node

#: Block cells per row of the pool strip, and a cell's size and spacing.
POOL_COLUMNS = 40
CELL, CELL_GAP = 20, 2

#: Pools up to this many blocks have each cell numbered with its block id; larger ones
#: are drawn with :data:`SMALL_CELL` cells, :data:`WIDE_COLUMNS` to a row, unnumbered.
LABELLED_POOL = 120
SMALL_CELL, WIDE_COLUMNS = 10, 64


def pool_geometry(size: int) -> tuple[int, int, bool]:
    """Columns, cell size and whether cells are numbered, for a pool of ``size`` blocks."""
    if size <= LABELLED_POOL:
        return POOL_COLUMNS, CELL, True
    return WIDE_COLUMNS, SMALL_CELL, False


#: What each pool change is called, in the order a cell lists them.
POOL_CHANGES = ("allocated", "freed", "evicted", "quarantined", "reclaimed")

#: The slides' stylesheet (the page has its own, with the same classes).
SLIDE_STYLE = """
text { font: 11.5px ui-monospace, 'DejaVu Sans Mono', Menlo, monospace; fill: #1d2330; }
.title { font-weight: bold; font-size: 13px; }
.link { fill: none; stroke: #9aa3b5; stroke-width: 1.2; }
.link.ghost { stroke-dasharray: 4 3; }
.node rect { fill: #fff; stroke: #5b6577; stroke-width: 1; }
.node.root rect { fill: #eef1f6; }
.node.pinned rect { stroke: #6b3fa0; stroke-width: 2; }
.node.walk rect { fill: #fff5cc; }
.node.new rect, .node.grown rect { fill: #dff5e1; stroke: #2e8b45; stroke-width: 2; }
.node.split rect { stroke: #c26a00; stroke-width: 2.5; }
.node.ghost rect { fill: #fde8e8; stroke: #c0392b; stroke-dasharray: 4 3; }
.node.more rect, .node.chain rect { fill: #f3f3f3; stroke-dasharray: 2 2; }
.cell.free { fill: #e8ebf0; } .cell.cached { fill: #56658a; }
.cell.pinned { fill: #6b3fa0; } .cell.quarantined { fill: #e0a030; } .cell.taken { fill: #c9d3e6; }
.cell.evicted, .cell.quarantined { stroke: #c0392b; stroke-width: 2.5; }
.mark.allocated { fill: none; stroke: #1f7a3a; stroke-width: 2.5; }
.cell.cached + .mark.allocated, .cell.pinned + .mark.allocated { stroke: #8cf5a8; }
.cell-id { font: 10px ui-monospace, 'DejaVu Sans Mono', monospace; fill: #1d2330; }
.cell-id.pinned, .cell-id.cached { fill: #fff; }
.node.ghost rect { opacity: .8; }
.node.version rect { fill: #e7f4f8; stroke: #2d7d9a; stroke-dasharray: 6 3; }
.node.differs rect { stroke: #c0392b; stroke-width: 3; }
.node.merged rect { stroke: #2d7d9a; stroke-width: 2.5; stroke-dasharray: 8 2 2 2; }
.node.trimmed rect { stroke: #c0392b; stroke-width: 2; stroke-dasharray: 10 3; }
"""


def fmt(value: float) -> str:
    """A coordinate as the page writes it: two decimals at most, no trailing zeros."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def tree_svg(
    roots: list[Node], *, side: str = "", step: int = 0, expanded: Collection[str] = ()
) -> tuple[str, float, float]:
    """The tree as an ``<svg class="tree">`` element, and its width and height.

    Cost: O(n * h) for the layout of n shown nodes, h deep.
    """
    placed, width, height = layout(visible(roots, expanded))
    links: list[str] = []
    nodes: list[str] = []
    for node in placed:
        data = node.shown.node
        kind = data["kind"]
        if node.parent is not None:
            top, bottom = node.y, node.parent.y + node.parent.height
            middle = fmt((top + bottom) / 2)
            ghost = " ghost" if kind == "ghost" else ""
            links.append(
                f'<path class="link{ghost}" d="M{fmt(node.parent.x)},{fmt(bottom)} '
                f'C{fmt(node.parent.x)},{middle} {fmt(node.x)},{middle} {fmt(node.x)},{fmt(top)}"/>'
            )
        flags = " ".join(data["flags"])
        classes = f"node {kind} {flags}".rstrip()
        text = "".join(
            f'<tspan x="{PAD_X}" y="{PAD_Y + LINE_H * (index + 1) - 3}">{escape(line)}</tspan>'
            for index, line in enumerate(data["lines"])
        )
        nodes.append(
            f'<g class="{classes}" data-node="{escape(data["id"])}" '
            f'data-kind="{kind}" data-blocks="{" ".join(map(str, data["blocks"]))}" '
            f'data-flags="{flags}" data-x="{fmt(node.x)}" data-y="{fmt(node.y)}" '
            f'transform="translate({fmt(node.x - node.width / 2)},{fmt(node.y)})">'
            f'<rect width="{fmt(node.width)}" height="{fmt(node.height)}" rx="5"/>'
            f"<text>{text}</text></g>"
        )
    svg = (
        f'<svg class="tree" xmlns="http://www.w3.org/2000/svg" data-side="{escape(side)}" '
        f'data-step="{step}" viewBox="0 0 {fmt(width)} {fmt(height)}" '
        f'width="{fmt(width)}" height="{fmt(height)}">'
        f'<g class="links">{"".join(links)}</g><g class="nodes">{"".join(nodes)}</g></svg>'
    )
    return svg, width, height


def pool_cells(pool: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """Each block id's state and the step's changes to it, by id. O(pool)."""
    free, quarantine, pinned = set(pool["free"]), set(pool["quarantine"]), set(pool["pinned"])
    taken = set(pool.get("taken", []))
    changed: dict[int, list[str]] = {}
    for change in POOL_CHANGES:
        for block in pool[change]:
            changed.setdefault(block, []).append(change)
    cells = []
    for block in range(pool["size"]):
        if block in free:
            state = "free"
        elif block in quarantine:
            state = "quarantined"
        elif block in taken:
            state = "taken"
        else:
            state = "pinned" if block in pinned else "cached"
        cells.append((state, changed.get(block, [])))
    return cells


def pool_svg(pool: dict[str, Any]) -> tuple[str, float, float]:
    """The pool strip as an ``<svg class="pool">`` element, and its width and height.

    O(pool size).
    """
    cells = pool_cells(pool)
    columns, cell, numbered = pool_geometry(len(cells))
    pitch = cell + CELL_GAP
    rows = max(1, -(-len(cells) // columns))
    width = min(len(cells), columns) * pitch
    height = rows * pitch
    rects = []
    for block, (state, changes) in enumerate(cells):
        row, column = divmod(block, columns)
        names = " ".join([state, *changes])
        rects.append(
            f'<rect class="cell {names}" data-block="{block}" data-state="{state}" '
            f'data-change="{" ".join(changes)}" x="{column * pitch}" y="{row * pitch}" '
            f'width="{cell}" height="{cell}"><title>#{block} {names}</title></rect>'
        )
        if "allocated" in changes:
            rects.append(
                f'<rect class="mark allocated" x="{column * pitch + 3}" y="{row * pitch + 3}" '
                f'width="{cell - 6}" height="{cell - 6}"/>'
            )
        if numbered:
            rects.append(
                f'<text class="cell-id {state}" x="{column * pitch + cell / 2:g}" '
                f'y="{row * pitch + cell / 2 + 3.5:g}" text-anchor="middle">{block}</text>'
            )
    svg = (
        f'<svg class="pool" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}">{"".join(rects)}</svg>'
    )
    return svg, float(width), float(height)


def slide(view: dict[str, Any], heading: list[str], step: int) -> str:
    """One standalone SVG file for one step: heading lines, pool strip, tree. O(state)."""
    tree, tree_width, tree_height = tree_svg(view["tree"], side=view["name"], step=step)
    pool, pool_width, pool_height = (
        pool_svg(view["pool"]) if view["pool"] is not None else ("", 0.0, 0.0)
    )
    lines = [*heading, f"{view['step']}  →  {view['outcome']}"]
    if view["rules"]:
        lines.append("rules: " + ", ".join(rule for rule, _ in view["rules"]))
    top = 10 + 18 * len(lines)
    text = "".join(
        f'<text class="{"title" if index == 0 else "line"}" x="10" y="{22 + 18 * index}">'
        f"{escape(line)}</text>"
        for index, line in enumerate(lines)
    )
    width = max(tree_width, pool_width + 20, 10 + 7 * max(len(line) for line in lines))
    height = top + pool_height + 10 + tree_height
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {fmt(width)} {fmt(height)}" '
        f'width="{fmt(width)}" height="{fmt(height)}"><style>{SLIDE_STYLE}</style>'
        f'<rect width="100%" height="100%" fill="#fff"/>{text}'
        f'<g transform="translate(10,{top})">{pool}</g>'
        f'<g transform="translate(0,{fmt(top + pool_height + 10)})">{tree}</g></svg>'
    )
