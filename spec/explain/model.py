"""The state after a step, indexed by block, and what one step changed.

A canonical dump (R-DUMP-1) is all two implementations are guaranteed to share, so
everything ``explain`` shows is derived from dumps -- the reference's and any
other target's alike -- never from an implementation's internals.

A dump writes the cached trie path-compressed (R-DUMP-2), so the same block can sit
in a different edge after a split or a merge. To compare two dumps, each cached
block is named by a *key*: a small int standing for "this namespace, this token
path from the root". Keys come from a :class:`KeySpace` shared by all the dumps of
one implementation's run, so a block keeps its key from step to step whatever edge
it is drawn in; its id, pin count and stamp are what may change.

Invariant of a :class:`DumpIndex`: every cached block has exactly one key, and the
key of its parent (a block, or the namespace's root) is indexed too.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kachedb_radix.reference.policies import POLICIES

Dump = dict[str, Any]

#: Every policy's per-block dump fields (R-POL-1).
POLICY_FIELDS: tuple[str, ...] = tuple(
    dict.fromkeys(name for policy in POLICIES.values() for name in policy.dump_fields)
)


class KeySpace:
    """Interns block paths into small ints. Cost: O(B) per lookup (one dict probe)."""

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: dict[tuple[Any, ...], int] = {}

    def root(self, namespace: str | None) -> int:
        """The key of ``namespace``'s root. O(1)."""
        return self._intern(("namespace", namespace))

    def block(self, parent: int, tokens: Sequence[int]) -> int:
        """The key of the block holding ``tokens`` under the block (or root) ``parent``. O(B)."""
        return self._intern((parent, tuple(tokens)))

    def find(self, parent: int, tokens: Sequence[int]) -> int | None:
        """The key of that block if it was ever interned, else None. O(B)."""
        return self._keys.get((parent, tuple(tokens)))

    def _intern(self, path: tuple[Any, ...]) -> int:
        return self._keys.setdefault(path, len(self._keys) + 1)


@dataclass(frozen=True, slots=True)
class CachedBlock:
    """One cached block as a dump shows it.

    Attributes:
        key: its path key (see :class:`KeySpace`).
        parent: the parent block's key, or the namespace root's key.
        namespace: its namespace.
        block: its physical block id.
        pin: its pin count (None when the dump leaves pins out).
        stamp: its recency stamp (None when the dump leaves stamps out).
        edge: the key of the first block of the dump edge holding it.
        position: its index in that edge.
        fields: its eviction policy's per-block fields (R-POL-1), by name; empty for lru.
    """

    key: int
    parent: int
    namespace: str | None
    block: int
    pin: int | None
    stamp: int | None
    edge: int
    position: int
    fields: dict[str, int] = field(default_factory=dict)


@dataclass
class DumpIndex:
    """A dump with every cached block findable by key and by id.

    Attributes:
        dump: the dump itself.
        blocks: cached blocks by key, in dump order (root first, depth first).
        by_id: block id -> key.
        roots: namespace -> root key, in dump order.
        children: key -> keys of its child blocks (roots included).
    """

    dump: Dump
    blocks: dict[int, CachedBlock] = field(default_factory=dict)
    by_id: dict[int, int] = field(default_factory=dict)
    roots: dict[str | None, int] = field(default_factory=dict)
    children: dict[int, list[int]] = field(default_factory=dict)

    @property
    def block_size(self) -> int:
        """Tokens per block."""
        size: int = self.dump["block_size"]
        return size

    @property
    def free(self) -> list[int]:
        """The free ids, ascending."""
        return list(self.dump.get("free", []))

    @property
    def quarantine(self) -> list[int]:
        """The quarantined ids, oldest batch first."""
        return list(self.dump.get("quarantine", []))

    @property
    def policy(self) -> str:
        """The eviction policy the dump names (R-POL-1): ``lru`` when it names none."""
        named: str = (self.dump.get("policy") or {}).get("name", "lru")
        return named if named in POLICIES else "lru"

    def eviction_key(self, block: CachedBlock) -> tuple[int, ...]:
        """``block``'s eviction key under the dump's policy, from what the dump shows of
        it (a missing stamp or field counts as -1). O(1)."""
        policy = POLICIES[self.policy]
        values = {name: block.fields.get(name, -1) for name in policy.key_names}
        values["stamp"] = block.stamp if block.stamp is not None else -1
        return policy.key_from(block.block, values)

    def is_leaf_tail(self, key: int) -> bool:
        """Whether the block ``key`` has no cached child (an eviction candidate's shape). O(1)."""
        return not self.children.get(key)


def index_dump(dump: Dump, keys: KeySpace) -> DumpIndex:
    """Index ``dump``'s cached blocks by key and id. O(cached tokens).

    Raises:
        ValueError: the dump is not a canonical dump (a missing field, an edge whose
            tokens are not its blocks times B).
    """
    try:
        size = int(dump["block_size"])
        spaces = dump["namespaces"]
        index = DumpIndex(dump)
        for space in spaces:
            name = space["namespace"]
            root = keys.root(name)
            index.roots[name] = root
            index.children[root] = []
            pending = [(edge, root) for edge in reversed(space["children"])]
            while pending:
                edge, parent = pending.pop()
                last = _index_edge(index, keys, edge, parent, name, size)
                pending.extend((child, last) for child in reversed(edge["children"]))
    except (KeyError, TypeError, IndexError) as exc:
        raise ValueError(f"not a canonical dump ({type(exc).__name__}: {exc})") from None
    return index


def _index_edge(
    index: DumpIndex,
    keys: KeySpace,
    edge: dict[str, Any],
    parent: int,
    namespace: str | None,
    size: int,
) -> int:
    tokens, ids = edge["tokens"], edge["blocks"]
    if len(tokens) != len(ids) * size or not ids:
        raise ValueError(f"an edge of {len(ids)} blocks holds {len(tokens)} tokens (B={size})")
    pins, stamps = edge.get("pins"), edge.get("stamps")
    named = [name for name in POLICY_FIELDS if isinstance(edge.get(name), list)]
    first = 0
    for position, block in enumerate(ids):
        key = keys.block(parent, tokens[position * size : (position + 1) * size])
        first = first or key
        index.blocks[key] = CachedBlock(
            key,
            parent,
            namespace,
            block,
            None if pins is None else pins[position],
            None if stamps is None else stamps[position],
            first,
            position,
            {name: edge[name][position] for name in named},
        )
        index.by_id[block] = key
        index.children.setdefault(parent, []).append(key)
        index.children.setdefault(key, [])
        parent = key
    return parent


def empty_dump(num_blocks: int, block_size: int) -> Dump:
    """The dump of a fresh tree: every id free, nothing cached. O(num_blocks)."""
    return {
        "format": 2,
        "block_size": block_size,
        "num_blocks": num_blocks,
        "clock": 0,
        "free": list(range(num_blocks)),
        "quarantine": [],
        "namespaces": [],
    }


@dataclass
class Changes:
    """What one step changed, block by block (keys are :class:`KeySpace` keys).

    Attributes:
        new: keys cached now that were not before (or held another id).
        gone: keys cached before that are not now (evicted, or lost by a bug).
        split: keys that start a dump edge now but sat inside one before (R-SPLIT-1).
        merged: keys that started an edge before and sit inside one now (R-DUMP-2).
        pinned: keys whose pin count rose (R-PIN-1).
        unpinned: keys whose pin count fell (R-PIN-4).
        stamped: keys whose stamp changed (R-LRU-1).
        allocated: ids that left the free list.
        freed: ids that joined the free list.
        quarantined: ids that joined the quarantine (R-EPOCH-1).
        reclaimed: ids that left the quarantine (R-EPOCH-2).
        namespaces_added: namespaces that have a root now and had none.
        namespaces_removed: namespaces that had a root and have none now (R-NS-3).
    """

    new: set[int] = field(default_factory=set)
    gone: set[int] = field(default_factory=set)
    split: set[int] = field(default_factory=set)
    merged: set[int] = field(default_factory=set)
    pinned: set[int] = field(default_factory=set)
    unpinned: set[int] = field(default_factory=set)
    stamped: set[int] = field(default_factory=set)
    allocated: list[int] = field(default_factory=list)
    freed: list[int] = field(default_factory=list)
    quarantined: list[int] = field(default_factory=list)
    reclaimed: list[int] = field(default_factory=list)
    namespaces_added: list[str | None] = field(default_factory=list)
    namespaces_removed: list[str | None] = field(default_factory=list)


def diff(before: DumpIndex, after: DumpIndex) -> Changes:
    """What changed from ``before`` to ``after``. O(cached blocks + num_blocks)."""
    changes = Changes()
    for key, now in after.blocks.items():
        was = before.blocks.get(key)
        if was is None or was.block != now.block:
            changes.new.add(key)
            continue
        if (now.edge == key) != (was.edge == key):
            (changes.split if now.edge == key else changes.merged).add(key)
        if was.pin is not None and now.pin is not None and now.pin != was.pin:
            (changes.pinned if now.pin > was.pin else changes.unpinned).add(key)
        if now.stamp != was.stamp:
            changes.stamped.add(key)
    for key, was in before.blocks.items():
        now_block = after.blocks.get(key)
        if now_block is None or now_block.block != was.block:
            changes.gone.add(key)
    free_before, free_after = set(before.free), set(after.free)
    # An id evicted and handed out again in one insert never shows as free: the
    # new blocks' ids count as allocated too.
    fresh_ids = {after.blocks[key].block for key in changes.new}
    changes.allocated = sorted((free_before - free_after) | fresh_ids)
    changes.freed = sorted(free_after - free_before)
    quarantine_before = set(before.quarantine)
    changes.quarantined = [block for block in after.quarantine if block not in quarantine_before]
    quarantine_after = set(after.quarantine)
    changes.reclaimed = [block for block in before.quarantine if block not in quarantine_after]
    changes.namespaces_added = [name for name in after.roots if name not in before.roots]
    changes.namespaces_removed = [name for name in before.roots if name not in after.roots]
    return changes


def walk(index: DumpIndex, keys: KeySpace, namespace: object, tokens: object) -> list[int]:
    """Keys of the cached whole-block prefix of ``tokens`` in ``index`` (R-MATCH-1).

    Malformed input (not a list of ints, a namespace that is not None or a str)
    walks nothing. O(len(tokens)).
    """
    if not isinstance(tokens, list) or not (namespace is None or isinstance(namespace, str)):
        return []
    root = index.roots.get(namespace)
    if root is None:
        return []
    size = index.block_size
    path: list[int] = []
    parent = root
    for start in range(0, len(tokens) // size * size, size):
        key = keys.find(parent, tokens[start : start + size])
        if key is None or key not in index.blocks or index.blocks[key].parent != parent:
            break
        path.append(key)
        parent = key
    return path


def eviction_order(index: DumpIndex) -> Iterator[CachedBlock]:
    """Unpinned leaf-tail blocks, the smallest eviction key under the dump's policy first
    (R-POL-1; under lru least recently used first, ties to the smaller id, R-EVICT-1..3):
    the blocks the next eviction would take first. O(n log n)."""
    tails = [
        block for key, block in index.blocks.items() if index.is_leaf_tail(key) and not block.pin
    ]
    tails.sort(key=index.eviction_key)
    return iter(tails)


def eviction_sequence(
    index: DumpIndex, protected: frozenset[int] = frozenset()
) -> Iterator[CachedBlock]:
    """The blocks the spec would evict from this state, in order, for as long as there
    are any (R-EVICT-1..3, R-POL-1): each time the unpinned leaf tail with the smallest
    eviction key; once a block goes, its parent block becomes a leaf tail when it has no
    other cached child. Blocks in ``protected`` (an insert's own path, R-INS-5) and
    pinned blocks are never taken. O(k log n) for the first k blocks (a heap).
    """
    remaining = {key: len(kids) for key, kids in index.children.items()}
    heap: list[tuple[tuple[int, ...], int]] = []
    for key, block in index.blocks.items():
        if not remaining.get(key) and not block.pin and key not in protected:
            heapq.heappush(heap, (index.eviction_key(block), key))
    while heap:
        _, key = heapq.heappop(heap)
        block = index.blocks[key]
        yield block
        parent = block.parent
        if parent in index.blocks:
            remaining[parent] -= 1
            above = index.blocks[parent]
            if not remaining[parent] and not above.pin and parent not in protected:
                heapq.heappush(heap, (index.eviction_key(above), parent))


def evictable(index: DumpIndex, protected: frozenset[int] = frozenset()) -> int:
    """How many cached blocks eviction could free from this state: unpinned, outside
    ``protected``, with no pinned or protected block below (R-PIN-3). O(n)."""
    held: set[int] = set()
    for key, block in index.blocks.items():
        if block.pin or key in protected:
            while key in index.blocks and key not in held:
                held.add(key)
                key = index.blocks[key].parent
    return len(index.blocks) - len(held)
