"""The kit's oracle: the reference, able to follow a candidate's admissible choices.

With the strict profile the oracle is exactly :class:`kachedb_radix.reference.RadixTree`: it
evicts and allocates by the rules and the kit compares block for block. A profile
that tolerates another eviction or allocation policy (:mod:`kachedb_radix.spec.profile`) makes
the oracle *adopt* the candidate's choice instead -- evict exactly the blocks the
candidate evicted, hand out exactly the ids it allocated -- after checking that the
choice is admissible under the declared modes:

* every evicted block is cached, unpinned and off the path an insert extends
  (R-PIN-3, R-INS-5); per-block granularity frees leaf tails one by one, deepest
  first; whole-leaf-node granularity frees a set closed under descendants (R-EVICT-1);
* exactly ``min(n, evictable)`` blocks (``exact``), or at least that many with
  only the last node freed overshooting (``covering``: whole nodes, never a node
  more than needed; a node's blocks are those of the canonical edge holding the
  last block freed) (R-EVICT-4, R-INS-5); an insert evicts only when short;
* with exact recency, the least recently used leaf tail is among them (R-EVICT-2);
* allocated ids are free, distinct and as many as the new blocks (R-ALLOC-1).

An inadmissible choice raises :class:`Inadmissible`, naming the rules it breaks.
Having adopted the choice, both trees hold the same blocks under the same ids, so
everything else -- answers, dumps, pins, stats -- is still compared exactly.

The oracle also records facts the rule map uses (:mod:`kachedb_radix.spec.rulemap`): whether an
insert split an edge, readers inside and blocks pinned before a step.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any

from kachedb_radix import reference
from kachedb_radix.reference.allocator import BlockAllocator
from kachedb_radix.reference.errors import InvalidArgumentError, RadixError
from kachedb_radix.reference.node import Node
from kachedb_radix.reference.tokens import as_token_list
from kachedb_radix.reference.tree import check_namespace
from kachedb_radix.reference.walk import Path

from .adapter import TreeAdapter
from .candidate import CandidateError, EvictAnswer, InsertAnswer
from .profile import STRICT, Profile


class Inadmissible(Exception):
    """A candidate's choice that no declared mode allows.

    Attributes:
        rules: the rules it breaks, the primary first.
        cause: what was wrong, in one line.
    """

    def __init__(self, rules: tuple[str, ...], cause: str) -> None:
        super().__init__(f"{', '.join(rules)}: {cause}")
        self.rules = rules
        self.cause = cause


class FollowingAllocator(BlockAllocator):
    """The reference allocator, which can be told the ids of its next allocation."""

    __slots__ = ("_primed",)

    def __init__(self, num_blocks: int) -> None:
        super().__init__(num_blocks)
        self._primed: list[int] | None = None

    def prime(self, ids: Sequence[int]) -> None:
        """Make the next ``allocate(len(ids))`` return ``ids``. O(1).

        Raises:
            Inadmissible: an id is not free, or appears twice (R-ALLOC-1).
        """
        seen: set[int] = set()
        for block in ids:
            if not (0 <= block < self.num_blocks) or self._allocated[block] or block in seen:
                raise Inadmissible(
                    ("R-ALLOC-1",), f"allocated block {block}, which is not free to take"
                )
            seen.add(block)
        self._primed = list(ids)

    def allocate(self, count: int) -> list[int]:
        """The primed ids when primed for ``count`` blocks, else the smallest free ones."""
        primed, self._primed = self._primed, None
        if primed is None or count != len(primed):
            return super().allocate(count)
        chosen = set(primed)
        self._free_heap = [block for block in self._free_heap if block not in chosen]
        heapq.heapify(self._free_heap)
        for block in primed:
            self._allocated[block] = 1
        return primed


class FollowingTree(reference.RadixTree):
    """:class:`kachedb_radix.reference.RadixTree`, plus adoption of evictions and allocations."""

    implementation = "reference"

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self._allocator = FollowingAllocator(num_blocks)
        self.split_seen = False

    # ------------------------------------------------------------------ facts

    def facts(self) -> dict[str, Any]:
        """What the rule map may ask about the state before a step. O(1)."""
        return {
            "block_size": self._block_size,
            "readers": len(self._readers),
            "pinned": self._pinned,
            "cached": self._cached,
            "before": self.snapshot(),  # O(1): the shape before the step, dumped on demand
            "stamps": self._stamps,  # evicted blocks keep theirs: read after the step too
        }

    def _split(self, node: Node, at: int) -> Node:
        self.split_seen = True
        return super()._split(node, at)

    # ------------------------------------------------------------------ adoption

    def evict_following(self, count: object, freed: Sequence[int], profile: Profile) -> None:
        """Evict exactly ``freed`` (the candidate's answer to ``evict(count)``).

        Raises:
            InvalidArgumentError: ``count`` is not an int >= 0 (as ``evict``).
            Inadmissible: ``freed`` is not an admissible eviction (module docstring).
        """
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidArgumentError(f"evict count must be an int >= 0, got {count!r}")
        asked = min(count, self._cached - self._pinned)
        self._check_count(freed, asked, profile, ("R-EVICT-4",), "evict")
        self._evict_chosen(freed, profile, protected=[])

    def insert_following(
        self,
        tokens: object,
        namespace: str | None,
        pin: bool,
        evicted: Sequence[int] | None,
        allocated: Sequence[int] | None,
        profile: Profile,
    ) -> Any:
        """``insert``, evicting ``evicted`` and allocating ``allocated`` when given.

        ``None`` for either means: choose as the reference does. Raises what
        ``insert`` raises (the refusal is decided by the rules, before adoption),
        and :class:`Inadmissible` for an inadmissible choice.
        """
        token_list = as_token_list(tokens)
        check_namespace(namespace)
        wanted = len(token_list) // self._block_size
        path, reused = self._walk(namespace, token_list, wanted)
        needed = wanted - reused
        if evicted is not None:
            shortfall = 0
            if needed > self._allocator.free_count:
                self._check_room(path, needed)  # an infeasible insert is refused first
                self._reclaim()
                shortfall = max(0, needed - self._allocator.free_count)
            self._check_count(evicted, shortfall, profile, ("R-INS-5",), "insert")
            self._adjust_pins(path, +1)  # the path is protected as if pinned (R-INS-5)
            try:
                self._evict_chosen(evicted, profile, protected=path)
            finally:
                self._adjust_pins(path, -1)
        if allocated is not None and needed > 0 and len(allocated) == needed:
            assert isinstance(self._allocator, FollowingAllocator)
            self._allocator.prime(allocated)
        self.split_seen = False
        result = self.insert(token_list, namespace, pin=pin)
        return result

    def _check_count(
        self,
        freed: Sequence[int],
        asked: int,
        profile: Profile,
        rules: tuple[str, ...],
        what: str,
    ) -> None:
        count = len(freed)
        if profile.mode("evicted_set") == "exact":
            if count != asked:
                raise Inadmissible(rules, f"{what} freed {count} blocks where {asked} are due")
            return
        if count < asked:
            raise Inadmissible(rules, f"{what} freed {count} blocks, fewer than the {asked} due")
        if asked == 0 and count:
            raise Inadmissible(rules, f"{what} freed {count} blocks where none were needed")
        if count > asked:
            # Whole nodes: only the node freed last may overshoot. Its blocks are those
            # of the (canonical) edge holding the last block freed.
            last_edge = self._edge_of(freed[-1])
            before = sum(1 for block in freed if block not in last_edge)
            if before >= asked:
                raise Inadmissible(
                    rules,
                    f"{what} freed {count} blocks for {asked}: {before} were freed before the "
                    "last node, which was therefore not needed",
                )

    def _edge_of(self, block: int) -> set[int]:
        """The blocks of the canonical edge (R-DUMP-2) holding ``block``. O(N)."""
        stack = [edge for space in self.dump()["namespaces"] for edge in space["children"]]
        while stack:
            edge = stack.pop()
            if block in edge["blocks"]:
                return set(edge["blocks"])
            stack.extend(edge["children"])
        return {block}

    def _evict_chosen(self, freed: Sequence[int], profile: Profile, protected: Path) -> None:
        if not freed:
            return
        on_path = {block for node, used in protected for block in node.blocks[:used]}
        owner = {node.tail(): node.nid for node in self._leaves()}
        cached = {block for node in self._nodes.values() for block in node.edge_blocks()}
        if len(set(freed)) != len(freed):
            raise Inadmissible(("R-ALLOC-1",), f"freed a block twice in one call: {list(freed)}")
        for block in freed:
            if block not in cached:
                raise Inadmissible(("R-ALLOC-1",), f"freed block {block}, which is not cached")
            if block in on_path:
                raise Inadmissible(("R-INS-5",), f"evicted block {block} of the prefix it extends")
            if self._pins[block] > 0:
                raise Inadmissible(("R-PIN-3",), f"evicted block {block}, which is pinned")
        if profile.compares_recency:
            victim = self._least_recent(owner)
            if victim is not None and victim not in freed:
                raise Inadmissible(
                    ("R-EVICT-2",),
                    f"freed {list(freed)} but not the least recently used leaf tail {victim}",
                )
        self._remove_in_order(list(freed), profile.mode("eviction_granularity") == "per_block")
        self._publish()  # readers entering from now on cannot see these blocks
        self._retire(list(freed))

    def _remove_in_order(self, freed: list[int], per_block: bool) -> None:
        """Remove ``freed`` leaf tail by leaf tail: in the given order per block, in any
        order that keeps descendants first for whole nodes (R-EVICT-1)."""
        waiting = list(freed)
        while waiting:
            owner = {node.tail(): node for node in self._leaves()}
            ready = [block for block in waiting if block in owner]
            if not ready or (per_block and ready[0] != waiting[0]):
                block = waiting[0]
                raise Inadmissible(
                    ("R-EVICT-1",),
                    f"freed block {block} while a descendant of it was still cached"
                    + ("" if per_block else " (whole leaf nodes must go deepest first)"),
                )
            chosen = waiting[0] if per_block else ready[0]
            waiting.remove(chosen)
            leaf = owner[chosen]
            if leaf.count == 1:
                self._queue.withdraw(leaf.nid)  # as pop_lru does before a removal
                self._remove_leaf(leaf)
            else:
                self._replace(leaf.without_tail())
                self._offer(leaf.nid)
            self._cached -= 1

    def _least_recent(self, owner: dict[int, int]) -> int | None:
        tails = [block for block in owner if self._pins[block] == 0]
        return min(tails, key=lambda block: (self._stamps[block], block), default=None)

    def _leaves(self) -> Iterable[Node]:
        """The current non-root nodes without children. O(nodes)."""
        roots = set(self._root_names)
        return (
            node
            for nid, node in self._nodes.items()
            if nid not in roots and not node.children and node.count > 0
        )


class OracleAdapter(TreeAdapter):
    """The oracle as a plain-data candidate, with the adopting calls beside the usual ones."""

    def __init__(self) -> None:
        super().__init__(FollowingTree, "reference")

    def dump(self) -> dict[str, Any]:
        """The reference's dump as it is: it is plain JSON data by construction, so the
        round trip that checks a candidate's is skipped."""
        dump: dict[str, Any] = self.following.dump()
        return dump

    @property
    def following(self) -> FollowingTree:
        """The oracle's tree (after the first ``reset``)."""
        tree: FollowingTree = self.tree
        return tree

    def insert_following(
        self,
        tokens: object,
        namespace: object,
        pin: bool,
        evicted: Sequence[int] | None,
        allocated: Sequence[int] | None,
        profile: Profile = STRICT,
    ) -> InsertAnswer:
        """:meth:`FollowingTree.insert_following` as a plain-data answer.

        Raises:
            CandidateError: the insert is refused (its kind).
            Inadmissible: the candidate's choice is not admissible.
        """
        result = _call_adopting(
            self.following.insert_following, tokens, namespace, pin, evicted, allocated, profile
        )
        answer = self._insert_answer(result)
        if evicted is not None:
            answer["evicted"] = list(evicted)
        return answer

    def evict_following(
        self, count: object, freed: Sequence[int], profile: Profile = STRICT
    ) -> EvictAnswer:
        """:meth:`FollowingTree.evict_following` as a plain-data answer (see above)."""
        _call_adopting(self.following.evict_following, count, freed, profile)
        return {"freed": list(freed)}


def _call_adopting(function: Any, *args: object) -> Any:
    """Call the oracle: its refusals become kinds, an inadmissible choice passes through."""
    try:
        return function(*args)
    except RadixError as exc:
        raise CandidateError(exc.kind, str(exc)) from exc
