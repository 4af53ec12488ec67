"""The machinery of planted bugs: a hookable copy of the reference and the registry.

:class:`MutantTree` is :class:`reference.RadixTree` with its public operations
re-expressed through small hook methods (token validation, the match walk, the
eviction made room for by an insert, stamping, splitting). Unmutated it behaves
exactly like the reference -- a test runs the kit against it to prove that -- so
each mutant overrides one hook, or one method, and differs in exactly one way.
Nothing here, or in any mutant, touches the reference's modules: bugs live in
subclasses only, so the oracle in the same process stays correct.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from reference.errors import OutOfBlocksError
from reference.lease import Lease
from reference.node import Node
from reference.results import InsertResult, MatchResult
from reference.tokens import as_token_list
from reference.tree import RadixTree, _check_namespace, _Path, _path_blocks

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
        _check_namespace(namespace)

    def _validate(self, tokens: object, namespace: object) -> list[int]:
        """Validate the arguments of match and insert, tokens first (R-TOK-5)."""
        token_list = self._tokens(tokens)
        self._namespace_ok(namespace)
        return token_list

    def _match_limit(self, tokens: list[int]) -> int:
        """How many whole blocks a match may cover (R-MATCH-1)."""
        return len(tokens) // self._block_size

    def _match_walk(
        self, namespace: str | None, tokens: list[int], limit: int
    ) -> tuple[_Path, int]:
        """The walk a match does (R-NS-2)."""
        return self._walk(namespace, tokens, limit)

    def _match_time(self) -> int:
        """The time a match stamps with (R-LRU-3)."""
        return self._tick()

    def _match_stamp(self, path: _Path, now: int) -> None:
        """Stamp a match's blocks (R-LRU-1)."""
        self._stamp(path, now)

    def _insert_tokens(self, tokens: list[int]) -> list[int]:
        """The tokens an insert caches (R-INS-3)."""
        return tokens

    def _insert_length(self, tokens: list[int], wanted: int) -> int:
        """The length an insert reports (R-INS-1)."""
        return wanted * self._block_size

    def _make_room(self, path: _Path, needed: int) -> list[int]:
        """Evict for an insert that needs ``needed`` new blocks (R-INS-5, R-INS-6)."""
        shortfall = needed - self._allocator.free_count
        if shortfall <= 0:
            return []
        self._adjust_pins(path, +1)
        evictable = self._cached - self._pinned
        if shortfall > evictable:
            self._adjust_pins(path, -1)
            raise OutOfBlocksError(f"insert needs {needed} new blocks")
        evicted = self._evict_blocks(shortfall)
        self._adjust_pins(path, -1)
        return evicted

    def _insert_stamp(self, path: _Path, now: int, reused: int) -> None:
        """Stamp an insert's path (R-LRU-1)."""
        self._stamp(path, now)

    def _split_at(self, node: Node, used: int) -> Node:
        """Split ``node`` after ``used`` blocks; return the upper half (R-SPLIT-*)."""
        return node.split(self._block_size, used)

    # ------------------------------------------------------------------ operations

    def match(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> MatchResult:
        """The reference's match, through the hooks."""
        token_list = self._validate(tokens, namespace)
        path, matched = self._match_walk(namespace, token_list, self._match_limit(token_list))
        now = self._match_time()
        self._match_stamp(path, now)
        blocks = _path_blocks(path)
        lease = self._pin(namespace, token_list, matched, path) if pin else None
        return MatchResult(matched * self._block_size, blocks, lease)

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
        return InsertResult(
            length=self._insert_length(token_list, wanted),
            blocks=_path_blocks(path),
            reused=reused,
            allocated=tuple(allocated),
            evicted=tuple(evicted),
            lease=lease,
        )

    def _attach(
        self,
        namespace: str | None,
        path: _Path,
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
                parent = self._roots[namespace] = Node.root(namespace)
        else:
            parent, used = path[-1]
            if used < len(parent.blocks):
                parent = self._split_at(parent, used)
                self._nodes += 1
        new_tokens = tokens[reused * size : wanted * size]
        count = len(new_blocks)
        self._cached += count
        if not parent.is_root and not parent.children:
            parent.tokens.extend(new_tokens)
            parent.blocks.extend(new_blocks)
            parent.pins.extend([0] * count)
            parent.stamps.extend([0] * count)
            self._queue.offer(parent, self._nodes)
            return
        child = Node(parent, new_tokens, list(new_blocks), [0] * count, [0] * count)
        parent.children[child.first_block(size)] = child
        self._nodes += 1
        self._queue.offer(child, self._nodes)


def lease_of(tree: RadixTree, lease: object) -> Lease | None:
    """``lease`` if it is a live-or-released lease issued by ``tree``, else None."""
    if isinstance(lease, Lease) and lease._tree is tree:
        return lease
    return None
