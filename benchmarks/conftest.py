"""Parametrisation and reporting for the benchmark suite (``bench_match.py`` and friends).

Run it with ``python -m pytest benchmarks`` (``benchmarks/pytest.ini`` collects
``bench_*.py``); add ``--bench-quick`` (or set ``KACHEDB_BENCH_QUICK=1``) for the short
sweep. The unit-test run (``python -m pytest`` at the top) never collects this folder.

Every case runs for every tree implementation: the reference always, accel when it is
importable. accel is never dropped silently: when it cannot run, its cases are still
generated and reported as skipped with the reason (``-rs``), the header names what ran,
and only ``KACHEDB_RADIX_PURE=1`` is a deliberate opt-out. Match cases also run the
flat hash-map baseline (``flat-hash``).

This conftest only acts on tests that ask for its own fixture names (``tree_impl``,
``match_impl``, ``match_case``, ``insert_case``, ``evict_size``, ``memory_size``,
``bench_records``), so other bench files in this folder are unaffected.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from benchmarks import shapes
from benchmarks.flat_index import FlatIndex
from kachedb_radix.spec.gate.timing import format_ns

IMPLEMENTATIONS = shapes.find_implementations()
TREE_NAMES = ("reference", "accel")
QUICK_SWITCH = "KACHEDB_BENCH_QUICK"

#: Derived figures the tests record for the closing summary: kind -> rows.
Records = dict[str, list[dict[str, Any]]]
_RECORDS = pytest.StashKey[Records]()

#: Memory is measured at this many cached blocks (quick: 10^5).
MEMORY_BLOCKS = 1_000_000
QUICK_MEMORY_BLOCKS = 100_000
#: Prompt lengths of the insert cases.
INSERT_LENGTHS = (1024, 16_384)
QUICK_INSERT_LENGTHS = (1024,)
INSERT_KINDS = ("fresh", "shared", "split", "cycle")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--bench-quick",
        action="store_true",
        default=False,
        help=f"kachedb-radix: the short benchmark sweep (same as {QUICK_SWITCH}=1)",
    )


def is_quick(config: pytest.Config) -> bool:
    """Whether the short sweep was asked for."""
    return bool(config.getoption("--bench-quick", default=False)) or (
        os.environ.get(QUICK_SWITCH) == "1"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RECORDS] = {}


def pytest_report_header(config: pytest.Config) -> list[str]:
    mode = "quick" if is_quick(config) else "full"
    return [f"kachedb-radix benchmarks ({mode} sweep): {IMPLEMENTATIONS.describe()}"]


def _tree_params() -> list[Any]:
    params = []
    for name in TREE_NAMES:
        if name in IMPLEMENTATIONS.factories:
            params.append(pytest.param(name, id=name))
        else:
            why = IMPLEMENTATIONS.missing.get(name, "unavailable")
            params.append(
                pytest.param(name, id=name, marks=pytest.mark.skip(reason=f"{name} not run: {why}"))
            )
    return params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    quick = is_quick(metafunc.config)
    names = metafunc.fixturenames
    if "tree_impl" in names:
        metafunc.parametrize("tree_impl", _tree_params())
    if "match_impl" in names:
        flat = pytest.param(FlatIndex.implementation, id="flat-hash")
        metafunc.parametrize("match_impl", [*_tree_params(), flat])
    if "match_case" in names:
        match_lengths = shapes.QUICK_MATCH_LENGTHS if quick else shapes.MATCH_LENGTHS
        cases = [
            pytest.param((shape, length, kind), id=f"{shape}-{length}-{kind}")
            for shape in shapes.SHAPES
            for length in shapes.shape_lengths(shape, match_lengths)
            for kind in shapes.INPUT_KINDS
        ]
        metafunc.parametrize("match_case", cases)
    if "insert_case" in names:
        lengths = QUICK_INSERT_LENGTHS if quick else INSERT_LENGTHS
        cases = [
            pytest.param((kind, length), id=f"{kind}-{length}")
            for kind in INSERT_KINDS
            for length in lengths
        ]
        metafunc.parametrize("insert_case", cases)
    if "evict_size" in names:
        sizes = shapes.QUICK_EVICT_SIZES if quick else shapes.EVICT_SIZES
        metafunc.parametrize("evict_size", list(sizes), ids=[f"{size}" for size in sizes])
    if "memory_size" in names:
        size = QUICK_MEMORY_BLOCKS if quick else MEMORY_BLOCKS
        metafunc.parametrize("memory_size", [size], ids=[f"{size}"])


@pytest.fixture
def bench_records(request: pytest.FixtureRequest) -> Records:
    """Where tests put derived figures (per-block eviction, memory) for the summary."""
    return request.config.stash[_RECORDS]


@pytest.fixture(scope="session")
def match_max_tokens(request: pytest.FixtureRequest) -> int:
    """The longest prompt of this sweep: each shape is built once to serve it."""
    quick = is_quick(request.config)
    return max(shapes.QUICK_MATCH_LENGTHS if quick else shapes.MATCH_LENGTHS)


_TREES: dict[tuple[str, str, int], Any] = {}


def match_tree(impl: str, shape: str, max_tokens: int) -> tuple[Any, shapes.Shape]:
    """The shape's tree (or flat index) for ``impl``, built once per session."""
    limit = min(max_tokens, shapes.BRANCHY_MAX_TOKENS) if shape == "branchy" else max_tokens
    built = shapes.get_shape(shape, limit)
    key = (impl, shape, limit)
    if key not in _TREES:
        if impl == FlatIndex.implementation:
            _TREES[key] = shapes.build_flat(built)
        else:
            _TREES[key] = shapes.build_tree(IMPLEMENTATIONS.factories[impl], impl, built)
    return _TREES[key], built


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    records = config.stash.get(_RECORDS, {})
    if not records:
        return
    write = terminalreporter.write_line
    terminalreporter.section("kachedb-radix derived figures")
    write(IMPLEMENTATIONS.describe())
    evictions = records.get("evict", [])
    if evictions:
        write(
            f"eviction cost per freed block: the first evict({shapes.EVICT_BATCH}) after a fill "
            f"(median over fills) / {shapes.EVICT_BATCH}, block size 1:"
        )
        impls = sorted({row["impl"] for row in evictions})
        sizes = sorted({row["size"] for row in evictions})
        cost = {(row["impl"], row["size"]): row["per_block_ns"] for row in evictions}
        write("  " + "cached blocks".rjust(14) + "".join(name.rjust(14) for name in impls))
        for size in sizes:
            cells = [format_ns(cost[(n, size)]) if (n, size) in cost else "-" for n in impls]
            write("  " + f"{size:,}".rjust(14) + "".join(cell.rjust(14) for cell in cells))
        for name in impls:
            known = sorted(size for (n, size) in cost if n == name)
            if len(known) > 1:
                growth = cost[(name, known[-1])] / cost[(name, known[0])]
                write(f"  {name}: {known[-1]:,} / {known[0]:,} blocks = {growth:.2f}x")
    for row in records.get("memory", []):
        write(
            f"memory, {row['impl']}: {row['bytes_per_block']:.0f} bytes per cached block at "
            f"{row['cached_blocks']:,} blocks of {shapes.BLOCK_SIZE} tokens "
            f"[{row['method']}; tracemalloc delta {row['tracemalloc_bytes'] / 1e6:.1f} MB, "
            f"RSS delta {row['rss_bytes'] / 1e6:.1f} MB"
            + (
                f", memory_bytes() {row['reported_bytes'] / 1e6:.1f} MB]"
                if row["reported_bytes"] is not None
                else "]"
            )
        )
