"""The index level's lockstep, search and report: :func:`check_index`.

Each drawn stream (:mod:`.stream`) is delivered batch by batch to the candidate and to
the oracle -- the reference :class:`RouterIndex` -- and after every batch, for every
query (each prompt of the stream and each suffix of one, in each namespace), the kit
compares every publisher's depth three ways:

1. **never wrong** -- the candidate's depth is at most the worker's true depth (what
   its cache holds, :class:`~.stream.Truth`): an index may miss a hit, never promise
   one (R-ROUTE-2; whatever the profile says);
2. **the spec** -- the candidate's depths equal the oracle's.  The oracle follows the
   profile's declared ``[index]`` choices (:data:`~kachedb_radix.spec.conform.profile.INDEX_MODES`)
   by what it is fed: under ``copies = "one"`` a store of a block it holds is
   not given to it again (one entry per block), under ``parents = "dropped"`` a
   store whose parent it does not hold is not given to it, under ``malformed =
   "refused"`` an undecodable batch is not given to it, under ``sequence =
   "not_checked"`` no gap or restart is drawn (nothing the index sees is numbered);
3. **no raise** -- an event the index skips changes nothing and raises nothing
   (R-ROUTE-3), unless ``errors = "raised"`` is declared.

A difference stops the example; Hypothesis shrinks the stream to a minimal one, and
the finding names the rules of the cases that minimal stream needs (:data:`~.stream.KIND_RULES`).
The search then runs again with those cases no longer drawn, so the next difference
can show, until a round finds nothing or the rounds run out.

Cost: per example O(operations x queries x workers x blocks).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from kachedb_radix.reference.events import BlockStored, KVEventBatch

from ..profile import Profile
from .candidates import IndexCandidate, IndexTarget, TwinIndex
from .stream import (
    KIND_RULES,
    KINDS,
    PLAIN_KINDS,
    WORKERS,
    Delivery,
    Prompt,
    Stream,
    Truth,
    Worker,
    deliveries,
    streams,
    wire,
)

#: Examples per round (one round a case) by default.
DEFAULT_EXAMPLES = 500


@dataclass(frozen=True)
class IndexFinding:
    """One difference, on a minimal stream.

    Attributes:
        rules: the rules broken, the first the primary one.
        kind: ``wrong`` (more than the worker holds), ``differs`` (not the oracle's
            depths) or ``raised`` (an event raised).
        detail: what was seen, in one line.
        trace: the minimal stream's deliveries up to the difference, in order.
        cases: the cases (kinds) that stream needs beyond plain stores and removals.
    """

    rules: tuple[str, ...]
    kind: str
    detail: str
    trace: tuple[Delivery, ...]
    cases: tuple[str, ...]

    def explain(self) -> str:
        """The finding as text: its rules, what differs, the trace. O(trace)."""
        lines = [f"{self.rules[0]} ({self.kind}): {self.detail}"]
        if len(self.rules) > 1:
            lines.append(f"  also: {', '.join(self.rules[1:])}")
        lines.append("  the minimal stream:")
        lines.extend(f"    {at}. {delivery.text}" for at, delivery in enumerate(self.trace, 1))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The finding as JSON data. O(trace)."""
        return {
            "rules": list(self.rules),
            "kind": self.kind,
            "detail": self.detail,
            "cases": list(self.cases),
            "trace": [delivery.to_json() for delivery in self.trace],
        }


@dataclass(frozen=True)
class IndexReport:
    """A run of the index level on one target.

    Attributes:
        target: the target's name; implementation: what ran.
        profile: its profile; examples: streams run in all.
        findings: every finding, in the order found.
        cases: each round's case (``plain``: stores and removals alone) -> ``agrees``
            or the primary rule of its finding.
        declared: the R-ROUTE rules the profile declares deviations from, with why.
    """

    target: str
    implementation: str
    profile: Profile
    examples: int
    findings: tuple[IndexFinding, ...]
    cases: dict[str, str]
    declared: dict[str, str] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """``conforms``, ``conforms with declared deviations`` or ``differs``."""
        if self.findings:
            return "differs"
        return "conforms with declared deviations" if self.declared else "conforms"

    @property
    def ok(self) -> bool:
        """Whether it found nothing."""
        return not self.findings

    def explain(self) -> str:
        """The report as text. O(findings x trace)."""
        lines = [
            f"index {self.target} ({self.implementation}), profile {self.profile.name}: "
            f"{self.verdict} ({self.examples} streams, {len(self.cases)} cases)",
            "  " + ", ".join(f"{case}: {result}" for case, result in self.cases.items()),
        ]
        for rule, reason in self.declared.items():
            lines.append(f"  declared {rule}: {reason}")
        for finding in self.findings:
            lines.append(finding.explain())
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON data. O(findings x trace)."""
        return {
            "level": "index",
            "target": self.target,
            "implementation": self.implementation,
            "profile": self.profile.name,
            "verdict": self.verdict,
            "examples": self.examples,
            "cases": dict(self.cases),
            "declared": dict(self.declared),
            "findings": [finding.to_json() for finding in self.findings],
        }


class _Found(Exception):
    """A finding, raised out of a Hypothesis example so that it shrinks."""

    def __init__(self, finding: IndexFinding) -> None:
        super().__init__(finding.detail)
        self.finding = finding


def not_probed(profile: Profile) -> frozenset[str]:
    """The cases a profile's declarations leave undrawn: gaps and restarts when the
    index does not see batch numbers. O(1)."""
    return (
        frozenset({"gap", "restart"})
        if profile.index_mode("sequence") == "not_checked"
        else frozenset()
    )


def run_stream(
    stream: Stream,
    candidate: IndexCandidate,
    profile: Profile,
    disabled: frozenset[str] = frozenset(),
) -> IndexFinding | None:
    """Deliver ``stream`` to ``candidate`` and the oracle, checking after every batch
    (see the module docstring); the first difference, or None. O(stream x queries).
    """
    oracle = _Oracle()
    queries = [(query, query.hashes()) for query in stream.queries()]
    trace: list[Delivery] = []
    for delivery, truth in deliveries(stream, disabled):
        trace.append(delivery)
        raised = _deliver(candidate, delivery)
        _deliver_oracle(oracle, delivery, profile)
        if raised is not None and profile.index_mode("errors") == "silent":
            return _finding("raised", f"{delivery.text}: the index raised {raised}", trace)
        oracle.index.check_invariants()  # the reference's structure after every batch
        try:
            found = _compare(candidate, oracle.index, truth, queries)
        except Exception as exc:  # a candidate's raise is what is checked
            raised = f"{type(exc).__name__}: {exc}"
            detail = f"a query after {delivery.text}: the index raised {raised}"
            return _finding("raised", detail, trace)
        if found is not None:
            return _finding(found[0], found[1], trace)
    return None


def _deliver(candidate: IndexCandidate, delivery: Delivery) -> str | None:
    """Give ``candidate`` the delivery as a subscriber does; the exception text if it
    raised, else None."""
    try:
        if delivery.batch is None or delivery.seq is None:
            candidate.remove_worker(delivery.worker[0])
            return None
        outcome = candidate.apply(delivery.worker, delivery.seq, delivery.batch, delivery.namespace)
        if outcome == "gap":  # the missing batches are not to be had: lost, then again
            candidate.lost(delivery.worker, delivery.seq)
            candidate.apply(delivery.worker, delivery.seq, delivery.batch, delivery.namespace)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _deliver_oracle(oracle: _Oracle, delivery: Delivery, profile: Profile) -> None:
    """Give the oracle the delivery as the profile's declared choices read it."""
    batch = delivery.batch
    if delivery.seq is None or batch is None:
        oracle.index.remove_worker(delivery.worker[0])
        return
    if isinstance(batch, bytes) and profile.index_mode("malformed") == "refused":
        return
    if isinstance(batch, KVEventBatch):
        batch = _as_declared(oracle.index, delivery.worker, batch, profile)
    seq = delivery.seq
    if profile.index_mode("sequence") == "not_checked":  # numbered as it arrives
        seq = oracle.next_seq.get(delivery.worker, 0)
        oracle.next_seq[delivery.worker] = seq + 1
    raised = _deliver(oracle.index, _replace_batch(delivery, batch, seq))
    if raised is not None:  # R-ROUTE-3: the reference never raises on an event
        raise RuntimeError(f"the kit's reference index raised {raised} at {delivery.text}")


@dataclass
class _Oracle:
    """The reference index, and the numbers it expects next where the candidate's
    batches are not numbered for it (``sequence = "not_checked"``)."""

    index: TwinIndex = field(default_factory=lambda: TwinIndex("reference"))
    next_seq: dict[Worker, int] = field(default_factory=dict)


def _as_declared(
    oracle: TwinIndex, worker: Worker, batch: KVEventBatch, profile: Profile
) -> KVEventBatch:
    """``batch`` as an index with the declared choices takes it (module docstring)."""
    events: list[Any] = []
    for event in batch.events:
        if not isinstance(event, BlockStored):
            events.append(event)
            continue
        parent = event.parent_block_hash
        if (
            profile.index_mode("parents") == "dropped"
            and parent is not None
            and not oracle.holds(worker, int(parent))
        ):
            continue
        if profile.index_mode("copies") == "one":
            events.extend(_unheld_runs(oracle, worker, event))
        else:
            events.append(event)
    return KVEventBatch(batch.ts, events, batch.data_parallel_rank)


def _unheld_runs(oracle: TwinIndex, worker: Worker, stored: BlockStored) -> Iterator[BlockStored]:
    """The runs of ``stored``'s blocks the oracle does not hold, each a store of its
    own under the block before it: one entry per block, never a second copy."""
    size = stored.block_size
    hashes = [int(h) for h in stored.block_hashes]
    parent = stored.parent_block_hash
    run: list[int] = []
    first = 0
    for at, block_hash in enumerate([*hashes, None]):
        if block_hash is not None and not oracle.holds(worker, block_hash):
            if not run:
                first, parent = at, (hashes[at - 1] if at else stored.parent_block_hash)
            run.append(block_hash)
            continue
        if run:
            tokens = list(stored.token_ids)[first * size : (first + len(run)) * size]
            yield BlockStored(
                wire(run), parent, tokens, size, stored.lora_id, stored.medium, stored.lora_name
            )
            run = []


def _replace_batch(delivery: Delivery, batch: KVEventBatch | bytes, seq: int) -> Delivery:
    return Delivery(
        delivery.text, delivery.worker, seq, batch, delivery.namespace,
        delivery.kinds, delivery.parent, delivery.operation,
    )  # fmt: skip


def _compare(
    candidate: IndexCandidate,
    oracle: TwinIndex,
    truth: Truth,
    queries: Sequence[tuple[Prompt, list[int]]],
) -> tuple[str, str] | None:
    """The first (kind, detail) in which the candidate's depths are wrong or differ."""
    for query, hashes in queries:
        actual = candidate.depths(query.tokens, query.namespace, hashes)
        expected = oracle.depths(query.tokens, query.namespace, hashes)
        for worker in WORKERS:
            true_depth = truth.depth(worker, hashes)
            got = actual.get(worker, 0)
            if got > true_depth:
                return "wrong", (
                    f"query {query}: worker {worker} matched at depth {got}, but its cache "
                    f"holds {true_depth} of those blocks (the reference index: "
                    f"{expected.get(worker, 0)})"
                )
        if {w: d for w, d in actual.items() if d} != expected:
            worker = next(w for w in WORKERS if actual.get(w, 0) != expected.get(w, 0))
            return "differs", (
                f"query {query}: worker {worker} at depth {actual.get(worker, 0)}, the "
                f"reference index {expected.get(worker, 0)} (its cache holds "
                f"{truth.depth(worker, hashes)})"
            )
    return None


def _finding(kind: str, detail: str, trace: list[Delivery]) -> IndexFinding:
    cases = tuple(k for k in KINDS if k not in PLAIN_KINDS and any(k in d.kinds for d in trace))
    rules: list[str] = {"wrong": ["R-ROUTE-2"], "raised": ["R-ROUTE-3"]}.get(kind, [])
    for case in cases:
        rules.extend(KIND_RULES[case])
    rules.append("R-ROUTE-4")
    return IndexFinding(tuple(dict.fromkeys(rules)), kind, detail, tuple(trace), cases)


def search(
    target: IndexTarget, case: str | None, examples: int, seed: int
) -> tuple[IndexFinding | None, int]:
    """One round: up to ``examples`` streams of plain stores and removals and, unless
    ``case`` is None, that case too; the first finding that needs ``case`` (any, for
    None), shrunk, or None, and how many streams ran. O(examples x stream).
    """
    disabled = frozenset(KINDS) - PLAIN_KINDS - ({case} if case else set())
    ran = 0

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=False,
        phases=(Phase.generate, Phase.shrink),
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(stream=streams(frozenset(KINDS) - disabled))
    def probe(stream: Stream) -> None:
        nonlocal ran
        ran += 1
        found = run_stream(stream, target.open(), target.profile, disabled)
        if found is None or (case is not None and case not in found.cases):
            return
        # A case's finding must need the case: the same stream without it agrees.
        if (
            case is None
            or run_stream(stream, target.open(), target.profile, disabled | {case}) is None
        ):
            raise _Found(found)

    try:
        with _quiet():
            hypothesis_seed(seed)(probe)()
    except _Found as exc:
        return exc.finding, ran
    return None, ran


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Hypothesis's shrinking report and a peer's own log lines (Dynamo's are written
    to the process's stderr by its Rust core) kept off the output."""
    logging.disable(logging.CRITICAL)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), 2)
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        logging.disable(logging.NOTSET)


def check_index(
    target: IndexTarget, *, examples: int = DEFAULT_EXAMPLES, seed: int = 0
) -> IndexReport:
    """Run the index level on ``target``: a round of plain stores and removals, then a
    round for each case the profile leaves drawn (:func:`search`), each reporting the
    first difference that needs its case. O(cases x examples x stream).

    Raises:
        ValueError: ``examples`` below 1 (a run that checks nothing).
    """
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise ValueError(f"an index run needs examples >= 1, got {examples!r}")
    undrawn = not_probed(target.profile)
    cases: list[str | None] = [None, *(k for k in KINDS if k not in PLAIN_KINDS | undrawn)]
    findings: list[IndexFinding] = []
    results: dict[str, str] = {}
    total = 0
    implementation = target.open().implementation
    for at, case in enumerate(cases):
        # The plain round gets twice the streams: its differences need the longest ones.
        found, ran = search(target, case, examples * (2 if case is None else 1), seed + at)
        total += ran
        results[case or "plain"] = "agrees" if found is None else found.rules[0]
        if found is not None:
            findings.append(found)
    declared = target.profile.index_deviations()
    return IndexReport(
        target.name, implementation, target.profile, total, tuple(findings), results, declared
    )


__all__ = ["IndexFinding", "IndexReport", "check_index", "run_stream", "search"]
