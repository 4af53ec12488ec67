"""What KV events cost when on: the same build, events off and on, paired; and the floor.

::

    python -m benchmarks.events_cost [--rounds 15] [--json FILE]

For each tree twin, three trees of one build take turns round by round: events off
(the default), events on with vLLM's default hashes (``sha256_cbor``, SHA-256 over
canonical CBOR) and events on with Dynamo's ``xxh3_64``. Each round times, per tree:

* ``insert/evict, bytes``: ``insert`` of a new 1,024-token prompt (64 blocks of 16) into
  a full pool (64 blocks evicted first) and ``take_event_payloads()`` -- every new block
  hashed, one removal and one store encoded, the batch handed over as the msgpack bytes
  a publisher sends (what a routed deployment does);
* ``insert/evict, structs``: the same, the batch taken as vLLM's structs
  (``take_events()``);
* ``match/1024``: ``match`` of a cached 1,024-token prompt (emits nothing: R-EVENT-1).

The figure per workload is the median over rounds of the paired ratio ON / OFF (so
drift of the shared machine moves both sides of a pair alike) beside the off median.

**The floor** of an insert's events is the bare hash of the same bytes, in C built like
the extension (``benchmarks/floor.c``, OpenSSL's SHA-256 and xxHash's XXH3): for
``sha256_cbor`` SHA-256 of the 64 blocks' CBOR serialisations, for ``xxh3_64`` XXH3-64 of
the 64 blocks' tokens and of the 63 (parent, local) pairs the chain hashes. Printed is
the floor per insert, beside what events on add to the C twin's insert (on - off,
medians), and their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import cbor2
import numpy as np
import xxhash

from kachedb_radix.reference.events import BlockHasher
from kachedb_radix.reference.events.hashing import DYNAMO_SEED
from kachedb_radix.spec.twins import twin_classes

BLOCK = 16
BLOCKS = 64
POOL = 512
SETTINGS: dict[str, Any] = {"off": None, "sha256_cbor": True, "xxh3_64": BlockHasher("xxh3_64")}
ON = ("sha256_cbor", "xxh3_64")


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
    prompts = iter([rng.integers(0, 2**31, BLOCKS * BLOCK, dtype=np.uint32) for _ in range(18)])

    def insert(take: str) -> Callable[[], None]:
        def run() -> None:
            tree.insert(next(prompts))
            if events is not None:
                getattr(tree, take)()

        return run

    return {
        "insert/evict, bytes": _timed(insert("take_event_payloads"), 9),
        "insert/evict, structs": _timed(insert("take_events"), 9),
        "match/1024": _timed(lambda: tree.match(cached), 51),
    }


def measure(rounds: int) -> dict[str, dict[str, dict[str, float]]]:
    """Per twin and workload: the off and on medians (ns) and each setting's ON / OFF ratio."""
    results: dict[str, dict[str, dict[str, float]]] = {}
    for twin, factory in _twins().items():
        ratios: dict[str, dict[str, list[float]]] = {}
        raw: dict[str, dict[str, list[float]]] = {}
        for serial in range(rounds):
            figures = {name: _round(factory, events, serial) for name, events in SETTINGS.items()}
            for workload, base in figures["off"].items():
                for name in SETTINGS:
                    raw.setdefault(workload, {}).setdefault(name, []).append(
                        figures[name][workload]
                    )
                    if name != "off":
                        ratio = figures[name][workload] / base
                        ratios.setdefault(workload, {}).setdefault(name, []).append(ratio)
        results[twin] = {
            workload: {
                **{
                    f"{name}_ns": statistics.median(values) * 1e9
                    for name, values in raw[workload].items()
                },
                **{name: statistics.median(values) for name, values in by.items()},
                **{f"{name}_min": min(values) for name, values in by.items()},
                **{f"{name}_max": max(values) for name, values in by.items()},
            }
            for workload, by in ratios.items()
        }
    return results


# ---------------------------------------------------------------------------- the floor


def floor_inputs(hasher: BlockHasher, tokens: np.ndarray) -> list[tuple[str, list[bytes], int]]:
    """The bytes an insert of ``tokens`` (a path's first blocks, default namespace) hashes:
    (the floor's function, the messages, its seed)."""
    blocks = [tokens[i * BLOCK : (i + 1) * BLOCK] for i in range(len(tokens) // BLOCK)]
    if hasher.scheme == "xxh3_64":
        local = [block.astype("<u4").tobytes() for block in blocks]
        chain = hasher.chain(tokens.tolist(), BLOCK)
        pairs = [
            int(parent).to_bytes(8, "little")
            + xxhash.xxh3_64_intdigest(block, seed=DYNAMO_SEED).to_bytes(8, "little")
            for parent, block in zip(chain, local[1:], strict=False)
        ]
        return [("xxh3_64_each", local, DYNAMO_SEED), ("xxh3_64_each", pairs, DYNAMO_SEED)]
    parent = hasher.root
    messages = []
    for block in blocks:
        values = block.tolist()
        messages.append(cbor2.dumps((parent, tuple(values), None), canonical=True))
        parent = hasher.block_hash(parent, values, None)
    return [("sha256_each", messages, 0)]


def floor_ns(floor: ModuleType, rounds: int) -> dict[str, float]:
    """Median ns the bare hashes of one insert's 64 blocks take, per scheme."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 2**31, BLOCKS * BLOCK, dtype=np.uint32)
    found: dict[str, float] = {}
    for name in ON:
        hasher = BlockHasher() if name == "sha256_cbor" else BlockHasher(name)
        inputs = floor_inputs(hasher, tokens)

        def run(inputs: list[tuple[str, list[bytes], int]] = inputs) -> None:
            for function, messages, seed in inputs:
                if function == "sha256_each":
                    floor.sha256_each(messages)
                else:
                    floor.xxh3_64_each(messages, seed)

        found[name] = statistics.median(_timed(run, 51) for _ in range(rounds)) * 1e9
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    from benchmarks import floor as floor_module

    started = time.perf_counter()
    floors = floor_ns(floor_module.build(), args.rounds)
    results = measure(args.rounds)
    print(f"{args.rounds} rounds, {time.perf_counter() - started:.0f} s")
    print("Ratios: the median over rounds of ON / OFF, the spread of the rounds' ratios in ().\n")
    print("| twin | workload | events off (median) | on, sha256_cbor / off | on, xxh3_64 / off |")
    print("|---|---|---:|---:|---:|")
    for twin, workloads in results.items():
        for workload, row in workloads.items():
            cells = [
                f"{row[name]:.2f} ({row[f'{name}_min']:.2f}-{row[f'{name}_max']:.2f})"
                for name in ON
            ]
            print(f"| {twin} | {workload} | {row['off_ns'] / 1000:,.1f} us | {' | '.join(cells)} |")
    print("\nThe floor: the bare hash of the same bytes (one insert's 64 blocks), against what")
    print("events on add to the C twin's insert (on - off, medians, taken as bytes):\n")
    print("| scheme | floor | accel: on - off | (on - off) / floor | floor / events off |")
    print("|---|---:|---:|---:|---:|")
    for name in ON:
        found = results.get("accel", {}).get("insert/evict, bytes")
        if found is None:  # pragma: no cover - the C twin is built everywhere CI runs
            continue
        row = found
        added = row[f"{name}_ns"] - row["off_ns"]
        print(
            f"| {name} | {floors[name] / 1000:,.2f} us | {added / 1000:,.2f} us "
            f"| {added / floors[name]:.2f} | {floors[name] / row['off_ns']:.2f} |"
        )
    if args.json:
        args.json.write_text(json.dumps({"floor_ns": floors, "twins": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
