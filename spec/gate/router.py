"""The gate's router-index cases (R-ROUTE-*): applying event streams and answering queries.

For the twins ``reference`` and ``accel`` (the index a target of that name ships,
:class:`kachedb_radix.reference.router.RouterIndex` or ``kachedb_radix.accel.RouterIndex``):

* ``router/apply/<workers>`` -- per block, applying a whole event stream to a fresh index,
  each payload as the msgpack bytes a router receives (decoding included): 8 workers'
  trees of 2,000 blocks each (block size 1, so they evict), fed prompts that share one of
  32 system prefixes (64 blocks) and add 1-64 blocks of their own, dealt round robin --
  the shape of the Mooncake trace's stream in ``benchmarks/router.py``, generated here
  from a fixed seed so that CI needs no trace file;
* ``router/lookup/64x16`` -- per call, ``query_hashes`` of 64 blocks over 16 workers
  holding the first 4, 8, ..., 64 of them (the issue's shape).

Apply allocates (a fresh table per round): the ``memory`` calibration; lookup: ``cpu``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kachedb_radix.reference.errors import OutOfBlocksError
from kachedb_radix.reference.events import (
    BlockHasher,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    encode_batch,
)

from ..twins import twin_class
from .shapes import Workload

#: The stream's hash scheme: the fastest (the gate times the index, not the hashing).
HASHER = BlockHasher("xxh3_64")
STREAM_SEED = 20_261_202
WORKERS = 8
REQUESTS = 1200


def index_class(twin: str) -> Callable[..., Any]:
    """The router index a twin ships (:mod:`kachedb_radix.spec.twins`).

    Raises:
        TwinError: ``twin`` names no twin.
        TwinUnavailable: ``accel`` where its C extension did not build.
    """
    found: Callable[..., Any] = twin_class(twin, "RouterIndex")
    return found


def event_stream(workers: int = WORKERS, requests: int = REQUESTS) -> tuple[list[list[bytes]], int]:
    """Each worker's payloads, in order, and how many blocks they store or remove (see
    the module docstring).  The workers' trees are the reference's: the stream is the
    same whichever twin is timed."""
    from kachedb_radix.reference import RadixTree

    rng = np.random.default_rng(STREAM_SEED)
    systems = [rng.integers(0, 1 << 30, 64).tolist() for _ in range(32)]
    trees = [RadixTree(2000, 1, events=HASHER) for _ in range(workers)]
    for number in range(requests):
        prompt = (
            systems[int(rng.integers(0, 32))]
            + rng.integers(0, 1 << 30, int(rng.integers(1, 65))).tolist()
        )
        try:
            trees[number % workers].insert(prompt)
        except OutOfBlocksError:  # cannot happen at these sizes; a bad stream would show
            raise AssertionError("the gate's stream overflowed a worker's pool") from None
    payloads: list[list[bytes]] = []
    blocks = 0
    for tree in trees:
        batches = tree.take_events()
        payloads.append([encode_batch(batch) for batch in batches])
        for batch in batches:
            for event in batch.events:
                if isinstance(event, BlockStored | BlockRemoved):
                    blocks += len(event.block_hashes)
    return payloads, blocks


def apply_workload(twin: str) -> Workload:
    """Applying the whole stream to a fresh index of ``twin``, per block."""
    payloads, blocks = event_stream()
    make = index_class(twin)

    def run() -> None:
        index = make(HASHER, 1)
        for worker, items in enumerate(payloads):
            for seq, payload in enumerate(items):
                index.apply(worker, seq, payload)
        assert index.workers() == list(range(len(payloads)))

    return Workload(run, units=blocks, unit="block", keep=[payloads])


def lookup_workload(twin: str) -> Workload:
    """One 64-block query over 16 workers holding 4i + 4 of its blocks."""
    index = index_class(twin)(HASHER, 1)
    chain = [HASHER.external(h) for h in HASHER.chain(list(range(64)), 1)]
    for worker in range(16):
        depth = 4 * worker + 4
        stored = BlockStored(chain[:depth], None, list(range(depth)), 1, None, "GPU", None)
        index.apply(worker, 0, KVEventBatch(0.0, [stored]))
    expected = {worker: 4 * worker + 4 for worker in range(16)}
    assert index.query_hashes(chain) == expected
    return Workload(lambda: index.query_hashes(chain), keep=[index, chain])


def router_cases(twin: str) -> dict[str, tuple[Callable[[], Workload], str]]:
    """The router cases of ``twin``: name -> (workload maker, calibration)."""
    from .timing import CPU, MEMORY

    return {
        f"router/apply/{WORKERS}": (lambda: apply_workload(twin), MEMORY),
        "router/lookup/64x16": (lambda: lookup_workload(twin), CPU),
    }
