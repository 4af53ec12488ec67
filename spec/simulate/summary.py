"""The summary a run prints: one table row per capacity, and what it means.

Columns: the pool in blocks; the token hit ratio of the tree's LRU, of Belady and
of an infinite pool, and LRU as a share of Belady (how close LRU comes to the best
achievable); LRU's block hit ratio; the prefill tokens it saved; evictions; the
peak of pinned blocks; in the timed mode, requests that waited for or were refused
by a full pool and TTFT p50/p90/p99 under the service model. Under the table:
the knee and where the figures came from.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .metrics import HitStats
from .results import KNEE_FRACTION, Results


def percent(ratio: float | None) -> str:
    """``0.4318`` -> ``43.2%``; None -> an em dash. O(1)."""
    return "—" if ratio is None else f"{100 * ratio:.1f}%"


def count(value: float) -> str:
    """A count in three significant figures: ``39852661`` -> ``39.9M``. O(1)."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:g}"


def duration(milliseconds: float | None) -> str:
    """``350.0`` -> ``350 ms``, ``1234.5`` -> ``1.23 s``, ``1589757`` -> ``1,590 s``;
    None -> an em dash. O(1)."""
    if milliseconds is None:
        return "—"
    if milliseconds < 1000:
        return f"{milliseconds:.0f} ms"
    seconds = milliseconds / 1000
    if seconds < 100:
        return f"{seconds:.3g} s"
    return f"{float(f'{seconds:.3g}'):,.0f} s"


#: What the columns mean, under the table.
CAPTION = "hit: prompt tokens reused / prompt tokens; LRU/Belady: LRU's share of the bound"


def _ratio(stats: HitStats | None) -> float | None:
    return None if stats is None else stats.token_hit_ratio


def summary_table(results: Results) -> Table:
    """The table, one row per capacity. O(points)."""
    timed = results.mode == "timed"
    table = Table(caption=CAPTION)
    columns = [
        "blocks",
        "hit LRU",
        *(f"hit {name.upper()}" for name in results.policies),
        "Belady",
        "infinite",
        "LRU/Belady",
        "block hit",
        "tokens saved",
        "evictions",
        "peak pinned",
    ]
    if timed:
        columns += ["waited", "refused", "TTFT p50", "p90", "p99"]
    for name in columns:
        table.add_column(name, justify="right")
    for point in results.points:
        done = point.replay
        belady = _ratio(point.belady)
        share = None if not belady else point.lru.token_hit_ratio / belady
        row = [
            f"{point.capacity:,}",
            percent(point.lru.token_hit_ratio),
            *(percent(point.policies[name].stats.token_hit_ratio) for name in results.policies),
            percent(belady),
            percent(_ratio(results.infinite)),
            percent(share),
            percent(point.lru.block_hit_ratio),
            count(point.lru.saved_tokens),
            count(done.evictions),
            f"{done.peak_pinned:,}",
        ]
        if timed:
            row += [
                f"{done.waited:,}",
                f"{done.refused:,}",
                *(duration(point.ttft_ms.get(name)) for name in ("p50", "p90", "p99")),
            ]
        table.add_row(*row)
    return table


def title(results: Results) -> str:
    """The line above the table: the trace, its units, the mode, the tree. O(1)."""
    trace = results.trace
    unit = (
        f"{trace.tokens_per_block} tokens per hash block"
        if trace.format == "mooncake"
        else f"{trace.block_size} tokens per block"
    )
    return (
        f"{trace.name}: {len(trace.requests):,} requests ({trace.format}, {unit}), "
        f"{results.mode} mode, {results.implementation} tree"
    )


def notes(results: Results) -> list[str]:
    """The lines printed under the table. O(points)."""
    lines = []
    trace = results.trace
    if trace.skipped:
        first = trace.skipped[0]
        lines.append(
            f"skipped {len(trace.skipped)} bad lines (--skip-bad); first: line {first.line}: "
            f"{first.reason}"
        )
    if results.working_set:
        lines.append(f"working set: {results.working_set:,} distinct blocks")
    if results.infinite is not None:
        share = f"{100 * KNEE_FRACTION:.0f}% of the infinite-capacity hit ratio"
        named = [(policy, policy.upper()) for policy in results.policies]
        for policy, name in (("lru", "LRU"), *named, ("belady", "Belady")):
            knee = results.knee(policy)
            where = f"at {knee:,} blocks" if knee else "at none of these capacities"
            lines.append(f"knee: {name} reaches {share} {where}")
    if results.mode == "timed" and results.service is not None:
        service = results.service
        lines.append(
            f"service model: prefill {service.prefill_tokens_per_s:,.0f} tokens/s, decode "
            f"{service.decode_ms_per_token:g} ms/token, {service.max_running} running at most, "
            f"on a full pool: {service.on_full}; bounds in arrival order"
        )
    lines.append(
        f"{len(results.points)} capacities in {results.seconds['total']:.2f} s "
        f"({results.executor} executor)"
    )
    return lines


def print_report(results: Results, console: Console) -> None:
    """Print the title, the table and its notes."""
    console.print(title(results), highlight=False, soft_wrap=True)
    console.print(summary_table(results))
    for line in notes(results):
        console.print(line, highlight=False, soft_wrap=True)
