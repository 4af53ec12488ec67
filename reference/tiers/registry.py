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
    """Block id -> :class:`BlockKey` for one tier."""

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: dict[int, BlockKey] = {}

    def __contains__(self, block: int) -> bool:
        return block in self._keys

    def key(self, block: int) -> BlockKey:
        """The key of cached block ``block``. O(1). Raises KeyError when not registered."""
        return self._keys[block]

    def items(self) -> Iterable[tuple[int, BlockKey]]:
        """Every registered block and its key, in no particular order. O(1) to start."""
        return self._keys.items()

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
        hold ``size`` tokens each. O((n - start) * B)."""
        for position in range(start, len(blocks)):
            parent = blocks[position - 1] if position else None
            chunk = tuple(tokens[position * size : (position + 1) * size])
            self._keys[blocks[position]] = BlockKey(namespace, parent, chunk)

    def path(self, block: int) -> tuple[str | None, list[int], list[int]]:
        """The path ending at ``block``: its namespace, its block ids root first, and its
        tokens. O(depth * B).

        Raises:
            KeyError: ``block`` (or a block before it) is not registered.
        """
        ids: list[int] = []
        chunks: list[tuple[int, ...]] = []
        current: int | None = block
        namespace: str | None = None
        while current is not None:
            key = self._keys[current]
            ids.append(current)
            chunks.append(key.tokens)
            namespace = key.namespace
            current = key.parent
        ids.reverse()
        chunks.reverse()
        return namespace, ids, [token for chunk in chunks for token in chunk]

    def remove(self, blocks: Iterable[int]) -> None:
        """Forget ``blocks`` (evicted from the tier). O(len(blocks)).

        Raises:
            KeyError: a block is not registered (nothing after it is forgotten).
        """
        for block in blocks:
            del self._keys[block]
