"""The "why" panel: the evidence behind a step, read off the states around it.

Where a step made a choice, the panel shows what it chose from:

* **match walk** (match, insert): the edges the walk went through, how many
  blocks of each it used, and why it stopped (R-MATCH-1, R-SPLIT-1);
* **eviction** (an evicting insert, evict): every block the spec's order takes, one
  after the other -- the unpinned leaf tail with the smallest key under the tree's
  policy (its stamp under LRU), a block becoming a leaf tail once the block below it
  went -- each with its key and its turn, then the next ones it would take
  (R-EVICT-1..3, R-POL-*, R-PIN-3); a target's panel lists what *it* evicted, in its
  order, beside the spec's;
* **refused** (an error): why the call was refused, with the numbers (an insert out of
  blocks: the blocks it needed, the free ones, the evictable ones) and that nothing
  changed (R-ERR-2);
* **dump** (the dump step): the canonical dump itself (R-DUMP-1);
* **free list** (allocation, frees): the allocator's ids before and what was
  taken or returned (R-ALLOC-2, R-INS-4);
* **pins** (pinning, release): which blocks a lease took or gave back (R-PIN-*);
* **readers and quarantine** (snapshots level): who is inside, what waits
  (R-EPOCH-*).

Each section is a title and lines of text; the page and the text mode print them.
"""

from __future__ import annotations

import json
from typing import Any

from kachedb_radix.reference.policies import POLICIES
from kachedb_radix.reference.render import id_ranges

from ..conform.operations import (
    BY_NAME,
    ENDS_EPOCH,
    ENDS_LEASE,
    ENDS_READER,
    ON_DEVICE,
    SNAPSHOT,
    Operation,
)
from .model import CachedBlock, Changes, DumpIndex, KeySpace, evictable, eviction_sequence, walk

#: Blocks the spec's order would take next, listed after those it took.
SHOWN_NEXT = 3

#: Lines of a dump shown in the panel before "…".
SHOWN_DUMP_LINES = 400

Section = tuple[str, list[str]]


def explain_step(
    step: dict[str, Any],
    outcome: dict[str, Any],
    before: DumpIndex,
    after: DumpIndex,
    changes: Changes,
    keys: KeySpace,
    stats: dict[str, Any] | None,
    *,
    name: str = "",
) -> list[Section]:
    """The panel's sections for one step of one implementation: the spec's when ``name``
    is empty, else the target called ``name``. O(state)."""
    row = BY_NAME[step["op"]]
    answer = outcome.get("ok") if isinstance(outcome.get("ok"), dict) else {}
    sections: list[Section] = []
    if "error" in outcome:
        sections.append(("why it was refused", refusal_lines(step, outcome, before, keys, stats)))
    if row.finds == ON_DEVICE and "ok" in outcome:
        sections.append(("match walk", _walk_lines(step, before, keys)))
    evicted = (answer or {}).get("evicted") or (answer or {}).get("freed") or []
    if evicted:
        protected = (
            frozenset(walk(before, keys, step.get("namespace"), step.get("tokens")))
            if row.fills is not None  # never from the path it caches (R-INS-5)
            else frozenset()
        )
        order = "least recently used" if before.policy == "lru" else f"smallest {before.policy} key"
        if name:
            title = f"eviction: what {name} took, in its order"
            sections.append((title, _taken(before, evicted, protected)))
        else:
            title = f"eviction, in the spec's order ({order} leaf tail first)"
            sections.append((title, _candidates(before, evicted, protected)))
    if row.shape and isinstance(answer, dict) and answer.get("namespaces") is not None:
        text = json.dumps(answer, indent=1).splitlines()
        if len(text) > SHOWN_DUMP_LINES:
            text = [*text[:SHOWN_DUMP_LINES], f"… ({len(text) - SHOWN_DUMP_LINES} more lines)"]
        sections.append(("the canonical dump (R-DUMP-1)", text))
    if changes.allocated or changes.freed:
        sections.append(("free list", _free_lines(before, changes, answer or {}, name)))
    pinned_now = [key for key in changes.new if after.blocks[key].pin]
    if changes.pinned or changes.unpinned or pinned_now or (evicted and _pins_held(before)):
        sections.append(("pins", _pin_lines(before, after, changes, pinned_now, bool(evicted))))
    elif row.ends == ENDS_LEASE and "ok" in outcome:
        held = (
            f"lease {step.get('lease')} held no block (its match found nothing): nothing to "
            "give back; the clock still moves (R-LRU-3)"
        )
        sections.append(("pins", [held]))
    if changes.quarantined or changes.reclaimed or (stats and stats.get("readers")) or _epochs(row):
        lines = _reader_lines(after, changes, stats)
        if (answer or {}).get("reclaimed") == []:
            lines.insert(0, "nothing waits in quarantine: nothing to reclaim")
        sections.append(("readers and quarantine", lines))
    if not sections:
        sections.append(_plain(step, outcome, after, row))
    return sections


def _epochs(row: Operation) -> bool:
    """Whether the operation is about readers and the quarantine: it takes a snapshot,
    enters or ends an epoch, or reclaims (R-EPOCH-*)."""
    return (
        row.issues == SNAPSHOT
        or row.ends in (ENDS_EPOCH, ENDS_READER)
        or (row.answer == ("reclaimed",))
    )


def _pins_held(index: DumpIndex) -> bool:
    return any(block.pin for block in index.blocks.values())


def _plain(
    step: dict[str, Any], outcome: dict[str, Any], after: DumpIndex, operation: Operation | None
) -> Section:
    """A step that chose nothing still says what it did and what there is (nothing left
    blank): a fresh pool, a read, a namespace listing."""
    if operation is not None and operation.resets:
        size, block = after.dump.get("num_blocks"), after.block_size
        policy = after.policy
        return ("the empty tree", [
            f"a fresh pool: {size} blocks of {block} tokens, every id free (R-ALLOC-1)",
            "nothing is cached: no namespace has a root until an insert gives it blocks (R-NS-1)",
            f"the clock starts at {after.dump.get('clock')}; eviction policy: {policy} (R-POL-1)",
        ])  # fmt: skip
    answer = outcome.get("ok")
    if operation is not None and operation.reads:
        shown = json.dumps(answer, ensure_ascii=False)
        if len(shown) > 300:
            shown = shown[:300] + " …"
        return ("a read", [f"it answers {shown}", "a read moves nothing in the tree or the pool"])
    return ("what happened", [f"{step['op']}: nothing in the tree or the pool changed"])


def _walk_lines(step: dict[str, Any], before: DumpIndex, keys: KeySpace) -> list[str]:
    tokens, namespace, size = step.get("tokens"), step.get("namespace"), before.block_size
    path = walk(before, keys, namespace, tokens)
    name = "(default)" if namespace is None else repr(namespace)
    lines = [f"root {name}"]
    edges: dict[int, list[int]] = {}
    for key in path:
        block = before.blocks[key]
        edges.setdefault(block.edge, []).append(block.block)
    for first, ids in edges.items():
        length = sum(1 for block in before.blocks.values() if block.edge == first)
        lines.append(f"→ #{id_ranges(ids)}: {len(ids)} of the {length} blocks of an edge")
    wanted = len(tokens) // size if isinstance(tokens, list) else 0
    if len(path) < wanted:
        assert isinstance(tokens, list)
        missing = tokens[len(path) * size : (len(path) + 1) * size]
        lines.append(
            f"stop: the prompt's {ordinal(len(path) + 1)} block {_tokens(missing)} is not "
            "cached there"
        )
    else:
        lines.append(f"stop: all {wanted} whole blocks are cached")
    if isinstance(tokens, list) and len(tokens) % size:
        lines.append(f"{len(tokens) % size} trailing tokens: a partial block, ignored")
    return lines


def _candidates(before: DumpIndex, evicted: list[int], protected: frozenset[int]) -> list[str]:
    """The spec's order, block by block: those taken, then the next few it would take."""
    order = {block: index for index, block in enumerate(evicted, 1)}
    lines = []
    gone: set[int] = set()
    extra = 0
    for block in eviction_sequence(before, protected):
        turn = order.get(block.block)
        if turn is None:
            if len(gone) < len(evicted):
                # Not what this side took (an adopted or a buggy choice): say so, go on.
                lines.append(f"#{block.block}  {key_text(before, block)}  (not taken)")
                continue
            if extra == SHOWN_NEXT:
                lines.append("…")
                break
            extra += 1
            lines.append(f"next: #{block.block}  {key_text(before, block)}")
            continue
        gone.add(block.block)
        parent = before.blocks.get(block.parent)
        became = (
            f"; then #{parent.block} is a leaf tail"
            if parent is not None
            and all(before.blocks[kid].block in gone for kid in before.children[parent.key])
            else ""
        )
        lines.append(
            f"{turn}. #{block.block}  {key_text(before, block)}  ← evicted {ordinal(turn)}{became}"
        )
    pinned = sum(1 for block in before.blocks.values() if block.pin)
    if pinned:
        lines.append(f"{pinned} pinned blocks (and the blocks above them) are never candidates")
    if protected:
        lines.append("the insert's own cached path is never its victim (R-INS-5)")
    if before.policy != "lru":
        lines.append(f"{before.policy}: {POLICY_ORDER[before.policy]}")
    lines.append(f"evicted, in order: {', '.join(str(block) for block in evicted)}")
    return lines


def _taken(before: DumpIndex, evicted: list[int], protected: frozenset[int]) -> list[str]:
    """A target's eviction as it did it, beside the spec's order from the same state."""
    lines = []
    gone: set[int] = set()
    for turn, block in enumerate(evicted, 1):
        key = before.by_id.get(block)
        if key is None:
            lines.append(f"{turn}. #{block}  (was not cached)")
            continue
        cached = before.blocks[key]
        below = [
            kid for kid in before.children.get(key, []) if before.blocks[kid].block not in gone
        ]
        shape = (
            f"  (its child #{before.blocks[below[0]].block} still cached)"
            if below
            else "  (a leaf tail)"
        )
        lines.append(f"{turn}. #{block}  {key_text(before, cached)}{shape}")
        gone.add(block)
    spec = [
        block.block for _, block in zip(evicted, eviction_sequence(before, protected), strict=False)
    ]
    lines.append(f"the spec's order from the same state: {', '.join(map(str, spec))}")
    return lines


def refusal_lines(
    step: dict[str, Any],
    outcome: dict[str, Any],
    before: DumpIndex,
    keys: KeySpace,
    stats: dict[str, Any] | None,
) -> list[str]:
    """Why a call was refused, with the numbers; nothing changed (R-ERR-2). O(state)."""
    kind = outcome["error"]
    lines = []
    tokens = step.get("tokens")
    if kind == "out_of_blocks" and isinstance(tokens, list):
        size = before.block_size
        path = walk(before, keys, step.get("namespace"), tokens)
        wanted = len(tokens) // size
        needed = wanted - len(path)
        free = len(before.free)
        readers = (stats or {}).get("readers") or 0
        can = 0 if readers else evictable(before, frozenset(path))
        lines.append(f"needed {needed}, free {free}, evictable {can}")
        lines.append(
            f"  {wanted} whole blocks, {len(path)} of them cached: {needed} new ones needed"
        )
        if readers:
            lines.append(
                f"  a reader is inside: freed blocks would wait in quarantine, so the insert "
                f"may not evict (R-EPOCH-3); quarantine: {id_ranges(before.quarantine) or 'empty'}"
            )
        else:
            pinned = sum(1 for block in before.blocks.values() if block.pin)
            lines.append(
                f"  evictable: unpinned blocks with no pinned block below and off the insert's "
                f"own path ({pinned} pinned)"
            )
        lines.append(f"{needed} > {free} + {can}: refused with out_of_blocks (R-INS-6)")
    elif kind in ("token_type", "token_range") and isinstance(tokens, list):
        bad = next(
            (
                (index, token)
                for index, token in enumerate(tokens)
                if not (
                    isinstance(token, int) and not isinstance(token, bool) and 0 <= token < 2**32
                )
            ),
            None,
        )
        if bad is not None:
            lines.append(f"token {bad[0]} is {bad[1]!r}: not an unsigned 32-bit int")
        lines.append(f"refused with {kind} (R-TOK-2, R-TOK-3: every token is checked first)")
    elif kind == "lease_released":
        lines.append(f"lease {step.get('lease')} was released already (R-PIN-4)")
    elif kind == "foreign_lease":
        lines.append(f"lease {step.get('lease')} was never issued by this tree (R-PIN-5)")
    elif kind == "reader_left":
        lines.append(f"reader {step.get('snapshot')} has left already (R-EPOCH-4)")
    elif kind == "invalid_argument":
        shown = {
            k: v for k, v in step.items() if k not in ("op", "note", "expect", "actual", "trace")
        }
        lines.append(f"an argument is not valid: {json.dumps(shown)[:200]} (R-ERR-1)")
    else:
        lines.append(f"refused with {kind}")
    lines.append("nothing changed: a call that raises leaves the tree as it was (R-ERR-2)")
    return lines


#: Why the first candidate goes first, per policy (R-POL-2 .. R-POL-6).
POLICY_ORDER: dict[str, str] = {
    "lru": "the least recently used goes first (R-POL-2)",
    "lfu": "the fewest hits go first, then the least recently used (R-POL-3)",
    "fifo": "the earliest cached goes first, however recently used (R-POL-4)",
    "priority": "the lowest retention priority goes first, then the least recently used (R-POL-5)",
    "slru": "probation (0) before protected (1), least recently used first in each (R-POL-6)",
}

#: How a key's items are shown: the stamp as ``t``, the others by their field name.
_SHORT = {"stamp": "t"}


def key_text(index: DumpIndex, block: CachedBlock) -> str:
    """``block``'s eviction key as the panel and the page show it: ``t=5`` under lru,
    ``hits=2 t=5`` under lfu, ... (R-POL-1). O(1)."""
    names = POLICIES[index.policy].key_names
    key = index.eviction_key(block)
    shown = zip(names, key[:-1], strict=True)
    return " ".join(f"{_SHORT.get(name, name)}={value}" for name, value in shown)


def _free_lines(
    before: DumpIndex, changes: Changes, answer: dict[str, Any], name: str
) -> list[str]:
    """The free list before, what was taken (in the order it was taken, and whether that
    is the smallest free ids, R-ALLOC-2) and what came back."""
    lines = [f"free before: {id_ranges(before.free) or 'none'}"]
    taken = answer.get("allocated")
    if isinstance(taken, list) and taken:
        pool = sorted(set(before.free) | set(answer.get("evicted") or []) | set(changes.reclaimed))
        smallest = pool[: len(taken)]
        if taken == smallest:
            lines.append(f"allocated: {id_ranges(taken)} (the smallest free ids, ascending)")
        else:
            who = f"{name} took" if name else "took"
            lines.append(
                f"allocated: {who} #{', #'.join(map(str, taken))} in that order; the smallest "
                f"free ids, ascending, are #{id_ranges(smallest)}"
            )
    elif changes.allocated:
        lines.append(f"allocated: {id_ranges(changes.allocated)}")
    if changes.freed:
        lines.append(f"returned: {id_ranges(changes.freed)}")
    return lines


def _pin_lines(
    before: DumpIndex, after: DumpIndex, changes: Changes, pinned_now: list[int], evicts: bool
) -> list[str]:
    """Every block whose pin count moved, new blocks pinned as they were cached included,
    and, when the step evicted, the pinned blocks it passed over (R-PIN-3)."""
    lines = []
    for label, keys in (("pinned", changes.pinned), ("unpinned", changes.unpinned)):
        moved = sorted(keys, key=lambda key: after.blocks[key].block)
        counts = sorted({(before.blocks[key].pin, after.blocks[key].pin) for key in moved}, key=str)
        for old, new in counts:
            ids = [after.blocks[key].block for key in moved
                   if (before.blocks[key].pin, after.blocks[key].pin) == (old, new)]  # fmt: skip
            lines.append(f"{label}: #{id_ranges(ids)} (pins {old}→{new})")
    if pinned_now:
        ids = sorted(after.blocks[key].block for key in pinned_now)
        lines.append(f"pinned as they were cached: #{id_ranges(ids)} (pins 0→1, new blocks)")
    if evicts:
        held = sorted(block.block for block in before.blocks.values() if block.pin)
        if held:
            lines.append(
                f"pinned before the step: #{id_ranges(held)}: never evicted, nor any block "
                "above them (R-PIN-3)"
            )
    return lines


def _reader_lines(after: DumpIndex, changes: Changes, stats: dict[str, Any] | None) -> list[str]:
    lines = []
    if stats is not None and not stats.get("readers") and after.quarantine:
        lines.append(
            "no reader is inside: the quarantine waits for a reclaim or the next insert "
            "short of blocks (R-EPOCH-2)"
        )
    if stats is not None and "readers" in stats:
        oldest = stats.get("oldest_reader")
        lines.append(
            f"readers inside: {stats['readers']}"
            + (f" (oldest epoch {oldest})" if oldest is not None else "")
        )
    if changes.quarantined:
        lines.append(f"quarantined now: {id_ranges(changes.quarantined)}")
    if changes.reclaimed:
        lines.append(f"reclaimed: {id_ranges(changes.reclaimed)}")
    lines.append(f"quarantine: {id_ranges(after.quarantine) or 'empty'}")
    return lines


def _tokens(tokens: list[Any]) -> str:
    return "[" + " ".join(str(token) for token in tokens) + "]"


def ordinal(number: int) -> str:
    """``1st``, ``2nd``, ``11th``, ``23rd``. O(1)."""
    teens = 10 <= number % 100 <= 20
    suffix = "th" if teens else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"
