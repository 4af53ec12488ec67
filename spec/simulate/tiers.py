"""Host and disk tiers under each worker's device pool (``--tiers``).

A *tier configuration* (:class:`TierSpec`) gives every worker a host tier and/or a disk
tier below its device pool: each worker's tree is then a
:class:`~kachedb_radix.reference.tiers.TieredTree` (the C twin's,
:class:`kachedb_radix.accel.TieredTree`, with ``--impl accel``) whose device tier is
the swept capacity. Its rules are the tiered tree's (R-TIER-*): a block the device
evicts is demoted to the host, a block the host evicts to disk, the last tier drops;
write-back by default, ``write_through`` copies every stored path to the host at once.

What a request does, in both modes (:class:`TieredWorkerTree`, the tiered tree as the
engines see a worker's tree):

1. its prompt's cached prefix is looked up across the tiers and **restored** to the
   device (``TieredTree.restore``, pinned): the leading blocks already on the device
   are the *device* hit, the next ones come from the host, then from disk (a tier's
   copy is prefix-closed, so the split is a device run, a host run, a disk run);
2. the rest is prefilled, and the sequence inserted on the device (``insert``, which
   demotes what it evicts);
3. the leases are released when the request is done.

A restore is priced by :meth:`~kachedb_radix.spec.simulate.plan.cost.CostModel.restore_ms`
per tier (bytes over the tier's bandwidth, plus a latency per restore); in the timed
mode a worker's restores run one after another on its link and the request's prefill
waits for its own (:mod:`~kachedb_radix.spec.simulate.plan.engine`). Demotions and
write-through copies run device to host -- the link's other direction -- and host to
disk, beside the compute: they are not charged. The sequential mode has no time: it
reports the split, not restore times.

**Capacities.** Like the device pool (the swept capacity), the host and disk
capacities are a cluster's totals, split evenly over its workers; each is given in
blocks, tokens, bytes or GPUs as ``--capacity`` is (:meth:`Sizing.parse`), and no tier
is built larger than the trace's working set (a larger one would never evict).

**Figures** (:class:`TierHits`): the token hit ratio per tier -- the prompt tokens each
tier supplied over every prompt token, so device + host + disk + miss = 1 and device +
host + disk is the configuration's hit ratio -- the blocks restored from each tier, the
restore times (timed), and the blocks demoted into and dropped from each tier.

Cost: a tiered worker does O(n * tiers) per request of n tokens plus its trees' work.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kachedb_radix.reference.errors import InvalidArgumentError
from kachedb_radix.reference.tiers.levels import DEVICE, DISK, HOST

from ..twins import twin_class
from .errors import SimulateError
from .metrics import hit_stats, percentiles
from .plan.hardware import Sizing
from .sequential import PROGRESS_EVERY, Progress, Replay
from .trace import Trace

#: The slower tiers, fastest first.
SLOWER = (HOST, DISK)


@dataclass(frozen=True)
class TierSpec:
    """One tier configuration: a cluster's host and disk blocks in all, and whether
    stored paths are written through to the host (see the module docstring).

    Raises:
        SimulateError: a negative capacity, no slower tier at all, or write-through
            without a host tier.
    """

    host_blocks: int = 0
    disk_blocks: int = 0
    write_through: bool = False

    def __post_init__(self) -> None:
        if self.host_blocks < 0 or self.disk_blocks < 0:
            raise SimulateError("--tiers: a tier's capacity must be >= 0 blocks")
        if not self.host_blocks and not self.disk_blocks:
            raise SimulateError("--tiers: give a host or a disk tier (host=SIZE, disk=SIZE)")
        if self.write_through and not self.host_blocks:
            raise SimulateError("--tiers: write-through needs a host tier (host=SIZE)")

    @property
    def label(self) -> str:
        """``host8000``, ``host8000+disk80000+wt``: its part of a configuration's name. O(1)."""
        parts = []
        if self.host_blocks:
            parts.append(f"host{self.host_blocks}")
        if self.disk_blocks:
            parts.append(f"disk{self.disk_blocks}")
        if self.write_through:
            parts.append("wt")
        return "+".join(parts)

    def pools(self, workers: int, limit: int) -> list[tuple[int, int]]:
        """Each worker's (host, disk) blocks: each total split evenly (the first
        workers get the remainder), at most ``limit``; an absent tier stays 0. O(workers)."""
        found = []
        for worker in range(workers):
            shares = []
            for total in (self.host_blocks, self.disk_blocks):
                share, extra = divmod(total, workers)
                size = share + (worker < extra)
                shares.append(0 if not total else min(limit, max(1, size)))
            found.append((shares[0], shares[1]))
        return found

    def to_json(self, sizing: Sizing) -> dict[str, Any]:
        """Plain data for results.json. O(1)."""
        host_gib, disk_gib = sizing.gib(self.host_blocks), sizing.gib(self.disk_blocks)
        return {
            "host_blocks": self.host_blocks,
            "disk_blocks": self.disk_blocks,
            "host_gib": None if host_gib is None else round(host_gib, 3),
            "disk_gib": None if disk_gib is None else round(disk_gib, 3),
            "write_through": self.write_through,
        }


def parse_tiers(text: str, sizing: Sizing, write_through: bool = False) -> TierSpec:
    """``host=2TiB,disk=20TiB`` (sizes as ``--capacity`` takes them), with
    ``write-through`` or ``write-back`` as a word of its own (default:
    ``write_through``). O(len(text)).

    Raises:
        SimulateError: an unknown key, a key given twice, a bad size, or a spec
            :class:`TierSpec` refuses.
    """
    sizes: dict[str, int] = {}
    through = write_through
    for word in (part.strip() for part in text.split(",")):
        if word in ("write-through", "write-back"):
            through = word == "write-through"
            continue
        key, equals, value = word.partition("=")
        key = key.strip().lower()
        if not equals or key not in SLOWER:
            raise SimulateError(
                f"--tiers: {word!r} is not host=SIZE, disk=SIZE, write-through or write-back"
            )
        if key in sizes:
            raise SimulateError(f"--tiers: {key} given twice in {text!r}")
        sizes[key] = sizing.parse(value, flag=f"--tiers {key}")
    return TierSpec(sizes.get(HOST, 0), sizes.get(DISK, 0), through)


class TieredLease:
    """A tiered tree's lease with the ``release()`` the engines call. O(1) to make."""

    __slots__ = ("_lease", "_tiers")

    def __init__(self, tiers: Any, lease: Any) -> None:
        self._tiers = tiers
        self._lease = lease

    def release(self) -> None:
        """Release it in every tier it pins (R-TIER-7). O(its length * tiers)."""
        self._tiers.release(self._lease)


@dataclass(frozen=True, slots=True)
class TieredHit:
    """A request's hit across tiers, now on the device and pinned there.

    Attributes:
        length: tree tokens of the whole hit (every tier).
        lease: its pin on the device.
        host, disk: tree tokens of it restored from the host, from disk (the device
            part is ``length - host - disk``, the leading run).
    """

    length: int
    lease: TieredLease
    host: int
    disk: int


@dataclass(frozen=True, slots=True)
class TieredInsert:
    """What an insert did, as the engines read it: the device ids it ``evicted`` (each
    demoted, or dropped when no slower tier takes it) and its ``lease`` (when pinned)."""

    length: int
    evicted: tuple[int, ...]
    lease: TieredLease | None


class TieredWorkerTree:
    """A worker's tiered tree seen as a radix tree by the engines (see the module
    docstring): ``match`` restores the cached prefix to the device and pins it,
    ``insert`` caches on the device; ``num_blocks`` is the device's capacity.

    Args:
        tiers: a :class:`~kachedb_radix.reference.tiers.TieredTree` (either twin).

    Attributes:
        restored: the last match's tree tokens restored, by tier (the engine's restore
            hook reads it right after the match).
        restore_evictions: device blocks the restores evicted (demoted) so far.
    """

    def __init__(self, tiers: Any) -> None:
        self.tiers = tiers
        self.num_blocks: int = tiers.capacity(DEVICE)
        self.block_size: int = tiers.block_size
        self.restored: dict[str, int] = {HOST: 0, DISK: 0}
        self.restore_evictions = 0
        self._longest = self.num_blocks * self.block_size

    def match(
        self, tokens: Sequence[int], namespace: str | None = None, *, pin: bool = True
    ) -> TieredHit:
        """Restore the cached prefix of ``tokens`` (at most the device's capacity) to the
        device, pinned (the engines always pin: ``pin`` must be True). O(n * tiers) plus
        the restore's insert.

        Raises:
            OutOfBlocksError: the device has no room for it (pinned full); nothing changed.
            ValueError: ``pin`` is False.
        """
        if not pin:
            raise ValueError("a tiered worker's match restores and pins: pin must be True")
        if len(tokens) > self._longest:
            tokens = tokens[: self._longest]
        done = self.tiers.restore(tokens, namespace, pin=True)
        host = disk = 0
        for move in done.restored:
            if move.source_tier == HOST:
                host += 1
            else:
                disk += 1
        size = self.block_size
        self.restored = {HOST: host * size, DISK: disk * size}
        self.restore_evictions += len(done.evicted)
        return TieredHit(done.length, TieredLease(self.tiers, done.lease), host * size, disk * size)

    def insert(
        self,
        tokens: Sequence[int],
        namespace: str | None = None,
        *,
        pin: bool = False,
        priority: int | None = None,
        retain_for: int | None = None,
    ) -> TieredInsert:
        """Cache ``tokens`` on the device, demoting what that evicts. The tiered tree's
        ``insert`` cost.

        Raises:
            OutOfBlocksError: the device cannot make room; nothing changed.
        """
        done = self.tiers.insert(
            tokens, namespace, pin=pin, priority=priority, retain_for=retain_for
        )
        lease = None if done.lease is None else TieredLease(self.tiers, done.lease)
        return TieredInsert(done.length, done.evicted, lease)

    def stats(self) -> Any:
        """The device tier's counters (``pinned``, ``free``, ...). O(tiers)."""
        return self.tiers.tree(DEVICE).stats()

    def take_events(self) -> list[Any]:
        """Every tier's KV event batches since the last call (R-TIER-9). O(1)."""
        return list(self.tiers.take_events())


@dataclass
class TierRecord:
    """What a tiered replay found, per request (by trace index) and per run.

    Attributes:
        host, disk: tree tokens of each request's hit restored from the host, from disk.
        restore_ms: how long each request's prefill waited for its restore (timed mode;
            0 without a restore; empty in the sequential mode).
        link_busy_ms: the workers' restore transfers, added up (timed mode).
        demoted, dropped: blocks demoted into / dropped from each tier, every worker's.
    """

    host: list[int]
    disk: list[int]
    restore_ms: list[float] = field(default_factory=list)
    link_busy_ms: float = 0.0
    demoted: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)


def tier_moves(trees: Sequence[Any]) -> tuple[dict[str, int], dict[str, int]]:
    """Blocks demoted into and dropped from each tier, over ``trees`` (tiered). O(trees)."""
    demoted: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    for tree in trees:
        stats = tree.tiers.stats()
        demoted.update(stats.demoted)
        dropped.update(stats.dropped)
    return dict(sorted(demoted.items())), dict(sorted(dropped.items()))


def is_tiered(trees: Sequence[Any]) -> bool:
    """Whether ``trees`` are tiered workers' trees. O(1)."""
    return bool(trees) and isinstance(trees[0], TieredWorkerTree)


def replay_tiered(trace: Trace, tree: TieredWorkerTree, progress: Progress | None = None) -> Replay:
    """The sequential mode on one tiered worker: per request, restore its cached prefix
    (pinned), insert its sequence (at most the device's capacity), release. O(total
    tokens * tiers) plus the trees' work.

    Raises:
        ValueError: the tree's block size is not the trace's.
    """
    if tree.block_size != trace.block_size:
        raise ValueError(f"tree block size {tree.block_size} != trace's {trace.block_size}")
    longest = tree.num_blocks * trace.block_size
    lengths: list[int] = []
    host: list[int] = []
    disk: list[int] = []
    evictions = truncated = 0
    for request in trace.requests:
        hit = tree.match(request.tokens, request.namespace)
        sequence = request.sequence
        if len(sequence) >= longest + trace.block_size:
            sequence = sequence[:longest]
            truncated += 1
        stored = tree.insert(
            sequence, request.namespace, priority=request.priority, retain_for=request.retain_for
        )
        evictions += len(stored.evicted)
        hit.lease.release()
        lengths.append(hit.length)
        host.append(hit.host)
        disk.append(hit.disk)
        if progress is not None and len(lengths) % PROGRESS_EVERY == 0:
            progress(PROGRESS_EVERY)
    if progress is not None:
        progress(len(lengths) % PROGRESS_EVERY)
    demoted, dropped = tier_moves([tree])
    return Replay(
        lengths=lengths,
        order=list(range(len(lengths))),
        evictions=evictions + tree.restore_evictions,
        peak_pinned=max(lengths, default=0) // trace.block_size,
        truncated=truncated,
        restored=sum(host) + sum(disk),
        tiers=TierRecord(host, disk, demoted=demoted, dropped=dropped),
    )


@dataclass(frozen=True)
class TierHits:
    """A tiered run's figures (see the module docstring); tokens are real tokens.

    Attributes:
        prompt_tokens: every request's prompt tokens (the ratios' denominator).
        device_tokens, host_tokens, disk_tokens: prompt tokens each tier supplied.
        host_blocks, disk_blocks: tree blocks restored from each slower tier.
        restores: requests that restored anything.
        restore_ms: p50, p90, p99 of the restoring requests' wait for their restore
            (timed mode; {} otherwise).
        link_busy_s: the restores' transfer time, every worker's added up (timed).
        demoted, dropped: blocks demoted into / dropped from each tier.
    """

    prompt_tokens: int
    device_tokens: int
    host_tokens: int
    disk_tokens: int
    host_blocks: int
    disk_blocks: int
    restores: int
    restore_ms: dict[str, float]
    link_busy_s: float
    demoted: dict[str, int]
    dropped: dict[str, int]

    def ratio(self, tier: str) -> float:
        """The share of prompt tokens ``tier`` supplied (``miss``: none did). O(1)."""
        if not self.prompt_tokens:
            return 0.0
        supplied = {
            DEVICE: self.device_tokens,
            HOST: self.host_tokens,
            DISK: self.disk_tokens,
            "miss": self.prompt_tokens - self.device_tokens - self.host_tokens - self.disk_tokens,
        }
        return supplied[tier] / self.prompt_tokens

    def to_json(self) -> dict[str, Any]:
        """The figures as results.json has them. O(1)."""
        return {
            "device_hit_ratio": round(self.ratio(DEVICE), 6),
            "host_hit_ratio": round(self.ratio(HOST), 6),
            "disk_hit_ratio": round(self.ratio(DISK), 6),
            "miss_ratio": round(self.ratio("miss"), 6),
            "device_tokens": self.device_tokens,
            "host_tokens": self.host_tokens,
            "disk_tokens": self.disk_tokens,
            "restored_blocks": {HOST: self.host_blocks, DISK: self.disk_blocks},
            "restores": self.restores,
            "restore_ms": self.restore_ms or None,
            "link_busy_s": round(self.link_busy_s, 6),
            "demoted_blocks": self.demoted,
            "dropped_blocks": self.dropped,
        }


def tier_hits(trace: Trace, lengths: Sequence[int], record: TierRecord) -> TierHits:
    """The per-tier figures of a run from its matched lengths and its record. O(n)."""
    device = []
    near = []  # device and host
    for length, host, disk in zip(lengths, record.host, record.disk, strict=True):
        device.append(length - host - disk if length >= 0 else length)
        near.append(length - disk if length >= 0 else length)
    on_device = hit_stats(trace, device).saved_tokens
    with_host = hit_stats(trace, near).saved_tokens
    total = hit_stats(trace, lengths)
    size = trace.block_size
    waits = []
    if record.restore_ms:  # the timed mode's
        pairs = zip(record.restore_ms, record.host, record.disk, strict=True)
        waits = [wait for wait, host, disk in pairs if host or disk]
    return TierHits(
        prompt_tokens=total.prompt_tokens,
        device_tokens=on_device,
        host_tokens=with_host - on_device,
        disk_tokens=total.saved_tokens - with_host,
        host_blocks=sum(record.host) // size,
        disk_blocks=sum(record.disk) // size,
        restores=sum(1 for pair in zip(record.host, record.disk, strict=True) if any(pair)),
        restore_ms=percentiles(waits),
        link_busy_s=record.link_busy_ms / 1000.0,
        demoted=record.demoted,
        dropped=record.dropped,
    )


def make_tiered_trees(
    implementation: str,
    spec: TierSpec,
    pools: Sequence[int],
    limit: int,
    block_size: int,
    keywords: dict[str, Any],
) -> list[TieredWorkerTree]:
    """One tiered worker tree per device pool of ``pools``, with ``spec``'s slower tiers
    split over them; ``keywords`` the trees' policy and events. O(total capacity).

    Raises:
        SimulateError: the tiered tree refuses an argument.
    """
    factory = twin_class(implementation, "TieredTree")
    trees = []
    for device, (host, disk) in zip(pools, spec.pools(len(pools), limit), strict=True):
        try:
            tiers = factory(
                device, host, disk, block_size, write_through=spec.write_through, **keywords
            )
        except InvalidArgumentError as error:
            raise SimulateError(f"--tiers: {error}") from None
        trees.append(TieredWorkerTree(tiers))
    return trees
