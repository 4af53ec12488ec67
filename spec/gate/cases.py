"""What a gate run measures: the standard cases for one target.

* **match** -- a full match by shape and prompt length, tokens as a uint32 array, a list or
  int64 (:data:`QUICK_MATCHES`, :data:`FULL_MATCHES`);
* **insert** -- a sequence sharing nothing, one sharing 7/8 of its blocks, one splitting an
  edge; and the **request cycle** (match with a pin, insert, release);
* **eviction** -- the *first* ``evict(64)`` after filling the wide shared-prefix tree, per
  freed block, at 10^3 and 10^6 cached blocks (and 10^4, 10^5 in the full run): both a
  figure against the baseline and the growth check (at most 3x from the smallest size to
  the largest); for a target with eviction policies (R-POL-*) the same at 10^3 and 10^6
  under each other policy (``evict/first/<policy>/<size>``), each with its own growth
  check (rounds: :data:`SMALL_EVICT_ROUNDS`);
* **memory** -- bytes per cached block beyond the tokens, for targets that report their
  own allocations (:mod:`kachedb_radix.spec.gate.memory`);
* **block pool host side** -- for ``reference`` and ``accel``, the CPU side of a GPU pool
  call (:mod:`kachedb_radix.spec.gate.blockpool`);
* **router index** -- for ``reference`` and ``accel``, applying an event stream, 64-block
  queries over 16 and 128 workers, churn beside 10^4 and (accel) 10^6 holder-blocks, a
  clear beside 0 and 2^17 blocks (the larger cases anchored by the smaller), and (accel)
  bytes per holder-block at 10^6 for 16, 128 and 1,024 workers
  (:mod:`kachedb_radix.spec.gate.router`);
* **tiers** -- for ``reference`` and ``accel``, the CPU cost of planning a restore per
  block brought up: ``lookup`` and ``restore`` of a path spread over device, host and
  disk, no bytes; a restore from the host and a demotion to it with their bytes, per a
  memory copy of the same bytes; a tiered serving loop per the plain one
  (:mod:`kachedb_radix.spec.gate.tiers`).

Each timed case names the kind of anchor loop that normalises it, timed between its rounds
(:mod:`kachedb_radix.spec.gate.timing`): ``cpu`` for matches and the pool's host side, ``memory``
for the cases that allocate and walk large trees -- but for the first eviction under a
policy other than lru, whose *anchor* is lru's first eviction of the same size in the
same pass: its figure against the baseline is its cost relative to lru's, the same work
on the same tree, which no state of a shared machine moves apart (the memory loop does:
on one VM it ran 23-60 us from one minute to the next while these cases did not follow).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import memory, shapes
from .blockpool import host_side_cases
from .router import router_cases, router_memory_cases
from .shapes import Workload
from .tiers import tier_cases
from .timing import CPU, MEMORY
from .trees import GateTarget

#: (shape, length, input kinds) of the match cases; the quick set is a subset.
QUICK_MATCHES: list[tuple[str, int, tuple[str, ...]]] = [
    ("branchy", 1024, ("uint32", "list")),
    ("long_edge", 1024, ("uint32",)),
    ("long_edge", 16_384, ("int64",)),
    ("system_prompts", 1024, ("uint32",)),
    ("chat", 4096, ("uint32",)),
]
FULL_MATCHES: list[tuple[str, int, tuple[str, ...]]] = [
    ("branchy", 16, ("uint32",)),
    ("branchy", 1024, ("uint32", "list", "int64")),
    ("branchy", 16_384, ("uint32",)),
    ("long_edge", 16, ("uint32",)),
    ("long_edge", 1024, ("uint32", "list")),
    ("long_edge", 16_384, ("int64", "uint32")),
    ("long_edge", 131_072, ("uint32", "list")),
    ("system_prompts", 1024, ("uint32",)),
    ("system_prompts", 131_072, ("uint32",)),
    ("chat", 4096, ("uint32", "list")),
    ("chat", 131_072, ("uint32",)),
]
INSERT_KINDS: dict[str, Callable[..., Workload]] = {
    "insert/fresh": shapes.insert_fresh,
    "insert/shared": shapes.insert_shared,
    "insert/split": shapes.insert_split,
    "cycle/pin-insert-release": shapes.serving_cycle,
}
#: The first eviction's growth from the smallest size to the largest may not exceed this.
MAX_EVICT_GROWTH = 3.0

#: The policies besides lru whose first eviction's growth is checked (R-POL-1).
GROWTH_POLICIES = ("lfu", "fifo", "priority", "slru")


@dataclass(frozen=True)
class Case:
    """One timed figure: ``name`` (``kind/shape/size/input``), normalised by the
    ``calibration`` loop."""

    name: str
    make: Callable[[], Workload] = field(compare=False, repr=False)
    calibration: str = CPU
    #: Another case of the plan whose median, same pass, divides this one's against the
    #: baseline instead of the calibration loop (None: the loop).
    anchor: str | None = None


@dataclass(frozen=True)
class MemoryCase:
    """One memory figure: bytes per cached block of the tree ``build()`` returns."""

    name: str
    build: Callable[[], Any] = field(compare=False, repr=False)


@dataclass(frozen=True)
class Plan:
    """What a gate run measures for one target."""

    target: str
    mode: str
    cases: list[Case]
    memory: list[MemoryCase] = field(default_factory=list)
    #: (smallest, largest) first-eviction cases, one pair per policy checked
    evict_keys: tuple[tuple[str, str], ...] = ()
    notes: list[str] = field(default_factory=list)


#: The first eviction from a tree of at most this many blocks, under every policy, is
#: timed over :data:`SMALL_EVICT_ROUNDS` fills after :data:`SMALL_EVICT_WARMUPS` untimed
#: ones (a fill costs milliseconds there): a median of three 25 us calls moved 20% from
#: run to run on a loaded core, enough to hide half of a 1.5x regression or to fake one,
#: and the policies' medians of two were two of the figures that failed quiet runs (slru
#: and lfu at 10^3). The ratio to lru stays wide from one process to the next even so
#: (lfu 0.88-1.21x, priority 0.68-1.16x of lru in the same pass, nine rounds, six
#: processes): more rounds narrow a run's median, not a process's state.
#: The warm-up gives every timed round the same history -- a tree of that size built and
#: freed before its own fill -- where the first would otherwise be the process's first.
#: Larger trees keep three rounds for lru and two for the other policies (each divided
#: by lru's in the same pass), with no warm-up: a 10^6-block fill takes seconds.
SMALL_EVICT_BLOCKS = 10_000
SMALL_EVICT_ROUNDS = 9
SMALL_EVICT_WARMUPS = 1


def _first_evict(
    factory: shapes.TreeFactory, impl: str, size: int, policy: str
) -> functools.partial[Workload]:
    """The first-eviction case of ``size`` blocks under ``policy``, its rounds as above."""
    if size <= SMALL_EVICT_BLOCKS:
        rounds, warmups = SMALL_EVICT_ROUNDS, SMALL_EVICT_WARMUPS
    else:
        rounds, warmups = (3 if policy == "lru" else 2), 0
    return functools.partial(
        shapes.first_evict_workload, factory, impl, size,
        rounds=rounds, policy=policy, warmups=warmups,
    )  # fmt: skip


def first_evict_name(size: int, policy: str = "lru") -> str:
    return f"evict/first/{size}" if policy == "lru" else f"evict/first/{policy}/{size}"


def build_plan(
    target: GateTarget,
    quick: bool,
    only: str | None = None,
    evict_sizes: tuple[int, ...] | None = None,
) -> Plan:
    """The cases of a quick or full run for ``target`` (``only``: just the names holding
    that text; ``evict_sizes``: other first-eviction sizes, for tests)."""
    factory, impl = target.factory, target.implementation
    built: dict[tuple[str, int], Any] = {}

    def tree_for(shape: str, length: int) -> Any:
        # A match case's tree serves exactly its query length (the query is the whole
        # cached path); trees are shared by the input kinds and kept for the run.
        key = (shape, length)
        if key not in built or not target.reuse_trees:
            built[key] = shapes.build_tree(factory, impl, shapes.get_shape(shape, length))
        return built[key]

    def match(shape: str, length: int, kind: str) -> Workload:
        query = shapes.get_shape(shape, length).query[:length]
        return shapes.match_workload(tree_for(shape, length), query, kind)

    cases: list[Case] = []
    for shape, length, kinds in QUICK_MATCHES if quick else FULL_MATCHES:
        for kind in kinds:
            make = functools.partial(match, shape, length, kind)
            cases.append(Case(f"match/{shape}/{length}/{kind}", make, CPU))
    for length in (1024,) if quick else (1024, 16_384):
        for name, maker in INSERT_KINDS.items():
            make = functools.partial(maker, factory, impl, length)
            cases.append(Case(f"{name}/{length}", make, MEMORY))
    sizes = evict_sizes or (shapes.QUICK_EVICT_SIZES if quick else shapes.EVICT_SIZES)
    for size in sizes:
        make = _first_evict(factory, impl, size, "lru")
        cases.append(Case(first_evict_name(size), make, MEMORY))
    for policy in GROWTH_POLICIES if target.policies else ():
        for size in (min(sizes), max(sizes)):
            make = _first_evict(factory, impl, size, policy)
            anchor = first_evict_name(size)
            cases.append(Case(first_evict_name(size, policy), make, MEMORY, anchor))
    if target.pool is not None:
        for name, host_side in host_side_cases(target.pool).items():
            cases.append(Case(name, host_side, CPU))
        for name, (workload, calibration, paired) in router_cases(target.pool).items():
            cases.append(Case(name, workload, calibration, paired))
        for name, (tier_case, tier_anchor) in tier_cases(target.pool, quick).items():
            cases.append(Case(name, tier_case, MEMORY, tier_anchor))

    memory_cases: list[MemoryCase] = []
    if memory.reports_memory(factory(1, 1)):
        for name, builder in memory.memory_shapes(quick).items():
            build = functools.partial(builder, factory, impl)
            memory_cases.append(MemoryCase(f"memory/{name}", build))
    if target.pool is not None:
        for name, index_of in router_memory_cases(target.pool).items():
            memory_cases.append(MemoryCase(name, index_of))

    if only is not None:
        chosen = {case.name for case in cases if only in case.name}
        chosen |= {case.anchor for case in cases if case.name in chosen and case.anchor}
        cases = [case for case in cases if case.name in chosen]
        memory_cases = [case for case in memory_cases if only in case.name]
    names = {case.name for case in cases}
    keys = tuple(
        (first_evict_name(min(sizes), policy), first_evict_name(max(sizes), policy))
        for policy in ("lru", *(GROWTH_POLICIES if target.policies else ()))
        if len(sizes) > 1
        and {first_evict_name(min(sizes), policy), first_evict_name(max(sizes), policy)} <= names
    )
    notes = [
        f"eviction check: the first evict({shapes.EVICT_BATCH}) after a fill, per freed "
        f"block, at {min(sizes):,} vs {max(sizes):,} cached blocks (block size 1, "
        f"{shapes.FIRST_EVICT_HEADS} shared heads, leaves of "
        f"{shapes.FIRST_EVICT_LEAF_BLOCKS} blocks), at most {MAX_EVICT_GROWTH:g}x"
        + (f"; also under {', '.join(GROWTH_POLICIES)}" if target.policies else "")
    ]
    return Plan(target.name, "quick" if quick else "full", cases, memory_cases, keys, notes)
