"""The policy-free safety check: what every correct prefix cache keeps, whatever its profile.

A deviation profile (:mod:`kachedb_radix.spec.conform.profile`) lets a candidate evict whole nodes,
reuse freed blocks in its own order and keep its own recency; it cannot let it hand out wrong KV.
:class:`SafetyMonitor` follows the candidate's own answers -- never the oracle's -- and checks after
every step:

* a match returns only blocks whose content equals the queried prefix: the monitor
  records what each block id was filled with (namespace and the whole token prefix
  up to that block, as a chain of hashes) when an insert hands it out (R-MATCH-3);
* a block freed (evicted) is never returned by a match until inserted again
  (R-MATCH-3, R-ALLOC-1), and nothing matches across namespaces (R-NS-2);
* a block pinned by a live lease is never evicted nor handed out again (R-PIN-3),
  nor freed by a clear of the whole cache (R-CLEAR-2), and a block still cached is
  never handed out again (R-ALLOC-1);
* ``free + cached + quarantined == num_blocks`` and ``pinned + evictable ==
  cached`` (R-INV-1);
* a call that raised changed nothing of the cached state -- the dump and stats less
  stamps and clock, which a profile may leave uncompared (R-ERR-2);
* every dump is a well-formed tree over the pool: the fields R-DUMP-1 names, of their
  types, each block id of the pool exactly once among the free, cached and quarantined
  ones, each namespace once (R-INV-1, R-DUMP-1). A dump that is not one cannot be
  compared at all, so no waiver of the rule it happens to differ on can absorb it.

At the ``tiers`` level (a reset that names tiers) the monitor also follows what every
slot of every tier holds (:class:`~kachedb_radix.spec.conform.contents.TierContents`:
writes label slots, the candidate's moves copy labels, in the order given):

* every block a lookup, match or restore names, and every block of every tier a dump
  shows, holds exactly its own prefix in its own namespace -- so a move read after it
  was overwritten, a restore from the wrong slot, a demotion that copied the wrong
  block, a lookup that crossed namespaces, all show (R-TIER-8);
* a block a live lease pinned in a tier is still cached there (R-TIER-7).

Namespaces are compared as the candidate's profile declares it folds them
(``[namespaces]``): an engine that takes the empty salt for the default namespace may
match across those two, and across nothing else.

A violation raises :class:`SafetyViolation` naming the property; the kit reports
it with the property's rules (``rulemap.toml``, ``[safety]``). None of these rules
can be waived.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from kachedb_radix.reference.dump import dump_blocks
from kachedb_radix.reference.tiers import DEVICE, Move

from .contents import ContentError, TierContents
from .operations import BY_NAME, ENDS_LEASE, IN_TIERS, LEASE, ON_DEVICE, Operation
from .steps import Outcome, Step, strictly_equal

#: What a block holds: its namespace and a hash of the token prefix up to its end.
Content = tuple[object, int]


class SafetyViolation(Exception):
    """A safety property broken by the candidate.

    Attributes:
        prop: the property (a key of ``[safety]`` in ``rulemap.toml``).
        detail: which block, lease or counter, in words.
    """

    def __init__(self, prop: str, detail: str) -> None:
        super().__init__(f"{prop}: {detail}")
        self.prop = prop
        self.detail = detail


class SafetyMonitor:
    """Tracks a candidate's blocks from its answers; see the module docstring."""

    def __init__(self, fold: Callable[[object], object] = lambda namespace: namespace) -> None:
        self._fold = fold
        self._block_size = 1
        self._content: dict[int, Content] = {}
        self._leases: dict[int, list[int]] = {}
        self._pins: Counter[int] = Counter()
        self._tiers: TierContents | None = None  # at the tiers level, every slot's label
        self._tier_leases: dict[int, list[tuple[str, int]]] = {}

    def pure(self, row: Operation) -> bool:
        """Whether checking an answer of ``row``'s operation is a function of the answer
        alone, which the monitor learns nothing from: a read (its counters add up, its
        dump is well formed), but for a dump at the ``tiers`` level, whose slots' labels
        it checks. An answer equal to the reference's then passes as the reference's
        does. O(1)."""
        return row.reads and not (row.shape and self._tiers is not None)

    def check(self, step: Step, outcome: Outcome) -> None:
        """Check the candidate's ``outcome`` of ``step`` and update the model. O(answer).

        Lease handles in the outcome and the step are the trace's (n-th lease issued).

        Raises:
            SafetyViolation: a property is broken.
        """
        row = BY_NAME[step["op"]]
        if row.resets:
            self._block_size = step["block_size"]
            self._content, self._leases, self._pins = {}, {}, Counter()
            tiered = "ok" in outcome and step.get("tiers") is not None
            self._tiers = TierContents(self._block_size) if tiered else None
            self._tier_leases = {}
            return
        if row.ends == ENDS_LEASE and "ok" in outcome:
            for block in self._leases.pop(step[LEASE], []):
                self._pins[block] -= 1
            self._tier_leases.pop(step[LEASE], None)
            return
        answer = outcome.get("ok")
        if not isinstance(answer, dict):
            return
        try:
            self._follow(row, step, answer)
            if self._tiers is not None:
                self._follow_tiers(row, step, answer)
        except (KeyError, TypeError, IndexError, ValueError):
            return  # a malformed answer: the comparison with the oracle reports it

    def _follow(self, row: Operation, step: Step, answer: dict[str, Any]) -> None:
        """Check one answer against what the monitor knows, as its row says what the
        operation does, and learn from it (module docstring)."""
        freed_on_device = row.frees_in is None or step.get(row.frees_in) == DEVICE
        if row.frees is not None and freed_on_device:
            self._free(answer[row.frees], "evicted")
        if row.clears is not None and answer[row.clears] is True:
            self._clear()
        if row.finds == ON_DEVICE:
            self._path(step, answer, _new_from(row, answer))
        elif row.finds == IN_TIERS:
            on_device = [b for t, b in zip(answer["tiers"], answer["blocks"], strict=True)
                         if t == DEVICE]  # fmt: skip
            self._path(step, {"blocks": on_device, "lease": answer.get("lease")}, None)
        if row.counts:
            self._accounting(answer)
        if row.shape:
            for name, tier_dump in [("", answer), *_tier_dumps(answer)]:
                problem = dump_problem(tier_dump, self._block_size)
                if problem is not None:
                    where = f"its {name} tier: " if name else ""
                    raise SafetyViolation("dump_structure", where + problem)

    def check_unchanged(self, before: dict[str, Any], after: dict[str, Any], op: str) -> None:
        """Raise unless a failed ``op`` left the cached state as it was (R-ERR-2).

        ``before`` and ``after`` are the candidate's dump and stats around the call,
        compared without stamps and clock. O(size of the dumps).
        """
        for name in sorted(before):
            if strictly_equal(before[name], after.get(name)):
                continue  # the same data, at C speed
            if policy_free(before[name]) != policy_free(after.get(name)):
                raise SafetyViolation("failed_call", f"the failed {op} changed its {name}")

    # ------------------------------------------------------------------ the tiers level

    def _follow_tiers(self, row: Operation, step: Step, answer: dict[str, Any]) -> None:
        """Follow one answer through every slot's label (R-TIER-7, R-TIER-8): the row's
        moves in order, the new blocks it writes between them, then the path it names."""
        contents = self._tiers
        assert contents is not None
        namespace = self._fold(step.get("namespace"))
        tokens: list[int] = step.get("tokens") or []
        try:
            for name in row.moves:
                contents.run(_moves(answer[name]))
            written = answer[row.fills] if row.fills is not None else None
            if isinstance(written, int):  # new blocks written from that position on
                contents.write(DEVICE, answer["blocks"], namespace, tokens, written)
            for name in row.moves_after:
                contents.run(_moves(answer[name]))
            if row.finds == ON_DEVICE:
                blocks = answer["blocks"]
                contents.check((DEVICE,) * len(blocks), blocks, namespace, tokens)
                self._tier_lease(answer.get("lease"), [DEVICE] * len(blocks), blocks)
            elif row.finds == IN_TIERS:
                contents.check(answer["tiers"], answer["blocks"], namespace, tokens)
                self._tier_lease(answer.get("lease"), answer["tiers"], answer["blocks"])
            if row.shape:
                self._check_tier_dumps(contents, answer)
        except ContentError as error:
            prop = "tier_namespace" if error.crossed else "tier_content"
            raise SafetyViolation(prop, str(error)) from None

    def _check_tier_dumps(self, contents: TierContents, dump: dict[str, Any]) -> None:
        """Every block of every tier holds its prefix; every pinned block is still there."""
        held: dict[str, set[int]] = {}
        for name, tier_dump in [(DEVICE, dump), *_tier_dumps(dump)]:
            contents.check_tier(name, _folded(tier_dump, self._fold))
            held[name] = dump_blocks(tier_dump)
        for lease, pinned in self._tier_leases.items():
            for tier, block in pinned:
                if block not in held.get(tier, set()):
                    raise SafetyViolation(
                        "tier_pinned",
                        f"{tier} block {block}, pinned by lease {lease}, left the {tier} tier",
                    )

    def _tier_lease(self, lease: object, tiers: list[str], blocks: list[int]) -> None:
        if isinstance(lease, int) and not isinstance(lease, bool):
            self._tier_leases[lease] = list(zip(tiers, blocks, strict=True))

    # ------------------------------------------------------------------ internals

    def _path(self, step: Step, answer: dict[str, Any], new: int | None) -> None:
        """The blocks of the queried prefix an answer names: those before position ``new``
        (all, for None) hold it already; those from ``new`` on are freshly filled, so
        none may be pinned or still cached elsewhere. Then its lease pins them."""
        blocks = answer["blocks"]
        found = len(blocks) if new is None else new
        keys = self._keys(step["namespace"], step["tokens"], len(blocks))
        for index, block in enumerate(blocks[:found]):
            self._expect(block, keys[index], index)
        for block in blocks[found:]:
            if self._pins[block] > 0:
                raise SafetyViolation("pinned_reused", f"block {block} is pinned by a live lease")
            if block in self._content:
                raise SafetyViolation("handed_twice", f"block {block} is still cached")
        for index in range(found, len(blocks)):
            self._content[blocks[index]] = keys[index]
        self._lease(answer.get("lease"), blocks)

    def _expect(self, block: int, key: Content, index: int) -> None:
        held = self._content.get(block)
        where = f"block {block} at position {index}"
        if held is None:
            raise SafetyViolation("freed", f"{where} was never filled, or was freed since")
        if held[0] != key[0]:
            raise SafetyViolation(
                "namespace", f"{where} holds namespace {held[0]!r}, the query {key[0]!r}"
            )
        if held != key:
            raise SafetyViolation("content", f"{where} holds another token prefix")

    def _clear(self) -> None:
        """Every cached block was freed at once: none may be pinned (R-CLEAR-2); none
        holds anything any more."""
        pinned = sorted(block for block, count in self._pins.items() if count > 0)
        if pinned:
            raise SafetyViolation(
                "cleared_in_use", f"blocks {pinned} were freed while a live lease pins them"
            )
        self._content = {}

    def _free(self, blocks: list[int], how: str) -> None:
        for block in blocks:
            if self._pins[block] > 0:
                raise SafetyViolation(
                    "pinned_evicted", f"block {block} {how} while a live lease pins it"
                )
            self._content.pop(block, None)

    def _lease(self, lease: object, blocks: list[int]) -> None:
        if isinstance(lease, int) and not isinstance(lease, bool):
            self._leases[lease] = list(blocks)
            for block in blocks:
                self._pins[block] += 1

    def _keys(self, namespace: object, tokens: list[int], count: int) -> list[Content]:
        """What block i of a path over ``tokens`` holds, for i < count. O(count * B)."""
        size, chain, keys = self._block_size, 0, []
        folded = self._fold(namespace)
        for index in range(count):
            chain = hash((chain, tuple(tokens[index * size : (index + 1) * size])))
            keys.append((folded, chain))
        return keys

    @staticmethod
    def _accounting(stats: dict[str, Any]) -> None:
        quarantined = stats.get("quarantined", 0)
        total = stats["free"] + stats["cached"] + quarantined
        if total != stats["num_blocks"]:
            raise SafetyViolation(
                "accounting",
                f"free {stats['free']} + cached {stats['cached']} + quarantined {quarantined} "
                f"= {total}, pool {stats['num_blocks']}",
            )
        if stats["pinned"] + stats["evictable"] != stats["cached"]:
            raise SafetyViolation(
                "accounting",
                f"pinned {stats['pinned']} + evictable {stats['evictable']} "
                f"!= cached {stats['cached']}",
            )


def _new_from(row: Operation, answer: dict[str, Any]) -> int | None:
    """Where the blocks an answer's path fills with new KV start (:attr:`Operation.fills`):
    at the int it names, or that many blocks before the end for a list of moves bringing
    them up; None when it fills none."""
    if row.fills is None:
        return None
    filled = answer[row.fills]
    if isinstance(filled, int) and not isinstance(filled, bool):
        return filled
    return len(answer["blocks"]) - len(filled)


def _moves(rows: Any) -> list[Move]:
    """Answer rows ``[source_tier, source, target_tier, target]`` as moves.

    Raises:
        ValueError: a row is not four fields.
    """
    moves = []
    for row in rows:
        if not isinstance(row, list) or len(row) != 4:
            raise ValueError(f"a move is not [source_tier, source, target_tier, target]: {row!r}")
        moves.append(Move(*row))
    return moves


def _tier_dumps(dump: dict[str, Any]) -> list[tuple[str, Any]]:
    """A tiered dump's slower tiers' own dumps, ``(tier, dump)``; none without tiers."""
    tiers = dump.get("tiers")
    return list(tiers.items()) if isinstance(tiers, dict) else []


def _folded(dump: dict[str, Any], fold: Callable[[object], object]) -> dict[str, Any]:
    """``dump`` with its namespaces as the profile folds them (labels are folded too)."""
    spaces = [{**space, "namespace": fold(space["namespace"])} for space in dump["namespaces"]]
    return {**dump, "namespaces": spaces}


def dump_problem(dump: Any, block_size: int) -> str | None:
    """What makes ``dump`` not a well-formed dump of a tree of ``block_size`` (the
    module docstring), in words; None when it is one. O(size of the dump)."""
    if not isinstance(dump, dict):
        return "the dump is not an object"
    for key, kind in (("num_blocks", int), ("block_size", int), ("free", list)):
        if not isinstance(dump.get(key), kind) or isinstance(dump.get(key), bool):
            return f"its {key!r} is missing or not a{'n int' if kind is int else ' list'}"
    if not isinstance(dump.get("namespaces"), list):
        return "its 'namespaces' are missing or not a list"
    if dump["block_size"] != block_size:
        return f"its block_size is {dump['block_size']}, the tree's {block_size}"
    pool = dump["num_blocks"]
    free, quarantine = dump["free"], dump.get("quarantine", [])
    if not isinstance(quarantine, list):
        return "its quarantined blocks are not a list"
    listed: list[Any] = [*free, *quarantine]
    names: set[object] = set()
    for space in dump["namespaces"]:
        if not isinstance(space, dict) or not isinstance(space.get("children"), list):
            return "a namespace entry is not an object with a list of children"
        name = space.get("namespace")
        if (name is not None and not isinstance(name, str)) or name in names:
            return f"namespace {name!r} is not a name, or is listed twice"
        names.add(name)
        pending = list(space["children"])
        while pending:
            edge = pending.pop()
            if (problem := _edge_problem(edge, block_size)) is not None:
                return f"in namespace {name!r}: {problem}"
            listed.extend(edge["blocks"])
            pending.extend(edge["children"])
    # Every id of the pool once among the free, quarantined and cached ones: checked at
    # C speed; the slow walk below only names what is wrong.
    if (
        len(listed) == pool
        and all(type(block) is int for block in listed)
        and len(set(listed)) == pool
        and (not listed or (min(listed) >= 0 and max(listed) < pool))
    ):
        return None
    return _first_misplaced(dump, pool)


def _first_misplaced(dump: dict[str, Any], pool: int) -> str:
    """Which block id the dump gets wrong (it lists one twice, one outside the pool, or
    leaves one out). O(size of the dump)."""
    where: dict[int, str] = {}
    places: list[tuple[str, list[Any]]] = [
        ("free", dump["free"]),
        ("quarantined", dump.get("quarantine", [])),
    ]
    for space in dump["namespaces"]:
        pending = list(space["children"])
        while pending:
            edge = pending.pop()
            places.append((f"cached in namespace {space.get('namespace')!r}", edge["blocks"]))
            pending.extend(edge["children"])
    for place, blocks in places:
        for block in blocks:
            if not isinstance(block, int) or isinstance(block, bool) or not 0 <= block < pool:
                return f"{place} lists {block!r}, not a block id of a pool of {pool}"
            if block in where:
                return f"block {block} is {where[block]} and {place} at once"
            where[block] = place
    return (
        f"{pool - len(where)} of the pool's {pool} blocks are neither free, cached nor "
        "quarantined (a node cut off from its namespace?)"
    )


def _edge_problem(edge: Any, block_size: int) -> str | None:
    """What is wrong with one edge of a dump, or None."""
    if not isinstance(edge, dict):
        return "an edge is not an object"
    for key in ("tokens", "blocks", "children"):
        if not isinstance(edge.get(key), list):
            return f"an edge's {key!r} is missing or not a list"
    blocks, tokens = edge["blocks"], edge["tokens"]
    if not blocks:
        return "an edge holds no block"
    if len(tokens) != len(blocks) * block_size:
        return f"an edge of {len(blocks)} blocks holds {len(tokens)} tokens"
    for key in ("pins", "stamps"):
        value = edge.get(key)
        if value is not None and (not isinstance(value, list) or len(value) != len(blocks)):
            return f"an edge's {key!r} do not match its {len(blocks)} blocks"
    return None


def policy_free(value: Any) -> Any:
    """``value`` (a dump or stats) without what a profile may leave uncompared: stamps and
    the clock. O(size)."""
    if isinstance(value, dict):
        return {
            key: policy_free(item) for key, item in value.items() if key not in ("stamps", "clock")
        }
    if isinstance(value, list):
        return [policy_free(item) for item in value]
    return value
