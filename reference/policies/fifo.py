"""``fifo``: the leaf tail cached earliest goes first (R-POL-4).

A block is *born* at the clock time of the insert that cached it; the key is
``(born, block)``. Using a block does not change it. Across a split both halves keep
their blocks' birth times (they are per block, R-SPLIT-2); an extension's new
blocks are born at the extending insert; a block evicted and cached again is born
again. A leaf's tail is never born before the blocks above it, so the order is
also "newest prefixes go last".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .base import UNCHANGED, EvictionPolicy, Key
from .retention import Retention


class FifoPolicy(EvictionPolicy):
    """First cached, first evicted; no options."""

    name = "fifo"
    dump_fields = ("born",)
    key_names = ("born",)

    def __init__(self, num_blocks: int, stamps: list[int], options: dict[str, object]) -> None:
        super().__init__(num_blocks, stamps, options)
        self._born = [0] * num_blocks

    def key(self, block: int) -> Key:
        """``(born, block)``. O(1)."""
        return (self._born[block], block)

    def cached(
        self, blocks: Sequence[int], now: int, namespace: str | None, retention: Retention
    ) -> Sequence[int]:
        """The new blocks are born ``now``. O(len(blocks))."""
        for block in blocks:
            self._born[block] = now
        return UNCHANGED

    def block_fields(self, blocks: list[int]) -> dict[str, list[int]]:
        """``born``: each block's birth time. O(len(blocks))."""
        return {"born": [self._born[block] for block in blocks]}

    def check(self, cached: Iterable[int], clock: int) -> str | None:
        """Every cached block was born at a past clock time. O(cached)."""
        for block in cached:
            if not 1 <= self._born[block] <= min(self._stamps[block], clock):
                return f"block {block} was born at {self._born[block]}, after its last use"
        return None

    def _copied_state(self) -> dict[str, object]:
        return {**self.__dict__, "_born": list(self._born)}
