"""Built-in scenarios: short traces that each teach one idea.

A scenario is an ordinary trace (the kit's JSON-lines steps,
:mod:`kachedb_radix.spec.conform.steps`) whose steps carry a ``"note"`` saying what to watch, so
``explain`` treats a scenario and a recorded trace alike and a scenario can be written out and
replayed against any target (``kachedb-radix explain --scenario split --dump``).

========== ======================================================================
demo       the serving story of ``kachedb-radix demo``: two users share a system
           prompt, a conversation branches, a long prompt evicts around a request
           that is still running
split      divergence inside an edge splits it at the block boundary; a match
           never splits; a leaf grows in place
eviction   least recently used leaf tails go first, deeper blocks before their
           ancestors; evict(n) frees what it can
pinning    pins are exact per block, pinned blocks are never evicted, out of
           blocks changes nothing, a lease is released once
namespaces one root per namespace, nothing matches across, an emptied namespace
           disappears
snapshots  a reader keeps what it can see: evicted blocks wait in quarantine
           until it leaves and they are reclaimed
scale      220 edges: a long chain of edits and a wide fan-out fold, then one long
           prompt evicts dozens of leaves (the page's legibility at scale)
events     what a router sees: the KV events each step emits -- a store, a split
           (only the new blocks), a match (nothing), a namespace (its salt), an
           evicting insert (removal first), a removal under a reader
========== ======================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kachedb_radix.reference.events import DEFAULT_SCHEME, DEFAULT_SEED

from ..cli import demo
from ..conform.operations import BY_NAME, SNAPSHOT

Step = dict[str, Any]


@dataclass
class Scenario:
    """A built-in scenario.

    Attributes:
        name: its name on the command line.
        title: a heading.
        lesson: the idea it teaches, in a sentence.
        steps: the trace, each step with a ``"note"``.
        errors: step index -> the error kind that step is meant to show.
    """

    name: str
    title: str
    lesson: str
    steps: list[Step] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)


class _Script:
    """Writes a scenario's steps, numbering lease and snapshot handles as a tree would."""

    def __init__(
        self, name: str, title: str, lesson: str, num_blocks: int, block_size: int
    ) -> None:
        scenario = self.scenario = Scenario(name, title, lesson)
        self.leases = 0
        self.snapshots = 0
        self._add({"op": "reset", "num_blocks": num_blocks, "block_size": block_size}, "")
        self.scenario.steps[0]["trace"] = scenario.name

    def _add(self, step: Step, note: str, error: str | None = None) -> None:
        if note:
            step["note"] = note
        if error is not None:
            self.scenario.errors[len(self.scenario.steps)] = error
        self.scenario.steps.append(step)

    def call(
        self,
        op: str,
        tokens: object,
        note: str,
        namespace: object = None,
        pin: bool = False,
        error: str | None = None,
    ) -> int:
        """A match or insert; returns the lease handle it issues (0: none)."""
        self._add({"op": op, "tokens": tokens, "namespace": namespace, "pin": pin}, note, error)
        if pin and error is None:
            self.leases += 1
            return self.leases
        return 0

    def step(self, op: str, note: str, error: str | None = None, **args: Any) -> int:
        """Any other step; returns the snapshot handle a snapshot or reader issues."""
        self._add({"op": op, **args}, note, error)
        if BY_NAME[op].issues == SNAPSHOT:
            self.snapshots += 1
            return self.snapshots
        return 0


def _tokens(start: int, blocks: int, size: int) -> list[int]:
    return list(range(start, start + blocks * size))


def _demo() -> Scenario:
    script = _Script(
        "demo",
        "The serving story",
        "Per request: match and pin the cached prefix, insert prompt and reply, release. "
        "A long prompt in a short pool evicts around a request that is still running.",
        demo.POOL_BLOCKS,
        demo.BLOCK_SIZE,
    )
    for request in demo.SCENARIO:
        who = request.name
        lease = script.call(
            "match", request.prompt, f"{who}: find and pin the cached prefix", pin=True
        )
        script.call(
            "insert",
            request.prompt + request.reply,
            f"{who}: cache the prompt and the reply"
            + (" (the request keeps running: pinned)" if request.keeps_running else ""),
            pin=request.keeps_running,
        )
        script.step("release", f"{who}: the request is done with its prefix", lease=lease)
    return script.scenario


def _split() -> Scenario:
    size = 4
    a, b, c, d = (_tokens(start, 1, size) for start in (10, 20, 30, 40))
    x, y = _tokens(50, 1, size), _tokens(60, 1, size)
    near_b = [20, 21, 99, 99]
    script = _Script(
        "split",
        "Splitting edges",
        "A sequence that diverges inside an edge splits it at the block boundary; "
        "a match never splits; a divergence inside a block makes that whole block new.",
        12,
        size,
    )
    script.call("insert", a + b + c, "three blocks on an empty tree: one edge of three blocks")
    script.call("insert", a + b + x, "diverges after two blocks: the edge splits there")
    script.call("insert", a + y, "diverges after one block: the upper edge splits again")
    script.call(
        "match", a + b + [30, 31], "a match ending inside a block: the partial block is ignored"
    )
    script.call("match", a + b + c + d, "a match never splits: it walks and stops")
    script.call("insert", a + b + c + d, "a leaf grows in place: one edge of two blocks")
    script.call(
        "insert", a + near_b, "the block differs in its third token: the whole block is new"
    )
    script.step("dump", "the canonical dump: chains written once, children in token order")
    return script.scenario


def _eviction() -> Scenario:
    size = 2
    system = _tokens(1, 1, size)
    script = _Script(
        "eviction",
        "Least recently used, deepest first",
        "When the pool is short, single blocks are freed from the tails of leaves, oldest "
        "stamp first: a leaf's deeper blocks go before its ancestors.",
        8,
        size,
    )
    script.call("insert", system + _tokens(10, 2, size), "conversation A: three blocks")
    script.call("insert", system + _tokens(20, 2, size), "conversation B shares the first block")
    script.call("insert", system + _tokens(30, 1, size), "conversation C, one more block")
    script.call(
        "match", system + _tokens(10, 2, size), "A is read again: its stamps are the newest"
    )
    script.call("insert", _tokens(40, 4, size), "a new prompt of four blocks: two must be evicted")
    script.step("evict", "evict one more block on demand", count=1)
    script.step("evict", "evict(10) frees only what is evictable", count=10)
    return script.scenario


def _pinning() -> Scenario:
    size = 2
    long = _tokens(1, 4, size)
    script = _Script(
        "pinning",
        "Pins protect running requests",
        "A lease pins exactly the blocks it covers; eviction passes pinned blocks over; "
        "an insert that cannot make room changes nothing.",
        6,
        size,
    )
    script.call("insert", long, "a prompt of four blocks")
    first = script.call("match", long[:4], "a request pins the first two blocks only", pin=True)
    script.call("insert", _tokens(20, 2, size), "two more blocks: the pool is full")
    second = script.call(
        "insert",
        _tokens(30, 2, size),
        "two new blocks: eviction skips the pinned ones and takes the unpinned tail",
        pin=True,
    )
    script.call(
        "insert",
        _tokens(40, 4, size),
        "four blocks needed, only two evictable: out of blocks, nothing changes",
        error="out_of_blocks",
    )
    script.step(
        "release", "the first request finishes: its blocks are evictable again", lease=first
    )
    script.step("release", "releasing twice is an error", error="lease_released", lease=first)
    script.step("release", "a lease this tree never issued", error="foreign_lease", lease=0)
    script.step("release", "the second request finishes", lease=second)
    script.call("insert", _tokens(40, 4, size), "now four blocks can be evicted")
    return script.scenario


def _namespaces() -> Scenario:
    size = 2
    shared = _tokens(1, 2, size)
    script = _Script(
        "namespaces",
        "One root per namespace",
        "The same tokens in two namespaces are two cached paths; nothing matches across "
        "them, and an emptied namespace disappears.",
        10,
        size,
    )
    script.call("insert", shared, "the default namespace")
    script.call(
        "insert", shared, "the same tokens for tenant alice: a second root", namespace="alice"
    )
    script.call("insert", shared + _tokens(9, 1, size), "and for bob", namespace="bob")
    script.call("match", shared, "alice finds her own blocks", namespace="alice")
    script.call("match", shared, "carol finds nothing: no namespace is shared", namespace="carol")
    script.step("evict", "the two oldest blocks: the default namespace empties and goes", count=2)
    script.call(
        "insert", shared, "a namespace must be None or a str", namespace=7, error="invalid_argument"
    )
    script.step("namespaces", "the namespaces holding blocks")
    return script.scenario


def _snapshots() -> Scenario:
    size = 2
    prompt = _tokens(1, 3, size)
    script = _Script(
        "snapshots",
        "Readers and the quarantine",
        "A reader sees one version for as long as it likes; blocks evicted under it wait in "
        "quarantine, and only return to the pool once it has left.",
        6,
        size,
    )
    script.call("insert", prompt, "three blocks cached")
    reader = script.step("reader", "a reader enters an epoch and sees this version")
    script.step("evict", "evict two blocks: the reader may still read them", count=2)
    script.step("snapshot_match", "the reader still sees all three", snapshot=reader, tokens=prompt)
    script.call("match", prompt, "the tree itself now holds one")
    script.call(
        "insert",
        _tokens(20, 4, size),
        "four new blocks, three free: with a reader inside, no eviction",
        error="out_of_blocks",
    )
    script.call("insert", _tokens(20, 3, size), "three new blocks fit in the free ones")
    script.step("leave", "the reader leaves; the quarantine waits for a reclaim", snapshot=reader)
    script.call(
        "insert",
        _tokens(40, 1, size),
        "one block, none free: the insert reclaims the quarantine first",
    )
    script.step("reclaim", "reclaim finds nothing left: the insert took the quarantine back")
    script.step("leave", "leaving twice is an error", error="reader_left", snapshot=reader)
    return script.scenario


def _scale() -> Scenario:
    size = 4
    system = _tokens(1, 2, size)
    script = _Script(
        "scale",
        "A tree of 220 edges",
        "An agent that rewrote its last turn ten times, then forty users who each edited "
        "their conversation twice: long chains and wide fan-outs fold; one long prompt evicts.",
        300,
        size,
    )
    history = system + _tokens(9000, 1, size)
    for edit in range(10):
        script.call("insert", history + _tokens(9100 + 10 * edit, 1, size), f"agent retry {edit}")
        history = history + _tokens(9500 + 10 * edit, 1, size)
    script.call("insert", history, "the agent's final transcript")
    for user in range(40):
        base = 1000 + user * 100
        turn = [_tokens(base + 10 * index, 1, size) for index in range(5)]
        script.call("insert", system + turn[0] + turn[1] + turn[2] + turn[3], f"user {user}")
        script.call(
            "insert", system + turn[0] + _tokens(base + 60, 1, size), f"user {user} edits turn 2"
        )
        script.call(
            "insert",
            system + turn[0] + turn[1] + turn[2] + turn[4],
            f"user {user} edits turn 4",
        )
    script.call("insert", _tokens(50000, 60, size), "a 60-block document: the oldest leaves go")
    return script.scenario


def _events() -> Scenario:
    size = 2
    system = _tokens(1, 2, size)
    script = _Script(
        "events",
        "What a router sees",
        "A router learns what a worker caches from its KV events alone: a BlockStored for "
        "each run of new blocks, chained by hash to its parent; a BlockRemoved for blocks "
        "that can no longer be matched; nothing for a split or a match.",
        8,
        size,
    )
    script.scenario.steps[0]["events"] = {"scheme": DEFAULT_SCHEME, "seed": DEFAULT_SEED}
    script.call(
        "insert",
        system + _tokens(10, 1, size),
        "three new blocks: one BlockStored, their hashes chained from the root",
    )
    script.call(
        "insert",
        system + _tokens(20, 2, size),
        "shares two blocks, then diverges: the edge splits, yet only the two new blocks "
        "are stored, their parent the last shared block",
    )
    script.call("match", system + _tokens(10, 1, size), "a match caches nothing new: no event")
    script.call(
        "insert",
        system,
        "the same tokens for tenant alice: other hashes, the namespace is the cache salt "
        "(an extra key of the first block), so no router shares them across tenants",
        namespace="alice",
    )
    script.call(
        "insert",
        _tokens(40, 3, size),
        "three new blocks, one free: one batch, the BlockRemoved of the two evicted "
        "(deeper first) before the BlockStored",
    )
    reader = script.step("reader", "a reader enters: it may read every block it sees")
    script.step(
        "evict",
        "evict(1) under the reader: the block waits in quarantine, yet it is removed for "
        "routing now, as no new match can find it",
        count=1,
    )
    script.step("leave", "the reader leaves: the quarantine changes no event", snapshot=reader)
    return script.scenario


#: Every scenario by name, in the order they are best read.
SCENARIOS: dict[str, Callable[[], Scenario]] = {
    "demo": _demo,
    "split": _split,
    "eviction": _eviction,
    "pinning": _pinning,
    "namespaces": _namespaces,
    "snapshots": _snapshots,
    "scale": _scale,
    "events": _events,
}


def scenario(name: str) -> Scenario:
    """The scenario called ``name``. O(its steps).

    Raises:
        KeyError: no scenario has that name (the message lists them).
    """
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}: choose from {', '.join(SCENARIOS)}")
    return SCENARIOS[name]()
