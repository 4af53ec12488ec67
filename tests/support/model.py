"""A brute-force model of the cache: obviously correct, hopelessly slow.

The state is a dict from every cached block's full path -- (namespace, the tuple of
block token-tuples from the root down to it) -- to its id, pin count and stamp. There
is no tree, no split, no queue: every rule is applied by scanning the whole dict.
Readers keep a plain copy of the dict as it was when they entered; evicted ids wait
in a list of (epoch, ids) batches while an earlier reader is inside. The stateful
test drives it and a real implementation side by side and compares every answer,
every snapshot answer and the block-level view of ``dump()``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from kachedb_radix.reference.errors import (
    ForeignLeaseError,
    InvalidArgumentError,
    LeaseReleasedError,
    OutOfBlocksError,
)

Path = tuple[tuple[int, ...], ...]
Key = tuple[str | None, Path]


@dataclass
class Entry:
    block_id: int
    pins: int
    stamp: int


@dataclass
class ModelReader:
    epoch: int
    version: int
    entries: dict[Key, int]  # the block trie it sees: path -> block id
    inside: bool = True


@dataclass
class ModelLease:
    namespace: str | None
    keys: list[Key]
    released: bool = False


class Model:
    """Brute-force cache with the reference's public semantics, over plain token lists."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.entries: dict[Key, Entry] = {}
        self.free = set(range(num_blocks))
        self.clock = 0
        self.leases: dict[int, ModelLease] = {}
        self.next_lease = 1
        self.version = 0
        self.epochs = itertools.count(1)
        self.readers: dict[int, ModelReader] = {}
        self.quarantine: list[tuple[int, list[int]]] = []

    # Each path prefix of the sequence's whole blocks, shortest first.
    def _keys(self, tokens: list[int], namespace: str | None) -> list[Key]:
        size = self.block_size
        chunks = tuple(tuple(tokens[i * size : (i + 1) * size]) for i in range(len(tokens) // size))
        return [(namespace, chunks[: depth + 1]) for depth in range(len(chunks))]

    def _matched(self, keys: list[Key]) -> int:
        count = 0
        while count < len(keys) and keys[count] in self.entries:
            count += 1
        return count

    def _touch(self, keys: list[Key]) -> None:
        self.clock += 1
        for key in keys:
            self.entries[key].stamp = self.clock

    def _lease(self, namespace: str | None, keys: list[Key]) -> int:
        for key in keys:
            self.entries[key].pins += 1
        lease_id = self.next_lease
        self.next_lease += 1
        self.leases[lease_id] = ModelLease(namespace, list(keys))
        return lease_id

    def _has_child(self, key: Key) -> bool:
        namespace, path = key
        return any(
            other[0] == namespace and len(other[1]) == len(path) + 1 and other[1][:-1] == path
            for other in self.entries
        )

    def _victim(self, protected: set[Key]) -> Key | None:
        candidates = [
            key
            for key, entry in self.entries.items()
            if entry.pins == 0 and key not in protected and not self._has_child(key)
        ]
        if not candidates:
            return None
        return min(
            candidates, key=lambda key: (self.entries[key].stamp, self.entries[key].block_id)
        )

    def _evict(self, count: int, protected: set[Key]) -> list[int]:
        freed: list[int] = []
        while len(freed) < count:
            victim = self._victim(protected)
            if victim is None:
                break
            freed.append(self.entries.pop(victim).block_id)
        if freed:
            self.version += 1
            epoch = next(self.epochs)
            if any(r.inside and r.epoch < epoch for r in self.readers.values()):
                self.quarantine.append((epoch, freed))
            else:
                self.free.update(freed)
        return freed

    def _inside(self) -> list[int]:
        return [r.epoch for r in self.readers.values() if r.inside]

    def _reclaimable(self) -> list[int]:
        oldest = min(self._inside(), default=None)
        return [
            b for epoch, batch in self.quarantine if oldest is None or epoch < oldest for b in batch
        ]

    def reclaim(self) -> list[int]:
        ids = self._reclaimable()
        oldest = min(self._inside(), default=None)
        self.quarantine = [(e, b) for e, b in self.quarantine if not (oldest is None or e < oldest)]
        self.free.update(ids)
        return ids

    def enter(self) -> int:
        epoch = next(self.epochs)
        snapshot = {key: entry.block_id for key, entry in self.entries.items()}
        self.readers[epoch] = ModelReader(epoch, self.version, snapshot)
        return epoch

    def leave(self, epoch: int) -> None:
        self.readers[epoch].inside = False

    def snapshot_match(
        self, epoch: int, tokens: list[int], namespace: str | None
    ) -> tuple[int, list[int]]:
        seen = self.readers[epoch].entries
        keys = self._keys(tokens, namespace)
        count = 0
        while count < len(keys) and keys[count] in seen:
            count += 1
        return count * self.block_size, [seen[k] for k in keys[:count]]

    def match(
        self, tokens: list[int], namespace: str | None, pin: bool
    ) -> tuple[int, list[int], int | None]:
        keys = self._keys(tokens, namespace)
        keys = keys[: self._matched(keys)]
        self._touch(keys)
        lease = self._lease(namespace, keys) if pin else None
        self.version += 1
        return len(keys) * self.block_size, [self.entries[k].block_id for k in keys], lease

    def insert(
        self, tokens: list[int], namespace: str | None, pin: bool
    ) -> tuple[int, list[int], int, list[int], list[int], int | None]:
        keys = self._keys(tokens, namespace)
        reused = self._matched(keys)
        needed = len(keys) - reused
        evicted: list[int] = []
        if needed > len(self.free):
            protected = set(keys[:reused])
            evictable = 0
            if not self._inside():
                evictable = sum(
                    1
                    for key, entry in self.entries.items()
                    if entry.pins == 0 and key not in protected
                )
            if needed > len(self.free) + len(self._reclaimable()) + evictable:
                raise OutOfBlocksError("model: not enough blocks")
            self.reclaim()
            evicted = self._evict(needed - len(self.free), protected)
        allocated = sorted(self.free)[:needed]
        self.free.difference_update(allocated)
        for key, block_id in zip(keys[reused:], allocated, strict=True):
            self.entries[key] = Entry(block_id, 0, 0)
        self._touch(keys)
        lease = self._lease(namespace, keys) if pin else None
        self.version += 1
        blocks = [self.entries[k].block_id for k in keys]
        return len(keys) * self.block_size, blocks, reused, allocated, evicted, lease

    def release(self, lease_id: int) -> None:
        lease = self.leases.get(lease_id)
        if lease is None:
            raise ForeignLeaseError("model: unknown lease")
        if lease.released:
            raise LeaseReleasedError("model: released twice")
        for key in lease.keys:
            self.entries[key].pins -= 1
        self._touch(lease.keys)
        lease.released = True
        self.version += 1

    def evict(self, count: int) -> list[int]:
        if count < 0:
            raise InvalidArgumentError("model: negative count")
        return self._evict(count, set())

    def flat(self) -> dict[Key, tuple[int, int, int]]:
        return {key: (e.block_id, e.pins, e.stamp) for key, e in self.entries.items()}

    def quarantined(self) -> list[int]:
        return [block for _, batch in self.quarantine for block in batch]

    def pinned(self) -> int:
        return sum(1 for entry in self.entries.values() if entry.pins > 0)
