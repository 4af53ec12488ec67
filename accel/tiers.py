"""The tiered tree over the C tree: :class:`kachedb_radix.reference.tiers.TieredTree`'s twin.

The tier layer is composition -- one radix tree per tier, demotion and restore written
once in :mod:`kachedb_radix.reference.tiers.tree` -- so its fast twin is the same layer
over :class:`kachedb_radix.accel.RadixTree`: every walk, split, eviction and event of
every tier runs in C, and only the per-call bookkeeping (the registries, the moves) is
Python. One suite runs both (``tests/tiers``, selected by parameter).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from kachedb_radix.reference.tiers.tree import TieredTree as _ReferenceTieredTree

from ._radix import RadixTree


class TieredTree(_ReferenceTieredTree):
    """The tiered tree whose tiers are C trees; the API, behaviour and cost notes are
    :class:`kachedb_radix.reference.tiers.TieredTree`'s."""

    implementation: ClassVar[str] = "accel"
    tree_type: ClassVar[Callable[..., Any]] = RadixTree
