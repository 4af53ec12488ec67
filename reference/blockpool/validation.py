"""Argument validation shared by every pool backend.

Invariant: these functions only read their arguments and never touch pool memory, so a pool
that runs all of them before its first write leaves its contents unchanged when one raises.

Accepted block-id lists: any one-dimensional iterable of Python ``int`` or numpy integer
scalars, or a one-dimensional numpy integer array.  Refused: ``bool`` / ``numpy.bool_``
(even though ``bool`` subclasses ``int``), floats (even integral ones), strings, nested lists.

Validated ids come back as a one-dimensional ``int64`` NumPy array.  The checks run in
NumPy (or C builtins), never element by element in Python, unless an id is bad: then a
per-element pass finds the first offending position, so the message names exactly the
element a plain loop would have stopped at (a GPU pool calls this per batch, so the
valid path is what must be cheap: about a microsecond for 16 ids).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kachedb_radix.reference.blockpool.errors import (
    BlockIdRangeError,
    BlockIdTypeError,
    BufferDTypeError,
    BufferLayoutError,
    BufferShapeError,
    DuplicateDestinationError,
    LengthMismatchError,
)
from kachedb_radix.reference.blockpool.layout import PoolSpec

BlockIds = Iterable[int] | Any
"""Type of id-list arguments (kept loose so numpy integer arrays are accepted)."""

IdArray = npt.NDArray[np.int64]
"""Validated ids: a one-dimensional int64 array, every value in ``[0, num_blocks)``."""

#: Batches up to this size are checked with Python's C builtins (``set``, ``min``,
#: ``max``), which beat NumPy's per-call overhead on a handful of ids.
SMALL_BATCH = 64


def normalize_ids(ids: BlockIds, num_blocks: int, role: str = "ids") -> IdArray:
    """Return ``ids`` as an int64 array, each in ``[0, num_blocks)``.

    Cost O(len(ids)) in NumPy or C builtins.  Raises :class:`BlockIdTypeError` for a
    non-integer element or a non-1-D argument and :class:`BlockIdRangeError` for an
    out-of-range id; the message names ``role``, the first offending position and value.
    """
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1:
            raise BlockIdTypeError(f"{role} must be one-dimensional, got shape {ids.shape}")
        if ids.dtype.kind not in "iu":
            raise BlockIdTypeError(
                f"{role} must hold integers, got a numpy array of dtype {ids.dtype}"
            )
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= num_blocks):
            _raise_first_bad(ids.tolist(), num_blocks, role)
        return ids.astype(np.int64, copy=False)
    if isinstance(ids, str | bytes | bytearray) or not isinstance(ids, Iterable):
        raise BlockIdTypeError(
            f"{role} must be a sequence of ints, got {type(ids).__name__}: {ids!r}"
        )
    items = ids if isinstance(ids, list | tuple) else list(ids)
    if not items:
        return np.empty(0, dtype=np.int64)
    # Exact ints only (bool is a subclass of int: excluded by the exact type test).
    if set(map(type, items)) == {int} and min(items) >= 0 and max(items) < num_blocks:
        return np.array(items, dtype=np.int64)
    _raise_first_bad(items, num_blocks, role)
    # Only numpy integer scalars (or a mix with ints) can pass the element-wise check.
    return np.array([int(v) for v in items], dtype=np.int64)


_ONLY_INT = frozenset({int})


def small_ids(ids: BlockIds, num_blocks: int, limit: int) -> Sequence[int] | None:
    """``ids`` as a sequence of Python ints, if it is a list or tuple of exact ints, or a 1-D
    NumPy integer array, of 1 to ``limit`` ids, each in ``[0, num_blocks)``; else None.

    The fast path of a GPU pool's small calls: it accepts only what
    :func:`normalize_ids` accepts, with the same values, and raises nothing -- on None the
    caller runs :func:`normalize_ids`, which converts what this declined or raises the
    precise error.  Cost O(limit) in C builtins; no NumPy array is made.
    """
    if type(ids) is list or type(ids) is tuple:
        items: Sequence[int] = ids
        if not 0 < len(items) <= limit or set(map(type, items)) != _ONLY_INT:
            return None
    elif type(ids) is np.ndarray and ids.ndim == 1 and ids.dtype.kind in "iu":
        # tolist() yields exact Python ints, so only the length needs checking.
        if not 0 < len(ids) <= limit:
            return None
        items = ids.tolist()
    else:
        return None
    if min(items) < 0 or max(items) >= num_blocks:
        return None
    return items


def small_disjoint_copy(
    src_ids: BlockIds, dst_ids: BlockIds, num_blocks: int, limit: int
) -> tuple[Sequence[int], Sequence[int]] | None:
    """Both id lists of a copy as :func:`small_ids` gives them, if both are taken, have the
    same length, the destinations are unique and no block is both read and written (a
    copy that is one launch); else None (the caller runs the full checks, which raise or
    handle the overlap).  Cost O(limit) in C builtins."""
    src = small_ids(src_ids, num_blocks, limit)
    if src is None:
        return None
    dst = small_ids(dst_ids, num_blocks, limit)
    if dst is None or len(src) != len(dst):
        return None
    targets = set(dst)
    return (src, dst) if len(targets) == len(dst) and targets.isdisjoint(src) else None


def _raise_first_bad(items: Iterable[object], num_blocks: int, role: str) -> None:
    """Raise for the first element that is not an int in range; return if there is none."""
    for i, v in enumerate(items):
        if isinstance(v, bool | np.bool_) or not isinstance(v, int | np.integer):
            raise BlockIdTypeError(f"{role}[{i}] = {v!r} is not an int (got {type(v).__name__})")
        iv = int(v)
        if iv < 0 or iv >= num_blocks:
            raise BlockIdRangeError(role, i, iv, num_blocks)


def runs(ids: Sequence[int] | IdArray) -> list[tuple[int, int]]:
    """``(start, end)`` index ranges of ``ids`` over which the ids are consecutive and
    ascending (``ids[i + 1] == ids[i] + 1``): each is one slice of a block-major array,
    one copy instead of one per block. Cost O(n) in NumPy."""
    values = np.asarray(ids, dtype=np.int64)
    if not len(values):
        return []
    edges = [0, *(np.flatnonzero(np.diff(values) != 1) + 1).tolist(), len(values)]
    return list(itertools.pairwise(edges))


def check_unique(ids: IdArray, role: str) -> None:
    """Raise :class:`DuplicateDestinationError` if an id repeats, naming the repeat a scan
    from the left meets first.  Cost O(n) with a set for small batches, O(n log n) in
    NumPy otherwise."""
    n = len(ids)
    if n <= SMALL_BATCH and len(set(ids.tolist())) == n:
        return
    order = np.argsort(ids, kind="stable")
    ranked = ids[order]
    same = ranked[1:] == ranked[:-1]
    if not same.any():
        return
    # Each repeated value's run in sorted order starts where `same` turns on; its second
    # member is that value's second occurrence.  The scan meets the smallest one first.
    starts = np.flatnonzero(same & np.concatenate(([True], ~same[:-1])))
    seconds = order[starts + 1]
    pick = int(np.argmin(seconds))
    start = int(starts[pick])
    raise DuplicateDestinationError(role, int(ranked[start]), int(order[start]), int(seconds[pick]))


def overlap(a: IdArray, b: IdArray) -> bool:
    """Whether the two id arrays share a value.  Cost O(n) with sets for small batches,
    O(n log n) in NumPy otherwise."""
    if len(a) <= SMALL_BATCH and len(b) <= SMALL_BATCH:
        return not set(a.tolist()).isdisjoint(b.tolist())
    return bool(np.isin(a, b, assume_unique=False).any())


@dataclass(frozen=True)
class CopyPlan:
    """Validated arguments of a block copy.

    ``overlapping`` is true when some block is both read and written; backends must then
    still honour parallel-assignment semantics (every source read before any write).
    """

    src: IdArray
    dst: IdArray

    @property
    def overlapping(self) -> bool:
        """Whether some block is both read and written.  O(n)."""
        return overlap(self.src, self.dst)


def validate_copy(spec: PoolSpec, src_ids: BlockIds, dst_ids: BlockIds) -> CopyPlan:
    """Validate a copy request: ids in range, equal lengths, destinations unique.

    Sources may repeat (one block forked into several).  Cost O(n).
    """
    src = normalize_ids(src_ids, spec.num_blocks, "src_ids")
    dst = normalize_ids(dst_ids, spec.num_blocks, "dst_ids")
    if len(src) != len(dst):
        raise LengthMismatchError(
            f"src_ids has {len(src)} ids but dst_ids has {len(dst)}; copies pair them up"
        )
    check_unique(dst, "dst_ids")
    return CopyPlan(src, dst)


def split_pairs(pairs: Iterable[tuple[int, int]] | Any) -> tuple[list[object], list[object]]:
    """Split ``[(src, dst), ...]`` into two lists.  Raises :class:`BlockIdTypeError` if an
    element is not a pair.  Cost O(n)."""
    if isinstance(pairs, str | bytes) or not isinstance(pairs, Iterable):
        raise BlockIdTypeError(f"pairs must be a sequence of (src, dst), got {pairs!r}")
    src: list[object] = []
    dst: list[object] = []
    for i, p in enumerate(pairs):
        if isinstance(p, str | bytes) or not isinstance(p, Iterable):
            raise BlockIdTypeError(f"pairs[{i}] = {p!r} is not a (src, dst) pair")
        items = list(p)
        if len(items) != 2:
            raise BlockIdTypeError(f"pairs[{i}] = {p!r} is not a (src, dst) pair")
        src.append(items[0])
        dst.append(items[1])
    return src, dst


def check_buffer(
    spec: PoolSpec,
    buf: Any,
    n: int,
    role: str,
    array_type: type,
    *,
    writable: bool,
    where: str,
) -> None:
    """Check that ``buf`` can hold ``n`` canonical blocks of ``spec``.

    It must be an instance of ``array_type`` (``numpy.ndarray`` for host memory,
    ``cupy.ndarray`` for device memory; ``where`` names it in messages), have the pool's
    storage dtype, shape ``spec.buffer_shape(n)``, be C-contiguous and, if ``writable``,
    writeable.  Cost O(1).  Raises :class:`BufferLayoutError`, :class:`BufferDTypeError` or
    :class:`BufferShapeError`.
    """
    if not isinstance(buf, array_type):
        raise BufferLayoutError(
            f"{role} must be a {where} array ({array_type.__module__}.{array_type.__name__}), "
            f"got {type(buf).__module__}.{type(buf).__name__}"
        )
    arr: Any = buf
    if np.dtype(arr.dtype) != np.dtype(spec.storage_dtype):
        raise BufferDTypeError(
            f"{role} has dtype {arr.dtype} but the pool stores {spec.dtype.label} as "
            f"{spec.storage_dtype}"
        )
    expected = spec.buffer_shape(n)
    if tuple(arr.shape) != expected:
        raise BufferShapeError(f"{role} has shape {tuple(arr.shape)}, expected {expected}")
    if not arr.flags.c_contiguous:
        raise BufferLayoutError(f"{role} must be C-contiguous")
    if writable and isinstance(arr, np.ndarray) and not arr.flags.writeable:
        raise BufferLayoutError(f"{role} is read-only but is written by this call")
