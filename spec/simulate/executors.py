"""Where the tasks of a sweep run: in this process, in worker processes, or on Ray.

Each task (:class:`~kachedb_radix.spec.simulate.point.Task`: one configuration at one
capacity, or Belady at one capacity) is independent of the others and runs
:func:`~kachedb_radix.spec.simulate.point.run_task` on the shared
:class:`~kachedb_radix.spec.simulate.point.Job`, so a sweep over capacities, policies,
workers and routings parallelises perfectly:

* ``process`` (the default): a pool of worker processes on this machine, started
  with ``spawn`` (safe beside the progress bar's thread), one per CPU or ``--jobs``;
  the job is sent to each worker once. Workers add their progress to a shared
  counter that the caller polls, so the bar moves while tasks run.
* ``serial``: every task in this process, one after another (``--jobs 1`` too).
* ``ray``: every task a Ray task on a cluster (``--ray-address``; the ``cluster``
  extra installs Ray). The job is put in Ray's object store once. For sweeps that
  outgrow one machine; every node needs this package installed. If Ray is already
  initialised in this process it is used as it is; otherwise ``ray.init(address)``
  connects (``auto``: the local cluster's head; no address: a new local Ray, shut
  down afterwards).

A :class:`Session` keeps its workers (the pool, or Ray and the job's object) across
calls, so the knee's refinement rounds reuse them. Results come back in the order of
the tasks, whatever the executor; they do not depend on it (tested).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from types import TracebackType
from typing import Any

from .errors import SimulateError
from .point import Job, Task, TaskResult, run_task

EXECUTORS = ("process", "serial", "ray")

#: Seconds between two looks at the workers' progress.
POLL_SECONDS = 0.1

Advance = Callable[[int], None]


class Session:
    """An executor kept open over several calls (see the module docstring).

    Raises:
        SimulateError: an unknown executor, or Ray asked for but not installed.
    """

    def __init__(
        self,
        job: Job,
        executor: str = "process",
        jobs: int | None = None,
        ray_address: str | None = None,
    ) -> None:
        if executor not in EXECUTORS:
            raise SimulateError(
                f"unknown executor {executor!r}; choose from {', '.join(EXECUTORS)}"
            )
        self.job = job
        self.executor = executor
        self.jobs = jobs
        self.ray_address = ray_address
        self._pool: ProcessPoolExecutor | None = None
        self._counter: Any = None
        self._ray: Any = None
        self._ray_started = False
        self._shared: Any = None
        if executor == "ray":
            try:
                import ray
            except ImportError:
                raise SimulateError(
                    "--executor ray needs Ray: pip install 'kachedb-radix[cluster]'"
                ) from None
            self._ray = ray

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def run(self, tasks: list[Task], advance: Advance) -> list[TaskResult]:
        """Run ``tasks``; ``advance(k)`` reports k more requests replayed. O(the tasks)."""
        if not tasks:
            return []
        if self.executor == "ray":
            return self._run_ray(tasks, advance)
        workers = min(self.jobs or os.cpu_count() or 1, len(tasks))
        if self.executor == "serial" or (self._pool is None and workers <= 1):
            return [run_task(self.job, task, advance) for task in tasks]
        return self._run_processes(tasks, advance, workers)

    def close(self) -> None:
        """Stop the workers (and a Ray started here). O(1)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._ray_started:
            self._ray.shutdown()
            self._ray_started = False

    # ------------------------------------------------------------------ processes

    def _run_processes(self, tasks: list[Task], advance: Advance, workers: int) -> list[TaskResult]:
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._counter = context.Value("q", 0)
            self._pool = ProcessPoolExecutor(
                workers,
                mp_context=context,
                initializer=_start_worker,
                initargs=(self.job, self._counter),
            )
        counter = self._counter
        reported = counter.value
        futures = [self._pool.submit(_worker_task, task) for task in tasks]
        pending: set[Future[TaskResult]] = set(futures)
        while pending:
            _, pending = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
            value = counter.value
            advance(value - reported)
            reported = value
        return [future.result() for future in futures]

    # ------------------------------------------------------------------ ray

    def _run_ray(self, tasks: list[Task], advance: Advance) -> list[TaskResult]:
        ray = self._ray
        if self._shared is None:
            if not ray.is_initialized():
                ray.init(address=self.ray_address, include_dashboard=False, log_to_driver=False)
                self._ray_started = True
            self._shared = ray.put(self.job)
        remote = ray.remote(_ray_task)
        refs = [remote.remote(self._shared, task) for task in tasks]
        pending = list(refs)
        requests = len(self.job.trace.requests)
        kinds = {ref: task.kind for ref, task in zip(refs, tasks, strict=True)}
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            advance(requests * sum(1 for ref in done if kinds[ref] != "belady"))
        return list(ray.get(refs))


def run_tasks(
    job: Job,
    tasks: list[Task],
    advance: Advance,
    *,
    executor: str = "process",
    jobs: int | None = None,
    ray_address: str | None = None,
) -> list[TaskResult]:
    """Run ``tasks`` in a :class:`Session` of their own. O(the tasks).

    Raises:
        SimulateError: an unknown executor, or Ray asked for but not installed.
    """
    with Session(job, executor, jobs, ray_address) as session:
        return session.run(tasks, advance)


_job: Job | None = None
_counter: Any = None


def _start_worker(job: Job | None, counter: Any) -> None:
    global _job, _counter
    _job, _counter = job, counter


def _count(done: int) -> None:
    with _counter.get_lock():
        _counter.value += done


def _worker_task(task: Task) -> TaskResult:
    assert _job is not None, "the pool's initializer sets the job"
    return run_task(_job, task, _count)


def _ray_task(job: Job, task: Task) -> TaskResult:
    return run_task(job, task)
