"""KV block pool: the memory behind the radix tree's block ids.

* :mod:`kvpool.layout` -- dtypes, model presets, layouts, size arithmetic (no allocation).
* :mod:`kvpool.numpy_pool` -- :class:`NumpyBlockPool`, the readable reference.
* :mod:`kvpool.cupy_pool` -- :class:`CupyBlockPool`, one fused kernel launch per batch; CuPy
  is imported lazily, so this package imports without CuPy or a GPU.
* :mod:`kvpool.kernels` -- addressing plans, CUDA source, CPU emulator of the kernel.
* :mod:`kvpool.errors` -- the :class:`KVPoolError` hierarchy.

Shared invariants: a call that raises a :class:`KVPoolError` has written nothing; copies are
parallel assignments (every source read before any destination written); all moves are
bit-exact; both backends produce bit-identical pool contents for the same calls.
"""

from kvpool.cupy_pool import CupyBlockPool, CupyTransfer, cupy_unavailable_reason
from kvpool.errors import (
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
from kvpool.handles import CompletedTransfer, TransferHandle
from kvpool.layout import PRESETS, KVDType, Layout, ModelPreset, PoolSpec, get_preset
from kvpool.numpy_pool import NumpyBlockPool

__all__ = [
    "PRESETS",
    "BackendUnavailableError",
    "BlockIdError",
    "BlockIdRangeError",
    "BlockIdTypeError",
    "BufferDTypeError",
    "BufferLayoutError",
    "BufferMismatchError",
    "BufferShapeError",
    "CompletedTransfer",
    "ConfigError",
    "CupyBlockPool",
    "CupyTransfer",
    "DuplicateDestinationError",
    "KVDType",
    "KVPoolError",
    "Layout",
    "LengthMismatchError",
    "ModelPreset",
    "NumpyBlockPool",
    "PoolSpec",
    "PoolTooLargeError",
    "TransferHandle",
    "cupy_unavailable_reason",
    "get_preset",
]
