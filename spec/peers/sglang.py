"""SGLang's ``RadixCache``, release 0.5.23, as a conformance-kit candidate.

The tree is SGLang's own code: the installed wheel's
``sglang/srt/mem_cache/radix_cache.py`` and ``evict_policy.py``, run unmodified
(nothing of SGLang is copied into this project). Install the pinned wheel without
its dependencies::

    pip install --no-deps sglang==0.5.23

Its imports of torch and of sibling modules that need the GPU server stack are
served by :mod:`kachedb_radix.spec.peers.sglang_standins` (real torch is used when installed).
The adapter then plays the part of SGLang's scheduler around the tree, as a
serving engine would call it:

* tokens become an ``array("q")`` key (its conversion errors are SGLang's: a
  non-int raises ``TypeError``, an int beyond int64 ``OverflowError``); the
  namespace is the key's ``extra_key``; the page size is the block size;
* ``match`` is ``match_prefix`` (which splits the last node and refreshes the
  path), with ``pin`` an ``inc_lock_ref`` on the node it returns;
* ``insert`` matches the prefix, locks it, and when the free pages fall short runs
  the scheduler's admission check (free pages plus ``evictable_size()`` must
  cover the new pages, else ``out_of_blocks`` before anything is evicted) and
  ``evict(num_tokens)`` for the shortfall; it then allocates the new pages,
  ``insert``s the key with their KV indices and unlocks the prefix;
* ``release`` is ``dec_lock_ref`` on the lease's node; ``evict(n)`` is
  ``evict(n * page_size tokens)``;
* the KV allocator is a small glue class holding SGLang's paged free list as its
  ``PagedTokenToKVPoolAllocator`` does (pages 1..n, page 0 reserved, freed pages
  put back at the front): page p is block id p - 1;
* SGLang stamps nodes with ``time.monotonic()``; the adapter gives the module a
  logical time source instead (so runs repeat exactly), and reports recency on the
  kit's clock: the clock counts successful match, insert and release calls, and a
  node's stamp is the clock value of the call during which SGLang last set its
  access time. Order is preserved exactly; nothing else is translated;
* the dump is built from SGLang's nodes: merged along single-child chains
  (R-DUMP-2), one pin count (``lock_ref``) and stamp per block from its node;
* at the ``policies`` level (R-POL-*) ``reset`` builds the cache with SGLang's
  ``eviction_policy`` of the same name (lru, lfu, fifo, priority, slru: its own
  definitions, with its own options; the options the kit passes are checked as the
  spec's and reported in the dump, not translated), an insert's ``priority`` goes to
  ``InsertParams.priority`` as given, and ``retain_for``, which SGLang has no
  counterpart for, is dropped. The dump's policy fields come from each node:
  ``hit_count`` (hits), ``creation_time`` on the kit's clock (born), ``priority``
  with no expiry (until 0), ``hit_count >= protected_threshold`` (protected).

What the kit finds against this adapter at the strict spec, and the profile that
declares SGLang's policy (``sglang.toml``), are in SPEC.md's peer notes and
``spec/peers/traces/``.
"""

from __future__ import annotations

import bisect
import importlib.metadata
import importlib.util
import itertools
import sys
from array import array
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from kachedb_radix.reference.errors import InvalidArgumentError
from kachedb_radix.reference.namespaces import namespace_order
from kachedb_radix.reference.policies import check_policy

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
from ..conform.events import encode_payloads
from . import sglang_standins
from .unoffered import WithoutSnapshots

#: The release the adapter is written for.
PINNED = "0.5.23"

#: The profile SGLang ships with this adapter.
PROFILE = Path(__file__).with_name("sglang.toml")

#: The wheel's files the adapter runs.
FILES = ("sglang/srt/mem_cache/evict_policy.py", "sglang/srt/mem_cache/radix_cache.py")


class SGLangUnavailable(ImportError):
    """The pinned SGLang wheel is not installed (the message says how to install it)."""


def installed_version() -> str | None:
    """The installed ``sglang`` distribution's version, None when absent. O(1)."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def load(events: bool = False) -> ModuleType:
    """SGLang's ``radix_cache`` module, run from the installed pinned wheel; with
    ``events``, its imports of the event recorder and the hash utilities served by the
    wheel's own (:mod:`kachedb_radix.spec.peers.sglang_events`).

    Raises:
        SGLangUnavailable: sglang is not installed, is another release, or lacks
            the files; with ``events``, its native hash module cannot be built.
    """
    version = installed_version()
    if version != PINNED:
        found = "not installed" if version is None else f"{version} is installed"
        raise SGLangUnavailable(
            f"the SGLang adapter needs sglang {PINNED} ({found}); install it with "
            f"`pip install --no-deps sglang=={PINNED}`"
        )
    distribution = importlib.metadata.distribution("sglang")
    paths = [Path(str(distribution.locate_file(name))) for name in FILES]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise SGLangUnavailable(f"sglang {PINNED} lacks {', '.join(missing)}")
    evict_policy = _run(paths[0], "evict_policy", {})
    # The real torch when installed; the stand-in otherwise.
    with_torch = importlib.util.find_spec("torch") is None
    standins = sglang_standins.modules(evict_policy, with_torch=with_torch)
    if not events:
        return _run(paths[1], "radix_cache", standins)
    from .sglang_events import event_modules

    served = event_modules(evict_policy)
    standins.update(served)
    module = _run(paths[1], "radix_cache", standins)
    # Kept beside the cache's module: the adapter builds its batches with these structs.
    module.__dict__[KV_EVENTS] = served["sglang.srt.disaggregation.kv_events"]
    return module


#: Where :func:`load` keeps SGLang's ``kv_events`` module beside ``radix_cache``.
KV_EVENTS = "__kachedb_radix_kv_events__"


def _run(path: Path, name: str, standins: dict[str, ModuleType]) -> ModuleType:
    """Execute ``path`` as a private module, its imports of ``standins`` served by them."""
    spec = importlib.util.spec_from_file_location(f"kachedb_radix_sglang_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with _served(standins):
        spec.loader.exec_module(module)
    return module


@contextmanager
def _served(standins: dict[str, ModuleType]) -> Iterator[None]:
    """Put ``standins`` in ``sys.modules`` for the duration, then restore what was there."""
    saved = {name: sys.modules.get(name) for name in standins}
    sys.modules.update(standins)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                del sys.modules[name]
            else:
                sys.modules[name] = module


class LogicalTime:
    """The module's ``time``: every reading is one later than the last."""

    def __init__(self) -> None:
        self._now = itertools.count(1)
        self.last = 0

    def monotonic(self) -> float:
        """The next instant."""
        self.last = next(self._now)
        return float(self.last)

    def perf_counter(self) -> float:
        """The next instant (SGLang times evictions with it)."""
        return self.monotonic()


class PagedFreeList:
    """The KV allocator's free list as SGLang's paged allocator keeps it (see the module
    docstring): the glue the tree calls ``free_segment`` on when it evicts."""

    device = "cpu"

    def __init__(self, num_pages: int, page_size: int) -> None:
        self.page_size = page_size
        self.free_pages = list(range(1, num_pages + 1))
        self.freed: list[int] = []

    def alloc(self, pages: int) -> list[int] | None:
        """Take ``pages`` pages from the front, or None when fewer are free."""
        if pages > len(self.free_pages):
            return None
        taken, self.free_pages = self.free_pages[:pages], self.free_pages[pages:]
        return taken

    def free_segment(self, free_index: Any, *, start_pos: int) -> None:
        """Put the pages of a node's KV indices back at the front, in their order."""
        size = self.page_size
        pages = [int(index) // size for index in list(free_index)[::size]]
        self.free_pages[0:0] = pages
        self.freed.extend(pages)


class SGLangCandidate(WithoutSnapshots):
    """SGLang 0.5.23's ``RadixCache`` behind the plain-data candidate protocol."""

    def __init__(self) -> None:
        self._plain = load()
        self._with_events: ModuleType | None = None  # loaded when a reset asks for events
        self._module = self._plain
        self._params = _Params(self._module)
        self._events_on = False
        self._published: list[bytes] = []
        self._cache: Any = None
        self._num_blocks = 1
        self._pages = PagedFreeList(1, 1)
        self._time = LogicalTime()
        self._block_size = 1
        self._leases: dict[int, Any] = {}
        self._released: set[int] = set()
        self._foreign: Any = None
        self._clock = 0
        self._starts: list[int] = []
        self._ticks: list[int] = []
        self._policy: tuple[str, dict[str, object]] = ("lru", {})

    @property
    def name(self) -> str:
        """The report name."""
        return f"sglang-{PINNED}"

    @property
    def levels(self) -> frozenset[str]:
        """Everything but snapshots: SGLang has no reader snapshots."""
        return frozenset({"core", "pinning", "eviction", "namespaces", "policies", "events"})

    @property
    def block_sizes(self) -> tuple[int, ...] | None:
        """Any page size."""
        return None

    def reset(
        self,
        num_blocks: int,
        block_size: int,
        policy: object = "lru",
        policy_options: object = None,
        events: object = None,
        tiers: object = None,
    ) -> None:
        """A new ``RadixCache`` over a fresh pool of ``num_blocks`` pages, evicting by
        SGLang's policy of the name ``policy`` (its own options: see the module docstring);
        with ``events``, recording KV events as SGLang does (``enable_kv_cache_events``,
        in Dynamo's format when the scheme is ``sglang_dynamo``).

        Raises:
            CandidateError: a policy SGLang has no counterpart for, ``events`` naming a
                scheme other than SGLang's own (``sglang``, ``sglang_dynamo``), or tiers
                (``RadixCache`` has none).
        """
        if tiers is not None:
            raise CandidateError("invalid_argument", "RadixCache keeps no slower tiers")
        try:
            self._policy = check_policy(policy, policy_options)
        except InvalidArgumentError as exc:
            raise CandidateError("invalid_argument", str(exc)) from None
        scheme = events.get("scheme") if isinstance(events, dict) else events
        if scheme not in (None, "sglang", "sglang_dynamo"):
            raise CandidateError(
                "invalid_argument",
                f"SGLang names blocks by its own hashes: the scheme is sglang or "
                f"sglang_dynamo (its Dynamo format), not {scheme!r}",
            )
        if scheme is None:
            self._module = self._plain
        else:
            if self._with_events is None:
                self._with_events = load(events=True)
            self._module = self._with_events
        self._params = _Params(self._module)
        self._events_on = scheme is not None
        self._time = LogicalTime()
        self._module.__dict__["time"] = self._time  # the module's clock, not the system's
        self._pages = PagedFreeList(num_blocks, block_size)
        self._block_size, self._num_blocks = block_size, num_blocks
        params = self._module.CacheInitParams(
            disable=False,
            req_to_token_pool=None,
            token_to_kv_pool_allocator=self._pages,
            page_size=block_size,
            eviction_policy=self._policy[0],
            enable_kv_cache_events=self._events_on,
            dynamo_kv_event_format=scheme == "sglang_dynamo",
        )
        self._cache = _sglang(self._module.RadixCache, params)
        self._published = []
        self._publish()  # a fresh cache announces a clear
        self._leases, self._released, self._foreign = {}, set(), None
        self._clock, self._starts, self._ticks = 0, [], []

    def match(self, tokens: object, namespace: object, pin: bool) -> MatchAnswer:
        """``match_prefix``, locked with ``inc_lock_ref`` when pinned."""
        self._require_cache()
        key = self._key(tokens, namespace)
        start = self._time.last
        found = _sglang(self._cache.match_prefix, self._params.MatchPrefixParams(key=key))
        node = found.last_device_node
        lease = self._lock(node) if pin else None
        self._tick(start)
        blocks = self._blocks(node)
        return {"length": len(blocks) * self._block_size, "blocks": blocks, "lease": lease}

    def insert(
        self,
        tokens: object,
        namespace: object,
        pin: bool,
        priority: object = None,
        retain_for: object = None,
    ) -> InsertAnswer:
        """The scheduler's insert: match, lock, admit, evict the shortfall, allocate,
        ``insert`` (with ``priority``; ``retain_for`` has no counterpart), unlock (see
        the module docstring)."""
        self._require_cache()
        try:
            return self._insert(tokens, namespace, pin, priority)
        finally:
            self._publish()

    def _insert(
        self, tokens: object, namespace: object, pin: bool, priority: object
    ) -> InsertAnswer:
        key = self._key(tokens, namespace)
        params, size, cache = self._params, self._block_size, self._cache
        start = self._time.last
        found = _sglang(cache.match_prefix, params.MatchPrefixParams(key=key))
        prefix, reused = found.last_device_node, found.device_prefix_len // size
        needed = len(key) // size - reused
        _sglang(cache.inc_lock_ref, prefix)
        try:
            evicted = self._make_room(needed)
            pages = self._pages.alloc(needed)
            if pages is None:  # pragma: no cover -- the admission check above made room
                raise CandidateError("out_of_blocks", "the allocator has too few pages")
            indices = [page * size + offset for page in pages for offset in range(size)]
            value = self._torch().cat(
                [cache.path_device_indices(prefix), self._torch().tensor(indices)]
            )
            insert = params.InsertParams(key=key, value=value, priority=priority)
            result = _sglang(cache.insert, insert)
        finally:
            _sglang(cache.dec_lock_ref, prefix)
        node = result.last_device_node
        lease = self._lock(node) if pin else None
        self._tick(start)
        return {
            "length": len(key),
            "blocks": self._blocks(node),
            "reused": reused,
            "allocated": [page - 1 for page in pages],
            "evicted": evicted,
            "lease": lease,
        }

    def release(self, lease: int) -> None:
        """``dec_lock_ref`` on the lease's node; for an id never issued, on a node
        locked in another tree (as a foreign lease would be)."""
        self._require_cache()
        node = self._leases.get(lease) if isinstance(lease, int) else None
        start = self._time.last
        if node is None:
            node = self._foreign_node()
        _sglang(self._cache.dec_lock_ref, node)
        if isinstance(lease, int) and lease in self._leases:
            self._released.add(lease)
        self._tick(start)

    def evict(self, count: object) -> EvictAnswer:
        """``evict(count * page_size tokens)``; the pages it freed, as block ids."""
        self._require_cache()
        try:
            return {"freed": self._evict(count)}
        finally:
            self._publish()

    def stats(self) -> StatsAnswer:
        """The counters, from SGLang's ``evictable_size_`` and ``protected_size_``."""
        self._require_cache()
        size = self._block_size
        evictable = self._cache.evictable_size() // size
        pinned = self._cache.protected_size() // size
        return {
            "num_blocks": self._num_blocks,
            "free": len(self._pages.free_pages),
            "cached": evictable + pinned,
            "pinned": pinned,
            "evictable": evictable,
            "leases": len(self._leases) - len(self._released),
            "clock": self._clock,
        }

    def events(self) -> EventsAnswer:
        """The batches published since the last call (:meth:`_publish`).

        Raises:
            CandidateError: the cache was reset without events.
        """
        self._require_cache()
        if not self._events_on:
            raise CandidateError("invalid_argument", "this cache records no events")
        batches, self._published = self._published, []
        answer: EventsAnswer = {"batches": encode_payloads(batches)["batches"]}
        return answer

    def _publish(self) -> None:
        """What SGLang's scheduler does after a step: take the events the cache recorded
        (``kv_events.take()``) into one of its own ``KVEventBatch``, stamped with the
        kit's clock, as the msgpack payload its publisher sends; nothing when none."""
        if not self._events_on:
            return
        from .sglang_events import batch_payload

        taken = _sglang(self._cache.kv_events.take)
        if taken:
            kv_events = self._module.__dict__[KV_EVENTS]
            self._published.append(batch_payload(kv_events, float(self._clock), taken))

    def namespaces(self) -> NamespacesAnswer:
        """The ``extra_key`` of every top-level node."""
        self._require_cache()
        names = {child.key.extra_key for child in self._cache.root_node.children.values()}
        return {"namespaces": sorted(names, key=namespace_order)}

    def dump(self) -> dict[str, Any]:
        """The canonical dump of SGLang's tree (see the module docstring)."""
        self._require_cache()
        size = self._block_size
        roots: dict[Any, list[Any]] = {}
        for child in self._cache.root_node.children.values():
            roots.setdefault(child.key.extra_key, []).append(child)
        stamps = self._stamps()
        dump: dict[str, Any] = {
            "format": 2,
            "block_size": size,
            "num_blocks": self._num_blocks,
            "clock": self._clock,
            "free": sorted(page - 1 for page in self._pages.free_pages),
            "quarantine": [],
            "namespaces": [
                {"namespace": name, "children": self._edges(roots[name], stamps)}
                for name in sorted(roots, key=namespace_order)
            ],
        }
        if self._policy[0] != "lru":
            dump["policy"] = {"name": self._policy[0], "options": dict(self._policy[1])}
        return dump

    def lookup(self, tokens: object, namespace: object, pin: bool) -> LookupAnswer:
        """Not offered: ``RadixCache`` has no tiers (it does not declare the level)."""
        raise CandidateError("invalid_argument", "RadixCache keeps no slower tiers")

    def restore(self, tokens: object, namespace: object, pin: bool) -> RestoreAnswer:
        """Not offered: ``RadixCache`` has no tiers (it does not declare the level)."""
        raise CandidateError("invalid_argument", "RadixCache keeps no slower tiers")

    def tier_evict(self, count: object, tier: object) -> TierEvictAnswer:
        """Not offered: ``RadixCache`` has no tiers (it does not declare the level)."""
        raise CandidateError("invalid_argument", "RadixCache keeps no slower tiers")

    def close(self) -> None:
        """Drop the tree."""
        self._cache = None

    def _require_cache(self) -> None:
        """Refuse a call when no reset built a cache (the first was refused, or closed)."""
        if self._cache is None:
            raise CandidateError("invalid_argument", "no cache: no reset has built one")

    # ------------------------------------------------------------------ internals

    def _torch(self) -> Any:
        return self._module.torch

    def _key(self, tokens: object, namespace: object) -> Any:
        try:
            ids = array("q", cast(Any, tokens))
        except (TypeError, OverflowError, ValueError) as exc:
            raise CandidateError(f"unexpected:{type(exc).__name__}", str(exc)) from None
        key = self._module.RadixKey(token_ids=ids, extra_key=namespace)
        return _sglang(key.page_aligned, self._block_size)

    def _make_room(self, needed: int) -> list[int]:
        free = len(self._pages.free_pages)
        if needed <= free:
            return []
        room = free + self._cache.evictable_size() // self._block_size
        if needed > room:
            raise CandidateError(
                "out_of_blocks", f"needs {needed} pages: {free} free, {room - free} evictable"
            )
        return self._evict(needed - free)

    def _evict(self, count: Any) -> list[int]:
        self._pages.freed = []
        size, params = self._block_size, self._params

        def evict() -> Any:
            return self._cache.evict(params.EvictParams(num_tokens=count * size))

        _sglang(evict)
        return [page - 1 for page in self._pages.freed]

    def _lock(self, node: Any) -> int:
        _sglang(self._cache.inc_lock_ref, node)
        lease = len(self._leases) + 1
        self._leases[lease] = node
        return lease

    def _foreign_node(self) -> Any:
        if self._foreign is None:
            other = self._module.RadixCache.create_simulated(
                mock_allocator=PagedFreeList(1, self._block_size), page_size=self._block_size
            )
            key = self._module.RadixKey(token_ids=array("q", [0] * self._block_size))
            value = self._torch().tensor(list(range(self._block_size)))
            other.insert(self._params.InsertParams(key=key, value=value))
            node = other.match_prefix(self._params.MatchPrefixParams(key=key)).last_device_node
            other.inc_lock_ref(node)
            self._foreign = node
        return self._foreign

    def _tick(self, start: int) -> None:
        """A successful match, insert or release: the clock moves, and the access times
        SGLang set since ``start`` read as this clock value."""
        self._clock += 1
        self._starts.append(start)
        self._ticks.append(self._clock)

    def _stamps(self) -> Any:
        starts, ticks = self._starts, self._ticks

        def stamp(access_time: float) -> int:
            index = bisect.bisect_left(starts, access_time) - 1
            return ticks[index] if index >= 0 else 0

        return stamp

    def _policy_fields(self, node: Any, stamp: Any) -> dict[str, int]:
        """The spec's per-block policy fields as SGLang's node holds them (R-POL-1)."""
        policy = self._policy[0]
        if policy == "lfu":
            return {"hits": int(node.hit_count)}
        if policy == "fifo":
            return {"born": stamp(node.creation_time)}
        if policy == "priority":
            return {"priority": int(node.priority), "until": 0}
        if policy == "slru":
            threshold = self._cache.eviction_strategy.protected_threshold
            return {"protected": int(node.hit_count >= threshold)}
        return {}

    def _blocks(self, node: Any) -> list[int]:
        indices = list(self._cache.path_device_indices(node))
        return [int(index) // self._block_size - 1 for index in indices[:: self._block_size]]

    def _edges(self, nodes: Sequence[Any], stamp: Any) -> list[dict[str, Any]]:
        edges = []
        for node in nodes:
            tokens: list[int] = []
            blocks: list[int] = []
            pins: list[int] = []
            stamps: list[int] = []
            fields: dict[str, list[int]] = {}
            while True:
                size, count = self._block_size, len(node.key) // self._block_size
                tokens.extend(int(token) for token in node.key.token_ids[: count * size])
                values = list(node.value)
                blocks.extend(int(index) // size - 1 for index in values[::size])
                pins.extend([int(node.lock_ref)] * count)
                stamps.extend([stamp(node.last_access_time)] * count)
                for name, value in self._policy_fields(node, stamp).items():
                    fields.setdefault(name, []).extend([value] * count)
                children = list(node.children.values())
                if len(children) != 1:
                    break
                node = children[0]
            edges.append(
                {
                    "tokens": tokens,
                    "blocks": blocks,
                    "pins": pins,
                    "stamps": stamps,
                    **fields,
                    "children": self._edges(children, stamp),
                }
            )
        size = self._block_size
        return sorted(edges, key=lambda edge: edge["tokens"][:size])


class _Params:
    """The parameter records ``radix_cache`` was loaded with (its module globals)."""

    def __init__(self, module: ModuleType) -> None:
        self.MatchPrefixParams = module.MatchPrefixParams
        self.InsertParams = module.InsertParams
        self.EvictParams = module.EvictParams


def _sglang(call: Any, *args: Any) -> Any:
    """Call into SGLang; an exception it raises becomes an ``unexpected:<Class>`` kind,
    which the profile maps (``[errors]``)."""
    try:
        return call(*args)
    except CandidateError:
        raise
    except Exception as exc:
        raise CandidateError(f"unexpected:{type(exc).__name__}", str(exc)) from exc
