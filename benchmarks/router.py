"""The router index's speed and size on a real event stream (issue 23's figures).

::

    python -m benchmarks.router [TRACE] [--workers 8,64] [--requests N]

The stream: the shared Mooncake trace (``../shared/traces/mooncake_synthetic_trace.jsonl``
by default), each request's ``hash_ids`` the tokens of a block-size-1 tree, requests
dealt round-robin to W workers whose trees (events on, 2,000 blocks each) insert them;
every batch a worker emits is kept as the msgpack bytes a router receives.  Measured
per implementation of the index (the reference today; the C twin is still to come):

* **apply**: stored and removed blocks per second applying every worker's payloads in
  sequence order, decoding included (the queue drained);
* **lookup**: the median time of a 64-block ``query_hashes`` over 16 workers holding
  the same prefix at different depths;
* **memory**: bytes per holder-block (an entry of one worker) at the end, by
  ``tracemalloc`` over the index's own allocations.

Medians of 5 runs where timed; the machine is printed with the table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
import tracemalloc
from pathlib import Path

from kachedb_radix.reference import OutOfBlocksError, RadixTree
from kachedb_radix.reference.events import (
    BlockHasher,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    encode_batch,
)
from kachedb_radix.reference.router import RouterIndex

#: The trace's ids are hashes already: the cheapest scheme names the blocks.
HASHER = BlockHasher("xxh3_64")

DEFAULT_TRACE = (
    Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
)


def stream(trace: Path, workers: int, requests: int | None) -> tuple[dict[str, list[bytes]], int]:
    """Each worker's payloads in order, and how many blocks they store or remove."""
    trees = {f"w{i}": RadixTree(2000, 1, events=HASHER) for i in range(workers)}
    names = list(trees)
    with trace.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines):
            if requests is not None and number >= requests:
                break
            with contextlib.suppress(OutOfBlocksError):  # longer than a pool: not cached
                trees[names[number % workers]].insert(json.loads(line)["hash_ids"])
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


def apply_all(payloads: dict[str, list[bytes]]) -> RouterIndex:
    """A fresh index fed every payload, each worker's in sequence order."""
    index = RouterIndex(HASHER, 1)
    for name, items in payloads.items():
        for seq, payload in enumerate(items):
            index.apply(name, seq, payload)
    return index


def lookup_p50(rounds: int = 2001) -> float:
    """Median ns of a 64-block query over 16 workers (worker i holds the first 4i+4)."""
    index = RouterIndex(HASHER, 1)
    chain = [HASHER.external(h) for h in HASHER.chain(list(range(64)), 1)]
    for worker in range(16):
        depth = 4 * worker + 4
        stored = BlockStored(chain[:depth], None, list(range(depth)), 1, None, "GPU", None)
        index.apply(f"w{worker}", 0, KVEventBatch(0.0, [stored]))
    samples = []
    for _ in range(rounds):
        began = time.perf_counter_ns()
        index.query_hashes(chain)
        samples.append(time.perf_counter_ns() - began)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.router", description=__doc__)
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--workers", default="8,64")
    parser.add_argument("--requests", type=int, default=None)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}; trace {args.trace.name}")
    print("| index | workers | blocks applied | apply (blocks/s) | bytes per holder-block |")
    print("|---|---:|---:|---:|---:|")
    for workers in (int(w) for w in args.workers.split(",")):
        payloads, blocks = stream(args.trace, workers, args.requests)
        times = []
        for _ in range(5):
            began = time.perf_counter()
            apply_all(payloads)
            times.append(time.perf_counter() - began)
        tracemalloc.start()
        index = apply_all(payloads)
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        per_holder = size / max(index.holder_blocks, 1)
        rate = blocks / statistics.median(times)
        print(f"| reference | {workers} | {blocks:,} | {rate:,.0f} | {per_holder:.0f} |")
    print(f"\nlookup, 64 blocks over 16 workers, reference: p50 {lookup_p50() / 1000:.2f} us")


if __name__ == "__main__":
    main()
