"""The plots ``--out DIR`` draws (matplotlib, the ``plot`` extra; PNG files).

* ``hit_ratio_vs_capacity.png``: token hit ratio against pool size (log scale) for
  the tree's LRU, each other configuration (policies, clusters), Belady and an
  infinite pool -- the capacity planner's curve; the knees asked for are marked on
  the LRU curve (dotted lines down to the axis), and with ``--model`` a second axis
  gives the pool in GiB (with ``--gpu`` the HBM the deployment holds is marked too).
* ``hit_ratio_over_time.png``: the token hit ratio per window of requests at one
  capacity (``timeline_capacity``), over arrival time when the trace has
  timestamps, else over requests -- warm-up, and how steady the benefit is.
* ``ttft_vs_capacity.png`` (timed mode): TTFT p50, p90 and p99 of LRU on one worker
  against pool size, the no-cache baseline and the SLO as horizontal lines.
* ``tiers_vs_capacity.png`` (with ``--tiers``): against the device pool, where the
  first tiered configuration's hits come from (device, host, disk, stacked), every
  tiered configuration's hit ratio beside the same without tiers, and in the timed
  mode a second panel of TTFT p50 and p99 with the tiers and without.

:func:`figures` draws them into PNG bytes: the command writes them as files, and the
HTML report (:mod:`~kachedb_radix.spec.simulate.report`) embeds the same bytes.
"""

from __future__ import annotations

import io
import math
from typing import Any

from .plan.hardware import Sizing
from .results import Results

#: Colours and labels of the series, the same in every plot.
STYLE = {
    "lru": ("#1f77b4", "LRU (the tree)"),
    "belady": ("#2ca02c", "Belady (offline bound)"),
    "infinite": ("#7f7f7f", "infinite capacity"),
    "lfu": ("#ff7f0e", "LFU"),
    "fifo": ("#8c564b", "FIFO"),
    "priority": ("#d62728", "priority"),
    "slru": ("#9467bd", "SLRU"),
}
#: Colours of further configurations (clusters), in turn.
MORE_COLOURS = ("#17becf", "#bcbd22", "#e377c2", "#393b79", "#637939", "#8c6d31", "#843c39")


def _style(name: str, position: int) -> tuple[str, str]:
    if name in STYLE:
        return STYLE[name]
    return MORE_COLOURS[position % len(MORE_COLOURS)], name


def figures(results: Results) -> dict[str, bytes]:
    """Every plot as PNG bytes, by file name.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    drawn = {
        "hit_ratio_vs_capacity.png": _against_capacity(results),
        "hit_ratio_over_time.png": _over_time(results),
    }
    if results.mode == "timed":
        drawn["ttft_vs_capacity.png"] = _ttft(results)
    if results.tiered:
        drawn["tiers_vs_capacity.png"] = _tiers(results)
    return drawn


def _png(figure: Any) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()


def _capacity_axis(axes: Any, results: Results) -> None:
    """Log capacity in blocks below; GiB above when the model is known."""
    from matplotlib.ticker import FuncFormatter

    axes.set_xscale("log")
    capacities = {point.capacity for point in results.points}
    if len(capacities) == 1:  # one capacity: a span around it (a point has no width)
        (capacity,) = capacities
        axes.set_xlim(capacity / 2, capacity * 2)
    axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    axes.set_xlabel(f"pool capacity (blocks of {results.trace.tokens_per_block} tokens)")
    sizing = results.sizing or Sizing(results.trace.tokens_per_block)
    size = sizing.block_bytes
    if size is not None:
        per_gib = size / 1024**3
        top = axes.secondary_xaxis("top", functions=(lambda b: b * per_gib, lambda g: g / per_gib))
        top.set_xlabel(f"GiB of KV ({sizing.model.name if sizing.model else ''})", fontsize=9)
        top.xaxis.set_major_formatter(
            FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 1 else f"{value:.2g}")
        )


def _hbm_line(axes: Any, results: Results) -> None:
    """The capacity the deployment's HBM holds (every worker of the widest cluster)."""
    sizing = results.sizing or Sizing(results.trace.tokens_per_block)
    hbm = sizing.worker_blocks(max(config.cluster.workers for config in results.configs))
    if hbm is not None:
        axes.axvline(hbm, color="#d62728", linestyle="-.", linewidth=1, label="the GPUs' HBM")


def _against_capacity(results: Results) -> bytes:
    import matplotlib.pyplot as plt

    points = results.points
    capacities = [point.capacity for point in points]
    curves = {label: [point.runs[label].stats.token_hit_ratio for point in points]
              for label in results.labels}  # fmt: skip
    belady = [point.belady.token_hit_ratio for point in points if point.belady is not None]
    if len(belady) == len(points):
        curves["belady"] = belady
    figure, axes = plt.subplots(figsize=(7.5, 4.8), dpi=110)
    for position, (name, values) in enumerate(curves.items()):
        colour, label = _style(name, position)
        axes.plot(capacities, values, marker="o", markersize=3.5, color=colour, label=label)
    if results.infinite is not None:
        colour, label = STYLE["infinite"]
        axes.axhline(results.infinite.token_hit_ratio, color=colour, linestyle="--", label=label)
    for knee in results.knees():
        if knee.series != "lru" or knee.capacity is None:
            continue
        axes.plot([knee.capacity, knee.capacity], [0, knee.target], color="#1f77b4",
                  linestyle=":", linewidth=1)  # fmt: skip
        axes.plot([knee.capacity], [knee.target], marker="D", color="#1f77b4", markersize=6)
        axes.annotate(
            f"{100 * knee.fraction:g}%: {knee.capacity:,.0f}",
            (knee.capacity, knee.target),
            textcoords="offset points",
            xytext=(6, -12),
            fontsize=8,
            color="#1f77b4",
        )
    _hbm_line(axes, results)
    _capacity_axis(axes, results)
    axes.set_ylabel("token hit ratio")
    axes.set_ylim(0, 1)
    axes.set_title(f"Hit ratio against capacity: {_name(results)}", fontsize=11)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    return _png(figure)


def _over_time(results: Results) -> bytes:
    import matplotlib.pyplot as plt

    point = results.point(results.timeline_capacity)
    windows = point.timeline
    timed = all(window["time_s"] is not None for window in windows)
    xs = [window["time_s"] if timed else window["requests"] for window in windows]
    figure, axes = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    for position, name in enumerate((*results.labels, "belady", "infinite")):
        if name in windows[0]:
            colour, label = _style(name, position)
            ys = [math.nan if window[name] is None else window[name] for window in windows]
            style = "--" if name == "infinite" else "-"
            axes.plot(xs, ys, color=colour, linestyle=style, label=label)
    axes.set_xlabel("arrival time (s)" if timed else "requests")
    axes.set_ylabel("token hit ratio per window")
    axes.set_ylim(0, 1)
    axes.set_title(
        f"Hit ratio over time at {point.capacity:,} blocks: {_name(results)}", fontsize=11
    )
    axes.grid(True, alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    return _png(figure)


def _ttft(results: Results) -> bytes:
    import matplotlib.pyplot as plt

    points = [p for p in results.points if p.runs["lru"].ttft_ms]
    capacities = [point.capacity for point in points]
    figure, axes = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    shades = {"p50": "#1f77b4", "p90": "#ff7f0e", "p99": "#d62728"}
    for name, colour in shades.items():
        values = [point.runs["lru"].ttft_ms[name] / 1000.0 for point in points]
        axes.plot(capacities, values, marker="o", markersize=3.5, color=colour,
                  label=f"TTFT {name} (LRU)")  # fmt: skip
    plain = [(p.capacity, p.no_cache["1 worker"].ttft_ms) for p in points
             if "1 worker" in p.no_cache and p.no_cache["1 worker"].ttft_ms]  # fmt: skip
    if plain:
        axes.plot([c for c, _ in plain], [t["p50"] / 1000.0 for _, t in plain], color="#7f7f7f",
                  linestyle="--", marker="x", markersize=3.5,
                  label="TTFT p50 without a cache (same pool)")  # fmt: skip
    if results.slo is not None:
        axes.axhline(results.slo.ttft_ms / 1000.0, color="#2ca02c", linestyle="-.",
                     label=f"SLO {results.slo.ttft_ms:g} ms")  # fmt: skip
    _hbm_line(axes, results)
    _capacity_axis(axes, results)
    axes.set_yscale("log")
    axes.set_ylabel("time to first token (s)")
    axes.set_title(f"TTFT against capacity: {_name(results)}", fontsize=11)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="upper right", fontsize=8)
    figure.tight_layout()
    return _png(figure)


#: The tiers' colours in the stacked plot.
TIER_COLOURS = {"device": "#1f77b4", "host": "#ff7f0e", "disk": "#8c564b"}


def _tier_share(results: Results, label: str, tier: str) -> list[float]:
    """The share of prompt tokens ``tier`` supplied to ``label`` at each point."""
    shares = []
    for point in results.points:
        tiers = point.runs[label].tiers
        assert tiers is not None, "a tiered configuration's run has tier figures"
        shares.append(tiers.ratio(tier))
    return shares


def _tier_series(results: Results) -> list[tuple[str, str, str]]:
    """(label, colour, line style) of every tiered configuration (solid) and of each
    configuration they extend, without tiers (dashed, once each)."""
    series = []
    plain: dict[str, None] = {}
    for position, label in enumerate(results.tiered):
        series.append((label, MORE_COLOURS[position % len(MORE_COLOURS)], "-"))
        plain.setdefault(results.config(label).untiered, None)
    for position, label in enumerate(plain):
        colour = STYLE["lru"][0] if label == "lru" else MORE_COLOURS[-1 - position]
        series.append((label, colour, "--"))
    return series


def _tiers(results: Results) -> bytes:
    import matplotlib.pyplot as plt

    points = results.points
    capacities = [point.capacity for point in points]
    timed = results.mode == "timed"
    figure, panels = plt.subplots(1, 2 if timed else 1, figsize=(12.5 if timed else 7.5, 4.8),
                                  dpi=110, squeeze=False)  # fmt: skip
    axes = panels[0][0]
    first = results.tiered[0]
    axes.stackplot(capacities, *(_tier_share(results, first, tier) for tier in TIER_COLOURS),
                   colors=list(TIER_COLOURS.values()), alpha=0.3,
                   labels=[f"{first}: from {tier}" for tier in TIER_COLOURS])  # fmt: skip
    series = _tier_series(results)
    for label, colour, style in series:
        name = f"{label}: hit" if style == "-" else f"{label}: hit, device alone"
        hits = [point.runs[label].stats.token_hit_ratio for point in points]
        axes.plot(capacities, hits, marker="o", markersize=3.5, color=colour, linestyle=style,
                  label=name)  # fmt: skip
    if results.infinite is not None:
        colour, label = STYLE["infinite"]
        axes.axhline(results.infinite.token_hit_ratio, color=colour, linestyle=":", label=label)
    _hbm_line(axes, results)
    _capacity_axis(axes, results)
    axes.set_xlabel(f"device pool (blocks of {results.trace.tokens_per_block} tokens)")
    axes.set_ylabel("token hit ratio")
    axes.set_ylim(0, 1)
    axes.set_title(f"Hits by tier against the device pool: {_name(results)}", fontsize=11)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="upper left", fontsize=7)
    if timed:
        axes = panels[0][1]
        for label, colour, style in series:
            for percentile, marker in (("p50", "o"), ("p99", "^")):
                values = [p.runs[label].ttft_ms.get(percentile, math.nan) / 1000.0 for p in points]
                axes.plot(capacities, values, linestyle=style, marker=marker, markersize=3.5,
                          color=colour, label=f"{label}: TTFT {percentile}")  # fmt: skip
        _hbm_line(axes, results)
        _capacity_axis(axes, results)
        axes.set_xlabel(f"device pool (blocks of {results.trace.tokens_per_block} tokens)")
        axes.set_yscale("log")
        axes.set_ylabel("time to first token (s)")
        axes.set_title("TTFT with the tiers (solid) and without (dashed)", fontsize=11)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(loc="upper right", fontsize=7)
    figure.tight_layout()
    return _png(figure)


def _name(results: Results) -> str:
    """The trace's short name and the mode, for titles."""
    return f"{results.trace.name.split(' (')[0]}, {results.mode}"
