"""What a router reads of a ``KVEventBatch`` payload (R-ROUTE-2, R-EVENT-6).

A router needs, of each event, its type, its ``block_hashes``, a store's
``parent_block_hash`` and the ``medium``; of the batch, ``ts``, the events and the
optional ``data_parallel_rank``.  :func:`decode_for_router` checks exactly those against
vLLM's schema (:mod:`kachedb_radix.reference.events.schema`) and skips the rest --
``token_ids``, ``block_size``, the LoRA fields, ``extra_keys`` and every optional field
-- without building them: a payload is still refused when it is not msgpack, not an
array batch, an event has an unknown ``type`` tag, or a field the router reads has the
wrong type or is missing.  Skipping the tokens (most of a ``BlockStored``'s bytes) is
what keeps decoding below the cost of applying.

Who checks the rest: the kit decodes a candidate's payloads with the full schema
(:func:`~kachedb_radix.reference.events.decode_batch`, ``conform --events``), so an
engine whose events break it is found there; a router stays up on what it can use.

Both twins of the index decode through here.  Cost: O(size of the payload).
"""

from __future__ import annotations

import msgspec

from ..events.hashing import ExternalHash
from ..events.schema import EventDecodeError


class RoutedStored(msgspec.Struct, tag="BlockStored", gc=False):
    """A ``BlockStored`` as a router reads it."""

    block_hashes: list[ExternalHash]
    parent_block_hash: ExternalHash | None
    medium: str | None


class RoutedRemoved(msgspec.Struct, tag="BlockRemoved", gc=False):
    """A ``BlockRemoved`` as a router reads it."""

    block_hashes: list[ExternalHash]
    medium: str | None


class RoutedCleared(msgspec.Struct, tag="AllBlocksCleared", gc=False):
    """An ``AllBlocksCleared``."""


class RoutedBatch(msgspec.Struct, array_like=True, gc=False):
    """A ``KVEventBatch`` as a router reads it."""

    ts: float
    events: list[RoutedStored | RoutedRemoved | RoutedCleared]
    data_parallel_rank: int | None = None


_DECODER = msgspec.msgpack.Decoder(RoutedBatch)


def decode_for_router(payload: bytes) -> RoutedBatch:
    """The parts of the batch in ``payload`` a router reads. O(size).

    Raises:
        EventDecodeError: not msgpack, not an array batch, an unknown event type, or a
            field the router reads missing or of the wrong type.
    """
    try:
        return _DECODER.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise EventDecodeError(f"not a KVEventBatch: {exc}") from None
