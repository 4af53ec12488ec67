"""The text mode: every step in the terminal, with the same facts the page shows.

Per step: the note, each implementation's operation and outcome, the rules that
decided it, what changed (new and evicted blocks, split points, pins), the "why"
panel, the KV event batches it emitted (when the trace's reset names an events scheme:
each event one line, ``+`` stored, ``-`` removed, ``∅`` cleared, ``≠`` where the other
side's differ), and the tree drawn by :func:`kachedb_radix.reference.render.render_dump`
whenever the state changed. Steps where a target parts ways with the reference are marked
``≠``; the first one also in the summary line at the end.
"""

from __future__ import annotations

from typing import Any

from kachedb_radix.reference.render import id_ranges, render_dump

from .record import Recording, finding_line
from .ruling import Ruling
from .view import View, all_nodes


def text_report(recording: Recording, views: list[list[View]]) -> str:
    """The whole recording as text. O(frames * state size)."""
    lines = [f"kachedb-radix explain: {recording.title}  ({recording.source})"]
    if recording.lesson:
        lines.append(recording.lesson)
    total = len(recording.frames)
    for frame, row in zip(recording.frames, views, strict=True):
        trace = f" · trace {frame.trace}" if frame.trace else ""
        note = f"  {frame.step['note']}" if frame.step.get("note") else ""
        lines += ["", f"── step {frame.number}/{total}{trace} ──{note}"]
        ruling: Ruling = row[0]["ruling"]  # the step's one ruling, as the page says it
        if ruling.differs:
            stamps = " (stamps only)" if ruling.kind == "minor" else ""
            rules = ", ".join(ruling.rules("departs")) or "?"
            lines.append(
                f"≠ {row[-1]['name']} parts ways with the reference at {ruling.where}{stamps}: "
                f"{rules}: {ruling.cause}"
            )
            if frame.finding is not None and not ruling.refused:
                lines.append(f"  {finding_line(frame.finding)}")
            if frame.events_late is not None and (ruling.where or "").startswith("events"):
                lines.append(
                    f"  (the kit compared step {frame.events_late}'s KV events only here: "
                    "it stopped at that step's finding first)"
                )
        declared = [(mark.rule, mark.reason) for mark in ruling.marks if mark.status == "declared"]
        if declared:
            said = "; ".join(
                f"{rule} ({reason.removeprefix('declared: ')})" for rule, reason in declared
            )
            lines.append(f"declared: {said}")
        if ruling.kind == "not compared":
            lines.append(f"≈ not compared: {ruling.cause}")
        compared = ruling.kind != "not compared"
        if compared and frame.events_differ is not None and not (ruling.where or "").startswith(
            "events"
        ):
            lines.append(f"≠ their KV events differ (first at {frame.events_differ})")
        for view, side in zip(row, frame.sides, strict=True):
            lines += _side(view, side.dump)
    kinds = [row[0]["ruling"].kind for row in views if row]
    first = next((index for index, row in enumerate(views) if row and row[0]["ruling"].differs),
                 None)  # fmt: skip
    if len(recording.names) > 1:
        steps = len(recording.frames)
        verdict = (
            f"first difference at step {first + 1} of {steps}"
            if first is not None
            else f"no difference in {steps} step{'s' * (steps != 1)}"
        )
        waived = kinds.count("not compared")
        if waived:
            verdict += f" ({waived} step{'s' * (waived > 1)} not compared)"
        declaring = kinds.count("declared")
        if declaring:
            verdict += f"; {declaring} declared difference{'s' * (declaring > 1)}"
        lines += ["", f"{recording.names[1]} against the reference: {verdict}"]
    return "\n".join(lines)


def _side(view: View, dump: dict[str, Any] | None) -> list[str]:
    lines = [f"{view['name']}: {view['step']}  →  {view['outcome']}"]
    if view["note"]:
        lines.append(f"  {view['note']}")
    if view.get("adopted"):
        lines.append(f"  the kit then adopts: {view['adopted']['outcome']}")
        if view["adopted"].get("events") is not None:
            lines += ["  " + line for line in _events(view["adopted"] | {"step": view["step"]})]
    if view.get("origin"):
        lines.append(f"  {view['origin']}")
    if view["rules"]:
        verdicts = view.get("verdicts") or [""] * len(view["rules"])
        marks = {"follows": "✓ ", "departs": "✗ "}
        said = [
            f"{marks.get(verdict, '')}{rule} {reason}"
            for (rule, reason), verdict in zip(view["rules"], verdicts, strict=True)
        ]
        lines.append("  rules: " + "; ".join(said))
    if view.get("blank"):
        lines.append(f"  ({view['blank']})")
    changed = _changes(view)
    if changed:
        lines.append("  changed: " + " · ".join(changed))
    for title, body in view["why"]:
        lines.append(f"  {title}: " + " | ".join(body))
    lines += _events(view)
    if dump is not None and changed:
        lines += ["    " + line for line in render_dump(_complete(dump)).splitlines()]
    return lines


#: How an event's line starts, by its kind.
EVENT_SIGNS = {"stored": "+", "removed": "-", "cleared": "∅"}


def _events(view: View) -> list[str]:
    """The side's KV event batches of the step, an event a line ([] when events are off)."""
    batches = view.get("events")
    if batches is None:
        return []
    if not any(batch["lines"] or batch.get("note") for batch in batches):
        why = (
            "a fresh cache has nothing to report"
            if view["step"].startswith("reset")
            else "no block became cached or stopped being cached (R-EVENT-1)"
        )
        return [f"  events: none: {why}"]
    lines = []
    for number, batch in enumerate(batches, 1):
        ts = "" if batch.get("ts") is None else f", ts {batch['ts']:g}"
        note = f" -- {batch['note']}" if batch.get("note") else ""
        mark = "≠ " if batch.get("x") else ""
        lines.append(f"  {mark}events, batch {number} of {len(batches)}{ts}:{note}")
        for line in batch["lines"]:
            lines.append(f"    {'≠ ' if line['x'] else ''}{EVENT_SIGNS[line['k']]} {line['t']}")
    return lines


def _changes(view: View) -> list[str]:
    found: list[str] = []
    pool = view["pool"] or {}
    for name in ("allocated", "evicted", "freed", "quarantined", "reclaimed"):
        if pool.get(name):
            found.append(f"{name} #{id_ranges(pool[name])}")
    for flag, label in (("split", "split before"), ("pin+", "pinned"), ("pin-", "unpinned")):
        ids = [
            node["blocks"][0]
            for node in all_nodes(view["tree"])
            if node["kind"] == "edge" and flag in node["flags"]
        ]
        if ids:
            found.append(f"{label} #{', #'.join(map(str, ids))}")
    return found


def _complete(dump: dict[str, Any]) -> dict[str, Any]:
    """``dump`` with pins and stamps filled in where a target left them out."""
    complete = dict(dump)
    complete.setdefault("free", [])
    complete.setdefault("clock", 0)

    def fill(edge: dict[str, Any]) -> dict[str, Any]:
        zeros = [0] * len(edge["blocks"])
        return {
            **edge,
            "pins": edge.get("pins") or zeros,
            "stamps": edge.get("stamps") or zeros,
            "children": [fill(child) for child in edge["children"]],
        }

    complete["namespaces"] = [
        {**space, "children": [fill(edge) for edge in space["children"]]}
        for space in dump["namespaces"]
    ]
    return complete
