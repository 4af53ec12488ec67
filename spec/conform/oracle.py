"""The kit's oracle: the reference, able to follow a candidate's admissible choices.

With the strict profile the oracle is exactly :class:`kachedb_radix.reference.RadixTree`: it evicts
and allocates by the rules and the kit compares block for block. A profile that tolerates another
eviction or allocation policy (:mod:`kachedb_radix.spec.conform.profile`) makes the oracle *adopt*
the candidate's choice instead -- evict exactly the blocks the candidate evicted, hand out exactly
the ids it allocated -- after checking that the choice is admissible under the declared modes:

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

How it follows: one way for both oracles, adopt then apply. The lockstep tells the tree
what the candidate answered to the step (:meth:`FollowingTree.adopting`, and
:meth:`TieredOracle.adopting` alike: the operation's row says which answer fields hold
its freed blocks and its new ids), then applies the step through the table as for any
candidate; the tree's ``insert`` or ``evict`` takes the pending choice and makes the
ordinary call, which asks :meth:`~kachedb_radix.reference.RadixTree.choose_victims` what
to evict (the override checks the candidate's blocks against the tree's published
state, its dump, and yields them) and
:meth:`~kachedb_radix.reference.RadixTree.choose_new_blocks` which ids to hand out. Room
checks, the protected path, publication and the quarantine stay the reference's own
code. A choice refused before anything was done raises :class:`Inadmissible`; one
found out only after the call was carried out the spec's way (an insert that evicted
though it needed no room) is kept in ``refused`` and the call's answer stands, so the
lockstep reports it with the spec's outcome.

The oracle also states facts the rule map uses (:mod:`kachedb_radix.spec.conform.rulemap`): the
shape before a step, readers inside, blocks pinned, each block's eviction key, and
whether an insert split an edge (seen through the observation point the reference
documents for it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kachedb_radix import reference
from kachedb_radix.reference.errors import AllocatorError, OutOfBlocksError, RadixError
from kachedb_radix.reference.events import BlockHasher
from kachedb_radix.reference.namespaces import check_namespace
from kachedb_radix.reference.node import Node
from kachedb_radix.reference.tiers import TieredTree
from kachedb_radix.reference.tokens import as_token_list
from kachedb_radix.reference.walk import Path

from .adapter import TreeAdapter
from .operations import Operation
from .profile import STRICT, Profile


class Inadmissible(Exception):
    """A candidate's choice that no declared mode allows.

    Attributes:
        rules: the rules it breaks, the primary first.
        cause: what was wrong, in one line.
        outcome: the oracle's own outcome when the call had already been carried out
            the spec's way before the choice could be refused (an insert that evicted
            although it needed no room); None when nothing was done.
    """

    def __init__(self, rules: tuple[str, ...], cause: str) -> None:
        super().__init__(f"{', '.join(rules)}: {cause}")
        self.rules = rules
        self.cause = cause
        self.outcome: dict[str, Any] | None = None
        self.result: Any = None  # the call's result, when it was carried out the spec's way


@dataclass
class _Choice:
    """What the candidate chose in the call being followed (None: choose as the spec does).

    ``rules`` and ``what`` name the call in an inadmissibility: an insert's eviction
    breaks R-INS-5 when it frees a wrong number of blocks, an ``evict`` R-EVICT-4.
    """

    evicted: list[int] | None
    allocated: list[int] | None
    profile: Profile
    rules: tuple[str, ...]
    what: str
    consumed: bool = field(default=False)
    allocating: bool = field(default=False)
    protected: frozenset[int] = field(default=frozenset())


@dataclass
class Standing:
    """A slower tier's choices in one call of a tiered candidate, read off its answer
    (:meth:`TieredOracle.adopting`): the ids its moves put blocks at, and the blocks
    it dropped or moved on down, each in the candidate's order. The tier's tree takes
    them as its own inserts and evictions ask, as long as they fit (free ids, evictable
    tails); what does not fit is left to the spec, so the answers differ and the
    comparison names the rule."""

    allocated: list[int]
    evicted: list[int]
    whole_nodes: bool = False

    def take_ids(self, count: int, free: Any) -> list[int] | None:
        """The next ``count`` ids when they are distinct and free (``free()``: the
        tier's free ids), else None (the spec's choice). O(count), plus ``free()``."""
        ids = self.allocated[:count]
        if len(ids) < count or len(set(ids)) < count or not set(ids) <= free():
            return None
        del self.allocated[:count]
        return ids


@dataclass
class _Pending:
    """The candidate's answer to the call an oracle is about to make
    (:meth:`FollowingTree.adopting`)."""

    row: Operation
    answer: dict[str, Any]
    profile: Profile
    frees: bool = True
    allocates: bool = True

    def freed(self) -> list[int] | None:
        """The blocks the answer freed, to follow; None: choose as the spec does (not
        followed, or not a list of ids). O(ids)."""
        return _ids_of(self.answer.get(self.row.frees or "")) if self.frees else None

    def allocated(self) -> list[int] | None:
        """The ids the answer handed out, to follow; None as for :meth:`freed`. O(ids)."""
        return _ids_of(self.answer.get(self.row.allocates or "")) if self.allocates else None


class _Edges:
    """The published shape as edges of blocks, for checking a chosen eviction.

    Built from a dump (R-DUMP-2: canonical edges), so it knows exactly what any
    implementation in the same state would show. ``remaining[e]`` is how many of edge
    ``e``'s blocks are still cached while the choice is applied block by block.
    """

    def __init__(self, dump: dict[str, Any]) -> None:
        self.blocks: list[list[int]] = []
        self.children: list[list[int]] = []
        self.edge_of: dict[int, int] = {}
        self.pins: dict[int, int] = {}
        for space in dump["namespaces"]:
            for child in space["children"]:
                self._add(child)
        self.remaining = [len(blocks) for blocks in self.blocks]

    def _add(self, edge: dict[str, Any]) -> int:
        index = len(self.blocks)
        self.blocks.append(list(edge["blocks"]))
        self.children.append([])
        for position, block in enumerate(edge["blocks"]):
            self.edge_of[block] = index
            self.pins[block] = edge["pins"][position]
        self.children[index] = [self._add(child) for child in edge["children"]]
        return index

    def is_tail(self, block: int) -> bool:
        """Whether ``block`` is, as things stand, the last cached block of a leaf edge."""
        edge = self.edge_of[block]
        left = self.remaining[edge]
        return (
            left > 0
            and self.blocks[edge][left - 1] == block
            and all(self.remaining[child] == 0 for child in self.children[edge])
        )

    def tails(self) -> list[int]:
        """Every leaf tail now. O(edges)."""
        return [
            self.blocks[edge][left - 1]
            for edge, left in enumerate(self.remaining)
            if left and all(self.remaining[child] == 0 for child in self.children[edge])
        ]

    def free(self, block: int) -> None:
        """Mark ``block`` (a current tail) evicted."""
        self.remaining[self.edge_of[block]] -= 1


class FollowingTree(reference.RadixTree):
    """:class:`kachedb_radix.reference.RadixTree`, plus adoption of evictions and allocations."""

    implementation = "reference"

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
        self._choice: _Choice | None = None
        self._adopt: _Pending | None = None  # the candidate's answer to the next call
        self.refused: Inadmissible | None = None  # a choice refused in the last call
        self.standing: Standing | None = None  # a slower tier's choices (TieredOracle)
        self.split_seen = False  # an edge split since the lockstep last cleared it
        self.recomputed: tuple[int, ...] = ()  # evicted for a recomputed block (match_cap)

    def _split(self, node: Node, at: int) -> Node:
        # The observation point the reference documents for this (its module docstring).
        self.split_seen = True
        return super()._split(node, at)

    # ------------------------------------------------------------------ facts

    def facts(self) -> dict[str, Any]:
        """What the rule map may ask about the state before a step. O(1)."""
        stats = self.stats()
        return {
            "block_size": self.block_size,
            "readers": stats.readers,
            "pinned": stats.pinned,
            "cached": stats.cached,
            "before": self.snapshot(),  # O(1): the shape before the step, dumped on demand
            "key": self.eviction_key,  # evicted blocks keep theirs: asked after the step too
            "policy": self.policy,
        }

    # ------------------------------------------------------------------ adoption

    def adopting(
        self,
        row: Operation | None,
        answer: dict[str, Any] | None = None,
        profile: Profile = STRICT,
        *,
        frees: bool = True,
        allocates: bool = True,
    ) -> None:
        """Follow ``answer``, the candidate's to ``row``'s operation, in the next ``insert``
        or ``evict`` call (the module docstring): the blocks it freed with ``frees``, the
        ids it handed out with ``allocates`` (each where the profile tolerates another
        choice; the spec's own otherwise), under ``profile``'s modes and inputs
        (``match_cap``); None: stop. O(1)."""
        pending = _Pending(row, answer or {}, profile, frees, allocates) if row else None
        self._adopt = pending
        self.refused = None

    def _take(self) -> _Pending | None:
        pending, self._adopt = self._adopt, None
        return pending

    def insert(
        self,
        tokens: object,
        namespace: str | None = None,
        *,
        pin: bool = False,
        priority: int | None = None,
        retain_for: int | None = None,
    ) -> Any:
        """:meth:`~kachedb_radix.reference.RadixTree.insert`, evicting the blocks and
        handing out the ids the pending answer names where the profile tolerates another
        choice (:meth:`adopting`; None for either: the reference's). Under ``match_cap``
        a fully cached prompt's last block is recomputed first. Raises what ``insert``
        raises (a refusal is decided by the rules, before anything is adopted), and
        :class:`Inadmissible` for a choice refused before anything was done.
        """
        pending = self._take()

        def call() -> Any:
            return reference.RadixTree.insert(
                self, tokens, namespace, pin=pin, priority=priority, retain_for=retain_for
            )

        if pending is None:
            return call()
        row, profile = pending.row, pending.profile
        choice = _Choice(pending.freed(), pending.allocated(), profile, row.choice_rules, row.name)
        self.recomputed = ()
        if profile.match_cap == "last_token":
            self.recomputed = self._room_to_recompute(tokens, namespace, choice)
        result = self._follow(choice, call)
        if self.recomputed:
            result = dataclasses.replace(result, evicted=(*self.recomputed, *result.evicted))
        return result

    def evict(self, count: int) -> tuple[int, ...]:
        """:meth:`~kachedb_radix.reference.RadixTree.evict`, freeing exactly the blocks the
        pending answer freed where the profile tolerates another choice (:meth:`adopting`).

        Raises:
            InvalidArgumentError: ``count`` is not an int >= 0 (as ``evict``).
            Inadmissible: the answer's blocks are not an admissible eviction (module
                docstring).
        """
        pending = self._take()
        freed = None if pending is None else pending.freed()
        if pending is None or freed is None:
            return reference.RadixTree.evict(self, count)
        row = pending.row
        choice = _Choice(freed, None, pending.profile, row.choice_rules, row.name)
        evicted: tuple[int, ...] = self._follow(
            choice, lambda: reference.RadixTree.evict(self, count)
        )
        return evicted

    def _room_to_recompute(
        self, tokens: object, namespace: object, choice: _Choice
    ) -> tuple[int, ...]:
        """Under ``match_cap = "last_token"`` a fully cached prompt's last block is
        recomputed, so the engine needs a block for it: with none free, it evicts one,
        never from the prompt's own path (R-INS-5). The blocks evicted for it (the
        candidate's choice when it is followed); the insert itself then needs no room.
        O(tokens), and a dump when it evicts."""
        try:
            token_list = as_token_list(tokens)
            check_namespace(namespace)
        except RadixError:
            return ()  # the insert refuses it
        size = self.block_size
        wanted = len(token_list) // size
        hit = self.snapshot().match(token_list, namespace if isinstance(namespace, str) else None)
        if wanted == 0 or len(token_list) % size or hit.length < wanted * size:
            return ()  # its last token ends a block that is new, or partial: nothing extra
        if self.stats().free >= 1:
            return ()
        room = _Choice(choice.evicted, None, choice.profile, ("R-INS-5",), "insert")
        room.protected = frozenset(hit.blocks)
        freed: tuple[int, ...] = self._follow(room, lambda: self.evict(1))
        if choice.evicted is not None:
            choice.evicted = []  # the candidate's evictions went to this room
        return freed

    def _follow(self, choice: _Choice, call: Any) -> Any:
        """Make ``call`` following ``choice``. A choice refused before anything was done
        raises :class:`Inadmissible` (kept in ``refused`` too); one that shows only after
        the call was carried out the spec's way is kept in ``refused`` with its result,
        and the result is returned."""
        self._choice = choice
        try:
            result = call()
        except Inadmissible as exc:
            self.refused = exc
            raise
        except (AllocatorError, OutOfBlocksError) as exc:
            if not choice.allocating:
                raise  # refused by the rules before any id was chosen
            self.refused = Inadmissible(
                ("R-ALLOC-1",), f"allocated {choice.allocated}, not all free to take ({exc})"
            )
            raise self.refused from None
        finally:
            self._choice = None
        if choice.evicted and not choice.consumed:
            refused = Inadmissible(
                choice.rules,
                f"{choice.what} freed {len(choice.evicted)} blocks where none were needed",
            )
            refused.result = result  # carried out the spec's way: see Inadmissible.outcome
            self.refused = refused
        return result

    # ------------------------------------------------------------------ the extension points

    def choose_victims(self, count: int, protected: Path) -> Iterator[int]:
        """The candidate's evicted blocks, checked, in an order the tree can free them;
        the reference's own choice when nothing is being followed."""
        choice = self._choice
        if choice is None and self.standing is not None and self.standing.evicted:
            yield from self._standing_victims(count, protected, self.standing)
            return
        if choice is not None and choice.evicted is None and choice.protected:
            yield from self._least_recent_off(count, choice.protected)
            return
        if choice is None or choice.evicted is None:
            yield from super().choose_victims(count, protected)
            return
        choice.consumed = True
        freed, profile = choice.evicted, choice.profile
        asked = min(count, self.stats().evictable)
        edges = _Edges(self.dump())
        self._check_count(freed, asked, edges, choice)
        self._check_blocks(freed, edges, protected, choice.protected)
        if profile.compares_recency:
            tails = [block for block in edges.tails() if edges.pins[block] == 0]
            victim = min(tails, key=self.eviction_key, default=None)
            if victim is not None and victim not in freed:
                raise Inadmissible(
                    _victim_rules(self.policy),
                    f"freed {freed} but not the leaf tail with the smallest {self.policy} key "
                    f"{self.eviction_key(victim)}: {victim}",
                )
        yield from _in_freeing_order(freed, edges, profile.mode("eviction_granularity"))

    def choose_new_blocks(self, count: int) -> Sequence[int] | None:
        """The candidate's allocated ids (the tree's allocator checks them: R-ALLOC-1);
        None to let the spec choose."""
        choice = self._choice
        if choice is None and self.standing is not None:
            return self.standing.take_ids(count, lambda: set(self.dump()["free"]))
        if choice is None or choice.allocated is None or len(choice.allocated) != count:
            return None
        choice.allocating = True
        return choice.allocated

    def _standing_victims(self, count: int, protected: Path, standing: Standing) -> Iterator[int]:
        """A slower tier's victims from the candidate's answer, in its order: ``count``
        of them, then the rest of the last one's edge (a whole node overshoots), each an
        unpinned leaf tail off ``protected`` when taken; from the first that is not, the
        spec's own choice (the answers then differ, and the comparison says so).
        O(count * edges)."""
        edges = _Edges(self.dump())
        on_path = {block for node, used in protected for block in node.blocks[:used]}
        whole = self._standing_profile_whole()
        taken, last_edge = 0, None
        while standing.evicted:
            head = standing.evicted[0]
            edge = edges.edge_of.get(head)
            if edge is None or (taken >= count and edge != last_edge):
                break
            # A whole node's blocks may come in any order: its next tail among them.
            run = [head]
            if whole:
                for block in standing.evicted[1:]:
                    if edges.edge_of.get(block) != edge:
                        break
                    run.append(block)
            ready = [
                block for block in run
                if edges.is_tail(block) and edges.pins[block] == 0 and block not in on_path
            ]  # fmt: skip
            if not ready:
                break
            block = ready[0]
            standing.evicted.remove(block)
            edges.free(block)
            last_edge = edge
            taken += 1
            yield block
        if taken < count:
            yield from super().choose_victims(count - taken, protected)

    def _standing_profile_whole(self) -> bool:
        return self.standing is not None and self.standing.whole_nodes

    # ------------------------------------------------------------------ checks

    @staticmethod
    def _check_count(freed: list[int], asked: int, edges: _Edges, choice: _Choice) -> None:
        count, rules, what = len(freed), choice.rules, choice.what
        if choice.profile.mode("evicted_set") == "exact":
            if count != asked:
                raise Inadmissible(rules, f"{what} freed {count} blocks where {asked} are due")
            return
        if count < asked:
            raise Inadmissible(rules, f"{what} freed {count} blocks, fewer than the {asked} due")
        if count > asked and freed[-1] in edges.edge_of:
            # Whole nodes: only the node freed last may overshoot. Its blocks are those
            # of the (canonical) edge holding the last block freed.
            last_edge = set(edges.blocks[edges.edge_of[freed[-1]]])
            before = sum(1 for block in freed if block not in last_edge)
            if before >= asked:
                raise Inadmissible(
                    rules,
                    f"{what} freed {count} blocks for {asked}: {before} were freed before the "
                    "last node, which was therefore not needed",
                )

    def _least_recent_off(self, count: int, protected: frozenset[int]) -> Iterator[int]:
        """The spec's own eviction (the smallest key first, R-POL-1; least recently used
        under lru, R-EVICT-2), never of a block in ``protected``: ``count`` blocks, or as
        many as can go. O(count * edges)."""
        edges = _Edges(self.dump())
        for _ in range(count):
            tails = [
                block
                for block in edges.tails()
                if edges.pins[block] == 0 and block not in protected
            ]
            if not tails:
                return
            victim = min(tails, key=self.eviction_key)
            edges.free(victim)
            yield victim

    @staticmethod
    def _check_blocks(
        freed: list[int], edges: _Edges, protected: Path, also: frozenset[int] = frozenset()
    ) -> None:
        on_path = {block for node, used in protected for block in node.blocks[:used]} | also
        if len(set(freed)) != len(freed):
            raise Inadmissible(("R-ALLOC-1",), f"freed a block twice in one call: {freed}")
        for block in freed:
            if block not in edges.edge_of:
                raise Inadmissible(("R-ALLOC-1",), f"freed block {block}, which is not cached")
            if block in on_path:
                raise Inadmissible(("R-INS-5",), f"evicted block {block} of the prefix it extends")
            if edges.pins[block] > 0:
                raise Inadmissible(("R-PIN-3",), f"evicted block {block}, which is pinned")


#: The rule that chooses the victim under each policy (R-POL-2 .. R-POL-6).
POLICY_RULES: dict[str, str] = {
    "lru": "R-EVICT-2",
    "lfu": "R-POL-3",
    "fifo": "R-POL-4",
    "priority": "R-POL-5",
    "slru": "R-POL-6",
}


def _victim_rules(policy: str) -> tuple[str, ...]:
    """The rules a wrong victim breaks under ``policy``: its own, then R-POL-1."""
    rule = POLICY_RULES.get(policy, "R-POL-1")
    return (rule,) if policy == "lru" else (rule, "R-POL-1")


def _in_freeing_order(freed: list[int], edges: _Edges, granularity: str) -> Iterator[int]:
    """``freed`` leaf tail by leaf tail: in the given order per block; for whole leaf
    nodes in any order that frees descendants first (R-EVICT-1)."""
    per_block = granularity == "per_block"
    waiting = list(freed)
    while waiting:
        ready = [block for block in waiting if edges.is_tail(block)]
        if not ready or (per_block and ready[0] != waiting[0]):
            block = waiting[0]
            raise Inadmissible(
                ("R-EVICT-1",),
                f"freed block {block} while a descendant of it was still cached"
                + ("" if per_block else " (whole leaf nodes must go deepest first)"),
            )
        chosen = waiting[0] if per_block else ready[0]
        waiting.remove(chosen)
        edges.free(chosen)
        yield chosen


class TieredOracle(TieredTree):
    """The tiered reference whose tiers are each a :class:`FollowingTree`; its device tree
    states the facts the rule map uses.

    Strict by default. Under a profile that tolerates another eviction or allocation
    (:attr:`Profile.adopts_eviction`, :attr:`Profile.adopts_allocation`),
    :meth:`adopting` makes the next ``insert``, ``restore`` or ``evict`` adopt the
    candidate's admissible choices from its answer, in every tier: the device's as the
    plain oracle does (``evicted``/``freed``, ``allocated``, a restore's ``restored``
    targets), checked the same way (:class:`Inadmissible`); each slower tier's from the
    moves (the ids the moves into it fill, in order) and the blocks it dropped or moved
    on down (its victims, in order), as a :class:`Standing` its tree follows where they
    fit. The semantics -- what is demoted, copied, restored, refused -- stay the spec's,
    so where the candidate's differ the answers differ and the comparison names the rule.
    """

    tree_type = FollowingTree

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._adopt: _Pending | None = None
        self.refused: Inadmissible | None = None

    @property
    def device(self) -> FollowingTree:
        """The device tier's tree."""
        tree: FollowingTree = self.tree("device")
        return tree

    def adopting(
        self,
        row: Operation | None,
        answer: dict[str, Any] | None = None,
        profile: Profile = STRICT,
        *,
        frees: bool = True,
        allocates: bool = True,
    ) -> None:
        """Adopt the choices of ``answer`` (the candidate's to ``row``'s operation) in the
        next call, as :meth:`FollowingTree.adopting` says; None: stop adopting. O(1)."""
        pending = _Pending(row, answer or {}, profile, frees, allocates) if row else None
        self._adopt = pending
        self.refused = None

    def insert(self, tokens: object, namespace: str | None = None, **kwargs: Any) -> Any:
        """:meth:`TieredTree.insert`, adopting (see the class docstring)."""
        pending = self._take()
        if pending is None:
            return super().insert(tokens, namespace, **kwargs)
        row, profile = pending.row, pending.profile
        choice = _Choice(pending.freed(), pending.allocated(), profile, row.choice_rules, row.name)
        return self._following(
            choice, pending, profile,
            lambda: TieredTree.insert(self, tokens, namespace, **kwargs),
        )  # fmt: skip

    def restore(self, tokens: object, namespace: str | None = None, **kwargs: Any) -> Any:
        """:meth:`TieredTree.restore`, adopting (see the class docstring); a candidate that
        restored nothing has no choice to adopt."""
        pending = self._take()
        brought = [] if pending is None else _rows(pending.answer.get(pending.row.allocates or ""))
        if pending is None or not brought:
            return super().restore(tokens, namespace, **kwargs)
        row, profile = pending.row, pending.profile
        allocated = [move[3] for move in brought] if pending.allocates else None
        choice = _Choice(pending.freed(), allocated, profile, row.choice_rules, row.name)
        return self._following(
            choice, pending, profile,
            lambda: TieredTree.restore(self, tokens, namespace, **kwargs),
        )  # fmt: skip

    def evict(self, count: int, tier: str = "device") -> Any:
        """:meth:`TieredTree.evict`, adopting (see the class docstring): an eviction in a
        tier demotes (R-TIER-3) besides choosing its victims."""
        pending = self._take()
        freed = None if pending is None else _ids_of(pending.answer.get(pending.row.frees or ""))
        if pending is None or freed is None or tier not in self.tiers:
            return super().evict(count, tier)
        row, profile = pending.row, pending.profile
        victims = freed if pending.frees else None
        rules = tuple(dict.fromkeys(("R-TIER-3", *row.choice_rules)))
        choice = _Choice(victims, None, profile, rules, f"{tier} evict")
        return self._following(
            choice, pending, profile, lambda: TieredTree.evict(self, count, tier), tier
        )

    def _take(self) -> _Pending | None:
        """The pending answer when it has choices to adopt (a tolerant profile)."""
        pending, self._adopt = self._adopt, None
        if pending is None or not (pending.frees or pending.allocates):
            return None
        return pending

    def _following(self, choice: _Choice, pending: _Pending, profile: Profile, call: Any,
                   tier: str = "device") -> Any:  # fmt: skip
        """Run ``call`` with ``tier``'s tree following ``choice`` and every other slower
        tier its :class:`Standing` (the ids the moves into it fill, the blocks it dropped
        or moved on down); an inadmissible choice is kept in :attr:`refused`."""
        op, answer = pending.row, pending.answer
        rows = [move for name in (*op.moves, *op.moves_after) for move in _rows(answer.get(name))]
        dropped = _rows(answer.get(op.dropped or ""))
        for name in self.tiers[1:]:
            if name == tier:
                continue
            allocated = [row[3] for row in rows if len(row) == 4 and row[2] == name]
            victims = [row[1] for row in dropped if len(row) == 2 and row[0] == name]
            victims += [row[1] for row in rows if len(row) == 4 and row[0] == name
                        and row[2] != "device"]  # fmt: skip
            self.tree(name).standing = Standing(
                allocated if pending.allocates else [],
                [block for block in victims if isinstance(block, int)]
                if pending.frees else [],
                profile.mode("eviction_granularity") == "whole_leaf_node",
            )  # fmt: skip
        followed = self.tree(tier)
        followed.refused = None
        try:
            return followed._follow(choice, call)
        finally:
            self.refused = followed.refused
            for name in self.tiers[1:]:
                self.tree(name).standing = None


def _rows(value: Any) -> list[list[Any]]:
    """``value`` as a list of answer rows (moves or dropped), [] when it is not one."""
    if isinstance(value, list) and all(isinstance(row, list) for row in value):
        return value
    return []


def _ids_of(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(
        isinstance(item, int) and not isinstance(item, bool) for item in value
    ):
        return list(value)
    return None


class OracleAdapter(TreeAdapter):
    """The oracle as a plain-data candidate, with the adopting calls beside the usual ones."""

    def __init__(self) -> None:
        super().__init__(FollowingTree, "reference", tier_factory=TieredOracle)

    @property
    def following(self) -> FollowingTree:
        """The oracle's tree (after the first ``reset``)."""
        tree: FollowingTree = self.tree
        return tree
