"""The router index's speed and size on a real event stream, both twins (issues 23, 34).

::

    python -m benchmarks.router [TRACE] [--workers 8,64] [--requests N] [--runs 5]
        [--scale 10000000] [--fleet 16,128,1024] [--lookup-workers 16,128] [--clear 14,17,20]

The stream: the shared Mooncake trace (``../shared/traces/mooncake_synthetic_trace.jsonl``
by default), each request's ``hash_ids`` the tokens of a block-size-1 tree, requests
dealt round-robin to W workers whose trees (events on, 2,000 blocks each, so they evict)
insert them; every batch a worker emits is kept as the msgpack bytes a router receives.
Measured per twin of the index, in the same run:

* **apply**: stored and removed blocks per second applying every worker's payloads in
  sequence order, decoding included (a router's queue drained);
* **lookup**: the median time of a 64-block ``query_hashes`` over 16 workers holding
  the same prefix at different depths (the issue's shape), and of the trace's own
  requests against the 8-worker index; then, for the C twin, p50 and p99 of the 64-block
  query with those 16 among ``--lookup-workers`` workers (the others holding prompts of
  their own);
* **memory**: bytes per holder-block (an entry of one worker) at the end of the stream --
  ``memory_bytes()["total"]`` for the C twin, ``tracemalloc`` for the reference;
* **clear**: the C twin clearing a worker of 10 blocks (by ``AllBlocksCleared``, a
  restart, ``lost()`` and ``remove_worker``, interleaved) beside another holding 2^k
  blocks, k in ``--clear``;
* **fleet scale**: the C twin fed the trace's stores, copy after copy with every copy's
  hashes new, dealt round robin to each of ``--fleet`` workers, until ``--scale``
  holder-blocks: bytes per holder-block, and stored blocks per CPU-second
  (``time.process_time``) and per wall-second applying the payload bytes (decoding
  included, encoding not); once with the trace's own sharing between workers, once with
  none (every hash one worker's).

Medians of ``--runs`` runs where timed; the ratio column is reference over accel in the
same run.  The machine and its load are printed with the table: on a shared machine the
per-CPU-second figures are the ones to compare, and wall time needs a quiet one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kachedb_radix import accel
from kachedb_radix.reference import OutOfBlocksError
from kachedb_radix.reference.events import (
    AllBlocksCleared,
    BlockHasher,
    BlockRemoved,
    BlockStored,
    ExternalHash,
    KVEventBatch,
    encode_batch,
)
from kachedb_radix.spec.twins import TWIN_NAMES, twin_class

#: The trace's ids are hashes already: the cheapest scheme names the blocks.
HASHER = BlockHasher("xxh3_64")
TWINS: dict[str, Callable[..., Any]] = {
    name: twin_class(name, "RouterIndex") for name in TWIN_NAMES
}  # the one picker: spec/twins.py

DEFAULT_TRACE = (
    Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
)


def requests_of(trace: Path, limit: int | None) -> list[list[int]]:
    """The trace's requests' block ids, in order."""
    found: list[list[int]] = []
    with trace.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines):
            if limit is not None and number >= limit:
                break
            found.append(json.loads(line)["hash_ids"])
    return found


def stream(requests: Sequence[list[int]], workers: int) -> tuple[dict[str, list[bytes]], int]:
    """Each worker's payloads in order, and how many blocks they store or remove."""
    trees = {f"w{i}": accel.RadixTree(2000, 1, events=HASHER) for i in range(workers)}
    names = list(trees)
    for number, ids in enumerate(requests):
        with contextlib.suppress(OutOfBlocksError):  # longer than a pool: not cached
            trees[names[number % workers]].insert(ids)
    payloads: dict[str, list[bytes]] = {}
    blocks = 0
    for name, tree in trees.items():
        batches = tree.take_events()
        payloads[name] = [encode_batch(batch) for batch in batches]
        for batch in batches:
            blocks += sum(
                len(event.block_hashes)
                for event in batch.events
                if isinstance(event, BlockStored | BlockRemoved)
            )
    return payloads, blocks


def apply_all(twin: Callable[..., Any], payloads: dict[str, list[bytes]]) -> Any:
    """A fresh index fed every payload, each worker's in sequence order."""
    index = twin(HASHER, 1)
    apply = index.apply
    for name, items in payloads.items():
        for seq, payload in enumerate(items):
            apply(name, seq, payload)
    return index


def median_ns(call: Callable[[], object], rounds: int) -> float:
    """The median wall time of ``call``, in ns."""
    samples = []
    clock = time.perf_counter_ns
    for _ in range(rounds):
        began = clock()
        call()
        samples.append(clock() - began)
    return statistics.median(samples)


def lookup_p50(twin: Callable[..., Any], rounds: int = 20001) -> float:
    """Median ns of a 64-block query over 16 workers (worker i holds the first 4i+4)."""
    index = twin(HASHER, 1)
    chain = [HASHER.external(h) for h in HASHER.chain(list(range(64)), 1)]
    for worker in range(16):
        depth = 4 * worker + 4
        stored = BlockStored(chain[:depth], None, list(range(depth)), 1, None, "GPU", None)
        index.apply(f"w{worker}", 0, KVEventBatch(0.0, [stored]))
    query = index.query_hashes
    return median_ns(lambda: query(chain), rounds)


def trace_lookup_p50(index: Any, requests: Sequence[list[int]]) -> float:
    """Median ns of the trace's requests (their block hashes computed beforehand) as
    queries against ``index``."""
    chains = [[HASHER.external(h) for h in HASHER.chain(ids, 1)] for ids in requests[:2000]]
    query = index.query_hashes
    samples = []
    clock = time.perf_counter_ns
    for chain in chains * 3:
        began = clock()
        query(chain)
        samples.append(clock() - began)
    return statistics.median(samples)


def memory_per_holder(twin_name: str, payloads: dict[str, list[bytes]]) -> float:
    """Bytes per holder-block of an index fed ``payloads``."""
    if twin_name == "accel":
        index = apply_all(TWINS["accel"], payloads)
        return float(index.memory_bytes()["total"] / max(index.holder_blocks, 1))
    tracemalloc.start()
    index = apply_all(TWINS["reference"], payloads)
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return float(size / max(index.holder_blocks, 1))


def _fresh(
    requests: Sequence[list[int]], workers: int, copy: int, shared: bool
) -> Iterator[tuple[int, list[ExternalHash]]]:
    """The trace's requests as (worker, hashes) pairs for its ``copy``-th repetition:
    each copy's hashes offset by copy * 2**40 and, unless ``shared``, each worker's by
    worker * 2**32 (no two workers hold a hash: the table's worst case)."""
    for number, ids in enumerate(requests):
        worker = number % workers
        offset = (copy << 40) + (0 if shared else worker << 32)
        yield worker, [offset + h for h in ids]


@dataclass
class Fleet:
    """One at-scale run of the C twin (:func:`at_scale`)."""

    workers: int
    shared: bool
    holders: int
    bytes_per_holder: float
    cpu_rate: float
    wall_rate: float


#: How many payloads are encoded before a timed group applies them: the clocks are read
#: once a group (a CPU clock read costs a system call, a sizeable part of one apply).
GROUP = 256


def at_scale(
    requests: Sequence[list[int]], workers: int, target: int, shared: bool = True
) -> Fleet:
    """The C twin fed the trace's stores, dealt round-robin to ``workers``, copy after
    copy (:func:`_fresh`: every copy's hashes are new), until at least ``target``
    holder-blocks: bytes per holder-block (``memory_bytes()["total"]``) and stored
    blocks per CPU-second (``time.process_time``) and per wall-second applying the
    payload bytes, decoding included; encoding them is not timed."""
    index = accel.RouterIndex(HASHER, 1)
    seqs = [0] * workers
    applied = 0
    cpu = wall = 0.0
    copy = 0
    apply = index.apply
    while index.holder_blocks < target:
        pairs = list(_fresh(requests, workers, copy, shared))
        for first in range(0, len(pairs), GROUP):
            group = []
            for worker, hashes in pairs[first : first + GROUP]:
                stored = BlockStored(hashes, None, [0] * len(hashes), 1, None, "GPU", None)
                group.append((worker, seqs[worker], encode_batch(KVEventBatch(0.0, [stored]))))
                seqs[worker] += 1
                applied += len(hashes)
            began_cpu, began_wall = time.process_time(), time.perf_counter()
            for worker, seq, payload in group:
                apply(worker, seq, payload)
            cpu += time.process_time() - began_cpu
            wall += time.perf_counter() - began_wall
            if index.holder_blocks >= target:
                break
        copy += 1
    holders = index.holder_blocks
    per_holder = index.memory_bytes()["total"] / holders
    return Fleet(workers, shared, holders, per_holder, applied / cpu, applied / wall)


def clear_cost(held_by_other: int, rounds: int = 41) -> dict[str, float]:
    """Median us of clearing a worker that holds 10 blocks while another holds
    ``held_by_other``, in the C twin: by ``AllBlocksCleared``, by a restart (batch 0
    again), by ``lost()`` and by ``remove_worker``, interleaved (each preceded, untimed,
    by storing the 10 blocks again)."""
    index = accel.RouterIndex(HASHER, 1)
    big: list[ExternalHash] = list(range(1 << 40, (1 << 40) + held_by_other))
    for first in range(0, len(big), 4096):
        part = big[first : first + 4096]
        stored = BlockStored(part, None, [0] * len(part), 1, None, "GPU", None)
        index.apply("big", first // 4096, KVEventBatch(0.0, [stored]))
    small: list[ExternalHash] = list(range(10))
    refill = KVEventBatch(0.0, [BlockStored(small, None, list(range(10)), 1, None, "GPU", None)])
    cleared, empty = KVEventBatch(0.0, [AllBlocksCleared()]), KVEventBatch(0.0, [])
    ways: dict[str, Callable[[int], object]] = {
        "clear": lambda seq: index.apply("small", seq, cleared),
        "restart": lambda seq: index.apply("small", 0, empty),
        "lost": lambda seq: index.lost("small", seq),
        "remove_worker": lambda seq: index.remove_worker("small"),
    }
    samples: dict[str, list[float]] = {name: [] for name in ways}
    clock = time.perf_counter_ns
    for _ in range(rounds):
        for name, way in ways.items():  # interleaved: a noisy moment hits all four
            seq = index.expected("small") if "small" in index.workers() else 0
            index.apply("small", seq, refill)
            assert index.held("small") == len(small)
            began = clock()
            way(seq + 1)
            samples[name].append((clock() - began) / 1000)
    assert index.held("big") == held_by_other
    return {name: statistics.median(values) for name, values in samples.items()}


def lookup_tail(twin: Callable[..., Any], workers: int, rounds: int = 20001) -> tuple[float, float]:
    """p50 and p99 ns of a 64-block query over an index of ``workers`` workers: 16 hold
    the query's prefix at depths 4, 8, ..., 64 (the gate's shape), the others 64 blocks
    of prompts of their own."""
    index = twin(HASHER, 1)
    chain = [HASHER.external(h) for h in HASHER.chain(list(range(64)), 1)]
    for worker in range(workers):
        if worker < 16:
            hashes = chain[: 4 * worker + 4]
        else:
            hashes = [
                HASHER.external(h)
                for h in HASHER.chain(list(range(worker << 8, (worker << 8) + 64)), 1)
            ]
        stored = BlockStored(hashes, None, [0] * len(hashes), 1, None, "GPU", None)
        index.apply(f"w{worker}", 0, KVEventBatch(0.0, [stored]))
    query = index.query_hashes
    assert query(chain) == {f"w{w}": 4 * w + 4 for w in range(16)}
    samples = []
    clock = time.perf_counter_ns
    for _ in range(rounds):
        began = clock()
        query(chain)
        samples.append(clock() - began)
    samples.sort()
    return samples[len(samples) // 2], samples[len(samples) * 99 // 100]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.router", description=__doc__)
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--workers", default="8,64")
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--scale", type=int, default=10_000_000)
    parser.add_argument("--fleet", default="16,128,1024", help="workers at --scale")
    parser.add_argument("--lookup-workers", default="16,128")
    parser.add_argument("--clear", default="14,17,20", help="log2 blocks beside the cleared worker")
    args = parser.parse_args()
    requests = requests_of(args.trace, args.requests)
    print(
        f"machine: {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}; trace "
        f"{args.trace.name}, {len(requests):,} requests"
    )
    print(
        "| workers | blocks applied | apply, reference (blocks/s) | apply, accel (blocks/s) "
        "| ratio | bytes per holder-block, reference | accel |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    eight: Any = None
    for workers in (int(w) for w in args.workers.split(",")):
        payloads, blocks = stream(requests, workers)
        rates = {}
        for name, twin in TWINS.items():
            times = []
            for _ in range(args.runs):
                began = time.perf_counter()
                index = apply_all(twin, payloads)
                times.append(time.perf_counter() - began)
            rates[name] = blocks / statistics.median(times)
            if workers == 8 and name == "accel":
                eight = index
        memory = {name: memory_per_holder(name, payloads) for name in TWINS}
        print(
            f"| {workers} | {blocks:,} | {rates['reference'] / 1e6:.2f} M | "
            f"{rates['accel'] / 1e6:.2f} M | {rates['reference'] / rates['accel']:.3f} | "
            f"{memory['reference']:.0f} | {memory['accel']:.1f} |"
        )
    lookups = {name: lookup_p50(twin) for name, twin in TWINS.items()}
    ratio = lookups["reference"] / lookups["accel"]
    print(
        f"\nlookup, 64 blocks over 16 workers, p50: reference "
        f"{lookups['reference'] / 1000:.2f} us, accel {lookups['accel'] / 1000:.3f} us "
        f"(ratio {ratio:.1f})"
    )
    if eight is not None:
        trace_p50 = trace_lookup_p50(eight, requests) / 1000
        print(f"lookup, the trace's requests over 8 workers, accel p50: {trace_p50:.3f} us")
    for workers in (int(w) for w in args.lookup_workers.split(",") if w):
        p50, p99 = lookup_tail(accel.RouterIndex, workers)
        print(
            f"lookup, 64 blocks, 16 of {workers} workers holding its prefix, accel: "
            f"p50 {p50 / 1000:.3f} us, p99 {p99 / 1000:.3f} us"
        )
    for exponent in (int(e) for e in args.clear.split(",") if e):
        costs = clear_cost(1 << exponent)
        shown = ", ".join(f"{name} {us:.1f} us" for name, us in costs.items())
        print(f"clearing a 10-block worker beside one of 2^{exponent} blocks, accel: {shown}")
    if args.scale:
        print(
            f"\nthe C twin at {args.scale:,} holder-blocks, fresh hashes (the trace's stores "
            "copied, each copy's hashes new), one thread:\n"
        )
        print(
            "| workers | sharing | holder-blocks | bytes per holder-block "
            "| stored blocks per CPU-second | per wall-second |"
        )
        print("|---:|---|---:|---:|---:|---:|")
        for workers in (int(w) for w in args.fleet.split(",")):
            for shared in (False, True):
                fleet = at_scale(requests, workers, args.scale, shared)
                kind = "the trace's" if shared else "none"
                print(
                    f"| {workers:,} | {kind} | {fleet.holders:,} | {fleet.bytes_per_holder:.1f} "
                    f"| {fleet.cpu_rate / 1e6:.2f} M | {fleet.wall_rate / 1e6:.2f} M |"
                )


if __name__ == "__main__":
    main()
