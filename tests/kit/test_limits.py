"""The kit and the pool caps (R-LIMIT-*): our own twins answer a reset past a cap alike,
in process and over the stdio protocol, and a candidate that refuses a pool within them,
or builds one past them, is attributed to the caps' rules."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from kachedb_radix.spec.conform.rulemap import Observation, attribute
from kachedb_radix.spec.conform.steps import LeaseBook, apply_step
from kachedb_radix.spec.conform.targets import Target, command, resolve
from tests.conftest import IMPLEMENTATIONS

#: The sizes of issue 32's reproductions past the caps, then the caps themselves.
RESETS = [
    (99_999_999_999, 1),
    (2, 99_999_999_999),
    (2**31, 1),
    (2**24 + 1, 1),
    (2**16 + 1, 2**16),
    (2**16, 2**16),
    (4, 2**16),
]


def _outcomes(target: Target) -> list[dict[str, Any]]:
    candidate = target.open()
    try:
        return [
            apply_step(candidate, {"op": "reset", "num_blocks": n, "block_size": b}, LeaseBook())
            for n, b in RESETS
        ]
    finally:
        candidate.close()


def _served(impl: str) -> Target:
    return command(f"{sys.executable} -m kachedb_radix.spec serve --impl {impl}")


@pytest.mark.skipif("accel" not in IMPLEMENTATIONS, reason="the C twin is not built")
def test_our_twins_answer_every_reset_alike() -> None:
    """R-LIMIT-1, R-LIMIT-2, R-LIMIT-3: no R-ERR disagreement between our own twins, in
    process or served over stdio."""
    expected = [{"error": "invalid_argument"}] * 5 + [{"ok": None}] * 2
    for target in (resolve("reference"), resolve("accel"), _served("reference"), _served("accel")):
        assert _outcomes(target) == expected, target.name


@pytest.mark.parametrize(
    ("expected", "actual", "cause"),
    [
        ({"ok": None}, {"error": "invalid_argument"}, "refuses a pool"),
        ({"error": "invalid_argument"}, {"ok": None}, "builds a pool past"),
    ],
)
def test_a_reset_answered_otherwise_is_attributed_to_the_caps(
    expected: dict[str, Any], actual: dict[str, Any], cause: str
) -> None:
    """R-LIMIT-1 first, with R-ERR-1, and a cause saying which way it went wrong."""
    step = {"op": "reset", "num_blocks": 4096, "block_size": 16}
    found = attribute(Observation(step, expected, actual, "", None, frozenset({"core"})))
    assert found.rules == ("R-LIMIT-1", "R-LIMIT-2", "R-LIMIT-3", "R-ERR-1")
    assert cause in found.cause
