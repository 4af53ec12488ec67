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
import re
from html import escape
from importlib import resources
from string import Template
from typing import Any

from ..conform.operations import BY_NAME
from ..conform.rules import RULE_ID, load_rules, markdown_html
from . import collapse, layout
from .record import Recording, finding_line
from .ruling import Ruling
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

_STATE_CODES = {"free": "f", "cached": "c", "pinned": "p", "quarantined": "q", "taken": "t"}


class _NodeTable:
    """Interns nodes: equal subtrees are stored once. O(node size) per node."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._index: dict[tuple[Any, ...], int] = {}
        self.tokens: list[list[Any]] = []
        self._token_index: dict[tuple[Any, ...], int] = {}
        # Nodes already added, by identity (sub-steps that leave the tree as it was share
        # one drawing): each is interned once however many trees hold it.
        self._added: dict[int, tuple[Node, int]] = {}

    def _tokens(self, tokens: list[Any]) -> int:
        key = tuple(tokens)
        if key not in self._token_index:
            self._token_index[key] = len(self.tokens)
            self.tokens.append(tokens)
        return self._token_index[key]

    def add(self, node: Node) -> int:
        # Children first (post-order, an explicit stack: trees may be deep).
        order: list[Node] = []
        pending = [node]
        indices: dict[int, int] = {}
        while pending:
            current = pending.pop()
            known = self._added.get(id(current))
            if known is not None and known[0] is current:
                indices[id(current)] = known[1]
                continue
            order.append(current)
            pending.extend(current["children"])
        for current in reversed(order):
            row: dict[str, Any] = {"i": current["id"], "k": current["kind"], "l": current["lines"]}
            for short, name in _ROW_FIELDS:
                if current.get(name):
                    row[short] = current[name]
            if current.get("tokens"):
                row["t"] = self._tokens(current["tokens"])
            if current["children"]:
                row["c"] = [indices[id(child)] for child in current["children"]]
            # A row's identity, as a tuple (hashing it is much cheaper than writing JSON).
            key = tuple(_frozen(row.get(short)) for short in _ROW_KEYS)
            if key not in self._index:
                self._index[key] = len(self.rows)
                self.rows.append(row)
            indices[id(current)] = self._index[key]
            self._added[id(current)] = (current, self._index[key])
        return indices[id(node)]


#: A node's fields a row carries (when set), by their short names.
_ROW_FIELDS = (
    ("b", "blocks"), ("p", "pins"), ("s", "stamps"), ("y", "key"), ("f", "flags"), ("d", "diff"),
)  # fmt: skip
_ROW_KEYS = ("i", "k", "l", "b", "p", "s", "y", "f", "d", "t", "c")


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


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
    for block in pool.get("taken", []):
        states[block] = "t"
    data: dict[str, Any] = {"s": "".join(states)}
    for change in POOL_CHANGES:
        if pool[change]:
            data[change] = pool[change]
    return data


#: A side's view fields the page takes as they are.
_SIDE_FIELDS = (
    "name", "note", "step", "outcome", "ok", "rules", "verdicts", "why", "counts",
    "blank", "origin", "events", "clock", "rulesAt", "whyAt",
)  # fmt: skip

#: A sub-step's fields the page takes as they are (its tree and pool are packed).
_SUB_FIELDS = ("t", "r", "k", "b", "n", "counts", "clock")


def side_data(view: View, table: _NodeTable) -> dict[str, Any]:
    """One side's view as the page's script reads it: its trees put in ``table``, its
    pools packed, each sub-step with its own tree and pool, and the adopted state (at a
    declared step) a whole side of its own. O(state * sub-steps)."""
    side = {key: view[key] for key in _SIDE_FIELDS if view.get(key) is not None}
    side["tree"] = [table.add(root) for root in view["tree"]]
    side["pool"] = _pool_data(view["pool"])
    side["sub"] = _sub_data(view["sub"], side["pool"], table)
    if view.get("adopted") is not None:
        side["adopted"] = side_data(view["adopted"], table)
    return side


def _sub_data(
    subs: list[dict[str, Any]], pool: dict[str, Any] | None, table: _NodeTable
) -> list[dict[str, Any]]:
    """The sub-steps as the page reads them. A sub-step's pool differs from the next
    one's in a cell or two, so its states are stored as the cells that differ from the
    next sub-step's (``ds``: ``[id, state code]`` pairs; the last sub-step's pool is the
    step's own), and its counts only where they differ from the sub-step before it.
    O(sub-steps * pool)."""
    found: list[dict[str, Any]] = []
    for number, sub in enumerate(subs):
        data = {key: sub[key] for key in _SUB_FIELDS if sub.get(key) is not None}
        if number and sub["counts"] == subs[number - 1]["counts"]:
            del data["counts"]
        data["tree"] = [table.add(root) for root in sub["tree"]]
        data["pool"] = _pool_data(sub["pool"])
        found.append(data)
    following = (pool or {}).get("s", "")
    for data in reversed(found):
        states = data["pool"].pop("s") if data["pool"] else ""
        delta = [[block, code] for block, code in enumerate(states) if following[block] != code]
        if delta:
            data["pool"]["ds"] = delta
        following = states
    return found


def frame_data(frame: Any, row: list[View], table: _NodeTable) -> dict[str, Any]:
    """One frame as the page's script reads it (its trees put in ``table``). O(state)."""
    sides = [side_data(view, table) for view in row]
    finding = frame.finding
    # The banner and the timeline say the step's one ruling (spec/explain/ruling.py).
    ruling: Ruling = row[0]["ruling"] if row else Ruling("alone")
    compared = ruling.kind != "not compared"
    if not compared:
        # Nothing of a step not compared is marked as differing: its events neither.
        for side in sides:
            if side.get("events"):
                side["events"] = [
                    {**{key: value for key, value in batch.items() if key != "x"},
                     "lines": [{key: value for key, value in line.items() if key != "x"}
                               for line in batch["lines"]]}
                    for batch in side["events"]
                ]  # fmt: skip
    return {
        "number": frame.number,
        "trace": frame.trace,
        "note": frame.step.get("note"),
        "kind": ruling.kind,
        "differs": (ruling.where or "outcome") if ruling.differs else None,
        "rules": ruling.rules("departs"),
        "cause": ruling.cause,
        "since": ruling.since,
        "finding": None if finding is None else finding_line(finding),
        "safety": ruling.safety,
        "waived": ruling.cause if ruling.kind == "not compared" else None,
        "declared": [[mark.rule, mark.reason] for mark in ruling.marks if mark.declared],
        "minor": ruling.kind == "minor",
        "events": None if frame.events is None else _scheme_text(frame.events),
        "eventsDiffer": frame.events_differ if compared else None,
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


def _first(views: list[list[View]], kinds: tuple[str, ...]) -> int | None:
    """The index of the first step whose ruling is of one of ``kinds``, or None."""
    return next(
        (index for index, row in enumerate(views) if row and row[0]["ruling"].kind in kinds), None
    )


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
        "firstDifference": _first(views, ("differs", "minor", "failed")),
        "firstMajor": _first(views, ("differs", "failed")),
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


#: A word a browser may cut inside: at a hyphen, a slash, before a bracket (R-LRU-1,
#: sglang-0.5.23, a/b, events={...).
_CUTTABLE = re.compile(r"[^\s<>]+[-/\u2010={\[(][^\s<>]*")
#: The text between an element's tags.
_TEXT = re.compile(r"(?<=>)[^<]+|^[^<]+")


def unbroken(html: str) -> str:
    """``html`` wrapping between words only, as the page's script does for its own text:
    each word a browser could cut at a hyphen or a slash is kept whole (``<span
    class="nw">``), a long path wrapping after its slashes and a long list after its
    commas (``<wbr>``). Only text between tags is touched. O(len(html))."""

    def keep(word: re.Match[str]) -> str:
        text = word.group(0)
        pieces = re.split(r"(?<=[,/])", text) if len(text) > 24 else [text]
        return "<wbr>".join(f'<span class="nw">{piece}</span>' for piece in pieces if piece)

    return _TEXT.sub(lambda text: _CUTTABLE.sub(keep, text.group(0)), html)


def rule_html(text: str) -> str:
    """A rule's Markdown body as HTML (SPEC.md's Markdown, rendered as CommonMark), words
    kept whole (:func:`unbroken`). O(len)."""
    return unbroken(markdown_html(text))


def rules_html(ids: list[str] | None = None) -> str:
    """The rules' text as ``<article id="rule-R-...">`` elements: those of ``ids``, every
    rule when None. O(their text)."""
    rules = load_rules()
    chosen = list(rules) if ids is None else [rule for rule in ids if rule in rules]
    return "".join(
        f'<article class="rule-text" id="rule-{rules[rule].id}"><h3>{unbroken(rules[rule].id)} — '
        f"{unbroken(markdown_html(rules[rule].title, inline=True))}</h3>"
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
        lesson=unbroken(escape(lesson)),
        source=unbroken(escape(source)),
        live=live,
        last=max(frames - 1, 0),
        heading=heading,
        rules=rules,
        data=text,
        script=_asset("page.js"),
        play=play_script,
    )
