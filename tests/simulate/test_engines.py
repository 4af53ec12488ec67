"""The two modes, by hand and across implementations.

The timed mode's engine (spec/simulate/plan/engine.py) is checked on scenarios small
enough to work out on paper, under a flat cost model: waiting for and refusal by a
full pool, the concurrency cap, oversized prompts, chunked prefill beside decodes, a
restore from a slower tier, outputs cached at completion, TTFT to the millisecond.
Both tree implementations must give identical results in both modes.
"""

from __future__ import annotations

import dataclasses
import math
import random
from array import array
from typing import Any

import pytest

from kachedb_radix.spec.simulate.errors import SimulateError
from kachedb_radix.spec.simulate.formats import read_trace
from kachedb_radix.spec.simulate.metrics import REFUSED, hit_stats, percentiles, timeline
from kachedb_radix.spec.simulate.plan.cost import CostModel
from kachedb_radix.spec.simulate.plan.hardware import GPUS, Deployment, Sizing
from kachedb_radix.spec.simulate.plan.models import MODELS
from kachedb_radix.spec.simulate.plan.service import ServiceModel
from kachedb_radix.spec.simulate.run import Settings, simulate
from kachedb_radix.spec.simulate.sequential import replay_sequential
from kachedb_radix.spec.simulate.timed import arrival_order, replay_timed
from kachedb_radix.spec.simulate.trace import Request, Trace
from kachedb_radix.spec.simulate.workload import WorkloadSpec, generate
from kachedb_radix.spec.twins import twin_class
from tests.conftest import IMPLEMENTATIONS
from tests.support.simulate import MOONCAKE_SAMPLE, block_trace, token_trace

#: The flat cost model: a prefill of n tokens takes n ms, a step with decodes at least
#: 1 ms; no weights, no KV traffic, no overhead: every time below is worked out by hand.
FLAT = CostModel(
    layer_params=0.0,
    layers=0,
    attention_width=0,
    logits_flops=0.0,
    weight_bytes=0.0,
    kv_bytes_per_token=0,
    peak_flops=1.0,
    hbm_bytes_per_s=1.0,
    host_bytes_per_s=1.0,
    overhead_ms=0.0,
    prefill_tokens_per_s=1000.0,
    decode_ms=1.0,
)
#: The scheduler's defaults, without the per-request overhead (the times are the engine's).
SERVICE = ServiceModel(request_overhead_ms=0.0)


def _timed_trace(*requests: tuple[float, list[int], int]) -> Trace:
    """Block-hash requests (arrival ms, hash ids, output tokens), 10 tokens per block."""
    made = []
    for number, (stamp, ids, output) in enumerate(requests, 1):
        tokens = array("I", ids)
        made.append(Request(tokens, tokens, 10 * len(ids), output, stamp, None, number))
    return Trace(made, "mooncake", 1, 10, "hand")


def _replay(
    trace: Trace,
    capacity: int,
    impl: str,
    service: ServiceModel = SERVICE,
    cost: CostModel = FLAT,
    **options: Any,
) -> Any:
    tree = twin_class(impl)(capacity, trace.block_size)
    done = replay_timed(trace, [tree], service, cost, **options)
    tree.check_invariants()
    assert tree.stats().pinned == 0  # every lease released at the end
    return done


#: r1 holds 3 blocks for its prompt and grows a 4th for its outputs: the pool is full.
HEAD_OF_LINE = _timed_trace((0, [1, 2, 3], 9), (10, [4, 5], 1), (20, [1, 2], 1))


def test_a_full_pool_makes_requests_wait(impl_name: str) -> None:
    """r1 prefills 30 tokens in step 0 (TTFT 30), then its first decode needs a 4th block
    (token 31): the pool is full while it decodes 8 more tokens, a 1 ms step each, until
    38. r2 needs 2 blocks and waits; r3 queues behind it. At 38 one step admits both: r2
    evicts r1's output block and its leaf block 3 and prefills 20 tokens, r3 hits blocks
    1-2 and computes its last token only: 21 ms, to 59.
    """
    done = _replay(HEAD_OF_LINE, 4, impl_name)
    assert done.lengths == [0, 0, 2]
    assert done.waited == 2 and done.refused == 0 and done.preemptions == 0
    assert done.ttft == [30.0, 49.0, 39.0]
    assert done.evictions == 2 and done.peak_pinned == 4
    assert done.order == [0, 1, 2] and done.span_ms == 59.0
    assert done.tpot[0] == 1.0 and math.isnan(done.tpot[1])
    assert done.busy_ms == [59.0] and done.finish == [38.0, 59.0, 59.0]


def test_the_no_cache_baseline_has_the_same_pool() -> None:
    """Without a cache the same 4 blocks make r2 and r3 wait the same way, and r3
    computes its 20 tokens: 40 ms from 38."""
    done = replay_timed(HEAD_OF_LINE, [4], SERVICE, FLAT, reuse=False)
    assert done.ttft == [30.0, 68.0, 58.0] and done.waited == 2
    assert done.lengths == [0, 0, 0] and done.peak_pinned == 4 and done.evictions == 0


def test_a_full_pool_refuses_requests(impl_name: str) -> None:
    """With on_full=refuse r2 is turned away at 30; r3 needs no new block (its prompt is
    r1's, pinned) and joins r1's decode step there: 1 ms."""
    refuse = dataclasses.replace(SERVICE, on_full="refuse")
    done = _replay(HEAD_OF_LINE, 4, impl_name, refuse)
    assert done.lengths == [0, REFUSED, 2]
    assert (done.waited, done.refused) == (0, 1)
    assert done.ttft_ms == [30.0, 11.0]
    stats = hit_stats(HEAD_OF_LINE, done.lengths)
    assert (stats.requests, stats.prompt_tokens, stats.saved_tokens) == (2, 70, 20)


def test_a_request_larger_than_the_pool_is_refused(impl_name: str) -> None:
    """r1's prompt and outputs need 3 blocks; the pool has 2: it could never finish."""
    trace = _timed_trace((0, [1, 2], 5), (1, [4], 0))
    done = _replay(trace, 2, impl_name)
    assert done.lengths == [REFUSED, 0] and done.refused == 1 and done.waited == 0


def test_a_decode_short_of_a_block_preempts_the_newest(impl_name: str) -> None:
    """Two requests of 2 prompt blocks and 30 outputs each (5 blocks) in 6. Both prefill
    (40 ms), both grow a 3rd block at step 1; at step 11 r1 needs a 4th and preempts r2
    (the newest), which keeps its first token (TTFT 40) and 11 outputs. It cannot get
    back in until r1 finishes at 69 (step 29); then it recomputes 21 of its 31 tokens
    (block 3 of its prompt is still cached; its other block was evicted for r1's 5th)
    and decodes its 18 last tokens: 90 to 108."""
    trace = _timed_trace((0, [1, 2], 30), (0, [3, 4], 30))
    done = _replay(trace, 6, impl_name)
    assert done.ttft == [40.0, 40.0] and done.finish == [69.0, 108.0]
    assert (done.preemptions, done.preempted, done.waited) == (1, 1, 1)
    assert done.tpot[1] == pytest.approx((108.0 - 40.0) / 29)
    plain = replay_timed(trace, [6], SERVICE, FLAT, reuse=False)
    assert plain.finish == [69.0, 118.0] and plain.preemptions == 1  # all 31 tokens again


def test_a_router_hears_a_preemption() -> None:
    """A preemption behind a router: r1 arrives after r0's prompt is in the index and
    follows it to worker 0 (a 1-block match), where the two outgrow 5 blocks and r1 is
    preempted; the index hears the release as it hears every tree operation."""
    from kachedb_radix.accel import RadixTree
    from kachedb_radix.reference.events import BlockHasher
    from kachedb_radix.spec.simulate.cluster import HASH_SCHEME, ClusterSpec, Router, prompt_hashes

    trace = _timed_trace((0, [1, 2], 30), (1, [1, 3], 30))
    trees = [RadixTree(5, trace.block_size, events=BlockHasher(HASH_SCHEME)) for _ in range(2)]
    router = Router(ClusterSpec(workers=2, routing="prefix"), trace, trees,
                    prompt_hashes(trace, BlockHasher(HASH_SCHEME)))  # fmt: skip
    done = replay_timed(trace, trees, SERVICE, FLAT, router=router)
    assert done.worker_of == [0, 0] and done.preemptions == done.preempted == 1
    assert router.events_applied > 0
    alone = Router(ClusterSpec(workers=1, routing="prefix"), trace, trees[:1], None)
    assert alone.route(0, 0.0, [0], [0]) == 0  # one worker keeps no index


def test_the_concurrency_cap_queues_without_counting_a_full_pool(impl_name: str) -> None:
    one = dataclasses.replace(SERVICE, max_running=1)
    trace = _timed_trace((0, [1, 2, 3], 100), (10, [4], 0))
    done = _replay(trace, 100, impl_name, one)
    assert done.ttft == [30.0, 129.0] and done.waited == 0


def test_the_request_overhead_is_added_to_every_ttft(impl_name: str) -> None:
    """30 ms a request outside the GPU: every TTFT is 30 ms longer, nothing else moves."""
    slow = dataclasses.replace(SERVICE, request_overhead_ms=30.0)
    done = _replay(HEAD_OF_LINE, 4, impl_name, slow)
    assert done.ttft == [60.0, 79.0, 69.0] and done.finish == [38.0, 59.0, 59.0]
    assert done.tpot[0] == 1.0


def test_chunked_prefill_shares_steps_with_decodes() -> None:
    """A 16-token budget: r1's 30 tokens take two steps (16 + 14); r2, arriving during
    the first, gets the 2 tokens left beside r1's chunk in the second, then prefills
    in steps beside r1's decodes."""
    trace = _timed_trace((0, [1, 2, 3], 3), (5, [4, 5], 1))
    small = dataclasses.replace(SERVICE, max_running=4, token_budget=16)
    done = _replay(trace, 100, "reference", small)
    # step 0 [0, 16): r1 16 tokens; step 1 [16, 32): r1 14 + r2 2 -> r1's first token at 32
    # step 2 [32, 47): r1 decodes, r2 15 tokens; step 3 [47, 50): r1 decodes (last), r2 3
    assert done.ttft == [32.0, 45.0]
    assert done.tpot[0] == (50.0 - 32.0) / 2


def test_a_restore_from_a_slower_tier_delays_the_prefill() -> None:
    """The tiers' hook: r2's hit of 2 blocks (20 tokens) comes over a 1,000 B/s link at 1
    byte a token: 20 ms before its 10 uncached tokens can start."""
    trace = _timed_trace((0, [1, 2], 0), (100, [1, 2, 3], 0))
    slow_link = dataclasses.replace(FLAT, kv_bytes_per_token=1, host_bytes_per_s=1000.0,
                                    hbm_bytes_per_s=1e15, host_latency_ms=0.0)  # fmt: skip
    asked: list[tuple[int, int, int]] = []

    def restore(worker: int, index: int, length: int) -> dict[str, int]:
        asked.append((worker, index, length))
        return {"host": length}

    done = _replay(trace, 10, "reference", cost=slow_link, restore=restore)
    assert asked == [(0, 1, 2)] and done.restored == 2
    assert done.ttft[1] == pytest.approx(30.0)


def test_outputs_hold_blocks_while_they_decode_and_stay_cached(impl_name: str) -> None:
    """A token trace's reply fills blocks as it decodes (r1 holds 2 blocks at the end)
    and stays cached after it: the next turn hits prompt and reply, 4 tokens."""
    chat = token_trace(
        [[1, 2], [1, 2, 3, 4, 5, 6]], outputs=[[3, 4], []], timestamps=[0.0, 50.0], block_size=2
    )
    done = _replay(chat, 10, impl_name)
    assert done.lengths == [0, 4] and done.peak_pinned == 3


def _distinct(outputs: int, seed: int, gap: float) -> Trace:
    """60 requests ``gap`` ms apart, every prompt its own: nothing for a cache to reuse."""
    rng = random.Random(seed)
    return _timed_trace(*[(gap * i, [100 * i + k for k in range(rng.randint(1, 6))],
                           rng.randint(1, outputs)) for i in range(60)])  # fmt: skip


def test_with_no_reuse_the_cache_and_no_cache_agree(impl_name: str) -> None:
    """Distinct prompts, a pool that makes requests wait: the cache and the no-cache
    baseline admit alike, to the bit. With preemptions the cache is ahead: a preempted
    request finds its own blocks still cached (the one reuse left; under this cost model
    a token of prefill costs as much as a decode step, so it counts)."""
    trace = _distinct(1, seed=7, gap=2.0)
    cached = _replay(trace, 8, impl_name)
    plain = replay_timed(trace, [8], SERVICE, FLAT, reuse=False)
    assert cached.waited > 0 and cached.preemptions == plain.preemptions == 0
    assert cached.ttft == plain.ttft and cached.finish == plain.finish
    assert (cached.waited, cached.refused) == (plain.waited, plain.refused)
    trace = _distinct(40, seed=7, gap=10.0)
    cached = _replay(trace, 16, impl_name)
    plain = replay_timed(trace, [16], SERVICE, FLAT, reuse=False)
    assert cached.preemptions > 0 and plain.preemptions > 0
    assert sum(cached.ttft) <= sum(plain.ttft) and cached.span_ms <= plain.span_ms


def test_a_burst_of_distinct_prompts_agrees_with_no_cache() -> None:
    """The case that showed the old model's flaw: 256 distinct 1,200-token prompts with
    1,000-token outputs at once, on one H100 with Llama-3-8B (room for about 180 of
    them): the pool bounds how many run, the rest wait, and the cache and the no-cache
    baseline agree within 10%."""
    prompts = [list(range(2000 * i, 2000 * i + 1200)) for i in range(256)]
    trace = token_trace(prompts, timestamps=[0.0] * 256, block_size=16)
    trace = dataclasses.replace(trace, requests=[dataclasses.replace(r, output_tokens=1000)
                                                 for r in trace.requests])  # fmt: skip
    pool = Sizing(16, MODELS["llama-3-8b"], Deployment(MODELS["llama-3-8b"], GPUS["h100"]))
    blocks = pool.worker_blocks()
    assert blocks is not None and blocks * 16 < 256 * 2200  # not all of them fit
    service = ServiceModel()
    cached = replay_timed(trace, [twin_class(TWINS[0])(blocks, 16)], service, COST)
    plain = replay_timed(trace, [blocks], service, COST, reuse=False)
    assert cached.waited > 0 and plain.waited > 0
    ours, theirs = percentiles(cached.ttft_ms)["p50"], percentiles(plain.ttft_ms)["p50"]
    assert abs(ours - theirs) <= 0.1 * theirs


def test_with_reuse_the_cache_never_loses_to_no_cache(impl_name: str) -> None:
    """Shared system prompts, the same pool for both: at every pool size the cache's TTFT
    and makespan are no worse than without it."""
    rng = random.Random(3)
    systems = [[1000 * s + k for k in range(4)] for s in range(3)]
    requests = [(5.0 * i, [*systems[rng.randrange(3)], 10_000 + i], rng.randint(1, 20))
                for i in range(80)]  # fmt: skip
    trace = _timed_trace(*requests)
    for capacity in (8, 12, 24, 200):
        cached = _replay(trace, capacity, impl_name)
        plain = replay_timed(trace, [capacity], SERVICE, FLAT, reuse=False)
        assert sum(cached.ttft) <= sum(plain.ttft) and cached.span_ms <= plain.span_ms


def test_the_timed_mode_needs_timestamps() -> None:
    trace = token_trace([[1, 2], [3, 4]], timestamps=[0.0, 1.0])
    broken = Trace(
        [trace.requests[0], Request(array("I"), array("I"), 0, 0, None, None, 7)],
        "tokens",
        2,
        1,
        "t.jsonl",
    )
    with pytest.raises(SimulateError, match=r"t.jsonl, line 7: field 'timestamp': missing"):
        arrival_order(broken)
    assert arrival_order(token_trace([[1], [2], [3]], timestamps=[5.0, 1.0, 5.0])) == [1, 0, 2]


def test_engines_check_the_block_size() -> None:
    trace = token_trace([[1, 2]])
    tree = twin_class("reference")(4, 16)
    with pytest.raises(ValueError, match="block size"):
        replay_sequential(trace, tree)
    with pytest.raises(ValueError, match="block size"):
        replay_timed(trace, [tree], SERVICE, FLAT)
    with pytest.raises(ValueError, match="several workers need a router"):
        replay_timed(trace, [twin_class("reference")(4, 2)] * 2, SERVICE, FLAT)


def test_a_sequence_longer_than_the_pool_caches_its_head(impl_name: str) -> None:
    trace = block_trace([[1, 2, 3, 4, 5], [1, 2, 3, 9]])
    seen: list[int] = []
    done = replay_sequential(trace, twin_class(impl_name)(3, 1), seen.append)
    assert done.lengths == [0, 3] and done.truncated == 2 and sum(seen) == 2


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_running", 0, "max running requests must be >= 1"),
        ("token_budget", 100, "the token budget \\(100\\) must be >= max running"),
        ("on_full", "drop", "on_full must be one of"),
    ],
)
def test_bad_service_models_are_refused(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServiceModel(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("prefill_tokens_per_s", 0.0, "prefill throughput must be > 0"),
        ("decode_ms", -1.0, "decode time must be >= 0"),
        ("mfu", 0.0, "--mfu must be in"),
        ("mbu", 1.5, "--mbu must be in"),
        ("overhead_ms", -1.0, "--step-overhead-ms must be >= 0"),
        ("peak_flops", 0.0, "peak flops must be > 0"),
    ],
)
def test_bad_cost_models_are_refused(field: str, value: float, message: str) -> None:
    with pytest.raises(SimulateError, match=message):
        dataclasses.replace(FLAT, **{field: value})  # type: ignore[arg-type]


def test_metrics_edge_cases() -> None:
    assert percentiles([]) == {}
    assert percentiles([1.0, 2.0, 3.0]) == {"p50": 2.0, "p90": 2.8, "p99": 2.98}
    short = hit_stats(token_trace([[1]]), [0])  # one token: no whole block
    assert (short.prompt_tokens, short.prompt_blocks, short.block_hit_ratio) == (1, 0, 0.0)
    nothing = hit_stats(token_trace([[1]]), [REFUSED])
    assert (nothing.requests, nothing.token_hit_ratio) == (0, 0.0)
    trace = token_trace([[1, 2], [1, 2]], timestamps=[0.0, 1000.0])
    rows = timeline(trace, [0, 1], {"lru": [REFUSED, 2]}, windows=5)
    assert rows == [
        {"requests": 1, "time_s": 0.0, "lru": None},
        {"requests": 2, "time_s": 1.0, "lru": 1.0},
    ]


# ---------------------------------------------------------------------- twins agree


#: A real deployment's costs: Llama-3-8B on one H100.
COST = CostModel.of(Deployment(MODELS["llama-3-8b"], GPUS["h100"]))


def _comparable(results: Any) -> dict[str, Any]:
    document: dict[str, Any] = results.to_json()
    del document["seconds"], document["settings"]["implementation"]
    for point in document["points"]:
        del point["lru"]["seconds"], point["belady_seconds"], point["lru"]["trees"]
    for run in document["no_cache"].values():
        del run["seconds"]
    for point in document["points"]:
        for run in point["no_cache"].values():
            del run["seconds"]
    return document


#: Both trees; with KACHEDB_RADIX_PURE=1 only the reference is under test.
TWINS = sorted(IMPLEMENTATIONS)
both_twins = pytest.mark.skipif(len(TWINS) < 2, reason="KACHEDB_RADIX_PURE=1: accel not under test")


@pytest.mark.slow  # no branch only it covers: the CI coverage run leaves it out (.ci/run)
@both_twins
@pytest.mark.parametrize("mode", ["sequential", "timed"])
def test_reference_and_accel_give_identical_results(mode: str) -> None:
    """Every figure of a sweep -- hits, evictions, pins, waits, TTFT, timelines --
    is the same whichever implementation runs the tree (the twins' contract)."""
    trace = generate(WorkloadSpec(requests=150 if mode == "sequential" else 35, seed=4))
    tight = ServiceModel(max_running=8, token_budget=512)
    found = [
        _comparable(
            simulate(
                trace,
                Settings(
                    mode=mode,
                    implementation=name,
                    executor="serial",
                    capacities=(300, 1000, 5000),
                    service=tight,
                    cost=COST,
                ),
            )
        )
        for name in TWINS
    ]
    assert found[0] == found[1]
    assert found[0]["points"][0]["lru"]["evictions"] > 0


@both_twins
def test_the_mooncake_sample_runs_in_both_modes_on_both_trees() -> None:
    trace = read_trace(MOONCAKE_SAMPLE)
    for mode in ("sequential", "timed"):
        documents = [
            _comparable(
                simulate(
                    trace,
                    Settings(
                        mode=mode,
                        implementation=name,
                        executor="serial",
                        capacities=(200, 2000),
                        cost=COST,
                        knee_rounds=0,
                    ),
                )
            )
            for name in TWINS
        ]
        assert documents[0] == documents[1]
        lru = [point["lru"]["token_hit_ratio"] for point in documents[0]["points"]]
        assert 0 < lru[0] <= lru[1] <= documents[0]["infinite"]["token_hit_ratio"]


def test_a_restored_request_goes_first_once_ready() -> None:
    """Budget 4 tokens a step. r1 hits r0's 4 tokens but must restore them (4 ms); r2 is
    admitted beside it and takes the step's budget. Once ready, r1 (admitted first) takes
    the whole next budget, and r2 waits its turn."""
    trace = token_trace([[1, 2, 3, 4], list(range(1, 11)), list(range(20, 30))],
                        timestamps=[0.0, 100.0, 100.0], block_size=1)  # fmt: skip
    link = dataclasses.replace(FLAT, kv_bytes_per_token=1, host_bytes_per_s=1000.0,
                               hbm_bytes_per_s=1e15, host_latency_ms=0.0)  # fmt: skip
    tree = twin_class("reference")(64, 1)
    small = dataclasses.replace(SERVICE, max_running=4, token_budget=4)
    done = replay_timed(trace, [tree], small, link,
                        restore=lambda worker, index, length: {"host": length})  # fmt: skip
    # [100, 104): r2 4; [104, 108): r1 4; [108, 112): r1 2 + r2 2; [112, 116): r2 4
    assert done.ttft[1:] == [pytest.approx(12.0), pytest.approx(16.0)]
    assert done.restored == 4
    # A slower link (8 ms): r1 is still restoring at 104, so r2 goes on without it.
    slower = dataclasses.replace(link, host_bytes_per_s=500.0)
    done = replay_timed(trace, [twin_class("reference")(64, 1)],
                        dataclasses.replace(SERVICE, max_running=4, token_budget=4), slower,
                        restore=lambda worker, index, length: {"host": length})  # fmt: skip
    # [100, 104): r2 4; [104, 108): r2 4 (r1 not ready); [108, 112): r1 4 (r2 waits);
    # [112, 116): r1 2 + r2 2: both first tokens at 116
    assert done.ttft[1:] == [pytest.approx(16.0), pytest.approx(16.0)]
