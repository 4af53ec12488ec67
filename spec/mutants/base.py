"""The machinery of planted bugs: a hookable copy of the reference and the registry.

:class:`MutantTree` is :class:`kachedb_radix.reference.RadixTree` with its public operations
re-expressed through small hook methods (token validation, the match walk, the
room made by an insert, stamping, splitting, evicting one leaf's blocks). Unmutated
it behaves exactly like the reference -- a test runs the kit against it to prove
that -- so each mutant overrides one hook, or one method, and differs in exactly
one way. Nothing here, or in any mutant, touches the reference's modules: bugs live
in subclasses only, so the oracle in the same process stays correct.

The reference keeps its shape persistent (path-copied :class:`kachedb_radix.reference.node.Node`
versions, published as a :class:`kachedb_radix.reference.snapshot.Version`) and its per-block
pins and stamps in side tables indexed by block id (``tree._pins``,
``tree._stamps``); the hooks below work on those, through the reference's own
helpers (``_split``, ``_replace``, ``_offer``, ``_publish``, ``_retire``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kachedb_radix.reference.errors import OutOfBlocksError
from kachedb_radix.reference.lease import Lease
from kachedb_radix.reference.node import Node
from kachedb_radix.reference.results import InsertResult, MatchResult
from kachedb_radix.reference.tokens import as_token_list
from kachedb_radix.reference.tree import RadixTree, check_namespace
from kachedb_radix.reference.walk import Path, path_blocks

TreeT = TypeVar("TreeT", bound=type[RadixTree])


@dataclass(frozen=True)
class Mutant:
    """One planted bug.

    Attributes:
        name: a stable, unique name.
        rules: the rule ids it violates.
        description: what is wrong, in one sentence.
        tree: the mutated tree class (reference API).
    """

    name: str
    rules: tuple[str, ...]
    description: str
    tree: type[RadixTree]


#: Every mutant, by name, in registration order.
REGISTRY: dict[str, Mutant] = {}


def mutant(name: str, *rules: str) -> Callable[[TreeT], TreeT]:
    """Register the decorated tree class as mutant ``name`` violating ``rules``.

    The class docstring's first line is the description.

    Raises:
        ValueError: a duplicate name, or no rule given.
    """

    def register(tree: TreeT) -> TreeT:
        if name in REGISTRY or not rules:
            raise ValueError(f"mutant {name!r}: duplicate name or no rules")
        description = (tree.__doc__ or name).strip().splitlines()[0]
        tree.implementation = f"mutant:{name}"
        REGISTRY[name] = Mutant(name, tuple(rules), description, tree)
        return tree

    return register


class MutantTree(RadixTree):
    """The reference, with hooks for planting one bug. Unmutated it is the reference."""

    implementation = "mutant:none"

    # ------------------------------------------------------------------ hooks

    def _tokens(self, tokens: object) -> list[int]:
        """Validate a token input (R-TOK-*)."""
        return as_token_list(tokens)

    def _namespace_ok(self, namespace: object) -> None:
        """Validate a namespace (R-NS-4)."""
        check_namespace(namespace)

    def _validate(self, tokens: object, namespace: object) -> list[int]:
        """Validate the arguments of match and insert, tokens first (R-TOK-5)."""
        token_list = self._tokens(tokens)
        self._namespace_ok(namespace)
        return token_list

    def _match_limit(self, tokens: list[int]) -> int:
        """How many whole blocks a match may cover (R-MATCH-1)."""
        return len(tokens) // self._block_size

    def _match_walk(self, namespace: str | None, tokens: list[int], limit: int) -> tuple[Path, int]:
        """The walk a match does (R-NS-2)."""
        return self._walk(namespace, tokens, limit)

    def _match_time(self) -> int:
        """The time a match stamps with (R-LRU-3)."""
        return self._tick()

    def _match_stamp(self, path: Path, now: int) -> None:
        """Stamp a match's blocks (R-LRU-1)."""
        self._stamp(path, now)

    def _insert_tokens(self, tokens: list[int]) -> list[int]:
        """The tokens an insert caches (R-INS-3)."""
        return tokens

    def _insert_length(self, tokens: list[int], wanted: int) -> int:
        """The length an insert reports (R-INS-1)."""
        return wanted * self._block_size

    def _make_room(self, path: Path, needed: int) -> list[int]:
        """Find ``needed`` free blocks for an insert: reclaim, then evict (R-INS-5,
        R-INS-6, R-EPOCH-2, R-EPOCH-3). Returns the evicted ids."""
        if needed <= self._allocator.free_count:
            return []
        self._check_room(path, needed)
        self._reclaim()
        shortfall = needed - self._allocator.free_count
        if shortfall <= 0:
            return []
        self._adjust_pins(path, +1)
        evicted = self._evict_blocks(shortfall)
        self._adjust_pins(path, -1)
        if self._allocator.free_count < needed:
            raise OutOfBlocksError(f"insert needs {needed} new blocks")
        return evicted

    def _insert_stamp(self, path: Path, now: int, reused: int) -> None:
        """Stamp an insert's path (R-LRU-1)."""
        self._stamp(path, now)

    def _split_at(self, node: Node, used: int) -> Node:
        """Split ``node`` after ``used`` blocks; return the upper half (R-SPLIT-*)."""
        return self._split(node, used)

    def _evict_from(self, leaf: Node, room: int) -> list[int]:
        """Evict from the LRU leaf ``leaf`` (at most ``room`` blocks wanted): its tail
        block (R-EVICT-1). Returns the freed ids in eviction order."""
        tail = leaf.tail()
        if leaf.count == 1:
            self._remove_leaf(leaf)
        else:
            self._replace(leaf.without_tail())
            self._offer(leaf.nid)
        self._cached -= 1
        return [tail]

    # ------------------------------------------------------------------ operations

    def match(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> MatchResult:
        """The reference's match, through the hooks."""
        token_list = self._validate(tokens, namespace)
        path, matched = self._match_walk(namespace, token_list, self._match_limit(token_list))
        now = self._match_time()
        self._match_stamp(path, now)
        lease = self._pin(namespace, token_list, matched, path) if pin else None
        self._publish()
        return MatchResult(matched * self._block_size, path_blocks(path), lease)

    def insert(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> InsertResult:
        """The reference's insert, through the hooks."""
        token_list = self._insert_tokens(self._validate(tokens, namespace))
        wanted = len(token_list) // self._block_size
        path, reused = self._walk(namespace, token_list, wanted)
        needed = wanted - reused
        evicted = self._make_room(path, needed)
        if evicted:
            # Eviction made new versions of the nodes: walk the current shape again.
            path, reused = self._walk(namespace, token_list, wanted)
            needed = wanted - reused
            if needed > self._allocator.free_count:
                raise OutOfBlocksError(f"insert needs {needed} new blocks")
        allocated: list[int] = []
        if needed > 0:
            allocated = self._allocator.allocate(needed)
            self._attach(namespace, path, token_list, reused, wanted, allocated)
            path, _ = self._walk(namespace, token_list, wanted)
        now = self._tick()
        self._insert_stamp(path, now, reused)
        lease = self._pin(namespace, token_list, wanted, path) if pin else None
        self._publish()
        return InsertResult(
            length=self._insert_length(token_list, wanted),
            blocks=path_blocks(path),
            reused=reused,
            allocated=tuple(allocated),
            evicted=tuple(evicted),
            lease=lease,
        )

    def _attach(
        self,
        namespace: str | None,
        path: Path,
        tokens: list[int],
        reused: int,
        wanted: int,
        new_blocks: list[int],
    ) -> None:
        """The reference's ``_attach``, splitting through :meth:`_split_at`."""
        size = self._block_size
        if not path:
            parent = self._roots.get(namespace)
            if parent is None:
                parent = self._new_node(None, [], [])
                self._root_names[parent.nid] = namespace
        else:
            parent, used = path[-1]
            if used < parent.count:
                parent = self._split_at(parent, used)
        new_tokens = tokens[reused * size : wanted * size]
        self._cached += len(new_blocks)
        if self._parents[parent.nid] is not None and not parent.children:
            self._replace(parent.extended(size, new_tokens, new_blocks))
            self._offer(parent.nid)
            return
        child = self._new_node(parent.nid, new_tokens, list(new_blocks))
        self._replace(parent.with_children(parent.children.set(child.first_block(size), child)))
        self._offer(child.nid)

    def _evict_blocks(self, count: int) -> list[int]:
        """The reference's eviction loop, evicting each leaf through :meth:`_evict_from`."""
        evicted: list[int] = []
        while len(evicted) < count:
            nid = self._queue.pop_lru()
            if nid is None:
                break
            evicted.extend(self._evict_from(self._nodes[nid], count - len(evicted)))
        if evicted:
            self._publish()
            self._retire(evicted)
        return evicted


def lease_of(tree: RadixTree, lease: object) -> Lease | None:
    """``lease`` if it is a live-or-released lease issued by ``tree``, else None."""
    if isinstance(lease, Lease) and lease._tree is tree:
        return lease
    return None
