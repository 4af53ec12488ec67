"""The tiered tree: one prefix index over device, host and disk (R-TIER-*).

Which blocks of a prompt are cached, in which memory, and what bringing them back
involves -- this module answers that without touching a byte. It composes one
:class:`~kachedb_radix.reference.RadixTree` per present tier::

    tiers = TieredTree(device_blocks=4096, host_blocks=32768, disk_blocks=262144)
    found = tiers.lookup(prompt)          # each block's tier, and the restore plan
    done = tiers.restore(prompt, pin=True)  # bring the cached prefix to the device
    kv_cache.run(done.moves + done.restored)  # the bytes layer copies (KVCache)
    stored = tiers.insert(prompt + output)    # cache the finished sequence on the device
    tiers.release(done.lease)

Decisions (each a rule of ``spec/SPEC.md``, cited where it is enforced):

* Each tier is a radix tree of its own, with its own capacity, block ids, clock and
  eviction policy (the tree's, R-TIER-1): **each tier is prefix-closed** -- a tier holding
  a block holds every block before it on its path -- so a tier's copy of a prefix is
  usable on its own, and a match is a device run, then a host run, then a disk run.
* A block may be in several tiers at once (a host copy of a device block is kept, so
  evicting the device copy later costs nothing, R-TIER-3).
* Device eviction demotes (R-TIER-3): each victim's path is inserted into the next present
  tier, which makes room by its own eviction (demoting further, or dropping at the
  last tier); blocks the next tier already holds are not copied again. A path the next
  tier cannot make room for (longer than it, or too much of it pinned) is dropped
  whole. A pinned block is never evicted, so never demoted, from the tier it is pinned
  in (R-TIER-7).
* Write-back by default: a block reaches the host only when the device evicts it.
  ``write_through=True`` inserts every stored path into the host too (R-TIER-4); its
  copies run once the caller has written the new blocks.
* ``lookup`` is a query (R-TIER-5): it reads a snapshot of each tier and changes
  nothing unless asked to pin. ``restore`` (R-TIER-6) inserts the cached prefix into the
  device tree -- its new ids and its evictions are exactly those of an insert -- and so
  fails with ``OutOfBlocksError`` before any change when the device has no room.
* Every call that moves blocks returns the copies as a program to run in order (R-TIER-8):
  each demotion's displaced blocks move on down before the demotion fills their slots,
  and a restore's copies up come last, from sources pinned for the call.
* KV events: each tier's tree records its own; one batch per call joins them in the
  order they happened, each event's ``medium`` naming its tier (R-TIER-9).

State besides the trees: a :class:`~kachedb_radix.reference.tiers.registry.Registry` per
tier (block id -> namespace, parent, tokens: what a victim was, for its demotion), the
live leases, the counters. Invariants: :mod:`kachedb_radix.reference.tiers.invariants`.

Twins: the tier layer is composition, so its twins are the trees it composes --
this class over :class:`kachedb_radix.reference.RadixTree`,
:class:`kachedb_radix.accel.TieredTree` over the C tree; one suite runs both.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, ClassVar

import msgspec

from ..errors import (
    ForeignLeaseError,
    InvalidArgumentError,
    LeaseReleasedError,
    OutOfBlocksError,
)
from ..events.hashing import BlockHasher, event_hasher
from ..events.schema import KVEvent, KVEventBatch
from ..limits import check_num_blocks, check_pool
from ..namespaces import check_namespace, namespace_order
from ..numbering import Numbering
from ..policies import DEFAULT_POLICY
from ..tokens import as_token_list
from ..tree import RadixTree
from .invariants import check_tiers
from .levels import DEVICE, DISK, HOST, MEDIA, RANK, TIERS
from .registry import BlockKey, Registry
from .results import (
    Move,
    RestoreResult,
    TieredStats,
    TierEvictResult,
    TierInsertResult,
    TierLease,
    TierMatch,
)


@dataclass
class _Work:
    """What one call has done so far, besides the trees' own state."""

    moves: list[Move] = field(default_factory=list)
    dropped: list[tuple[str, int]] = field(default_factory=list)
    pins: list[tuple[str, Any]] = field(default_factory=list)  # released when the call ends


class TieredTree:
    """One prefix index over up to three tiers of KV block ids.

    Args:
        device_blocks: the device tier's capacity, an int from 1 to 2**24.
        host_blocks: the host tier's capacity, an int from 0 to 2**24 (0: no host tier).
        disk_blocks: the disk tier's capacity, an int from 0 to 2**24 (0: no disk tier).
            Each tier's pool is sized as a tree's is (R-LIMIT-*): with ``block_size`` at
            most 2**16, and at most 2**32 tokens.
        block_size: tokens per block, an int from 1 to 2**16.
        policy, policy_options: every tier's eviction policy (R-POL-*).
        write_through: copy every stored path to the host at insert (R-TIER-4).
        events: as for :class:`~kachedb_radix.reference.RadixTree` (R-EVENT-*).

    Raises:
        InvalidArgumentError: a capacity is not an int in range, ``write_through`` is not
            a bool or is asked without a host tier, or the trees refuse an argument.

    Cost: O(total capacity) to build. One thread at a time.
    """

    implementation: ClassVar[str] = "reference"
    #: Builds each tier's tree; the C twin's subclass names the C tree.
    tree_type: ClassVar[Callable[..., Any]] = RadixTree

    def __init__(
        self,
        device_blocks: int,
        host_blocks: int = 0,
        disk_blocks: int = 0,
        block_size: int = 16,
        *,
        policy: str = DEFAULT_POLICY,
        policy_options: dict[str, object] | None = None,
        write_through: bool = False,
        events: BlockHasher | bool | None = None,
    ) -> None:
        sizes = {DEVICE: device_blocks, HOST: host_blocks, DISK: disk_blocks}
        for tier, size in sizes.items():  # R-LIMIT-*: each tier's pool, before any is built
            check_num_blocks(size, f"{tier}_blocks", 1 if tier == DEVICE else 0)
            if size:
                check_pool(size, block_size, f"{tier}_blocks")
        if not isinstance(write_through, bool):
            raise InvalidArgumentError(f"write_through must be a bool, got {write_through!r}")
        if write_through and not host_blocks:
            raise InvalidArgumentError("write_through needs a host tier (host_blocks >= 1)")
        hasher = event_hasher(events)
        self._trees: dict[str, Any] = {}
        for tier in TIERS:
            if sizes[tier]:
                self._trees[tier] = self.tree_type(
                    sizes[tier],
                    block_size,
                    policy=policy,
                    policy_options=policy_options,
                    events=hasher,
                )
        self._order: tuple[str, ...] = tuple(self._trees)
        self._next: dict[str, str] = dict(zip(self._order, self._order[1:], strict=False))
        self._registry: dict[str, Registry] = {tier: Registry(block_size) for tier in self._order}
        self._block_size = block_size
        self._write_through = write_through
        self._leases: dict[int, TierLease] = {}
        self._lease_ids = Numbering(1)
        self._hasher = hasher
        self._pending: list[KVEvent] = []
        self._batches: list[KVEventBatch] = []
        self._demoted: Counter[str] = Counter()
        self._restored: Counter[str] = Counter()
        self._dropped: Counter[str] = Counter()

    # ------------------------------------------------------------------ properties

    @property
    def block_size(self) -> int:
        """Tokens per block. O(1)."""
        return self._block_size

    @property
    def tiers(self) -> tuple[str, ...]:
        """The present tiers, fastest first. O(1)."""
        return self._order

    @property
    def clock(self) -> int:
        """The device tree's logical clock (R-LRU-3). O(1)."""
        return int(self._trees[DEVICE].clock)

    @property
    def write_through(self) -> bool:
        """Whether stored paths are copied to the host at insert (R-TIER-4). O(1)."""
        return self._write_through

    @property
    def policy(self) -> str:
        """Every tier's eviction policy. O(1)."""
        return str(self._trees[DEVICE].policy)

    def capacity(self, tier: str) -> int:
        """Tier ``tier``'s capacity in blocks (0 when absent). O(1).

        Raises:
            InvalidArgumentError: ``tier`` is not a tier name.
        """
        self._check_tier_name(tier)
        tree = self._trees.get(tier)
        return 0 if tree is None else int(tree.num_blocks)

    def tree(self, tier: str) -> Any:
        """Tier ``tier``'s radix tree, to read (its ``dump``, ``stats``, ``snapshot``);
        changing it behind the tiered tree's back breaks R-TIER-2. O(1).

        Raises:
            InvalidArgumentError: ``tier`` is not a present tier.
        """
        self._check_tier(tier)
        return self._trees[tier]

    # ------------------------------------------------------------------ queries

    def lookup(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> TierMatch:
        """The longest cached prefix of ``tokens`` across tiers, each block in the fastest
        tier holding it, and the restore plan (``.plan``) (R-TIER-5).

        Without ``pin`` a query: it reads a snapshot of each tier and changes nothing (no
        clock moves, no stamp). With ``pin=True`` each tier that holds the fastest copy of
        some block is matched over its own prefix and pinned there (R-TIER-7), so that a
        later ``restore`` finds every source still in place; that is a use (stamps).

        Cost: O(n * t) for n tokens and t tiers.

        Raises:
            InvalidTokensError: ``tokens`` is malformed (R-TOK-*).
            InvalidArgumentError: ``namespace`` is not None or a str.
        """
        token_list = self._validate(tokens, namespace)
        tiers, blocks, counts = self._locate(token_list, namespace)
        length = len(blocks) * self._block_size
        if not pin:
            return TierMatch(length, tiers, blocks)
        leases: dict[str, Any] = {}
        covered = 0
        for tier in self._order:
            count = counts[tier]
            if count > covered:  # this tier holds the fastest copy of some block
                found = self._trees[tier].match(
                    token_list[: count * self._block_size], namespace, pin=True
                )
                leases[tier] = found.lease
                covered = count
        lease = self._issue(namespace, token_list[:length], leases)
        return TierMatch(length, tiers, blocks, lease)

    def match(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> TierMatch:
        """The device tier's match (R-MATCH-1): the prefix usable with no restore, stamped
        as used, pinned on the device with ``pin=True``.

        Cost: O(n) for n tokens.

        Raises:
            InvalidTokensError: ``tokens`` is malformed (R-TOK-*).
            InvalidArgumentError: ``namespace`` is not None or a str.
        """
        found = self._trees[DEVICE].match(tokens, namespace, pin=pin)
        blocks = tuple(found.blocks)
        lease = None
        if pin:
            lease = self._issue(namespace, tuple(found.lease.tokens), {DEVICE: found.lease})
        return TierMatch(found.length, (DEVICE,) * len(blocks), blocks, lease)

    # ------------------------------------------------------------------ mutations

    def insert(
        self,
        tokens: object,
        namespace: str | None = None,
        *,
        pin: bool = False,
        priority: int | None = None,
        retain_for: int | None = None,
    ) -> TierInsertResult:
        """Cache every whole block of ``tokens`` on the device (R-TIER-2): the device tree's
        insert, then the demotion of what it evicted (R-TIER-3) and, under write-through,
        the host copy of the path (R-TIER-4).

        The caller writes the KV data of ``allocated`` after running ``moves`` and before
        running ``after``.

        Cost: the device insert's, plus O(depth * B) per chain it demotes (the chain's
        path spelled once from its root, B the block size) and the next tier's insert of
        that path.

        Raises:
            InvalidTokensError, InvalidArgumentError: as the tree's ``insert``.
            OutOfBlocksError: the device cannot make room (R-INS-6). Nothing changes.
        """
        token_list = self._validate(tokens, namespace)
        result = self._trees[DEVICE].insert(
            token_list, namespace, pin=pin, priority=priority, retain_for=retain_for
        )
        work = _Work()
        self._drain(DEVICE)
        self._demote(DEVICE, list(result.evicted), work)
        path = token_list[: result.length]
        self._registry[DEVICE].add_path(
            namespace, result.blocks, path, result.reused, self._block_size
        )
        after: list[Move] = []
        if self._write_through:
            after = self._write_host_copy(namespace, path, tuple(result.blocks), work)
        lease = None
        if pin:
            lease = self._issue(namespace, path, {DEVICE: result.lease})
        moves = self._finish(work)
        return TierInsertResult(
            length=result.length,
            blocks=tuple(result.blocks),
            reused=result.reused,
            allocated=tuple(result.allocated),
            evicted=tuple(result.evicted),
            moves=moves,
            after=tuple(after),
            dropped=tuple(work.dropped),
            lease=lease,
        )

    def restore(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> RestoreResult:
        """Bring the whole cached prefix of ``tokens`` to the device (R-TIER-6).

        The cached prefix is inserted into the device tree: its blocks already there are
        reused, the others get the ids and cause the evictions an insert of that prefix
        would; then the sources are pinned in their tiers for the call, the device's
        victims are demoted, and one move per restored block is returned. The host and
        disk copies stay (a later device eviction of them costs nothing). A prefix wholly
        on the device is a match. Stamps the path as used in every tier it reads from.

        Cost: O(n * t) to locate, plus the device insert's and the demotions' costs.

        Raises:
            InvalidTokensError: ``tokens`` is malformed (R-TOK-*).
            InvalidArgumentError: ``namespace`` is not None or a str.
            OutOfBlocksError: the device cannot make room for the blocks to restore.
                Nothing changes (R-TIER-6).
        """
        token_list = self._validate(tokens, namespace)
        tiers, blocks, counts = self._locate(token_list, namespace)
        size = self._block_size
        path = token_list[: len(blocks) * size]
        device = self._trees[DEVICE]
        on_device = counts[DEVICE]
        work = _Work()
        if len(blocks) == on_device:
            found = device.match(path, namespace, pin=pin)
            lease = self._issue(namespace, path, {DEVICE: found.lease}) if pin else None
            self._finish(work)
            return RestoreResult(found.length, tuple(found.blocks), (), (), (), (), lease)
        result = device.insert(path, namespace, pin=pin)  # the only step that may fail
        self._drain(DEVICE)
        covered = on_device
        for tier in self._order[1:]:  # pin the sources before a demotion can displace them
            count = counts[tier]
            if count > covered:
                found = self._trees[tier].match(path[: count * size], namespace, pin=True)
                work.pins.append((tier, found.lease))
                covered = count
        self._demote(DEVICE, list(result.evicted), work)
        self._registry[DEVICE].add_path(namespace, result.blocks, path, on_device, size)
        targets = result.blocks
        restored = tuple(
            map(Move, tiers[on_device:], blocks[on_device:], repeat(DEVICE), targets[on_device:])
        )
        self._restored.update(tiers[on_device:])
        lease = self._issue(namespace, path, {DEVICE: result.lease}) if pin else None
        moves = self._finish(work)
        return RestoreResult(
            length=result.length,
            blocks=tuple(result.blocks),
            restored=restored,
            moves=moves,
            evicted=tuple(result.evicted),
            dropped=tuple(work.dropped),
            lease=lease,
        )

    def evict(self, count: int, tier: str = DEVICE) -> TierEvictResult:
        """Evict up to ``count`` blocks from ``tier`` by its policy, demoting them to the
        next tier (R-TIER-3).

        Cost: the tier's ``evict`` plus the demotions'.

        Raises:
            InvalidArgumentError: ``count`` is not an int >= 0, or ``tier`` is not a present
                tier. Nothing changes.
        """
        self._check_tier(tier)
        freed = self._trees[tier].evict(count)
        work = _Work()
        self._drain(tier)
        self._demote(tier, list(freed), work)
        moves = self._finish(work)
        return TierEvictResult(tier, tuple(freed), moves, tuple(work.dropped))

    def adopt(
        self, tier: str, tokens: object, namespace: str | None = None
    ) -> tuple[tuple[int, ...], int]:
        """Cache a path in a slower tier directly, with no device copy: how a restarted
        process puts back what its disk tier persisted (R-TIER-10). Returns the path's
        ids in that tier and how many leading blocks it already held. Evicts nothing.

        Cost: O(n) for n tokens, plus the tier's insert.

        Raises:
            InvalidTokensError: ``tokens`` is malformed (R-TOK-*).
            InvalidArgumentError: ``namespace`` is not None or a str, or ``tier`` is the
                device (its blocks come from ``insert``) or absent.
            OutOfBlocksError: the tier has too few free ids for the new blocks. Nothing
                changes.
        """
        self._check_tier(tier)
        if tier == DEVICE:
            raise InvalidArgumentError("the device tier's blocks come from insert, not adopt")
        token_list = self._validate(tokens, namespace)
        tree = self._trees[tier]
        held = len(tree.snapshot().match(token_list, namespace).blocks)
        needed = len(token_list) // self._block_size - held
        free = tree.stats().free
        if needed > free:
            raise OutOfBlocksError(f"the {tier} tier has {free} free blocks, {needed} needed")
        result = tree.insert(token_list, namespace)
        self._drain(tier)
        self._registry[tier].add_path(
            namespace, result.blocks, token_list, result.reused, self._block_size
        )
        self._finish(_Work())
        return tuple(result.blocks), result.reused

    def release(self, lease: TierLease) -> None:
        """Release ``lease`` in every tier it pins (R-PIN-4; R-TIER-7).

        Cost: O(length of the lease * tiers).

        Raises:
            ForeignLeaseError: ``lease`` was not issued by this tree.
            LeaseReleasedError: ``lease`` was already released.
        """
        if not isinstance(lease, TierLease) or lease._tree is not self:
            raise ForeignLeaseError(f"{lease!r} was not issued by this tiered tree")
        if lease.released:
            raise LeaseReleasedError(f"lease {lease.id} was already released")
        for tier, tier_lease in lease.leases.items():
            self._trees[tier].release(tier_lease)
        lease._released = True
        del self._leases[lease.id]

    # ------------------------------------------------------------------ events

    def take_events(self) -> list[KVEventBatch]:
        """The KV event batches since the last call, oldest first: one per call that
        cached or evicted blocks in any tier, each event's ``medium`` its tier's
        (R-TIER-9). O(1).

        Raises:
            InvalidArgumentError: the tree was built without ``events``.
        """
        if self._hasher is None:
            raise InvalidArgumentError("this tree emits no events: build it with events=True")
        batches, self._batches = self._batches, []
        return batches

    @property
    def events(self) -> BlockHasher | None:
        """How the tiers name blocks in their events, or None when they emit none. O(1)."""
        return self._hasher

    # ------------------------------------------------------------------ inspection

    def stats(self) -> TieredStats:
        """Each tier's counters and the moves so far. O(tiers)."""
        return TieredStats(
            {tier: self._trees[tier].stats() for tier in self._order},
            Counter(self._demoted),
            Counter(self._restored),
            Counter(self._dropped),
        )

    def block_key(self, tier: str, block: int) -> BlockKey:
        """What block ``block`` of tier ``tier`` holds: its namespace, the block before it
        and its tokens. O(1).

        Raises:
            InvalidArgumentError: ``tier`` is not a present tier, or it caches no block
                ``block``.
        """
        self._check_tier(tier)
        registry = self._registry[tier]
        if isinstance(block, bool) or not isinstance(block, int) or block not in registry:
            raise InvalidArgumentError(f"the {tier} tier caches no block {block!r}")
        return registry.key(block)

    def holds(self, tier: str, block: int) -> bool:
        """Whether tier ``tier`` caches block ``block`` (an id the moves of the last call
        wrote may since have been dropped again). O(1).

        Raises:
            InvalidArgumentError: ``tier`` is not a present tier.
        """
        self._check_tier(tier)
        return (
            not isinstance(block, bool)
            and isinstance(block, int)
            and (block in self._registry[tier])
        )

    def namespaces(self) -> list[str | None]:
        """Namespaces holding a block in any tier, None first then by name. O(r log r)."""
        found = {name for tree in self._trees.values() for name in tree.namespaces()}
        return sorted(found, key=namespace_order)

    def dump(self) -> dict[str, Any]:
        """The device tree's canonical dump (R-DUMP-*), with ``tiers``: each slower present
        tier's own dump, fastest first, and ``write_through`` (R-TIER-1). Two tiered trees
        in the same state give equal dumps. O(cached tokens).
        """
        dump: dict[str, Any] = self._trees[DEVICE].dump()
        dump["write_through"] = self._write_through
        dump["tiers"] = {tier: self._trees[tier].dump() for tier in self._order[1:]}
        return dump

    def check_invariants(self) -> None:
        """Assert every invariant of each tier's tree and of the tier layer. O(size).

        Raises:
            InvariantViolation: one does not hold (a bug, never bad input).
        """
        check_tiers(self._trees, self._registry, self._leases)

    # ------------------------------------------------------------------ the work

    def _validate(self, tokens: object, namespace: object) -> list[int]:
        token_list = as_token_list(tokens)
        check_namespace(namespace)
        return token_list

    def _check_tier_name(self, tier: object) -> None:
        if not isinstance(tier, str) or tier not in RANK:  # an unhashable tier is a bad name too
            raise InvalidArgumentError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")

    def _check_tier(self, tier: object) -> None:
        self._check_tier_name(tier)
        if tier not in self._trees:
            raise InvalidArgumentError(f"this tiered tree has no {tier} tier")

    def _locate(
        self, token_list: list[int], namespace: str | None
    ) -> tuple[tuple[str, ...], tuple[int, ...], dict[str, int]]:
        """Each block of the cached prefix in its fastest tier, and each tier's own
        matched block count, read from snapshots (nothing changes). O(n * t)."""
        tiers: list[str] = []
        blocks: list[int] = []
        counts: dict[str, int] = {}
        for tier in self._order:
            found = self._trees[tier].snapshot().match(token_list, namespace).blocks
            counts[tier] = len(found)
            if len(found) > len(blocks):
                tiers.extend([tier] * (len(found) - len(blocks)))
                blocks.extend(found[len(blocks) :])
        return tuple(tiers), tuple(blocks), counts

    def _demote(self, tier: str, victims: list[int], work: _Work) -> None:
        """Move the paths of ``victims`` (just evicted from ``tier``, in eviction order)
        into the next tier, or drop them (R-TIER-3).

        Each victim's whole path goes down in one insert; what that insert evicts goes on
        down first, so its moves come before the moves filling this chain (each slot is
        read before it is overwritten, R-TIER-8) -- even the blocks an earlier chain of the
        same call just filled may be displaced further down this way. A victim on a chain
        already taken down is done. O(chains * depth * B): a path of n blocks evicted
        whole is spelled once.
        """
        if not victims:
            return
        registry = self._registry[tier]
        # Spell each chain once, deepest victim first, before any id is reused: a victim
        # on a chain already spelled is covered by it (eviction frees a tail before the
        # block above it), so demoting one path of n blocks spells it once -- two slices
        # of the registry's tuples (registry.Registry.path).
        chains: list[tuple[str | None, tuple[int, ...], tuple[int, ...]]] = []
        covered: set[int] = set()
        for victim in victims:
            if victim not in covered:
                chain = registry.path(victim)
                covered.update(chain[1])
                chains.append(chain)
        registry.remove(victims)
        target = self._next.get(tier)
        moved: set[int] = set()
        if target is not None:
            tree = self._trees[target]
            below = self._registry[target]
            moves = work.moves
            for namespace, ids, token_list in chains:
                try:
                    result = tree.insert(token_list, namespace)
                except OutOfBlocksError:
                    continue  # no room for the whole path there (R-TIER-3): dropped whole
                self._drain(target)
                if result.evicted:  # their moves come first
                    self._demote(target, list(result.evicted), work)
                blocks, reused = result.blocks, result.reused
                below.add_path(namespace, blocks, token_list, reused, self._block_size)
                moves.extend(
                    Move(tier, ids[position], target, blocks[position])
                    for position in range(reused, len(ids))
                )
                self._demoted[target] += len(ids) - reused
                moved.update(ids)
        for victim in victims:
            if victim not in moved:
                work.dropped.append((tier, victim))
                self._dropped[tier] += 1

    def _write_host_copy(
        self, namespace: str | None, path: list[int], device_blocks: Sequence[int], work: _Work
    ) -> list[Move]:
        """Write-through (R-TIER-4): insert the stored path into the host tier; the copies
        of its new host blocks, to run after the caller's writes. A host with no room
        (everything pinned) keeps no copy."""
        host = self._trees[HOST]
        try:
            result = host.insert(path, namespace)
        except OutOfBlocksError:
            return []
        self._drain(HOST)
        self._demote(HOST, list(result.evicted), work)
        self._registry[HOST].add_path(
            namespace, result.blocks, path, result.reused, self._block_size
        )
        copies = [
            Move(DEVICE, device_blocks[position], HOST, result.blocks[position])
            for position in range(result.reused, len(result.blocks))
        ]
        self._demoted[HOST] += len(copies)
        return copies

    def _issue(
        self, namespace: str | None, tokens: Sequence[int], leases: dict[str, Any]
    ) -> TierLease:
        lease = TierLease(self, next(self._lease_ids), namespace, tuple(tokens), leases)
        self._leases[lease.id] = lease
        return lease

    def _drain(self, tier: str) -> None:
        """Take ``tier``'s event batches into the call's events, each event marked with
        the tier's medium (R-TIER-9). O(events)."""
        if self._hasher is None:
            return
        medium = MEDIA[tier]
        for batch in self._trees[tier].take_events():
            # A tree emits stores and removals only (R-EVENT-1): each carries a medium.
            self._pending.extend(
                msgspec.structs.replace(event, medium=medium) for event in batch.events
            )

    def _finish(self, work: _Work) -> tuple[Move, ...]:
        """End a call: release its temporary pins (a restore's sources), close its event
        batch, and return its moves in the order they were made (R-TIER-8). O(moves)."""
        for tier, lease in reversed(work.pins):
            self._trees[tier].release(lease)
        if self._pending:
            clock = self._trees[DEVICE].clock
            self._batches.append(KVEventBatch(float(clock), self._pending))
            self._pending = []
        return tuple(work.moves)
