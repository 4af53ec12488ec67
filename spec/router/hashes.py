"""A request's block hashes, remembered: what keeps hashing off a router's hot path.

To route a request the router names its blocks as the workers do
(:meth:`~kachedb_radix.reference.events.BlockHasher.chain`, then ``external``): 64
blocks of ``sha256`` cost 70-200 us in Python, most of a decision (about 40 us in the C
twin's ``RouterIndex.hash_chain``, which :class:`ChainMemo` calls when the router's index
is the C twin's).  But a router sees
the same prefixes again and again -- that is why it routes by prefix: system prompts,
a conversation's earlier turns, an agent's tools -- and a block's hash depends only on
its parent's hash, its tokens and (for a path's first block) the namespace.  So
:class:`ChainMemo` keeps, for each block it has hashed, the pair ``(parent's entry,
the block's tokens as bytes)`` -> ``(entry, internal hash, external hash)``, and hashes
only from the first block it has not seen, continuing the chain from the last one it
has.  Answers are exactly ``hasher.chain`` (a property test compares them over every
scheme); only the time differs.

Bounded: two generations of at most :data:`GENERATION` entries each (one of them may
hold the blocks of one request more: a generation is checked after a request's
hashing); when the young one fills, the old one is dropped and the young one becomes
old (an entry found in the old one moves back to the young one), so a working set
smaller than a generation stays whole and memory never passes two generations and a
request (about 250 bytes an entry).

Cost: O(n) for n tokens (the bytes conversion and one dictionary lookup a block), plus
the hashing of the blocks not remembered.  Not thread-safe: one per thread (the router
hashes on its loop's thread).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kachedb_radix.reference.events import BlockHasher, ExternalHash
from kachedb_radix.reference.router import RouterIndex

#: Entries of one generation: 65,536 blocks is 1,024 different 64-block prompts.
GENERATION = 65_536

_Key = tuple[Any, bytes]  # (the namespace, or the parent's entry number; the tokens)
_Entry = tuple[int, Any, ExternalHash]  # (entry number, internal hash, external hash)


class Chains(Protocol):
    """What a :class:`ChainMemo` hashes with: a router index of either twin (its
    ``hash_chain``, its hasher and block size)."""

    hasher: BlockHasher
    block_size: int

    def hash_chain(
        self, tokens: object, namespace: str | None = None, parent: Any = None
    ) -> list[tuple[Any, ExternalHash]]: ...


class ChainMemo:
    """``hasher``'s external chains of token lists, remembered (the module docstring).

    Args:
        hasher: the scheme.
        generation: entries per generation (>= 1).
    """

    def __init__(
        self, hasher: BlockHasher, generation: int = GENERATION, *, index: Chains | None = None
    ) -> None:
        if index is not None and index.hasher is not hasher:
            raise ValueError("a ChainMemo hashes with its index's own hasher")
        self.hasher = hasher
        #: Each block size's chain hasher: the index's (the C twin's hashes in C), else
        #: the reference index's, made when a block size is first asked for.
        self._chains: dict[int, Callable[..., list[tuple[Any, ExternalHash]]]] = (
            {} if index is None else {index.block_size: index.hash_chain}
        )
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
        """Hash blocks ``start`` and on (the first ones not remembered) in one call of the
        index's ``hash_chain``, from the last remembered block (or from the root, the
        namespace salting the first block), remembering each."""
        chain = self._chains.get(block_size)
        if chain is None:
            chain = self._chains[block_size] = RouterIndex(self.hasher, block_size).hash_chain
        width = 4 * block_size
        tokens = array("I", data[start * width : blocks * width])
        pairs = chain(tokens, namespace, None if parent is None else parent[1])
        # One pass, the young generation's dictionary held in a local: a block costs a
        # slice, two tuples and an insert (the generation is checked once, after).
        young, number = self._young, self._next
        previous: Any = namespace if parent is None else parent[0]
        at = start * width
        for internal, external in pairs:
            young[previous, data[at : at + width]] = (number, internal, external)
            hashes.append(external)
            previous, number, at = number, number + 1, at + width
        self._next = number
        self.misses += blocks - start
        if len(young) >= self.generation:
            self._old, self._young = young, {}
        return hashes

    def _keep(self, key: _Key, entry: _Entry) -> None:
        young = self._young
        young[key] = entry
        if len(young) >= self.generation:
            self._old, self._young = young, {}
