"""KV events: what a cache tells a router about the blocks it holds (R-EVENT-*).

* :mod:`~kachedb_radix.reference.events.hashing` -- block hashes, prefix-chained, in
  vLLM's schemes, Dynamo's and SGLang's;
* :mod:`~kachedb_radix.reference.events.engines` -- each engine's block naming at its
  defaults (``vllm``, ``sglang``, ``dynamo``, ``kachedb``);
* :mod:`~kachedb_radix.reference.events.schema` -- vLLM's ``KVEventBatch`` wire schema
  (msgpack), encoder and decoder;
* :mod:`~kachedb_radix.reference.events.recorder` -- what a tree emits per operation.

A tree emits events when built with ``events=True`` (or a :class:`BlockHasher`), and
:meth:`~kachedb_radix.reference.RadixTree.take_events` hands them over.
"""

from .engines import DEFAULT_ENGINE, ENGINE_NAMES, ENGINES, EnginePreset, engine_preset
from .hashing import (
    DEFAULT_SCHEME,
    DEFAULT_SEED,
    SCHEMES,
    BlockHasher,
    ExternalHash,
    Hash,
    event_hasher,
)
from .recorder import EventRecorder, dump_hashes
from .schema import (
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventDecodeError,
    KVEvent,
    KVEventBatch,
    decode_batch,
    encode_batch,
)

__all__ = [
    "DEFAULT_ENGINE",
    "DEFAULT_SCHEME",
    "DEFAULT_SEED",
    "ENGINES",
    "ENGINE_NAMES",
    "MEDIUM_GPU",
    "SCHEMES",
    "AllBlocksCleared",
    "BlockHasher",
    "BlockRemoved",
    "BlockStored",
    "EnginePreset",
    "EventDecodeError",
    "EventRecorder",
    "ExternalHash",
    "Hash",
    "KVEvent",
    "KVEventBatch",
    "decode_batch",
    "dump_hashes",
    "encode_batch",
    "engine_preset",
    "event_hasher",
]
