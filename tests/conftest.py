"""Shared fixtures: every tree test runs once per implementation, chosen by parameter.

``make_tree`` builds a tree of the implementation under test; ``impl_name`` says which.
The accelerated twin joins the list when it is built; setting ``KACHEDB_RADIX_PURE=1``
drops it (for platforms without a compiler), and only that switch may.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

import reference

TreeFactory = Callable[..., Any]


def implementations() -> dict[str, TreeFactory]:
    """The implementations under test, by name."""
    found: dict[str, TreeFactory] = {"reference": reference.RadixTree}
    if os.environ.get("KACHEDB_RADIX_PURE") != "1":
        # No except clause on purpose: if the C extension did not build, this import
        # raises and the whole test run fails. Only KACHEDB_RADIX_PURE=1 may drop accel.
        import accel

        found["accel"] = accel.RadixTree
    return found


IMPLEMENTATIONS = implementations()


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def impl_name(request: pytest.FixtureRequest) -> str:
    """The name of the implementation under test."""
    name: str = request.param
    return name


@pytest.fixture
def make_tree(impl_name: str) -> TreeFactory:
    """A factory ``make_tree(num_blocks, block_size=16)`` for the implementation under test."""
    factory = IMPLEMENTATIONS[impl_name]

    def build(num_blocks: int, block_size: int = 16) -> Any:
        tree = factory(num_blocks, block_size)
        assert tree.implementation == impl_name  # no silent fallback to another implementation
        return tree

    return build


#: The quick suite, ``python -m pytest -m quick``: the modules that exercise the
#: installed package end to end -- both twins, bad input, snapshots, the golden vectors
#: shipped as package data, the command line, the version -- and need nothing from the
#: source tree but these tests. CI runs it against the built wheel in a fresh virtual
#: environment without a compiler (.ci/package).
QUICK_MODULES = frozenset(
    {
        "test_accel_basics.py",
        "test_allocator.py",
        "test_bad_input.py",
        "test_cli.py",
        "test_clone.py",
        "test_snapshots.py",
        "test_spec_vectors.py",
        "test_tokens.py",
        "test_tree.py",
        "test_version.py",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of ``QUICK_MODULES`` as ``quick``."""
    for item in items:
        if item.path.name in QUICK_MODULES:
            item.add_marker(pytest.mark.quick)
