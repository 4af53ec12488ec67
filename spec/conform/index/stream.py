"""The streams the router-index level drives an index with, and the truth they carry.

A stream is a few prompts and a list of operations of three workers' publishers
(:data:`WORKERS`: worker 1 publishes from two data-parallel ranks).  Each operation is
five small ints and a name, so Hypothesis draws and shrinks it well; :func:`deliveries`
reads it against what each worker's cache really holds (the *truth*) into the batches
a subscriber receives, one event a batch:

=================== ================================================= ==============
operation           what the worker's cache did, what it sends        kinds
=================== ================================================= ==============
``store``           cached blocks a..a+b of a prompt, sends them with ``store``, and
                    the hash of the block before as the parent        ``duplicate``,
                                                                      ``unknown_parent``
``store_parentless`` the same from a block past the first, sent with  ``parentless``
                    no parent (a full report: vLLM's)
``remove``          evicted those blocks, sends their removal         ``remove``,
                                                                      ``unknown_removal``
``clear``           dropped everything, sends ``AllBlocksCleared``    ``clear``
``remove_worker``   left the fleet, every rank (the router is told,   ``remove_worker``
                    no batch)
``gap``             a store whose batch number skips one              ``gap``
``restart``         restarted empty; a store from the prompt's first  ``restart``
                    block, numbered 0 again
``malformed``       sent a payload that does not decode               ``malformed``
=================== ================================================= ==============

``duplicate`` marks a store of a block the worker already holds (a copy, R-ROUTE-5),
``unknown_parent`` one whose parent it does not hold (R-ROUTE-3), ``unknown_removal`` a
removal of a block it does not hold.  The truth counts copies (a store adds one to
each block, a removal takes one away, a clear or a restart empties the worker): it
is what the worker's cache holds, so a worker's true depth for a query is the number
of leading blocks it holds, and no index may ever answer more (R-ROUTE-2).

Blocks are named as the :data:`ENGINE` preset names them (Dynamo's sequence hashes: an
index of any engine's hashes sees the same streams), ``B`` = :data:`BLOCK_SIZE`, and a
prompt's blocks are drawn from three contents (:data:`CONTENTS`), so one content
appears at several depths and a block stored at the wrong place matches a query it
must not.

Cost: :func:`deliveries` is O(operations x blocks of a prompt).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from kachedb_radix.reference.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    encode_batch,
)
from kachedb_radix.reference.events.engines import engine_preset
from kachedb_radix.reference.events.hashing import ExternalHash

#: A publisher: (worker id, data-parallel rank).
Worker = tuple[int, int]

#: The fleet a stream drives: worker 1 publishes from two ranks (kept apart, R-ROUTE-3).
WORKERS: tuple[Worker, ...] = ((0, 0), (1, 0), (1, 1))
#: Tokens per block.
BLOCK_SIZE = 2
#: The block contents prompts are made of.
CONTENTS: tuple[tuple[int, int], ...] = ((1, 2), (3, 4), (5, 6))
#: The namespaces a prompt is drawn in (None: none).
NAMESPACES: tuple[str | None, ...] = (None, "t")
#: The engine whose block naming the streams carry.
ENGINE = "dynamo"
#: The medium every store and removal names (vLLM's and Dynamo's device tier).
MEDIUM = "GPU"

#: The operations, the plainest first (Hypothesis shrinks toward it).
OPERATIONS: tuple[str, ...] = (
    "store",
    "remove",
    "store_parentless",
    "clear",
    "remove_worker",
    "gap",
    "restart",
    "malformed",
)

#: The kinds an operation's delivery can have (module docstring); the first two are
#: the plain ones, every other one a case of its own.
KINDS: tuple[str, ...] = (
    "store",
    "remove",
    "duplicate",
    "unknown_parent",
    "parentless",
    "unknown_removal",
    "clear",
    "remove_worker",
    "gap",
    "restart",
    "malformed",
)
PLAIN_KINDS = frozenset({"store", "remove"})

#: The rules each kind exercises (R-ROUTE-4, the depth, is exercised by every query).
KIND_RULES: dict[str, tuple[str, ...]] = {
    "store": ("R-ROUTE-4",),
    "remove": ("R-ROUTE-4",),
    "duplicate": ("R-ROUTE-5",),
    "unknown_parent": ("R-ROUTE-3",),
    "parentless": ("R-ROUTE-5",),
    "unknown_removal": ("R-ROUTE-3",),
    "clear": ("R-ROUTE-2",),
    "remove_worker": ("R-ROUTE-5",),
    "gap": ("R-ROUTE-1",),
    "restart": ("R-ROUTE-1",),
    "malformed": ("R-ROUTE-2", "R-ROUTE-3"),
}

#: One drawn operation: (name, worker, prompt, a, b) -- small ints read modulo sizes.
Operation = tuple[str, int, int, int, int]


@dataclass(frozen=True)
class Prompt:
    """A request's tokens in a namespace: whole blocks of :data:`CONTENTS`."""

    contents: tuple[int, ...]
    namespace: str | None

    @property
    def tokens(self) -> list[int]:
        """Its token ids. O(blocks)."""
        return [token for content in self.contents for token in CONTENTS[content]]

    def hashes(self) -> list[int]:
        """Its blocks' hashes, as the engine's events name them. O(blocks)."""
        return [
            int(h)
            for h in engine_preset(ENGINE).event_hashes(self.tokens, BLOCK_SIZE, self.namespace)
        ]

    def suffixes(self) -> list[Prompt]:
        """The prompt and every prompt made of its last blocks (queries that start at a
        content the worker holds deeper down). O(blocks^2)."""
        return [
            Prompt(self.contents[start:], self.namespace) for start in range(len(self.contents))
        ]

    def __str__(self) -> str:
        shown = f"{self.tokens}"
        return shown if self.namespace is None else f"{shown} in {self.namespace!r}"


@dataclass(frozen=True)
class Stream:
    """A drawn stream: its prompts and operations."""

    prompts: tuple[Prompt, ...]
    operations: tuple[Operation, ...]

    def queries(self) -> list[Prompt]:
        """Every prompt, every suffix of one, in both namespaces, once each. O(blocks^2)."""
        found: dict[Prompt, None] = {}
        for prompt in self.prompts:
            for suffix in prompt.suffixes():
                for namespace in NAMESPACES:
                    found.setdefault(Prompt(suffix.contents, namespace), None)
        return list(found)


@dataclass(frozen=True)
class Delivery:
    """What one operation makes a subscriber see.

    Attributes:
        text: the operation in words (a trace line).
        worker: the publisher.
        seq: the batch's number (None for ``remove_worker``: no batch).
        batch: the batch, or its payload bytes (``malformed``), or None.
        namespace: the namespace of the prompt a store or removal names.
        kinds: its kinds (:data:`KINDS`).
        parent: a store's parent hash (None: none).
        operation: the drawn operation.
    """

    text: str
    worker: Worker
    seq: int | None
    batch: KVEventBatch | bytes | None
    namespace: str | None
    kinds: frozenset[str]
    parent: int | None = None
    operation: Operation = ("store", 0, 0, 0, 0)

    def to_json(self) -> dict[str, Any]:
        """The delivery as JSON data (a report's trace line). O(blocks)."""
        return {
            "text": self.text,
            "worker": list(self.worker),
            "seq": self.seq,
            "kinds": sorted(self.kinds),
            "operation": list(self.operation),
        }


@dataclass
class Truth:
    """What each worker's cache holds: copies per block hash."""

    held: dict[Worker, Counter[int]] = field(default_factory=dict)

    def holds(self, worker: Worker, block_hash: int) -> bool:
        """Whether ``worker`` holds a copy of ``block_hash``. O(1)."""
        return self.held.get(worker, Counter())[block_hash] > 0

    def depth(self, worker: Worker, hashes: Sequence[int]) -> int:
        """``worker``'s true depth for a query's hashes: its leading held blocks. O(n)."""
        mine = self.held.get(worker, Counter())
        depth = 0
        for block_hash in hashes:
            if mine[block_hash] <= 0:
                break
            depth += 1
        return depth


#: The operation that makes each kind (``duplicate`` and ``unknown_parent`` are stores
#: that find the worker's cache so, ``unknown_removal`` a removal).
MADE_BY: dict[str, str] = {
    "store": "store",
    "remove": "remove",
    "duplicate": "store",
    "unknown_parent": "store",
    "parentless": "store_parentless",
    "unknown_removal": "remove",
    "clear": "clear",
    "remove_worker": "remove_worker",
    "gap": "gap",
    "restart": "restart",
    "malformed": "malformed",
}


def streams(kinds: Iterable[str] = KINDS) -> st.SearchStrategy[Stream]:
    """Hypothesis's strategy for streams of operations that make ``kinds``: 1-3
    prompts of 1-4 blocks, up to 16 operations. O(1) to build."""
    wanted = {MADE_BY[kind] for kind in kinds}
    names = [name for name in OPERATIONS if name in wanted]
    prompt = st.builds(
        Prompt,
        st.lists(st.integers(0, len(CONTENTS) - 1), min_size=1, max_size=4).map(tuple),
        st.sampled_from(NAMESPACES),
    )
    # Worker 0 and prompt 0 are drawn more often than the others: the interesting
    # streams are several operations of one worker on one prompt.
    operation = st.tuples(
        st.sampled_from(names),
        st.one_of(st.just(0), st.integers(0, len(WORKERS) - 1)),
        st.one_of(st.just(0), st.integers(0, 2)),
        st.integers(0, 3),
        st.integers(0, 3),
    )
    return st.builds(
        Stream,
        st.lists(prompt, min_size=1, max_size=3).map(tuple),
        st.lists(operation, max_size=16).map(tuple),
    )


def deliveries(stream: Stream, disabled: Iterable[str] = ()) -> Iterable[tuple[Delivery, Truth]]:
    """Each operation of ``stream`` as its delivery, with the truth after it; an
    operation of a disabled kind (or naming no block) is skipped, the truth unchanged.
    O(operations x blocks).

    The truth is one object updated in place: read it before taking the next item.
    """
    off = frozenset(disabled)
    truth = Truth()
    next_seq: dict[Worker, int] = {}
    for operation in stream.operations:
        name, worker_at, prompt_at, a, b = operation
        worker = WORKERS[worker_at % len(WORKERS)]
        prompt = stream.prompts[prompt_at % len(stream.prompts)]
        seq = next_seq.get(worker, 0)
        found = _delivery(name, worker, prompt, a, b, truth, seq)
        if found is not None and found.kinds & off:
            found = _as_plain(name, worker, prompt, a, b, truth, seq)
        if found is None or found.kinds & off:
            continue
        delivery = _with_operation(found, operation)
        _update_truth(truth, delivery)
        if delivery.seq is not None:
            next_seq[worker] = delivery.seq + 1
        yield delivery, truth


def _as_plain(
    name: str, worker: Worker, prompt: Prompt, a: int, b: int, truth: Truth, seq: int
) -> Delivery | None:
    """A store or removal of a case set aside, made plain as a well-behaved engine
    would send it: a store of the blocks after the prompt's held prefix, under the
    last of them; a removal of only the named blocks the worker holds (None: none)."""
    hashes = prompt.hashes()
    if name == "store":
        first = next((at for at, h in enumerate(hashes) if not truth.holds(worker, h)), None)
        if first is None:
            return None
        end = first + 1
        while end < min(first + 1 + b, len(hashes)) and not truth.holds(worker, hashes[end]):
            end += 1
        return _delivery("store", worker, prompt, first, end - first - 1, truth, seq)
    if name == "remove":
        start = min(a, len(hashes) - 1)
        held = [h for h in hashes[start : start + 1 + b] if truth.holds(worker, h)]
        if not held:
            return None
        text = f"worker {worker} removes {len(held)} held block(s) of {prompt} #{seq}"
        batch = KVEventBatch(0.0, [BlockRemoved(wire(held[::-1]), MEDIUM)], None)
        return Delivery(text, worker, seq, batch, prompt.namespace, frozenset({"remove"}))
    return None


def _with_operation(delivery: Delivery, operation: Operation) -> Delivery:
    return Delivery(
        delivery.text,
        delivery.worker,
        delivery.seq,
        delivery.batch,
        delivery.namespace,
        delivery.kinds,
        delivery.parent,
        operation,
    )


def _delivery(
    name: str, worker: Worker, prompt: Prompt, a: int, b: int, truth: Truth, seq: int
) -> Delivery | None:
    hashes = prompt.hashes()
    tokens = prompt.tokens
    count = len(hashes)
    start = min(a, count - 1)
    end = min(start + 1 + b, count)
    where = f"worker {worker} "
    if name in ("store", "store_parentless", "gap", "restart"):
        if name == "store_parentless" and start == 0:
            return None  # the first block has no parent anyway: a plain store
        if name == "restart":  # a cache restarted empty caches a prompt from its start
            start, end = 0, min(1 + b, count)
        parent = hashes[start - 1] if start > 0 and name != "store_parentless" else None
        kinds = {"store"} if name == "store" else {name.removeprefix("store_")}
        if name != "restart":
            if any(truth.holds(worker, h) for h in hashes[start:end]):
                kinds.add("duplicate")
            if parent is not None and not truth.holds(worker, parent):
                kinds.add("unknown_parent")
        number = {"gap": seq + 1, "restart": 0}.get(name, seq)
        stored = BlockStored(
            wire(hashes[start:end]),
            parent,
            tokens[start * BLOCK_SIZE : end * BLOCK_SIZE],
            BLOCK_SIZE,
            None,
            MEDIUM,
            None,
        )
        said = {
            "store": "stores",
            "store_parentless": "stores, with no parent,",
            "gap": "stores (its batch number skips one)",
            "restart": "restarts empty and stores (batch 0)",
        }[name]
        text = f"{where}{said} blocks {_span(start, end)} of {prompt} #{number}"
        return Delivery(
            text,
            worker,
            number,
            KVEventBatch(0.0, [stored], None),
            prompt.namespace,
            frozenset(kinds),
            parent,
        )
    if name == "remove":
        removed = hashes[start:end][::-1]  # deepest first, as an eviction frees them
        kinds = {"remove"}
        if not all(truth.holds(worker, h) for h in removed):
            kinds.add("unknown_removal")
        text = f"{where}removes blocks {_span(start, end)} of {prompt} #{seq}"
        batch = KVEventBatch(0.0, [BlockRemoved(wire(removed), MEDIUM)], None)
        return Delivery(text, worker, seq, batch, prompt.namespace, frozenset(kinds))
    if name == "clear":
        text = f"{where}clears everything (AllBlocksCleared) #{seq}"
        return Delivery(
            text,
            worker,
            seq,
            KVEventBatch(0.0, [AllBlocksCleared()], None),
            None,
            frozenset({"clear"}),
        )
    if name == "remove_worker":
        text = f"worker {worker[0]} leaves the fleet, every rank (remove_worker)"
        return Delivery(text, worker, None, None, None, frozenset({"remove_worker"}))
    # malformed: a payload cut short (nothing a router can read)
    payload = encode_batch(KVEventBatch(0.0, [BlockRemoved(wire(hashes[start:end]), MEDIUM)], None))
    text = f"{where}sends a payload cut short (undecodable) #{seq}"
    return Delivery(
        text,
        worker,
        seq,
        payload[: max(1, len(payload) // 2)],
        prompt.namespace,
        frozenset({"malformed"}),
    )


def wire(hashes: Sequence[int]) -> list[ExternalHash]:
    """Hashes as an event's ``block_hashes`` (a list of bytes-or-int). O(n)."""
    return list(hashes)


def _span(start: int, end: int) -> str:
    return f"{start}" if end == start + 1 else f"{start}-{end - 1}"


def _update_truth(truth: Truth, delivery: Delivery) -> None:
    """The worker's cache after ``delivery``: a store adds a copy of each block, but a
    parentless store of blocks all held is a report and adds none (R-ROUTE-5's reading);
    a removal takes a copy away; a clear, a restart or leaving empties it."""
    mine = truth.held.setdefault(delivery.worker, Counter())
    kinds = delivery.kinds
    if kinds & {"clear", "restart"}:
        mine.clear()
    if "remove_worker" in kinds:  # the worker leaves with every rank
        for worker, held in truth.held.items():
            if worker[0] == delivery.worker[0]:
                held.clear()
    batch = delivery.batch
    if not isinstance(batch, KVEventBatch):
        return
    for event in batch.events:
        if isinstance(event, BlockStored):
            hashes = [int(h) for h in event.block_hashes]
            report = event.parent_block_hash is None and all(mine[h] > 0 for h in hashes)
            if not report:
                mine.update(hashes)
        elif isinstance(event, BlockRemoved):
            for block_hash in event.block_hashes:
                if mine[int(block_hash)] > 0:
                    mine[int(block_hash)] -= 1
