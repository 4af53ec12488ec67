"""Mutants of the logical clock and of recency stamps (R-LRU-*)."""

from __future__ import annotations

from kachedb_radix.reference.errors import RadixError
from kachedb_radix.reference.lease import Lease
from kachedb_radix.reference.results import InsertResult, MatchResult
from kachedb_radix.reference.walk import Path

from .base import MutantTree, lease_of, mutant


@mutant("clock_frozen_on_match", "R-LRU-3")
class ClockFrozenOnMatch(MutantTree):
    """A match stamps with the current time without advancing the clock."""

    def _tick(self) -> int:
        return self._clock if self.calling == "match" else super()._tick()


@mutant("clock_ticks_on_evict", "R-LRU-3", "R-EVICT-4")
class ClockTicksOnEvict(MutantTree):
    """``evict`` advances the logical clock."""

    def evict(self, count: int) -> tuple[int, ...]:
        freed = super().evict(count)
        self._clock += 1
        return freed


@mutant("failed_call_ticks_clock", "R-LRU-3", "R-ERR-2")
class FailedCallTicksClock(MutantTree):
    """A match that raises has already advanced the clock."""

    def match(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> MatchResult:
        try:
            return super().match(tokens, namespace, pin=pin)
        except RadixError:
            self._clock += 1
            raise


@mutant("match_not_stamped", "R-LRU-1")
class MatchNotStamped(MutantTree):
    """A match advances the clock but does not refresh its blocks' stamps."""

    def _stamp(self, path: Path, now: int) -> None:
        if self.calling != "match":
            super()._stamp(path, now)


@mutant("release_not_stamped", "R-LRU-1")
class ReleaseNotStamped(MutantTree):
    """A release advances the clock but does not refresh the released blocks."""

    def release(self, lease: Lease) -> None:
        own = lease_of(self, lease)
        if own is None or own.released:
            super().release(lease)
            return
        path, _ = self._walk(own.namespace, list(own.tokens), len(own.blocks))
        self._adjust_pins(path, -1)
        self._tick()
        own._released = True
        del self._leases[own.id]
        self._publish()


@mutant("insert_stamps_new_blocks_only", "R-LRU-1", "R-LRU-2")
class InsertStampsNewBlocksOnly(MutantTree):
    """An insert stamps the blocks it added but not the prefix it reused."""

    def insert(
        self,
        tokens: object,
        namespace: str | None = None,
        *,
        pin: bool = False,
        priority: int | None = None,
        retain_for: int | None = None,
    ) -> InsertResult:
        token_list = self._validate(tokens, namespace)
        self._reused = self._walk(namespace, token_list, len(token_list) // self._block_size)[1]
        return super().insert(tokens, namespace, pin=pin, priority=priority, retain_for=retain_for)

    def _stamp(self, path: Path, now: int) -> None:
        if self.calling != "insert":
            super()._stamp(path, now)
            return
        skip = self._reused
        for node, used in path:
            for block in node.blocks[:used]:
                if skip > 0:
                    skip -= 1
                    continue
                self._stamps[block] = now
        if path:
            self._offer(path[-1][0].nid)
