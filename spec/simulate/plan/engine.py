"""One worker of the timed mode: a serving engine run step by step, memory and all.

A :class:`WorkerEngine` holds one KV pool (:mod:`~kachedb_radix.spec.simulate.plan.memory`:
the cache's tree, or the no-cache baseline's counter) and the requests routed to it:
*waiting* (not admitted, or preempted), *prefilling* (admitted, the tokens before its
next output token not all computed) and *decoding* (producing a token a step). Each
:meth:`WorkerEngine.step` does what vLLM's scheduler (v1, chunked prefill) does:

1. **Decode growth.** A decoding request writes one token of KV a step; when its last
   block is full it needs one more. If the pool has none (every block pinned), the
   most recently admitted running request is **preempted** -- its blocks released
   (kept cached when there is a cache), its progress dropped, and it goes back to the
   front of the waiting queue -- until the block is found or the request itself was
   the one preempted (vLLM's recompute preemption, newest first).
2. **The batch.** Every decoding request takes one token of the step's budget
   (``token_budget``, vLLM's ``max_num_batched_tokens``); the rest goes to prompts
   still prefilling, in admission order, a chunk each.
3. **Admission.** Unless this step preempted, what budget is left admits waiting
   requests, first come first served, while fewer than ``max_running`` run: each
   matches its cached prefix and holds the blocks of every token before its next
   output token (its prompt; after a preemption, the prompt and the outputs so far),
   and gets a first chunk. When the pool has no room (``on_full="wait"``) it and
   everyone behind it wait until blocks are released; ``on_full="refuse"`` turns it
   away. A request whose prompt and outputs need more blocks than the whole pool could
   never finish: it is refused at once.
4. **Cost.** The step lasts what :meth:`CostModel.step_ms` says for its chunks and its
   decodes; the worker's clock advances by that.

A request's **TTFT** is the end of the step that computes the last token before its
first output token, less its arrival, plus the service model's fixed cost of a
request outside the GPU (``request_overhead_ms``: HTTP, tokenising, scheduling,
streaming the token back). A preempted request keeps its first token; it recomputes,
then goes on. It **completes** at the end of the step that produces its last output
token: a request of ``n`` output tokens decodes ``n - 1`` steps after its first token
when nothing preempts it (its **TPOT**: the time between its first and last token over
``n - 1``). A request admitted with a hit to restore from a slower tier (``restore``:
the tiers) starts its prefill when its restore is done, priced by
:meth:`CostModel.restore_ms` and queued on the worker's link.

Decoding requests are kept as a heap of the steps they finish at, a table of the steps
they next need a block at, and two sums -- how many, and how many tokens of KV they
hold -- so a step costs O(1) for the decodes plus O(its chunks, growths and
completions), whatever the batch. A preemption invalidates its request's heap entries
by an epoch number. Everything is ordered by the trace and the clock: two runs agree
to the bit. Time is in milliseconds.
"""

from __future__ import annotations

import heapq
from array import array
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..trace import Trace
from .cost import CostModel
from .memory import CountingPool, TreePool, blocks_for, footprint, sequence_for
from .service import ServiceModel

#: ``restore(worker, index, matched_length)`` -> the tree tokens of the hit brought from
#: each slower tier (``{"host": ..., "disk": ...}``; the tiers plug in here); None:
#: every hit is in the GPU's HBM.
Restore = Callable[[int, int, int], Mapping[str, int]]
#: ``observe(worker, time)``: called after each tree operation (the router takes the
#: tree's events there).
Observe = Callable[[int, float], None]
#: A worker's pool: the cache's tree, or the no-cache baseline's counter.
Pool = TreePool | CountingPool


@dataclass
class Record:
    """Per request, what the timed run found (shared by a run's workers).

    Attributes:
        arrival: arrival time (ms, after any speed-up and stage shift).
        lengths: matched tree length at its first admission (``-1``: refused, or not
            reached).
        ttft: time to first token (ms, the request overhead included; NaN when refused).
        tpot: time per output token after the first (ms; NaN with fewer than two).
        finish: completion time (ms; NaN when refused).
        worker: the worker it ran on (-1 before routing).
        restored: tree tokens of its hit restored from a slower tier.
        host, disk: of those, the tree tokens restored from the host, from disk.
        restore_ms: how long its prefill waited for its restore (queueing on the link
            included; 0 without one).
        preempted: how many times it was preempted.
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
    preempted: list[int] = field(default_factory=list)

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
        self.preempted = [0] * count


@dataclass
class _Running:
    """An admitted request (see the module docstring).

    Attributes:
        index: its trace index; order: when it was admitted (a preemption takes the
            highest); epoch: bumped by each preemption, to skip stale heap entries.
        sequence: its tree tokens (memory.sequence_for).
        target: real tokens whose KV precedes its next output token.
        computed: of those, real tokens computed or cached so far.
        generated: output tokens produced so far.
        blocks: blocks it holds; leases: what releases them.
        ready_at: when its restore from a slower tier is done.
        entered: the step it produced its first token in this admission (decoding).
    """

    index: int
    order: int
    epoch: int
    sequence: array[int]
    target: int
    computed: int
    generated: int
    blocks: int
    leases: list[Any]
    ready_at: float
    entered: int = -1


class WorkerEngine:
    """One worker: a pool, a queue and a clock (see the module docstring).

    Args:
        number: the worker's index in the cluster.
        trace, pool, service, cost: what it serves, its KV pool, its scheduler, its costs.
        record: where it writes each request's figures.
        observe: called after each tree operation.
        restore: the tiers' hook (see :data:`Restore`).
    """

    def __init__(
        self,
        number: int,
        trace: Trace,
        pool: Pool,
        service: ServiceModel,
        cost: CostModel,
        record: Record,
        *,
        observe: Observe | None = None,
        restore: Restore | None = None,
    ) -> None:
        self.number = number
        self.trace, self.pool, self.service, self.cost = trace, pool, service, cost
        self.record = record
        self.observe = observe if pool.reuse else None
        self.restore = restore if pool.reuse else None
        self.clock = 0.0
        self.waiting: deque[int] = deque()
        self.resume: dict[int, int] = {}  # outputs a preempted waiting request had made
        self.prefilling: list[_Running] = []
        self.running: dict[int, _Running] = {}
        self.admitted: list[_Running] = []  # admission order, finished ones popped lazily
        self.finishes: list[tuple[int, int, int]] = []  # (step, index, epoch)
        self.growths: dict[int, list[tuple[int, int]]] = {}  # step -> [(index, epoch)]
        self.steps = 0
        self.batch = 0  # decoding requests
        self.contexts = 0  # the KV tokens they hold
        self.blocked = False  # the head of the queue found the pool full
        self.active_blocks = 0  # blocks the requests here need (the router's load)
        self.busy_ms = 0.0
        self.link_free = 0.0  # when the restores queued on the link are done
        self.link_busy_ms = 0.0
        self.waited: set[int] = set()
        self.served = self.refused = self.preemptions = 0
        self._next_order = 0

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
        self.active_blocks += blocks_for(self.trace, self.trace.requests[index].prompt_tokens)
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
        """One step (see the module docstring): grow, batch, admit, charge, finish."""
        start = self.clock
        number = self.steps
        preempted = self._grow(number)
        budget = self.service.token_budget - self.batch
        chunks: list[tuple[_Running, int]] = []
        for running in self.prefilling:
            if budget <= 0:
                break
            if running.ready_at <= start:
                take = min(running.target - running.computed, budget)
                chunks.append((running, take))
                budget -= take
        if budget > 0 and not preempted:
            self._admit(start, budget, chunks)
        if not chunks and not self.batch:
            self._idle(start, preempted)
            return
        cost = self.cost
        flops = 0.0
        tokens = 0
        touched = self.contexts + self.batch  # each decode reads its context and new token
        for running, take in chunks:
            last = running.computed + take == running.target
            flops += cost.chunk_flops(running.computed, take, last)
            tokens += take
            touched += running.computed + take
        elapsed = cost.step_ms(flops, tokens, self.batch, self.contexts + self.batch, touched)
        end = start + elapsed
        self.clock = end
        self.busy_ms += elapsed
        self.steps += 1
        self.contexts += self.batch
        self._finish_decodes(number, end)
        finished = False
        for running, take in chunks:
            running.computed += take
            if running.computed == running.target:
                finished = True
                self._first_token(running, number, end)
        if finished:
            self.prefilling = [p for p in self.prefilling if p.computed < p.target]

    def _idle(self, start: float, preempted: bool) -> None:
        """Nothing could run at ``start``: every admitted prompt awaits its restore, or
        this step only preempted. O(prefilling)."""
        restoring = [p.ready_at for p in self.prefilling if p.ready_at > start]
        if restoring:
            self.clock = min(restoring)
        else:
            assert preempted or not self.busy(), "a busy worker always has a runnable request"

    # ------------------------------------------------------------------ decoding

    def _grow(self, number: int) -> bool:
        """Give a block to every decoding request whose last block is full at step
        ``number``, preempting the newest running requests when the pool has none.
        Returns whether anything was preempted. O(growths + preemptions)."""
        due = self.growths.pop(number, None)
        if not due:
            return False
        preempted = False
        for index, epoch in due:
            running = self.running.get(index)
            if running is None or running.epoch != epoch:
                continue  # finished or preempted since
            request = self.trace.requests[index]
            while not self.pool.grow(request, running.sequence, running.blocks + 1, running.leases):
                victim = self._newest()
                self._preempt(victim, number)
                preempted = True
                if victim is running:
                    break
            else:
                running.blocks += 1
                self.active_blocks += 1
                self._schedule_growth(running)
                if self.observe is not None:
                    self.observe(self.number, self.clock)
        return preempted

    def _schedule_growth(self, running: _Running) -> None:
        """Note the step at which ``running`` next needs a block (none if it finishes
        first). During decode step ``s`` it writes KV token ``computed + s - entered``
        (see the module docstring). O(1)."""
        per_block = self.trace.tokens_per_block
        step = running.entered + running.blocks * per_block - running.computed + 1
        finish = running.entered + self.trace.requests[running.index].output_tokens
        finish -= running.generated
        if step <= finish:
            self.growths.setdefault(step, []).append((running.index, running.epoch))

    def _finish_decodes(self, number: int, end: float) -> None:
        """Complete every request whose last output token step ``number`` produced. O(them)."""
        finishes = self.finishes
        while finishes and finishes[0][0] == number:
            _, index, epoch = heapq.heappop(finishes)
            running = self.running.get(index)
            if running is None or running.epoch != epoch:
                continue
            self.batch -= 1
            self.contexts -= running.computed + number - running.entered
            self._complete(running, end)

    def _first_token(self, running: _Running, number: int, end: float) -> None:
        index = running.index
        request = self.trace.requests[index]
        record = self.record
        if record.ttft[index] != record.ttft[index]:  # NaN: its first first token
            record.ttft[index] = end - record.arrival[index] + self.service.request_overhead_ms
        running.generated += 1
        if running.generated >= request.output_tokens:
            self._complete(running, end)
            return
        running.entered = number
        self.batch += 1
        self.contexts += running.computed
        finish = number + request.output_tokens - running.generated
        heapq.heappush(self.finishes, (finish, index, running.epoch))
        self._schedule_growth(running)

    def _complete(self, running: _Running, end: float) -> None:
        index = running.index
        request = self.trace.requests[index]
        record = self.record
        record.finish[index] = end
        if request.output_tokens > 1:
            first = record.arrival[index] + record.ttft[index] - self.service.request_overhead_ms
            record.tpot[index] = (end - first) / (request.output_tokens - 1)
        del self.running[index]
        self.active_blocks -= running.blocks
        self.served += 1
        self.pool.release(running.leases, running.blocks)
        if self.observe is not None:
            self.observe(self.number, end)
        self.blocked = False

    # ------------------------------------------------------------------ preemption

    def _newest(self) -> _Running:
        """The running request admitted last. O(1) amortised (finished ones are popped
        here, lazily)."""
        admitted, running = self.admitted, self.running
        while running.get(admitted[-1].index) is not admitted[-1]:
            admitted.pop()
        return admitted[-1]

    def _preempt(self, running: _Running, number: int) -> None:
        """Take ``running`` off the worker before step ``number``: release its blocks,
        keep its outputs, put it first in the queue. O(its blocks)."""
        index = running.index
        if running.entered >= 0 and running.computed == running.target:  # decoding
            made = number - 1 - running.entered
            self.batch -= 1
            self.contexts -= running.computed + made
            generated = running.generated + made
        else:
            self.prefilling.remove(running)
            generated = running.generated
        del self.running[index]
        assert self.admitted[-1] is running, "preemption takes the newest"
        self.admitted.pop()
        self.active_blocks -= running.blocks
        self.pool.release(running.leases, running.blocks)
        request = self.trace.requests[index]
        self.active_blocks += blocks_for(self.trace, request.prompt_tokens + generated)
        self.resume[index] = generated
        self.waiting.appendleft(index)
        self.record.preempted[index] += 1
        self.preemptions += 1
        self.blocked = False
        if self.observe is not None:
            self.observe(self.number, self.clock)

    # ------------------------------------------------------------------ admission

    def _admit(self, now: float, budget: int, chunks: list[tuple[_Running, int]]) -> int:
        """Admit waiting requests while the budget, the cap and the pool allow; each
        gets its first chunk. Returns the budget left. O(their sequences) pool work."""
        trace, record, pool = self.trace, self.record, self.pool
        cap = self.service.max_running
        while self.waiting and not self.blocked and budget > 0:
            if len(self.running) >= cap:
                break
            index = self.waiting[0]
            request = trace.requests[index]
            if footprint(trace, request) > pool.num_blocks:
                self.waiting.popleft()
                self._refuse(index)
                continue
            generated = self.resume.get(index, 0)
            target = request.prompt_tokens + generated
            sequence = sequence_for(trace, index, request)
            blocks = blocks_for(trace, target)
            held = pool.admit(request, sequence, target, blocks)
            if held is None:
                if self.service.on_full == "refuse" and not generated:
                    self.waiting.popleft()
                    self._refuse(index)
                    continue
                self.blocked = True
                self.waited.update(self.waiting)
                break
            length, leases = held
            self.waiting.popleft()
            self.resume.pop(index, None)
            if not generated:
                record.lengths[index] = length
            if self.observe is not None:
                self.observe(self.number, now)
            cached = min(length * trace.token_scale, target)
            cached = min(cached, target - 1)  # the last token makes the logits
            ready = now
            if self.restore is not None and length and not generated:
                ready = self._restore(index, length, now)
            running = _Running(index, self._next_order, record.preempted[index], sequence,
                               target, cached, generated, blocks, leases, ready)  # fmt: skip
            self._next_order += 1
            self.running[index] = running
            if len(self.admitted) > 2 * len(self.running) + 64:  # drop the finished ones
                self.admitted = [a for a in self.admitted if self.running.get(a.index) is a]
            self.admitted.append(running)
            self.prefilling.append(running)
            if ready <= now:
                take = min(target - cached, budget)
                chunks.append((running, take))
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
        request = self.trace.requests[index]
        self.active_blocks -= blocks_for(
            self.trace, request.prompt_tokens + self.resume.pop(index, 0)
        )
