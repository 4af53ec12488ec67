"""The explain page in a real browser: headless Chromium (Debian's ``chromium``) driven
by Playwright for Python, which needs no browser download of its own.

Every step of the pages is visited with the keys and the slider, and each step's SVG
is checked node for node against the Python side: the same nodes (``data-node``),
kinds, blocks and change flags, at the same places (the page's layout is the twin
of :mod:`kachedb_radix.spec.explain.layout`), and the same pool cells. Folded nodes open on a
click, pan and zoom move the view, rule links open the rule's text, and the console
stays free of errors. Each scenario's page also answers a student's questions where they
arise (an empty canvas explained, a refusal's numbers, the reader's version drawn, the
full eviction order, stable namespace order, every change styled, a legend in view), a
reviewer's page shows a peer's declared differences with both outcomes, play, sub-steps,
permalinks and refit on resize work, and the playground answers over a real socket
(``tests/explain/test_playground.py``). A wrong page fails these tests.

Without Chromium or Playwright the tests skip and say so -- unless
``KACHEDB_RADIX_REQUIRE_BROWSER=1`` (set by ``.ci/run``, which installs both), where a
missing browser fails. ``KACHEDB_RADIX_SCREENSHOTS=DIR`` also saves screenshots there
(docs/explain.md shows some of them, under docs/explain/).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.explain import build_page, frame_views, record, scenario
from kachedb_radix.spec.explain.collapse import visible
from kachedb_radix.spec.explain.layout import layout
from kachedb_radix.spec.explain.svg import pool_cells
from kachedb_radix.spec.explain.view import View, all_nodes
from kachedb_radix.spec.mutants.eviction import LruReversed
from tests.support.paths import ROOT

#: The viewport of a laptop: the legend and the tree must be in view at this size.
VIEWPORT = {"width": 1440, "height": 900}

NODES = """svg => Array.from(svg.querySelectorAll('g.node')).map(g => [g.dataset.node,
    g.dataset.kind, g.dataset.blocks, g.dataset.flags, +g.dataset.x, +g.dataset.y,
    g.querySelectorAll('tspan').length])"""
CELLS = """svg => Array.from(svg.querySelectorAll('rect.cell')).map(c =>
    [c.dataset.state, c.dataset.change])"""


class Page:
    """A page of the recording opened in the browser, with its console watched."""

    def __init__(self, browser: Any, path: Path, views: list[list[View]], hash: str = "") -> None:
        self.views = views
        self.problems: list[str] = []
        self.page = browser.new_page(viewport=VIEWPORT)
        self.page.set_default_timeout(30_000)  # a loaded two-core CI machine
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.problems.append(f"pageerror: {error}"))
        self.page.goto(path.as_uri() + hash)

    def _console(self, message: Any) -> None:
        if message.type in ("error", "warning"):
            self.problems.append(f"console {message.type}: {message.text}")

    def svg(self, side: str) -> Any:
        return self.page.locator(f'section.side[data-side="{side}"] svg.tree')

    def step(self) -> int:
        return int(self.page.eval_on_selector("body", "body => body.dataset.step"))

    def text(self, selector: str) -> str:
        return str(self.page.locator(selector).inner_text())

    def check(self, step: int, expanded: set[str] | frozenset[str] = frozenset()) -> None:
        """Every side's SVG and pool at ``step`` are what the Python side computes (with
        the folding the page chose: ``data-focus`` when it follows a spread change)."""
        assert self.step() == step
        for view in self.views[step]:
            svg = self.svg(view["name"])
            assert svg.get_attribute("data-step") == str(step)
            at = int(svg.get_attribute("data-sub"))
            drawn_view = view["sub"][at] if at >= 0 else view
            drawn = svg.evaluate(NODES)
            focus = svg.get_attribute("data-focus") == "1"
            placed, _, _ = layout(visible(drawn_view["tree"], expanded, focus=focus))
            want = [
                [
                    item.shown.node["id"],
                    item.shown.node["kind"],
                    " ".join(map(str, item.shown.node["blocks"])),
                    " ".join(item.shown.node["flags"]),
                ]
                for item in placed
            ]
            assert [row[:4] for row in drawn] == want, f"step {step}, {view['name']}"
            for row, item in zip(drawn, placed, strict=True):
                assert row[4] == pytest.approx(item.x, abs=0.01), (step, row)
                assert row[5] == pytest.approx(item.y, abs=0.01), (step, row)
            pool = self.page.locator(f'section.side[data-side="{view["name"]}"] svg.pool')
            cells = [
                [state, " ".join(changes)] for state, changes in pool_cells(drawn_view["pool"])
            ]
            assert pool.evaluate(CELLS) == cells
            shown_rules = self.page.locator(
                f'section.side[data-side="{view["name"]}"] ul.rules a.rule'
            ).all_inner_texts()
            assert shown_rules == [rule for rule, _ in view["rules"]]

    def shot(self, name: str) -> None:
        folder = os.environ.get("KACHEDB_RADIX_SCREENSHOTS")
        if folder:
            self.page.wait_for_timeout(900)  # the step's animation, finished
            self.page.screenshot(path=str(Path(folder) / name))

    def close(self) -> None:
        self.page.close()
        assert self.problems == []


def _page(
    browser: Any, tmp_path: Path, name: str, target: Any = None, hash: str = "", profile: Any = None
) -> Page:
    if name.endswith(".jsonl"):
        steps = [json.loads(line) for line in (ROOT / name).read_text().splitlines()]
        recording = record(steps, target, title=Path(name).name, source=name, profile=profile)
    else:
        chosen = scenario(name)
        recording = record(
            chosen.steps, target, title=chosen.title, source=name, lesson=chosen.lesson,
            profile=profile,
        )  # fmt: skip
    views = frame_views(recording)
    path = tmp_path / f"{Path(name).stem}.html"
    path.write_text(build_page(recording, views), encoding="utf-8")
    return Page(browser, path, views, hash)


def _step_of(name: str, note: str) -> int:
    steps = scenario(name).steps
    return next(i for i, step in enumerate(steps) if step.get("note", "").startswith(note))


def _in_view(page: Page, selector: str) -> bool:
    """Whether the element is inside the window (at the page's viewport size)."""
    box = page.page.locator(selector).first.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= VIEWPORT["height"]


def _student(page: Page, name: str, step: int) -> None:
    """The student's questions, asked where each scenario raises them (one page load)."""
    view = page.views[step][0]
    side = 'section.side[data-side="reference"]'
    why = page.text(f"{side} .why") if view["why"] else ""
    if name == "demo" and step == 0:
        # A reset is not a blank canvas: it says what there is; the legend is in view.
        assert page.text(f"{side} .blank").startswith("a fresh tree: nothing cached yet, all 14")
        assert _in_view(page, "#legend .legend-row") and _in_view(page, f"{side} .tree-frame")
        legend = page.text("#legend")
        for shorthand in ("#0-3,7", "t=12..11", "pins 1..0", "#6 p0 t17", "quarantined", "≠"):
            assert shorthand in legend, shorthand
        assert (
            page.text(f"{side} .counts") == "14 blocks: 0 cached (0 pinned, 0 evictable), 14 free"
        )
        assert page.page.locator(f"{side} svg.pool text.cell-id").count() == 14  # numbered cells
    if name == "demo" and step == 1:
        assert "nothing is cached in the default namespace" in page.text(f"{side} .blank")
    if name == "pinning" and step == _step_of("pinning", "four blocks needed"):
        assert "needed 4, free 0, evictable 2" in why
        assert page.text(f"{side} .blank").startswith("refused with out_of_blocks")
    if name == "pinning" and step == _step_of("pinning", "the first request finishes"):
        released = page.page.locator(f'{side} g.node[data-flags~="pin-"]')
        assert released.count() == 1 and "\u2212pin" in released.text_content()  # a minus sign
        dash = released.locator("rect").evaluate("r => getComputedStyle(r).strokeDasharray")
        assert dash not in ("none", "")  # a released pin is drawn, not plain
    if name == "pinning" and step == _step_of("pinning", "two new blocks"):
        trimmed = page.page.locator(f'{side} g.node[data-flags~="trimmed"]')
        assert "trimmed" in trimmed.text_content()
        color = trimmed.locator("rect").evaluate("r => getComputedStyle(r).stroke")
        assert color == "rgb(192, 57, 43)"
    if name == "eviction" and step == _step_of("eviction", "evict one more"):
        merged = page.page.locator(f'{side} g.node[data-flags~="merged"]')
        assert "merged" in merged.text_content()
    if name == "eviction" and step == _step_of("eviction", "a new prompt"):
        # Block by block: #3 goes second, once #4 went (not #5, the next leaf before).
        assert "1. #4  t=2  ← evicted 1st; then #3 is a leaf tail\n2. #3  t=2  ← evicted 2nd" in why
    if name == "split" and step == _step_of("split", "the canonical dump"):
        assert '"namespaces": [' in why and '"stamps": [' in why  # the dump itself
    if name == "snapshots" and view["step"].startswith("snapshot_match"):
        # The version the reader sees is drawn beside the live tree, its walk marked.
        version = page.page.locator(f'{side} g.node[data-kind="version"]')
        assert version.count() == 1 and "reader 1: version 1" in version.text_content()
        seen = page.page.locator(f'{side} g.node[data-node^="s1:"][data-kind="edge"]')
        assert seen.get_attribute("data-blocks") == "0 1 2" and "walk" in (
            seen.get_attribute("data-flags") or ""
        )
    if name == "namespaces":
        roots = page.page.locator(f'{side} svg.tree g.node[data-kind="root"] tspan:first-child')
        labels = roots.all_text_contents()
        named = [label for label in labels if label != "namespace (default)"]
        assert labels[: len(labels) - len(named)] == ["namespace (default)"] * (
            len(labels) - len(named)
        ) and named == sorted(named)  # the default first, then by name, at every step


@pytest.mark.parametrize(
    "name", ["demo", "split", "eviction", "pinning", "namespaces", "snapshots"]
)
def test_every_step_of_every_scenario(browser: Any, tmp_path: Path, name: str) -> None:
    """Arrow keys step forward and back; each step draws what the Python side computes."""
    page = _page(browser, tmp_path, name)
    last = len(page.views) - 1
    page.check(0)
    _student(page, name, 0)
    for step in range(1, last + 1):
        page.page.keyboard.press("ArrowRight")
        page.check(step)
        _student(page, name, step)
        if name == "demo" and step in (11, 17):
            page.shot(f"demo-step-{step + 1}-{'split' if step == 11 else 'eviction'}.png")
    page.page.keyboard.press("ArrowRight")  # past the end: stays on the last step
    page.check(last)
    page.page.keyboard.press("ArrowLeft")
    page.check(last - 1)
    page.page.keyboard.press("Home")
    page.check(0)
    page.close()


def test_stepping_playing_sub_steps_permalinks_and_resize(browser: Any, tmp_path: Path) -> None:
    """One page, every way to move: a #step= link opens its step and sub-step; the slider,
    ticks, buttons and keys; sub-steps walk the tree node by node on the state before the
    step, then split on the state after it, each with its rule; stepping animates; play
    and pause at a speed; the view refits when the window changes; rule links open the
    rule's text."""
    split = _step_of("split", "diverges after two blocks")
    page = _page(browser, tmp_path, "split", hash=f"#step={split + 1}&sub=2")
    assert page.step() == split and page.page.evaluate("document.body.dataset.sub") == "1"
    side = 'section.side[data-side="reference"]'
    svg = page.svg("reference")
    subs = page.views[split][0]["sub"]
    assert page.text(f"{side} .sub-count") == f"sub-step 2 of {len(subs)}:"
    assert page.text(f"{side} .sub-text").startswith("edge #0-1: 2 of its 3 blocks match")
    page.check(split)  # the walk is drawn on the state before the step
    assert subs[1]["dump"] == page.views[split - 1][0]["sub"][-1]["dump"]
    assert svg.locator("g.node.focus").get_attribute("data-node") == subs[1]["n"][0]
    page.page.keyboard.press(".")
    page.page.keyboard.press(".")
    page.check(split)
    assert "splits at the block boundary" in page.text(f"{side} .sub-text")
    assert page.page.locator(f'{side} .sub-text a.rule[data-rule="R-SPLIT-1"]').count() == 1
    focused = svg.locator("g.node.focus").evaluate_all("gs => gs.map(g => g.dataset.node)")
    assert sorted(focused) == sorted(subs[3]["n"]) and len(focused) == 2  # both halves
    # The address follows (a moment later: history updates are throttled).
    page.page.wait_for_function(f"location.hash === '#step={split + 1}&sub=4'")
    page.page.keyboard.press("s")  # sub-steps off: whole steps
    page.page.keyboard.press("ArrowRight")
    page.check(split + 1)
    assert page.page.evaluate("document.getAnimations().length") > 0  # nodes move
    page.page.wait_for_function(f"location.hash === '#step={split + 2}'")
    slider = page.page.locator("#slider")
    slider.evaluate("(s, v) => { s.value = v; s.dispatchEvent(new Event('input')); }", "4")
    page.check(4)
    page.page.click("#next")
    page.check(5)
    page.page.click("#prev")
    page.check(4)
    page.page.locator("#ticks .tick").nth(2).click()
    page.check(2)
    assert page.page.locator("#jump-diff").is_hidden()
    # Play at 4x until the last step, then it stops by itself.
    page.page.select_option("#speed", "4")
    page.page.click("#play")
    page.page.wait_for_function(f"document.body.dataset.step === '{len(page.views) - 1}'")
    page.page.wait_for_function("document.getElementById('play').textContent.includes('play')")
    page.check(len(page.views) - 1)
    # A narrower window: the view refits by itself.
    before = svg.get_attribute("viewBox")
    page.page.set_viewport_size({"width": 900, "height": 700})
    page.page.wait_for_function(
        "b => document.querySelector('svg.tree').getAttribute('viewBox') !== b", arg=before
    )
    page.page.set_viewport_size(VIEWPORT)
    page.page.keyboard.press("Home")
    page.page.keyboard.press("ArrowRight")
    page.page.keyboard.press("ArrowRight")
    page.page.locator(f'{side} .rules a.rule[data-rule="R-SPLIT-1"]').click()
    view = page.page.locator("#rule-view")
    assert view.is_visible() and view.get_attribute("data-rule") == "R-SPLIT-1"
    assert "R-SPLIT-1 — Divergence inside an edge splits it" in view.inner_text()
    page.page.keyboard.press("Escape")
    assert view.is_hidden()
    page.close()


def test_a_permalink_wins_over_the_address_still_to_be_written(
    browser: Any, tmp_path: Path
) -> None:
    """A #step= link followed while the page's own write of the address is still due (it
    comes 150 ms after a step) opens the linked step. Made certain here: the page's write
    lands between the navigation and its hashchange event, as it did in a CI run when a
    test followed a permalink right after stepping (the page read the bar, then showed
    the step it had left)."""
    page = _page(browser, tmp_path, "split", hash="#step=2")
    page.page.evaluate(
        "() => { location.hash = '#step=4'; history.replaceState(null, '', '#step=6'); }"
    )
    page.page.wait_for_function("document.body.dataset.step === '3'", timeout=5000)
    page.check(3)
    page.page.wait_for_function("location.hash === '#step=4'")  # the address follows
    page.close()


def test_side_by_side_marks_the_first_difference(browser: Any, tmp_path: Path) -> None:
    """The committed shrunk disagreement against the LruReversed mutant, both trees drawn:
    the banner names the rule first, the differing nodes are marked in both trees, and the
    mutant's panel says it departs from R-EVICT-2."""
    target = TreeAdapter(LruReversed, "lru_reversed")
    page = _page(browser, tmp_path, "docs/explain/lru-reversed.jsonl", target)
    banner = page.page.locator("#step-diff")
    assert banner.is_hidden()
    page.page.keyboard.press("d")
    page.check(3)
    assert banner.inner_text().startswith(
        "≠ first difference: R-EVICT-2: lru_reversed evicted other blocks"
    )  # the rule that differs (R-EVICT-1, also named by the kit, is kept: every victim a
    # leaf tail, the panel's ✓), then the kit's likely cause; the path last
    assert banner.inner_text().endswith("(at outcome.ok.blocks[0])")
    assert page.page.locator("#ticks .tick.first").get_attribute("data-step") == "3"
    assert page.page.evaluate("document.body.classList.contains('differs')")
    for name in ("reference", "lru_reversed"):
        assert page.svg(name).locator("g.node.differs").count() >= 1
    departs = page.page.locator(
        'section.side[data-side="lru_reversed"] li.departs[data-rule="R-EVICT-2"]'
    )
    assert departs.inner_text().startswith("✗ departs from R-EVICT-2 took #1; the spec's order")
    page.shot("lru-reversed-side-by-side.png")
    page.page.keyboard.press("Home")
    page.page.click("#jump-diff")
    page.check(3)
    page.close()


def test_big_tree_follows_the_change_folds_opens_pans_and_zooms(
    browser: Any, tmp_path: Path
) -> None:
    """200+ edges. At the last step (23 blocks evicted from all over the tree, a 60-block
    edge added) "follow" folds what did not change and every removed block and the new
    edge are inside the view at a legible scale; a minimap shows the whole when it does
    not fit; "+n more" opens a page at a time; an opened edge lists its tokens; folded
    nodes open on a click; pan and zoom move the view."""
    page = _page(browser, tmp_path, "scale", hash="#step=133")
    last = len(page.views) - 1
    page.check(last)
    svg = page.svg("reference")
    assert svg.get_attribute("data-focus") == "1" and float(svg.get_attribute("data-scale")) >= 0.8
    frame = page.page.locator('section.side[data-side="reference"] .tree-frame').bounding_box()
    changed = svg.locator('g.node[data-kind="ghost"], g.node[data-flags~="new"]')
    assert changed.count() == 4  # three ghosts (one a whole removed subtree) and the new edge
    removed = 0
    for index in range(changed.count()):
        box = changed.nth(index).bounding_box()
        assert frame["x"] <= box["x"] and box["x"] + box["width"] <= frame["x"] + frame["width"]
        assert frame["y"] <= box["y"] and box["y"] + box["height"] <= frame["y"] + frame["height"]
        if changed.nth(index).get_attribute("data-kind") == "ghost":
            removed += len(changed.nth(index).get_attribute("data-blocks").split())
    assert removed == 23
    page.page.keyboard.press("ArrowLeft")  # the last user's edit: nothing evicted yet
    page.check(last - 1)
    page.page.keyboard.press("f")  # follow off: the tree folded as usual
    page.check(last - 1)
    assert svg.get_attribute("data-focus") == "0"
    page.page.keyboard.press("0")  # fit: as much of the tree as stays legible
    assert 0.5 <= float(svg.get_attribute("data-scale")) < 1
    page.page.keyboard.press("+")
    page.page.keyboard.press("+")
    minimap = page.page.locator('section.side[data-side="reference"] svg.minimap')
    assert minimap.is_visible() and minimap.locator("rect.mini-node").count() > 20
    page.page.keyboard.press("0")
    more = svg.locator('g.node[data-kind="more"]')
    more_id = more.get_attribute("data-node")
    hidden = int(more.locator("tspan").first.text_content().split()[0].lstrip("+"))
    more.dispatch_event("click")  # (it may lie outside the view: the minimap shows where)
    page.check(last - 1, {more_id})
    # One page opened: FANOUT more are shown, the rest fold again.
    again = svg.locator('g.node[data-kind="more"]')
    assert again.locator("tspan").first.text_content() == f"+{hidden - 8} more"
    page.page.keyboard.press("0")  # fit stops where labels can still be read; the minimap shows all
    assert float(svg.get_attribute("data-scale")) >= 0.5 and minimap.is_visible()
    opened = {more_id}
    while again.count():  # page after page, to the last child: the agent's chain
        opened.add(again.get_attribute("data-node"))
        again.dispatch_event("click")
    page.check(last - 1, opened)
    chain = svg.locator('g.node[data-kind="chain"]')
    chain_id = chain.get_attribute("data-node")
    chain.dispatch_event("click")
    page.check(last - 1, {*opened, chain_id})
    page.page.keyboard.press("c")
    page.check(last - 1)
    page.page.keyboard.press("0")
    edge = svg.locator('g.node[data-node="k2"]')
    lines = edge.locator("tspan").count()
    edge.click()
    opened = edge.locator("tspan").all_text_contents()
    assert len(opened) == lines + 2  # its two blocks, a line each, with their tokens
    assert opened[-2:] == ["#0 p0 t131 [1 2 3 4]", "#1 p0 t131 [5 6 7 8]"]
    edge.click()
    assert edge.locator("tspan").count() == lines
    box = page.page.locator('section.side[data-side="reference"] .tree-frame')
    before, scale = svg.get_attribute("viewBox"), float(svg.get_attribute("data-scale"))
    box.hover()
    page.page.mouse.wheel(0, -300)
    zoomed = svg.get_attribute("viewBox")
    assert zoomed != before and float(svg.get_attribute("data-scale")) > scale
    area = box.bounding_box()
    page.page.mouse.move(area["x"] + 300, area["y"] + 300)
    page.page.mouse.down()
    page.page.mouse.move(area["x"] + 500, area["y"] + 350)
    page.page.mouse.up()
    assert float(svg.get_attribute("viewBox").split()[0]) < float(zoomed.split()[0])
    page.page.keyboard.press("f")
    page.page.keyboard.press("End")
    page.check(last)
    page.shot("after-scale-step-133.png")
    page.close()


def test_an_open_leaf_shows_its_eviction_key(browser: Any, tmp_path: Path) -> None:
    """R-POL-1: under lfu a leaf edge opened by a click lists its eviction key (hits,
    then stamp) below its blocks; an inner edge lists none."""
    steps: list[dict[str, Any]] = [
        {"op": "reset", "num_blocks": 4, "block_size": 1, "policy": "lfu", "policy_options": None},
        {"op": "insert", "tokens": [1, 2], "namespace": None, "pin": False},
        {"op": "insert", "tokens": [1, 3], "namespace": None, "pin": False},
        {"op": "match", "tokens": [1, 3], "namespace": None, "pin": False},
    ]
    recording = record(steps, None, title="lfu keys", source="lfu")
    views = frame_views(recording)
    path = tmp_path / "lfu.html"
    path.write_text(build_page(recording, views), encoding="utf-8")
    page = Page(browser, path, views)
    page.page.keyboard.press("End")
    page.check(len(views) - 1)
    svg = page.svg("reference")
    leaves = [node for node in all_nodes(views[-1][0]["tree"]) if node.get("key")]
    inner = [node for node in all_nodes(views[-1][0]["tree"])
             if node["kind"] == "edge" and not node.get("key")]  # fmt: skip
    assert {node["key"] for node in leaves} == {"hits=0 t=1", "hits=1 t=3"}
    page.page.keyboard.press("0")  # fit: every node in view
    for node in leaves:
        edge = svg.locator(f'g.node[data-node="{node["id"]}"]')
        edge.click()
        lines = svg.locator(f'g.node[data-node="{node["id"]}"] tspan')
        assert f"eviction key: {node['key']}" in lines.all_text_contents()
    edge = svg.locator(f'g.node[data-node="{inner[0]["id"]}"]')
    edge.click()
    assert not any("eviction key" in line for line in edge.locator("tspan").all_text_contents())
    page.close()


def test_a_reviewer_sees_sglangs_declared_differences(browser: Any, tmp_path: Path) -> None:
    """R-EVICT-1, R-ALLOC-2: the demo beside SGLang 0.5.23's own RadixCache. Under its
    shipped profile step 18 is a declared difference: the banner names R-EVICT-1 with the
    reason and both outcomes (the spec evicts #7, #6, #9; SGLang the whole nodes #6-9),
    the spec's side draws the spec's own tree with the adopted state a click away, the
    differing nodes are marked in both trees, and SGLang's panel departs from R-ALLOC-2 in
    its own words. At the strict spec the banner names the rule, not a JSON path, and the
    stamp-only steps fold behind step 18."""
    from tests.explain.test_profile import sglang_target

    target = sglang_target()
    candidate = target.open()
    try:
        page = _page(browser, tmp_path, "demo", candidate, profile=target.profile, hash="#step=18")
    finally:
        candidate.close()
    declared = page.text("#step-declared")
    assert declared.startswith("declared: R-EVICT-1 (evicts whole leaf nodes")
    assert "reference reused 2, allocated 6-7,9,12-13, evicted 7,6,9" in declared
    assert "sglang-0.5.23 reused 2, allocated 8-9,6-7,12, evicted 6-9" in declared
    assert page.page.locator("#step-diff").is_hidden()
    spec = 'section.side[data-side="reference"]'
    ghosts = page.svg("reference").locator('g.node[data-kind="ghost"]')
    assert sorted(ghosts.evaluate_all("gs => gs.map(g => g.dataset.blocks)")) == ["6 7", "9"]
    for name in ("reference", "sglang-0.5.23"):
        assert page.svg(name).locator("g.node.differs").count() >= 2
    assert "the kit then adopts sglang-0.5.23's choice" in page.text(f"{spec} .adopted").lower()
    page.page.click(f"{spec} .show-adopted")
    assert page.svg("reference").get_attribute("data-tree") == "adopted"
    adopted = page.svg("reference").locator('g.node[data-kind="ghost"]')
    assert sorted(adopted.evaluate_all("gs => gs.map(g => g.dataset.blocks)")) == ["6 7", "8 9"]
    page.page.click(f"{spec} .show-adopted")
    theirs = 'section.side[data-side="sglang-0.5.23"]'
    alloc = page.text(f'{theirs} li[data-rule="R-ALLOC-2"]')
    # SGLang's profile declares R-ALLOC-2: the panel says so, as the banner does.
    assert alloc.startswith("≈ declared: R-ALLOC-2 took #8-9,6-7,12 in that order")
    assert "the smallest free ids are taken" not in page.text(f"{theirs} .rules")
    page.shot("sglang-demo-step-18-declared.png")
    page.page.keyboard.press("ArrowRight")
    assert page.text(f"{spec} .origin").startswith(
        "starts from the state the kit adopted at step 18"
    )
    page.close()
    strict = sglang_target("strict")
    candidate = strict.open()
    try:
        page = _page(browser, tmp_path, "demo", candidate, profile=strict.profile)
    finally:
        candidate.close()
    ticks = page.page.locator("#ticks .tick.diff")
    assert ticks.count() == 2  # steps 18 and 19; the stamp-only ones are folded
    assert page.page.locator("#ticks .tick.minor").count() >= 8
    page.page.keyboard.press("d")
    assert page.step() == 17
    banner = page.text("#step-diff")
    # The kit's rule first, then every rule SGLang's panel marks departing at this step.
    assert banner.startswith(
        "≠ first difference: R-EVICT-1, R-INS-5, R-EVICT-2, R-ALLOC-2: sglang-0.5.23 "
        "evicted a block"
    )
    for name in ("reference", "sglang-0.5.23"):
        assert page.svg(name).locator("g.node.differs").count() >= 1
    page.page.keyboard.press("Home")
    page.page.keyboard.press("ArrowRight")
    page.page.keyboard.press("ArrowRight")
    page.page.keyboard.press("ArrowRight")
    page.page.keyboard.press("ArrowRight")  # step 5: a stamp-only difference, folded
    assert page.page.locator("#step-diff").is_hidden()
    assert page.text("#step-minor").startswith("≈ stamps only: R-LRU-1")
    page.page.keyboard.press("m")  # shown on demand, with the stamp marked in both trees
    assert page.page.locator("#step-diff").is_visible()
    for name in ("reference", "sglang-0.5.23"):
        assert page.svg(name).locator("g.node.differs-stamp").count() >= 1
    page.shot("sglang-strict-step-5-stamps.png")
    page.close()
