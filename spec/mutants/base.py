"""The machinery of planted bugs: the registry, and the reference with a note of the
call in progress.

Each mutant is a subclass of :class:`kachedb_radix.reference.RadixTree` (through
:class:`MutantTree`) that differs from it in exactly one way. Nothing here copies the
reference's logic: a mutant overrides one of the reference's own steps -- argument
checks (``_validate``), the walk (``_walk``), making room (``_make_room``), stamping
(``_stamp``), pinning (``_adjust_pins``), splitting (``_split``), freeing a leaf tail
(``_free_tail``), requeueing (``_offer``, ``_remove_leaf``), the extension points
:meth:`~kachedb_radix.reference.RadixTree.choose_victims` and
:meth:`~kachedb_radix.reference.RadixTree.choose_new_blocks` -- or a public method,
calling the original around its bug. Where a bug belongs to one operation only (a
match that stamps nothing, an insert that reports the wrong length), the step asks
:attr:`MutantTree.calling` which operation is running. Unmutated, :class:`MutantTree`
behaves exactly like the reference -- a test runs the kit against it to prove that.
Nothing here, or in any mutant, touches the reference's modules: bugs live in
subclasses only, so the oracle in the same process stays correct.

The reference keeps its shape persistent (path-copied :class:`kachedb_radix.reference.node.Node`
versions, published as a :class:`kachedb_radix.reference.snapshot.Version`) and its per-block
pins and stamps in side tables indexed by block id (``tree._pins``,
``tree._stamps``); mutants change those through the reference's own helpers
(``_split``, ``_replace``, ``_offer``, ``_publish``, ``_retire``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from kachedb_radix.reference.events import BlockHasher
from kachedb_radix.reference.lease import Lease
from kachedb_radix.reference.results import InsertResult, MatchResult
from kachedb_radix.reference.tree import RadixTree

TreeT = TypeVar("TreeT", bound=type[RadixTree])
TierT = TypeVar("TierT", bound=type[Any])


@dataclass(frozen=True)
class Mutant:
    """One planted bug.

    Attributes:
        name: a stable, unique name.
        rules: the rule ids it violates.
        description: what is wrong, in one sentence.
        tree: the mutated tree class (reference API).
        policy: the eviction policy it runs (R-POL-*), and the kit checks it under.
        policy_options: that policy's options (None: its defaults).
    """

    name: str
    rules: tuple[str, ...]
    description: str
    tree: type[RadixTree]
    policy: str = "lru"
    policy_options: dict[str, object] | None = None
    events: bool = False
    tiers: type[Any] | None = None

    @property
    def target(self) -> type[Any]:
        """The class with the bug: the tiered class of a tier mutant, else the tree."""
        return self.tiers if self.tiers is not None else self.tree


#: Every mutant, by name, in registration order.
REGISTRY: dict[str, Mutant] = {}


def mutant(
    name: str,
    *rules: str,
    policy: str = "lru",
    policy_options: dict[str, object] | None = None,
    events: bool = False,
) -> Callable[[TreeT], TreeT]:
    """Register the decorated tree class as mutant ``name`` violating ``rules``, run
    under ``policy`` (with ``policy_options``), and at the opt-in ``events`` level when
    ``events`` (a bug of the KV event stream, R-EVENT-*).

    The class docstring's first line is the description.

    Raises:
        ValueError: a duplicate name, or no rule given.
    """

    def register(tree: TreeT) -> TreeT:
        if name in REGISTRY or not rules:
            raise ValueError(f"mutant {name!r}: duplicate name or no rules")
        description = (tree.__doc__ or name).strip().splitlines()[0]
        tree.implementation = f"mutant:{name}"
        REGISTRY[name] = Mutant(
            name, tuple(rules), description, tree, policy, policy_options, events
        )
        return tree

    return register


def tier_mutant(name: str, *rules: str) -> Callable[[TierT], TierT]:
    """Register the decorated tiered class (a :class:`~kachedb_radix.reference.tiers.
    TieredTree` subclass) as mutant ``name`` violating ``rules``, run at the opt-in
    ``tiers`` level over the unmutated tree (R-TIER-*).

    Raises:
        ValueError: a duplicate name, or no rule given.
    """

    def register(tiers: TierT) -> TierT:
        if name in REGISTRY or not rules:
            raise ValueError(f"mutant {name!r}: duplicate name or no rules")
        description = (tiers.__doc__ or name).strip().splitlines()[0]
        tiers.implementation = f"mutant:{name}"
        REGISTRY[name] = Mutant(name, tuple(rules), description, MutantTree, tiers=tiers)
        return tiers

    return register


class MutantTree(RadixTree):
    """The reference, noting which public operation is running. Unmutated it is the
    reference."""

    implementation = "mutant:none"

    def __init__(
        self,
        num_blocks: int,
        block_size: int = 16,
        *,
        policy: str = "lru",
        policy_options: dict[str, object] | None = None,
        events: BlockHasher | bool | None = None,
    ) -> None:
        super().__init__(
            num_blocks, block_size, policy=policy, policy_options=policy_options, events=events
        )
        self.calling: str | None = None  # "match", "insert" or "release" while one runs

    @contextmanager
    def _during(self, operation: str) -> Iterator[None]:
        outer, self.calling = self.calling, operation
        try:
            yield
        finally:
            self.calling = outer

    def match(
        self, tokens: object, namespace: str | None = None, *, pin: bool = False
    ) -> MatchResult:
        """The reference's match, noted as running."""
        with self._during("match"):
            return super().match(tokens, namespace, pin=pin)

    def insert(
        self,
        tokens: object,
        namespace: str | None = None,
        *,
        pin: bool = False,
        priority: int | None = None,
        retain_for: int | None = None,
    ) -> InsertResult:
        """The reference's insert, noted as running."""
        with self._during("insert"):
            return super().insert(
                tokens, namespace, pin=pin, priority=priority, retain_for=retain_for
            )

    def release(self, lease: Lease) -> None:
        """The reference's release, noted as running."""
        with self._during("release"):
            super().release(lease)


def lease_of(tree: RadixTree, lease: object) -> Lease | None:
    """``lease`` if it is a live-or-released lease issued by ``tree``, else None."""
    if isinstance(lease, Lease) and lease._tree is tree:
        return lease
    return None
