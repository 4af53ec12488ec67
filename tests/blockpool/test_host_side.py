"""The CPU-only pieces of the accel pool's calls: the staging ring, the plan cache, the ids,
and the GPU check's summary (all without CuPy)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import bench_blockpool
from kachedb_radix.accel.blockpool import plans
from kachedb_radix.accel.blockpool.kernels import WORD, pool_side
from kachedb_radix.accel.blockpool.plans import COPY, GATHER, SCATTER, PlanCache, host_ids
from kachedb_radix.accel.blockpool.staging import Span, StagingRing
from kachedb_radix.reference.blockpool import DuplicateDestinationError, Layout, PoolSpec


class FakeEvent:
    """An event the test finishes by hand; counts how often the ring waited on it."""

    def __init__(self) -> None:
        self.done = False
        self.waited = 0

    def synchronize(self) -> None:
        self.waited += 1
        self.done = True


def _ring(capacity: int = 10) -> StagingRing:
    return StagingRing(np.zeros(capacity, dtype=np.int32), device_address=1000)


def test_ring_hands_out_spans_in_order_and_writes_lists() -> None:
    ring = _ring()
    span = ring.take(4)
    assert span == Span(0, 4) and span.end == 4
    addresses = ring.write(span, [np.array([7, 8]), np.array([9, 10])])
    assert addresses == [1000, 1008]
    assert ring.host[:4].tolist() == [7, 8, 9, 10]
    assert ring.host_address(span, 5000) == 5000
    with pytest.raises(ValueError, match="3 ids written into a span of 4"):
        ring.write(ring.take(4), [np.array([1, 2, 3])])
    with pytest.raises(ValueError, match="does not fit"):
        ring.take(11)


def test_ring_waits_only_for_unfinished_spans_it_overlaps() -> None:
    ring = _ring(10)
    first, second = ring.take(4), ring.take(4)
    e1, e2 = FakeEvent(), FakeEvent()
    ring.retire(first, e1)
    ring.retire(second, e2)
    third = ring.take(4)  # does not fit after 8: wraps to 0, over `first`
    assert third == Span(0, 4)
    assert (e1.waited, e2.waited, ring.waits) == (1, 0, 1)
    assert ring.in_flight() == [second]
    e2.done = True  # finished: dropped without waiting
    ring.retire(third, FakeEvent())
    fourth = ring.take(2)
    assert fourth == Span(4, 2) and e2.waited == 0
    assert ring.in_flight() == [third]


def test_ring_waits_for_spans_of_earlier_laps_behind_later_ones() -> None:
    """A span left in flight two laps back, behind newer ones, is still waited for."""
    ring = _ring(10)
    old = ring.take(6)
    e_old = FakeEvent()
    ring.retire(old, e_old)
    wrap = ring.take(6)  # wraps over `old`: waits
    assert e_old.waited == 1
    e_wrap = FakeEvent()
    ring.retire(wrap, e_wrap)
    late = ring.take(3)  # 6..9: free
    e_late = FakeEvent()
    ring.retire(late, e_late)
    again = ring.take(5)  # wraps to 0..5: overlaps `wrap` only
    assert again == Span(0, 5)
    assert (e_wrap.waited, e_late.waited) == (1, 0)


def _cache(layout: Layout = Layout.BLOCK_MAJOR) -> tuple[PlanCache, list[Any]]:
    spec = PoolSpec(num_blocks=8, block_size=2, num_layers=2, num_kv_heads=1, head_dim=8,
                    layout=layout)  # fmt: skip
    pointers = [4096] if layout is Layout.BLOCK_MAJOR else [4096, 65536]
    seen: list[Any] = []

    def table(side: Any) -> int:
        seen.append(side.table)
        return 0 if side.table is None else 777

    return PlanCache(spec, pool_side(spec, pointers), table), seen


def test_plan_cache_keys_on_operation_size_and_alignment() -> None:
    cache, _ = _cache()
    a = cache.get(GATHER, 3, 256)
    assert cache.get(GATHER, 3, 512) is a  # same alignment: the same plan
    assert cache.misses == 1 and len(cache) == 1
    odd = cache.get(GATHER, 3, 257)
    assert odd is not a and odd.plan.vector_width == 1 and a.plan.vector_width == 16
    assert cache.get(SCATTER, 3, 256).plan.dst_indexed
    copy = cache.get(COPY, 5)
    assert copy.plan.src_indexed and copy.plan.dst_indexed
    assert int(copy.words[WORD["n_pairs"]]) == 5 and copy.kernel.startswith("kvpool_copy_inline")
    assert cache.misses == 4
    with pytest.raises(ValueError, match="unknown operation"):
        cache.get("spin", 1)


def test_plan_cache_resolves_layer_tables_and_starts_over_when_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache, seen = _cache(Layout.LAYER_MAJOR)
    prepared = cache.get(GATHER, 2, 256)
    words = prepared.words
    assert int(words[WORD["src_table"]]) == 777 and int(words[WORD["dst_table"]]) == 0
    assert seen[0] is not None and seen[1] is None
    monkeypatch.setattr(plans, "MAX_PLANS", 2)
    cache.get(GATHER, 3, 256)
    cache.get(GATHER, 4, 256)  # the third plan: the cache starts over
    assert len(cache) == 1


def test_host_ids_refuse_repeats_only_when_asked() -> None:
    assert host_ids([1, 1], 4, "ids").tolist() == [1, 1]
    with pytest.raises(DuplicateDestinationError, match="block 1 twice"):
        host_ids([1, 1], 4, "ids", unique=True)
    big = np.arange(100, dtype=np.int64)
    big[99] = 5
    with pytest.raises(DuplicateDestinationError, match=r"positions 5 and 99"):
        host_ids(big, 200, "ids", unique=True)
    assert len(host_ids(np.arange(100), 200, "ids", unique=True)) == 100


@pytest.mark.parametrize("n", [5, 200])
def test_repeats_are_reported_where_a_scan_meets_them(n: int) -> None:
    """check_unique (set for small batches, NumPy for large) names the repeat whose second
    occurrence comes first, with both positions."""
    ids = np.arange(n, dtype=np.int64) * 3
    ids[n - 1] = ids[2]  # a later repeat of position 2
    ids[n // 2 + 1] = ids[n // 2]  # the earlier one: positions n//2 and n//2 + 1
    with pytest.raises(DuplicateDestinationError) as info:
        host_ids(ids, 10 * n, "dst_ids", unique=True)
    err = info.value
    assert (err.first_index, err.second_index, err.value) == (n // 2, n // 2 + 1, 3 * (n // 2))


def test_validation_of_arrays_and_large_batches() -> None:
    from kachedb_radix.reference.blockpool import BlockIdRangeError, BlockIdTypeError
    from kachedb_radix.reference.blockpool.validation import CopyPlan, overlap, split_pairs

    with pytest.raises(BlockIdRangeError, match=r"ids\[1\] = 9"):
        host_ids(np.asarray([1, 9, 2], dtype=np.uint16), 8, "ids")
    assert host_ids(np.asarray([7], dtype=np.uint8), 8, "ids").dtype == np.int64
    assert host_ids(iter([np.int32(3), 4]), 8, "ids").tolist() == [3, 4]
    big = np.arange(100, dtype=np.int64)
    assert not overlap(big, big + 100) and overlap(big, np.asarray([99] * 100))
    assert CopyPlan(big[:2], big[1:3]).overlapping
    with pytest.raises(BlockIdTypeError, match="sequence of"):
        split_pairs(7)
    with pytest.raises(BlockIdTypeError, match=r"pairs\[0\]"):
        split_pairs([5])


def _bench_json(path: Path, rows: list[dict[str, Any]]) -> Path:
    doc = {"benchmarks": [{"extra_info": r, "stats": {"mean": 1e-5}} for r in rows]}
    path.write_text(json.dumps(doc))
    return path


def test_gpu_summary_tables_and_targets(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"kind": "device", "layout": "block_major", "op": "gather", "blocks": 64,
         "bytes": 2**27, "op_gbps": 1800.0, "contig_gbps": 2000.0, "fraction": 0.9,
         "device": "H200", "launch": "driver", "launch_note": "by the driver"},
        {"kind": "device", "layout": "block_major", "op": "copy", "blocks": 256,
         "bytes": 2**29, "op_gbps": 1000.0, "contig_gbps": 2000.0, "fraction": 0.5},
        {"kind": "host-cost", "layout": "block_major", "impl": "accel", "op": "gather",
         "ids": "list", "blocks": 1, "host_us": 9.5},
        {"kind": "host-cost", "layout": "block_major", "impl": "accel", "op": "gather",
         "ids": "list", "blocks": 16, "host_us": 14.0},
        {"kind": "host-cost", "layout": "block_major", "impl": "torch", "op": "gather",
         "ids": "device", "blocks": 1, "host_us": 11.0},
        {"kind": "vs-torch", "layout": "block_major", "op": "gather", "blocks": 256,
         "device_ours_gbps": 1900.0, "device_torch_gbps": 1950.0, "device_ratio": 1.02,
         "back-to-back_ours_gbps": 1900.0, "back-to-back_torch_gbps": 1950.0,
         "back-to-back_ratio": 0.97},
        {"kind": "vs-torch", "layout": "layer_major", "op": "gather", "blocks": 16,
         "device_ours_gbps": 1400.0, "device_torch_gbps": 600.0, "device_ratio": 2.3,
         "back-to-back_ours_gbps": 1200.0, "back-to-back_torch_gbps": 700.0,
         "back-to-back_ratio": 1.7},
        {"kind": "grid-order", "layout": "block_major", "op": "gather", "blocks": 1024,
         "device_tile_gbps": 2000.0, "device_chunk_gbps": 1900.0,
         "back-to-back_tile_gbps": 1980.0, "back-to-back_chunk_gbps": 1980.0},
    ]  # fmt: skip
    out = tmp_path / "summary.md"
    misses = bench_blockpool.summarize(_bench_json(tmp_path / "b.json", rows), out, [], ["a note"])
    text = out.read_text()
    assert "Device: H200" in text and "- a note" in text
    assert "Launch path: ?; by the driver." in text
    assert "## Host cost per call" in text and "| 9.5 | - | - | - | 14.0 | MISSED |" in text
    assert "| block_major | gather | 256 | 1900 | 1950 | 1.02 | 1900 | 1950 | 0.97 | met |" in text
    assert "| block_major | 1024 | 2000 | 1900 | 1.053 | 1980 | 1980 | 1.000 |" in text
    # the copy at half the contiguous speed, the host cost, the layer-major ratio
    assert misses == 3


def test_gpu_summary_without_results_says_unmeasured(tmp_path: Path) -> None:
    out = tmp_path / "summary.md"
    junit = tmp_path / "missing.xml"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert bench_blockpool.summarize(bad, out, [junit], []) == 0
    text = out.read_text()
    assert "GPU figures unmeasured" in text and "not valid JSON" in text
    assert "`missing.xml`: missing" in text


@settings(max_examples=200, deadline=None)
@given(
    ids=st.one_of(
        st.lists(st.integers(-3, 40), max_size=20),
        st.lists(st.integers(0, 40), max_size=20).map(tuple),
        st.lists(st.integers(0, 2**40), max_size=20).map(lambda v: np.asarray(v, np.uint64)),
        st.lists(st.integers(-5, 40), max_size=20).map(lambda v: np.asarray(v, np.int32)),
        st.lists(st.one_of(st.integers(0, 9), st.booleans(), st.floats(0, 9)), max_size=6),
    ),
)
def test_small_ids_takes_only_what_normalize_ids_accepts(ids: Any) -> None:
    """The fast path's check: when it takes ids, the full check accepts them with the same
    values; it takes every valid list, tuple or integer array of 1..16 exact ints."""
    from kachedb_radix.reference.blockpool import KVPoolError
    from kachedb_radix.reference.blockpool.validation import normalize_ids, small_ids

    taken = small_ids(ids, 32, 16)
    try:
        full: list[int] | None = normalize_ids(ids, 32).tolist()
    except KVPoolError:
        full = None
    if taken is not None:
        assert full is not None and list(taken) == full
    exact = isinstance(ids, np.ndarray) or all(type(v) is int for v in ids)
    if full is not None and exact and 0 < len(full) <= 16:
        assert taken is not None


def test_small_ids_declines_what_is_not_a_small_flat_batch() -> None:
    from kachedb_radix.reference.blockpool.validation import small_disjoint_copy, small_ids

    assert small_ids(np.zeros((2, 2), dtype=np.int64), 8, 16) is None
    assert small_ids(np.zeros(2, dtype=np.float32), 8, 16) is None
    assert small_ids(iter([1, 2]), 8, 16) is None  # a general iterable: the full check
    assert small_ids(list(range(17)), 32, 16) is None and small_ids([], 8, 16) is None
    assert small_ids([1, np.int64(2)], 8, 16) is None
    assert small_ids(np.arange(17), 32, 16) is None
    assert small_ids(np.zeros(0, dtype=np.int64), 8, 16) is None
    assert small_ids(np.array([1, 8]), 8, 16) is None  # out of range
    ids = [3, 1]
    assert small_ids(ids, 8, 16) is ids  # a list comes back as itself
    assert small_disjoint_copy([1, 2], [3, 4], 8, 16) == ([1, 2], [3, 4])
    assert small_disjoint_copy([1, 2], [2, 3], 8, 16) is None  # overlapping sets
    assert small_disjoint_copy([1, 2], [3, 3], 8, 16) is None  # repeated destination
    assert small_disjoint_copy([1, 2], [3], 8, 16) is None
    assert small_disjoint_copy([1, 9], [3, 4], 8, 16) is None
    assert small_disjoint_copy([1, 2], [3, 9], 8, 16) is None
