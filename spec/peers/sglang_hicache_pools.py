"""The collaborators SGLang's HiCache tree calls: a device allocator, a host pool and
a cache controller, each limited to the calls the tree and the cache make.

``UnifiedRadixCache`` never touches KV bytes: it asks the device allocator for room
and frees pages into it, and asks the cache controller to copy a node's pages to the
host (``write``) or back (``load``), receiving the new indices at once and an ack
later. On a GPU server those are SGLang's ``PagedTokenToKVPoolAllocator``,
``HostKVCache`` (in a ``HostPoolGroup``) and ``HybridCacheController`` with CUDA
streams; here they are these classes, which keep the same free-list orders (so the
block ids SGLang ends up with are the ids it would have) and, instead of copying
bytes, record every copy as a :class:`Transfer`: the adapter reports them as the
tiers level's moves, in the order SGLang issued them (R-TIER-8).

* :class:`DeviceAllocator` -- the paged free list of
  :class:`kachedb_radix.spec.peers.sglang.PagedFreeList` (pages 1..n, page 0
  reserved, freed pages back at the front), with the calls the unified cache makes:
  ``available_size()`` in tokens, ``alloc`` (the controller's, for a load), ``free``,
  ``free_segment``, ``mamba_full_cache_donor()`` (None: no Mamba);
* :class:`HostPool` -- ``HostKVCache``'s slot free list (``mem_cache/pool_host/base.py``):
  ``alloc`` takes from the front, ``free`` puts slots aside in a release list that is
  appended to the free list only when the front runs short;
* :class:`HostPoolGroup` -- the group's ``anchor_entry``, ``available_size``, ``free``,
  ``clear`` over the one Full-KV pool;
* :class:`Controller` -- ``write``, ``load``, ``start_writing``, ``start_loading``,
  ``reset`` and the ack queues. A copy is done when it is issued; its ack is queued
  finished, to be reaped by the cache's own poll (``check_hicache_events``), which the
  adapter runs after every call, as the scheduler runs it every step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from .sglang import PagedFreeList
from .sglang_standins import Tensor


@dataclass(frozen=True)
class Transfer:
    """One page copied: ``[source_tier, source, target_tier, target]`` in block ids."""

    source_tier: str
    source: int
    target_tier: str
    target: int

    def row(self) -> list[Any]:
        """As a move row of the tiers level."""
        return [self.source_tier, self.source, self.target_tier, self.target]


class DeviceAllocator(PagedFreeList):
    """The device's paged KV allocator (module docstring). Page p is block id p - 1."""

    def __init__(self, num_pages: int, page_size: int) -> None:
        super().__init__(num_pages, page_size)
        self.size_full = num_pages * page_size

    def available_size(self) -> int:
        """Free tokens. O(1)."""
        return len(self.free_pages) * self.page_size

    def alloc_tokens(self, need: int) -> Tensor | None:
        """``need`` tokens' KV indices (whole pages from the front), or None. O(need)."""
        pages = self.alloc(need // self.page_size)
        if pages is None:
            return None
        size = self.page_size
        return Tensor(page * size + offset for page in pages for offset in range(size))

    def free(self, indices: Any) -> None:
        """Free the pages of ``indices`` (a failed load's rows). O(len)."""
        self.free_segment(indices, start_pos=0)

    def mamba_full_cache_donor(self) -> None:
        """No Mamba pool donates Full-KV room here."""
        return None


class HostPool:
    """``HostKVCache``'s slot allocator (module docstring), over ``num_pages`` pages."""

    shared_allocation_domain = None

    def __init__(self, num_pages: int, page_size: int) -> None:
        self.page_size = page_size
        self.size = num_pages * page_size
        self.free_slots: list[int] = []
        self.release_slots: list[int] = []
        self.freed: list[int] = []  # pages freed since take_freed, in order
        self.clear()

    def clear(self) -> None:
        """Every slot free, in order. O(size)."""
        self.free_slots = list(range(self.size))
        self.release_slots = []

    def available_size(self) -> int:
        """Free slots. O(1)."""
        return len(self.free_slots) + len(self.release_slots)

    def alloc(self, need: int) -> Tensor | None:
        """``need`` slots from the front (the release list appended first when the
        front is short), or None when fewer are free. O(need)."""
        if need > self.available_size():
            return None
        if need > len(self.free_slots):
            self.free_slots += self.release_slots
            self.release_slots = []
        taken, self.free_slots = self.free_slots[:need], self.free_slots[need:]
        return Tensor(taken)

    def free(self, indices: Any) -> int:
        """Put ``indices`` aside as released. O(len)."""
        slots = [int(index) for index in indices]
        self.release_slots += slots
        self.freed += [slot // self.page_size for slot in slots[:: self.page_size]]
        return len(slots)

    def take_freed(self) -> list[int]:
        """The pages freed since the last call, in order."""
        taken, self.freed = self.freed, []
        return taken


class HostPoolGroup:
    """What the cache and its Full component call on SGLang's ``HostPoolGroup``."""

    def __init__(self, pool: HostPool) -> None:
        self.pool = pool
        self.anchor_entry = SimpleNamespace(host_pool=pool, host_evict_fn=None)
        self.entry_map: dict[Any, Any] = {}
        self.entries: list[Any] = []

    def get_pool(self, name: Any = None) -> HostPool:
        """The one pool."""
        return self.pool

    def available_size(self, pool: Any = None) -> int:
        """Free host slots."""
        return self.pool.available_size()

    def alloc(self, need: int, **kwargs: Any) -> Tensor | None:
        """Slots for a backup (the controller's call)."""
        return self.pool.alloc(need)

    def free(self, indices: Any, *, pool: Any = None) -> int:
        """Free a node's host slots (host eviction)."""
        return self.pool.free(indices)

    def clear(self) -> None:
        """Every slot free (the cache's reset)."""
        self.pool.clear()


class _Finished:
    """A CUDA event that has fired."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Nothing to wait for."""


@dataclass
class Controller:
    """The cache controller (module docstring); ``transfers`` logs every page copied."""

    device: DeviceAllocator
    mem_pool_host: HostPoolGroup
    write_policy: str
    enable_storage: bool = False
    transfers: list[Transfer] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.layer_done_counter = SimpleNamespace(num_counters=1, events=[])
        self.reset()

    def reset(self) -> None:
        """Forget queued work and acks."""
        self.write_queue: list[int] = []
        self.load_queue: list[int] = []
        self.ack_write_queue: list[Any] = []
        self.ack_load_queue: list[Any] = []

    def write(
        self, device_indices: Any, priority: Any = None, node_id: int = -1,
        extra_pools: Any = None, flush: bool = True, **kwargs: Any,
    ) -> Tensor | None:  # fmt: skip
        """Back up ``device_indices`` to new host slots (None when the host is full)."""
        if extra_pools:
            raise NotImplementedError("only the Full-KV pool is part of the adapter")
        host = self.mem_pool_host.alloc(len(device_indices))
        if host is None:
            return None
        self._log("device", device_indices, "host", host)
        self.write_queue.append(node_id)
        if flush:
            self.start_writing()
        return host

    def start_writing(self) -> None:
        """Issue the queued backups as one operation, its ack finished."""
        if self.write_queue:
            self.ack_write_queue.append(_ack(self.write_queue))
            self.write_queue = []

    def load(
        self, host_indices: Any, priority: Any = None, node_id: int = -1,
        extra_pools: Any = None, **kwargs: Any,
    ) -> Tensor | None:  # fmt: skip
        """Load ``host_indices`` into fresh device rows (None when the device is full)."""
        if extra_pools:
            raise NotImplementedError("only the Full-KV pool is part of the adapter")
        rows = self.device.alloc_tokens(len(host_indices))
        if rows is None:
            return None
        self._log("host", host_indices, "device", rows)
        self.load_queue.append(node_id)
        return rows

    def start_loading(self) -> int:
        """Issue the queued loads as one operation, its ack finished; -1 when none."""
        if not self.load_queue:
            return -1
        self.ack_load_queue.append(_ack(self.load_queue))
        self.load_queue = []
        return 0

    def take(self) -> list[Transfer]:
        """The pages copied since the last call, in issue order."""
        taken, self.transfers = self.transfers, []
        return taken

    def _log(self, source_tier: str, sources: Any, target_tier: str, targets: Any) -> None:
        size = self.device.page_size
        offset = {"device": 1, "host": 0}  # device page p is block p - 1
        for source, target in zip(list(sources)[::size], list(targets)[::size], strict=True):
            self.transfers.append(
                Transfer(
                    source_tier,
                    int(source) // size - offset[source_tier],
                    target_tier,
                    int(target) // size - offset[target_tier],
                )
            )


def _ack(node_ids: list[int]) -> Any:
    return SimpleNamespace(
        start_event=_Finished(),
        finish_event=_Finished(),
        node_ids=list(node_ids),
        num_tokens_by_pool=None,
        num_bytes=0,
        timing_enabled=False,
    )
