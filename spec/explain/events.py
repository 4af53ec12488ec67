"""KV events in ``explain``: the batches each side emitted during a step (R-EVENT-*).

When a trace's reset names an events scheme (``"events": {"scheme": ..., "seed": ...}``,
or ``explain --events`` adds one), every step of the recording carries the KV event
batches each implementation emitted during it, read with the kit's own ``events``
operation through the :class:`~kachedb_radix.spec.conform.candidate.Candidate` interface.

How they are read. Beside a target the kit's lockstep reads both sides' events itself
after every step (it compares them, feeds the target's to its router index and checks
that index against the target's dump), and a read drains them. So ``explain`` does not
read again: a :class:`Tap` sits on each side's ``events`` method for the length of the
recording and keeps what each call answered during the current step. When the lockstep
did not read at a step (it stops at the first finding of a step, before its reads; a
``batch`` step defers them), ``explain`` reads itself and *holds* the payloads: the
lockstep's next read gets them first, so the kit still sees the whole stream, in order,
and each batch is shown on the step that emitted it.

What is shown. Each batch decoded as vLLM's ``KVEventBatch`` into plain data
(:func:`batches_of`, the kit's own normalisation at the strict modes, the timestamp
kept); a payload that vLLM's schema refuses is read as a router reads it, with the
reason. Whether two sides' batches differ is decided as the kit compares them
(:func:`compare`: the target's profile, the levels), and where the events correspond one
to one the differing ones are marked. :func:`event_lines` names every hash by the block
of the side's own dump that carries it, with its token positions and node on the drawn
tree, so the page can light the blocks up.

Cost: per step, decoding the step's payloads; naming hashes hashes the side's dump
(each (parent, tokens) pair once per recording, memoised in :class:`Names`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from itertools import zip_longest
from typing import Any

from kachedb_radix.reference.events import BlockHasher

from ..conform import events as kit_events
from ..conform.candidate import CandidateError
from ..conform.levels import EVENTS, EVICTION
from ..conform.lockstep import first_difference
from ..conform.operations import OPERATIONS, STREAM
from ..conform.profile import STRICT, Profile
from ..conform.steps import Outcome, Step, resets
from .model import DumpIndex

#: The reset's argument naming the events scheme (the ``events`` level's, R-EVENT-2).
SCHEME: str = next(
    argument.name for row in OPERATIONS if row.resets for argument in row.arguments
    if argument.level == EVENTS
)  # fmt: skip

#: Hex digits of a hash shown (the rest is in the page's data, and in the tooltip).
SHORT = 8

#: Batches: each ``{"ts": float, "events": [{"stored": {...}} | {"removed": {...}} |
#: {"cleared": {}}], "note": str (optional)}``.
Batch = dict[str, Any]


def scheme_of(reset: Step, levels: frozenset[str]) -> dict[str, Any] | None:
    """The events scheme a reset names, when the ``events`` level is compared; else None
    (events off for the trace it starts). O(1)."""
    spec = reset.get(SCHEME)
    return dict(spec) if isinstance(spec, dict) and EVENTS in levels else None


def with_events(steps: list[Step], spec: dict[str, str], *, replace: bool = False) -> list[Step]:
    """``steps`` with every reset naming the events scheme ``spec`` (as ``conform
    --events`` resets its targets), and ``events`` added to a reset's explicit
    ``levels``. A reset that names a scheme of its own keeps it, unless ``replace``.
    O(steps).
    """
    found: list[Step] = []
    for step in steps:
        if resets(step):
            step = dict(step)
            if replace or not isinstance(step.get(SCHEME), dict):
                step[SCHEME] = dict(spec)
            levels = step.get("levels")
            if isinstance(levels, list) and EVENTS not in levels:
                step["levels"] = [*levels, EVENTS]
        found.append(step)
    return found


def without_events(steps: list[Step]) -> list[Step]:
    """``steps`` with no reset naming an events scheme. O(steps)."""
    return [
        {key: value for key, value in step.items() if key != SCHEME} if resets(step) else step
        for step in steps
    ]


# ---------------------------------------------------------------------------- reading


class Tap:
    """One side's ``events`` calls during the current step.

    Args:
        read: the side's own ``events`` method.

    Attributes:
        answers: what each call answered during the current step (its own batches,
            held ones left out), oldest first.
    """

    def __init__(self, read: Callable[[], Any]) -> None:
        self._read = read
        self._held: list[str] = []
        self.answers: list[Outcome] = []
        self.delivered = 0  # held payloads the lockstep got during the current step

    @property
    def holding(self) -> bool:
        """Whether payloads wait for the lockstep's next read."""
        return bool(self._held)

    def call(self) -> Any:
        """The ``events`` call the lockstep makes: the side's answer, the held payloads
        first. Raises what the side raises (a refusal, a failure)."""
        try:
            answer = self._read()
        except CandidateError as exc:
            self.answers.append({"error": exc.kind})
            raise
        self.answers.append({"ok": answer})
        if self._held and isinstance(answer, dict) and isinstance(answer.get("batches"), list):
            answer = {**answer, "batches": [*self._held, *answer["batches"]]}
            self.delivered += len(self._held)
        self._held = []
        return answer

    def read_now(self, hold: bool) -> None:
        """Read the side's events for the step (the lockstep did not); with ``hold`` the
        payloads go to the lockstep's next read too. Raises what the side raises."""
        answer = self._read()
        self.answers.append({"ok": answer})
        batches = answer.get("batches") if isinstance(answer, dict) else None
        if hold and isinstance(batches, list):
            self._held.extend(batches)

    def start(self, *, reset: bool = False) -> None:
        """A new step (a reset also forgets held payloads: the stream starts again)."""
        self.answers = []
        self.delivered = 0
        if reset:
            self._held = []


@contextmanager
def tapped(*candidates: Any) -> Iterator[list[Tap]]:
    """A :class:`Tap` on each candidate's ``events`` for the block's duration: an
    instance attribute that shadows the method (no wrapper object, so the lockstep sees
    the same candidate and the oracle stays the kit's oracle), removed afterwards.
    O(1)."""
    taps: list[Tap] = []
    for candidate in candidates:
        tap = Tap(getattr(candidate, STREAM.name))
        setattr(candidate, STREAM.name, tap.call)  # an instance attribute on purpose
        taps.append(tap)
    try:
        yield taps
    finally:
        for candidate in candidates:
            if STREAM.name in vars(candidate):
                delattr(candidate, STREAM.name)


def payloads(answers: list[Outcome]) -> Outcome:
    """Several ``events`` answers as one: their batches in order, or the first refusal or
    malformed answer as it is. O(batches)."""
    batches: list[str] = []
    for outcome in answers:
        answer = outcome.get("ok")
        found = answer.get("batches") if isinstance(answer, dict) else None
        if not isinstance(found, list):
            return outcome
        batches.extend(found)
    return {"ok": {"batches": batches}}


def batches_of(outcome: Outcome) -> list[Batch]:
    """An ``events`` outcome as plain batches to show: each payload decoded as vLLM's
    ``KVEventBatch`` (the kit's normalisation at the strict modes, with ``ts``); one
    vLLM's schema refuses is read as a router reads it, its ``note`` saying why; an
    answer that is not one is a batch with only a ``note``. O(size)."""
    answer = outcome.get("ok")
    if "error" in outcome:
        return [{"events": [], "note": f"the events call was refused: {outcome['error']}"}]
    items = answer.get("batches") if isinstance(answer, dict) else None
    if not isinstance(items, list) or kit_events.payloads_of(answer) is None:
        return [{"events": [], "note": f"not an events answer: {str(answer)[:80]}"}]
    found: list[Batch] = []
    for item in items:
        one = {"ok": {"batches": [item]}}
        (batch,) = _normalised(one, STRICT, strict=True)["ok"]["batches"]
        if "undecodable" in batch:
            (read,) = _normalised(one, STRICT, strict=True, lenient=True)["ok"]["batches"]
            note = f"not vLLM's KVEventBatch ({batch['undecodable']}): read as a router reads it"
            batch = {**read, "note": note} if "undecodable" not in read else {
                "events": [], "note": f"undecodable: {batch['undecodable']}"
            }
        found.append(batch)
    return found


def _normalised(
    outcome: Outcome,
    profile: Profile,
    *,
    strict: bool = False,
    lenient: bool = False,
    with_ts: bool = True,
    after_reset: bool = False,
) -> Outcome:
    modes = STRICT.modes if strict else profile.modes
    return kit_events.normalise(
        outcome, modes, with_ts=with_ts, lenient=lenient, after_reset=after_reset
    )


# ---------------------------------------------------------------------------- comparing


@dataclass
class Comparison:
    """How two sides' events of one step compare, as the kit compares them.

    Attributes:
        path: where they first differ (``events.ok.batches[0].events[1].stored.parent``),
            None when they agree.
        marks: per side (the reference's, the target's), the (batch, event) positions of
            its events that the other side's do not match (event -1: the batch's ``ts``);
            empty when the profile compares them in a form that does not correspond event
            for event (stores per block, removals as a set).
    """

    path: str | None = None
    marks: tuple[set[tuple[int, int]], set[tuple[int, int]]] = field(
        default_factory=lambda: (set(), set())
    )


def compare(
    reference: Outcome,
    theirs: Outcome,
    profile: Profile,
    levels: frozenset[str],
    *,
    after_reset: bool,
) -> Comparison:
    """The two sides' events of one step compared as the kit compares them (the profile's
    modes, ``ts`` only at the eviction level with exact recency, R-EVENT-6 waived: read as
    a router reads them). Batches are paired in order; within a pair the events are
    aligned as a diff aligns lines, so one missing event marks that event alone.
    O(size + events²) (the alignment).
    """
    options = {
        "lenient": "R-EVENT-6" in profile.waived,
        "with_ts": EVICTION in levels and profile.compares_recency,
        "after_reset": after_reset,
    }
    mine = _normalised(reference, profile, **options)
    other = _normalised(theirs, profile, **options)
    path = first_difference(mine, other, "events")
    found = Comparison(path)
    if path is None:
        return found
    modes = profile.modes
    one_to_one = (
        modes["store_events"] == "per_run"
        and modes["removal_order"] == "eviction_order"  # per_block: events split
        and not (after_reset and modes["reset_events"] == "cleared")
    )
    left = (mine.get("ok") or {}).get("batches")
    right = (other.get("ok") or {}).get("batches")
    if not (one_to_one and isinstance(left, list) and isinstance(right, list)):
        return found
    ours, theirs_marks = found.marks
    for number, (a, b) in enumerate(zip_longest(left, right)):
        if a is None or b is None:
            marked = ours if b is None else theirs_marks
            marked.add((number, -1))
            marked.update((number, index) for index in range(len((a or b).get("events", []))))
            continue
        if a.get("ts") != b.get("ts"):
            ours.add((number, -1))
            theirs_marks.add((number, -1))
        keys = [[json.dumps(event, sort_keys=True) for event in batch.get("events", [])]
                for batch in (a, b)]  # fmt: skip
        matcher = SequenceMatcher(a=keys[0], b=keys[1], autojunk=False)
        for kind, i1, i2, j1, j2 in matcher.get_opcodes():
            if kind != "equal":
                ours.update((number, index) for index in range(i1, i2))
                theirs_marks.update((number, index) for index in range(j1, j2))
    return found


# ---------------------------------------------------------------------------- naming


class Names:
    """A side's blocks by the hash its events name them with, memoised across steps.

    Args:
        spec: the scheme the reset names (``{"scheme": ..., "seed": ...}``).
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        self.hasher: BlockHasher = kit_events.hasher_of(spec)
        self._memo: kit_events.HashMemo = {}

    def of(self, index: DumpIndex) -> dict[Any, int]:
        """Every cached block of ``index`` by its external hash as events carry it (an
        int, or the digest in hex). O(cached blocks), each new (parent, tokens) hashed
        once."""
        found: dict[Any, int] = {}
        for _, block, chained in kit_events.dump_hashes(index.dump, self.hasher, self._memo):
            external = self.hasher.external(chained)
            found[external.hex() if isinstance(external, bytes) else external] = block
        return found


def short(value: Any) -> str:
    """A hash as :data:`SHORT` hex digits: an int's 64 bits (a signed one as its two's
    complement, as SGLang sends them), a digest's first digits. O(1)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return format(value & (2**64 - 1), "016x")[:SHORT]
    return str(value)[:SHORT]


@dataclass
class Place:
    """Where one side's blocks are, to name its events' hashes.

    Attributes:
        after_hashes: hash -> block id after the step (stored blocks are there).
        before_hashes: hash -> block id before the step (removed blocks were there).
        after: the dump after the step.
        before: the dump before it.
        edges: block id -> the drawn node holding it after the step.
        ghosts: block id -> the drawn ghost of a block the step removed.
        run: an insert's blocks, root to leaf (its answer's ``blocks``): the blocks its
            store names are the last of them (R-EVENT-3), so a hash no block carries can
            still be put beside the block it should name.
    """

    after_hashes: dict[Any, int]
    before_hashes: dict[Any, int]
    after: DumpIndex
    before: DumpIndex
    edges: dict[int, str]
    ghosts: dict[int, str]
    run: list[int] = field(default_factory=list)


def event_lines(batches: list[Batch], place: Place, marks: set[tuple[int, int]]) -> list[Batch]:
    """The batches as the page and the text show them: per batch its ``ts``, a note, and
    each event as one line (``t`` its text, ``k`` its kind, ``b`` the block ids it names
    on this side, ``n`` the drawn nodes holding them, ``x`` when it differs from the
    other side's). O(events)."""
    shown: list[Batch] = []
    for number, batch in enumerate(batches):
        lines = []
        events = batch.get("events", [])
        # The stores of an insert's batch name the last blocks of its path, in order.
        stored = sum(len(event["stored"]["hashes"]) for event in events if "stored" in event)
        tail = place.run[len(place.run) - stored :] if 0 < stored <= len(place.run) else []
        for index, event in enumerate(events):
            if "stored" in event:
                count = len(event["stored"]["hashes"])
                line = _stored(event["stored"], place, tail[:count])
                tail = tail[count:]
            else:
                line = _line(event, place)
            line["x"] = (number, index) in marks
            lines.append(line)
        row: Batch = {"ts": batch.get("ts"), "lines": lines, "x": (number, -1) in marks}
        if batch.get("note"):
            row["note"] = batch["note"]
        shown.append(row)
    return shown


def _line(event: dict[str, Any], place: Place) -> dict[str, Any]:
    if "removed" in event:
        removed = event["removed"]
        blocks, parts = [], []
        for value in removed["hashes"]:
            block = place.before_hashes.get(value)
            if block is None:
                block = place.after_hashes.get(value)
            parts.append(_block_text(block, value, (place.before, place.after)))
            if block is not None:
                blocks.append(block)
        text = "removed, in this order: " + ", ".join(parts) + f" · {removed['medium']}"
        text += _namespace(blocks, (place.before, place.after))
        nodes = [place.ghosts.get(block) or place.edges.get(block) for block in blocks]
        return {"t": text, "k": "removed", "b": blocks, "n": _present(nodes)}
    return {"t": "all blocks cleared (AllBlocksCleared)", "k": "cleared", "b": [], "n": []}


def _stored(stored: dict[str, Any], place: Place, run: list[int]) -> dict[str, Any]:
    """A store's line; ``run`` the insert's blocks it names, in order ([]: unknown)."""
    size = stored.get("block_size") or place.after.block_size
    tokens = stored.get("tokens")
    blocks, parts = [], []
    hashes = stored["hashes"]
    run = run if len(run) == len(hashes) else []
    own = {block: value for value, block in place.after_hashes.items()}
    for position, value in enumerate(hashes):
        block = place.after_hashes.get(value)
        chunk = None if tokens is None else tokens[position * size : (position + 1) * size]
        if run and run[position] in own and block != run[position]:
            # The insert's block at this place is named by another hash: say whose.
            meant = run[position]
            text = _block_text(meant, value, (place.after, place.before), chunk)
            whose = "" if block is None else f", the hash of #{block}"
            parts.append(text.replace(f"#{meant} {short(value)}", f"#{meant}≠ {short(value)}", 1)
                         + f" [#{meant}'s path hashes to {short(own[meant])}{whose}]")  # fmt: skip
            blocks.append(meant)
            continue
        parts.append(_block_text(block, value, (place.after, place.before), chunk))
        if block is not None:
            blocks.append(block)
    parent = stored["parent"]
    if parent is None:
        above = "parent: none (a path's first block)"
    else:
        block = place.after_hashes.get(parent, place.before_hashes.get(parent))
        named = f"#{block}" if block is not None else "? (no block of this tree)"
        above = f"parent {named} {short(parent)}"
    text = "stored " + ", ".join(parts) + f" · {above} · {stored['medium']}"
    text += _namespace(blocks, (place.after, place.before))
    extra = stored.get("extra_keys")
    if isinstance(extra, list) and any(keys is not None for keys in extra):
        keyed = [
            f"{_name(place.after_hashes.get(value))} {tuple(keys)!r}"
            for value, keys in zip(stored["hashes"], extra, strict=False)
            if keys is not None
        ]
        text += " · extra keys (the cache salt): " + ", ".join(keyed)
    for name in ("lora_id", "lora_name"):
        if stored.get(name) is not None:
            text += f" · {name} {stored[name]!r}"
    nodes = [place.edges.get(block) for block in blocks]
    return {"t": text, "k": "stored", "b": blocks, "n": _present(nodes)}


def _block_text(
    block: int | None,
    value: Any,
    indexes: tuple[DumpIndex, DumpIndex],
    tokens: list[int] | None = None,
) -> str:
    """``#4 1a2b3c4d (tokens 8-11: 9 10 11 12)``: the block, its hash, its token positions
    (and ids) in ``indexes`` (the first that holds it); ``#?`` for a hash no block of
    the tree carries."""
    if block is None:
        return f"#? {short(value)} (no cached block has this hash)"
    found = next((index for index in indexes if block in index.by_id), None)
    if found is None:
        return f"#{block} {short(value)}"
    cached = found.blocks[found.by_id[block]]
    start = _depth(found, cached.key) * found.block_size
    size = found.block_size
    span = f"token {start}" if size == 1 else f"tokens {start}-{start + size - 1}"
    if tokens:
        span += ": " + " ".join(map(str, tokens[:8])) + (" …" if len(tokens) > 8 else "")
    return f"#{block} {short(value)} ({span})"


def _namespace(blocks: list[int], indexes: tuple[DumpIndex, DumpIndex]) -> str:
    """`` · namespace 'a'`` when the event's blocks are in a named namespace, else ""."""
    for block in blocks[:1]:
        for index in indexes:
            if block in index.by_id:
                name = index.blocks[index.by_id[block]].namespace
                return "" if name is None else f" · namespace {name!r}"
    return ""


def _depth(index: DumpIndex, key: int) -> int:
    depth = 0
    while (key := index.blocks[key].parent) in index.blocks:
        depth += 1
    return depth


def _name(block: int | None) -> str:
    return "#?" if block is None else f"#{block}"


def _present(nodes: list[str | None]) -> list[str]:
    return list(dict.fromkeys(node for node in nodes if node is not None))
