"""How the gate times a workload, and the calibration loops every figure is divided by.

Timing: a warm-up, then rounds -- batches of repeated calls sized to ~50 us each, or one
call per round after an untimed setup when the call changes the tree -- with the garbage
collector off; the figure is the median over rounds.  A workload with a fixed number of
rounds (the first eviction after a fill) gets exactly those, after its own untimed
``warmups`` rounds (each a setup and a call on a state of its own).  Rounds of
:data:`LONG_ROUND_NS` or more are timed in the thread's CPU time (immune to the slices a
contended core is handed out in); a shorter round preempted while it was timed is timed
again (:data:`PREEMPTED_RETRIES`).

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
* ``memory`` -- small lists built and dropped (the allocator and the memory it hands out):
  the cases that allocate and touch trees (insert, the request cycle, evictions, applying
  events).  A cache-missing walk was part of it and was taken out: what it measured was how
  much of the last-level cache the neighbours left (a walk restarting at one place: 23-111
  us on one VM; one walking on through 80 MiB: 5x slower beside a process streaming through
  64 MiB), while the cases it divided moved 10-20% (the first eviction flushes the caches
  before its call; the others work in a few hundred KiB).
"""

from __future__ import annotations

import gc
import itertools
import math
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from .shapes import Workload

Clock = Callable[[], int]
_RUSAGE_THREAD: int | None = getattr(resource, "RUSAGE_THREAD", None)


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
#: rounds (the first eviction's 2-9): their median is that round's anchor figure.
FIXED_ROUND_ANCHOR_BATCHES = 3


class _Anchor:
    """An anchor loop timed in batches of about ``policy.batch_ns`` between a case's rounds."""

    def __init__(
        self, loop: Callable[[], int], policy: Policy, clock: Clock, switches: Switches
    ) -> None:
        self.loop, self.clock, self.switches = loop, clock, switches
        start = clock()
        calls = 0
        while calls < 3 or clock() - start < 10 * policy.batch_ns:  # warm-up, sizing
            loop()
            calls += 1
        per_call = max((clock() - start) / calls, 1.0)
        self.inner = max(1, math.ceil(policy.batch_ns / per_call))
        self.samples: list[float] = []

    def sample(self, batches: int = 1, cold: Callable[[], None] | None = None) -> float:
        """Time ``batches`` batches now, each after ``cold()`` where given, else after one
        untimed loop (a long round of the case, or another process on the core, leaves
        the anchor's lines out of the caches: `router/apply/8`'s anchor read 0.6-0.9x of
        its quiet figure beside a cache thrasher without it); keep and return their median
        per loop."""
        loop, clock, times = self.loop, self.clock, []
        for _ in range(batches):
            for _attempt in range(PREEMPTED_RETRIES + 1):
                if cold is not None:
                    cold()
                else:  # untimed: the case's round (or another process) left its caches
                    loop()
                switched = self.switches()
                began = clock()
                for _ in itertools.repeat(None, self.inner):
                    loop()
                took = clock() - began
                if self.switches() == switched:
                    break
            times.append(took / self.inner)
        figure = statistics.median(times)
        self.samples.append(figure)
        return figure


#: A round longer than this is timed in the thread's CPU time, not on the wall clock: the
#: scheduler hands a contended core out in slices of a few milliseconds, so a long round's
#: wall time grows with every process sharing the core while a 50 us anchor batch mostly
#: fits in one slice (a 15 ms round of applying events measured 2.9x its baseline with
#: two busy processes on its core).  Shorter rounds keep the wall clock: reading the CPU
#: clock costs ~2 us on a VM, more than a single insert.
LONG_ROUND_NS = 200_000.0

#: A shorter round during which the scheduler took the core away (the thread's count of
#: involuntary context switches moved) is timed again, after one untimed call (the core
#: comes back with the caches another process left), up to this many times: a round
#: right after a fill often lost the core for a slice of a few ms -- 100x its time -- on
#: a core shared with busy processes, and a median of nine such rounds is no figure.
PREEMPTED_RETRIES = 3

#: A fixed-round workload's setup is long (a fill of up to 10^6 blocks: seconds of CPU),
#: and a process that has just used its share of a contended core is the next one the
#: scheduler preempts: a short sleep after the setup lets it wake with a fresh share, so
#: the one timed call seldom needs the retries above (each of which fills again).
SETTLE_S = 0.001

Switches = Callable[[], int]


def preemptions() -> int:
    """How often the scheduler has taken the core from this thread (Linux: involuntary
    context switches; 0 where the platform does not count them per thread)."""
    return resource.getrusage(_RUSAGE_THREAD).ru_nivcsw if _RUSAGE_THREAD is not None else 0


def time_workload(
    work: Workload,
    policy: Policy,
    clock: Clock = time.perf_counter_ns,
    anchor: Callable[[], int] | None = None,
    cpu_clock: Clock = time.thread_time_ns,
    switches: Switches = preemptions,
) -> Timing:
    """Time ``work`` under ``policy``; the garbage collector is off while timing.

    ``anchor``: a calibration loop timed in a batch right after every round (several
    batches after each round of a fixed-round workload), so that the case and its anchor
    see the same moments of the machine.  Rounds of :data:`LONG_ROUND_NS` or more are
    timed on ``cpu_clock``; a shorter round (and an anchor batch) preempted while timed
    (``switches`` moved) is timed again, at most :data:`PREEMPTED_RETRIES` times.  Cost:
    the budget, plus one anchor batch (~50 us) per round.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        timer = None if anchor is None else _Anchor(anchor, policy, clock, switches)
        clocks = (clock, cpu_clock, switches)
        if work.setup is None:
            samples, rounds, inner = _time_repeated(work, policy, clocks, timer)
        else:
            samples, rounds, inner = _time_rounds(work, work.setup, policy, clocks, timer)
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
#: (the clock, the CPU clock for long rounds, the preemption counter)
Clocks = tuple[Clock, Clock, Switches]


def _never_switched() -> int:
    return 0  # a round on the CPU clock: a preemption costs it nothing


def _time_repeated(
    work: Workload, policy: Policy, clocks: Clocks, anchor: _Anchor | None
) -> Samples:
    call, clock, switches = work.run, clocks[0], clocks[2]
    warmup_ns = policy.budget_s * 1e9 / 10
    calls = 0
    start = clock()
    while calls < 3 or clock() - start < warmup_ns:
        call()
        calls += 1
    per_call = max((clock() - start) / calls, 1.0)
    inner = max(1, math.ceil(policy.batch_ns / per_call))
    rounds = _round_count(policy, inner * per_call)
    if inner * per_call >= LONG_ROUND_NS:
        clock, switches = clocks[1], _never_switched
    samples: list[float] = []
    for _ in range(rounds):
        for attempt in range(PREEMPTED_RETRIES + 1):
            if attempt:
                call()  # untimed: the core came back with the caches of another process
            switched = switches()
            began = clock()
            for _ in itertools.repeat(None, inner):
                call()
            took = clock() - began
            if switches() == switched:
                break
        samples.append(took / inner / work.units)
        if anchor is not None:
            anchor.sample()
    return samples, rounds, inner


def _time_rounds(
    work: Workload,
    setup: Callable[[], None],
    policy: Policy,
    clocks: Clocks,
    anchor: _Anchor | None,
) -> Samples:
    """One call a round after an untimed setup.  Each round reads both clocks (the CPU
    clock outside the wall clock's window) and keeps the CPU time where the call took
    :data:`LONG_ROUND_NS` or more, else the wall time, timed again if it was preempted."""
    call, (wall, cpu, switches) = work.run, clocks
    batches = 1
    if work.rounds is not None:
        rounds, batches = work.rounds, FIXED_ROUND_ANCHOR_BATCHES
        for _ in range(work.warmups):  # untimed; each timed call stays a first call
            setup()
            call()
    else:
        start = wall()
        for _ in range(3):  # warm-up rounds, setup included, to size the run
            setup()
            call()
        rounds = _round_count(policy, (wall() - start) / 3)
    samples: list[float] = []
    for _ in range(rounds):
        for _attempt in range(PREEMPTED_RETRIES + 1):
            setup()
            if work.rounds is not None:
                time.sleep(SETTLE_S)
            switched, cpu_began = switches(), cpu()
            began = wall()
            call()
            took = wall() - began
            cpu_took = cpu() - cpu_began
            if took >= LONG_ROUND_NS:
                took = cpu_took  # a long call: its CPU time, preempted or not
                break
            if switches() == switched:
                break
        samples.append(took / work.units)
        if anchor is not None:
            anchor.sample(batches, work.cold)
    return samples, rounds, 1


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


def memory_calibration() -> int:
    """The allocation loop (about 20-60 us): 96 small lists built and dropped (the
    allocator, and the memory it hands out and takes back): the cases that allocate and
    touch trees (inserts, the request cycle, evictions, applying events).  No cache-missing
    walk: such a walk measured how much of the last-level cache the neighbours left, which
    moved 5x under a busy neighbour while the cases it divided moved 10-20%."""
    kept = [list(range(k, k + 16)) for k in range(0, 96 * 16, 16)]
    return len(kept)


CALIBRATION_WORK: dict[str, Callable[[], int]] = {
    CPU: cpu_calibration,
    MEMORY: memory_calibration,
}


def format_ns(value: float) -> str:
    """A duration in ns, us, ms or s with three significant digits."""
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} ns"
