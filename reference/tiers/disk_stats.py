"""What a disk block store reports about itself: :class:`DiskStoreStats`.

Counters run from the moment the handle was opened (they are not persisted); the geometry
and the occupancy describe the file. Invariants (``check_invariants`` asserts them):
``occupied + free == capacity`` and ``dropped_corrupt == dropped_at_open + dropped_at_read
== len(dropped)``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DiskStoreStats:
    """A snapshot of one open store: its geometry, occupancy and counters since open.

    Attributes:
        path: the store's file.
        readonly: opened with ``readonly=True``.
        capacity: number of slots.
        block_bytes, meta_bytes: the payload size and the largest metadata record.
        slot_stride, file_bytes: bytes per slot and the file's exact size.
        occupied, free: slots holding a block, and the rest.
        dropped_corrupt: records dropped since open because they were torn or corrupted
            (never served): ``dropped_at_open`` found by the reopen scan (a bad header,
            or a bad payload with ``verify_payloads=True``), ``dropped_at_read`` by a
            read whose payload failed its checksum.
        dropped: ``(slot, why)`` of each of those drops, in the order they were found
            (``why`` says what failed, e.g. ``"payload checksum mismatch"``).
        unusable: slots holding a record left out of the index and left as it is in the
            file (every drop at open, R-TIER-12; a read-only handle's drops at read); a
            put may replace each.
        removed_leftovers: names of the temporary files of dead creators that this
            handle's open (or create) removed.
        puts, deletes, reads, syncs: calls that succeeded (``reads`` counts ``get`` and
            ``read_into`` calls that found a block, intact or not).
        bytes_written, bytes_read: payload bytes moved by those calls.
        unsynced: puts, deletes and drops written since the last ``sync()`` (what a power
            loss may still undo; a process crash undoes none of it).
        next_seq: the sequence number the next ``put`` gets.
    """

    path: str
    readonly: bool
    capacity: int
    block_bytes: int
    meta_bytes: int
    slot_stride: int
    file_bytes: int
    occupied: int
    free: int
    dropped_corrupt: int
    dropped_at_open: int
    dropped_at_read: int
    dropped: tuple[tuple[int, str], ...]
    unusable: int
    removed_leftovers: tuple[str, ...]
    puts: int
    deletes: int
    reads: int
    syncs: int
    bytes_written: int
    bytes_read: int
    unsynced: int
    next_seq: int
