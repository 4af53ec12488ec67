"""A request's block hashes, remembered: what keeps hashing off a router's hot path.

To route a request the router names its blocks as the workers do
(:meth:`~kachedb_radix.reference.events.BlockHasher.chain`, then ``external``): 64
blocks of ``sha256`` cost 70-200 us in Python, most of a decision.  But a router sees
the same prefixes again and again -- that is why it routes by prefix: system prompts,
a conversation's earlier turns, an agent's tools -- and a block's hash depends only on
its parent's hash, its tokens and (for a path's first block) the namespace.  So
:class:`ChainMemo` keeps, for each block it has hashed, the pair ``(parent's entry,
the block's tokens as bytes)`` -> ``(entry, internal hash, external hash)``, and hashes
only from the first block it has not seen, continuing the chain from the last one it
has.  Answers are exactly ``hasher.chain`` (a property test compares them over every
scheme); only the time differs.

Bounded: two generations of at most :data:`GENERATION` entries each; when the young
one fills, the old one is dropped and the young one becomes old (an entry found in the
old one moves back to the young one), so a working set smaller than a generation stays
whole and memory never passes two generations (about 250 bytes an entry).

Cost: O(n) for n tokens (the bytes conversion and one dictionary lookup a block), plus
the hashing of the blocks not remembered.  Not thread-safe: one per thread (the router
hashes on its loop's thread).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

from kachedb_radix.reference.events import BlockHasher, ExternalHash

#: Entries of one generation: 65,536 blocks is 1,024 different 64-block prompts.
GENERATION = 65_536

_Key = tuple[Any, bytes]  # (the namespace, or the parent's entry number; the tokens)
_Entry = tuple[int, Any, ExternalHash]  # (entry number, internal hash, external hash)


class ChainMemo:
    """``hasher``'s external chains of token lists, remembered (the module docstring).

    Args:
        hasher: the scheme.
        generation: entries per generation (>= 1).
    """

    def __init__(self, hasher: BlockHasher, generation: int = GENERATION) -> None:
        self.hasher = hasher
        self.generation = max(1, generation)
        self._young: dict[_Key, _Entry] = {}
        self._old: dict[_Key, _Entry] = {}
        self._next = 0
        #: Blocks answered from memory, and blocks hashed.
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        """Entries held (both generations). O(1)."""
        return len(self._young) + len(self._old)

    def external_chain(
        self, tokens: Sequence[int], block_size: int, namespace: str | None = None
    ) -> list[ExternalHash]:
        """``[hasher.external(h) for h in hasher.chain(tokens, block_size, namespace)]``,
        under the hasher's own salt rule (``hasher.salt``: ``""`` and None share one
        chain where the engine reads ``""`` as no salt; Dynamo's seed, carried in its
        internal hashes, reaches every block). ``tokens`` must be token ids already
        checked (ints in [0, 2**32)). O(n).
        """
        blocks = len(tokens) // block_size
        if blocks == 0:
            return []
        namespace = self.hasher.salt(namespace)  # "" is no salt where the engine says so
        data = array("I", tokens[: blocks * block_size]).tobytes()
        width = 4 * block_size
        young, old = self._young, self._old
        hashes: list[ExternalHash] = []
        parent: _Entry | None = None
        for number in range(blocks):
            key: _Key = (
                namespace if parent is None else parent[0],
                data[number * width : (number + 1) * width],
            )
            entry = young.get(key)
            if entry is None:
                entry = old.get(key)
                if entry is None:
                    self.hits += number
                    return self._hash_from(
                        hashes, parent, data, number, blocks, block_size, namespace
                    )
                self._keep(key, entry)
            hashes.append(entry[2])
            parent = entry
        self.hits += blocks
        return hashes

    def _hash_from(
        self,
        hashes: list[ExternalHash],
        parent: _Entry | None,
        data: bytes,
        start: int,
        blocks: int,
        block_size: int,
        namespace: str | None,
    ) -> list[ExternalHash]:
        """Hash blocks ``start`` and on (the first ones not remembered), remembering
        each; as ``BlockHasher.chain`` does: the namespace salts a path's first block."""
        hasher = self.hasher
        width = 4 * block_size
        tokens = array("I", data)
        for number in range(start, blocks):
            block = tokens[number * block_size : (number + 1) * block_size].tolist()
            internal = hasher.block_hash(
                None if parent is None else parent[1], block, namespace if number == 0 else None
            )
            entry = (self._next, internal, hasher.external(internal))
            self._next += 1
            key: _Key = (
                namespace if parent is None else parent[0],
                data[number * width : (number + 1) * width],
            )
            self._keep(key, entry)
            hashes.append(entry[2])
            parent = entry
        self.misses += blocks - start
        return hashes

    def _keep(self, key: _Key, entry: _Entry) -> None:
        young = self._young
        young[key] = entry
        if len(young) >= self.generation:
            self._old, self._young = young, {}
