"""The bytes of the device and host tiers, moved with as few copies as the memory allows.

:class:`TierMemory` is the :class:`~kachedb_radix.reference.tiers.cache.KVCache`'s one
seam to the memory it runs on: the device tier is a block pool (any pool with the public
API of :class:`~kachedb_radix.reference.blockpool.BlockPool`: NumPy here, CuPy on the GPU
twin), the host tier one buffer from the pool's ``alloc_host_buffer`` (pinned on the GPU
twin), and a staging buffer that disk reads land in. Everything goes through the pool's
public calls -- ``restore``, ``offload``, ``scatter``, ``alloc_host_buffer`` -- so one
class serves both twins, and the twin is the pool it is given (``KVCache.pool_type``).

The copies each move makes (a "copy" is one pass over the bytes):

====================== ======================================================================
move                   how
====================== ======================================================================
host -> device         the pool's ``restore`` straight from the host rows: one copy (one DMA
                       per run of consecutive rows on the GPU twin, from pinned memory)
device -> host         the pool's ``offload`` straight into the host rows: one copy
disk -> device         on a device that is host memory, block-major (the NumPy pool), with
                       room: read straight into the free device blocks the restore will
                       give them (the kernel's copy, verified in place; the insert takes
                       the smallest free ids in path order, R-ALLOC-2, and evicts nothing):
                       one copy. Otherwise read into the staging rows (verified there),
                       then the pool's ``restore`` from them. Either way every block is
                       verified before the tree commits to it (R-TIER-10); a block that
                       fails leaves only a free device block written
device -> disk         the pool's ``offload`` into a buffer, then the write
host -> disk           the write straight from the host row
====================== ======================================================================

A run is a stretch of consecutive host rows (a demoted path's blocks get consecutive ids
in a tier that had room: the allocator hands out the smallest free ids in order), so a
path moves in one call per run, not one per block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..blockpool.handles import CompletedTransfer, TransferHandle
from ..blockpool.layout import Layout
from ..blockpool.validation import runs


class Joined:
    """A handle for several transfers: done when all are, ``wait`` waits for each."""

    def __init__(self, handles: Sequence[TransferHandle[None]]) -> None:
        self._handles = list(handles)

    def done(self) -> bool:
        """Whether every transfer completed. Never blocks. O(transfers)."""
        return all(handle.done() for handle in self._handles)

    def wait(self) -> None:
        """Block until every transfer completed. O(transfers)."""
        for handle in self._handles:
            handle.wait()


class TierMemory:
    """The device pool, the host buffer and the staging buffer of one KV cache.

    Args:
        pool: the device tier's block pool.
        host_blocks: the host tier's size in blocks (0: no host buffer).

    Cost: O(host bytes) to allocate. One thread at a time.
    """

    def __init__(self, pool: Any, host_blocks: int) -> None:
        self.pool = pool
        self.host: Any = pool.alloc_host_buffer(host_blocks) if host_blocks else None
        self._staging: Any = None
        self._inflight: list[TransferHandle[None]] = []  # copies up not yet waited for

    def write(self, ids: Sequence[int], kv: Any) -> None:
        """Write ``kv`` (one block per id) into device blocks ``ids``: device rows
        (anything with ``__cuda_array_interface__``) scattered on the device, host rows
        through the pool's ``restore``. Waits for the copy. O(bytes)."""
        if not ids:
            return
        self.settle()
        if hasattr(kv, "__cuda_array_interface__"):
            self.pool.scatter(list(ids), kv)
        else:
            self.pool.restore(list(ids), np.ascontiguousarray(kv)).wait()

    def read(self, ids: Sequence[int]) -> Any:
        """Device blocks ``ids`` as a new host array (``spec.buffer_shape(n)``), once the
        copies up in flight are done. O(bytes)."""
        self.settle()
        return self.pool.offload(list(ids)).wait()

    def to_host(self, device_ids: Sequence[int], host_rows: Sequence[int]) -> None:
        """Copy device block ``device_ids[i]`` into host row ``host_rows[i]``, one call of
        the pool per run of consecutive rows, once the copies up in flight are done (a
        demoted block may be one just restored, a host row one a copy up reads); waits.
        O(bytes)."""
        host = self._host()
        self.settle()
        for start, end in runs(host_rows):
            first = host_rows[start]
            out = host[first : first + end - start]
            self.pool.offload(list(device_ids[start:end]), host_out=out).wait()

    def from_host(
        self, device_ids: Sequence[int], host_rows: Sequence[int]
    ) -> TransferHandle[None]:
        """Copy host row ``host_rows[i]`` into device block ``device_ids[i]``, one call of
        the pool per run of consecutive rows; the handle completes when all are on the
        device (at once on the NumPy pool). The host rows must stay untouched until
        then. O(bytes)."""
        host = self._host()
        handles = []
        for start, end in runs(host_rows):
            first = host_rows[start]
            rows = host[first : first + end - start]
            handles.append(self.pool.restore(list(device_ids[start:end]), rows))
        return self._track(Joined(handles))

    def staging(self, count: int) -> Any:
        """``count`` rows of the staging buffer (pinned on the GPU twin), grown by
        doubling -- the rows it held keep their bytes -- once the copies up in flight
        are done. O(1) amortised, O(bytes) when it grows."""
        self.settle()
        held = 0 if self._staging is None else len(self._staging)
        if self._staging is None or held < count:
            grown = self.pool.alloc_host_buffer(max(count, 2 * held))
            if held:
                grown[:held] = self._staging
            self._staging = grown
        return self._staging[:count]

    def device_row(self, block: int) -> Any | None:
        """Device block ``block``'s bytes as one writable, contiguous host array -- where
        a disk read can land in the block itself -- when the device is host memory laid
        out block-major (the NumPy pool); None otherwise (the GPU twin's device, a
        layer-major pool: disk reads go through the staging rows). Waits for the copies
        up in flight first. O(1).

        The caller writes only a free block this way (one the tree will hand out): a
        cached block's bytes are the tree's."""
        arrays = self.pool.arrays
        if self.pool.spec.layout is not Layout.BLOCK_MAJOR or not isinstance(arrays[0], np.ndarray):
            return None
        self.settle()
        return arrays[0][block]

    def from_staging(self, device_ids: Sequence[int], rows: Any) -> TransferHandle[None]:
        """Copy staging rows ``rows`` (from :meth:`staging`) into device blocks
        ``device_ids``; the handle completes when they are on the device. O(bytes)."""
        if not device_ids:
            return CompletedTransfer(None)
        return self._track(Joined([self.pool.restore(list(device_ids), rows)]))

    def settle(self) -> None:
        """Wait for the copies up still in flight (none on the NumPy pool). O(copies)."""
        for handle in self._inflight:
            handle.wait()
        self._inflight = []

    def _track(self, handle: Joined) -> Joined:
        self._inflight.append(handle)
        return handle

    def _host(self) -> Any:
        assert self.host is not None, "a move names the host tier of a cache without one"
        return self.host
