"""kachedb-radix accel: the C twin of :class:`kachedb_radix.reference.RadixTree`.

``kachedb_radix.accel.RadixTree`` has the reference's public API and behaves identically, call for
call (same results, block ids, clock, eviction order, ``dump()``, error classes from
:mod:`kachedb_radix.reference.errors`, atomicity); it is only faster.
``kachedb_radix.accel.BlockAllocator`` is the twin of
:class:`kachedb_radix.reference.allocator.BlockAllocator`. ``kachedb_radix.accel.Snapshot`` and
``kachedb_radix.accel.Reader`` are the compiled twins of :mod:`kachedb_radix.reference.snapshot`'s
classes. ``kachedb_radix.accel.RouterIndex`` is the twin of
:class:`kachedb_radix.reference.router.RouterIndex` (``accel/router.c``).
``kachedb_radix.accel.TieredTree`` is the tier layer of
:class:`kachedb_radix.reference.tiers.TieredTree` over the C tree (the layer is composition:
its twin is the trees it composes).
``kachedb_radix.accel.BlockPool`` is the CuPy twin of
:class:`kachedb_radix.reference.BlockPool` (the KV block pool,
:mod:`kachedb_radix.accel.blockpool`); CuPy is imported only when a pool is built, so this package
imports without CuPy or a GPU.

Threads: writer calls from one thread at a time; ``snapshot()``, ``reader()`` and every
Snapshot/Reader method from any thread (see ``accel/DESIGN.md``).

Importing this package never falls back to the reference: if the extension did not
build, the import fails. Set ``KACHEDB_RADIX_PURE=1`` to run the test-suite (and any
code that selects implementations the same way) on the pure-Python reference only.
"""

from __future__ import annotations

from collections.abc import Sequence

try:
    from ._radix import (
        DUMP_FORMAT,
        BlockAllocator,
        Blocks,
        InsertResult,
        Lease,
        MatchResult,
        RadixTree,
        Reader,
        RouterIndex,
        Snapshot,
    )
except ImportError as error:  # pragma: no cover - exercised only on a broken install
    raise ImportError(
        "the C extension kachedb_radix.accel._radix did not build; reinstall with a compiler, "
        "or set KACHEDB_RADIX_PURE=1 to use the pure-Python reference"
    ) from error

from .blockpool import BlockPool
from .tiers import KVCache, TieredTree

Sequence.register(Blocks)

__all__ = [
    "DUMP_FORMAT",
    "BlockAllocator",
    "BlockPool",
    "Blocks",
    "InsertResult",
    "KVCache",
    "Lease",
    "MatchResult",
    "RadixTree",
    "Reader",
    "RouterIndex",
    "Snapshot",
    "TieredTree",
]
