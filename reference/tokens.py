"""Token input: what a token sequence may be, and how it is checked.

A token id is an unsigned 32-bit integer (rule R-TOK-1). Serving engines hold token
ids either as Python lists or as integer arrays, so both are accepted:

* a ``list``, ``tuple`` or other ``Sequence`` (not ``str``) whose elements are
  ``int`` (``bool`` is refused: ``True`` is an int to Python but never a token);
* an object exporting the buffer protocol (NumPy arrays, ``array.array``,
  ``memoryview``) whose items are uint32, int32 or int64 in native byte order, laid
  out one-dimensional and C-contiguous.

Anything else raises a subclass of :class:`~kachedb_radix.reference.errors.InvalidTokensError`.
The whole input is validated on every call, even when a match would stop early
(R-TOK-5): an answer must not depend on how far an implementation happened to read.
Checks run in a fixed order so every implementation reports the same error kind:

1. the container (R-TOK-2): not a sequence or buffer -> ``TokenTypeError``;
2. for buffers, the item format (R-TOK-2) -> ``TokenTypeError``, then the layout
   (R-TOK-4) -> ``TokenLayoutError``;
3. elements in index order; the first bad element decides: a non-int element
   (R-TOK-2) -> ``TokenTypeError``, a value outside [0, 2**32) (R-TOK-3) ->
   ``TokenRangeError``.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from typing import Literal, TypeAlias, cast

from typing_extensions import Buffer

from .errors import TokenLayoutError, TokenRangeError, TokenTypeError

#: One past the largest token id (R-TOK-1).
TOKEN_LIMIT = 2**32

#: What every public call accepts as a token sequence.
TokenInput: TypeAlias = Sequence[int] | Buffer

_NATIVE_ORDER = "<" if sys.byteorder == "little" else ">"
_ORDER_PREFIXES = ("", "@", "=", _NATIVE_ORDER)
# (format character, item size) pairs accepted: uint32, int32 and int64 (R-TOK-2).
# Sizes are checked too because 'l' and 'L' are 4 or 8 bytes depending on the platform.
# The array type code of a 4-byte unsigned int, used as a C-speed range check.
_UINT32_CODE: Literal["I", "L"] = "I" if array("I").itemsize == 4 else "L"
# Each accepted (format character, item size) and the native single-character code of
# the same size and signedness, which memoryview.tolist() understands: a format with an
# explicit native-order prefix ("=I", "<I" on little-endian machines; NumPy exports
# them for unaligned arrays) is read through a cast to it.
_NATIVE_CODES: dict[tuple[str, int], Literal["I", "L", "i", "q"]] = {
    ("I", 4): _UINT32_CODE,
    ("L", 4): _UINT32_CODE,
    ("i", 4): "i",
    ("l", 4): "i",
    ("l", 8): "q",
    ("q", 8): "q",
}
_ACCEPTED_FORMATS = set(_NATIVE_CODES)


def as_token_list(tokens: object) -> list[int]:
    """Validate ``tokens`` and return them as a list of Python ints.

    A ``list`` of exact ``int`` is returned as is (never mutated by the tree); other
    inputs are copied. Cost: O(n) for n tokens.

    Raises:
        TokenTypeError: not a sequence or buffer, a wrong item format, or an element
            that is not an int (``bool`` included).
        TokenLayoutError: a buffer that is not one-dimensional and C-contiguous.
        TokenRangeError: an element outside [0, 2**32).
    """
    if isinstance(tokens, list | tuple):
        return _check_sequence(tokens)
    try:
        view = memoryview(tokens)  # type: ignore[arg-type]
    except TypeError:
        view = None
    if view is not None:
        with view:
            return _check_buffer(view)
    if isinstance(tokens, Sequence) and not isinstance(tokens, str):
        return _check_sequence(tokens)
    raise TokenTypeError(
        f"tokens must be a sequence of int or an integer buffer, not {type(tokens).__name__}"
    )


def _check_sequence(tokens: Sequence[object]) -> list[int]:
    # Fast path: every element an exact int (the common case), then one C-speed range
    # check by packing into a uint32 array, which raises OverflowError if any is outside.
    if set(map(type, tokens)) <= {int}:
        values = cast(list[int], tokens if isinstance(tokens, list) else list(tokens))
        if _in_range(values):
            return values
    # Slow path: find the first offending element, in index order (R-TOK-2, R-TOK-3).
    checked: list[int] = []
    for index, token in enumerate(tokens):
        if not isinstance(token, int) or isinstance(token, bool):
            raise TokenTypeError(
                f"token {index} is {token!r} ({type(token).__name__}): token ids must be int"
            )
        _check_range(index, token)
        checked.append(int(token))
    return checked


def _check_buffer(view: memoryview) -> list[int]:
    item_format = view.format
    order = item_format[:-1]
    if order not in _ORDER_PREFIXES or (item_format[-1:], view.itemsize) not in _ACCEPTED_FORMATS:
        raise TokenTypeError(
            f"token buffer has item format {item_format!r} of {view.itemsize} bytes: "
            "expected uint32, int32 or int64 in native byte order"
        )
    if view.ndim != 1 or not view.c_contiguous:
        raise TokenLayoutError(
            f"token buffer must be one-dimensional and C-contiguous, got ndim={view.ndim}, "
            f"shape={view.shape}, strides={view.strides}"
        )
    code = _NATIVE_CODES[(item_format[-1], view.itemsize)]
    if item_format != code:
        view = view.cast("B").cast(code)
    values: list[int] = view.tolist()
    # uint32 items are in range by construction; signed ones may be negative or too large.
    if item_format[-1] not in "IL" and not _in_range(values):
        # Some item is out of range: report the first one (R-TOK-5).
        index = next(i for i, token in enumerate(values) if not 0 <= token < TOKEN_LIMIT)
        _check_range(index, values[index])
    return values


def _in_range(values: list[int]) -> bool:
    try:
        array(_UINT32_CODE, values)
    except OverflowError:
        return False
    return True


def _check_range(index: int, token: int) -> None:
    if not 0 <= token < TOKEN_LIMIT:
        raise TokenRangeError(f"token {index} is {token}: token ids must be in [0, 2**32)")
