"""Wrap a tree class with the reference API into the plain-data :class:`Candidate`.

Any class built as ``Tree(num_blocks, block_size)`` whose instances offer
``match``/``insert``/``release``/``evict``/``stats``/``namespaces``/``dump`` the way
:class:`kachedb_radix.reference.RadixTree` does can be checked without writing a line of glue:
the reference itself, the C twin ``kachedb_radix.accel.RadixTree`` and every mutant are driven
this way. A class that also offers ``snapshot``/``reader``/``reclaim`` (snapshots
and readers with ``match``, ``dump``, ``version``; readers with ``epoch`` and
``leave``) declares the ``snapshots`` level by default; one that does not is
checked at the other levels.

A class whose constructor takes ``events=`` (a
:class:`~kachedb_radix.reference.events.BlockHasher`) and whose trees offer
``take_events()`` declares the ``events`` level: its batches are handed to the kit
as the msgpack payloads a publisher would send.

Given a ``tier_factory`` too -- a class built as ``Tiered(device_blocks, host_blocks,
disk_blocks, block_size, write_through=...)`` with the API of
:class:`kachedb_radix.reference.tiers.TieredTree` -- the adapter declares the ``tiers``
level: a ``reset`` that names tiers builds one, ``lookup``, ``restore`` and
``tier_evict`` call it, and ``insert`` and ``evict`` answer its moves as well.

Errors: a :class:`kachedb_radix.reference.errors.RadixError` becomes a :class:`CandidateError`
with its ``kind``; any other exception becomes kind ``"unexpected:<Class>"`` so a
crash inside the tree shows up as a disagreement rather than stopping the kit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kachedb_radix.reference.errors import RadixError
from kachedb_radix.reference.events import encode_batch

from .candidate import (
    CandidateError,
    ClearAnswer,
    EventsAnswer,
    EvictAnswer,
    InsertAnswer,
    LookupAnswer,
    MatchAnswer,
    NamespacesAnswer,
    ReaderAnswer,
    ReclaimAnswer,
    RestoreAnswer,
    SnapshotAnswer,
    SnapshotMatchAnswer,
    StatsAnswer,
    TierEvictAnswer,
)
from .events import encode_payloads, hasher_of
from .levels import KIT_LEVELS
from .operations import BY_NAME, LATEST, operations_of

#: ``Tree(num_blocks, block_size)``: how the adapter builds a tree.
TreeFactory = Callable[[int, int], Any]

_STATS_FIELDS = ("num_blocks", "free", "cached", "pinned", "evictable", "leases", "clock")

#: The optional operations the adapter carries out itself (not a method of the tree).
_OWN = frozenset({"drop"})

#: What a tree class needs to offer for the ``snapshots`` level.
SNAPSHOT_METHODS = ("snapshot", "reader", "reclaim")


def supported_levels(factory: TreeFactory, tier_factory: Any = None) -> frozenset[str]:
    """The levels a tree class offers: all, less ``snapshots`` without its methods (a
    name set to None is no method), less ``policies`` without a ``policy`` attribute
    (R-POL-1), less ``events`` without ``take_events`` (R-EVENT-1), less ``tiers``
    without a tiered class (R-TIER-1). O(1)."""
    levels = set(KIT_LEVELS)
    if tier_factory is None:
        levels.discard("tiers")
    if not all(callable(getattr(factory, name, None)) for name in SNAPSHOT_METHODS):
        levels.discard("snapshots")
    if getattr(factory, "policy", None) is None:
        levels.discard("policies")
    if not callable(getattr(factory, "take_events", None)):
        levels.discard("events")
    return frozenset(levels)


class TreeAdapter:
    """A tree class with the reference API, seen as a plain-data candidate.

    Args:
        factory: builds a tree: ``factory(num_blocks, block_size)``.
        name: the name shown in reports.
        levels: the levels to declare (default: :func:`supported_levels`).
        block_sizes: supported block sizes, None for any.
        tier_factory: builds a tiered tree for a ``reset`` that names tiers (None: the
            candidate keeps no tiers).

    Lease ids are numbered 1, 2, ... per ``reset`` by the adapter; the tree's own
    lease objects stay inside. Cost: the tree's own per call. Dumps are handed on as
    the tree gives them: the kit compares each with the reference's type for type and
    takes one that differs through JSON (so a dump that is not plain JSON data is
    caught there, :func:`kachedb_radix.spec.conform.steps.as_json`).
    """

    def __init__(
        self,
        factory: TreeFactory,
        name: str,
        levels: frozenset[str] | None = None,
        block_sizes: tuple[int, ...] | None = None,
        tier_factory: Any = None,
    ) -> None:
        self._factory = factory
        self._tier_factory = tier_factory
        self._tiered = False
        self._name = name
        self._levels = supported_levels(factory, tier_factory) if levels is None else levels
        self._block_sizes = block_sizes
        self._tree: Any = None
        self._block_size = 1
        self._leases: dict[int, Any] = {}
        self._snapshots: dict[int, Any] = {}
        self._foreign: Any = None

    @property
    def name(self) -> str:
        """The name shown in reports."""
        return self._name

    @property
    def levels(self) -> frozenset[str]:
        """The declared levels."""
        return self._levels

    @property
    def block_sizes(self) -> tuple[int, ...] | None:
        """Supported block sizes, None for any."""
        return self._block_sizes

    @property
    def operations(self) -> frozenset[str]:
        """Every operation of the declared levels, but an optional one the tree class
        lacks (the adapter implements ``drop`` itself, on its readers)."""
        return frozenset(
            op
            for op in operations_of(self._levels, LATEST)
            if not BY_NAME[op].optional or op in _OWN or callable(getattr(self._factory, op, None))
        )

    @property
    def tree(self) -> Any:
        """The wrapped tree (None before the first ``reset``)."""
        return self._tree

    def reset(
        self,
        num_blocks: int,
        block_size: int,
        policy: object = "lru",
        policy_options: object = None,
        events: object = None,
        tiers: object = None,
    ) -> None:
        """Build a fresh tree; forget every lease. O(num_blocks). The policy is passed
        only when it is not the default ``lru`` without options, and ``events`` (the
        hasher it names) only when given, so a tree class below the ``policies`` or
        ``events`` level is built as before; ``tiers`` builds the tiered class.

        Raises:
            CandidateError: the factory rejected the arguments (or ``events`` names no
                scheme, or ``tiers`` is not a table of ``host``, ``disk`` and
                ``write_through``, or names tiers a candidate without them).
        """
        options: dict[str, object] = {}
        if not (policy == "lru" and policy_options is None):
            options.update(policy=policy, policy_options=policy_options)
        if events is not None:
            if not isinstance(events, dict):
                raise CandidateError("invalid_argument", f"events must be a table, got {events!r}")
            options["events"] = _call(hasher_of, events)
        if tiers is not None:
            host, disk, write_through = _tier_sizes(tiers, self._tier_factory)
            options["write_through"] = write_through
            self._tree = _call(self._tier_factory, num_blocks, host, disk, block_size, **options)
        else:
            self._tree = _call(self._factory, num_blocks, block_size, **options)
        self._tiered = tiers is not None
        self._block_size = block_size
        self._leases = {}
        self._snapshots = {}
        self._foreign = None

    def match(self, tokens: object, namespace: object, pin: bool) -> MatchAnswer:
        """``tree.match``; see :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        result = _call(self._live().match, tokens, namespace, pin=pin)
        return {
            "length": int(result.length),
            "blocks": [int(block) for block in result.blocks],
            "lease": self._file(result.lease),
        }

    def insert(
        self,
        tokens: object,
        namespace: object,
        pin: bool,
        priority: object = None,
        retain_for: object = None,
    ) -> InsertAnswer:
        """``tree.insert``; see :class:`kachedb_radix.spec.conform.candidate.Candidate`.
        ``priority`` and ``retain_for`` are passed only when given (R-POL-5)."""
        if priority is None and retain_for is None:
            return self._insert_answer(_call(self._live().insert, tokens, namespace, pin=pin))
        tree = self._live()
        result = _call(
            tree.insert, tokens, namespace, pin=pin, priority=priority, retain_for=retain_for
        )
        return self._insert_answer(result)

    def _insert_answer(self, result: Any) -> InsertAnswer:
        """An insert result as plain data, its lease filed under a new id (with tiers,
        its moves too)."""
        answer: InsertAnswer = {
            "length": int(result.length),
            "blocks": [int(block) for block in result.blocks],
            "reused": int(result.reused),
            "allocated": [int(block) for block in result.allocated],
            "evicted": [int(block) for block in result.evicted],
            "lease": self._file(result.lease),
        }
        if self._tiered:
            answer["moves"] = _moves(result.moves)
            answer["after"] = _moves(result.after)
            answer["dropped"] = _dropped(result.dropped)
        return answer

    def release(self, lease: int) -> None:
        """``tree.release`` of the lease filed under ``lease``; an unknown id sends
        a lease issued by another tree of the same class (R-PIN-5)."""
        handle = self._leases.get(lease) if _plain_int(lease) else None
        if handle is None:
            handle = self._foreign_lease()
        _call(self._live().release, handle)

    def evict(self, count: object) -> EvictAnswer:
        """``tree.evict`` (with tiers, the device's, and its moves)."""
        if self._tiered:
            result = _call(self._live().evict, count)
            return {
                "freed": [int(block) for block in result.freed],
                "moves": _moves(result.moves),
                "dropped": _dropped(result.dropped),
            }
        freed = _call(self._live().evict, count)
        return {"freed": [int(block) for block in freed]}

    def stats(self) -> StatsAnswer:
        """``tree.stats()`` as a dict; the snapshot fields when the tree has them; with
        tiers, the device's counters and each slower tier's under ``tiers``."""
        stats = _call(self._live().stats)
        if self._tiered:
            answer = self._stats_answer(stats.tiers["device"])
            answer["tiers"] = {
                tier: dict(self._stats_answer(found))
                for tier, found in stats.tiers.items()
                if tier != "device"
            }
            return answer
        return self._stats_answer(stats)

    def _stats_answer(self, stats: Any) -> StatsAnswer:
        values = {field: int(getattr(stats, field)) for field in _STATS_FIELDS}
        answer: StatsAnswer = {
            "num_blocks": values["num_blocks"],
            "free": values["free"],
            "cached": values["cached"],
            "pinned": values["pinned"],
            "evictable": values["evictable"],
            "leases": values["leases"],
            "clock": values["clock"],
        }
        if hasattr(stats, "version"):
            oldest = stats.oldest_reader
            answer["quarantined"] = int(stats.quarantined)
            answer["readers"] = int(stats.readers)
            answer["oldest_reader"] = None if oldest is None else int(oldest)
            answer["version"] = int(stats.version)
        return answer

    def namespaces(self) -> NamespacesAnswer:
        """``tree.namespaces()``."""
        return {"namespaces": list(_call(self._live().namespaces))}

    def dump(self) -> dict[str, Any]:
        """``tree.dump()``, as the tree gives it (see the class docstring)."""
        dump: dict[str, Any] = _call(self._live().dump)
        return dump

    def snapshot(self) -> SnapshotAnswer:
        """``tree.snapshot()``, filed under a new id."""
        snap = _call(self._live().snapshot)
        return {"snapshot": self._file_snapshot(snap), "version": int(snap.version)}

    def reader(self) -> ReaderAnswer:
        """``tree.reader()``, filed under a new id."""
        reader = _call(self._live().reader)
        return {
            "snapshot": self._file_snapshot(reader),
            "epoch": int(reader.epoch),
            "version": int(reader.version),
        }

    def leave(self, snapshot: int) -> None:
        """``leave()`` of the reader filed under ``snapshot``.

        Raises:
            CandidateError: ``invalid_argument`` when ``snapshot`` names no snapshot
                or a plain snapshot, which has no epoch to leave (R-ERR-1).
        """
        found = self._snapshot(snapshot)
        if not hasattr(found, "leave"):
            raise CandidateError(
                "invalid_argument", f"snapshot {snapshot!r} is not a reader: it has no epoch"
            )
        _call(found.leave)

    def snapshot_match(
        self, snapshot: int, tokens: object, namespace: object
    ) -> SnapshotMatchAnswer:
        """``match`` on the snapshot filed under ``snapshot``."""
        result = _call(self._snapshot(snapshot).match, tokens, namespace)
        if getattr(result, "lease", None) is not None:
            raise CandidateError("unexpected:lease", "a snapshot match returned a lease")
        return {"length": int(result.length), "blocks": [int(block) for block in result.blocks]}

    def snapshot_dump(self, snapshot: int) -> dict[str, Any]:
        """``dump()`` of the snapshot filed under ``snapshot``, as it gives it."""
        dump: dict[str, Any] = _call(self._snapshot(snapshot).dump)
        return dump

    def reclaim(self) -> ReclaimAnswer:
        """``tree.reclaim()``."""
        return {"reclaimed": [int(block) for block in _call(self._live().reclaim)]}

    def drop(self, snapshot: int) -> None:
        """Drop the adapter's only reference to the reader filed under ``snapshot``,
        without ``leave()``: the tree must see it leave by itself (R-EPOCH-5)."""
        self._snapshot(snapshot)
        self._snapshots[snapshot] = None  # a tombstone: ids stay unique (len + 1)

    def reset_prefix_cache(self) -> ClearAnswer:
        """``tree.reset_prefix_cache()`` (R-CLEAR-1, R-CLEAR-2): True or False."""
        cleared = _call(self._live().reset_prefix_cache)
        if not isinstance(cleared, bool):
            raise CandidateError("unexpected:answer", f"reset_prefix_cache answered {cleared!r}")
        return {"cleared": cleared}

    def events(self) -> EventsAnswer:
        """``tree.take_events()``, each batch as the msgpack payload a publisher sends."""
        batches = _call(self._live().take_events)
        answer: EventsAnswer = {
            "batches": encode_payloads([encode_batch(b) for b in batches])["batches"]
        }
        return answer

    def lookup(self, tokens: object, namespace: object, pin: bool) -> LookupAnswer:
        """``tiers.lookup`` (R-TIER-5)."""
        result = _call(self._tiers().lookup, tokens, namespace, pin=pin)
        return {
            "length": int(result.length),
            "tiers": [str(tier) for tier in result.tiers],
            "blocks": [int(block) for block in result.blocks],
            "lease": self._file(result.lease),
        }

    def restore(self, tokens: object, namespace: object, pin: bool) -> RestoreAnswer:
        """``tiers.restore`` (R-TIER-6)."""
        result = _call(self._tiers().restore, tokens, namespace, pin=pin)
        return {
            "length": int(result.length),
            "blocks": [int(block) for block in result.blocks],
            "restored": _moves(result.restored),
            "evicted": [int(block) for block in result.evicted],
            "moves": _moves(result.moves),
            "dropped": _dropped(result.dropped),
            "lease": self._file(result.lease),
        }

    def tier_evict(self, count: object, tier: object) -> TierEvictAnswer:
        """``tiers.evict(count, tier)`` (R-TIER-3)."""
        result = _call(self._tiers().evict, count, tier)
        return {
            "freed": [int(block) for block in result.freed],
            "moves": _moves(result.moves),
            "dropped": _dropped(result.dropped),
        }

    def _tiers(self) -> Any:
        if not self._tiered:
            raise CandidateError("invalid_argument", "the last reset named no tiers")
        return self._live()

    def _live(self) -> Any:
        """The tree, or a refusal when no reset built one (the first was refused)."""
        if self._tree is None:
            raise CandidateError("invalid_argument", "no tree: no reset has built one")
        return self._tree

    def close(self) -> None:
        """Drop the tree."""
        self._tree = None
        self._leases = {}
        self._snapshots = {}

    def _file(self, lease: Any) -> int | None:
        if lease is None:
            return None
        lease_id = len(self._leases) + 1
        self._leases[lease_id] = lease
        return lease_id

    def _file_snapshot(self, snapshot: Any) -> int:
        snapshot_id = len(self._snapshots) + 1
        self._snapshots[snapshot_id] = snapshot
        return snapshot_id

    def _snapshot(self, snapshot: int) -> Any:
        found = self._snapshots.get(snapshot) if _plain_int(snapshot) else None
        if found is None:
            raise CandidateError("invalid_argument", f"no snapshot has the id {snapshot!r}")
        return found

    def _foreign_lease(self) -> Any:
        if self._foreign is None:
            if self._tiered:
                other = _call(self._tier_factory, 1, 0, 0, self._block_size)
            else:
                other = _call(self._factory, 1, self._block_size)
            self._foreign = _call(other.match, [], None, pin=True).lease
            if self._foreign is None:
                self._foreign = object()
        return self._foreign


def _tier_sizes(tiers: object, tier_factory: Any) -> tuple[object, object, object]:
    """``(host, disk, write_through)`` from a reset's ``tiers`` table (their values are
    the tiered class's to check).

    Raises:
        CandidateError: ``invalid_argument`` for a malformed table, or tiers asked of a
            candidate that keeps none.
    """
    if tier_factory is None:
        raise CandidateError("invalid_argument", "this candidate keeps no slower tiers")
    if not isinstance(tiers, dict) or not set(tiers) <= {"host", "disk", "write_through"}:
        raise CandidateError(
            "invalid_argument",
            f"tiers must be a table of host, disk and write_through, got {tiers!r}",
        )
    return tiers.get("host", 0), tiers.get("disk", 0), tiers.get("write_through", False)


def _moves(moves: Any) -> list[list[Any]]:
    """Moves as ``[source_tier, source, target_tier, target]`` rows (R-TIER-8)."""
    return [
        [str(move.source_tier), int(move.source), str(move.target_tier), int(move.target)]
        for move in moves
    ]


def _dropped(dropped: Any) -> list[list[Any]]:
    return [[str(tier), int(block)] for tier, block in dropped]


def _call(function: Callable[..., Any], *args: object, **kwargs: object) -> Any:
    try:
        return function(*args, **kwargs)
    except RadixError as exc:
        raise CandidateError(exc.kind, str(exc)) from exc
    except Exception as exc:
        raise CandidateError(f"unexpected:{type(exc).__name__}", str(exc)) from exc


def _plain_int(value: object) -> bool:
    """An int that is not a bool: ``True`` must not find the id 1."""
    return isinstance(value, int) and not isinstance(value, bool)

