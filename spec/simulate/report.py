"""The planner's report: one self-contained HTML page to send to someone.

``--out DIR`` writes ``report.html`` beside results.json: the knees first (and the
overload warning), then the trace and its units, the model, GPUs and service-model
assumptions (every constant, with the datasheets the GPU figures come from; the tiers'
sizes and rates), the tables the command prints, the notes, and the plots. It needs
nothing else: the plots are embedded as ``data:`` URIs (PNG, base64), the style is
inline, there is no script and no link to fetch anything -- it opens the same from an
e-mail attachment, offline.
Without matplotlib the page says the plots were skipped. Every text is HTML-escaped.
Cost: O(points * configurations) plus the plots.
"""

from __future__ import annotations

import base64
import html
from dataclasses import asdict
from pathlib import Path

from rich.table import Table

from .plan.hardware import Sizing
from .plan.report import cluster_table, overload_lines, service_table, stage_table
from .results import Results
from .summary import knee_lines, notes, summary_table, tier_lines, tiers_table, title

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.6em 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
caption { caption-side: bottom; font-size: 0.85em; color: #555; padding-top: 0.3em; }
.warning { color: #a00; font-weight: 600; } .note { color: #333; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.5em 0; }
code { background: #f5f5f5; padding: 0 0.2em; }
#assumptions td { text-align: left; } #knees li { font-weight: 600; }
"""


def _cell(value: object) -> str:
    return html.escape(str(value))


def html_table(table: Table, table_id: str) -> str:
    """A rich table as an HTML table (same headers, cells and caption). O(cells)."""
    columns = list(table.columns)
    heads = "".join(f"<th>{_cell(column.header)}</th>" for column in columns)
    cells = [list(column.cells) for column in columns]
    rows = []
    for number in range(table.row_count):
        rows.append("<tr>" + "".join(f"<td>{_cell(c[number])}</td>" for c in cells) + "</tr>")
    caption = f"<caption>{_cell(table.caption)}</caption>" if table.caption else ""
    return (
        f'<table id="{table_id}">{caption}<thead><tr>{heads}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _pairs(rows: list[tuple[str, str]], table_id: str) -> str:
    body = "".join(f"<tr><th>{_cell(k)}</th><td>{_cell(v)}</td></tr>" for k, v in rows)
    return f'<table id="{table_id}"><tbody>{body}</tbody></table>'


def assumptions(results: Results) -> list[tuple[str, str]]:
    """What the figures assume, as (name, value) rows. O(1)."""
    trace = results.trace
    sizing = results.sizing or Sizing(trace.tokens_per_block)
    rows = [
        ("trace", f"{trace.source} ({len(trace.requests):,} requests, {trace.format})"),
        ("a tree block", f"{trace.tokens_per_block:,} tokens"),
        ("mode", results.mode),
        ("tree", results.implementation),
    ]
    if sizing.model is not None:
        rows.append(("model", sizing.model.describe()))
        if sizing.model.can_serve:
            model = sizing.model
            rows.append(
                (
                    "model (service)",
                    f"{model.params / 1e9:.3g} B parameters ({model.layer_params / 1e9:.3g} B "
                    f"in the layers), hidden {model.hidden:,}, {model.heads} query heads, "
                    f"vocabulary {model.vocab:,}, {model.weight_dtype} weights, "
                    f"{model.compute_dtype} matmuls",
                )
            )
    deployment = sizing.deployment
    if deployment is not None:
        gpu = deployment.gpu
        fp8 = "no FP8" if gpu.fp8_flops is None else f"FP8 {gpu.fp8_flops / 1e12:,.0f}"
        rows += [
            ("GPU", f"{gpu.part}: {gpu.memory_gib:g} GB, HBM {gpu.hbm_bytes_per_s / 1e12:g} TB/s, "
                    f"host link {gpu.host_bytes_per_s / 1e9:g} GB/s a direction, dense BF16 "
                    f"{gpu.bf16_flops / 1e12:,.0f} / {fp8} TFLOP/s"),
            ("GPU figures from", gpu.source),
            ("deployment", deployment.describe()),
        ]  # fmt: skip
    if results.cost is not None:
        for name, value in asdict(results.cost).items():
            rows.append(
                (f"cost: {name}", f"{value:,.6g}" if isinstance(value, float) else str(value))
            )
    if results.service is not None:
        for name, value in asdict(results.service).items():
            rows.append((f"scheduler: {name}", str(value)))
    if results.slo is not None:
        rows.append(("SLO", f"TTFT ≤ {results.slo.ttft_ms:g} ms for "
                            f"{100 * results.slo.attainment:g}% of requests"))  # fmt: skip
    for config in results.configs:
        cluster = config.cluster
        if cluster.workers > 1 or config.tiers is not None:
            rows.append((f"configuration {config.label}", str(config.to_json({}, sizing))))
    rows += [("tiers", line) for line in tier_lines(results)]
    return rows


def render(results: Results, plots: dict[str, bytes] | None) -> str:
    """The whole page (see the module docstring); ``plots`` as :func:`plots.figures`
    gives them, or None when matplotlib is missing. O(results)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Capacity plan: {_cell(results.trace.name)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Capacity plan: {_cell(results.trace.name)}</h1>",
        f'<p id="title">{_cell(title(results))}</p>',
    ]
    knees = knee_lines(results)
    warnings = overload_lines(results)
    parts.append('<h2>The knee</h2><ul id="knees">')
    parts += [f"<li>{_cell(line)}</li>" for line in knees] or ["<li>no bounds: no knee</li>"]
    parts.append("</ul>")
    parts += [f'<p class="warning">{_cell(line)}</p>' for line in warnings]
    parts += [
        "<h2>Assumptions</h2>",
        _pairs(assumptions(results), "assumptions"),
        "<h2>Hit ratio against capacity</h2>",
        html_table(summary_table(results), "capacities"),
    ]
    if results.mode == "timed":
        parts += ["<h2>Service under load</h2>", html_table(service_table(results), "service")]
    if results.clusters:
        parts += ["<h2>Workers and routing</h2>", html_table(cluster_table(results), "cluster")]
    stages = stage_table(results) if results.mode == "timed" else None
    if stages is not None:
        parts += ["<h2>Load stages</h2>", html_table(stages, "stages")]
    if results.tiered:
        parts += ["<h2>Tiers: device, host, disk</h2>", html_table(tiers_table(results), "tiers")]
    parts.append('<h2>Notes</h2><ul id="notes">')
    tiered = tier_lines(results)
    for line in notes(results):
        if line not in knees and line not in warnings and line not in tiered:
            parts.append(f'<li class="note">{_cell(line)}</li>')
    parts.append("</ul><h2>Plots</h2>")
    if plots is None:
        parts.append("<p>Plots skipped: matplotlib is not installed "
                     "(<code>pip install 'kachedb-radix[plot]'</code>).</p>")  # fmt: skip
    else:
        for name, data in plots.items():
            encoded = base64.b64encode(data).decode("ascii")
            alt = name.removesuffix(".png").replace("_", " ")
            parts.append(f'<img alt="{_cell(alt)}" src="data:image/png;base64,{encoded}">')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(results: Results, out: Path, plots: dict[str, bytes] | None) -> Path:
    """Write ``report.html`` into ``out``; returns its path.

    Raises:
        OSError: it cannot be written.
    """
    path = out / "report.html"
    path.write_text(render(results, plots), encoding="utf-8")
    return path
