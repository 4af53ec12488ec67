"""Plot match latency against prompt length: ``python -m benchmarks.plot``.

Measures a full match of L tokens (L = 16 .. 131,072; branchy stops at 16,384) on each
tree shape of ``benchmarks/shapes.py``, for every implementation that runs and the
flat hash-map baseline, with uint32-array input (solid lines) and list input (dashed),
using the gate's timing loop (warm-up, rounds, median, garbage collector off). Writes
``benchmarks/match_latency.png`` and prints the medians as Markdown tables.
Needs matplotlib (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kachedb_radix.spec.gate import run as gate_run
from kachedb_radix.spec.gate import timing

from . import shapes

OUTPUT = Path(__file__).with_name("match_latency.png")
POLICY = timing.Policy(budget_s=0.2, min_rounds=9, max_rounds=201)
KINDS = ("uint32", "list")
STYLES = {"uint32": "-", "list": "--"}
FLAT = "flat-hash"
COLOURS = {"reference": "tab:blue", "accel": "tab:red", FLAT: "tab:green"}

#: (shape, impl, kind) -> [(length, median ns)]
Series = dict[tuple[str, str, str], list[tuple[int, float]]]


def measure(impls: shapes.Implementations, lengths: Sequence[int], quiet: bool) -> Series:
    """Median match latency per shape, implementation, input kind and length."""
    series: Series = {}
    names = [*impls.factories, FLAT]
    top = max(lengths)
    for shape in shapes.SHAPES:
        shape_lengths = shapes.shape_lengths(shape, tuple(lengths))
        built = shapes.get_shape(shape, max(shape_lengths))
        for impl in names:
            if impl == FLAT:
                tree: Any = shapes.build_flat(built)
            else:
                tree = shapes.build_tree(impls.factories[impl], impl, built)
            for kind in KINDS:
                points = series.setdefault((shape, impl, kind), [])
                for length in shape_lengths:
                    work = shapes.match_workload(tree, built.query[:length], kind)
                    points.append((length, timing.time_workload(work, POLICY).median_ns))
                if not quiet:
                    last = timing.format_ns(points[-1][1])
                    print(f"  {shape} {impl} {kind}: {len(points)} lengths, {last} at {top}")
            del tree
    return series


def markdown(series: Series, impls: Sequence[str]) -> str:
    """The medians as one Markdown table per shape and input kind."""
    blocks = []
    for shape in shapes.SHAPES:
        for kind in KINDS:
            lengths = sorted(
                {n for (s, _, k), pts in series.items() if (s, k) == (shape, kind) for n, _ in pts}
            )
            if not lengths:
                continue
            table = {
                (impl, n): ns
                for (s, impl, k), pts in series.items()
                if (s, k) == (shape, kind)
                for n, ns in pts
            }
            lines = [
                f"**{shape}, {kind} input** (median per full match)",
                "",
                "| tokens | " + " | ".join(impls) + " |",
                "|---:|" + "---:|" * len(impls),
            ]
            for n in lengths:
                cells = [timing.format_ns(table[(i, n)]) if (i, n) in table else "-" for i in impls]
                lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
            blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def draw(series: Series, impls: shapes.Implementations, out: Path, title: str) -> None:
    """Four log-log panels, one per shape."""
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    pyplot = importlib.import_module("matplotlib.pyplot")
    figure, axes = pyplot.subplots(2, 2, figsize=(12, 9), sharey=True)
    for axis, shape in zip(axes.flat, shapes.SHAPES, strict=True):
        for (s, impl, kind), points in sorted(series.items()):
            if s != shape or not points:
                continue
            xs = [n for n, _ in points]
            ys = [ns / 1000 for _, ns in points]
            axis.plot(
                xs,
                ys,
                STYLES[kind],
                marker="o",
                markersize=3,
                color=COLOURS.get(impl, "black"),
                label=f"{impl} ({kind})",
            )
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_title(shapes.get_shape(shape, 16).name.replace("_", " "))
        axis.set_xlabel("prompt length (tokens), full match")
        axis.set_ylabel("median latency (us)")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    missing = "; ".join(f"{k} not run: {v}" for k, v in impls.missing.items())
    figure.suptitle(title + (f"\n{missing}" if missing else ""), fontsize=10)
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    pyplot.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.plot",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="lengths 16, 1,024, 16,384 only")
    parser.add_argument("--out", type=Path, default=OUTPUT, help=f"PNG path (default {OUTPUT})")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    impls = shapes.find_implementations()
    print(impls.describe())
    lengths = shapes.QUICK_MATCH_LENGTHS if args.quick else shapes.MATCH_LENGTHS
    series = measure(impls, lengths, args.quiet)
    host = gate_run.machine()
    title = (
        f"kachedb-radix match latency, median; {host['cpu']}, {host['cpus']} CPUs, "
        f"Python {host['python']}"
    )
    draw(series, impls, args.out, title)
    print(markdown(series, [*impls.factories, FLAT]))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
