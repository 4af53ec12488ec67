"""A gate run: measure every case, decide, re-measure what failed once, decide again.

Noise only ever adds time, so a real regression is slow both times while a burst of load
on a shared machine rarely is: every check over its limit has its cases measured once
more (with fresh calibrations; by the command line, in a fresh process, where a case's
memory lands anew) and each figure keeps the best of its measurements.

A second run may be given the first one's ``--json`` file (``--prior``): its measurements
count beside the new ones, so a figure fails only when it was over its limit in both runs
(a regression shows both times; a noisy minute seldom hits the same case twice).
Several runs' files may be given (:func:`load_priors`): each counts, and a baseline
recorded with them keeps the middle over every run (one process per run).
"""

from __future__ import annotations

import importlib
import os
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..inputs import InputError, read_json
from .cases import Case, MemoryCase, Plan
from .memory import bytes_per_block
from .timing import CALIBRATION_WORK, Policy, time_workload
from .verdicts import (
    FAIL,
    MAX_BASELINE_RATIO,
    NEW,
    PASS,
    Baseline,
    Measurement,
    Verdict,
    evaluate,
    shown,
)

Measure = Callable[[Case], Measurement]
MeasureMemory = Callable[[MemoryCase], float]
#: Measures several cases once each, together (one pass): the gate's second look.
Remeasure = Callable[[Sequence[Case]], Mapping[str, Measurement]]


def measure_case(case: Case, policy: Policy) -> Measurement:
    """Time ``case`` (its tree is built untimed first) with its calibration loop -- the
    anchor of its kind -- timed in a batch after every round: the figure is the median of
    the per-round ratios, so a slow minute slows both sides of each ratio."""
    work = case.make()
    timing = time_workload(work, policy, anchor=CALIBRATION_WORK[case.calibration])
    assert timing.anchor_ns is not None
    return Measurement(
        timing.median_ns,
        timing.anchor_ns,
        case.calibration,
        timing.rounds,
        work.unit,
        ratio=timing.ratio,
    )


def measure_memory(case: MemoryCase) -> float:
    """Bytes per cached block of the case's tree (not timed)."""
    return bytes_per_block(case.build())


@dataclass
class GateRun:
    """What a gate run measured and decided."""

    plan: Plan
    results: dict[str, list[Measurement]]
    memory: dict[str, float]
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


def run_gate(
    plan: Plan,
    baseline: Baseline,
    measure: Measure,
    memory: MeasureMemory = measure_memory,
    progress: Callable[[str], None] | None = None,
    prior: Mapping[str, Sequence[Measurement]] | None = None,
    max_ratio: float = MAX_BASELINE_RATIO,
    remeasure: Remeasure | None = None,
) -> GateRun:
    """Measure every case, evaluate, re-measure the cases of failing checks once, decide.

    ``prior``: an earlier run's measurements (:func:`load_prior`), kept before this run's
    for the cases of this plan; ``max_ratio``: the limit of a timed case against its
    baseline; ``remeasure``: how the cases of failing checks are measured again, all in
    one pass (the command line's: a fresh process, :mod:`kachedb_radix.spec.cli.gate_fresh`);
    None: with ``measure``, here.  Cost: one measurement per case, again per failing one.
    """
    say = progress or (lambda line: None)
    earlier = prior or {}
    first = 1 + max((m.sweep for runs in earlier.values() for m in runs), default=-1)
    results: dict[str, list[Measurement]] = {}
    total = len(plan.cases) + len(plan.memory)
    for index, case in enumerate(plan.cases, 1):
        m = replace(measure(case), sweep=first)
        results[case.name] = [*earlier.get(case.name, ()), m]
        say(f"[{index}/{total}] {case.name}: {m.median_ns:.4g} ns/{m.unit}")
    sizes: dict[str, float] = {}
    for index, mem in enumerate(plan.memory, len(plan.cases) + 1):
        sizes[mem.name] = memory(mem)
        say(f"[{index}/{total}] {mem.name}: {sizes[mem.name]:.1f} bytes/block")
    verdicts = evaluate(results, sizes, plan, baseline, max_ratio)
    suspects = {key for verdict in verdicts if verdict.status == FAIL for key in verdict.keys}
    again = [case for case in plan.cases if case.name in suspects]
    if again and remeasure is not None:
        fresh = dict(remeasure(again))
    else:
        fresh = {case.name: measure(case) for case in again}
    remeasured: list[str] = []
    for case in again:
        results[case.name].append(replace(fresh[case.name], sweep=first + 1))
        remeasured.append(case.name)
        say(f"re-measured {case.name}: {results[case.name][-1].median_ns:.4g} ns")
    if remeasured:
        verdicts = evaluate(results, sizes, plan, baseline, max_ratio)
    return GateRun(plan, results, sizes, verdicts, remeasured)


# ---------------------------------------------------------------- output


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
    except OSError:  # pragma: no cover - platforms without getloadavg
        load = "n/a"
    return {
        "cpu": model,
        "cpus": str(os.cpu_count()),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": load,
    }


COLUMNS = ("figure", "median", "value", "limit", "status", "note")


def render_plain(verdicts: Sequence[Verdict]) -> str:
    """The verdicts as a plain-text table."""
    rows = [COLUMNS] + [(v.figure, v.median, v.value, v.limit, v.status, v.note) for v in verdicts]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    lines = []
    for index, row in enumerate(rows):
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths) + "  ----")
    return "\n".join(lines)


def render_rich(verdicts: Sequence[Verdict], title: str) -> Any:
    """The verdicts as a ``rich`` table, or None when rich is not installed."""
    try:
        table_module = importlib.import_module("rich.table")
    except ImportError:
        return None
    table = table_module.Table(title=title)
    for column in COLUMNS:
        table.add_column(column)
    colours = {PASS: "green", FAIL: "bold red", NEW: "cyan"}
    for v in verdicts:
        status = f"[{colours[v.status]}]{v.status}[/]"
        table.add_row(v.figure, v.median, v.value, v.limit, status, v.note)
    return table


def summary(run: GateRun) -> str:
    """The closing lines: what failed, what has no baseline, the verdict."""
    counts = {status: 0 for status in (PASS, FAIL, NEW)}
    for verdict in run.verdicts:
        counts[verdict.status] += 1
    lines = [
        f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[NEW]} without baseline; "
        f"re-measured: {len(run.remeasured)}"
    ]
    if counts[NEW]:
        lines.append("cases without a baseline are not gated: record them with --update-baseline")
    checks = counts[PASS] + counts[FAIL]
    covered = (
        f"{checks} checks on {len(run.plan.cases)} timed and {len(run.plan.memory)} memory cases"
    )
    word = "FAILED" if run.exit_code else "PASSED" if checks else "GATED NOTHING"
    lines.append(f"GATE {word} ({covered})")
    return "\n".join(lines)


class PriorError(ValueError):
    """A ``--prior`` file the gate cannot use; the message says why."""


def load_prior(path: Path, plan: Plan) -> dict[str, list[Measurement]]:
    """The measurements of an earlier run (its ``--json`` file) of the same target and
    mode, by case.  O(size of the file).

    Raises:
        PriorError: unreadable, not JSON, not a gate run's file, or a run of another
            target or mode (its figures would gate the wrong thing).
    """
    try:
        data = read_json(path, "prior run")
    except InputError as exc:
        raise PriorError(str(exc)) from None
    where = f"prior run {path}"
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise PriorError(f"{where}: not the --json file of a gate run")
    for field_name, wanted in (("target", plan.target), ("mode", plan.mode)):
        if data.get(field_name) != wanted:
            raise PriorError(
                f"{where}: a run with {field_name} {shown(data.get(field_name))}, "
                f"this one is {wanted!r}"
            )
    results: dict[str, list[Measurement]] = {}
    for key, runs in data["results"].items():
        if not isinstance(runs, list) or not all(is_measurement(m) for m in runs):
            raise PriorError(
                f"{where}: results.{key}: a measurement that is not one (each needs a "
                "median_ns and calib_ns above 0, a calibration and a unit, rounds and sweep)"
            )
        results[key] = [Measurement(**measured) for measured in runs]
    return results


def load_priors(paths: Sequence[Path], plan: Plan) -> dict[str, list[Measurement]]:
    """The measurements of several earlier runs (:func:`load_prior` each), by case, in
    the order given.  Each run's passes are numbered after the runs before it, so that a
    pass stays one process's (a ratio of two cases is taken within one pass, and a pass
    of one run is not a pass of another).  O(size of the files).

    Raises:
        PriorError: as :func:`load_prior`, for the first file it cannot use.
    """
    merged: dict[str, list[Measurement]] = {}
    first = 0
    for path in paths:
        runs = load_prior(path, plan)
        last = -1
        for key, measured in runs.items():
            for m in measured:
                merged.setdefault(key, []).append(replace(m, sweep=first + m.sweep))
                last = max(last, m.sweep)
        first += last + 1
    return merged


#: A measurement's fields in a ``--json`` file, and what each must be.
_MEASUREMENT_FIELDS: dict[str, Callable[[Any], bool]] = {
    "median_ns": lambda v: _number(v) and 0 < v <= 1e300,
    "calib_ns": lambda v: _number(v) and 0 < v <= 1e300,
    "calibration": lambda v: isinstance(v, str),
    "rounds": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "unit": lambda v: isinstance(v, str),
    "sweep": lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31,
    # the median of the per-round ratios: null, or absent in a file of an older gate
    "ratio": lambda v: v is None or (_number(v) and 0 < v <= 1e300),
}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_measurement(value: Any) -> bool:
    """Whether ``value`` is a measurement as :func:`to_json` writes one. O(1)."""
    return (
        isinstance(value, dict)
        and set(_MEASUREMENT_FIELDS) - {"ratio"} <= set(value) <= set(_MEASUREMENT_FIELDS)
        and all(check(value[name]) for name, check in _MEASUREMENT_FIELDS.items() if name in value)
    )


def to_json(run: GateRun, host: dict[str, str]) -> dict[str, Any]:
    """The run as plain data (for ``--json``)."""
    return {
        "target": run.plan.target,
        "mode": run.plan.mode,
        "machine": host,
        "results": {k: [vars(m) for m in v] for k, v in run.results.items()},
        "memory": run.memory,
        "verdicts": [vars(v) for v in run.verdicts],
        "exit_code": run.exit_code,
    }
