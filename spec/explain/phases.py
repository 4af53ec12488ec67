"""The phases of one step: the moments inside an operation, each with its own state.

A match or an insert is one step of a trace, but several things happen inside it, each
decided by a rule of its own. :func:`phases` takes the step apart in the order the
reference does it (``reference/tree.py``'s ``_insert``), and gives every moment the
state the tree is in *at that moment*, as a dump (R-DUMP-1), so the tree, the pool, the
counts, the stamps and the pins drawn for a sub-step are all of one moment:

1. **walk** -- from the namespace's root, edge by edge, to where the cached prefix ends
   (R-MATCH-1, R-NS-2); the state is the one before the step;
2. **reclaiming** -- quarantined ids whose readers have all left go back to the free list
   first (R-EPOCH-2);
3. **evicting** -- one block at a time in the order the answer reports (R-EVICT-1,
   R-EVICT-2, R-INS-5), each to the free list or, with a reader inside, to the
   quarantine (R-EPOCH-1); a target that evicts a whole node at once has it taken in one
   phase. When an eviction leaves a block with one cached child, the dump writes the two
   edges as one chain: a **merge**, a phase of its own (R-DUMP-2); a namespace left with
   no block loses its root: a **namespace** phase (R-NS-3);
4. **split** -- the edge the walk stopped inside splits at the block boundary
   (R-SPLIT-1, R-SPLIT-2);
5. **allocation** -- one id at a time off the free list (R-ALLOC-2): the id is *taken*
   (off the free list, not yet in the tree; the dump's extra ``"taken"`` list);
6. **hang** -- the new blocks hang below the path as one edge, or extend a leaf
   (R-INS-4); they carry no stamp yet (``None``);
7. **stamp** -- the clock moves and the blocks used are stamped (R-LRU-1, R-LRU-3), with
   the policy's fields (R-POL-1);
8. **pin** / **unpin** -- the lease's pins (R-PIN-1, R-PIN-2); a release gives them back
   before the clock moves, as the reference does.

The phases are worked out from the states before and after the step and the step's
answer alone, so they serve the reference and any target alike. Invariant: the last
phase's state *is* the dump after the step. When the answer and the two dumps cannot be
taken apart this way (a target whose dump is not what its answer leads to), the phases
are the walk and then one phase, the state after the step, said as such.

Cost: O(phases * state size).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from kachedb_radix.reference.render import id_ranges

from ..conform.operations import BY_NAME, ENDS_LEASE, LEASE, ON_DEVICE, Operation
from .model import Changes, Dump, DumpIndex, KeySpace, eviction_sequence, walk
from .why import key_text, ordinal


@dataclass
class Phase:
    """One moment inside a step.

    Attributes:
        kind: ``walk``, ``reclaiming``, ``evicting``, ``merge``, ``namespace``, ``split``,
            ``allocation``, ``hang``, ``stamp``, ``pin``, ``unpin`` or ``after`` (the state
            after the step, when the step cannot be taken apart).
        text: what happens, in a sentence.
        rule: the rule that decides it ("" on a target's side: a target cites none).
        state: the dump at this moment (R-DUMP-1, plus ``"taken"``: ids off the free list
            not yet in the tree).
        blocks: the block ids to point at, in the tree and the pool.
        walked: the keys the walk has gone through so far (walk phases).
        root: the key of the namespace root to point at (the walk's start), if any.
    """

    kind: str
    text: str
    rule: str
    state: Dump
    blocks: list[int] = field(default_factory=list)
    walked: list[int] = field(default_factory=list)
    root: int | None = None


#: The rules each kind of phase carries out (the rest of a step's rules are its whole).
PHASE_RULES: dict[str, tuple[str, ...]] = {
    "walk": ("R-MATCH-1", "R-NS-2", "R-INS-2", "R-INS-3"),
    "reclaiming": ("R-EPOCH-2",),
    "evicting": ("R-EVICT-1", "R-EVICT-2", "R-EVICT-3", "R-EVICT-4", "R-INS-5", "R-PIN-3",
              "R-EPOCH-1", "R-POL-1", "R-POL-2", "R-POL-3", "R-POL-4", "R-POL-5", "R-POL-6"),
    "merge": ("R-DUMP-2",),
    "namespace": ("R-NS-3",),
    "split": ("R-SPLIT-1", "R-SPLIT-2"),
    "allocation": ("R-ALLOC-2",),
    "hang": ("R-INS-4", "R-NS-1"),
    "stamp": ("R-LRU-1", "R-LRU-3"),
    "pin": ("R-PIN-1", "R-PIN-2"),
    "unpin": ("R-PIN-2", "R-PIN-4"),
}  # fmt: skip


@dataclass
class _Block:
    """One cached block of the working state."""

    key: int
    parent: int
    namespace: str | None
    tokens: tuple[int, ...]
    block: int
    pin: int | None
    stamp: int | None
    fields: dict[str, int | None]
    start: bool  # starts an edge even below a block with no other child (not merged yet)


#: The dump fields the phases move; the rest are the dump's own.
_MOVING = frozenset({"clock", "free", "quarantine", "taken", "namespaces"})


class _Mismatch(Exception):
    """The answer and the dumps cannot be taken apart into phases."""


class _State:
    """A tree state that phases change one move at a time, and write as a dump."""

    def __init__(self, before: DumpIndex, after: DumpIndex) -> None:
        dump = before.dump
        # The dump's own fields (its pool size, its policy, ...) are the ones after it.
        self.template = {name: value for name, value in after.dump.items() if name not in _MOVING}
        self.clock: Any = dump.get("clock")
        self.free: list[int] = sorted(dump.get("free", []))
        self.quarantine: list[int] = list(dump.get("quarantine", []))
        self.taken: list[int] = []
        self.roots: dict[str | None, int] = dict(before.roots)
        self.children: dict[int, list[int]] = {root: [] for root in self.roots.values()}
        self.blocks: dict[int, _Block] = {}
        both = [*before.blocks.values(), *after.blocks.values()]
        self.pins = any(block.pin is not None for block in both)
        self.stamps = any(block.stamp is not None for block in both)
        self.fields = sorted({name for block in both for name in block.fields})
        size = before.block_size
        # Each parent's dump edges, reused while nothing below it changed (``touch``): a
        # phase's dump is rebuilt only along the paths its moves changed.
        self._edges_of: dict[int, list[dict[str, Any]]] = {}
        self._dirty: set[int] = set()
        self._spaces: list[dict[str, Any]] | None = list(dump["namespaces"])
        for space in dump["namespaces"]:
            self._edges_of[before.roots[space["namespace"]]] = space["children"]
            pending = list(space["children"])
            while pending:
                edge = pending.pop()
                self._edges_of[before.by_id[edge["blocks"][-1]]] = edge["children"]
                for position, block in enumerate(edge["blocks"]):
                    cached = before.blocks[before.by_id[block]]
                    tokens = tuple(edge["tokens"][position * size : (position + 1) * size])
                    self.blocks[cached.key] = _Block(
                        cached.key, cached.parent, cached.namespace, tokens, block, cached.pin,
                        cached.stamp, dict(cached.fields), position == 0,
                    )  # fmt: skip
                    self.children.setdefault(cached.parent, []).append(cached.key)
                    self.children.setdefault(cached.key, [])
                pending.extend(edge["children"])

    def touch(self, key: int) -> None:
        """Block (or root) ``key`` changed: its dump edges and its ancestors' are written
        again at the next :meth:`dump`. O(depth)."""
        self._spaces = None
        while key not in self._dirty:
            self._dirty.add(key)
            block = self.blocks.get(key)
            if block is None:
                break
            key = block.parent

    def key_of(self, block: int) -> int | None:
        """The key of the cached block with id ``block``. O(cached blocks)."""
        return next((key for key, found in self.blocks.items() if found.block == block), None)

    def below(self, key: int) -> list[int]:
        """The keys of the blocks under ``key``, deepest last. O(subtree)."""
        found, pending = [], list(self.children.get(key, []))
        while pending:
            kid = pending.pop()
            found.append(kid)
            pending.extend(self.children.get(kid, []))
        return found

    def remove(self, key: int) -> None:
        """Take a block with no cached child out of the tree. O(fan-out + depth)."""
        self.touch(key)
        block = self.blocks.pop(key)
        self.children[block.parent].remove(key)
        del self.children[key]
        self._edges_of.pop(key, None)

    def walk(self, keys: KeySpace, namespace: Any, tokens: list[int], size: int) -> list[int]:
        """The keys of the cached whole-block prefix of ``tokens``. O(len(tokens))."""
        parent = self.roots.get(namespace)
        path: list[int] = []
        if parent is None:
            return path
        for start in range(0, len(tokens) // size * size, size):
            key = keys.find(parent, tokens[start : start + size])
            if key is None or key not in self.blocks or self.blocks[key].parent != parent:
                break
            path.append(key)
            parent = key
        return path

    def lone_child(self, key: int) -> int | None:
        """The only cached child of block ``key``, when it has exactly one. O(1)."""
        kids = self.children.get(key, [])
        return kids[0] if len(kids) == 1 and key in self.blocks else None

    def dump(self) -> Dump:
        """The state as a dump: edges run on while a block has one cached child that does
        not start an edge of its own (R-DUMP-2, but for a merge not done yet); children by
        their first block's tokens, namespaces None first. O(cached tokens)."""
        found: Dump = dict(self.template)
        found["clock"] = self.clock
        found["free"] = sorted(self.free)
        found["quarantine"] = list(self.quarantine)
        if self.taken:
            found["taken"] = list(self.taken)
        if self._spaces is None:
            self._spaces = [
                {"namespace": name, "children": self._edges(self.roots[name])}
                for name in sorted(self.roots, key=lambda name: (name is not None, name or ""))
            ]
            self._dirty.clear()
        found["namespaces"] = self._spaces
        return found

    def _edges(self, parent: int) -> list[dict[str, Any]]:
        if parent not in self._dirty and parent in self._edges_of:
            return self._edges_of[parent]
        edges = []
        for first in sorted(self.children[parent], key=lambda key: self.blocks[key].tokens):
            run = [self.blocks[first]]
            while True:
                kid = self.lone_child(run[-1].key)
                if kid is None or self.blocks[kid].start:
                    break
                run.append(self.blocks[kid])
            edge: dict[str, Any] = {
                "tokens": [token for block in run for token in block.tokens],
                "blocks": [block.block for block in run],
            }
            if self.pins:
                edge["pins"] = [block.pin for block in run]
            if self.stamps:
                edge["stamps"] = [block.stamp for block in run]
            for name in self.fields:
                edge[name] = [block.fields.get(name) for block in run]
            edge["children"] = self._edges(run[-1].key)
            edges.append(edge)
        self._edges_of[parent] = edges
        return edges


def phases(
    step: dict[str, Any],
    outcome: dict[str, Any],
    before: DumpIndex,
    after: DumpIndex,
    changes: Changes,
    keys: KeySpace,
    *,
    name: str = "",
) -> list[Phase]:
    """The phases of one step on one side (the spec's when ``name`` is empty, else the
    target called ``name``): empty for a step that is one action (a read, a refusal, a
    reset, a release of nothing); else two or more, the last one's state the dump after
    the step (module docstring). O(phases * state size)."""
    if "ok" not in outcome:
        return []  # refused: nothing happened inside it
    answer = outcome["ok"] if isinstance(outcome["ok"], dict) else {}
    found = list(_walk(step, before, keys, name))
    try:
        found += _moves(step, answer, before, after, changes, keys, name)
        if found:
            found[-1] = replace(found[-1], state=after.dump)  # the same state, as the dump
    except _Mismatch:
        who = f"{name}'s" if name else "the"
        found.append(
            Phase("after", f"{who} state after the step, as its dump shows it (the answer "
                  "and the dumps cannot be taken apart into single moves)", "", after.dump)
        )  # fmt: skip
    if len(found) < 2:
        return []
    return found


def _row(step: dict[str, Any]) -> Operation | None:
    """The step's row of the operation table (None for an operation it does not know)."""
    return BY_NAME.get(step.get("op", ""))


def _walk(step: dict[str, Any], before: DumpIndex, keys: KeySpace, name: str) -> Iterator[Phase]:
    """The walk on the state before the step, edge by edge (R-MATCH-1): for an operation
    that looks a prompt up in the live tree and answers with the blocks it used."""
    row = _row(step)
    tokens, namespace, size = step.get("tokens"), step.get("namespace"), before.block_size
    if row is None or row.finds != ON_DEVICE or not isinstance(tokens, list):
        return  # it looks nothing up in the live tree
    state = before.dump
    label = "(default)" if namespace is None else repr(namespace)
    rule = "" if name else ("R-NS-2" if namespace is not None else "R-MATCH-1")
    if namespace in before.roots:
        yield Phase("walk", f"the walk starts at the root of namespace {label}", rule, state,
                    root=before.roots[namespace])  # fmt: skip
    else:
        yield Phase("walk", f"namespace {label} has no root yet: nothing cached there to walk",
                    rule, state)  # fmt: skip
    path = walk(before, keys, namespace, tokens)
    edges: dict[int, list[int]] = {}
    for key in path:
        edges.setdefault(before.blocks[key].edge, []).append(key)
    done: list[int] = []
    rule = "" if name else "R-MATCH-1"
    for first, run in edges.items():
        length = sum(1 for block in before.blocks.values() if block.edge == first)
        done += run
        ids = [before.blocks[key].block for key in run]
        text = f"edge #{id_ranges(ids)}: {len(ids)} of its {length} blocks match"
        if len(ids) < length:
            text += " -- the walk stops inside this edge"
        yield Phase("walk", text, rule, state, ids, list(done))
    wanted = len(tokens) // size
    if len(path) < wanted:
        missing = tokens[len(path) * size : (len(path) + 1) * size]
        text = (
            f"the prompt's {ordinal(len(path) + 1)} block {_tokens(missing)} is not cached "
            f"here: {len(path) * size} tokens match"
        )
    else:
        text = f"all {wanted} whole blocks are cached: {wanted * size} tokens match"
    if len(tokens) % size:
        text += f" ({len(tokens) % size} trailing tokens: a partial block, ignored)"
    ids = [before.blocks[key].block for key in path]
    yield Phase("walk", text, rule, state, ids, list(path))


def _moves(
    step: dict[str, Any],
    answer: dict[str, Any],
    before: DumpIndex,
    after: DumpIndex,
    changes: Changes,
    keys: KeySpace,
    name: str,
) -> list[Phase]:
    """Every phase that changes the state, in the reference's order; the last one's state
    is ``after.dump`` itself.

    Raises:
        _Mismatch: the answer and the dumps cannot be taken apart this way.
    """
    row = _row(step)
    if row is None:
        return []
    state = _State(before, after)
    found: list[Phase] = []
    if changes.reclaimed and row.frees is not None:
        # An operation that makes room reclaims what waits in quarantine first (R-EPOCH-2).
        found.append(_reclaim(state, changes.reclaimed, name))
    victims = answer.get(row.frees) if row.frees is not None else None
    if isinstance(victims, list) and victims:
        protected = (
            frozenset(walk(before, keys, step.get("namespace"), step.get("tokens")))
            if row.fills is not None  # never from the path it caches (R-INS-5)
            else frozenset()
        )
        found += _evictions(state, before, after, victims, protected, name)
    allocated = answer.get(row.allocates) if row.allocates is not None else None
    if isinstance(allocated, list) and allocated:
        found += _attach(state, step, answer, allocated, keys, before.block_size, name)
    if row.ends == ENDS_LEASE:
        found += _pins(state, after, step, name, unpin=True)
    if row.ticks:
        found += _stamps(state, after, name)
    if row.issues == LEASE and step.get("pin"):
        found += _pins(state, after, step, name, lease=answer.get(LEASE))
    if state.dump() != after.dump:
        raise _Mismatch("the phases do not end in the dump after the step")
    return found


def _reclaim(state: _State, reclaimed: list[int], name: str) -> Phase:
    for block in reclaimed:
        if block not in state.quarantine:
            raise _Mismatch(f"#{block} was not quarantined")
        state.quarantine.remove(block)
        state.free.append(block)
    text = (
        f"the readers have all left: the quarantined #{id_ranges(sorted(reclaimed))} go back "
        "to the free list first"
    )
    return Phase("reclaiming", text, "" if name else "R-EPOCH-2", state.dump(), list(reclaimed))


def _evictions(
    state: _State,
    before: DumpIndex,
    after: DumpIndex,
    victims: list[Any],
    protected: frozenset[int],
    name: str,
) -> list[Phase]:
    """One phase per block taken (per node, where a target takes a node's blocks at once),
    each followed by the merge or the namespace it leaves behind."""
    spec = [block.block for _, block in zip(victims, eviction_sequence(before, protected),
                                             strict=False)]  # fmt: skip
    quarantined = set(after.quarantine) - set(before.quarantine)
    found: list[Phase] = []
    remaining = [block for block in victims if isinstance(block, int)]
    if len(remaining) != len(victims):
        raise _Mismatch("a victim is not a block id")
    turn = 0
    while remaining:
        block = remaining.pop(0)
        key = state.key_of(block)
        if key is None:
            raise _Mismatch(f"#{block} is not cached")
        group = [key, *state.below(key)]
        ids = [state.blocks[member].block for member in group]
        if any(other not in remaining for other in ids[1:]):
            raise _Mismatch(f"#{block} was taken while a block below it stayed")
        for other in ids[1:]:
            remaining.remove(other)
        shown = key_text(before, before.blocks[key]) if key in before.blocks else ""
        parent = state.blocks[key].parent
        for member in reversed(group):
            state.remove(member)
        target = "quarantine" if block in quarantined else "the free list"
        for other in ids:
            (state.quarantine if other in quarantined else state.free).append(other)
        where = "quarantine (a reader is inside)" if target == "quarantine" else target
        found.append(_evicted(state, ids, shown, spec, turn, where, name))
        turn += len(ids)
        found += _after_removal(state, parent, name)
    return found


def _evicted(
    state: _State, ids: list[int], shown: str, spec: list[int], turn: int, where: str, name: str
) -> Phase:
    key = f" ({shown})" if shown else ""
    if name:
        taken = f"#{id_ranges(ids)}" if len(ids) > 1 else f"#{ids[0]}"
        text = f"{name} evicts {taken}{key}"
        if len(ids) > 1:
            text += f", a whole node of {len(ids)} blocks at once"
        wanted = spec[turn : turn + len(ids)]
        if wanted and wanted != ids:
            text += f"; the spec would take #{', #'.join(map(str, wanted))} here"
        return Phase("evicting", text + f"; to {where}", "", state.dump(), ids)
    text = f"evict #{ids[0]}{key}: the {ordinal(turn + 1)} in the eviction order; to {where}"
    return Phase("evicting", text, "R-EVICT-2" if turn == 0 else "R-EVICT-1", state.dump(), ids)


def _after_removal(state: _State, parent: int, name: str) -> list[Phase]:
    """The merge or the namespace a removal under ``parent`` leaves behind."""
    lone = state.lone_child(parent)
    if lone is not None and state.blocks[lone].start:
        state.blocks[lone].start = False
        state.touch(lone)
        above = _edge_ids(state, parent, upward=True)
        below = _edge_ids(state, lone)
        text = (
            f"#{id_ranges(above)} has one cached child left: the dump writes #{id_ranges(above)} "
            f"and #{id_ranges(below)} as one chain now"
        )
        return [Phase("merge", text, "" if name else "R-DUMP-2", state.dump(), above + below)]
    for space, root in list(state.roots.items()):
        if root == parent and not state.children[root]:
            del state.roots[space]
            state.touch(root)
            del state.children[root]
            label = "(default)" if space is None else repr(space)
            text = f"namespace {label} holds no block now: its root goes"
            return [Phase("namespace", text, "" if name else "R-NS-3", state.dump())]
    return []


def _edge_ids(state: _State, key: int, *, upward: bool = False) -> list[int]:
    """The ids of the dump edge holding block ``key`` from ``key`` down (``upward``: the
    edge above, ending at ``key``). O(edge length)."""
    if upward:
        run = [key]
        while True:
            block = state.blocks[run[0]]
            if block.start or block.parent not in state.blocks:
                break
            if state.lone_child(block.parent) != run[0]:
                break
            run.insert(0, block.parent)
        return [state.blocks[member].block for member in run]
    run = [key]
    while True:
        kid = state.lone_child(run[-1])
        if kid is None or state.blocks[kid].start:
            break
        run.append(kid)
    return [state.blocks[member].block for member in run]


def _attach(
    state: _State,
    step: dict[str, Any],
    answer: dict[str, Any],
    allocated: list[Any],
    keys: KeySpace,
    size: int,
    name: str,
) -> list[Phase]:
    """The split where the path stops inside an edge, each id taken off the free list,
    and the new edge hung below the path (R-SPLIT-1, R-ALLOC-2, R-INS-4)."""
    tokens, namespace = step.get("tokens"), step.get("namespace")
    if not isinstance(tokens, list):
        raise _Mismatch("an insert without tokens")
    path = state.walk(keys, namespace, tokens, size)
    if len(path) != answer.get("reused"):
        raise _Mismatch("the walk after the evictions is not the reused prefix")
    found: list[Phase] = []
    end = path[-1] if path else None
    lone = state.lone_child(end) if end is not None else None
    if lone is not None and not state.blocks[lone].start:
        state.blocks[lone].start = True
        state.touch(lone)
        upper = _edge_ids(state, end, upward=True) if end is not None else []
        lower = _edge_ids(state, lone)
        text = (
            f"the edge splits at the block boundary: #{id_ranges(upper)} stays above, "
            f"#{id_ranges(lower)} hangs below with its ids, pins and stamps"
        )
        found.append(Phase("split", text, "" if name else "R-SPLIT-1", state.dump(),
                           upper + lower))  # fmt: skip
    free = sorted(state.free)
    for turn, block in enumerate(allocated):
        if block not in state.free:
            raise _Mismatch(f"#{block} is not free")
        state.free.remove(block)
        state.taken.append(block)
        if name:
            text = f"{name} allocates #{block}"
            if turn < len(free) and free[turn] != block:
                text += f"; the spec would take #{free[turn]} (the smallest free)"
        else:
            text = f"allocate #{block}: the smallest free id"
        found.append(Phase("allocation", text, "" if name else "R-ALLOC-2", state.dump(), [block]))
    blocks = answer.get("blocks")
    hung = blocks[len(path) :] if isinstance(blocks, list) else []
    if sorted(hung) != sorted(allocated) or len(path) + len(hung) != len(tokens) // size:
        raise _Mismatch("the answer's path does not end in the allocated blocks")
    found.append(_hang(state, namespace, tokens, path, hung, keys, size, name))
    return found


def _hang(
    state: _State,
    namespace: Any,
    tokens: list[int],
    path: list[int],
    hung: list[int],
    keys: KeySpace,
    size: int,
    name: str,
) -> Phase:
    text = ""
    if namespace not in state.roots:
        state.roots[namespace] = keys.root(namespace)
        state.children[state.roots[namespace]] = []
        state.touch(state.roots[namespace])
        label = "(default)" if namespace is None else repr(namespace)
        text = f"; namespace {label} gets its root"
    parent = path[-1] if path else state.roots[namespace]
    grows = bool(path) and not state.children[parent]
    for offset, block in enumerate(hung):
        start = (len(path) + offset) * size
        chunk = tuple(tokens[start : start + size])
        key = keys.block(parent, chunk)
        state.blocks[key] = _Block(
            key, parent, namespace, chunk, block, 0 if state.pins else None, None,
            dict.fromkeys(state.fields), offset == 0 and not grows,
        )  # fmt: skip
        state.children[parent].append(key)
        state.children[key] = []
        state.touch(key)
        state.taken.remove(block)
        parent = key
    if grows:
        above = _edge_ids(state, path[-1], upward=True)
        where = f"extend the leaf edge #{id_ranges(above)}: it grows in place"
    elif path:
        where = f"hang below #{state.blocks[path[-1]].block} as one new edge"
    else:
        where = "hang below the root as one new edge"
    text = f"the new blocks #{id_ranges(hung)} {where}, root to leaf, not stamped yet{text}"
    return Phase("hang", text, "" if name else "R-INS-4", state.dump(), list(hung))


def _same(state: _State, after: DumpIndex) -> Iterator[tuple[_Block, Any]]:
    """Each block of ``state`` with its cached twin in ``after`` (same path, same id)."""
    for key, block in state.blocks.items():
        there = after.blocks.get(key)
        if there is not None and there.block == block.block:
            yield block, there


def _stamps(state: _State, after: DumpIndex, name: str) -> list[Phase]:
    """The clock moves; the blocks used take their new stamps and policy fields."""
    moved = state.clock != after.dump.get("clock")
    state.clock = after.dump.get("clock")
    stamped = []
    for block, there in _same(state, after):
        if block.stamp != there.stamp:
            stamped.append(block.block)
        if block.stamp != there.stamp or block.fields != there.fields:
            block.stamp = there.stamp
            block.fields = dict(there.fields)
            state.touch(block.key)
    if not moved and not stamped:
        return []
    clock = state.clock
    text = f"the clock moves to {clock}" if moved else f"the clock stays at {clock}"
    if stamped:
        text += f"; the blocks used are stamped t={clock}: #{id_ranges(sorted(stamped))}"
    rule = "" if name else "R-LRU-1"
    return [Phase("stamp", text, rule, state.dump(), sorted(stamped))]


def _pins(
    state: _State,
    after: DumpIndex,
    step: dict[str, Any],
    name: str,
    *,
    unpin: bool = False,
    lease: Any = None,
) -> list[Phase]:
    """The pins the step's lease takes (or, ``unpin``, gives back)."""
    changed = []
    for block, there in _same(state, after):
        lowered = (there.pin or 0) < (block.pin or 0)
        if block.pin != there.pin and lowered == unpin:
            changed.append(block.block)
            block.pin = there.pin
            state.touch(block.key)
    if not changed:
        return []
    ids = f"#{id_ranges(sorted(changed))}"
    if unpin:
        text = f"lease {step.get('lease')} gives back its pins: {ids}"
        return [Phase("unpin", text, "" if name else "R-PIN-2", state.dump(), sorted(changed))]
    text = f"lease {lease} pins exactly {ids}"
    return [Phase("pin", text, "" if name else "R-PIN-1", state.dump(), sorted(changed))]


def _tokens(tokens: list[Any]) -> str:
    return "[" + " ".join(str(token) for token in tokens) + "]"
