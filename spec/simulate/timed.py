"""The timed mode: requests arrive at their timestamps and hold their blocks while they run.

An event loop over arrivals and completions drives the tree per the service model
of :mod:`kachedb_radix.spec.simulate.service`. Events at the same time: completions before
arrivals (a finishing request frees its pins first), then in trace order. Time is
the trace's milliseconds; nothing depends on the wall clock, so two runs agree.

Cost: O(total tokens) tree work plus O(n log n) for the event heap.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any

from kachedb_radix.reference.errors import OutOfBlocksError

from .errors import SimulateError
from .metrics import REFUSED
from .sequential import PROGRESS_EVERY, Progress, Replay
from .service import ServiceModel
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


class _Server:
    """The state of the event loop: running requests, the waiting queue, counters."""

    def __init__(self, trace: Trace, tree: Any, service: ServiceModel) -> None:
        self.trace, self.tree, self.service = trace, tree, service
        count = len(trace.requests)
        self.lengths = [REFUSED] * count
        self.ttft = [0.0] * count
        self.served: list[int] = []
        self.waiting: deque[int] = deque()
        self.running: list[tuple[float, int, Any, Any]] = []  # (done at, index, leases)
        self.prefill_free = 0.0
        self.blocked = False  # the head of the queue found the pool full
        self.waited: set[int] = set()
        self.refused = self.evictions = self.peak_pinned = self.uncached_outputs = 0

    def admit(self, now: float) -> None:
        """Admit waiting requests, first come first served, while they fit."""
        trace, tree, service = self.trace, self.tree, self.service
        while self.waiting and not self.blocked and len(self.running) < service.max_running:
            index = self.waiting[0]
            request = trace.requests[index]
            if len(request.tokens) // trace.block_size > tree.num_blocks:
                self.waiting.popleft()  # can never fit
                self.refused += 1
                continue
            hit = tree.match(request.tokens, request.namespace, pin=True)
            try:
                done = tree.insert(
                    request.tokens, request.namespace, pin=True, **request.retention()
                )
            except OutOfBlocksError:
                hit.lease.release()
                if service.on_full == "refuse":
                    self.waiting.popleft()
                    self.refused += 1
                    continue
                self.blocked = True
                return
            self.waiting.popleft()
            self.evictions += len(done.evicted)
            self.peak_pinned = max(self.peak_pinned, tree.stats().pinned)
            uncached = request.prompt_tokens - trace.saved_tokens(request, hit.length)
            start = max(now, self.prefill_free)
            self.prefill_free = start + service.prefill_ms(uncached)
            assert request.timestamp is not None  # arrival_order checked every request
            self.ttft[index] = self.prefill_free - request.timestamp
            self.lengths[index] = hit.length
            self.served.append(index)
            finish = self.prefill_free + service.decode_ms(request.output_tokens)
            heapq.heappush(self.running, (finish, index, hit.lease, done.lease))

    def complete(self) -> float:
        """Finish the earliest running request; return its completion time."""
        finish, index, matched, inserted = heapq.heappop(self.running)
        matched.release()
        inserted.release()
        request = self.trace.requests[index]
        if request.sequence is not request.tokens:
            sequence = request.sequence[: self.tree.num_blocks * self.trace.block_size]
            try:
                done = self.tree.insert(sequence, request.namespace, **request.retention())
                self.evictions += len(done.evicted)
            except OutOfBlocksError:
                self.uncached_outputs += 1
        self.blocked = False
        return finish


def replay_timed(
    trace: Trace, tree: Any, service: ServiceModel, progress: Progress | None = None
) -> Replay:
    """Replay ``trace`` through ``tree`` in arrival time under ``service``.

    Raises:
        SimulateError: a request has no timestamp.
        ValueError: the tree's block size is not the trace's.
    """
    if tree.block_size != trace.block_size:
        raise ValueError(f"tree block size {tree.block_size} != trace's {trace.block_size}")
    order = arrival_order(trace)
    server = _Server(trace, tree, service)
    arrived = 0
    while arrived < len(order) or server.running:
        next_arrival = trace.requests[order[arrived]].timestamp if arrived < len(order) else None
        if server.running and (next_arrival is None or server.running[0][0] <= next_arrival):
            now = server.complete()
        else:
            assert next_arrival is not None
            server.waiting.append(order[arrived])
            arrived += 1
            now = next_arrival
            if progress is not None and arrived % PROGRESS_EVERY == 0:
                progress(PROGRESS_EVERY)
        server.admit(now)
        if server.blocked:  # everyone queued behind a full pool waits for it
            server.waited.update(server.waiting)
    if progress is not None:
        progress(arrived % PROGRESS_EVERY)
    assert not server.waiting, "a waiting request always has a running one to wait for"
    return Replay(
        lengths=server.lengths,
        order=order,
        evictions=server.evictions,
        peak_pinned=server.peak_pinned,
        waited=len(server.waited),
        refused=server.refused,
        uncached_outputs=server.uncached_outputs,
        ttft_ms=[server.ttft[index] for index in server.served],
    )
