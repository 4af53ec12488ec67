"""A target's own panel: for each rule its step touched, whether it follows or departs.

The reference's panel says which rules decided a step, in the spec's words
(:mod:`kachedb_radix.spec.explain.decide`). A target beside it is described by what *it*
did: each rule its step touched is checked against the target's own states before and
after the step and its own answer, and cited only to say that the target follows it or
departs from it, with the facts (``took #8-9,6-7,12 in that order; the spec takes the
smallest free ids, ascending: #6-9,12``). A departure the target's profile declares
says so, with the reason.

A rule with no check here is cited when the kit's finding at this step names it
(departs, with the kit's cause) or when the target answered exactly as the reference did
(follows); otherwise it is left out. Cost: O(state) per step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kachedb_radix.reference.render import id_ranges

from ..conform.operations import BY_NAME, ENDS_LEASE, Operation
from .decide import StepFacts
from .model import CachedBlock, DumpIndex, KeySpace, evictable, eviction_sequence, walk

#: ``follows`` or ``departs``, and what the target did.
Verdict = tuple[bool, str]


@dataclass
class Context:
    """What the checks read besides the step's facts.

    Attributes:
        facts: the target's step facts (its states before and after, its answer).
        keys: the recording's key space (for walks).
        spec_outcome: the reference's outcome of the same step.
        lease_blocks: the block ids each live lease handle pinned.
        declared: rule -> the profile's reason, for the rules it declares.
        finding_rules: the rules the kit's finding at this step names (with its cause).
        finding_cause: the finding's likely cause.
    """

    facts: StepFacts
    keys: KeySpace
    spec_outcome: dict[str, Any] | None
    lease_blocks: dict[int, list[int]] = field(default_factory=dict)
    declared: dict[str, str] = field(default_factory=dict)
    finding_rules: tuple[str, ...] = ()
    finding_cause: str = ""

    @property
    def answer(self) -> dict[str, Any]:
        """The target's answer (``{}`` for an error or a non-dict answer)."""
        found = self.facts.outcome.get("ok")
        return found if isinstance(found, dict) else {}

    @property
    def before(self) -> DumpIndex:
        return self.facts.before

    @property
    def after(self) -> DumpIndex:
        return self.facts.after

    @property
    def row(self) -> Operation:
        """The step's operation (its row of the table)."""
        return BY_NAME[self.facts.step["op"]]

    def walked(self) -> list[int]:
        """Keys of the cached prefix of the step's tokens before it (R-MATCH-1)."""
        step = self.facts.step
        return walk(self.before, self.keys, step.get("namespace"), step.get("tokens"))

    def protected(self) -> frozenset[int]:
        """The insert's own cached path: never its own victim (R-INS-5)."""
        return frozenset(self.walked()) if self.row.fills is not None else frozenset()


def judge(context: Context, rules: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """``rules`` (id, the spec's reason) as the target's panel cites them: id, what the
    target did, and ``follows`` or ``departs``; rules that cannot be judged are left
    out, rules the finding names added. O(state)."""
    cited: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    for rule, _ in [*rules, *((rule, "") for rule in context.finding_rules)]:
        if rule in seen:
            continue
        seen.add(rule)
        verdict = _verdict(context, rule)
        if verdict is None:
            continue
        holds, text = verdict
        if not holds and rule in context.declared:
            text += f" (declared: {context.declared[rule].removeprefix('declared: ')})"
        cited.append((rule, text, "follows" if holds else "departs"))
    return cited


def _verdict(context: Context, rule: str) -> Verdict | None:
    op = context.facts.step["op"]
    check = CHECKS.get((rule, op)) or CHECKS.get((rule, "*"))
    if rule in context.finding_rules and (check is None or check(context) is None):
        return False, context.finding_cause or "the kit's finding names this rule"
    if check is not None:
        found = check(context)
        if found is not None:
            return found
    if "error" in context.facts.outcome:
        return _refusal(context, rule)
    if context.spec_outcome is not None and _same(context.spec_outcome, context.facts.outcome):
        return True, "answers as the spec does"
    return None


def _same(left: dict[str, Any], right: dict[str, Any]) -> bool:
    strip = ("lease",)
    if isinstance(left.get("ok"), dict) and isinstance(right.get("ok"), dict):
        return {k: v for k, v in left["ok"].items() if k not in strip} == {
            k: v for k, v in right["ok"].items() if k not in strip
        }
    return left == right


def _refusal(context: Context, rule: str) -> Verdict:
    kind = context.facts.outcome["error"]
    if rule == "R-ERR-2":
        return _unchanged(context)
    spec = (context.spec_outcome or {}).get("error")
    if spec == kind:
        return True, f"refused with {kind}, as the spec does"
    if spec is None:
        return False, f"refused with {kind}; the spec accepts the call"
    return False, f"refused with {kind}; the spec refuses with {spec}"


def _unchanged(context: Context) -> Verdict:
    changes = context.facts.changes
    moved = changes.new | changes.gone | changes.pinned | changes.unpinned | changes.stamped
    if moved or changes.allocated or changes.freed:
        return False, "the refused call changed the tree"
    return True, "the refused call changed nothing"


# ---------------------------------------------------------------- the checks


def _match_longest(context: Context) -> Verdict:
    size = context.before.block_size
    cached = len(context.walked()) * size
    if context.row.fills is not None:
        reused = context.answer.get("reused")
        if reused == len(context.walked()):
            return True, f"reused the {reused} cached leading blocks"
        return False, f"reused {reused} blocks; {len(context.walked())} were cached"
    got = context.answer.get("length")
    if got == cached:
        return True, f"matched {got} tokens, the longest cached whole-block prefix"
    return False, f"matched {got} tokens; {cached} were cached"


def _match_shape(context: Context) -> Verdict:
    changes = context.facts.changes
    if changes.new or changes.gone or changes.split or changes.merged:
        return False, "the match changed the tree's shape"
    return True, "the tree's shape is unchanged"


def _all_cached(context: Context) -> Verdict:
    step = context.facts.step
    tokens = step.get("tokens")
    wanted = len(tokens) // context.after.block_size if isinstance(tokens, list) else 0
    found = len(walk(context.after, context.keys, step.get("namespace"), tokens))
    if found >= wanted:
        return True, f"all {wanted} whole blocks are cached"
    return False, f"{found} of {wanted} whole blocks are cached"


def _trailing(context: Context) -> Verdict:
    tokens = context.facts.step.get("tokens") or []
    return True, f"{len(tokens) % context.after.block_size} trailing tokens not cached"


def _root_to_leaf(context: Context) -> Verdict:
    answer = context.answer
    blocks, allocated = answer.get("blocks") or [], answer.get("allocated") or []
    new = blocks[len(blocks) - len(allocated) :] if allocated else []
    if new == allocated:
        return True, f"new blocks #{id_ranges(allocated)} hang root to leaf in that order"
    return False, f"allocated #{id_ranges(allocated)}, hung as #{id_ranges(new)}"


def _smallest_free(context: Context) -> Verdict | None:
    allocated = context.answer.get("allocated") or []
    if not allocated:
        return None
    changes = context.facts.changes
    pool = set(context.before.free) | set(context.answer.get("evicted") or [])
    pool |= set(changes.reclaimed)
    smallest = sorted(pool)[: len(allocated)]
    if allocated == smallest:
        return True, f"took #{id_ranges(allocated)}, the smallest free ids, ascending"
    return False, (
        f"took #{id_ranges(allocated)} in that order; the spec takes the smallest free ids, "
        f"ascending: #{id_ranges(smallest)}"
    )


def _shortfall(context: Context) -> Verdict | None:
    evicted = context.answer.get("evicted") or []
    if not evicted:
        return None
    tokens = context.facts.step.get("tokens") or []
    wanted = len(tokens) // context.before.block_size
    needed = wanted - len(context.walked())
    room = len(context.before.free) + len(context.facts.changes.reclaimed)
    short = max(0, needed - room)
    if len(evicted) == short:
        return True, f"evicted exactly the shortfall: {short} blocks"
    return False, f"evicted {len(evicted)} blocks for a shortfall of {short}"


def _victims(context: Context) -> list[int]:
    answer = context.answer
    found = answer.get(context.row.frees) if context.row.frees is not None else None
    return list(found or [])


def _leaf_tails(context: Context) -> Verdict | None:
    victims = _victims(context)
    if not victims:
        return None
    before = context.before
    gone: set[int] = set()
    for block in victims:
        key = before.by_id.get(block)
        if key is None:
            return False, f"evicted #{block}, which was not cached"
        below = [kid for kid in before.children.get(key, []) if kid not in gone]
        if below:
            child = before.blocks[below[0]].block
            return False, f"evicted #{block} while its child #{child} was still cached"
        gone.add(key)
    return True, f"freed #{', #'.join(map(str, victims))} one by one, each a leaf tail"


def _least_recent(context: Context) -> Verdict | None:
    victims = _victims(context)
    if not victims:
        return None
    spec = [
        block.block
        for block, _ in zip(
            eviction_sequence(context.before, context.protected()), victims, strict=False
        )
    ]
    if sorted(spec) == sorted(victims) and spec == victims[: len(spec)]:
        return True, "took the least recently used leaf tails first"
    if set(victims) >= set(spec) and len(victims) > len(spec):
        return False, f"took #{id_ranges(victims)}; the spec's order takes #{id_ranges(spec)}"
    return False, f"took #{id_ranges(victims)}; the spec's order takes #{id_ranges(spec)}"


def _count_freed(context: Context) -> Verdict:
    freed = context.answer.get("freed") or []
    count = context.facts.step.get("count")
    can = evictable(context.before)
    wanted = min(count, can) if isinstance(count, int) else len(freed)
    if len(freed) == wanted:
        return True, f"freed {len(freed)} of the {can} evictable blocks, as asked"
    return False, f"freed {len(freed)} blocks; asked {count}, {can} evictable"


def _pins_passed(context: Context) -> Verdict | None:
    victims = _victims(context)
    if not victims:
        return None
    before = context.before
    held: set[int] = set()
    for key, block in before.blocks.items():
        if block.pin:
            while key in before.blocks and key not in held:
                held.add(key)
                key = before.blocks[key].parent
    hit = [block for block in victims if before.by_id.get(block) in held]
    if hit:
        return False, f"evicted #{id_ranges(hit)}, pinned or above a pinned block"
    return True, "no pinned block, nor any block above one, was evicted"


def _lease_covers(context: Context) -> Verdict | None:
    blocks = context.answer.get("blocks") or []
    if not context.facts.step.get("pin"):
        return None
    changes, after = context.facts.changes, context.after
    # Pins taken on blocks cached before, and on the new blocks the step cached pinned.
    pinned = {after.blocks[key].block for key in changes.pinned}
    pinned |= {after.blocks[key].block for key in changes.new if after.blocks[key].pin}
    if pinned == set(blocks):
        return True, f"lease {context.answer.get('lease')} pins exactly #{id_ranges(blocks)}"
    return False, f"pinned #{id_ranges(sorted(pinned))}; the lease covers #{id_ranges(blocks)}"


def _release(context: Context) -> Verdict | None:
    lease = context.facts.step.get("lease")
    blocks = context.lease_blocks.get(lease) if isinstance(lease, int) else None
    changes = context.facts.changes
    if changes.pinned:
        return False, "a release raised a pin count"
    lost = sorted(context.after.blocks[key].block for key in changes.unpinned)
    if blocks is None:
        return (True, f"#{id_ranges(lost)} lost a pin each") if lost else None
    if lost == sorted(blocks):
        return True, f"lease {lease}'s blocks #{id_ranges(blocks)} lost one pin each"
    return (
        False,
        f"lease {lease} covers #{id_ranges(blocks)}; #{id_ranges(lost) or 'none'} lost a pin",
    )


def _pin_edge(context: Context) -> Verdict | None:
    if context.row.ends == ENDS_LEASE:
        return _release(context)
    return _lease_covers(context)


def _used(context: Context) -> list[CachedBlock]:
    after = context.after
    if context.row.ends == ENDS_LEASE:
        lease = context.facts.step.get("lease")
        ids = context.lease_blocks.get(lease, []) if isinstance(lease, int) else []
    else:
        ids = context.answer.get("blocks") or []
    return [after.blocks[after.by_id[block]] for block in ids if block in after.by_id]


def _stamped(context: Context) -> Verdict | None:
    clock = context.after.dump.get("clock")
    used = _used(context)
    if clock is None or not used or any(block.stamp is None for block in used):
        return None
    stale = [block for block in used if block.stamp != clock]
    if not stale:
        return True, f"stamped the {len(used)} blocks it used with t={clock}"
    first = stale[0]
    return False, (
        f"#{first.block} kept t={first.stamp}; the step's time is t={clock}"
        + (f" ({len(stale)} blocks not stamped)" if len(stale) > 1 else "")
    )


def _clock(context: Context) -> Verdict | None:
    old, new = context.before.dump.get("clock"), context.after.dump.get("clock")
    op, row = context.facts.step["op"], context.row
    if not isinstance(old, int) or not isinstance(new, int) or row.counts or row.shape:
        return None
    if row.ticks:
        return new == old + 1, f"the clock went from {old} to {new}"
    if new != old:
        return False, f"the clock went from {old} to {new} on {op} (match, insert, release tick it)"
    return True, f"the clock stayed at {old}"


def _halves(context: Context) -> Verdict | None:
    changes = context.facts.changes
    if not changes.split:
        return None
    before, after = context.before, context.after
    split_edges = {before.blocks[key].edge for key in changes.split if key in before.blocks}
    used = {block.key for block in _used(context)} | set(context.walked())
    # The step's own lease pins its path once; nothing else's pins move.
    leased = used if context.facts.step.get("pin") else set()
    for key, block in before.blocks.items():
        if block.edge not in split_edges or key not in after.blocks:
            continue
        now = after.blocks[key]
        if now.block != block.block:
            return False, f"block #{block.block} became #{now.block} in the split"
        if key not in used and block.stamp is not None and now.stamp != block.stamp:
            return False, (
                f"#{block.block} (not used by this step) went from t={block.stamp} to "
                f"t={now.stamp} in the split"
            )
        wanted = None if block.pin is None else block.pin + (1 if key in leased else 0)
        if wanted is not None and now.pin != wanted:
            return False, f"#{block.block} went from pin {block.pin} to pin {now.pin} in the split"
    return True, "ids, pins and stamps stayed with their halves"


def _split_at_block(context: Context) -> Verdict | None:
    if not context.facts.changes.split:
        return None
    ids = sorted(context.after.blocks[key].block for key in context.facts.changes.split)
    return True, f"split at the block boundary before #{id_ranges(ids)}"


def _chains(context: Context) -> Verdict:
    dump = context.facts.outcome.get("ok") if context.row.shape else None
    spaces = (dump or context.after.dump).get("namespaces", [])
    pending = [edge for space in spaces for edge in space.get("children", [])]
    while pending:
        edge = pending.pop()
        kids = edge.get("children", [])
        if len(kids) == 1:
            return False, f"edge #{id_ranges(edge['blocks'])} has one child: not one chain"
        pending.extend(kids)
    return True, "every chain is one edge"


def _fresh_pool(context: Context) -> Verdict:
    size = context.after.dump.get("num_blocks", 0)
    if context.after.free == list(range(size)):
        return True, f"all {size} block ids are free"
    return False, f"free after reset: #{id_ranges(context.after.free)} of {size}"


def _accounts(context: Context) -> Verdict | None:
    stats = context.facts.stats or {}
    if not {"free", "cached", "num_blocks"} <= set(stats):
        return None
    total = stats["free"] + stats["cached"] + stats.get("quarantined", 0)
    if total == stats["num_blocks"]:
        return True, f"{stats['free']} free + {stats['cached']} cached = {total} blocks"
    return False, f"{stats['free']} free + {stats['cached']} cached != {stats['num_blocks']}"


def _own_namespace(context: Context) -> Verdict | None:
    namespace = context.facts.step.get("namespace")
    blocks = context.answer.get("blocks") or []
    keys = [context.after.by_id.get(block) for block in blocks]
    foreign = [
        block
        for block, key in zip(blocks, keys, strict=True)
        if key is None or context.after.blocks[key].namespace != namespace
    ]
    if foreign:
        return False, f"#{id_ranges(foreign)} are not in namespace {namespace!r}"
    return True, f"used only namespace {namespace!r}'s blocks"


def _quarantined(context: Context) -> Verdict | None:
    found = context.facts.changes.quarantined
    return (True, f"#{id_ranges(found)} wait in quarantine") if found else None


CHECKS: dict[tuple[str, str], Callable[[Context], Verdict | None]] = {
    ("R-MATCH-1", "match"): _match_longest,
    ("R-MATCH-2", "match"): _match_shape,
    ("R-INS-1", "insert"): _all_cached,
    ("R-INS-2", "insert"): _match_longest,
    ("R-INS-3", "insert"): _trailing,
    ("R-INS-4", "insert"): _root_to_leaf,
    ("R-INS-5", "insert"): _shortfall,
    ("R-ALLOC-1", "reset"): _fresh_pool,
    ("R-ALLOC-2", "insert"): _smallest_free,
    ("R-EVICT-1", "*"): _leaf_tails,
    ("R-EVICT-2", "*"): _least_recent,
    ("R-EVICT-4", "evict"): _count_freed,
    ("R-PIN-1", "*"): _lease_covers,
    ("R-PIN-2", "*"): _pin_edge,
    ("R-PIN-3", "*"): _pins_passed,
    ("R-LRU-1", "*"): _stamped,
    ("R-LRU-3", "*"): _clock,
    ("R-SPLIT-1", "*"): _split_at_block,
    ("R-SPLIT-2", "*"): _halves,
    ("R-DUMP-2", "*"): _chains,
    ("R-INV-1", "stats"): _accounts,
    ("R-NS-2", "*"): _own_namespace,
    ("R-EPOCH-1", "*"): _quarantined,
}
