"""Does a worker name its blocks as the router does?  The check behind a router that
says when it cannot work (issue 33).

A router matches a request by hashing its tokens and looking the hashes up; if a worker
hashes differently (another scheme, another seed, bytes instead of ints, another block
size), every lookup misses and the router answers depth 0 forever, which looks exactly
like a cold cache.  But a ``BlockStored`` event carries the blocks' token ids (vLLM's
and this project's do), so the router can hash them itself and compare: the first
stores of each worker whose whole chain it can recompute -- a path's first blocks
(``parent_block_hash`` null), or blocks whose parent it has itself recomputed -- are
checked (at most :data:`CHECK_BLOCKS` blocks a batch), the first batch that has one
settles the scheme, and the first salted chain after it the salt:

* ``ok``: every checked block's hash is the router's;
* ``mismatch``: one is not. The other schemes (:data:`CANDIDATES`, each with int and
  byte hashes) are tried on the same blocks, and the problem names the one that fits
  and the engine that ships it (:data:`ENGINE_OF`), or says none did: "worker w0's
  hashes are not sha256_cbor; they look like sha256: use --engine vllm";
* the block size differs (the event says its ``block_size``): said so;
* the cache salt: a first block that carries one (``extra_keys [(salt,)]``) and matches
  only when hashed without it (an engine that leaves the salt out of its hashes: then
  tenants share prefixes in the router), or whose salt is ``""`` and matches only
  unsalted (an engine for which ``""`` means no salt, as vLLM's) -- each named;
* ``unchecked``: no store carried token ids yet (SGLang's events may not), or every
  store had a parent the router cannot recompute.

Only what a worker sent is used; nothing is asked of it. The check costs one full
decode and the hashing of at most :data:`CHECK_BLOCKS` blocks per worker (and, on a
mismatch, that again per candidate), then nothing: :meth:`SchemeCheck.inspect` is one
dictionary lookup for a settled worker. A worker that restarts is checked again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from kachedb_radix.reference.events import ENGINES, SCHEMES, BlockHasher
from kachedb_radix.reference.router import APPLIED, RESTART
from kachedb_radix.reference.tokens import TOKEN_LIMIT

#: The most blocks checked per worker before its verdict is settled.
CHECK_BLOCKS = 64
#: The most batches of a worker looked at before its check stops (a worker whose stores
#: never carry tokens stays unchecked; one whose requests have no salt, salt-unchecked).
CHECK_BATCHES = 256

#: The schemes tried when a worker's hashes are not the router's.
CANDIDATES: tuple[str, ...] = SCHEMES

#: The engine each scheme is the default of, as ``route --engine`` names them: read from
#: the engine presets (:data:`~kachedb_radix.reference.events.ENGINES`, the one table of
#: engines), so a scheme no engine ships by default (``xxh3_64``, ``sglang_dynamo``, the
#: other vLLM options) is named by ``--hash`` alone.
ENGINE_OF: dict[str, str] = {preset.scheme: preset.name for preset in ENGINES.values()}

log = logging.getLogger("kachedb_radix.route")


class _Stored(msgspec.Struct, tag="BlockStored"):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int] | None = None
    block_size: int | None = None
    extra_keys: list[Any] | None = None
    lora_name: str | None = None
    lora_id: int | None = None


class _Removed(msgspec.Struct, tag="BlockRemoved"):
    pass


class _Cleared(msgspec.Struct, tag="AllBlocksCleared"):
    pass


class _Batch(msgspec.Struct, array_like=True):
    ts: float
    events: list[_Stored | _Removed | _Cleared]


_DECODER = msgspec.msgpack.Decoder(_Batch)


@dataclass(frozen=True)
class Verdict:
    """A worker's hash check: ``state`` (``unchecked``, ``ok``, ``mismatch``), the
    blocks checked, whether a salted block was among them, and the problem to tell the
    user (None when there is none)."""

    state: str = "unchecked"
    checked: int = 0
    problem: str | None = None
    salted: bool = False

    def to_json(self) -> dict[str, Any]:
        """Plain data."""
        return {"state": self.state, "checked": self.checked, "problem": self.problem}


@dataclass
class _Sample:
    """What one worker's checkable stores said: blocks as (parent index or -1, tokens,
    salt or None, the hash sent), in chain order."""

    blocks: list[tuple[int, tuple[int, ...], str | None, int | bytes]] = field(default_factory=list)
    by_hash: dict[int | bytes, int] = field(default_factory=dict)  # sent hash -> position
    batches: int = 0
    sizes: set[int] = field(default_factory=set)
    salted_only: bool = False  # the scheme is settled: only salted chains are wanted


class SchemeCheck:
    """The check for every worker of one router (the module docstring).

    A worker's check has two steps: its scheme, settled by the first batch with a
    checkable block; then, if that was ``ok`` and no salted block was among them, its
    salt semantics, settled by the first salted chain (or never, for a worker whose
    requests have no salt). It stops looking after :data:`CHECK_BATCHES` batches.

    Args:
        hasher: the router's hasher.
        block_size: the router's block size.
        report: called once with each problem found (default: the log, as a warning).
    """

    def __init__(
        self,
        hasher: BlockHasher,
        block_size: int,
        report: Callable[[str], None] | None = None,
    ) -> None:
        self.hasher = hasher
        self.block_size = block_size
        self.report = report or (lambda text: log.warning("%s", text))
        self._samples: dict[Hashable, _Sample] = {}
        self._verdicts: dict[Hashable, Verdict] = {}
        self._done: set[Hashable] = set()

    def verdict(self, worker: Hashable) -> Verdict:
        """``worker``'s verdict so far. O(1)."""
        return self._verdicts.get(worker, Verdict())

    def settled(self, worker: Hashable) -> bool:
        """Whether ``worker``'s check is over (no more batches looked at). O(1)."""
        return worker in self._done

    def restart(self, worker: Hashable) -> None:
        """``worker`` restarted: check it again from its next batches. O(1)."""
        self._samples.pop(worker, None)
        self._verdicts.pop(worker, None)
        self._done.discard(worker)

    def observe(self, worker: Hashable, outcome: str, payload: bytes) -> None:
        """What the subscriber calls after each batch it handed the index: ``outcome``
        as :meth:`RouterIndex.apply` said. O(1) once settled."""
        if outcome == RESTART:
            self.restart(worker)
        if outcome in (APPLIED, RESTART) and worker not in self._done:
            self.inspect(worker, payload)

    def inspect(self, worker: Hashable, payload: bytes) -> None:
        """Look at one applied batch of ``worker``'s. O(1) once settled; else O(batch)
        plus the hashing of at most :data:`CHECK_BLOCKS` blocks."""
        if worker in self._done:
            return
        sample = self._samples.setdefault(worker, _Sample())
        sample.batches += 1
        try:
            batch = _DECODER.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            batch = None  # the index counts what it could not use; nothing to check here
        for event in batch.events if batch is not None else ():
            if isinstance(event, _Stored):
                self._take(sample, event)
        verdict = self._verdicts.get(worker)
        if verdict is None:
            if sample.blocks or sample.sizes - {self.block_size}:
                self._settle_scheme(worker, sample)
        elif any(salt is not None for _, _, salt, _ in sample.blocks):
            self._settle_salt(worker, sample, verdict)
        if worker not in self._done and sample.batches >= CHECK_BATCHES:
            self._finish(worker)

    def _take(self, sample: _Sample, event: _Stored) -> None:
        """Keep the blocks of ``event`` whose chain the router can recompute."""
        tokens, size = event.token_ids, event.block_size
        if not tokens or size is None or size < 1 or event.lora_name or event.lora_id:
            return  # no tokens, or a LoRA's (its name is an extra key the router lacks)
        if not all(0 <= token < TOKEN_LIMIT for token in tokens):
            return  # no request the router hashes holds such a token (R-TOK-3)
        sample.sizes.add(size)
        if size != self.block_size or len(tokens) != size * len(event.block_hashes):
            return
        if event.parent_block_hash is None:
            parent = -1
        elif event.parent_block_hash in sample.by_hash and not sample.salted_only:
            parent = sample.by_hash[event.parent_block_hash]
        else:
            return
        keys = event.extra_keys or []
        if sample.salted_only and not (keys and keys[0] is not None and _is_salt(keys[0])):
            return
        for number, sent in enumerate(event.block_hashes):
            salt = None
            extra = keys[number] if number < len(keys) else None
            if extra is not None:
                if number != 0 or parent != -1 or not _is_salt(extra):
                    return  # multimodal or other keys: not the router's to recompute
                salt = extra[0]
            if len(sample.blocks) >= CHECK_BLOCKS:
                return
            block = tuple(tokens[number * size : (number + 1) * size])
            sample.blocks.append((parent, block, salt, sent))
            sample.by_hash.setdefault(sent, len(sample.blocks) - 1)
            parent = len(sample.blocks) - 1

    def _settle_scheme(self, worker: Hashable, sample: _Sample) -> None:
        other_sizes = sorted(sample.sizes - {self.block_size})
        if other_sizes and not sample.blocks:
            problem = (
                f"worker {worker}'s blocks are {other_sizes[0]} tokens, the router's "
                f"{self.block_size}: use --block-size {other_sizes[0]}"
            )
            self._verdicts[worker] = Verdict("mismatch", 0, problem)
            self._finish(worker)
            return
        salted = any(salt is not None for _, _, salt, _ in sample.blocks)
        if _fits(self.hasher, sample, salted=True):
            self._verdicts[worker] = Verdict("ok", len(sample.blocks), None, salted)
            if salted:
                self._finish(worker)
            else:  # the scheme is right; the salt is still to be seen
                self._samples[worker] = _Sample(batches=sample.batches, salted_only=True)
            return
        problem = self._diagnose(worker, sample)
        self._verdicts[worker] = Verdict("mismatch", len(sample.blocks), problem, salted)
        self._finish(worker)

    def _settle_salt(self, worker: Hashable, sample: _Sample, verdict: Verdict) -> None:
        checked = verdict.checked + len(sample.blocks)
        if _fits(self.hasher, sample, salted=True):
            self._verdicts[worker] = Verdict("ok", checked, None, True)
        else:
            problem = self._diagnose(worker, sample)
            self._verdicts[worker] = Verdict("mismatch", checked, problem, True)
        self._finish(worker)

    def _finish(self, worker: Hashable) -> None:
        self._done.add(worker)
        self._samples.pop(worker, None)
        problem = self.verdict(worker).problem
        if problem is not None:
            self.report(problem)

    def _diagnose(self, worker: Hashable, sample: _Sample) -> str:
        ours = self.hasher
        head = f"worker {worker}'s hashes are not {ours.scheme}"
        salts = {salt for _, _, salt, _ in sample.blocks if salt is not None}
        if salts and _fits(ours, sample, salted=False):
            if salts == {""}:
                return (
                    f'{head} with its cache salt "": it treats "" as no salt '
                    "(as vLLM does); send no namespace for those requests"
                )
            return (
                f"{head} salted: it leaves the cache salt out of its hashes, so the "
                "router cannot tell its tenants apart (route those requests with no "
                "namespace)"
            )
        for scheme in CANDIDATES:
            for wire in ("int", "bytes"):
                candidate = BlockHasher(scheme, ours.seed, wire)
                if candidate == ours:
                    continue
                for salt_too in (True, False):
                    if _fits(candidate, sample, salted=salt_too):
                        engine = ENGINE_OF.get(scheme)
                        hint = (
                            f"use --engine {engine} (--hash {scheme})"
                            if engine
                            else (f"use --hash {scheme}")
                        )
                        form = "" if wire == "int" else " (bytes, not ints)"
                        return f"{head}; they look like {scheme}{form}: {hint}"
        return (
            f"{head}, nor any scheme this router knows with seed {ours.seed!r} "
            "(another PYTHONHASHSEED? a multimodal or LoRA model?): routing to it finds "
            "nothing"
        )


def _is_salt(extra: Any) -> bool:
    return isinstance(extra, list | tuple) and len(extra) == 1 and isinstance(extra[0], str)


def _fits(hasher: BlockHasher, sample: _Sample, *, salted: bool) -> bool:
    """Whether ``hasher`` gives every sampled block the hash its worker sent."""
    internal: list[Any] = []
    for parent, tokens, salt, sent in sample.blocks:
        chained = None if parent < 0 else internal[parent]
        value = hasher.block_hash(chained, tokens, salt if salted else None)
        internal.append(value)
        if hasher.external(value) != sent:
            return False
    return bool(sample.blocks)
