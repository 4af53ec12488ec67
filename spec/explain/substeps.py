"""Sub-steps: one operation taken apart, the way a teacher would walk through it.

A match or an insert is one step of a trace, but several things happen inside it, each
decided by a rule of its own. :func:`substeps` lists them, in the order the reference
does them:

1. the walk starts at the namespace's root (R-NS-2, R-MATCH-1);
2. it goes down one edge at a time, saying how many of the edge's blocks match
   (R-MATCH-1), and stops where a block is not cached, or inside an edge (R-SPLIT-1);
3. an insert splits that edge at the block boundary (R-SPLIT-1, R-SPLIT-2);
4. it evicts, one block at a time, in the eviction order (R-EVICT-1, R-EVICT-2, R-POL-*);
5. it allocates the new blocks, one id at a time (R-ALLOC-2, R-INS-4) and hangs them
   as one edge (R-INS-1);
6. the lease pins what it covers (R-PIN-1) and the used blocks are stamped with the new
   time (R-LRU-1, R-LRU-3).

An evict lists each freed block; a release the pins it gives back. Each sub-step names
the tree it is drawn on (``before``: the state before the step, for the walk; ``after``:
the step's own drawing) and the block ids to highlight there and in the pool. A target's
sub-steps say what *it* did (its evictions in its order, its ids), beside which the
spec's choice is named where it differs; they cite no rule. Cost: O(state).
"""

from __future__ import annotations

from typing import Any

from kachedb_radix.reference.render import id_ranges

from ..conform.operations import BY_NAME, ENDS_LEASE, LEASE, ON_DEVICE
from .model import Changes, DumpIndex, KeySpace, eviction_sequence, walk
from .why import key_text

SubStep = dict[str, Any]


def _sub(text: str, rule: str, on: str, blocks: list[int], root: bool = False) -> SubStep:
    found: SubStep = {"t": text, "r": rule, "on": on, "b": blocks}
    if root:
        found["root"] = True
    return found


def substeps(
    step: dict[str, Any],
    outcome: dict[str, Any],
    before: DumpIndex,
    after: DumpIndex,
    changes: Changes,
    keys: KeySpace,
    *,
    name: str = "",
) -> list[SubStep]:
    """The sub-steps of one step on one side (the spec's when ``name`` is empty); empty
    for a step that is one action (a read, a refusal, a reset). O(state)."""
    row = BY_NAME[step["op"]]
    answer = outcome.get("ok")
    if not isinstance(answer, dict):
        return []
    found: list[SubStep] = []
    if row.finds == ON_DEVICE:
        found += _walk(step, before, keys, name)
    if row.fills is not None and changes.split:
        found += _split(before, after, changes)
    victims = answer.get(row.frees) if row.frees is not None else None
    if victims:
        protected = (
            frozenset(walk(before, keys, step.get("namespace"), step.get("tokens")))
            if row.fills is not None  # never from the path it caches (R-INS-5)
            else frozenset()
        )
        found += _evictions(before, list(victims), protected, name, changes)
    if row.fills is not None:
        found += _allocations(answer, before, changes, name)
    if row.ends == ENDS_LEASE:
        lost = sorted(after.blocks[key].block for key in changes.unpinned)
        if lost:
            found.append(
                _sub(
                    f"lease {step.get('lease')} gives back its pins: #{id_ranges(lost)}",
                    "R-PIN-2",
                    "after",
                    lost,
                )
            )
    if row.issues == LEASE and step.get("pin") and answer.get("blocks"):
        blocks = list(answer["blocks"])
        found.append(
            _sub(
                f"lease {answer.get('lease')} pins exactly #{id_ranges(blocks)}",
                "R-PIN-1",
                "after",
                blocks,
            )
        )
    stamped = sorted(after.blocks[key].block for key in changes.stamped if key in after.blocks)
    if stamped and row.ticks:
        clock = after.dump.get("clock")
        found.append(
            _sub(
                f"the clock moves to {clock}; the blocks used are stamped t={clock}: "
                f"#{id_ranges(stamped)}",
                "R-LRU-1" if not name else "",
                "after",
                stamped,
            )
        )
    if len(found) < 2:
        return []
    return found


def _walk(step: dict[str, Any], before: DumpIndex, keys: KeySpace, name: str) -> list[SubStep]:
    tokens, namespace, size = step.get("tokens"), step.get("namespace"), before.block_size
    if not isinstance(tokens, list):
        return []
    label = "(default)" if namespace is None else repr(namespace)
    rule = "" if name else ("R-NS-2" if namespace is not None else "R-MATCH-1")
    found = [_sub(f"the walk starts at the root of namespace {label}", rule, "before", [], True)]
    path = walk(before, keys, namespace, tokens)
    edges: dict[int, list[int]] = {}
    for key in path:
        edges.setdefault(before.blocks[key].edge, []).append(before.blocks[key].block)
    done = 0
    for first, ids in edges.items():
        length = sum(1 for block in before.blocks.values() if block.edge == first)
        done += len(ids)
        inside = len(ids) < length
        text = f"edge #{id_ranges(ids)}: {len(ids)} of its {length} blocks match"
        if inside:
            text += " -- the walk stops inside this edge"
        found.append(_sub(text, "" if name else "R-MATCH-1", "before", ids))
    wanted = len(tokens) // size
    if done < wanted:
        missing = tokens[done * size : (done + 1) * size]
        text = f"block {done + 1} {_tokens(missing)} is not cached here: {done * size} tokens match"
    else:
        text = f"all {wanted} whole blocks are cached: {done * size} tokens match"
    if len(tokens) % size:
        text += f" ({len(tokens) % size} trailing tokens: a partial block, ignored)"
    found.append(
        _sub(text, "" if name else "R-MATCH-1", "before", [before.blocks[k].block for k in path])
    )
    return found


def _split(before: DumpIndex, after: DumpIndex, changes: Changes) -> list[SubStep]:
    found = []
    for key in sorted(changes.split):
        if key not in after.blocks or key not in before.blocks:
            continue
        lower = [block.block for block in after.blocks.values() if block.edge == key]
        upper_edge = (
            after.blocks[after.blocks[key].parent].edge
            if after.blocks[key].parent in after.blocks
            else None
        )
        upper = [block.block for block in after.blocks.values() if block.edge == upper_edge]
        found.append(
            _sub(
                f"the edge splits at the block boundary: #{id_ranges(upper)} stays above, "
                f"#{id_ranges(lower)} hangs below with its ids, pins and stamps",
                "R-SPLIT-1",
                "after",
                upper + lower,
            )
        )
    return found


def _evictions(
    before: DumpIndex, victims: list[int], protected: frozenset[int], name: str, changes: Changes
) -> list[SubStep]:
    spec = [
        block.block for _, block in zip(victims, eviction_sequence(before, protected), strict=False)
    ]
    where = "quarantine" if changes.quarantined else "the free list"
    found = []
    for turn, block in enumerate(victims):
        key = before.by_id.get(block)
        shown = f" ({key_text(before, before.blocks[key])})" if key is not None else ""
        if name:
            text = f"{name} evicts #{block}{shown}"
            if turn < len(spec) and spec[turn] != block:
                text += f"; the spec would take #{spec[turn]} here"
            found.append(_sub(text, "", "after", [block]))
        else:
            nth = _ordinal(turn + 1)
            text = f"evict #{block}{shown}: the {nth} in the eviction order; it goes to {where}"
            found.append(_sub(text, "R-EVICT-2" if turn == 0 else "R-EVICT-1", "after", [block]))
    return found


def _allocations(
    answer: dict[str, Any], before: DumpIndex, changes: Changes, name: str
) -> list[SubStep]:
    allocated = list(answer.get("allocated") or [])
    if not allocated:
        return []
    pool = sorted(set(before.free) | set(answer.get("evicted") or []) | set(changes.reclaimed))
    found = []
    for turn, block in enumerate(allocated):
        if name:
            text = f"{name} allocates #{block}"
            if turn < len(pool) and pool[turn] != block:
                text += f"; the spec would take #{pool[turn]} (the smallest free)"
            found.append(_sub(text, "", "after", [block]))
        else:
            found.append(
                _sub(f"allocate #{block}: the smallest free id", "R-ALLOC-2", "after", [block])
            )
    found.append(
        _sub(
            f"the new blocks #{id_ranges(allocated)} hang below, root to leaf, as one edge",
            "" if name else "R-INS-4",
            "after",
            allocated,
        )
    )
    return found


def _tokens(tokens: list[Any]) -> str:
    return "[" + " ".join(str(token) for token in tokens) + "]"


def _ordinal(number: int) -> str:
    teens = 10 <= number % 100 <= 20
    suffix = "th" if teens else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"
