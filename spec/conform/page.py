"""The conformance report page: implementations x rules, as one self-contained HTML file.

``kachedb-radix conform reference accel sglang --report DIR`` writes
``DIR/report.json`` (the ``--json`` document, ``report.schema.json``) and
``DIR/index.html``: a table with a row per rule of SPEC.md and a column per
implementation, each cell ``pass``, ``fail`` (the finding's cause and its shrunk
trace a click away), ``waived`` (with the declared reason), ``not exercised`` (with
why) or ``not checked`` (a level the implementation does not declare). Above it,
each implementation's verdict, profile, examples and rules exercised. Like the
compliance reports JSON Schema's Bowtie publishes for its validators, it is meant
to be committed and read side by side. No scripts, no external files: inline CSS
and ``<details>`` only.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from .rules import load_rules
from .run import KitReport, RuleResult, dumps

#: The page's file name in the report directory.
PAGE = "index.html"
#: The JSON document's file name in the report directory.
DOCUMENT = "report.json"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; vertical-align: top; text-align: left; }
th { background: #f3f3f3; position: sticky; top: 0; }
td.rule { white-space: nowrap; font-family: monospace; }
.pass { background: #e6f4ea; } .fail { background: #fce8e6; font-weight: bold; }
.waived { background: #fef7e0; } .not-exercised { background: #f1f3f4; color: #555; }
.not-checked { background: #fff; color: #999; }
.small { font-size: 0.85em; color: #555; font-weight: normal; }
pre { white-space: pre-wrap; font-size: 0.8em; max-width: 70em; }
"""


def write_report(
    reports: list[KitReport], directory: Path, made_by: dict[str, Any] | None = None
) -> list[Path]:
    """Write the page and its JSON into ``directory`` (created); return their paths.

    ``made_by`` (the targets and the kit settings of the run) goes into the JSON, so the
    report can be made again exactly (``tests/kit/test_committed_report.py`` does, for
    the committed one)."""
    directory.mkdir(parents=True, exist_ok=True)
    document = directory / DOCUMENT
    page = directory / PAGE
    extra = {} if made_by is None else {"made_by": made_by}
    document.write_text(dumps(reports, **extra) + "\n", encoding="utf-8")
    page.write_text(render(reports), encoding="utf-8")
    return [page, document]


def save_traces(reports: list[KitReport], directory: Path) -> list[Path]:
    """Write each finding's trace as ``directory/<candidate>-<rule>.jsonl``; return the
    paths. The files replay with ``kachedb-radix replay``."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for report in reports:
        for found in report.findings:
            path = directory / f"{_anchor(report, found.rule)}.jsonl"
            path.write_text("\n".join(found.trace_lines()) + "\n", encoding="utf-8")
            written.append(path)
    return written


def render(reports: list[KitReport]) -> str:
    """The page's HTML. O(rules * reports + findings)."""
    tables = [report.table() for report in reports]
    rows = []
    for index, rule in enumerate(load_rules().values()):
        cells = "".join(
            _cell(report, table[index]) for report, table in zip(reports, tables, strict=True)
        )
        title = html.escape(rule.title)
        rows.append(
            f'<tr><td class="rule" title="{title}">{rule.id}</td>'
            f'<td class="small">{rule.level}</td>{cells}</tr>'
        )
    heads = "".join(f"<th>{html.escape(report.candidate)}</th>" for report in reports)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>kachedb-radix conformance report</title>"
        f"<style>{_STYLE}</style></head><body>\n"
        "<h1>kachedb-radix conformance report</h1>\n"
        "<p>Each implementation was driven in lockstep with the reference by the "
        "conformance kit (<code>kachedb-radix conform</code>); every rule of "
        "<code>spec/SPEC.md</code> is a row. The safety rules (R-MATCH-3, R-PIN-3, "
        "R-ALLOC-1, R-NS-2, R-INV-1, R-ERR-2) are checked whatever a profile declares. "
        f'Data: <a href="{DOCUMENT}">{DOCUMENT}</a>.</p>\n'
        + _summaries(reports)
        + f"<table><tr><th>rule</th><th>level</th>{heads}</tr>\n"
        + "\n".join(rows)
        + "\n</table>\n"
        + _findings(reports)
        + "</body></html>\n"
    )


def _summaries(reports: list[KitReport]) -> str:
    items = []
    for report in reports:
        profile = report.profile
        declared = (
            f"profile {html.escape(profile.name)}"
            + (
                f" (<code>{html.escape(profile.shown_source)}</code>)"
                if profile.shown_source
                else ""
            )
            if not profile.strict
            else "no deviations declared"
        )
        items.append(
            f"<li><b>{html.escape(report.candidate)}</b>: {html.escape(report.headline())} "
            f'<span class="small">(levels {", ".join(report.levels)}; {declared}; '
            f"{report.examples} examples, {len(report.exercised)} rules exercised, "
            f"{report.seconds:.1f} s)</span></li>"
        )
    return "<ul>\n" + "\n".join(items) + "\n</ul>\n"


def _cell(report: KitReport, row: RuleResult) -> str:
    css = row.status.replace(" ", "-")
    if row.status == "fail":
        anchor = _anchor(report, row.rule)
        return f'<td class="{css}"><a href="#{anchor}">fail</a></td>'
    reason = f' <span class="small">{html.escape(row.reason)}</span>' if row.reason else ""
    return f'<td class="{css}">{row.status}{reason}</td>'


def _findings(reports: list[KitReport]) -> str:
    parts = []
    for report in reports:
        for found in report.findings:
            trace = "\n".join(json.dumps(step) for step in found.trace)
            parts.append(
                f'<h2 id="{_anchor(report, found.rule)}">{html.escape(report.candidate)}: '
                f"{html.escape(found.headline())}</h2>\n"
                + (
                    f'<p class="small">Peers: {html.escape(found.peer_note)}</p>\n'
                    if found.peer_note
                    else ""
                )
                + f"<p>{found.kind} at step {found.index + 1} of {len(found.trace)}; "
                f"reference: <code>{html.escape(json.dumps(found.expected))[:400]}</code>; "
                f"{html.escape(report.candidate)}: "
                f"<code>{html.escape(json.dumps(found.actual))[:400]}</code></p>\n"
                f"<details><summary>trace ({len(found.trace)} steps, JSON lines; replay "
                f"with <code>kachedb-radix replay FILE --target ...</code>)</summary>"
                f"<pre>{html.escape(trace)}</pre></details>\n"
            )
    return "".join(parts)


def _anchor(report: KitReport, rule: str) -> str:
    name = "".join(char if char.isalnum() else "-" for char in report.candidate)
    return f"{name}-{rule}"
