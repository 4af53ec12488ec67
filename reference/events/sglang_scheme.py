"""SGLang 0.5.23's block hashes, as its ``RadixCache`` names blocks in its KV events.

Written from what SGLang's code computes (``mem_cache/cpp_utils/hash_binding.cpp``,
``mem_cache/utils.py``, ``disaggregation/kv_events.py``), so the kit can check an
SGLang event stream against the blocks its cache holds (``conform sglang --events``):

* a page's digest is SHA-256 of its parent page's 32-byte digest (none for a path's
  first page) followed by its tokens as little-endian uint32 -- the namespace (SGLang's
  ``extra_key``) does not enter the chain;
* the event hash is the digest's first 8 bytes as a signed big-endian int64 (SGLang's
  ``hash_str_to_int64`` of the hex digest);
* in Dynamo's event format (``dynamo_kv_event_format``), a named namespace's pages are
  hashed once more: the first 8 bytes of SHA-256 of the namespace's seed and the int64
  as 8 signed big-endian bytes, the seed SHA-256 of ``b"sglang-kv-event-namespace-v1"``,
  ``b"\\x01"``, the name's UTF-8 length as 8 little-endian bytes, the name, and
  ``b"\\x00"`` (no cache salt).

An internal hash here is the digest followed by the seed of its path's namespace (empty
when none applies), so the chain carries the namespace to every page without hashing it
in.  Tokens are uint32 here, so SGLang's wide-token pages (a token above 2**32 - 1) never
occur.  Cost: O(B) per block.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

#: Dynamo's namespace tag in SGLang 0.5.23 (``kv_events._NAMESPACE_SEED_TAG``).
NAMESPACE_TAG = b"sglang-kv-event-namespace-v1"
DIGEST = 32


def namespace_seed(name: str) -> bytes:
    """The seed of a named namespace in Dynamo's format (an extra key, no cache salt)."""
    encoded = name.encode("utf-8")
    return hashlib.sha256(
        NAMESPACE_TAG + b"\x01" + len(encoded).to_bytes(8, "little") + encoded + b"\x00"
    ).digest()


def block_hash(
    parent: bytes | None, tokens: Sequence[int], salt: str | None, namespaced: bool
) -> bytes:
    """The internal hash of a page of ``tokens`` after ``parent`` (None: a path's first
    page, salted by ``salt``, its namespace). O(B)."""
    if parent is None:
        prior, seed = b"", namespace_seed(salt) if namespaced and salt is not None else b""
    else:
        prior, seed = parent[:DIGEST], parent[DIGEST:]
    digest = hashlib.sha256(prior + struct.pack(f"<{len(tokens)}I", *tokens)).digest()
    return digest + seed


def external(internal: bytes) -> int:
    """The hash SGLang's events carry for an internal hash. O(1)."""
    value = int.from_bytes(internal[:8], "big", signed=True)
    seed = internal[DIGEST:]
    if not seed:
        return value
    mixed = hashlib.sha256(seed + value.to_bytes(8, "big", signed=True)).digest()
    return int.from_bytes(mixed[:8], "big", signed=True)
