"""The operations a candidate offers: one table, and everything that drives a candidate
reads it.

Each :class:`Operation` is one method of :class:`~kachedb_radix.spec.conform.candidate.Candidate`
and one request of the stdio protocol, with the same name: its arguments (in order, with
the wire type the protocol's schema gives them and the default a trace step may leave
out), the level whose rules it serves, the fields its answer must have, the handle it
issues (a lease or a snapshot, named in traces by handle: :class:`LeaseBook`), and the
protocol version that introduced it. The table drives

* applying a trace step to a candidate (:func:`kachedb_radix.spec.conform.steps.apply_step`);
* the protocol's request and answer checks (:mod:`kachedb_radix.spec.protocol.messages`),
  its server's dispatch (:mod:`kachedb_radix.spec.protocol.server`) and its client's
  requests (:mod:`kachedb_radix.spec.protocol.client`);
* the per-call time limit (:mod:`kachedb_radix.spec.protocol.timeout`), through
  :class:`Forwarding`, the one place the candidate methods are spelled out for a
  wrapper;
* which operations a candidate supports (``Candidate.operations``), and so which rules a
  run can exercise.

``tests/kit/test_operations.py`` checks the table against the Candidate protocol, the
adapter, the JSON schema and the forwarding class, so none of them can drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: ``default`` of an argument a trace step must give.
REQUIRED: Any = object()


@dataclass(frozen=True)
class Argument:
    """One argument of an operation.

    Attributes:
        name: its name in a trace step, a request and the Candidate method.
        wire: its type in a request (the schema's): ``"int0"`` an integer >= 0,
            ``"int1"`` an integer >= 1, ``"bool"`` a boolean, ``"any"`` any JSON value
            (the kit sends malformed arguments on purpose, R-TOK-2).
        default: what a trace step that leaves it out means (:data:`REQUIRED`: none).
        handle: ``"lease"`` or ``"snapshot"`` when a step names it by handle (the n-th
            lease or snapshot issued since the reset), translated to the candidate's id.
        since: the protocol version that introduced it. A request to a program speaking
            an older version leaves it out (the kit then only ever passes the default);
            a request may leave out an argument introduced after version 3, which then
            means its default.
    """

    name: str
    wire: str
    default: Any = REQUIRED
    handle: str | None = None
    since: int = 1


@dataclass(frozen=True)
class Operation:
    """One operation (see the module docstring).

    Attributes:
        name: the Candidate method, the request's ``op`` and the step's ``op``.
        arguments: in the method's order.
        level: the level it belongs to (``core``, ``snapshots``, ``events`` or
            ``tiers``): a
            candidate that declares the level offers it, unless it is ``optional``.
        answer: the fields its answer must have; None when it answers null.
        issues: ``"lease"`` or ``"snapshot"``: the answer field of that name is a new
            id, filed as the next handle.
        reads: it only reads state (the kit issues it after steps, never shrinks it away
            before the step it reads).
        since: the protocol version that introduced it.
        optional: a candidate may lack it and still be judged at its level; the rules
            only it can exercise are then reported not exercised (unsupported).
    """

    name: str
    arguments: tuple[Argument, ...] = ()
    level: str = "core"
    answer: tuple[str, ...] | None = None
    issues: str | None = None
    reads: bool = False
    since: int = 1
    optional: bool = False


_TOKENS = Argument("tokens", "any")
_NAMESPACE = Argument("namespace", "any", None)
_PIN = Argument("pin", "bool", False)
_SNAPSHOT = Argument("snapshot", "int1", handle="snapshot")
_POLICY = (
    Argument("policy", "any", "lru", since=4),
    Argument("policy_options", "any", None, since=4),
)
_RETENTION = (
    Argument("priority", "any", None, since=4),
    Argument("retain_for", "any", None, since=4),
)
#: The hash scheme a candidate at the ``events`` level names its blocks by (R-EVENT-2):
#: ``{"scheme": ..., "seed": ...}``, or None for no events.
_EVENTS = Argument("events", "any", None, since=5)
#: The slower tiers a candidate at the ``tiers`` level keeps (R-TIER-1):
#: ``{"host": n, "disk": n, "write_through": bool}``, or None for the device alone.
_TIERS = Argument("tiers", "any", None, since=6)
#: The answer of a call that moves blocks between tiers: its moves (each
#: ``[source_tier, source, target_tier, target]``, in order) and the blocks dropped.
_MOVES = ("moves", "dropped")

#: Every operation, in the order the spec introduces them.
OPERATIONS: tuple[Operation, ...] = (
    Operation("reset", (Argument("num_blocks", "int1"), Argument("block_size", "int1"), *_POLICY,
                        _EVENTS, _TIERS)),
    Operation("match", (_TOKENS, _NAMESPACE, _PIN), answer=("length", "blocks", "lease"),
              issues="lease"),
    Operation("insert", (_TOKENS, _NAMESPACE, _PIN, *_RETENTION),
              answer=("length", "blocks", "reused", "allocated", "evicted", "lease"),
              issues="lease"),
    Operation("release", (Argument("lease", "int0", handle="lease"),)),
    Operation("evict", (Argument("count", "any"),), answer=("freed",)),
    Operation("stats", answer=("num_blocks", "free", "cached", "pinned", "evictable", "leases",
                               "clock"), reads=True),
    Operation("namespaces", answer=("namespaces",), reads=True),
    Operation("dump", answer=("format", "block_size", "num_blocks", "free", "namespaces"),
              reads=True),
    Operation("snapshot", level="snapshots", answer=("snapshot", "version"), issues="snapshot",
              since=2),
    Operation("reader", level="snapshots", answer=("snapshot", "epoch", "version"),
              issues="snapshot", since=2),
    Operation("leave", (_SNAPSHOT,), level="snapshots", since=2),
    Operation("snapshot_match", (_SNAPSHOT, _TOKENS, _NAMESPACE), level="snapshots",
              answer=("length", "blocks"), since=2),
    Operation("snapshot_dump", (_SNAPSHOT,), level="snapshots",
              answer=("format", "block_size", "version", "namespaces"), reads=True, since=2),
    Operation("reclaim", level="snapshots", answer=("reclaimed",), since=2),
    Operation("drop", (_SNAPSHOT,), level="snapshots", since=3, optional=True),
    Operation("events", level="events", answer=("batches",), since=5),
    Operation("lookup", (_TOKENS, _NAMESPACE, _PIN), level="tiers",
              answer=("length", "tiers", "blocks", "lease"), issues="lease", since=6),
    Operation("restore", (_TOKENS, _NAMESPACE, _PIN), level="tiers",
              answer=("length", "blocks", "restored", "evicted", *_MOVES, "lease"),
              issues="lease", since=6),
    Operation("tier_evict", (Argument("count", "any"), Argument("tier", "any")), level="tiers",
              answer=("freed", *_MOVES), since=6),
)  # fmt: skip

#: The operations by name.
BY_NAME: Mapping[str, Operation] = {operation.name: operation for operation in OPERATIONS}


def operation(name: str) -> Operation:
    """The operation named ``name``. O(1).

    Raises:
        ValueError: no operation has that name.
    """
    found = BY_NAME.get(name)
    if found is None:
        raise ValueError(f"unknown operation {name!r}; the operations are {list(BY_NAME)}")
    return found


#: The newest protocol version an operation was introduced in: what an in-process
#: candidate, which speaks no version, is taken to have.
LATEST = max(op.since for op in OPERATIONS)


def offered(candidate: Any) -> frozenset[str]:
    """The operations ``candidate`` supports: its ``operations`` when it says (a program's
    ``hello`` from protocol 3 on, the adapter, a wrapper), else every operation of the
    levels it declares. O(ops)."""
    declared = getattr(candidate, "operations", None)
    if declared is not None:
        return frozenset(declared)
    return operations_of(frozenset(candidate.levels), LATEST)


def operations_of(levels: frozenset[str], protocol: int) -> frozenset[str]:
    """Every operation a candidate declaring ``levels`` and speaking ``protocol`` offers
    when it says nothing more (before protocol 3 there is no list of operations). O(ops)."""
    return frozenset(
        op.name for op in OPERATIONS if op.level in levels | {"core"} and op.since <= protocol
    )


def required_of(levels: frozenset[str]) -> frozenset[str]:
    """The operations a candidate declaring ``levels`` must offer (the levels cannot be
    judged without them). O(ops)."""
    return frozenset(
        op.name for op in OPERATIONS if op.level in levels | {"core"} and not op.optional
    )


class Forwarding:
    """Every Candidate operation as a call of :meth:`forward` (name, arguments): the one
    place the methods are spelled out for a candidate that wraps or proxies another (the
    stdio client, the per-call time limit). ``tests/kit/test_operations.py`` checks these
    methods against :data:`OPERATIONS` and the Candidate protocol, argument for argument.
    """

    def forward(self, op: str, *args: Any) -> Any:
        """Carry out operation ``op`` with ``args`` (in the table's order)."""
        raise NotImplementedError

    def reset(
        self,
        num_blocks: int,
        block_size: int,
        policy: object = "lru",
        policy_options: object = None,
        events: object = None,
        tiers: object = None,
    ) -> None:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        self.forward("reset", num_blocks, block_size, policy, policy_options, events, tiers)

    def match(self, tokens: object, namespace: object, pin: bool) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("match", tokens, namespace, pin)

    def insert(
        self,
        tokens: object,
        namespace: object,
        pin: bool,
        priority: object = None,
        retain_for: object = None,
    ) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("insert", tokens, namespace, pin, priority, retain_for)

    def release(self, lease: int) -> None:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        self.forward("release", lease)

    def evict(self, count: object) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("evict", count)

    def stats(self) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("stats")

    def namespaces(self) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("namespaces")

    def dump(self) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("dump")

    def snapshot(self) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("snapshot")

    def reader(self) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("reader")

    def leave(self, snapshot: int) -> None:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        self.forward("leave", snapshot)

    def snapshot_match(self, snapshot: int, tokens: object, namespace: object) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("snapshot_match", snapshot, tokens, namespace)

    def snapshot_dump(self, snapshot: int) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("snapshot_dump", snapshot)

    def reclaim(self) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("reclaim")

    def drop(self, snapshot: int) -> None:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        self.forward("drop", snapshot)

    def events(self) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("events")

    def lookup(self, tokens: object, namespace: object, pin: bool) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("lookup", tokens, namespace, pin)

    def restore(self, tokens: object, namespace: object, pin: bool) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("restore", tokens, namespace, pin)

    def tier_evict(self, count: object, tier: object) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("tier_evict", count, tier)
