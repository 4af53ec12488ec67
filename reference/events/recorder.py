"""What a tree emits: one batch of KV events per operation that changed its blocks.

The rules (R-EVENT-1..5), as the tree follows them through :class:`EventRecorder`:

* events describe **blocks**, never nodes: a split, a reuse, a match, a release, a
  pin, a snapshot or a reader emits nothing, because no block became cached or
  stopped being cached (R-EVENT-1);
* an insert that caches new blocks emits one ``BlockStored`` for them -- they are one
  run at the end of one path -- with its parent's hash, their tokens, the block size
  and, for a first block in a named namespace, the namespace as its extra key
  (R-EVENT-2, R-EVENT-3);
* an eviction emits one ``BlockRemoved`` with the evicted blocks' hashes in eviction
  order, when the blocks stop being matchable -- not when they leave the quarantine,
  which only decides when their ids may be reused (R-EVENT-4);
* clearing the whole cache (``reset_prefix_cache``) emits one ``AllBlocksCleared`` and
  no ``BlockRemoved`` (R-EVENT-7);
* the events of one operation form one batch, in the order they happened (an insert
  that evicts: its ``BlockRemoved`` first), stamped with the tree's clock after the
  operation; a call that fails changes nothing and emits nothing, but an eviction
  that freed blocks before its chooser raised emits them (R-EVENT-5).

Invariant (:meth:`EventRecorder.check`): the recorder knows a hash for exactly the
cached blocks, and each is the hash its path gives it -- so the stream so far, applied
to an empty index, yields exactly the tree's blocks (:func:`dump_hashes`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..errors import InvariantViolation
from .hashing import BlockHasher, ExternalHash, Hash, event_extra_keys
from .schema import MEDIUM_GPU, AllBlocksCleared, BlockRemoved, BlockStored, KVEvent, KVEventBatch


class EventRecorder:
    """A tree's event log: the hash of every cached block, and the batches not yet taken.

    Args:
        hasher: how blocks are named.
        block_size: the tree's B.
        medium: the ``medium`` every event carries (``"GPU"``).

    The batches wait until :meth:`take` (unbounded: a publisher takes them after every
    operation).
    """

    def __init__(self, hasher: BlockHasher, block_size: int, medium: str = MEDIUM_GPU) -> None:
        self.hasher = hasher
        self.block_size = block_size
        self.medium = medium
        self._hashes: dict[int, Hash] = {}
        self._pending: list[KVEvent] = []
        self._batches: list[KVEventBatch] = []

    def stored(
        self, namespace: str | None, tokens: Sequence[int], blocks: Sequence[int], first: int
    ) -> None:
        """Record that ``blocks[first:]``, the tail of the path ``blocks`` of ``tokens``
        in ``namespace``, became cached. O(B per new block)."""
        size = self.block_size
        parent = blocks[first - 1] if first > 0 else None
        self.stored_run(
            namespace, parent, tokens[first * size : len(blocks) * size], blocks[first:]
        )

    def stored_run(
        self,
        namespace: str | None,
        parent: int | None,
        tokens: Sequence[int],
        blocks: Sequence[int],
    ) -> None:
        """Record that ``blocks``, holding ``tokens`` (B per block), became cached below
        the cached block ``parent`` (None: at the root of ``namespace``, so the first
        block carries the namespace as its extra key). O(B per new block).

        The C twin logs its stores in this form and names them here when its events
        are taken (``accel/events.c``)."""
        size, hasher = self.block_size, self.hasher
        before = None if parent is None else self._hashes[parent]
        chained = before
        internal: list[Hash] = []
        extras: list[tuple[object, ...] | None] = []
        for index in range(len(blocks)):
            salt = namespace if parent is None and index == 0 else None
            chained = hasher.block_hash(chained, tokens[index * size : (index + 1) * size], salt)
            internal.append(chained)
            extras.append(event_extra_keys(salt))
        event = BlockStored(
            block_hashes=[hasher.external(h) for h in internal],
            parent_block_hash=None if before is None else hasher.external(before),
            token_ids=list(tokens[: len(blocks) * size]),
            block_size=size,
            lora_id=None,
            medium=self.medium,
            lora_name=None,
            extra_keys=extras if any(e is not None for e in extras) else None,
        )
        # The hashes first, the event last: a failure part way (a MemoryError) leaves
        # only hashes that a second call sets again to the same values, so the C twin
        # can name the same record again and nothing is recorded twice.
        self._hashes.update(zip(blocks, internal, strict=True))
        self._pending.append(event)

    def removed(self, blocks: Sequence[int]) -> None:
        """Record that ``blocks`` stopped being cached, in that order. O(len(blocks))."""
        external = self.hasher.external
        event = BlockRemoved([external(self._hashes[block]) for block in blocks], self.medium)
        doomed = iter(blocks)  # made before the append: the loop below allocates nothing
        self._pending.append(event)  # a failure here changes nothing
        for block in doomed:  # deleting from a dict never fails part way
            del self._hashes[block]

    def cleared(self) -> None:
        """Record that every cached block stopped being cached at once (R-EVENT-7): one
        ``AllBlocksCleared``, every hash forgotten. O(cached blocks)."""
        event = AllBlocksCleared()  # made first: a failure here changes nothing
        self._pending.append(event)
        self._hashes.clear()

    def flush(self, clock: int) -> None:
        """Close the operation: its events, if any, become one batch at ``clock``. O(1)."""
        if self._pending:
            fresh: list[KVEvent] = []  # made first: nothing below allocates after the append
            self._batches.append(KVEventBatch(float(clock), self._pending))
            self._pending = fresh

    def take(self) -> list[KVEventBatch]:
        """The batches since the last call, oldest first. O(1)."""
        batches, self._batches = self._batches, []
        return batches

    def hash_of(self, block: int) -> ExternalHash | None:
        """The external hash of cached block ``block``, or None. O(1)."""
        internal = self._hashes.get(block)
        return None if internal is None else self.hasher.external(internal)

    def copy(self) -> EventRecorder:
        """An independent copy (for a tree's clone). O(cached blocks + waiting batches)."""
        twin = EventRecorder(self.hasher, self.block_size, self.medium)
        twin._hashes = dict(self._hashes)
        twin._pending = list(self._pending)
        twin._batches = list(self._batches)
        return twin

    def check(self, dump: Mapping[str, Any]) -> None:
        """Assert the invariant against the tree's canonical dump. O(cached tokens).

        Raises:
            InvariantViolation: a cached block without its hash, a hash for a block
                not cached, a hash its path does not give, or an operation left open.
        """
        if self._pending:
            raise InvariantViolation("R-EVENT-5: events recorded outside an operation")
        expected = {block: internal for block, internal in _walk_hashes(dump, self.hasher)}
        if expected.keys() != self._hashes.keys():
            missing = sorted(expected.keys() - self._hashes.keys())
            extra = sorted(self._hashes.keys() - expected.keys())
            raise InvariantViolation(
                f"R-EVENT-1: hashes known for the wrong blocks (cached without one: "
                f"{missing}; known but not cached: {extra})"
            )
        for block, internal in expected.items():
            if self._hashes[block] != internal:
                raise InvariantViolation(
                    f"R-EVENT-2: block {block} has a hash its path does not give"
                )


def _walk_hashes(dump: Mapping[str, Any], hasher: BlockHasher) -> Iterator[tuple[int, Hash]]:
    size = dump["block_size"]
    for space in dump["namespaces"]:
        namespace = space["namespace"]
        stack: list[tuple[Mapping[str, Any], Hash | None, bool]] = [
            (child, None, True) for child in space["children"]
        ]
        while stack:
            node, parent, at_root = stack.pop()
            tokens = node["tokens"]
            for index, block in enumerate(node["blocks"]):
                first = at_root and index == 0
                chunk = tokens[index * size : (index + 1) * size]
                parent = hasher.block_hash(parent, chunk, namespace if first else None)
                yield block, parent
            stack.extend((child, parent, False) for child in node["children"])


def dump_hashes(dump: Mapping[str, Any], hasher: BlockHasher) -> dict[ExternalHash, int]:
    """Every cached block of a canonical dump (any implementation's) by its external
    hash: what an index fed the tree's whole event stream must hold. O(cached tokens)."""
    return {hasher.external(internal): block for block, internal in _walk_hashes(dump, hasher)}
