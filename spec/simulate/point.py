"""The tasks of a sweep: one configuration at one capacity, Belady at one capacity.

A *configuration* (:class:`Config`) is an eviction policy (R-POL-*) on a cluster of
workers behind a routing rule (:class:`~kachedb_radix.spec.simulate.cluster.ClusterSpec`;
one worker by default), each worker with or without host and disk tiers under its
device pool (:class:`~kachedb_radix.spec.simulate.tiers.TierSpec`). The
configurations of a run are every policy asked for on every cluster asked for, each
without tiers and with every tier configuration asked for, LRU on one worker without
tiers always first (the baseline). A *point* is every configuration and Belady at one
capacity (the device pool); each is a separate task (:class:`Task`), so a sweep over
capacities, policies, workers, routings and tiers runs as independent tasks wherever
the executor puts them (worker processes, Ray).

A :class:`Job` is everything a task needs, built once and shipped to every worker:
the trace, the mode, the service and cost models, the configurations, and --
computed once by the caller -- the prefix ids, their next uses and the infinite
capacity lengths the bounds need, and the prompts' block hashes the router index
needs. :func:`run_task` is what a worker runs.
"""

from __future__ import annotations

import dataclasses
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from kachedb_radix.reference.events import BlockHasher

from ..twins import twin_class
from .bounds import belady_lengths
from .cluster import HASH_SCHEME, ClusterSpec, Router, replay_cluster_sequential
from .metrics import HitStats, hit_stats
from .plan.cost import CostModel
from .plan.figures import Offered, Service, service_figures
from .plan.hardware import Sizing
from .plan.service import ServiceModel
from .plan.slo import Slo, search
from .prefix import PrefixPaths
from .sequential import Progress, Replay, replay_sequential
from .tiers import TieredWorkerTree, TierHits, TierSpec, make_tiered_trees, replay_tiered, tier_hits
from .timed import replay_timed
from .trace import Trace

MODES = ("sequential", "timed")
#: Task kinds: a configuration's run, Belady's bound, the no-cache baseline.
RUN, BELADY, NO_CACHE = "run", "belady", "nocache"


@dataclass(frozen=True)
class Config:
    """One configuration (see the module docstring)."""

    policy: str = "lru"
    options: dict[str, object] | None = None
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    tiers: TierSpec | None = None

    @property
    def label(self) -> str:
        """``lru``, ``lfu``, ``4xprefix``, ``4xprefix/lfu``, ``lru+host8000``,
        ``4xprefix/lfu+host8000+disk80000``: its name in tables. O(1)."""
        base = self.cluster.label
        if not base:
            name = self.policy
        else:
            name = base if self.policy == "lru" else f"{base}/{self.policy}"
        return name if self.tiers is None else f"{name}+{self.tiers.label}"

    @property
    def untiered(self) -> str:
        """The label of the same configuration without tiers. O(1)."""
        return Config(self.policy, self.options, self.cluster).label

    def to_json(self, options: dict[str, object], sizing: Sizing | None = None) -> dict[str, Any]:
        """Plain data for results.json, with the policy's options in full. O(1)."""
        cluster = self.cluster
        tiers = None
        if self.tiers is not None:
            tiers = self.tiers.to_json(sizing or Sizing(1))
        return {
            "label": self.label,
            "policy": self.policy,
            "policy_options": options,
            "workers": cluster.workers,
            "routing": None if cluster.workers == 1 else cluster.routing,
            "index": cluster.index if cluster.uses_index else None,
            "gateways": cluster.gateways if cluster.uses_index else None,
            "router_delay": (
                None
                if not cluster.uses_index
                else f"{cluster.delay_ms:g}ms"
                if cluster.delay_ms is not None
                else cluster.delay_requests
            ),
            "tiers": tiers,
        }


@dataclass(frozen=True)
class Job:
    """A sweep's shared inputs (see the module docstring).

    Attributes:
        trace: the requests.
        mode: ``sequential`` or ``timed``.
        implementation: ``reference`` or ``accel``.
        service: the timed mode's scheduler; cost: its cost model (None: sequential).
        order: trace indices in serving order (trace order, or arrival order).
        configs: the configurations, LRU on one worker first.
        limit: the most blocks a tree of the trace can use (its working set, or an
            upper bound of it): no tree is built larger.
        paths, upcoming, infinite: the bounds' inputs (None without bounds).
        hashes: the prompts' block hashes (None when no configuration routes by index).
        windows: timeline windows.
        slo: the TTFT SLO (timed mode), or None.
        speed: the timed mode replays arrivals this many times faster (``--speedup``).
        warmup: requests (the first to arrive) left out of the latency figures.
        stage_gap_ms: run the trace's load stages one after another, each this long
            after the last one drained (None: the arrivals as they are).
    """

    trace: Trace
    mode: str
    implementation: str
    service: ServiceModel
    order: list[int]
    configs: tuple[Config, ...] = (Config(),)
    limit: int = 1 << 31
    cost: CostModel | None = None
    paths: PrefixPaths | None = None
    upcoming: array[int] | None = None
    infinite: list[int] | None = None
    hashes: list[list[Any]] | None = None
    windows: int = 100
    slo: Slo | None = None
    speed: float = 1.0
    warmup: int = 0
    stage_gap_ms: float | None = None

    @property
    def trace_rate(self) -> float:
        """The trace's requests per second (first to last arrival; 0 without time). O(n)."""
        stamps = [r.timestamp for r in self.trace.requests if r.timestamp is not None]
        span = (max(stamps) - min(stamps)) / 1000.0 if stamps else 0.0
        return len(stamps) / span if span > 0 else 0.0


@dataclass(frozen=True)
class Task:
    """One unit of work: ``kind`` at ``capacity`` for configuration ``config``."""

    kind: str
    capacity: int
    config: int = 0


@dataclass(frozen=True)
class Balance:
    """How a cluster's requests spread over its workers (per worker, in order)."""

    requests: list[int]
    prompt_tokens: list[int]
    saved_tokens: list[int]

    @property
    def imbalance(self) -> float:
        """The busiest worker's prompt tokens over the mean (1.0: perfectly even). O(w)."""
        mean = sum(self.prompt_tokens) / len(self.prompt_tokens)
        return max(self.prompt_tokens) / mean if mean else 1.0


@dataclass(frozen=True)
class Run:
    """One configuration's run at one capacity (or the no-cache baseline).

    Attributes:
        stats: hit counts; replay: the engine's counters; seconds: its wall time.
        trees: the tree implementation the workers ran on.
        service: the timed mode's figures (None in the sequential mode).
        balance: how requests spread (None on one worker).
        tiers: the hit ratio per tier and the restores (None without tiers).
    """

    stats: HitStats
    replay: Replay
    seconds: float
    trees: str
    service: Service | None = None
    balance: Balance | None = None
    tiers: TierHits | None = None

    @property
    def ttft_ms(self) -> dict[str, float]:
        """TTFT percentiles ({} in the sequential mode). O(1)."""
        return {} if self.service is None else self.service.ttft_ms


@dataclass(frozen=True)
class TaskResult:
    """What a task found: a run, or Belady's lengths and wall time."""

    task: Task
    run: Run | None = None
    belady: list[int] | None = None
    seconds: float = 0.0


def make_trees(job: Job, config: Config, capacity: int) -> tuple[list[Any], str]:
    """Fresh trees for ``config``'s workers at a total of ``capacity`` device blocks
    (tiered ones with ``config.tiers``), and the implementation they are. A tree that
    must emit events is the reference's when the chosen implementation cannot (both
    twins emit them; a third-party twin may not). O(workers + tier capacities).

    Raises:
        SimulateError: the tiered tree refuses its tiers.
    """
    pools = config.cluster.pools(capacity, job.limit)
    keywords: dict[str, Any] = {}
    if config.policy != "lru" or config.options is not None:
        keywords.update(policy=config.policy, policy_options=config.options)
    name = job.implementation
    if config.cluster.uses_events:
        keywords["events"] = BlockHasher(HASH_SCHEME)
        try:
            twin_class(name)(1, job.trace.block_size, **keywords)
        except TypeError:  # this implementation does not emit events
            name = "reference"
    if config.tiers is not None:
        size = job.trace.block_size
        return make_tiered_trees(name, config.tiers, pools, job.limit, size, keywords), name
    factory = twin_class(name)
    return [factory(pool, job.trace.block_size, **keywords) for pool in pools], name


def _router(job: Job, config: Config, trees: list[Any], name: str) -> Router | None:
    if config.cluster.workers == 1:
        return None
    service = job.service
    return Router(config.cluster, job.trace, trees, job.hashes, service.max_running, name)


def _replay(
    job: Job, config: Config, capacity: int, progress: Progress | None, speed: float = 1.0
) -> tuple[Replay, str]:
    trees, name = make_trees(job, config, capacity)
    router = _router(job, config, trees, name)
    if job.mode == "timed":
        assert job.cost is not None, "the timed mode has a cost model"
        done = replay_timed(
            job.trace,
            trees,
            job.service,
            job.cost,
            router=router,
            progress=progress,
            speed=speed * job.speed,
            stage_gap_ms=job.stage_gap_ms,
        )
    elif router is None and isinstance(trees[0], TieredWorkerTree):
        done = replay_tiered(job.trace, trees[0], progress)
    elif router is None:
        done = replay_sequential(job.trace, trees[0], progress)
    else:
        done = replay_cluster_sequential(job.trace, trees, router, progress)
    return done, name


def no_cache_cluster(cluster: ClusterSpec) -> ClusterSpec:
    """The cluster of ``cluster``'s no-cache baseline: the same workers, routed by load
    when its routing needs an index (there is no cache to route by). O(1)."""
    routing = "least-loaded" if cluster.uses_index else cluster.routing
    return ClusterSpec(workers=cluster.workers, routing=routing, seed=cluster.seed)


def no_cache_label(cluster: ClusterSpec) -> str:
    """How tables name the no-cache baseline of ``cluster``: ``1 worker``,
    ``4xleast-loaded``. O(1)."""
    return no_cache_cluster(cluster).label or "1 worker"


def _no_cache(job: Job, config: Config, capacity: int, speed: float = 1.0) -> Replay:
    """The no-cache baseline at ``capacity`` blocks in all: the same workers with the
    same pools, nothing reused (see :func:`no_cache_cluster`)."""
    assert job.cost is not None
    cluster = no_cache_cluster(config.cluster)
    router = None
    if cluster.workers > 1:
        router = Router(cluster, job.trace, [], None, job.service.max_running)
    return replay_timed(
        job.trace,
        cluster.pools(capacity, job.limit),
        job.service,
        job.cost,
        router=router,
        speed=speed * job.speed,
        reuse=False,
        stage_gap_ms=job.stage_gap_ms,
    )


def run_task(job: Job, task: Task, progress: Progress | None = None) -> TaskResult:
    """Run one task (see the module docstring). O(its replays)."""
    started = time.perf_counter()
    if task.kind == BELADY:
        assert job.paths is not None
        lengths = belady_lengths(
            job.paths, job.order, task.capacity, job.trace.block_size, job.upcoming
        )
        return TaskResult(task, belady=lengths, seconds=time.perf_counter() - started)
    config = job.configs[task.config]
    if task.kind == NO_CACHE:
        done, name = _no_cache(job, config, task.capacity), "none"
    else:
        done, name = _replay(job, config, task.capacity, progress)
    service = None
    if job.mode == "timed":
        service = _service(job, config, task, done)
    balance = None if done.worker_of is None else _balance(job, done, config.cluster.workers)
    run = Run(
        stats=hit_stats(job.trace, done.lengths),
        replay=done,
        seconds=time.perf_counter() - started,
        trees=name,
        service=service,
        balance=balance,
        tiers=None if done.tiers is None else tier_hits(job.trace, done.lengths, done.tiers),
    )
    return TaskResult(task, run=run, seconds=run.seconds)


def _service(job: Job, config: Config, task: Task, done: Replay) -> Service:
    """A timed run's figures (:mod:`.plan.figures`), its SLO search included."""
    assert job.cost is not None
    workers = config.cluster.workers
    pool = max(1, min(task.capacity // workers, job.limit))
    offered = Offered(job.trace, job.cost, job.service, pool)
    slo = job.slo
    found = service_figures(
        job.trace, done, offered, workers, job.warmup, None if slo is None else slo.ttft_ms
    )
    if slo is None or not slo.runs:
        return found

    def at_speed(speed: float) -> list[float]:
        if task.kind == NO_CACHE:
            again = _no_cache(job, config, task.capacity, speed)
        else:
            again = _replay(job, config, task.capacity, None, speed)[0]
        return [again.ttft[index] for index in again.order[job.warmup :]]

    throughput = search(at_speed, slo, job.trace_rate * job.speed)
    return dataclasses.replace(found, throughput=throughput)


def _balance(job: Job, done: Replay, workers: int) -> Balance:
    assert done.worker_of is not None
    requests = [0] * workers
    prompt = [0] * workers
    saved = [0] * workers
    trace = job.trace
    for index, worker in enumerate(done.worker_of):  # every request is routed
        request = trace.requests[index]
        requests[worker] += 1
        prompt[worker] += request.prompt_tokens
        length = done.lengths[index]
        if length > 0:
            saved[worker] += trace.saved_tokens(request, length)
    return Balance(requests, prompt, saved)


@dataclass(frozen=True)
class Point:
    """Every figure at one capacity.

    Attributes:
        capacity: the pool, in blocks (a cluster's total).
        runs: each configuration's run, by label, in the configurations' order (the
            first is LRU on one worker).
        belady: Belady's hit counts (None without bounds).
        timeline: the hit ratio per window of requests, per series.
        belady_seconds: the bound's wall time.
        no_cache: the timed mode's no-cache baselines at this capacity, by cluster
            (``1 worker``, ``4xleast-loaded``; empty in the sequential mode and at the
            knee's refinements).
    """

    capacity: int
    runs: dict[str, Run]
    belady: HitStats | None = None
    timeline: list[dict[str, Any]] = field(default_factory=list)
    belady_seconds: float = 0.0
    no_cache: dict[str, Run] = field(default_factory=dict)

    @property
    def lru(self) -> HitStats:
        """LRU's hit counts on one worker: the baseline. O(1)."""
        return self.runs["lru"].stats

    @property
    def replay(self) -> Replay:
        """The baseline's replay counters. O(1)."""
        return self.runs["lru"].replay

    @property
    def ttft_ms(self) -> dict[str, float]:
        """The baseline's TTFT percentiles ({} in the sequential mode). O(1)."""
        return self.runs["lru"].ttft_ms

    @property
    def seconds(self) -> float:
        """The baseline's wall time. O(1)."""
        return self.runs["lru"].seconds
