"""The planner's service figures and its routing at routing time, on hand-sized traces.

Issue 39: latency after a warm-up and per load stage, stages run one after another as a
benchmark ladder does, throughput of a burst (makespan, tokens a second), overload
checked on every run whatever its workers, SGLang's approximate index learning at
routing time beside the event-fed one, and its cache-aware rule.
"""

from __future__ import annotations

import dataclasses
from array import array
from typing import Any

import pytest

from kachedb_radix.reference import RadixTree
from kachedb_radix.reference.events import BlockHasher
from kachedb_radix.spec.cli.main import main
from kachedb_radix.spec.simulate.cluster import (
    BALANCE_ABS,
    HASH_SCHEME,
    ClusterSpec,
    Router,
    prompt_hashes,
)
from kachedb_radix.spec.simulate.errors import SimulateError
from kachedb_radix.spec.simulate.plan.figures import Offered, latency, service_figures
from kachedb_radix.spec.simulate.plan.hardware import GPUS, Deployment
from kachedb_radix.spec.simulate.plan.models import MODELS
from kachedb_radix.spec.simulate.plan.report import warm_floor_ms
from kachedb_radix.spec.simulate.published import LLM_D, SGLANG_ROUTER, generate_shared_prefix
from kachedb_radix.spec.simulate.run import Settings, simulate
from kachedb_radix.spec.simulate.timed import replay_timed
from kachedb_radix.spec.simulate.trace import Request, Trace
from tests.simulate.test_engines import FLAT, SERVICE


def _staged(*requests: tuple[float, list[int], int, int | None]) -> Trace:
    """Block-hash requests (arrival ms, ids, outputs, stage), 10 tokens a block."""
    made = []
    for number, (stamp, ids, output, stage) in enumerate(requests, 1):
        tokens = array("I", ids)
        made.append(Request(tokens, tokens, 10 * len(ids), output, stamp, None, number,
                            stage=stage))  # fmt: skip
    return Trace(made, "mooncake", 1, 10, "hand")


def test_a_stage_starts_once_the_one_before_drained() -> None:
    """r0 (stage 0) prefills 20 tokens and decodes 4 more steps: done at 24. r1 (stage 1,
    due at 1 ms) then arrives 10 ms later, at 34, and prefills its 10 tokens: TTFT 10.
    Without the gap it arrives at 1 and queues behind r0's prefill: TTFT 29."""
    trace = _staged((0.0, [1, 2], 5, 0), (1.0, [3], 1, 1))
    gapped = replay_timed(trace, [RadixTree(50, 1)], SERVICE, FLAT, stage_gap_ms=10.0)
    assert gapped.arrival == [0.0, 34.0] and gapped.ttft == [20.0, 10.0]
    plain = replay_timed(trace, [RadixTree(50, 1)], SERVICE, FLAT)
    assert plain.arrival == [0.0, 1.0] and plain.ttft == [20.0, 29.0]


def test_figures_after_a_warmup_per_stage_and_for_a_burst() -> None:
    """The figures of one replay: the warm-up left out of the latencies (not of the
    throughput), a stage each, the makespan and tokens a second; a burst has no load."""
    trace = _staged((0.0, [1, 2], 5, 0), (1.0, [3], 1, 0), (50.0, [1, 2], 3, 1),
                    (60.0, [4], 1, 1))  # fmt: skip
    done = replay_timed(trace, [RadixTree(50, 1)], SERVICE, FLAT)
    offered = Offered(trace, FLAT, SERVICE, pool_blocks=50)
    found = service_figures(trace, done, offered, workers=1, warmup=1, slo_ms=15.0)
    kept = [done.ttft[i] for i in done.order[1:]]
    assert found.ttft_ms == latency(kept) and found.warmup == 1
    assert found.ttft_ms["mean"] == pytest.approx(sum(kept) / 3, abs=1e-3)
    assert found.attainment == sum(1 for t in kept if t <= 15.0) / 3
    assert found.makespan_s == pytest.approx(done.span_ms / 1000)
    assert found.output_tokens_per_s == pytest.approx(10 / found.makespan_s)
    assert found.input_tokens_per_s == pytest.approx(60 / found.makespan_s)
    assert [stage.stage for stage in found.stages] == [0, 1]
    assert [stage.requests for stage in found.stages] == [2, 2]
    assert found.stages[0].offered_rps == pytest.approx(1000.0)  # 2 requests 1 ms apart
    assert found.stages[0].ttft_ms == latency([done.ttft[1]])  # its warm-up left out
    assert found.load is not None and found.load == max(s.load for s in found.stages if s.load)
    burst = _staged((0.0, [1, 2], 2, None), (0.0, [3, 4], 2, None))
    done = replay_timed(burst, [RadixTree(50, 1)], SERVICE, FLAT)
    found = service_figures(burst, done, Offered(burst, FLAT, SERVICE, 50), workers=1)
    assert found.load is None and found.trace_span_s == 0 and not found.overloaded
    assert found.makespan_s == pytest.approx(0.041) and found.stages == []
    assert found.requests_per_s == pytest.approx(2 / 0.041)
    document = found.to_json()
    assert document["load"] is None and document["overloaded"] is False
    assert document["output_tokens_per_s"] == pytest.approx(4 / 0.041, rel=1e-5)


def test_overload_is_checked_on_every_run() -> None:
    """Every configuration at every capacity and every baseline is checked: here only the
    2-worker round-robin cluster and the 1-worker runs are overloaded (the offered
    prefill is over one worker's span), and the note names the worst."""
    trace = _staged(*[(float(i), [100 * i + k for k in range(8)], 1, None) for i in range(40)])
    cost = dataclasses.replace(FLAT, prefill_tokens_per_s=2000.0)  # 40 ms a request
    results = simulate(trace, Settings(mode="timed", cost=cost, service=SERVICE,
                                       capacities=(100,), bounds=False, executor="serial",
                                       clusters=(ClusterSpec(workers=2),)))  # fmt: skip
    from kachedb_radix.spec.simulate.plan.report import overload_lines, timed_runs

    runs = list(timed_runs(results))
    assert {label for label, _, _ in runs} == {"lru", "2xround-robin", "no cache, 1 worker",
                                               "no cache, 2xround-robin"}  # fmt: skip
    assert all(run.service is not None and run.service.overloaded for _, _, run in runs)
    (line,) = overload_lines(results)
    assert line.startswith("OVERLOAD in 4 of 4 runs (4 offered more than their workers serve")
    assert "worst lru at 100 blocks, offered 41.03x" in line and "decode in 39 ms)" in line
    staged = _staged(*[(float(i), [100 * i + k for k in range(8)], 1, i // 20) for i in range(40)])
    (line,) = overload_lines(simulate(staged, Settings(mode="timed", cost=cost, service=SERVICE,
                                                       capacities=(100,), bounds=False,
                                                       executor="serial")))  # fmt: skip
    assert "what its workers serve in load stage " in line and "(1k requests/s)" in line


def test_a_saturated_run_is_said_too() -> None:
    """The issue's 12k-request conversation trace: GPUs 100% busy and TTFT growing with
    the trace while the offered load looks servable: saturated, an OVERLOAD of its own.
    Busy alone is not (an engine decoding a few requests is busy every step)."""
    from kachedb_radix.spec.simulate.plan.figures import _growth
    from kachedb_radix.spec.simulate.plan.report import overload_lines

    assert _growth([1.0, 1.0, 5.0, 5.0, 9.0, 9.0, 9.0, 9.0]) == 9.0
    assert _growth([1.0] * 7) is None and _growth([0.0] * 8) is None
    trace = _staged(*[(30.0 * i, [100 * i + k for k in range(2)], 1, None) for i in range(40)])
    settings = Settings(mode="timed", cost=FLAT, service=SERVICE, capacities=(50,),
                        bounds=False, executor="serial", no_cache=False)  # fmt: skip
    results = simulate(trace, settings)
    point = results.points[0]
    run = point.runs["lru"]
    assert run.service is not None and not run.service.overloaded and not run.service.saturated
    busy = dataclasses.replace(run.service, busy=1.0, ttft_growth=1.5)
    assert not busy.saturated  # busy, TTFT steady
    growing = dataclasses.replace(busy, ttft_growth=3.0)
    assert growing.saturated and growing.to_json()["saturated"] is True
    point.runs["lru"] = dataclasses.replace(run, service=growing)
    (line,) = overload_lines(results)
    assert "0 offered more than their workers serve, 1 saturated" in line
    assert "its GPUs busy 100.0% of the run with TTFT growing" in line


def test_an_overloaded_ladder_through_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    """More than the GPUs serve: OVERLOAD, the load column marked, the warm floor said."""
    assert main(["simulate", "--workload", "seed-table", "--requests", "300", "--mode", "timed",
                 "--model", "llama-3-70b", "--gpu", "a100", "--gpus", "4", "--capacity",
                 "40000", "--no-bounds", "--executor", "serial", "--quiet"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "OVERLOAD in " in out and " !" in out
    assert "warm floor: a fully cached request on an idle worker has TTFT" in out


def test_the_warm_floor_is_the_overhead_and_one_step() -> None:
    trace = _staged((0.0, [1, 2], 1, None))
    cost = dataclasses.replace(FLAT, overhead_ms=2.0)
    service = dataclasses.replace(SERVICE, request_overhead_ms=30.0)
    settings = Settings(mode="timed", cost=cost, service=service, capacities=(10,),
                        bounds=False, executor="serial")  # fmt: skip
    results = simulate(trace, settings)
    assert warm_floor_ms(results) == pytest.approx(30.0 + 2.0 + 1.0)  # a 1-token prefill
    done = results.points[0].runs["lru"].replay
    assert done.ttft == [30.0 + 2.0 + 20.0]


# ---------------------------------------------------------------------- routing


def _router(trace: Trace, spec: ClusterSpec, pool: int = 64) -> tuple[list[Any], Router]:
    events = BlockHasher(HASH_SCHEME) if spec.uses_events else None
    trees = [RadixTree(pool, trace.block_size, events=events) for _ in range(spec.workers)]
    hashes = prompt_hashes(trace, BlockHasher(HASH_SCHEME))
    return trees, Router(spec, trace, trees, hashes)


def test_the_approximate_index_learns_at_routing_time() -> None:
    """A burst: every request routed before any step, so no event has reached the
    shared index and prefix routing deals them out like round-robin; the approximate
    index learned each prompt when it routed it, and keeps each group on one worker."""
    groups = [[1, 2, 3], [7, 8, 9]]
    paths = [[*groups[i % 2], 100 + i] for i in range(8)]
    trace = _staged(*[(0.0, path, 1, None) for path in paths])
    found = {}
    for index in ("shared", "approximate"):
        spec = ClusterSpec(workers=2, routing="prefix", index=index)
        trees, router = _router(trace, spec)
        done = replay_timed(trace, trees, SERVICE, FLAT, router=router)
        found[index] = done.worker_of
    assert found["shared"] == [0, 1, 0, 1, 0, 1, 0, 1]  # no event yet: ties, least loaded
    assert found["approximate"] is not None
    assert len({found["approximate"][i] for i in range(0, 8, 2)}) == 1  # group 0 together
    assert len({found["approximate"][i] for i in range(1, 8, 2)}) == 1  # group 1 together
    assert ClusterSpec(workers=2, routing="prefix", index="approximate").label == "2xprefix@approx"


def test_the_cache_aware_rule() -> None:
    """SGLang's rule: the deepest match when it covers more than half the prompt, else
    the worker holding the fewest blocks; the least loaded when the loads are
    imbalanced (more than 32 requests apart)."""
    trace = _staged((0.0, [1, 2, 3, 4], 1, None), (0.0, [1, 2, 3, 9], 1, None),
                    (0.0, [1, 5, 6, 7], 1, None), (0.0, [8, 8, 8, 8], 1, None))  # fmt: skip
    spec = ClusterSpec(workers=3, routing="cache-aware", index="approximate")
    _, router = _router(trace, spec)
    assert router.route(0, 0.0, [0, 0, 0], [0, 0, 0]) == 0  # nothing held: the fewest, 0
    assert router.route(1, 0.0, [1, 0, 0], [0, 0, 0]) == 0  # 3 of 4 blocks at worker 0
    assert router.route(2, 0.0, [2, 0, 0], [0, 0, 0]) == 1  # 1 of 4: the emptiest tree
    imbalanced = [BALANCE_ABS + 5, 4, 2]
    assert router.route(3, 0.0, imbalanced, [0, 0, 0]) == 2  # the least loaded
    shared = ClusterSpec(workers=3, routing="cache-aware")
    _, router = _router(trace, shared)
    assert router.route(0, 0.0, [0, 0, 0], [0, 0, 0]) == 0  # an empty index holds nothing


def test_sglang_s_burst_routed_at_routing_time(capsys: pytest.CaptureFixture[str]) -> None:
    """The SGLang v0.4 benchmark's shape (a burst of shared-prefix groups), cut to 4
    groups: round-robin and the event-fed index scatter the groups; the approximate
    index and the cache-aware rule keep them together."""
    small = dataclasses.replace(SGLANG_ROUTER, groups=4)
    trace = generate_shared_prefix(small)
    deployment = Deployment(MODELS["llama-3.1-8b"], GPUS["a100"])
    from kachedb_radix.spec.simulate.plan.cost import CostModel

    clusters = tuple(ClusterSpec(workers=4, routing=routing, index=index) for routing, index in
                     (("round-robin", "shared"), ("prefix", "shared"),
                      ("prefix", "approximate"), ("cache-aware", "approximate")))  # fmt: skip
    results = simulate(trace, Settings(mode="timed", cost=CostModel.of(deployment),
                                       capacities=(20_000,), bounds=False, executor="serial",
                                       clusters=clusters))  # fmt: skip
    hits = {label: run.stats.token_hit_ratio for label, run in results.points[0].runs.items()}
    assert hits["4xprefix"] == hits["4xround-robin"] < hits["4xprefix@approx"]
    assert hits["4xcache-aware@approx"] == pytest.approx(hits["lru"], abs=0.02)


def test_what_a_cost_model_refuses_and_a_flat_prefill() -> None:
    with pytest.raises(SimulateError, match="--host-latency-ms must be >= 0"):
        dataclasses.replace(FLAT, host_latency_ms=-1.0)
    with pytest.raises(SimulateError, match="no restore from tier 'tape'"):
        FLAT.restore_ms(10, "tape")
    solo = FLAT.solo_prefill(3000, 0, 1024)  # 1 ms a token at 1,000 tokens/s
    assert solo["steps"] == 3.0 and solo["ms"] == pytest.approx(3000.0)
    assert warm_floor_ms(simulate(_staged((0.0, [1], 1, None)), Settings(
        capacities=(4,), bounds=False, executor="serial"))) is None  # fmt: skip


def test_a_burst_through_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    """A burst has no arrival span: the load column says so, the makespan and the
    tokens a second are its figures."""
    assert main(["simulate", "--workload", "sglang-router", "--gpu", "a100", "--model",
                 "llama-3.1-8b", "--workers", "2", "--routing", "cache-aware", "--index",
                 "approximate", "--capacity", "60000", "--no-bounds", "--mode", "timed",
                 "--executor", "serial", "--quiet"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "sglang-router workload (seed 0): 1,024 requests" in out
    assert "2xcache-aware@approx" in out and " — " in out and "out tok/s" in out


def test_the_weighted_rule() -> None:
    """llm-d's precise scheduler: 2 x the prompt's share found + the pool's free share +
    the queue's score. A full hit on a worker with a free pool wins; a worker whose
    pool is nearly all needed and whose queue is the longest loses to an empty one."""
    trace = _staged((0.0, [1, 2, 3, 4], 1, None), (0.0, [1, 2, 3, 4], 1, None),
                    (0.0, [1, 2, 7, 8], 1, None))  # fmt: skip
    spec = ClusterSpec(workers=3, routing="weighted", index="approximate")
    _, router = _router(trace, spec, pool=10)
    assert router.route(0, 0.0, [0, 0, 0], [0, 0, 0], [0, 0, 0]) == 0  # a tie: the lowest
    assert router.route(1, 0.0, [1, 0, 0], [4, 0, 0], [1, 0, 0]) == 0  # 2 + 0.6 + 0 > 2
    assert router.route(2, 0.0, [9, 0, 0], [10, 0, 0], [8, 0, 0]) == 1  # 1 + 0 + 0 < 2
    assert ClusterSpec(workers=2, routing="weighted").uses_index


def test_one_capacity_plots_without_a_warning() -> None:
    """A single capacity (the GPUs' HBM) with GiB on the top axis: the axis gets a span
    around it (it used to be singular: a divide-by-zero warning, an error under pytest)."""
    pytest.importorskip("matplotlib")
    from kachedb_radix.spec.simulate.plan.hardware import Sizing
    from kachedb_radix.spec.simulate.plots import figures

    model = MODELS["qwen3-32b"]
    deployment = Deployment(model, GPUS["h100"], gpus=2)
    trace = generate_shared_prefix(dataclasses.replace(LLM_D, groups=4, stages=((15, 4),)))
    blocks = Sizing(64, model, deployment).worker_blocks(8)
    assert blocks == 40_435  # the llm-d command's 16gpu
    results = simulate(trace, Settings(capacities=(blocks,), bounds=False, executor="serial",
                                       model=model, deployment=deployment,
                                       clusters=(ClusterSpec(workers=8),)))  # fmt: skip
    assert set(figures(results)) == {"hit_ratio_vs_capacity.png", "hit_ratio_over_time.png"}
