"""The timed mode: requests arrive at their timestamps, workers run step by step.

Each worker is a :class:`~kachedb_radix.spec.simulate.plan.engine.WorkerEngine` (its KV
pool, its queue, its clock); a router (:mod:`~kachedb_radix.spec.simulate.cluster`)
picks a worker per request when there are several. The loop walks the arrivals in time
order (ties in trace order): before routing a request that arrives at ``t`` it runs
every worker's steps that start before ``t``, so the router sees each worker's queue
and the events its tree emitted up to then; then the request joins the chosen worker's
queue. After the last arrival every worker runs until it is empty. Workers interact
only through routing, at arrivals, so this order is exact. Nothing depends on the wall
clock: two runs agree to the bit.

**The pools.** With ``reuse`` (the cache) each worker's pool is its tree; without (the
no-cache baseline) a counter of as many blocks (``pools``), so both run with the same
memory and the same admission (:mod:`~kachedb_radix.spec.simulate.plan.memory`).

**Stages.** With ``stage_gap_ms``, the trace's load stages (``Request.stage``) run one
after another as a benchmark's rate ladder does (inference-perf waits for every request
of a stage before it starts the next): when the next arrival is of a new stage, every
worker first drains, and the stage's arrivals are shifted so that its first request
arrives ``stage_gap_ms`` after the previous stage's last completion. Without it the
arrivals are the trace's.

Tiered workers (:class:`~kachedb_radix.spec.simulate.tiers.TieredWorkerTree`) restore
their hits from slower tiers: unless a ``restore`` hook is given, each engine asks its
tree what its last match restored, and prices it.

``speed`` divides every timestamp (2.0: the same requests arriving twice as fast):
how the throughput at an SLO is searched for
(:mod:`~kachedb_radix.spec.simulate.plan.slo`).

Cost: O(total tokens) tree work, O(steps + chunks) step work, plus the routing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .cluster import Router
from .errors import SimulateError
from .plan.cost import CostModel
from .plan.engine import Pool, Record, Restore, WorkerEngine
from .plan.memory import CountingPool, TreePool
from .plan.service import ServiceModel
from .sequential import PROGRESS_EVERY, Progress, Replay
from .tiers import TierRecord, is_tiered, tier_moves
from .trace import Trace


def arrival_order(trace: Trace) -> list[int]:
    """Trace indices by arrival time, ties in trace order. O(n log n).

    Raises:
        SimulateError: a request has no timestamp (naming its line).
    """
    for request in trace.requests:
        if request.timestamp is None:
            raise SimulateError(
                f"{trace.source}, line {request.line}: field 'timestamp': missing; "
                "the timed mode needs an arrival time on every request"
            )
    stamps = [request.timestamp or 0.0 for request in trace.requests]
    return sorted(range(len(stamps)), key=stamps.__getitem__)


def make_pools(trace: Trace, trees: Sequence[Any], reuse: bool) -> list[Pool]:
    """Each worker's pool: its tree (``reuse``), or a counter of as many blocks (the
    no-cache baseline; ``trees`` then gives each worker's block count). O(workers)."""
    if reuse:
        return [TreePool(tree, trace) for tree in trees]
    return [CountingPool(int(blocks), trace) for blocks in trees]


def replay_timed(
    trace: Trace,
    trees: Sequence[Any],
    service: ServiceModel,
    cost: CostModel,
    *,
    router: Router | None = None,
    progress: Progress | None = None,
    speed: float = 1.0,
    reuse: bool = True,
    restore: Restore | None = None,
    stage_gap_ms: float | None = None,
) -> Replay:
    """Replay ``trace`` in arrival time over one worker per tree (see the module
    docstring). ``reuse=False`` is the no-cache baseline: ``trees`` then holds each
    worker's pool size in blocks.

    Raises:
        SimulateError: a request has no timestamp.
        ValueError: a tree's block size is not the trace's, or several trees and no
            router.
    """
    for tree in trees:
        if reuse and tree.block_size != trace.block_size:
            raise ValueError(f"tree block size {tree.block_size} != trace's {trace.block_size}")
    if len(trees) > 1 and router is None:
        raise ValueError("several workers need a router")
    order = arrival_order(trace)
    tiered = reuse and is_tiered(trees)
    if tiered and restore is None:

        def last_restored(worker: int, index: int, length: int) -> Mapping[str, int]:
            restored: Mapping[str, int] = trees[worker].restored
            return restored

        restore = last_restored
    record = Record([(request.timestamp or 0.0) / speed for request in trace.requests])
    observe = router.observe if router is not None else None
    pools = make_pools(trace, trees, reuse)
    engines = [
        WorkerEngine(number, trace, pool, service, cost, record, observe=observe, restore=restore)
        for number, pool in enumerate(pools)
    ]
    _arrive(trace, order, engines, record, router, progress, stage_gap_ms)
    for engine in engines:
        engine.drain()
    if progress is not None:
        progress(len(order) % PROGRESS_EVERY)
    return _replay(trace, order, engines, record, trees if tiered else None)


def _arrive(
    trace: Trace,
    order: list[int],
    engines: list[WorkerEngine],
    record: Record,
    router: Router | None,
    progress: Progress | None,
    stage_gap_ms: float | None,
) -> None:
    """Route every request at its arrival, running the workers up to it (module
    docstring); with ``stage_gap_ms``, a new stage starts after the last one drained."""
    shift = 0.0
    stage = trace.requests[order[0]].stage if order else None
    for arrived, index in enumerate(order, 1):
        now = record.arrival[index] + shift
        current = trace.requests[index].stage
        if stage_gap_ms is not None and current != stage:
            for engine in engines:
                engine.drain()
            drained = max(engine.clock for engine in engines)
            shift = drained + stage_gap_ms - record.arrival[index]
            now = record.arrival[index] + shift
        stage = current
        record.arrival[index] = now
        for engine in engines:
            engine.run_until(now)
        if router is None:
            chosen = 0
        else:
            loads = [engine.load for engine in engines]
            active = [engine.active_blocks for engine in engines]
            waiting = [len(engine.waiting) for engine in engines]
            chosen = router.route(index, now, loads, active, waiting)
        engines[chosen].enqueue(index, now)
        if progress is not None and arrived % PROGRESS_EVERY == 0:
            progress(PROGRESS_EVERY)


def _replay(
    trace: Trace,
    order: list[int],
    engines: list[WorkerEngine],
    record: Record,
    tiered: Sequence[Any] | None,
) -> Replay:
    """What the engines found, as a :class:`Replay`. O(n)."""
    waited: set[int] = set()
    for engine in engines:
        waited |= engine.waited
    finished = [value for value in record.finish if value == value]
    first = record.arrival[order[0]] if order else 0.0
    tiers = None
    evictions = sum(engine.pool.evictions for engine in engines)
    if tiered is not None:
        demoted, dropped = tier_moves(tiered)
        link_busy = sum(engine.link_busy_ms for engine in engines)
        tiers = TierRecord(record.host, record.disk, record.restore_ms, link_busy, demoted, dropped)
        evictions += sum(tree.restore_evictions for tree in tiered)
    return Replay(
        lengths=record.lengths,
        order=order,
        evictions=evictions,
        peak_pinned=max(engine.pool.peak_pinned for engine in engines),
        waited=len(waited),
        refused=sum(engine.refused for engine in engines),
        preemptions=sum(engine.preemptions for engine in engines),
        preempted=sum(1 for times in record.preempted if times),
        ttft=record.ttft,
        tpot=record.tpot,
        worker_of=record.worker if len(engines) > 1 else None,
        busy_ms=[engine.busy_ms for engine in engines],
        span_ms=max(finished, default=first) - first,
        arrival=record.arrival,
        finish=record.finish,
        restored=sum(record.restored),
        tiers=tiers,
    )
