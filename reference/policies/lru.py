"""``lru``: least recently used leaf tail first (R-POL-2, the default).

The key is ``(stamp, block)``: the clock time the block was last used by a match,
an insert or a release (R-LRU-1), then the block id (R-EVICT-3). Every rule of the
eviction level is stated for this policy; it keeps no state of its own.
"""

from __future__ import annotations

from .base import EvictionPolicy, Key


class LruPolicy(EvictionPolicy):
    """Least recently used first; no options, no state beyond the tree's stamps."""

    name = "lru"

    def key(self, block: int) -> Key:
        """``(stamp, block)``. O(1)."""
        return (self._stamps[block], block)
