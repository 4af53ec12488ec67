"""How the gate times a workload, and the calibration loops every figure is divided by.

Timing: a warm-up, then rounds -- batches of repeated calls sized to ~50 us each, or one
call per round after an untimed setup when the call changes the tree -- with the garbage
collector off; the figure is the median over rounds.  A workload with a fixed number of
rounds (the first eviction after a fill) gets exactly those, without a warm-up.

Calibration (anchors): a figure in nanoseconds means little across machines, or across
the load of one shared machine; divided by a fixed workload timed on the same machine at
the same moments it tracks the code rather than the machine.  The anchor is timed
*interleaved*: a batch (~50 us) of it after every round of the case, and the figure is the
median over rounds of round / anchor batch -- a slow minute, a neighbour on the core, a
cache shared with a busy process slow both sides of the same ratio.  (Timed before and
after the case instead, 50 ms each, the loops missed what happened during it: a 2-core VM
failed 4 of 13 quiet runs.)  One anchor per kind of case, because machines differ and drift
in ways that do not move together (measured here: allocation-heavy cases drifted 1.5-2x
while a pure-Python loop moved 5-15%):

* ``cpu`` -- the operations a pure-Python match spends its time on (slicing a list into a
  tuple, a dict probe, comparing slices): the interpreter-bound cases (matches, the pool's
  host side, router lookups);
* ``memory`` -- small lists built and dropped (the allocator) and a few cache-missing
  steps: the cases that allocate and touch trees (insert, the request cycle, small
  evictions, applying events);
* ``chase`` -- dependent loads through a permutation far larger than the last-level
  cache, walked on from call to call so that every step misses: memory latency, the
  first eviction from a tree of 10^5-10^6 blocks.
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
        batch_ns: repeated calls (and anchor loops) are timed in batches of about this
            length.
    """

    budget_s: float
    min_rounds: int
    max_rounds: int
    batch_ns: float = 50_000.0


QUICK_POLICY = Policy(budget_s=0.5, min_rounds=15, max_rounds=301)
FULL_POLICY = Policy(budget_s=1.0, min_rounds=31, max_rounds=1001)


@dataclass(frozen=True)
class Timing:
    """A median time per unit over ``rounds`` rounds of ``inner`` calls each.

    With an interleaved anchor: ``anchor_ns`` is the median time of one anchor loop over
    the batches timed between the rounds, ``ratio`` the median over rounds of (the round's
    time per unit) / (the anchor batch's time per loop right after it).
    """

    median_ns: float
    rounds: int
    inner: int
    anchor_ns: float | None = None
    ratio: float | None = None


#: Anchor batches timed after each round of a workload with a fixed, small number of
#: rounds (the first eviction's 2-3): their median is that round's anchor figure.
FIXED_ROUND_ANCHOR_BATCHES = 5


class _Anchor:
    """An anchor loop timed in batches of about ``policy.batch_ns`` between a case's rounds."""

    def __init__(self, loop: Callable[[], int], policy: Policy, clock: Clock) -> None:
        self.loop, self.clock = loop, clock
        start = clock()
        calls = 0
        while calls < 3 or clock() - start < 10 * policy.batch_ns:  # warm-up, sizing
            loop()
            calls += 1
        per_call = max((clock() - start) / calls, 1.0)
        self.inner = max(1, math.ceil(policy.batch_ns / per_call))
        self.samples: list[float] = []

    def sample(self, batches: int = 1) -> float:
        """Time ``batches`` batches now; keep and return their median per loop."""
        loop, clock, times = self.loop, self.clock, []
        for _ in range(batches):
            began = clock()
            for _ in itertools.repeat(None, self.inner):
                loop()
            times.append((clock() - began) / self.inner)
        figure = statistics.median(times)
        self.samples.append(figure)
        return figure


def time_workload(
    work: Workload,
    policy: Policy,
    clock: Clock = time.perf_counter_ns,
    anchor: Callable[[], int] | None = None,
) -> Timing:
    """Time ``work`` under ``policy``; the garbage collector is off while timing.

    ``anchor``: a calibration loop timed in a batch right after every round (several
    batches after each round of a fixed-round workload), so that the case and its anchor
    see the same moments of the machine.  Cost: the budget, plus one anchor batch (~50 us)
    per round.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        timer = None if anchor is None else _Anchor(anchor, policy, clock)
        if work.setup is None:
            samples, rounds, inner = _time_repeated(work, policy, clock, timer)
        else:
            samples, rounds, inner = _time_rounds(work, work.setup, policy, clock, timer)
    finally:
        if enabled:
            gc.enable()
    median = statistics.median(samples)
    if timer is None:
        return Timing(median, rounds, inner)
    ratios = [s / a for s, a in zip(samples, timer.samples, strict=True)]
    anchor_ns = statistics.median(timer.samples)
    return Timing(median, rounds, inner, anchor_ns, statistics.median(ratios))


def _round_count(policy: Policy, round_ns: float) -> int:
    wanted = int(policy.budget_s * 1e9 / max(round_ns, 1.0))
    return max(policy.min_rounds, min(policy.max_rounds, wanted))


Samples = tuple[list[float], int, int]


def _time_repeated(work: Workload, policy: Policy, clock: Clock, anchor: _Anchor | None) -> Samples:
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
        if anchor is not None:
            anchor.sample()
    return samples, rounds, inner


def _time_rounds(
    work: Workload, setup: Callable[[], None], policy: Policy, clock: Clock, anchor: _Anchor | None
) -> Samples:
    call = work.run
    batches = 1
    if work.rounds is not None:
        rounds, batches = work.rounds, FIXED_ROUND_ANCHOR_BATCHES
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
        if anchor is not None:
            anchor.sample(batches)
    return samples, rounds, 1


# ---------------------------------------------------------------- calibration

CPU, MEMORY, CHASE = "cpu", "memory", "chase"
CALIBRATIONS = (CPU, MEMORY, CHASE)

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
#: over 64 MiB more: 80 MiB, beyond a 2020s core's last-level cache), and where the chase
#: stands.  Each call walks on from where the last one stopped, so it touches lines it
#: has not touched for millions of steps: a miss whatever ran before it.  (A chase that
#: restarted at 0 walked the same 256 steps every call: cache hits on a quiet machine,
#: misses after a case or a neighbour evicted them -- 23-111 us on one VM.)
_CHASE: list[int] = []
_CHASE_AT = [0]


def _chase_table() -> list[int]:
    if not _CHASE:
        order = np.random.default_rng(7).permutation(1 << 21)
        nxt = np.empty_like(order)
        nxt[order] = np.roll(order, -1)
        _CHASE.extend(nxt.tolist())
    return _CHASE


def _chase(steps: int) -> int:
    nxt, at, total = _chase_table(), _CHASE_AT[0], 0
    for _ in itertools.repeat(None, steps):
        at = nxt[at]
        total += at & 1
    _CHASE_AT[0] = at
    return total


def chase_calibration() -> int:
    """The memory-latency loop (about 20-60 us): 128 dependent steps through the
    permutation, each a cache miss (the cases that walk trees far larger than the caches:
    the first eviction from 10^5-10^6 cached blocks)."""
    return _chase(128)


def memory_calibration() -> int:
    """The allocation-and-memory loop (about 20-60 us): 48 small lists built and dropped
    (the allocator) and 64 dependent cache-missing steps (the cases that allocate and
    touch trees: inserts, the request cycle, small evictions, applying events)."""
    kept = [list(range(k, k + 16)) for k in range(0, 48 * 16, 16)]
    return _chase(64) + len(kept)


CALIBRATION_WORK: dict[str, Callable[[], int]] = {
    CPU: cpu_calibration,
    MEMORY: memory_calibration,
    CHASE: chase_calibration,
}


def format_ns(value: float) -> str:
    """A duration in ns, us, ms or s with three significant digits."""
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} ns"
