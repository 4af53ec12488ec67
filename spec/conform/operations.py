"""The operations a candidate offers: one table, each row saying what its operation does,
and everything that drives, checks, shrinks or shows a candidate reads it.

Each :class:`Operation` is one method of :class:`~kachedb_radix.spec.conform.candidate.Candidate`
and one request of the stdio protocol, with the same name. Its row says

* how it is called: its arguments (in order, with the wire type the protocol's schema
  gives them, the default a trace step may leave out, the handle a step names, the
  protocol version and the level that brought each in), the fields its answer must
  have;
* what it does to the blocks: which answer field lists the blocks it frees
  (:attr:`Operation.frees`, from the device or the tier an argument names), which the
  ids it hands out (:attr:`Operation.allocates`), which of its path it fills with new KV
  (:attr:`Operation.fills`), whether its answer names the queried prefix's blocks
  (:attr:`Operation.finds`), which fields carry moves between tiers
  (:attr:`Operation.moves`), whether it issues, ends or enters a handle (a lease, a
  snapshot, a reader's epoch), whether it starts afresh or advances the clock;
* what its answer is, for the comparison: one of the views the kit reads after a step
  (:attr:`Operation.view`), the whole shape or the counters, the fields only a level
  specifies (:attr:`Operation.level_fields`) and the recency fields;
* what a step can change, among what those views show (:attr:`Operation.changes`,
  :attr:`Operation.shows`): the kit reads a view after a step only when the step can
  have changed what it shows (a match changes no namespace, a snapshot query nothing);
* where it belongs: its level, the protocol version that introduced it (the versions
  each level and the protocol need are derived from the rows: :func:`level_since`,
  :data:`LATEST`), whether a candidate may lack it;
* how the search draws it (:attr:`Operation.draws`: at which levels, how often, and
  which of its arguments a probe spoils) and its own rules (:attr:`Operation.rules`:
  what a difference in its answer breaks when no diagnosis of ``rulemap.toml`` names
  another).

Everything else reads the rows: applying a trace step (:mod:`~kachedb_radix.spec.conform.steps`),
the lockstep and its oracle's adoption (:mod:`~kachedb_radix.spec.conform.lockstep`), the
safety check (:mod:`~kachedb_radix.spec.conform.safety`), the shrinker, the generator
(:mod:`~kachedb_radix.spec.conform.generate`), the rule map, the protocol's messages,
client and server (:mod:`kachedb_radix.spec.protocol`), the per-call time limit through
:class:`Forwarding` (the one place the candidate methods are spelled out for a wrapper),
and the explain pages. No other module compares an operation's name: a new operation is
a row here, a Candidate method, a reference method and its rules.

``tests/kit/test_operations.py`` checks the table against the Candidate protocol, the
adapter, the JSON schema and the forwarding class, so none of them can drift;
``tests/kit/test_one_table.py`` counts the comparisons against operation and level names
left outside the tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: ``default`` of an argument a trace step must give.
REQUIRED: Any = object()

#: The handle kinds: the n-th lease, or the n-th snapshot or reader, since the reset.
LEASE = "lease"
SNAPSHOT = "snapshot"

#: What an operation ends (:attr:`Operation.ends`): a lease (released), a reader's epoch
#: (it left), a reader (forgotten without leaving, R-EPOCH-5).
ENDS_LEASE = "lease"
ENDS_EPOCH = "epoch"
ENDS_READER = "forgotten"

#: What the views show and a step may change (:attr:`Operation.changes`,
#: :attr:`Operation.shows`): the shape (the dump: blocks, pins, stamps, the free list;
#: at the ``events`` level also the event stream, which only a change of the shape
#: feeds), the counters (stats), the namespaces, and the snapshots taken (their dumps:
#: a published version never changes, but a write that breaks one shows there, and a
#: new snapshot is one more to compare).
SHAPE_STATE = "shape"
COUNTER_STATE = "counters"
NAMES_STATE = "namespaces"
SNAPSHOTS_STATE = "snapshots"
#: Everything a view shows: what a reset, an insert or an eviction may change.
EVERYTHING = (SHAPE_STATE, COUNTER_STATE, NAMES_STATE, SNAPSHOTS_STATE)
#: What a call that pins, stamps or ticks changes: every view but the namespaces.
IN_PLACE = (SHAPE_STATE, COUNTER_STATE, SNAPSHOTS_STATE)

#: What an answer's ``blocks`` name (:attr:`Operation.finds`): device ids of the queried
#: prefix, or ids in the tiers its ``tiers`` field names, block by block.
ON_DEVICE = "device"
IN_TIERS = "tiers"


@dataclass(frozen=True)
class Argument:
    """One argument of an operation.

    Attributes:
        name: its name in a trace step, a request and the Candidate method.
        wire: its type in a request (the schema's): ``"int0"`` an integer >= 0,
            ``"int1"`` an integer >= 1, ``"bool"`` a boolean, ``"any"`` any JSON value
            (the kit sends malformed arguments on purpose, R-TOK-2).
        default: what a trace step that leaves it out means (:data:`REQUIRED`: none).
        handle: :data:`LEASE` or :data:`SNAPSHOT` when a step names it by handle (the
            n-th lease or snapshot issued since the reset), translated to the
            candidate's id.
        since: the protocol version that introduced it. A request to a program speaking
            an older version leaves it out (the kit then only ever passes the default);
            a request may leave out an argument introduced after version 3, which then
            means its default.
        level: the level it belongs to when that is not its operation's (the policy at
            ``reset`` is the ``policies`` level's); a level needs the protocol versions
            of its arguments too.
    """

    name: str
    wire: str
    default: Any = REQUIRED
    handle: str | None = None
    since: int = 1
    level: str | None = None


@dataclass(frozen=True)
class Draw:
    """How the search draws an operation (:mod:`kachedb_radix.spec.conform.generate`).

    Attributes:
        level: the level whose runs draw it.
        weight: how often, against the other draws of the levels run.
        order: its place among the draws of its level: the search's kinds come in this
            order, so that a seed draws the same examples as long as the draws stay.
        probe: None for a well-formed call; else the argument (``tokens``,
            ``namespace``, ``count``, ``priority``) a bad value of which the call
            carries, so the error its rules name is checked.
        among: the other operations a probe may make its call of (one is drawn).
        last: not one of the swarm's kinds: drawn once at the end of every example of
            its level, after the last step, from a chooser of its own -- for an
            operation that undoes what the example built (a clear of the whole cache),
            which drawn among the others would take away the large trees later steps
            need; so every example up to its end is what it was before the draw existed.
        unless: levels whose runs never draw it (an operation those levels' resets do
            not offer).
    """

    level: str
    weight: int = 1
    order: int = 0
    probe: str | None = None
    among: tuple[str, ...] = ()
    last: bool = False
    unless: tuple[str, ...] = ()


@dataclass(frozen=True)
class Operation:
    """One operation (see the module docstring).

    Attributes:
        name: the Candidate method, the request's ``op`` and the step's ``op``.
        arguments: in the method's order.
        level: the level it belongs to (``core``, ``eviction``, ``snapshots``,
            ``events`` or ``tiers``): a candidate that declares the level offers it,
            unless it is ``optional``.
        answer: the fields its answer must have; None when it answers null.
        rules: its own rules: what a difference in its answer breaks when no diagnosis
            of ``rulemap.toml`` names another (and what a failure during it breaks).
        since: the protocol version that introduced it.
        optional: a candidate may lack it and still be judged at its level; the rules
            only it can exercise are then reported not exercised (unsupported).
        issues: :data:`LEASE` or :data:`SNAPSHOT`: the answer field of that name is a
            new id, filed as the next handle.
        ends: what it ends, named by its handle argument: :data:`ENDS_LEASE`,
            :data:`ENDS_EPOCH` or :data:`ENDS_READER`.
        enters: it enters a reader epoch (its snapshot is a reader inside).
        resets: it starts afresh: every handle is forgotten.
        ticks: a successful call advances the logical clock (R-LRU-3).
        frees: the answer field listing the blocks it frees, in order (None: it frees
            none).
        frees_in: the argument naming the tier ``frees`` are freed from (None: the
            device).
        allocates: the answer field listing the ids it hands out, in order; a field of
            moves (``[source_tier, source, target_tier, target]``) hands out their
            targets.
        clears: the answer field saying whether it freed every cached block at once (a
            true value) or changed nothing (false).
        fills: the answer field saying which blocks of its path it fills with new KV:
            an int, the first new block's position (``reused``), or a list of moves,
            that many last blocks (``restored``).
        finds: its answer's ``blocks`` are the queried prefix's: :data:`ON_DEVICE` or
            :data:`IN_TIERS` (each block in the tier ``tiers`` names).
        moves: the answer fields of moves between tiers it makes before its new blocks
            are written, then ``moves_after`` the ones after (run in that order).
        moves_after: see ``moves``.
        dropped: the answer field listing the ``[tier, block]`` pairs it dropped off the
            last tier.
        choice_rules: the rules a choice of its blocks no declared mode allows breaks
            (the oracle refuses to adopt it): how many it frees, from where.
        out_of_blocks: the safety properties a refusal for lack of blocks breaks when
            the call changed something anyway: without a reader inside, and with one.
        capped: the profile's ``match_cap`` applies to it: it leaves the last token.
        changes: what a successful or failed call may change, among what the views
            show (:data:`SHAPE_STATE`, :data:`COUNTER_STATE`, :data:`NAMES_STATE`,
            :data:`SNAPSHOTS_STATE`): after it the kit reads only the views of those
            (after a failed call, every view: it must have changed nothing, R-ERR-2).
            Empty for a read, which changes nothing.
        shows: for a view, what it shows (one of the states above).
        view: its place among the views the kit reads after every step (the whole
            shape first: a difference there is the one to name); None: not a view.
        shape: its answer is the tree's whole canonical shape (the dump): checked for
            structure, read every few steps of a large tree.
        counts: its answer is the block counters (checked for accounting).
        stream: its answer is the KV event batches since the last call, compared as a
            stream (R-EVENT-*).
        reads: it only reads state (the kit issues it after steps, never shrinks it
            away before the step it reads).
        level_fields: answer fields only a level specifies: without that level they are
            left out before comparing (and a program is not asked for them).
        recency: the answer's recency fields (R-LRU-*): compared only at the
            ``eviction`` level under a profile that compares recency (``stamps``: of
            every edge of its shape).
        per_tier: with tiers its answer carries each slower tier's own under ``tiers``,
            compared the same way.
        answer_from: answer fields required from a protocol version on, as ``(field,
            version)``.
        draws: how the search draws it (none: never drawn, only read or replayed).
    """

    name: str
    arguments: tuple[Argument, ...] = ()
    level: str = "core"
    answer: tuple[str, ...] | None = None
    rules: tuple[str, ...] = ()
    since: int = 1
    optional: bool = False
    issues: str | None = None
    ends: str | None = None
    enters: bool = False
    resets: bool = False
    ticks: bool = False
    frees: str | None = None
    frees_in: str | None = None
    allocates: str | None = None
    clears: str | None = None
    fills: str | None = None
    finds: str | None = None
    moves: tuple[str, ...] = ()
    moves_after: tuple[str, ...] = ()
    dropped: str | None = None
    choice_rules: tuple[str, ...] = ()
    out_of_blocks: tuple[str, str] | None = None
    capped: bool = False
    changes: tuple[str, ...] = ()
    shows: str | None = None
    view: int | None = None
    shape: bool = False
    counts: bool = False
    stream: bool = False
    reads: bool = False
    level_fields: tuple[tuple[str, tuple[str, ...]], ...] = ()
    recency: tuple[str, ...] = ()
    per_tier: bool = False
    answer_from: tuple[tuple[str, int], ...] = ()
    draws: tuple[Draw, ...] = ()

    @property
    def prompts(self) -> bool:
        """Whether it takes a prompt: tokens and a namespace, the inputs a profile may
        declare the engine treats otherwise (a token limit, folded namespaces). O(1)."""
        names = {argument.name for argument in self.arguments}
        return {"tokens", "namespace"} <= names

    @property
    def handle(self) -> Argument | None:
        """The argument a step names by handle, if any. O(arguments)."""
        return next((argument for argument in self.arguments if argument.handle), None)

    @property
    def adopts(self) -> bool:
        """Whether a profile's eviction or allocation tolerance may make the oracle adopt
        the candidate's choice in it: it chooses which blocks to free or which ids to
        hand out (it has rules such a choice can break). O(1)."""
        return bool(self.choice_rules)

    def specified(self, level: str) -> tuple[str, ...]:
        """The answer fields only ``level`` specifies (:attr:`level_fields`). O(1)."""
        return dict(self.level_fields).get(level, ())


_TOKENS = Argument("tokens", "any")
_NAMESPACE = Argument("namespace", "any", None)
_PIN = Argument("pin", "bool", False)
_PROMPT = (_TOKENS, _NAMESPACE, _PIN)
_SNAPSHOT = Argument("snapshot", "int1", handle=SNAPSHOT)
_COUNT = Argument("count", "any")
_POLICY = (
    Argument("policy", "any", "lru", since=4, level="policies"),
    Argument("policy_options", "any", None, since=4, level="policies"),
)
_RETENTION = (
    Argument("priority", "any", None, since=4, level="policies"),
    Argument("retain_for", "any", None, since=4, level="policies"),
)
#: The hash scheme a candidate at the ``events`` level names its blocks by (R-EVENT-2):
#: ``{"scheme": ..., "seed": ...}``, or None for no events.
_EVENTS = Argument("events", "any", None, since=5, level="events")
#: The slower tiers a candidate at the ``tiers`` level keeps (R-TIER-1):
#: ``{"host": n, "disk": n, "write_through": bool}``, or None for the device alone.
_TIERS = Argument("tiers", "any", None, since=6, level="tiers")
#: The answer of a call that moves blocks between tiers: its moves (each
#: ``[source_tier, source, target_tier, target]``, in order) and the blocks dropped.
_MOVES = ("moves", "dropped")
#: The stats fields only the ``snapshots`` level specifies (R-SNAP-1, R-EPOCH-3).
SNAPSHOT_STATS: tuple[str, ...] = ("quarantined", "readers", "oldest_reader", "version")

#: Every operation, in the order the spec introduces them.
OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "reset",
        (Argument("num_blocks", "int1"), Argument("block_size", "int1"), *_POLICY, _EVENTS,
         _TIERS),
        rules=("R-INV-2",), resets=True, changes=EVERYTHING,
    ),
    Operation(
        "match", _PROMPT, answer=("length", "blocks", "lease"), rules=("R-MATCH-1",),
        issues=LEASE, ticks=True, finds=ON_DEVICE, capped=True, changes=IN_PLACE,
        draws=(Draw("core", 3, 1),),
    ),
    Operation(
        "insert", (*_PROMPT, *_RETENTION),
        answer=("length", "blocks", "reused", "allocated", "evicted", "lease"),
        rules=("R-INS-1",), issues=LEASE, ticks=True, frees="evicted", allocates="allocated",
        fills="reused", finds=ON_DEVICE, moves=("moves",), moves_after=("after",),
        dropped="dropped", choice_rules=("R-INS-5",),
        out_of_blocks=("failed_insert", "failed_insert_reader"), changes=EVERYTHING,
        draws=(Draw("core", 5), Draw("core", 1, 2, "tokens", ("match",)),
               Draw("namespaces", 1, 0, "namespace", ("match",)),
               Draw("policies", 1, 0, "priority")),
    ),
    Operation(
        "release", (Argument("lease", "int0", handle=LEASE),), rules=("R-PIN-4",),
        ends=ENDS_LEASE, ticks=True, changes=IN_PLACE, draws=(Draw("pinning", 2),),
    ),
    Operation(
        "evict", (_COUNT,), answer=("freed",), rules=("R-EVICT-4",), frees="freed",
        moves=("moves",), dropped="dropped", choice_rules=("R-EVICT-4",), changes=EVERYTHING,
        draws=(Draw("eviction", 2), Draw("eviction", 1, 1, "count")),
    ),
    Operation(
        "reset_prefix_cache", level="eviction", answer=("cleared",), rules=("R-CLEAR-1",),
        clears="cleared", since=7, optional=True, changes=EVERYTHING,
        draws=(Draw("eviction", last=True, unless=("tiers",)),),
    ),
    Operation(
        "stats",
        answer=("num_blocks", "free", "cached", "pinned", "evictable", "leases", "clock"),
        rules=("R-INV-2",), reads=True, view=1, counts=True, shows=COUNTER_STATE,
        level_fields=(("snapshots", SNAPSHOT_STATS),), recency=("clock",), per_tier=True,
    ),
    Operation(
        "namespaces", answer=("namespaces",), rules=("R-NS-3",), reads=True, view=2,
        shows=NAMES_STATE,
    ),
    Operation(
        "dump", answer=("format", "block_size", "num_blocks", "free", "namespaces"),
        rules=("R-DUMP-1",), reads=True, view=0, shape=True, shows=SHAPE_STATE,
        recency=("clock", "stamps"),
        per_tier=True, answer_from=(("quarantine", 2),),
    ),
    Operation(
        "snapshot", level="snapshots", answer=("snapshot", "version"), rules=("R-SNAP-2",),
        issues=SNAPSHOT, since=2, changes=(SNAPSHOTS_STATE,), draws=(Draw("snapshots", 1, 1),),
    ),
    Operation(
        "reader", level="snapshots", answer=("snapshot", "epoch", "version"),
        rules=("R-EPOCH-1",), issues=SNAPSHOT, enters=True, since=2,
        changes=(COUNTER_STATE, SNAPSHOTS_STATE),
        draws=(Draw("snapshots", 1, 2),),
    ),
    Operation(
        "leave", (_SNAPSHOT,), level="snapshots", rules=("R-EPOCH-4",), ends=ENDS_EPOCH,
        since=2, changes=(COUNTER_STATE,), draws=(Draw("snapshots", 2, 3),),
    ),
    Operation(
        "snapshot_match", (_SNAPSHOT, _TOKENS, _NAMESPACE), level="snapshots",
        answer=("length", "blocks"), rules=("R-SNAP-2",), since=2,
        draws=(Draw("snapshots", 2),),
    ),
    Operation(
        "snapshot_dump", (_SNAPSHOT,), level="snapshots",
        answer=("format", "block_size", "version", "namespaces"), rules=("R-SNAP-2",),
        reads=True, since=2, recency=("clock",), shows=SNAPSHOTS_STATE,
    ),
    Operation(
        "reclaim", level="snapshots", answer=("reclaimed",), rules=("R-EPOCH-2",), since=2,
        changes=(SHAPE_STATE, COUNTER_STATE), draws=(Draw("snapshots", 1, 4),),
    ),
    Operation(
        "drop", (_SNAPSHOT,), level="snapshots", rules=("R-EPOCH-5",), ends=ENDS_READER,
        since=3, optional=True, changes=(COUNTER_STATE,),
    ),
    Operation(
        "events", level="events", answer=("batches",), rules=("R-EVENT-5",), since=5,
        stream=True,
    ),
    Operation(
        "lookup", _PROMPT, level="tiers", answer=("length", "tiers", "blocks", "lease"),
        rules=("R-TIER-5",), issues=LEASE, finds=IN_TIERS, since=6, changes=IN_PLACE,
        draws=(Draw("tiers", 2),),
    ),
    Operation(
        "restore", _PROMPT, level="tiers",
        answer=("length", "blocks", "restored", "evicted", *_MOVES, "lease"),
        rules=("R-TIER-6",), issues=LEASE, frees="evicted", allocates="restored",
        fills="restored", finds=ON_DEVICE, moves=("moves",), moves_after=("restored",),
        dropped="dropped", choice_rules=("R-TIER-6", "R-INS-5"),
        out_of_blocks=("failed_restore", "failed_restore"), since=6, changes=EVERYTHING,
        draws=(Draw("tiers", 3, 1),),
    ),
    Operation(
        "tier_evict", (_COUNT, Argument("tier", "any")), level="tiers",
        answer=("freed", *_MOVES), rules=("R-TIER-3",), frees="freed", frees_in="tier",
        changes=EVERYTHING, moves=("moves",), dropped="dropped", choice_rules=("R-EVICT-4",),
        since=6,
        draws=(Draw("tiers", 2, 2),),
    ),
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


#: The newest protocol version an operation or argument was introduced in: the version
#: the kit speaks, and what an in-process candidate, which speaks no version, is taken
#: to have.
LATEST = max(since for op in OPERATIONS for since in (op.since, *(a.since for a in op.arguments)))

#: The views the kit reads after a step that can have changed what they show, in the
#: order it compares them.
VIEWS: tuple[Operation, ...] = tuple(
    sorted((op for op in OPERATIONS if op.view is not None), key=lambda op: op.view or 0)
)

#: The read of the whole shape (the dump), of the counters (stats), of the event
#: batches: the reads the kit issues by itself.
SHAPE: Operation = next(op for op in OPERATIONS if op.shape)
COUNTERS: Operation = next(op for op in OPERATIONS if op.counts)
STREAM: Operation = next(op for op in OPERATIONS if op.stream)
#: The read of a snapshot's shape.
SNAPSHOT_SHAPE: Operation = next(
    op for op in OPERATIONS if op.reads and op.handle is not None and op.handle.handle == SNAPSHOT
)


def level_since(level: str) -> int:
    """The protocol version a candidate declaring ``level`` must speak: the newest that
    introduced an operation or argument of the level (1 for a level of none). O(ops)."""
    versions = [op.since for op in OPERATIONS if op.level == level and not op.optional]
    versions += [
        argument.since for op in OPERATIONS for argument in op.arguments if argument.level == level
    ]
    return max(versions, default=1)


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

    def reset_prefix_cache(self) -> Any:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self.forward("reset_prefix_cache")
