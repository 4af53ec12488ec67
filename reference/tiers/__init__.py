"""Tiers: one KV cache over device, host and disk memory.

So far this package holds the disk tier's storage: :class:`DiskBlockStore`
(:mod:`kachedb_radix.reference.tiers.disk`), a preallocated slab file of fixed-size block
slots, each with its metadata and checksums, that a restarted process reopens warm.

* :mod:`kachedb_radix.reference.tiers.disk` -- the store: create, open, put, get,
  read_into, delete, sync, the durability promise, the invariants.
* :mod:`kachedb_radix.reference.tiers.disk_format` -- the on-disk format, field by field.
* :mod:`kachedb_radix.reference.tiers.disk_stats` -- :class:`DiskStoreStats`.
* :mod:`kachedb_radix.reference.tiers.disk_errors` -- the :class:`StoreError` hierarchy.
"""

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
    StoreInvariantError,
    StoreIOError,
    StoreLockedError,
    StoreNotFoundError,
    StoreVersionError,
)
from kachedb_radix.reference.tiers.disk_format import Record
from kachedb_radix.reference.tiers.disk_stats import DiskStoreStats

__all__ = [
    "CorruptBlockError",
    "DiskBlockStore",
    "DiskStoreStats",
    "MetaError",
    "PayloadError",
    "ReadOnlyStoreError",
    "Record",
    "SlotEmptyError",
    "SlotOccupiedError",
    "SlotRangeError",
    "StoreClosedError",
    "StoreConfigError",
    "StoreError",
    "StoreExistsError",
    "StoreFormatError",
    "StoreIOError",
    "StoreInvariantError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreVersionError",
]
