"""Operation generators shared by the Hypothesis machine and the vector writer.

Inputs are drawn so that the interesting cases happen constantly: tiny token
alphabets, new sequences that mostly extend or cut a previous one at any position
(so they share prefixes and diverge inside edges and inside blocks), block sizes of
1-4 and pools of 2-12 blocks (so inserts evict). Bad inputs cover every error kind
the plain-data protocol can carry, placed anywhere in the sequence, including in a
trailing partial block (R-TOK-5).

Values come from a :class:`Chooser`, so the same code drives Hypothesis (which then
shrinks failures) and a seeded ``random.Random`` (for the golden vectors).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from hypothesis import strategies as st

from .levels import EVICTION, LEVELS, PINNING, POLICIES
from .levels import NAMESPACES as NAMESPACES_LEVEL
from .operations import ENDS_READER, LEASE, OPERATIONS, Draw, Operation

T = TypeVar("T")

#: Token values: two small ids and the largest valid one (R-TOK-1), to catch
#: implementations that store tokens signed or in fewer bits.
ALPHABET: tuple[int, ...] = (0, 1, 2, 2**32 - 1)

#: Namespaces used at the ``namespaces`` level: the default, the empty name (which
#: is not the default, R-NS-1) and two names.
NAMESPACES: tuple[str | None, ...] = (None, "", "a", "b")

#: Token inputs that are not sequences at all (-> token_type, R-TOK-2).
NON_SEQUENCES: tuple[Any, ...] = ("abc", 7, None, 1.5, True, {"tokens": [1]})

#: Elements that spoil an otherwise valid sequence, and the kind each raises.
BAD_ELEMENTS: tuple[Any, ...] = (-1, 2**32, 2**64, 1.5, 1.0, "7", True, None, [1])

#: The rule each of :data:`BAD_ELEMENTS` probes (a waived rule's probes are not drawn).
BAD_ELEMENT_RULES: tuple[str, ...] = ("R-TOK-3",) * 3 + ("R-TOK-2",) * 6

#: Namespaces that are neither None nor a str (-> invalid_argument, R-NS-4).
BAD_NAMESPACES: tuple[Any, ...] = (0, 1.5, True, ["a"], {"a": 1})

#: Counts ``evict`` rejects (-> invalid_argument, R-ERR-1).
BAD_COUNTS: tuple[Any, ...] = (-1, 1.5, "2", True, None, [1])

#: Longest generated sequence, in whole blocks.
MAX_BLOCKS = 8

#: Sequences remembered to build new ones from.
HISTORY = 8

#: What :meth:`Inputs.bad_tokens` returns when every probe left is avoided.
UNUSABLE: Any = object()

#: Longest sequence a bulk fill inserts, in whole blocks.
MAX_DEEP_BLOCKS = 64

#: Sequences a run remembers it filled, for churn to come back to (oldest forgotten).
CACHED = 1024


class Chooser(Protocol):
    """A source of choices: Hypothesis draws or a seeded random generator."""

    def integer(self, low: int, high: int) -> int:
        """An int in ``[low, high]``; shrinks towards ``low``."""
        ...

    def choice(self, options: Sequence[T]) -> T:
        """One of ``options``; shrinks towards the first."""
        ...


class DataChooser:
    """Choices drawn from a Hypothesis ``st.data()`` object (so failures shrink)."""

    def __init__(self, data: st.DataObject) -> None:
        self._data = data

    @property
    def data(self) -> st.DataObject:
        """The Hypothesis data object choices come from."""
        return self._data

    def integer(self, low: int, high: int) -> int:
        """See :class:`Chooser`. O(1)."""
        return self._data.draw(st.integers(low, high))

    def choice(self, options: Sequence[T]) -> T:
        """See :class:`Chooser`. O(1)."""
        return self._data.draw(st.sampled_from(options))


class RandomChooser:
    """Choices from ``random.Random(seed)``: the same seed gives the same choices."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def integer(self, low: int, high: int) -> int:
        """See :class:`Chooser`. O(1)."""
        return self._random.randrange(low, high + 1)

    def choice(self, options: Sequence[T]) -> T:
        """See :class:`Chooser`. O(1)."""
        return options[self._random.randrange(len(options))]


class Inputs:
    """Argument generators for one tree of block size ``block_size``.

    Keeps the recent sequences so new ones can share their prefixes. Sequences are cut
    at ``max_blocks`` whole blocks (plus a partial one); the search raises it so that
    matches can follow the long paths a fill builds.
    """

    def __init__(
        self, block_size: int, max_blocks: int = MAX_BLOCKS, token_limit: int = 2**32
    ) -> None:
        self.block_size = block_size
        self.max_blocks = max_blocks
        self.history: list[list[int]] = []
        self.cached: list[tuple[list[int], str | None]] = []  # filled, for churn
        self.heads: list[list[int]] = []  # shared prefixes of a sibling fill
        # Valid ids stay below a candidate's declared limit (a profile's token_limit);
        # the limit itself is the out-of-range probe, as 2**32 is for the spec's.
        self.alphabet = (*ALPHABET[:-1], token_limit - 1)
        self.bad_elements = tuple(
            token_limit if element == 2**32 else element for element in BAD_ELEMENTS
        )

    def tokens(self, chooser: Chooser) -> list[int]:
        """A valid token list, often a cut of a previous one plus a few new tokens."""
        size = self.block_size
        prefix: list[int] = []
        if self.history and chooser.integer(0, 3) > 0:
            base = chooser.choice(self.history)
            prefix = base[: chooser.integer(0, len(base))]
        # A cut with nothing added (often exactly a cached path) or a few new tokens.
        extra = chooser.integer(0, 3 * size) if not prefix or chooser.integer(0, 1) else 0
        tail = [chooser.choice(self.alphabet) for _ in range(extra)]
        tokens = (prefix + tail)[: self.max_blocks * size + size - 1]
        self.remember(tokens)
        return tokens

    def remember(self, tokens: list[int]) -> None:
        """Add ``tokens`` to the sequences new ones are built from. O(HISTORY)."""
        if len(tokens) >= self.block_size and tokens not in self.history:
            self.history = [*self.history[-(HISTORY - 1) :], tokens]

    def bad_tokens(self, chooser: Chooser, avoid: frozenset[str] = frozenset()) -> Any:
        """An invalid token input: not a sequence, or one or two bad elements.

        Probes of the rules in ``avoid`` (waived by the candidate) are not drawn;
        :data:`UNUSABLE` when nothing is left to draw (None is a bad input itself).
        """
        elements = tuple(
            element
            for element, rule in zip(self.bad_elements, BAD_ELEMENT_RULES, strict=True)
            if rule not in avoid
        )
        shape = chooser.integer(0, 3)
        if ("R-TOK-2" in avoid and shape == 0) or not elements:
            return UNUSABLE
        if shape == 0:
            return chooser.choice(NON_SEQUENCES)
        good: list[Any] = list(self.tokens(chooser))
        at = chooser.integer(0, len(good))
        spoilt = [*good[:at], chooser.choice(elements), *good[at:]]
        if shape == 3 and "R-TOK-5" not in avoid:
            # a second bad element later: the first one decides (R-TOK-5)
            later = chooser.integer(at + 1, len(spoilt))
            spoilt.insert(later, chooser.choice(elements))
        return spoilt

    def sibling_tokens(self, chooser: Chooser) -> list[int]:
        """A short sequence for a sibling fill: one of a few shared heads (1-2 blocks,
        drawn once per fill by :meth:`new_heads`) and 1-2 new blocks of its own, so a
        fill hangs hundreds of short leaves under a few nodes (a system prompt and its
        many users)."""
        if not self.heads:
            self.new_heads(chooser)
        head = chooser.choice(self.heads)
        extra = chooser.integer(1, 2) * self.block_size
        return head + [chooser.choice(self.alphabet) for _ in range(extra)]

    def new_heads(self, chooser: Chooser) -> None:
        """Draw the shared heads of the next sibling fill: 1 to 4 of 1-2 blocks."""
        self.heads = [
            [chooser.choice(self.alphabet) for _ in range(chooser.integer(1, 2) * self.block_size)]
            for _ in range(chooser.integer(1, 4))
        ]

    def filled(self, tokens: list[int], namespace: str | None) -> None:
        """Note a sequence a fill inserted, for churn to come back to (the oldest
        forgotten past :data:`CACHED`). O(CACHED) at worst: one shift of a short list."""
        self.cached.append((tokens, namespace))
        if len(self.cached) > CACHED:
            del self.cached[: len(self.cached) - CACHED]

    def long_tokens(self, chooser: Chooser, style: str = "mixed", prefix: int = 0) -> list[int]:
        """A long valid sequence for a fill (up to :data:`MAX_DEEP_BLOCKS` blocks).

        ``deep``: the deepest remembered sequence extended by 1-8 blocks; ``wide``:
        the first ``prefix`` blocks of the deepest one plus 1-3 new blocks, so a fill
        hangs many siblings under one node; ``mixed``: a remembered sequence cut at
        any block and extended, or a fresh one.
        """
        size = self.block_size
        deepest = max(self.history, key=len) if self.history else []
        if style == "deep":
            cut, extra_blocks = deepest[: len(deepest) // size * size], chooser.integer(1, 8)
        elif style == "wide":
            cut, extra_blocks = deepest[: min(prefix, len(deepest) // size) * size], 1
            extra_blocks += chooser.integer(0, 2)
        else:
            base = chooser.choice(self.history) if self.history and chooser.integer(0, 4) else []
            cut = base[: chooser.integer(0, len(base)) // size * size]
            extra_blocks = chooser.integer(1, 8)
        extra = [chooser.choice(self.alphabet) for _ in range(extra_blocks * size)]
        tokens = (cut + extra)[: MAX_DEEP_BLOCKS * size]
        self.remember(tokens)
        return tokens

    @staticmethod
    def namespace(chooser: Chooser) -> str | None:
        """A valid namespace, None most often."""
        return chooser.choice(NAMESPACES)

    @staticmethod
    def retention(chooser: Chooser) -> dict[str, Any]:
        """An insert's ``priority`` and ``retain_for`` (R-POL-5): none half the time, else a
        priority (the edges of the range among them) held for a few ticks or for ever."""
        if chooser.integer(0, 1) == 0:
            return {}
        priority = chooser.choice((0, 10, 35, 35, 60, 90, 100))
        retain_for = chooser.choice((None, None, 1, 2, 3, 5, 8))
        return {"priority": priority, "retain_for": retain_for}

    @staticmethod
    def bad_retention(chooser: Chooser) -> dict[str, Any]:
        """A retention every policy must refuse (R-POL-8, R-ERR-1)."""
        return chooser.choice(
            (
                {"priority": 101, "retain_for": None},
                {"priority": -1, "retain_for": None},
                {"priority": True, "retain_for": None},
                {"priority": 50.0, "retain_for": None},
                {"priority": "high", "retain_for": None},
                {"priority": None, "retain_for": 3},
                {"priority": 50, "retain_for": 0},
                {"priority": 50, "retain_for": False},
            )
        )

    @staticmethod
    def bad_namespace(chooser: Chooser) -> Any:
        """A namespace that is neither None nor a str."""
        return chooser.choice(BAD_NAMESPACES)

    @staticmethod
    def count(chooser: Chooser, num_blocks: int) -> int:
        """An ``evict`` count from 0 to a little more than the pool."""
        return chooser.integer(0, num_blocks + 1)

    @staticmethod
    def bad_count(chooser: Chooser) -> Any:
        """An ``evict`` count that is not an int >= 0."""
        return chooser.choice(BAD_COUNTS)

    @staticmethod
    def lease(
        chooser: Chooser, issued: int, live: Sequence[int], avoid: frozenset[str] = frozenset()
    ) -> int | None:
        """A lease handle: mostly a live one, else as often a released one (R-PIN-4) as
        0, never issued (R-PIN-5); None when only avoided probes remain. O(issued): the
        released handles are listed so that a long run with many live leases still
        releases one twice."""
        if live and chooser.integer(0, 4) > 0:
            return chooser.choice(live)
        alive = set(live)
        released = [] if "R-PIN-4" in avoid else [
            handle for handle in range(1, issued + 1) if handle not in alive
        ]
        if released and ("R-PIN-5" in avoid or chooser.integer(0, 1)):
            return chooser.choice(released)
        return None if "R-PIN-5" in avoid else 0


def _kind(row: Operation, draw: Draw) -> str:
    """A draw's name in the swarm's kinds: the operation's, or ``name/argument`` for a
    probe spoiling that argument."""
    return row.name if draw.probe is None else f"{row.name}/{draw.probe}"


#: Every draw of the table (:attr:`~kachedb_radix.spec.conform.operations.Operation.draws`),
#: by kind, in the table's order.
DRAWN: dict[str, tuple[Operation, Draw]] = {
    _kind(row, draw): (row, draw) for row in OPERATIONS for draw in row.draws
}

#: Operation kinds drawn per level, in the draws' order, with repeats as weights: read
#: off the table.
KINDS: dict[str, tuple[str, ...]] = {
    level: kinds
    for level in LEVELS
    if (
        kinds := tuple(
            kind
            for kind, (_, draw) in sorted(
                (
                    (kind, drawn)
                    for kind, drawn in DRAWN.items()
                    if drawn[1].level == level and not drawn[1].last
                ),
                key=lambda item: item[1][1].order,
            )
            for _ in range(draw.weight)
        )
    )
}  # fmt: skip

#: The rule whose probes each spoilt argument is (a waived rule's probes are not drawn;
#: the token probes choose among their own rules, :meth:`Inputs.bad_tokens`).
PROBE_RULES: dict[str, str] = {"namespace": "R-NS-4", "count": "R-ERR-1", "priority": "R-POL-8"}

#: The tiers a ``tier_evict`` names besides the present ones, now and then: an absent
#: tier and a value that is no tier name (-> invalid_argument, R-TIER-3, R-ERR-1).
BAD_TIERS: tuple[Any, ...] = ("disk", "host", "gpu", 0, None)

#: Most readers inside at once: more would keep inserts from evicting most of the time
#: (R-EPOCH-3), two are enough for "entered before" to matter (R-EPOCH-2).
MAX_INSIDE = 2


class Run(Protocol):
    """What :func:`draw_step` needs to know about the run so far."""

    @property
    def issued(self) -> int:
        """Lease handles issued since the reset."""
        ...

    @property
    def live(self) -> list[int]:
        """Handles of leases not yet released."""
        ...

    @property
    def snapshots(self) -> int:
        """Snapshot (and reader) handles issued since the reset."""
        ...

    @property
    def inside(self) -> list[int]:
        """Handles of readers that have not left."""
        ...

    @property
    def left(self) -> list[int]:
        """Handles of readers that have left."""
        ...

    @property
    def dropped(self) -> list[int]:
        """Handles of readers dropped without leaving (never named again)."""
        ...

    @property
    def offered(self) -> frozenset[str]:
        """The operations the candidate supports (none other is drawn)."""
        ...

    @property
    def tier_names(self) -> tuple[str, ...]:
        """The tiers the last reset named, fastest first (the device alone without)."""
        ...

    def would_evict(self, step: dict[str, Any]) -> bool:
        """Whether this insert would evict."""
        ...


def tiers_fields(
    chooser: Chooser, num_blocks: int, kept: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """The ``tiers`` of a reset at the ``tiers`` level: a host tier mostly, a disk tier
    often, sizes from a few blocks to a few times the device's (so that demotions cascade
    and the last tier drops), write-through now and then (R-TIER-1, R-TIER-4). With
    ``kept`` (a profile's ``tiers``) exactly those tiers are present. O(1)."""
    host = 0 if chooser.integer(0, 5) == 0 else chooser.integer(1, 2 * num_blocks + 2)
    disk = 0 if chooser.integer(0, 2) == 0 else chooser.integer(1, 4 * num_blocks + 4)
    if kept is not None:
        host = chooser.integer(1, 2 * num_blocks + 2) if "host" in kept else 0
        disk = chooser.integer(1, 4 * num_blocks + 4) if "disk" in kept else 0
    write_through = host > 0 and chooser.integer(0, 3) == 0
    return {"tiers": {"host": host, "disk": disk, "write_through": write_through}}


def kinds_for(levels: frozenset[str]) -> tuple[str, ...]:
    """The weighted operation kinds of ``levels`` (those the levels do not rule out). O(1)."""
    return tuple(
        kind
        for level in KINDS
        if level in levels
        for kind in KINDS[level]
        if not levels & set(DRAWN[kind][1].unless)
    )


def closing_kinds(levels: frozenset[str]) -> tuple[str, ...]:
    """The draws of ``levels`` made once at the end of an example
    (:attr:`~kachedb_radix.spec.conform.operations.Draw.last`), besides the swarm's kinds.
    O(draws)."""
    return tuple(
        kind
        for kind, (_, draw) in DRAWN.items()
        if draw.last and draw.level in levels and not levels & set(draw.unless)
    )


def draw_step(
    chooser: Chooser,
    inputs: Inputs,
    levels: frozenset[str],
    num_blocks: int,
    run: Run,
    *,
    kind: str | None = None,
    avoid: frozenset[str] = frozenset(),
) -> dict[str, Any] | None:
    """Draw one operation of ``levels``; None when the draw is not usable here.

    ``kind`` is drawn from :func:`kinds_for` unless given (the swarm search picks it): an
    operation of the table, or a probe of one (:data:`DRAWN`). The row says what to
    draw: a prompt (tokens, namespace, pin, at the ``policies`` level a retention), a
    count and a tier, a lease or a snapshot by handle, nothing. Probes of the rules in
    ``avoid`` (a profile's waivers) are not drawn; an operation the candidate does not
    offer is not drawn. Without the ``eviction`` level a call that would evict to make
    room is not usable (which blocks it evicts is unspecified there). Cost: O(tokens),
    plus a dry-run insert on a copy of the reference without ``eviction`` when the free
    blocks may not suffice.
    """
    if kind is None:
        kind = chooser.choice(kinds_for(levels))
    row, draw = DRAWN[kind]
    namespace = Inputs.namespace(chooser) if NAMESPACES_LEVEL in levels else None
    pin = PINNING in levels and chooser.integer(0, 2) == 2
    if row.name not in run.offered:
        return None
    if draw.probe is not None:
        return _probe(row, draw, chooser, inputs, namespace, pin, avoid)
    handle = row.handle
    if handle is not None and handle.handle == LEASE:
        if not run.live and chooser.integer(0, 3) > 0:
            return None  # mostly live leases; sometimes a released or foreign one
        lease = Inputs.lease(chooser, run.issued, run.live, avoid)
        return None if lease is None else {"op": row.name, handle.name: lease}
    if handle is not None or row.enters:
        return _snapshot_step(row, chooser, inputs, levels, run, avoid)
    if row.prompts:
        step: dict[str, Any] = {"op": row.name, "tokens": inputs.tokens(chooser)}
        step.update(namespace=namespace, pin=pin)
        if POLICIES in levels and _takes(row, "priority"):
            step.update(Inputs.retention(chooser))
        if row.frees is not None and EVICTION not in levels and run.would_evict(step):
            return None
        return step
    tier = None
    if _takes(row, "tier"):  # an absent tier or no tier name now and then (R-TIER-3)
        tiers = run.tier_names
        tier = chooser.choice(BAD_TIERS) if chooser.integer(0, 7) == 7 else chooser.choice(tiers)
    step = {"op": row.name}
    if _takes(row, "count"):
        step["count"] = Inputs.count(chooser, num_blocks)
    if _takes(row, "tier"):
        step["tier"] = tier
    return step


def _takes(row: Operation, name: str) -> bool:
    return any(argument.name == name for argument in row.arguments)


def _probe(
    row: Operation,
    draw: Draw,
    chooser: Chooser,
    inputs: Inputs,
    namespace: str | None,
    pin: bool,
    avoid: frozenset[str],
) -> dict[str, Any] | None:
    """A call of ``row`` (or of one of the draw's others) with a bad value of the
    argument the draw spoils (the error its rules name); None when its rule is waived
    or nothing is left to draw."""
    spoilt = draw.probe or ""
    if PROBE_RULES.get(spoilt) in avoid:
        return None
    calls = (row.name, *draw.among)  # the operations the probe makes its call of
    if spoilt == "tokens":
        op = chooser.choice(calls) if draw.among else row.name
        bad = inputs.bad_tokens(chooser, avoid)
        if bad is UNUSABLE:
            return None
        return {"op": op, "tokens": bad, "namespace": namespace, "pin": pin}
    if spoilt == "count":
        return {"op": row.name, "count": Inputs.bad_count(chooser)}
    if spoilt == "priority":
        return {"op": row.name, "tokens": inputs.tokens(chooser), "namespace": namespace,
                "pin": pin, **Inputs.bad_retention(chooser)}  # fmt: skip
    # namespace: valid tokens mostly, bad ones sometimes (tokens are checked first)
    tokens = (
        inputs.tokens(chooser) if chooser.integer(0, 2) > 0 else inputs.bad_tokens(chooser, avoid)
    )
    return {
        "op": chooser.choice(calls) if draw.among else row.name,
        "tokens": inputs.tokens(chooser) if tokens is UNUSABLE else tokens,
        "namespace": Inputs.bad_namespace(chooser),
        "pin": pin,
    }


def _snapshot_step(
    row: Operation,
    chooser: Chooser,
    inputs: Inputs,
    levels: frozenset[str],
    run: Run,
    avoid: frozenset[str],
) -> dict[str, Any] | None:
    """A call naming a snapshot, or entering a reader; None when unusable here."""
    if row.enters:
        return None if len(run.inside) >= MAX_INSIDE else {"op": row.name}
    if row.ends is not None:
        # Mostly a reader inside; sometimes one that already left (R-EPOCH-4); and
        # sometimes one is forgotten without leave(): it must leave by itself (R-EPOCH-5).
        if run.inside and (not run.left or chooser.integer(0, 4) > 0):
            drop = chooser.integer(0, 5) == 5  # drawn either way: the same draws follow
            op = FORGETS.name if drop and FORGETS.name in run.offered else row.name
            return {"op": op, "snapshot": chooser.choice(run.inside)}
        if not run.left or "R-EPOCH-4" in avoid:
            return None
        return {"op": row.name, "snapshot": chooser.choice(run.left)}
    # a query of a snapshot: any taken so far (not dropped), old ones as often as new ones.
    if not run.snapshots:
        return None
    handle = chooser.integer(1, run.snapshots)
    if handle in run.dropped:
        return None
    namespace = Inputs.namespace(chooser) if NAMESPACES_LEVEL in levels else None
    spoilt = chooser.integer(0, 7) == 7
    tokens = inputs.bad_tokens(chooser, avoid) if spoilt else inputs.tokens(chooser)
    if tokens is UNUSABLE:
        tokens = inputs.tokens(chooser)
    return {"op": row.name, "snapshot": handle, "tokens": tokens, "namespace": namespace}


#: The operation that forgets a reader without leaving (drawn in place of a leave now
#: and then, when the candidate offers it).
FORGETS: Operation = next(row for row in OPERATIONS if row.ends == ENDS_READER)
