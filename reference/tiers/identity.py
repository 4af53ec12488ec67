"""Whose bytes a slab file holds: the model identity and the KV layout its header records.

Checksums prove that a block's bytes are the bytes that were written; they cannot prove
that they are *this model's* KV. Two models with the same bytes per block -- 16-token
blocks of 2 layers and 32-token blocks of 1, or another checkpoint of the same shape --
write files that are byte-for-byte valid for each other, and a cache that opened the
other's file would serve its blocks with correct checksums and wrong meaning. So the file
header records what the bytes are (R-TIER-11), and a cache opens only a file whose every
field is its own:

====================== ======================================================================
field                  what it says
====================== ======================================================================
``model``              the model's name, as the user gave it (``KVCache(..., model=...)``)
``fingerprint``        what distinguishes two models of one name (weights, config, revision):
                       supplied by the caller, or derived from the model's config
                       (:meth:`ModelIdentity.from_config`); empty when none was given
``layers``             layers of KV per block
``kv_heads``           KV heads per layer
``head_dim``           elements per head
``dtype``              the KV element type's label (``fp16``, ``bf16``, ``fp8_e4m3``, ...)
``tokens_per_block``   tokens per block
``hash_scheme``        how a record names its block (the chained hash of
                       :mod:`~kachedb_radix.reference.tiers.persist`)
====================== ======================================================================

The block size in bytes is the file's geometry (``block_bytes``), compared beside them.

A mismatch in any field is refused when the file is opened, before a record is read, with
:class:`~kachedb_radix.reference.tiers.disk_errors.StoreIdentityError` naming each field
that differs with its value in the file and the value expected; nothing in the file
changes (R-TIER-12). A file of a store made without an identity records empty fields: it
opens for a caller that expects none, and is refused by every cache.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields

from ..errors import InvalidArgumentError

#: The longest model name (UTF-8 bytes) a file header records.
MODEL_BYTES = 256
#: The longest fingerprint (UTF-8 bytes).
FINGERPRINT_BYTES = 128
#: The longest dtype label.
DTYPE_BYTES = 32
#: The longest hash-scheme name.
SCHEME_BYTES = 64
#: The largest layer, head, head-dimension or block-size count a header records.
MAX_COUNT = 2**32 - 1

#: The text fields and their limits, in header order.
TEXT_LIMITS = {
    "model": MODEL_BYTES,
    "fingerprint": FINGERPRINT_BYTES,
    "dtype": DTYPE_BYTES,
    "hash_scheme": SCHEME_BYTES,
}
#: The count fields, in header order.
COUNT_FIELDS = ("layers", "kv_heads", "head_dim", "tokens_per_block")

#: Config keys left out of a derived fingerprint: bookkeeping, not the model.
UNFINGERPRINTED = frozenset({"transformers_version"})


@dataclass(frozen=True)
class ModelIdentity:
    """A model as a KV cache's disk tier names it: a ``name`` and, optionally, a
    ``fingerprint`` that tells apart two models of the same name.

    Raises:
        InvalidArgumentError: ``name`` is not a non-empty str of at most 256 UTF-8 bytes,
            or ``fingerprint`` not a str of at most 128.
    """

    name: str
    fingerprint: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidArgumentError(f"a model's name must be a non-empty str, got {self.name!r}")
        for role, value in (("name", self.name), ("fingerprint", self.fingerprint)):
            problem = text_problem(value, MODEL_BYTES if role == "name" else FINGERPRINT_BYTES)
            if problem is not None:
                raise InvalidArgumentError(f"the model's {role}: {problem}")

    @classmethod
    def of(cls, model: object) -> ModelIdentity:
        """``model`` as an identity: a :class:`ModelIdentity` as it is, a str as a name
        without fingerprint. O(1).

        Raises:
            InvalidArgumentError: anything else, or a bad name.
        """
        if isinstance(model, ModelIdentity):
            return model
        if isinstance(model, str):
            return cls(model)
        raise InvalidArgumentError(
            f"model must be a name (str) or a ModelIdentity, got {type(model).__name__}"
        )

    @classmethod
    def from_config(cls, name: str, config: object) -> ModelIdentity:
        """The identity of model ``name`` whose configuration is ``config`` (a mapping such
        as a Hugging Face ``config.json``, or an object with ``to_dict()`` such as a
        ``PretrainedConfig``): its fingerprint is ``sha256:`` and the SHA-256 of the config
        as canonical JSON (sorted keys, no spaces), less the keys that name where or by
        what it was saved rather than what it is (keys starting with ``_``, such as
        ``_name_or_path``, and ``transformers_version``). O(size of the config).

        Raises:
            InvalidArgumentError: ``config`` is not a mapping of JSON values (finite
                numbers, str keys), or ``name`` is bad.
        """
        as_dict = getattr(config, "to_dict", None)
        data = as_dict() if callable(as_dict) else config
        if not isinstance(data, Mapping):
            raise InvalidArgumentError(
                f"a model config must be a mapping or have to_dict(), got {type(config).__name__}"
            )
        kept = {
            key: value
            for key, value in data.items()
            if not (isinstance(key, str) and (key.startswith("_") or key in UNFINGERPRINTED))
        }
        try:
            text = json.dumps(kept, sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as error:
            raise InvalidArgumentError(f"a model config must be plain JSON data: {error}") from None
        return cls(name, "sha256:" + hashlib.sha256(text.encode()).hexdigest())


@dataclass(frozen=True)
class SlabIdentity:
    """What a slab file's bytes are (the module docstring's table). The defaults -- empty
    text, zero counts -- are the identity of a store made without one.

    Raises:
        InvalidArgumentError: a text field that is not a str or longer than its limit
            (UTF-8 bytes), or a count that is not an int in ``0 .. 2**32 - 1``.
    """

    model: str = ""
    fingerprint: str = ""
    layers: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    dtype: str = ""
    tokens_per_block: int = 0
    hash_scheme: str = ""

    def __post_init__(self) -> None:
        for name, limit in TEXT_LIMITS.items():
            problem = text_problem(getattr(self, name), limit)
            if problem is not None:
                raise InvalidArgumentError(f"slab identity {name}: {problem}")
        for name in COUNT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
                raise InvalidArgumentError(
                    f"slab identity {name} must be an int in 0 .. {MAX_COUNT}, got {value!r}"
                )

    def differences(self, expected: SlabIdentity) -> list[tuple[str, object, object]]:
        """``(field, value here, value expected)`` of every field that differs, in the
        table's order. O(1)."""
        return [
            (field.name, getattr(self, field.name), getattr(expected, field.name))
            for field in fields(self)
            if getattr(self, field.name) != getattr(expected, field.name)
        ]


def text_problem(value: object, limit: int) -> str | None:
    """Why ``value`` cannot be a header's text field of at most ``limit`` UTF-8 bytes, or
    None. O(len(value))."""
    if not isinstance(value, str):
        return f"must be a str, got {type(value).__name__}"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return f"{value!r} is not valid UTF-8"
    if size > limit:
        return f"{size} UTF-8 bytes, more than the {limit} a file header records"
    return None
