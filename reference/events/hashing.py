"""Block hashes: the names KV events give cached blocks (R-EVENT-2).

A block's hash is *prefix-chained*: it is computed from its parent's hash (the block
before it on its path; none for a path's first block), its own B tokens and its
*extra keys*, so one hash names a whole prefix and two different prefixes never share
a name (but by a collision of the hash function).  The namespace is the only extra key
this tree has: it is vLLM's ``cache_salt``, so like the salt it is an extra key of a
path's first block only -- ``(("cache_salt", namespace),)``, as vLLM 0.33 tags it --
and it reaches every deeper block through the chain.  Events carry it untagged, as
vLLM's do: ``extra_keys`` ``[(namespace,), None, ...]``.  (vLLM takes a salt of ``""``
as no salt; this module hashes what it is given: the engine presets,
:mod:`.engines`, say which engine treats ``""`` as none.)

The schemes (:data:`SCHEMES`), the first four as vLLM computes them, the others as
NVIDIA Dynamo's router and SGLang's events do:

=============== ============================================================ ===========
name            hash(parent, tokens, extra)                                  portable
=============== ============================================================ ===========
``sha256_cbor`` SHA-256 of canonical CBOR ``[parent, [tokens...], extra]``   yes
                (this module's default, a vLLM option; a first block's
                parent is the *root hash*, SHA-256 of canonical CBOR of the
                seed string, vLLM's ``"vllm-none-hash"`` by default)
``xxhash_cbor`` the same CBOR, xxHash XXH3-128                               yes
``sha256``      SHA-256 of the same triple pickled (highest protocol):       Python only
                vLLM 0.33's default (``CacheConfig.prefix_caching_hash_algo``)
``xxhash``      XXH3-128 of the same pickle                                  Python only
``dynamo``      Dynamo's sequence hash: every block's local hash XXH3-64 of  yes
                its tokens seeded by the LoRA name and the namespace, chained
                by XXH3-64 (seed 1337) of the parent's and its own
                (:mod:`.dynamo_scheme`)
``xxh3_64``     Dynamo's chain with no namespace and no adapter; a named     yes
                namespace seeds the first block alone, with 1337 + XXH3-64
                of the name (not what Dynamo does: use ``dynamo``)
``sglang``      SGLang 0.5.23's events: SHA-256 of the parent's digest and   yes
                the tokens as little-endian u32, the first 8 bytes as a
                signed int64; the namespace left out (:mod:`.sglang_scheme`)
``sglang_dynamo`` the same, a named namespace mixed into every page's int64   yes
                (SGLang's Dynamo event format)
=============== ============================================================ ===========

The hashes vLLM's events carry are *external* hashes: by default (vLLM's
``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``) the low 64 bits of the digest read as a
big-endian integer; with ``wire="bytes"`` the digest itself.  ``xxh3_64`` and
``dynamo`` hashes are integers already.  :class:`BlockHasher` computes the internal hash
(used to chain) and its external form (what events carry and the router index keys by).

Cost: every scheme is O(B) per block.
"""

from __future__ import annotations

import functools
import hashlib
import pickle
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

import cbor2
import xxhash

from ..errors import InvalidArgumentError
from . import dynamo_scheme, sglang_scheme

#: A hash as the chain computes it: a digest (bytes) or, for ``xxh3_64``, an integer.
Hash: TypeAlias = bytes | int
#: A hash as an event carries it.
ExternalHash: TypeAlias = bytes | int
#: The extra keys of one block (None: none).
ExtraKeys: TypeAlias = tuple[object, ...] | None
Wire = Literal["int", "bytes"]

#: This module's default: portable across languages (vLLM 0.33's own default is
#: ``sha256``, a pickle: see :mod:`.engines`).
DEFAULT_SCHEME = "sha256_cbor"
#: The seed of the root hash: vLLM 0.33's default for its SHA-256 schemes when
#: ``PYTHONHASHSEED`` is unset (that variable, when set, is the seed instead).
DEFAULT_SEED = "vllm-none-hash"
#: Dynamo's XXH3 seed.
DYNAMO_SEED = 1337
_LOW_64 = (1 << 64) - 1


def _cbor(value: object) -> bytes:
    return cbor2.dumps(value, canonical=True)


def _pickled(value: object) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _xxh3_128(data: bytes) -> bytes:
    return xxhash.xxh3_128_digest(data)


#: Serializer and digest of each scheme vLLM names.
_VLLM_SCHEMES: dict[str, tuple[Callable[[object], bytes], Callable[[bytes], bytes]]] = {
    "sha256_cbor": (_cbor, _sha256),
    "xxhash_cbor": (_cbor, _xxh3_128),
    "sha256": (_pickled, _sha256),
    "xxhash": (_pickled, _xxh3_128),
}

#: SGLang's: its events' own hashes, the namespace left out of them or (Dynamo's event
#: format) mixed into every one (:mod:`.sglang_scheme`).
SGLANG_SCHEMES = ("sglang", "sglang_dynamo")

#: Every scheme's name.
SCHEMES: tuple[str, ...] = (*_VLLM_SCHEMES, "dynamo", "xxh3_64", *SGLANG_SCHEMES)


def _u64le(value: int) -> bytes:
    return value.to_bytes(8, "little")


@dataclass(frozen=True)
class BlockHasher:
    """One scheme, seed and wire form: how a tree names its blocks in events.

    Args:
        scheme: one of :data:`SCHEMES`.
        seed: the root hash's seed string (the CBOR and pickle schemes).
        wire: ``"int"`` (vLLM's default: the digest's low 64 bits) or ``"bytes"``.
        empty_is_none: hash a namespace of ``""`` as no namespace (vLLM's and Dynamo's
            reading of an empty salt); by default ``""`` is a namespace of its own.

    Raises:
        InvalidArgumentError: an unknown scheme or wire form, a seed that is not a str,
            or an ``empty_is_none`` that is not a bool.
    """

    scheme: str = DEFAULT_SCHEME
    seed: str = DEFAULT_SEED
    wire: Wire = "int"
    empty_is_none: bool = False

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise InvalidArgumentError(
                f"unknown hash scheme {self.scheme!r}: schemes are {', '.join(SCHEMES)}"
            )
        if not isinstance(self.seed, str):
            raise InvalidArgumentError(f"a hash seed is a str, got {self.seed!r}")
        if self.wire not in ("int", "bytes"):
            raise InvalidArgumentError(f"wire must be 'int' or 'bytes', got {self.wire!r}")
        if not isinstance(self.empty_is_none, bool):
            raise InvalidArgumentError(f"empty_is_none is a bool, got {self.empty_is_none!r}")

    @functools.cached_property
    def root(self) -> Hash | None:
        """The parent hash a path's first block is chained to (None for Dynamo's and
        SGLang's, whose first block has no parent). O(1) after the first call."""
        if self.scheme in ("xxh3_64", "dynamo") or self.scheme in SGLANG_SCHEMES:
            return None
        serialize, digest = _VLLM_SCHEMES[self.scheme]
        return digest(serialize(self.seed))

    def salt(self, namespace: str | None) -> str | None:
        """The salt ``namespace`` is to this hasher: None (no salt) for ``""`` where
        ``empty_is_none`` (vLLM's and Dynamo's reading), else ``namespace`` itself. The
        one place that rule is written: :meth:`block_hash`, :meth:`chain` and the
        router's remembered chains (``spec/router/hashes.py``) read it. O(1)."""
        return None if namespace == "" and self.empty_is_none else namespace

    def block_hash(
        self, parent: Hash | None, tokens: Sequence[int], salt: str | None = None
    ) -> Hash:
        """The hash of a block of ``tokens`` after ``parent`` (None: a path's first
        block), salted by ``salt`` (a first block's namespace, else None). O(B)."""
        salt = self.salt(salt)
        if self.scheme == "dynamo":
            assert parent is None or isinstance(parent, bytes)
            return dynamo_scheme.block_hash(parent, tokens, salt)
        if self.scheme == "xxh3_64":
            return self._dynamo(parent, tokens, salt)
        if self.scheme in SGLANG_SCHEMES:
            assert parent is None or isinstance(parent, bytes)
            return sglang_scheme.block_hash(parent, tokens, salt, self.scheme == "sglang_dynamo")
        serialize, digest = _VLLM_SCHEMES[self.scheme]
        chained = self.root if parent is None else parent
        extra = None if salt is None else (("cache_salt", salt),)
        return digest(serialize((chained, tuple(tokens), extra)))

    def _dynamo(self, parent: Hash | None, tokens: Sequence[int], salt: str | None) -> int:
        seed = DYNAMO_SEED
        if salt is not None:  # Dynamo folds a LoRA name into the seed the same way
            seed = (DYNAMO_SEED + xxhash.xxh3_64_intdigest(salt.encode())) & _LOW_64
        data = struct.pack(f"<{len(tokens)}I", *tokens)  # little-endian u32s, one call
        local = xxhash.xxh3_64_intdigest(data, seed=seed)
        if parent is None:
            return local
        assert isinstance(parent, int)
        return xxhash.xxh3_64_intdigest(_u64le(parent) + _u64le(local), seed=DYNAMO_SEED)

    def external(self, internal: Hash) -> ExternalHash:
        """The form events carry (see the module docstring). O(1)."""
        if self.scheme in SGLANG_SCHEMES:
            assert isinstance(internal, bytes)
            return sglang_scheme.external(internal)
        if self.scheme == "dynamo":
            assert isinstance(internal, bytes)
            return dynamo_scheme.external(internal)
        if isinstance(internal, int) or self.wire == "bytes":
            return internal
        return int.from_bytes(internal, "big") & _LOW_64

    def chain(
        self,
        tokens: Sequence[int],
        block_size: int,
        namespace: str | None = None,
        lora: str | None = None,
    ) -> list[Hash]:
        """The internal hashes of every whole block of ``tokens`` from a root, in path
        order (the namespace as the first block's extra key; in the ``dynamo`` scheme,
        the namespace and LoRA adapter ``lora`` seed every block). O(len(tokens)).

        Raises:
            InvalidArgumentError: a LoRA adapter named in a scheme other than ``dynamo``.
        """
        if lora is not None and self.scheme != "dynamo":
            raise InvalidArgumentError(
                f"the {self.scheme} scheme does not name LoRA adapters here (only dynamo)"
            )
        hashes: list[Hash] = []
        parent: Hash | None = None
        for index in range(len(tokens) // block_size):
            block = tokens[index * block_size : (index + 1) * block_size]
            salt = namespace if index == 0 else None
            if lora is None:
                parent = self.block_hash(parent, block, salt)
            else:  # the adapter seeds the path (dynamo_scheme), from its first block
                assert parent is None or isinstance(parent, bytes)
                salt = self.salt(salt)
                adapter = lora if index == 0 else None
                parent = dynamo_scheme.block_hash(parent, block, salt, adapter)
            hashes.append(parent)
        return hashes


def event_extra_keys(namespace: str | None) -> ExtraKeys:
    """The ``extra_keys`` entry an event gives a path's first block in ``namespace``:
    ``(namespace,)``, or None in the default namespace (vLLM's untagged cache salt,
    R-EVENT-2). O(1)."""
    return None if namespace is None else (namespace,)


def event_hasher(events: object) -> BlockHasher | None:
    """The hasher a tree's ``events`` argument asks for: None or False (no events), True
    (the default scheme) or a :class:`BlockHasher`. O(1).

    Raises:
        InvalidArgumentError: ``events`` is none of those.
    """
    if events is None or events is False:
        return None
    if events is True:
        return BlockHasher()
    if isinstance(events, BlockHasher):
        return events
    raise InvalidArgumentError(f"events must be None, True or a BlockHasher, got {events!r}")
