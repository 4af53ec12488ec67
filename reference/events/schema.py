"""KV events on the wire: vLLM 0.33's ``KVEventBatch`` schema, in msgpack (R-EVENT-6).

A batch is the msgpack array ``[ts, events, data_parallel_rank]``; each event is a map
tagged by ``"type"``, its optional fields left out when unset:

* ``BlockStored`` -- ``block_hashes`` (in path order), ``parent_block_hash`` (the block
  before the first one, None at a root), ``token_ids`` (every stored block's tokens, in
  order), ``block_size``, ``lora_id``, ``medium``, ``lora_name`` (always present, may be
  None); optional ``extra_keys`` (one entry per block), ``group_idx``,
  ``kv_cache_spec_kind``, ``kv_cache_spec_sliding_window``, ``locality``,
  ``ownership``, ``session_id``, ``lookahead_token_ids``;
* ``BlockRemoved`` -- ``block_hashes`` (in removal order), ``medium``; optional
  ``group_idx``, ``locality``, ``ownership``;
* ``AllBlocksCleared`` -- nothing.

The structs are written here from that schema (the wire is the contract, not vLLM's
classes); tests decode our bytes with vLLM's own structs and ours with theirs.
:func:`decode_batch` refuses anything else with :class:`EventDecodeError`, naming what
was wrong.  Cost: encoding and decoding are O(size of the batch).
"""

from __future__ import annotations

from typing import Any, TypeAlias

import msgspec

from .hashing import ExternalHash

MEDIUM_GPU = "GPU"


class BlockStored(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """Blocks that became cached: one run along one path."""

    block_hashes: list[ExternalHash]
    parent_block_hash: ExternalHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class BlockRemoved(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """Blocks that are no longer cached, in removal order."""

    block_hashes: list[ExternalHash]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(msgspec.Struct, tag=True, omit_defaults=True, gc=False):
    """Every block of the sender is gone (a reset, a restart)."""


KVEvent: TypeAlias = BlockStored | BlockRemoved | AllBlocksCleared


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """The events of one operation, in the order they happened, at time ``ts``."""

    ts: float
    events: list[KVEvent]
    data_parallel_rank: int | None = None


class EventDecodeError(ValueError):
    """A payload that is not a ``KVEventBatch``; the message says what was wrong."""


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(KVEventBatch)


def encode_batch(batch: KVEventBatch) -> bytes:
    """``batch`` as msgpack bytes, as vLLM's publisher sends it. O(size)."""
    return _ENCODER.encode(batch)


def decode_batch(payload: bytes) -> KVEventBatch:
    """The batch in ``payload``. O(size).

    Raises:
        EventDecodeError: not msgpack, or not a batch of known events (a missing
            field, a wrong type, an unknown ``type`` tag).
    """
    try:
        return _DECODER.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise EventDecodeError(f"not a KVEventBatch: {exc}") from None
