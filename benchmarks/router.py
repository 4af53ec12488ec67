"""The router index's speed and size on a real event stream, both twins (issue 23's figures).

::

    python -m benchmarks.router [TRACE] [--workers 8,64] [--requests N] [--scale 10000000]

The stream: the shared Mooncake trace (``../shared/traces/mooncake_synthetic_trace.jsonl``
by default), each request's ``hash_ids`` the tokens of a block-size-1 tree, requests
dealt round-robin to W workers whose trees (events on, 2,000 blocks each, so they evict)
insert them; every batch a worker emits is kept as the msgpack bytes a router receives.
Measured per twin of the index, in the same run:

* **apply**: stored and removed blocks per second applying every worker's payloads in
  sequence order, decoding included (a router's queue drained);
* **lookup**: the median time of a 64-block ``query_hashes`` over 16 workers holding
  the same prefix at different depths (the issue's shape), and of the trace's own
  requests against the 8-worker index;
* **memory**: bytes per holder-block (an entry of one worker) at the end of the stream --
  ``memory_bytes()["total"]`` for the C twin, ``tracemalloc`` for the reference -- and,
  for the C twin, at ``--scale`` holder-blocks: the trace's stores repeated with the
  hashes of each copy offset, no eviction, until that many entries are held; once with
  the trace's own sharing between workers, once with none (every hash one worker's).

Medians of ``--runs`` runs where timed; the ratio column is reference over accel in the
same run.  The machine and its load are printed with the table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kachedb_radix import accel
from kachedb_radix.reference import OutOfBlocksError
from kachedb_radix.reference.events import (
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


def at_scale(
    requests: Sequence[list[int]], workers: int, target: int, shared: bool = True
) -> tuple[int, float, float]:
    """The C twin fed the trace's stores, dealt round-robin, the hashes of each copy of
    the trace offset by copy * 2**40 (and, unless ``shared``, of each worker by worker *
    2**32, so that no two workers hold a hash: the table's worst case), until at least
    ``target`` holder-blocks: (holder-blocks, bytes per holder-block, blocks per second
    applying, decoding included)."""
    index = accel.RouterIndex(HASHER, 1)
    seqs = [0] * workers
    applied = 0
    elapsed = 0.0
    copy = 0
    while index.holder_blocks < target:
        for number, ids in enumerate(requests):
            worker = number % workers
            offset = (copy << 40) + (0 if shared else worker << 32)
            hashes: list[ExternalHash] = [offset + h for h in ids]
            batch = KVEventBatch(0.0, [BlockStored(hashes, None, ids, 1, None, "GPU", None)])
            payload = encode_batch(batch)
            began = time.perf_counter()
            index.apply(worker, seqs[worker], payload)
            elapsed += time.perf_counter() - began
            seqs[worker] += 1
            applied += len(hashes)
            if number % 500 == 0 and index.holder_blocks >= target:
                break
        copy += 1
    holders = index.holder_blocks
    return holders, index.memory_bytes()["total"] / holders, applied / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.router", description=__doc__)
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--workers", default="8,64")
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--scale", type=int, default=10_000_000)
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
    if args.scale:
        for shared in (True, False):
            holders, per_holder, rate = at_scale(requests, 64, args.scale, shared)
            kind = "the trace's sharing" if shared else "no hash shared by two workers"
            print(
                f"accel at {holders:,} holder-blocks (64 workers, {kind}): "
                f"{per_holder:.1f} bytes per holder-block; apply {rate / 1e6:.2f} M blocks/s"
            )


if __name__ == "__main__":
    main()
