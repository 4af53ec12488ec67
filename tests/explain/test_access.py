"""Responsive and accessible (issue 38, item 3), in real Chromium at a laptop's size
(1280x800) and a phone's (390x844):

* axe-core (npm) finds no serious or critical violation on any scenario's page, the
  demo beside SGLang (its profile and the strict spec) and the events beside it, at the
  first and the last step and at a sub-step, at both sizes;
* no text breaks inside a word (a line may break only at white space, or after a list's
  comma or a path's slash), anywhere on those pages;
* below ~700 px the tree stacks above the rules and the "why" at full width and the two
  sides of a comparison stack; nothing is wider than the phone
  (``tests/explain/test_findings.py``, finding 1);
* everything is reached and operated by keyboard: Tab reaches the tree's nodes (a ring
  shows which), Enter opens an edge or a fold, the arrow keys pan a focused tree, Space
  presses the focused button instead of playing.

Cost: about 20 s of browser time in CI (axe-core runs in about 0.3 s a page).
"""

from __future__ import annotations

import json
from typing import Any

from tests.explain.conftest import Pages

LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}

#: Every page the checks open.
NAMES = ["demo", "split", "eviction", "pinning", "namespaces", "snapshots", "scale", "events",
         "demo-sglang", "demo-sglang-strict", "events-sglang"]  # fmt: skip

#: axe-core's run: the serious and critical violations, each with where it was found.
AXE = """async () => {
  const found = await axe.run(document, { resultTypes: ["violations"] });
  return JSON.stringify(found.violations.filter((v) => v.impact === "serious" ||
    v.impact === "critical").map((v) => [v.id, v.impact, v.nodes.map((n) => n.target.join(" "))]));
}"""

#: Text that wraps inside a word: a line break between two characters of one text node,
#: neither white space (after a comma of a list or a slash of a path, a line may break).
#: A node on one line is passed at once; in one on several lines, each break is found by
#: halving (the top of a character only grows along the node).
CUT_WORDS = r"""() => {
  const found = [], range = document.createRange();
  const top = (node, i) => {
    range.setStart(node, i);
    range.setEnd(node, i + 1);
    const rects = range.getClientRects();
    return rects.length ? rects[0].top : null;
  };
  const drawn = (node, i, step, limit) => {  // the nearest character drawn (white space
    for (; i !== limit; i += step) {           // at a line's end may not be)
      const at = top(node, i);
      if (at !== null) return [i, at];
    }
    return [limit, top(node, limit)];
  };
  const breaks = (node, from, to, out) => {  // characters from < i <= to starting a new line
    const [lo, a] = drawn(node, from, 1, to), [hi, b] = drawn(node, to, -1, from);
    if (a === null || b === null || b <= a + 2) return;
    if (hi - lo === 1) { out.push(hi); return; }
    const mid = (lo + hi) >> 1;
    breaks(node, lo, mid, out);
    breaks(node, mid, hi, out);
  };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode, text = node.data, parent = node.parentElement;
    if (text.trim().length < 2 || !parent) continue;
    if (parent.closest("svg, script, style, [hidden]")) continue;
    range.selectNodeContents(node);
    const lines = new Set(Array.from(range.getClientRects(), (r) => Math.round(r.top)));
    if (lines.size < 2) continue;
    const out = [];
    breaks(node, 0, text.length - 1, out);
    for (const i of out) {
      if (!/[\s,/]/.test(text[i - 1]) && !/\s/.test(text[i])) {
        found.push(text.slice(Math.max(0, i - 12), i) + "|" + text.slice(i, i + 12));
      }
    }
  }
  return found;
}"""


def _open(browser: Any, pages: Pages, name: str, size: dict[str, int], hash: str = "") -> Any:
    page = browser.new_page(viewport=size)
    page.set_default_timeout(30_000)  # a loaded two-core CI machine
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(pages.get(name)[2].as_uri() + hash)
    page.problems = problems
    return page


def test_axe_finds_nothing_serious_and_no_word_is_cut(
    browser: Any, explain_pages: Pages, axe_source: str
) -> None:
    """axe-core on every page at 1280 and at 390 px (no serious or critical violation), in
    its richest state: step 18 (the demo's eviction; the declared step beside SGLang) at a
    sub-step; and every visible text wraps between words there and at the first and the
    last step. One load a page: the window is resized between the two sizes."""
    found: dict[str, Any] = {}
    for name in NAMES:
        page = _open(browser, explain_pages, name, LAPTOP)
        page.add_script_tag(content=axe_source)
        steps = page.evaluate("window.kachedbExplain.steps()")
        middle = min(17, steps - 1)
        for size in (LAPTOP, PHONE):
            page.set_viewport_size(size)
            for step, sub in ((middle, 3), (0, -1), (steps - 1, -1)):
                page.evaluate(f"window.kachedbExplain.go({step}, {sub})")
                where = f"{name} at {size['width']} px, step {step + 1} sub {sub + 1}"
                if step == middle:
                    violations = json.loads(page.evaluate(AXE))
                    if violations:
                        found[where] = violations
                cut = page.evaluate(CUT_WORDS)
                if cut:
                    found[where + ": words cut"] = cut
        assert page.problems == []
        page.close()
    assert found == {}


def test_everything_by_keyboard(browser: Any, explain_pages: Pages) -> None:
    """Tab goes through the controls to the tree: its nodes are reached one by one, the
    focused one ringed and said in the line under the tree; Enter opens an edge (and again
    closes it) and keeps the focus on it; on the tree's frame the arrow keys pan; Space on
    a focused button presses it (sub-steps on), it does not start play; Escape closes a
    rule's text and the focus goes back to its link."""
    page = _open(browser, explain_pages, "demo", LAPTOP, "#step=18")
    reached = []
    for _ in range(60):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            "() => { const e = document.activeElement; return [e.tagName, e.dataset.kind || "
            "e.id || e.className.baseVal || e.className]; }"
        )
        reached.append(focused)
        if focused == ["g", "edge"]:
            break
    assert reached[-1] == ["g", "edge"], reached
    assert ["g", "root"] in reached  # every node: the namespace's root first
    assert ["DIV", "tree-frame"] in reached  # the frame itself, for panning
    node = page.locator(":focus")
    ring = node.locator("path.focus-ring").evaluate("p => getComputedStyle(p).stroke")
    assert ring not in ("none", "")
    info = page.locator('section.side[data-side="reference"] .node-info').inner_text()
    assert info.startswith(node.locator("tspan").first.text_content())
    lines = node.locator("tspan").count()
    page.keyboard.press("Enter")
    opened = page.locator(":focus")
    assert opened.get_attribute("data-node") == node.get_attribute("data-node")
    assert opened.locator("tspan").count() > lines
    assert opened.get_attribute("aria-expanded") == "true"
    page.keyboard.press("Enter")
    assert page.locator(":focus").locator("tspan").count() == lines
    page.keyboard.press("Shift+Tab")
    frame = page.locator(":focus")
    if frame.get_attribute("class") != "tree-frame":
        page.locator('section.side[data-side="reference"] .tree-frame').focus()
    svg = page.locator('section.side[data-side="reference"] svg.tree')
    before = svg.get_attribute("viewBox")
    page.keyboard.press("ArrowRight")
    assert svg.get_attribute("viewBox") != before
    assert page.evaluate("document.body.dataset.step") == "17"  # panned, not stepped
    page.locator("#subs").focus()
    page.keyboard.press(" ")
    assert page.locator("#subs").get_attribute("aria-pressed") == "true"
    assert "play" in page.locator("#play").inner_text()  # not playing
    link = page.locator('section.side[data-side="reference"] .rules a.rule').first
    link.focus()
    page.keyboard.press("Enter")
    assert page.locator("#rule-view").is_visible()
    page.keyboard.press("Escape")
    assert page.locator("#rule-view").is_hidden()
    assert page.evaluate("document.activeElement.classList.contains('rule')")
    assert page.problems == []
    page.close()
