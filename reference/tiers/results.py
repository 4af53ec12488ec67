"""Plain records returned by the tiered tree's calls, and its lease.

Every call that moves blocks between tiers returns the copies the bytes layer must make
as :class:`Move` records, in the order they must run (R-TIER-8): run one after the
other, each move reads its source before any later move writes it. The tree never touches bytes; the
:class:`~kachedb_radix.reference.tiers.cache.KVCache` carries moves out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..results import TreeStats


@dataclass(frozen=True, slots=True)
class Move:
    """One block copied from one tier to another.

    Attributes:
        source_tier: the tier it is read from.
        source: its id there.
        target_tier: the tier it is written to.
        target: its id there.
    """

    source_tier: str
    source: int
    target_tier: str
    target: int


@dataclass(frozen=True, slots=True)
class RestorePlan:
    """What bringing a matched prefix to the device reads (R-TIER-5, R-TIER-6).

    Attributes:
        start: the first block not on the device (the device holds blocks ``0 .. start-1``).
        sources: ``(tier, id)`` of blocks ``start ..``, in path order: the host blocks
            first, then the disk blocks (a faster tier's run always comes first).

    The device ids they will get are chosen when :meth:`TieredTree.restore` runs, exactly
    as an insert chooses new ids (the allocator's smallest free ids, after evicting on the
    device what an insert would evict); its :class:`RestoreResult` names each pair.
    """

    start: int
    sources: tuple[tuple[str, int], ...]

    def count(self, tier: str) -> int:
        """How many blocks come from ``tier``. O(n)."""
        return sum(1 for source_tier, _ in self.sources if source_tier == tier)


class TierLease:
    """A pin on a path in each tier that holds part of it (R-TIER-7): the blocks it covers
    stay in their tiers until :meth:`TieredTree.release`. Issued by ``lookup``, ``match``,
    ``restore`` and ``insert`` with ``pin=True``.

    Attributes:
        id: unique per tree, from 1.
        namespace, tokens: the path pinned (its whole blocks).
        leases: each tier's own lease, fastest tier first.
    """

    __slots__ = ("_released", "_tree", "id", "leases", "namespace", "tokens")

    def __init__(
        self,
        tree: object,
        lease_id: int,
        namespace: str | None,
        tokens: tuple[int, ...],
        leases: dict[str, Any],
    ) -> None:
        self._tree = tree
        self.id = lease_id
        self.namespace = namespace
        self.tokens = tokens
        self.leases = leases
        self._released = False

    @property
    def released(self) -> bool:
        """Whether the lease was released. O(1)."""
        return self._released

    def __repr__(self) -> str:
        state = "released" if self._released else "live"
        return f"<TierLease {self.id} {state} over {', '.join(self.leases) or 'nothing'}>"


@dataclass(frozen=True, slots=True)
class TierMatch:
    """What ``lookup`` (or ``match``) found: the cached prefix across tiers (R-TIER-5).

    Attributes:
        length: tokens matched, a multiple of the block size.
        tiers: per matched block, root first, the fastest tier holding it.
        blocks: per matched block, its id in that tier.
        lease: the lease pinning it in those tiers when ``pin=True`` was asked.
    """

    length: int
    tiers: tuple[str, ...]
    blocks: tuple[int, ...]
    lease: TierLease | None = None

    @property
    def on_device(self) -> int:
        """How many leading blocks are on the device already. O(n)."""
        count = 0
        for tier in self.tiers:
            if tier != "device":
                break
            count += 1
        return count

    @property
    def plan(self) -> RestorePlan:
        """The blocks a restore would bring to the device, and from where. O(n)."""
        start = self.on_device
        return RestorePlan(start, tuple(zip(self.tiers[start:], self.blocks[start:], strict=True)))


@dataclass(frozen=True, slots=True)
class TierInsertResult:
    """What ``insert`` did (R-TIER-2, R-TIER-3, R-TIER-4).

    Attributes:
        length, blocks, reused, allocated, evicted: the device tree's insert result
            (the device ids of the path, the new ones the caller fills, the ones evicted).
        moves: the copies to make *before* the caller writes the new blocks: the evicted
            blocks' demotions and what those displaced further down (R-TIER-8).
        after: write-through copies of the new blocks to the host, to make once the caller
            has written them (R-TIER-4); empty under write-back.
        dropped: ``(tier, id)`` of blocks that left a tier without a slower tier taking
            them (the last tier's victims, or a chain the next tier had no room for).
        lease: the lease pinning the path on the device when ``pin=True`` was asked.
    """

    length: int
    blocks: tuple[int, ...]
    reused: int
    allocated: tuple[int, ...]
    evicted: tuple[int, ...]
    moves: tuple[Move, ...]
    after: tuple[Move, ...]
    dropped: tuple[tuple[str, int], ...]
    lease: TierLease | None = None


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """What ``restore`` did (R-TIER-6).

    Attributes:
        length: tokens now on the device for the path (the whole cached prefix).
        blocks: their device ids, root first.
        restored: one move per block brought up, source to its new device id, in path
            order; they run after ``moves``.
        moves: the demotions the restore's device eviction caused, to run first.
        evicted: device ids evicted to make room.
        dropped: as in :class:`TierInsertResult`.
        lease: the lease pinning the path on the device when ``pin=True`` was asked.
    """

    length: int
    blocks: tuple[int, ...]
    restored: tuple[Move, ...]
    moves: tuple[Move, ...]
    evicted: tuple[int, ...]
    dropped: tuple[tuple[str, int], ...]
    lease: TierLease | None = None


@dataclass(frozen=True, slots=True)
class TierEvictResult:
    """What ``evict`` did: ``freed`` ids of ``tier`` (in eviction order), the demotions
    (``moves``, in order) and the blocks ``dropped`` (R-TIER-3)."""

    tier: str
    freed: tuple[int, ...]
    moves: tuple[Move, ...]
    dropped: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class TieredStats:
    """Counters of a tiered tree.

    Attributes:
        tiers: each present tier's tree counters, fastest first.
        demoted: blocks copied into each tier by demotion (and write-through) so far.
        restored: blocks brought up to the device from each tier so far.
        dropped: blocks that left each tier with no slower tier taking them so far.
    """

    tiers: dict[str, TreeStats]
    demoted: Counter[str] = field(default_factory=Counter)
    restored: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)

    @property
    def cached(self) -> int:
        """Blocks cached over all tiers (a block in two tiers counts twice). O(tiers)."""
        return sum(stats.cached for stats in self.tiers.values())
