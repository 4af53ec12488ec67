"""The step-through page: one self-contained HTML file.

Everything is inline -- the stylesheet (``page.css``), the script (``page.js``),
the recording as JSON, and the text of every SPEC rule -- so the page opens from
disk with no server and no network. The script draws each step's tree as SVG
with the same folding (:mod:`kachedb_radix.spec.explain.collapse`) and tidy layout
(:mod:`kachedb_radix.spec.explain.layout`) as the Python side, and adds what only a browser
can: stepping (arrow keys, a slider), opening folded nodes and long edges with a
click, pan and zoom.

The recording is stored compactly. Consecutive steps share most of their tree,
so nodes are *interned*: each distinct node (its label, flags and children) is
stored once in one table and a step's tree is a list of root indices -- in effect
a persistent tree, path-copied where a step changed it. The pool is one character
per block id (``f`` free, ``c`` cached, ``p`` pinned, ``q`` quarantined) plus the
ids the step changed.
"""

from __future__ import annotations

import json
import re
from html import escape
from importlib import resources
from typing import Any

from ..conform.rules import load_rules
from . import collapse, layout
from .record import Recording, finding_line
from .svg import CELL, CELL_GAP, POOL_CHANGES, POOL_COLUMNS
from .view import CHANGE_FLAGS, Node, View

_STATE_CODES = {"free": "f", "cached": "c", "pinned": "p", "quarantined": "q"}


class _NodeTable:
    """Interns nodes: equal subtrees are stored once. O(node size) per node."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._index: dict[str, int] = {}

    def add(self, node: Node) -> int:
        # Children first (post-order, an explicit stack: trees may be deep).
        order: list[Node] = []
        pending = [node]
        while pending:
            current = pending.pop()
            order.append(current)
            pending.extend(current["children"])
        indices: dict[int, int] = {}
        for current in reversed(order):
            row: dict[str, Any] = {"i": current["id"], "k": current["kind"], "l": current["lines"]}
            for short, name in (
                ("b", "blocks"),
                ("p", "pins"),
                ("s", "stamps"),
                ("y", "key"),
                ("f", "flags"),
            ):
                if current.get(name):
                    row[short] = current[name]
            if current["children"]:
                row["c"] = [indices[id(child)] for child in current["children"]]
            text = json.dumps(row, separators=(",", ":"))
            if text not in self._index:
                self._index[text] = len(self.rows)
                self.rows.append(row)
            indices[id(current)] = self._index[text]
        return indices[id(node)]


def _pool_data(pool: dict[str, Any] | None) -> dict[str, Any] | None:
    if pool is None:
        return None
    states = ["c"] * pool["size"]
    for block in pool["free"]:
        states[block] = "f"
    for block in pool["pinned"]:
        states[block] = "p"
    for block in pool["quarantine"]:
        states[block] = "q"
    data: dict[str, Any] = {"s": "".join(states)}
    for change in POOL_CHANGES:
        if pool[change]:
            data[change] = pool[change]
    return data


def page_data(recording: Recording, views: list[list[View]]) -> dict[str, Any]:
    """The JSON the page's script reads: constants, node table, frames. O(recording)."""
    table = _NodeTable()
    frames = []
    for frame, row in zip(recording.frames, views, strict=True):
        sides = []
        for view in row:
            side = {key: view[key] for key in ("name", "note", "step", "outcome", "ok", "rules")}
            side["why"] = view["why"]
            side["tree"] = [table.add(root) for root in view["tree"]]
            side["pool"] = _pool_data(view["pool"])
            sides.append(side)
        frames.append(
            {
                "number": frame.number,
                "trace": frame.trace,
                "note": frame.step.get("note"),
                "differs": frame.difference,
                "finding": None if frame.finding is None else finding_line(frame.finding),
                "safety": frame.finding is not None and frame.finding.kind == "safety",
                "waived": frame.waived,
                "sides": sides,
            }
        )
    return {
        "title": recording.title,
        "source": recording.source,
        "lesson": recording.lesson,
        "names": recording.names,
        "firstDifference": recording.first_difference,
        "constants": {
            "charW": layout.CHAR_W,
            "lineH": layout.LINE_H,
            "padX": layout.PAD_X,
            "padY": layout.PAD_Y,
            "minLines": layout.MIN_LINES,
            "gap": layout.GAP,
            "levelGap": layout.LEVEL_GAP,
            "margin": layout.MARGIN,
            "fanout": collapse.FANOUT,
            "chain": collapse.CHAIN,
            "changeFlags": sorted(CHANGE_FLAGS),
            "poolColumns": POOL_COLUMNS,
            "cell": CELL,
            "cellGap": CELL_GAP,
            "poolChanges": list(POOL_CHANGES),
            "states": {code: name for name, code in _STATE_CODES.items()},
        },
        "nodes": table.rows,
        "frames": frames,
    }


def rule_html(text: str) -> str:
    """A rule's Markdown body as HTML paragraphs (code spans and bold kept). O(len)."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text.strip()):
        html = escape(" ".join(block.split()))
        html = re.sub(r"`([^`]+)`", r"<code>\1</code>", html)
        html = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", html)
        paragraphs.append(f"<p>{html}</p>")
    return "".join(paragraphs)


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def build_page(recording: Recording, views: list[list[View]]) -> str:
    """The whole HTML page. O(recording + rules)."""
    data = json.dumps(page_data(recording, views), separators=(",", ":"))
    # "</" would end the script element early; JSON allows "<\/" for it.
    data = data.replace("</", "<\\/")
    rules = "".join(
        f'<article class="rule-text" id="rule-{rule.id}"><h3>{rule.id} — {escape(rule.title)}'
        f'</h3><p class="level">Level: {rule.level}</p>{rule_html(rule.text)}</article>'
        for rule in load_rules().values()
    )
    title = escape(f"kachedb-radix explain: {recording.title}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{title}</title>
<style>{_asset("page.css")}</style></head>
<body data-step="0">
<header><h1>{title}</h1><p class="lesson">{escape(recording.lesson)}</p>
<p class="source">from {escape(recording.source)}</p></header>
<nav id="controls" aria-label="steps">
<button id="prev" title="previous step (←)">◀</button>
<input id="slider" type="range" min="0" max="{max(len(recording.frames) - 1, 0)}" value="0"
 aria-label="step">
<button id="next" title="next step (→)">▶</button>
<span id="counter"></span>
<button id="jump-diff" title="first difference (d)" hidden>first difference</button>
<button id="fold" title="fold everything again (c)">fold all</button>
<div id="ticks"></div>
</nav>
<section id="step-head"><p id="step-note"></p><p id="step-diff" hidden></p>
<p id="step-waived" hidden></p></section>
<main id="sides"></main>
<aside id="rule-view" hidden><button id="rule-close" title="close">x</button>
<div id="rule-body"></div></aside>
<section id="legend"><h2>Legend</h2><p><span class="chip new">new</span>
<span class="chip split">split</span> <span class="chip walk">walked / used</span>
<span class="chip pinned">pinned</span> <span class="chip ghost">removed</span>
<span class="chip more">folded</span> — keys: ← → step, Home/End, d first difference,
+ / - zoom, 0 fit, drag to pan, wheel to zoom, click a folded node or an edge to open
it.</p></section>
<section id="rules"><h2>The rules (spec/SPEC.md)</h2>{rules}</section>
<noscript><p>This page draws its trees with JavaScript; `kachedb-radix explain --text`
prints the same steps.</p></noscript>
<script type="application/json" id="explain-data">{data}</script>
<script>{_asset("page.js")}</script>
</body></html>
"""
