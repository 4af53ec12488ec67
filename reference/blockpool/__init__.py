"""The KV block pool, reference twin: the memory behind the radix tree's block ids.

The tree hands out block ids; this pool holds what they point to -- one KV-cache block
per id -- and moves blocks: ``copy`` (fork a sequence), ``gather`` and ``scatter``
(between the pool and a contiguous buffer), ``offload`` and ``restore`` (to and from
host memory). :class:`BlockPool` here is the readable NumPy form; its fast twin,
:class:`kachedb_radix.accel.blockpool.BlockPool`, runs the same calls on a CUDA device with CuPy and
imports everything else from this package (geometry, presets, errors, validation),
as the C tree imports :mod:`kachedb_radix.reference.errors`.

* :mod:`kachedb_radix.reference.blockpool.layout` -- dtypes, model presets, layouts,
  size arithmetic.
* :mod:`kachedb_radix.reference.blockpool.validation` -- argument checks shared by both twins.
* :mod:`kachedb_radix.reference.blockpool.pool` -- :class:`BlockPool`, the NumPy reference.
* :mod:`kachedb_radix.reference.blockpool.handles` -- handles of asynchronous transfers.
* :mod:`kachedb_radix.reference.blockpool.errors` -- the :class:`KVPoolError` hierarchy.

Shared invariants (both twins): a call that raises a :class:`KVPoolError` has written
nothing; copies are parallel assignments (every source read before any destination
written); all moves are bit-exact; both twins produce bit-identical pool contents for
the same calls.
"""

from kachedb_radix.reference.blockpool.errors import (
    BackendUnavailableError,
    BlockIdError,
    BlockIdRangeError,
    BlockIdTypeError,
    BufferDTypeError,
    BufferLayoutError,
    BufferMismatchError,
    BufferShapeError,
    ConfigError,
    DuplicateDestinationError,
    KVPoolError,
    LengthMismatchError,
    PoolTooLargeError,
)
from kachedb_radix.reference.blockpool.handles import CompletedTransfer, TransferHandle
from kachedb_radix.reference.blockpool.layout import (
    PRESETS,
    KVDType,
    Layout,
    ModelPreset,
    PoolSpec,
    get_preset,
)
from kachedb_radix.reference.blockpool.pool import BlockPool

__all__ = [
    "PRESETS",
    "BackendUnavailableError",
    "BlockIdError",
    "BlockIdRangeError",
    "BlockIdTypeError",
    "BlockPool",
    "BufferDTypeError",
    "BufferLayoutError",
    "BufferMismatchError",
    "BufferShapeError",
    "CompletedTransfer",
    "ConfigError",
    "DuplicateDestinationError",
    "KVDType",
    "KVPoolError",
    "Layout",
    "LengthMismatchError",
    "ModelPreset",
    "PoolSpec",
    "PoolTooLargeError",
    "TransferHandle",
    "get_preset",
]
