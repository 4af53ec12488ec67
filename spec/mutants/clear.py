"""Mutants of clearing the whole prefix cache (R-CLEAR-*, R-EVENT-7)."""

from __future__ import annotations

from kachedb_radix.reference.dump import dump_blocks

from .base import MutantTree, mutant


@mutant("clear_ignores_pins", "R-CLEAR-2")
class ClearIgnoresPins(MutantTree):
    """``reset_prefix_cache`` clears while a live lease pins blocks (it checks readers
    and the quarantine only)."""

    def reset_prefix_cache(self) -> bool:
        held, self._pinned = self._pinned, 0
        cleared = super().reset_prefix_cache()
        if not cleared:
            self._pinned = held
        return cleared


@mutant("clear_ignores_readers", "R-CLEAR-2")
class ClearIgnoresReaders(MutantTree):
    """``reset_prefix_cache`` clears while a reader is inside, whose version still holds
    the blocks it frees."""

    def reset_prefix_cache(self) -> bool:
        inside, self._readers = self._readers, {}
        try:
            return super().reset_prefix_cache()
        finally:
            self._readers = inside


@mutant("clear_ticks_the_clock", "R-CLEAR-1")
class ClearTicksTheClock(MutantTree):
    """A clear advances the logical clock, as if it were a use of the blocks."""

    def reset_prefix_cache(self) -> bool:
        cleared = super().reset_prefix_cache()
        if cleared:
            self._tick()
        return cleared


@mutant("clear_removes_each_block", "R-EVENT-7", events=True)
class ClearRemovesEachBlock(MutantTree):
    """A clear announces the blocks it freed as one ``BlockRemoved``, not as one
    ``AllBlocksCleared``."""

    def reset_prefix_cache(self) -> bool:
        events = self._events
        if events is None:
            return super().reset_prefix_cache()
        blocks = sorted(dump_blocks(self.dump()))
        self._events = None
        try:
            cleared = super().reset_prefix_cache()
        finally:
            self._events = events
        if cleared:
            if blocks:
                events.removed(blocks)
            events.flush(self._clock)
        return cleared
