"""The two plots ``--out DIR`` draws (matplotlib, the ``plot`` extra; PNG files).

* ``hit_ratio_vs_capacity.png``: token hit ratio against pool size (log scale) for
  the tree's LRU, each policy compared beside it (``--policy``), Belady and an
  infinite pool -- the capacity planner's curve: the knee, and the gap each policy
  leaves to the best achievable.
* ``hit_ratio_over_time.png``: the token hit ratio per window of requests at one
  capacity (``timeline_capacity``), over arrival time when the trace has
  timestamps, else over requests -- warm-up, and how steady the benefit is.
"""

from __future__ import annotations

from pathlib import Path

from .results import Results

#: Colours and labels of the policies, the same in both plots.
STYLE = {
    "lru": ("#1f77b4", "LRU (the tree)"),
    "belady": ("#2ca02c", "Belady (offline bound)"),
    "infinite": ("#7f7f7f", "infinite capacity"),
    "lfu": ("#ff7f0e", "LFU"),
    "fifo": ("#8c564b", "FIFO"),
    "priority": ("#d62728", "priority"),
    "slru": ("#9467bd", "SLRU"),
}


def write_plots(results: Results, out: Path) -> list[Path]:
    """Draw both plots into ``out``; returns their paths.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    points = results.points
    capacities = [point.capacity for point in points]
    curves = {"lru": [point.lru.token_hit_ratio for point in points]}
    for name in results.policies:
        curves[name] = [point.policies[name].stats.token_hit_ratio for point in points]
    belady = [point.belady.token_hit_ratio for point in points if point.belady is not None]
    if len(belady) == len(points):
        curves["belady"] = belady
    figure, axes = plt.subplots(figsize=(7, 4.2), dpi=110)
    for name, values in curves.items():
        colour, label = STYLE[name]
        axes.plot(capacities, values, marker="o", color=colour, label=label)
    if results.infinite is not None:
        colour, label = STYLE["infinite"]
        axes.axhline(results.infinite.token_hit_ratio, color=colour, linestyle="--", label=label)
    axes.set_xscale("log")
    axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    axes.set_xlabel(f"pool capacity (blocks of {results.trace.tokens_per_block} tokens)")
    axes.set_ylabel("token hit ratio")
    axes.set_ylim(0, 1)
    axes.set_title(f"Hit ratio against capacity: {_name(results)}", fontsize=11)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="upper left", fontsize=9)
    figure.tight_layout()
    against_capacity = out / "hit_ratio_vs_capacity.png"
    figure.savefig(against_capacity)
    plt.close(figure)

    point = results.point(results.timeline_capacity)
    windows = point.timeline
    timed = all(window["time_s"] is not None for window in windows)
    xs = [window["time_s"] if timed else window["requests"] for window in windows]
    figure, axes = plt.subplots(figsize=(7, 4.2), dpi=110)
    for name in ("lru", *results.policies, "belady", "infinite"):
        if name in windows[0]:
            colour, label = STYLE[name]
            ys = [window[name] for window in windows]
            style = "--" if name == "infinite" else "-"
            axes.plot(xs, ys, color=colour, linestyle=style, label=label)
    axes.set_xlabel("arrival time (s)" if timed else "requests")
    axes.set_ylabel("token hit ratio per window")
    axes.set_ylim(0, 1)
    axes.set_title(
        f"Hit ratio over time at {point.capacity:,} blocks: {_name(results)}", fontsize=11
    )
    axes.grid(True, alpha=0.3)
    axes.legend(loc="lower right", fontsize=9)
    figure.tight_layout()
    over_time = out / "hit_ratio_over_time.png"
    figure.savefig(over_time)
    plt.close(figure)
    return [against_capacity, over_time]


def _name(results: Results) -> str:
    """The trace's short name and the mode, for titles."""
    return f"{results.trace.name.split(' (')[0]}, {results.mode}"
