"""Every structural invariant of a disk block store, checked against the file itself.

``DiskBlockStore.check_invariants()`` calls :func:`check_store`; the tests call it after
every step and after every crash. Each check raises :class:`StoreInvariantError` naming
what broke:

1. The file is exactly ``PAGE + capacity * stride`` bytes and its header page is the one
   the handle's geometry and identity encode.
2. A slot in the index holds that very record on disk (sequence number, metadata, payload
   checksum); an unusable slot (a record left out at open, or dropped at read by a
   read-only handle: neither may be rewritten) holds a non-empty header; every other
   slot's header is empty.
3. The index's sequence numbers are distinct and below ``next_seq``.
4. ``occupied + free == capacity``; ``dropped_at_open + dropped_at_read`` equals the number
   of drops recorded; the unusable slots are among them and none is in the index.
5. With ``deep``: every indexed payload matches its checksum.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .disk_errors import StoreInvariantError
from .disk_format import PAGE, checksum, decode_record, encode_file_header
from .disk_io import array_view, pread_exact, preadv_exact

if TYPE_CHECKING:
    from .disk import DiskBlockStore


def _expect(condition: bool, problem: str) -> None:
    if not condition:
        raise StoreInvariantError(problem)


def check_store(store: DiskBlockStore, *, deep: bool = False) -> None:
    """Check the invariants listed in the module docstring.

    Cost: O(capacity * meta_bytes) -- a header read per slot -- plus O(occupied *
    block_bytes) with ``deep``. Raises StoreInvariantError; StoreIOError if a read fails.
    """
    fd, path, geometry, io = store._fd, store.path, store._geometry, store.io
    size = io.size(fd)
    _expect(size == geometry.file_bytes, f"{path} is {size} bytes, not {geometry.file_bytes}")
    head = pread_exact(io, fd, path, PAGE, 0, "read the file header")
    expected = encode_file_header(geometry, store.identity)
    _expect(head == expected, f"{path}: the file header changed")
    for slot in range(geometry.slots):
        raw = pread_exact(io, fd, path, geometry.head_bytes, geometry.slot_offset(slot), "read")
        found = decode_record(geometry, slot, raw)
        indexed = store._index.get(slot)
        if indexed is not None:
            _expect(found == indexed, f"slot {slot}: the index has {indexed}, the file {found!r}")
        elif slot in store._unusable:
            _expect(found is not None, f"slot {slot}: unusable, yet empty on disk")
        else:
            _expect(found is None, f"slot {slot}: not in the index, the file has {found!r}")
    seqs = [record.seq for record in store._index.values()]
    _expect(len(set(seqs)) == len(seqs), "two records share a sequence number")
    _expect(all(seq < store._next_seq for seq in seqs), "a sequence number is not below next_seq")
    stats = store.stats()
    _expect(stats.occupied + stats.free == stats.capacity, "occupied + free != capacity")
    _expect(stats.dropped_corrupt == len(stats.dropped), "the drop counters do not add up")
    dropped_slots = {slot for slot, _ in stats.dropped}
    _expect(store._unusable <= dropped_slots, "an unusable slot was not dropped")
    _expect(not store._unusable & store._index.keys(), "an unusable slot is in the index")
    if deep:
        payload = np.empty(geometry.block_bytes, dtype=np.uint8)
        for slot, record in store._index.items():
            offset = geometry.slot_offset(slot) + geometry.payload_offset
            preadv_exact(io, fd, path, array_view(payload), offset, f"read slot {slot}")
            _expect(
                checksum(array_view(payload)) == record.payload_sum, f"slot {slot}: bad payload"
            )
