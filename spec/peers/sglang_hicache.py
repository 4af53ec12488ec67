"""SGLang's HiCache tree, release 0.5.23, as a conformance-kit candidate at the tiers level.

SGLang's hierarchical cache is ``UnifiedRadixCache`` with ``init_hicache()`` (the old
``HiRadixCache`` is gone): one tree whose nodes hold a device copy of their KV, a host
copy, or both. The code that runs is the installed wheel's, unmodified --
``unified_radix_cache.py``, the pure-Python ``UnifiedTreeCore`` and the Full-KV
component (the wheel's ``tree_core_backend="python"``; its default Rust core needs real
torch and a native library) -- over the stand-ins of
:mod:`kachedb_radix.spec.peers.sglang_hicache_standins` and the collaborators of
:mod:`kachedb_radix.spec.peers.sglang_hicache_pools` (device allocator, host pool,
cache controller), so it runs without a GPU::

    pip install --no-deps sglang==0.5.23
    kachedb-radix conform sglang-hicache --tiers

The adapter plays SGLang's scheduler around the cache, as a serving engine calls it:

* a reset builds the cache over a fresh device pool of ``num_blocks`` pages and, with a
  host tier, calls ``init_hicache`` with a host pool of ``host`` pages and the write
  policy ``write_through`` when the reset says so, else ``write_back``; a disk tier is
  refused (``invalid_argument``: SGLang's storage tier, HiCache L3, is an external
  service), and so is any policy but ``lru`` and any events scheme (levels not
  declared). ``tiers = {"host": 0}`` builds the cache without ``init_hicache``;
* ``insert`` is the scheduler's: ``match_prefix``, lock the device prefix, the admission
  check (free pages plus evictable must cover the new pages, else ``out_of_blocks``
  before anything changes), ``evict_for_alloc`` for the shortfall, allocate the pages,
  ``insert`` with ``prev_prefix_len``, unlock;
* ``match`` is ``match_prefix`` (device part), pinned by ``lock``; ``lookup`` is
  ``match_prefix`` too, its host part the host copies of the evicted nodes from
  ``best_match_node`` up to ``last_device_node`` (``host_hit_length``), pinned by
  ``lock`` plus ``inc_host_lock_ref`` on ``best_match_node``;
* ``restore`` is the scheduler's admission of a request with a host hit:
  ``match_prefix``, ``init_load_back`` (all of the host part or nothing; it answers a
  refusal as 0 tokens loaded, so does the adapter: nothing restored, no error), then
  ``ready_to_load_host_cache``;
* ``evict`` and ``tier_evict("device")`` are ``evict``; ``tier_evict("host")`` is
  ``evict_host``; counts are in pages, SGLang's in tokens;
* after every call the adapter runs ``check_hicache_events()``, the scheduler's per-step
  poll: backups and loads are asynchronous in SGLang (the nodes stay locked until their
  ack), and the poll reaps the acks, which the controller posts finished;
* every page the controller copies is a move (R-TIER-8), in the order SGLang issues the
  copies: backups issued while making room (``write_back`` demotions) run before the
  caller writes the new pages (``moves``), backups of the new pages
  (``write_through``) after (``after``), loads are a restore's ``restored``. A device
  page freed without a host copy is ``dropped`` from the device, a host page freed
  (host eviction, or ``write_back`` reclaiming a host duplicate) from the host;
* the dump is built from SGLang's nodes: the device tier's tree is the nodes with a
  device value, the host tier's the nodes with a host value whose every ancestor has one
  (a tier's dump is a tree from the root); chains merged (R-DUMP-2); a device page's pin
  count is its node's ``lock_ref``, a host page's its node's ``host_lock_ref``; stamps
  are 0 (recency is SGLang's own, ``sglang_hicache.toml``).

What the kit finds, and the profile that declares SGLang's policy choices
(``sglang_hicache.toml``), are in SPEC.md's R-TIER peer notes and ``spec/peers/traces/``.
"""

from __future__ import annotations

import itertools
import logging
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, cast

from kachedb_radix.reference.namespaces import namespace_order

from ..conform.candidate import (
    CandidateError,
    EventsAnswer,
    EvictAnswer,
    InsertAnswer,
    LookupAnswer,
    MatchAnswer,
    NamespacesAnswer,
    RestoreAnswer,
    StatsAnswer,
    TierEvictAnswer,
)
from . import sglang_hicache_standins as standins
from .sglang import PINNED, SGLangUnavailable, installed_version
from .sglang_hicache_pools import Controller, DeviceAllocator, HostPool, HostPoolGroup, Transfer
from .unoffered import WithoutSnapshots

#: The profile this adapter ships.
PROFILE = Path(__file__).with_name("sglang_hicache.toml")

#: The wheel's files the adapter drives (the others it loads are listed in the stand-ins).
FILES = (
    "sglang/srt/mem_cache/unified_radix_cache.py",
    "sglang/srt/mem_cache/unified_cache/unified_tree_core.py",
    "sglang/srt/mem_cache/unified_cache/components/full.py",
)


def load() -> ModuleType:
    """The wheel's ``unified_radix_cache`` module, loaded with the stand-ins.

    Raises:
        SGLangUnavailable: sglang is not installed, is another release, lacks the files
            or imports what no stand-in serves.
    """
    version = installed_version()
    if version != PINNED:
        found = "not installed" if version is None else f"{version} is installed"
        raise SGLangUnavailable(
            f"the SGLang HiCache adapter needs sglang {PINNED} ({found}); install it with "
            f"`pip install --no-deps sglang=={PINNED}`"
        )
    root = standins.wheel_root().parent
    missing = [name for name in FILES if not (root / name).is_file()]
    if missing:
        raise SGLangUnavailable(f"sglang {PINNED} lacks {', '.join(missing)}")
    try:
        module = standins.load()
    except ImportError as exc:
        raise SGLangUnavailable(f"sglang {PINNED}'s HiCache files did not load: {exc}") from exc
    # SGLang logs a warning per subtree write_back drops under host pressure: the kit
    # reports what happened from the answers, so its logger says errors only.
    logging.getLogger("sglang").setLevel(logging.ERROR)
    # Each cache registers its storage detach with atexit; none is attached here, and the
    # kit builds a cache per reset: the module's atexit registers nothing.
    module.__dict__["atexit"] = SimpleNamespace(register=lambda *args, **kwargs: None)
    return module


class _Lease:
    """What a lease holds: a device lock (``device``: it holds device blocks or came from
    a device call), and a host lock on an anchor node."""

    def __init__(self, lock: Any, host: tuple[Any, Any] | None, device: bool = True) -> None:
        self.lock = lock
        self.host = host
        self.device = device
        self.released = False


class HiCacheCandidate(WithoutSnapshots):
    """SGLang 0.5.23's ``UnifiedRadixCache`` with ``init_hicache`` behind the candidate
    protocol (module docstring)."""

    def __init__(self) -> None:
        self._module = load()
        wheel = standins.wheel_modules()
        self._base = wheel["sglang.srt.mem_cache.base_prefix_cache"]
        self._RadixKey = wheel["sglang.srt.mem_cache.radix_cache"].RadixKey
        self._CacheInitParams = wheel["sglang.srt.mem_cache.cache_init_params"].CacheInitParams
        self._FULL = wheel["sglang.srt.mem_cache.unified_cache.component_type"].ComponentType.FULL
        self._cache: Any = None
        self._device = DeviceAllocator(1, 1)
        self._host: HostPool | None = None
        self._controller: Controller | None = None
        self._block_size = 1
        self._num_blocks = 1
        self._tiered = False
        self._leases: dict[int, _Lease] = {}
        self._foreign: Any = None
        self._clock = 0
        self._requests = itertools.count(1)

    @property
    def name(self) -> str:
        """The report name."""
        return f"sglang-hicache-{PINNED}"

    @property
    def levels(self) -> frozenset[str]:
        """The tree levels and ``tiers``: no snapshots, one policy (lru), no events here."""
        return frozenset({"core", "pinning", "eviction", "namespaces", "tiers"})

    @property
    def block_sizes(self) -> tuple[int, ...] | None:
        """Any page size."""
        return None

    # ------------------------------------------------------------------ reset

    def reset(
        self,
        num_blocks: int,
        block_size: int,
        policy: object = "lru",
        policy_options: object = None,
        events: object = None,
        tiers: object = None,
    ) -> None:
        """A new cache (module docstring).

        Raises:
            CandidateError: ``invalid_argument`` for a policy but lru, an events scheme,
                a disk tier, a malformed ``tiers`` table, sizes that are not ints >= 1
                (the host's >= 0), write-through without a host.
        """
        if policy != "lru" or policy_options is not None:
            raise CandidateError("invalid_argument", "the adapter runs SGLang's lru only")
        if events is not None:
            raise CandidateError("invalid_argument", "the adapter records no KV events")
        host, write_through = self._tiers(tiers)
        for what, value in (("num_blocks", num_blocks), ("block_size", block_size)):
            if not _count(value) or value < 1:
                raise CandidateError("invalid_argument", f"{what} must be an int >= 1")
        self._device = DeviceAllocator(num_blocks, block_size)
        self._host = HostPool(host, block_size) if host else None
        self._controller = None
        params = self._CacheInitParams(
            disable=False,
            req_to_token_pool=None,
            token_to_kv_pool_allocator=self._device,
            page_size=block_size,
            tree_components=(self._FULL,),
            tree_core_backend="python",
        )
        standins.MEMORY.hicache_write_policy = "write_through" if write_through else "write_back"
        with standins.served(), standins.attach_with(self._attach):
            cache = _sglang(self._module.UnifiedRadixCache, params)
            if host:
                _sglang(cache.init_hicache, None, params)
        self._cache = cache
        self._block_size, self._num_blocks = block_size, num_blocks
        self._tiered = tiers is not None
        self._leases, self._foreign, self._clock = {}, None, 0

    def _tiers(self, tiers: object) -> tuple[int, bool]:
        """``(host pages, write_through)`` of a reset's ``tiers`` (None: no host)."""
        if tiers is None:
            return 0, False
        if not isinstance(tiers, dict) or not set(tiers) <= {"host", "disk", "write_through"}:
            raise CandidateError(
                "invalid_argument", f"tiers must be a table of host, disk and write_through, "
                f"got {tiers!r}",
            )  # fmt: skip
        host, disk = tiers.get("host", 0), tiers.get("disk", 0)
        write_through = tiers.get("write_through", False)
        if not _count(host) or not _count(disk) or not isinstance(write_through, bool):
            raise CandidateError("invalid_argument", f"tier sizes are ints >= 0: {tiers!r}")
        if disk:
            raise CandidateError(
                "invalid_argument",
                "SGLang's HiCache keeps no disk tier here: its storage tier (HiCache L3) is "
                "an external service (Mooncake, 3FS, a file backend), not part of the tree",
            )
        if write_through and not host:
            raise CandidateError("invalid_argument", "write_through needs a host tier")
        return host, write_through

    def _attach(self, cache: Any, params: Any) -> None:
        """What the wheel's pool assembler sets on the cache, with our collaborators."""
        assert self._host is not None
        group = HostPoolGroup(self._host)
        policy = standins.MEMORY.hicache_write_policy
        self._controller = Controller(self._device, group, policy)
        cache.host_pool_group = group
        cache.cache_controller = self._controller
        cache.full_kv_pool_host = self._host
        cache.components[self._FULL]._full_kv_pool_host = self._host

    # ------------------------------------------------------------------ the tree's calls

    def match(self, tokens: object, namespace: object, pin: bool) -> MatchAnswer:
        """``match_prefix`` (its device part), locked with ``lock`` when pinned."""
        self._require_cache()
        with self._call():
            found = self._match(self._key(tokens, namespace))
            node = found.last_device_node
            lease = self._file(_sglang(self._cache.lock, node), None) if pin else None
            self._clock += 1
            blocks = self._device_blocks(node)
        return {"length": len(blocks) * self._block_size, "blocks": blocks, "lease": lease}

    def insert(
        self,
        tokens: object,
        namespace: object,
        pin: bool,
        priority: object = None,
        retain_for: object = None,
    ) -> InsertAnswer:
        """The scheduler's insert (module docstring)."""
        self._require_cache()
        with self._call():
            return self._insert(self._key(tokens, namespace), pin)

    def _insert(self, key: Any, pin: bool) -> InsertAnswer:
        size, cache = self._block_size, self._cache
        found = self._match(key)
        prefix, reused = found.last_device_node, found.device_prefix_len // size
        needed = len(key) // size - reused
        backed = self._backed()
        lock = _sglang(cache.lock, prefix)
        try:
            self._make_room(needed)
            evicted, moves = self._take_freed(), self._take()
            pages = self._device.alloc(needed)
            if pages is None:  # pragma: no cover -- the admission check made room
                raise CandidateError("out_of_blocks", "the allocator has too few pages")
            torch = self._module.torch
            fresh = [page * size + offset for page in pages for offset in range(size)]
            value = torch.cat([cache.path_device_indices(prefix), torch.tensor(fresh)])
            params = self._base.InsertParams(key=key, value=value, prev_prefix_len=reused * size)
            result = _sglang(cache.insert, params)
        finally:
            _sglang(cache.unlock, lock)
        after = self._take()
        node = result.last_device_node
        lease = self._file(_sglang(cache.lock, node), None) if pin else None
        self._poll()
        self._clock += 1
        written = {move.source for move in moves + after if move.source_tier == "device"}
        answer: InsertAnswer = {
            "length": len(key),
            "blocks": self._device_blocks(node),
            "reused": reused,
            "allocated": [page - 1 for page in pages],
            "evicted": evicted,
            "lease": lease,
        }
        if self._tiered:
            fields = self._tier_fields(moves, after, evicted, backed | written)
            answer["moves"], answer["after"] = fields["moves"], fields["after"]
            answer["dropped"] = fields["dropped"]
        return answer

    def _make_room(self, needed: int) -> None:
        """The scheduler's admission and ``evict_for_alloc`` for ``needed`` pages."""
        free = len(self._device.free_pages)
        if needed <= free:
            return
        room = free + self._cache.evictable_size() // self._block_size
        if needed > room:
            raise CandidateError(
                "out_of_blocks", f"needs {needed} pages: {free} free, {room - free} evictable"
            )
        tokens = (needed - free) * self._block_size
        _sglang(self._cache.evict_for_alloc, self._base.EvictParams(num_tokens=tokens))

    def release(self, lease: int) -> None:
        """``unlock`` the lease's device lock, ``dec_host_lock_ref`` its host lock; for
        an id never issued, a lock taken in another cache (as a foreign lease would be)."""
        self._require_cache()
        with self._call():
            held = self._leases.get(lease) if _count(lease) else None
            if held is None:
                _sglang(self._cache.unlock, self._foreign_lock())
            else:
                _sglang(self._cache.unlock, held.lock)
                if held.host is not None:
                    _sglang(self._cache.dec_host_lock_ref, *held.host)
                held.released = True
            self._poll()
            self._clock += 1

    def evict(self, count: object) -> EvictAnswer:
        """``evict(count * page_size tokens)`` (device)."""
        self._require_cache()
        with self._call():
            found = self._evict_device(count)
        answer: EvictAnswer = {"freed": found["freed"]}
        if self._tiered:
            answer["moves"], answer["dropped"] = found["moves"], found["dropped"]
        return answer

    def _evict_device(self, count: object) -> TierEvictAnswer:
        backed = self._backed()
        tokens = cast(Any, count) * self._block_size
        _sglang(self._cache.evict, self._base.EvictParams(num_tokens=tokens))
        freed, moves = self._take_freed(), self._take()
        self._poll()
        written = {move.source for move in moves if move.source_tier == "device"}
        fields = self._tier_fields(moves, [], freed, backed | written)
        return {"freed": freed, "moves": fields["moves"], "dropped": fields["dropped"]}

    def tier_evict(self, count: object, tier: object) -> TierEvictAnswer:
        """``evict`` on the device, ``evict_host`` on the host (in tokens)."""
        self._require_cache()
        with self._call():
            self._tiers_on()
            if tier == "device":
                return self._evict_device(count)
            if tier != "host" or self._host is None:
                raise CandidateError(
                    "invalid_argument", f"this cache has no {tier!r} tier (device and host)"
                )
            tokens = cast(Any, count) * self._block_size
            _sglang(self._cache.evict_host, tokens)
            dropped = self._host_freed()
            self._take()
            self._poll()
            return {"freed": [block for _, block in dropped], "moves": [], "dropped": dropped}

    def lookup(self, tokens: object, namespace: object, pin: bool) -> LookupAnswer:
        """``match_prefix``'s device part and host hit (module docstring)."""
        self._require_cache()
        with self._call():
            self._tiers_on()
            found = self._match(self._key(tokens, namespace))
            device = self._device_blocks(found.last_device_node)
            host = self._host_hit(found)
            lease = None
            if pin:
                lock = _sglang(self._cache.lock, found.last_device_node)
                anchor = None
                if host:
                    taken = _sglang(self._cache.inc_host_lock_ref, found.best_match_node)
                    anchor = (found.best_match_node, taken.to_dec_params())
                lease = self._file(lock, anchor, device=bool(device))
                self._clock += 1
            self._poll()
        blocks = device + host
        return {
            "length": len(blocks) * self._block_size,
            "tiers": ["device"] * len(device) + ["host"] * len(host),
            "blocks": blocks,
            "lease": lease,
        }

    def restore(self, tokens: object, namespace: object, pin: bool) -> RestoreAnswer:
        """The scheduler's admission with a host hit: ``init_load_back`` then
        ``ready_to_load_host_cache`` (module docstring)."""
        self._require_cache()
        with self._call():
            self._tiers_on()
            found = self._match(self._key(tokens, namespace))
            node = found.last_device_node
            moves: list[Transfer] = []
            restored: list[Transfer] = []
            evicted: list[int] = []
            backed = self._backed()
            if found.host_hit_length > 0:
                request = SimpleNamespace(
                    rid=f"kit-{next(self._requests)}",
                    last_node=node,
                    swa_host_hit_length=0,
                    mamba_host_hit_length=0,
                    kv=SimpleNamespace(mamba_pool_idx=None),
                )
                params = self._base.InitLoadBackParams(
                    best_match_node=found.best_match_node,
                    host_hit_length=found.host_hit_length,
                    req=request,
                )
                _, node = _sglang(self._cache.init_load_back, params)
                _sglang(self._cache.ready_to_load_host_cache)
                evicted = self._take_freed()
                copies = self._take()
                moves = [move for move in copies if move.target_tier == "host"]
                restored = [move for move in copies if move.target_tier == "device"]
            lease = self._file(_sglang(self._cache.lock, node), None) if pin else None
            self._poll()
            self._clock += 1
            blocks = self._device_blocks(node)
            written = {move.source for move in moves}
            fields = self._tier_fields(moves, [], evicted, backed | written)
        return {
            "length": len(blocks) * self._block_size,
            "blocks": blocks,
            "restored": [move.row() for move in restored],
            "evicted": evicted,
            "moves": fields["moves"],
            "dropped": fields["dropped"],
            "lease": lease,
        }

    # ------------------------------------------------------------------ reads

    def stats(self) -> StatsAnswer:
        """The device's counters (SGLang's ``evictable_size`` and ``protected_size``, in
        pages); with tiers, the host's from its nodes."""
        self._require_cache()
        size = self._block_size
        evictable = self._cache.evictable_size() // size
        pinned = self._cache.protected_size() // size
        live = [lease for lease in self._leases.values() if not lease.released]
        answer: StatsAnswer = {
            "num_blocks": self._num_blocks,
            "free": len(self._device.free_pages),
            "cached": evictable + pinned,
            "pinned": pinned,
            "evictable": evictable,
            "leases": sum(1 for lease in live if lease.device),
            "clock": self._clock,
        }
        if self._tiered:
            answer["tiers"] = {}
        if self._tiered and self._host is not None:
            held = [node for node in self._nodes() if self._data(node).host_value is not None]
            cached = sum(len(self._data(node).host_value) // size for node in held)
            locked = sum(
                len(self._data(node).host_value) // size
                for node in held
                if self._data(node).host_lock_ref > 0
            )
            answer["tiers"] = {
                "host": {
                    "num_blocks": self._host.size // size,
                    "free": self._host.available_size() // size,
                    "cached": cached,
                    "pinned": locked,
                    "evictable": cached - locked,
                    "leases": sum(1 for lease in live if lease.host is not None),
                    "clock": 0,
                }
            }
        return answer

    def namespaces(self) -> NamespacesAnswer:
        """The ``extra_key`` of every top-level node."""
        self._require_cache()
        names = {child.key.extra_key for child in self._cache.tree_core.root_node.children.values()}
        return {"namespaces": sorted(names, key=namespace_order)}

    def dump(self) -> dict[str, Any]:
        """The canonical dump built from SGLang's nodes (module docstring)."""
        self._require_cache()
        size = self._block_size
        dump = self._tier_dump(
            "value", self._num_blocks, [page - 1 for page in self._device.free_pages]
        )
        if self._tiered:
            dump["write_through"] = standins.MEMORY.hicache_write_policy == "write_through"
            tiers: dict[str, Any] = {}
            if self._host is not None:
                slots = self._host.free_slots + self._host.release_slots
                free = [slot // size for slot in slots if slot % size == 0]
                tiers["host"] = self._tier_dump("host_value", self._host.size // size, free)
            dump["tiers"] = tiers
        return dump

    def _tier_dump(self, field: str, num_blocks: int, free: list[int]) -> dict[str, Any]:
        roots: dict[Any, list[Any]] = {}
        for child in self._cache.tree_core.root_node.children.values():
            if getattr(self._data(child), field) is not None:
                roots.setdefault(child.key.extra_key, []).append(child)
        return {
            "format": 2,
            "block_size": self._block_size,
            "num_blocks": num_blocks,
            "clock": self._clock,
            "free": sorted(free),
            "quarantine": [],
            "namespaces": [
                {"namespace": name, "children": self._edges(roots[name], field)}
                for name in sorted(roots, key=namespace_order)
            ],
        }

    def _edges(self, nodes: list[Any], field: str) -> list[dict[str, Any]]:
        size = self._block_size
        offset = 1 if field == "value" else 0
        pins = "lock_ref" if field == "value" else "host_lock_ref"
        edges = []
        for node in nodes:
            tokens: list[int] = []
            blocks: list[int] = []
            counts: list[int] = []
            while True:
                data = self._data(node)
                count = len(node.key) // size
                tokens.extend(int(token) for token in node.key.token_ids[: count * size])
                values = list(getattr(data, field))
                blocks.extend(int(index) // size - offset for index in values[::size])
                counts.extend([int(getattr(data, pins))] * count)
                children = [
                    child for child in node.children.values()
                    if getattr(self._data(child), field) is not None
                ]  # fmt: skip
                if len(children) != 1:
                    break
                node = children[0]
            edges.append(
                {
                    "tokens": tokens,
                    "blocks": blocks,
                    "pins": counts,
                    "stamps": [0] * len(blocks),
                    "children": self._edges(children, field),
                }
            )
        return sorted(edges, key=lambda edge: edge["tokens"][:size])

    # ------------------------------------------------------------------ not offered

    def events(self) -> EventsAnswer:
        """Not offered (the events level is not declared)."""
        raise CandidateError("unsupported", "the HiCache adapter records no KV events")

    def _require_cache(self) -> None:
        """Refuse a call when no reset built a cache (the first was refused, or closed)."""
        if self._cache is None:
            raise CandidateError("invalid_argument", "no cache: no reset has built one")

    def close(self) -> None:
        """Drop the cache."""
        self._cache = None

    # ------------------------------------------------------------------ internals

    @contextmanager
    def _call(self) -> Iterator[None]:
        """One call into the cache: the stand-ins served, the copy log emptied first."""
        with standins.served():
            self._take()
            self._take_freed()
            self._host_freed()
            yield

    def _tiers_on(self) -> None:
        if not self._tiered:
            raise CandidateError("invalid_argument", "the last reset named no tiers")

    def _poll(self) -> None:
        """The scheduler's per-step poll: flush backups, reap write and load acks."""
        if self._controller is not None:
            _sglang(self._cache.check_hicache_events)

    def _match(self, key: Any) -> Any:
        return _sglang(self._cache.match_prefix, self._base.MatchPrefixParams(key=key))

    def _key(self, tokens: object, namespace: object) -> Any:
        try:
            ids = array("q", cast(Any, tokens))
        except (TypeError, OverflowError, ValueError) as exc:
            raise CandidateError(f"unexpected:{type(exc).__name__}", str(exc)) from None
        key = self._RadixKey(token_ids=ids, extra_key=namespace)
        return _sglang(key.page_aligned, self._block_size)

    def _data(self, node: Any) -> Any:
        return node.component_data[self._FULL]

    def _nodes(self) -> list[Any]:
        found, pending = [], list(self._cache.tree_core.root_node.children.values())
        while pending:
            node = pending.pop()
            found.append(node)
            pending.extend(node.children.values())
        return found

    def _node(self, node_id: Any) -> Any:
        return self._cache.tree_core.node_by_id(node_id)

    def _device_blocks(self, node_id: Any) -> list[int]:
        indices = list(self._cache.path_device_indices(node_id))
        return [int(index) // self._block_size - 1 for index in indices[:: self._block_size]]

    def _host_hit(self, found: Any) -> list[int]:
        """The host ids of ``found``'s host hit: the evicted nodes from the device
        node down to ``best_match_node``, in path order."""
        size = self._block_size
        stop = self._node(found.last_device_node)
        node = self._node(found.best_match_node)
        chain = []
        while node is not None and node is not stop:
            chain.append(node)
            node = node.parent
        blocks: list[int] = []
        for node in reversed(chain):
            host = self._data(node).host_value
            if self._data(node).value is None and host is not None:
                blocks.extend(int(slot) // size for slot in list(host)[::size])
        return blocks

    def _backed(self) -> set[int]:
        """Device blocks with a host copy now (none without a host). O(nodes)."""
        size = self._block_size
        backed: set[int] = set()
        if self._host is None:
            return backed
        for node in self._nodes():
            data = self._data(node)
            if data.value is not None and data.host_value is not None:
                backed.update(int(index) // size - 1 for index in list(data.value)[::size])
        return backed

    def _take(self) -> list[Transfer]:
        return [] if self._controller is None else self._controller.take()

    def _take_freed(self) -> list[int]:
        freed = [page - 1 for page in self._device.freed]
        self._device.freed = []
        return freed

    def _host_freed(self) -> list[list[Any]]:
        if self._host is None:
            return []
        return [["host", page] for page in self._host.take_freed()]

    def _tier_fields(
        self, moves: list[Transfer], after: list[Transfer], evicted: list[int], kept: set[int]
    ) -> dict[str, Any]:
        """The tiers level's fields of an answer: the copies as moves, the device blocks
        freed without a host copy (``kept``: those with one) and the host pages freed as
        dropped."""
        dropped: list[list[Any]] = [["device", block] for block in evicted if block not in kept]
        dropped += self._host_freed()
        return {
            "moves": [move.row() for move in moves],
            "after": [move.row() for move in after],
            "dropped": dropped,
        }

    def _file(self, lock: Any, host: tuple[Any, Any] | None, device: bool = True) -> int:
        lease = len(self._leases) + 1
        self._leases[lease] = _Lease(lock, host, device)
        return lease

    def _foreign_lock(self) -> Any:
        """A lock taken in another cache of the same kind (what a foreign lease holds)."""
        if self._foreign is None:
            size = self._block_size
            params = self._CacheInitParams(
                disable=False,
                req_to_token_pool=None,
                token_to_kv_pool_allocator=DeviceAllocator(1, size),
                page_size=size,
                tree_components=(self._FULL,),
                tree_core_backend="python",
            )
            other = self._module.UnifiedRadixCache(params)
            key = self._RadixKey(token_ids=array("q", [0] * size), extra_key=None)
            torch = self._module.torch
            other.insert(
                self._base.InsertParams(key=key, value=torch.tensor(list(range(size, 2 * size))))
            )
            node = other.match_prefix(self._base.MatchPrefixParams(key=key)).last_device_node
            self._foreign = other.lock(node)
        return self._foreign


def _count(value: object) -> bool:
    """An int >= 0 that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _sglang(call: Any, *args: Any) -> Any:
    """Call into SGLang; an exception it raises becomes an ``unexpected:<Class>`` kind,
    which the profile maps (``[errors]``)."""
    try:
        return call(*args)
    except CandidateError:
        raise
    except Exception as exc:
        raise CandidateError(f"unexpected:{type(exc).__name__}", str(exc)) from exc
