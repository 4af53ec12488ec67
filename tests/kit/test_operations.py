"""The table of operations is the one source: the Candidate protocol, the adapter, the
forwarding shim, the protocol's messages and schema, the trace steps and the server all
agree with it, name for name and argument for argument."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from kachedb_radix import reference
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.candidate import Candidate
from kachedb_radix.spec.conform.operations import (
    BY_NAME,
    OPERATIONS,
    REQUIRED,
    Forwarding,
    offered,
    operation,
    operations_of,
    required_of,
)
from kachedb_radix.spec.conform.steps import (
    OPS,
    READ_OPS,
    SNAPSHOT_OPS,
    LeaseBook,
    StepError,
    apply_step,
)
from kachedb_radix.spec.protocol.messages import ANSWER_FIELDS, REQUEST_FIELDS, load_schema
from kachedb_radix.spec.protocol.timeout import TimedCandidate


def _parameters(function: Any) -> list[str]:
    return [name for name in inspect.signature(function).parameters if name != "self"]


@pytest.mark.parametrize("implementation", [Candidate, TreeAdapter, Forwarding])
def test_every_implementation_of_the_protocol_has_the_tables_methods(implementation: Any) -> None:
    """Each operation is a method of the Candidate protocol, of the adapter and of the
    forwarding shim, taking exactly the table's arguments in the table's order."""
    for op in OPERATIONS:
        method = getattr(implementation, op.name)
        assert _parameters(method) == [argument.name for argument in op.arguments], op.name


def test_the_protocol_reads_its_messages_from_the_table() -> None:
    schema = load_schema()["$defs"]
    assert set(REQUEST_FIELDS) == set(BY_NAME) | {"hello"}
    assert set(schema["traceStep"]["properties"]["op"]["enum"]) == set(BY_NAME) == set(OPS)
    for op in OPERATIONS:
        assert REQUEST_FIELDS[op.name] == {a.name: a.wire for a in op.arguments}
        assert ANSWER_FIELDS[op.name] == op.answer
        answer = schema["answers"][op.name]
        if op.answer is None:
            assert answer == {"type": "null"}, op.name
        else:
            assert set(op.answer) <= set(answer["required"]), op.name
    listed = schema["answers"]["hello"]["properties"]["operations"]["items"]["enum"]
    assert listed == [op.name for op in OPERATIONS]


def test_levels_versions_and_handles() -> None:
    """What each level and version offers, what it cannot be judged without, the reads,
    and the handles a step names: all read off the table."""
    assert {op.name for op in OPERATIONS if op.level == "snapshots"} == SNAPSHOT_OPS
    assert set(READ_OPS) == {op.name for op in OPERATIONS if op.reads and op.level == "core"}
    core = frozenset({"core", "pinning", "eviction", "namespaces"})
    everything = core | {"snapshots"}
    tier_ops = {op.name for op in OPERATIONS if op.level == "tiers"}
    assert tier_ops == {"lookup", "restore", "tier_evict"}
    clear = {"reset_prefix_cache"}  # protocol 7, optional, at the eviction level
    no_events = set(OPS) - {"events"} - tier_ops - clear
    assert operations_of(core, 3) == operations_of(core, 1) == no_events - SNAPSHOT_OPS
    assert operations_of(core, 7) == no_events - SNAPSHOT_OPS | clear
    assert required_of(core | {"events", "tiers"}) == set(OPS) - SNAPSHOT_OPS - clear
    assert operations_of(everything, 2) == no_events - {"drop"}
    assert operations_of(everything, 3) == no_events
    assert required_of(everything) == no_events - {"drop"}
    assert operations_of(everything | {"events"}, 4) == no_events  # events: protocol 5
    assert operations_of(everything | {"events"}, 5) == set(OPS) - tier_ops - clear
    assert operations_of(everything | {"events", "tiers"}, 5) == set(OPS) - tier_ops - clear
    assert operations_of(everything | {"events", "tiers"}, 6) == set(OPS) - clear  # tiers: 6
    assert operations_of(everything | {"events", "tiers"}, 7) == set(OPS)
    issuing = {op.name for op in OPERATIONS if op.issues}
    assert issuing == {"match", "insert", "snapshot", "reader", "lookup", "restore"}
    handles = {a.name: a.handle for op in OPERATIONS for a in op.arguments if a.handle}
    assert handles == {"lease": "lease", "snapshot": "snapshot"}
    with pytest.raises(ValueError, match="unknown operation 'fly'"):
        operation("fly")


def test_a_step_is_applied_by_its_row() -> None:
    """Defaults fill what a step leaves out; handles become the candidate's ids; issued
    ids become handles; a missing required argument or an unknown op is a StepError
    (a ValueError: the trace is malformed, not the candidate)."""
    adapter, book = TreeAdapter(reference.RadixTree, "r"), LeaseBook()
    assert apply_step(adapter, {"op": "reset", "num_blocks": 4, "block_size": 1}, book) == {
        "ok": None
    }
    inserted = apply_step(adapter, {"op": "insert", "tokens": [1, 2], "pin": 1}, book)
    assert inserted["ok"]["lease"] == 1 and adapter.stats()["pinned"] == 2
    assert apply_step(adapter, {"op": "release", "lease": 1}, book) == {"ok": None}
    assert apply_step(adapter, {"op": "release", "lease": 1}, book) == {"error": "lease_released"}
    taken = apply_step(adapter, {"op": "reader"}, book)["ok"]["snapshot"]
    assert apply_step(adapter, {"op": "leave", "snapshot": taken}, book) == {"ok": None}
    with pytest.raises(StepError, match="evict lacks count"):
        apply_step(adapter, {"op": "evict"}, book)
    with pytest.raises(ValueError):
        apply_step(adapter, {"op": "fly"}, book)
    reset = BY_NAME["reset"].arguments
    assert all(a.default is REQUIRED for a in reset if a.since < 4)
    assert [(a.name, a.default) for a in reset if a.since >= 4] == [
        ("policy", "lru"),
        ("policy_options", None),
        ("events", None),
        ("tiers", None),
    ]


def test_wrappers_forward_every_operation_and_the_capabilities() -> None:
    """The time-limit wrapper forwards each operation of the table (one mechanism, no
    hand-written list to forget one in) and what the candidate offers."""
    calls: list[tuple[str, tuple[Any, ...]]] = []

    class Recorder(TreeAdapter):
        def __getattribute__(self, name: str) -> Any:
            found = super().__getattribute__(name)
            if name in BY_NAME and callable(found):

                def recorded(*args: Any) -> Any:
                    calls.append((name, args))
                    return found(*args)

                return recorded
            return found

    inner = Recorder(reference.RadixTree, "r", tier_factory=reference.TieredTree)
    timed = TimedCandidate(inner, 5.0)
    assert offered(timed) == offered(inner) == set(OPS)
    book = LeaseBook()
    for step in (
        {"op": "reset", "num_blocks": 4, "block_size": 1, "events": {"scheme": "xxh3_64"}},
        {"op": "insert", "tokens": [1], "namespace": "t"},
        {"op": "match", "tokens": [1], "namespace": "t", "pin": True},
        {"op": "release", "lease": 1},
        {"op": "evict", "count": 1},
        {"op": "stats"},
        {"op": "namespaces"},
        {"op": "dump"},
        {"op": "snapshot"},
        {"op": "reader"},
        {"op": "snapshot_match", "snapshot": 1, "tokens": [1]},
        {"op": "snapshot_dump", "snapshot": 1},
        {"op": "leave", "snapshot": 2},
        {"op": "reclaim"},
        {"op": "reader"},
        {"op": "drop", "snapshot": 3},
        {"op": "events"},
        {"op": "reset_prefix_cache"},
        {"op": "reset", "num_blocks": 4, "block_size": 1, "tiers": {"host": 2}},
        {"op": "insert", "tokens": [1], "namespace": "t"},
        {"op": "lookup", "tokens": [1], "namespace": "t"},
        {"op": "tier_evict", "count": 1, "tier": "device"},
        {"op": "restore", "tokens": [1], "namespace": "t"},
    ):
        apply_step(timed, step, book)
    assert {name for name, _ in calls} == set(OPS) and len(calls) == len(OPS) + 3
    assert calls[2] == ("match", ([1], "t", True))
    core = TreeAdapter(reference.RadixTree, "core", frozenset({"core"}))
    tier_ops = {op.name for op in OPERATIONS if op.level == "tiers"}
    # core alone: no clear (the eviction level's); a tree class without it does not offer it
    clear = {"reset_prefix_cache"}
    assert offered(core) == set(OPS) - SNAPSHOT_OPS - {"events"} - tier_ops - clear
    plain = type("Plain", (), {"levels": frozenset({"core", "snapshots"})})()
    every = {op.name for op in OPERATIONS if op.level in ("core", "snapshots")}
    assert offered(plain) == every  # every operation of its levels
    legacy = TreeAdapter(type("Legacy", (reference.RadixTree,), {"reset_prefix_cache": None}), "l")
    assert "reset_prefix_cache" not in offered(legacy) and "drop" in offered(legacy)
