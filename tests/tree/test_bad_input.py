"""The bad-input matrix: every public call, each refusal typed and atomic (R-ERR-1, R-ERR-2).

Each case makes a small tree with pins, a namespace and free blocks, takes its dump,
makes one bad call, and checks the documented error class, its kind, a message that
names the offending value, and a dump identical to the one before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kachedb_radix.reference.errors import (
    ForeignLeaseError,
    InvalidArgumentError,
    LeaseReleasedError,
    OutOfBlocksError,
    RadixError,
    TokenLayoutError,
    TokenRangeError,
    TokenTypeError,
)
from tests.conftest import TreeFactory

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI.
pytestmark = pytest.mark.quick

Call = Callable[[Any, dict[str, Any]], object]


def _released_lease(tree: Any, held: dict[str, Any]) -> object:
    return tree.release(held["released"])


CASES: list[tuple[str, Call, type[RadixError], str]] = [
    ("match: not a sequence", lambda t, h: t.match(7), TokenTypeError, "int"),
    ("match: bool token", lambda t, h: t.match([1, False]), TokenTypeError, "False"),
    ("match: float token", lambda t, h: t.match([0.5]), TokenTypeError, "0.5"),
    ("match: negative token", lambda t, h: t.match([3, -7]), TokenRangeError, "-7"),
    ("match: token 2**32", lambda t, h: t.match([2**32]), TokenRangeError, "4294967296"),
    ("match: float64 array", lambda t, h: t.match(np.ones(4)), TokenTypeError, "'d'"),
    ("match: strided array", lambda t, h: t.match(np.arange(8)[::2]), TokenLayoutError, "strides"),
    ("match: namespace int", lambda t, h: t.match([1, 1], 12), InvalidArgumentError, "12"),
    ("insert: not a sequence", lambda t, h: t.insert(None), TokenTypeError, "NoneType"),
    ("insert: str token", lambda t, h: t.insert([1, "x"]), TokenTypeError, "'x'"),
    ("insert: token too large", lambda t, h: t.insert([2**40, 1]), TokenRangeError, str(2**40)),
    (
        "insert: int64 negative",
        lambda t, h: t.insert(np.array([-2], dtype=np.int64)),
        TokenRangeError,
        "-2",
    ),
    (
        "insert: uint64 array",
        lambda t, h: t.insert(np.ones(2, dtype=np.uint64)),
        TokenTypeError,
        "uint32",
    ),
    (
        "insert: 2-D array",
        lambda t, h: t.insert(np.ones((2, 2), dtype=np.uint32)),
        TokenLayoutError,
        "ndim=2",
    ),
    (
        "insert: namespace bytes",
        lambda t, h: t.insert([1, 1], b"ns"),
        InvalidArgumentError,
        "b'ns'",
    ),
    (
        "insert: out of blocks",
        lambda t, h: t.insert(list(range(100, 120))),
        OutOfBlocksError,
        "10 new blocks",
    ),
    ("evict: negative", lambda t, h: t.evict(-1), InvalidArgumentError, "-1"),
    ("evict: float", lambda t, h: t.evict(1.0), InvalidArgumentError, "1.0"),
    ("evict: bool", lambda t, h: t.evict(True), InvalidArgumentError, "True"),
    ("evict: str", lambda t, h: t.evict("2"), InvalidArgumentError, "'2'"),
    ("release: twice", _released_lease, LeaseReleasedError, "already released"),
    ("release: None", lambda t, h: t.release(None), ForeignLeaseError, "None"),
    (
        "release: other tree's lease",
        lambda t, h: t.release(h["foreign"]),
        ForeignLeaseError,
        "not issued",
    ),
]


@pytest.mark.parametrize(("case", "call", "error", "named"), CASES, ids=[c[0] for c in CASES])
def test_bad_call_is_refused_and_changes_nothing(
    make_tree: TreeFactory, case: str, call: Call, error: type[RadixError], named: str
) -> None:
    """R-ERR-1, R-ERR-2: typed error, helpful message, identical dump."""
    tree = make_tree(8, 2)
    other = make_tree(8, 2)
    held = {
        "live": tree.insert([1, 1, 2, 2, 3, 3], pin=True).lease,
        "released": tree.insert([1, 1, 4, 4], pin=True).lease,
        "foreign": other.insert([1, 1], pin=True).lease,
    }
    tree.insert([5, 5], "tenant")
    held["released"].release()
    before = tree.dump()
    with pytest.raises(error) as raised:
        call(tree, held)
    assert type(raised.value) is error
    assert raised.value.kind == error.kind
    assert named in str(raised.value)
    assert tree.dump() == before
    tree.check_invariants()


CONSTRUCTOR_CASES: list[tuple[str, tuple[object, object]]] = [
    ("zero blocks", (0, 16)),
    ("negative blocks", (-4, 16)),
    ("float blocks", (8.0, 16)),
    ("bool blocks", (True, 16)),
    ("zero block size", (8, 0)),
    ("str block size", (8, "16")),
    ("bool block size", (8, False)),
]


@pytest.mark.parametrize(("case", "args"), CONSTRUCTOR_CASES, ids=[c[0] for c in CONSTRUCTOR_CASES])
def test_bad_constructor_arguments(
    make_tree: TreeFactory, case: str, args: tuple[object, object]
) -> None:
    """R-ERR-1: pool and block sizes are ints >= 1; anything else names the value."""
    with pytest.raises(InvalidArgumentError) as raised:
        make_tree(*args)
    assert repr(args[0]) in str(raised.value) or repr(args[1]) in str(raised.value)
