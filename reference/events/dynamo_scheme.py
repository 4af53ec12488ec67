"""NVIDIA Dynamo's block hashes, as its KV router computes them (``ai-dynamo-runtime`` 1.6.1).

Written from what Dynamo computes (its ``dynamo._core.compute_block_hash_for_seq``, run
against this module by ``tests/events/test_engines.py``, and its kv-router's sequence
hashing), so a router can name blocks the way Dynamo's does:

* a block's *local* hash is XXH3-64 of its tokens as little-endian uint32, seeded by
  the request's *salt*: 1337, plus XXH3-64 (seed 0) of the LoRA adapter's name when one
  is named, plus XXH3-64 (seed 1) of the cache namespace when one is named, modulo
  2**64 -- an empty name is no name.  Every block of a request has the same seed, so the
  namespace and the adapter reach every block's hash, not only the first's;
* a block's *sequence* hash names its whole prefix: the first block's is its local
  hash, a deeper one's XXH3-64 (seed 1337) of its parent's sequence hash and its own
  local hash as little-endian uint64s.

Dynamo's radix tree matches a request's local hashes block by block from its root (so
:func:`local_hashes` is what ``kachedb-radix hash --engine dynamo`` prints); its events
name blocks by sequence hash, which is what a flat index keys by.  An internal hash here
is the sequence hash and the salt seed, 8 little-endian bytes each, so the chain carries
the seed to every block.  Multimodal extra info and EAGLE's shifted blocks are not
modelled.  Cost: O(B) per block.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import xxhash

#: Dynamo's XXH3 seed (its ``XXH3_SEED``).
SEED = 1337
_LOW_64 = (1 << 64) - 1


def salt_seed(namespace: str | None = None, lora: str | None = None) -> int:
    """The seed of every local hash of a request with ``namespace`` and LoRA adapter
    ``lora`` (None or ``""``: none). O(len(names))."""
    seed = SEED
    if lora:
        seed += xxhash.xxh3_64_intdigest(lora.encode("utf-8"), seed=0)
    if namespace:
        seed += xxhash.xxh3_64_intdigest(namespace.encode("utf-8"), seed=1)
    return seed & _LOW_64


def local_hash(tokens: Sequence[int], seed: int = SEED) -> int:
    """The local hash of one block of ``tokens`` (uint32 each) under salt ``seed``. O(B)."""
    return xxhash.xxh3_64_intdigest(struct.pack(f"<{len(tokens)}I", *tokens), seed=seed)


def local_hashes(
    tokens: Sequence[int], block_size: int, namespace: str | None = None, lora: str | None = None
) -> list[int]:
    """The local hashes of every whole block of ``tokens``: what Dynamo's
    ``compute_block_hash_for_seq(tokens, block_size, lora_name=lora,
    cache_namespace=namespace)`` returns. O(len(tokens))."""
    seed = salt_seed(namespace, lora)
    return [
        local_hash(tokens[start : start + block_size], seed)
        for start in range(0, len(tokens) - block_size + 1, block_size)
    ]


def next_sequence_hash(parent: int, local: int) -> int:
    """The sequence hash of a block with local hash ``local`` after ``parent``'s. O(1)."""
    return xxhash.xxh3_64_intdigest(struct.pack("<QQ", parent, local), seed=SEED)


def block_hash(
    parent: bytes | None, tokens: Sequence[int], salt: str | None, lora: str | None = None
) -> bytes:
    """The internal hash of a block of ``tokens`` after ``parent`` (None: a path's first
    block, whose namespace ``salt`` and adapter ``lora`` set the seed of its path). O(B)."""
    if parent is None:
        seed = salt_seed(salt, lora)
        sequence = local_hash(tokens, seed)
    else:
        parent_sequence, seed = struct.unpack("<QQ", parent)
        sequence = next_sequence_hash(parent_sequence, local_hash(tokens, seed))
    return struct.pack("<QQ", sequence, seed)


def external(internal: bytes) -> int:
    """The sequence hash an internal hash carries (what Dynamo's events name). O(1)."""
    sequence: int = struct.unpack("<QQ", internal)[0]
    return sequence
