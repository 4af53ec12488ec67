"""A tidy tree layout: where each shown node goes.

The algorithm is Reingold and Tilford's tidy tree ("Tidier drawings of trees",
IEEE TSE 1981) for nodes of different widths, with each subtree's outline kept
as explicit per-depth *contours*:

1. **Bottom up** (children before parents), each subtree is laid out on its own
   with its root at x = 0. Its contour is a list, one entry per depth below its
   root, of the leftmost and rightmost x any of its nodes reaches at that depth.
   A leaf's contour is its own box, ``[(-w/2, w/2)]``.
2. A node's children are placed **left to right**. The first sits at 0; each
   next one is pushed right by the least amount that keeps it :data:`GAP` clear
   of everything placed so far, at every depth both reach:
   ``shift = max over shared depths d of (placed.right[d] - child.left[d]) + GAP``.
   The placed contour then takes the child's right edge at the shared depths and
   the child's whole contour below them.
3. The parent is **centred** over its first and last child, and its contour is
   its own box on top of the children's, re-centred.
4. **Top down**, absolute x is the sum of the offsets along the path; y is set by
   depth, each level as tall as its tallest node plus :data:`LEVEL_GAP`.
   Namespace roots are the children of an invisible super-root, so a forest is
   laid out as one tree and the namespaces stand side by side.

Properties: a parent is centred over its children, subtrees never overlap, the
drawing of a subtree does not depend on where it is, and mirror-image trees get
mirror-image drawings except that small subtrees between large ones are packed
to the left (Walker's 1990 spreading of them is not done). Node widths come from
their text's length in characters (a monospace font), not from measured glyphs,
so the page's script (``page.js``, ``layoutTree``) computes exactly the same
numbers in the browser; the browser test checks that it does.

Cost: O(n * h) for n shown nodes and a height of h -- merging a child's contour
touches each of its depths once. :mod:`kachedb_radix.spec.explain.collapse` keeps n and h small.
"""

from __future__ import annotations

from dataclasses import dataclass

from .collapse import Shown

#: Width of one character of the label font (monospace), in SVG units.
CHAR_W = 7
#: Height of one label line.
LINE_H = 14
#: Padding inside a node's box, across and down.
PAD_X, PAD_Y = 8, 6
#: Lines every node box has room for (shorter labels keep the same height).
MIN_LINES = 3
#: Horizontal space between neighbouring subtrees.
GAP = 14
#: Vertical space between levels.
LEVEL_GAP = 34
#: Margin around the drawing.
MARGIN = 10


@dataclass
class Placed:
    """A shown node with its box: centre x, top y, width and height."""

    shown: Shown
    x: float
    y: float
    width: float
    height: float
    depth: int
    parent: Placed | None


def box(lines: list[str]) -> tuple[int, int]:
    """Width and height of a node whose label is ``lines``. O(total length)."""
    width = max((len(line) for line in lines), default=0) * CHAR_W + 2 * PAD_X
    return width, max(len(lines), MIN_LINES) * LINE_H + 2 * PAD_Y


def layout(roots: list[Shown]) -> tuple[list[Placed], float, float]:
    """Place the shown forest ``roots``; return the nodes in pre-order (parents before
    children, children left to right) and the drawing's width and height. O(n * h)."""
    top = Shown({"id": "", "kind": "top", "lines": [], "children": []}, roots)
    order: list[tuple[Shown, int, Shown | None]] = []
    pending: list[tuple[Shown, int, Shown | None]] = [(top, 0, None)]
    while pending:
        shown, depth, up = pending.pop()
        order.append((shown, depth, up))
        pending.extend((child, depth + 1, shown) for child in reversed(shown.children))
    widths: dict[int, float] = {}
    offsets: dict[int, float] = {}
    contours: dict[int, list[list[float]]] = {}
    for shown, _, _ in reversed(order):
        width = 0.0 if shown is top else float(box(shown.node["lines"])[0])
        widths[id(shown)] = width
        contours[id(shown)] = _place_children(shown, width, offsets, contours)
    heights: dict[int, float] = {}
    for shown, depth, _ in order:
        if shown is not top:
            heights[depth] = max(heights.get(depth, 0.0), float(box(shown.node["lines"])[1]))
    level_y = {1: float(MARGIN)}
    for depth in range(2, max(heights, default=1) + 1):
        level_y[depth] = level_y[depth - 1] + heights[depth - 1] + LEVEL_GAP
    placed: list[Placed] = []
    where: dict[int, Placed] = {}
    centre = {id(top): 0.0}
    for shown, depth, up in order:
        if shown is top:
            for child in shown.children:
                centre[id(child)] = offsets[id(child)]
            continue
        x = centre[id(shown)]
        for child in shown.children:
            centre[id(child)] = x + offsets[id(child)]
        width, height = box(shown.node["lines"])
        parent = where.get(id(up))
        node = Placed(shown, x, level_y[depth], float(width), float(height), depth, parent)
        where[id(shown)] = node
        placed.append(node)
    if not placed:
        return [], 2.0 * MARGIN, 2.0 * MARGIN
    left = min(node.x - node.width / 2 for node in placed)
    for node in placed:
        node.x += MARGIN - left
    right = max(node.x + node.width / 2 for node in placed)
    bottom = max(node.y + node.height for node in placed)
    return placed, right + MARGIN, bottom + MARGIN


def _place_children(
    shown: Shown,
    width: float,
    offsets: dict[int, float],
    contours: dict[int, list[list[float]]],
) -> list[list[float]]:
    """Steps 2 and 3: offsets of ``shown``'s children, and ``shown``'s contour."""
    own = [-width / 2, width / 2]
    if not shown.children:
        return [own]
    placed = [list(level) for level in contours[id(shown.children[0])]]
    shifts = [0.0]
    for child in shown.children[1:]:
        contour = contours[id(child)]
        shared = min(len(placed), len(contour))
        shift = max(placed[depth][1] - contour[depth][0] for depth in range(shared)) + GAP
        shifts.append(shift)
        for depth, (left, right) in enumerate(contour):
            if depth < len(placed):
                placed[depth][1] = right + shift
            else:
                placed.append([left + shift, right + shift])
    middle = (shifts[0] + shifts[-1]) / 2
    for child, shift in zip(shown.children, shifts, strict=True):
        offsets[id(child)] = shift - middle
    return [own, *([left - middle, right - middle] for left, right in placed)]
