"""Helpers for driving the two twins side by side: token inputs in every accepted
container, malformed inputs, comparable outcomes, and the after-every-step check.

Shared by the Hypothesis differential test (tests/accel/test_differential.py) and the
atheris fuzz harness (tests/accel/fuzz_harness.py).
"""

from __future__ import annotations

import array
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kachedb_radix import reference


def containers(tokens: list[int], kind: str) -> object:
    """The same tokens in one of the accepted containers (:data:`CONTAINERS`)."""
    if kind == "list":
        return list(tokens)
    if kind == "tuple":
        return tuple(tokens)
    if kind == "u32":
        return np.array(tokens, dtype=np.uint32)
    if kind == "i32":
        # Wraps ids >= 2**31 to negative values, which must be rejected (R-TOK-3).
        return np.array(tokens, dtype=np.int64).astype(np.int32)
    if kind == "i64":
        return np.array(tokens, dtype=np.int64)
    if kind == "array":
        return array.array("I", tokens)
    if kind == "memoryview":
        return memoryview(array.array("q", tokens))
    if kind == "range_like":
        # A Sequence that is neither list, tuple nor buffer: the slow path.
        return Seq(tokens)
    if kind == "misaligned":
        # A uint32 view one byte into its buffer: the C twin must copy, not read in place.
        raw = np.zeros(len(tokens) * 4 + 1, dtype=np.uint8)
        view = raw[1:].view(np.uint32)
        view[:] = tokens
        return view
    if kind == "readonly":
        frozen = np.array(tokens, dtype=np.uint32)
        frozen.setflags(write=False)
        return frozen
    raise AssertionError(kind)


#: Every container kind :func:`containers` builds.
CONTAINERS: tuple[str, ...] = (
    "list",
    "tuple",
    "u32",
    "i32",
    "i64",
    "array",
    "memoryview",
    "range_like",
    "misaligned",
    "readonly",
)


class Seq:
    """A minimal Sequence[int] (registered below)."""

    def __init__(self, items: list[int]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: int) -> int:
        return self._items[index]


Sequence.register(Seq)

#: Token inputs every implementation must reject (R-TOK-*), buffers included.
BAD_TOKENS: list[Any] = [
    "abc",
    3,
    None,
    {1: 2},
    [1, True],
    [0, 1.0],
    [0, -1],
    [1, 2**32],
    [1, 2**70],
    [1, "x", -1],
    [1, -1, "x"],
    (5, None),
    b"\x01\x02\x03\x04",
    bytearray(8),
    np.array([1, 2], dtype=np.uint64),
    np.array([1, 2], dtype=np.float32),
    np.array([1, 2], dtype=np.int16),
    np.array([1, 2], dtype=">u4"),
    np.array([1, 2], dtype=">i8"),
    np.zeros((2, 2), dtype=np.uint32),
    np.zeros(8, dtype=np.uint32)[::2],
    np.array(5, dtype=np.uint32),
    np.array([1, -1], dtype=np.int32),
    np.array([1, 2**32], dtype=np.int64),
    np.array([-5, 2**40], dtype=np.int64),
    array.array("d", [1.0]),
    array.array("L", [1, 2]),
    array.array("h", [1, 2]),
    [np.int64(1)],
]


def lease_view(lease: Any) -> Any:
    """A lease as comparable data (None stays None)."""
    if lease is None:
        return None
    return (
        lease.id,
        lease.namespace,
        tuple(lease.tokens),
        tuple(lease.blocks),
        lease.length,
        lease.released,
    )


def describe(value: Any) -> Any:
    """A call's return value as comparable data."""
    if value is None or isinstance(value, tuple):
        return ("ok", value)
    if hasattr(value, "reused"):
        return (
            "ok",
            value.length,
            tuple(value.blocks),
            value.reused,
            tuple(value.allocated),
            tuple(value.evicted),
            lease_view(value.lease),
        )
    return ("ok", value.length, tuple(value.blocks), lease_view(value.lease))


def run(call: Callable[..., Any]) -> tuple[Any, Any]:
    """(outcome, raw value): the outcome is comparable across implementations; an
    error is compared by its class (the kind, R-ERR-3)."""
    try:
        value = call()
    except reference.RadixError as error:
        return ("error", type(error)), None
    return describe(value), value


def outcome(call: Callable[..., Any]) -> Any:
    """The comparable outcome of ``call``."""
    return run(call)[0]


def check_pair(
    ref: Any, acc: Any, snapshots: Sequence[tuple[Any, Any]] = (), *, ref_invariants: bool = True
) -> None:
    """Both trees' invariants hold, and every read agrees: dump, stats, namespaces,
    clock, version, and each snapshot pair's dump, namespaces, version and clock.
    ``ref_invariants=False`` skips the reference's own (pure-Python, O(N)) check."""
    if ref_invariants:
        ref.check_invariants()
    acc.check_invariants()
    assert acc.dump() == ref.dump()
    assert acc.stats() == ref.stats()
    assert acc.namespaces() == ref.namespaces()
    assert acc.clock == ref.clock
    assert acc.version == ref.version
    for ref_snap, acc_snap in snapshots:
        assert acc_snap.dump() == ref_snap.dump()
        assert acc_snap.namespaces() == ref_snap.namespaces()
        assert (acc_snap.version, acc_snap.clock) == (ref_snap.version, ref_snap.clock)
