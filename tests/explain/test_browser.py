"""The explain page in a real browser: headless Chromium (Debian's ``chromium``) driven
by Playwright for Python, which needs no browser download of its own.

Every step of the pages is visited with the keys and the slider, and each step's SVG
is checked node for node against the Python side: the same nodes (``data-node``),
kinds, blocks and change flags, at the same places (the page's layout is the twin
of :mod:`kachedb_radix.spec.explain.layout`), and the same pool cells. Folded nodes open on a
click, pan and zoom move the view, rule links open the rule's text, and the console
stays free of errors. A wrong page fails these tests.

Without Chromium or Playwright the tests skip and say so -- unless
``KACHEDB_RADIX_REQUIRE_BROWSER=1`` (set by ``.ci/run``, which installs both), where a
missing browser fails. ``KACHEDB_RADIX_SCREENSHOTS=DIR`` also saves screenshots there
(docs/explain.md shows some of them, under docs/explain/).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
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

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NODES = """svg => Array.from(svg.querySelectorAll('g.node')).map(g => [g.dataset.node,
    g.dataset.kind, g.dataset.blocks, g.dataset.flags, +g.dataset.x, +g.dataset.y,
    g.querySelectorAll('tspan').length])"""
CELLS = """svg => Array.from(svg.querySelectorAll('rect.cell')).map(c =>
    [c.dataset.state, c.dataset.change])"""


def _missing(reason: str) -> None:
    if os.environ.get("KACHEDB_RADIX_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (KACHEDB_RADIX_REQUIRE_BROWSER=1: .ci/run installs it)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright for Python is not installed (pip install -e '.[test]')")
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        _missing("Chromium is not installed (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


class Page:
    """A page of the recording opened in the browser, with its console watched."""

    def __init__(self, browser: Any, path: Path, views: list[list[View]]) -> None:
        self.views = views
        self.problems: list[str] = []
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.set_default_timeout(5000)
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.problems.append(f"pageerror: {error}"))
        self.page.goto(path.as_uri())

    def _console(self, message: Any) -> None:
        if message.type in ("error", "warning"):
            self.problems.append(f"console {message.type}: {message.text}")

    def svg(self, side: str) -> Any:
        return self.page.locator(f'section.side[data-side="{side}"] svg.tree')

    def step(self) -> int:
        return int(self.page.eval_on_selector("body", "body => body.dataset.step"))

    def check(self, step: int, expanded: set[str] | frozenset[str] = frozenset()) -> None:
        """Every side's SVG and pool at ``step`` are what the Python side computes."""
        assert self.step() == step
        for view in self.views[step]:
            svg = self.svg(view["name"])
            assert svg.get_attribute("data-step") == str(step)
            drawn = svg.evaluate(NODES)
            placed, _, _ = layout(visible(view["tree"], expanded))
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
            cells = [[state, " ".join(changes)] for state, changes in pool_cells(view["pool"])]
            assert pool.evaluate(CELLS) == cells
            shown_rules = self.page.locator(
                f'section.side[data-side="{view["name"]}"] ul.rules a.rule'
            ).all_inner_texts()
            assert shown_rules == [rule for rule, _ in view["rules"]]

    def shot(self, name: str) -> None:
        folder = os.environ.get("KACHEDB_RADIX_SCREENSHOTS")
        if folder:
            self.page.screenshot(path=str(Path(folder) / name))

    def close(self) -> None:
        self.page.close()
        assert self.problems == []


def _page(browser: Any, tmp_path: Path, name: str, target: Any = None) -> Page:
    if name.endswith(".jsonl"):
        steps = [json.loads(line) for line in (ROOT / name).read_text().splitlines()]
        recording = record(steps, target, title=Path(name).name, source=name)
    else:
        chosen = scenario(name)
        recording = record(chosen.steps, title=chosen.title, source=name, lesson=chosen.lesson)
    views = frame_views(recording)
    path = tmp_path / f"{Path(name).stem}.html"
    path.write_text(build_page(recording, views), encoding="utf-8")
    return Page(browser, path, views)


@pytest.mark.parametrize(
    "name", ["demo", "split", "eviction", "pinning", "namespaces", "snapshots"]
)
def test_every_step_of_every_scenario(browser: Any, tmp_path: Path, name: str) -> None:
    """Arrow keys step forward and back; each step draws what the Python side computes."""
    page = _page(browser, tmp_path, name)
    last = len(page.views) - 1
    page.check(0)
    for step in range(1, last + 1):
        page.page.keyboard.press("ArrowRight")
        page.check(step)
        if name == "demo" and step in (3, 11, 17):
            page.shot(f"explain-demo-step-{step + 1}.png")
    page.page.keyboard.press("ArrowRight")  # past the end: stays on the last step
    page.check(last)
    page.page.keyboard.press("ArrowLeft")
    page.check(last - 1)
    page.page.keyboard.press("Home")
    page.check(0)
    page.close()


def test_slider_ticks_and_buttons_move_between_steps(browser: Any, tmp_path: Path) -> None:
    page = _page(browser, tmp_path, "split")
    slider = page.page.locator("#slider")
    slider.evaluate("(s, v) => { s.value = v; s.dispatchEvent(new Event('input')); }", "4")
    page.check(4)
    page.page.click("#next")
    page.check(5)
    page.page.click("#prev")
    page.check(4)
    page.page.locator("#ticks .tick").nth(2).click()
    page.check(2)
    page.page.keyboard.press("End")
    page.check(len(page.views) - 1)
    assert page.page.locator("#jump-diff").is_hidden()
    page.close()


def test_side_by_side_marks_the_first_difference(browser: Any, tmp_path: Path) -> None:
    """The committed shrunk disagreement against the LruReversed mutant, both trees drawn."""
    target = TreeAdapter(LruReversed, "lru_reversed")
    page = _page(browser, tmp_path, "docs/explain/lru-reversed.jsonl", target)
    banner = page.page.locator("#step-diff")
    assert banner.is_hidden()
    page.page.keyboard.press("d")
    page.check(3)
    assert banner.inner_text().startswith(
        "≠ first difference: lru_reversed parts ways with the reference at outcome.ok.blocks[0]"
        " — differs: R-EVICT-2"
    )  # the rule the kit names, and its likely cause after it
    assert page.page.locator("#ticks .tick.first").get_attribute("data-step") == "3"
    assert page.page.evaluate("document.body.classList.contains('differs')")
    page.shot("explain-side-by-side.png")
    page.page.keyboard.press("Home")
    page.page.click("#jump-diff")
    page.check(3)
    page.close()


def test_big_tree_folds_opens_pans_and_zooms(browser: Any, tmp_path: Path) -> None:
    """200+ edges: folded nodes open on a click, edges show their blocks, pan and zoom."""
    page = _page(browser, tmp_path, "scale")
    last = len(page.views) - 2  # the last user's edit: nothing evicted yet
    page.page.locator("#slider").evaluate(
        "(s, v) => { s.value = v; s.dispatchEvent(new Event('input')); }", str(last)
    )
    page.check(last)
    page.page.keyboard.press("0")  # fit: the whole tree in view
    svg = page.svg("reference")
    assert float(svg.get_attribute("data-scale")) < 1
    more = svg.locator('g.node[data-kind="more"]')
    more_id = more.get_attribute("data-node")
    more.click()
    page.check(last, {more_id})
    page.page.keyboard.press("0")
    chain = svg.locator('g.node[data-kind="chain"]')
    chain_id = chain.get_attribute("data-node")
    chain.click()
    page.check(last, {more_id, chain_id})
    assert svg.locator("g.node").count() == len(all_nodes(page.views[last][0]["tree"]))
    page.page.keyboard.press("ArrowLeft")  # opened folds stay open while stepping
    page.check(last - 1, {more_id, chain_id})
    page.page.keyboard.press("c")
    page.check(last - 1)
    page.page.keyboard.press("0")
    edge = svg.locator('g.node[data-node="k2"]')
    lines = edge.locator("tspan").count()
    edge.click()
    assert edge.locator("tspan").count() == lines + 1  # its two blocks, one line
    edge.click()
    assert edge.locator("tspan").count() == lines
    frame = page.page.locator('section.side[data-side="reference"] .tree-frame')
    before, scale = svg.get_attribute("viewBox"), float(svg.get_attribute("data-scale"))
    frame.hover()
    page.page.mouse.wheel(0, -300)
    zoomed = svg.get_attribute("viewBox")
    assert zoomed != before and float(svg.get_attribute("data-scale")) > scale
    box = frame.bounding_box()
    page.page.mouse.move(box["x"] + 50, box["y"] + 300)
    page.page.mouse.down()
    page.page.mouse.move(box["x"] + 250, box["y"] + 350)
    page.page.mouse.up()
    assert float(svg.get_attribute("viewBox").split()[0]) < float(zoomed.split()[0])
    page.page.keyboard.press("End")
    page.check(len(page.views) - 1)
    page.shot("explain-scale-eviction.png")
    page.close()


def test_rule_links_open_the_rule_text(browser: Any, tmp_path: Path) -> None:
    page = _page(browser, tmp_path, "split")
    page.page.keyboard.press("ArrowRight")
    page.page.keyboard.press("ArrowRight")
    page.page.locator('section.side a.rule[data-rule="R-SPLIT-1"]').click()
    view = page.page.locator("#rule-view")
    assert view.is_visible() and view.get_attribute("data-rule") == "R-SPLIT-1"
    assert "R-SPLIT-1 — Divergence inside an edge splits it" in view.inner_text()
    page.page.keyboard.press("Escape")
    assert view.is_hidden()
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
