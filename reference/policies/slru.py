"""``slru``: segmented LRU -- blocks found again are protected; probation goes first
(R-POL-6).

Each cached block is in one of two segments. A new block enters *probation*; a hit
(a match or an insert finding it cached, as for ``lfu``) moves it to the
*protected* segment. The protected segment holds at most ``P = num_blocks *
protected_percent // 100`` blocks (option ``protected_percent``, default 80): when a
promotion overfills it, the least recently used protected block -- smallest
``(stamp, block)``, any block, not only a leaf tail -- is *demoted* to probation,
keeping its stamp; promotions go in path order, root first, each followed by its
demotion. The key is ``(protected, stamp, block)``: probation before protected,
least recently used first in each.

Across a split blocks keep their segments (per block, R-SPLIT-2); an extension's
new blocks enter probation; a block evicted leaves its segment, and cached again
starts in probation. A release is not a hit: it restamps, it promotes nothing.

The protected blocks wait in a heap of ``(stamp, block)`` with lazy deletion: a use
pushes the block's new entry, and an entry that no longer matches its block's stamp
or segment is skipped when it comes up (rebuilt when stale entries outnumber live
ones). O(log P) amortised per hit; ``evict`` pays O(1) more.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from .base import UNCHANGED, EvictionPolicy, Key, check_int_option
from .retention import Retention

#: The protected segment's default share of the pool, in percent (as Caffeine's).
DEFAULT_PROTECTED_PERCENT = 80


class SlruPolicy(EvictionPolicy):
    """Segmented LRU. Option ``protected_percent`` (int ``0 .. 100``, default 80)."""

    name = "slru"
    option_names = ("protected_percent",)
    dump_fields = ("protected",)
    key_names = ("protected", "stamp")

    def __init__(self, num_blocks: int, stamps: list[int], options: dict[str, object]) -> None:
        super().__init__(num_blocks, stamps, options)
        self._percent: int = self.check_options(options)["protected_percent"]  # type: ignore[assignment]
        self._capacity = num_blocks * self._percent // 100
        self._protected = [0] * num_blocks
        self._count = 0
        self._lru: list[tuple[int, int]] = []  # (stamp, block) of protected blocks, lazily

    @classmethod
    def check_options(cls, options: dict[str, object]) -> dict[str, object]:
        """``protected_percent`` checked. O(1)."""
        percent = check_int_option(options, "protected_percent", DEFAULT_PROTECTED_PERCENT, 0, 100)
        return {"protected_percent": percent}

    @property
    def capacity(self) -> int:
        """The protected segment's size in blocks, P. O(1)."""
        return self._capacity

    def key(self, block: int) -> Key:
        """``(protected, stamp, block)``. O(1)."""
        return (self._protected[block], self._stamps[block], block)

    def options(self) -> dict[str, object]:
        """``protected_percent``. O(1)."""
        return {"protected_percent": self._percent}

    def cached(
        self, blocks: Sequence[int], now: int, namespace: str | None, retention: Retention
    ) -> Sequence[int]:
        """New blocks enter probation. O(len(blocks))."""
        for block in blocks:
            self._protected[block] = 0
        return UNCHANGED

    def found(
        self, blocks: Sequence[int], now: int, namespace: str | None, retention: Retention | None
    ) -> Sequence[int]:
        """Each block found is promoted (or, if protected, re-stamped in the segment);
        an overfull segment demotes its least recently used. Returns the demoted
        blocks. O(len(blocks) * log P) amortised."""
        demoted: list[int] = []
        for block in blocks:
            if not self._protected[block]:
                self._protected[block] = 1
                self._count += 1
            heapq.heappush(self._lru, (self._stamps[block], block))
            if self._count > self._capacity:
                demoted.append(self._demote())
        self._compact()
        return demoted

    def released(self, blocks: Sequence[int], now: int) -> Sequence[int]:
        """Protected blocks of the lease move up the segment's recency. O(k log P)."""
        for block in blocks:
            if self._protected[block]:
                heapq.heappush(self._lru, (self._stamps[block], block))
        self._compact()
        return UNCHANGED

    def freed(self, block: int) -> None:
        """An evicted block leaves its segment. O(1)."""
        if self._protected[block]:
            self._protected[block] = 0
            self._count -= 1

    def block_fields(self, blocks: list[int]) -> dict[str, list[int]]:
        """``protected``: 1 for the protected segment, 0 for probation. O(len(blocks))."""
        return {"protected": [self._protected[block] for block in blocks]}

    def check(self, cached: Iterable[int], clock: int) -> str | None:
        """The segment's count is right and within P; every protected block has a live
        heap entry. O(num_blocks + heap)."""
        cached = set(cached)
        members = {block for block, flag in enumerate(self._protected) if flag}
        if not members <= cached:
            return f"blocks {sorted(members - cached)} are protected but not cached"
        if len(members) != self._count or self._count > self._capacity:
            return (
                f"{len(members)} protected blocks, counted {self._count}, capacity {self._capacity}"
            )
        live = {block for stamp, block in self._lru if self._is_live(stamp, block)}
        if live != members:
            return f"protected blocks {sorted(members - live)} are missing from the segment's order"
        return None

    def _is_live(self, stamp: int, block: int) -> bool:
        return bool(self._protected[block]) and self._stamps[block] == stamp

    def _demote(self) -> int:
        """Move the least recently used protected block to probation; return it."""
        while True:
            stamp, block = heapq.heappop(self._lru)
            if self._is_live(stamp, block):
                self._protected[block] = 0
                self._count -= 1
                return block

    def _compact(self) -> None:
        """Rebuild the heap from the live entries once stale ones outnumber them."""
        if len(self._lru) > 2 * self._count + 64:
            self._lru = [(s, b) for s, b in self._lru if self._is_live(s, b)]
            heapq.heapify(self._lru)

    def _copied_state(self) -> dict[str, object]:
        return {**self.__dict__, "_protected": list(self._protected), "_lru": list(self._lru)}
