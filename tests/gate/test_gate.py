"""The performance gate's logic (spec/gate, ``kachedb-radix gate``), with scripted timings.

Nothing here asserts how fast anything is: clocks and measurements are scripted, so the
assertions are about the gate's decisions -- normalisation by the calibration loops, the
1.5x baseline rule with one re-measure, the eviction growth check, memory figures and the
baseline file's limits, the exit status -- and about the shapes and targets it runs on
(built small).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import subprocess
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kachedb_radix import accel, reference
from kachedb_radix.spec.cli import gate as gate_cli
from kachedb_radix.spec.cli import gate_fresh
from kachedb_radix.spec.cli.gate_fresh import FreshError, TargetWords
from kachedb_radix.spec.cli.main import main as cli_main
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.targets import TargetError
from kachedb_radix.spec.gate import blockpool, cases, memory, router, run, shapes, timing, verdicts
from kachedb_radix.spec.gate import tiers as gate_tiers
from kachedb_radix.spec.gate.cases import (
    GROWTH_POLICIES,
    Case,
    MemoryCase,
    Plan,
    build_plan,
    first_evict_name,
)
from kachedb_radix.spec.gate.run import GateRun, load_priors, run_gate, to_json
from kachedb_radix.spec.gate.shapes import Workload
from kachedb_radix.spec.gate.trees import CandidateTree, gate_target
from kachedb_radix.spec.gate.verdicts import (
    FAIL,
    NEW,
    PASS,
    Baseline,
    BaselineError,
    Measurement,
    evaluate,
    load_baseline,
    paired,
    save_baseline,
)

# ---------------------------------------------------------------- timing


def fake_clock(step: int) -> Callable[[], int]:
    """A clock advancing ``step`` ns per reading."""
    counter = itertools.count(0, step)
    return lambda: next(counter)


def test_repeated_calls_are_timed_in_batches() -> None:
    calls: list[int] = []
    work = Workload(lambda: calls.append(1), units=2)
    policy = timing.Policy(budget_s=1e-4, min_rounds=5, max_rounds=7, batch_ns=30)
    got = timing.time_workload(work, policy, fake_clock(10))
    assert got.rounds == 7 and got.inner >= 1 and got.median_ns > 0
    assert len(calls) >= 3 + 7 * got.inner


def test_rounds_with_setup_and_fixed_rounds() -> None:
    log: list[str] = []
    work = Workload(lambda: log.append("run"), lambda: log.append("setup"))
    policy = timing.Policy(budget_s=1e-6, min_rounds=4, max_rounds=9)
    got = timing.time_workload(work, policy, fake_clock(1000))
    assert got.rounds == 4 and log[:2] == ["setup", "run"] and log.count("run") == 3 + 4
    fixed = Workload(lambda: log.append("run"), lambda: log.append("setup"), rounds=2)
    log.clear()
    assert timing.time_workload(fixed, policy, fake_clock(5)).rounds == 2
    assert log == ["setup", "run", "setup", "run"]  # no warm-up
    # Warm-ups run first and are not timed: the clock is read as often as without them.
    reads: dict[int, int] = {}
    for warmups in (0, 2):
        counted = fake_clock(5)

        def clock(counted: Callable[[], int] = counted, warmups: int = warmups) -> int:
            reads[warmups] = reads.get(warmups, 0) + 1
            return counted()

        log.clear()
        warmed = dataclasses.replace(fixed, warmups=warmups)
        assert timing.time_workload(warmed, policy, clock).rounds == 2
        assert log == ["setup", "run"] * (2 + warmups)
    assert reads[0] == reads[2]


def test_calibration_loops_and_formatting() -> None:
    assert timing.cpu_calibration() == timing.cpu_calibration()
    assert timing.memory_calibration() == 96
    assert set(timing.CALIBRATION_WORK) == set(timing.CALIBRATIONS)
    assert timing.format_ns(12.5) == "12.5 ns"
    assert timing.format_ns(1500) == "1.5 us"
    assert timing.format_ns(2.5e6) == "2.5 ms"
    assert timing.format_ns(3e9) == "3 s"


def test_the_anchor_is_timed_after_every_round() -> None:
    log: list[str] = []

    def anchor() -> int:
        log.append("anchor")
        return 0

    policy = timing.Policy(budget_s=1e-6, min_rounds=4, max_rounds=4, batch_ns=1.0)
    work = Workload(lambda: log.append("run"))
    got = timing.time_workload(work, policy, fake_clock(10), anchor)
    # after the warm-ups, each round of the case is followed by one anchor batch, after
    # one untimed anchor loop (the batch is one loop: batch_ns is 1)
    assert log[-12:] == ["run", "anchor", "anchor"] * 4
    assert got.anchor_ns is not None and got.ratio is not None and got.ratio > 0
    log.clear()
    fixed = Workload(lambda: log.append("run"), lambda: log.append("setup"), rounds=2)
    got = timing.time_workload(fixed, policy, fake_clock(10), anchor)
    batches = timing.FIXED_ROUND_ANCHOR_BATCHES
    assert log[-(2 + 2 * batches) :] == ["setup", "run", *["anchor", "anchor"] * batches]
    assert got.rounds == 2 and got.ratio is not None


def test_a_preempted_round_is_timed_again() -> None:
    # The scripted counter says the scheduler took the core during the first try of every
    # round and anchor batch (the counter moves between its two readings), never after.
    readings = (value for i in itertools.count() for value in (i, i + 1, i + 1, i + 1))

    def switches() -> int:  # reading pairs alternate: moved (i, i + 1), then not
        return next(readings)

    log: list[str] = []
    policy = timing.Policy(budget_s=1e-6, min_rounds=2, max_rounds=2, batch_ns=1.0)
    work = Workload(lambda: log.append("run"), lambda: log.append("setup"))
    got = timing.time_workload(work, policy, fake_clock(10), lambda: 0, switches=switches)
    assert got.rounds == 2 and log.count("run") == 3 + 2 * 2  # warm-ups, then two tries each
    log.clear()
    always = itertools.count()  # preempted every time: the last try counts
    timing.time_workload(work, policy, fake_clock(10), None, switches=lambda: next(always))
    assert log.count("run") == 3 + 2 * (timing.PREEMPTED_RETRIES + 1)
    log.clear()
    always = itertools.count()  # a repeated call and a cold anchor, preempted every time
    cold = Workload(
        lambda: log.append("run"), lambda: None, rounds=1, cold=lambda: log.append("cold")
    )
    timing.time_workload(cold, policy, fake_clock(10), lambda: 0, switches=lambda: next(always))
    tries = timing.PREEMPTED_RETRIES + 1
    assert log.count("cold") == timing.FIXED_ROUND_ANCHOR_BATCHES * tries
    log.clear()
    repeated = Workload(lambda: log.append("run"))
    got = timing.time_workload(repeated, policy, fake_clock(10), None, switches=lambda: 0)
    once = len(log)
    log.clear()
    timing.time_workload(repeated, policy, fake_clock(10), None, switches=lambda: next(always))
    # each retry: one untimed call (the caches of whoever had the core), then the batch
    assert len(log) == once + got.rounds * (got.inner + 1) * (tries - 1)
    assert timing.preemptions() >= 0


def test_long_rounds_are_timed_on_the_cpu_clock() -> None:
    cpu_reads: list[int] = []

    def cpu_clock() -> int:
        cpu_reads.append(1)
        return 10 * len(cpu_reads)

    slow = int(2 * timing.LONG_ROUND_NS)  # each wall reading: a long round later
    policy = timing.Policy(budget_s=1e-6, min_rounds=3, max_rounds=3, batch_ns=1.0)
    got = timing.time_workload(Workload(lambda: None), policy, fake_clock(slow), None, cpu_clock)
    assert got.median_ns == 10 and len(cpu_reads) == 6
    cpu_reads.clear()
    rounds = Workload(lambda: None, lambda: None)
    got = timing.time_workload(rounds, policy, fake_clock(slow), None, cpu_clock)
    assert got.median_ns == 10 and len(cpu_reads) == 6
    assert timing._never_switched() == 0


def test_per_round_ratios_cancel_a_slow_stretch() -> None:
    # A clock whose ticks slow 3x for the second half of the run: case and anchor alike.
    # The per-round ratio stays the same throughout; raw medians would not.
    ticks = itertools.count()

    def clock() -> int:
        n = next(ticks)
        return n * 10 if n < 400 else 4000 + (n - 400) * 30

    policy = timing.Policy(budget_s=1e-6, min_rounds=101, max_rounds=101, batch_ns=1.0)
    got = timing.time_workload(Workload(lambda: None), policy, clock, lambda: 0)
    assert got.ratio == pytest.approx(1.0)


# ---------------------------------------------------------------- shapes


def test_every_match_shape_is_fully_cached() -> None:
    for name in shapes.SHAPES:
        shape = shapes.get_shape(name, 64)
        tree = shapes.build_tree(reference.RadixTree, "reference", shape)
        for kind in shapes.INPUT_KINDS:
            work = shapes.match_workload(tree, shape.query[:64], kind)
            assert work.run().length == 64  # type: ignore[attr-defined]
        assert shape.block_bound() >= 4
    assert shapes.shape_lengths("branchy", (16, 32_768)) == (16,)
    assert shapes.shape_lengths("chat", (16, 32_768)) == (16, 32_768)
    with pytest.raises(ValueError, match="unknown input kind"):
        shapes.as_input([1], "float")
    with pytest.raises(AssertionError, match="matched"):
        shapes._check_full_match(0, shapes.get_shape("long_edge", 64), "x")
    with pytest.raises(RuntimeError, match="asked for implementation"):
        shapes.make_tree(reference.RadixTree, "accel", 4, 1)
    with pytest.raises(AssertionError, match="found 0"):
        shapes.match_workload(reference.RadixTree(4), list(range(16)), "list")
    long_chat = shapes.chat(1024, conversations=4, forks=2)
    assert len(long_chat.query) == 1024
    full = reference.RadixTree(4, 1)
    full.insert([1, 2, 3, 4])
    shapes._make_room(full, 3)  # evicts what the pool lacks
    assert full.stats().free == 3


def test_insert_cycle_and_eviction_workloads_run() -> None:
    factory = reference.RadixTree
    makers = [
        shapes.insert_fresh(factory, "reference", 64),
        shapes.insert_shared(factory, "reference", 64),
        shapes.insert_split(factory, "reference", 64),
        shapes.serving_cycle(factory, "reference", 1024, 32),
        shapes.evict_workload(factory, "reference", 300, batch=8),
    ]
    for work in makers:
        for _ in range(3):
            assert work.setup is not None
            work.setup()
            work.run()
    first = shapes.first_evict_workload(factory, "reference", 400, batch=8, rounds=2)
    assert first.rounds == 2 and first.units == 8 and first.setup is not None
    for _ in range(2):
        first.setup()
        assert len(first.run()) == 8  # type: ignore[arg-type]
    sequences = shapes.first_evict_sequences(400, 1)
    assert len(sequences) == (400 - 32) // 8 + 1
    assert len({tuple(s[:4]) for s in sequences}) == shapes.FIRST_EVICT_HEADS


def test_first_eviction_refuses_a_short_eviction() -> None:
    first = shapes.first_evict_workload(reference.RadixTree, "reference", 40, batch=64)
    assert first.setup is not None
    first.setup()
    with pytest.raises(AssertionError, match="freed"):
        first.run()


def test_memory_shapes_on_a_tree_that_reports_its_memory() -> None:
    names = list(memory.memory_shapes(quick=True))
    assert names[-1] == "grouped/100000" and list(memory.memory_shapes(False))[-1].endswith("0000")
    for name in ("one_edge", "one_block_nodes"):
        tree = memory.memory_shapes(True)[name](accel.RadixTree, "accel")
        assert memory.reports_memory(tree) and 0 < memory.bytes_per_block(tree) < 1000
    tree = memory.grouped(accel.RadixTree, "accel", 500)
    assert tree.stats().cached >= 500
    assert not memory.reports_memory(reference.RadixTree(4, 1))


def test_memory_builders_make_their_shapes() -> None:
    chat = memory.chat_turns(accel.RadixTree, "accel")
    assert chat.stats().cached == 256 * 32 and len(chat.namespaces()) == 4
    prompts = memory.random_prompts(accel.RadixTree, "accel")
    assert prompts.stats().cached > 16 * 8


# ---------------------------------------------------------------- block pool host side


@pytest.mark.parametrize("pool", ["reference", "accel"])
def test_block_pool_host_side_cases_run(pool: str) -> None:
    found = blockpool.host_side_cases(pool)
    assert ("gpu-host/gather/16" in found) == (pool == "accel")
    assert ("gpu-host/copy/16" in found) == (pool == "accel")
    for make in found.values():
        work = make()
        for _ in range(70):  # enough to come round a small staging ring
            work.run()
    blockpool._Finished().synchronize()
    with pytest.raises(ValueError, match="fast path"):
        blockpool.taken(None)


# ---------------------------------------------------------------- router index


@pytest.mark.parametrize("twin", ["reference", "accel"])
def test_router_cases_run_on_their_twin(twin: str) -> None:
    """R-ROUTE-*: the gate times the index the twin ships, on a stream that stores and
    removes (the workers' pools are small enough to evict); the larger cases are
    anchored by the smaller of their kind, and the C twin's memory is reported."""
    found = router.router_cases(twin)
    anchored = {
        "router/lookup/64x128": "router/lookup/64x16",
        "router/clear/131072": "router/clear/0",
    }
    if twin == "accel":
        anchored["router/churn/1000000"] = "router/churn/10000"
    names = {"router/apply/8", "router/lookup/64x16", "router/churn/10000", "router/clear/0"}
    assert set(found) == names | set(anchored)
    assert {name: anchor for name, (_, _, anchor) in found.items() if anchor} == anchored
    assert getattr(router.index_class(twin), "implementation", None) == twin
    apply_work = found["router/apply/8"][0]()
    apply_work.run()
    assert apply_work.unit == "block" and apply_work.units > router.REQUESTS
    found["router/lookup/64x16"][0]().run()
    found["router/lookup/64x128"][0]().run()
    churn = router.churn_workload(twin, 1000)
    for _ in range(router.CHURN_POOL + 3):  # past the pool: its blocks come round again
        churn.run()
    index: Any = churn.keep[0]
    index.check_invariants()
    assert index.holder_blocks == 1000 + router.CHURN_LAG * router.CHURN_GROUP * router.CHURN_BLOCKS
    clear = found["router/clear/131072"][0]()
    assert clear.setup is not None
    for _ in range(3):
        clear.setup()
        clear.run()
    cleared: Any = clear.keep[0]
    assert cleared.held("small") == 0 and cleared.held(0) == 1 << 17
    payloads, blocks = router.event_stream(workers=2, requests=120)
    removals = sum(b"BlockRemoved" in payload for items in payloads for payload in items)
    assert len(payloads) == 2 and blocks > 0 and removals > 0
    memory_cases = router.router_memory_cases(twin)
    assert set(memory_cases) == (
        {f"memory/router/{w}" for w in (16, 128, 1024)} if twin == "accel" else set()
    )


def test_router_memory_is_bytes_per_holder_block() -> None:
    """The C index's own bytes over its holder-blocks, read as the gate reads a tree's."""
    from kachedb_radix.spec.gate.memory import bytes_per_block

    measured = router.fleet_memory(128, held=20_000)
    index = measured.index
    assert index.holder_blocks == 20_000 and len(index.workers()) == 128
    parts = index.memory_bytes()
    assert bytes_per_block(measured) == (parts["total"] - parts["scratch"]) / 20_000 < 40


# ---------------------------------------------------------------- tiers


@pytest.mark.parametrize("twin", ["reference", "accel"])
def test_restore_plan_cases_run_on_their_twin(twin: str) -> None:
    """R-TIER-5, R-TIER-6: the gate times the twin's own tiered tree planning a restore of
    a path spread over the three tiers, per block brought up, and nothing else."""
    found = gate_tiers.tier_cases(twin, quick=True)
    bytes_cases = {
        "tiers/copy/128": None,
        "tiers/restore-host/128": "tiers/copy/128",
        "tiers/demote-host/128": "tiers/copy/128",
        "tiers/replay/plain": None,
        "tiers/replay/tiered": "tiers/replay/plain",
    }
    assert {name: anchor for name, (_, anchor) in found.items()} == {
        "tiers/restore-plan/128": None,
        **bytes_cases,
    }
    full = gate_tiers.tier_cases(twin, quick=False)
    assert set(full) == {"tiers/restore-plan/128", "tiers/restore-plan/2048", *bytes_cases}
    work = found["tiers/restore-plan/128"][0]()
    assert (work.unit, work.units, work.rounds) == ("block", 96, None)
    assert work.setup is not None
    for _ in range(2):  # each round's setup builds the same state again
        work.setup()
        made: Any = work.run()
        plan, done = made
        assert (plan.start, plan.count("host"), plan.count("disk")) == (32, 32, 64)
        assert len(done.restored) == 96 and not done.evicted and not done.moves
        assert {move.source_tier for move in done.restored} == {"host", "disk"}
    tree = gate_tiers.spread_path(gate_tiers.tiered_tree_class(twin), gate_tiers.plan_tokens(8))
    assert tree.implementation == twin
    tree.check_invariants()


def test_a_broken_restore_plan_case_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A case that would time something else fails when it is made, not silently."""
    monkeypatch.setattr(gate_tiers, "tiered_tree_class", lambda twin: accel.TieredTree)
    with pytest.raises(RuntimeError, match="asked for the reference tiered tree"):
        gate_tiers.restore_plan_workload("reference", 8)
    monkeypatch.setattr(gate_tiers, "spread_path", lambda make, tokens: _all_on_device(tokens))
    with pytest.raises(AssertionError, match="the path is spread"):
        gate_tiers.restore_plan_workload("accel", 8)


@pytest.mark.parametrize("twin", ["reference", "accel"])
def test_the_byte_cases_move_the_bytes_their_anchor_copies(twin: str) -> None:
    """R-TIER-6, R-TIER-3: a restore from the host and a demotion to it, per block, on the
    twin's trees over the NumPy pool, beside numpy.copyto of the same bytes; each round's
    setup makes the state its call needs."""
    restore = gate_tiers.restore_host_workload(twin, 8)
    demote = gate_tiers.demote_host_workload(twin, 8)
    copy = gate_tiers.copy_workload(8)
    assert (restore.units, restore.unit, copy.units, copy.setup) == (8, "block", 8, None)
    for _ in range(2):
        assert restore.setup is not None and demote.setup is not None
        restore.setup()
        done: Any = restore.run()
        assert {move.source_tier for move in done.result.restored} == {"host"}
        demote.setup()
        evicted: Any = demote.run()
        assert [move.target_tier for move in evicted.moves] == ["host"] * 8  # copied down
    copy.run()
    cache: Any = restore.keep[0]
    assert cache.tiers.implementation == twin
    cache.check_invariants()


def test_a_broken_byte_case_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_tiers, "tiered_tree_class", lambda twin: accel.TieredTree)
    with pytest.raises(RuntimeError, match="asked for the reference tiered tree"):
        gate_tiers.restore_host_workload("reference", 4)
    with pytest.raises(RuntimeError, match="asked for the reference tree"):
        gate_tiers.replay_workload("reference", True)
    monkeypatch.undo()
    from kachedb_radix.reference.tiers import KVCache

    monkeypatch.setattr(KVCache, "read", lambda self, tokens, namespace=None: np.zeros(1))
    with pytest.raises(AssertionError, match="not the stored ones"):
        gate_tiers.restore_host_workload("accel", 4)


@pytest.mark.parametrize(
    ("twin", "tiered"), [("reference", True), ("accel", False), ("reference", False)]
)
def test_the_replay_cases_serve_a_chat_stream(twin: str, tiered: bool, monkeypatch: Any) -> None:
    """The serving loop restores (tiered) or matches (plain) each prompt pinned, inserts
    it, releases; the stream's conversations share system prompts and their own turns."""
    monkeypatch.setattr(gate_tiers, "REPLAY_PROMPTS", 120)
    prompts = gate_tiers.conversation_prompts(120)
    assert prompts == gate_tiers.conversation_prompts(120)  # deterministic
    assert all(len(prompt) % 16 == 0 for prompt in prompts)
    assert len({tuple(prompt[:64]) for prompt in prompts}) <= 8  # the system prompts
    work = gate_tiers.replay_workload(twin, tiered)
    assert (work.unit, work.rounds) == ("replay", 3)
    assert work.setup is not None
    work.setup()
    hits = work.run()
    assert isinstance(hits, int) and hits > 0  # the conversations' turns hit
    state: Any = work.keep[0]
    assert state[0].implementation == twin


def _all_on_device(tokens: list[int]) -> Any:
    tree = accel.TieredTree(8, 8, 8, 16)
    tree.insert(tokens)
    return tree


# ---------------------------------------------------------------- targets


class PlainCandidate:
    """A plain-data candidate that is not the kit's tree adapter (it only uses one)."""

    def __init__(self, name: str) -> None:
        self._inner = TreeAdapter(reference.RadixTree, name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def make_candidate() -> PlainCandidate:
    """A zero-argument factory of plain-data candidates (a ``module:attribute`` target)."""
    return PlainCandidate("factory-candidate")


SHARED = PlainCandidate("shared-candidate")


def _exercise(tree: Any) -> None:
    tree.insert(np.arange(32, dtype=np.uint32))
    hit = tree.match(list(range(32)), pin=True)
    assert hit.length == 32 and hit.lease is not None
    hit.lease.release()
    again = tree.match(list(range(16)), pin=True)
    tree.release(again.lease)
    assert tree.insert(list(range(100, 116))).lease is None
    assert tree.stats().cached == 3
    assert len(tree.evict(2)) == 2


def test_tree_class_targets() -> None:
    for name, impl, pool in (("reference", "reference", "reference"), ("accel", "accel", "accel")):
        target = gate_target(name)
        assert (target.implementation, target.pool, target.reuse_trees) == (impl, pool, True)
        _exercise(target.factory(8, 16))
    mutant = gate_target("kachedb_radix.spec.mutants.eviction:LruReversed")
    assert mutant.pool is None and mutant.implementation == "mutant:lru_reversed"


def test_candidate_targets_are_driven_through_plain_data() -> None:
    made = gate_target("tests.gate.test_gate:make_candidate")
    assert made.reuse_trees and made.implementation == "factory-candidate"
    tree = made.factory(8, 16)
    assert isinstance(tree, CandidateTree)
    _exercise(tree)
    shared = gate_target("tests.gate.test_gate:SHARED")
    assert not shared.reuse_trees
    _exercise(shared.factory(8, 16))
    shared.close()


def test_a_program_is_a_target() -> None:
    target = gate_target(None, f"{sys.executable} -m kachedb_radix.spec.protocol.server")
    try:
        assert target.name.startswith("cmd:") and not target.pool
        _exercise(target.factory(8, 16))
        plan = build_plan(target, quick=True, only="insert/fresh")
        assert [case.name for case in plan.cases] == ["insert/fresh/1024"] and not plan.memory
    finally:
        target.close()
        target.close()  # idempotent
    with pytest.raises(TargetError):
        gate_target("no_such_module_here:Tree")


# ---------------------------------------------------------------- the plan


def test_quick_and_full_plans() -> None:
    target = gate_target("accel")
    quick = build_plan(target, quick=True)
    names = [case.name for case in quick.cases]
    assert "match/branchy/1024/uint32" in names and "insert/fresh/1024" in names
    assert quick.evict_keys[0] == (first_evict_name(1000), first_evict_name(1_000_000))
    # R-POL-1: the growth is checked under every policy too
    assert quick.evict_keys[1:] == tuple(
        (first_evict_name(1000, policy), first_evict_name(1_000_000, policy))
        for policy in GROWTH_POLICIES
    )
    assert {case.calibration for case in quick.cases if case.name.startswith("match")} == {"cpu"}
    assert {case.calibration for case in quick.cases if case.name.startswith("insert")} == {
        "memory"
    }
    assert any(name.startswith("gpu-host/gather") for name in names)
    assert {"router/apply/8", "router/lookup/64x16"} <= set(names)
    assert "tiers/restore-plan/128" in names and "tiers/restore-plan/2048" not in names
    assert {c.calibration for c in quick.cases if c.name.startswith("tiers/")} == {"memory"}
    anchors = {c.name: c.anchor for c in quick.cases if c.name.startswith("tiers/")}
    assert anchors["tiers/restore-host/128"] == "tiers/copy/128"
    assert anchors["tiers/replay/tiered"] == "tiers/replay/plain"
    memory_names = [m.name for m in quick.memory]
    assert memory_names[-4:] == [
        "memory/grouped/100000",
        *(f"memory/router/{w}" for w in (16, 128, 1024)),
    ]
    full = build_plan(target, quick=False)
    assert len(full.cases) > len(quick.cases) and full.mode == "full"
    assert sum(1 for c in full.cases if c.name.startswith("evict/first/")) == 4 + 2 * len(
        GROWTH_POLICIES
    )
    only = build_plan(target, quick=True, only="evict/first/1000000")
    assert only.evict_keys == () and len(only.cases) == 1 and not only.memory
    # A policy's first eviction is anchored to lru's of the same size, which --only keeps.
    anchored = build_plan(target, quick=True, only="evict/first/lfu/1000")
    assert [c.name for c in anchored.cases] == [
        first_evict_name(1000), first_evict_name(1_000_000), "evict/first/lfu/1000",
        "evict/first/lfu/1000000",
    ]  # fmt: skip
    assert anchored.cases[2].anchor == first_evict_name(1000) and anchored.cases[0].anchor is None


def _anchored_plan() -> Plan:
    return Plan(
        "t", "quick",
        [Case("evict/first/1000", _never, "memory"),
         Case("evict/first/lfu/1000", _never, "memory", anchor="evict/first/1000")],
    )  # fmt: skip


def test_an_anchored_case_is_gated_by_its_ratio_to_the_anchor_in_the_same_run(
    tmp_path: Path,
) -> None:
    """The memory loop's swings do not move an anchored figure: only the ratio to its
    anchor, measured in the same run, counts."""
    plan = _anchored_plan()
    path = tmp_path / "b.json"
    recorded = {
        "evict/first/1000": [_m(400, calib=23_000), _m(500, calib=50_000), _m(450)],
        "evict/first/lfu/1000": [_m(800, calib=60_000), _m(900), _m(1000)],
    }  # fmt: skip
    save_baseline(path, plan, recorded, {}, {"cpu": "t"}, "c")
    entry = load_baseline(path).cases["evict/first/lfu/1000"]
    assert entry["normalised"] == 2.0 and entry["calibration"] == "anchor evict/first/1000"
    baseline = load_baseline(path)
    # A host whose memory loop runs twice as fast, the ratio unchanged: passes.
    same = {
        "evict/first/1000": [_m(450, calib=5_000)],
        "evict/first/lfu/1000": [_m(900, calib=5_000)],
    }
    row = next(v for v in evaluate(same, {}, plan, baseline) if v.figure == "evict/first/lfu/1000")
    assert (
        row.status == PASS and row.value == "1.00x baseline" and "per evict/first/1000" in row.note
    )
    assert row.keys == ("evict/first/lfu/1000", "evict/first/1000")
    slow = {"evict/first/1000": [_m(450)], "evict/first/lfu/1000": [_m(1400)]}
    row = next(v for v in evaluate(slow, {}, plan, baseline) if v.figure == "evict/first/lfu/1000")
    assert row.status == FAIL
    # Without its anchor measured there is nothing to divide by, so no row.
    alone = {"evict/first/lfu/1000": [_m(900)]}
    assert not [
        v for v in evaluate(alone, {}, plan, baseline) if v.figure == "evict/first/lfu/1000"
    ]


def test_a_ratio_is_taken_within_one_pass() -> None:
    """A lucky re-measure of the anchor alone (its own row failed) does not make its
    anchored case fail: the case and its anchor are divided only within a pass (CI saw
    lfu's 811 ns over lru's lucky 451 ns, where lfu had run at 1.2x lru in every pass)."""
    plan = _anchored_plan()
    baseline = Baseline(
        "t", {"evict/first/lfu/1000": {"normalised": 2.0, "calibration": "anchor evict/first/1000"}}
    )
    lucky = {
        "evict/first/1000": [_m(450, sweep=0), _m(200, sweep=1)],  # alone, a lucky minute
        "evict/first/lfu/1000": [_m(900, sweep=0)],
    }
    assert paired(lucky, "evict/first/lfu/1000", "evict/first/1000") == (900, 450)
    row = next(v for v in evaluate(lucky, {}, plan, baseline) if v.figure.endswith("lfu/1000"))
    assert row.status == PASS and row.value == "1.00x baseline" and "same pass" in row.note
    # Re-measured together, the better pass counts; a regression fails in every pass.
    together = {
        "evict/first/1000": [_m(450, sweep=0), _m(400, sweep=1)],
        "evict/first/lfu/1000": [_m(1400, sweep=0), _m(1000, sweep=1)],
    }
    assert paired(together, "evict/first/lfu/1000", "evict/first/1000") == (1000, 400)
    slow = {
        "evict/first/1000": [_m(450, sweep=0), _m(400, sweep=1)],
        "evict/first/lfu/1000": [_m(1400, sweep=0), _m(1300, sweep=1)],
    }
    row = next(v for v in evaluate(slow, {}, plan, baseline) if v.figure.endswith("lfu/1000"))
    assert row.status == FAIL
    # No pass measured both (a prior run's file of one, this run's of the other): the
    # best of each.
    apart = {"evict/first/1000": [_m(500, sweep=0)], "evict/first/lfu/1000": [_m(900, sweep=1)]}
    assert paired(apart, "evict/first/lfu/1000", "evict/first/1000") == (900, 500)


def test_a_run_numbers_its_passes_after_a_prior_runs() -> None:
    plan = _anchored_plan()
    baseline = Baseline("t", limits={"evict/first/1000": {"max_ns": 1}})  # fails: re-measured
    prior = {"evict/first/1000": [_m(450, sweep=0), _m(460, sweep=1)]}
    run = run_gate(plan, baseline, lambda case: _m(500), prior=prior)
    assert run.remeasured == ["evict/first/1000"]
    assert [m.sweep for m in run.results["evict/first/1000"]] == [0, 1, 2, 3]
    assert [m.sweep for m in run.results["evict/first/lfu/1000"]] == [2]


def test_plan_cases_build_their_workloads() -> None:
    target = gate_target("reference")
    plan = build_plan(target, quick=True, evict_sizes=(200, 400))
    by_name = {case.name: case for case in plan.cases}
    work = by_name["match/branchy/1024/list"].make()
    assert work.run().length == 1024  # type: ignore[attr-defined]
    by_name["match/branchy/1024/uint32"].make()  # the same tree, reused
    first = by_name[first_evict_name(400)].make()
    assert first.rounds == cases.SMALL_EVICT_ROUNDS and first.cold is shapes.flush_caches
    large = build_plan(target, quick=True, evict_sizes=(200, cases.SMALL_EVICT_BLOCKS + 1))
    big = next(case for case in large.cases if case.name == first_evict_name(10_001))
    assert big.make().rounds == 3


@pytest.mark.parametrize("impl", ["reference", "accel"])
@pytest.mark.parametrize("policy", GROWTH_POLICIES)
def test_the_first_eviction_runs_under_every_policy(impl: str, policy: str) -> None:
    """R-POL-1: each policy's first-eviction workload fills a tree of that policy (the
    priority fill asking retention) and its timed call frees exactly the batch."""
    plan = build_plan(gate_target(impl), quick=True, evict_sizes=(200, 400))
    assert (first_evict_name(200, policy), first_evict_name(400, policy)) in plan.evict_keys
    work = {case.name: case for case in plan.cases}[first_evict_name(400, policy)].make()
    assert (work.rounds, work.warmups) == (cases.SMALL_EVICT_ROUNDS, cases.SMALL_EVICT_WARMUPS)
    assert work.setup is not None
    work.setup()
    assert len(work.run()) == 64  # type: ignore[arg-type]
    assert work.keep[0][0].policy == policy  # type: ignore[index]


def test_trees_are_rebuilt_for_a_shared_candidate() -> None:
    """One candidate object behind every tree (a module attribute) holds one tree at a time:
    each case built on it builds its own tree, where a target that makes a tree per call
    keeps one tree per shape for the run. Either way the case's workload runs on a tree
    that holds its shape (``match_workload`` checks the match length when it is built)."""
    for name, trees_for_two_cases in (("tests.gate.test_gate:SHARED", 2), ("reference", 1)):
        target = gate_target(name)
        built: list[Any] = []
        factory = target.factory

        def counting(
            num_blocks: int, block_size: int, factory: Any = factory, built: list[Any] = built
        ) -> Any:
            tree = factory(num_blocks, block_size)
            built.append(tree)
            return tree

        target.factory = counting
        plan = build_plan(target, quick=True, only="match/long_edge/1024")
        (case,) = plan.cases
        built.clear()  # the plan's own probe trees (memory support) are not the cases'
        first, second = case.make(), case.make()
        assert len(built) == trees_for_two_cases, name
        second.run()
        assert (first.keep[0] is second.keep[0]) == (trees_for_two_cases == 1)
        target.close()


# ---------------------------------------------------------------- verdicts


def _m(
    ns: float, calib: float = 10_000.0, kind: str = "cpu", unit: str = "call", sweep: int = 0
) -> Measurement:
    return Measurement(ns, calib, kind, 5, unit, sweep)


def _never() -> Workload:
    raise AssertionError("not built in a scripted run")


def _plan(with_memory: bool = True) -> Plan:
    cases_ = [
        Case("match/x", _never, "cpu"),
        Case(first_evict_name(1000), _never, "memory"),
        Case(first_evict_name(1_000_000), _never, "memory"),
    ]
    mem = [MemoryCase("memory/one_edge", lambda: None)] if with_memory else []
    keys = (first_evict_name(1000), first_evict_name(1_000_000))
    return Plan("t", "quick", cases_, mem, (keys,))


def _baseline() -> Baseline:
    return Baseline(
        "t",
        {
            "match/x": {"normalised": 0.1},
            first_evict_name(1000): {"normalised": 0.01},
            first_evict_name(1_000_000): {"normalised": 0.02},
            "memory/one_edge": {"value": 20.0},
        },
        {"match/x": {"max_ns": 1500.0}, "memory/one_edge": {"max": 64}},
    )


def _status(rows: list[verdicts.Verdict], figure: str) -> str:
    return next(row.status for row in rows if row.figure == figure)


def test_healthy_results_pass() -> None:
    results = {
        "match/x": [_m(1000)],
        first_evict_name(1000): [_m(100, unit="block")],
        first_evict_name(1_000_000): [_m(200, unit="block")],
    }
    rows = evaluate(results, {"memory/one_edge": 21.0}, _plan(), _baseline())
    assert {row.status for row in rows} == {PASS}
    growth = rows[0]
    assert growth.figure.startswith("eviction growth") and growth.value == "2.00x"


@pytest.mark.parametrize(
    ("figure", "results", "sizes"),
    [
        ("match/x", {"match/x": [_m(1400, calib=5000)]}, {}),  # 0.28 > 1.5 * 0.1
        ("match/x (limit)", {"match/x": [_m(1501, calib=100_000)]}, {}),
        ("eviction growth", {first_evict_name(1000): [_m(90)],
                             first_evict_name(1_000_000): [_m(300)]}, {}),
        ("memory/one_edge", {}, {"memory/one_edge": 22.1}),
        ("memory/one_edge (limit)", {}, {"memory/one_edge": 65.0}),
    ],
)  # fmt: skip
def test_each_check_fails_on_its_own(
    figure: str, results: dict[str, list[Measurement]], sizes: dict[str, float]
) -> None:
    baseline = _baseline()
    if figure == "memory/one_edge (limit)":
        baseline.cases["memory/one_edge"] = {"value": 60.0}
    rows = evaluate(results, sizes, _plan(), baseline)
    failed = [row.figure for row in rows if row.status == FAIL]
    assert len(failed) == 1 and failed[0].startswith(figure)


def test_the_limit_and_the_anchor_kind_of_a_baseline_entry() -> None:
    results = {"match/x": [_m(1400)]}  # 1.4x its baseline
    assert _status(evaluate(results, {}, _plan(False), _baseline()), "match/x") == PASS
    tight = evaluate(results, {}, _plan(False), _baseline(), max_ratio=1.3)
    assert _status(tight, "match/x") == FAIL
    other = _baseline()
    other.cases["match/x"]["calibration"] = "memory"  # recorded per another anchor kind
    row = next(v for v in evaluate(results, {}, _plan(False), other) if v.figure == "match/x")
    assert row.status == NEW and "per the memory anchor" in row.note


def test_the_machines_anchors_beside_the_baseline(tmp_path: Path) -> None:
    results = {"a": [_m(1, calib=100.0), _m(1, calib=300.0)], "b": [_m(1, 50.0, "memory")]}
    assert verdicts.anchor_times(results) == {"cpu": 200.0, "memory": 50.0}
    assert verdicts.machine_speed(results, Baseline()) == ""
    recorded = Baseline(anchors={"cpu": 100.0, "memory": 100.0})
    line = verdicts.machine_speed(results, recorded)
    assert line.endswith("cpu 2.00x, memory 0.50x")
    path = tmp_path / "b.json"
    save_baseline(path, _plan(False), {"match/x": [_m(1000, calib=200.0)]}, {}, {}, "c")
    assert load_baseline(path).anchors == {"cpu": 200.0}
    # A part of the plan (--only): its cases merged, the file's anchors and machine kept.
    part = {"match/x": [_m(900, calib=600.0)]}
    save_baseline(path, _plan(False), part, {}, {"cpu": "other"}, "c --only x", whole=False)
    kept = load_baseline(path)
    assert kept.anchors == {"cpu": 200.0} and kept.recorded_with == {"command": "c"}
    assert kept.cases["match/x"]["calibration_ns"] == 600.0
    updated = json.loads(path.read_text())["updated_with"]
    assert updated == {"command": "c --only x", "cpu": "other"}


def test_cases_without_a_baseline_are_new() -> None:
    results = {"match/x": [_m(1000)]}
    rows = evaluate(results, {"memory/one_edge": 5.0}, _plan(), Baseline())
    assert [row.status for row in rows] == [NEW, NEW]


def test_re_measure_keeps_the_better_figure() -> None:
    results = {"match/x": [_m(1800), _m(1200)]}
    rows = evaluate(results, {}, _plan(False), _baseline())
    row = next(row for row in rows if row.figure == "match/x")
    assert row.status == PASS and "re-measured" in row.note and "1.8 us" in row.note


def test_baseline_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    assert load_baseline(path, missing_ok=True).cases == {}  # --update-baseline starts one
    with pytest.raises(BaselineError, match="no such file"):
        load_baseline(path)  # a gate reading it must not pass on nothing (issue 32)
    path.write_text(json.dumps({"format": 2, "limits": {"match/x": {"max_ns": 9}}}))
    written = save_baseline(
        path, _plan(), {"match/x": [_m(2000), _m(1000)]}, {"memory/one_edge": 12.345},
        {"cpu": "test"}, "kachedb-radix gate t --update-baseline",
    )  # fmt: skip
    assert written == 2
    loaded = load_baseline(path)
    assert loaded.target == "t" and loaded.limits == {"match/x": {"max_ns": 9}}
    assert loaded.cases["match/x"]["normalised"] == 0.1
    assert loaded.cases["memory/one_edge"]["value"] == 12.35
    assert loaded.recorded_with["cpu"] == "test"
    path.write_text("{oops")
    with pytest.raises(BaselineError, match="not JSON"):
        load_baseline(path)
    path.write_text(json.dumps({"format": 1}))
    with pytest.raises(BaselineError, match="format 1"):
        load_baseline(path)
    path.write_text(json.dumps([1]))
    with pytest.raises(BaselineError, match="'list'"):
        load_baseline(path)


# ---------------------------------------------------------------- the run


class Scripted:
    """Measurements by case name, one per call (the last repeats)."""

    def __init__(self, scripts: dict[str, list[float]]) -> None:
        self.scripts = scripts
        self.calls: dict[str, int] = {}

    def __call__(self, case: Case) -> Measurement:
        n = self.calls.get(case.name, 0)
        self.calls[case.name] = n + 1
        script = self.scripts[case.name]
        return _m(script[min(n, len(script) - 1)], kind=case.calibration)


def test_a_failing_check_is_re_measured_once() -> None:
    plan = _plan(False)
    scripted = Scripted({
        "match/x": [1800, 1100],
        first_evict_name(1000): [100],
        first_evict_name(1_000_000): [400, 250],
    })  # fmt: skip
    lines: list[str] = []
    result = run_gate(plan, _baseline(), scripted, progress=lines.append)
    assert result.exit_code == 0 and sorted(result.remeasured) == sorted(
        ["match/x", first_evict_name(1000), first_evict_name(1_000_000)]
    )
    assert scripted.calls["match/x"] == 2 and any("re-measured" in line for line in lines)
    slow = Scripted({"match/x": [1800], first_evict_name(1000): [100],
                     first_evict_name(1_000_000): [200]})  # fmt: skip
    failed = run_gate(plan, _baseline(), slow)
    assert failed.exit_code == 1
    assert [v.figure for v in failed.failed] == ["match/x (limit)", "match/x"]
    assert "GATE FAILED" in run.summary(failed)


def test_memory_cases_are_measured_once() -> None:
    plan = _plan()
    scripted = Scripted({"match/x": [1000], first_evict_name(1000): [100],
                         first_evict_name(1_000_000): [200]})  # fmt: skip
    result = run_gate(plan, _baseline(), scripted, memory=lambda case: 20.5)
    assert result.memory == {"memory/one_edge": 20.5} and result.exit_code == 0
    assert run.measure_memory(MemoryCase("m", lambda: memory.one_edge(accel.RadixTree, "accel")))


def test_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    result = GateRun(_plan(False), {"match/x": [_m(1000)]}, {}, [], [])
    result.verdicts = evaluate(result.results, {}, result.plan, Baseline())
    text = run.render_plain(result.verdicts)
    assert text.splitlines()[0].startswith("figure") and "NEW" in text
    assert "without a baseline" in run.summary(result)
    assert "GATE GATED NOTHING (0 checks on 3 timed" in run.summary(result)  # issue 32
    data = run.to_json(result, run.machine())
    assert data["exit_code"] == 0 and data["results"]["match/x"][0]["median_ns"] == 1000
    assert set(run.machine()) >= {"cpu", "python", "load_average"}

    def no_proc(*args: Any, **kwargs: Any) -> Any:
        raise OSError("no /proc here")

    monkeypatch.setattr("builtins.open", no_proc)
    assert run.machine()["cpu"]
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "rich.table", None)
    assert run.render_rich(result.verdicts, "t") is None
    fake = types.ModuleType("rich.table")

    class Table:
        def __init__(self, title: str) -> None:
            self.rows: list[tuple[str, ...]] = []

        def add_column(self, name: str) -> None:
            return None

        def add_row(self, *cells: str) -> None:
            self.rows.append(cells)

    fake.Table = Table  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rich.table", fake)
    table = run.render_rich(result.verdicts, "t")
    assert table.rows[0][4] == "[cyan]NEW[/]"


def test_measure_case_interleaves_the_anchor_of_its_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def anchor() -> int:
        seen.append("memory")
        return 0

    monkeypatch.setitem(timing.CALIBRATION_WORK, "memory", anchor)
    policy = timing.Policy(budget_s=1e-5, min_rounds=3, max_rounds=3)
    got = run.measure_case(Case("c", lambda: Workload(lambda: None), "memory"), policy)
    assert len(seen) >= 3 and got.calibration == "memory" and got.calib_ns > 0
    assert got.ratio is not None and got.normalised == got.ratio


# ---------------------------------------------------------------- the command line


@pytest.fixture
def scripted_cli(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, float]]:
    """The CLI with every case measured at a scripted median (1 us unless set)."""
    medians: dict[str, float] = {}

    def measure(case: Case, policy: timing.Policy) -> Measurement:
        return _m(medians.get(case.name, 1000.0), kind=case.calibration)

    def fresh(words: object, quick: bool, names: list[str]) -> dict[str, Measurement]:
        raise FreshError("scripted: no fresh process")  # re-measured here, by ``measure``

    monkeypatch.setattr(gate_cli, "measure_case", measure)
    monkeypatch.setattr(gate_cli, "fresh_remeasure", fresh)
    yield medians


def test_cli_records_then_gates(scripted_cli: dict[str, float], tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    baseline = tmp_path / "baseline.json"
    args = ["gate", "reference", "--baseline", str(baseline), "--quick", "--only", "gpu-host"]
    assert cli_main([*args, "--update-baseline", "--plain"]) == 0
    recorded = json.loads(baseline.read_text())
    assert recorded["target"] == "reference" and "gpu-host/ids/list/16" in recorded["cases"]
    assert "--update-baseline --quick" in recorded["recorded_with"]["command"]
    out = tmp_path / "run.json"
    assert cli_main([*args, "--plain", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["exit_code"] == 0
    scripted_cli["gpu-host/ids/list/16"] = 5000.0
    assert cli_main([*args, "--plain"]) == 1
    assert "GATE FAILED" in capsys.readouterr().out
    # A limit that fails while recording: that case is re-measured once, then measured
    # once more like every other, not three times more.
    recorded["limits"] = {"gpu-host/ids/list/16": {"max_ns": 1}}
    baseline.write_text(json.dumps(recorded))
    assert cli_main([*args, "--update-baseline", "--plain"]) == 0
    assert "re-measured: 1" in capsys.readouterr().out


def test_cli_a_prior_run_counts_so_only_a_twice_failed_figure_fails(
    scripted_cli: dict[str, float], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline, first, second = tmp_path / "b.json", tmp_path / "1.json", tmp_path / "2.json"
    args = ["gate", "reference", "--baseline", str(baseline), "--quick", "--only", "gpu-host"]
    assert cli_main([*args, "--update-baseline", "--plain"]) == 0
    scripted_cli["gpu-host/ids/list/16"] = 5000.0  # a noisy minute on one case
    assert cli_main([*args, "--plain", "--json", str(first)]) == 1
    scripted_cli["gpu-host/ids/list/16"] = 1000.0
    scripted_cli["gpu-host/ids/numpy/4096"] = 5000.0  # and on another, the second time
    capsys.readouterr()
    assert cli_main([*args, "--plain", "--prior", str(first), "--json", str(second)]) == 0
    out = capsys.readouterr().out
    assert f"counting the measurements of {first}" in out and "GATE PASSED" in out
    scripted_cli["gpu-host/ids/list/16"] = 5000.0  # slow both times: a regression
    assert cli_main([*args, "--plain", "--prior", str(first)]) == 1
    assert "gpu-host/ids/list/16" in capsys.readouterr().out


def test_cli_several_prior_runs_count_and_a_baseline_takes_their_middle(
    scripted_cli: dict[str, float], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--prior`` repeated: each run counts (a figure fails only when it failed in every
    run), and ``--update-baseline`` records the middle over all of them -- the middle of
    the processes, not of one process's three passes."""
    baseline = tmp_path / "b.json"
    args = ["gate", "reference", "--baseline", str(baseline), "--quick", "--only", "gpu-host"]
    assert cli_main([*args, "--update-baseline", "--plain"]) == 0
    runs = [tmp_path / f"{index}.json" for index in range(3)]
    for run_file, cost in zip(runs, (5000.0, 3000.0, 4000.0), strict=True):
        scripted_cli["gpu-host/ids/list/16"] = cost  # three processes, each one slow
        cli_main([*args, "--plain", "--json", str(run_file)])
    priors = [word for run_file in runs for word in ("--prior", str(run_file))]
    capsys.readouterr()
    assert cli_main([*args, "--plain", *priors]) == 1  # slow in every run, and in this one
    out = capsys.readouterr().out
    assert all(f"counting the measurements of {run_file}" in out for run_file in runs)
    scripted_cli["gpu-host/ids/list/16"] = 1000.0  # this run is quick: the figure passes
    assert cli_main([*args, "--plain", *priors]) == 0
    scripted_cli["gpu-host/ids/list/16"] = 6000.0
    assert cli_main([*args, "--update-baseline", "--plain", *priors]) == 0
    recorded = json.loads(baseline.read_text())
    case = recorded["cases"]["gpu-host/ids/list/16"]
    # Each process measured the case twice (its failing check re-measured it) and this
    # run once (seven already: none added): 3000 3000 4000 4000 5000 5000 6000, middle 4000.
    assert case["median_ns"] == pytest.approx(4000.0)
    assert recorded["updated_with"]["command"].endswith(
        " --prior 0.json --prior 1.json --prior 2.json"
    )


def _scripted(cost: float, case: Case) -> Measurement:
    return _m(cost)


def test_a_failing_check_is_measured_again_by_the_remeasure_given() -> None:
    """``run_gate``'s second look goes through ``remeasure``, all the failing cases in one
    call (one pass), and only those; without it, through ``measure`` here."""
    plan = _anchored_plan()
    baseline = Baseline("t", limits={"evict/first/lfu/1000": {"max_ns": 1}})
    asked: list[list[str]] = []

    def again(found: Sequence[Case]) -> dict[str, Measurement]:
        asked.append([case.name for case in found])
        return {case.name: _m(300) for case in found}

    done = run_gate(plan, baseline, lambda case: _m(500), remeasure=again)
    assert asked == [["evict/first/lfu/1000"]] and done.remeasured == ["evict/first/lfu/1000"]
    assert [m.median_ns for m in done.results["evict/first/lfu/1000"]] == [500, 300]
    here = run_gate(plan, baseline, lambda case: _m(500))
    assert [m.median_ns for m in here.results["evict/first/lfu/1000"]] == [500, 500]


def test_the_fresh_process_measures_the_cases_asked_for() -> None:
    """A real child interpreter: the reference's quick plan, two cheap cases, one pass."""
    names = ["gpu-host/ids/list/16", "router/lookup/64x16"]
    found = gate_fresh.remeasure(TargetWords("reference", None, None), True, names)
    assert list(found) == names
    assert all(m.median_ns > 0 and m.calib_ns > 0 and m.rounds > 0 for m in found.values())
    lookup = found["router/lookup/64x16"]
    assert lookup.unit == "call" and lookup.calibration == "cpu"


def test_a_fresh_process_that_cannot_measure_says_why() -> None:
    words = TargetWords("reference", None, None)
    with pytest.raises(FreshError, match="exited 2: gate_fresh: no quick case named 'nope'"):
        gate_fresh.remeasure(words, True, ["nope"])
    with pytest.raises(FreshError, match=r"exited 2: gate_fresh: .*no_such_module"):
        gate_fresh.remeasure(TargetWords("no_such_module:Tree", None, None), True, ["x"])


@pytest.mark.parametrize(
    ("child", "error"),
    [
        ("timeout", "took over 120 s"),
        ("oserror", "did not start: no interpreter"),
        ("silent", "wrote no answer"),
        ("other", "did not answer for exactly the cases asked"),
        ("garbage", "is not a measurement"),
    ],
)
def test_a_fresh_process_that_answers_wrongly_is_no_measurement(
    monkeypatch: pytest.MonkeyPatch, child: str, error: str
) -> None:
    """Whatever the child does -- hang, fail to start, write nothing, answer for other
    cases or with something else -- the parent raises FreshError, never a traceback."""

    def run(command: list[str], **options: Any) -> subprocess.CompletedProcess[str]:
        if child == "timeout":
            raise subprocess.TimeoutExpired(command, options["timeout"])
        if child == "oserror":
            raise OSError("no interpreter")
        out = Path(command[command.index("--out") + 1])
        answers = {"other": {"y": vars(_m(1))}, "garbage": {"x": {"median_ns": -1}}}
        if child in answers:
            out.write_text(json.dumps(answers[child]))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", run)  # the child is never started
    with pytest.raises(FreshError, match=error):
        gate_fresh.remeasure(TargetWords(None, "prog --stdio", 3.0), False, ["x"])


def test_cli_says_when_it_measures_again_here(
    scripted_cli: dict[str, float], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fresh process that fails is no verdict: the gate measures in its own process
    and says so."""
    baseline = tmp_path / "b.json"
    args = ["gate", "reference", "--baseline", str(baseline), "--quick", "--only", "gpu-host"]
    assert cli_main([*args, "--update-baseline", "--plain"]) == 0
    scripted_cli["gpu-host/ids/list/16"] = 5000.0
    capsys.readouterr()
    assert cli_main([*args, "--plain"]) == 1
    out = capsys.readouterr().out
    assert "measuring gpu-host/ids/list/16 again, in a fresh process" in out
    assert "scripted: no fresh process: measuring again in this process instead" in out


def test_prior_runs_keep_their_passes_apart(tmp_path: Path) -> None:
    """Two runs, each with its pass 0, become passes 0 and 1, and this run's is 2: a
    pass stays one process's."""
    plan = _anchored_plan()
    files = []
    for index, cost in enumerate((450.0, 470.0)):
        done = run_gate(plan, Baseline("t"), functools.partial(_scripted, cost))
        path = tmp_path / f"{index}.json"
        path.write_text(json.dumps(to_json(done, {})))
        files.append(path)
    merged = load_priors(files, plan)
    assert [m.sweep for m in merged["evict/first/1000"]] == [0, 1]
    assert [m.median_ns for m in merged["evict/first/1000"]] == [450.0, 470.0]
    done = run_gate(plan, Baseline("t"), lambda case: _m(500), prior=merged)
    assert [m.sweep for m in done.results["evict/first/1000"]] == [0, 1, 2]


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (None, "cannot be read"),
        ("{", "not JSON"),
        ("[]", "not the --json file"),
        ('{"results": {}, "target": "accel", "mode": "quick"}', "target \"accel\""),
        ('{"results": {}, "target": "reference", "mode": "full"}', "mode \"full\""),
        ('{"results": {"x": [{"oops": 1}]}, "target": "reference", "mode": "quick"}',
         "not one"),
    ],
)  # fmt: skip
def test_cli_refuses_a_prior_run_it_cannot_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, error: str
) -> None:
    prior = tmp_path / "prior.json"
    if content is not None:
        prior.write_text(content)
    baseline = tmp_path / "b.json"
    baseline.write_text(json.dumps({"format": 2}))
    argv = ["reference", "--baseline", str(baseline), "--quick", "--only", "gpu-host"]
    if content is None:  # refused while parsing, before anything runs
        with pytest.raises(SystemExit) as stop:
            gate_cli.main([*argv, "--prior", str(prior)])
        assert stop.value.code == 2 and "no such file" in capsys.readouterr().err
        return
    assert gate_cli.main([*argv, "--prior", str(prior)]) == 2
    assert error in capsys.readouterr().err


def test_a_baseline_records_the_middle_of_three_measurements(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    # The second one's calibration loop was slowed by a noisy minute: it has the lowest
    # normalised figure, and keeping the lowest would keep it.
    measured = [_m(1000), _m(1000, calib=20_000), _m(1100)]
    save_baseline(path, _plan(False), {"match/x": measured}, {}, {"cpu": "t"}, "c")
    recorded = load_baseline(path).cases["match/x"]
    assert recorded["calibration_ns"] == 10_000 and recorded["normalised"] == 0.1


def test_cli_prints_with_rich_when_it_can(
    scripted_cli: dict[str, float], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    printed: list[Any] = []
    console = types.ModuleType("rich.console")

    class Console:
        def __init__(self, width: int) -> None:
            return None

        def print(self, table: Any) -> None:
            printed.append(table)

    console.Console = Console  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rich.console", console)
    monkeypatch.setattr(run, "render_rich", lambda verdicts, title: "a table")
    monkeypatch.setattr(gate_cli, "render_rich", lambda verdicts, title: "a table")
    baseline = tmp_path / "b.json"
    argv = ["reference", "--baseline", str(baseline), "--only", "gpu-host/ids/list"]
    assert gate_cli.main([*argv, "--update-baseline"]) == 0
    assert gate_cli.main(argv) == 0
    assert printed == ["a table", "a table"]


def test_cli_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "b.json"
    assert gate_cli.main(["--baseline", str(good)]) == 2
    assert gate_cli.main(["reference", "--cmd", "x", "--baseline", str(good)]) == 2
    assert gate_cli.main(["no.such.module:Tree", "--baseline", str(good)]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text("[")
    assert gate_cli.main(["reference", "--baseline", str(bad)]) == 2
    assert "not JSON" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gate_cli.main(["reference", "--baseline", str(good), "--max-ratio", "1"])
    assert "must be above 1" in capsys.readouterr().err


def test_cli_notes_a_baseline_of_another_target(
    scripted_cli: dict[str, float], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = tmp_path / "b.json"
    baseline.write_text(json.dumps({"format": 2, "target": "accel", "cases": {}}))
    gate_cli.main(["reference", "--baseline", str(baseline), "--only", "gpu-host/ids/list"])
    assert "recorded for 'accel'" in capsys.readouterr().out
    serve = f"{sys.executable} -m kachedb_radix.spec.protocol.server"
    gate_cli.main(["--cmd", serve, "--baseline", str(baseline),
                   "--only", "insert/fresh", "--update-baseline"])  # fmt: skip
    assert "--cmd" in json.loads(baseline.read_text())["recorded_with"]["command"]


def test_module_docs_name_every_check() -> None:
    assert "MAX_EVICT_GROWTH" in (verdicts.__doc__ or "")
    assert cases.MAX_EVICT_GROWTH == 3.0


def test_a_baseline_s_anchors_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    for anchors, error in (([1], "anchors must be an object"), ({"cpu": 0}, "anchors.cpu")):
        path.write_text(json.dumps({"format": 2, "anchors": anchors}))
        with pytest.raises(BaselineError, match=error):
            load_baseline(path)
    for twin in ("accel", "reference"):  # the committed baselines record theirs
        committed = load_baseline(Path(__file__).parents[2] / f"benchmarks/baseline-{twin}.json")
        assert set(committed.anchors) == set(timing.CALIBRATIONS)
