"""``lfu``: the least often found leaf tail first, then the least recently used
(R-POL-3).

A block's *hits* count the successful ``match`` and ``insert`` calls that found it
already cached: each adds one to every block of its cached prefix. The insert that
caches a block leaves it at 0 hits; a release is not a hit (the lease's match was).
The key is ``(hits, stamp, block)``. Counts stop at :data:`HITS_CAP` (about a
million; beyond it blocks are ordered by recency alone), so an implementation can
pack the key in 64 bits.

Across a split both halves keep their blocks' counts (per block, R-SPLIT-2); an
extension's new blocks start at 0; a block evicted and cached again starts at 0 --
its count does not outlive its content.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .base import UNCHANGED, EvictionPolicy, Key
from .retention import Retention

#: Hit counts saturate here in the key: 2**20 - 1.
HITS_CAP = (1 << 20) - 1


class LfuPolicy(EvictionPolicy):
    """Least frequently found first, then least recently used; no options."""

    name = "lfu"
    dump_fields = ("hits",)
    key_names = ("hits", "stamp")

    def __init__(self, num_blocks: int, stamps: list[int], options: dict[str, object]) -> None:
        super().__init__(num_blocks, stamps, options)
        self._hits = [0] * num_blocks

    def key(self, block: int) -> Key:
        """``(hits, stamp, block)``. O(1)."""
        return (self._hits[block], self._stamps[block], block)

    def cached(
        self, blocks: Sequence[int], now: int, namespace: str | None, retention: Retention
    ) -> Sequence[int]:
        """New blocks start at 0 hits. O(len(blocks))."""
        for block in blocks:
            self._hits[block] = 0
        return UNCHANGED

    def found(
        self, blocks: Sequence[int], now: int, namespace: str | None, retention: Retention | None
    ) -> Sequence[int]:
        """One hit for each block found, up to HITS_CAP. O(len(blocks))."""
        hits = self._hits
        for block in blocks:
            if hits[block] < HITS_CAP:
                hits[block] += 1
        return UNCHANGED

    def block_fields(self, blocks: list[int]) -> dict[str, list[int]]:
        """``hits``: each block's count. O(len(blocks))."""
        return {"hits": [self._hits[block] for block in blocks]}

    def check(self, cached: Iterable[int], clock: int) -> str | None:
        """Counts are in ``0 .. HITS_CAP``. O(cached)."""
        for block in cached:
            if not 0 <= self._hits[block] <= HITS_CAP:
                return f"block {block} has {self._hits[block]} hits"
        return None

    def _copied_state(self) -> dict[str, object]:
        return {**self.__dict__, "_hits": list(self._hits)}
