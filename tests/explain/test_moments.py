"""One state per moment (issue 38, item 1): every sub-step of every scenario, and the
adopted state, drawn as the state of that moment.

A step's phases (:mod:`kachedb_radix.spec.explain.phases`) each carry the dump of their
moment. Here each phase's dump is checked to be what the moves before it lead to (the
last one the dump after the step, the first ones the state before it), and in a real
browser every sub-step of every built-in scenario, and of the demo beside SGLang with
its adopted states, is opened and its drawing read back: each drawn edge is an edge of
that phase's dump with its ids, pins and stamps; when nothing is folded every edge of
the dump is drawn; the pool's cells are the dump's free, quarantined, taken, pinned and
cached ids; the counts line says the dump's numbers; the clock is the dump's.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from kachedb_radix.reference.render import describe_edge
from kachedb_radix.spec.explain import SCENARIOS, build_page, frame_views, record, scenario
from kachedb_radix.spec.explain.model import KeySpace, empty_dump, index_dump
from kachedb_radix.spec.explain.phases import phases
from kachedb_radix.spec.explain.record import Recording
from kachedb_radix.spec.explain.view import View

#: Reads back, for every step and sub-step, what each side draws (one call per page,
#: answered as one JSON string: Playwright's own serialization of so many small objects
#: takes longer than drawing them).
WALK = """() => {
  const api = window.kachedbExplain, out = [];
  api.state.animate = false;
  const read = () => Array.from(document.querySelectorAll("section.side")).map((section) => {
    const svg = section.querySelector("svg.tree");
    return {
      side: section.dataset.side, sub: +svg.dataset.sub, tree: svg.dataset.tree,
      clock: svg.dataset.clock, counts: section.querySelector(".counts").textContent,
      nodes: Array.from(svg.querySelectorAll("g.node")).map((g) => [g.dataset.node,
        g.dataset.kind, g.dataset.blocks, Array.from(g.querySelectorAll("tspan"), (t) =>
        t.textContent).slice(1, 3)]),
      cells: Array.from(section.querySelectorAll("svg.pool rect.cell"), (c) => c.dataset.state)
        .join(" "),
    };
  });
  for (let step = 0; step < api.steps(); step++) {
    for (let sub = -1; sub < api.subCount(step); sub++) {
      api.go(step, sub);
      out.push([step, sub, false, read()]);
    }
    const adopted = document.querySelector("section.side .adopted:not([hidden]) .show-adopted");
    if (adopted) {
      adopted.click();
      for (let sub = -1; sub < api.subCount(step); sub++) {
        api.go(step, sub);
        out.push([step, sub, true, read()]);
      }
      adopted.click();
    }
  }
  return JSON.stringify(out);
}"""

COUNTS = re.compile(
    r"(?P<size>\d+) blocks: (?P<cached>\d+) cached \((?P<pinned>\d+) pinned, "
    r"(?P<evictable>\d+) evictable\), (?P<free>\d+) free"
    r"(?:, (?P<quarantined>\d+) quarantined)?(?:, (?P<taken>\d+) taken for the new edge)?$"
)


def _edges(dump: dict[str, Any]) -> list[dict[str, Any]]:
    found, pending = [], [edge for space in dump["namespaces"] for edge in space["children"]]
    while pending:
        edge = pending.pop()
        found.append(edge)
        pending.extend(edge["children"])
    return found


def _label(edge: dict[str, Any], size: int) -> list[str]:
    """An edge's ids-and-pins line and its stamps line, as the dump gives them."""
    stamps = ["?" if stamp is None else stamp for stamp in edge.get("stamps") or [0]]
    pins = edge.get("pins") or [0] * len(edge["blocks"])
    parts = describe_edge({**edge, "pins": pins, "stamps": stamps}, size).split("  ")
    return ["  ".join(parts[1:-1]), parts[-1]]


def _cells(dump: dict[str, Any]) -> list[str]:
    """Each block id's state, read off the dump alone."""
    states = ["cached"] * dump["num_blocks"]
    for edge in _edges(dump):
        for block, pin in zip(edge["blocks"], edge.get("pins") or [], strict=False):
            if pin:
                states[block] = "pinned"
    for name, state in (("free", "free"), ("quarantine", "quarantined"), ("taken", "taken")):
        for block in dump.get(name) or []:
            states[block] = state
    return states


def _numbers(dump: dict[str, Any]) -> dict[str, int]:
    """The counts a dump gives: its pool, cached, pinned (a pinned block's ancestors are
    pinned too: pins are taken root to leaf), free, quarantined and taken ids."""
    blocks = [pin for edge in _edges(dump) for pin in edge.get("pins") or [0] * len(edge["blocks"])]
    pinned = sum(1 for pin in blocks if pin)
    found = {
        "size": dump["num_blocks"], "cached": len(blocks), "pinned": pinned,
        "evictable": len(blocks) - pinned, "free": len(dump["free"]),
    }  # fmt: skip
    for name, key in (("quarantined", "quarantine"), ("taken", "taken")):
        if dump.get(key):
            found[name] = len(dump[key])
    return found


def _dump_of(recording: Recording, views: list[list[View]], step: int, side: int,
             sub: int, adopted: bool) -> dict[str, Any]:  # fmt: skip
    view = views[step][side]
    recorded = recording.frames[step].sides[side]
    if adopted:
        view, recorded = view["adopted"], recorded.adopted  # type: ignore[assignment]
    if sub >= 0:
        dump: dict[str, Any] = view["sub"][sub]["dump"]
        return dump
    assert recorded is not None and recorded.dump is not None
    return recorded.dump


def check_moments(recording: Recording, views: list[list[View]], walked: list[Any]) -> int:
    """Every moment the page drew is its phase's dump (module docstring); the number of
    moments checked."""
    checked = 0
    names = recording.names
    for step, sub, adopted, row in walked:
        for index, drawn in enumerate(row):
            assert drawn["side"] == names[index]
            if recording.frames[step].sides[index].dump is None:
                continue  # nothing drawn: a side that did not run, or a refused reset
            at = drawn["sub"]
            assert at == (-1 if sub < 0 else min(sub, len(views[step][index]["sub"]) - 1))
            shown = adopted and index == 0 and views[step][0].get("adopted") is not None
            assert (drawn["tree"] == "adopted") == shown
            dump = _dump_of(recording, views, step, index, at, shown)
            where = f"step {step + 1}, sub-step {at + 1}, {names[index]}, adopted {shown}"
            edges = {tuple(edge["blocks"]): edge for edge in _edges(dump)}
            size = dump["block_size"]
            seen = set()
            for node_id, kind, blocks, lines in drawn["nodes"]:
                if kind != "edge" or node_id.startswith("s"):
                    continue
                ids = tuple(int(block) for block in blocks.split())
                assert ids in edges, f"{where}: #{ids} is no edge of the dump"
                assert lines == _label(edges[ids], size)[: len(lines)], where
                seen.add(ids)
            if not any(kind in ("more", "chain") for _, kind, _, _ in drawn["nodes"]):
                assert seen == set(edges), f"{where}: drawn {sorted(seen)}, dump {sorted(edges)}"
            assert drawn["cells"] == " ".join(_cells(dump)), where
            said = COUNTS.match(drawn["counts"])
            assert said is not None, f"{where}: {drawn['counts']!r}"
            numbers = {name: int(value) for name, value in said.groupdict().items() if value}
            assert numbers == _numbers(dump), where
            assert drawn["clock"] == str(dump["clock"]), where
            checked += 1
    return checked


@functools.cache
def _scenario(name: str) -> tuple[Recording, Any]:
    """A scenario on the reference alone, and its views (recorded once for this module)."""
    return _recorded(name)


def _recorded(name: str, target: Any = None, profile: Any = None) -> tuple[Recording, Any]:
    chosen = scenario(name)
    recording = record(chosen.steps, target, title=chosen.title, source=name, profile=profile)
    return recording, frame_views(recording)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_each_phase_is_the_state_its_moves_lead_to(name: str) -> None:
    """In Python, for every step of every scenario on the reference: the phases start
    from the state before the step (the walk draws it) and end in the dump after it, no
    step falls back to "the state after" (each one is taken apart), each phase's counts
    are its dump's, and a merge is a phase of its own."""
    recording, views = _scenario(name)
    keys = KeySpace()
    before = None
    for frame, row in zip(recording.frames, views, strict=True):
        side, view = frame.sides[0], row[0]
        if frame.step["op"] == "reset":
            before = empty_dump(frame.step["num_blocks"], frame.step["block_size"])
        if side.dump is None or before is None:
            continue
        subs = view["sub"]
        if subs:
            assert subs[-1]["dump"] == side.dump
            assert all(sub["k"] != "after" for sub in subs), (frame.number, subs)
            walks = [sub for sub in subs if sub["k"] == "walk"]
            assert all(sub["dump"] == before for sub in walks)
            for sub in subs:
                assert _numbers(sub["dump"]) == {
                    key: int(value)
                    for key, value in COUNTS.match(sub["counts"]).groupdict().items()  # type: ignore[union-attr]
                    if value
                }
        before = side.dump
    found = phases(
        recording.frames[0].step, {"error": "x"}, index_dump(empty_dump(1, 1), keys),
        index_dump(empty_dump(1, 1), keys), None, keys,  # type: ignore[arg-type]
    )  # fmt: skip
    assert found == []  # a refused call has no phases


def test_a_merge_is_its_own_sub_step() -> None:
    """Demo step 18: #7 and #6 go, then #2-3 and #8-9 merge into one chain (R-DUMP-2),
    then #9 goes: each its own sub-step, each drawn on its own state."""
    _, views = _scenario("demo")
    subs = views[17][0]["sub"]
    kinds = [sub["k"] for sub in subs]
    assert kinds[3:7] == ["evicting", "evicting", "merge", "evicting"]
    assert subs[5]["r"] == "R-DUMP-2" and "#2-3 and #8-9 as one chain" in subs[5]["t"]
    assert [edge["blocks"] for edge in _edges(subs[4]["dump"])].count([8, 9]) == 1
    assert [2, 3, 8, 9] in [edge["blocks"] for edge in _edges(subs[5]["dump"])]
    assert subs[6]["dump"]["free"] == [6, 7, 9, 12, 13]


def test_every_sub_step_of_every_scenario_draws_its_phase(browser: Any, tmp_path: Path) -> None:
    """The browser walk: every step and sub-step of the eight scenarios, and the demo beside
    SGLang 0.5.23 (both sides, the adopted state at its declared step), drawn as its
    phase's dump."""
    from tests.explain.test_profile import sglang_target

    pages: list[tuple[str, Recording, Any]] = []
    for name in SCENARIOS:
        pages.append((name, *_scenario(name)))
    target = sglang_target()
    candidate = target.open()
    try:
        pages.append(("demo-sglang", *_recorded("demo", candidate, target.profile)))
    finally:
        candidate.close()
    total = 0
    for name, recording, views in pages:
        path = tmp_path / f"{name}.html"
        path.write_text(build_page(recording, views), encoding="utf-8")
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        problems: list[str] = []
        page.on("pageerror", lambda error, seen=problems: seen.append(str(error)))
        page.goto(path.as_uri())
        walked = json.loads(page.evaluate(WALK))
        page.close()
        assert problems == []
        total += check_moments(recording, views, walked)
        if name == "demo-sglang":
            assert any(adopted for _, _, adopted, _ in walked)
    assert total > 1500
