"""The plain-data interface every candidate implementation is driven through.

The kit never touches a candidate's objects: it sends token lists, namespaces,
counts and lease ids, and gets back dicts of ints and lists, or an error *kind*
(a name from :data:`kachedb_radix.reference.errors.ERROR_KINDS`). In-process trees are wrapped by
:class:`kachedb_radix.spec.conform.adapter.TreeAdapter`; programs in other languages speak the same
operations as JSON lines (:class:`kachedb_radix.spec.protocol.client.StdioCandidate`, ``SPEC.md``
"The stdio protocol").

Lease ids are positive ints chosen by the candidate, unique until the next
``reset``; ``0`` is never issued, so the kit sends it to ask for the behaviour of a
lease the tree did not issue (R-PIN-5).

A candidate may also say which operations it supports (an ``operations`` attribute,
a frozenset of names from :mod:`kachedb_radix.spec.conform.operations`): the kit then
draws no other, and reports the rules only a missing optional operation exercises as
not exercised. Without it, every operation of its levels is assumed.

Snapshot ids (level ``snapshots``) are positive ints chosen by the candidate too,
unique until the next ``reset``; a reader is a snapshot that has entered an epoch,
so ``snapshot`` and ``reader`` draw their ids from one space. The kit only sends ids
the candidate issued. The snapshot methods are called only on candidates that
declare the ``snapshots`` level; others may leave them out.
"""

from __future__ import annotations

from typing import Any, NotRequired, Protocol, TypedDict, runtime_checkable


class MatchAnswer(TypedDict):
    """``match``'s answer (R-MATCH-1): tokens matched, their block ids, the lease or None."""

    length: int
    blocks: list[int]
    lease: int | None


class InsertAnswer(TypedDict):
    """``insert``'s answer (R-INS-1)."""

    length: int
    blocks: list[int]
    reused: int
    allocated: list[int]
    evicted: list[int]
    lease: int | None
    moves: NotRequired[list[list[Any]]]
    after: NotRequired[list[list[Any]]]
    dropped: NotRequired[list[list[Any]]]


class EvictAnswer(TypedDict):
    """``evict``'s answer (R-EVICT-4): the freed ids in eviction order (with tiers, the
    demotions and the blocks dropped, R-TIER-3)."""

    freed: list[int]
    moves: NotRequired[list[list[Any]]]
    dropped: NotRequired[list[list[Any]]]


class StatsAnswer(TypedDict):
    """``stats``'s answer (R-INV-1, R-INV-2; the last four: R-EPOCH-3, R-SNAP-1).

    The last four fields are required of candidates that declare ``snapshots``.
    """

    num_blocks: int
    free: int
    cached: int
    pinned: int
    evictable: int
    leases: int
    clock: int
    quarantined: NotRequired[int]
    readers: NotRequired[int]
    oldest_reader: NotRequired[int | None]
    version: NotRequired[int]
    tiers: NotRequired[dict[str, Any]]


class SnapshotAnswer(TypedDict):
    """``snapshot``'s answer (R-SNAP-2): the new snapshot's id and version number."""

    snapshot: int
    version: int


class ReaderAnswer(TypedDict):
    """``reader``'s answer (R-EPOCH-1): the reader's snapshot id, epoch and version."""

    snapshot: int
    epoch: int
    version: int


class SnapshotMatchAnswer(TypedDict):
    """``snapshot_match``'s answer (R-SNAP-2): like a match, without a lease."""

    length: int
    blocks: list[int]


class ReclaimAnswer(TypedDict):
    """``reclaim``'s answer (R-EPOCH-2): the ids returned to the allocator, in order."""

    reclaimed: list[int]


class EventsAnswer(TypedDict):
    """``events``'s answer (R-EVENT-*): the batches emitted since the last ``events``,
    oldest first, each the msgpack payload a publisher sends, in base64."""

    batches: list[str]


#: One move between tiers: ``[source_tier, source, target_tier, target]`` (R-TIER-8).
MoveRow = list[Any]


class LookupAnswer(TypedDict):
    """``lookup``'s answer (R-TIER-5): the cached prefix across tiers, each block's
    fastest tier and its id there, and the lease pinning them (or None)."""

    length: int
    tiers: list[str]
    blocks: list[int]
    lease: int | None


class RestoreAnswer(TypedDict):
    """``restore``'s answer (R-TIER-6): the path's device ids, one move per block brought
    up (``restored``, run last), the device ids evicted for them, the demotions that
    eviction caused (``moves``, run first), the blocks dropped, the lease or None."""

    length: int
    blocks: list[int]
    restored: list[MoveRow]
    evicted: list[int]
    moves: list[MoveRow]
    dropped: list[list[Any]]
    lease: int | None


class TierEvictAnswer(TypedDict):
    """``tier_evict``'s answer (R-TIER-3): the tier's freed ids, the demotions, the
    blocks dropped."""

    freed: list[int]
    moves: list[MoveRow]
    dropped: list[list[Any]]


class ClearAnswer(TypedDict):
    """``reset_prefix_cache``'s answer: whether every cached block was freed at once
    (R-CLEAR-1), or nothing changed because a block is in use (R-CLEAR-2)."""

    cleared: bool


class NamespacesAnswer(TypedDict):
    """``namespaces``'s answer (R-NS-3): None first, then names in order."""

    namespaces: list[str | None]


class CandidateError(Exception):
    """A call the candidate rejected with a typed error; compared by ``kind`` only.

    Attributes:
        kind: the error's kind name (``"token_range"``, ``"out_of_blocks"``, ...);
            an in-process call that raised something other than a RadixError gets
            ``"unexpected:<ExceptionClass>"``, which a deviation profile may map to a kind
            (``error_kinds = "mapped"``, :mod:`kachedb_radix.spec.conform.profile`) and which is
            otherwise a finding of its own ("a crash?").
        message: the candidate's message, shown in reports, never compared.
    """

    def __init__(self, kind: str, message: str = "") -> None:
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind = kind
        self.message = message


class CandidateFailure(BaseException):
    """The candidate broke the protocol: it hung, died or answered malformed data.

    Deliberately a ``BaseException``: it is not a semantic disagreement, so it must
    stop the property-based search at once instead of being shrunk (shrinking would
    restart a hanging program over and over). ``step`` and ``trace`` are filled in by
    the lockstep machine when it knows which step was running.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.step: int | None = None
        self.trace: list[dict[str, Any]] = []

    def __str__(self) -> str:
        where = f"step {self.step}: " if self.step is not None else ""
        return where + self.message


@runtime_checkable
class Candidate(Protocol):
    """A radix-cache implementation seen through plain data.

    Every method raises :class:`CandidateError` for a call the implementation
    rejects, and :class:`CandidateFailure` when it cannot answer at all. Costs are
    the implementation's own plus, for out-of-process candidates, one round trip.
    """

    @property
    def name(self) -> str:
        """A short name for reports."""
        ...

    @property
    def levels(self) -> frozenset[str]:
        """The conformance levels it declares (always including ``"core"``)."""
        ...

    @property
    def block_sizes(self) -> tuple[int, ...] | None:
        """The block sizes it supports, or None for any positive size."""
        ...

    def reset(
        self,
        num_blocks: int,
        block_size: int,
        policy: object = "lru",
        policy_options: object = None,
        events: object = None,
        tiers: object = None,
    ) -> None:
        """Forget everything and start an empty tree over a fresh pool, evicting by
        ``policy`` with ``policy_options`` (R-POL-1; the ``policies`` level), at the
        ``events`` level emitting KV events with the block hashes ``events`` names
        (``{"scheme": ..., "seed": ...}``, R-EVENT-2; None: no events) and, at the
        ``tiers`` level, keeping the slower tiers ``tiers`` names (``{"host": n,
        "disk": n, "write_through": bool}``, R-TIER-1; None: the device alone). With
        tiers, ``insert`` answers also ``moves``, ``after`` and ``dropped``, ``evict``
        also ``moves`` and ``dropped``, and ``dump`` and ``stats`` also ``tiers``."""
        ...

    def match(self, tokens: object, namespace: object, pin: bool) -> MatchAnswer:
        """``match(tokens, namespace, pin=pin)``."""
        ...

    def insert(
        self,
        tokens: object,
        namespace: object,
        pin: bool,
        priority: object = None,
        retain_for: object = None,
    ) -> InsertAnswer:
        """``insert(tokens, namespace, pin=pin, priority=priority, retain_for=retain_for)``
        (the last two given only at the ``policies`` level, R-POL-5)."""
        ...

    def release(self, lease: int) -> None:
        """Release the lease with this id (0: one this tree never issued)."""
        ...

    def evict(self, count: object) -> EvictAnswer:
        """``evict(count)``."""
        ...

    def stats(self) -> StatsAnswer:
        """The block counters."""
        ...

    def namespaces(self) -> NamespacesAnswer:
        """The namespaces holding blocks."""
        ...

    def dump(self) -> dict[str, Any]:
        """The canonical dump (R-DUMP-1)."""
        ...

    # The snapshots level (only called when the candidate declares it).

    def snapshot(self) -> SnapshotAnswer:
        """Take a snapshot of the latest published version (R-SNAP-2)."""
        ...

    def reader(self) -> ReaderAnswer:
        """Enter a reader epoch and take its snapshot (R-EPOCH-1)."""
        ...

    def leave(self, snapshot: int) -> None:
        """Leave the epoch of the reader with this id (R-EPOCH-4: twice is an error)."""
        ...

    def snapshot_match(
        self, snapshot: int, tokens: object, namespace: object
    ) -> SnapshotMatchAnswer:
        """``match`` on the snapshot with this id (R-SNAP-2)."""
        ...

    def snapshot_dump(self, snapshot: int) -> dict[str, Any]:
        """The snapshot's canonical dump (R-SNAP-2)."""
        ...

    def reclaim(self) -> ReclaimAnswer:
        """Return quarantined blocks whose readers have all left (R-EPOCH-2)."""
        ...

    def drop(self, snapshot: int) -> None:
        """Forget the reader with this id without leaving; it must leave by itself
        (R-EPOCH-5). The kit never names the id again."""
        ...

    # The events level (only called when the candidate declares it).

    def events(self) -> EventsAnswer:
        """The KV event batches emitted since the last call (R-EVENT-1..6)."""
        ...

    # The tiers level (only called when the candidate declares it).

    def lookup(self, tokens: object, namespace: object, pin: bool) -> LookupAnswer:
        """The cached prefix across tiers and each block's tier (R-TIER-5)."""
        ...

    def restore(self, tokens: object, namespace: object, pin: bool) -> RestoreAnswer:
        """Bring the cached prefix to the device (R-TIER-6)."""
        ...

    def tier_evict(self, count: object, tier: object) -> TierEvictAnswer:
        """Evict ``count`` blocks of ``tier``, demoting them (R-TIER-3)."""
        ...

    # Optional (the eviction level): a candidate may lack it.

    def reset_prefix_cache(self) -> ClearAnswer:
        """Free every cached block at once when none is in use (R-CLEAR-1); else change
        nothing (R-CLEAR-2)."""
        ...

    def close(self) -> None:
        """Release any resources (a child process). Idempotent."""
        ...
