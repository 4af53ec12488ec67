"""Shared fixtures: every tree test runs once per implementation, chosen by parameter.

``make_tree`` builds a tree of the implementation under test; ``impl_name`` says which.
The accelerated twin joins the list when it is built; setting ``KACHEDB_RADIX_PURE=1``
drops it (for platforms without a compiler), and only that switch may.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kachedb_radix.spec.twins import twin_classes

TreeFactory = Callable[..., Any]


def implementations(cls: str = "RadixTree") -> dict[str, TreeFactory]:
    """Class ``cls`` of each implementation under test, by name: the one twin picker's
    suite (:func:`kachedb_radix.spec.twins.twin_classes`). No fallback on purpose: if
    the C extension did not build, picking accel raises and the whole test run fails;
    only KACHEDB_RADIX_PURE=1 may drop it."""
    return twin_classes(cls)


IMPLEMENTATIONS = implementations()
#: The router indexes under test (R-ROUTE-*), by the same names.
ROUTER_IMPLEMENTATIONS = implementations("RouterIndex")
#: The tiered trees under test (R-TIER-*): the tier layer over each tree twin.
TIER_IMPLEMENTATIONS = implementations("TieredTree")


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def impl_name(request: pytest.FixtureRequest) -> str:
    """The name of the implementation under test."""
    name: str = request.param
    return name


@pytest.fixture
def make_tree(impl_name: str) -> TreeFactory:
    """A factory ``make_tree(num_blocks, block_size=16, **options)`` for the
    implementation under test (options: ``policy``, ``policy_options``)."""
    factory = IMPLEMENTATIONS[impl_name]

    def build(num_blocks: int, block_size: int = 16, **options: Any) -> Any:
        tree = factory(num_blocks, block_size, **options)
        assert tree.implementation == impl_name  # no silent fallback to another implementation
        return tree

    return build


@pytest.fixture
def make_index(impl_name: str) -> TreeFactory:
    """A factory ``make_index(hasher=None, block_size=16)`` of router indexes of the
    implementation under test."""
    factory = ROUTER_IMPLEMENTATIONS[impl_name]

    def build(*args: Any, **options: Any) -> Any:
        index = factory(*args, **options)
        assert index.implementation == impl_name  # no silent fallback to another twin
        return index

    return build


@pytest.fixture
def make_tiers(impl_name: str) -> TreeFactory:
    """A factory ``make_tiers(device_blocks, host_blocks=0, disk_blocks=0, block_size=16,
    **options)`` of tiered trees over the implementation under test."""
    factory = TIER_IMPLEMENTATIONS[impl_name]

    def build(*args: Any, **options: Any) -> Any:
        tiers = factory(*args, **options)
        assert tiers.implementation == impl_name  # no silent fallback to another twin
        assert tiers.tree("device").implementation == impl_name
        return tiers

    return build


@pytest.fixture
def without_accel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``from kachedb_radix import accel`` raise ImportError for one test, as on a
    machine where the C extension did not build."""
    import sys

    import kachedb_radix

    monkeypatch.setitem(sys.modules, "kachedb_radix.accel", None)
    # The first import set the attribute on the root; a from-import would find it there.
    monkeypatch.delattr(kachedb_radix, "accel", raising=False)
