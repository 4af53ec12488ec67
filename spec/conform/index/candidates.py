"""The router indexes the index level checks: the protocol and the twins' adapter.

An index candidate is fed batches by publisher and asked, for a query, every
publisher's matched depth in blocks (R-ROUTE-4). The kit plays the subscriber: it
numbers each publisher's batches, and when an index answers ``gap`` (R-ROUTE-1) it
tells the index that the missing batches are lost (``lost``) and gives the batch
again, as a subscriber whose replay buffer no longer holds them would.

Targets (:func:`resolve_index`): ``reference`` and ``accel`` -- the twins'
:class:`RouterIndex`, picked where every twin is picked (:mod:`kachedb_radix.spec.twins`)
--, the index peers of :mod:`kachedb_radix.spec.peers` (``dynamo``: NVIDIA Dynamo's
own ``RadixTree``), each with the profile it ships, and ``module:attribute``: a class
or zero-argument factory of your own index's adapter (strict, unless ``--profile``).

Cost: an import the first time; each call is the index's own cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kachedb_radix.reference.events import KVEventBatch
from kachedb_radix.reference.events.engines import engine_preset

from ...twins import TWIN_NAMES, TwinUnavailable, twin_class
from ..profile import STRICT, Profile, load
from ..targets import TargetError
from .stream import BLOCK_SIZE, ENGINE, MEDIUM, Worker


class IndexCandidate(Protocol):
    """What the index level drives (see the module docstring)."""

    #: The implementation that runs (a test asserts which one ran).
    implementation: str

    def apply(
        self, worker: Worker, seq: int, batch: KVEventBatch | bytes, namespace: str | None
    ) -> str:
        """Apply ``worker``'s batch number ``seq`` (payload bytes when it does not
        decode); ``namespace`` is the one its prompt was in (an index that hashes
        tokens needs it). Returns ``gap`` when the index wants the missing batches
        first, anything else otherwise; may raise (the profile says whether it may)."""
        ...

    def lost(self, worker: Worker, resume_at: int) -> None:
        """The batches before ``resume_at`` cannot be had (R-ROUTE-2)."""
        ...

    def remove_worker(self, worker: int) -> None:
        """Forget worker id ``worker``, every rank of it (never raises for one it does
        not know)."""
        ...

    def depths(
        self, tokens: Sequence[int], namespace: str | None, hashes: Sequence[int]
    ) -> dict[Worker, int]:
        """Each publisher's depth (0s left out) for a query of ``tokens`` in
        ``namespace``, whose blocks the workers name ``hashes``."""
        ...


class TwinIndex:
    """A twin's :class:`RouterIndex` as an index candidate (the oracle is one too).

    Cost: each call is the index's.
    """

    def __init__(self, twin: str) -> None:
        self.index: Any = twin_class(twin, "RouterIndex")(
            engine_preset(ENGINE).hasher(), BLOCK_SIZE
        )
        self.implementation: str = self.index.implementation

    def apply(
        self, worker: Worker, seq: int, batch: KVEventBatch | bytes, namespace: str | None
    ) -> str:
        """:meth:`RouterIndex.apply`'s outcome. O(blocks)."""
        outcome: str = self.index.apply(worker, seq, batch).outcome
        return outcome

    def lost(self, worker: Worker, resume_at: int) -> None:
        """:meth:`RouterIndex.lost`. O(the worker's entries)."""
        self.index.lost(worker, resume_at)

    def remove_worker(self, worker: int) -> None:
        """:meth:`RouterIndex.remove_worker` of every (``worker``, rank) the index knows.
        O(the worker's entries)."""
        for known in self.index.workers():
            if known[0] == worker:
                self.index.remove_worker(known)

    def depths(
        self, tokens: Sequence[int], namespace: str | None, hashes: Sequence[int]
    ) -> dict[Worker, int]:
        """:meth:`RouterIndex.query_hashes`. O(n x workers)."""
        found: dict[Worker, int] = self.index.query_hashes(list(hashes))
        return found

    def holds(self, worker: Worker, block_hash: int) -> bool:
        """Whether the index holds a copy of ``block_hash`` for ``worker`` (no: a worker
        it never heard of). O(1)."""
        if worker not in self.index.workers():
            return False
        return bool(self.index.copies(worker, block_hash, MEDIUM))

    def check_invariants(self) -> None:
        """The index's own structural check. O(size)."""
        self.index.check_invariants()


#: What an index candidate answers to (:class:`IndexCandidate`).
INDEX_METHODS = ("apply", "lost", "remove_worker", "depths")


def _opener_of(found: Any, name: str) -> Callable[[], IndexCandidate]:
    """A class or zero-argument factory of index candidates, checked by making one.

    Raises:
        TargetError: it is neither, or what it makes lacks a method or ``implementation``.
    """
    if not callable(found):
        raise TargetError(f"index target {name}: {found!r} is not a class or factory")
    try:
        made = found()
    except TypeError as exc:
        raise TargetError(f"index target {name}: {found!r} takes arguments ({exc})") from None
    missing = [
        method for method in (*INDEX_METHODS, "implementation") if not hasattr(made, method)
    ]
    if missing:
        raise TargetError(
            f"index target {name}: what {found!r} makes has no {', '.join(missing)} "
            "(the IndexCandidate protocol: spec/conform/index/candidates.py)"
        )
    opener: Callable[[], IndexCandidate] = found
    return opener


@dataclass(frozen=True)
class IndexTarget:
    """A resolved index target: its name, a way to open a fresh one, its profile."""

    name: str
    open: Callable[[], IndexCandidate]
    profile: Profile = STRICT


def resolve_index(name: str, profile: Profile | str | None = None) -> IndexTarget:
    """The index target ``name`` (``reference``, ``accel``, an index peer), under
    ``profile`` (a :class:`Profile`, a file, ``"strict"``, or None for its own).
    Cost: an import.

    Raises:
        TargetError: an unknown name, or a twin or peer that cannot be loaded (the
            message says how to install it).
        ProfileError: the profile file is not a valid profile.
    """
    from ...peers import INDEX_PEERS
    from .. import targets

    if name in TWIN_NAMES:
        try:
            twin_class(name, "RouterIndex")
        except TwinUnavailable as exc:
            raise TargetError(f"index target {name}: {exc}") from None
        opener: Callable[[], IndexCandidate] = lambda: TwinIndex(name)  # noqa: E731
        shipped = STRICT
    elif name in INDEX_PEERS:
        peer = INDEX_PEERS[name]
        try:
            opener = peer.factory()
        except ImportError as exc:
            raise TargetError(f"index target {name}: {exc}") from None
        shipped = load(peer.profile)
    elif ":" in name:
        opener = _opener_of(targets.import_object(name), name)
        shipped = STRICT
    else:
        known = ", ".join((*TWIN_NAMES, *INDEX_PEERS))
        raise TargetError(f"unknown index target {name!r}: use {known}, or module:attribute")
    chosen = targets.load_profile(profile) if profile is not None else shipped
    return IndexTarget(name, opener, chosen)
