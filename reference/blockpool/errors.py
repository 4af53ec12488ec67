"""Typed errors raised by the KV block pool (both twins: NumPy and CuPy).

Every error raised on purpose by this package derives from :class:`KVPoolError`, so callers
can catch the whole family with one ``except`` clause.  Where a builtin exception type fits
(``ValueError``, ``TypeError``, ``MemoryError``, ``RuntimeError``) the class also derives
from it, so generic handlers keep working.

Invariant: an operation that raises one of these errors has written nothing.  Pools validate
every argument (ids, lengths, buffers) before touching memory.
"""

from __future__ import annotations


class KVPoolError(Exception):
    """Base class of every error raised on purpose by a block pool."""


class ConfigError(KVPoolError, ValueError):
    """A pool specification, preset name or model dimension is invalid."""


class PoolTooLargeError(KVPoolError, MemoryError):
    """The pool needs more bytes than the budget (or the device's free memory) allows.

    Attributes:
        required_bytes: bytes the pool would need.
        available_bytes: bytes the budget or device offered.
        source: what limited it, e.g. ``"memory_budget"`` or ``"device free memory"``.
    """

    def __init__(self, required_bytes: int, available_bytes: int, source: str) -> None:
        self.required_bytes = required_bytes
        self.available_bytes = available_bytes
        self.source = source
        super().__init__(
            f"pool needs {required_bytes} bytes ({required_bytes / 2**30:.3f} GiB) but "
            f"{source} allows only {available_bytes} bytes ({available_bytes / 2**30:.3f} GiB)"
        )


class BlockIdError(KVPoolError, ValueError):
    """Base class of errors about block-id lists."""


class BlockIdTypeError(BlockIdError, TypeError):
    """A block id is not an integer (floats, strings, ``bool`` and ``numpy.bool_`` are refused),
    or the id list itself is not a one-dimensional sequence of integers."""


class BlockIdRangeError(BlockIdError):
    """A block id is negative or not below the pool's ``num_blocks``.

    Attributes:
        role: which argument held it (``"src_ids"``, ``"dst_ids"``, ``"ids"``).
        index: position of the bad id in that argument.
        value: the bad id.
        num_blocks: size of the pool.
    """

    def __init__(self, role: str, index: int, value: int, num_blocks: int) -> None:
        self.role = role
        self.index = index
        self.value = value
        self.num_blocks = num_blocks
        super().__init__(
            f"{role}[{index}] = {value} is out of range for a pool of {num_blocks} blocks "
            f"(valid ids: 0..{num_blocks - 1})"
        )


class DuplicateDestinationError(BlockIdError):
    """The same destination block appears twice in one write (the result would be ambiguous).

    Attributes:
        role: which argument held it.
        value: the duplicated id.
        first_index / second_index: its first two positions.
    """

    def __init__(self, role: str, value: int, first_index: int, second_index: int) -> None:
        self.role = role
        self.value = value
        self.first_index = first_index
        self.second_index = second_index
        super().__init__(
            f"{role} names block {value} twice (positions {first_index} and {second_index}); "
            "each destination block may be written once per call"
        )


class LengthMismatchError(BlockIdError):
    """Two lists that must pair up element by element have different lengths."""


class BufferMismatchError(KVPoolError, ValueError):
    """Base class of errors about a caller-supplied buffer."""


class BufferDTypeError(BufferMismatchError, TypeError):
    """A buffer's dtype differs from the pool's storage dtype."""


class BufferShapeError(BufferMismatchError):
    """A buffer's shape differs from ``(len(ids), num_layers, 2, block_size, heads, head_dim)``."""


class BufferLayoutError(BufferMismatchError):
    """A buffer is not C-contiguous, not writeable, or lives on the wrong device."""


class BackendUnavailableError(KVPoolError, RuntimeError):
    """The accelerated backend cannot run here (CuPy not installed, or no CUDA device)."""
