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

Every rule id links to the rule's text, embedded at the end of the page (SPEC.md's
Markdown rendered, as causes and peer notes are). Every finding -- and every waived
rule with a trace, the finding's own or the one its peer ships in
``spec/peers/traces/`` -- links to its trace, written beside the report
(``DIR/traces/<implementation>-<rule>.jsonl``), and, when the caller can run the
implementation again, to an ``explain`` page of it (``DIR/explain/...html``): the trace
stepped through beside the reference, under the implementation's profile. A finding
shows both answers as JSON with the first differing field marked.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..inputs import make_directory, write_text
from .lockstep import Difference, first_difference
from .rules import load_rules, markdown_html
from .run import KitReport, RuleResult, dumps
from .steps import Step

#: Makes an explain page (HTML) of a trace for an implementation of the report, or None
#: when it cannot run that implementation again.
Explainer = Callable[[KitReport, list[Step]], "str | None"]

#: Folders beside the page for the traces and the explain pages.
TRACES, EXPLAIN = "traces", "explain"

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
.answers { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }
mark { background: #ffd54f; outline: 2px solid #e0a000; font-weight: bold; }
.links { font-size: 0.85em; } .rule-text { border-top: 1px solid #ddd; margin-top: 0.5em; }
.rule-text:target { background: #fff8d6; }
"""


def write_report(
    reports: list[KitReport],
    directory: Path,
    made_by: dict[str, Any] | None = None,
    explain: Explainer | None = None,
) -> list[Path]:
    """Write the page and its JSON into ``directory`` (created), the traces the page links
    to and, with ``explain``, an explain page of each; return the page's and the JSON's
    paths.

    ``made_by`` (the targets and the kit settings of the run) goes into the JSON, so the
    report can be made again exactly (``tests/kit/test_committed_report.py`` does, for
    the committed one). O(report size).

    Raises:
        InputError: a file or folder cannot be written (named, with the system's reason).
    """
    make_directory(directory, "--report")
    document = directory / DOCUMENT
    page = directory / PAGE
    extra = {} if made_by is None else {"made_by": made_by}
    write_text(document, dumps(reports, **extra) + "\n", "--report")
    links = _write_linked(reports, directory, explain)
    write_text(page, render(reports, links), "--report")
    return [page, document]


def _write_linked(
    reports: list[KitReport], directory: Path, explain: Explainer | None
) -> dict[str, tuple[str, str | None]]:
    """Write each finding's and each waived rule's trace (and explain page); by anchor,
    the relative paths of the trace and the page (None when there is no page)."""
    from ..peers import TRACES as PEER_TRACES

    links: dict[str, tuple[str, str | None]] = {}
    for report in reports:
        traces: dict[str, list[str]] = {}
        for found in [*report.findings, *report.waived]:
            traces.setdefault(found.rule, found.trace_lines())
        for row in report.table():
            shipped = PEER_TRACES / f"{_anchor(report, row.rule)}.jsonl"
            if row.status == "waived" and row.rule not in traces and shipped.is_file():
                traces[row.rule] = shipped.read_text(encoding="utf-8").splitlines()
        for rule, lines in traces.items():
            anchor = _anchor(report, rule)
            trace = directory / TRACES / f"{anchor}.jsonl"
            make_directory(trace.parent, "--report")
            write_text(trace, "\n".join(lines) + "\n", "--report")
            shown: str | None = None
            page = explain(report, [json.loads(line) for line in lines]) if explain else None
            if page is not None:
                target = directory / EXPLAIN / f"{anchor}.html"
                make_directory(target.parent, "--report")
                write_text(target, page, "--report")
                shown = f"{EXPLAIN}/{anchor}.html"
            links[anchor] = (f"{TRACES}/{anchor}.jsonl", shown)
    return links


def save_traces(reports: list[KitReport], directory: Path) -> list[Path]:
    """Write each finding's trace as ``directory/<candidate>-<rule>.jsonl``; return the
    paths. The files replay with ``kachedb-radix replay``. O(traces).

    Raises:
        InputError: a file or the folder cannot be written.
    """
    make_directory(directory, "--save-traces")
    written = []
    for report in reports:
        for found in report.findings:
            path = directory / f"{_anchor(report, found.rule)}.jsonl"
            write_text(path, "\n".join(found.trace_lines()) + "\n", "--save-traces")
            written.append(path)
    return written


def render(reports: list[KitReport], links: dict[str, tuple[str, str | None]] | None = None) -> str:
    """The page's HTML (``links``: by anchor, a trace's and an explain page's relative
    paths). O(rules * reports + findings)."""
    links = links or {}
    tables = [report.table() for report in reports]
    rows = []
    for index, rule in enumerate(load_rules().values()):
        cells = "".join(
            _cell(report, table[index], links)
            for report, table in zip(reports, tables, strict=True)
        )
        title = html.escape(rule.title)
        rows.append(
            f'<tr><td class="rule" title="{title}"><a href="#rule-{rule.id}">{rule.id}</a></td>'
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
        "<code>spec/SPEC.md</code> is a row (its text is at the end of this page). The "
        "safety rules (R-MATCH-3, R-PIN-3, R-ALLOC-1, R-NS-2, R-INV-1, R-ERR-2) are checked "
        "whatever a profile declares. A finding or a waived rule links to its trace and to a "
        f'page that steps through it beside the reference. Data: <a href="{DOCUMENT}">'
        f"{DOCUMENT}</a>.</p>\n"
        + _summaries(reports)
        + f"<table><tr><th>rule</th><th>level</th>{heads}</tr>\n"
        + "\n".join(rows)
        + "\n</table>\n"
        + _findings(reports, links)
        + _rule_texts()
        + "</body></html>\n"
    )


def _rule_texts() -> str:
    parts = [
        f'<div class="rule-text" id="rule-{rule.id}"><h3>{rule.id} — '
        f"{markdown_html(rule.title, inline=True)}</h3>"
        f'<p class="small">Level: {rule.level}</p>{markdown_html(rule.text)}</div>'
        for rule in load_rules().values()
    ]
    return '<h2 id="rules">The rules (spec/SPEC.md)</h2>\n' + "\n".join(parts) + "\n"


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


def _cell(report: KitReport, row: RuleResult, links: dict[str, tuple[str, str | None]]) -> str:
    css = row.status.replace(" ", "-")
    anchor = _anchor(report, row.rule)
    linked = _links(links.get(anchor))
    if row.status == "fail":
        return f'<td class="{css}"><a href="#{anchor}">fail</a>{linked}</td>'
    reason = f' <span class="small">{html.escape(row.reason)}</span>' if row.reason else ""
    return f'<td class="{css}">{row.status}{reason}{linked}</td>'


def _links(found: tuple[str, str | None] | None) -> str:
    if found is None:
        return ""
    trace, page = found
    shown = f'<a href="{html.escape(trace)}">trace</a>'
    if page is not None:
        shown += f' · <a href="{html.escape(page)}">step through it</a>'
    return f' <span class="links">({shown})</span>'


def _findings(reports: list[KitReport], links: dict[str, tuple[str, str | None]]) -> str:
    parts = []
    for report in reports:
        for found in report.findings:
            anchor = _anchor(report, found.rule)
            trace = "\n".join(json.dumps(step) for step in found.trace)
            rules = ", ".join(f'<a href="#rule-{rule}">{rule}</a>' for rule in found.rules)
            parts.append(
                f'<h2 id="{anchor}">{html.escape(report.candidate)}: {rules or "?"}: '
                f"{markdown_html(found.cause, inline=True)}</h2>\n"
                + (
                    f'<p class="small">Peers: {markdown_html(found.peer_note, inline=True)}</p>\n'
                    if found.peer_note
                    else ""
                )
                + f"<p>{found.kind} at step {found.index + 1} of {len(found.trace)}"
                f"{_links(links.get(anchor))}.</p>\n"
                + _answers(report, found)
                + f"<details><summary>trace ({len(found.trace)} steps, JSON lines; replay "
                f"with <code>kachedb-radix replay FILE --target ...</code>)</summary>"
                f"<pre>{html.escape(trace)}</pre></details>\n"
            )
    return "".join(parts)


def _answers(report: KitReport, found: Difference) -> str:
    """Both answers as JSON, the first differing field marked in each."""
    path = first_difference(found.expected, found.actual, "")
    where = f" (first difference at <code>{html.escape(path)}</code>)" if path else ""
    return (
        f'<p>Both answers{where}:</p><div class="answers"><div><p>reference:</p>'
        f"<pre>{marked_json(found.expected, path)}</pre></div>"
        f"<div><p>{html.escape(report.candidate)}:</p>"
        f"<pre>{marked_json(found.actual, path)}</pre></div></div>\n"
    )


def marked_json(value: Any, path: str | None) -> str:
    """``value`` as indented JSON (HTML-escaped), the element at ``path`` (a
    :func:`~kachedb_radix.spec.conform.lockstep.first_difference` path such as
    ``.ok.namespaces[0].stamps[1]``) wrapped in ``<mark>``. O(size of the value)."""
    parts = _path_parts(path or "")
    out: list[str] = []
    _emit(value, parts, 0, out)
    return "".join(out)


def _path_parts(path: str) -> list[str | int] | None:
    if not path:
        return None
    path = path.split(" (")[0]
    parts: list[str | int] = []
    for name, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        parts.append(int(index) if index else name)
    return parts


def _emit(value: Any, parts: list[str | int] | None, depth: int, out: list[str]) -> None:
    if parts == []:
        out.append("<mark>")
        _plain(value, depth, out)
        out.append("</mark>")
        return
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict) and value:
        out.append("{\n")
        for number, (key, item) in enumerate(value.items()):
            out.append(f"{inner}{_text(key)}: ")
            follow = parts[1:] if parts and parts[0] == key else None
            _emit(item, follow, depth + 1, out)
            out.append(",\n" if number < len(value) - 1 else "\n")
        out.append(pad + "}")
    elif isinstance(value, list) and value and not all(_scalar(item) for item in value):
        out.append("[\n")
        for number, item in enumerate(value):
            out.append(inner)
            follow = parts[1:] if parts and parts[0] == number else None
            _emit(item, follow, depth + 1, out)
            out.append(",\n" if number < len(value) - 1 else "\n")
        out.append(pad + "]")
    elif isinstance(value, list) and parts and isinstance(parts[0], int):
        items = [
            f"<mark>{_text(item)}</mark>" if number == parts[0] else _text(item)
            for number, item in enumerate(value)
        ]
        out.append("[" + ", ".join(items) + "]")
    else:
        _plain(value, depth, out)


def _plain(value: Any, depth: int, out: list[str]) -> None:
    nested = isinstance(value, dict) or (
        isinstance(value, list) and not all(_scalar(item) for item in value)
    )
    if nested and value:
        _emit(value, None, depth, out)
    else:
        out.append(_text(value))


def _text(value: Any) -> str:
    return html.escape(json.dumps(value), quote=False)


def _scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list))


def _anchor(report: KitReport, rule: str) -> str:
    name = "".join(char if char.isalnum() else "-" for char in report.candidate)
    return f"{name}-{rule}"
