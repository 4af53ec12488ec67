"""Planted bugs of the KV event stream (R-EVENT-*): each is the reference with one event
recorder step wrong, run at the opt-in ``events`` level.

Each swaps the tree's recorder for a subclass of the reference's own
(:class:`kachedb_radix.reference.events.EventRecorder`) that differs in one step; the
tree itself, and the recorder module, are untouched, so the oracle beside them stays
correct.  The bugs are the ones routers have met in engines' streams: evictions never
reported, a store chained to the wrong parent after a split, the namespace left out of
the hashes (tenants sharing prefixes in a router), events reported out of order, a
store repeated (which wiped a worker's entries in one router).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kachedb_radix.reference.events import BlockHasher, BlockStored, EventRecorder, KVEventBatch
from kachedb_radix.reference.events.schema import KVEvent
from kachedb_radix.reference.node import Node

from .base import MutantTree, mutant


class _EventMutant(MutantTree):
    """A mutant whose recorder is ``RECORDER`` (when it emits events at all)."""

    RECORDER: type[EventRecorder] = EventRecorder

    def __init__(self, num_blocks: int, block_size: int = 16, **options: object) -> None:
        super().__init__(num_blocks, block_size, **options)  # type: ignore[arg-type]
        if self._events is not None:
            self._events = self.RECORDER(self._events.hasher, block_size)


class _Forgetful(EventRecorder):
    """Records no removal."""

    def removed(self, blocks: Sequence[int]) -> None:
        for block in blocks:
            self._hashes.pop(block, None)


@mutant("events_no_removal", "R-EVENT-4", "R-EVENT-1", events=True)
class EventsNoRemoval(_EventMutant):
    """Evictions emit no BlockRemoved: a router keeps sending requests for blocks gone."""

    RECORDER = _Forgetful


class _Unsalted(EventRecorder):
    """Leaves the namespace out of every hash."""

    def stored_run(
        self,
        namespace: str | None,
        parent: int | None,
        tokens: Sequence[int],
        blocks: Sequence[int],
    ) -> None:
        super().stored_run(None, parent, tokens, blocks)


@mutant("events_salt_left_out", "R-EVENT-2", events=True)
class EventsSaltLeftOut(_EventMutant):
    """The namespace is not hashed in: two tenants' prefixes get one name in a router."""

    RECORDER = _Unsalted


class _StaleParent(EventRecorder):
    """Chains the next store to ``stale`` (set by a split) instead of its real parent."""

    stale: int | None = None

    def stored_run(
        self,
        namespace: str | None,
        parent: int | None,
        tokens: Sequence[int],
        blocks: Sequence[int],
    ) -> None:
        stale, self.stale = self.stale, None
        wrong = stale if parent is not None and stale in self._hashes else parent
        super().stored_run(namespace, wrong, tokens, blocks)


@mutant("events_wrong_parent_after_split", "R-EVENT-3", "R-EVENT-2", events=True)
class EventsWrongParentAfterSplit(_EventMutant):
    """After a split, new blocks are chained to the old edge's last block (the parent the
    node had before it was cut) instead of the block before them."""

    RECORDER = _StaleParent

    def _split(self, node: Node, at: int) -> Node:
        recorder = self._events
        if isinstance(recorder, _StaleParent):
            recorder.stale = node.blocks[-1]
        return super()._split(node, at)


class _Late(EventRecorder):
    """Holds each operation's stores back into the next operation's batch, after its
    removals."""

    held: list[KVEvent]

    def __init__(self, hasher: BlockHasher, block_size: int, medium: str = "GPU") -> None:
        super().__init__(hasher, block_size, medium)
        self.held = []

    def flush(self, clock: int) -> None:
        stores: list[KVEvent] = [e for e in self._pending if isinstance(e, BlockStored)]
        others = [event for event in self._pending if not isinstance(event, BlockStored)]
        events = others + self.held
        self.held = stores
        if events:
            self._batches.append(KVEventBatch(float(clock), events))
        self._pending = []


@mutant("events_removal_before_store", "R-EVENT-5", "R-EVENT-4", events=True)
class EventsRemovalBeforeStore(_EventMutant):
    """A store is emitted one operation late, after the next operation's removals: a
    block can be removed before the store it undoes."""

    RECORDER = _Late


class _Repeating(EventRecorder):
    """Can report blocks cached already as stored again."""

    def again(self, namespace: str | None, tokens: Sequence[int], blocks: Sequence[int]) -> None:
        """A store of ``blocks``, all cached already (hashes unchanged)."""
        if not blocks:
            return
        size = self.block_size
        self._pending.append(
            BlockStored(
                block_hashes=[self.hasher.external(self._hashes[b]) for b in blocks],
                parent_block_hash=None,
                token_ids=list(tokens[: len(blocks) * size]),
                block_size=size,
                lora_id=None,
                medium=self.medium,
                lora_name=None,
            )
        )


@mutant("events_store_repeated", "R-EVENT-3", "R-EVENT-5", "R-ROUTE-3", events=True)
class EventsStoreRepeated(_EventMutant):
    """An insert that caches nothing new reports its whole path stored again: a router
    that counts stores would count these blocks twice."""

    RECORDER = _Repeating

    def _insert(
        self, token_list: list[int], namespace: str | None, pin: bool, retention: Any
    ) -> Any:
        result = super()._insert(token_list, namespace, pin, retention)
        recorder = self._events
        if isinstance(recorder, _Repeating) and not result.allocated and result.reused:
            recorder.again(namespace, token_list, list(result.blocks))
        return result
