"""Engine presets: how each engine names the blocks it caches, as it ships today.

A router that hashes a request one way while its workers hash their blocks another way
holds every block and matches none: a silent 0% hit (issue 33).  Each preset is one row
of facts about one engine at its defaults, read from its pinned release's own code, and
tested against that code (``tests/events/test_engines.py``):

=========== ============= ====== =============== ================= ============ =====
preset      scheme        hashes ``""`` as a     the router        ranks        B
                                 namespace       matches on
=========== ============= ====== =============== ================= ============ =====
``vllm``    ``sha256``    int    none (no salt)  its event hashes  one port     16
``sglang``  ``sglang``    int    not hashed      its event hashes  one port     1
``dynamo``  ``dynamo``    int    none            local hashes, in  (worker,     16
                                                 its radix tree    rank)
``kachedb`` ``sha256_cbor`` int  a namespace     its event hashes  one port     16
=========== ============= ====== =============== ================= ============ =====

* **vLLM 0.33.0** -- ``vllm/config/cache.py``: ``prefix_caching_hash_algo = "sha256"``
  (the pickle scheme; ``sha256_cbor`` is an option) and ``DEFAULT_BLOCK_SIZE = 16``;
  ``vllm/v1/core/kv_cache_utils.py``: the root hash's seed ``"vllm-none-hash"`` when
  ``PYTHONHASHSEED`` is unset, and ``("cache_salt", salt)`` added only ``if
  request.cache_salt`` -- an empty salt is no salt; ``vllm/envs.py``:
  ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` defaults to 1 (events carry the digest's low
  64 bits); ``vllm/distributed/kv_events.py``: a data-parallel rank publishes on the
  endpoint's port plus its rank.
* **SGLang 0.5.23** -- ``srt/disaggregation/kv_events.py`` and its page hash
  (:mod:`.sglang_scheme`): events carry its own SHA-256 page hashes, the namespace
  (``extra_key``) not hashed at all; ``srt/arg_groups/overrides.py``: ``page_size`` 1
  by default (on CUDA); one publisher a data-parallel rank, on the port plus its rank.
* **Dynamo (ai-dynamo-runtime 1.6.1)** -- ``dynamo._core.compute_block_hash_for_seq``:
  every block's hash seeded by the LoRA name and the cache namespace, ``""`` as none
  (:mod:`.dynamo_scheme`); its ``RadixTree`` scores ``(worker_id, dp_rank)`` pairs, so
  a worker's data-parallel ranks are apart; its block size is its engine's (vLLM's 16).
* **kachedb** -- this project's trees at their defaults: ``BlockHasher()``
  (``sha256_cbor``, portable), and ``""`` a namespace of its own (R-NS-*).

Cost: O(1) per lookup of a preset; hashing O(tokens).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

from ..errors import InvalidArgumentError
from . import dynamo_scheme
from .hashing import DEFAULT_SEED, BlockHasher, Wire

#: How an engine's data-parallel ranks reach a router: each on a port of its own (its
#: batches then all carry one rank, and a router names the stream a worker), or keyed
#: by the pair (worker, rank) from the batches' ``data_parallel_rank``.
RankKeying = Literal["port", "worker_rank"]


@dataclass(frozen=True)
class EnginePreset:
    """One engine's block naming at its defaults (see the module docstring).

    Attributes:
        name: the preset's name (``route --engine``, ``hash --engine``).
        engine: the engine and the release the facts come from.
        scheme: its :data:`~.hashing.SCHEMES` name.
        seed: the root hash's seed (the vLLM schemes).
        wire: ``"int"`` or ``"bytes"`` hashes in its events.
        empty_is_none: whether a namespace (cache salt) of ``""`` is no namespace.
        namespaced: whether the namespace enters the hashes at all.
        rank_keying: how a router tells its data-parallel ranks apart.
        block_size: its tokens per block by default.
        matches: what its own router matches a request on.
    """

    name: str
    engine: str
    scheme: str
    seed: str
    wire: Wire
    empty_is_none: bool
    namespaced: bool
    rank_keying: RankKeying
    block_size: int
    matches: str

    def hasher(self) -> BlockHasher:
        """The hasher that names blocks as this engine's events do (an empty namespace
        read as the engine reads it). O(1)."""
        return BlockHasher(self.scheme, self.seed, self.wire, self.empty_is_none)

    def event_hashes(
        self,
        tokens: Sequence[int],
        block_size: int | None = None,
        namespace: str | None = None,
        lora: str | None = None,
    ) -> list[int | bytes]:
        """The hashes this engine's events give the whole blocks of ``tokens`` (what a
        router's index keys by), of a request in ``namespace`` with LoRA adapter
        ``lora`` (Dynamo's alone name one here). O(len(tokens)).

        Raises:
            InvalidArgumentError: a block size below 1; a LoRA adapter for another
                engine than Dynamo.
        """
        size = self._size(block_size)
        hasher = self.hasher()
        chain = hasher.chain(list(tokens), size, namespace, lora)
        return [hasher.external(h) for h in chain]

    def router_hashes(
        self,
        tokens: Sequence[int],
        block_size: int | None = None,
        namespace: str | None = None,
        lora: str | None = None,
    ) -> list[int]:
        """The hashes this engine's own router matches a request's whole blocks on:
        its events' hashes, but Dynamo's, whose radix tree walks the blocks' *local*
        hashes from its root. Ints (a bytes hash read big-endian). O(len(tokens)).

        Raises:
            InvalidArgumentError: as :meth:`event_hashes`.
        """
        size = self._size(block_size)
        if self.scheme == "dynamo":
            return dynamo_scheme.local_hashes(list(tokens), size, namespace, lora)
        return [
            h if isinstance(h, int) else int.from_bytes(h, "big")
            for h in self.event_hashes(tokens, size, namespace, lora)
        ]

    def worker_key(self, worker: Hashable, rank: int | None) -> Hashable:
        """The worker a router files a batch of ``worker``'s stream under, its
        ``data_parallel_rank`` being ``rank``: the pair ``(worker, rank)`` (None as 0, as
        Dynamo does) where the engine keys ranks so, else ``worker``. O(1)."""
        if self.rank_keying == "worker_rank":
            return (worker, rank or 0)
        return worker

    def _size(self, block_size: int | None) -> int:
        size = self.block_size if block_size is None else block_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidArgumentError(f"block_size must be an int >= 1, got {size!r}")
        return size


ENGINES: dict[str, EnginePreset] = {
    preset.name: preset
    for preset in (
        EnginePreset(
            "vllm",
            "vLLM 0.33.0",
            "sha256",
            DEFAULT_SEED,
            "int",
            empty_is_none=True,
            namespaced=True,
            rank_keying="port",
            block_size=16,
            matches="the block hashes of its events",
        ),
        EnginePreset(
            "sglang",
            "SGLang 0.5.23",
            "sglang",
            DEFAULT_SEED,
            "int",
            empty_is_none=False,
            namespaced=False,
            rank_keying="port",
            block_size=1,
            matches="the page hashes of its events",
        ),
        EnginePreset(
            "dynamo",
            "Dynamo (ai-dynamo-runtime 1.6.1)",
            "dynamo",
            DEFAULT_SEED,
            "int",
            empty_is_none=True,
            namespaced=True,
            rank_keying="worker_rank",
            block_size=16,
            matches="the local block hashes, walked from its radix tree's root",
        ),
        EnginePreset(
            "kachedb",
            "kachedb-radix (this project's trees)",
            "sha256_cbor",
            DEFAULT_SEED,
            "int",
            empty_is_none=False,
            namespaced=True,
            rank_keying="port",
            block_size=16,
            matches="the block hashes of its events",
        ),
    )
}
#: The engine a router assumes when told none: vLLM's, the most common.
DEFAULT_ENGINE = "vllm"
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)


def engine_preset(name: str) -> EnginePreset:
    """The preset named ``name``. O(1).

    Raises:
        InvalidArgumentError: no such preset.
    """
    preset = ENGINES.get(name) if isinstance(name, str) else None
    if preset is None:
        raise InvalidArgumentError(
            f"unknown engine {name!r}: engines are {', '.join(ENGINE_NAMES)}"
        )
    return preset
