"""Every invariant of a tiered tree, checked in one place (R-TIER-*).

:meth:`TieredTree.check_invariants` calls :func:`check_tiers`; tests call it after every
call. Each check raises :class:`~kachedb_radix.reference.errors.InvariantViolation`:

1. Each tier's tree passes its own ``check_invariants`` (R-INV-*): in particular each tier
   is prefix-closed and its blocks are exactly its allocated ids (R-TIER-1).
2. Each tier's registry holds exactly the blocks its tree caches, each with the
   namespace, parent block and tokens the tree's dump shows for it (R-TIER-3 needs it).
3. Pins are only the leases' (R-TIER-7): a call's temporary pins are gone when it
   returns, so each tier's tree has exactly as many live leases as there are live tiered
   leases holding one in that tier, and each of those is live.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import InvariantViolation

if TYPE_CHECKING:
    from .registry import BlockKey, Registry
    from .results import TierLease


def check_tiers(
    trees: Mapping[str, Any], registries: Mapping[str, Registry], leases: Mapping[int, TierLease]
) -> None:
    """Check the invariants listed in the module docstring. O(cached tokens + leases)."""
    held: Counter[str] = Counter()
    for lease in leases.values():
        _require(not lease.released, f"released lease {lease.id} is still filed")
        for tier, tier_lease in lease.leases.items():
            _require(tier in trees, f"lease {lease.id} pins the absent {tier} tier")
            _require(not tier_lease.released, f"lease {lease.id}'s {tier} lease was released")
            held[tier] += 1
    for tier, tree in trees.items():
        tree.check_invariants()
        expected = _keys_of(tree.dump())
        actual = dict(registries[tier].items())
        _require(
            actual == expected,
            f"the {tier} registry disagrees with its tree on blocks "
            f"{sorted(set(actual.items()) ^ set(expected.items()), key=lambda kv: kv[0])[:4]}",
        )
        live = tree.stats().leases
        _require(
            live == held[tier],
            f"the {tier} tree has {live} live leases, the tiered leases hold {held[tier]}",
        )


def _keys_of(dump: Mapping[str, Any]) -> dict[int, BlockKey]:
    """Each cached block's key, read from a tree's canonical dump. O(cached tokens)."""
    from .registry import BlockKey

    size = dump["block_size"]
    keys: dict[int, BlockKey] = {}
    for space in dump["namespaces"]:
        namespace = space["namespace"]
        stack: list[tuple[dict[str, Any], int | None]] = [
            (child, None) for child in space["children"]
        ]
        while stack:
            node, parent = stack.pop()
            tokens, blocks = node["tokens"], node["blocks"]
            for position, block in enumerate(blocks):
                chunk = tuple(tokens[position * size : (position + 1) * size])
                keys[block] = BlockKey(namespace, parent, chunk)
                parent = block
            stack.extend((child, parent) for child in node["children"])
    return keys


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvariantViolation(message)
