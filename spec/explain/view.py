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
* ``step``, ``outcome``, ``rules`` (:mod:`kachedb_radix.spec.explain.decide`; for a
  target, only rules it follows or departs from, :mod:`kachedb_radix.spec.explain.verdict`,
  with ``verdicts`` beside them) and ``why`` (:mod:`kachedb_radix.spec.explain.why`);
* ``ruling`` -- the step's one ruling beside a target (the kit's finding list, the
  target's panel marked from it: :mod:`kachedb_radix.spec.explain.ruling`), the same object
  on both sides;
* ``sub`` -- the step's sub-steps, one per phase (:mod:`kachedb_radix.spec.explain.phases`):
  each with its text and rule, the node ids and pool cells to point at, and its own
  tree, pool, counts and clock -- the state of that moment (the last one's are the
  step's own); ``rulesAt``/``whyAt`` -- per rule and per "why" section, the sub-step it
  is about, so the page says which come later in the step;
* ``counts`` -- the pool in words; ``blank`` -- a sentence for a canvas that would
  otherwise say nothing (an empty tree, a refused call);
* ``adopted`` -- on the reference's side of a declared step, the state the kit goes on
  from: a whole side view of its own (outcome, tree, pool, counts, sub-steps, the rules
  judged and the "why" said as the target's choice it carries out); ``origin`` -- on the
  step after, that it starts there;
* ``events`` -- when the trace's reset names an events scheme, the KV event batches the
  side emitted during the step, each event one line naming the blocks of this side's
  tree its hashes belong to, and the drawn nodes holding them
  (:func:`kachedb_radix.spec.explain.events.event_lines`); None when events are off.

Node ids are stable across steps (``k`` + the key of the edge's first block), so
a node expanded on the page stays expanded while stepping, and the same on every side
of a recording (the sides share one key space): a block that differs between the two
sides is flagged ``differs`` (``differs-stamp`` for a stamp alone,
:mod:`kachedb_radix.spec.explain.compare`) in both trees, with what the other side has.
While a reader is inside (or a step names a snapshot), the version it sees is drawn
beside the live tree: a ``version`` node whose children are that version's namespace
roots (ids prefixed ``s<handle>:``). Namespace roots are in a fixed order: the default
namespace first, then by name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kachedb_radix.reference.limits import check_pool
from kachedb_radix.reference.render import describe_edge, id_ranges

from ..conform.operations import (
    BY_NAME,
    ENDS_EPOCH,
    ENDS_READER,
    IN_TIERS,
    LEASE,
    ON_DEVICE,
    SHAPE,
    SNAPSHOT,
    Operation,
)
from .compare import compare
from .decide import ERROR_RULES, StepFacts, decide
from .events import Names, Place, event_lines
from .model import Changes, DumpIndex, KeySpace, diff, empty_dump, evictable, index_dump
from .phases import PHASE_RULES, Phase, phases
from .record import Frame, Recording, Side
from .ruling import rulings, settle
from .verdict import Context, judge
from .why import explain_step, key_text

Node = dict[str, Any]
View = dict[str, Any]

#: Tokens of a step shown before "…".
SHOWN_TOKENS = 8

#: Flags that mark a change (the rest describe the state).
CHANGE_FLAGS = frozenset(
    {"new", "grown", "split", "merged", "pin+", "pin-", "walk", "trimmed", "differs",
     "differs-stamp"}
)  # fmt: skip


@dataclass
class _Column:
    """What one side's views carry from step to step."""

    before: DumpIndex | None = None
    leases: dict[int, list[int]] = field(default_factory=dict)
    versions: dict[int, tuple[DumpIndex, Any, bool]] = field(default_factory=dict)
    inside: list[int] = field(default_factory=list)
    origin: str | None = None
    names: Names | None = None


def frame_views(recording: Recording) -> list[list[View]]:
    """Per frame, per implementation, the view (see the module docstring).

    Cost: O(frames * state size).
    """
    columns = [_Column() for _ in recording.names]
    keys = KeySpace()  # shared: the same token path is the same node on every side
    views: list[list[View]] = []
    for frame in recording.frames:
        row: list[View] = []
        states: list[tuple[DumpIndex | None, DumpIndex | None, Changes | None]] = []
        for column, side in zip(columns, frame.sides, strict=True):
            if BY_NAME[frame.step["op"]].resets:
                column.before = _fresh(frame.step, keys)
                column.leases, column.versions, column.inside = {}, {}, []
                column.origin = None
                column.names = None if frame.events is None else Names(frame.events)
            before = column.before
            _leaving(frame.step, side, column)
            view, after = side_view(frame, side, before, keys, column, recording)
            changes = None
            if after is not None and before is not None and before.block_size == after.block_size:
                changes = diff(before, after)
            states.append((before, after, changes))
            if column.origin:
                view["origin"] = column.origin
                column.origin = None
            column.before = after if after is not None else column.before
            if side.adopted is not None and side.adopted.dump is not None and after is not None:
                theirs = frame.sides[-1].name
                view["adopted"], adopted = side_view(
                    frame, side.adopted, before, keys, column, recording, who=theirs
                )
                column.before = adopted
                column.origin = (
                    f"starts from the state the kit adopted at step {frame.number} "
                    f"({theirs}'s choice), not the spec's own drawn there"
                )
            _track(frame.step, side, column, after)
            row.append(view)
        if len(row) == 2:
            _contrast(row, states, recording)
        views.append(row)
    for row, ruling in zip(views, rulings(recording), strict=True):
        # One ruling per step: the target's panel (and the adopted state's) marked from it.
        if len(row) == 2:
            settle(ruling, row[1], recording.deviations)
            if row[0].get("adopted") is not None:
                settle(ruling, row[0]["adopted"], recording.deviations)
        for view in row:
            view["ruling"] = ruling
    return views


def exit_differs(views: list[list[View]]) -> bool:
    """Whether any step's ruling is a difference (``explain`` exits 1). O(steps)."""
    return any(row[0]["ruling"].differs for row in views if row)


def _track(step: dict[str, Any], side: Side, column: _Column, after: DumpIndex | None) -> None:
    """Remember the leases (their blocks) and the snapshots (their versions) issued."""
    answer = (side.outcome or {}).get("ok")
    row = BY_NAME[step["op"]]
    if not isinstance(answer, dict) or after is None:
        return
    if row.issues == LEASE and answer.get(LEASE) is not None:
        column.leases[answer[LEASE]] = list(answer.get("blocks") or [])
    if row.issues == SNAPSHOT and answer.get(SNAPSHOT) is not None:
        column.versions[answer[SNAPSHOT]] = (after, answer.get("version"), row.enters)
        if row.enters:
            column.inside.append(answer[SNAPSHOT])


def _leaving(step: dict[str, Any], side: Side, column: _Column) -> None:
    """A reader that leaves at this step is not inside any more, at this step already:
    its version is not drawn beside the live tree (the readers' count says 0)."""
    row = BY_NAME[step["op"]]
    left = row.ends in (ENDS_EPOCH, ENDS_READER) and "ok" in (side.outcome or {})
    if left and step.get(SNAPSHOT) in column.inside:
        column.inside.remove(step[SNAPSHOT])


def _contrast(
    row: list[View],
    states: list[tuple[DumpIndex | None, DumpIndex | None, Changes | None]],
    recording: Recording,
) -> None:
    """Flag, in both trees, each node holding a block that differs from the other side."""
    (_, left, left_changes), (_, right, right_changes) = states
    if left is None or right is None:
        return
    names = [view["name"] for view in row]
    for index, (mine, other) in enumerate(((left, right), (right, left))):
        found = compare(mine, other, names[1 - index], stamps=recording.compares_recency)
        gone_here = (left_changes, right_changes)[index]
        gone_there = (right_changes, left_changes)[index]
        marked = found.marked()
        for node in all_nodes(row[index]["tree"]):
            if node["kind"] == "edge" and not node["id"].startswith("s"):
                keys = [mine.by_id[block] for block in node["blocks"] if block in mine.by_id]
                hits = [key for key in keys if key in marked]
                if not hits:
                    continue
                stamp_only = all(
                    key in found.stamps and key not in (found.only | found.ids | found.pins)
                    for key in hits
                )
                node["flags"].append("differs-stamp" if stamp_only else "differs")
                node["diff"] = "; ".join(found.text[key] for key in hits)
            elif node["kind"] == "ghost" and gone_here is not None and gone_there is not None:
                ghost_keys = node.get("keys", [])
                kept = [key for key in ghost_keys if key not in gone_there.gone]
                if kept:
                    node["flags"].append("differs")
                    ids = id_ranges(sorted(mine_before_ids(node, kept)))
                    node["diff"] = f"removed here, still cached in {names[1 - index]}: #{ids}"


def mine_before_ids(node: Node, kept: list[int]) -> list[int]:
    """The block ids of a ghost's blocks whose keys are ``kept``."""
    return [
        block
        for block, key in zip(node["blocks"], node.get("keys", []), strict=False)
        if key in kept
    ]


def _fresh(step: dict[str, Any], keys: KeySpace) -> DumpIndex | None:
    """The empty pool a reset asks for; None for one no tree accepts (R-LIMIT-*: a refused
    reset of 10**14 blocks draws nothing, rather than listing 10**14 free ids)."""
    try:
        check_pool(step["num_blocks"], step["block_size"])
        return index_dump(empty_dump(step["num_blocks"], step["block_size"]), keys)
    except (KeyError, ValueError):  # InvalidArgumentError is a ValueError
        return None


def side_view(
    frame: Frame,
    side: Side,
    before: DumpIndex | None,
    keys: KeySpace,
    column: _Column | None = None,
    recording: Recording | None = None,
    *,
    who: str | None = None,
) -> tuple[View, DumpIndex | None]:
    """One implementation's view of one frame, and its state index after it. O(state).

    ``who`` names whose choices the side shows when it is not ``side.name``: the adopted
    state at a declared step is the reference carrying out the target's choice, judged
    and explained as that choice."""
    column = column or _Column()
    op = frame.step["op"]
    view: View = {
        "name": side.name,
        "note": side.note,
        "step": describe_step(frame.step),
        "outcome": describe_outcome(op, side.outcome),
        "ok": side.outcome is not None and "error" not in side.outcome,
        "tree": [],
        "pool": None,
        "rules": [],
        "verdicts": [],
        "why": [],
        "sub": [],
        "counts": None,
        "blank": None,
        "events": None,
    }
    if side.outcome is not None and "error" in side.outcome and side.dump is None:
        # Refused before a tree was built (a reset with a bad pool): nothing to draw.
        kind = side.outcome["error"]
        view["rules"] = [
            [rule, f"the call is refused with {kind}"] for rule in ERROR_RULES.get(kind, ())
        ]
        view["verdicts"] = [""] * len(view["rules"])
        view["blank"] = f"refused with {kind}: no tree was built"
        view["why"] = [["why it was refused", [f"refused with {kind}: no tree was built"]]]
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
    labels: Labels = {}
    tree = build_tree(frame.step, side.outcome, before, after, changes, labels=labels)
    view["tree"] = tree
    view["pool"] = build_pool(before, after, changes)
    decisions = [(decision.rule, decision.reason) for decision in decide(facts)]
    is_spec = who is None and (not frame.sides or side is frame.sides[0])
    if is_spec:
        view["rules"] = [list(pair) for pair in decisions]
        view["verdicts"] = [""] * len(decisions)
    else:
        finding = frame.finding
        context = Context(
            facts,
            keys,
            frame.sides[0].outcome,
            dict(column.leases),
            dict(recording.deviations) if recording is not None else {},
            finding.rules if finding is not None else (),
            finding.cause if finding is not None else "",
        )
        judged = judge(context, decisions)
        view["rules"] = [[rule, text] for rule, text, _ in judged]
        view["verdicts"] = [verdict for _, _, verdict in judged]
    name = "" if is_spec else (who or side.name)
    view["why"] = [
        [title, lines]
        for title, lines in explain_step(
            frame.step, side.outcome, before, after, changes, keys, side.stats, name=name
        )
    ]
    view["clock"] = after.dump.get("clock")
    view["counts"] = counts(after, side.stats)
    view["blank"] = _blank(frame.step, side.outcome, after, changes)
    if side.events is not None and frame.events is not None:
        if column.names is None:
            column.names = Names(frame.events)
        view["events"] = _events(frame.step, side, before, after, tree, column.names)
    shown = _version(frame.step, side.outcome, after, column, side.stats)
    if shown is not None:
        tree.append(shown)
    found = phases(frame.step, side.outcome, before, after, changes, keys, name=name)
    view["sub"] = _sub_steps(
        frame.step, side.outcome, found, before, after, keys, view, shown, labels
    )
    view["rulesAt"] = _first_phase(found, [rule for rule, _ in view["rules"]])
    view["whyAt"] = _why_phases(found, [title for title, _ in view["why"]])
    return view, after


def _sub_steps(
    step: dict[str, Any],
    outcome: dict[str, Any],
    found: list[Phase],
    before: DumpIndex,
    after: DumpIndex,
    keys: KeySpace,
    view: View,
    version: Node | None,
    labels: Labels | None = None,
) -> list[dict[str, Any]]:
    """Each phase as the page draws it: its text and rule, its own tree, pool, counts and
    clock (the last phase's are the step's own), and the nodes and cells to point at.
    O(phases * state)."""
    said = outcome.get("ok")
    answer: dict[str, Any] = said if isinstance(said, dict) else {}
    path = [after.by_id[block] for block in answer.get("blocks") or [] if block in after.by_id]
    # Phases that leave the trie as it was (an allocation, the walk) share one tree: the
    # phases' dumps then share their "namespaces" (spec/explain/phases.py).
    drawn: dict[tuple[int, bool], tuple[DumpIndex, list[Node], dict[str, dict[int, str]]]] = {}
    subs = []
    for number, phase in enumerate(found):
        walking = phase.kind == "walk"
        known = drawn.get((id(phase.state["namespaces"]), walking))
        if number == len(found) - 1:
            state, tree, pool = after, view["tree"], view["pool"]
            shown, where = view["counts"], _places(tree)
        elif known is not None:
            index, tree, where = known
            state = DumpIndex(phase.state, index.blocks, index.by_id, index.roots, index.children)
            pool = build_pool(before, state, diff(before, state))
            shown = counts(state, None)
        else:
            state = before if phase.state is before.dump else index_dump(phase.state, keys)
            changes = diff(before, state)
            # The walk is pointed at (the sub-step's nodes), not flagged: one tree for it.
            used = {
                key for key in path if not walking
                and key in state.blocks and state.blocks[key].block == after.blocks[key].block
            }  # fmt: skip
            tree = build_tree(step, outcome, before, state, changes, used, labels)
            if version is not None:
                tree.append(version)
            where = _places(tree)
            drawn[id(phase.state["namespaces"]), walking] = (state, tree, where)
            pool = build_pool(before, state, changes)
            shown = counts(state, None)
        subs.append({
            "t": phase.text, "r": phase.rule, "k": phase.kind, "b": phase.blocks,
            "n": _pointed(phase, where), "tree": tree, "pool": pool, "counts": shown,
            "clock": state.dump.get("clock"), "dump": phase.state,
        })  # fmt: skip
    return subs


def _places(tree: list[Node]) -> dict[str, dict[int, str]]:
    """Per node kind (edge, ghost), the id of the node holding each block. O(tree)."""
    where: dict[str, dict[int, str]] = {"edge": {}, "ghost": {}}
    for node in all_nodes(tree):
        if node["kind"] in where and not node["id"].startswith("s"):
            for block in node["blocks"]:
                where[node["kind"]].setdefault(block, node["id"])
    return where


def _pointed(phase: Phase, where: dict[str, dict[int, str]]) -> list[str]:
    """The node ids holding the phase's blocks (or its root), by :func:`_places`. O(blocks)."""
    # An id evicted and handed out again in one step is on a ghost and on an edge: an
    # eviction points at the ghost, every later phase at the edge that holds it now.
    order = ("ghost", "edge") if phase.kind == "evicting" else ("edge", "ghost")
    ids = [
        next(where[kind][block] for kind in order if block in where[kind])
        for block in phase.blocks
        if any(block in where[kind] for kind in order)
    ]
    if phase.root is not None and not ids:
        ids = [f"r{phase.root}"]
    return list(dict.fromkeys(ids))


def _first_phase(found: list[Phase], rules: list[str]) -> list[int]:
    """Per rule, the first phase that carries it out; a rule about the step's result
    (every block cached, R-INS-1) belongs to its last phase; -1 for a step without
    phases. O(rules * phases)."""
    at = []
    for rule in rules:
        number = next(
            (index for index, phase in enumerate(found) if rule in PHASE_RULES.get(phase.kind, ())),
            len(found) - 1,
        )
        at.append(number)
    return at


#: The phases each section of the "why" is about, by the start of its title.
WHY_PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("match walk", ("walk",)),
    ("eviction", ("evicting",)),
    ("free list", ("reclaiming", "evicting", "allocation")),
    ("pins", ("pin", "unpin")),
    ("readers and quarantine", ("reclaiming", "evicting")),
)


def _why_phases(found: list[Phase], titles: list[str]) -> list[int]:
    """Per "why" section, the first phase it is about (-1: the step as a whole)."""
    at = []
    for title in titles:
        kinds = next((kinds for start, kinds in WHY_PHASES if title.startswith(start)), ())
        at.append(next((index for index, phase in enumerate(found) if phase.kind in kinds), -1))
    return at


def _events(
    step: dict[str, Any],
    side: Side,
    before: DumpIndex,
    after: DumpIndex,
    tree: list[Node],
    names: Names,
) -> list[dict[str, Any]]:
    """The side's event batches of the step, each event named by this side's blocks and
    drawn nodes (see :func:`kachedb_radix.spec.explain.events.event_lines`). O(cached
    blocks + events)."""
    edges: dict[int, str] = {}
    ghosts: dict[int, str] = {}
    for node in all_nodes(tree):
        if node["kind"] == "edge":
            edges.update(dict.fromkeys(node["blocks"], node["id"]))
        elif node["kind"] == "ghost":
            ghosts.update(dict.fromkeys(node["blocks"], node["id"]))
    answer = (side.outcome or {}).get("ok")
    fills = BY_NAME[step["op"]].fills is not None  # its new blocks are one stored run
    run = answer.get("blocks") if fills and isinstance(answer, dict) else None
    place = Place(names.of(after), names.of(before), after, before, edges, ghosts)
    if isinstance(run, list):
        place.run = [block for block in run if isinstance(block, int)]
    return event_lines(side.events or [], place, side.event_marks)


def counts(state: DumpIndex, stats: dict[str, Any] | None) -> str:
    """The pool in words, read off the state's dump: ``14 blocks: 3 cached (0 pinned, 3
    evictable), 11 free`` (ids taken for a new edge not yet hung, and quarantined ones,
    when there are). Where ``stats`` (the side's own, after the step) say otherwise, it
    says so. O(state)."""
    size = state.dump.get("num_blocks", 0)
    numbers = {
        "cached": len(state.blocks),
        "pinned": sum(1 for block in state.blocks.values() if block.pin),
        "evictable": evictable(state),
        "free": len(state.free),
    }
    text = (
        f"{size} blocks: {numbers['cached']} cached ({numbers['pinned']} pinned, "
        f"{numbers['evictable']} evictable), {numbers['free']} free"
    )
    if state.quarantine:
        text += f", {len(state.quarantine)} quarantined"
    taken = state.dump.get("taken") or []
    if taken:
        text += f", {len(taken)} taken for the new edge"
    if stats is not None:
        said = [f"{name} {stats[name]}" for name, value in numbers.items()
                if isinstance(stats.get(name), int) and stats[name] != value]  # fmt: skip
        if said:
            text += f" (its stats say {', '.join(said)})"
    return text


def _blank(
    step: dict[str, Any], outcome: dict[str, Any], after: DumpIndex, changes: Changes
) -> str | None:
    """A sentence for a canvas with nothing changed to show: an empty tree, a refusal."""
    row = BY_NAME[step["op"]]
    if "error" in outcome:
        return f"refused with {outcome['error']}: nothing changed (see why)"
    if after.roots or changes.namespaces_removed or changes.gone:
        return None
    size = after.dump.get("num_blocks", 0)
    if row.resets:
        return (
            f"a fresh tree: nothing cached yet, all {size} blocks of the pool free, "
            f"{after.block_size} tokens per block"
        )
    if _looks_up(row):
        namespace = step.get("namespace")
        label = "the default namespace" if namespace is None else f"namespace {namespace!r}"
        return f"nothing is cached in {label}: the walk stops at the root, 0 tokens match"
    return "the tree is empty: nothing is cached"


def _version(
    step: dict[str, Any],
    outcome: dict[str, Any],
    after: DumpIndex,
    column: _Column,
    stats: dict[str, Any] | None = None,
) -> Node | None:
    """The version a snapshot sees, drawn beside the live tree: the one the step names,
    else the newest reader inside whose version is not the live one (none once the
    side's stats count no reader inside)."""
    row = BY_NAME[step["op"]]
    handle: Any = None
    reads = row.handle is not None and row.handle.handle == SNAPSHOT and row.ends is None
    if reads and step.get(SNAPSHOT) in column.versions:
        handle = step[SNAPSHOT]
    elif stats is None or stats.get("readers") != 0:
        for inside in reversed(column.inside):
            seen = column.versions[inside][0]
            if seen.dump.get("namespaces") != after.dump.get("namespaces"):
                handle = inside
                break
    if handle is None:
        return None
    index, version, reader = column.versions[handle]
    used: set[int] = set()
    answer = outcome.get("ok")
    if reads and row.prompts and isinstance(answer, dict):  # a match on the snapshot
        used = {index.by_id[block] for block in answer.get("blocks", []) if block in index.by_id}
    roots = build_tree({"op": SHAPE.name}, {"ok": {}}, index, index, Changes(), used)
    for node in all_nodes(roots):
        node["id"] = f"s{handle}:{node['id']}"
    who = f"reader {handle}" if reader else f"snapshot {handle}"
    lines = [
        f"{who}: version {version}",
        "what it sees: frozen when taken",
        "the live tree is on the left",
    ]
    if not roots:
        lines[1] = "what it sees: an empty tree"
    return {
        "id": f"v{handle}",
        "kind": "version",
        "lines": lines,
        "blocks": [],
        "flags": ["version"],
        "children": roots,
    }


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
            parts.append(f"{name}={_shown(value)}")
    return " ".join(parts)


def _shown(value: Any) -> str:
    """``value`` as JSON with its characters as they are (``"ténant 🌍"``, not escapes);
    escaped where it holds what UTF-8 cannot write (a lone surrogate). O(len)."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value)
    return text


def describe_outcome(op: str, outcome: dict[str, Any] | None) -> str:
    """The outcome in words, as the operation's row says what its answer is: ``matched
    8 tokens: #0-1, lease 1``. O(size)."""
    if outcome is None:
        return "not run"
    if "error" in outcome:
        return f"error: {outcome['error']}"
    answer = outcome.get("ok")
    if not isinstance(answer, dict):
        return "ok"
    row = BY_NAME[op]
    lease = f", lease {answer[LEASE]}" if answer.get(LEASE) is not None else ""
    if row.fills is not None and isinstance(answer.get(row.fills), int):  # caches new blocks
        return (
            f"cached {answer.get('length')} tokens: reused {answer.get('reused')}, "
            f"allocated {id_ranges(answer.get(row.allocates, [])) or 'none'}, "
            f"evicted {id_ranges(answer.get(row.frees or '', [])) or 'none'}{lease}"
        )
    if _looks_up(row):
        blocks = id_ranges(answer.get("blocks", []))
        return f"matched {answer.get('length')} tokens" + (f": #{blocks}" if blocks else "") + lease
    if row.enters:
        return (
            f"reader {answer.get(SNAPSHOT)} entered epoch {answer.get('epoch')} "
            f"at version {answer.get('version')}"
        )
    if row.issues == SNAPSHOT:
        return f"snapshot {answer.get(SNAPSHOT)} of version {answer.get('version')}"
    if row.clears is not None:
        if answer.get(row.clears) is True:
            return "cleared the whole cache: every cached block freed"
        return "not cleared: a block is in use, nothing changed"
    if row.counts:
        return ", ".join(f"{name} {value}" for name, value in answer.items())
    if row.view is not None and not row.shape:  # the names view
        return f"{op}: " + ", ".join(json.dumps(name) for name in answer[op])
    if not (row.reads or row.stream) and row.answer is not None and len(row.answer) == 1:
        field = row.answer[0]  # the blocks it freed or gave back
        return f"{field} {id_ranges(answer.get(field, [])) or 'nothing'}"
    return "ok"


def _looks_up(row: Operation) -> bool:
    """Whether ``row`` answers the cached prefix of a prompt and changes no shape: a match,
    on the tree or on a snapshot."""
    return row.prompts and row.fills is None and row.finds != IN_TIERS


#: What a dump edge is drawn with whatever the step changed (its label, a leaf's eviction
#: key), by the edge's identity: the phases of a step share the edges they leave alone.
Labels = dict[int, tuple[dict[str, Any], list[str], str | None]]


def build_tree(
    step: dict[str, Any],
    outcome: dict[str, Any],
    before: DumpIndex,
    after: DumpIndex,
    changes: Changes,
    used: set[int] | None = None,
    labels: Labels | None = None,
) -> list[Node]:
    """The display tree: namespace roots, edges and ghosts (see the module docstring);
    ``used`` overrides the keys marked ``walk`` (by default those the step's answer names).

    O(cached blocks before and after).
    """
    answer = outcome.get("ok")
    if used is None:
        used = set()
        if BY_NAME[step["op"]].finds == ON_DEVICE and isinstance(answer, dict):
            used = {after.by_id[b] for b in answer.get("blocks", []) if b in after.by_id}
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
            node = _edge_node(edge, size, after, changes, used, labels)
            parent["children"].append(node)
            for block in edge["blocks"]:
                by_key[after.by_id[block]] = node
            pending.extend((child, node) for child in reversed(edge["children"]))
    for name in changes.namespaces_removed:
        roots[name] = _root_node(before.roots[name], name, "ghost")
    _hang_ghosts(before, changes, by_key, roots)
    return [roots[name] for name in sorted(roots, key=namespace_order)]


def namespace_order(name: str | None) -> tuple[bool, str]:
    """Namespace roots are drawn the default first, then by name: the same order at
    every step, whichever came or went. O(len(name))."""
    return (name is not None, name or "")


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
    edge: dict[str, Any],
    size: int,
    after: DumpIndex,
    changes: Changes,
    used: set[int],
    labels: Labels | None = None,
) -> Node:
    blocks: list[int] = edge["blocks"]
    keys = [after.by_id[block] for block in blocks]
    pins = edge.get("pins") or [0] * len(blocks)
    stamps = edge.get("stamps")
    known = labels.get(id(edge)) if labels is not None else None
    if known is not None and known[0] is edge:
        lines, key = known[1], known[2]
    else:
        lines, key = _label(edge, size, after, keys[-1], pins, stamps)
        if labels is not None:
            labels[id(edge)] = (edge, lines, key)
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
    return {
        "id": f"k{keys[0]}",
        "kind": "edge",
        "lines": lines,
        "blocks": blocks,
        "tokens": list(edge["tokens"]),
        "pins": pins,
        "stamps": stamps,
        "key": key,
        "flags": flags,
        "children": [],
    }


def _label(
    edge: dict[str, Any],
    size: int,
    after: DumpIndex,
    last: int,
    pins: list[int],
    stamps: list[int | None] | None,
) -> tuple[list[str], str | None]:
    """An edge's display lines and, for a leaf, its eviction key under the tree's policy
    (R-POL-1). O(edge length)."""
    # A block hung by a sub-step before the clock moved has no stamp yet: "t=?".
    shown = ["?" if stamp is None else stamp for stamp in stamps or [0]]
    parts = describe_edge({**edge, "pins": pins, "stamps": shown}, size).split("  ")
    lines = [parts[0], "  ".join(parts[1:-1])]
    if stamps is not None:
        lines.append(parts[-1])
    tail = after.blocks[last]
    leaf = after.is_leaf_tail(tail.key) and tail.stamp is not None
    return lines, key_text(after, tail) if leaf else None


def _hang_ghosts(
    before: DumpIndex, changes: Changes, by_key: dict[int, Node], roots: dict[str | None, Node]
) -> None:
    """Draw each removed run of blocks where it hung before the step; a run whose parent
    went too joins its parent's ghost, so a removed subtree is one node (its block count,
    ids and edge count) hanging where its top was."""
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
        below = ""
        ids = [before.blocks[key].block for key in gone]
        if not kept and parent in before.blocks and parent in changes.gone:
            # The whole run went with its parent: one ghost for the removed subtree.
            ghost = ghosts[before.blocks[parent].edge]
            ghost["blocks"] = [*ghost["blocks"], *ids]
            ghost["keys"] = [*ghost["keys"], *gone]
            ghost["edges"] += 1
            ghost["lines"] = _ghost_lines(ghost["blocks"], ghost["edges"], ghost["below"])
            ghosts[first] = ghost
            continue
        if kept:
            # Only a leaf edge loses its tail, and one after-node holds it.
            anchor = by_key[kept[-1]]
            anchor["flags"].append("trimmed")
        elif parent in by_key:
            anchor = by_key[parent]
            if anchor["blocks"][-1] != before.blocks[parent].block:
                # Its parent's edge was merged with the chain below it: say where it hung.
                below = f"hung below #{before.blocks[parent].block}"
        else:
            anchor = roots[before.blocks[members[0]].namespace]
        ghost = {
            "id": f"g{gone[0]}",
            "kind": "ghost",
            "lines": _ghost_lines(ids, 1, below),
            "below": below,
            "blocks": ids,
            "keys": gone,
            "edges": 1,
            "flags": ["ghost"],
            "children": [],
        }
        anchor["children"].append(ghost)
        ghosts[first] = ghost


def _ghost_lines(ids: list[int], edges: int, below: str = "") -> list[str]:
    noun = "block" if len(ids) == 1 else "blocks"
    lines = [f"removed {len(ids)} {noun}", f"#{id_ranges(sorted(ids))}"]
    if edges > 1:
        lines.append(f"a subtree of {edges} edges")
    if below:
        lines.append(below)
    return lines


def build_pool(before: DumpIndex, after: DumpIndex, changes: Changes) -> dict[str, Any]:
    """The pool strip's data: every id's state and what the step did to it. O(pool)."""
    return {
        "size": after.dump["num_blocks"],
        "free": after.free,
        "quarantine": after.quarantine,
        "taken": list(after.dump.get("taken") or []),
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
