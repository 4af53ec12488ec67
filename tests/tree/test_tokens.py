"""Token input (R-TOK-1..5): what is accepted, what is refused and in which order."""

from __future__ import annotations

import array
from collections import UserList
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kachedb_radix.reference.errors import (
    InvalidTokensError,
    TokenLayoutError,
    TokenRangeError,
    TokenTypeError,
)
from tests.conftest import TreeFactory
from tests.support.trees import blocks

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI.
pytestmark = pytest.mark.quick


def _unaligned(dtype: str) -> Callable[[list[int]], Any]:
    """Tokens in a NumPy array one byte into its buffer: NumPy exports its item format
    with an explicit native-order prefix ("=I", "=i", "=q"), still native (R-TOK-2).
    Found by the fuzzer (tests/accel/fuzz_regressions/native-order-buffer-format)."""

    def make(tokens: list[int]) -> Any:
        size = np.dtype(dtype).itemsize
        view = np.zeros(len(tokens) * size + 1, dtype=np.uint8)[1:].view(dtype)
        view[:] = tokens
        return view

    return make


GOOD_INPUTS: list[tuple[str, Callable[[list[int]], Any]]] = [
    ("list", list),
    ("tuple", tuple),
    ("uint32 array", lambda t: np.array(t, dtype=np.uint32)),
    ("int32 array", lambda t: np.array(t, dtype=np.int32)),
    ("int64 array", lambda t: np.array(t, dtype=np.int64)),
    ("array.array I", lambda t: array.array("I", t)),
    ("array.array i", lambda t: array.array("i", t)),
    ("array.array q", lambda t: array.array("q", t)),
    ("memoryview", lambda t: memoryview(array.array("I", t))),
    ("other Sequence", UserList),
    ("unaligned uint32", _unaligned("<u4" if np.little_endian else ">u4")),
    ("unaligned int32", _unaligned("<i4" if np.little_endian else ">i4")),
    ("unaligned int64", _unaligned("<i8" if np.little_endian else ">i8")),
]


@pytest.mark.parametrize(("kind", "convert"), GOOD_INPUTS, ids=[k for k, _ in GOOD_INPUTS])
def test_every_accepted_input_kind_matches_the_same(
    make_tree: TreeFactory, kind: str, convert: Callable[[list[int]], Any]
) -> None:
    """R-TOK-1, R-TOK-2: lists, tuples and uint32/int32/int64 buffers are all token input."""
    tree = make_tree(16, 4)
    tokens = blocks(1, 2, 3)
    tree.insert(tokens)
    found = tree.match(convert(tokens))
    assert (found.length, tuple(found.blocks)) == (12, (0, 1, 2))
    tree.check_invariants()


def test_largest_token_id_is_accepted(make_tree: TreeFactory) -> None:
    """R-TOK-1: ids are unsigned 32-bit, so 2**32 - 1 is a valid token."""
    tree = make_tree(4, 2)
    top = 2**32 - 1
    assert tree.insert([top, 0]).length == 2
    assert tree.match(np.array([top, 0], dtype=np.uint32)).length == 2
    assert tree.match(np.array([top, 0], dtype=np.int64)).length == 2


def test_empty_input_matches_nothing(make_tree: TreeFactory) -> None:
    """R-MATCH-1: an empty sequence is valid and matches zero tokens."""
    tree = make_tree(4, 2)
    tree.insert([1, 2])
    assert tree.match([]).length == 0
    assert tree.match(np.array([], dtype=np.uint32)).length == 0


BAD_INPUTS: list[tuple[str, Callable[[], Any], type[InvalidTokensError]]] = [
    ("None", lambda: None, TokenTypeError),
    ("int", lambda: 5, TokenTypeError),
    ("str", lambda: "abcd", TokenTypeError),
    ("dict", lambda: {1: 2}, TokenTypeError),
    ("bool element", lambda: [1, True], TokenTypeError),
    ("float element", lambda: [1, 2.0], TokenTypeError),
    ("str element", lambda: [1, "2"], TokenTypeError),
    ("numpy scalar element", lambda: [1, np.float32(2)], TokenTypeError),
    ("negative", lambda: [1, -1], TokenRangeError),
    ("too large", lambda: [1, 2**32], TokenRangeError),
    ("negative int64 buffer", lambda: np.array([1, -3], dtype=np.int64), TokenRangeError),
    ("too large int64 buffer", lambda: np.array([2**32, 0], dtype=np.int64), TokenRangeError),
    ("negative int32 buffer", lambda: np.array([-1], dtype=np.int32), TokenRangeError),
    ("uint64 buffer", lambda: np.array([1, 2], dtype=np.uint64), TokenTypeError),
    ("float32 buffer", lambda: np.array([1, 2], dtype=np.float32), TokenTypeError),
    ("int16 buffer", lambda: np.array([1, 2], dtype=np.int16), TokenTypeError),
    ("bool buffer", lambda: np.array([True], dtype=np.bool_), TokenTypeError),
    ("bytes", lambda: b"\x01\x02", TokenTypeError),
    ("big-endian buffer", lambda: np.array([1, 2], dtype=">u4"), TokenTypeError),
    ("two-dimensional", lambda: np.zeros((2, 2), dtype=np.uint32), TokenLayoutError),
    ("zero-dimensional", lambda: np.array(3, dtype=np.uint32), TokenLayoutError),
    ("non-contiguous", lambda: np.arange(8, dtype=np.uint32)[::2], TokenLayoutError),
]


@pytest.mark.parametrize(("case", "build", "error"), BAD_INPUTS, ids=[c for c, _, _ in BAD_INPUTS])
def test_bad_tokens_raise_the_documented_error_and_change_nothing(
    make_tree: TreeFactory, case: str, build: Callable[[], Any], error: type[InvalidTokensError]
) -> None:
    """R-TOK-2, R-TOK-3, R-TOK-4, R-ERR-2: each refusal has its kind; state is unchanged."""
    tree = make_tree(8, 2)
    tree.insert([1, 2, 3, 4])
    before = tree.dump()
    for call in (tree.match, tree.insert):
        with pytest.raises(error) as raised:
            call(build())
        assert type(raised.value) is error
        assert raised.value.kind == error.kind
        assert str(raised.value)  # says what was wrong
    assert tree.dump() == before
    tree.check_invariants()


def test_invalid_token_after_the_matched_prefix_is_still_refused(make_tree: TreeFactory) -> None:
    """R-TOK-5: the whole input is validated, however early the match stops."""
    tree = make_tree(8, 2)
    tree.insert([1, 2])
    with pytest.raises(TokenRangeError):
        tree.match([9, 9, 9, 9, 9, -1])
    with pytest.raises(TokenTypeError):
        tree.match([1, 2, 5, None])
    with pytest.raises(TokenRangeError):
        tree.match(np.array([7, 7, 7, -1], dtype=np.int64))


def test_first_bad_element_decides_the_error(make_tree: TreeFactory) -> None:
    """R-TOK-5: elements are checked in index order; the first offender decides the kind."""
    tree = make_tree(8, 2)
    with pytest.raises(TokenRangeError):
        tree.match([0, -1, 1.5])
    with pytest.raises(TokenTypeError):
        tree.match([0, 1.5, -1])


def test_buffer_format_is_checked_before_layout(make_tree: TreeFactory) -> None:
    """R-TOK-5: for buffers the item format is checked before the layout."""
    tree = make_tree(8, 2)
    with pytest.raises(TokenTypeError):
        tree.match(np.zeros((2, 2), dtype=np.float64))


def test_errors_are_also_builtin_exception_types(make_tree: TreeFactory) -> None:
    """R-TOK-2, R-TOK-3: ``except TypeError`` / ``except ValueError`` catch token errors too."""
    tree = make_tree(8, 2)
    with pytest.raises(TypeError):
        tree.match([True])
    with pytest.raises(ValueError):
        tree.match([-5])


def test_caller_list_is_never_mutated(make_tree: TreeFactory) -> None:
    """R-TOK-1: the tree copies what it keeps; the caller's list stays theirs."""
    tree = make_tree(8, 2)
    tokens = [1, 2, 3, 4, 5]
    tree.insert(tokens)
    tokens[0] = 99
    assert tree.match([1, 2, 3, 4]).length == 4
    assert tokens == [99, 2, 3, 4, 5]
