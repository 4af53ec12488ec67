"""The gate's false-alarm rate: run ``kachedb-radix gate TWIN --quick`` N times, unchanged.

::

    python -m benchmarks.gate_alarms accel --runs 20 [--max-ratio 1.3] [--out DIR]

Each run is the command CI runs (the twin's committed baseline, ``--quick``), in its own
process, with ``--json``; as CI does, a failed run is run once more with ``--prior`` (a
figure fails the build only when it failed both times).  With no code change every failure
is a false alarm.  Printed: the runs that failed and the CI verdicts that failed (k in N),
each failing figure, each case's highest ratio to its baseline over the runs, the seconds a
run took, and the load average before and after.  ``--max-ratio`` is passed to the gate;
the table also says which runs would have failed at 1.3x and 1.5x (from the values in the
``--json`` files: a case re-measured at the run's limit is judged on its better figure).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LIMITS = (1.3, 1.5)


def _gate(twin: str, out: Path, max_ratio: float, prior: Path | None = None) -> int:
    command = [
        sys.executable, "-m", "kachedb_radix.spec.cli.gate", twin,
        "--baseline", f"benchmarks/baseline-{twin}.json", "--quick", "--plain",
        "--max-ratio", str(max_ratio), "--json", str(out),
    ]  # fmt: skip
    if prior is not None:
        command += ["--prior", str(prior)]
    return subprocess.run(command, stdout=subprocess.DEVNULL, check=False).returncode


def _ratios(run: dict[str, Any]) -> dict[str, float]:
    """Each timed case's value against its baseline, from a run's verdicts."""
    found: dict[str, float] = {}
    for verdict in run["verdicts"]:
        value = str(verdict["value"])
        if value.endswith("x baseline") and not verdict["figure"].startswith("memory/"):
            found[verdict["figure"]] = float(value.split("x")[0])
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("twin", choices=("accel", "reference"))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--max-ratio", type=float, default=1.5)
    parser.add_argument("--out", type=Path, help="keep the runs' --json files here")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="gate-alarms-"))
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    failed_runs, failed_ci, seconds = 0, 0, []
    highest: dict[str, float] = {}
    over = {limit: 0 for limit in LIMITS}
    for number in range(1, args.runs + 1):
        first = out / f"run-{number}.json"
        started = time.perf_counter()
        status = _gate(args.twin, first, args.max_ratio)
        note = ""
        if status == 1:
            failed_runs += 1
            again = _gate(args.twin, out / f"run-{number}-again.json", args.max_ratio, first)
            failed_ci += again == 1
            note = "; CI rerun " + ("FAILED" if again == 1 else "passed")
        elif status != 0:
            print(f"run {number}: exit {status}, not a verdict", file=sys.stderr)
            return 2
        seconds.append(time.perf_counter() - started)
        run = json.loads(first.read_text(encoding="utf-8"))
        ratios = _ratios(run)
        for case, ratio in ratios.items():
            highest[case] = max(ratio, highest.get(case, 0.0))
        for limit in LIMITS:
            over[limit] += any(ratio > limit for ratio in ratios.values())
        failing = [v["figure"] for v in run["verdicts"] if v["status"] == "FAIL"]
        print(f"run {number}: exit {status} in {seconds[-1]:.0f} s {failing or ''}{note}")
    print(f"\n{args.twin}, --quick, --max-ratio {args.max_ratio:g}, {args.runs} runs")
    print(f"runs failed: {failed_runs} in {args.runs}; CI verdicts failed: {failed_ci}")
    for limit in LIMITS:
        print(f"runs with a case over {limit:g}x (first pass or best re-measure): {over[limit]}")
    print(f"seconds a run: {min(seconds):.0f}-{max(seconds):.0f} (reruns included)")
    print(f"load average before {load_before}, after {os.getloadavg()}")
    print("highest ratio to the baseline per case:")
    for case, ratio in sorted(highest.items(), key=lambda item: -item[1]):
        print(f"  {ratio:.2f}x  {case}")
    print(f"runs kept in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
