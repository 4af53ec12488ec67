"""The radix tree: longest cached full-block prefix, insertion, pinning, eviction,
snapshots.

This module is the heart of the executable spec. It composes the pieces defined
beside it -- tokens (R-TOK), the allocator (R-ALLOC), persistent nodes and edges
(R-EDGE), the walk (R-MATCH), leases (R-PIN), the eviction queue (R-EVICT),
snapshots and reader epochs (R-SNAP, R-EPOCH) -- into the operations a serving
engine performs per request::

    tree = RadixTree(num_blocks=1024, block_size=16)
    hit = tree.match(prompt, pin=True)        # reuse hit.blocks, skip hit.length tokens
    done = tree.insert(prompt + output)       # cache the finished sequence
    hit.lease.release()                       # the request is over

Decisions (each a rule of ``spec/SPEC.md``; the id is cited where it is enforced):

* Only whole blocks are cached and matched; a match length is a multiple of B.
* A divergence inside an edge splits it at the block boundary; blocks, pins and
  stamps travel with their halves. Matching never splits.
* A logical clock advances by exactly one on every successful ``match``,
  ``insert`` and ``release``; the blocks those calls use are stamped with the new
  time. ``evict`` and read-only calls do not advance it. Failed calls change nothing.
* ``insert`` evicts only when the free pool is short, exactly the shortfall, never
  from the path it is inserting, and raises ``OutOfBlocksError`` before touching
  anything when even full eviction would not make room.
* Eviction frees single blocks from leaf tails, the smallest eviction key first:
  under the default policy least recently used first, ties to the smaller block id;
  the other policies (:mod:`kachedb_radix.reference.policies`) only change the key.
* Each namespace has its own root; nothing matches across namespaces. An emptied
  namespace disappears.
* Every change is published atomically as a new persistent version; snapshots and
  readers see whole versions; blocks freed under readers wait in quarantine.

How the state is kept:

* the **shape** -- nodes, edges, children -- is persistent (:mod:`kachedb_radix.reference.node`):
  every change path-copies from the changed node to the root and publishes the
  new roots by one assignment (:mod:`kachedb_radix.reference.snapshot`);
* the **writer's bookkeeping** lives in side tables only the writer touches:
  each node's current version and parent by node id, each block's pin count and
  stamp by block id, the eviction queue, the leases, the quarantine.

Invariants: see :mod:`kachedb_radix.reference.invariants`, run by
:meth:`RadixTree.check_invariants`.

Extension points. A subclass may override two documented methods to make the tree
follow choices made elsewhere, without touching anything private:

* :meth:`RadixTree.choose_victims` -- which leaves an eviction frees from, in order
  (default: the eviction queue, least recently used first). The conformance kit's
  oracle overrides it to evict exactly what a candidate evicted, after checking the
  choice is admissible; planted bugs override it to evict wrongly.
* :meth:`RadixTree.choose_new_blocks` -- which free ids an insert's new blocks get
  (default: none chosen, so the allocator's smallest first, R-ALLOC-2); the oracle
  hands out exactly the ids a candidate allocated.

Everything else an insert or an eviction does -- the room check, the protected
path, publication, the quarantine -- stays the tree's, so a subclass cannot make
the tree break an invariant by following a choice: it can only choose. A subclass
that only needs to *know* when an edge splits (the oracle, to name the rule a
difference breaks) wraps ``_split`` and calls the original: splits are not visible
in the public API, which describes the canonical shape (R-DUMP-2), not how the tree
happens to store it.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from immutables import Map

from .allocator import BlockAllocator
from .dump import dump_state
from .errors import (
    ForeignLeaseError,
    InvalidArgumentError,
    LeaseReleasedError,
    OutOfBlocksError,
)
from .events.hashing import BlockHasher, event_hasher
from .events.recorder import EventRecorder
from .events.schema import KVEventBatch, encode_batch
from .eviction import EvictionQueue
from .invariants import check_tree
from .lease import Lease
from .limits import check_pool
from .namespaces import check_namespace, namespace_order
from .node import EMPTY_CHILDREN, Node
from .numbering import Numbering
from .policies import DEFAULT_POLICY, EvictionPolicy, Retention, check_retention, make_policy
from .render import render_dump
from .results import InsertResult, MatchResult, TreeStats
from .snapshot import Reader, Snapshot, Version
from .tokens import as_token_list
from .walk import Path, path_blocks, walk


class RadixTree:
    """A radix tree of whole token blocks over a fixed pool of KV block ids.

    Args:
        num_blocks: the pool size, an int from 1 to 2**24 (R-LIMIT-1); block ids are
            ``0 .. num_blocks-1``.
        block_size: tokens per block B, an int from 1 to 2**16 (default 16; 1 gives a
            token-level tree; R-LIMIT-2); ``num_blocks * block_size`` at most 2**32
            (R-LIMIT-3).
        policy: the eviction policy's name (R-POL-*): ``"lru"`` (the default),
            ``"lfu"``, ``"fifo"``, ``"priority"`` or ``"slru"``; see
            :mod:`kachedb_radix.reference.policies`.
        policy_options: that policy's options (a mapping), or None for its defaults.
        events: None (the default: no events, nothing paid), True for KV events with
            the default block hashes, or a :class:`~kachedb_radix.reference.events.BlockHasher`
            naming the scheme (R-EVENT-*); :meth:`take_events` returns them.

    Raises:
        InvalidArgumentError: a size is not an int >= 1 or is above its limit
            (R-LIMIT-*), or the policy or one of its options is unknown or out of
            range. Also when ``events`` is neither None, True nor a ``BlockHasher``.

    Cost: O(num_blocks) to build. One writer thread at a time; ``snapshot()`` and
    ``reader()`` from any thread (see :mod:`kachedb_radix.reference.snapshot`).
    """

    implementation = "reference"

    def __init__(
        self,
        num_blocks: int,
        block_size: int = 16,
        *,
        policy: str = DEFAULT_POLICY,
        policy_options: dict[str, object] | None = None,
        events: BlockHasher | bool | None = None,
    ) -> None:
        check_pool(num_blocks, block_size)  # R-LIMIT-*: before anything is reserved
        hasher = event_hasher(events)
        self._allocator = BlockAllocator(num_blocks)
        self._block_size = block_size
        # The shape: namespace -> root, and each node's current version by node id.
        self._roots: Map[str | None, Node] = Map()
        self._nodes: dict[int, Node] = {}
        self._parents: dict[int, int | None] = {}
        self._root_names: dict[int, str | None] = {}
        self._node_ids = Numbering(1)
        # Per-block bookkeeping, by block id (R-PIN-2, R-LRU-1).
        self._pins = [0] * num_blocks
        self._stamps = [0] * num_blocks
        self._policy: EvictionPolicy = make_policy(policy, policy_options, num_blocks, self._stamps)
        self._queue = EvictionQueue()
        self._clock = 0
        self._cached = 0
        self._pinned = 0
        self._leases: dict[int, Lease] = {}
        self._lease_ids = Numbering(1)
        # Publication, readers and quarantine (R-SNAP-1, R-EPOCH-*).
        self._published = Version(self._roots, 0, 0)
        self._epochs = Numbering(1)
        self._readers: dict[int, int] = {}  # epoch -> version it reads
        self._quarantine: deque[tuple[int, list[int]]] = deque()
        self._quarantined = 0
        # KV events (R-EVENT-*): None when off, so an operation pays one test.
        self._events = None if hasher is None else EventRecorder(hasher, block_size)

    # ------------------------------------------------------------------ properties

    @property
    def block_size(self) -> int:
        """Tokens per block. O(1)."""
        return self._block_size

    @property
    def num_blocks(self) -> int:
        """Pool size. O(1)."""
        return self._allocator.num_blocks

    @property
    def clock(self) -> int:
        """The logical clock: successful match, insert and release calls so far. O(1)."""
        return self._clock

    @property
    def policy(self) -> str:
        """The eviction policy's name (R-POL-1). O(1)."""
        return self._policy.name

    @property
    def policy_options(self) -> dict[str, object]:
        """The eviction policy's options in force, defaults included. O(1)."""
        return self._policy.options()

    @property
    def version(self) -> int:
        """The number of the latest published version (R-SNAP-1). O(1)."""
        return self._published.number

    # ------------------------------------------------------------------ queries

    def match(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> MatchResult:
        """Find the longest cached prefix of ``tokens`` made of whole blocks (R-MATCH-1).

        The matched blocks are stamped with the new clock time (R-LRU-1); with
        ``pin=True`` they are also pinned by the returned lease (R-PIN-1).

        Cost: O(n) for n tokens (validation, then one map probe per node and one
        comparison per matched token; the key is never re-sliced per hop).

        Raises:
            InvalidTokensError: ``tokens`` is malformed (R-TOK-*).
            InvalidArgumentError: ``namespace`` is not None or a str.
        """
        token_list = self._validate(tokens, namespace)
        path, matched = self._walk(namespace, token_list, len(token_list) // self._block_size)
        now = self._tick()
        self._stamp(path, now)
        self._requeue(self._policy.found(path_blocks(path), now, namespace, None))
        self._offer_last(path)
        lease = self._pin(namespace, token_list, matched, path) if pin else None
        self._publish()
        return MatchResult(matched * self._block_size, path_blocks(path), lease)

    def insert(
        self,
        tokens: object,
        namespace: str | None = None,
        *,
        pin: bool = False,
        priority: int | None = None,
        retain_for: int | None = None,
    ) -> InsertResult:
        """Cache every whole block of ``tokens``, reusing the cached prefix (R-INS-1).

        Blocks already cached are reused (R-INS-2); the rest get fresh ids from the
        allocator (R-ALLOC-2). A divergence inside an edge splits it (R-SPLIT-1).
        If the pool is short, quarantined blocks whose readers have all left are
        reclaimed first (R-EPOCH-2); then, if no reader is inside, exactly the
        remaining shortfall is evicted, never from the reused path (R-INS-5), and
        the evicted state is published before the blocks are reused (R-EPOCH-1).
        The whole path is stamped (R-LRU-1) and, with ``pin=True``, pinned by the
        returned lease (R-PIN-1). A trailing partial block is ignored (R-INS-3).
        ``priority`` (0 .. 100) and ``retain_for`` (clock ticks) ask the ``priority``
        policy to keep the path at that priority for that long (R-POL-5); every
        policy checks them, the others ignore them.

        Cost: O(n + e log h + c * depth * log fan-out) for n tokens, e evicted
        blocks and c changed nodes.

        Raises:
            InvalidTokensError: ``tokens`` is malformed (R-TOK-*).
            InvalidArgumentError: ``namespace`` is not None or a str, or
                ``priority`` / ``retain_for`` is out of range (R-POL-8).
            OutOfBlocksError: free, reclaimable and (with no reader inside)
                evictable-off-path blocks are fewer than the new blocks needed
                (R-INS-6, R-EPOCH-3). Nothing changes.
        """
        token_list = self._validate(tokens, namespace)
        retention = check_retention(priority, retain_for)
        try:
            return self._insert(token_list, namespace, pin, retention)
        finally:
            if self._events is not None:
                self._events.flush(self._clock)  # one batch per operation (R-EVENT-5)

    def _insert(
        self, token_list: list[int], namespace: str | None, pin: bool, retention: Retention
    ) -> InsertResult:
        size = self._block_size
        wanted = len(token_list) // size
        path, reused = self._walk(namespace, token_list, wanted)
        needed = wanted - reused

        evicted = self._make_room(path, needed)
        if evicted:
            # Eviction may have trimmed the unpinned tail of the last edge we
            # reached; walk again so the split below sees the current shape.
            path, reused = self._walk(namespace, token_list, wanted)

        allocated: list[int] = []
        if needed > 0:
            allocated = self._allocate(needed)
            self._attach(namespace, path, token_list, reused, wanted, allocated)
            path, _ = self._walk(namespace, token_list, wanted)
            if self._events is not None:  # the new blocks end the path (R-EVENT-2)
                self._events.stored(namespace, token_list, path_blocks(path), wanted - needed)

        now = self._tick()
        self._stamp(path, now)
        self._note_insert(path_blocks(path), reused, now, namespace, retention)
        self._offer_last(path)
        lease = self._pin(namespace, token_list, wanted, path) if pin else None
        self._publish()
        return InsertResult(
            length=wanted * size,
            blocks=path_blocks(path),
            reused=reused,
            allocated=tuple(allocated),
            evicted=tuple(evicted),
            lease=lease,
        )

    def release(self, lease: Lease) -> None:
        """Release ``lease``: unpin its blocks and stamp them as just used (R-PIN-4, R-LRU-1).

        Cost: O(length of the lease).

        Raises:
            ForeignLeaseError: ``lease`` was not issued by this tree (R-PIN-5).
            LeaseReleasedError: ``lease`` was already released (R-PIN-4).
        """
        if not isinstance(lease, Lease) or lease._tree is not self:
            raise ForeignLeaseError(f"{lease!r} was not issued by this tree")
        if lease.released:
            raise LeaseReleasedError(f"lease {lease.id} was already released")
        count = len(lease.blocks)
        path, matched = self._walk(lease.namespace, list(lease.tokens), count)
        assert matched == count, "a pinned path can neither change nor disappear"
        self._adjust_pins(path, -1)
        now = self._tick()
        self._stamp(path, now)
        self._requeue(self._policy.released(lease.blocks, now))
        self._offer_last(path)
        lease._released = True
        del self._leases[lease.id]
        self._publish()

    def evict(self, count: int) -> tuple[int, ...]:
        """Free up to ``count`` blocks, the leaf tail with the smallest eviction key first
        (R-EVICT-1..4, R-POL-1; least recently used under ``lru``).

        Returns the evicted ids in eviction order; fewer than ``count`` when fewer
        blocks are evictable (R-EVICT-4). An eviction that frees anything publishes
        a new version (R-SNAP-1); the ids then go to the allocator, or to the
        quarantine while readers are inside (R-EPOCH-1). The clock does not advance.

        Cost: O(count * (log h + depth * log fan-out)) in the worst case, h the
        number of evictable leaves: the queue holds no stale entries, so no call pays
        for earlier ones.

        Raises:
            InvalidArgumentError: ``count`` is not an int >= 0.
        """
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidArgumentError(f"evict count must be an int >= 0, got {count!r}")
        try:
            return tuple(self._evict_blocks(count, protected=[]))
        finally:
            if self._events is not None:
                self._events.flush(self._clock)  # R-EVENT-5

    def reset_prefix_cache(self) -> bool:
        """Drop the whole prefix cache at once, vLLM's ``reset_prefix_cache``: True when it
        was cleared, False when it was not (nothing changed).

        With no block in use -- none pinned by a live lease, no reader inside, none
        waiting in quarantine -- every cached block is freed and every namespace goes
        (R-CLEAR-1, R-NS-3), as one published version when anything was cached
        (R-SNAP-1), and with events on one ``AllBlocksCleared`` is emitted (R-EVENT-7).
        While a block is in use nothing changes (R-CLEAR-2): a request may still read
        it. The clock does not advance; each freed block's policy state goes with it,
        as an eviction's does (R-POL-7).

        Cost: O(N + k log N) for N nodes and k cached blocks.
        """
        if self._pinned or self._readers or self._quarantined:
            return False
        cached = sorted(
            block for node in self._nodes.values() for block in node.blocks[: node.count]
        )
        if cached:
            for nid in self._nodes:
                self._queue.withdraw(nid)
            for block in cached:
                self._policy.freed(block)
            self._roots, self._nodes, self._parents, self._root_names = Map(), {}, {}, {}
            self._cached = 0
            self._publish()  # readers entering from now on see the empty cache
            self._allocator.free(cached)
        if self._events is not None:
            self._events.cleared()
            self._events.flush(self._clock)  # R-EVENT-5
        return True

    def take_events(self) -> list[KVEventBatch]:
        """The KV event batches since the last call, oldest first: one per operation
        that cached or evicted blocks (R-EVENT-1..5). O(1).

        Raises:
            InvalidArgumentError: the tree was built without ``events``.
        """
        if self._events is None:
            raise InvalidArgumentError("this tree emits no events: build it with events=True")
        return self._events.take()

    def take_event_payloads(self) -> list[bytes]:
        """The KV event batches since the last call, as :meth:`take_events` would return
        them, each encoded as the msgpack payload vLLM's publisher sends (R-EVENT-6,
        ``encode_batch``). O(size of the batches).

        Raises:
            InvalidArgumentError: the tree was built without ``events``.
        """
        return [encode_batch(batch) for batch in self.take_events()]

    @property
    def events(self) -> BlockHasher | None:
        """How the tree names blocks in its events, or None when it emits none."""
        return None if self._events is None else self._events.hasher

    # ------------------------------------------------------------------ extension points

    def choose_victims(self, count: int, protected: Path) -> Iterator[int]:
        """Extension point: the blocks an eviction of ``count`` blocks frees, in order.

        Yields block ids, each the tail of an evictable leaf (an unpinned last block
        of a non-root node without children) at the moment it is yielded: the tree
        frees each before it asks for the next, so the block before it on its edge,
        or its parent's tail once the last child is gone, may be yielded next.
        ``protected`` is the path an insert extends: its blocks are pinned while the
        insert evicts, so they are never evictable (R-INS-5). The default yields the
        eviction queue's first tail -- the smallest eviction key under the tree's
        policy (R-POL-1; R-EVICT-2, R-EVICT-3 for ``lru``) -- ``count`` times or
        until nothing is evictable.

        Cost: O(log h) per block for h evictable leaves (the default). An override may
        raise to refuse; what it had yielded is freed and published before the error
        goes on (an eviction is never half-visible).

        Raises (in the tree, for a yielded block):
            InvalidArgumentError: the block is not the tail of an evictable leaf.
        """
        for _ in range(count):
            tail = self._queue.first()
            if tail is None:
                return
            yield tail

    def choose_new_blocks(self, count: int) -> Sequence[int] | None:
        """Extension point: the free ids an insert's ``count`` new blocks get, or None.

        None (the default) lets the allocator choose: the smallest free ids, ascending
        (R-ALLOC-2). An override returns ``count`` distinct free ids, taken in that
        order. Called only when ``count`` blocks are free (the insert made room
        first). Cost: O(1) (the default).

        Raises (in the tree, for ids returned):
            AllocatorError: an id is not free, or appears twice (R-ALLOC-1).
            InvalidArgumentError: not ``count`` ids.
        """
        return None

    def next_block_ids(self, count: int) -> list[int]:
        """The ids the next insert that allocates ``count`` blocks without evicting hands
        out, in path order: the ``count`` smallest free ids, ascending (R-ALLOC-2, with
        :meth:`choose_new_blocks` at its default); fewer when fewer are free (such an
        insert evicts first, and its ids are not known before). Changes nothing. A
        caller that fills blocks before the tree names them (the KV cache's disk reads,
        :class:`~kachedb_radix.reference.tiers.KVCache`) asks this. Cost: O(f log count)
        for f free ids.

        Raises:
            InvalidArgumentError: ``count`` is not an int >= 0.
        """
        return self._allocator.next_ids(count)

    def eviction_key(self, block_id: int) -> tuple[int, ...]:
        """The key eviction orders block ``block_id`` by as an evictable leaf tail: the
        smallest key goes first (R-POL-1). Under ``lru`` it is ``(stamp, block_id)``,
        the stamp the block was last used at (R-LRU-1, R-EVICT-2, R-EVICT-3); each
        policy's key is in :mod:`kachedb_radix.reference.policies`. A block no longer
        cached keeps the key it had, but for its SLRU segment, which eviction clears. O(1).

        Raises:
            ForeignBlockError: ``block_id`` is not an id of this pool.
        """
        self._allocator.is_allocated(block_id)  # the range check
        return self._policy.key(block_id)

    # ------------------------------------------------------------------ snapshots

    def snapshot(self) -> Snapshot:
        """An O(1) immutable view of the latest published version (R-SNAP-2).

        Any thread, never blocks. Its block ids stay correct for its version, but
        only a :meth:`reader` also keeps the blocks from being reused.
        """
        return Snapshot(self._published, self._block_size)

    def reader(self) -> Reader:
        """Enter a reader epoch and take a snapshot (R-EPOCH-1). O(1), any thread.

        Blocks the reader can see are not handed out again until it leaves.
        """
        epoch = next(self._epochs)
        # Register first, then load the version: see the ordering in reference.snapshot.
        # The value registered is only what stats() reports the reader's age from; until
        # the load below it is a lower bound of the version the reader will see.
        self._readers[epoch] = self._published.number
        version = self._published
        self._readers[epoch] = version.number
        return Reader(self, epoch, version)

    def reclaim(self) -> tuple[int, ...]:
        """Return quarantined blocks whose readers have all left to the allocator (R-EPOCH-2).

        ``insert`` does this by itself when short; call it to see the pool grow
        sooner. Returns the reclaimed ids in quarantine order. Cost: O(r + k log N)
        for r readers and k blocks.
        """
        return tuple(self._reclaim())

    # ------------------------------------------------------------------ copies

    def clone(self) -> RadixTree:
        """An independent copy of the tree in the same state, for dry runs and what-ifs.

        The copy answers every call exactly as this tree would from now on -- same
        dump, stats, clock, version and epoch numbers, same allocation and eviction
        order -- and nothing done to either changes the other. Live leases and
        readers inside are part of that state: the copy keeps their pins and epochs,
        so it evicts and quarantines as this tree would. The :class:`Lease` and
        :class:`Reader` objects handed out stay this tree's: releasing or leaving
        them acts on this tree only (the copy's pins stay held, its readers inside).
        Snapshots need no copy: a published version never changes.

        Cost: O(num_blocks + nodes + leases + readers + L) for L evictable
        leaves. The persistent shape is shared, not copied: a shared node version
        is never changed, and one tree extends a shared edge's lists in place only
        past what every version of the other reads (see :mod:`kachedb_radix.reference.node`),
        exactly as the live tree does with its snapshots. Everything else the
        writer changes in place is copied. No ``copy.deepcopy`` of the whole tree.
        """
        twin = copy.copy(self)  # the immutable fields; each mutable one is replaced below
        twin._allocator = self._allocator.clone()
        twin._nodes = dict(self._nodes)
        twin._parents = dict(self._parents)
        twin._root_names = dict(self._root_names)
        twin._node_ids = self._node_ids.copy()
        twin._pins = list(self._pins)
        twin._stamps = list(self._stamps)
        twin._policy = self._policy.copy(twin._stamps)
        twin._lease_ids = self._lease_ids.copy()
        twin._leases = {
            lease_id: Lease(twin, lease_id, lease.namespace, lease.tokens, lease.blocks)
            for lease_id, lease in self._leases.items()
        }
        twin._epochs = self._epochs.copy()
        twin._readers = dict(self._readers)
        twin._quarantine = deque((epoch, list(batch)) for epoch, batch in self._quarantine)
        twin._queue = self._queue.copy()  # node ids are shared, so its entries hold
        twin._events = None if self._events is None else self._events.copy()
        return twin

    # ------------------------------------------------------------------ introspection

    def stats(self) -> TreeStats:
        """Block counters (R-INV-1, R-EPOCH-3), and how long the oldest reader has been
        inside, in versions (R-EPOCH-5). O(readers)."""
        readers = dict(self._readers)  # one atomic copy: readers may leave meanwhile
        oldest = min(readers, default=None)
        return TreeStats(
            num_blocks=self.num_blocks,
            free=self._allocator.free_count,
            cached=self._cached,
            pinned=self._pinned,
            evictable=self._cached - self._pinned,
            leases=len(self._leases),
            clock=self._clock,
            quarantined=self._quarantined,
            readers=len(readers),
            oldest_reader=oldest,
            version=self._published.number,
            oldest_reader_age=None if oldest is None else self._published.number - readers[oldest],
        )

    def namespaces(self) -> list[str | None]:
        """Namespaces holding at least one block, None first then by name. O(r log r)."""
        return sorted(self._roots, key=namespace_order)

    def dump(self) -> dict[str, Any]:
        """The canonical, JSON-serialisable description of the whole state (R-DUMP-1).

        Two implementations in the same state return equal dumps. Cost: O(N) over
        all cached tokens and the pool.
        """
        pins, stamps, policy = self._pins, self._stamps, self._policy
        return dump_state(
            block_size=self._block_size,
            num_blocks=self.num_blocks,
            clock=self._clock,
            free_blocks=self._allocator.free_ids(),
            quarantine=[block for _, batch in self._quarantine for block in batch],
            roots=[(name, self._roots[name]) for name in self.namespaces()],
            block_fields=lambda ids: {
                "pins": [pins[block] for block in ids],
                "stamps": [stamps[block] for block in ids],
                **policy.block_fields(ids),
            },
            policy=None
            if policy.name == DEFAULT_POLICY
            else {"name": policy.name, "options": policy.options()},
        )

    def render(self) -> str:
        """The tree drawn as text, from :meth:`dump`. O(N)."""
        return render_dump(self.dump())

    def check_invariants(self) -> None:
        """Assert every structural invariant (R-INV-*). O(N + h + leases * length).

        Raises:
            InvariantViolation: an invariant is broken (a bug, never bad input).
        """
        check_tree(self)
        if self._events is not None:
            self._events.check(self.dump())

    # ------------------------------------------------------------------ internals: shape

    def _validate(self, tokens: object, namespace: object) -> list[int]:
        """The arguments of ``match`` and ``insert`` checked, tokens first (R-TOK-5, R-NS-4):
        the token list. O(n) for n tokens."""
        token_list = as_token_list(tokens)
        check_namespace(namespace)
        return token_list

    def _walk(self, namespace: str | None, tokens: list[int], limit: int) -> tuple[Path, int]:
        return walk(self._roots, namespace, tokens, limit, self._block_size)

    def _publish(self) -> None:
        """Make the current shape the published version, in one assignment (R-SNAP-1)."""
        self._published = Version(self._roots, self._published.number + 1, self._clock)

    def _replace(self, new: Node) -> None:
        """Make ``new`` the current version of its node and path-copy its ancestors.

        O(depth * log fan-out). A root left without children is dropped with its
        namespace (R-NS-3).
        """
        size = self._block_size
        while True:
            self._nodes[new.nid] = new
            parent_id = self._parents[new.nid]
            if parent_id is None:
                name = self._root_names[new.nid]
                if new.children:
                    self._roots = self._roots.set(name, new)
                else:
                    self._roots = self._roots.delete(name)
                    del self._nodes[new.nid], self._parents[new.nid], self._root_names[new.nid]
                return
            parent = self._nodes[parent_id]
            new = parent.with_children(parent.children.set(new.first_block(size), new))

    def _new_node(self, parent_id: int | None, tokens: list[int], blocks: list[int]) -> Node:
        node = Node(next(self._node_ids), tokens, blocks, len(blocks), EMPTY_CHILDREN)
        self._nodes[node.nid] = node
        self._parents[node.nid] = parent_id
        return node

    def _attach(
        self,
        namespace: str | None,
        path: Path,
        tokens: list[int],
        reused: int,
        wanted: int,
        new_blocks: list[int],
    ) -> None:
        """Hang ``new_blocks`` (blocks ``reused .. wanted-1`` of ``tokens``) off the path.

        The new or extended leaf is not queued here: ``insert`` stamps its path next,
        which files the leaf straight under its final key (appended to the heap as
        its newest entry, O(1), where filing the fresh zero stamp first would sift it
        to the top and straight back down).
        """
        size = self._block_size
        if not path:
            parent = self._roots.get(namespace)
            if parent is None:
                parent = self._new_node(None, [], [])
                self._root_names[parent.nid] = namespace
        else:
            parent, used = path[-1]
            if used < parent.count:
                parent = self._split(parent, used)  # R-SPLIT-1
        new_tokens = tokens[reused * size : wanted * size]
        self._cached += len(new_blocks)
        if self._parents[parent.nid] is not None and not parent.children:
            # Extending a leaf in place (a chat's next turn) keeps the tree compact.
            self._replace(parent.extended(size, new_tokens, new_blocks))
            return
        child = self._new_node(parent.nid, new_tokens, list(new_blocks))
        self._replace(parent.with_children(parent.children.set(child.first_block(size), child)))

    def _split(self, node: Node, at: int) -> Node:
        """Split ``node``'s edge after its first ``at`` blocks (R-SPLIT-1, R-SPLIT-2).

        An observation point for subclasses (see the module docstring): wrap it and call
        it; do not change what it does.

        A new upper node takes the first ``at`` blocks and the node's place under
        its parent; the node keeps its id, the rest of its blocks and its children,
        so its queue entries and its children's parent links stay valid. Pins and
        stamps are per block and travel with their blocks. Returns the upper node.
        Cost: O(k * B + depth * log fan-out).
        """
        size = self._block_size
        cut, end = at * size, node.count * size
        lower = Node(
            node.nid,
            node.tokens[cut:end],
            node.blocks[at : node.count],
            node.count - at,
            node.children,
        )
        upper = self._new_node(self._parents[node.nid], node.tokens[:cut], node.blocks[:at])
        upper = upper.with_children(Map({lower.first_block(size): lower}))
        self._nodes[lower.nid] = lower
        self._parents[lower.nid] = upper.nid
        self._replace(upper)
        return upper

    # ------------------------------------------------------------------ internals: bookkeeping

    def _tick(self) -> int:
        """Advance the clock (R-LRU-3); keys that change with time change now (R-POL-5)."""
        self._clock += 1
        self._requeue(self._policy.advance(self._clock))
        return self._clock

    def _note_insert(
        self,
        blocks: tuple[int, ...],
        reused: int,
        now: int,
        namespace: str | None,
        retention: Retention,
    ) -> None:
        """Tell the policy what an insert found and cached (R-POL-1)."""
        policy = self._policy
        self._requeue(policy.found(blocks[:reused], now, namespace, retention))
        self._requeue(policy.cached(blocks[reused:], now, namespace, retention))

    def _requeue(self, blocks: Sequence[int]) -> None:
        """Re-file the queued leaves whose tails are among ``blocks``. O(k log h)."""
        for block in blocks:
            nid = self._queue.owner(block)
            if nid is not None:
                self._offer(nid)

    def _offer(self, nid: int) -> None:
        """Bring node ``nid``'s queue entry up to date (R-EVICT-2). O(log h).

        An evictable leaf -- a non-root node with no children whose tail block is
        unpinned -- is filed under its tail's ``(stamp, block_id)``; any other node
        is withdrawn. Called for every node whose tail, pins, stamps or children may
        have changed, so the queue always holds exactly the evictable leaves.
        """
        node = self._nodes.get(nid)
        if node is None or node.count == 0 or node.children or self._pins[node.tail()] > 0:
            self._queue.withdraw(nid)
        else:
            self._queue.file(nid, self._policy.key(node.tail()))

    def _stamp(self, path: Path, now: int) -> None:
        """Mark the path's blocks as used at ``now`` (R-LRU-1); the caller then tells the
        policy and re-files the path's last node (:meth:`_offer_last`)."""
        stamps = self._stamps
        for node, used in path:
            for block in node.blocks[:used]:
                stamps[block] = now

    def _offer_last(self, path: Path) -> None:
        """Re-file the path's last node: the only one of it that can be a leaf."""
        if path:
            self._offer(path[-1][0].nid)

    def _adjust_pins(self, path: Path, delta: int) -> None:
        """Add ``delta`` (+1 or -1) to the pin count of every block on the path."""
        pins = self._pins
        for node, used in path:
            for block in node.blocks[:used]:
                before = pins[block]
                pins[block] = before + delta
                if before == 0:
                    self._pinned += 1
                elif before + delta == 0:
                    self._pinned -= 1
        if path:
            # Only the last node can be a leaf; pinning its tail withdraws it.
            self._offer(path[-1][0].nid)

    def _pin(self, namespace: str | None, tokens: list[int], count: int, path: Path) -> Lease:
        self._adjust_pins(path, +1)
        lease = Lease(
            self,
            next(self._lease_ids),
            namespace,
            tuple(tokens[: count * self._block_size]),
            path_blocks(path),
        )
        self._leases[lease.id] = lease
        return lease

    def _check_room(self, path: Path, needed: int) -> None:
        """Raise OutOfBlocksError unless ``needed`` blocks can be found (R-INS-6, R-EPOCH-3)."""
        free = self._allocator.free_count
        reclaimable = self._reclaimable()
        if self._readers:
            evictable = 0  # evicting now would only fill the quarantine
        else:
            on_path = sum(
                1 for node, used in path for block in node.blocks[:used] if self._pins[block] == 0
            )
            evictable = self._cached - self._pinned - on_path
        if needed > free + reclaimable + evictable:
            raise OutOfBlocksError(
                f"insert needs {needed} new blocks: {free} are free, {reclaimable} can be "
                f"reclaimed and only {evictable} more can be evicted ({self._pinned} pinned, "
                f"{self._quarantined} quarantined for {len(self._readers)} readers)"
            )

    def _make_room(self, path: Path, needed: int) -> list[int]:
        """Make ``needed`` blocks free for an insert extending ``path``; the evicted ids.

        Refused first when even full eviction cannot make room (R-INS-6); then
        quarantined blocks whose readers left are reclaimed (R-EPOCH-2), and exactly
        the remaining shortfall is evicted, the path pinned meanwhile so it is never
        the room (R-INS-5). Cost: O(e log h + e * depth * log fan-out) for e evicted.

        Raises:
            OutOfBlocksError: there is no room (nothing changed), or a reader entered
                while this call evicted (the evicted blocks wait in quarantine).
        """
        if needed <= self._allocator.free_count:
            return []
        self._check_room(path, needed)
        self._reclaim()
        shortfall = needed - self._allocator.free_count
        if shortfall <= 0:
            return []
        self._adjust_pins(path, +1)
        try:
            evicted = self._evict_blocks(shortfall, protected=path)
        finally:
            self._adjust_pins(path, -1)
        if self._allocator.free_count < needed:
            # Only possible when a reader entered during this call.
            raise OutOfBlocksError(
                f"insert needs {needed} new blocks but a reader entered while it "
                f"evicted; {len(evicted)} evicted blocks wait in quarantine"
            )
        return evicted

    def _allocate(self, count: int) -> list[int]:
        """The ids for ``count`` new blocks: :meth:`choose_new_blocks`' or the allocator's."""
        chosen = self.choose_new_blocks(count)
        if chosen is None:
            return self._allocator.allocate(count)
        if len(chosen) != count:
            raise InvalidArgumentError(f"chose {len(chosen)} ids for {count} new blocks")
        return self._allocator.take(chosen)

    def _evict_blocks(self, count: int, protected: Path) -> list[int]:
        """Free the blocks :meth:`choose_victims` yields, then publish and retire them.

        Whatever was freed is published and retired even when the chooser raises part
        way (then the error propagates), so no eviction is half-visible.
        """
        evicted: list[int] = []
        try:
            for tail in self.choose_victims(count, protected):
                evicted.append(self._free_tail(tail))
        finally:
            if evicted:
                self._publish()  # readers entering from now on cannot see these blocks
                self._retire(evicted)
                if self._events is not None:  # unmatchable now, quarantined or not (R-EVENT-4)
                    self._events.removed(evicted)
        return evicted

    def _free_tail(self, tail: int) -> int:
        """Remove the evictable leaf tail ``tail`` from the tree (R-EVICT-1); return it.

        O(log h + depth * log fan-out).

        Raises:
            InvalidArgumentError: ``tail`` is not the tail of an evictable leaf.
        """
        nid = self._queue.owner(tail) if isinstance(tail, int) else None
        if nid is None:
            raise InvalidArgumentError(f"{tail!r} is not the tail of an evictable leaf")
        leaf = self._nodes[nid]
        self._queue.withdraw(nid)
        self._policy.freed(tail)
        if leaf.count == 1:
            self._remove_leaf(leaf)
        else:
            self._replace(leaf.without_tail())
            self._offer(leaf.nid)
        self._cached -= 1
        return tail

    def _remove_leaf(self, leaf: Node) -> None:
        """Unlink a leaf losing its last block; its parent may become a leaf."""
        parent_id = self._parents[leaf.nid]
        assert parent_id is not None
        parent = self._nodes[parent_id]
        del self._nodes[leaf.nid], self._parents[leaf.nid]
        self._replace(
            parent.with_children(parent.children.delete(leaf.first_block(self._block_size)))
        )
        if self._parents.get(parent_id) is not None:
            self._offer(parent_id)

    # ------------------------------------------------------------------ internals: epochs

    def _retire(self, blocks: list[int]) -> None:
        """Free evicted blocks, or quarantine them while an earlier reader is inside."""
        epoch = next(self._epochs)
        if any(reader < epoch for reader in list(self._readers)):
            self._quarantine.append((epoch, blocks))
            self._quarantined += len(blocks)
        else:
            self._allocator.free(blocks)

    def _reclaimable(self) -> int:
        oldest = min(self._readers, default=None)
        return sum(
            len(batch) for epoch, batch in self._quarantine if oldest is None or epoch < oldest
        )

    def _reclaim(self) -> list[int]:
        oldest = min(self._readers, default=None)
        reclaimed: list[int] = []
        # Quarantine batches are in epoch order: stop at the first still guarded.
        while self._quarantine and (oldest is None or self._quarantine[0][0] < oldest):
            reclaimed.extend(self._quarantine.popleft()[1])
        self._quarantined -= len(reclaimed)
        self._allocator.free(reclaimed)
        return reclaimed

    def _leave(self, epoch: int) -> None:
        # One atomic dict operation: safe from any thread and from a finalizer (R-EPOCH-5).
        self._readers.pop(epoch, None)
