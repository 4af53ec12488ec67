"""Which SPEC rules decided a step, derived from what the step did.

Nothing here asks an implementation why it did something: the rules are read off
the step, its outcome and the change between the dumps before and after it
(:class:`~kachedb_radix.spec.explain.model.Changes`), so the same derivation explains the
reference and any target. The tables say, in the manner of h11's state tables,
which rule governs each kind of operation, each error kind and each kind of
change; :func:`decide` applies them and returns each rule with the reason it
applies to this step, most specific first.

A rule listed for a target's step is the rule the step *touched*; whether the
target kept it is what the side-by-side comparison shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..conform.operations import BY_NAME, LEASE, ON_DEVICE, OPERATIONS
from .model import Changes, DumpIndex

#: The rules that govern every successful operation of a kind.
OP_RULES: dict[str, tuple[tuple[str, str], ...]] = {
    "reset": (("R-ALLOC-1", "a fresh pool: every block id is free"),),
    "match": (
        ("R-MATCH-1", "the longest cached whole-block prefix is returned"),
        ("R-MATCH-2", "a match never changes the tree's shape"),
    ),
    "insert": (("R-INS-1", "every whole block of the sequence is now cached"),),
    "release": (("R-PIN-2", "the lease's blocks lose one pin each"),),
    "evict": (("R-EVICT-4", "evict(n) frees min(n, evictable) blocks, reported in order"),),
    "stats": (
        ("R-INV-1", "free + cached + quarantined = the pool; pinned + evictable = cached"),
        ("R-INV-2", "stats report the pool, the leases and the clock"),
    ),
    "namespaces": (("R-NS-1", "one root per namespace holding blocks, None first"),),
    "dump": (
        ("R-DUMP-1", "the canonical dump of the whole state"),
        ("R-DUMP-2", "chains are written as one edge, children in token order"),
    ),
    "snapshot": (("R-SNAP-2", "an O(1) view of the latest published version"),),
    "reader": (("R-EPOCH-1", "a reader enters an epoch: blocks freed from now wait for it"),),
    "leave": (("R-EPOCH-4", "the reader leaves its epoch (once)"),),
    "snapshot_match": (("R-SNAP-2", "the snapshot answers for its own version"),),
    "snapshot_dump": (("R-SNAP-2", "the snapshot's shape is the one it was taken at"),),
    "reclaim": (("R-EPOCH-2", "quarantine batches whose readers have all left are freed"),),
}

#: The rules that decide each error kind (R-ERR-3 names the kinds).
ERROR_RULES: dict[str, tuple[str, ...]] = {
    "token_type": ("R-TOK-2", "R-TOK-5"),
    "token_range": ("R-TOK-3", "R-TOK-5"),
    "token_layout": ("R-TOK-4",),
    "invalid_argument": ("R-ERR-1",),
    "out_of_blocks": ("R-INS-6",),
    "double_free": ("R-ALLOC-4",),
    "foreign_block": ("R-ALLOC-4",),
    "lease_released": ("R-PIN-4",),
    "foreign_lease": ("R-PIN-5",),
    "reader_left": ("R-EPOCH-4",),
}

#: The operations that stamp the blocks they use and tick the clock (R-LRU-1, R-LRU-3).
STAMPING_OPS = frozenset(row.name for row in OPERATIONS if row.ticks)


@dataclass(frozen=True)
class Decision:
    """One rule and why it applies to this step."""

    rule: str
    reason: str


@dataclass(frozen=True)
class StepFacts:
    """What :func:`decide` reads: the step, its outcome and its change.

    Attributes:
        step: the trace step.
        outcome: its outcome (``{"ok": ...}`` or ``{"error": kind}``).
        before: the state before it.
        after: the state after it.
        changes: the difference between the two.
        stats: the stats after the step, when known.
    """

    step: dict[str, Any]
    outcome: dict[str, Any]
    before: DumpIndex
    after: DumpIndex
    changes: Changes
    stats: dict[str, Any] | None = None


def decide(facts: StepFacts) -> list[Decision]:
    """The rules that decided this step, each once, most specific first. O(state)."""
    op = facts.step["op"]
    found: dict[str, str] = {}
    if "error" in facts.outcome:
        _error(facts, found)
    else:
        _changes(facts, found)
        for rule, reason in OP_RULES.get(op, ()):
            found.setdefault(rule, reason)
    return [Decision(rule, reason) for rule, reason in found.items()]


def _error(facts: StepFacts, found: dict[str, str]) -> None:
    kind = facts.outcome["error"]
    namespace = facts.step.get("namespace")
    if kind == "invalid_argument" and not (namespace is None or isinstance(namespace, str)):
        found["R-NS-4"] = f"namespace {namespace!r} is neither None nor a str"
    if kind == "out_of_blocks" and facts.stats and facts.stats.get("readers"):
        found["R-EPOCH-3"] = "a reader is inside: the insert may not evict, only reclaim"
    for rule in ERROR_RULES.get(kind, ()):
        found.setdefault(rule, f"the call is refused with {kind}")
    found["R-ERR-2"] = "a call that raises changes nothing"


def _changes(facts: StepFacts, found: dict[str, str]) -> None:
    step, answer, changes = facts.step, facts.outcome.get("ok") or {}, facts.changes
    op, row = step["op"], BY_NAME[step["op"]]
    if changes.split:
        found["R-SPLIT-1"] = "the sequence diverged inside an edge: it splits at the block boundary"
        found["R-SPLIT-2"] = "ids, pins and stamps stay with their halves"
    evicted = answer.get("evicted") or answer.get("freed") or []
    if row.fills is not None and evicted:  # evicted to make room for what it caches
        found["R-INS-5"] = (
            f"short of free blocks: exactly {len(evicted)} evicted, none from the inserted path"
        )
    if evicted:
        found["R-EVICT-1"] = "single blocks are freed from leaf tails, deeper first"
        found["R-EVICT-2"] = "the least recently used leaf tail goes first"
        if any(block.pin for block in facts.before.blocks.values()):
            found["R-PIN-3"] = "pinned blocks and their ancestors were passed over"
    if changes.quarantined:
        found["R-EPOCH-1"] = (
            f"a reader is inside: {len(changes.quarantined)} freed blocks wait in quarantine"
        )
    if changes.reclaimed and "reclaimed" not in (row.answer or ()):  # a call's own room
        found["R-EPOCH-2"] = f"{len(changes.reclaimed)} quarantined blocks were reclaimed first"
    if row.fills is not None:
        _insert(facts, answer, found)
    if step.get("pin") and row.issues == LEASE and row.finds == ON_DEVICE:
        found["R-PIN-1"] = f"pin=True: lease {answer.get('lease')} covers exactly these blocks"
        if _ends_inside_edge(facts, answer.get("blocks") or []):
            found["R-PIN-2"] = "the lease ends inside an edge: only the covered blocks are pinned"
    if op in STAMPING_OPS:
        found["R-LRU-1"] = f"{op} stamps the blocks it uses with the new time"
        found["R-LRU-3"] = "the logical clock advanced by one"
    if changes.namespaces_added:
        found["R-NS-1"] = "a new namespace gets its own root"
    if changes.namespaces_removed:
        found["R-NS-3"] = "a namespace left without blocks disappears"
    if row.finds == ON_DEVICE and step.get("namespace") is not None:
        found["R-NS-2"] = "only this namespace's root is searched"
    if changes.merged:
        found["R-DUMP-2"] = "an edge left with one child is written as one chain"


def _insert(facts: StepFacts, answer: dict[str, Any], found: dict[str, str]) -> None:
    if answer.get("reused"):
        found["R-INS-2"] = f"{answer['reused']} leading blocks were already cached: reused"
    if answer.get("allocated"):
        found["R-ALLOC-2"] = "the smallest free ids are taken, ascending"
        found["R-INS-4"] = "new blocks get them root to leaf"
    tokens = facts.step.get("tokens")
    if isinstance(tokens, list) and len(tokens) % facts.before.block_size:
        found["R-INS-3"] = f"{len(tokens) % facts.before.block_size} trailing tokens: not cached"


def _ends_inside_edge(facts: StepFacts, blocks: list[int]) -> bool:
    """Whether the last pinned block is followed by more blocks of its dump edge."""
    if not blocks or blocks[-1] not in facts.after.by_id:
        return False
    key = facts.after.by_id[blocks[-1]]
    return any(
        child in facts.after.blocks
        and facts.after.blocks[child].edge == facts.after.blocks[key].edge
        for child in facts.after.children.get(key, [])
    )
