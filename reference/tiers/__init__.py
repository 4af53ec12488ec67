"""Tiers: one KV cache over device, host and disk memory (R-TIER-*).

* :mod:`kachedb_radix.reference.tiers.tree` -- :class:`TieredTree`, the prefix index over
  the tiers: one radix tree per tier, demotion, lookup with a restore plan, restore.
* :mod:`kachedb_radix.reference.tiers.results` -- its records: moves, plans, leases.
* :mod:`kachedb_radix.reference.tiers.levels` -- the tiers' names, order and media.
* :mod:`kachedb_radix.reference.tiers.registry` -- what each block of a tier holds.
* :mod:`kachedb_radix.reference.tiers.invariants` -- the tier layer's invariants.
* :mod:`kachedb_radix.reference.tiers.cache` -- :class:`KVCache`, the tiered tree joined to
  the bytes: a block pool, host memory and the disk store.
* :mod:`kachedb_radix.reference.tiers.memory` -- :class:`TierMemory`, the device, host and
  staging bytes and the copies between them (one per move where the memory allows).
* :mod:`kachedb_radix.reference.tiers.persist` -- the disk tier's persisted index.
* :mod:`kachedb_radix.reference.tiers.identity` -- whose KV a slab holds: the model and
  the layout its header records.
* :mod:`kachedb_radix.reference.tiers.disk` -- :class:`DiskBlockStore`, the disk tier's
  storage, a preallocated slab file of checksummed slots: create, open, put, get,
  read_into, delete, sync, the durability promise, the invariants.
* :mod:`kachedb_radix.reference.tiers.disk_format` -- the on-disk format, field by field.
* :mod:`kachedb_radix.reference.tiers.disk_io` -- :class:`DiskIO`, the one I/O layer every
  system call of the store goes through (where tests inject faults and power cuts).
* :mod:`kachedb_radix.reference.tiers.disk_stats` -- :class:`DiskStoreStats`.
* :mod:`kachedb_radix.reference.tiers.disk_errors` -- the :class:`StoreError` hierarchy.
"""

from kachedb_radix.reference.tiers.cache import CacheMatch, CacheStats, KVCache, Restored
from kachedb_radix.reference.tiers.disk import DiskBlockStore
from kachedb_radix.reference.tiers.disk_errors import (
    CorruptBlockError,
    MetaError,
    PayloadError,
    ReadOnlyStoreError,
    SlotEmptyError,
    SlotOccupiedError,
    SlotRangeError,
    StoreClosedError,
    StoreConfigError,
    StoreError,
    StoreExistsError,
    StoreFormatError,
    StoreIdentityError,
    StoreInvariantError,
    StoreIOError,
    StoreLockedError,
    StoreNotFoundError,
    StoreVersionError,
)
from kachedb_radix.reference.tiers.disk_format import Record
from kachedb_radix.reference.tiers.disk_io import DiskIO
from kachedb_radix.reference.tiers.disk_stats import DiskStoreStats
from kachedb_radix.reference.tiers.identity import ModelIdentity, SlabIdentity
from kachedb_radix.reference.tiers.levels import DEVICE, DISK, HOST, MEDIA, TIERS
from kachedb_radix.reference.tiers.results import (
    Move,
    RestorePlan,
    RestoreResult,
    TieredStats,
    TierEvictResult,
    TierInsertResult,
    TierLease,
    TierMatch,
)
from kachedb_radix.reference.tiers.tree import TieredTree

__all__ = [
    "DEVICE",
    "DISK",
    "HOST",
    "MEDIA",
    "TIERS",
    "CacheMatch",
    "CacheStats",
    "CorruptBlockError",
    "DiskBlockStore",
    "DiskIO",
    "DiskStoreStats",
    "KVCache",
    "MetaError",
    "ModelIdentity",
    "Move",
    "PayloadError",
    "ReadOnlyStoreError",
    "Record",
    "RestorePlan",
    "RestoreResult",
    "Restored",
    "SlabIdentity",
    "SlotEmptyError",
    "SlotOccupiedError",
    "SlotRangeError",
    "StoreClosedError",
    "StoreConfigError",
    "StoreError",
    "StoreExistsError",
    "StoreFormatError",
    "StoreIOError",
    "StoreIdentityError",
    "StoreInvariantError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreVersionError",
    "TierEvictResult",
    "TierInsertResult",
    "TierLease",
    "TierMatch",
    "TieredStats",
    "TieredTree",
]
