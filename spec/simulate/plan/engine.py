"""One worker of the timed mode: a serving engine run step by step.

A :class:`WorkerEngine` holds one tree (its KV pool) and the requests routed to it:
*waiting* (not admitted), *prefilling* (admitted, prompt not fully computed) and
*decoding* (first token out, more to come). Each :meth:`WorkerEngine.step` builds a
batch by the scheduler's rules (:mod:`~kachedb_radix.spec.simulate.plan.service`: decodes
first, then prefill chunks in admission order, then admissions, within the token
budget), asks the cost model (:mod:`~kachedb_radix.spec.simulate.plan.cost`) how long it
takes, and advances the worker's clock by that:

* a request's **TTFT** is the end of the step that computes its prompt's last token,
  less its arrival;
* a decoding request produces one token per step; one with ``n`` output tokens
  completes at the end of the ``n - 1``-th step after its first token (its **TPOT**:
  the time between its first and last token over ``n - 1``);
* a request admitted with blocks to restore from a slower tier (``restore``: the
  tiers, :mod:`~kachedb_radix.spec.simulate.tiers`) starts its prefill when its restore
  is done: priced by :meth:`CostModel.restore_ms` per tier, run one after another on
  the worker's link (restores share it: one waits for those before it), while the
  worker computes other requests' steps. A tiered tree's ``match`` restores, so it
  may find the device full (pinned): the request then waits or is refused as for
  its insert.

Decoding requests are kept as a heap of the step numbers they finish at, and as two
sums -- how many, and how many tokens of context they hold -- so a step costs O(1)
for the decodes plus O(its chunks), whatever the batch. Everything is ordered by
the trace and the clock: two runs agree to the bit. Time is in milliseconds.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kachedb_radix.reference.errors import OutOfBlocksError

from .cost import CostModel
from .service import ServiceModel
from ..trace import Trace

#: ``restore(worker, index, matched_length)`` -> the tree tokens of the hit brought from
#: each slower tier (``{"host": ..., "disk": ...}``; the tiers plug in here); None:
#: every hit is in the GPU's HBM.
Restore = Callable[[int, int, int], Mapping[str, int]]
#: ``observe(worker, time)``: called after each tree operation (the router takes the
#: tree's events there).
Observe = Callable[[int, float], None]


@dataclass
class Record:
    """Per request, what the timed run found (shared by a run's workers).

    Attributes:
        arrival: arrival time (ms, after any speed-up).
        lengths: matched tree length (``-1``: refused, or not reached).
        ttft: time to first token (ms; NaN when refused).
        tpot: time per output token after the first (ms; NaN with fewer than two).
        finish: completion time (ms; NaN when refused).
        worker: the worker it ran on (-1 before routing).
        restored: tree tokens of its hit restored from a slower tier.
        host, disk: of those, the tree tokens restored from the host, from disk.
        restore_ms: how long its prefill waited for its restore (queueing on the link
            included; 0 without one).
    """

    arrival: list[float]
    lengths: list[int] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    finish: list[float] = field(default_factory=list)
    worker: list[int] = field(default_factory=list)
    restored: list[int] = field(default_factory=list)
    host: list[int] = field(default_factory=list)
    disk: list[int] = field(default_factory=list)
    restore_ms: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        count = len(self.arrival)
        nan = float("nan")
        self.lengths = [-1] * count
        self.ttft = [nan] * count
        self.tpot = [nan] * count
        self.finish = [nan] * count
        self.worker = [-1] * count
        self.restored = [0] * count
        self.host = [0] * count
        self.disk = [0] * count
        self.restore_ms = [0.0] * count


@dataclass
class _Prefill:
    """An admitted request whose prompt is not fully computed yet."""

    index: int
    position: int  # prompt tokens before its next chunk (cached or computed)
    remaining: int  # prompt tokens still to compute
    ready_at: float  # when its restore from a slower tier is done
    leases: tuple[Any, ...]


class WorkerEngine:
    """One worker: a tree, a queue and a clock (see the module docstring).

    Args:
        number: the worker's index in the cluster.
        trace, tree, service, cost: what it serves, its pool, its scheduler, its costs.
        record: where it writes each request's figures.
        reuse: False for the no-cache baseline: no tree, every prompt computed in full.
        observe: called after each tree operation.
        restore: the tiers' hook (see :data:`Restore`).
    """

    def __init__(
        self,
        number: int,
        trace: Trace,
        tree: Any,
        service: ServiceModel,
        cost: CostModel,
        record: Record,
        *,
        reuse: bool = True,
        observe: Observe | None = None,
        restore: Restore | None = None,
    ) -> None:
        self.number = number
        self.trace, self.tree, self.service, self.cost = trace, tree, service, cost
        self.record = record
        self.reuse = reuse
        self.observe = observe
        self.restore = restore
        self.clock = 0.0
        self.waiting: deque[int] = deque()
        self.prefilling: list[_Prefill] = []
        self.decoding: list[tuple[int, int, tuple[Any, ...]]] = []  # (last step, index, leases)
        self.steps = 0
        self.batch = 0  # decoding requests
        self.contexts = 0  # their tokens of context
        self.blocked = False  # the head of the queue found the pool full
        self.active_blocks = 0  # prompt blocks of every request here (the router's load)
        self.busy_ms = 0.0
        self.link_free = 0.0  # when the restores queued on the link are done
        self.link_busy_ms = 0.0
        self.waited: set[int] = set()
        self.served = self.refused = self.evictions = self.peak_pinned = 0
        self.uncached_outputs = 0

    # ------------------------------------------------------------------ the queue

    @property
    def load(self) -> int:
        """Requests here: waiting, prefilling or decoding. O(1)."""
        return len(self.waiting) + len(self.prefilling) + self.batch

    def busy(self) -> bool:
        """Whether it has anything to do. O(1)."""
        return bool(self.waiting or self.prefilling or self.batch)

    def enqueue(self, index: int, time: float) -> None:
        """Request ``index`` arrives at ``time`` (an idle worker's clock jumps to it). O(1)."""
        if not self.busy():
            self.clock = max(self.clock, time)
        self.waiting.append(index)
        self.active_blocks += self.trace.prompt_blocks(self.trace.requests[index])
        self.record.worker[index] = self.number

    def run_until(self, time: float) -> None:
        """Run every step that starts before ``time``. O(those steps)."""
        while self.clock < time and self.busy():
            self.step()

    def drain(self) -> None:
        """Run until nothing is left. O(the steps)."""
        while self.busy():
            self.step()

    # ------------------------------------------------------------------ a step

    def step(self) -> None:
        """Build one batch, charge its cost, advance the clock, finish what it finishes."""
        start = self.clock
        budget = self.service.token_budget - self.batch
        chunks: list[tuple[_Prefill, int]] = []
        for prefill in self.prefilling:
            if budget <= 0:
                break
            if prefill.ready_at <= start:
                take = min(prefill.remaining, budget)
                chunks.append((prefill, take))
                budget -= take
        if budget > 0:
            budget = self._admit(start, budget, chunks)
        if not chunks and not self.batch:
            # Nothing can run now: every admitted prompt awaits its restore.
            restoring = [p.ready_at for p in self.prefilling if p.ready_at > start]
            assert restoring or not self.busy(), "a busy worker always has a runnable request"
            if restoring:
                self.clock = min(restoring)
            return
        cost = self.cost
        flops = 0.0
        tokens = 0
        touched = self.contexts + self.batch  # each decode reads its context and new token
        for prefill, take in chunks:
            flops += cost.chunk_flops(prefill.position, take, take == prefill.remaining)
            tokens += take
            touched += prefill.position + take
        elapsed = cost.step_ms(flops, tokens, self.batch, self.contexts + self.batch, touched)
        end = start + elapsed
        self.clock = end
        self.busy_ms += elapsed
        number = self.steps
        self.steps += 1
        self.contexts += self.batch
        while self.decoding and self.decoding[0][0] == number:
            _, index, leases = heapq.heappop(self.decoding)
            request = self.trace.requests[index]
            self.batch -= 1
            self.contexts -= request.prompt_tokens + request.output_tokens
            self._complete(index, leases, end)
        finished = False
        for prefill, take in chunks:
            prefill.position += take
            prefill.remaining -= take
            if prefill.remaining == 0:
                finished = True
                self._first_token(prefill, number, end)
        if finished:
            self.prefilling = [p for p in self.prefilling if p.remaining]

    def _first_token(self, prefill: _Prefill, number: int, end: float) -> None:
        index = prefill.index
        request = self.trace.requests[index]
        record = self.record
        record.ttft[index] = end - record.arrival[index]
        if request.output_tokens <= 1:
            self._complete(index, prefill.leases, end)
            return
        heapq.heappush(self.decoding, (number + request.output_tokens - 1, index, prefill.leases))
        self.batch += 1
        self.contexts += request.prompt_tokens + 1

    def _complete(self, index: int, leases: tuple[Any, ...], end: float) -> None:
        request = self.trace.requests[index]
        record = self.record
        record.finish[index] = end
        if request.output_tokens > 1:
            first = record.arrival[index] + record.ttft[index]
            record.tpot[index] = (end - first) / (request.output_tokens - 1)
        self.active_blocks -= self.trace.prompt_blocks(request)
        self.served += 1
        if not self.reuse:
            return
        for lease in leases:
            lease.release()
        if request.sequence is not request.tokens:
            sequence = request.sequence[: self.tree.num_blocks * self.trace.block_size]
            try:
                done = self.tree.insert(sequence, request.namespace, **request.retention())
                self.evictions += len(done.evicted)
            except OutOfBlocksError:
                self.uncached_outputs += 1
        if self.observe is not None:
            self.observe(self.number, end)
        self.blocked = False

    # ------------------------------------------------------------------ admission

    def _admit(self, now: float, budget: int, chunks: list[tuple[_Prefill, int]]) -> int:
        """Admit waiting requests while the budget, the cap and the pool allow; each
        gets its first chunk. Returns the budget left. O(their prompts) tree work."""
        trace, tree, record = self.trace, self.tree, self.record
        cap = self.service.max_running
        while self.waiting and not self.blocked and budget > 0:
            if len(self.prefilling) + self.batch >= cap:
                break
            index = self.waiting[0]
            request = trace.requests[index]
            length = 0
            leases: tuple[Any, ...] = ()
            if self.reuse:
                if trace.prompt_blocks(request) > tree.num_blocks:
                    self.waiting.popleft()
                    self._refuse(index)
                    continue
                hit = None
                try:
                    # A tiered tree's match restores to the device: it may not fit either.
                    hit = tree.match(request.tokens, request.namespace, pin=True)
                    done = tree.insert(
                        request.tokens, request.namespace, pin=True, **request.retention()
                    )
                except OutOfBlocksError:
                    if hit is not None:
                        hit.lease.release()
                    if self.service.on_full == "refuse":
                        self.waiting.popleft()
                        self._refuse(index)
                        continue
                    self.blocked = True
                    self.waited.update(self.waiting)
                    break
                length = hit.length
                leases = (hit.lease, done.lease)
                self.evictions += len(done.evicted)
                self.peak_pinned = max(self.peak_pinned, tree.stats().pinned)
                if self.observe is not None:
                    self.observe(self.number, now)
            self.waiting.popleft()
            record.lengths[index] = length
            cached = trace.saved_tokens(request, length)
            uncached = max(request.prompt_tokens - cached, 1)  # the last token makes logits
            ready = now
            if self.restore is not None and length:
                ready = self._restore(index, length, now)
            prefill = _Prefill(index, request.prompt_tokens - uncached, uncached, ready, leases)
            self.prefilling.append(prefill)
            if ready <= now:
                take = min(uncached, budget)
                chunks.append((prefill, take))
                budget -= take
        return budget

    def _restore(self, index: int, length: int, now: float) -> float:
        """Record what request ``index``'s hit brings from slower tiers, queue its restore
        on the link, and return when it is done. O(1)."""
        record, cost, scale = self.record, self.cost, self.trace.token_scale
        assert self.restore is not None
        found = self.restore(self.number, index, length)
        host, disk = found.get("host", 0), found.get("disk", 0)
        record.host[index], record.disk[index] = host, disk
        record.restored[index] = host + disk
        took = cost.restore_ms(host * scale, "host") + cost.restore_ms(disk * scale, "disk")
        if took <= 0:
            return now
        ready = max(now, self.link_free) + took
        self.link_free = ready
        self.link_busy_ms += took
        record.restore_ms[index] = ready - now
        return ready

    def _refuse(self, index: int) -> None:
        self.refused += 1
        self.active_blocks -= self.trace.prompt_blocks(self.trace.requests[index])
