"""The summary a run prints: one table row per capacity, and what it means.

Columns of the main table: the pool in blocks (and, with ``--model``, in GiB, and with
``--gpu``, in GPUs of that class); the token hit ratio of the tree's LRU, of each
other configuration (policies, clusters), of Belady and of an infinite pool, and
LRU as a share of Belady (how close LRU comes to the best achievable); in the
sequential mode LRU's block hit ratio, the prefill tokens it saved, evictions and the
peak of pinned blocks; in the timed mode evictions and the requests that waited for
or were refused by a full pool. The timed mode adds a service table (TTFT, TPOT,
how busy the workers were, the offered prefill, the SLO), several workers a
cluster table at one capacity (hit ratio, balance, TTFT per configuration), and tiers
a tiers table (the hit ratio per tier, the restores, and in the timed mode TTFT with
the tiers beside the same configuration without them). Under the tables: the knees,
the model and GPUs, the tiers' rates, warnings (overload), where the figures came
from.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .metrics import HitStats
from .plan.hardware import Sizing, format_gib
from .plan.report import cluster_table, service_lines, service_table, stage_table
from .results import Results
from .text import count, duration, percent

#: What the columns mean, under the table.
CAPTION = "hit: prompt tokens reused / prompt tokens; LRU/Belady: LRU's share of the bound"


def _ratio(stats: HitStats | None) -> float | None:
    return None if stats is None else stats.token_hit_ratio


def _sizing(results: Results) -> Sizing:
    return results.sizing or Sizing(results.trace.tokens_per_block)


def _column_name(results: Results, label: str) -> str:
    """``hit LFU`` for a policy on one worker, ``hit 4xprefix`` for a cluster,
    ``hit lru+host8000`` with tiers."""
    config = results.config(label)
    plain = config.cluster.workers == 1 and config.tiers is None
    return f"hit {label.upper()}" if plain else f"hit {label}"


def summary_table(results: Results) -> Table:
    """The main table, one row per capacity. O(points)."""
    timed = results.mode == "timed"
    sizing = _sizing(results)
    table = Table(caption=CAPTION)
    columns = ["blocks"]
    if sizing.model is not None:
        columns.append("GiB")
    if sizing.deployment is not None:
        columns.append("GPUs")
    columns += [
        "hit LRU",
        *(_column_name(results, label) for label in results.labels[1:]),
        "Belady",
        "infinite",
        "LRU/Belady",
    ]
    if timed:
        columns += ["evictions", "waited", "refused"]
    else:
        columns += ["block hit", "tokens saved", "evictions", "peak pinned"]
    for name in columns:
        table.add_column(name, justify="right")
    hbm = _hbm_blocks(results)
    for point in results.shown():
        done = point.replay
        belady = _ratio(point.belady)
        share = None if not belady else point.lru.token_hit_ratio / belady
        mark = " (HBM)" if point.capacity == hbm else ""
        row = [f"{point.capacity:,}{mark}"]
        gib = sizing.gib(point.capacity)
        if gib is not None:
            row.append(f"{gib:,.0f}" if gib >= 100 else f"{gib:.1f}" if gib >= 1 else f"{gib:.2f}")
        gpus = sizing.gpus(point.capacity)
        if gpus is not None:
            row.append(f"{gpus:,.1f}")
        row += [
            percent(point.lru.token_hit_ratio),
            *(percent(point.runs[label].stats.token_hit_ratio) for label in results.labels[1:]),
            percent(belady),
            percent(_ratio(results.infinite)),
            percent(share),
        ]
        if timed:
            row += [count(done.evictions), f"{done.waited:,}", f"{done.refused:,}"]
        else:
            row += [
                percent(point.lru.block_hit_ratio),
                count(point.lru.saved_tokens),
                count(done.evictions),
                f"{done.peak_pinned:,}",
            ]
        table.add_row(*row)
    return table


#: What the tiers table's columns mean.
TIERS_CAPTION = (
    "device / host / disk: prompt tokens each tier supplied; miss: prefilled (the four add "
    "to 100%); restored: blocks brought up from host + disk; restore wait: the restoring "
    "requests' prefill waiting for it (queue on the link included); offered: the prefill "
    "compute its misses need; TTFT without: the same configuration with the device pool alone"
)


def tiers_table(results: Results) -> Table:
    """Each tiered configuration at each capacity: the hit ratio per tier, the restores,
    and in the timed mode TTFT with the tiers and without. O(points * configs)."""
    timed = results.mode == "timed"
    table = Table(caption=TIERS_CAPTION)
    columns = ["blocks", "configuration", "device", "host", "disk", "miss", "restored"]
    if timed:
        columns += ["restore wait p50", "p99", "offered prefill", "TTFT p50", "p99",
                    "TTFT p50 without", "p99 "]  # fmt: skip
    for name in columns:
        table.add_column(name, justify="left" if name == "configuration" else "right")
    for point in results.shown():
        for label in results.tiered:
            run = point.runs[label]
            tiers = run.tiers
            assert tiers is not None, "a tiered configuration's run has tier figures"
            row = [
                f"{point.capacity:,}",
                label,
                *(percent(tiers.ratio(tier)) for tier in ("device", "host", "disk", "miss")),
                f"{count(tiers.host_blocks)} + {count(tiers.disk_blocks)}",
            ]
            if timed:
                plain = point.runs[results.config(label).untiered]
                service = run.service
                assert service is not None, "a timed run has service figures"
                row += [
                    duration(tiers.restore_ms.get("p50")),
                    duration(tiers.restore_ms.get("p99")),
                    f"{service.offered_prefill_s:,.0f} s",
                    duration(run.ttft_ms.get("p50")),
                    duration(run.ttft_ms.get("p99")),
                    duration(plain.ttft_ms.get("p50")),
                    duration(plain.ttft_ms.get("p99")),
                ]
            table.add_row(*row)
    return table


def tier_lines(results: Results) -> list[str]:
    """What each tier configuration is, in blocks and GiB, and what a restore costs. O(configs)."""
    if not results.tiered:
        return []
    sizing = _sizing(results)
    lines = []
    seen = set()
    for label in results.tiered:
        spec = results.config(label).tiers
        assert spec is not None
        if spec.label in seen:
            continue
        seen.add(spec.label)
        parts = []
        for name, blocks in (("host", spec.host_blocks), ("disk", spec.disk_blocks)):
            if blocks:
                gib = sizing.gib(blocks)
                size = "" if gib is None else f" = {format_gib(gib)}"
                if 0 < results.working_set < blocks:
                    size += f", a worker's share at most the {results.working_set:,}-block "
                    size += "working set"
                parts.append(f"{name} {blocks:,} blocks{size}")
        write = "write-through" if spec.write_through else "write-back"
        lines.append(f"tiers {spec.label} ({write}; in all, split over the workers): "
                     f"{'; '.join(parts)}")  # fmt: skip
    cost = results.cost
    if cost is not None:
        host, disk = (cost.restore_bytes_per_s(tier) / 1e9 for tier in ("host", "disk"))
        lines.append(
            f"restores (per worker): from host {host:,.4g} GB/s + {cost.host_latency_ms:g} ms, "
            f"from disk {disk:,.4g} GB/s + {cost.disk_latency_ms:g} ms; one at a time on a "
            "worker's link, the request's prefill waiting for its own"
        )
    else:
        lines.append("the sequential mode has no time: restores are counted, not timed "
                     "(--gpu on a trace with timestamps, or --mode timed, times them)")  # fmt: skip
    return lines


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


def _hbm_blocks(results: Results) -> int | None:
    """The capacity the deployment's HBM holds, over every worker of the widest cluster."""
    return _sizing(results).worker_blocks(max(c.cluster.workers for c in results.configs))


def knee_lines(results: Results) -> list[str]:
    """The knees: LRU's and Belady's in full, the others one line each. O(knees)."""
    if results.infinite is None:
        return []
    sizing = _sizing(results)
    ceiling = results.infinite.token_hit_ratio
    lines = []
    names = {"lru": "LRU", "belady": "Belady"}
    for series in ("lru", "belady"):
        for fraction in results.knee_fractions:
            knee = results.knee(series, fraction)
            assert knee is not None
            head = (
                f"knee ({names[series]}): {100 * fraction:g}% of the achievable hit ratio "
                f"({percent(fraction * ceiling)} of {percent(ceiling)})"
            )
            if knee.capacity is None:
                lines.append(f"{head} is not reached at any capacity simulated")
            elif knee.bounded_above_only:
                lines.append(f"{head} needs at most {sizing.describe(knee.capacity)}")
            else:
                assert knee.bracket is not None
                low, high = knee.bracket
                lines.append(
                    f"{head} needs {sizing.describe(knee.capacity)} "
                    f"(interpolated between {low:,} and {high:,})"
                )
    others = results.labels[1:]
    for fraction in results.knee_fractions if others else ():
        parts = []
        for label in others:
            knee = results.knee(label, fraction)
            assert knee is not None
            if knee.capacity is None:
                parts.append(f"{label} not reached")
            else:
                prefix = "≤ " if knee.bounded_above_only else ""
                parts.append(f"{label} {prefix}{knee.capacity:,.0f}")
        lines.append(f"knee {100 * fraction:g}% (blocks): " + ", ".join(parts))
    if results.refined:
        added = ", ".join(f"{capacity:,}" for capacity in results.refined)
        lines.append(
            f"knee refinement ran {len(results.refined)} more capacities ({added}; in the "
            "files and plots, not in the table)"
        )
    return lines


def notes(results: Results) -> list[str]:
    """The lines printed under the tables. O(points)."""
    lines = []
    trace = results.trace
    sizing = _sizing(results)
    if trace.skipped:
        first = trace.skipped[0]
        lines.append(
            f"skipped {len(trace.skipped)} bad lines (--skip-bad); first: line {first.line}: "
            f"{first.reason}"
        )
    lines += results.notes
    if results.working_set:
        gib = sizing.gib(results.working_set)
        size = "" if gib is None else f" = {format_gib(gib)}"
        lines.append(f"working set: {results.working_set:,} distinct blocks{size}")
    if sizing.model is not None:
        assert sizing.block_bytes is not None
        line = (
            f"model: {sizing.model.describe()}; a block of {sizing.tokens_per_block:,} tokens "
            f"takes {format_gib(sizing.block_bytes / 1024**3)}"
        )
        lines.append(line)
    deployment = sizing.deployment
    if deployment is not None:
        worker = sizing.worker_blocks()
        lines.append(f"GPUs: {deployment.describe()}: {worker:,} blocks a worker (HBM)")
        hbm = _hbm_blocks(results)
        if hbm is not None and any(point.capacity > hbm for point in results.points):
            lines.append(
                f"capacities above {hbm:,} blocks exceed the GPUs' HBM: that KV would live in "
                "host memory or on disk, and its hits would pay a restore (--tiers charges "
                "it); here the device pool counts at HBM speed"
            )
    lines += knee_lines(results)
    lines += tier_lines(results)
    lines += service_lines(results)
    lines.append(verdict(results))
    return lines


def verdict(results: Results) -> str:
    """The last line: what was simulated -- requests, capacities, configurations -- and
    how long it took. O(1)."""
    runs, shown = len(results.configs), len(results.shown())
    added = f" (+{len(results.refined)} refining the knees)" if results.refined else ""
    return (
        f"simulated {len(results.trace.requests):,} requests at {shown} "
        f"capacit{'ies' if shown != 1 else 'y'}{added} x {runs} "
        f"configuration{'s' if runs != 1 else ''} in "
        f"{results.seconds['total']:.2f} s ({results.executor} executor)"
    )


def print_report(results: Results, console: Console) -> None:
    """Print the title, the tables and their notes."""
    console.print(title(results), highlight=False, soft_wrap=True)
    console.print(summary_table(results))
    if results.mode == "timed":
        console.print(service_table(results))
    if results.clusters:
        console.print(cluster_table(results))
    stages = stage_table(results) if results.mode == "timed" else None
    if stages is not None:
        console.print(stages)
    if results.tiered:
        console.print(tiers_table(results))
    for line in notes(results):
        console.print(line, highlight=False, soft_wrap=True)
