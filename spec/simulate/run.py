"""A whole simulation: plan the sweep, run its tasks, refine the knee, gather the results.

:func:`plan` does the work shared by every task once -- serving order, prefix ids, the
working set, next uses and the infinite-capacity bound, the capacities, the
configurations, the prompts' block hashes when a router needs them -- and
:func:`execute` runs the tasks on the chosen executor: every configuration and Belady
at every capacity (and, in the timed mode, each cluster's no-cache baseline), then
up to ``knee_rounds`` rounds of a few more capacities inside the knees' brackets
(:mod:`~kachedb_radix.spec.simulate.plan.knee`) of LRU's and Belady's curves (the other
configurations' knees are interpolated on the same capacities). :func:`simulate`
does both.

Capacities a trace cannot use: no tree ever holds more than the trace's working set
(the distinct blocks it inserts, or -- without the bounds -- the blocks of all its
sequences, an upper bound), so a capacity above ``workers x working set`` runs as
that (said in a note): a bigger pool would never evict, and would only cost memory
(the reference reserves some per block) or pass the C twin's limit of 2**31 - 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kachedb_radix.reference.events import BlockHasher
from kachedb_radix.reference.policies import check_policy

from ..twins import default_twin
from .bounds import infinite_lengths, next_uses
from .cluster import HASH_SCHEME, ClusterSpec, prompt_hashes
from .errors import SimulateError
from .executors import Session
from .metrics import HitStats, hit_stats, timeline
from .plan.cost import CostModel
from .plan.hardware import Deployment, Sizing
from .plan.knee import DEFAULT_FRACTIONS, Knee, find_knee, refinements
from .plan.memory import footprint
from .plan.models import ModelShape
from .plan.service import ServiceModel
from .plan.slo import Slo
from .point import (
    BELADY,
    MODES,
    NO_CACHE,
    RUN,
    Config,
    Job,
    Point,
    Run,
    Task,
    TaskResult,
    no_cache_cluster,
    no_cache_label,
)
from .prefix import prefix_paths
from .results import Results
from .sweep import AUTO_POINTS, auto_capacities
from .tiers import TierSpec
from .timed import arrival_order
from .trace import Trace

#: The curves whose knees the refinement rounds narrow: the baseline and the bound
#: (the others are interpolated on the capacities those rounds add).
REFINED_SERIES = ("lru", "belady")


@dataclass(frozen=True)
class Settings:
    """How to simulate (the command line's options).

    Attributes:
        mode: ``sequential`` or ``timed``.
        implementation: ``accel`` or ``reference`` (default: accel, or reference
            when ``KACHEDB_RADIX_PURE=1``).
        service: the timed mode's scheduler; cost: its cost model (required there).
        capacities: pool sizes in blocks, or None for an automatic sweep of
            ``sweep_points`` capacities.
        bounds: compute Belady and infinite capacity beside the configurations.
        executor, jobs, ray_address: where the tasks run (:mod:`.executors`).
        windows: timeline windows.
        timeline_capacity: the capacity the over-time plot shows (None: the
            middle one of the sweep).
        policies: the eviction policies run beside LRU (R-POL-*), each with its
            options (None: its defaults).
        clusters: the clusters each policy runs on besides one worker.
        tiers: the tier configurations each policy on each cluster runs with, besides
            none (``--tiers``).
        knee_fractions, knee_rounds, knee_points: the knees asked for, and how many
            refinement rounds of how many capacities per bracket.
        deployment: the model and GPUs (sizes in GiB and GPUs; None: blocks only).
        slo: the TTFT SLO (timed mode).
        no_cache: run the timed mode's no-cache baseline (at every capacity of the
            sweep, with the same pools).
        speed: replay the arrivals this many times faster (timed mode).
        warmup: requests (the first to arrive) left out of the latency figures.
        stage_gap_ms: run the trace's load stages one after another, each starting this
            long after the previous one drained (None: the arrivals as they are).
    """

    mode: str = "sequential"
    implementation: str = field(default_factory=default_twin)
    service: ServiceModel = field(default_factory=ServiceModel)
    cost: CostModel | None = None
    capacities: tuple[int, ...] | None = None
    sweep_points: int = AUTO_POINTS
    bounds: bool = True
    executor: str = "process"
    jobs: int | None = None
    ray_address: str | None = None
    windows: int = 100
    timeline_capacity: int | None = None
    policies: tuple[tuple[str, dict[str, object] | None], ...] = ()
    clusters: tuple[ClusterSpec, ...] = ()
    tiers: tuple[TierSpec, ...] = ()
    knee_fractions: tuple[float, ...] = DEFAULT_FRACTIONS
    knee_rounds: int = 2
    knee_points: int = 2
    deployment: Deployment | None = None
    model: ModelShape | None = None
    slo: Slo | None = None
    no_cache: bool = True
    speed: float = 1.0
    warmup: int = 0
    stage_gap_ms: float | None = None


@dataclass(frozen=True)
class Plan:
    """The shared part of a sweep, ready to run."""

    job: Job
    capacities: list[int]
    working_set: int
    infinite: HitStats | None
    timeline_capacity: int | None
    seconds: float
    notes: list[str]
    sizing: Sizing


def configurations(settings: Settings) -> tuple[Config, ...]:
    """LRU on one worker, then every other policy on one worker, then every policy on
    each cluster asked for; each without tiers, then with each tier configuration.
    O(policies * clusters * tiers)."""
    policies: list[tuple[str, dict[str, object] | None]] = [("lru", None), *settings.policies]
    clusters = [ClusterSpec()] + [c for c in settings.clusters if c.workers > 1]
    tiers: list[TierSpec | None] = [None, *settings.tiers]
    found: dict[str, Config] = {}
    for cluster in clusters:
        for name, options in policies:
            for spec in tiers:
                config = Config(name, options, cluster, spec)
                found.setdefault(config.label, config)
    return tuple(found.values())


def plan(trace: Trace, settings: Settings) -> Plan:
    """Prepare ``trace`` for ``settings``. O(total tokens).

    Raises:
        SimulateError: an unknown mode, a timed run on a trace without timestamps or
            without a cost model, a timeline capacity not in the sweep, or nothing to
            sweep.
    """
    started = time.perf_counter()
    if settings.mode not in MODES:
        raise SimulateError(f"unknown mode {settings.mode!r}; choose from {', '.join(MODES)}")
    if settings.mode == "timed" and settings.cost is None:
        raise SimulateError("the timed mode needs a cost model (a model and a GPU)")
    if not settings.speed > 0:
        raise SimulateError(f"--speedup must be > 0, got {settings.speed}")
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
    limit = working_set or sum(len(r.sequence) // trace.block_size for r in trace.requests)
    if settings.mode == "timed":  # outputs' filler blocks are held too (plan.memory)
        limit += sum(max(0, footprint(trace, r) - len(r.sequence) // trace.block_size)
                     for r in trace.requests)  # fmt: skip
    limit = max(limit, 1)
    if not 0 <= settings.warmup < len(trace.requests):
        raise SimulateError(
            f"--warmup {settings.warmup} leaves no request of the {len(trace.requests):,} "
            "to measure"
        )
    configs = configurations(settings)
    widest = max(config.cluster.workers for config in configs)
    sizing = Sizing(trace.tokens_per_block, settings.model, settings.deployment)
    notes: list[str] = []
    capacities = list(settings.capacities or auto_capacities(working_set, settings.sweep_points))
    if settings.capacities is None:
        hbm = sizing.worker_blocks(widest)
        if hbm is not None and hbm < working_set * widest:
            capacities.append(hbm)
    capacities = _clamp(capacities, limit * widest, notes)
    timeline_capacity = settings.timeline_capacity or capacities[(len(capacities) - 1) // 2]
    if timeline_capacity not in capacities:
        raise SimulateError(
            f"--timeline-capacity {timeline_capacity} is not one of the capacities simulated "
            f"({', '.join(map(str, capacities))})"
        )
    hashes = None
    if any(config.cluster.uses_index for config in configs):
        hashes = prompt_hashes(trace, BlockHasher(HASH_SCHEME))
    job = Job(
        trace=trace,
        mode=settings.mode,
        implementation=settings.implementation,
        service=settings.service,
        order=order,
        configs=configs,
        limit=limit,
        cost=settings.cost if settings.mode == "timed" else None,
        paths=paths,
        upcoming=upcoming,
        infinite=infinite,
        hashes=hashes,
        windows=settings.windows,
        slo=settings.slo if settings.mode == "timed" else None,
        speed=settings.speed,
        warmup=settings.warmup,
        stage_gap_ms=settings.stage_gap_ms,
    )
    return Plan(
        job=job,
        capacities=capacities,
        working_set=working_set,
        infinite=None if infinite is None else hit_stats(trace, infinite),
        timeline_capacity=timeline_capacity,
        seconds=time.perf_counter() - started,
        notes=notes,
        sizing=sizing,
    )


def _clamp(capacities: list[int], most: int, notes: list[str]) -> list[int]:
    """Capacities above ``most`` run as ``most`` (see the module docstring)."""
    above = sorted(capacity for capacity in capacities if capacity > most)
    if above:
        asked = ", ".join(f"{capacity:,}" for capacity in above)
        notes.append(
            f"capacity {asked} is more than the {most:,} blocks this trace can ever use: "
            f"it runs as {most:,} (a larger pool would never evict)"
        )
    return sorted({min(capacity, most) for capacity in capacities})


def execute(
    prepared: Plan, settings: Settings, advance: Callable[[int], None] = lambda done: None
) -> Results:
    """Run every task of ``prepared``, then the knee's refinements; ``advance(k)``
    reports progress in requests."""
    started = time.perf_counter()
    job = prepared.job
    capacities = list(prepared.capacities)
    found: list[TaskResult] = []
    refined: list[int] = []
    with Session(job, settings.executor, settings.jobs, settings.ray_address) as session:
        tasks = _tasks(job, capacities, settings.bounds)
        if job.mode == "timed" and settings.no_cache:
            clusters: dict[ClusterSpec, int] = {}
            for number, config in enumerate(job.configs):
                clusters.setdefault(no_cache_cluster(config.cluster), number)
            tasks += [Task(NO_CACHE, capacity, number) for capacity in capacities
                      for number in clusters.values()]  # fmt: skip
        found += session.run(tasks, advance)
        for _ in range(settings.knee_rounds if prepared.infinite is not None else 0):
            points = _points(job, found, prepared)
            knees = _knees(points, prepared, settings.knee_fractions)
            more = refinements(knees, capacities, settings.knee_points)
            if not more:
                break
            capacities += more
            refined += more
            found += session.run(_tasks(job, more, settings.bounds), advance)
    sweep_seconds = time.perf_counter() - started
    points = _points(job, found, prepared)
    timeline = prepared.timeline_capacity or points[0].capacity
    no_cache = next((p.no_cache for p in points if p.capacity == timeline), {})
    options = {
        config.policy: check_policy(config.policy, config.options)[1] for config in job.configs
    }
    return Results(
        trace=job.trace,
        mode=settings.mode,
        implementation=settings.implementation,
        executor=settings.executor,
        service=settings.service if settings.mode == "timed" else None,
        cost=job.cost,
        working_set=prepared.working_set,
        infinite=prepared.infinite,
        points=points,
        timeline_capacity=prepared.timeline_capacity or points[0].capacity,
        configs=job.configs,
        policy_options=options,
        sizing=prepared.sizing,
        knee_fractions=settings.knee_fractions,
        refined=sorted(refined),
        no_cache=no_cache,
        slo=job.slo,
        notes=prepared.notes,
        warmup=settings.warmup,
        stage_gap_ms=settings.stage_gap_ms,
        seconds={
            "prepare": round(prepared.seconds, 4),
            "sweep": round(sweep_seconds, 4),
            "total": round(prepared.seconds + sweep_seconds, 4),
        },
    )


def _tasks(job: Job, capacities: list[int], bounds: bool) -> list[Task]:
    tasks = []
    for capacity in capacities:
        tasks += [Task(RUN, capacity, number) for number in range(len(job.configs))]
        if bounds:
            tasks.append(Task(BELADY, capacity))
    return tasks


def _points(job: Job, found: list[TaskResult], prepared: Plan) -> list[Point]:
    """Gather the tasks' results into one point per capacity, sorted. O(tasks * n)."""
    runs: dict[int, dict[str, Run]] = {}
    baselines: dict[int, dict[str, Run]] = {}
    belady: dict[int, tuple[list[int], float]] = {}
    for result in found:
        task = result.task
        if task.kind == RUN and result.run is not None:
            runs.setdefault(task.capacity, {})[job.configs[task.config].label] = result.run
        elif task.kind == NO_CACHE and result.run is not None:
            label = no_cache_label(job.configs[task.config].cluster)
            baselines.setdefault(task.capacity, {})[label] = result.run
        elif task.kind == BELADY and result.belady is not None:
            belady[task.capacity] = (result.belady, result.seconds)
    points = []
    for capacity in sorted(runs):
        by_label = runs[capacity]
        ordered = {c.label: by_label[c.label] for c in job.configs if c.label in by_label}
        series = {label: run.replay.lengths for label, run in ordered.items()}
        bound = belady.get(capacity)
        stats = None
        if bound is not None and job.infinite is not None:
            series.update(belady=bound[0], infinite=job.infinite)
            stats = hit_stats(job.trace, bound[0])
        points.append(
            Point(
                capacity=capacity,
                runs=ordered,
                belady=stats,
                timeline=timeline(job.trace, job.order, series, job.windows),
                belady_seconds=0.0 if bound is None else bound[1],
                no_cache=baselines.get(capacity, {}),
            )
        )
    return points


def _knees(points: list[Point], prepared: Plan, fractions: tuple[float, ...]) -> list[Knee]:
    assert prepared.infinite is not None
    ceiling = prepared.infinite.token_hit_ratio
    knees = []
    for label in REFINED_SERIES:
        curve = []
        for point in points:
            stats = point.belady if label == "belady" else point.runs[label].stats
            assert stats is not None, "refinement runs with bounds only"
            curve.append((point.capacity, stats.token_hit_ratio))
        knees += [find_knee(label, fraction, ceiling, curve) for fraction in fractions]
    return knees


def simulate(
    trace: Trace, settings: Settings, advance: Callable[[int], None] = lambda done: None
) -> Results:
    """:func:`plan` then :func:`execute`."""
    return execute(plan(trace, settings), settings, advance)
