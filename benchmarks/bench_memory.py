"""Memory: bytes per cached block at 10^6 blocks (quick sweep: 10^5), per implementation.

Not a timing: :func:`benchmarks.shapes.measure_memory` builds the tree and reports
the bytes it keeps, naming the method (the tree's own ``memory_bytes()`` when it has
one, tracemalloc for the reference). The figures are printed in the summary at the
end and attached to the test report as properties.
"""

from __future__ import annotations

from collections.abc import Callable

from benchmarks import shapes
from benchmarks.conftest import IMPLEMENTATIONS, Records


def test_memory_per_block(
    tree_impl: str,
    memory_size: int,
    bench_records: Records,
    record_property: Callable[[str, object], None],
) -> None:
    figure = shapes.measure_memory(IMPLEMENTATIONS.factories[tree_impl], tree_impl, memory_size)
    assert figure.cached_blocks >= memory_size
    assert figure.bytes_per_block > 0
    row = {
        "impl": figure.impl,
        "cached_blocks": figure.cached_blocks,
        "bytes_per_block": figure.bytes_per_block,
        "method": figure.method,
        "tracemalloc_bytes": figure.tracemalloc_bytes,
        "rss_bytes": figure.rss_bytes,
        "reported_bytes": figure.reported_bytes,
    }
    for name, value in row.items():
        record_property(name, value)
    bench_records.setdefault("memory", []).append(row)
