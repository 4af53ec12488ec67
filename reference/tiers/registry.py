"""What each block of one tier holds: the tier layer's own map from block id to prefix.

A tier's radix tree answers "which blocks hold this prefix"; demotion needs the opposite
question answered for a block the tree has just evicted: "which prefix was this, so that
the next tier can cache it". The tree cannot answer it any more (the block is gone), so
the tier layer keeps, per tier, one :class:`BlockKey` per cached block: its namespace,
the block before it on its path (None at a root) and its own B tokens.

Invariant (checked by :func:`kachedb_radix.reference.tiers.invariants.check_tiers`): the
registry of a tier holds exactly the blocks its tree caches, and following ``parent``
from any of them spells the path the tree's dump shows for it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BlockKey:
    """One cached block of a tier, as its registry records it.

    Attributes:
        namespace: the namespace of its path (R-NS-1).
        parent: the id of the block before it on its path in the same tier, None at a root.
        tokens: its B tokens.
    """

    namespace: str | None
    parent: int | None
    tokens: tuple[int, ...]


class Registry:
    """Block id -> :class:`BlockKey` for one tier, kept as each block's place on the path it
    was cached with, so that a victim's whole path is a slice rather than a walk.

    ``add_path`` keeps one tuple of the path's ids and one of its tokens, shared by every
    block it registers, and each block's position on them: a block's path above it never
    changes while it is cached (its parent outlives it: eviction frees a tail first), so
    ``path`` answers with two slices, O(depth * B) copied at C speed instead of a walk of
    ``depth`` Python steps -- the cost a demotion pays per chain (R-TIER-3). Memory: the
    shared tuples live while any block registered with them does (at most one pointer per
    token of each path added).
    """

    __slots__ = ("_at", "_size")

    def __init__(self, block_size: int = 1) -> None:
        self._size = block_size
        # block -> (namespace, the path's ids root first, its tokens, the block's position)
        self._at: dict[int, tuple[str | None, tuple[int, ...], tuple[int, ...], int]] = {}

    def __contains__(self, block: int) -> bool:
        return block in self._at

    def key(self, block: int) -> BlockKey:
        """The key of cached block ``block``. O(B). Raises KeyError when not registered."""
        namespace, ids, tokens, position = self._at[block]
        size = self._size
        parent = ids[position - 1] if position else None
        return BlockKey(namespace, parent, tokens[position * size : (position + 1) * size])

    def items(self) -> Iterable[tuple[int, BlockKey]]:
        """Every registered block and its key, in no particular order. O(blocks * B)."""
        return [(block, self.key(block)) for block in self._at]

    def add_path(
        self,
        namespace: str | None,
        blocks: Sequence[int],
        tokens: Sequence[int],
        start: int,
        size: int,
    ) -> None:
        """Register ``blocks[start:]``, the new blocks at the end of a path whose blocks
        (root first) are ``blocks``, whose tokens begin with ``tokens`` and whose blocks
        hold ``size`` tokens each (the registry's block size). O(n * B) copied once, plus
        O(n - start) entries."""
        assert size == self._size, (size, self._size)
        ids = tuple(blocks)
        length = len(ids) * size
        if len(tokens) != length:
            path: tuple[int, ...] = tuple(tokens[:length])
        elif isinstance(tokens, tuple):  # a path() answer: shared
            path = tokens
        else:  # the whole sequence: one copy, no slice first
            path = tuple(tokens)
        at = self._at
        for position in range(start, len(ids)):
            at[ids[position]] = (namespace, ids, path, position)

    def path(self, block: int) -> tuple[str | None, tuple[int, ...], tuple[int, ...]]:
        """The path ending at ``block``: its namespace, its block ids root first, and its
        tokens. O(depth * B), two slices (none when ``block`` ends its path).

        Raises:
            KeyError: ``block`` is not registered.
        """
        namespace, ids, tokens, position = self._at[block]
        if position + 1 == len(ids):
            return namespace, ids, tokens
        return namespace, ids[: position + 1], tokens[: (position + 1) * self._size]

    def remove(self, blocks: Iterable[int]) -> None:
        """Forget ``blocks`` (evicted from the tier). O(len(blocks)).

        Raises:
            KeyError: a block is not registered (nothing after it is forgotten).
        """
        deque(map(self._at.__delitem__, blocks), maxlen=0)  # the loop at C speed
