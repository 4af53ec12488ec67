"""The flat hash-map baseline (benchmarks/flat_index.py) finds the same prefixes as the
reference tree: same match lengths, one block per distinct cached prefix block."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.flat_index import FlatIndex
from kachedb_radix import reference

# Small alphabets and short sequences make shared prefixes and divergences common.
tokens = st.lists(st.integers(0, 2), max_size=20)


def _pair(sequences: list[list[int]], block_size: int) -> tuple[FlatIndex, reference.RadixTree]:
    pool = sum(len(s) // block_size for s in sequences) + 1
    tree = reference.RadixTree(pool, block_size)
    flat = FlatIndex(block_size)
    for sequence in sequences:
        tree.insert(sequence)
        flat.insert(sequence)
    return flat, tree


@settings(max_examples=200, deadline=None)
@given(
    sequences=st.lists(tokens, max_size=10),
    queries=st.lists(tokens, max_size=10),
    block_size=st.sampled_from([1, 2, 4]),
)
def test_match_lengths_equal_the_reference(
    sequences: list[list[int]], queries: list[list[int]], block_size: int
) -> None:
    flat, tree = _pair(sequences, block_size)
    assert len(flat) == tree.stats().cached  # one entry per cached block
    for query in [*queries, *sequences]:
        found = flat.match(query)
        assert found.length == tree.match(query).length
        assert len(found.blocks) * block_size == found.length


@settings(max_examples=100, deadline=None)
@given(sequences=st.lists(tokens, min_size=1, max_size=8))
def test_blocks_are_stable_and_shared_by_common_prefixes(sequences: list[list[int]]) -> None:
    flat, _ = _pair(sequences, 2)
    for sequence in sequences:
        path = flat.match(sequence).blocks
        assert flat.insert(sequence).blocks == path  # inserting again reuses every block
        for other in sequences:
            common = 0
            while (
                common + 2 <= min(len(sequence), len(other))
                and sequence[common : common + 2] == other[common : common + 2]
            ):
                common += 2
            shared = common // 2
            assert flat.match(other).blocks[:shared] == path[:shared]


def test_divergence_inside_a_cached_run_stops_the_match() -> None:
    flat, tree = _pair([[1, 1, 2, 2, 3, 3, 4, 4]], 2)
    query = [1, 1, 2, 2, 9, 9, 4, 4]
    assert flat.match(query).length == tree.match(query).length == 4
    assert flat.match([1, 1, 2]).length == 2  # a trailing partial block never matches


@pytest.mark.parametrize("dtype", [np.uint32, np.int64, np.int32])
def test_arrays_match_like_lists(dtype: type) -> None:
    flat, _ = _pair([[5, 6, 7, 8, 9, 10]], 2)
    assert flat.match(np.asarray([5, 6, 7, 8, 0, 0], dtype=dtype)).length == 4


def test_namespaces_never_share_blocks() -> None:
    flat = FlatIndex(2)
    flat.insert([1, 2, 3, 4], "tenant-a")
    assert flat.match([1, 2, 3, 4]).length == 0
    assert flat.match([1, 2, 3, 4], "tenant-b").length == 0
    assert flat.match([1, 2, 3, 4], "tenant-a").length == 4


def test_bad_block_size_is_refused() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError):
            FlatIndex(bad)  # type: ignore[arg-type]
