"""The KV block pool's reference twin in NumPy: the obvious code the accelerated twin must match.

Its fast twin is :class:`kachedb_radix.accel.blockpool.pool.BlockPool` (CuPy, one fused kernel
launch per batch); the two share the public API, and the tests run both through one suite.

Storage:

* ``Layout.BLOCK_MAJOR``: one array ``[num_blocks, layers, 2, block_size, heads, head_dim]``.
* ``Layout.LAYER_MAJOR``: ``num_layers`` arrays ``[2, num_blocks, block_size, heads, head_dim]``.

Invariants:

* Every public operation validates all of its arguments before writing anything; when it
  raises a :class:`~kachedb_radix.reference.blockpool.KVPoolError` the pool's contents
  are unchanged.
* Copies are *parallel assignments*: all source blocks are read before any destination is
  written, so ``copy([1, 2], [2, 3])`` puts the old block 1 in 2 and the old block 2 in 3,
  whatever the order of the pairs.
* Each destination block is written at most once per call (duplicate destinations are
  refused); sources may repeat.
* Data is moved bit-exactly (NaN payloads, negative zeros, raw bf16/fp8 bytes survive).
* Here "device" and "host" memory are both ordinary NumPy arrays, so ``offload`` and
  ``restore`` complete synchronously and return an already-completed handle.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from kachedb_radix.reference.blockpool.errors import (
    BufferDTypeError,
    BufferLayoutError,
    BufferShapeError,
)
from kachedb_radix.reference.blockpool.handles import CompletedTransfer, TransferHandle
from kachedb_radix.reference.blockpool.layout import Layout, PoolSpec
from kachedb_radix.reference.blockpool.validation import (
    BlockIds,
    check_buffer,
    check_unique,
    normalize_ids,
    runs,
    split_pairs,
    validate_copy,
)

Array = npt.NDArray[Any]


def check_block(spec: PoolSpec, data: Any, role: str = "data") -> None:
    """Check that ``data`` is a numpy array of shape ``spec.block_shape`` and storage dtype."""
    if not isinstance(data, np.ndarray):
        raise BufferLayoutError(f"{role} must be a numpy.ndarray, got {type(data).__name__}")
    if data.dtype != np.dtype(spec.storage_dtype):
        raise BufferDTypeError(f"{role} has dtype {data.dtype}, expected {spec.storage_dtype}")
    if data.shape != spec.block_shape:
        raise BufferShapeError(f"{role} has shape {data.shape}, expected {spec.block_shape}")


def check_canonical(spec: PoolSpec, data: Any, role: str = "data") -> None:
    """Check that ``data`` is a numpy array of shape ``spec.pool_shape`` and storage dtype."""
    if not isinstance(data, np.ndarray):
        raise BufferLayoutError(f"{role} must be a numpy.ndarray, got {type(data).__name__}")
    if data.dtype != np.dtype(spec.storage_dtype):
        raise BufferDTypeError(f"{role} has dtype {data.dtype}, expected {spec.storage_dtype}")
    if data.shape != spec.pool_shape:
        raise BufferShapeError(f"{role} has shape {data.shape}, expected {spec.pool_shape}")


class BlockPool:
    """KV block pool held in NumPy arrays (the reference twin).

    Construction cost: allocates and zero-fills ``spec.total_bytes`` bytes.  Raises
    :class:`~kachedb_radix.reference.blockpool.PoolTooLargeError` (before allocating) if
    ``memory_budget`` is given and ``spec.total_bytes`` exceeds it.
    """

    #: Which twin this is ("reference" or "accel"), so a test can tell which one ran.
    implementation = "reference"

    def __init__(self, spec: PoolSpec, *, memory_budget: int | None = None) -> None:
        if memory_budget is not None:
            spec.check_fits(memory_budget, "memory_budget")
        self._spec = spec
        dt = np.dtype(spec.storage_dtype)
        if spec.layout is Layout.BLOCK_MAJOR:
            self._arrays = [np.zeros(spec.pool_shape, dtype=dt)]
        else:
            self._arrays = [np.zeros(spec.layer_shape, dtype=dt) for _ in range(spec.num_layers)]

    @classmethod
    def from_canonical(
        cls, spec: PoolSpec, data: Array, *, memory_budget: int | None = None
    ) -> BlockPool:
        """New pool whose contents equal ``data`` (shape ``spec.pool_shape``).  Cost O(size)."""
        check_canonical(spec, data)
        pool = cls(spec, memory_budget=memory_budget)
        pool.load(data)
        return pool

    # ----------------------------------------------------------------- inspection
    @property
    def spec(self) -> PoolSpec:
        return self._spec

    @property
    def arrays(self) -> list[Array]:
        """The storage arrays (not copies): one for BLOCK_MAJOR, one per layer otherwise."""
        return list(self._arrays)

    def read_block(self, block_id: int) -> Array:
        """Copy of one block in canonical shape.  Cost O(bytes_per_block).

        Raises :class:`~kachedb_radix.reference.blockpool.BlockIdError` for a bad id.
        """
        (b,) = normalize_ids([block_id], self._spec.num_blocks, "block_id")
        return self._read(b)

    def write_block(self, block_id: int, data: Array) -> None:
        """Overwrite one block with ``data`` (canonical block shape).  Cost O(bytes_per_block).

        Raises :class:`~kachedb_radix.reference.blockpool.BlockIdError` or
        :class:`~kachedb_radix.reference.blockpool.BufferMismatchError`.
        """
        (b,) = normalize_ids([block_id], self._spec.num_blocks, "block_id")
        check_block(self._spec, data)
        self._write(b, data)

    def to_numpy(self) -> Array:
        """Copy of the whole pool in canonical shape ``spec.pool_shape``.  Cost O(total_bytes)."""
        if self._spec.layout is Layout.BLOCK_MAJOR:
            return self._arrays[0].copy()
        # layers[l] is [2, N, ...]; stacking on axis 1 then swapping gives [N, L, 2, ...].
        stacked: Array = np.stack(self._arrays, axis=0).transpose(2, 0, 1, 3, 4, 5)
        return stacked.copy(order="C")

    def load(self, data: Array) -> None:
        """Overwrite the whole pool from canonical ``data``.  Cost O(total_bytes)."""
        check_canonical(self._spec, data)
        for b in range(self._spec.num_blocks):
            self._write(b, data[b])

    # ----------------------------------------------------------------- primitives
    def _read(self, b: int) -> Array:
        if self._spec.layout is Layout.BLOCK_MAJOR:
            block: Array = self._arrays[0][b]
            return block.copy()
        out = np.empty(self._spec.block_shape, dtype=self._arrays[0].dtype)
        for layer, arr in enumerate(self._arrays):
            out[layer] = arr[:, b]
        return out

    def _write(self, b: int, data: Array) -> None:
        if self._spec.layout is Layout.BLOCK_MAJOR:
            self._arrays[0][b] = data
            return
        for layer, arr in enumerate(self._arrays):
            arr[:, b] = data[layer]

    # ----------------------------------------------------------------- operations
    def copy(self, src_ids: BlockIds, dst_ids: BlockIds) -> None:
        """Copy block ``src_ids[i]`` to ``dst_ids[i]`` for every ``i`` (parallel assignment).

        Cost O(n * bytes_per_block) time and, here, the same in temporary memory.  Raises
        :class:`~kachedb_radix.reference.blockpool.BlockIdTypeError`,
        :class:`~kachedb_radix.reference.blockpool.BlockIdRangeError`,
        :class:`~kachedb_radix.reference.blockpool.LengthMismatchError`,
        :class:`~kachedb_radix.reference.blockpool.DuplicateDestinationError`; nothing is written if
        it raises.
        """
        plan = validate_copy(self._spec, src_ids, dst_ids)
        snapshots = [self._read(s) for s in plan.src]  # every read happens before any write
        for d, data in zip(plan.dst, snapshots, strict=True):
            self._write(d, data)

    def copy_pairs(self, pairs: Iterable[tuple[int, int]]) -> None:
        """``copy`` taking ``[(src, dst), ...]``.  Same cost and errors, plus
        :class:`~kachedb_radix.reference.blockpool.BlockIdTypeError` for an element that is not a
        pair."""
        src, dst = split_pairs(pairs)
        self.copy(src, dst)

    def _check_out(self, n: int, out: Array | None, role: str) -> Array:
        if out is None:
            return np.empty(self._spec.buffer_shape(n), dtype=self._spec.storage_dtype)
        check_buffer(self._spec, out, n, role, np.ndarray, writable=True, where="host")
        return out

    def gather(self, ids: BlockIds, out: Array | None = None) -> Array:
        """Copy blocks ``ids`` into a contiguous buffer: ``out[i]`` = block ``ids[i]``.

        ``out`` (optional) must have shape ``spec.buffer_shape(len(ids))``, the storage dtype
        and be C-contiguous and writeable; otherwise a new array is returned.  Ids may
        repeat.  Cost O(n * bytes_per_block).  Raises BlockIdError / BufferMismatchError
        subclasses; nothing is written if it raises.
        """
        b_ids = normalize_ids(ids, self._spec.num_blocks, "ids")
        buf = self._check_out(len(b_ids), out, "out")
        if self._spec.layout is Layout.BLOCK_MAJOR:  # one copy per run of consecutive ids
            for start, end in runs(b_ids):
                first = int(b_ids[start])
                buf[start:end] = self._arrays[0][first : first + end - start]
            return buf
        for i, b in enumerate(b_ids):  # one copy per block and layer, straight into ``buf``
            for layer, arr in enumerate(self._arrays):
                buf[i, layer] = arr[:, b]
        return buf

    def scatter(self, ids: BlockIds, buffer: Array) -> None:
        """Write ``buffer[i]`` into block ``ids[i]`` (the inverse of :meth:`gather`).

        ``buffer`` must be C-contiguous with shape ``spec.buffer_shape(len(ids))`` and the
        storage dtype; ids must be unique.  Cost O(n * bytes_per_block).  Raises BlockIdError
        (including DuplicateDestinationError) / BufferMismatchError subclasses; nothing is
        written if it raises.
        """
        b_ids = normalize_ids(ids, self._spec.num_blocks, "ids")
        check_unique(b_ids, "ids")
        check_buffer(
            self._spec, buffer, len(b_ids), "buffer", np.ndarray, writable=False, where="host"
        )
        if self._spec.layout is Layout.BLOCK_MAJOR:  # one copy per run of consecutive ids
            for start, end in runs(b_ids):
                first = int(b_ids[start])
                self._arrays[0][first : first + end - start] = buffer[start:end]
            return
        for i, b in enumerate(b_ids):
            self._write(b, buffer[i])

    def alloc_host_buffer(self, n: int) -> Array:
        """Zeroed host buffer for ``n`` blocks (pinned memory is meaningless here)."""
        return np.zeros(self._spec.buffer_shape(n), dtype=self._spec.storage_dtype)

    def offload(
        self, ids: BlockIds, host_out: Array | None = None, stream: object | None = None
    ) -> TransferHandle[Array]:
        """Copy blocks ``ids`` to host memory; ``handle.wait()`` returns the host buffer.

        Synchronous here (``stream`` is accepted for interface parity and ignored).  Same
        cost and errors as :meth:`gather` with ``out=host_out``.
        """
        del stream
        return CompletedTransfer(self.gather(ids, host_out))

    def restore(
        self, ids: BlockIds, host_buffer: Array, stream: object | None = None
    ) -> TransferHandle[None]:
        """Write host ``host_buffer[i]`` into block ``ids[i]``; synchronous here.

        Same cost and errors as :meth:`scatter`.
        """
        del stream
        self.scatter(ids, host_buffer)
        return CompletedTransfer(None)

    def synchronize(self) -> None:
        """Wait for outstanding transfers (none exist in this backend)."""
