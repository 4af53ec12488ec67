"""The gate on a loaded machine: no false failure under contention, a planted regression caught.

A baseline is recorded here (three passes, the middle one kept, as ``--update-baseline``
does) on the machine as it is; then the gate runs twice with this process and two busy
child processes pinned to one core (``os.sched_setaffinity``, what ``taskset`` does): a
spinning interpreter (CPU contention: the gate gets a third of the core) and a loop
streaming through 64 MiB (it evicts the gate's lines from every cache level between two
of its time slices: a smaller cache).  Once with the cases as they are: nothing may fail
at the gate's own limit (:data:`~kachedb_radix.spec.gate.verdicts.MAX_BASELINE_RATIO`).
Once with every case planted :data:`PLANTED` times slower: every case must fail.

The plant: every timed call is followed by a spin for the rest of ``PLANTED`` times its
own time, on the clock the gate times such a call with (the thread's CPU time for a call
of 200 us or more, the wall clock below).  Both runs go through the wrapper, so the
baseline pays for it too.

Why 2x and not the issue's 1.5x: a 1.5x regression against the 1.5x limit sits on the
limit, and at ``--max-ratio 1.3`` the loaded core alone read the request cycle at 1.40x
against a baseline recorded on a quiet machine (a cold cache after every slice of the
thrasher; 1.03-1.26x against one recorded at load 5).  A planted 1.5x read 1.43-1.69x on
every case at load 5, not a margin a test may assert on.  One case per anchor kind and
the cases the issue saw cry wolf, on the C twin, at the quick policy.  About 25-80 s:
slow.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kachedb_radix.spec.gate.cases import Case, Plan, build_plan
from kachedb_radix.spec.gate.run import GateRun, measure_case, render_plain, run_gate
from kachedb_radix.spec.gate.shapes import Workload
from kachedb_radix.spec.gate.timing import CALIBRATIONS, LONG_ROUND_NS, QUICK_POLICY
from kachedb_radix.spec.gate.trees import gate_target
from kachedb_radix.spec.gate.verdicts import (
    FAIL,
    MAX_BASELINE_RATIO,
    PASS,
    Measurement,
    load_baseline,
    save_baseline,
)

#: A timing check (unit tests assert no timings; this one asserts the gate's verdicts on a
#: loaded core): run by hand with KACHEDB_RADIX_GATE_LOAD=1. Known gap (issue 37 item 4,
#: left open): against a baseline recorded on a quiet machine the loaded core alone read
#: the request cycle at 1.40-1.56x in 2 of 7 runs, and a planted 2x left one first
#: eviction under 1.5x in 2 of 7: not yet a verdict CI may rest on.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("KACHEDB_RADIX_GATE_LOAD") != "1",
        reason="a timing check on a loaded core, run by hand (KACHEDB_RADIX_GATE_LOAD=1): "
        "its verdicts are not yet reliable enough for CI (benchmarks/README.md)",
    ),
    pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity"),
]

CASES = (
    "match/long_edge/16384/int64",  # cpu
    "cycle/pin-insert-release/1024",  # memory
    "evict/first/1000",  # memory
    "evict/first/100000",  # memory, a tree far larger than the caches
    "router/apply/8",  # memory: events decoded and applied
)
#: The planted regression: every timed call takes this many times as long.
PLANTED = 2.0
LIMIT = MAX_BASELINE_RATIO

SPIN = "while True: pass"
THRASH = "import numpy as np\na = np.ones(8 << 20)\nwhile True: a += 1.0"


def _plan() -> Plan:
    plan = build_plan(gate_target("accel"), quick=True, evict_sizes=(1000, 100_000))
    chosen = [case for case in plan.cases if case.name in CASES]
    assert [case.name for case in chosen] == list(CASES)
    return Plan(plan.target, plan.mode, chosen)


def _slowed(case: Case, planted: bool) -> Case:
    """``case`` through the wrapper: planted 1.5x slower, or not (see the module)."""

    def make() -> Workload:
        work = case.make()
        call, wall, cpu = work.run, time.perf_counter_ns, time.thread_time_ns
        factor = PLANTED if planted else 1.0

        def run() -> None:
            began, began_cpu = wall(), cpu()
            call()
            took = wall() - began
            # the clock the gate times such a call on (LONG_ROUND_NS)
            clock, start = (cpu, began_cpu) if took >= LONG_ROUND_NS else (wall, began)
            until = start + (clock() - start) * factor
            while clock() < until:
                pass

        return dataclasses.replace(work, run=run)

    return dataclasses.replace(case, make=make)


def _measure(planted: bool) -> Callable[[Case], Measurement]:
    def measure(case: Case) -> Measurement:
        return measure_case(_slowed(case, planted), QUICK_POLICY)

    return measure


@contextmanager
def _loaded_core() -> Iterator[None]:
    """This process and a spinner and a cache thrasher, all on one core."""
    mine = os.sched_getaffinity(0)
    core = {min(mine)}
    children = [subprocess.Popen([sys.executable, "-c", code]) for code in (SPIN, THRASH)]
    try:
        for child in children:
            os.sched_setaffinity(child.pid, core)
        os.sched_setaffinity(0, core)
        time.sleep(0.3)  # the thrasher has its 64 MiB
        yield
    finally:
        os.sched_setaffinity(0, mine)
        for child in children:
            child.kill()
            child.wait()


def _table(run: GateRun) -> str:
    return render_plain(run.verdicts)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, Path]:
    plan = _plan()
    measure = _measure(False)
    results = {case.name: [measure(case) for _ in range(3)] for case in plan.cases}
    path = tmp_path_factory.mktemp("gate") / "baseline.json"
    save_baseline(path, plan, results, {}, {"cpu": "test"}, "test_gate_load")
    return plan, path


def test_every_anchor_kind_is_exercised() -> None:
    assert {case.calibration for case in _plan().cases} == set(CALIBRATIONS)


def test_a_loaded_core_fails_nothing(recorded: tuple[Plan, Path]) -> None:
    plan, path = recorded
    with _loaded_core():
        run = run_gate(plan, load_baseline(path), _measure(False), max_ratio=LIMIT)
    assert run.exit_code == 0, _table(run)
    assert {verdict.status for verdict in run.verdicts} == {PASS}


def test_a_planted_regression_fails_on_a_loaded_core(recorded: tuple[Plan, Path]) -> None:
    plan, path = recorded
    with _loaded_core():
        run = run_gate(plan, load_baseline(path), _measure(True), max_ratio=LIMIT)
    failed = {verdict.figure for verdict in run.verdicts if verdict.status == FAIL}
    assert failed == set(CASES), _table(run)
