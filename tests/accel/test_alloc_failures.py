"""The C twin under allocation failure: every call, its k-th allocation failing, for every k.

``_testcapi.set_nomemory(k, k + 1)`` makes exactly the (k+1)-th allocation through
CPython's allocators fail (PyMem_*, PyObject_*, raw: the extension uses only those). For
each call below, on a fresh state every time, k runs from 0 up to the call's last
allocation (found by an allocation right after the call: when that one is the failing
one, the call made k allocations and the sweep is done). Each run must end one of two
ways:

* ``MemoryError``, and the state exactly as before: the dump, stats, version, namespaces,
  every snapshot held, and ``check_invariants()`` (R-ERR-2: a failed call changes
  nothing);
* success, with the very result and state a run without any failure gives: a failure the
  call absorbs (mirroring a change into the published shape drops it, to be rebuilt by
  the next call that needs it) must not show.

After each run the published shape must equal the writer's (a snapshot's dump against
the tree's), so a shape dropped by a failure is rebuilt correctly.

Every tree has a fixed hash seed, so two fresh states are alike down to their tries'
shapes (``memory_bytes`` sees those). The states cover the layouts the C code has paths
for: children in a sorted array and in a hash trie (past 15), crafted hash collisions
(seed 0), a live snapshot (path copying), readers inside (quarantine), a dropped
published shape, a full pool (eviction inside an insert), a clone sharing the shape.
"""

from __future__ import annotations

import array
import gc
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from kachedb_radix import reference

if os.environ.get("KACHEDB_RADIX_PURE") == "1":
    pytest.skip("KACHEDB_RADIX_PURE=1: the C twin is not under test", allow_module_level=True)

import kachedb_radix.accel._radix as radix
from kachedb_radix import accel
from tests.support.twins import describe

_testcapi = pytest.importorskip(
    "_testcapi", reason="CPython's _testcapi (set_nomemory) is not installed with this Python"
)
if not hasattr(_testcapi, "set_nomemory"):  # pragma: no cover - every CPython 3.11-3.13 has it
    pytest.skip("_testcapi has no set_nomemory", allow_module_level=True)

#: The most allocations one call may make before the sweep gives up (a runaway guard).
LIMIT = 4000

#: More than CPython's free lists of lists and dicts hold (80 each in 3.11-3.13).
FREE_LIST = 100

#: A call as (function, positional arguments, keyword arguments), all made beforehand.
Spec = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]


@dataclass
class State:
    """A tree and what the test holds on it: snapshots (their dumps must not change),
    leases, readers, and anything else the call needs."""

    tree: Any
    snapshots: list[Any] = field(default_factory=list)
    held: dict[str, Any] = field(default_factory=dict)


def observe(state: State) -> Any:
    """Everything observable that no call below may change when it fails. Reads only:
    nothing here rebuilds a dropped published shape."""
    tree = state.tree
    return (
        tree.dump(),
        tree.stats(),
        tree.version,
        tree.clock,
        tree.namespaces(),
        [snap.dump() for snap in state.snapshots],
        # The event batches a take would return now, read from a clone (a clone copies
        # the log and the recorder; taking from the tree itself would change it).
        None if tree.events is None else tree.clone().take_events(),
    )


def view(value: Any) -> Any:
    """A call's result as comparable data."""
    if isinstance(value, (radix.MatchResult, radix.InsertResult)) or value is None:
        return describe(value)
    if isinstance(value, radix.Reader):
        return ("reader", value.epoch, value.dump())
    if isinstance(value, radix.Snapshot):
        return ("snapshot", value.dump())
    if isinstance(value, (radix.RadixTree, reference.RadixTree)):
        return ("tree", value.dump(), value.stats())
    if isinstance(value, (accel.BlockAllocator, reference.BlockAllocator)):
        return ("allocator", value.free_ids(), value.free_count)
    if isinstance(value, radix.Blocks):
        return ("blocks", tuple(value))
    if isinstance(value, radix.Lease):
        return ("lease", value.id, value.released, tuple(value.blocks))
    if isinstance(value, Iterator):
        return ("iterator", list(value))
    if isinstance(value, list):  # a dump's parts, namespaces, gc referents
        return [view(item) for item in value]
    return value


def shape(dump: dict[str, Any]) -> Any:
    """A tree dump's edges without the writer's bookkeeping: a snapshot dump's shape."""

    def edge(node: dict[str, Any]) -> Any:
        return (node["tokens"], node["blocks"], [edge(child) for child in node["children"]])

    return [
        (space["namespace"], [edge(child) for child in space["children"]])
        for space in dump["namespaces"]
    ]


def attempt(k: int, spec: Spec) -> tuple[str, Any, bool]:
    """Call ``fn(*args, **kwargs)`` with the (k+1)-th allocation failing: (outcome,
    value, done), done when the failing allocation came after the call (it made at most
    k): then up to k+1 allocations after it meet the failure. (How many allocations a
    call makes varies by one or two with CPython's free lists, so the end is found this
    way, not by counting.)

    The C function is called right here, from a frame whose frame object (and its
    caller's) already exists: CPython 3.11 drops a pending exception when it fails to
    allocate a caller's frame object while unwinding (frame.c, take_ownership), which
    would look like a call returning NULL without an exception. No Python frame lies
    between this one and the C code under test."""
    fn, args, kwargs = spec
    probes = [None] * (k + 1)
    # CPython keeps freed lists and dicts for reuse: with its free lists emptied first,
    # every list and dict the call makes is an allocation that can fail.
    drained: Any = ([[] for _ in range(FREE_LIST)], [{} for _ in range(FREE_LIST)])
    sys._getframe(1)  # both frame objects made before the window
    _testcapi.set_nomemory(k, k + 1)
    try:
        try:
            value = fn(*args, **kwargs) if kwargs else fn(*args)
        except reference.RadixError as error:
            value = ("error", type(error))  # a refusal (R-ERR-1) is the call's result
        except MemoryError:
            return "MemoryError", None, False
        try:
            for _ in probes:  # allocations after the call: one of them fails if it made <= k
                object()
        except MemoryError:
            return "ok", value, True
        return "ok", value, False
    finally:
        _testcapi.remove_mem_hooks()
        del drained


def check_published(state: State) -> None:
    """The published shape (rebuilt here if a failure dropped it) equals the writer's."""
    tree = state.tree
    tree.check_invariants()
    if isinstance(tree, radix.RadixTree):
        assert shape(tree.snapshot().dump()) == shape(tree.dump())
        tree.check_invariants()


def sweep(make: Callable[[], State], call: Call) -> dict[str, int]:
    """Fail each allocation of ``call`` in turn (see the module docstring); returns how
    many runs ended each way."""
    expected_state = make()
    outcome, value, _ = attempt(LIMIT * 10, call(expected_state))  # no failure reached
    assert outcome == "ok"
    expected_value = view(value)
    expected_after = observe(expected_state)
    counts = {"MemoryError": 0, "absorbed": 0}
    was_enabled = gc.isenabled()
    gc.disable()  # a collection inside the window would spend the failure elsewhere
    try:
        for k in range(LIMIT):
            state = make()
            spec = call(state)  # may change the state (a lease to release): before observing
            before = observe(state)
            outcome, value, done = attempt(k, spec)
            if outcome == "MemoryError":
                assert observe(state) == before, f"allocation {k}: a failed call changed the state"
                counts["MemoryError"] += 1
            else:
                assert view(value) == expected_value, f"allocation {k}: another result"
                assert observe(state) == expected_after, f"allocation {k}: another state"
                counts["absorbed"] += not done
            del value
            check_published(state)
            if done:
                return counts
    finally:
        if was_enabled:
            gc.enable()
    raise AssertionError(f"the call made more than {LIMIT} allocations")


# ---------------------------------------------------------------------------- states


def blocks(*values: int, size: int = 2) -> list[int]:
    return [value for value in values for _ in range(size)]


def small() -> State:
    """Two namespaces, a branch, a lease, free blocks."""
    tree = accel.RadixTree(40, 2, _hash_seed=1)
    tree.insert(blocks(1, 2, 3, 4))
    tree.insert(blocks(1, 2, 5))
    lease = tree.insert(blocks(7, 8), "ns", pin=True).lease
    tree.insert(blocks(9), "other")
    return State(tree, held={"lease": lease})


def with_snapshot() -> State:
    """A live snapshot and a reader inside: changes path-copy, evictions quarantine."""
    state = small()
    state.snapshots.append(state.tree.snapshot())
    state.held["reader"] = state.tree.reader()
    state.snapshots.append(state.held["reader"])
    state.tree.evict(1)  # one batch in quarantine
    return state


def wide(snapshot: bool, children: int = 20) -> Callable[[], State]:
    """A root with ``children`` children (a hash trie past 15), a deep chain beside."""

    def make() -> State:
        tree = accel.RadixTree(200, 2, _hash_seed=1)
        for first in range(children):
            tree.insert(blocks(first + 100, 1, 2))
        lease = tree.insert(blocks(5, 6, 7, 8, 9), pin=True).lease
        state = State(tree, held={"lease": lease})
        if snapshot:
            state.snapshots.append(tree.snapshot())
        return state

    return make


def colliding(snapshot: bool) -> Callable[[], State]:
    """Siblings whose first blocks all hash alike (seed 0): a trie collision list."""
    keys = radix._hash_keys(0, 2)
    zero = (-keys[0]) % 2**32

    def make() -> State:
        tree = accel.RadixTree(80, 2, _hash_seed=0)
        for i in range(20):
            tree.insert([zero, i, 3, 3])
        lease = tree.insert([1, 1, 2, 2], pin=True).lease
        state = State(tree, held={"zero": zero, "lease": lease})
        if snapshot:
            state.snapshots.append(tree.snapshot())
        return state

    return make


def dropped() -> State:
    """The published shape dropped (as by an earlier failure): the next call rebuilds."""
    state = wide(snapshot=False)()
    state.tree._drop_published()
    return state


def full(readers: bool) -> Callable[[], State]:
    """A full pool: an insert must evict (or, with a reader inside, reclaim)."""

    def make() -> State:
        tree = accel.RadixTree(8, 2, _hash_seed=1)
        tree.insert(blocks(1, 2, 3))
        tree.insert(blocks(1, 4, 5))
        lease = tree.insert(blocks(6, 7), pin=True).lease
        state = State(tree, held={"lease": lease})
        if readers:
            reader = tree.reader()
            tree.evict(2)
            reader.leave()
            state.held["reader"] = tree.reader()  # a later reader: the batch is reclaimable
        return state

    return make


def with_events() -> State:
    """A tree emitting KV events, some batches taken, some encoded and not yet taken, a
    full pool and a lease: inserts evict and encode both; a take hands what is pending
    over. ``scheme``: Dynamo's XXH3 or vLLM's default SHA-256 over CBOR, in a named
    namespace (hashed and encoded in C either way)."""
    return _with_events("xxh3_64")


def _with_events(scheme: str) -> State:
    tree = accel.RadixTree(12, 2, _hash_seed=1, events=reference.events.BlockHasher(scheme))
    tree.insert(blocks(1, 2, 3))
    tree.insert(blocks(1, 4, 5), "ns")
    tree.take_events()
    lease = tree.insert(blocks(7, 8), pin=True).lease
    tree.insert(blocks(1, 2, 6, 9))
    tree.evict(1)
    return State(tree, held={"lease": lease})


def cloned() -> State:
    """A clone sharing the shape (each tree then path-copies what the other can reach)."""
    state = with_snapshot()
    state.held["clone"] = state.tree.clone()
    return state


def big() -> State:
    """Over 256 nodes (node indices and ids are no longer cached small ints), the node
    arrays one insert short of growing, more than 8 leases (a clone copies them in
    batches), a reader inside with epochs past 256 and a reclaimable quarantine of ids
    past 256."""
    tree = accel.RadixTree(1200, 1, _hash_seed=1)
    for _ in range(300):
        tree.reader().leave()  # epochs past 256
    leases = [tree.insert([i, 1], pin=True).lease for i in range(10)]
    for i in range(10, BIG_CHILDREN):
        tree.insert([i, i])
    early = tree.reader()
    tree.evict(320)  # ids past 256 into the quarantine
    early.leave()
    state = State(tree, held={"lease": leases[0], "leases": leases})
    state.held["reader"] = tree.reader()
    return state


def no_free_records() -> State:
    """Over 256 nodes and no free node record, no namespace but the default one: a new
    namespace's root gets a fresh index past 256 and the registry its first entry."""
    tree = accel.RadixTree(800, 1, _hash_seed=1)
    for i in range(300):
        tree.insert([i, i])
    return State(tree, held={"lease": tree.insert([5000], pin=True).lease})


def quarantine_full() -> State:
    """A reader inside and the quarantine's arrays full: the next eviction grows them."""
    tree = accel.RadixTree(300, 1, _hash_seed=1)
    lease = tree.insert([7777], pin=True).lease
    for i in range(100):
        tree.insert([i, i + 1000])
    state = State(tree, held={"reader": tree.reader(), "lease": lease})
    for _ in range(8):
        tree.evict(8)  # 8 batches, 64 ids: both arrays exactly full
    for _ in range(300):
        tree.match([])  # the reader is 300 versions old
    return state


def counted() -> State:
    """One cached block whose id, token, pin count and stamp are all past 256 (no cached
    small int for any of them), and a free list of ids past 256: every int a dump or a
    snapshot dump makes is an allocation."""
    tree = accel.RadixTree(400, 1, _hash_seed=1)
    for i in range(260):
        tree.insert([1000 + i])
    tree.evict(259)  # the newest, block 259, stays
    leases = [tree.match([1259], pin=True).lease for _ in range(300)]
    state = State(tree, held={"leases": leases, "lease": leases[0]})
    state.snapshots.append(tree.snapshot())
    state.held["snap"] = state.snapshots[0]
    return state


def _big_children() -> int:
    """How many children the big state's root gets: past 256 nodes, up to where the next
    insert must grow the node arrays (each call reserves 3 records; a record is 36 bytes
    of ``memory_bytes()["nodes"]``; the root is one too)."""
    tree = accel.RadixTree(1200, 1)
    for i in range(600):
        tree.insert([i, i])
        used = tree.memory_bytes()
        if i > 300 and used["live_nodes"] + 1 + 3 > used["nodes"] // 36:
            return i + 1
    raise AssertionError("the node arrays never filled up")


BIG_CHILDREN = _big_children()

STATES: dict[str, Callable[[], State]] = {
    "small": small,
    "snapshot": with_snapshot,
    "wide": wide(snapshot=False),
    "wide_snapshot": wide(snapshot=True),
    "trie_edge": wide(snapshot=True, children=16),
    "colliding": colliding(snapshot=False),
    "colliding_snapshot": colliding(snapshot=True),
    "dropped": dropped,
    "full": full(readers=False),
    "full_readers": full(readers=True),
    "cloned": cloned,
    "big": big,
    "quarantine_full": quarantine_full,
    "counted": counted,
    "no_free_records": no_free_records,
    "events": with_events,
    "events_cbor": lambda: _with_events("sha256_cbor"),
}

# ---------------------------------------------------------------------------- calls

#: A call on a state: the function (a C method, mostly) and its arguments.
Call = Callable[[State], Spec]


def c(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Spec:
    return (fn, args, kwargs)


#: Writer calls, run on every state.
WRITER_CALLS: dict[str, Call] = {
    "insert_new_namespace": lambda s: c(s.tree.insert, blocks(3, 3, 3), "new", pin=True),
    "insert_split": lambda s: c(s.tree.insert, blocks(1, 2, 6, 6)),
    "insert_extend": lambda s: c(s.tree.insert, blocks(1, 2, 3, 4, 5, 6)),
    "insert_branch_in_trie": lambda s: c(s.tree.insert, blocks(150, 1, 3)),
    "insert_split_in_trie": lambda s: c(s.tree.insert, blocks(101, 1, 9)),
    "insert_i64": lambda s: c(s.tree.insert, np.array(blocks(1, 2, 3, 4, 11), dtype=np.int64)),
    "insert_too_big": lambda s: c(s.tree.insert, list(range(700))),
    "insert_long_misaligned": lambda s: c(
        s.tree.insert,
        memoryview(bytes(1) + np.arange(600, dtype=np.uint32).tobytes())[1:].cast("I"),
    ),
    "match_long": lambda s: c(s.tree.match, np.arange(2000, 3000, dtype=np.int64), "ns"),
    "match_pin": lambda s: c(s.tree.match, blocks(1, 2, 3, 4), pin=True),
    "match_str_subclass": lambda s: c(s.tree.match, blocks(7, 8), Name("ns")),
    "match_misaligned": lambda s: c(
        s.tree.match,
        memoryview(bytes(1) + np.array(blocks(1, 2), dtype=np.uint32).tobytes())[1:].cast("I"),
    ),
    "evict_one": lambda s: c(s.tree.evict, 1),
    "evict_many": lambda s: c(s.tree.evict, 30),
    "evict_most": lambda s: c(s.tree.evict, 150),
    "reclaim": lambda s: c(s.tree.reclaim),
    "snapshot": lambda s: c(s.tree.snapshot),
    "reader": lambda s: c(s.tree.reader),
    "clone": lambda s: c(s.tree.clone),
    "stats": lambda s: c(s.tree.stats),
    "namespaces": lambda s: c(s.tree.namespaces),
    "dump": lambda s: c(s.tree.dump),
    "render": lambda s: c(s.tree.render),
    "check_invariants": lambda s: c(s.tree.check_invariants),
    "memory_bytes": lambda s: c(s.tree.memory_bytes),
}


class Name(str):
    """A str subclass: the C twin stores an exact str copy of it."""


def _release(state: State) -> Spec:
    return c(state.tree.release, state.held["lease"])


def _colliding_insert(state: State) -> Spec:
    zero = state.held["zero"]
    return c(state.tree.insert, [zero, 99, 4, 4])


def _colliding_split(state: State) -> Spec:
    zero = state.held["zero"]
    return c(state.tree.insert, [zero, 5, 8, 8])


WRITER_CALLS["release"] = _release

#: Calls for one state only.
SPECIAL_CALLS: list[tuple[str, str, Call]] = [
    ("colliding", "collide_insert", _colliding_insert),
    ("colliding_snapshot", "collide_insert", _colliding_insert),
    ("colliding", "collide_split", _colliding_split),
    ("colliding_snapshot", "collide_split", _colliding_split),
    ("colliding", "collide_evict", lambda s: c(s.tree.evict, 25)),
    ("colliding_snapshot", "collide_evict", lambda s: c(s.tree.evict, 25)),
    ("trie_edge", "back_to_array", lambda s: c(s.tree.evict, 6)),
    ("wide_snapshot", "back_to_array", lambda s: c(s.tree.evict, 10)),
    ("trie_edge", "to_trie", lambda s: c(s.tree.insert, blocks(130, 1))),
    ("events", "take_events", lambda s: c(s.tree.take_events)),
    ("events", "take_event_payloads", lambda s: c(s.tree.take_event_payloads)),
    ("events_cbor", "take_event_payloads", lambda s: c(s.tree.take_event_payloads)),
    ("events_cbor", "insert_named", lambda s: c(s.tree.insert, blocks(1, 4, 5, 9), "ns")),
]


#: The calls the big states are swept with: those whose arrays they make grow (a dump of
#: them would sweep thousands of allocations for nothing new).
GROWTH_CALLS = {
    "insert_new_namespace",
    "insert_split",
    "insert_extend",
    "evict_one",
    "evict_most",
    "reclaim",
    "reader",
    "stats",
    "clone",
    "release",
}
BIG_STATES = {"big", "quarantine_full", "no_free_records"}
#: States swept with their special calls only.
SPECIAL_STATES = {"events_cbor"}
#: The calls the counted state is swept with: those that box its large ints.
COUNTED_CALLS = {"dump", "stats", "namespaces", "reclaim", "release", "memory_bytes"}


#: Whether this CPython survives an allocation failing in plain Python code. 3.13.0 does
#: not: it segfaults inside the reference's own ``EventRecorder.check`` (pure Python, no
#: C code of ours loaded) when ``_testcapi.set_nomemory`` fails one of its allocations,
#: and after a survived failure it can call a method with its ``self`` twice.
SURVIVES_FAILING_PYTHON = sys.version_info < (3, 12)

#: Calls whose window is mostly plain Python: render() is dump() (swept on every state)
#: then the reference's render_dump; take_events() decodes the encoded batches with the
#: reference's decode_batch. Swept only where CPython survives a failure there (render on
#: one state).
PYTHON_INSIDE = {("small", "render"), ("events", "take_events")}


def case_ids() -> list[tuple[str, str]]:
    cases = [
        (state, call)
        for state in STATES
        for call in WRITER_CALLS
        if state not in SPECIAL_STATES
        and (state not in BIG_STATES or call in GROWTH_CALLS)
        and (state != "counted" or call in COUNTED_CALLS)
        and (call != "render" or state == "small")
    ] + [(state, call) for state, call, _ in SPECIAL_CALLS]
    if SURVIVES_FAILING_PYTHON:
        return cases
    return [case for case in cases if case not in PYTHON_INSIDE]


@pytest.mark.parametrize(("state_name", "call_name"), case_ids())
def test_writer_call_under_allocation_failure(state_name: str, call_name: str) -> None:
    call = WRITER_CALLS.get(call_name)
    if call is None:
        call = next(c for s, n, c in SPECIAL_CALLS if (s, n) == (state_name, call_name))
    sweep(STATES[state_name], call)


# ---------------------------------------------------------------------------- the rest


def _snapshot_state() -> State:
    state = wide(snapshot=True)()
    state.held["snap"] = state.snapshots[0]
    state.held["long"] = np.zeros(5000, dtype=np.uint32)
    return state


def _result_state() -> State:
    """Results whose ids are past 256 (boxing each one allocates)."""
    tree = accel.RadixTree(400, 2, _hash_seed=1)
    tree.insert(list(range(600)))  # ids 0..299 on one edge
    state = State(tree, held={"lease": tree.match(list(range(600)), pin=True).lease})
    for first in (2000, 3000):
        tree.insert([first] * 40)  # ids 300..339
    state.held["match"] = tree.match([2000] * 40, pin=True)
    tree.evict(20)
    state.held["insert"] = tree.insert([4000] * 60)  # evicts: allocated and evicted > 256
    return state


OTHER_CALLS: dict[str, tuple[Callable[[], State], Call]] = {
    "snapshot_match": (_snapshot_state, lambda s: c(s.held["snap"].match, blocks(101, 1, 2))),
    "snapshot_match_kw": (
        _snapshot_state,
        lambda s: c(s.held["snap"].match, tokens=array.array("q", blocks(5, 6)), namespace=None),
    ),
    "snapshot_match_long": (_snapshot_state, lambda s: c(s.held["snap"].match, s.held["long"])),
    "snapshot_dump": (_snapshot_state, lambda s: c(s.held["snap"].dump)),
    "snapshot_namespaces": (_snapshot_state, lambda s: c(s.held["snap"].namespaces)),
    "snapshot_repr": (_snapshot_state, lambda s: c(repr, s.held["snap"])),
    "reader_repr": (with_snapshot, lambda s: c(repr, s.held["reader"])),
    "tree_repr": (small, lambda s: c(repr, s.tree)),
    "lease_tokens": (small, lambda s: c(getattr, s.held["lease"], "tokens")),
    "lease_repr": (small, lambda s: c(repr, s.held["lease"])),
    "lease_exit": (small, lambda s: c(s.held["lease"].__exit__, None, None, None)),
    "lease_exit_dropped": (dropped, lambda s: c(s.held["lease"].__exit__, None, None, None)),
    "lease_tokens_long": (big, lambda s: c(getattr, s.held["leases"][-1], "tokens")),
    "match_repr": (_result_state, lambda s: c(repr, s.held["match"])),
    "insert_repr": (_result_state, lambda s: c(repr, s.held["insert"])),
    "blocks_tuple": (_result_state, lambda s: c(tuple, s.held["insert"].blocks)),
    "blocks_slice": (
        _result_state,
        lambda s: c(s.held["insert"].blocks.__getitem__, slice(1, None)),
    ),
    "blocks_hash": (_result_state, lambda s: c(hash, s.held["insert"].allocated)),
    "blocks_repr": (_result_state, lambda s: c(repr, s.held["insert"].blocks)),
    "blocks_eq_tuple": (
        _result_state,
        lambda s: c(s.held["insert"].blocks.__eq__, (0, 1, 2, 3, 8)),
    ),
    "blocks_lt_blocks": (
        _result_state,
        lambda s: c(s.held["match"].blocks.__lt__, s.held["insert"].blocks),
    ),
    "blocks_concat": (
        _result_state,
        lambda s: c(s.held["insert"].blocks.__add__, s.held["match"].blocks),
    ),
    "blocks_contains": (_result_state, lambda s: c(s.held["insert"].blocks.__contains__, 2.0)),
    "blocks_tolist": (_result_state, lambda s: c(s.held["insert"].blocks.tolist)),
    "blocks_iter": (_result_state, lambda s: c(iter, s.held["insert"].evicted)),
    "blocks_view": (_result_state, lambda s: c(getattr, s.held["match"], "blocks")),
    "counted_snapshot_dump": (counted, lambda s: c(s.held["snap"].dump)),
    "counted_lease_tokens": (counted, lambda s: c(getattr, s.held["leases"][-1], "tokens")),
    "layout_error": (small, lambda s: c(s.tree.match, np.zeros((300, 2), dtype=np.uint32))),
    "tree_referents": (small, lambda s: c(gc.get_referents, s.tree)),
    "lease_referents": (small, lambda s: c(gc.get_referents, s.held["lease"])),
    "tree_new": (small, lambda s: c(accel.RadixTree, 300, 3)),
    "tree_new_seeded": (small, lambda s: c(accel.RadixTree, 3, _hash_seed=5)),
    "allocator_new": (small, lambda s: c(accel.BlockAllocator, 1000)),
    "block_hash": (small, lambda s: c(radix._block_hash, 3, [1, 2, 3])),
    "hash_keys": (small, lambda s: c(radix._hash_keys, 3, 5)),
}


def _allocator_state() -> State:
    allocator = accel.BlockAllocator(300)
    allocator.allocate(200)
    allocator.free(list(range(0, 200, 3)))
    return State(allocator)


ALLOCATOR_CALLS: dict[str, Call] = {
    "allocate": lambda s: c(s.tree.allocate, 150),
    "free": lambda s: c(s.tree.free, [1, 2, 4, 5]),
    "free_bad": lambda s: c(s.tree.free, (1, 2, 0)),
    "free_ids": lambda s: c(s.tree.free_ids),
    "clone": lambda s: c(s.tree.clone),
    "is_allocated": lambda s: c(s.tree.is_allocated, 7),
    "repr": lambda s: c(repr, s.tree),
}


def _observe_allocator(state: State) -> Any:
    return (state.tree.free_ids(), state.tree.free_count, state.tree.allocated_count)


@pytest.mark.parametrize("name", sorted(OTHER_CALLS))
def test_other_call_under_allocation_failure(name: str) -> None:
    make, call = OTHER_CALLS[name]
    sweep(make, call)


@pytest.mark.parametrize("name", sorted(ALLOCATOR_CALLS))
def test_allocator_under_allocation_failure(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(globals(), "observe", _observe_allocator)
    sweep(_allocator_state, ALLOCATOR_CALLS[name])
