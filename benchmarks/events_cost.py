"""What KV events cost when on: the same build, events off and on, paired.

::

    python -m benchmarks.events_cost [--rounds 15]

For each tree twin, three trees of one build take turns round by round: events off
(the default), events on with vLLM's default hashes (``sha256_cbor``, SHA-256 over
canonical CBOR) and events on with Dynamo's ``xxh3_64``. Each round times, per tree:

* ``insert/evict``: ``insert`` of a new 1,024-token prompt (64 blocks of 16) into a full
  pool (64 blocks evicted first) and ``take_events()`` -- every new block hashed, one
  store and one removal recorded and handed over;
* ``match/1024``: ``match`` of a cached 1,024-token prompt (emits nothing: R-EVENT-1).

The figure per workload is the median over rounds of the paired ratio ON / OFF (so
drift of the shared machine moves both sides of a pair alike) beside the off median.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from kachedb_radix.reference.events import BlockHasher
from kachedb_radix.spec.twins import twin_classes

BLOCK = 16
BLOCKS = 64
POOL = 512
SETTINGS: dict[str, Any] = {"off": None, "sha256_cbor": True, "xxh3_64": BlockHasher("xxh3_64")}


def _twins() -> dict[str, Any]:
    # The one picker (spec/twins.py): accel is dropped only by KACHEDB_RADIX_PURE=1.
    return twin_classes("RadixTree")


def _timed(call: Callable[[], object], repeat: int) -> float:
    """Median seconds of ``call`` over ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _round(factory: Any, events: Any, serial: int) -> dict[str, float]:
    """One round's figures for one tree (a fresh tree each round)."""
    tree = factory(POOL, BLOCK, events=events)
    rng = np.random.default_rng(serial)
    for _ in range(POOL // BLOCKS):  # fill the pool with eight prompts
        tree.insert(rng.integers(0, 2**31, BLOCKS * BLOCK, dtype=np.uint32))
    cached = rng.integers(0, 2**31, BLOCKS * BLOCK, dtype=np.uint32)
    tree.insert(cached)
    if events is not None:
        tree.take_events()
    prompts = iter([rng.integers(0, 2**31, BLOCKS * BLOCK, dtype=np.uint32) for _ in range(9)])

    def insert() -> None:
        tree.insert(next(prompts))
        if events is not None:
            tree.take_events()

    return {
        "insert/evict": _timed(insert, 9),
        "match/1024": _timed(lambda: tree.match(cached), 51),
    }


def measure(rounds: int) -> dict[str, dict[str, dict[str, float]]]:
    """Per twin and workload: the off median (ns) and each setting's ON / OFF ratio."""
    results: dict[str, dict[str, dict[str, float]]] = {}
    for twin, factory in _twins().items():
        ratios: dict[str, dict[str, list[float]]] = {}
        off: dict[str, list[float]] = {}
        for serial in range(rounds):
            figures = {name: _round(factory, events, serial) for name, events in SETTINGS.items()}
            for workload, base in figures["off"].items():
                off.setdefault(workload, []).append(base)
                for name in ("sha256_cbor", "xxh3_64"):
                    ratio = figures[name][workload] / base
                    ratios.setdefault(workload, {}).setdefault(name, []).append(ratio)
        results[twin] = {
            workload: {
                "off_ns": statistics.median(off[workload]) * 1e9,
                **{name: statistics.median(values) for name, values in by.items()},
            }
            for workload, by in ratios.items()
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results = measure(args.rounds)
    print(f"{args.rounds} rounds, {time.perf_counter() - started:.0f} s")
    print("| twin | workload | events off (median) | on, sha256_cbor / off | on, xxh3_64 / off |")
    print("|---|---|---:|---:|---:|")
    for twin, workloads in results.items():
        for workload, row in workloads.items():
            print(
                f"| {twin} | {workload} | {row['off_ns'] / 1000:,.1f} us "
                f"| {row['sha256_cbor']:.2f} | {row['xxh3_64']:.2f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
