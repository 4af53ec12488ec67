"""Stand-ins for what SGLang 0.5.23's HiCache tree imports but cannot have here.

SGLang's hierarchical cache is ``UnifiedRadixCache`` (``sglang/srt/mem_cache/
unified_radix_cache.py``) with ``init_hicache()``: the cache's policy and IO in that
file, the tree in ``unified_cache/unified_tree_core.py`` (its pure-Python core), the
Full-KV semantics per node in ``unified_cache/components/full.py``. Those files import
each other by absolute name, so unlike ``radix_cache.py`` (loaded privately, see
:mod:`kachedb_radix.spec.peers.sglang_standins`) they are loaded under their real names
through a package shell for ``sglang`` (its ``__path__`` is the wheel's directory, so
``sglang/__init__.py`` -- the whole serving frontend -- never runs). :func:`load` does
that with the stand-ins below installed, and takes them all out of ``sys.modules``
again: the loaded modules keep what they imported, and :func:`served` puts the set
back for the calls that import lazily (``init_hicache`` imports the pool assembler).

The wheel's files that run, unmodified: ``srt/environ.py``,
``srt/distributed/communication_tags.py``, ``srt/utils/poll_timer.py``,
``srt/mem_cache/{unified_radix_cache, base_prefix_cache, cache_init_params,
hicache_storage, radix_cache, evict_policy, storage_prefetch}.py``,
``srt/mem_cache/buffer_mode/storage_existence_cache.py``,
``srt/mem_cache/unified_cache/{__init__, component_type, cache_action,
unified_tree_core, unified_tree_core_interface, session_ref_tracker,
storage_attachment, tree_core_registry}.py``,
``srt/mem_cache/unified_cache/components/{__init__, base, full}.py`` and
``srt/session/streaming_session.py``.

Each stand-in offers exactly the names those files import, limited to what the driven
paths (insert, match, evict, host eviction, load back, locks, the acks' poll, reset)
use:

* ``torch`` (always the stand-in: the tree core's Python backend needs no tensor
  arithmetic): :class:`~kachedb_radix.spec.peers.sglang_standins.Tensor` (a 1-D int64
  list), ``tensor``, ``empty``, ``cat``, dtype names, ``device``; ``torch.distributed``
  with ``ReduceOp`` named and every collective refusing (the cache skips them when it
  has no process groups, which it has not here);
* ``kv_events``: ``StorageMedium`` with the wheel's members and values; ``events``: a
  recorder with events off (the ``events`` level is not declared);
* ``mem_cache.utils``: the eviction strategy from the wheel's own ``evict_policy``, the
  hash-list split (None stays None without events);
* ``runtime_context``: ``get_memory()`` -- the server arguments ``init_hicache`` reads:
  host memory mode ``cache``, no storage backend, and the write policy the adapter sets
  per reset (:data:`MEMORY`); the disaggregation mode ``null``; no metric labels;
* ``rank_consensus``: the identity decorator (the checker's default, off);
* the pool assembler: ``attach_hybrid_pool_to_unified_cache`` calls the function the
  adapter installs (:func:`attach_with`), which sets the host pool group and the cache
  controller (:mod:`kachedb_radix.spec.peers.sglang_hicache_pools`), as the wheel's
  ``_apply_stack_result`` sets its own;
* type names only for the allocator, pools, controller, SWA and Mamba components, the
  linker, the scheduler's request and the metrics collectors: imported for annotations
  or ``isinstance`` tests, never built on these paths (building one raises).

None of SGLang's logic is restated here.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from .sglang_standins import Tensor, device

#: The wheel's module the adapter drives.
UNIFIED = "sglang.srt.mem_cache.unified_radix_cache"


class Unused:
    """A name imported (for annotations or ``isinstance``) but never built on the
    driven paths: building one is a bug in the adapter, said loudly."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} is not part of the HiCache adapter")


def _unused(name: str) -> type:
    return type(name, (Unused,), {})


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("not part of the HiCache adapter (no process groups, no storage)")


class _ReduceOp(enum.Enum):
    MIN = "min"
    MAX = "max"
    SUM = "sum"


class StorageMedium(enum.StrEnum):
    """The wheel's ``StorageMedium`` (``disaggregation/kv_events.py``): the same members
    and values (the tree names the host tier ``CPU_PINNED`` in its events)."""

    GPU = "GPU"
    CPU = "CPU_PINNED"
    DISK = "DISK"
    EXTERNAL = "EXTERNAL"


class EventsOff:
    """``KVCacheEventRecorder`` with events off: records nothing, takes nothing."""

    def __init__(self, *, enabled: bool = False, page_size: int = 1, **kwargs: Any) -> None:
        if enabled:
            raise NotImplementedError("KV events are not part of the HiCache adapter")
        self.enabled = False

    def record_store(self, *args: Any, **kwargs: Any) -> None:
        """Events are off."""

    def record_remove(self, *args: Any, **kwargs: Any) -> None:
        """Events are off."""

    def record_all_cleared(self) -> None:
        """Events are off."""

    def take(self) -> list[Any]:
        """Nothing recorded."""
        return []


class KvEventLoraNames:
    """The default factory of ``CacheInitParams.kv_event_lora_names`` (never used)."""


@dataclasses.dataclass
class Memory:
    """``get_memory()``: the server arguments ``init_hicache`` reads."""

    hicache_host_memory_mode: str = "cache"
    hicache_storage_backend: Any = None
    hicache_storage_backend_extra_config: Any = None
    hicache_write_policy: str = "write_back"
    hicache_storage_prefetch_policy: str = "best_effort"
    enable_hierarchical_cache: bool = True
    enable_lmcache: bool = False
    enable_unified_cache_external_linker: bool = False


#: The server arguments of the cache being built (the adapter sets the write policy).
MEMORY = Memory()


@dataclasses.dataclass
class _Disagg:
    disaggregation_mode: str = "null"
    disaggregation_decode_retraction_backup: str = "none"


@dataclasses.dataclass
class _Observability:
    extra_metric_labels: Any = None


@dataclasses.dataclass
class _Model:
    context_length: int = 0


def _rank_consensus(func: Any = None, **kwargs: Any) -> Any:
    """``rank_consensus`` with its checker off (the default): the function itself."""
    if callable(func):
        return func
    return lambda wrapped: wrapped


#: What ``attach_hybrid_pool_to_unified_cache`` calls: set by :func:`attach_with`.
_ATTACH: list[Callable[..., None]] = []


def _attach(cache: Any, params: Any, server_args: Any, **kwargs: Any) -> None:
    if not _ATTACH:
        raise NotImplementedError("no collaborators to attach (see attach_with)")
    _ATTACH[-1](cache, params)


@contextmanager
def attach_with(attach: Callable[[Any, Any], None]) -> Iterator[None]:
    """While inside, ``init_hicache`` attaches its host pool and controller by calling
    ``attach(cache, params)``."""
    _ATTACH.append(attach)
    try:
        yield
    finally:
        _ATTACH.pop()


def _torch() -> dict[str, ModuleType]:
    torch = ModuleType("torch", "Stand-in for torch (spec.peers.sglang_hicache_standins)")
    dist = ModuleType("torch.distributed", "Stand-in (no process groups)")
    dist.__dict__.update(
        ReduceOp=_ReduceOp,
        ProcessGroup=object,
        Work=object,
        get_world_size=_refuse,
        all_reduce=_refuse,
        recv=_refuse,
        isend=_refuse,
    )
    torch.__dict__.update(
        Tensor=Tensor,
        int64="int64",
        int32="int32",
        int="int32",
        uint8="uint8",
        bool="bool",
        device=device,
        distributed=dist,
        __version__="0.0-standin",
        empty=lambda shape=(0,), **kwargs: Tensor(),
        tensor=lambda items, **kwargs: Tensor(
            items if isinstance(items, list | tuple | Tensor) else [items]
        ),
        cat=lambda tensors, *args, **kwargs: Tensor(item for tensor in tensors for item in tensor),
    )
    return {"torch": torch, "torch.distributed": dist}


def wheel_root() -> Path:
    """The installed wheel's ``sglang`` directory. O(1).

    Raises:
        importlib.metadata.PackageNotFoundError: sglang is not installed.
    """
    return Path(str(importlib.metadata.distribution("sglang").locate_file("sglang")))


def _modules(root: Path, evict_policy: Any) -> dict[str, ModuleType]:
    """The stand-in modules by import name."""

    def module(name: str, **names: Any) -> ModuleType:
        made = ModuleType(name, "Stand-in (spec.peers.sglang_hicache_standins)")
        made.__dict__.update(names)
        return made

    def shell(name: str, **names: Any) -> ModuleType:
        made = module(name, **names)
        made.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
        return made

    strategies = {"lru": evict_policy.LRUStrategy}

    def get_eviction_strategy(policy: str, config: dict[str, Any] | None = None) -> Any:
        return strategies[policy.lower()](**(config or {}))

    def split_node_hash_value(hashes: Any, split_len: int, page_size: int) -> Any:
        if hashes is None:
            return None, None
        pages = split_len // page_size
        return hashes[:pages], hashes[pages:]

    return {
        **_torch(),
        "sglang.srt.disaggregation.kv_events": module("kv_events", StorageMedium=StorageMedium),
        "sglang.srt.mem_cache.events": module(
            "events",
            KVCacheEventRecorder=EventsOff,
            KvEventLoraNames=KvEventLoraNames,
            LoRANameTable=KvEventLoraNames,
        ),
        "sglang.srt.mem_cache.utils": module(
            "utils",
            get_eviction_strategy=get_eviction_strategy,
            split_node_hash_value=split_node_hash_value,
            compute_node_hash_values=_refuse,
            get_storage_hash_str=_refuse,
        ),
        "sglang.srt.distributed": shell("sglang.srt.distributed"),
        "sglang.srt.utils": shell("sglang.srt.utils", get_device_module=_refuse),
        "sglang.srt.utils.common": module(
            "common",
            ceil_align=lambda value, align: -(-value // align) * align,
            is_npu=lambda: False,
        ),
        "sglang.srt.utils.rank_consensus_checker": module(
            "rank_consensus_checker", rank_consensus=_rank_consensus
        ),
        "sglang.srt.runtime_context": module(
            "runtime_context",
            get_memory=lambda: MEMORY,
            get_disagg=_Disagg,
            get_observability=_Observability,
            get_model=_Model,
            get_parallel=_refuse,
            get_serving=_refuse,
        ),
        "sglang.srt.observability.metrics_collector": module(
            "metrics_collector",
            STAT_LOGGER_ROLE_RADIX_CACHE="radix_cache",
            STAT_LOGGER_ROLE_STORAGE="storage",
            RadixCacheMetricsCollector=_unused("RadixCacheMetricsCollector"),
            StorageMetrics=_unused("StorageMetrics"),
            StorageMetricsCollector=_unused("StorageMetricsCollector"),
            radix_cache_metric_labels=_refuse,
            resolve_collector_class=_refuse,
        ),
        "sglang.srt.mem_cache.allocator": module(
            "allocator", BaseTokenToKVPoolAllocator=_unused("BaseTokenToKVPoolAllocator")
        ),
        "sglang.srt.mem_cache.allocator.page_interleave": module(
            "page_interleave", page_interleave_shard_size=lambda allocator: 1
        ),
        "sglang.srt.mem_cache.memory_pool": module(
            "memory_pool",
            ReqToTokenPool=_unused("ReqToTokenPool"),
            MHATokenToKVPool=_unused("MHATokenToKVPool"),
        ),
        "sglang.srt.mem_cache.swa_memory_pool": module(
            "swa_memory_pool", SWAKVPool=_unused("SWAKVPool")
        ),
        "sglang.srt.mem_cache.common": module(
            "common", RetractionBackup=_unused("RetractionBackup")
        ),
        "sglang.srt.managers.schedule_batch": module(
            "schedule_batch", ReqKvInfo=_unused("ReqKvInfo")
        ),
        "sglang.srt.managers.cache_controller": module(
            "cache_controller",
            CacheOperation=_unused("CacheOperation"),
            HICACHE_WRITE_STAGING_POOL_FRACTION=0.0,
        ),
        "sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller": module(
            "hybrid_cache_controller",
            HybridCacheController=_unused("HybridCacheController"),
            PPPrefetchDecision=_unused("PPPrefetchDecision"),
            PrefetchOperation=_unused("PrefetchOperation"),
        ),
        "sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler": module(
            "hybrid_pool_assembler", attach_hybrid_pool_to_unified_cache=_attach
        ),
        "sglang.srt.mem_cache.buffer_mode.pipeline": module(
            "pipeline",
            BufferModePipeline=_unused("BufferModePipeline"),
            validate_buffer_only_stack=_refuse,
        ),
        "sglang.srt.mem_cache.unified_cache.components.mamba": module(
            "mamba", MambaComponent=_unused("MambaComponent")
        ),
        "sglang.srt.mem_cache.unified_cache.components.swa": module(
            "swa", SWAComponent=_unused("SWAComponent")
        ),
        "sglang.srt.mem_cache.unified_cache.unified_cache_linker": module(
            "unified_cache_linker",
            UnifiedCacheLinker=_unused("UnifiedCacheLinker"),
            UnifiedCacheLinkerWrapper=_unused("UnifiedCacheLinkerWrapper"),
        ),
    }


#: What :func:`load` put in ``sys.modules`` (stand-ins and the wheel's modules), kept
#: for :func:`served`; empty until the first load.
_LOADED: dict[str, ModuleType] = {}


@contextmanager
def served() -> Iterator[None]:
    """Inside, ``sys.modules`` names the stand-ins and the loaded wheel modules (as when
    they were loaded); outside, what was there before. O(modules)."""
    saved = {name: sys.modules.get(name) for name in _LOADED}
    sys.modules.update(_LOADED)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def load() -> ModuleType:
    """The wheel's ``unified_radix_cache`` module, loaded once per process with the
    stand-ins (module docstring), and ``sys.modules`` left as it was. O(1) after the
    first call.

    Raises:
        importlib.metadata.PackageNotFoundError: sglang is not installed.
        ImportError: a wheel file imports a name no stand-in offers (another release).
    """
    if _LOADED:
        return _LOADED[UNIFIED]
    root = wheel_root()
    saved = {name: module for name, module in sys.modules.items() if _ours(name)}
    for name in saved:
        del sys.modules[name]
    package = ModuleType("sglang", "package shell: the wheel's files, not its __init__")
    package.__path__ = [str(root)]
    sys.modules["sglang"] = package
    try:
        evict_policy = importlib.import_module("sglang.srt.mem_cache.evict_policy")
        sys.modules.update(_modules(root, evict_policy))
        importlib.import_module(UNIFIED)
        loaded = {name: module for name, module in sys.modules.items() if _ours(name)}
    finally:
        for name in [name for name in sys.modules if _ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)
    _LOADED.update(loaded)
    return _LOADED[UNIFIED]


def wheel_modules() -> dict[str, ModuleType]:
    """What :func:`load` loaded, by name (empty before it). O(1)."""
    return dict(_LOADED)


def _ours(name: str) -> bool:
    """A module name :func:`load` serves: SGLang's and torch's."""
    return name.split(".")[0] in ("sglang", "torch")
