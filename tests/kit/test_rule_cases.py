"""Targeted tests for spec rules that no other test file exercises directly.

Each runs against every implementation (the ``make_tree`` fixture).
"""

from __future__ import annotations

from typing import Any

import pytest

from kachedb_radix.reference.errors import (
    ERROR_KINDS,
    ForeignLeaseError,
    InvalidArgumentError,
    LeaseReleasedError,
    OutOfBlocksError,
    TokenRangeError,
    TokenTypeError,
)

TreeFactory = Any


def test_error_kinds_are_the_documented_names() -> None:
    """R-ERR-3: the kind names are the contract, one class per kind."""
    assert set(ERROR_KINDS) == {
        "token_type",
        "token_range",
        "token_layout",
        "invalid_argument",
        "out_of_blocks",
        "double_free",
        "foreign_block",
        "lease_released",
        "foreign_lease",
        "reader_left",
        "invariant",
    }
    for kind, cls in ERROR_KINDS.items():
        assert cls.kind == kind


@pytest.mark.parametrize(
    ("tokens", "namespace", "kind"),
    [
        ([1, 2, -1, "x"], None, "token_range"),  # R-TOK-5: the first bad element decides
        ([1, "x", -1], None, "token_type"),
        ([1, 2, -1], 5, "token_range"),  # tokens are checked before the namespace
        ([1, 2, 3], 5, "invalid_argument"),
    ],
)
def test_error_kind_and_order(
    make_tree: TreeFactory, tokens: list[Any], namespace: Any, kind: str
) -> None:
    """R-ERR-3, R-TOK-5: every implementation names the same kind for the same input."""
    tree = make_tree(4, 2)
    for call in (tree.match, tree.insert):
        with pytest.raises(ERROR_KINDS[kind]) as raised:
            call(tokens, namespace)
        assert raised.value.kind == kind


def test_stats_report_live_leases_and_clock(make_tree: TreeFactory) -> None:
    """R-INV-2: leases counts live leases only; clock counts successful calls."""
    tree = make_tree(8, 2)
    first = tree.insert([1, 2, 3, 4], pin=True).lease
    second = tree.match([1, 2], pin=True).lease
    stats = tree.stats()
    assert (stats.leases, stats.clock, stats.pinned, stats.cached) == (2, 2, 2, 2)
    tree.release(first)
    stats = tree.stats()
    assert (stats.leases, stats.clock, stats.pinned, stats.evictable) == (1, 3, 1, 1)
    tree.release(second)
    stats = tree.stats()
    assert (stats.num_blocks, stats.free, stats.leases, stats.clock) == (8, 6, 0, 4)


def test_failed_calls_leave_stats_and_dump_alone(make_tree: TreeFactory) -> None:
    """R-ERR-2, R-INV-2: a failed call changes neither the dump nor the stats."""
    tree = make_tree(3, 1)
    lease = tree.insert([1, 2], pin=True).lease
    before = (tree.dump(), tree.stats())
    with pytest.raises(OutOfBlocksError):
        tree.insert([7, 8])  # needs 2, only 1 free and nothing evictable off the path
    with pytest.raises(TokenTypeError):
        tree.match([1, True])
    with pytest.raises(InvalidArgumentError):
        tree.evict(-1)
    tree.release(lease)
    with pytest.raises(LeaseReleasedError):
        tree.release(lease)
    after_release = (tree.dump(), tree.stats())
    with pytest.raises(LeaseReleasedError):
        tree.release(lease)
    assert (tree.dump(), tree.stats()) == after_release
    assert before[1].clock + 1 == after_release[1].clock


def test_match_keeps_shape_inside_an_edge(make_tree: TreeFactory) -> None:
    """R-MATCH-2: a pinned match ending inside an edge pins part of it without a split."""
    tree = make_tree(8, 2)
    tree.insert([1, 1, 2, 2, 3, 3])
    shape = _shape(tree.dump())
    hit = tree.match([1, 1, 2, 2, 9, 9], pin=True)
    assert (hit.length, hit.blocks) == (4, (0, 1))
    assert _shape(tree.dump()) == shape
    (edge,) = tree.dump()["namespaces"][0]["children"]
    assert edge["pins"] == [1, 1, 0]  # R-PIN-2: exact
    tree.release(hit.lease)


def test_empty_name_is_not_the_default_namespace(make_tree: TreeFactory) -> None:
    """R-NS-1, R-NS-2, R-NS-3: "" has its own root, listed after None."""
    tree = make_tree(4, 1)
    tree.insert([1], "")
    assert tree.match([1]).length == 0
    assert tree.match([1], "").length == 1
    tree.insert([1])
    assert tree.namespaces() == [None, ""]
    assert tree.evict(4) == (0, 1)
    assert tree.namespaces() == []


def test_foreign_lease_from_another_tree(make_tree: TreeFactory) -> None:
    """R-PIN-5: a lease from another tree is rejected and nothing changes."""
    tree, other = make_tree(4, 1), make_tree(4, 1)
    foreign = other.insert([1], pin=True).lease
    before = tree.dump()
    with pytest.raises(ForeignLeaseError):
        tree.release(foreign)
    assert tree.dump() == before


def test_evict_returns_order_and_leaves_the_clock(make_tree: TreeFactory) -> None:
    """R-EVICT-4, R-EVICT-1, R-LRU-3: tail first, in order, without a clock tick."""
    tree = make_tree(6, 1)
    tree.insert([1, 2, 3])
    tree.insert([4, 5])
    clock = tree.clock
    assert tree.evict(4) == (2, 1, 0, 4)
    assert tree.clock == clock
    assert tree.evict(0) == ()


def test_out_of_range_token_kind(make_tree: TreeFactory) -> None:
    """R-TOK-3, R-ERR-3: 2**32 is out of range, 2**32 - 1 is a token."""
    tree = make_tree(2, 1)
    assert tree.insert([2**32 - 1]).length == 1
    with pytest.raises(TokenRangeError):
        tree.insert([2**32])


def _shape(dump: dict[str, Any]) -> Any:
    def edge(node: dict[str, Any]) -> Any:
        return (tuple(node["tokens"]), tuple(node["blocks"]), tuple(map(edge, node["children"])))

    return [
        (space["namespace"], tuple(map(edge, space["children"]))) for space in dump["namespaces"]
    ]
