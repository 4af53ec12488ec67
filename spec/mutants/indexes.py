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

from collections.abc import Sequence

from kachedb_radix.reference.events import BlockRemoved, BlockStored, KVEventBatch
from kachedb_radix.reference.events.schema import AllBlocksCleared, KVEvent

from ..conform.index import TwinIndex
from ..conform.index.stream import MEDIUM, Worker


class _Planted(TwinIndex):
    """The reference index behind one planted bug: each batch's events rewritten by
    :meth:`events` and filed under the worker and number :meth:`filed` gives."""

    rules: tuple[str, ...] = ()

    def __init__(self) -> None:
        super().__init__("reference")

    def apply(
        self, worker: Worker, seq: int, batch: KVEventBatch | bytes, namespace: str | None
    ) -> str:
        if isinstance(batch, KVEventBatch):
            batch = KVEventBatch(
                batch.ts, self.events(worker, batch.events), batch.data_parallel_rank
            )
        worker, seq = self.filed(worker, seq)
        return super().apply(worker, seq, batch, namespace)

    def events(self, worker: Worker, events: list[KVEvent]) -> list[KVEvent]:
        """The events the index is given instead (the bug's; default: the same)."""
        return events

    def filed(self, worker: Worker, seq: int) -> tuple[Worker, int]:
        """The worker and number the batch is filed under (default: its own)."""
        return worker, seq


class ForgetsCopies(_Planted):
    """A removal takes away every copy of each block it names."""

    rules = ("R-ROUTE-5",)

    def events(self, worker: Worker, events: list[KVEvent]) -> list[KVEvent]:
        found: list[KVEvent] = []
        known = worker in self.index.workers()
        for event in events:
            if not isinstance(event, BlockRemoved):
                found.append(event)
                continue
            for block_hash in event.block_hashes:  # one removal per copy held
                held = self.index.copies(worker, block_hash, MEDIUM) if known else 0
                found.extend(BlockRemoved([block_hash], MEDIUM) for _ in range(max(held, 1)))
        return found


class KeepsRemoved(_Planted):
    """Removals are dropped before the index sees them."""

    rules = ("R-ROUTE-2", "R-ROUTE-4")

    def events(self, worker: Worker, events: list[KVEvent]) -> list[KVEvent]:
        return [event for event in events if not isinstance(event, BlockRemoved)]


class IgnoresNumbers(_Planted):
    """Each batch is applied as the next one expected, whatever its number."""

    rules: tuple[str, ...] = ("R-ROUTE-1", "R-ROUTE-2")

    def __init__(self) -> None:
        super().__init__()
        self._next: dict[Worker, int] = {}

    def filed(self, worker: Worker, seq: int) -> tuple[Worker, int]:
        expected = self._next.get(worker, 0)
        self._next[worker] = expected + 1
        return worker, expected


class MergesRanks(IgnoresNumbers):
    """Every rank of a worker filed under rank 0 (one stream, numbered as it comes)."""

    rules = ("R-ROUTE-3", "R-ROUTE-2", "R-ROUTE-4")

    def filed(self, worker: Worker, seq: int) -> tuple[Worker, int]:
        return super().filed((worker[0], 0), seq)

    def depths(
        self, tokens: Sequence[int], namespace: str | None, hashes: Sequence[int]
    ) -> dict[Worker, int]:
        found = super().depths(tokens, namespace, hashes)
        for (worker, rank), depth in list(found.items()):
            if rank == 0 and worker == 1:
                found[(1, 1)] = depth  # both ranks answer with the merged entries
        return found


class ClearsFirstBlockOnly(_Planted):
    """``AllBlocksCleared`` takes away only the worker's first stored block."""

    rules = ("R-ROUTE-2",)

    def __init__(self) -> None:
        super().__init__()
        self._first: dict[Worker, int] = {}

    def events(self, worker: Worker, events: list[KVEvent]) -> list[KVEvent]:
        found: list[KVEvent] = []
        for event in events:
            if isinstance(event, BlockStored) and event.block_hashes:
                self._first.setdefault(worker, int(event.block_hashes[0]))
            if isinstance(event, AllBlocksCleared):
                first = self._first.pop(worker, None)
                if first is not None:
                    found.append(BlockRemoved([first], MEDIUM))
                continue
            found.append(event)
        return found


#: Every index mutant, by name.
INDEX_MUTANTS: dict[str, type[_Planted]] = {
    cls.__name__: cls
    for cls in (ForgetsCopies, KeepsRemoved, IgnoresNumbers, MergesRanks, ClearsFirstBlockOnly)
}
