"""The ``events`` level in the kit: a candidate's KV event stream, checked (R-EVENT-*, R-ROUTE-*).

A candidate that declares ``events`` is reset with the hash scheme its profile names
(``[events]``: vLLM's ``sha256_cbor`` by default) and, after every step, asked for the
batches it emitted since the last ask, as the msgpack payloads its publisher would send
(``events``: ``{"batches": [base64, ...]}``).  The oracle emits too, so the kit checks

1. **the stream against the spec** -- each payload decodes as vLLM's ``KVEventBatch``
   (R-EVENT-6), and, normalised to what the declared levels and the profile specify
   (:func:`normalise`), the candidate's batches equal the oracle's: one batch per call
   that cached or evicted blocks (R-EVENT-1, R-EVENT-5), the stored blocks with their
   hashes, parents and tokens (R-EVENT-2, R-EVENT-3), the removed ones in eviction order
   (R-EVENT-4).  A profile may declare removals one event a block, still in eviction
   order (``removal_order = "per_block"``: vLLM's), another removal order
   (``removal_order = "any"``), another split of stores into events (``store_events =
   "any"``), extra keys of all None where none are meant (``event_fields =
   "none_as_absent"``: vLLM's), or fields of its own beside the hashes
   (``event_fields = "hashes"``);
2. **the stream against the candidate itself** (whatever the profile, :class:`EventStream`)
   -- the kit's own router index, fed only the candidate's payloads, holds after every
   dump exactly the blocks the candidate's dump holds, by hash and medium (R-EVENT-1);
   no store repeats a block the worker holds, names a parent it never stored, and no
   removal names a block it does not hold (R-EVENT-3, R-EVENT-4); no hash is held in two
   namespaces (R-EVENT-2: tenants must never share a prefix in a router);
3. **recovery** -- at the end of each example the candidate's payloads since its last
   reset are replayed to fresh indexes with faults injected: a batch dropped in transit
   (the gap is seen and replayed from a bounded buffer: the index ends exact), a
   subscriber that joins late (replayed from the buffer when it still holds the start,
   else the loss makes the worker stale and the index holds a subset, never a block
   the candidate no longer has), and a publisher restart at every reset (batch 0
   again: the worker's entries are cleared) (R-ROUTE-1, R-ROUTE-2); and the index's
   depth for each cached path is that path's length (R-ROUTE-4).

Cost: per step, decoding and applying the step's payloads; per dump, hashing the
candidate's dump (memoised: each (parent, tokens) pair is hashed once per run).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kachedb_radix.reference.events import (
    BlockHasher,
    BlockStored,
    EventDecodeError,
    decode_batch,
)
from kachedb_radix.reference.events.hashing import Hash
from kachedb_radix.reference.router import RouterIndex
from kachedb_radix.reference.router.wire import RoutedCleared, decode_for_router

from .safety import SafetyViolation
from .steps import Outcome

#: The worker the kit's index files the candidate under.
WORKER = "candidate"
#: The replay buffer the fault scenarios assume: batches a publisher keeps for replay.
REPLAY_BUFFER = 8


def hasher_of(spec: Mapping[str, Any] | None) -> BlockHasher:
    """The hasher a reset's ``events`` value names (``{"scheme": ..., "seed": ...}``)."""
    if spec is None:
        return BlockHasher()
    return BlockHasher(
        str(spec.get("scheme", "sha256_cbor")), str(spec.get("seed", BlockHasher.seed))
    )


def encode_payloads(payloads: list[bytes]) -> dict[str, list[str]]:
    """An ``events`` answer: the payloads in base64 (JSON carries no bytes). O(size)."""
    return {"batches": [base64.b64encode(payload).decode("ascii") for payload in payloads]}


def payloads_of(answer: Any) -> list[bytes] | None:
    """The payload bytes of an ``events`` answer, or None when it is not one. O(size)."""
    batches = answer.get("batches") if isinstance(answer, dict) else None
    if not isinstance(batches, list) or not all(isinstance(item, str) for item in batches):
        return None
    try:
        return [base64.b64decode(item, validate=True) for item in batches]
    except (binascii.Error, ValueError):
        return None


# ---------------------------------------------------------------------------- 1. the spec


def normalise(
    outcome: Outcome,
    modes: Mapping[str, str],
    *,
    with_ts: bool,
    lenient: bool,
    after_reset: bool = False,
) -> Outcome:
    """An ``events`` outcome as the levels and the profile's modes compare it. O(size).

    Each payload becomes ``{"ts": ..., "events": [...]}`` (``ts`` only ``with_ts``: the
    clock is specified at the eviction level, when recency is compared), each event
    ``{"stored": {...}}``, ``{"removed": {...}}`` or ``{"cleared": {}}``; a payload that
    does not decode becomes ``{"undecodable": message}``.  When ``lenient`` (R-EVENT-6
    waived) both sides are read as a router reads them: hashes, parents and media only.
    Right ``after_reset``, under ``reset_events = "cleared"``, a leading
    ``AllBlocksCleared`` (a fresh cache's announcement) is dropped, and its batch with it
    when nothing else is in it.
    """
    if "ok" not in outcome:
        return outcome
    payloads = payloads_of(outcome["ok"])
    if payloads is None:
        return {"ok": {"malformed_answer": outcome["ok"]}}
    batches: list[dict[str, Any]] = []
    decode = decode_for_router if lenient else decode_batch
    for payload in payloads:
        try:
            batch: Any = decode(payload)
        except EventDecodeError as exc:
            batches.append({"undecodable": str(exc)})
            continue
        events = [_event(event, modes) for event in batch.events]
        announced = after_reset and modes["reset_events"] == "cleared" and not batches
        if announced and events[:1] == [{"cleared": {}}]:
            events = events[1:]
            if not events:
                continue
        if modes["store_events"] == "any":
            events = _per_block(events)
        if modes["removal_order"] == "any":
            events = _removals_merged(events)
        elif modes["removal_order"] == "per_block":
            events = _removals_per_block(events)
        shown: dict[str, Any] = {"events": events}
        if with_ts:
            shown["ts"] = batch.ts
        batches.append(shown)
    return {"ok": {"batches": batches}}


def _event(event: Any, modes: Mapping[str, str]) -> dict[str, Any]:
    kind = type(event).__name__
    if kind in ("BlockStored", "RoutedStored"):
        stored: dict[str, Any] = {
            "hashes": _plain(event.block_hashes),
            "parent": _plain(event.parent_block_hash),
            "medium": event.medium,
        }
        if isinstance(event, BlockStored):
            stored["tokens"] = list(event.token_ids)
            stored["block_size"] = event.block_size
            if modes["event_fields"] != "hashes":
                extra = _plain(event.extra_keys)
                if modes["event_fields"] == "none_as_absent" and _all_none(extra):
                    extra = None  # [None, ...]: no block has an extra key, as if none sent
                stored["extra_keys"] = extra
                stored["lora_id"] = event.lora_id
                stored["lora_name"] = event.lora_name
        return {"stored": stored}
    if kind in ("BlockRemoved", "RoutedRemoved"):
        return {"removed": {"hashes": _plain(event.block_hashes), "medium": event.medium}}
    return {"cleared": {}}


def _per_block(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stores as one entry per block (hash, parent, tokens): how they were grouped into
    events no longer shows."""
    found: list[dict[str, Any]] = []
    for event in events:
        stored = event.get("stored")
        if stored is None:
            found.append(event)
            continue
        parent = stored["parent"]
        tokens = stored.get("tokens")
        size = stored.get("block_size") or 1
        for index, block_hash in enumerate(stored["hashes"]):
            block = {"hashes": [block_hash], "parent": parent, "medium": stored["medium"]}
            if tokens is not None:
                block["tokens"] = tokens[index * size : (index + 1) * size]
            found.append({"stored": block})
            parent = block_hash
    return found


def _removals_per_block(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each removal as one entry per block, in its order: how removals were grouped
    into events no longer shows, their order still does."""
    found: list[dict[str, Any]] = []
    for event in events:
        removed = event.get("removed")
        if removed is None:
            found.append(event)
            continue
        found.extend(
            {"removed": {"hashes": [block_hash], "medium": removed["medium"]}}
            for block_hash in removed["hashes"]
        )
    return found


def _all_none(value: Any) -> bool:
    """Whether ``value`` is a list of extra keys that are all None."""
    return isinstance(value, list) and all(item is None for item in value)


def _removals_merged(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each run of removals as one set (sorted): their order no longer shows."""
    found: list[dict[str, Any]] = []
    for event in events:
        removed = event.get("removed")
        if removed is not None and found and "removed" in found[-1]:
            last = found[-1]["removed"]
            if last["medium"] == removed["medium"]:
                last["hashes"] = sorted(last["hashes"] + removed["hashes"], key=repr)
                continue
        if removed is not None:
            removed = {**removed, "hashes": sorted(removed["hashes"], key=repr)}
            event = {"removed": removed}
        found.append(event)
    return found


def _plain(value: Any) -> Any:
    """Hashes and extra keys as JSON data: bytes as hex, tuples as lists."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


#: Block hashes already computed: (parent hash, tokens, salt) -> the block's hash.
HashMemo = dict[tuple[Any, tuple[int, ...], str | None], Hash]


def dump_hashes(dump: Any, hasher: BlockHasher, memo: HashMemo) -> Iterator[tuple[Any, int, Hash]]:
    """``(namespace, block id, internal chained hash)`` of every cached block of a
    canonical dump, as ``hasher`` names it (the namespace salting a path's first block,
    R-EVENT-2). Each new (parent, tokens, salt) is hashed once, through ``memo``.
    O(cached blocks)."""
    size = dump["block_size"]
    for space in dump["namespaces"]:
        namespace = space["namespace"]
        stack: list[tuple[Any, Any, bool]] = [(child, None, True) for child in space["children"]]
        while stack:
            node, parent, at_root = stack.pop()
            tokens = node["tokens"]
            for index, block in enumerate(node["blocks"]):
                chunk = tuple(tokens[index * size : (index + 1) * size])
                salt = namespace if at_root and index == 0 else None
                key = (parent, chunk, salt)
                chained = memo.get(key)
                if chained is None:
                    chained = hasher.block_hash(parent, chunk, salt)
                    memo[key] = chained
                parent = chained
                yield namespace, block, chained
            stack.extend((child, parent, False) for child in node["children"])


# ---------------------------------------------------------------------------- 2. itself


@dataclass
class EventStream:
    """The kit's side of a candidate's stream: its own router index, fed the candidate's
    payloads alone, and the payloads since the last reset (for the fault scenarios).

    Attributes:
        hasher: the scheme the candidate was reset with.
        block_size: the candidate's B.
    """

    hasher: BlockHasher
    block_size: int
    index: RouterIndex = field(init=False)
    seq: int = 0
    history: list[bytes] = field(default_factory=list)
    _memo: HashMemo = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index = RouterIndex(self.hasher, self.block_size)

    def restart(self, block_size: int) -> None:
        """A reset: the candidate starts empty and its publisher again at batch 0. The
        kit's index drops the worker at once (as a router does whose connection to the
        worker was reset), so a candidate that stays idle is not held to its old blocks;
        the restart seen through a batch 0 alone is a fault scenario of its own
        (:meth:`check_recovery`)."""
        self.block_size = block_size
        self.index = RouterIndex(self.hasher, block_size)
        self.history = []
        self.seq = 0

    def feed(self, payloads: list[bytes], dump_of: Any = None) -> None:
        """Apply the candidate's payloads of one step, in order (R-ROUTE-1, R-ROUTE-3).
        ``dump_of()`` gives the candidate's dump: a store of a held block is first checked
        for its root cause, one hash in two namespaces (R-EVENT-2).

        Raises:
            SafetyViolation: a batch is not applied, or a store repeats a held block,
                names a parent never stored, or a removal names a block not held.
        """
        for payload in payloads:
            before = self.index.counts(WORKER) if WORKER in self.index.workers() else None
            outcome = self.index.apply(WORKER, self.seq, payload).outcome
            self.seq += 1
            self.history.append(payload)
            if outcome == "malformed":
                raise SafetyViolation(
                    "events_stream", f"batch {self.seq - 1} is not a KVEventBatch a router reads"
                )
            assert outcome == "applied", outcome  # the kit numbers the batches itself
            counts = self.index.counts(WORKER)
            old = before or dict.fromkeys(counts, 0)
            repeated = ("duplicate_stores", "reports")
            if any(counts[name] > old[name] for name in repeated) and dump_of is not None:
                self.check_namespaces(dump_of())
            for name, what in (
                ("duplicate_stores", "a store of a block the worker already holds"),
                ("reports", "a store, with no parent, of blocks the worker all holds"),
                ("unknown_parents", "a store whose parent the worker never stored"),
                ("unknown_removals", "a removal of a block the worker does not hold"),
            ):
                if counts[name] > old[name]:
                    raise SafetyViolation(
                        "events_unknown" if name not in repeated else "events_duplicate",
                        f"batch {self.seq - 1}: {what}",
                    )

    def check_namespaces(self, dump: Any) -> dict[Any, Any]:
        """No hash is held in two namespaces (R-EVENT-2); the cached blocks by hash.
        O(cached tokens), hashes memoised.

        Raises:
            SafetyViolation: two namespaces' blocks carry one hash.
        """
        cached: dict[Any, Any] = {}
        for namespace, block, chained in self._walk(dump):
            external = self.hasher.external(chained)
            key = external if not isinstance(external, bytes) else external.hex()
            if key in cached and cached[key][0] != namespace:
                raise SafetyViolation(
                    "events_namespace",
                    f"blocks {cached[key][1]} ({cached[key][0]!r}) and {block} ({namespace!r}) "
                    f"carry the same hash {key}",
                )
            cached[key] = (namespace, block)
        return cached

    def check_dump(self, dump: Any) -> None:
        """The index fed the stream so far holds exactly the candidate's blocks (R-EVENT-1);
        no hash is held in two namespaces (R-EVENT-2). O(cached tokens), hashes memoised.

        Raises:
            SafetyViolation: either does not hold.
        """
        cached = self.check_namespaces(dump)
        held = set()
        if WORKER in self.index.workers():
            held = {
                block_hash if not isinstance(block_hash, bytes) else block_hash.hex()
                for block_hash, _medium in self.index.holdings(WORKER)
            }
        if held != set(cached):
            extra = sorted(map(str, held - set(cached)))[:3]
            missing = sorted(str(cached[key][1]) for key in set(cached) - held)[:3]
            raise SafetyViolation(
                "events_index",
                "an index fed the candidate's events "
                + (f"still holds {len(held - set(cached))} block(s) it evicted ({', '.join(extra)})"
                   if extra else "")
                + ("; " if extra and missing else "")
                + (f"misses {len(set(cached) - held)} cached block(s) (ids {', '.join(missing)})"
                   if missing else ""),
            )  # fmt: skip

    def _walk(self, dump: Any) -> Iterator[tuple[Any, int, Hash]]:
        """(namespace, block, internal hash) of every cached block of a dump."""
        return dump_hashes(dump, self.hasher, self._memo)

    # ------------------------------------------------------------------------ 3. recovery

    def check_recovery(self, dump: Any) -> None:
        """Replay the payloads since the last reset with faults injected (see the module
        docstring) and query each cached path (R-ROUTE-1, R-ROUTE-2, R-ROUTE-4).

        Raises:
            SafetyViolation: an index does not end as the rule says.
        """
        truth = self._held_by(dump)
        history = self.history
        if not history:
            return
        for dropped in sorted({0, len(history) // 2, len(history) - 1}):
            index = self._fresh()
            for seq, payload in enumerate(history):
                if seq == dropped:
                    continue
                outcome = index.apply(WORKER, seq, payload)
                if outcome.outcome == "gap":
                    first, last = outcome.missing or (seq, seq)
                    for missing in range(first, last + 1):  # the buffer holds them still
                        index.apply(WORKER, missing, history[missing])
                    index.apply(WORKER, seq, payload)
            got = self._holdings(index)
            if dropped < len(history) - 1 and got != truth:
                raise SafetyViolation(
                    "events_recovery",
                    f"batch {dropped} dropped in transit and replayed: the index is not exact",
                )
        restarted = self._fresh()  # the publisher restarts: batch 0 again (R-ROUTE-1)
        for seq, payload in enumerate(history):
            restarted.apply(WORKER, seq, payload)
        for seq, payload in enumerate(history):
            outcome = restarted.apply(WORKER, seq, payload)
            if seq == 0 and outcome.outcome != "restart":
                raise SafetyViolation("events_recovery", f"batch 0 again was {outcome.outcome}")
        if self._holdings(restarted) != truth:
            raise SafetyViolation(
                "events_recovery", "the stream replayed after a publisher restart is not exact"
            )
        joined = len(history) // 2
        if joined > 0:
            index = self._fresh()
            outcome = index.apply(WORKER, joined, history[joined])
            if outcome.outcome != "gap" or outcome.missing != (0, joined - 1):
                raise SafetyViolation(
                    "events_recovery", f"a subscriber joining at batch {joined} saw {outcome}"
                )
            kept = max(0, joined - REPLAY_BUFFER)
            if kept > 0:
                index.lost(WORKER, kept)
            for seq in range(kept, len(history)):
                index.apply(WORKER, seq, history[seq])
            got = self._holdings(index)
            # Stale, holding a subset -- unless a later batch cleared the whole cache,
            # which makes the index exact again (R-ROUTE-2, R-EVENT-7).
            cleared = any(_clears(payload) for payload in history[kept:])
            stale_subset = index.is_stale(WORKER) and got <= truth
            if kept > 0 and not (stale_subset or (cleared and got == truth)):
                raise SafetyViolation(
                    "events_recovery",
                    f"a subscriber that lost batches 0..{kept - 1} holds "
                    f"{len(got - truth)} block(s) the candidate does not",
                )
            if kept == 0 and got != truth:
                raise SafetyViolation(
                    "events_recovery", "a late subscriber replayed from batch 0 is not exact"
                )
        self._check_depths(dump)

    def _check_depths(self, dump: Any) -> None:
        if WORKER not in self.index.workers():
            return
        for space in dump["namespaces"][:3]:
            for child in space["children"][:3]:
                chain = self._first_path(child, space["namespace"])
                depth = self.index.query_hashes(chain).get(WORKER, 0)
                if depth != len(chain):
                    raise SafetyViolation(
                        "events_query",
                        f"a cached path of {len(chain)} blocks has depth {depth} in the index",
                    )

    def _first_path(self, node: Any, namespace: Any) -> list[Any]:
        """The external hashes down the first child of each node from ``node``."""
        size, chain = self.block_size, []
        parent: Hash | None = None
        first = True
        while True:
            tokens = node["tokens"]
            for index in range(len(node["blocks"])):
                chunk = tuple(tokens[index * size : (index + 1) * size])
                parent = self.hasher.block_hash(parent, chunk, namespace if first else None)
                first = False
                chain.append(self.hasher.external(parent))
            if not node["children"]:
                return chain
            node = node["children"][0]

    def _fresh(self) -> RouterIndex:
        return RouterIndex(self.hasher, self.block_size)

    def _holdings(self, index: RouterIndex) -> set[Any]:
        if WORKER not in index.workers():
            return set()
        return {h if not isinstance(h, bytes) else h.hex() for h, _ in index.holdings(WORKER)}

    def _held_by(self, dump: Any) -> set[Any]:
        found = set()
        for _namespace, _block, chained in self._walk(dump):
            external = self.hasher.external(chained)
            found.add(external if not isinstance(external, bytes) else external.hex())
        return found


def _clears(payload: bytes) -> bool:
    """Whether a payload's batch holds an ``AllBlocksCleared``, read as the index reads it:
    one of the history, which the index applied (a malformed one ends the run before any
    recovery is checked). O(events)."""
    events = decode_for_router(payload).events
    return any(isinstance(event, RoutedCleared) for event in events)
