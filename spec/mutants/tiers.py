"""Planted bugs of the tiered cache (R-TIER-*): each is the reference's
:class:`~kachedb_radix.reference.tiers.TieredTree` with one step wrong, run at the opt-in
``tiers`` level.

Each overrides one step of the tier layer -- where victims go (``_next``), the order of a
call's moves (``_finish``), how tiers are read (``_locate``), the write-through copy
(``_write_host_copy``) or a public call around the reference's own -- and leaves the
trees of its tiers the reference's. The bugs are the ones tiered caches have had: a
device eviction that loses blocks the host had room for, copies run in an order that
reads a slot after it was reused, a restore that evicted before it found it had no room,
a lookup that served another tenant's host copy, a pin that held only the device, a
write-through flag nobody read, a query that changed recency.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kachedb_radix.reference.errors import OutOfBlocksError
from kachedb_radix.reference.tiers import Move, RestoreResult, TieredTree, TierMatch
from kachedb_radix.reference.tiers.levels import DEVICE, RANK
from kachedb_radix.reference.tokens import as_token_list

from .base import tier_mutant


class TierMutant(TieredTree):
    """The tiered reference; a mutant overrides one step. Unmutated it is the reference."""

    implementation = "mutant:none"


@tier_mutant("tier_no_demotion", "R-TIER-3")
class TierNoDemotion(TierMutant):
    """Victims are dropped, never demoted: the host and the disk only fill by write-through."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self._next = {}


@tier_mutant("tier_moves_fastest_first", "R-TIER-8", "R-TIER-3")
class TierMovesFastestFirst(TierMutant):
    """A call's moves are sorted fastest target first: a host slot is refilled before its
    old block was copied down, so the disk gets the new block's bytes."""

    def _finish(self, work: Any) -> tuple[Move, ...]:
        moves = super()._finish(work)
        return tuple(sorted(moves, key=lambda move: RANK[move.target_tier]))


@tier_mutant("tier_restore_not_atomic", "R-TIER-6", "R-ERR-2")
class TierRestoreNotAtomic(TierMutant):
    """A restore without device room evicts a block before it gives up."""

    def restore(self, tokens: object, namespace: str | None = None, *, pin: bool = False) -> Any:
        try:
            return super().restore(tokens, namespace, pin=pin)
        except OutOfBlocksError:
            self.evict(1)
            raise


@tier_mutant("tier_lookup_crosses_namespaces", "R-TIER-8", "R-TIER-5")
class TierLookupCrossesNamespaces(TierMutant):
    """The slower tiers are searched without the namespace: a tenant is served another's
    host copy of the same tokens."""

    def _locate(
        self, token_list: list[int], namespace: str | None
    ) -> tuple[tuple[str, ...], tuple[int, ...], dict[str, int]]:
        tiers: list[str] = []
        blocks: list[int] = []
        counts: dict[str, int] = {}
        for tier in self._order:
            space = namespace if tier == DEVICE else None
            found = self._trees[tier].snapshot().match(token_list, space).blocks
            counts[tier] = len(found)
            if len(found) > len(blocks):
                tiers.extend([tier] * (len(found) - len(blocks)))
                blocks.extend(found[len(blocks) :])
        return tuple(tiers), tuple(blocks), counts


@tier_mutant("tier_pin_device_only", "R-TIER-7")
class TierPinDeviceOnly(TierMutant):
    """A pinned lookup pins the device's run only: the host copy a restore will read can
    be demoted (or dropped) before it does."""

    def lookup(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> TierMatch:
        found = super().lookup(tokens, namespace)
        if not pin:
            return found
        token_list = as_token_list(tokens)
        leases: dict[str, Any] = {}
        if found.on_device:
            device_run = token_list[: found.on_device * self.block_size]
            leases[DEVICE] = self._trees[DEVICE].match(device_run, namespace, pin=True).lease
        lease = self._issue(namespace, token_list[: found.length], leases)
        return dataclasses.replace(found, lease=lease)


@tier_mutant("tier_write_through_ignored", "R-TIER-4")
class TierWriteThroughIgnored(TierMutant):
    """``write_through`` is accepted and reported, and never acted on."""

    def _write_host_copy(self, *args: Any) -> list[Move]:
        return []


@tier_mutant("tier_restore_wrong_source", "R-TIER-8", "R-TIER-6")
class TierRestoreWrongSource(TierMutant):
    """A restore of two blocks or more copies them up in reverse: each lands in the other's
    device block."""

    def restore(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> RestoreResult:
        done = super().restore(tokens, namespace, pin=pin)
        if len(done.restored) < 2:
            return done
        sources = [(move.source_tier, move.source) for move in reversed(done.restored)]
        swapped = tuple(
            Move(tier, source, move.target_tier, move.target)
            for (tier, source), move in zip(sources, done.restored, strict=True)
        )
        return dataclasses.replace(done, restored=swapped)


@tier_mutant("tier_lookup_stamps", "R-TIER-5")
class TierLookupStamps(TierMutant):
    """A lookup without a pin is a device match: asking what a prompt would cost changes
    the device's recency."""

    def lookup(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> TierMatch:
        found = super().lookup(tokens, namespace, pin=pin)
        if not pin:
            self._trees[DEVICE].match(tokens, namespace)
        return found
