"""Plain result records returned by the tree's public calls.

They are frozen dataclasses of ints and tuples, so they compare by value and can be
logged or serialised as they are; a lease is the one live object among them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .lease import Lease


@dataclass(frozen=True, slots=True)
class MatchResult:
    """What ``match`` found (R-MATCH-1).

    Attributes:
        length: tokens matched, always a multiple of the block size.
        blocks: the block ids holding those tokens, root first.
        lease: the lease pinning ``blocks`` when ``pin=True`` was asked, else None.
    """

    length: int
    blocks: tuple[int, ...]
    lease: Lease | None = None


@dataclass(frozen=True, slots=True)
class InsertResult:
    """What ``insert`` did (R-INS-1).

    Attributes:
        length: tokens now cached for the sequence: its full blocks, ``len // B * B``.
        blocks: the block ids of those full blocks, root first.
        reused: how many leading blocks were already cached.
        allocated: the ids given to the new blocks, in path order (R-ALLOC-2).
        evicted: ids freed to make room, in eviction order (R-INS-5).
        lease: the lease pinning ``blocks`` when ``pin=True`` was asked, else None.
    """

    length: int
    blocks: tuple[int, ...]
    reused: int
    allocated: tuple[int, ...]
    evicted: tuple[int, ...]
    lease: Lease | None = None


@dataclass(frozen=True, slots=True)
class TreeStats:
    """Block-level counters; ``free + cached + quarantined == num_blocks`` and
    ``pinned + evictable == cached`` always hold (R-INV-1, R-EPOCH-3).

    Attributes:
        num_blocks: pool size.
        free: blocks in the allocator.
        cached: blocks holding a cached prefix.
        pinned: cached blocks covered by at least one live lease.
        evictable: cached blocks that eviction may free (unpinned ones).
        leases: live (unreleased) leases.
        clock: the logical clock's value (R-LRU-3).
        quarantined: evicted blocks waiting for readers to leave (R-EPOCH-2).
        readers: readers inside an epoch.
        oldest_reader: the epoch number of the oldest reader inside, or None.
        version: the number of the latest published version (R-SNAP-1).
        oldest_reader_age: versions published since the oldest reader inside took its
            snapshot (``version`` minus that reader's version), or None with no reader
            inside; a server alerts when it keeps growing (R-EPOCH-5).
    """

    num_blocks: int
    free: int
    cached: int
    pinned: int
    evictable: int
    leases: int
    clock: int
    quarantined: int = 0
    readers: int = 0
    oldest_reader: int | None = None
    version: int = 0
    oldest_reader_age: int | None = None
