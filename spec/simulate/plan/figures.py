"""A timed run's service figures: latency after a warm-up and per stage, throughput of
every shape of benchmark, and whether the load was more than the workers could serve.

From one timed replay (:class:`~kachedb_radix.spec.simulate.sequential.Replay`) of a
configuration (its workers, its pool):

* **Latency.** TTFT p50, p90, p99 and mean, TPOT p50 and p99, over the served requests
  that arrived after the first ``warmup`` (in arrival order: a benchmark's warm-up
  requests, left out as benchmarks leave them out); and the same per load **stage**
  when the trace has stages (a rate ladder's steps, ``Request.stage``), with each
  stage's offered rate and its output tokens a second.
* **Throughput**, for any shape of load, bursts included: the *makespan* (first
  arrival to last completion), and the served requests' input and output tokens over
  it, and requests a second. A burst (every request at once) has no arrival span, so
  these are its only rates.
* **Offered load.** The work the requests need, in seconds of one worker, as a roofline
  bound: the larger of the compute and the memory traffic they need, plus the steps'
  fixed overheads. Compute: the prefill of the tokens their hits leave
  (:meth:`CostModel.prefill_compute_ms`; a refused request in full) and the FLOPs of
  their decode tokens. Memory: their decode at the best batch the worker allows -- the
  batch ``b`` that ``max_running`` and the pool allow (the pool over a request's mean
  footprint in blocks): every decode step reads the weights once for ``b`` tokens, and
  each token's context. Overheads: the decode steps at that batch. (A prefill chunk
  rides in a memory-bound decode step for free, which is why compute and memory are not
  added.) ``load`` is that over what the workers serve in the arrivals' span
  (``offered / (span x workers)``); with stages, the largest of each stage's load over
  its own span. A load above 1 cannot be served at the trace's rate: requests pile up,
  decoding slower (TPOT) while the pool holds them and waiting (TTFT) once it is full, and
  the figures grow with the trace, not the model. **Saturated** is the other sign, for a load
  the check under-counts: the GPUs busy for 99% of the run or more *and* TTFT growing
  with the trace -- the median TTFT of the last quarter of the arrivals more than
  :data:`GROWTH` times that of the first (busy alone is no sign: an engine decoding a
  few requests is busy every step). Neither is said of a burst, which is all the load
  at once by design: its figures are the makespan and the rates. Every run is checked,
  whatever its workers, routing, policy and tiers
  (:func:`~kachedb_radix.spec.simulate.plan.report.overload_lines`).

Cost: O(n log n) for the percentiles, O(n) the rest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..metrics import percentiles
from ..sequential import Replay
from ..trace import Trace
from .cost import CostModel
from .memory import footprint
from .service import ServiceModel
from .slo import Throughput, attainment

#: A run whose GPUs were busy at least this share of it ...
SATURATED = 0.99
#: ... while its TTFT grew more than this many times over the trace is saturated.
GROWTH = 2.0


def latency(values: Sequence[float], points: Sequence[int] = (50, 90, 99)) -> dict[str, float]:
    """``percentiles`` of the finite ``values`` and their mean (``{}`` for none). O(n log n)."""
    finite = [value for value in values if not math.isnan(value)]
    found = percentiles(finite, points)
    if finite:
        found["mean"] = round(sum(finite) / len(finite), 3)
    return found


@dataclass(frozen=True)
class Stage:
    """One load stage's figures (see the module docstring).

    Attributes:
        stage: its number in the trace; requests: how many it sent.
        offered_rps: its requests over its arrivals' span (None: a burst).
        ttft_ms: TTFT p50, p90, p99 and mean.
        output_tokens_per_s: its output tokens over its first arrival to last completion.
        load: its offered work over its span and the workers (None: a burst).
    """

    stage: int
    requests: int
    offered_rps: float | None
    ttft_ms: dict[str, float]
    output_tokens_per_s: float | None
    load: float | None

    def to_json(self) -> dict[str, Any]:
        """Plain data for results.json. O(1)."""
        return {
            "stage": self.stage,
            "requests": self.requests,
            "offered_requests_per_s": _round(self.offered_rps, 4),
            "ttft_ms": self.ttft_ms or None,
            "output_tokens_per_s": _round(self.output_tokens_per_s, 3),
            "load": _round(self.load, 6),
        }


@dataclass(frozen=True)
class Service:
    """A timed run's service figures (see the module docstring).

    Attributes:
        ttft_ms: TTFT p50, p90, p99, mean of the served requests after the warm-up.
        tpot_ms: time per output token p50, p99, likewise.
        warmup: requests left out of those (the first to arrive).
        makespan_s: first arrival to last completion.
        input_tokens_per_s, output_tokens_per_s, requests_per_s: served over the makespan
            (every request: the warm-up is part of the work).
        offered_prefill_s: the prefill compute the requests need, in seconds of one worker.
        offered_decode_s: their decode alone (its compute or memory, the larger, and its
            steps' overheads), likewise.
        offered_s: everything they need (see the module docstring), likewise.
        trace_span_s: first to last arrival.
        busy: the workers' step time over the run's span (1.0: never idle).
        load: offered work over what the workers compute in the span (None: a burst).
        ttft_growth: the median TTFT of the last quarter of the arrivals over the
            first's (None: too few, or a burst).
        stages: per load stage (empty without stages).
        attainment: share of requests meeting the SLO (None without one).
        throughput: the throughput at the SLO (None without a search).
    """

    ttft_ms: dict[str, float]
    tpot_ms: dict[str, float]
    warmup: int
    makespan_s: float
    input_tokens_per_s: float | None
    output_tokens_per_s: float | None
    requests_per_s: float | None
    offered_prefill_s: float
    offered_decode_s: float
    offered_s: float
    trace_span_s: float
    busy: float
    load: float | None
    ttft_growth: float | None = None
    stages: list[Stage] = field(default_factory=list)
    attainment: float | None = None
    throughput: Throughput | None = None

    @property
    def overloaded(self) -> bool:
        """Whether the offered load is more than the workers serve in the span. O(1)."""
        return self.load is not None and self.load > 1.0

    @property
    def saturated(self) -> bool:
        """Whether the GPUs were busy for :data:`SATURATED` of the run or more while TTFT
        grew more than :data:`GROWTH` times over the trace (a burst keeps them busy by
        design: not a warning). O(1)."""
        grew = self.ttft_growth is not None and self.ttft_growth > GROWTH
        return self.busy >= SATURATED and self.load is not None and grew

    def to_json(self) -> dict[str, Any]:
        """Plain data for results.json (a run's ``service``). O(stages)."""
        throughput = self.throughput
        return {
            "ttft_ms": self.ttft_ms or None,
            "tpot_ms": self.tpot_ms or None,
            "warmup_requests": self.warmup,
            "makespan_s": round(self.makespan_s, 3),
            "input_tokens_per_s": _round(self.input_tokens_per_s, 3),
            "output_tokens_per_s": _round(self.output_tokens_per_s, 3),
            "requests_per_s": _round(self.requests_per_s, 4),
            "offered_prefill_s": round(self.offered_prefill_s, 3),
            "offered_decode_s": round(self.offered_decode_s, 3),
            "offered_s": round(self.offered_s, 3),
            "trace_span_s": round(self.trace_span_s, 3),
            "busy": round(self.busy, 6),
            "load": _round(self.load, 6),
            "ttft_growth": _round(self.ttft_growth, 6),
            "overloaded": self.overloaded,
            "saturated": self.saturated,
            "stages": [stage.to_json() for stage in self.stages],
            "slo_attainment": _round(self.attainment, 6),
            "throughput_at_slo": None
            if throughput is None
            else {
                "speedup": round(throughput.speed, 6),
                "requests_per_s": round(throughput.requests_per_s, 4),
                "failed_at_speedup": _round(throughput.failed_at, 6),
                "runs": throughput.runs,
            },
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _rate(amount: float, seconds: float) -> float | None:
    return amount / seconds if seconds > 0 else None


class Offered:
    """Each request's offered work (see the module docstring), in ms of one worker.

    Args:
        trace, cost, service: the run's.
        pool_blocks: a worker's pool, in blocks (the batch the memory allows).
    """

    def __init__(self, trace: Trace, cost: CostModel, service: ServiceModel, pool_blocks: int):
        requests = trace.requests
        mean = sum(footprint(trace, r) for r in requests) / len(requests) if requests else 1.0
        self.batch = max(1, min(service.max_running, int(pool_blocks / max(mean, 1.0))))
        self.trace, self.cost = trace, cost

    def prefill_ms(self, index: int, length: int) -> float:
        """Request ``index``'s prefill compute after a hit of ``length`` tree tokens. O(1)."""
        request = self.trace.requests[index]
        cached = self.trace.saved_tokens(request, max(length, 0))
        return self.cost.prefill_compute_ms(cached, max(request.prompt_tokens - cached, 1))

    def decode_ms(self, index: int) -> tuple[float, float, float]:
        """Request ``index``'s decode at the best batch, its mean context: ``(compute,
        memory, overheads)``. O(1)."""
        request = self.trace.requests[index]
        steps = request.output_tokens - 1
        if steps <= 0:
            return 0.0, 0.0, 0.0
        cost, batch = self.cost, self.batch
        context = request.prompt_tokens + request.output_tokens // 2
        compute = cost.compute_ms(cost.decode_flops(1, context + 1))
        memory = (cost.memory_ms(0) / batch) + cost.memory_ms(context + 1) - cost.memory_ms(0)
        return steps * compute, steps * memory, steps * cost.overhead_ms / batch


def _work(prefill: Sequence[float], decode: Sequence[tuple[float, float, float]]) -> float:
    """The offered work of these requests (see the module docstring), ms. O(n)."""
    compute = sum(prefill) + sum(d[0] for d in decode)
    memory = sum(d[1] for d in decode)
    return max(compute, memory) + sum(d[2] for d in decode)


def service_figures(
    trace: Trace,
    done: Replay,
    offered: Offered,
    workers: int,
    warmup: int = 0,
    slo_ms: float | None = None,
) -> Service:
    """The figures of one timed replay (see the module docstring). O(n log n)."""
    order = done.order
    kept = set(order[warmup:])
    ttft = [done.ttft[index] for index in order[warmup:]]
    tpot = [done.tpot[index] for index in order[warmup:]]
    arrival = done.arrival
    first = arrival[order[0]] if order else 0.0
    span_s = (arrival[order[-1]] - first) / 1000.0 if order else 0.0
    makespan = done.span_ms / 1000.0
    served = [i for i in range(len(done.lengths)) if done.lengths[i] >= 0]
    requests = trace.requests
    prefill = [offered.prefill_ms(i, done.lengths[i]) for i in range(len(requests))]
    decode = [offered.decode_ms(i) for i in range(len(requests))]
    busy = sum(done.busy_ms) / (done.span_ms * len(done.busy_ms)) if done.span_ms else 0.0
    stages = _stages(trace, done, prefill, decode, workers, kept)
    total = _work(prefill, decode)
    load = _load(total, span_s, workers)
    if stages:
        loads = [stage.load for stage in stages if stage.load is not None]
        load = max(loads) if loads else load
    return Service(
        ttft_ms=latency(ttft),
        tpot_ms=latency(tpot, (50, 99)),
        warmup=len(order) - len(kept),
        makespan_s=makespan,
        input_tokens_per_s=_rate(sum(requests[i].prompt_tokens for i in served), makespan),
        output_tokens_per_s=_rate(sum(requests[i].output_tokens for i in served), makespan),
        requests_per_s=_rate(len(served), makespan),
        offered_prefill_s=sum(prefill) / 1000.0,
        offered_decode_s=_work([0.0], decode) / 1000.0,
        offered_s=total / 1000.0,
        trace_span_s=span_s,
        busy=min(1.0, busy),
        load=load,
        ttft_growth=_growth(ttft) if span_s > 0 else None,
        stages=stages,
        attainment=None if slo_ms is None else attainment(ttft, slo_ms),
    )


def _growth(ttft: list[float]) -> float | None:
    """The median TTFT of the last quarter of ``ttft`` (in arrival order) over the
    first quarter's (refused ones left out; None: fewer than 8, or a first quarter of
    0). O(n log n)."""
    quarter = len(ttft) // 4
    if quarter < 2:
        return None
    first = [value for value in ttft[:quarter] if not math.isnan(value)]
    last = [value for value in ttft[-quarter:] if not math.isnan(value)]
    if not first or not last:
        return None
    head = float(np.median(first))
    return float(np.median(last)) / head if head > 0 else None


def _load(offered_ms: float, span_s: float, workers: int) -> float | None:
    return offered_ms / 1000.0 / (span_s * workers) if span_s > 0 else None


def _stages(
    trace: Trace,
    done: Replay,
    prefill: list[float],
    decode: list[tuple[float, float, float]],
    workers: int,
    kept: set[int],
) -> list[Stage]:
    """Each load stage's figures, in stage order (none without stages). O(n log n)."""
    members: dict[int, list[int]] = {}
    for index in done.order:
        stage = trace.requests[index].stage
        if stage is not None:
            members.setdefault(stage, []).append(index)
    found = []
    for stage in sorted(members):
        indices = members[stage]
        first, last = done.arrival[indices[0]], done.arrival[indices[-1]]
        span_s = (last - first) / 1000.0
        finishes = [done.finish[i] for i in indices if done.lengths[i] >= 0]
        outputs = sum(trace.requests[i].output_tokens for i in indices if done.lengths[i] >= 0)
        took = (max(finishes, default=first) - first) / 1000.0
        offered = _work([prefill[i] for i in indices], [decode[i] for i in indices])
        found.append(
            Stage(
                stage=stage,
                requests=len(indices),
                offered_rps=_rate(len(indices) - 1, span_s),
                ttft_ms=latency([done.ttft[i] for i in indices if i in kept]),
                output_tokens_per_s=_rate(outputs, took),
                load=_load(offered, span_s, workers),
            )
        )
    return found
