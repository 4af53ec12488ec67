"""The performance regression gate.

Run ``python -m benchmarks.gate --quick`` (CI, about a minute) or ``python -m
benchmarks.gate`` (the full set); ``--update-baseline`` records ``baseline.json``.
It measures a fixed set of cases for every implementation that runs, prints one table
of every figure with its limit, and exits 1 when any check fails:

1. accel is importable (unless ``KACHEDB_RADIX_PURE=1``: then its checks are skipped);
2. accel's median 1,024-token full match, uint32 array, 64 one-block nodes with 8
   siblings per level, is at most 2.45 us;
3. accel is at least 20x faster than the reference on that match, in the same run;
4. per implementation, eviction cost per freed block at 10^6 cached blocks is at most
   3x the cost at 10^3;
5. no case is more than 1.5x slower than ``baseline.json``, both sides normalised by
   a calibration loop timed in the same run, right before and right after the case
   (the faster of the two: a burst of load during one calibration would otherwise
   make the case look fast, or slow, by the same factor).

Timing: a warm-up, then rounds -- batches of repeated calls sized to ~50 us each, or
one call per round after an untimed setup when the call changes the tree -- with the
garbage collector off; the figure is the median over rounds. Any check over its limit
has each of its cases measured once more (with a fresh calibration), and each figure
keeps the better of its two measurements: noise only ever adds time, so a real
regression is slow both times while a burst of load on a shared machine rarely is.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import itertools
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import shapes
from .shapes import Implementations, Workload

#: The case the absolute target and the speed-up are about.
TARGET_CASE = "match/branchy/1024/uint32"
#: accel's median on TARGET_CASE may not exceed this (the seed's Rust figure).
ACCEL_TARGET_NS = 2450.0
#: accel must be at least this many times faster than the reference on TARGET_CASE.
MIN_SPEEDUP = 20.0
#: Eviction cost per block at the large size over the small size may not exceed this.
MAX_EVICT_GROWTH = 3.0
#: A case may be at most this many times slower than its baseline, normalised.
MAX_BASELINE_RATIO = 1.5
#: Cached-block counts compared by the eviction check.
EVICT_SMALL = 1_000
EVICT_LARGE = 1_000_000

BASELINE_PATH = Path(__file__).with_name("baseline.json")
BASELINE_FORMAT = 1

PASS, FAIL, SKIP, NEW = "PASS", "FAIL", "SKIP", "NEW"
FLAT = "flat-hash"


# ---------------------------------------------------------------- timing


@dataclass(frozen=True)
class Policy:
    """How long to time things.

    Attributes:
        budget_s: target time spent in timed rounds per case.
        min_rounds / max_rounds: bounds on the number of rounds.
        batch_ns: repeated calls are timed in batches of about this length.
        calibration_s: time budget for the calibration loop before each case.
    """

    budget_s: float
    min_rounds: int
    max_rounds: int
    batch_ns: float = 50_000.0
    calibration_s: float = 0.05


QUICK_POLICY = Policy(budget_s=0.5, min_rounds=15, max_rounds=301)
FULL_POLICY = Policy(budget_s=1.0, min_rounds=31, max_rounds=1001, calibration_s=0.1)

Clock = Callable[[], int]


@dataclass(frozen=True)
class Timing:
    """A median time per unit over ``rounds`` rounds of ``inner`` calls each."""

    median_ns: float
    rounds: int
    inner: int


def time_workload(work: Workload, policy: Policy, clock: Clock = time.perf_counter_ns) -> Timing:
    """Time ``work`` under ``policy``; the garbage collector is off while timing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        if work.setup is None:
            return _time_repeated(work, policy, clock)
        return _time_rounds(work, work.setup, policy, clock)
    finally:
        if enabled:
            gc.enable()


def _round_count(policy: Policy, round_ns: float) -> int:
    wanted = int(policy.budget_s * 1e9 / max(round_ns, 1.0))
    return max(policy.min_rounds, min(policy.max_rounds, wanted))


def _time_repeated(work: Workload, policy: Policy, clock: Clock) -> Timing:
    call = work.run
    warmup_ns = policy.budget_s * 1e9 / 10
    calls = 0
    start = clock()
    while calls < 3 or clock() - start < warmup_ns:
        call()
        calls += 1
    per_call = max((clock() - start) / calls, 1.0)
    inner = max(1, math.ceil(policy.batch_ns / per_call))
    rounds = _round_count(policy, inner * per_call)
    samples: list[float] = []
    for _ in range(rounds):
        began = clock()
        for _ in itertools.repeat(None, inner):
            call()
        samples.append((clock() - began) / inner / work.units)
    return Timing(statistics.median(samples), rounds, inner)


def _time_rounds(work: Workload, setup: Callable[[], None], policy: Policy, clock: Clock) -> Timing:
    call = work.run
    start = clock()
    for _ in range(3):  # warm-up rounds, setup included, to size the run
        setup()
        call()
    rounds = _round_count(policy, (clock() - start) / 3)
    samples: list[float] = []
    for _ in range(rounds):
        setup()
        began = clock()
        call()
        samples.append((clock() - began) / work.units)
    return Timing(statistics.median(samples), rounds, 1)


# The calibration loop: the operations a pure-Python match spends its time on
# (slicing a list into a tuple, one dict probe, comparing two slices), 64 times.
_CAL_TOKENS = list(range(100_000, 100_000 + 65 * 16))
_CAL_TABLE = {tuple(_CAL_TOKENS[i : i + 16]): i for i in range(64)}


def calibration_work() -> int:
    """The fixed workload every case is normalised by (about 20-40 us on a 2020s core)."""
    tokens, table = _CAL_TOKENS, _CAL_TABLE
    total = 0
    for start in range(64):
        total += table[tuple(tokens[start : start + 16])]
        if tokens[start : start + 16] == tokens[start + 1 : start + 17]:
            total += 1
    return total


# ---------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One measured figure: ``name`` (``kind/shape/size/input``) run by ``impl``."""

    name: str
    impl: str
    make: Callable[[], Workload] = field(compare=False, repr=False)

    @property
    def key(self) -> str:
        """The baseline key, ``name@impl``."""
        return f"{self.name}@{self.impl}"


@dataclass(frozen=True)
class Measurement:
    """A case's median time per unit and the calibration timed just before it."""

    median_ns: float
    calib_ns: float
    rounds: int = 0
    unit: str = "call"

    @property
    def normalised(self) -> float:
        """The median in calibration loops: comparable across machines."""
        return self.median_ns / self.calib_ns


@dataclass(frozen=True)
class Plan:
    """What a gate run measures."""

    mode: str
    cases: list[Case]
    evict_sizes: dict[str, tuple[int, int]]
    notes: list[str] = field(default_factory=list)


def _match_case(impls: Implementations, impl: str, shape: str, length: int, kind: str) -> Case:
    def make() -> Workload:
        built = shapes.get_shape(shape, length)
        tree = _built(impls, impl, shape, length)
        return shapes.match_workload(tree, built.query[:length], kind)

    return Case(f"match/{shape}/{length}/{kind}", impl, make)


@functools.lru_cache(maxsize=32)
def _built_cached(impl: str, factory: Any, shape: str, length: int) -> Any:
    built = shapes.get_shape(shape, length)
    return shapes.build_flat(built) if impl == FLAT else shapes.build_tree(factory, impl, built)


def _built(impls: Implementations, impl: str, shape: str, length: int) -> Any:
    # Each case's tree is built to serve exactly its query length (the query is the
    # whole cached path); trees are shared by the input kinds and kept for the run.
    return _built_cached(impl, impls.factories.get(impl), shape, length)


#: (shape, length, input kinds) of the match cases; the quick set is a subset.
QUICK_MATCHES: list[tuple[str, int, tuple[str, ...]]] = [
    ("branchy", 1024, ("uint32", "list")),
    ("long_edge", 1024, ("uint32",)),
    ("long_edge", 16_384, ("int64",)),
    ("system_prompts", 1024, ("uint32",)),
    ("chat", 4096, ("uint32",)),
]
FULL_MATCHES: list[tuple[str, int, tuple[str, ...]]] = [
    ("branchy", 16, ("uint32",)),
    ("branchy", 1024, ("uint32", "list", "int64")),
    ("branchy", 16_384, ("uint32",)),
    ("long_edge", 16, ("uint32",)),
    ("long_edge", 1024, ("uint32", "list")),
    ("long_edge", 16_384, ("int64", "uint32")),
    ("long_edge", 131_072, ("uint32", "list")),
    ("system_prompts", 1024, ("uint32",)),
    ("system_prompts", 131_072, ("uint32",)),
    ("chat", 4096, ("uint32", "list")),
    ("chat", 131_072, ("uint32",)),
]
INSERT_KINDS: dict[str, Callable[..., Workload]] = {
    "insert/fresh": shapes.insert_fresh,
    "insert/shared": shapes.insert_shared,
    "insert/split": shapes.insert_split,
    "cycle/pin-insert-release": shapes.serving_cycle,
}


def build_plan(impls: Implementations, quick: bool) -> Plan:
    """The cases of a quick or full run, for every implementation that runs."""
    trees = list(impls.factories)
    cases: list[Case] = []
    for shape, length, kinds in QUICK_MATCHES if quick else FULL_MATCHES:
        for kind in kinds:
            for impl in [*trees, FLAT]:
                cases.append(_match_case(impls, impl, shape, length, kind))
    for length in (1024,) if quick else (1024, 16_384):
        for name, maker in INSERT_KINDS.items():
            for impl in trees:
                factory = impls.factories[impl]
                cases.append(
                    Case(f"{name}/{length}", impl, functools.partial(maker, factory, impl, length))
                )
    evict_sizes = {impl: (EVICT_SMALL, EVICT_LARGE) for impl in trees}
    sizes = sorted({EVICT_SMALL, EVICT_LARGE, *(() if quick else shapes.EVICT_SIZES)})
    for size in sizes:
        for impl in trees:
            factory = impls.factories[impl]
            cases.append(
                Case(
                    f"evict/{size}",
                    impl,
                    functools.partial(shapes.evict_workload, factory, impl, size),
                )
            )
    notes = [
        f"eviction check: cost per freed block at {EVICT_LARGE:,} vs {EVICT_SMALL:,} cached "
        f"blocks (block size 1, evict({shapes.EVICT_BATCH}) per timed call), every implementation"
    ]
    return Plan("quick" if quick else "full", cases, evict_sizes, notes)


def measure_case(case: Case, policy: Policy) -> Measurement:
    """Calibrate, time ``case`` (its tree is built untimed first), calibrate again.

    The calibration kept is the faster of the two loops: noise only adds time.
    """
    calibrate = Workload(calibration_work)
    before = time_workload(calibrate, _calibration_policy(policy))
    work = case.make()
    timing = time_workload(work, policy)
    after = time_workload(calibrate, _calibration_policy(policy))
    calibration_ns = min(before.median_ns, after.median_ns)
    return Measurement(timing.median_ns, calibration_ns, timing.rounds, work.unit)


def _calibration_policy(policy: Policy) -> Policy:
    return Policy(policy.calibration_s, 15, 301, policy.batch_ns)


# ---------------------------------------------------------------- checks


@dataclass(frozen=True)
class Verdict:
    """One row of the gate's table.

    Attributes:
        figure: what is measured.
        impl: which implementation (or "" for a cross-implementation figure).
        median: the case's median time, formatted ("" when not a single case).
        value: the figure compared with the limit, formatted.
        limit: the limit, formatted.
        status: PASS, FAIL, SKIP (not applicable in this run) or NEW (no baseline).
        keys: the cases the figure depends on (re-measured when it fails).
        note: anything a reader needs (why skipped, re-measure history).
    """

    figure: str
    impl: str
    median: str
    value: str
    limit: str
    status: str
    keys: tuple[str, ...] = ()
    note: str = ""


Results = Mapping[str, Sequence[Measurement]]


def best_median(results: Results, key: str) -> float:
    """The lower of a case's medians (one, or two after a re-measure)."""
    return min(m.median_ns for m in results[key])


def best_normalised(results: Results, key: str) -> float:
    """The lower of a case's normalised medians."""
    return min(m.normalised for m in results[key])


def _history(results: Results, keys: Sequence[str]) -> str:
    again = [key for key in keys if len(results.get(key, ())) > 1]
    if not again:
        return ""
    parts = []
    for key in again:
        firsts = ", ".join(format_ns(m.median_ns) for m in results[key])
        parts.append(f"{key}: {firsts}")
    return "re-measured, best kept (" + "; ".join(parts) + ")"


def evaluate(
    results: Results,
    plan: Plan,
    impls: Implementations,
    baseline: Mapping[str, float],
) -> list[Verdict]:
    """Every check of the gate, from the measurements so far."""
    verdicts: list[Verdict] = []
    accel_runs = "accel" in impls.factories
    accel_why = impls.missing.get("accel", "")
    absent = SKIP if impls.pure else FAIL

    if accel_runs:
        verdicts.append(Verdict("accel importable", "accel", "", "yes", "required", PASS))
    else:
        verdicts.append(
            Verdict("accel importable", "accel", "", "no", "required", absent, note=accel_why)
        )

    target = f"{TARGET_CASE}@accel"
    if target in results:
        median = best_median(results, target)
        verdicts.append(
            Verdict(
                f"{TARGET_CASE} (64 one-block nodes, 8 siblings/level)",
                "accel",
                format_ns(median),
                format_ns(median),
                f"<= {format_ns(ACCEL_TARGET_NS)}",
                PASS if median <= ACCEL_TARGET_NS else FAIL,
                (target,),
                _history(results, [target]),
            )
        )
    else:
        verdicts.append(
            Verdict(
                f"{TARGET_CASE} (64 one-block nodes, 8 siblings/level)",
                "accel",
                "",
                "not run",
                f"<= {format_ns(ACCEL_TARGET_NS)}",
                absent,
                note=accel_why,
            )
        )

    reference_key = f"{TARGET_CASE}@reference"
    if target in results and reference_key in results:
        speedup = best_median(results, reference_key) / best_median(results, target)
        keys = (reference_key, target)
        verdicts.append(
            Verdict(
                f"speed-up reference/accel on {TARGET_CASE}",
                "",
                "",
                f"{speedup:.1f}x",
                f">= {MIN_SPEEDUP:g}x",
                PASS if speedup >= MIN_SPEEDUP else FAIL,
                keys,
                _history(results, keys),
            )
        )
    else:
        verdicts.append(
            Verdict(
                f"speed-up reference/accel on {TARGET_CASE}",
                "",
                "",
                "not run",
                f">= {MIN_SPEEDUP:g}x",
                absent,
                note=accel_why,
            )
        )

    for impl, (small, large) in plan.evict_sizes.items():
        keys = (f"evict/{large}@{impl}", f"evict/{small}@{impl}")
        if not all(key in results for key in keys):
            continue
        low, high = best_median(results, keys[1]), best_median(results, keys[0])
        growth = high / low
        note = f"{format_ns(high)}/block at {large:,} vs {format_ns(low)}/block at {small:,}"
        history = _history(results, keys)
        verdicts.append(
            Verdict(
                f"eviction per block, {large:,} / {small:,} cached blocks",
                impl,
                "",
                f"{growth:.2f}x",
                f"<= {MAX_EVICT_GROWTH:g}x",
                PASS if growth <= MAX_EVICT_GROWTH else FAIL,
                keys,
                f"{note}; {history}" if history else note,
            )
        )

    for case in plan.cases:
        key = case.key
        if key not in results:
            continue
        median = best_median(results, key)
        unit = results[key][0].unit
        shown = f"{format_ns(median)}/{unit}"
        if key not in baseline:
            verdicts.append(
                Verdict(
                    case.name,
                    case.impl,
                    shown,
                    "no baseline",
                    f"<= {MAX_BASELINE_RATIO:g}x baseline",
                    NEW,
                    (key,),
                    "record one with --update-baseline",
                )
            )
            continue
        ratio = best_normalised(results, key) / baseline[key]
        verdicts.append(
            Verdict(
                case.name,
                case.impl,
                shown,
                f"{ratio:.2f}x baseline",
                f"<= {MAX_BASELINE_RATIO:g}x baseline",
                PASS if ratio <= MAX_BASELINE_RATIO else FAIL,
                (key,),
                _history(results, [key]),
            )
        )
    return verdicts


# ---------------------------------------------------------------- the run


@dataclass
class GateRun:
    """What a gate run measured and decided."""

    plan: Plan
    results: dict[str, list[Measurement]]
    verdicts: list[Verdict]
    remeasured: list[str]

    @property
    def failed(self) -> list[Verdict]:
        """The failing rows."""
        return [v for v in self.verdicts if v.status == FAIL]

    @property
    def exit_code(self) -> int:
        """0 when nothing failed, else 1."""
        return 1 if self.failed else 0


Measure = Callable[[Case], Measurement]


def run_gate(
    plan: Plan,
    impls: Implementations,
    baseline: Mapping[str, float],
    measure: Measure,
    progress: Callable[[str], None] | None = None,
) -> GateRun:
    """Measure every case, evaluate, re-measure the cases of failing checks once, decide."""
    results: dict[str, list[Measurement]] = {}
    for index, case in enumerate(plan.cases, 1):
        results[case.key] = [measure(case)]
        if progress is not None:
            progress(
                f"[{index}/{len(plan.cases)}] {case.key}: "
                f"{format_ns(results[case.key][0].median_ns)}"
            )
    verdicts = evaluate(results, plan, impls, baseline)
    suspects = {key for verdict in verdicts if verdict.status == FAIL for key in verdict.keys}
    remeasured: list[str] = []
    for case in plan.cases:
        if case.key in suspects:
            results[case.key].append(measure(case))
            remeasured.append(case.key)
            if progress is not None:
                progress(f"re-measured {case.key}: {format_ns(results[case.key][-1].median_ns)}")
    if remeasured:
        verdicts = evaluate(results, plan, impls, baseline)
    return GateRun(plan, results, verdicts, remeasured)


# ---------------------------------------------------------------- baseline


def load_baseline(path: Path) -> dict[str, float]:
    """Normalised medians by case key; empty when the file does not exist."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != BASELINE_FORMAT:
        raise ValueError(f"{path}: unknown baseline format {data.get('format')!r}")
    return {key: float(entry["normalised"]) for key, entry in data["cases"].items()}


def save_baseline(path: Path, results: Results, machine: Mapping[str, str], command: str) -> int:
    """Merge the best measurement of each case into ``path``; returns cases written."""
    cases: dict[str, Any] = {}
    if path.exists():
        cases = dict(json.loads(path.read_text(encoding="utf-8")).get("cases", {}))
    for key, measured in results.items():
        best = min(measured, key=lambda m: m.normalised)
        cases[key] = {
            "normalised": round(best.normalised, 6),
            "median_ns": round(best.median_ns, 1),
            "calibration_ns": round(best.calib_ns, 1),
            "unit": best.unit,
        }
    document = {
        "format": BASELINE_FORMAT,
        "about": (
            "Normalised medians (case median / calibration-loop median, timed in the same "
            "run) that benchmarks/gate.py compares against; written by "
            "`python -m benchmarks.gate --update-baseline`."
        ),
        "recorded_with": {"command": command, **machine},
        "cases": dict(sorted(cases.items())),
    }
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return len(results)


# ---------------------------------------------------------------- output


def format_ns(value: float) -> str:
    """A duration in ns, us, ms or s with three significant digits."""
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} ns"


def machine() -> dict[str, str]:
    """The machine a run happened on, for the output and the baseline file."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "n/a"
    return {
        "cpu": model,
        "cpus": str(os.cpu_count()),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": load,
    }


COLUMNS = ("figure", "impl", "median", "value", "limit", "status", "note")


def render_plain(verdicts: Sequence[Verdict]) -> str:
    """The verdicts as a plain-text table."""
    rows = [COLUMNS] + [
        (v.figure, v.impl, v.median, v.value, v.limit, v.status, v.note) for v in verdicts
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    lines = []
    for index, row in enumerate(rows):
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths) + "  ----")
    return "\n".join(lines)


def print_table(verdicts: Sequence[Verdict], plain: bool) -> None:
    """Print the verdicts with ``rich`` when it is installed (and not ``plain``)."""
    if not plain:
        try:
            console_module = importlib.import_module("rich.console")
            table_module = importlib.import_module("rich.table")
        except ImportError:
            pass
        else:
            table = table_module.Table(title="kachedb-radix performance gate")
            for column in COLUMNS:
                table.add_column(column)
            colours = {PASS: "green", FAIL: "bold red", SKIP: "yellow", NEW: "cyan"}
            for v in verdicts:
                status = f"[{colours[v.status]}]{v.status}[/]"
                table.add_row(v.figure, v.impl, v.median, v.value, v.limit, status, v.note)
            console_module.Console(width=200).print(table)
            return
    print(render_plain(verdicts))


def summary(run: GateRun, impls: Implementations) -> str:
    """The closing lines: what ran, what failed, what has no baseline."""
    counts = {status: 0 for status in (PASS, FAIL, SKIP, NEW)}
    for verdict in run.verdicts:
        counts[verdict.status] += 1
    lines = [impls.describe()]
    lines.append(
        f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped, "
        f"{counts[NEW]} without baseline; re-measured: {len(run.remeasured)}"
    )
    if counts[NEW]:
        lines.append(
            "cases without a baseline are not gated: record them with "
            "`python -m benchmarks.gate --update-baseline` (and --quick)"
        )
    lines.append("GATE " + ("FAILED" if run.exit_code else "PASSED"))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="the CI set (about a minute)")
    parser.add_argument(
        "--update-baseline",
        action="store_true",
        help="measure every case twice and merge the best into the baseline",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=BASELINE_PATH,
        help=f"baseline file (default {BASELINE_PATH.name} beside this file)",
    )
    parser.add_argument("--json", type=Path, help="also write the results and verdicts here")
    parser.add_argument("--plain", action="store_true", help="plain-text table even with rich")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    impls = shapes.find_implementations()
    plan = build_plan(impls, args.quick)
    policy = QUICK_POLICY if args.quick else FULL_POLICY
    host = machine()
    print(f"kachedb-radix gate, {plan.mode} mode, {len(plan.cases)} cases")
    print(impls.describe())
    print("machine: " + ", ".join(f"{k}={v}" for k, v in host.items()))
    for note in plan.notes:
        print(note)
    baseline = {} if args.update_baseline else load_baseline(args.baseline)

    def measure(case: Case) -> Measurement:
        return measure_case(case, policy)

    def progress(line: str) -> None:
        print("  " + line, flush=True)

    run = run_gate(plan, impls, baseline, measure, progress)
    if args.update_baseline:
        for case in plan.cases:  # best of two, like a re-measured case
            if len(run.results[case.key]) == 1:
                run.results[case.key].append(measure(case))
        command = "python -m benchmarks.gate --update-baseline" + (" --quick" if args.quick else "")
        written = save_baseline(args.baseline, run.results, host, command)
        run.verdicts = evaluate(run.results, plan, impls, load_baseline(args.baseline))
    calibration = statistics.median(m[0].calib_ns for m in run.results.values())
    print(
        f"calibration loop: median {format_ns(calibration)} "
        f"(each case is normalised by the faster of the loops timed just before and after it)"
    )
    print_table(run.verdicts, args.plain)
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "mode": plan.mode,
                    "machine": host,
                    "implementations": list(impls.factories),
                    "missing": impls.missing,
                    "results": {k: [vars(m) for m in v] for k, v in run.results.items()},
                    "verdicts": [vars(v) for v in run.verdicts],
                    "exit_code": run.exit_code,
                },
                indent=1,
                default=list,
            )
            + "\n",
            encoding="utf-8",
        )
    print(summary(run, impls))
    print(f"took {time.perf_counter() - started:.0f} s")
    if args.update_baseline:
        print(f"baseline: wrote {written} cases to {args.baseline}")
        return 0
    return run.exit_code


if __name__ == "__main__":
    sys.exit(main())
