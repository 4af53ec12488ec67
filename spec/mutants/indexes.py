"""Planted bugs in a router index: the reference :class:`RouterIndex`, each with one bug,
that the index level (``kachedb-radix conform --index --mutants``) must catch.

Each mutant wraps the reference index (:class:`~kachedb_radix.spec.conform.index.TwinIndex`)
and gets one thing wrong, the way routers have:

* :class:`ForgetsCopies` -- a removal drops every copy (an index without R-ROUTE-5's
  counts: the block stops matching while the worker still holds its other copy);
* :class:`KeepsRemoved` -- removals are ignored (the index promises blocks that are
  gone, R-ROUTE-2);
* :class:`IgnoresNumbers` -- every batch applied in arrival order, gaps and restarts
  unseen (R-ROUTE-1: a restarted worker keeps its old entries);
* :class:`MergesRanks` -- a worker's data-parallel ranks filed as one (R-ROUTE-3: one
  rank's events change another's entries);
* :class:`ClearsFirstBlockOnly` -- ``AllBlocksCleared`` takes away only the worker's
  first stored block (a partial clear, R-ROUTE-2).

``tests/kit/test_index_level.py`` runs the level on each and requires it caught by a
rule it declares it breaks (its ``rules``).  Cost: a level run per mutant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kachedb_radix.reference.events import BlockRemoved, BlockStored, KVEventBatch
from kachedb_radix.reference.events.schema import AllBlocksCleared, KVEvent

from ..conform.index import TwinIndex
from ..conform.index.stream import MEDIUM, Worker


class ForgetsCopies(TwinIndex):
    """A removal takes away every copy of each block it names."""

    rules = ("R-ROUTE-5",)

    def __init__(self) -> None:
        super().__init__("reference")

    def apply(
        self, worker: Worker, seq: int, batch: KVEventBatch | bytes, namespace: str | None
    ) -> str:
        if isinstance(batch, KVEventBatch):
            events: list[KVEvent] = []
            for event in batch.events:
                if not isinstance(event, BlockRemoved):
                    events.append(event)
                    continue
                for block_hash in event.block_hashes:  # one removal per copy held
                    held = (
                        self.index.copies(worker, block_hash, MEDIUM) if self._knows(worker) else 0
                    )
                    events.extend(BlockRemoved([block_hash], MEDIUM) for _ in range(max(held, 1)))
            batch = KVEventBatch(batch.ts, events, batch.data_parallel_rank)
        return super().apply(worker, seq, batch, namespace)

    def _knows(self, worker: Worker) -> bool:
        return worker in self.index.workers()


class KeepsRemoved(TwinIndex):
    """Removals are dropped before the index sees them."""

    rules = ("R-ROUTE-2", "R-ROUTE-4")

    def __init__(self) -> None:
        super().__init__("reference")

    def apply(
        self, worker: Worker, seq: int, batch: KVEventBatch | bytes, namespace: str | None
    ) -> str:
        if isinstance(batch, KVEventBatch):
            kept: list[KVEvent] = [e for e in batch.events if not isinstance(e, BlockRemoved)]
            batch = KVEventBatch(batch.ts, kept, batch.data_parallel_rank)
        return super().apply(worker, seq, batch, namespace)


class IgnoresNumbers(TwinIndex):
    """Each batch is applied as the next one expected, whatever its number."""

    rules = ("R-ROUTE-1", "R-ROUTE-2")

    def __init__(self) -> None:
        super().__init__("reference")
        self._next: dict[Worker, int] = {}

    def apply(
        self, worker: Worker, seq: int, batch: KVEventBatch | bytes, namespace: str | None
    ) -> str:
        expected = self._next.get(worker, 0)
        self._next[worker] = expected + 1
        return super().apply(worker, expected, batch, namespace)


class MergesRanks(TwinIndex):
    """Every rank of a worker filed under rank 0."""

    rules = ("R-ROUTE-3", "R-ROUTE-2", "R-ROUTE-4")

    def __init__(self) -> None:
        super().__init__("reference")
        self._next: dict[Worker, int] = {}

    def apply(
        self, worker: Worker, seq: int, batch: KVEventBatch | bytes, namespace: str | None
    ) -> str:
        merged = (worker[0], 0)
        expected = self._next.get(merged, 0)  # one stream now: numbered as it comes
        self._next[merged] = expected + 1
        return super().apply(merged, expected, batch, namespace)

    def depths(
        self, tokens: Sequence[int], namespace: str | None, hashes: Sequence[int]
    ) -> dict[Worker, int]:
        found = super().depths(tokens, namespace, hashes)
        for (worker, rank), depth in list(found.items()):
            if rank == 0 and worker == 1:
                found[(1, 1)] = depth  # both ranks answer with the merged entries
        return found


class ClearsFirstBlockOnly(TwinIndex):
    """``AllBlocksCleared`` takes away only the worker's first stored block."""

    rules = ("R-ROUTE-2",)

    def __init__(self) -> None:
        super().__init__("reference")
        self._first: dict[Worker, int] = {}

    def apply(
        self, worker: Worker, seq: int, batch: KVEventBatch | bytes, namespace: str | None
    ) -> str:
        if isinstance(batch, KVEventBatch):
            events: list[KVEvent] = []
            for event in batch.events:
                if isinstance(event, BlockStored) and event.block_hashes:
                    self._first.setdefault(worker, int(event.block_hashes[0]))
                if isinstance(event, AllBlocksCleared):
                    first = self._first.pop(worker, None)
                    if first is not None:
                        events.append(BlockRemoved([first], MEDIUM))
                    continue
                events.append(event)
            batch = KVEventBatch(batch.ts, events, batch.data_parallel_rank)
        return super().apply(worker, seq, batch, namespace)


#: Every index mutant, by name.
INDEX_MUTANTS: dict[str, Callable[[], TwinIndex]] = {
    cls.__name__: cls
    for cls in (ForgetsCopies, KeepsRemoved, IgnoresNumbers, MergesRanks, ClearsFirstBlockOnly)
}
