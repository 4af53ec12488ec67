"""What each block slot of a tiered cache holds, followed without bytes (R-TIER-8).

A tiered implementation answers with block ids and moves; whether its moves are right
-- every source read before it is overwritten, every restored block the one that was
stored, nothing crossing namespaces -- shows only in the data. :class:`TierContents`
stands in for the data: each slot holds a *label*, the namespace and the full token
prefix its block caches. Writing a new block labels its slot; a move copies a label;
a match or restore is then checked block by block: the slot the implementation names
for block ``i`` of a path must hold exactly that path's prefix of ``i + 1`` blocks, in
that namespace.

The kit's ``tiers`` level and ``tests/tiers`` follow every candidate call with it.
Cost: O(1) per slot written or read, O(n * B) per path checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: A slot's content: the namespace and the token prefix of the block it holds.
Label = tuple[object, tuple[int, ...]]


class ContentError(AssertionError):
    """A slot does not hold what the path says it should; the message names it.

    Attributes:
        crossed: the slot holds a block of another namespace (else another prefix, or
            nothing).
    """

    def __init__(self, message: str, crossed: bool = False) -> None:
        super().__init__(message)
        self.crossed = crossed


class TierContents:
    """The label in every ``(tier, block id)`` slot written so far."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._slots: dict[tuple[str, int], Label] = {}

    def write(
        self,
        tier: str,
        blocks: Sequence[int],
        namespace: object,
        tokens: Sequence[int],
        start: int = 0,
    ) -> None:
        """The caller wrote blocks ``start ..`` of a path (its ids in ``tier`` are
        ``blocks``) with their KV data. O((n - start) * B)."""
        size = self.block_size
        for position in range(start, len(blocks)):
            prefix = tuple(tokens[: (position + 1) * size])
            self._slots[(tier, blocks[position])] = (namespace, prefix)

    def run(self, moves: Iterable[Any]) -> None:
        """Carry out moves (objects with ``source_tier``, ``source``, ``target_tier``,
        ``target``) in order. A move from a slot never written is an error: the
        implementation read garbage. O(moves)."""
        for move in moves:
            source = (move.source_tier, move.source)
            label = self._slots.get(source)
            if label is None:
                raise ContentError(
                    f"a move reads {source[0]} block {source[1]}, which holds nothing"
                )
            self._slots[(move.target_tier, move.target)] = label

    def check(
        self,
        tiers: Sequence[str],
        blocks: Sequence[int],
        namespace: object,
        tokens: Sequence[int],
    ) -> None:
        """Every block of a matched path holds that path's prefix (block ``i`` in tier
        ``tiers[i]`` with id ``blocks[i]``). O(n * B).

        Raises:
            ContentError: naming the first block that holds anything else.
        """
        size = self.block_size
        for position, (tier, block) in enumerate(zip(tiers, blocks, strict=True)):
            wanted: Label = (namespace, tuple(tokens[: (position + 1) * size]))
            found = self._slots.get((tier, block))
            if found != wanted:
                raise ContentError(
                    f"block {position} of the path ({tier} block {block}) holds "
                    f"{_describe(found, size)}, not {_describe(wanted, size)}",
                    crossed=found is not None and found[0] != namespace,
                )

    def check_tier(self, tier: str, dump: Mapping[str, Any]) -> None:
        """Every block a tier caches holds its own prefix, read from the tier tree's
        canonical dump (R-DUMP-*). O(cached tokens * depth).

        Raises:
            ContentError: naming the first block that holds anything else.
        """
        for space in dump["namespaces"]:
            namespace = space["namespace"]
            stack: list[tuple[Mapping[str, Any], tuple[int, ...], tuple[int, ...]]] = [
                (child, (), ()) for child in space["children"]
            ]
            while stack:
                node, tokens, blocks = stack.pop()
                tokens = tokens + tuple(node["tokens"])
                blocks = blocks + tuple(node["blocks"])
                self.check((tier,) * len(blocks), blocks, namespace, tokens)
                stack.extend((child, tokens, blocks) for child in node["children"])


def _describe(label: Label | None, size: int) -> str:
    if label is None:
        return "nothing"
    namespace, prefix = label
    where = "no namespace" if namespace is None else f"namespace {namespace!r}"
    return f"block {len(prefix) // size - 1} of {list(prefix[:8])}... in {where}"
