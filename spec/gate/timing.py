"""How the gate times a workload, and the calibration loops every figure is divided by.

Timing: a warm-up, then rounds -- batches of repeated calls sized to ~50 us each, or one
call per round after an untimed setup when the call changes the tree -- with the garbage
collector off; the figure is the median over rounds.  A workload with a fixed number of
rounds (the first eviction after a fill) gets exactly those, without a warm-up.

Calibration: a figure in nanoseconds means little across machines, or across the load of
one shared machine; divided by a fixed workload timed on the same machine at the same
moment it tracks the code rather than the machine.  Two loops, because machines drift in
two ways that do not move together (measured here: allocation-heavy cases drifted 1.5-2x
while a pure-Python loop moved 5-15%):

* ``cpu`` -- the operations a pure-Python match spends its time on (slicing a list into a
  tuple, a dict probe, comparing slices): divides the match cases;
* ``memory`` -- allocation and cache misses: small lists built and dropped, and a chase
  through a permutation far larger than the caches: divides the cases that allocate and
  touch large trees (insert, the request cycle, eviction).
"""

from __future__ import annotations

import gc
import itertools
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .shapes import Workload

Clock = Callable[[], int]


@dataclass(frozen=True)
class Policy:
    """How long to time things.

    Attributes:
        budget_s: target time spent in timed rounds per case.
        min_rounds / max_rounds: bounds on the number of rounds.
        batch_ns: repeated calls are timed in batches of about this length.
        calibration_s: time budget of each calibration loop measurement.
    """

    budget_s: float
    min_rounds: int
    max_rounds: int
    batch_ns: float = 50_000.0
    calibration_s: float = 0.05


QUICK_POLICY = Policy(budget_s=0.5, min_rounds=15, max_rounds=301)
FULL_POLICY = Policy(budget_s=1.0, min_rounds=31, max_rounds=1001, calibration_s=0.1)


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
    if work.rounds is not None:
        rounds = work.rounds
    else:
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


# ---------------------------------------------------------------- calibration

CPU, MEMORY = "cpu", "memory"
CALIBRATIONS = (CPU, MEMORY)

_CAL_TOKENS = list(range(100_000, 100_000 + 65 * 16))
_CAL_TABLE = {tuple(_CAL_TOKENS[i : i + 16]): i for i in range(64)}


def cpu_calibration() -> int:
    """The pure-Python loop (about 20-40 us on a 2020s core): 64 times a slice into a
    tuple, a dict probe and a slice comparison."""
    tokens, table = _CAL_TOKENS, _CAL_TABLE
    total = 0
    for start in range(64):
        total += table[tuple(tokens[start : start + 16])]
        total += tokens[start : start + 16] == tokens[start + 1 : start + 17]
    return total


#: A random cyclic permutation of 2^21 entries (a 16 MiB array of pointers to ints spread
#: over more memory again): each step of the chase misses the caches.
_CHASE: list[int] = []


def _chase_table() -> list[int]:
    if not _CHASE:
        order = np.random.default_rng(7).permutation(1 << 21)
        nxt = np.empty_like(order)
        nxt[order] = np.roll(order, -1)
        _CHASE.extend(nxt.tolist())
    return _CHASE


def memory_calibration() -> int:
    """The memory-bound loop (about 20-60 us): 48 small lists built and dropped (the
    allocator), and 256 dependent steps through the permutation (cache misses)."""
    nxt = _chase_table()
    at, total = 0, 0
    for _ in range(256):
        at = nxt[at]
        total += at & 1
    kept = [list(range(k, k + 16)) for k in range(0, 48 * 16, 16)]
    return total + len(kept)


CALIBRATION_WORK: dict[str, Callable[[], int]] = {
    CPU: cpu_calibration,
    MEMORY: memory_calibration,
}


def calibrate(kind: str, policy: Policy, clock: Clock = time.perf_counter_ns) -> float:
    """Median nanoseconds of one calibration loop of ``kind`` (timed like any case)."""
    loop_policy = Policy(policy.calibration_s, 15, 301, policy.batch_ns)
    return time_workload(Workload(CALIBRATION_WORK[kind]), loop_policy, clock).median_ns


def format_ns(value: float) -> str:
    """A duration in ns, us, ms or s with three significant digits."""
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} ns"
