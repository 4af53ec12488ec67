"""vLLM's own KV-event code, from the pinned wheel, run without vLLM's dependencies.

Install the wheel without its dependencies (torch and the server stack are not
needed)::

    pip install --no-deps vllm==0.33.0

:func:`load_vllm` then runs three of its files unmodified, by path (nothing of vLLM
is copied into this project): ``vllm/utils/hashing.py`` (the hash functions),
``vllm/v1/core/kv_cache_utils.py`` (``hash_block_tokens``, ``init_none_hash``, the
request block hasher, ``maybe_convert_block_hash``) and
``vllm/distributed/kv_events.py`` (the event structs and the ZeroMQ publisher).
``import vllm`` itself would import torch, so the package and the modules those files
import only for types or for parts not run here (the engine config, the request and
cache-spec classes, multimodal helpers) are stand-ins: empty modules whose every
name is a placeholder class, but for the few values the files use (``envs`` flags,
``init_logger``, ``cdiv``).

:func:`load_vllm_block_pool` adds vLLM's block pool (``vllm/v1/core/block_pool.py``)
and its per-group managers (``single_type_kv_cache_manager.py``); :class:`VllmWorker`
drives them as vLLM's scheduler does, so a test can hold a router's answers against
what a vLLM worker really caches, evicts and duplicates.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import math
import os
import sys
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

#: The vLLM release the project is tested against.
PINNED = "0.33.0"

_STAND_INS = (
    "vllm",
    "vllm.envs",
    "vllm.config",
    "vllm.config.kv_events",
    "vllm.logger",
    "vllm.multimodal",
    "vllm.multimodal.utils",
    "vllm.utils",
    "vllm.utils.math_utils",
    "vllm.utils.network_utils",
    "vllm.v1",
    "vllm.v1.core",
    "vllm.v1.kv_cache_interface",
    "vllm.v1.kv_cache_spec_registry",
    "vllm.v1.request",
    "vllm.v1.utils",
    "vllm.distributed",
)
_REAL = (
    ("vllm.utils.hashing", "vllm/utils/hashing.py"),
    ("vllm.v1.core.kv_cache_utils", "vllm/v1/core/kv_cache_utils.py"),
    ("vllm.distributed.kv_events", "vllm/distributed/kv_events.py"),
)


class VllmUnavailable(RuntimeError):
    """The pinned vLLM wheel is not installed; the message says how to install it."""


class _Placeholder:
    """A stand-in class: built with any arguments, it keeps the keyword ones."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.args = args
        self.__dict__.update(kwargs)


class _StandIn(types.ModuleType):
    """A module whose every missing name is a placeholder class of that name."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        placeholder = type(name, (_Placeholder,), {"__module__": self.__name__})
        setattr(self, name, placeholder)
        return placeholder


@dataclass(frozen=True)
class Vllm:
    """vLLM's modules, loaded: ``hashing``, ``kv_cache_utils``, ``kv_events``."""

    version: str
    hashing: types.ModuleType
    kv_cache_utils: types.ModuleType
    kv_events: types.ModuleType


_LOADED: list[Vllm] = []


def load_vllm() -> Vllm:
    """vLLM's three modules, loaded once per process. O(1) after the first call.

    Raises:
        VllmUnavailable: the pinned wheel is not installed.
    """
    if _LOADED:
        return _LOADED[0]
    version = _pinned_version()
    vllm = Vllm(version, *_load(_REAL, {}))
    _LOADED.append(vllm)
    return vllm


#: The files of vLLM's block pool and its lookup (``load_vllm_block_pool``), each
#: loaded after the three of :func:`load_vllm`, which they import.
_REAL_POOL = (
    ("vllm.v1.core.kv_cache_metrics", "vllm/v1/core/kv_cache_metrics.py"),
    ("vllm.v1.core.block_pool", "vllm/v1/core/block_pool.py"),
    ("vllm.v1.core.single_type_kv_cache_manager", "vllm/v1/core/single_type_kv_cache_manager.py"),
)
#: The further stand-ins those files import for types or for parts not run here.
_STAND_INS_POOL = (
    "vllm.v1.metrics",
    "vllm.v1.metrics.stats",
    "vllm.v1.hisparse",
    "vllm.v1.hisparse.block_pool",
)


@dataclass(frozen=True)
class VllmBlockPool:
    """vLLM's block pool, loaded: ``block_pool`` (its ``BlockPool``: the free queue, the
    hash-to-block map that holds duplicate copies, the events it queues) and
    ``managers`` (``single_type_kv_cache_manager``: ``FullAttentionManager``'s
    ``find_longest_cache_hit``, the lookup the scheduler makes), with the stand-in
    ``FullAttentionSpec`` that lookup asks for."""

    vllm: Vllm
    block_pool: types.ModuleType
    managers: types.ModuleType
    full_attention_spec: type

    def lookup(self, pool: Any, block_hashes: list[bytes], block_size: int, tokens: int) -> int:
        """The cached blocks vLLM's own lookup finds for a request of ``tokens`` tokens
        whose block hashes are ``block_hashes`` (at most ``tokens // block_size``: the
        caller applies the scheduler's ``len - 1`` cap by what it passes). O(blocks)."""
        spec = self.full_attention_spec(block_size=block_size)
        (blocks,), _ = self.managers.FullAttentionManager.find_longest_cache_hit(
            block_hashes, tokens, [0], pool, spec, False, block_size
        )
        return len(blocks)


_LOADED_POOL: list[VllmBlockPool] = []


def load_vllm_block_pool() -> VllmBlockPool:
    """vLLM 0.33's ``BlockPool`` and its full-attention lookup, run unmodified from the
    pinned wheel (beside :func:`load_vllm`'s modules, which they import). O(1) after
    the first call.

    Raises:
        VllmUnavailable: the pinned wheel is not installed.
    """
    if _LOADED_POOL:
        return _LOADED_POOL[0]
    vllm = load_vllm()
    loaded = {
        "vllm.utils.hashing": vllm.hashing,
        "vllm.v1.core.kv_cache_utils": vllm.kv_cache_utils,
        "vllm.distributed.kv_events": vllm.kv_events,
    }
    stand_ins: dict[str, types.ModuleType] = {}
    metrics, pool, managers = _load(_REAL_POOL, loaded, _STAND_INS_POOL, stand_ins)
    spec = stand_ins["vllm.v1.kv_cache_interface"].FullAttentionSpec
    loaded_pool = VllmBlockPool(vllm, pool, managers, spec)
    del metrics  # loaded for the pool's import; nothing here reads it
    _LOADED_POOL.append(loaded_pool)
    return loaded_pool


#: The kind vLLM's ``KVCacheManager.take_events`` stamps on a full-attention group's
#: BlockStored (``KVCacheSpecKind.FULL_ATTENTION``, ``vllm/v1/kv_cache_interface.py``:
#: a module that imports torch, so not run here); no sliding window.
FULL_ATTENTION_KIND = "full_attention"


class _Hashed(NamedTuple):
    request: FakeRequest
    hashes: list[bytes]


class VllmWorker:
    """One vLLM worker's prefix cache as its scheduler drives it, at vLLM's defaults:
    vLLM 0.33's own ``BlockPool`` (events on) and ``FullAttentionManager`` (one
    full-attention group), each request hashed by vLLM's own request block hasher
    (``scheme``, the root seed as ``PYTHONHASHSEED`` leaves it, int event hashes).

    :meth:`admit` is one prefill step of ``KVCacheManager``: ``get_computed_blocks``
    (the longest hit under the scheduler's cap of ``num_tokens - 1``), then
    ``allocate_slots`` (touch the hit, allocate the rest from the free queue, cache
    the full blocks); :meth:`finish` frees a request's blocks, tail first;
    :meth:`take_batch` is what the scheduler publishes after a step. Only this
    sequencing is ours; every change to the pool is vLLM's code.

    Args:
        num_blocks: the pool's blocks, the null block among them (as vLLM counts).
        block_size: tokens per block (vLLM's default, 16).
        scheme: vLLM's ``prefix_caching_hash_algo`` (its default, ``sha256``).

    Raises:
        VllmUnavailable: the pinned wheel is not installed.
    """

    def __init__(self, num_blocks: int, block_size: int = 16, scheme: str = "sha256") -> None:
        self.loaded = load_vllm_block_pool()
        self.block_size = block_size
        self._hash_fn = self.loaded.vllm.hashing.get_hash_fn_by_name(scheme)
        pools = self.loaded.block_pool
        self.pool = pools.BlockPool(num_blocks, True, block_size, enable_kv_cache_events=True)
        self._spec = self.loaded.full_attention_spec(
            block_size=block_size, dcp_sharded=False, prefix_cacheable=True
        )
        self.manager = self.loaded.managers.FullAttentionManager(
            self._spec, self.pool, True, 0, block_size
        )
        self._running: dict[str, FakeRequest] = {}

    def hashes(self, tokens: Sequence[int], salt: str | None = None) -> list[bytes]:
        """The block hashes vLLM's request block hasher gives a request of ``tokens``
        with cache salt ``salt`` (its ``request.block_hashes``). O(len(tokens))."""
        return self._request(tokens, salt).hashes

    def _request(self, tokens: Sequence[int], salt: str | None, request_id: str = "") -> _Hashed:
        utils = self.loaded.vllm.kv_cache_utils
        utils.init_none_hash(self._hash_fn)  # the root as vLLM's engine sets it at start
        request = FakeRequest(list(tokens), salt, request_id=request_id)
        hashes = list(utils.get_request_block_hasher(self.block_size, self._hash_fn)(request))
        request.block_hashes = hashes
        return _Hashed(request, hashes)

    def admit(
        self,
        request_id: str,
        tokens: Sequence[int],
        salt: str | None = None,
        report: str = "incremental",
    ) -> int:
        """Prefill a request as the scheduler does in one step; the cached blocks it
        reused. ``report`` is the request's ``kv_cache_report_mode`` (a sampling
        parameter's ``extra_args``): ``"full"`` re-announces the blocks it reused, a
        BlockStored of blocks already cached. O(len(tokens)).

        Raises:
            ValueError: ``request_id`` is running, or the pool has too few free blocks
                (``allocate_slots`` would refuse it; nothing is changed).
        """
        if request_id in self._running:
            raise ValueError(f"request {request_id!r} is running")
        request, hashes = self._request(tokens, salt, request_id)
        size = self.block_size
        managers = self.loaded.managers
        (hit,), hit_tokens = managers.FullAttentionManager.find_longest_cache_hit(
            hashes, request.num_tokens - 1, [0], self.pool, self._spec, False, size
        )
        wanted = -(-request.num_tokens // size) - len(hit)
        free = self.pool.get_num_free_blocks() - sum(1 for block in hit if block.ref_cnt == 0)
        if wanted > free:
            raise ValueError(f"request {request_id!r} wants {wanted} free blocks, {free} are")
        if report == "full" and hit:  # as KVCacheManager.get_computed_blocks does
            self.pool.emit_cached_block_events(request, len(hit), size, 0)
        self.manager.add_local_computed_blocks(request_id, hit, hit_tokens, 0)
        self.manager.allocate_new_blocks(request_id, request.num_tokens, request.num_tokens)
        self.manager.cache_blocks(request, request.num_tokens, replay_boundaries=())
        self._running[request_id] = request
        return len(hit)

    def finish(self, request_id: str) -> None:
        """Free a finished request's blocks (tail first: they are evicted first).
        O(its blocks).

        Raises:
            KeyError: no such request is running.
        """
        del self._running[request_id]
        self.manager.free(request_id)

    def take_batch(self) -> Any:
        """The events the pool queued since the last call, as the scheduler publishes
        them after a step (a ``KVEventBatch`` of vLLM's, each BlockStored stamped
        with its group's kind), or None when there are none. O(events)."""
        events = self.pool.take_events()
        if not events:
            return None
        kv_events = self.loaded.vllm.kv_events
        for event in events:
            if isinstance(event, kv_events.BlockStored):
                event.kv_cache_spec_kind = FULL_ATTENTION_KIND
        return kv_events.KVEventBatch(ts=time.time(), events=events)

    def hit(
        self, tokens: Sequence[int], salt: str | None = None, max_tokens: int | None = None
    ) -> int:
        """The cached blocks vLLM's own lookup finds for ``tokens`` within its first
        ``max_tokens`` (default: all; the scheduler passes ``len(tokens) - 1``).
        O(len(tokens))."""
        limit = len(tokens) if max_tokens is None else max_tokens
        return self.loaded.lookup(self.pool, self.hashes(tokens, salt), self.block_size, limit)

    def copies(self, tokens: Sequence[int], salt: str | None, block: int) -> int:
        """How many cached blocks vLLM holds under the hash of ``tokens``' block number
        ``block`` (2 or more: duplicates). O(len(tokens))."""
        utils = self.loaded.vllm.kv_cache_utils
        key = utils.make_block_hash_with_group_id(self.hashes(tokens, salt)[block], 0)
        held = self.pool.cached_block_hash_to_block._cache.get(key)
        return 0 if held is None else len(held) if isinstance(held, dict) else 1

    def eviction_order(self) -> list[bytes | None]:
        """The free blocks' hashes in the order the pool hands them out (None: a free
        block holding nothing). O(free blocks)."""
        utils = self.loaded.vllm.kv_cache_utils
        return [
            None if block.block_hash is None else utils.get_block_hash(block.block_hash)
            for block in self.pool.free_block_queue.get_all_free_blocks()
        ]


def _pinned_version() -> str:
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        raise VllmUnavailable(
            f"vLLM is not installed: pip install --no-deps vllm=={PINNED}"
        ) from None
    if version != PINNED:
        raise VllmUnavailable(f"vLLM {version} is installed, the tests pin {PINNED}")
    return version


def _load(
    real: Sequence[tuple[str, str]],
    loaded: dict[str, types.ModuleType],
    more_stand_ins: Sequence[str] = (),
    stand_ins: dict[str, types.ModuleType] | None = None,
) -> list[types.ModuleType]:
    """Run the wheel's files ``real`` (module name, path in the wheel) among the
    stand-ins and the real modules ``loaded`` already, then put ``sys.modules`` back
    as it was; the stand-ins made are left in ``stand_ins``."""
    distribution = importlib.metadata.distribution("vllm")
    names = (*_STAND_INS, *more_stand_ins, *loaded, *(n for n, _ in real))
    saved = {name: sys.modules.get(name) for name in names}
    made = {} if stand_ins is None else stand_ins
    try:
        for name in (*_STAND_INS, *more_stand_ins):
            module = _StandIn(name)
            module.__path__ = []  # a package, so its submodules can be stand-ins too
            sys.modules[name] = made[name] = module
        sys.modules.update(loaded)
        values: dict[str, dict[str, object]] = {
            "vllm.envs": {"VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": True},  # vLLM's default
            "vllm.logger": {"init_logger": logging.getLogger},
            "vllm.utils.math_utils": {
                "cdiv": lambda a, b: -(-a // b),
                "round_up": lambda a, b: math.ceil(a / b) * b,
            },
        }
        for name, attributes in values.items():
            for attribute, value in attributes.items():
                setattr(sys.modules[name], attribute, value)
        sys.modules["vllm"].envs = sys.modules["vllm.envs"]  # type: ignore[attr-defined]
        modules: list[types.ModuleType] = []
        for name, relative in real:
            path = Path(str(distribution.locate_file(relative)))
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            real_module = importlib.util.module_from_spec(spec)
            sys.modules[name] = real_module
            spec.loader.exec_module(real_module)
            modules.append(real_module)
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    return modules


@dataclass
class FakeRequest:
    """What vLLM's request block hasher reads of a request: its tokens, its cache salt,
    and no LoRA, multimodal inputs or prompt embeddings."""

    all_token_ids: list[int]
    cache_salt: str | None = None
    block_hashes: list[bytes] | None = None
    mm_features: list[Any] | None = None
    lora_request: None = None
    prompt_embeds: None = None
    #: What the block pool and the full-attention manager read besides: its id, its
    #: session (stamped on its BlockStored events), no sparse-retention junction.
    request_id: str = ""
    session_id: str | None = None
    shared_prefix_boundary: int = 0

    def __post_init__(self) -> None:
        self.block_hashes = [] if self.block_hashes is None else self.block_hashes
        self.mm_features = [] if self.mm_features is None else self.mm_features

    @property
    def num_tokens(self) -> int:
        """The request's length."""
        return len(self.all_token_ids)


def vllm_block_hashes(
    tokens: list[int], block_size: int, scheme: str, seed: str, salt: str | None = None
) -> list[bytes]:
    """The block hashes vLLM's own request block hasher gives ``tokens`` (its
    ``get_request_block_hasher`` with ``init_none_hash`` from ``seed``, as
    ``PYTHONHASHSEED`` sets it). O(len(tokens)).

    Raises:
        VllmUnavailable: the pinned wheel is not installed.
    """
    vllm = load_vllm()
    hash_fn = vllm.hashing.get_hash_fn_by_name(scheme)
    previous = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = seed
    try:
        vllm.kv_cache_utils.init_none_hash(hash_fn)
    finally:
        if previous is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = previous
    hasher = vllm.kv_cache_utils.get_request_block_hasher(block_size, hash_fn)
    return list(hasher(FakeRequest(list(tokens), salt)))
