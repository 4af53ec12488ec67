"""The planner's tables and warnings: service, clusters, stages, overload.

What the timed mode adds to ``kachedb-radix simulate``'s output
(:mod:`~kachedb_radix.spec.simulate.summary` prints it, the report page embeds it):

* the **service table**: LRU on one worker at each capacity -- TTFT p50, p90, p99 and
  mean (after ``--warmup``), TPOT, the no-cache baseline's TTFT with the same pool,
  how busy the GPUs were, the offered load, the makespan and the output tokens a
  second, the requests preempted, and with an SLO its attainment and the requests a
  second at it;
* the **cluster table**: every configuration at the timeline capacity -- hit ratio,
  spread, and in the timed mode TTFT, waits, preemptions, load, output tokens a
  second, SLO attainment and requests a second at the SLO, the no-cache baselines
  beside them;
* the **stage table**, for a trace with load stages: each stage's offered rate, and per
  configuration (without tiers) its TTFT p90 and output tokens a second;
* the **notes**: the service model's constants, the warm floor (a fully cached
  request's TTFT on an idle worker), and **OVERLOAD** whenever any run -- every
  configuration at every capacity, the baselines too -- was offered more than its
  workers serve or kept them saturated (:mod:`.figures`).

Cost: O(points * configurations).
"""

from __future__ import annotations

from collections.abc import Iterator

from rich.table import Table

from ..point import Run
from ..results import Results
from ..text import duration, percent, rate, ratio
from .figures import Service

#: What the service table's columns mean.
SERVICE_CAPTION = (
    "TTFT: arrival to first token (per-request overhead included); TPOT: per output token "
    "after it; no cache: the same pool, nothing reused; busy: share of the run the GPUs "
    "computed; load: offered prefill + decode over what the workers serve in the "
    "arrivals' span (— for a burst); out tok/s: output tokens over the makespan"
)


def _load(run: Run) -> str:
    service = run.service
    if service is None or service.load is None:
        return "—"
    mark = " !" if service.overloaded or service.saturated else ""
    return ratio(service.load) + mark


def _throughput(run: Run) -> str:
    service = run.service
    if service is None or service.throughput is None:
        return "—"
    found = service.throughput
    if found.speed == 0:
        return "< 1/64 of trace"
    text = f"{found.requests_per_s:,.3g}"
    return text if found.failed_at is not None else f"≥ {text}"


def _slo_cells(results: Results, run: Run) -> list[str]:
    slo, service = results.slo, run.service
    if slo is None or service is None:
        return []
    cells = [percent(service.attainment)]
    if slo.runs:
        cells.append(_throughput(run))
    return cells


def _slo_columns(results: Results) -> list[str]:
    slo = results.slo
    if slo is None:
        return []
    return [f"TTFT ≤ {duration(slo.ttft_ms)}", *(["req/s at SLO"] if slo.runs else [])]


def service_table(results: Results) -> Table:
    """LRU on one worker at each capacity, beside no cache with the same pool. O(points)."""
    table = Table(caption=SERVICE_CAPTION)
    columns = ["blocks", "TTFT p50", "p90", "p99", "mean", "TPOT p50", "p99",
               "no cache p50", "p99 ", "busy", "load", "makespan", "out tok/s", "preempted",
               *_slo_columns(results)]  # fmt: skip
    plain_slo = results.slo is not None and results.slo.runs > 0
    if plain_slo:
        columns.append("no cache at SLO")
    for name in columns:
        table.add_column(name, justify="right")
    for point in results.shown():
        run = point.runs["lru"]
        service = run.service
        assert service is not None, "a timed run has service figures"
        plain = point.no_cache.get("1 worker")
        table.add_row(
            f"{point.capacity:,}",
            *(duration(service.ttft_ms.get(p)) for p in ("p50", "p90", "p99", "mean")),
            duration(service.tpot_ms.get("p50")),
            duration(service.tpot_ms.get("p99")),
            *(duration(None if plain is None else plain.ttft_ms.get(p)) for p in ("p50", "p99")),
            percent(service.busy),
            _load(run),
            duration(service.makespan_s * 1000.0),
            rate(service.output_tokens_per_s),
            f"{run.replay.preempted:,}",
            *_slo_cells(results, run),
            *([_throughput(plain) if plain is not None else "—"] if plain_slo else []),
        )
    return table


def cluster_table(results: Results) -> Table:
    """Each configuration at the timeline capacity: hit ratio, balance, and in the
    timed mode its service figures, with the no-cache baselines. O(configs)."""
    point = results.point(results.timeline_capacity)
    timed = results.mode == "timed"
    table = Table(
        caption=f"at {point.capacity:,} blocks in all (split evenly over the workers); "
        "imbalance: busiest worker's prompt tokens / mean"
        + (
            "; load as in the service table; tok/s: input and output tokens over the makespan"
            if timed
            else ""
        )
    )
    columns = ["configuration", "hit", "requests per worker", "imbalance", "trees"]
    if timed:
        columns += ["TTFT p50", "p90", "p99", "mean", "waited", "preempted", "load",
                    "tok/s in / out", *_slo_columns(results)]  # fmt: skip
    for name in columns:
        table.add_column(name, justify="right" if name != "configuration" else "left")
    rows = [(label, point.runs[label]) for label in results.labels]
    rows += [(f"no cache, {label}", run) for label, run in point.no_cache.items()]
    for label, run in rows:
        balance = run.balance
        spread = "—"
        if balance is not None:
            spread = f"{min(balance.requests):,} to {max(balance.requests):,}"
        row = [
            "lru (1 worker)" if label == "lru" else label,
            percent(run.stats.token_hit_ratio),
            spread,
            "—" if balance is None else f"{balance.imbalance:.2f}",
            run.trees,
        ]
        if timed:
            service = run.service
            assert service is not None, "a timed run has service figures"
            row += [
                *(duration(run.ttft_ms.get(p)) for p in ("p50", "p90", "p99", "mean")),
                f"{run.replay.waited:,}",
                f"{run.replay.preempted:,}",
                _load(run),
                f"{rate(service.input_tokens_per_s)} / {rate(service.output_tokens_per_s)}",
                *_slo_cells(results, run),
            ]
        table.add_row(*row)
    return table


def stage_table(results: Results) -> Table | None:
    """Per load stage, at the timeline capacity: its offered rate, and each
    configuration's (without tiers) TTFT p90 and output tokens a second; the tiered
    ones and the baselines are in results.json (None: the trace has no stages).
    O(stages * configurations)."""
    point = results.point(results.timeline_capacity)
    runs = [(c.label, point.runs[c.label]) for c in results.configs if c.tiers is None]
    runs = [(label, run) for label, run in runs if run.service is not None and run.service.stages]
    if not runs:
        return None
    table = Table(
        caption=f"at {point.capacity:,} blocks in all; req/s: the stage's requests over its "
        "arrivals' span; TTFT p90 and output tokens a second of each configuration"
    )
    for name in ("stage", "requests", "req/s"):
        table.add_column(name, justify="right")
    for label, _ in runs:
        table.add_column(f"{label} TTFT p90", justify="right")
        table.add_column("out tok/s", justify="right")
    first = runs[0][1].service
    assert first is not None
    for number, stage in enumerate(first.stages):
        row = [str(stage.stage), f"{stage.requests:,}", rate(stage.offered_rps)]
        for _, run in runs:
            assert run.service is not None
            found = run.service.stages[number]
            row += [duration(found.ttft_ms.get("p90")), rate(found.output_tokens_per_s)]
        table.add_row(*row)
    return table


def timed_runs(results: Results) -> Iterator[tuple[str, int, Run]]:
    """Every timed run shown: each configuration and each no-cache baseline at each
    capacity of the table, as ``(label, capacity, run)``. O(points * configs)."""
    for point in results.shown():
        for label, run in point.runs.items():
            if run.service is not None:
                yield label, point.capacity, run
        for label, run in point.no_cache.items():
            if run.service is not None:
                yield f"no cache, {label}", point.capacity, run


def overload_lines(results: Results) -> list[str]:
    """OVERLOAD, when any run was offered more than its workers serve in the arrivals'
    span or kept them saturated (:mod:`.figures`). O(points * configs)."""
    found = []
    total = 0
    for label, capacity, run in timed_runs(results):
        total += 1
        service = run.service
        assert service is not None
        if service.overloaded or service.saturated:
            found.append((label, capacity, service))
    if not found:
        return []
    label, capacity, worst = max(found, key=lambda item: (item[2].load or 0.0, item[2].busy))
    loaded = sum(1 for _, _, service in found if service.overloaded)
    return [
        f"OVERLOAD in {len(found)} of {total} runs ({loaded} offered more than their workers "
        f"serve, {len(found) - loaded} saturated): worst {label} at {capacity:,} blocks, "
        f"{_overload_why(worst)}: requests pile up -- decoding slower (TPOT) while the pool "
        "holds them, then waiting (TTFT) -- and the figures grow with the trace, not with "
        "the model"
    ]


def _overload_why(service: Service) -> str:
    """What made the worst run overloaded, in words. O(stages)."""
    if not service.overloaded:
        return f"its GPUs busy {percent(service.busy)} of the run with TTFT growing"
    why = f"offered {ratio(service.load)} what its workers serve"
    loaded = [stage for stage in service.stages if stage.load is not None]
    if loaded:
        stage = max(loaded, key=lambda item: item.load or 0.0)
        return f"{why} in load stage {stage.stage} ({rate(stage.offered_rps)} requests/s)"
    return (
        f"{why} in the arrivals' span ({duration(service.offered_s * 1000)} of prefill and "
        f"decode in {duration(service.trace_span_s * 1000)})"
    )


def warm_floor_ms(results: Results) -> float | None:
    """A fully cached request's TTFT on an idle worker: the request overhead plus one
    step computing its last token after the mean prompt (None: not timed). O(n)."""
    cost, service, trace = results.cost, results.service, results.trace
    if cost is None or service is None:
        return None
    prompt = max(1, round(sum(r.prompt_tokens for r in trace.requests) / len(trace.requests)))
    step = cost.step_ms(cost.chunk_flops(prompt - 1, 1, True), 1, 0, 0, prompt)
    return service.request_overhead_ms + step


def service_lines(results: Results) -> list[str]:
    """The timed mode's notes: the service model, the warm floor, the SLO, the warm-up,
    the stages, overload. O(points * configs)."""
    cost, service = results.cost, results.service
    if results.mode != "timed" or cost is None or service is None:
        return []
    rates = (
        f"prefill {cost.prefill_tokens_per_s:,.0f} tokens/s"
        if cost.prefill_tokens_per_s is not None
        else f"mfu {cost.mfu:g} of {cost.peak_flops / 1e12:,.0f} TFLOP/s"
    )
    decode = (
        f"decode {cost.decode_ms:g} ms a step"
        if cost.decode_ms is not None
        else f"mbu {cost.mbu:g} of {cost.hbm_bytes_per_s / 1e12:,.2f} TB/s"
    )
    priced = f"{cost.label}, " if cost.label else ""
    floor = warm_floor_ms(results)
    lines = [
        f"service model ({priced}per worker): {rates}, {decode}, {cost.overhead_ms:g} ms a "
        f"step, {service.token_budget:,} tokens a step, {service.max_running} running at "
        f"most, running requests hold their prompts' and outputs' blocks, on a full pool: "
        f"{service.on_full} (a decode short of a block preempts the newest request); "
        f"{service.request_overhead_ms:g} ms a request outside the GPU; bounds in arrival order",
        f"warm floor: a fully cached request on an idle worker has TTFT {duration(floor)} "
        f"({service.request_overhead_ms:g} ms a request + one step)",
    ]
    if results.warmup:
        lines.append(f"latency figures leave out the first {results.warmup:,} requests (--warmup)")
    if results.stage_gap_ms is not None:
        lines.append(
            f"load stages run one after another, each {duration(results.stage_gap_ms)} after "
            "the previous one drained (--stage-gap)"
        )
    if results.slo is not None:
        slo = results.slo
        lines.append(
            f"SLO: TTFT ≤ {duration(slo.ttft_ms)} for {percent(slo.attainment)} of requests"
        )
    return lines + overload_lines(results)
