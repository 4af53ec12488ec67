"""The disk tier's persisted index: what each disk block's metadata says, and how a
restarted process rebuilds the disk tier's tree from it (R-TIER-10).

Each block the disk tier holds is one record of a
:class:`~kachedb_radix.reference.tiers.disk.DiskBlockStore`; its metadata names the
block, so that the records alone are the index (nothing else is written, so nothing
else can disagree with them):

====== ======= ==========================================================
offset size    field
====== ======= ==========================================================
0      1       format version (1)
1      1       flags: bit 0 set when the block has a namespace
2      2       namespace length in bytes (UTF-8), little-endian
4      16      the chained hash of the block before it (zeros at a root)
20     4 * B   the block's B tokens, uint32 little-endian
20+4B  n       the namespace, UTF-8
====== ======= ==========================================================

A block's *chained hash* is XXH3-128 of its parent's chained hash, its namespace and its
tokens: it names the whole prefix, so a child finds its parent by it, and a record whose
parent is gone (dropped as torn, or never written) is an orphan. Records are linked by
these hashes at open; the content hash of each payload is the store's own business.

:func:`rebuild` turns the valid, linked records into paths (root first, each block's
slot), oldest leaf first, and names every record it could not use and why.
Cost: O(records * B) to decode and link, O(records * depth) to spell the paths.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

import xxhash

FORMAT = 1
#: How a record names its block (this module's chained hash and metadata format): the
#: ``hash_scheme`` a disk tier's file header records (R-TIER-11).
HASH_SCHEME = "kachedb-radix chained xxh3-128, metadata v1"
HASH_BYTES = 16
ROOT = bytes(HASH_BYTES)
_HEAD = struct.Struct("<BBH16s")


def meta_size(block_size: int, namespace_bytes: int) -> int:
    """The metadata bytes a block of ``block_size`` tokens in a namespace of up to
    ``namespace_bytes`` UTF-8 bytes needs. O(1)."""
    return _HEAD.size + 4 * block_size + namespace_bytes


def chained_hash(parent: bytes, namespace: str | None, tokens: Iterable[int]) -> bytes:
    """The chained hash of a block: XXH3-128 over its parent's, its namespace and its
    tokens. O(B)."""
    digest = xxhash.xxh3_128(parent)
    if namespace is None:
        digest.update(b"\x00")
    else:
        encoded = namespace.encode()
        digest.update(b"\x01" + len(encoded).to_bytes(4, "little") + encoded)
    values = tuple(tokens)
    digest.update(struct.pack(f"<{len(values)}I", *values))
    return digest.digest()


def encode_meta(namespace: str | None, parent: bytes, tokens: tuple[int, ...]) -> bytes:
    """A block's metadata record (the table above). O(B)."""
    encoded = b"" if namespace is None else namespace.encode()
    flags = 0 if namespace is None else 1
    head = _HEAD.pack(FORMAT, flags, len(encoded), parent)
    return head + struct.pack(f"<{len(tokens)}I", *tokens) + encoded


@dataclass(frozen=True, slots=True)
class DiskKey:
    """A decoded metadata record."""

    namespace: str | None
    parent: bytes
    tokens: tuple[int, ...]

    @property
    def own(self) -> bytes:
        """This block's chained hash. O(B)."""
        return chained_hash(self.parent, self.namespace, self.tokens)


def decode_meta(raw: bytes, block_size: int) -> DiskKey | str:
    """The record ``raw`` decoded, or why it cannot be. O(B)."""
    if len(raw) < _HEAD.size + 4 * block_size:
        return f"metadata of {len(raw)} bytes is too short for a block of {block_size} tokens"
    version, flags, length, parent = _HEAD.unpack_from(raw)
    if version != FORMAT:
        return f"metadata format {version}, expected {FORMAT}"
    if flags not in (0, 1) or (flags == 0 and length):
        return f"bad metadata flags {flags} for a namespace of {length} bytes"
    end = _HEAD.size + 4 * block_size
    if len(raw) != end + length:
        return f"metadata of {len(raw)} bytes, its fields say {end + length}"
    tokens = struct.unpack_from(f"<{block_size}I", raw, _HEAD.size)
    namespace: str | None = None
    if flags:
        try:
            namespace = raw[end:].decode()
        except UnicodeDecodeError:
            return "the namespace is not UTF-8"
    return DiskKey(namespace, parent, tokens)


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """What :func:`rebuild` found.

    Attributes:
        paths: ``(namespace, tokens, slots)`` per leaf path, root first, oldest leaf first.
        unusable: ``(slot, why)`` of every record left out (undecodable, a duplicate, an
            orphan); the caller leaves them in the file until it needs their slots
            (R-TIER-12).
    """

    paths: list[tuple[str | None, list[int], list[int]]]
    unusable: list[tuple[int, str]]


def rebuild(records: Iterable[tuple[int, int, bytes]], block_size: int) -> Rebuilt:
    """Link ``(slot, seq, meta)`` records into paths (see the module docstring).

    A child's namespace must be its parent's (the chained hash covers it, so a mismatch
    cannot link). O(records * depth * B).
    """
    unusable: list[tuple[int, str]] = []
    keys: dict[int, DiskKey] = {}
    seqs: dict[int, int] = {}
    by_hash: dict[bytes, int] = {}
    for slot, seq, meta in records:
        key = decode_meta(meta, block_size)
        if isinstance(key, str):
            unusable.append((slot, key))
            continue
        own = key.own
        if own in by_hash:
            unusable.append((slot, f"the same block as slot {by_hash[own]}"))
            continue
        by_hash[own] = slot
        keys[slot] = key
        seqs[slot] = seq
    children: dict[int | None, list[int]] = {}
    for slot, key in keys.items():
        parent = None if key.parent == ROOT else by_hash.get(key.parent, -1)
        if parent == -1:
            continue
        if parent is not None and keys[parent].namespace != key.namespace:
            continue
        children.setdefault(parent, []).append(slot)
    reached: set[int] = set()
    leaves: list[tuple[int, list[int]]] = []  # (seq, slots root first)
    stack: list[tuple[int, list[int]]] = [(slot, [slot]) for slot in children.get(None, [])]
    while stack:
        slot, chain = stack.pop()
        reached.add(slot)
        below = children.get(slot, [])
        if not below:
            leaves.append((seqs[slot], chain))
        stack.extend((child, [*chain, child]) for child in below)
    unusable.extend(
        (slot, "an orphan: the block before it is not on disk")
        for slot in sorted(keys)
        if slot not in reached
    )
    leaves.sort()
    paths = [
        (keys[chain[0]].namespace, [token for slot in chain for token in keys[slot].tokens], chain)
        for _, chain in leaves
    ]
    return Rebuilt(paths, unusable)
