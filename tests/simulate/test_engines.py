"""The two modes, by hand and across implementations.

The timed mode's service model (spec/simulate/service.py) is checked on scenarios
small enough to work out on paper: waiting for and refusal by a full pool, the
concurrency cap, oversized prompts, outputs cached at completion, TTFT to the
millisecond. Both tree implementations must give identical results in both modes.
"""

from __future__ import annotations

from array import array
from typing import Any

import pytest

from kachedb_radix.spec.conform.targets import tree_class
from kachedb_radix.spec.simulate.errors import SimulateError
from kachedb_radix.spec.simulate.formats import read_trace
from kachedb_radix.spec.simulate.metrics import REFUSED, hit_stats, percentiles, timeline
from kachedb_radix.spec.simulate.run import Settings, simulate
from kachedb_radix.spec.simulate.sequential import replay_sequential
from kachedb_radix.spec.simulate.service import ServiceModel
from kachedb_radix.spec.simulate.timed import arrival_order, replay_timed
from kachedb_radix.spec.simulate.trace import Request, Trace
from kachedb_radix.spec.simulate.workload import WorkloadSpec, generate
from tests.conftest import IMPLEMENTATIONS
from tests.support.simulate import MOONCAKE_SAMPLE, block_trace, token_trace

#: 1,000 tokens/s: a prefill of n tokens takes n ms; 1 ms per output token.
SERVICE = ServiceModel(prefill_tokens_per_s=1000.0, decode_ms_per_token=1.0)


def _timed_trace(*requests: tuple[float, list[int], int]) -> Trace:
    """Block-hash requests (arrival ms, hash ids, output tokens), 10 tokens per block."""
    made = []
    for number, (stamp, ids, output) in enumerate(requests, 1):
        tokens = array("I", ids)
        made.append(Request(tokens, tokens, 10 * len(ids), output, stamp, None, number))
    return Trace(made, "mooncake", 1, 10, "hand")


def _replay(trace: Trace, capacity: int, impl: str, service: ServiceModel = SERVICE) -> Any:
    tree = tree_class(impl)(capacity, trace.block_size)
    done = replay_timed(trace, tree, service)
    tree.check_invariants()
    assert tree.stats().pinned == 0  # every lease released at the end
    return done


HEAD_OF_LINE = _timed_trace((0, [1, 2, 3], 100), (10, [4, 5], 0), (20, [1, 2], 0))


def test_a_full_pool_makes_requests_wait(impl_name: str) -> None:
    """r1 pins 3 of 4 blocks until 130 ms; r2 needs 2 and waits, r3 queues behind it.

    r2 starts at 130 (evicting r1's leaf block 3): TTFT 130 + 20 - 10 = 140 ms.
    r3 hits blocks 1-2, prefills nothing, but the prefill stream is busy until 150.
    """
    done = _replay(HEAD_OF_LINE, 4, impl_name)
    assert done.lengths == [0, 0, 2]
    assert done.waited == 2 and done.refused == 0
    assert done.ttft_ms == [30.0, 140.0, 130.0]
    assert done.evictions == 1 and done.peak_pinned == 4
    assert done.order == [0, 1, 2]


def test_a_full_pool_refuses_requests(impl_name: str) -> None:
    """With on_full=refuse r2 is turned away; r3 runs at once on r1's cached prefix."""
    refuse = ServiceModel(prefill_tokens_per_s=1000.0, decode_ms_per_token=1.0, on_full="refuse")
    done = _replay(HEAD_OF_LINE, 4, impl_name, refuse)
    assert done.lengths == [0, REFUSED, 2]
    assert (done.waited, done.refused) == (0, 1)
    assert done.ttft_ms == [30.0, 10.0]
    stats = hit_stats(HEAD_OF_LINE, done.lengths)
    assert (stats.requests, stats.prompt_tokens, stats.saved_tokens) == (2, 50, 20)


def test_a_prompt_larger_than_the_pool_is_refused(impl_name: str) -> None:
    trace = _timed_trace((0, [1, 2, 3], 0), (1, [4], 0))
    done = _replay(trace, 2, impl_name)
    assert done.lengths == [REFUSED, 0] and done.refused == 1 and done.waited == 0


def test_the_concurrency_cap_queues_without_counting_a_full_pool(impl_name: str) -> None:
    one = ServiceModel(prefill_tokens_per_s=1000.0, decode_ms_per_token=1.0, max_running=1)
    trace = _timed_trace((0, [1, 2, 3], 100), (10, [4], 0))
    done = _replay(trace, 100, impl_name, one)
    assert done.ttft_ms == [30.0, 130.0] and done.waited == 0


def test_outputs_are_cached_at_completion_when_they_fit(impl_name: str) -> None:
    """A token trace's reply is inserted when its request finishes; the next turn hits it.
    When the pool is pinned full at that moment the output stays uncached (counted)."""
    chat = token_trace(
        [[1, 2], [1, 2, 3, 4, 5, 6]], outputs=[[3, 4], []], timestamps=[0.0, 50.0], block_size=2
    )
    done = _replay(chat, 10, impl_name)
    assert done.lengths == [0, 4] and done.uncached_outputs == 0
    crowded = token_trace(
        [[1, 2], [7, 8]], outputs=[[3, 4], [9, 9]], timestamps=[0.0, 1.0], block_size=2
    )
    slow = ServiceModel(prefill_tokens_per_s=1000.0, decode_ms_per_token=100.0)
    done = _replay(crowded, 2, impl_name, slow)
    assert done.uncached_outputs == 1  # r1 ends at 202 ms while r2 (until 204) pins the rest
    assert done.evictions == 1  # r2's output then evicts r1's block


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
    tree = tree_class("reference")(4, 16)
    with pytest.raises(ValueError, match="block size"):
        replay_sequential(trace, tree)
    with pytest.raises(ValueError, match="block size"):
        replay_timed(trace, tree, SERVICE)


def test_a_sequence_longer_than_the_pool_caches_its_head(impl_name: str) -> None:
    trace = block_trace([[1, 2, 3, 4, 5], [1, 2, 3, 9]])
    seen: list[int] = []
    done = replay_sequential(trace, tree_class(impl_name)(3, 1), seen.append)
    assert done.lengths == [0, 3] and done.truncated == 2 and sum(seen) == 2


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("prefill_tokens_per_s", 0, "prefill throughput must be > 0"),
        ("decode_ms_per_token", -1, "decode time must be >= 0"),
        ("max_running", 0, "max running requests must be >= 1"),
        ("on_full", "drop", "on_full must be one of"),
    ],
)
def test_bad_service_models_are_refused(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServiceModel(**{field: value})  # type: ignore[arg-type]


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


def _comparable(results: Any) -> dict[str, Any]:
    document: dict[str, Any] = results.to_json()
    del document["seconds"], document["settings"]["implementation"]
    for point in document["points"]:
        del point["lru"]["seconds"], point["belady_seconds"]
    return document


#: Both trees; with KACHEDB_RADIX_PURE=1 only the reference is under test.
TWINS = sorted(IMPLEMENTATIONS)
both_twins = pytest.mark.skipif(len(TWINS) < 2, reason="KACHEDB_RADIX_PURE=1: accel not under test")


@both_twins
@pytest.mark.parametrize("mode", ["sequential", "timed"])
def test_reference_and_accel_give_identical_results(mode: str) -> None:
    """Every figure of a sweep -- hits, evictions, pins, waits, TTFT, timelines --
    is the same whichever implementation runs the tree (the twins' contract)."""
    trace = generate(WorkloadSpec(requests=150, seed=4))
    tight = ServiceModel(max_running=8)
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
                        mode=mode, implementation=name, executor="serial", capacities=(200, 2000)
                    ),
                )
            )
            for name in TWINS
        ]
        assert documents[0] == documents[1]
        lru = [point["lru"]["token_hit_ratio"] for point in documents[0]["points"]]
        assert 0 < lru[0] <= lru[1] <= documents[0]["infinite"]["token_hit_ratio"]
