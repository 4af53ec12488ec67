"""Stand-ins for what SGLang's ``radix_cache.py`` imports but cannot have here.

The adapter (:mod:`kachedb_radix.spec.peers.sglang`) runs the installed wheel's own
``sglang/srt/mem_cache/radix_cache.py`` and ``evict_policy.py``, unmodified. That
file imports torch and five sibling modules whose own imports pull in the GPU
server stack (triton, CUDA kernels, the metrics and scheduler packages), which the
wheel installed with ``--no-deps`` does not bring. This module provides, for each,
exactly the names ``radix_cache.py`` imports, limited to the operations the paths
the adapter drives call (insert, match_prefix, evict, inc/dec_lock_ref,
path_device_indices, reset):

* ``torch`` (only when the real one is not installed): ``Tensor`` as a 1-D int64
  list (``len``, slicing, ``clone``, ``tolist``, iteration), ``int64``,
  ``device``, ``empty``, ``tensor``, ``cat``, ``iinfo``;
* ``sglang.srt.mem_cache.cache_init_params``: ``CacheInitParams`` (the fields the
  constructor reads);
* ``...base_prefix_cache``: the parameter and result records and a
  ``BasePrefixCache`` base without metrics (``update_eviction_metrics`` does
  nothing without a collector, as in SGLang);
* ``...events``: a ``KVCacheEventRecorder`` for ``enabled=False`` (SGLang's returns
  at once from every record method then), ``LoRANameTable``;
* ``...utils``: ``get_eviction_strategy`` over the wheel's own ``evict_policy``
  classes, ``split_node_hash_value`` (hash lists stay None with events off);
* ``sglang.srt.utils.common``: ``ceil_align``.

None of SGLang's logic is restated here: the tree, its splits, locks, leaf set,
eviction heap and priorities all run from the wheel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any, NamedTuple


class Tensor:
    """A 1-D int64 tensor, as far as ``radix_cache.py`` uses one."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[int] = ()) -> None:
        self._items = [int(item) for item in items]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[int]:
        return iter(self._items)

    def __getitem__(self, index: slice | int) -> Any:
        if isinstance(index, slice):
            return Tensor(self._items[index])
        return self._items[index]

    def clone(self) -> Tensor:
        """A copy."""
        return Tensor(self._items)

    def numel(self) -> int:
        """How many items (the unified tree asks, :mod:`.sglang_hicache_standins`)."""
        return len(self._items)

    def item(self) -> int:
        """The only item.

        Raises:
            ValueError: the tensor does not hold exactly one item.
        """
        if len(self._items) != 1:
            raise ValueError(f"item() of a tensor of {len(self._items)} items")
        return self._items[0]

    def cpu(self) -> Tensor:
        """Itself (one device)."""
        return self

    def tolist(self) -> list[int]:
        """The items as ints."""
        return list(self._items)

    def to(self, *args: object, **kwargs: object) -> Tensor:
        """Itself (one dtype, one device)."""
        return self

    def __repr__(self) -> str:
        return f"tensor({self._items})"


class device(str):  # torch's own spelling
    """``torch.device``: a name (``radix_cache.py`` builds one and tests isinstance)."""

    @property
    def type(self) -> str:
        """The device's kind, its name here."""
        return str(self)


def _torch() -> ModuleType:
    module = ModuleType("torch", "Stand-in for torch (spec.peers.sglang_standins)")
    namespace: dict[str, Any] = {
        "Tensor": Tensor,
        "int64": "int64",
        "device": device,
        "empty": lambda shape=(0,), **kwargs: Tensor(),
        "tensor": lambda items, **kwargs: Tensor(items),
        "cat": lambda tensors, *args, **kwargs: Tensor(
            item for tensor in tensors for item in tensor
        ),
        "iinfo": lambda dtype: _IInfo(),
    }
    module.__dict__.update(namespace)
    return module


@dataclasses.dataclass(frozen=True)
class _IInfo:
    max: int = 2**63 - 1
    min: int = -(2**63)


@dataclasses.dataclass
class CacheInitParams:
    """The constructor arguments ``RadixCache`` reads."""

    disable: bool
    req_to_token_pool: Any
    token_to_kv_pool_allocator: Any
    page_size: int
    is_eagle: bool = False
    eviction_policy: str = "lru"
    eviction_policy_config: dict[str, Any] | None = None
    enable_metrics: bool = False
    enable_kv_cache_events: bool = False
    dynamo_kv_event_format: bool = False
    kv_event_lora_names: Any = None


@dataclasses.dataclass
class MatchPrefixParams:
    """``match_prefix``'s argument."""

    key: Any
    cow_mamba: bool = False
    req: Any = None


@dataclasses.dataclass
class InsertParams:
    """``insert``'s argument."""

    key: Any = None
    value: Any = None
    priority: int = 0
    inserted_len: int = 0


@dataclasses.dataclass
class InsertResult:
    """``insert``'s answer."""

    prefix_len: int
    last_device_node: Any = None


@dataclasses.dataclass
class EvictParams:
    """``evict``'s argument."""

    num_tokens: int = 0


@dataclasses.dataclass
class EvictResult:
    """``evict``'s answer."""

    num_tokens_evicted: int = 0


@dataclasses.dataclass
class IncLockRefResult:
    """``inc_lock_ref``'s receipt."""

    delta: int | None = None


@dataclasses.dataclass
class DecLockRefParams:
    """``dec_lock_ref``'s optional argument."""

    node_id: int | None = None


@dataclasses.dataclass
class DecLockRefResult:
    """``dec_lock_ref``'s answer."""

    delta: int | None = None


class MatchResult(NamedTuple):
    """``match_prefix``'s answer (the fields ``radix_cache.py`` sets)."""

    device_prefix_len: int
    last_device_node: Any
    last_host_node: Any
    best_match_node: Any


class BasePrefixCache:
    """The base class, without the metrics collector (``enable_metrics`` is off)."""

    metrics_collector: Any = None

    def init_metrics_collector(self) -> None:
        """Unused: the adapter never enables metrics."""
        raise NotImplementedError("metrics are not part of the conformance adapter")

    def update_eviction_metrics(self, num_evicted: int, start_time: float) -> None:
        """Nothing to update without a collector (SGLang checks the same)."""


class KVCacheEventRecorder:
    """The event recorder with events disabled: every record call returns at once."""

    def __init__(self, *, enabled: bool, page_size: int, **kwargs: Any) -> None:
        if enabled:
            raise NotImplementedError("KV events are not part of the conformance adapter")
        self.enabled = False

    def record_all_cleared(self) -> None:
        """Events are off."""

    def record_store(self, node: Any, *args: Any, **kwargs: Any) -> None:
        """Events are off."""

    def record_remove(self, node: Any, *args: Any, **kwargs: Any) -> None:
        """Events are off."""


class LoRANameTable:
    """Named only in a signature of ``radix_cache.py``."""


def split_node_hash_value(
    child_hash_value: list[str] | None, split_len: int, page_size: int
) -> tuple[list[str] | None, list[str] | None]:
    """Hash lists of a split node's halves; None stays None (no events, no hashes)."""
    if child_hash_value is None:
        return None, None
    pages = split_len if page_size == 1 else split_len // page_size
    return child_hash_value[:pages], child_hash_value[pages:]


def modules(evict_policy: ModuleType, *, with_torch: bool) -> dict[str, ModuleType]:
    """The stand-in modules by import name; ``evict_policy`` is the wheel's own."""

    def module(name: str, **names: Any) -> ModuleType:
        made = ModuleType(name, "Stand-in (spec.peers.sglang_standins)")
        made.__dict__.update(names)
        return made

    strategies = {
        "lru": evict_policy.LRUStrategy,
        "lfu": evict_policy.LFUStrategy,
        "fifo": evict_policy.FIFOStrategy,
        "mru": evict_policy.MRUStrategy,
        "filo": evict_policy.FILOStrategy,
        "priority": evict_policy.PriorityStrategy,
        "slru": evict_policy.SLRUStrategy,
        "tlru": evict_policy.TLRUStrategy,
    }

    def get_eviction_strategy(policy: str, config: dict[str, Any] | None = None) -> Any:
        return strategies[policy.lower()](**(config or {}))

    found = {
        "sglang.srt.mem_cache.cache_init_params": module(
            "cache_init_params", CacheInitParams=CacheInitParams
        ),
        "sglang.srt.mem_cache.base_prefix_cache": module(
            "base_prefix_cache",
            BasePrefixCache=BasePrefixCache,
            DecLockRefParams=DecLockRefParams,
            DecLockRefResult=DecLockRefResult,
            EvictParams=EvictParams,
            EvictResult=EvictResult,
            IncLockRefResult=IncLockRefResult,
            InsertParams=InsertParams,
            InsertResult=InsertResult,
            MatchPrefixParams=MatchPrefixParams,
            MatchResult=MatchResult,
        ),
        "sglang.srt.mem_cache.events": module(
            "events", KVCacheEventRecorder=KVCacheEventRecorder, LoRANameTable=LoRANameTable
        ),
        "sglang.srt.mem_cache.utils": module(
            "utils",
            get_eviction_strategy=get_eviction_strategy,
            split_node_hash_value=split_node_hash_value,
        ),
        "sglang.srt.utils.common": module(
            "common", ceil_align=lambda value, align: -(-value // align) * align
        ),
    }
    if with_torch:
        found["torch"] = _torch()
    return found
