"""A flat prefix index: the peer baseline the benchmarks compare the radix tree with.

This is the design vLLM publishes for automatic prefix caching, written here from
that description (no code copied): every full block of a sequence gets a hash chained
over its prefix, ``h_i = hash((h_{i-1}, tokens of block i))``, and one dict maps each
hash to the physical block holding that prefix. A lookup hashes the blocks of the
prompt one after another and probes the dict, stopping at the first miss. There is no
tree: the chain in the hash is what makes "same block, same prefix" true.

Differences from vLLM, on purpose, so the baseline measures the index and nothing else:

* the hash is Python's built-in ``hash`` of the ``(parent_hash, block_tuple)`` pair;
  vLLM uses sha256 over a serialisation of the same pair, which is collision-resistant
  and much slower (about 210 us for 1,024 tokens on this machine, see the brief). The
  built-in hash is 64-bit and not keyed for tuples of ints, so collisions can be
  constructed: a collision here returns a wrong block. It is a cost baseline, not a
  design to deploy;
* no eviction, pinning, LRU queue or block pool: block ids are handed out in
  insertion order and never freed, so ``match`` is a pure lookup;
* arrays are converted to a list of ints (as the reference tree does) but token values
  are not range-checked.

Cost: ``match`` and ``insert`` are O(n) for n tokens: one tuple, one hash and one dict
probe per block.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The hash of the empty prefix (vLLM seeds its chain with a random value; a constant
#: keeps runs reproducible).
ROOT_HASH = 0x6B61636865444221


@dataclass(frozen=True, slots=True)
class FlatMatch:
    """What a flat-index lookup found: tokens matched (a multiple of B) and their blocks."""

    length: int
    blocks: tuple[int, ...]


class FlatIndex:
    """A dict from prefix-chained block hash to block id.

    Args:
        block_size: tokens per block B, an int >= 1.

    Raises:
        ValueError: ``block_size`` is not an int >= 1.
    """

    implementation = "flat-hash"

    def __init__(self, block_size: int = 16) -> None:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
        self._block_size = block_size
        self._table: dict[int, int] = {}

    @property
    def block_size(self) -> int:
        """Tokens per block. O(1)."""
        return self._block_size

    def __len__(self) -> int:
        """Number of cached blocks. O(1)."""
        return len(self._table)

    def match(self, tokens: object, namespace: str | None = None) -> FlatMatch:
        """The longest cached prefix of ``tokens`` made of whole blocks.

        Hashes block after block and stops at the first block whose chained hash is
        not in the table. O(n) for n tokens.
        """
        values = _as_list(tokens)
        size = self._block_size
        table = self._table
        chained = _root(namespace)
        found: list[int] = []
        for start in range(0, len(values) - size + 1, size):
            chained = hash((chained, tuple(values[start : start + size])))
            block = table.get(chained)
            if block is None:
                break
            found.append(block)
        return FlatMatch(len(found) * size, tuple(found))

    def insert(self, tokens: object, namespace: str | None = None) -> FlatMatch:
        """Cache every whole block of ``tokens``; returns the blocks of the whole path.

        Blocks already present are reused; each new one gets the next id. O(n).
        """
        values = _as_list(tokens)
        size = self._block_size
        table = self._table
        chained = _root(namespace)
        path: list[int] = []
        for start in range(0, len(values) - size + 1, size):
            chained = hash((chained, tuple(values[start : start + size])))
            block = table.get(chained)
            if block is None:
                block = table[chained] = len(table)
            path.append(block)
        return FlatMatch(len(path) * size, tuple(path))


def _root(namespace: str | None) -> int:
    # A namespace enters the first hash, as vLLM's cache_salt does.
    return ROOT_HASH if namespace is None else hash((ROOT_HASH, namespace))


def _as_list(tokens: object) -> list[int]:
    if isinstance(tokens, list):
        return tokens
    if isinstance(tokens, tuple):
        return list(tokens)
    with memoryview(tokens) as view:  # type: ignore[arg-type]
        values: list[int] = view.tolist()
    return values
