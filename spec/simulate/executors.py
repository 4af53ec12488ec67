"""Where the points of a sweep run: in this process, in worker processes, or on Ray.

Each capacity is an independent task (:func:`~kachedb_radix.spec.simulate.point.run_point` on
the shared :class:`~kachedb_radix.spec.simulate.point.Job`), so a sweep parallelises perfectly:

* ``process`` (the default): a pool of worker processes on this machine, started
  with ``spawn`` (safe beside the progress bar's thread), one per CPU or ``--jobs``;
  the job is sent to each worker once. Workers add their progress to a shared
  counter that the caller polls, so the bar moves while points run.
* ``serial``: every point in this process, one after another (``--jobs 1`` too).
* ``ray``: every point a Ray task on a cluster (``--ray-address``; the ``cluster``
  extra installs Ray). The job is put in Ray's object store once. For sweeps over
  many traces and configurations that outgrow one machine; every node needs this
  package installed. If Ray is already initialised in this process it is used as
  it is; otherwise ``ray.init(address)`` connects (``auto``: the local cluster's
  head; no address: a new local Ray, shut down afterwards).

The points come back in the order of the capacities, whatever the executor; the
results do not depend on it (tested).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from .errors import SimulateError
from .point import Job, Point, run_point

EXECUTORS = ("process", "serial", "ray")

#: Seconds between two looks at the workers' progress.
POLL_SECONDS = 0.1

Advance = Callable[[int], None]


def run_points(
    job: Job,
    capacities: list[int],
    advance: Advance,
    *,
    executor: str = "process",
    jobs: int | None = None,
    ray_address: str | None = None,
) -> list[Point]:
    """Run ``job`` at every capacity; ``advance(k)`` reports k more requests replayed.

    Raises:
        SimulateError: an unknown executor, or Ray asked for but not installed.
    """
    if executor == "serial":
        return [run_point(job, capacity, advance) for capacity in capacities]
    if executor == "process":
        workers = min(jobs or os.cpu_count() or 1, len(capacities))
        if workers <= 1:
            return [run_point(job, capacity, advance) for capacity in capacities]
        return _run_processes(job, capacities, advance, workers)
    if executor == "ray":
        return _run_ray(job, capacities, advance, ray_address)
    raise SimulateError(f"unknown executor {executor!r}; choose from {', '.join(EXECUTORS)}")


# ---------------------------------------------------------------------- processes

_job: Job | None = None
_counter: Any = None


def _start_worker(job: Job, counter: Any) -> None:
    global _job, _counter
    _job, _counter = job, counter


def _count(done: int) -> None:
    with _counter.get_lock():
        _counter.value += done


def _worker_point(capacity: int) -> Point:
    assert _job is not None, "the pool's initializer sets the job"
    return run_point(_job, capacity, _count)


def _run_processes(job: Job, capacities: list[int], advance: Advance, workers: int) -> list[Point]:
    context = multiprocessing.get_context("spawn")
    counter = context.Value("q", 0)
    reported = 0
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker, initargs=(job, counter)
    ) as pool:
        futures = [pool.submit(_worker_point, capacity) for capacity in capacities]
        pending: set[Future[Point]] = set(futures)
        while pending:
            _, pending = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
            value = counter.value
            advance(value - reported)
            reported = value
        return [future.result() for future in futures]


# ---------------------------------------------------------------------- ray


def _ray_point(job: Job, capacity: int) -> Point:
    return run_point(job, capacity)


def _run_ray(job: Job, capacities: list[int], advance: Advance, address: str | None) -> list[Point]:
    try:
        import ray
    except ImportError:
        raise SimulateError(
            "--executor ray needs Ray: pip install 'kachedb-radix[cluster]'"
        ) from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(_ray_point)
        shared = ray.put(job)
        refs = [task.remote(shared, capacity) for capacity in capacities]
        pending = list(refs)
        requests = len(job.trace.requests)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            advance(requests * len(done))
        return list(ray.get(refs))
    finally:
        if started_here:
            ray.shutdown()
