"""The tiered tree over the C tree: :class:`kachedb_radix.reference.tiers.TieredTree`'s twin.

The tier layer is composition -- one radix tree per tier, demotion and restore written
once in :mod:`kachedb_radix.reference.tiers.tree` -- so its fast twin is the same layer
over :class:`kachedb_radix.accel.RadixTree`: every walk, split, eviction and event of
every tier runs in C, and only the per-call bookkeeping (the registries, the moves) is
Python. One suite runs both (``tests/tiers``, selected by parameter).

:class:`KVCache` is the GPU twin of :class:`kachedb_radix.reference.tiers.KVCache`: CuPy
device blocks, pinned host blocks, C trees.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from kachedb_radix.reference.tiers.cache import KVCache as _ReferenceKVCache
from kachedb_radix.reference.tiers.tree import TieredTree as _ReferenceTieredTree

from ._radix import RadixTree
from .blockpool import BlockPool


class TieredTree(_ReferenceTieredTree):
    """One prefix index over up to three tiers of KV block ids, each tier a C tree
    (:class:`kachedb_radix.accel.RadixTree`).

    Args:
        device_blocks: the device tier's capacity, an int from 1 to 2**24.
        host_blocks: the host tier's capacity, an int from 0 to 2**24 (0: no host tier).
        disk_blocks: the disk tier's capacity, an int from 0 to 2**24 (0: no disk tier).
            Each tier's pool is sized as a tree's is (R-LIMIT-*): with ``block_size`` at
            most 2**16, and at most 2**32 tokens.
        block_size: tokens per block, an int from 1 to 2**16.
        policy, policy_options: every tier's eviction policy (R-POL-*).
        write_through: copy every stored path to the host at insert (R-TIER-4).
        events: as for :class:`~kachedb_radix.reference.RadixTree` (R-EVENT-*).

    Raises:
        InvalidArgumentError: a capacity is not an int in range, ``write_through`` is not
            a bool or is asked without a host tier, or the trees refuse an argument.

    Cost: O(total capacity) to build. One thread at a time.
    """

    implementation: ClassVar[str] = "accel"
    tree_type: ClassVar[Callable[..., Any]] = RadixTree


class KVCache(_ReferenceKVCache):
    """The KV cache on a GPU: the device tier a CuPy :class:`~kachedb_radix.accel.BlockPool`,
    the host tier pinned memory (so host-to-device restores are asynchronous DMA straight
    from the host rows, their ``handle`` completing on the pool's transfer stream), the
    tiers C trees. The API, behaviour and cost notes are
    :class:`kachedb_radix.reference.tiers.KVCache`'s: the twins differ in the pool and the
    trees only (``pool_type``, ``tiers_type``), the bytes moving through the same
    :class:`~kachedb_radix.reference.tiers.memory.TierMemory` over the pool's public API
    (device rows given to ``store`` are scattered on the device).

    Raises:
        BackendUnavailableError: CuPy or a CUDA device is missing (the reason says which).
    """

    implementation: ClassVar[str] = "accel"
    pool_type: ClassVar[Any] = BlockPool
    tiers_type: ClassVar[Any] = TieredTree
