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
  holding the first 4, 8, ..., 64 of them (the issue's shape); ``router/lookup/64x128``
  -- the same 16 workers among 128, the others holding prompts of their own, *anchored*
  by ``64x16`` (its figure is its ratio to that case, same pass: a query must cost what
  its matching workers cost, not what the fleet holds);
* ``router/churn/<held>`` -- per block stored or removed, a steady churn of fresh blocks
  (each store names blocks no worker holds, each removal blocks stored 32 calls before)
  over 128 workers around an index of ``held`` holder-blocks: 10,000 (both twins), and
  1,000,000 (accel) anchored by the 10,000 one -- growth with the index's size is the
  regression this catches;
* ``router/clear/<held>`` -- per call, clearing a worker of 10 blocks (``AllBlocksCleared``)
  beside another holding ``held`` blocks: 0, and 131,072 anchored by it (a clear must
  cost what the cleared worker holds: the C twin's used to scan the table).

And memory figures (deterministic, ``accel``): ``memory/router/<workers>`` -- bytes per
holder-block (``memory_bytes()["total"]`` over ``holder_blocks``) at 10^6 holder-blocks of
fresh hashes held by one worker each, dealt round robin to 16, 128 and 1,024 workers.

Apply and churn allocate: the ``memory`` calibration; lookup and clear: ``cpu``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from kachedb_radix.reference.errors import OutOfBlocksError
from kachedb_radix.reference.events import (
    AllBlocksCleared,
    BlockHasher,
    BlockRemoved,
    BlockStored,
    ExternalHash,
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


#: The fleet of the churn, lookup and memory cases.
FLEET = 128
#: Blocks a churn call stores, per worker of a group of 8; removed 32 calls later.
CHURN_BLOCKS, CHURN_GROUP, CHURN_LAG, CHURN_POOL = 32, 8, 32, 64


def _stored(hashes: list[ExternalHash]) -> KVEventBatch:
    return KVEventBatch(0.0, [BlockStored(hashes, None, [0] * len(hashes), 1, None, "GPU", None)])


def _fill(index: Any, held: int, workers: int, base: int) -> list[int]:
    """Store ``held`` fresh blocks (ints from ``base``) dealt round robin to
    ``workers`` workers, 64 a batch; returns each worker's next sequence number."""
    seqs = [0] * workers
    for number, first in enumerate(range(0, held, 64)):
        worker = number % workers
        hashes: list[ExternalHash] = list(range(base + first, base + min(first + 64, held)))
        index.apply(worker, seqs[worker], _stored(hashes))
        seqs[worker] += 1
    return seqs


def churn_workload(twin: str, held: int) -> Workload:
    """Per block, a call's 256 fresh stores and 256 removals over 128 workers beside
    ``held`` holder-blocks (see the module docstring)."""
    index = index_class(twin)(HASHER, 1)
    seqs = _fill(index, held, FLEET, 1 << 40)
    rng = np.random.default_rng(STREAM_SEED)
    stores: list[list[tuple[int, bytes]]] = []
    removals: list[list[tuple[int, bytes]]] = []
    for group in range(CHURN_POOL):
        fresh = [rng.integers(1 << 62, 1 << 63, CHURN_BLOCKS).tolist() for _ in range(CHURN_GROUP)]
        workers = [(group * CHURN_GROUP + i) % FLEET for i in range(CHURN_GROUP)]
        stores.append([(w, encode_batch(_stored(h))) for w, h in zip(workers, fresh, strict=True)])
        removals.append(
            [
                (w, encode_batch(KVEventBatch(0.0, [BlockRemoved(h, "GPU")])))
                for w, h in zip(workers, fresh, strict=True)
            ]
        )
    apply = index.apply
    calls = 0

    def send(batch: list[tuple[int, bytes]]) -> None:
        for worker, payload in batch:
            apply(worker, seqs[worker], payload)
            seqs[worker] += 1

    for group in range(CHURN_LAG):  # the first removals have blocks to remove
        send(stores[group])

    def run() -> None:
        nonlocal calls
        send(stores[(calls + CHURN_LAG) % CHURN_POOL])
        send(removals[calls % CHURN_POOL])
        calls += 1

    units = 2 * CHURN_GROUP * CHURN_BLOCKS
    return Workload(run, units=units, unit="block", keep=[index, stores, removals])


def fleet_lookup_workload(twin: str) -> Workload:
    """One 64-block query over 128 workers, 16 of them holding 4i + 4 of its blocks."""
    index = index_class(twin)(HASHER, 1)
    chain = [HASHER.external(h) for h in HASHER.chain(list(range(64)), 1)]
    for worker in range(FLEET):
        if worker < 16:
            hashes = chain[: 4 * worker + 4]
        else:
            own = HASHER.chain(list(range(worker << 8, (worker << 8) + 64)), 1)
            hashes = [HASHER.external(h) for h in own]
        index.apply(worker, 0, _stored(hashes))
    expected = {worker: 4 * worker + 4 for worker in range(16)}
    assert index.query_hashes(chain) == expected
    return Workload(lambda: index.query_hashes(chain), keep=[index, chain])


def clear_workload(twin: str, beside: int) -> Workload:
    """Clearing a 10-block worker beside another of ``beside`` blocks (the 10 stored
    again, untimed, before each call)."""
    index = index_class(twin)(HASHER, 1)
    _fill(index, beside, 1, 1 << 40)
    small: list[ExternalHash] = list(range(10))
    refill, cleared = _stored(small), KVEventBatch(0.0, [AllBlocksCleared()])
    seq = 0

    def setup() -> None:
        nonlocal seq
        index.apply("small", seq, refill)
        seq += 1

    def run() -> None:
        nonlocal seq
        index.apply("small", seq, cleared)
        seq += 1

    return Workload(run, setup=setup, keep=[index])


class _PerHolderBlock:
    """A router index as the gate's memory figure reads a tree: its own bytes over its
    holder-blocks (no token bytes: an index keeps none)."""

    def __init__(self, index: Any) -> None:
        self.index = index

    def memory_bytes(self) -> dict[str, int]:
        parts = self.index.memory_bytes()
        return {"total": parts["total"], "tokens": 0, "scratch": parts["scratch"]}

    def stats(self) -> Any:
        return SimpleNamespace(cached=self.index.holder_blocks)


def fleet_memory(workers: int, held: int = 1_000_000) -> Any:
    """The C index holding ``held`` fresh holder-blocks, one worker each, dealt round
    robin to ``workers`` workers."""
    from kachedb_radix import accel

    index = accel.RouterIndex(HASHER, 1)
    _fill(index, held, workers, 1 << 40)
    return _PerHolderBlock(index)


def router_cases(twin: str) -> dict[str, tuple[Callable[[], Workload], str, str | None]]:
    """The router cases of ``twin``: name -> (workload maker, calibration, anchor)."""
    from .timing import CPU, MEMORY

    cases: dict[str, tuple[Callable[[], Workload], str, str | None]] = {
        f"router/apply/{WORKERS}": (lambda: apply_workload(twin), MEMORY, None),
        "router/lookup/64x16": (lambda: lookup_workload(twin), CPU, None),
        "router/lookup/64x128": (lambda: fleet_lookup_workload(twin), CPU, "router/lookup/64x16"),
        "router/churn/10000": (lambda: churn_workload(twin, 10_000), MEMORY, None),
        "router/clear/0": (lambda: clear_workload(twin, 0), CPU, None),
        "router/clear/131072": (lambda: clear_workload(twin, 1 << 17), CPU, "router/clear/0"),
    }
    if twin == "accel":  # the reference's index of 10^6 blocks: a minute and half a GB
        cases["router/churn/1000000"] = (
            lambda: churn_workload(twin, 1_000_000),
            MEMORY,
            "router/churn/10000",
        )
    return cases


def router_memory_cases(twin: str) -> dict[str, Callable[[], Any]]:
    """The memory cases of ``twin`` (the C twin reports its allocations): name -> build."""
    if twin != "accel":
        return {}
    return {f"memory/router/{w}": functools.partial(fleet_memory, w) for w in (16, 128, 1024)}
