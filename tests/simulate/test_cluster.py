"""Workers behind a router (issue 25): each worker its own tree, the router index fed by
the trees' own KV events (optionally delayed), or one index per gateway; every routing
rule on paper-sized traces; policies, workers and routings composed in one sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kachedb_radix.reference import RadixTree
from kachedb_radix.reference.events import BlockHasher
from kachedb_radix.reference.router import RouterIndex
from kachedb_radix.spec.cli.main import main
from kachedb_radix.spec.simulate.cluster import (
    HASH_SCHEME,
    ClusterSpec,
    Router,
    load_index_class,
    prompt_hashes,
    replay_cluster_sequential,
)
from kachedb_radix.spec.simulate.errors import SimulateError
from kachedb_radix.spec.simulate.plan.cost import CostModel
from kachedb_radix.spec.simulate.plan.hardware import GPUS, Deployment
from kachedb_radix.spec.simulate.plan.models import MODELS
from kachedb_radix.spec.simulate.plan.service import ServiceModel
from kachedb_radix.spec.simulate.point import Config, Job, make_trees
from kachedb_radix.spec.simulate.results import SCHEMA_PATH
from kachedb_radix.spec.simulate.run import Settings, simulate
from kachedb_radix.spec.simulate.timed import replay_timed
from kachedb_radix.spec.simulate.trace import Trace
from kachedb_radix.spec.simulate.workload import WorkloadSpec, generate
from tests.support.simulate import block_trace

A, A2, B = [1, 2, 3, 4], [1, 2, 3, 5], [9, 9, 9]


def _cluster(trace: Trace, spec: ClusterSpec, pool: int = 16) -> tuple[list[Any], Router]:
    events = BlockHasher(HASH_SCHEME) if spec.uses_events else None
    trees = [RadixTree(pool, trace.block_size, events=events) for _ in range(spec.workers)]
    hashes = prompt_hashes(trace, BlockHasher(HASH_SCHEME)) if spec.uses_index else None
    return trees, Router(spec, trace, trees, hashes)


def _sequential(paths: list[list[int]], **spec: Any) -> Any:
    trace = block_trace(paths)
    trees, router = _cluster(trace, ClusterSpec(**spec))
    done = replay_cluster_sequential(trace, trees, router)
    for tree in trees:
        tree.check_invariants()
    return done, router


def test_prefix_routing_follows_the_trees_events() -> None:
    """r0 (A) goes to worker 0 (all depths 0, all loads equal); r1 (B) to the less loaded
    worker 1; r2 (A with another last block) to worker 0, which the index says holds A's
    first three blocks -- and it hits them there."""
    done, router = _sequential([A, B, A2], workers=2, routing="prefix")
    assert done.worker_of == [0, 1, 0] and done.lengths == [0, 0, 3]
    index = router.indexes[0]
    index.check_invariants()
    assert index.query_hashes(router.hashes[0]) == {0: 4}  # fed by worker 0's own batches
    assert router.events_applied == 2


def test_round_robin_random_and_least_loaded_ignore_the_cache() -> None:
    done, router = _sequential([A, A, A, A], workers=2, routing="round-robin")
    assert done.worker_of == [0, 1, 0, 1] and done.lengths == [0, 0, 4, 4]
    assert router.indexes == []  # no index without a rule that reads one
    done, _ = _sequential([A] * 8, workers=3, routing="random", seed=1)
    again, _ = _sequential([A] * 8, workers=3, routing="random", seed=1)
    assert done.worker_of == again.worker_of and len(set(done.worker_of)) > 1  # seeded
    done, _ = _sequential([A, B, A2, B], workers=2, routing="least-loaded")
    assert done.worker_of == [0, 1, 0, 1]


def test_a_delayed_router_misses_what_it_has_not_heard_of() -> None:
    """With the events one request late, r1 (sharing A's prefix) is routed before the
    router hears of r0's blocks: it goes by load to worker 1, and misses."""
    done, _ = _sequential([A, A2], workers=2, routing="prefix")
    assert done.worker_of == [0, 0] and done.lengths == [0, 3]
    late, _ = _sequential([A, A2], workers=2, routing="prefix", delay_requests=1)
    assert late.worker_of == [0, 1] and late.lengths == [0, 0]
    # in trace time: r1 arrives 1 ms after r0 (block_trace), a 2 ms delay hides r0 too
    timely, _ = _sequential([A, A2], workers=2, routing="prefix", delay_ms=0.5)
    slow, _ = _sequential([A, A2], workers=2, routing="prefix", delay_ms=2.0)
    assert timely.lengths == [0, 3] and slow.lengths == [0, 0]


def test_a_gateway_index_knows_only_its_own_decisions() -> None:
    """Two gateways take requests in turn. Gateway 1 never routed A, so r1 (A2) goes by
    load to worker 1 and misses; gateway 0 remembers routing A to worker 0, so r2 hits
    there. A shared index, fed by the events, sends r1 to worker 0 as well."""
    done, router = _sequential([A, A2, A2], workers=2, routing="prefix", index="gateway",
                               gateways=2)  # fmt: skip
    assert done.worker_of == [0, 1, 0] and done.lengths == [0, 0, 3]
    assert len(router.indexes) == 2 and router.events_applied == 0
    shared, _ = _sequential([A, A2, A2], workers=2, routing="prefix")
    assert shared.worker_of == [0, 0, 0] and shared.lengths == [0, 3, 4]


def test_cost_routing_trades_overlap_against_load() -> None:
    """Worker 0 holds A; a request for A2 would prefill 1 block there and 4 on worker 1.
    Cost = weight x blocks to prefill + active blocks: worker 0 wins while its load is
    small, loses once its load outweighs the 3 blocks saved (weight 1), wins again when
    the overlap weighs more."""
    trace = block_trace([A, A2])
    for weight, active, chosen in ((1.0, [2, 0], 0), (1.0, [10, 0], 1), (5.0, [10, 0], 0)):
        spec = ClusterSpec(workers=2, routing="cost", overlap_weight=weight)
        trees, router = _cluster(trace, spec)
        trees[0].insert(A)
        router.observe(0, 0.0)
        assert router.route(1, 1.0, [1, 0], active) == chosen


def test_the_router_index_class_can_be_swapped() -> None:
    """``--router-index module:Class``: any class with RouterIndex's API is used in place
    of the trees' twin's."""
    assert load_index_class("kachedb_radix.reference.router:RouterIndex") is RouterIndex
    assert load_index_class("tests.simulate.test_cluster:CountingIndex") is CountingIndex
    counting = "tests.simulate.test_cluster:CountingIndex"
    done, router = _sequential([A, B, A2], workers=2, routing="prefix", router_index=counting)
    assert isinstance(router.indexes[0], CountingIndex) and router.indexes[0].queries == 3
    assert done.lengths == [0, 0, 3]
    with pytest.raises(SimulateError, match="--router-index 'nowhere:X'"):
        load_index_class("nowhere:X")


class CountingIndex(RouterIndex):
    """The reference index, counting its queries."""

    queries = 0

    def query_hashes(self, hashes: Any) -> dict[Any, int]:
        self.queries += 1
        return super().query_hashes(hashes)


def test_bad_clusters_are_refused() -> None:
    for bad, message in (({"workers": 0}, "--workers must be >= 1"),
                         ({"routing": "x"}, "unknown routing"), ({"index": "x"}, "--index"),
                         ({"gateways": 0}, "--gateways"), ({"delay_requests": -1}, "delay"),
                         ({"overlap_weight": 0.0}, "--overlap-weight")):  # fmt: skip
        with pytest.raises(SimulateError, match=message):
            ClusterSpec(**bad)
    assert ClusterSpec(workers=3).pools(10, 100) == [4, 3, 3]
    assert ClusterSpec(workers=3).pools(2, 100) == [1, 1, 1]  # every worker a block at least
    assert ClusterSpec(workers=2).pools(1000, 300) == [300, 300]  # never beyond the trace's
    labels = [ClusterSpec(workers=4, routing="cost", index="gateway", gateways=4).label,
              ClusterSpec(workers=4, routing="prefix", delay_ms=50.0).label,
              ClusterSpec(workers=4, routing="round-robin", delay_requests=3).label,
              ClusterSpec(workers=4, routing="prefix", delay_requests=3).label]  # fmt: skip
    assert labels == ["4xcost@gw4", "4xprefix+50ms", "4xround-robin", "4xprefix+3req"]
    untimed = Trace([r.__class__(r.tokens, r.sequence, 1, 0, None, None, 1)
                     for r in block_trace([A]).requests], "mooncake", 1, 1, "u")  # fmt: skip
    trees, router = _cluster(untimed, ClusterSpec(workers=2, routing="prefix", delay_ms=5.0))
    with pytest.raises(SimulateError, match="--router-delay in ms needs a timestamp"):
        replay_cluster_sequential(untimed, trees, router)


def test_the_timed_mode_routes_by_what_workers_hold_now() -> None:
    """Two workers; r0 and r1 (far apart) share A's prefix: prefix routing keeps them
    together; round-robin splits them; least-loaded sends r1 to the idle worker 0 (a tie)
    and r2, arriving while worker 0 decodes r1, to worker 1."""
    trace = block_trace([A, A2, B])
    spaced = Trace([r.__class__(r.tokens, r.sequence, r.prompt_tokens, 50, stamp, None, r.line)
                    for r, stamp in zip(trace.requests, (0.0, 1000.0, 1001.0), strict=True)],
                   "mooncake", 1, 1, "t")  # fmt: skip
    cost = CostModel.of(Deployment(MODELS["llama-3-8b"], GPUS["h100"]))
    service = ServiceModel(max_running=4, token_budget=64)
    found: dict[str, tuple[list[int] | None, list[int]]] = {}
    for routing in ("prefix", "round-robin", "least-loaded"):
        spec = ClusterSpec(workers=2, routing=routing)
        trees, router = _cluster(spaced, spec, pool=64)
        done = replay_timed(spaced, trees, service, cost, router=router)
        found[routing] = (done.worker_of, done.lengths)
        for tree in trees:
            assert tree.stats().pinned == 0
    assert found["prefix"] == ([0, 0, 1], [0, 3, 0])
    assert found["round-robin"] == ([0, 1, 0], [0, 0, 0])
    assert found["least-loaded"][0] == [0, 0, 1]


def test_workers_feeding_an_index_run_on_the_c_twin() -> None:
    """A worker that must feed an index needs a tree that emits events: the C twin emits
    them, so routed workers run on it (and the results say which ran)."""
    trace = block_trace([A, A2])
    job = Job(trace=trace, mode="sequential", implementation="accel",
              service=ServiceModel(), order=[0, 1])  # fmt: skip
    pytest.importorskip("kachedb_radix.accel")
    trees, name = make_trees(job, Config(cluster=ClusterSpec(workers=2, routing="prefix")), 8)
    assert len(trees) == 2 and hasattr(trees[0], "take_events")
    trees, plain = make_trees(job, Config(cluster=ClusterSpec(workers=2)), 8)
    assert plain == name == "accel"


def test_policies_workers_and_routings_in_one_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every policy on every cluster, as tasks of one sweep: a column each, a cluster
    table, results.json (schema-valid) with each cluster's balance."""
    status = main(["simulate", "--requests", "150", "--capacity", "400,2000", "--policy", "lfu",
                   "--workers", "1,2", "--routing", "round-robin,prefix", "--knee-rounds", "0",
                   "--executor", "serial", "--out", str(tmp_path)])  # fmt: skip
    assert status == 0
    out = capsys.readouterr().out
    assert "hit LRU" in out and "hit LFU" in out  # and a column per cluster
    for row in ("│ 2xround-robin ", "│ 2xround-robin/lfu ", "│ 2xprefix ", "│ 2xprefix/lfu "):
        assert row in out  # the cluster table
    assert "lru (1 worker)" in out and "requests per worker" in out
    document = json.loads((tmp_path / "results.json").read_text())
    jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text())).validate(document)
    labels = [config["label"] for config in document["settings"]["configurations"]]
    assert labels == ["lru", "lfu", "2xround-robin", "2xround-robin/lfu", "2xprefix",
                      "2xprefix/lfu"]  # fmt: skip
    point = document["points"][1]
    assert set(point["clusters"]) == set(labels[2:]) and set(point["policies"]) == {"lfu"}
    assert sum(point["clusters"]["2xprefix"]["balance"]["requests"]) == 150


def test_splitting_a_pool_costs_hits_that_prefix_routing_wins_back() -> None:
    """The embedded workload at one total capacity: four workers dealt round-robin lose
    most of one pool's hits; routing by prefix keeps nearly all of them."""
    trace = generate(WorkloadSpec(requests=300, seed=2))
    clusters = tuple(ClusterSpec(workers=4, routing=r) for r in ("round-robin", "prefix"))
    results = simulate(trace, Settings(executor="serial", capacities=(6000,), knee_rounds=0,
                                       clusters=clusters))  # fmt: skip
    point = results.points[0]
    one = point.lru.token_hit_ratio
    dealt = point.runs["4xround-robin"].stats.token_hit_ratio
    routed = point.runs["4xprefix"].stats.token_hit_ratio
    assert dealt < 0.7 * one and routed > 0.9 * one
    balance = point.runs["4xprefix"].balance
    assert balance is not None and sum(balance.requests) == 300 and balance.imbalance < 2
