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
a persistent tree, path-copied where a step changed it; an edge's tokens, which
rarely change, are interned in a table of their own. The pool is one character
per block id (``f`` free, ``c`` cached, ``p`` pinned, ``q`` quarantined) plus the
ids the step changed.

When the trace's reset names an events scheme, each side's panel lists the KV event
batches it emitted during the step (:mod:`kachedb_radix.spec.explain.events`), each
event one line; pointing at one lights up the blocks it names in the tree and the pool.

The page embeds the text of the rules it cites (every rule for the playground,
:mod:`kachedb_radix.spec.explain.serve`), rendered from SPEC.md's Markdown. A step is
addressed by ``#step=N`` (1-based; ``&sub=K`` for a sub-step), so a link opens it.
"""

from __future__ import annotations

import json
from html import escape
from importlib import resources
from string import Template
from typing import Any

from ..conform.operations import BY_NAME
from ..conform.rules import RULE_ID, load_rules, markdown_html
from . import collapse, layout
from .record import Recording, finding_line
from .svg import (
    CELL,
    CELL_GAP,
    LABELLED_POOL,
    POOL_CHANGES,
    POOL_COLUMNS,
    SMALL_CELL,
    WIDE_COLUMNS,
)
from .view import CHANGE_FLAGS, Node, View

_STATE_CODES = {"free": "f", "cached": "c", "pinned": "p", "quarantined": "q"}


class _NodeTable:
    """Interns nodes: equal subtrees are stored once. O(node size) per node."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._index: dict[str, int] = {}
        self.tokens: list[list[Any]] = []
        self._token_index: dict[str, int] = {}

    def _tokens(self, tokens: list[Any]) -> int:
        text = json.dumps(tokens, separators=(",", ":"))
        if text not in self._token_index:
            self._token_index[text] = len(self.tokens)
            self.tokens.append(tokens)
        return self._token_index[text]

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
                ("d", "diff"),
            ):
                if current.get(name):
                    row[short] = current[name]
            if current.get("tokens"):
                row["t"] = self._tokens(current["tokens"])
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


#: A side's view fields the page takes as they are.
_SIDE_FIELDS = (
    "name", "note", "step", "outcome", "ok", "rules", "verdicts", "why", "sub", "counts",
    "blank", "origin", "events",
)  # fmt: skip


def frame_data(frame: Any, row: list[View], table: _NodeTable) -> dict[str, Any]:
    """One frame as the page's script reads it (its trees put in ``table``). O(state)."""
    sides = []
    for view in row:
        side = {key: view[key] for key in _SIDE_FIELDS if view.get(key) is not None}
        side["tree"] = [table.add(root) for root in view["tree"]]
        side["pool"] = _pool_data(view["pool"])
        adopted = view.get("adopted")
        if adopted is not None:
            side["adopted"] = {
                "outcome": adopted["outcome"],
                "tree": [table.add(root) for root in adopted["tree"]],
                "pool": _pool_data(adopted["pool"]),
            }
            if adopted.get("events") is not None:
                side["adopted"]["events"] = adopted["events"]
        sides.append(side)
    finding = frame.finding
    return {
        "number": frame.number,
        "trace": frame.trace,
        "note": frame.step.get("note"),
        "differs": frame.difference,
        "rules": list(finding.rules) if finding is not None else [],
        "cause": finding.cause if finding is not None else "",
        "finding": None if finding is None else finding_line(finding),
        "safety": finding is not None and finding.kind == "safety",
        "waived": frame.waived,
        "declared": [list(pair) for pair in frame.declared],
        "minor": frame.minor,
        "events": None if frame.events is None else _scheme_text(frame.events),
        "eventsDiffer": frame.events_differ,
        "eventsLate": frame.events_late,
        "eventsFinding": finding is not None
        and BY_NAME[finding.trace[finding.index]["op"]].stream,
        "sides": sides,
    }


def _scheme_text(spec: dict[str, Any]) -> str:
    """``sha256_cbor, seed 'vllm-none-hash'``: the hash scheme events name blocks by."""
    scheme = spec.get("scheme", "sha256_cbor")
    return f"{scheme}, seed {spec['seed']!r}" if "seed" in spec else str(scheme)


def cited_rules(data: dict[str, Any]) -> list[str]:
    """The rule ids the page's data mentions anywhere, in SPEC order. O(size of the data)."""
    found = set(RULE_ID.findall(json.dumps(data)))
    return [rule for rule in load_rules() if rule in found]


def page_data(recording: Recording, views: list[list[View]]) -> dict[str, Any]:
    """The JSON the page's script reads: constants, node table, frames. O(recording)."""
    table = _NodeTable()
    frames = [
        frame_data(frame, row, table) for frame, row in zip(recording.frames, views, strict=True)
    ]
    return {
        "title": recording.title,
        "source": recording.source,
        "lesson": recording.lesson,
        "names": recording.names,
        "profile": recording.profile,
        "firstDifference": recording.first_difference,
        "firstMajor": recording.first_major,
        "live": False,
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
            "labelledPool": LABELLED_POOL,
            "smallCell": SMALL_CELL,
            "wideColumns": WIDE_COLUMNS,
            "poolChanges": list(POOL_CHANGES),
            "states": {code: name for name, code in _STATE_CODES.items()},
        },
        "nodes": table.rows,
        "tokens": table.tokens,
        "frames": frames,
    }


def rule_html(text: str) -> str:
    """A rule's Markdown body as HTML (SPEC.md's Markdown, rendered as CommonMark). O(len)."""
    return markdown_html(text)


def rules_html(ids: list[str] | None = None) -> str:
    """The rules' text as ``<article id="rule-R-...">`` elements: those of ``ids``, every
    rule when None. O(their text)."""
    rules = load_rules()
    chosen = list(rules) if ids is None else [rule for rule in ids if rule in rules]
    return "".join(
        f'<article class="rule-text" id="rule-{rules[rule].id}"><h3>{rules[rule].id} — '
        f"{markdown_html(rules[rule].title, inline=True)}</h3>"
        f'<p class="level">Level: {rules[rule].level}</p>{rule_html(rules[rule].text)}</article>'
        for rule in chosen
    )


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


#: The legend: every marking and shorthand the page uses, said once.
def build_page(
    recording: Recording,
    views: list[list[View]],
    *,
    live: str = "",
    all_rules: bool = False,
) -> str:
    """The whole HTML page: ``live`` is the playground's form (its HTML), which also
    embeds every rule's text (``all_rules``). O(recording + rules)."""
    found = page_data(recording, views)
    found["live"] = bool(live)
    return page_html(found, recording.title, recording.lesson, recording.source, live=live,
                     all_rules=all_rules or bool(live))  # fmt: skip


def page_html(
    data: dict[str, Any],
    title_text: str,
    lesson: str,
    source: str,
    *,
    live: str = "",
    all_rules: bool = False,
) -> str:
    """The page around already built page data (see :func:`page_data`). O(data + rules)."""
    cited = None if all_rules else cited_rules(data)
    text = json.dumps(data, separators=(",", ":"))
    # "</" would end the script element early; JSON allows "<\/" for it.
    text = text.replace("</", "<\\/")
    rules = rules_html(cited)
    heading = "The rules" if cited is None else "The rules this page cites"
    title = escape(f"kachedb-radix explain: {title_text}")
    frames = len(data["frames"])
    play_script = f"<script>{_asset('play.js')}</script>" if live else ""
    return Template(_asset("page.html")).substitute(
        title=title,
        style=_asset("page.css"),
        lesson=escape(lesson),
        source=escape(source),
        live=live,
        last=max(frames - 1, 0),
        heading=heading,
        rules=rules,
        data=text,
        script=_asset("page.js"),
        play=play_script,
    )
