"""The router index: which workers hold which blocks, kept from their KV events.

A router keeps one index for many workers (GPU engines, each its own cache).  Each
worker publishes numbered batches of events (:mod:`kachedb_radix.reference.events`);
the index applies them and answers, for a request, how many of its leading blocks each
worker already holds.  Because block hashes are prefix-chained, one hash names a whole
prefix: a worker's *matched depth* for hashes ``h1..hn`` is the number of leading
``hi`` it holds.  The rules (R-ROUTE-*):

* **Sequence** (R-ROUTE-1).  A worker's batches are numbered 0, 1, 2, ...; the index
  expects the next.  The expected one is applied.  A lower number is a repeat and is
  ignored -- except 0, which is a publisher that restarted: its cache restarted empty,
  so the worker's entries are cleared first.  A higher number is a *gap*: the batch is
  not applied, and :meth:`RouterIndex.apply` says which numbers are missing so the
  caller can ask the worker's replay socket for them.
* **Lost batches** (R-ROUTE-2).  When the missing batches cannot be had (the replay
  buffer has moved on) or a batch cannot be decoded, the worker's entries are
  cleared and it is *stale*: from then on the index holds a subset of its blocks
  (what it stored since), never a block it no longer has.  ``AllBlocksCleared`` or a
  restart makes it exact again.
* **Bad events** (R-ROUTE-3), each counted per worker, none ever touching another
  worker's entries: a store of a hash the worker already holds is counted (and adds a
  copy, R-ROUTE-5: a duplicate store never wipes anything); a store whose parent the
  worker does not hold is applied (the worker says it holds the blocks) and counted; a
  removal of a hash the worker does not hold changes nothing.  A batch is *malformed* -- the
  worker's entries are cleared and it is stale, as for lost batches -- when its
  payload does not decode, or when a batch object breaks the schema: events or hashes
  not in a list, an event of another type, a hash that is neither bytes nor an int in
  [-2**63, 2**64) (what msgpack carries), a medium that is neither a str nor None, or a
  medium beyond the :data:`MAX_MEDIA` an index tells apart.
* **Query** (R-ROUTE-4).  Depth per worker, in blocks, for every worker with a depth
  of at least one; a stale worker is reported as such.  Namespaces are kept apart by
  the hashes themselves: a namespace is an extra key of a path's first block, so the
  same tokens in two namespaces have different hashes.
* **Copies** (R-ROUTE-5).  A worker may cache one block twice (vLLM does, when its
  scheduler recomputes a prompt's last block): the index counts copies per (hash,
  worker, medium).  A store of an entry the worker holds adds a copy, a removal takes
  one away, and the entry stays matched while any copy remains; a clear, a restart, a
  loss or removing the worker drops every copy.  At most :data:`MAX_COPIES` are
  counted: a store past them adds none (the index then under-counts, never over).
  A store with no parent all of whose blocks the worker already holds on its medium
  is a *report*, not copies: vLLM announces the blocks a request reused that way
  (a request's ``kv_cache_report_mode = "full"``) and later evicts each block once, so
  counting it would keep matching blocks the worker no longer has.  It changes nothing
  and is counted (``reports``).  The one store it is ambiguous with -- the recomputed
  copy of a prompt of exactly one block, which vLLM's scheduler also stores with no
  parent -- is read as a report too: a later removal then drops the entry while the
  worker may still hold its other copy, a missed hit (R-ROUTE-2's direction).

Invariants (:meth:`RouterIndex.check_invariants`): a worker is a holder of a hash in
the global table exactly when one of its entries has that hash; no empty sets; every
entry holds 1 to :data:`MAX_COPIES` copies; every expected sequence number is >= 0;
every entry's medium is a known one.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgumentError, InvariantViolation
from ..events.hashing import BlockHasher, ExternalHash, Hash
from ..events.schema import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventDecodeError,
    KVEventBatch,
)
from ..tokens import as_token_list
from .wire import RoutedBatch, RoutedCleared, RoutedRemoved, RoutedStored, decode_for_router

#: The event types of a batch, whether built in-process (the schema's structs) or
#: decoded from a payload (what a router reads of them, :mod:`.wire`).
STORES = (BlockStored, RoutedStored)
REMOVALS = (BlockRemoved, RoutedRemoved)
CLEARS = (AllBlocksCleared, RoutedCleared)

Worker = Hashable
#: An entry: a hash on a medium (None when the event names none).
Entry = tuple[ExternalHash, str | None]

APPLIED, REPEAT, GAP, RESTART, MALFORMED = "applied", "repeat", "gap", "restart", "malformed"

#: The distinct media (event ``medium`` values, None included) an index tells apart; an
#: event naming another makes its batch malformed (the C twin keeps a medium in 5 bits).
MAX_MEDIA = 32
#: The range of an int hash: what msgpack carries (int64 and uint64).
HASH_MIN, HASH_LIMIT = -(1 << 63), 1 << 64
#: The copies of one (hash, worker, medium) an index counts (R-ROUTE-5; the C twin keeps
#: a count in 16 bits).
MAX_COPIES = 65_535

#: The counters every worker has (R-ROUTE-3, R-ROUTE-1, R-ROUTE-2).
COUNTERS = (
    "batches",
    "events",
    "stored",
    "removed",
    "duplicate_stores",
    "unknown_parents",
    "unknown_removals",
    "repeats",
    "gaps",
    "restarts",
    "malformed",
    "lost",
    "clears",
    "reports",
)


@dataclass(frozen=True, slots=True)
class Applied:
    """What :meth:`RouterIndex.apply` did with one batch.

    Attributes:
        outcome: ``applied``, ``restart`` (applied after clearing), ``repeat``
            (ignored), ``gap`` (not applied: ``missing`` are wanted first) or
            ``malformed`` (not decodable: the worker is now stale).
        missing: for a gap, the numbers ``(first, last)`` to ask the replay socket for.
    """

    outcome: str
    missing: tuple[int, int] | None = None


# The outcomes without a gap are values: one object each, shared (a router applies
# millions of batches; an outcome is immutable).
_APPLIED, _REPEAT, _RESTART, _MALFORMED = (
    Applied(APPLIED),
    Applied(REPEAT),
    Applied(RESTART),
    Applied(MALFORMED),
)


@dataclass
class WorkerState:
    """One worker's entries (each with its copies), next sequence number, staleness and
    counters."""

    entries: dict[Entry, int] = field(default_factory=dict)
    expected: int = 0
    stale: bool = False
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))


class RouterIndex:
    """Blocks by hash -> the workers holding them, from many workers' event streams.

    Args:
        hasher: how the workers name blocks (to turn a query's tokens into hashes).
        block_size: the workers' B (likewise).

    Cost: applying an event is O(its blocks); a query O(n * w) for n hashes and the
    w workers still matching.  One thread at a time.
    """

    implementation = "reference"

    def __init__(self, hasher: BlockHasher | None = None, block_size: int = 16) -> None:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise InvalidArgumentError(f"block_size must be an int >= 1, got {block_size!r}")
        self.hasher = hasher if hasher is not None else BlockHasher()
        self.block_size = block_size
        self._workers: dict[Worker, WorkerState] = {}
        self._holders: dict[ExternalHash, dict[Worker, int]] = {}  # hash -> worker -> media
        self._media: dict[str | None, None] = {}  # every medium an applied batch named

    # ------------------------------------------------------------------ events

    def apply(self, worker: Worker, seq: int, batch: KVEventBatch | bytes) -> Applied:
        """Apply ``worker``'s batch number ``seq`` by the sequence rules (R-ROUTE-1,
        R-ROUTE-2); ``batch`` may be the payload bytes. O(events in the batch).

        Raises:
            InvalidArgumentError: ``seq`` is not an int >= 0, or ``batch`` is neither
                bytes nor a :class:`KVEventBatch` (nothing changes).
        """
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise InvalidArgumentError(f"a sequence number is an int >= 0, got {seq!r}")
        if not isinstance(batch, bytes | KVEventBatch):
            raise InvalidArgumentError(
                f"a batch is a KVEventBatch or its payload bytes, got {type(batch).__name__}"
            )
        state = self._workers.setdefault(worker, WorkerState())
        if seq < state.expected and seq != 0:
            state.counts["repeats"] += 1
            return _REPEAT
        if seq > state.expected:
            state.counts["gaps"] += 1
            return Applied(GAP, (state.expected, seq - 1))
        restart = seq == 0 and state.expected > 0
        decoded: KVEventBatch | RoutedBatch | None = None
        if isinstance(batch, bytes):
            try:
                decoded = decode_for_router(batch)
            except EventDecodeError:
                decoded = None
        else:
            decoded = batch
        media = None if decoded is None else self._media_of(decoded)
        if decoded is None or media is None:
            state.counts["malformed"] += 1
            state.expected = seq + 1
            self._lose(worker, state)
            return _MALFORMED
        self._media.update(media)
        if restart:
            state.counts["restarts"] += 1
            self._clear(worker, state)
            state.stale = False
        state.expected = seq + 1
        state.counts["batches"] += 1
        for event in decoded.events:
            self._apply_event(worker, state, event)
        return _RESTART if restart else _APPLIED

    def _media_of(self, batch: KVEventBatch | RoutedBatch) -> dict[str | None, None] | None:
        """The media ``batch`` names, or None when it breaks the schema (see the module
        docstring). O(blocks in the batch)."""
        media: dict[str | None, None] = {}
        if not isinstance(batch.events, list):
            return None
        for event in batch.events:
            if isinstance(event, CLEARS):
                continue
            if not isinstance(event, STORES + REMOVALS):
                return None
            if not isinstance(event.block_hashes, list):
                return None
            hashes: list[object] = list(event.block_hashes)
            if isinstance(event, STORES) and event.parent_block_hash is not None:
                hashes.append(event.parent_block_hash)
            if not all(_is_hash(block_hash) for block_hash in hashes):
                return None
            if event.medium is not None and not isinstance(event.medium, str):
                return None
            media[event.medium] = None
        if len(self._media.keys() | media.keys()) > MAX_MEDIA:
            return None
        return media

    def lost(self, worker: Worker, resume_at: int) -> None:
        """The batches before ``resume_at`` cannot be had: clear ``worker``'s entries,
        mark it stale and expect ``resume_at`` next (R-ROUTE-2); a worker not seen yet
        starts stale. O(its entries).

        Raises:
            InvalidArgumentError: a bad number (nothing changes).
        """
        if isinstance(resume_at, bool) or not isinstance(resume_at, int) or resume_at < 0:
            raise InvalidArgumentError(f"a sequence number is an int >= 0, got {resume_at!r}")
        state = self._workers.setdefault(worker, WorkerState())
        state.expected = resume_at
        self._lose(worker, state)

    def remove_worker(self, worker: Worker) -> None:
        """Forget ``worker`` and everything it holds. O(its entries).

        Raises:
            InvalidArgumentError: an unknown worker.
        """
        self._clear(worker, self._state(worker))
        del self._workers[worker]

    def _apply_event(self, worker: Worker, state: WorkerState, event: object) -> None:
        counts = state.counts
        counts["events"] += 1
        if isinstance(event, STORES):
            parent = event.parent_block_hash
            if parent is None and self._is_report(state, event.block_hashes, event.medium):
                counts["reports"] += 1  # R-ROUTE-5: held blocks announced again, no copy
                return
            if parent is not None and worker not in self._holders.get(parent, ()):
                counts["unknown_parents"] += 1
            for block_hash in event.block_hashes:
                if not self._add(worker, state, (block_hash, event.medium)):
                    counts["duplicate_stores"] += 1
        elif isinstance(event, REMOVALS):
            for block_hash in event.block_hashes:
                if not self._drop(worker, state, (block_hash, event.medium)):
                    counts["unknown_removals"] += 1
        else:  # AllBlocksCleared, the union's last member
            assert isinstance(event, CLEARS), event
            counts["clears"] += 1
            self._clear(worker, state)
            state.stale = False

    @staticmethod
    def _is_report(
        state: WorkerState, block_hashes: Sequence[ExternalHash], medium: str | None
    ) -> bool:
        """A store with no parent all of whose blocks the worker already holds on its
        medium: a report of blocks it reused (vLLM's ``full`` report), not new copies
        (R-ROUTE-5). O(len(block_hashes))."""
        entries = state.entries
        return bool(block_hashes) and all((h, medium) in entries for h in block_hashes)

    def _add(self, worker: Worker, state: WorkerState, entry: Entry) -> bool:
        """Store one copy of ``entry``: True when it is new to ``worker`` (R-ROUTE-5)."""
        copies = state.entries.get(entry, 0)
        if copies:
            state.entries[entry] = min(copies + 1, MAX_COPIES)
            return False
        state.entries[entry] = 1
        state.counts["stored"] += 1
        holders = self._holders.setdefault(entry[0], {})
        holders[worker] = holders.get(worker, 0) + 1
        return True

    def _drop(self, worker: Worker, state: WorkerState, entry: Entry, counted: bool = True) -> bool:
        """Remove one copy of ``entry`` (``counted``, a removal event) or every copy (a
        clear): False when ``worker`` holds none (R-ROUTE-5)."""
        copies = state.entries.get(entry, 0)
        if not copies:
            return False
        state.counts["removed"] += counted
        if counted and copies > 1:
            state.entries[entry] = copies - 1
            return True
        del state.entries[entry]
        holders = self._holders[entry[0]]
        holders[worker] -= 1
        if holders[worker] == 0:
            del holders[worker]
            if not holders:
                del self._holders[entry[0]]
        return True

    def _clear(self, worker: Worker, state: WorkerState) -> None:
        for entry in list(state.entries):  # counted by its cause: a clear, a restart, a loss
            self._drop(worker, state, entry, counted=False)

    def _lose(self, worker: Worker, state: WorkerState) -> None:
        state.counts["lost"] += 1
        self._clear(worker, state)
        state.stale = True

    def _state(self, worker: Worker) -> WorkerState:
        state = self._workers.get(worker)
        if state is None:
            raise InvalidArgumentError(f"no worker {worker!r} in this index")
        return state

    # ------------------------------------------------------------------ queries

    def query_hashes(self, hashes: Sequence[ExternalHash]) -> dict[Worker, int]:
        """Each worker's matched depth, in blocks, for a request whose blocks have the
        external hashes ``hashes`` (path order); workers with depth 0 are left out
        (R-ROUTE-4). A hash no event can carry (an int out of msgpack's range) is held
        by no worker. O(n * w).

        Raises:
            InvalidArgumentError: a hash is neither an int nor bytes (nothing changes).
        """
        for position, block_hash in enumerate(hashes):
            if isinstance(block_hash, bool) or not isinstance(block_hash, int | bytes):
                raise InvalidArgumentError(
                    f"a block hash is an int or bytes, got {type(block_hash).__name__} "
                    f"at position {position}"
                )
        depths: dict[Worker, int] = {}
        if not hashes:
            return depths
        table = self._holders
        active = set(table.get(hashes[0], ()))
        for depth, block_hash in enumerate(hashes):
            # The workers holding every block so far but not this one stop here.
            leaving = active.difference(table.get(block_hash, ()))
            if leaving:
                for worker in leaving:
                    depths[worker] = depth
                active -= leaving
                if not active:
                    break
        for worker in active:
            depths[worker] = len(hashes)
        return {worker: d for worker, d in depths.items() if d > 0}

    def hash_chain(
        self, tokens: object, namespace: str | None = None, parent: Hash | None = None
    ) -> list[tuple[Hash, ExternalHash]]:
        """The (internal, external) hashes of every whole block of ``tokens``, hashed as the
        workers hash them: from a root, the first block salted by ``namespace`` (under the
        hasher's salt rule), or after the block whose internal hash is ``parent`` (then
        ``namespace`` is not read). O(n) for n tokens.

        Raises:
            InvalidTokensError: ``tokens`` is malformed (R-TOK-*).
            InvalidArgumentError: ``namespace`` is neither None nor a str.
            TypeError: ``parent`` is not an internal hash of the scheme.
        """
        token_list = as_token_list(tokens)
        if namespace is not None and not isinstance(namespace, str):
            raise InvalidArgumentError(
                f"namespace must be None or a str, got {type(namespace).__name__} {namespace!r}"
            )
        hasher, size = self.hasher, self.block_size
        if parent is not None:
            self._check_internal(parent)
        pairs: list[tuple[Hash, ExternalHash]] = []
        salt = namespace if parent is None else None
        for start in range(0, len(token_list) - size + 1, size):
            parent = hasher.block_hash(parent, token_list[start : start + size], salt)
            pairs.append((parent, hasher.external(parent)))
            salt = None
        return pairs

    def _check_internal(self, parent: object) -> None:
        """``parent`` has the form of this hasher's internal hashes (an int below 2**64
        for ``xxh3_64``, else bytes of its digest's length, SGLang's Dynamo format's 64
        with a seed included).

        Raises:
            TypeError: it has not.
        """
        sample = self.hasher.block_hash(None, [0])
        if isinstance(sample, int):
            ok = type(parent) is int and 0 <= parent < HASH_LIMIT
        elif isinstance(parent, bytes):
            seeded = self.hasher.scheme == "sglang_dynamo" and len(parent) == 64
            ok = len(parent) == len(sample) or seeded
        else:
            ok = False
        if not ok:
            raise TypeError(f"a parent of the {self.hasher.scheme} scheme is not {parent!r}")

    def query_tokens(self, tokens: object, namespace: str | None = None) -> dict[Worker, int]:
        """:meth:`query_hashes` for the whole blocks of ``tokens`` in ``namespace``,
        hashed as the workers hash them. O(n * w) for n tokens.

        Raises:
            InvalidTokensError: ``tokens`` is malformed (R-TOK-*).
        """
        token_list = as_token_list(tokens)
        hasher = self.hasher
        chain = hasher.chain(token_list, self.block_size, namespace)
        return self.query_hashes([hasher.external(h) for h in chain])

    def workers(self) -> list[Worker]:
        """Every worker seen, in the order first seen. O(w)."""
        return list(self._workers)

    def is_stale(self, worker: Worker) -> bool:
        """Whether ``worker``'s entries are only a subset of its blocks (R-ROUTE-2). O(1).

        Raises:
            InvalidArgumentError: an unknown worker.
        """
        return self._state(worker).stale

    def expected(self, worker: Worker) -> int:
        """The sequence number ``worker``'s next batch should have. O(1).

        Raises:
            InvalidArgumentError: an unknown worker.
        """
        return self._state(worker).expected

    def holdings(self, worker: Worker) -> set[Entry]:
        """``worker``'s entries: (hash, medium) pairs. O(its entries).

        Raises:
            InvalidArgumentError: an unknown worker.
        """
        return set(self._state(worker).entries)

    def copies(self, worker: Worker, block_hash: ExternalHash, medium: str | None) -> int:
        """How many copies of ``block_hash`` on ``medium`` ``worker`` holds (R-ROUTE-5); 0
        when none. O(1).

        Raises:
            InvalidArgumentError: an unknown worker, or a hash neither an int nor bytes.
        """
        state = self._state(worker)
        if isinstance(block_hash, bool) or not isinstance(block_hash, int | bytes):
            raise InvalidArgumentError(
                f"a block hash is an int or bytes, got {type(block_hash).__name__}"
            )
        return state.entries.get((block_hash, medium), 0)

    def held(self, worker: Worker) -> int:
        """How many entries ``worker`` holds. O(1).

        Raises:
            InvalidArgumentError: an unknown worker.
        """
        return len(self._state(worker).entries)

    def counts(self, worker: Worker) -> dict[str, int]:
        """``worker``'s counters (:data:`COUNTERS`). O(1).

        Raises:
            InvalidArgumentError: an unknown worker.
        """
        return dict(self._state(worker).counts)

    def __len__(self) -> int:
        """Distinct hashes held by any worker. O(1)."""
        return len(self._holders)

    @property
    def holder_blocks(self) -> int:
        """Entries over all workers (a block held by k workers counts k times). O(w)."""
        return sum(len(state.entries) for state in self._workers.values())

    def dump(self) -> dict[str, Any]:
        """Plain data: every worker's expected number, staleness, counters, entries
        (sorted) and the copies of those it holds more than once (``(hash, medium,
        copies)``, sorted), in the order first seen. O(entries log entries)."""
        return {
            "workers": [
                {
                    "worker": worker,
                    "expected": state.expected,
                    "stale": state.stale,
                    "counts": dict(state.counts),
                    "entries": sorted(state.entries, key=repr),
                    "copies": sorted(
                        ((h, m, n) for (h, m), n in state.entries.items() if n > 1), key=repr
                    ),
                }
                for worker, state in self._workers.items()
            ]
        }

    def check_invariants(self) -> None:
        """Assert the module's invariants. O(entries).

        Raises:
            InvariantViolation: one is broken (a bug, never bad input).
        """
        seen: dict[ExternalHash, dict[Worker, int]] = {}
        for worker, state in self._workers.items():
            if state.expected < 0:
                raise InvariantViolation(f"worker {worker!r} expects {state.expected}")
            for (block_hash, _medium), copies in state.entries.items():
                if not 1 <= copies <= MAX_COPIES:
                    raise InvariantViolation(f"worker {worker!r} holds {copies} copies")
                media = seen.setdefault(block_hash, {})
                media[worker] = media.get(worker, 0) + 1
            for _hash, medium in state.entries:
                if medium not in self._media:
                    raise InvariantViolation(f"worker {worker!r} holds an entry on {medium!r}")
        if seen != self._holders:
            raise InvariantViolation("the holders table disagrees with the workers' entries")


def _is_hash(value: object) -> bool:
    """Whether ``value`` is a hash an event may carry: bytes, or an int msgpack holds."""
    if isinstance(value, bytes):
        return True
    return isinstance(value, int) and not isinstance(value, bool) and HASH_MIN <= value < HASH_LIMIT


def brute_force_depths(
    holdings: Mapping[Worker, Iterable[Entry]], hashes: Sequence[ExternalHash]
) -> dict[Worker, int]:
    """The depths :meth:`RouterIndex.query_hashes` must give, the slow obvious way (for
    tests). O(n * w * entries)."""
    depths: dict[Worker, int] = {}
    for worker, entries in holdings.items():
        held = {block_hash for block_hash, _medium in entries}
        depth = 0
        while depth < len(hashes) and hashes[depth] in held:
            depth += 1
        if depth:
            depths[worker] = depth
    return depths
