"""One point of a sweep: the tree's LRU at one capacity, every other policy asked for
(R-POL-*) at the same capacity, and Belady beside them.

A :class:`Job` is everything a worker needs, built once and shipped to every
worker (a process, or a Ray task): the trace, the mode and its service model, the
tree implementation's name, the policies to compare, and -- computed once by the
caller -- the prefix ids, their next uses and the infinite-capacity lengths the bounds
and timelines need. :func:`run_point` is what a worker runs: for LRU and for each other
policy a fresh tree of ``capacity`` blocks with the mode's engine over it, Belady at the
same capacity, and the figures.
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from ..conform.targets import tree_class
from .bounds import belady_lengths
from .metrics import HitStats, hit_stats, percentiles, timeline
from .prefix import PrefixPaths
from .sequential import Progress, Replay, replay_sequential
from .service import ServiceModel
from .timed import replay_timed
from .trace import Trace

MODES = ("sequential", "timed")


@dataclass(frozen=True)
class Job:
    """A sweep's shared inputs (see the module docstring).

    Attributes:
        trace: the requests.
        mode: ``sequential`` or ``timed``.
        implementation: ``reference`` or ``accel``.
        service: the timed mode's service model.
        order: trace indices in serving order (trace order, or arrival order).
        paths: the trace's prefix ids (None without bounds).
        upcoming: next uses of ``paths`` in ``order`` (None without bounds).
        infinite: the infinite-capacity matched lengths (None without bounds).
        windows: requests windows of the timeline.
        policies: the policies run beside LRU, each with its options (None: its
            defaults), in the order asked.
    """

    trace: Trace
    mode: str
    implementation: str
    service: ServiceModel
    order: list[int]
    paths: PrefixPaths | None = None
    upcoming: array[int] | None = None
    infinite: list[int] | None = None
    windows: int = 100
    policies: tuple[tuple[str, dict[str, object] | None], ...] = ()


@dataclass(frozen=True)
class PolicyRun:
    """One policy's run at a point: its hit counts, the replay's counters, its TTFT
    percentiles (timed mode) and the replay's wall time."""

    stats: HitStats
    replay: Replay
    ttft_ms: dict[str, float]
    seconds: float


@dataclass(frozen=True)
class Point:
    """The figures at one capacity.

    Attributes:
        capacity: the pool, in blocks.
        lru: the tree's hit counts.
        belady: Belady's, or None without bounds.
        replay: the tree run's counters (evictions, peak pinned, waits, ...).
        ttft_ms: TTFT percentiles (timed mode; {} in sequential mode).
        timeline: the hit ratio per window of requests, per policy.
        seconds: wall time of the tree replay; belady_seconds: of the bound.
        policies: the other policies' runs, by name, in the order asked.
    """

    capacity: int
    lru: HitStats
    belady: HitStats | None
    replay: Replay
    ttft_ms: dict[str, float]
    timeline: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    belady_seconds: float = 0.0
    policies: dict[str, PolicyRun] = field(default_factory=dict)


def replay(
    job: Job,
    capacity: int,
    progress: Progress | None = None,
    policy: str = "lru",
    options: dict[str, object] | None = None,
) -> Replay:
    """Run the job's mode through a fresh tree of ``capacity`` blocks evicting by
    ``policy``. O(trace)."""
    factory = tree_class(job.implementation)
    if policy == "lru" and options is None:
        tree = factory(capacity, job.trace.block_size)
    else:
        tree = factory(capacity, job.trace.block_size, policy=policy, policy_options=options)
    if job.mode == "timed":
        return replay_timed(job.trace, tree, job.service, progress)
    return replay_sequential(job.trace, tree, progress)


def run_point(job: Job, capacity: int, progress: Progress | None = None) -> Point:
    """The tree and Belady at ``capacity`` blocks, with their figures."""
    started = time.perf_counter()
    done = replay(job, capacity, progress)
    seconds = time.perf_counter() - started
    series: dict[str, list[int]] = {"lru": done.lengths}
    others: dict[str, PolicyRun] = {}
    for name, options in job.policies:
        started = time.perf_counter()
        run = replay(job, capacity, progress, name, options)
        others[name] = PolicyRun(
            hit_stats(job.trace, run.lengths),
            run,
            percentiles(run.ttft_ms),
            time.perf_counter() - started,
        )
        series[name] = run.lengths
    belady = None
    belady_seconds = 0.0
    if job.paths is not None and job.infinite is not None:
        started = time.perf_counter()
        lengths = belady_lengths(job.paths, job.order, capacity, job.trace.block_size, job.upcoming)
        belady_seconds = time.perf_counter() - started
        belady = hit_stats(job.trace, lengths)
        series.update(belady=lengths, infinite=job.infinite)
    return Point(
        capacity=capacity,
        lru=hit_stats(job.trace, done.lengths),
        belady=belady,
        replay=done,
        ttft_ms=percentiles(done.ttft_ms),
        timeline=timeline(job.trace, job.order, series, job.windows),
        seconds=seconds,
        belady_seconds=belady_seconds,
        policies=others,
    )
