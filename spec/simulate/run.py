"""A whole simulation: plan the sweep, run its points, gather the results.

:func:`plan` does the work shared by every point once -- serving order, prefix ids,
the working set, next uses and the infinite-capacity bound, the capacities -- and
:func:`execute` runs the points on the chosen executor. :func:`simulate` does both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kachedb_radix.reference.policies import check_policy

from ..conform.targets import default_implementation
from .bounds import infinite_lengths, next_uses
from .errors import SimulateError
from .executors import run_points
from .metrics import HitStats, hit_stats
from .point import MODES, Job
from .prefix import prefix_paths
from .results import Results
from .service import ServiceModel
from .sweep import AUTO_POINTS, auto_capacities
from .timed import arrival_order
from .trace import Trace


@dataclass(frozen=True)
class Settings:
    """How to simulate (the command line's options).

    Attributes:
        mode: ``sequential`` or ``timed``.
        implementation: ``accel`` or ``reference`` (default: accel, or reference
            when ``KACHEDB_RADIX_PURE=1``).
        service: the timed mode's service model.
        capacities: pool sizes in blocks, or None for an automatic sweep of
            ``sweep_points`` capacities.
        bounds: compute Belady and infinite capacity beside LRU.
        executor, jobs, ray_address: where the points run (:mod:`.executors`).
        windows: timeline windows.
        timeline_capacity: the capacity the over-time plot shows (None: the
            middle one of the sweep).
        policies: the eviction policies run beside LRU at every capacity (R-POL-*),
            each with its options (None: its defaults).
    """

    mode: str = "sequential"
    implementation: str = field(default_factory=default_implementation)
    service: ServiceModel = field(default_factory=ServiceModel)
    capacities: tuple[int, ...] | None = None
    sweep_points: int = AUTO_POINTS
    bounds: bool = True
    executor: str = "process"
    jobs: int | None = None
    ray_address: str | None = None
    windows: int = 100
    timeline_capacity: int | None = None
    policies: tuple[tuple[str, dict[str, object] | None], ...] = ()


@dataclass(frozen=True)
class Plan:
    """The shared part of a sweep, ready to run."""

    job: Job
    capacities: list[int]
    working_set: int
    infinite: HitStats | None
    timeline_capacity: int
    seconds: float


def plan(trace: Trace, settings: Settings) -> Plan:
    """Prepare ``trace`` for ``settings``. O(total tokens).

    Raises:
        SimulateError: an unknown mode, a timed run on a trace without timestamps,
            a timeline capacity not in the sweep, or nothing to sweep.
    """
    started = time.perf_counter()
    if settings.mode not in MODES:
        raise SimulateError(f"unknown mode {settings.mode!r}; choose from {', '.join(MODES)}")
    order = arrival_order(trace) if settings.mode == "timed" else list(range(len(trace.requests)))
    paths = upcoming = infinite = None
    working_set = 0
    if settings.bounds or settings.capacities is None:
        paths = prefix_paths(trace)
        working_set = paths.count
    if settings.bounds:
        assert paths is not None
        upcoming = next_uses(paths, order)
        infinite = infinite_lengths(paths, order, trace.block_size)
    else:
        paths = None
    capacities = list(settings.capacities or auto_capacities(working_set, settings.sweep_points))
    timeline_capacity = settings.timeline_capacity or capacities[(len(capacities) - 1) // 2]
    if timeline_capacity not in capacities:
        raise SimulateError(
            f"--timeline-capacity {timeline_capacity} is not one of the capacities simulated "
            f"({', '.join(map(str, capacities))})"
        )
    job = Job(
        trace=trace,
        mode=settings.mode,
        implementation=settings.implementation,
        service=settings.service,
        order=order,
        paths=paths,
        upcoming=upcoming,
        infinite=infinite,
        windows=settings.windows,
        policies=settings.policies,
    )
    return Plan(
        job=job,
        capacities=capacities,
        working_set=working_set,
        infinite=None if infinite is None else hit_stats(trace, infinite),
        timeline_capacity=timeline_capacity,
        seconds=time.perf_counter() - started,
    )


def execute(
    prepared: Plan, settings: Settings, advance: Callable[[int], None] = lambda done: None
) -> Results:
    """Run every point of ``prepared``; ``advance(k)`` reports progress in requests."""
    started = time.perf_counter()
    points = run_points(
        prepared.job,
        prepared.capacities,
        advance,
        executor=settings.executor,
        jobs=settings.jobs,
        ray_address=settings.ray_address,
    )
    sweep_seconds = time.perf_counter() - started
    return Results(
        trace=prepared.job.trace,
        mode=settings.mode,
        implementation=settings.implementation,
        executor=settings.executor,
        service=settings.service if settings.mode == "timed" else None,
        working_set=prepared.working_set,
        infinite=prepared.infinite,
        points=points,
        timeline_capacity=prepared.timeline_capacity,
        compared={name: check_policy(name, options)[1] for name, options in settings.policies},
        seconds={
            "prepare": round(prepared.seconds, 4),
            "sweep": round(sweep_seconds, 4),
            "total": round(prepared.seconds + sweep_seconds, 4),
        },
    )


def simulate(
    trace: Trace, settings: Settings, advance: Callable[[int], None] = lambda done: None
) -> Results:
    """:func:`plan` then :func:`execute`."""
    return execute(plan(trace, settings), settings, advance)
