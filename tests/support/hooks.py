"""The C twin's test hooks (``accel/corrupt.c``: ``RadixTree._corrupt_check``,
``BlockAllocator._corrupt_check``, the module's ``_corrupt_kinds``), or a skip that says
why.

The hooks are in the test build only (C compiled with ``-DKACHEDB_RADIX_TEST_HOOKS``:
``CFLAGS=-DKACHEDB_RADIX_TEST_HOOKS pip install -e '.[test]'``), never in the wheel
(accel/DESIGN.md, "Test hooks"). CI builds the test build and sets
``KACHEDB_RADIX_REQUIRE_TEST_HOOKS=1``: then a build without them fails the tests that
need them instead of skipping them.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

import kachedb_radix.accel._radix as radix

#: What a build needs in its CFLAGS for the hooks.
TEST_BUILD_FLAG = "-DKACHEDB_RADIX_TEST_HOOKS"


def has_hooks() -> bool:
    """Whether the C twin loaded here is a test build."""
    return hasattr(radix, "_corrupt_kinds")


def require_hooks() -> None:
    """Return when the hooks are built in; else skip (fail when CI requires them)."""
    if has_hooks():
        return
    why = (
        f"the C twin was built without its test hooks (rebuild it with "
        f"CFLAGS={TEST_BUILD_FLAG} pip install -e .)"
    )
    if os.environ.get("KACHEDB_RADIX_REQUIRE_TEST_HOOKS") == "1":
        pytest.fail(why)
    pytest.skip(why)


def corrupt_kinds() -> list[str]:
    """The kinds ``RadixTree._corrupt_check`` breaks, in the order the checks run."""
    require_hooks()
    module: Any = radix  # the stub leaves the test build's names out
    kinds = module._corrupt_kinds()
    assert isinstance(kinds, list)
    return kinds


def corrupt_check(target: Any, kind: object) -> str | None:
    """``target._corrupt_check(kind)`` (a C tree or allocator): break one invariant, run
    the check, undo the break; the check's message, or None if it let the break pass."""
    require_hooks()
    message = target._corrupt_check(kind)
    assert message is None or isinstance(message, str)
    return message
