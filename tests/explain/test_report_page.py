"""The conformance report page links what a reviewer needs: every rule to its text (on
the page, SPEC.md's Markdown rendered), every finding and every waived rule with a trace
to that trace (written beside the report) and to an ``explain`` page of it, and shows a
finding's two answers with the first differing field marked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kachedb_radix import reference
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.page import marked_json, write_report
from kachedb_radix.spec.conform.profile import parse
from kachedb_radix.spec.conform.run import KitReport, KitSettings, run_kit
from kachedb_radix.spec.conform.steps import Step
from kachedb_radix.spec.explain import build_page, frame_views, record
from kachedb_radix.spec.mutants.eviction import EvictedIdsSorted


def test_the_report_links_rules_traces_and_explain_pages(tmp_path: Path) -> None:
    """R-EVICT-4, R-TOK-3: a finding links to its trace and a page stepping through it; a
    waived rule links to the trace its peer ships; every rule id links to its text."""
    found = run_kit(TreeAdapter(EvictedIdsSorted, "sorted"), kit=KitSettings(first=True))
    waiver = parse({"name": "sglang-0.5.23", "waive": {"R-TOK-3": "ids are `int64`"}})
    peer = TreeAdapter(reference.RadixTree, "sglang-0.5.23", frozenset({"core"}))
    waived = run_kit(peer, kit=KitSettings(examples=3), profile=waiver)

    def explain(report: KitReport, steps: list[Step]) -> str | None:
        if report is not found:
            return None  # (the caller cannot run this one again: no page, the trace only)
        recording = record(steps, TreeAdapter(EvictedIdsSorted, "sorted"), title="t", source="s")
        return build_page(recording, frame_views(recording))

    page_path, _ = write_report([found, waived], tmp_path, explain=explain)
    page = page_path.read_text()
    assert (tmp_path / "traces" / "sorted-R-EVICT-4.jsonl").is_file()
    explained = (tmp_path / "explain" / "sorted-R-EVICT-4.html").read_text()
    assert "first difference" in explained and 'id="rule-R-EVICT-4"' in explained
    assert 'href="traces/sorted-R-EVICT-4.jsonl"' in page
    assert 'href="explain/sorted-R-EVICT-4.html"' in page
    # The waived rule: the trace SGLang's profile ships, copied beside the report.
    shipped = tmp_path / "traces" / "sglang-0-5-23-R-TOK-3.jsonl"
    assert shipped.is_file() and 'href="traces/sglang-0-5-23-R-TOK-3.jsonl"' in page
    assert "explain/sglang-0-5-23-R-TOK-3.html" not in page
    # Every rule id links to its text, which is on the page, rendered.
    linked = set(re.findall(r'href="#rule-(R-[A-Z]+-\d+)"', page))
    texts = set(re.findall(r'id="rule-(R-[A-Z]+-\d+)"', page))
    assert linked == texts and len(texts) > 60
    assert "<code>[0, 2**32)</code>" in page  # R-TOK-3's text: a code span, not bold
    findings = page.split('id="sorted-R-EVICT-4"')[1].split('id="rules"')[0]
    assert "`" not in findings  # Markdown rendered in causes and peer notes
    assert findings.count("<mark>") == 2  # the differing field, in both answers


def test_the_differing_field_is_marked_inside_a_long_dump() -> None:
    """R-DUMP-1: the path the kit names is marked where it is, however deep."""
    dump = {"ok": {"namespaces": [{"children": [{"stamps": [3, 4], "children": []}]}]}}
    shown = marked_json(dump, ".ok.namespaces[0].children[0].stamps[1] (length 2 vs 3)")
    assert '"stamps": [3, <mark>4</mark>]' in shown and shown.count("<mark>") == 1
    assert marked_json({"error": "token_range"}, ".error").count("<mark>") == 1
    assert "<mark>" not in marked_json({"ok": None}, None)


def test_conform_report_writes_explain_pages_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R-EVICT-4: ``conform TARGET --report DIR`` runs each finding's trace again on the
    target for its explain page, under the profile it was checked under."""
    from kachedb_radix.spec.cli.main import main

    target = "kachedb_radix.spec.mutants.eviction:EvictedIdsSorted"
    assert main(["conform", target, "--first", "--report", str(tmp_path)]) == 1
    capsys.readouterr()
    (page,) = (tmp_path / "explain").glob("*-R-EVICT-4.html")
    assert "R-EVICT-4" in page.read_text() and page.name in (tmp_path / "index.html").read_text()
