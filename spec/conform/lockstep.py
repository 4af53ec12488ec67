"""Lockstep execution: apply each step to a candidate and the reference, check, compare.

:class:`Lockstep` is the kit's core, used by the search (:mod:`kachedb_radix.spec.conform.search`),
the shrinker (:mod:`kachedb_radix.spec.conform.shrink`), ``replay`` and ``explain``
(:meth:`Lockstep.observe`, which goes on past a finding). Per step it

1. asks the candidate (first, so the oracle can follow its admissible choices);
2. runs the policy-free safety check on the candidate's answer
   (:mod:`kachedb_radix.spec.conform.safety`);
3. asks the oracle (:mod:`kachedb_radix.spec.conform.oracle`), adopting the candidate's
   evictions and allocations where the profile tolerates another policy
   (:mod:`kachedb_radix.spec.conform.profile`);
4. compares the two outcomes, reduced to the levels and the profile;
5. compares the read-only views a step can have changed, as its row says
   (:attr:`~kachedb_radix.spec.conform.operations.Operation.changes`; every view after a
   failed call, which must have changed nothing): the stats after a step that changes
   the counters, the namespaces after one that changes them, the dump after every such
   step while the tree is small, else every few steps (more apart as the tree grows),
   after a failed call, a fill and at the end; at the ``snapshots`` level, with each
   dump and after a new snapshot, the dumps of the latest snapshots, so a snapshot that
   changes after it was taken is caught: at the write that changed it in a small tree,
   a few steps later in a large one;
6. at the ``events`` level (when the reset named a hash scheme), first of the reads
   after every step, takes both sides' KV event batches and compares them, feeds the
   candidate's to the kit's own router index, checks that index against each dump of
   the candidate, and at the end of a trace replays the stream with faults injected
   (:mod:`kachedb_radix.spec.conform.events`).

A read is compared first as it was answered, type for type (:func:`strictly_equal`, at
C speed): a view equal to the reference's is as well formed as the reference's, so its
policy-free structure check is not repeated. Only a view that differs is taken through
JSON (what is not JSON data is refused as such), checked and compared field by field.
The reference's snapshot dumps are kept per handle: a published version never
changes (R-SNAP-2).

Anything wrong raises :class:`Disagreement` carrying a :class:`Difference`: the trace up to and
including the offending step, both outcomes, and the rules it breaks with a likely cause
(:mod:`kachedb_radix.spec.conform.rulemap`). The rules each step exercised accumulate in
:attr:`Lockstep.exercised`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kachedb_radix.reference.errors import RadixError
from kachedb_radix.reference.namespaces import check_namespace
from kachedb_radix.reference.tokens import as_token_list

from . import events as kit_events
from .adapter import TreeAdapter
from .candidate import Candidate, CandidateFailure
from .errors import KitError
from .levels import EVENTS, EVICTION, SNAPSHOTS
from .operations import (
    BY_NAME,
    COUNTERS,
    ENDS_EPOCH,
    ENDS_LEASE,
    ENDS_READER,
    EVERYTHING,
    LEASE,
    SHAPE,
    SHAPE_STATE,
    SNAPSHOT,
    SNAPSHOT_SHAPE,
    SNAPSHOTS_STATE,
    STREAM,
    VIEWS,
    Operation,
    offered,
)
from .oracle import FollowingTree, Inadmissible, OracleAdapter, TieredOracle
from .profile import STRICT, Profile
from .rulemap import (
    Attribution,
    ExerciseEntry,
    Observation,
    attribute,
    exercised,
    safety_attribution,
)
from .safety import SafetyMonitor, SafetyViolation
from .steps import (
    LeaseBook,
    Outcome,
    Step,
    StepError,
    apply_step,
    as_json,
    describe,
    encoded,
    normalise,
    strictly_equal,
)

#: Kinds of finding: a differing answer, a broken safety property, a choice no
#: declared mode allows, and a candidate that could not answer at all.
FINDING_KINDS = ("disagreement", "safety", "inadmissible", "failure")


@dataclass
class Difference:
    """Where and how a candidate went wrong (a finding).

    Attributes:
        index: position of the offending step in ``trace`` (0-based).
        trace: the steps run, each with the reference's outcome as ``"expect"``; the
            last one is the offending step and also carries ``"actual"``.
        expected: the reference's outcome at that step (after normalisation).
        actual: the candidate's outcome.
        reference: the reference's name.
        candidate: the candidate's name.
        levels: the levels compared.
        kind: one of :data:`FINDING_KINDS`.
        rules: the rules it breaks, the primary first (:mod:`kachedb_radix.spec.conform.rulemap`).
        cause: a one-line likely cause.
        peer_note: the primary rule's peer note in SPEC.md.
        where: the step record's path to what differs (:attr:`StepRecord.where`:
            ``outcome...``, ``dump...``, ``stats...`` or ``events...``), set by the
            lockstep that judged the step.
    """

    index: int
    trace: list[Step]
    expected: Outcome
    actual: Outcome
    reference: str
    candidate: str
    levels: list[str] = field(default_factory=list)
    kind: str = "disagreement"
    rules: tuple[str, ...] = ()
    cause: str = ""
    peer_note: str = ""
    where: str | None = None

    @property
    def rule(self) -> str:
        """The primary rule ("" when unattributed)."""
        return self.rules[0] if self.rules else ""

    def trace_lines(self) -> list[str]:
        """The trace as JSON lines. O(size of the trace)."""
        return [json.dumps(step, separators=(", ", ": ")) for step in self.trace]

    def headline(self) -> str:
        """``R-X-n (R-Y-m): cause`` in one line."""
        more = f" ({', '.join(self.rules[1:])})" if len(self.rules) > 1 else ""
        return f"{self.rule or '?'}{more}: {self.cause}"

    def explain(self) -> str:
        """A human report: the rules, the offending step and both answers, the trace."""
        step = self.trace[self.index]
        what = {
            "safety": "breaks a safety property",
            "inadmissible": "makes a choice no declared mode allows",
            "failure": "fails",
        }.get(self.kind, "disagrees with " + self.reference)
        lines = [
            f"{self.candidate} {what} at step {self.index + 1} of {len(self.trace)}: "
            f"{describe(step)}",
            f"  {self.headline()}",
        ]
        if self.peer_note:
            lines.append(f"  peers: {self.peer_note}")
        if self.where is not None:
            lines.append(f"  differs at: {self.where}")
        lines += [
            f"  {self.reference}: {json.dumps(self.expected)}",
            f"  {self.candidate}: {json.dumps(self.actual)}",
        ]
        lines.extend(_diff_hint(self.expected, self.actual))
        lines.append("trace (JSON lines; replay with `kachedb-radix replay FILE --target ...`):")
        lines.extend(self.trace_lines())
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """The finding as JSON data (``#/$defs/finding`` of ``report.schema.json``)."""
        return {
            "rule": self.rule,
            "rules": list(self.rules),
            "kind": self.kind,
            "cause": self.cause,
            "peer_note": self.peer_note,
            "step": self.index + 1,
            "reference": self.reference,
            "expected": self.expected,
            "actual": self.actual,
            "trace": self.trace,
            **({} if self.where is None else {"where": self.where}),
        }


@dataclass
class Own:
    """The spec's own answer to a step where the kit adopted the candidate's choice and
    the spec chooses otherwise (worked out on a copy of the reference before the step).

    Attributes:
        outcome: the spec's outcome (its lease handle the kit's).
        dump: the reference's dump after it, had it chosen itself.
        stats: its stats likewise.
        events: the batch it would have emitted (None when events are off).
        declared: each declared rule the difference falls under, with the profile's
            reason (:func:`declared_rules`).
    """

    outcome: Outcome
    dump: dict[str, Any] | None
    stats: dict[str, Any] | None
    events: Outcome | None
    declared: list[tuple[str, str]]


@dataclass
class StepRecord:
    """One step as the lockstep judged it (:meth:`Lockstep.observe`): the record ``explain``,
    ``replay`` and the report read, so none judges a step on its own.

    Attributes:
        step: the step.
        expected: the reference's outcome as it answered (adopting the candidate's
            admissible choice where the profile says; the spec's own otherwise).
        actual: the candidate's outcome, its error names mapped by the profile.
        finding: what the kit found at this step, if anything.
        note: ``"adopted NAME's choice"`` when the reference followed the candidate,
            ``"not adopted: ..."`` for an inadmissible choice.
        reference: the reference's ``dump`` and ``stats`` after the step.
        candidate: the candidate's ``dump`` and ``stats`` after the step (None for a
            read it refused).
        adopted: the reference followed the candidate's choice at this step.
        own: with :meth:`Lockstep.observe`'s ``own``, where the kit adopted the
            candidate's choice and the spec's own differs: the spec's (:class:`Own`).
        where: the finding's path into the step's views: ``outcome...`` for the step's
            own answer, ``dump...``, ``stats...`` or ``events...`` for a read after it.
        recency_only: the finding is a difference in recency alone (stamps, the clock):
            outcomes and states equal once those are left out.
    """

    step: Step
    expected: Outcome
    actual: Outcome
    finding: Difference | None
    note: str | None
    reference: dict[str, Any]
    candidate: dict[str, Any]
    adopted: bool = False
    own: Own | None = None
    where: str | None = None
    recency_only: bool = False


def waived(finding: Difference, profile: Profile) -> str | None:
    """Why ``profile`` waives ``finding`` (the reason of the rule it is attributed to), or
    None: only a plain difference is waived, by its primary rule's declared deviation;
    a safety finding, an inadmissible choice or a failure never is. O(rules)."""
    if finding.kind != "disagreement":
        return None
    return profile.deviations().get(finding.rule)


class Disagreement(AssertionError):
    """The candidate went wrong: a semantic finding (see :class:`Difference`), with the
    :class:`StepRecord` of the step that found it once :meth:`Lockstep.step` has made
    it (None while the lockstep is still judging)."""

    def __init__(self, difference: Difference, record: StepRecord | None = None) -> None:
        super().__init__(difference.explain())
        self.difference = difference
        self.record = record


#: How many of the latest snapshots are dumped and compared with each dump.
WATCHED = 2

#: The dump is compared after every step that changes the shape while the oracle
#: caches at most this many blocks; beyond, every ``max(DUMP_EVERY, cached // 32)``
#: steps, after a failed call, after a fill and at the end of a trace (stats and
#: namespaces after every step that changes them).
SMALL_TREE = 96
DUMP_EVERY = 4


def reference_oracle() -> TreeAdapter:
    """The reference implementation, as the oracle every candidate is compared with."""
    return OracleAdapter()


def copy_reference(oracle: TreeAdapter) -> TreeAdapter:
    """A throwaway copy of the oracle for a dry run, made with ``RadixTree.clone()``.

    Cost: O(pool + nodes + leases + readers); the shape is shared, not copied.
    """
    tree = oracle.tree.clone()
    trial = TreeAdapter(lambda _blocks, _size: tree, oracle.name)
    trial.reset(tree.num_blocks, tree.block_size)  # adopts the clone
    return trial


def as_taken(step: Step, profile: Profile) -> tuple[Step, Outcome | None]:
    """``step`` as the candidate's engine takes it, by its profile's declared inputs: a
    namespace folded into another, a match that leaves the last token (``match_cap``);
    or the refusal the engine gives without looking further: ``token_range`` for a token
    at or above its ``token_limit`` (tokens are checked first, R-TOK-5). O(tokens).

    Only well-formed token lists are changed or refused here; anything else is left to
    the reference's own checks.
    """
    row = BY_NAME[step["op"]]
    if not row.prompts or profile.strict:
        return step, None
    taken = dict(step)
    tokens = step.get("tokens")
    if isinstance(tokens, list) and all(_token(token) for token in tokens):
        if any(token >= profile.token_limit for token in tokens):
            return step, {"error": "token_range"}
        if profile.match_cap == "last_token" and row.capped and tokens:
            taken["tokens"] = tokens[:-1]
    if "namespace" in step:
        taken["namespace"] = profile.fold_namespace(step["namespace"])
    return taken, None


def _token(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32


def adopting_outcome(
    oracle: Candidate,
    book: LeaseBook,
    step: Step,
    actual: Outcome,
    profile: Profile,
    *,
    adopt: bool = True,
) -> Outcome | None:
    """The oracle's outcome of ``step`` when it adopts the candidate's choice, or None
    when there is nothing to adopt (an operation that frees and hands out no blocks, a
    strict mode, a refusal, an answer without usable choices, an oracle that cannot
    follow): the caller then applies the step as usual.

    One way for every oracle, adopt then apply: the oracle's tree is told the
    candidate's answer (``adopting``; the row says which fields hold the blocks it freed
    and the ids it handed out), the step is applied through the table, and under
    ``profile``'s eviction or allocation tolerance the tree evicts the blocks the
    candidate evicted and hands out the ids it allocated (``actual``), after checking
    the choice is admissible (:mod:`kachedb_radix.spec.conform.oracle`, in every tier at
    the ``tiers`` level). The blocks freed are then shown in the candidate's order (a
    whole node's blocks go in any order). Without ``adopt`` (the candidate's answer is
    already a finding: nothing of it is adopted) the oracle chooses as the spec does,
    its inputs still taken as the profile declares (``match_cap``). Cost: the call on
    the oracle.

    Raises:
        spec.oracle.Inadmissible: the candidate's choice is one no declared mode allows
            (its ``outcome`` set when the call was carried out the spec's way first).
    """
    row, answer = BY_NAME[step["op"]], actual.get("ok")
    tree = oracle.tree if isinstance(oracle, OracleAdapter) else None
    if not isinstance(tree, FollowingTree | TieredOracle) or not isinstance(answer, dict):
        return None
    if not row.adopts:
        return None
    if not _to_adopt(row, answer, profile, adopt, recomputes=isinstance(tree, FollowingTree)):
        return None
    tree.adopting(
        row,
        answer,
        profile,
        frees=adopt and profile.adopts_eviction,
        allocates=adopt and profile.adopts_allocation,
    )
    try:
        outcome = apply_step(oracle, step, book)
    finally:
        refused = tree.refused
        tree.adopting(None)
    if refused is not None:
        if refused.result is not None:
            refused.outcome = outcome  # carried out the spec's way: that outcome stands
        raise refused
    theirs = _ids(answer.get(row.frees)) if row.frees is not None else None
    adopted = outcome.get("ok")
    if adopt and profile.adopts_eviction and theirs is not None and isinstance(adopted, dict):
        mine = adopted.get(row.frees)
        if isinstance(mine, list) and sorted(mine) == sorted(theirs):
            outcome = {"ok": {**adopted, row.frees: theirs}}
    return outcome


def _to_adopt(
    row: Operation, answer: dict[str, Any], profile: Profile, adopt: bool, *, recomputes: bool
) -> bool:
    """Whether the oracle has anything to follow in ``answer``: blocks freed or ids handed
    out that the profile tolerates another choice of (with tiers, the moves hand out ids
    in the slower tiers and the blocks dropped or moved on down are their victims), or
    (``recomputes``: the plain oracle, under ``match_cap``) a call handing out blocks,
    which may have to evict for the recomputed last block (R-INS-5). O(answer)."""
    if recomputes and profile.match_cap != "none" and row.allocates is not None:
        return True
    if not adopt:
        return False
    moves = [name for name in (*row.moves, *row.moves_after) if isinstance(answer.get(name), list)]
    dropped = row.dropped is not None and isinstance(answer.get(row.dropped), list)
    frees = _ids(answer.get(row.frees or "")) is not None or dropped or bool(moves)
    allocates = isinstance(answer.get(row.allocates or ""), list) or bool(moves)
    return (profile.adopts_eviction and frees) or (profile.adopts_allocation and allocates)


class Lockstep:
    """Drives ``candidate`` and the reference side by side.

    Args:
        candidate: the implementation under test.
        levels: the levels compared (outcomes are normalised to them).
        profile: the candidate's declared deviations (default: none).
        check_reads: compare dump, stats and namespaces after steps.
        oracle: the reference (default: a fresh
            :class:`kachedb_radix.spec.conform.oracle.OracleAdapter`).
        exercised: the set the rules each step exercises are added to (default: a
            new one; a search shares one across its examples).
    """

    def __init__(
        self,
        candidate: Candidate,
        levels: frozenset[str],
        *,
        profile: Profile = STRICT,
        check_reads: bool = True,
        oracle: TreeAdapter | None = None,
        exercised: set[str] | None = None,
    ) -> None:
        self.candidate = candidate
        self.offered = offered(candidate)
        self.oracle = oracle if oracle is not None else reference_oracle()
        self.levels = levels
        self.profile = profile
        self.check_reads = check_reads
        self.trace: list[Step] = []
        self.exercised: set[str] = set() if exercised is None else exercised
        self._exercising: dict[str, list[ExerciseEntry]] = {}  # entries not yet done
        self.safety = SafetyMonitor(profile.fold_namespace)
        self._oracle_book = LeaseBook()
        self._candidate_book = LeaseBook()
        # The candidate's last answer to each view, while the state it shows is unchanged
        # since (the state just before the next step, for the failed-call check).
        self._fresh: dict[str, Any] = {}
        # What changed since its view was last compared (read after the next step).
        self._dirty: set[str] = set(EVERYTHING)
        # The reference's snapshot dumps by handle: a published version never changes.
        self._oracle_snapshots: dict[Any, tuple[Outcome, bytes | None]] = {}
        self._pending: tuple[Step, dict[str, Any], bool] | None = None
        self._split_pending = False
        self._last: tuple[Step, dict[str, Any]] | None = None
        self._last_change: Step | None = None  # the last step that was not a read
        self._steps = 0
        self._outcomes: tuple[Outcome, Outcome] = ({"ok": None}, {"ok": None})
        self._note: str | None = None
        self._adopted = False  # the reference followed the candidate at the step observed
        self._own_facts: dict[str, Any] = {}
        self.evicted = 0
        self.live: list[int] = []
        self.inside: list[int] = []
        self.left: list[int] = []
        self.dropped: list[int] = []
        self._events: kit_events.EventStream | None = None  # the events level, once reset
        self.tier_names: tuple[str, ...] = ("device",)  # the tiers the last reset named

    @property
    def issued(self) -> int:
        """Lease handles issued since the last reset. O(1)."""
        return self._oracle_book.issued

    @property
    def snapshots(self) -> int:
        """Snapshot (and reader) handles issued since the last reset. O(1)."""
        return self._oracle_book.snapshots

    @property
    def steps_run(self) -> int:
        """Steps run since the last reset (reads not counted). O(1)."""
        return self._steps

    @property
    def tree(self) -> Any:
        """The oracle's reference tree (None before the first reset)."""
        return self.oracle.tree

    def run(self, step: Step) -> Outcome:
        """:meth:`step`, raising at its finding: the reference's outcome. For a caller
        that stops at the first finding (the search, the shrinker, vectors). Cost:
        :meth:`step`'s.

        Raises:
            Disagreement: the step's finding (difference, safety, inadmissible choice),
                carrying its :class:`StepRecord`.
            CandidateFailure: the candidate could not answer (with step and trace).
            StepError: ``step`` is no call of an operation (nothing was run).
            KitError: the kit itself raised (a bug of the kit: nothing was judged).
        """
        record = self.step(step)
        if record.finding is not None:
            raise Disagreement(record.finding, record)
        return record.expected

    @contextlib.contextmanager
    def _kit_errors(self, step: Step | None) -> Iterator[None]:
        """Let findings, failures and malformed steps through; anything else raised in
        the body is the kit's own bug: a :class:`~kachedb_radix.spec.conform.errors.KitError`
        carrying the trace up to ``step``."""
        before = len(self.trace)
        try:
            yield
        except (Disagreement, CandidateFailure, StepError, KitError):
            raise
        except Exception as exc:
            trace = list(self.trace)
            if step is not None and len(trace) == before:
                trace.append(dict(step))
            raise KitError.of(exc, trace) from exc

    def _run(self, step: Step) -> Outcome:
        row = BY_NAME[step["op"]]
        tree = self.oracle.tree
        batch = bool(step.get("batch")) and tree is not None and tree.stats().cached > SMALL_TREE
        if not batch:
            self.finish()
        facts = self._facts(step)
        actual = self._candidate_outcome(step)
        expected = self._checked_step(step, actual, facts)
        recorded = {**step, "expect": expected}
        if row.view is None:
            self._last_change = recorded
        if row.resets:
            self.live, self.inside, self.left, self.dropped = [], [], [], []
            self._fresh, self._dirty, self._steps = {}, set(EVERYTHING), 0
            self._oracle_snapshots = {}
            self._reset_events(step, "ok" in expected)
            self.tier_names = _tier_names(step)
        elif "ok" in expected:
            self._follow(step, expected["ok"])
        self._steps += 1
        if batch:
            self._pending = (recorded, facts, "error" in actual)
            self._changed(row.changes)  # read once the fill ends
        elif self.check_reads:
            self._reads(recorded, facts, failed="error" in actual)
        return expected

    def step(
        self, step: Step, *, reads: bool = False, own: bool = False, events: bool = False
    ) -> StepRecord:
        """Judge ``step``: run it on both, check and compare, then the read-only views;
        its :class:`StepRecord`. The kit's one judging entry for a step: :meth:`run`
        (the search, the shrinker), :meth:`observe` (explain) and ``replay`` all go
        through it, so no two of them can judge a step differently (:meth:`finish`
        judges only the reads a fill deferred). A step carrying ``"batch": true``
        (part of a fill) in a tree of more than :data:`SMALL_TREE` blocks defers its
        reads to the next step outside the batch (or :meth:`finish`), so a large fill
        costs one dump comparison. With ``reads`` the record carries both sides' dump
        and stats after the step (a finding's record always does); with ``own``, where
        the kit adopts the candidate's choice, the spec's own answer too (:class:`Own`;
        with ``events`` its event batch). The state after a finding is what both
        implementations did: later steps are still run and compared. Cost: the two
        calls, plus up to three reads each (and ``WATCHED`` snapshot dumps at the
        ``snapshots`` level); two reads on each side with ``reads``; the step on a copy
        of the reference with ``own``.

        Raises:
            CandidateFailure: the candidate could not answer (with step and trace).
            StepError: ``step`` is no call of an operation (nothing was run).
            KitError: the kit itself raised (a bug of the kit: nothing was judged).
        """
        self._note, self._adopted = None, False
        finding = None
        with self._kit_errors(step):  # one guard: a kit error names the step either way
            spec = self._spec_own(step, events=events) if own else None
            try:
                self._run(step)
            except Disagreement as exc:
                finding = exc.difference
            record = self._record(step, finding, reads=reads or finding is not None)
            if spec is not None and record.adopted and finding is None:
                record.own = self._declared(record, spec)
        return record

    def observe(self, step: Step, *, own: bool = False, events: bool = False) -> StepRecord:
        """:meth:`step` with both sides' reads in its record (for ``explain``, which
        shows every step). Cost: :meth:`step`'s, plus two reads on each side.

        Raises:
            CandidateFailure: the candidate could not answer (with step and trace).
            StepError: ``step`` is no call of an operation.
            KitError: the kit itself raised.
        """
        return self.step(step, reads=True, own=own, events=events)

    def _record(self, step: Step, finding: Difference | None, *, reads: bool) -> StepRecord:
        expected, actual = self._outcomes
        names = (SHAPE.name, COUNTERS.name) if reads else ()
        reference = {
            read: apply_step(self.oracle, {"op": read}, self._oracle_book).get("ok")
            for read in names
        }
        candidate = {
            read: apply_step(self.candidate, {"op": read}, self._candidate_book).get("ok")
            for read in names
        }
        record = StepRecord(step, expected, actual, finding, self._note, reference, candidate)
        record.adopted = self._adopted
        if finding is not None:
            record.where = finding.where = _where(step, finding)
            record.recency_only = finding.kind == "disagreement" and self._recency_only(record)
        return record

    def _spec_own(self, step: Step, *, events: bool) -> Own | None:
        """What the spec itself answers to ``step`` (the engine's inputs, as the kit takes
        them), worked out on a copy of the reference before the kit runs the step: only
        for a step whose choice the profile lets the kit adopt. Cost: the copy,
        O(pool + nodes + leases + readers), and the step on it."""
        row, profile = BY_NAME[step["op"]], self.profile
        tree = self.oracle.tree
        if not row.adopts or not (profile.adopts_eviction or profile.adopts_allocation):
            return None
        if not isinstance(tree, FollowingTree):
            return None  # the tiered oracle: no copy to work on
        taken, refused = as_taken(step, profile)
        if refused is not None:
            return None
        trial = copy_reference(self.oracle)
        facts = trial.tree.facts()
        book = LeaseBook()
        outcome = apply_step(trial, taken, book)
        dump = apply_step(trial, {"op": SHAPE.name}, book).get("ok")
        stats = apply_step(trial, {"op": COUNTERS.name}, book).get("ok")
        # The copy's event recorder is the reference's, drained at the last read: what it
        # emits now is the spec's own batch for the step.
        emitted = apply_step(trial, {"op": STREAM.name}, book) if events else None
        own = Own(outcome, _plain_dict(dump), _plain_dict(stats), emitted, [])
        self._own_facts = facts
        return own

    def _declared(self, record: StepRecord, own: Own) -> Own | None:
        """``own`` with the declared rules its difference from the candidate's answer
        falls under; None (and no note) when the spec chose as the candidate did."""
        op, levels, recency = record.step["op"], self.levels, self.profile.compares_recency
        mine = dict(own.outcome)
        answer, adopted = mine.get("ok"), record.expected.get("ok")
        if isinstance(answer, dict) and isinstance(adopted, dict) and LEASE in answer:
            # The copy files its own lease handles: the step's handle is the kit's.
            mine["ok"] = {**answer, LEASE: adopted.get(LEASE)}
        if normalise(op, mine, levels, recency=recency) == normalise(
            op, record.expected, levels, recency=recency
        ):
            record.note = None  # the spec chose as the candidate did: nothing to adopt
            record.adopted = False
            return None
        own.outcome = mine
        own.declared = declared_rules(
            record.step, mine, record.actual, self.profile, levels, self._own_facts
        )
        return own

    def _recency_only(self, record: StepRecord) -> bool:
        """Whether the two sides differ in recency alone (stamps, the clock): outcome,
        dump and stats equal once those are left out; a finding in the events, only in a
        batch's timestamp. O(state)."""
        if record.where is not None and record.where.startswith(STREAM.name):
            return record.where.endswith(".ts")
        mine, theirs = record.reference, record.candidate
        if mine.get(SHAPE.name) is None or theirs.get(SHAPE.name) is None:
            return False
        op, levels = record.step["op"], self.levels

        def same(read: str, left: Any, right: Any) -> bool:
            plain = [normalise(read, {"ok": v}, levels, recency=False) for v in (left, right)]
            return plain[0] == plain[1]

        return (
            normalise(op, record.expected, levels, recency=False)
            == normalise(op, record.actual, levels, recency=False)
            and same(SHAPE.name, mine[SHAPE.name], theirs[SHAPE.name])
            and same(COUNTERS.name, mine.get(COUNTERS.name), theirs.get(COUNTERS.name))
        )

    def reference_only(self, step: Step) -> Outcome:
        """Apply ``step`` to the reference alone (after the candidate failed): its
        outcome. O(the call)."""
        return apply_step(self.oracle, step, self._oracle_book)

    def finish(self, *, final: bool = False) -> None:
        """Compare the reads a run of ``batch`` steps (a fill) deferred. Called before
        the next step that is not part of the batch; call it with ``final`` at the end
        of a trace, which also compares the dump if the last reads skipped it.

        Raises:
            Disagreement: a finding in the deferred reads.
            KitError: the kit itself raised.
        """
        with self._kit_errors(None):
            self._finish(final)

    def _finish(self, final: bool) -> None:
        pending, self._pending = self._pending, None
        if pending is not None and self.check_reads:
            step, facts, failed = pending
            self._reads(step, facts, failed=failed)
        elif final and self.check_reads and self._last is not None:
            step, facts = self._last
            if SHAPE_STATE in self._dirty:
                self._fresh[SHAPE.name] = self._read({"op": SHAPE.name}, step, facts)
                self._dirty.discard(SHAPE_STATE)
            if SNAPSHOTS_STATE in self._dirty:
                self._snapshot_reads(step, facts)
        stream = self._events
        if final and self.check_reads and stream is not None and self._last is not None:
            step, facts = self._last
            dump = self._candidate_read(SHAPE)
            self._events_safety(lambda: stream.check_recovery(dump), step)
            self.exercised.update(("R-ROUTE-1", "R-ROUTE-2", "R-ROUTE-4"))

    def would_evict(self, step: Step) -> bool:
        """Whether the reference would evict to run this insert. O(tokens).

        When the new blocks fit in the free pool (a match on the published version says
        how many are new) it does not; otherwise the answer is a dry run on a copy of
        the reference (which also decides whether a quarantine reclaimed is enough).
        Cost: O(tokens), or the copy's O(pool + nodes + leases + readers).
        """
        tree, tokens = self._following(), step.get("tokens")
        if tree is None:
            return False
        namespace = step.get("namespace")
        try:
            token_list = as_token_list(tokens)
            check_namespace(namespace)
        except RadixError:
            return False  # refused before anything: no eviction
        wanted = len(token_list) // tree.block_size
        reused = tree.snapshot().match(token_list, namespace).length // tree.block_size
        if wanted - reused <= tree.stats().free:
            return False  # room without evicting (the published version is the tree's)
        # A dry run on a copy of the tree (a tiered oracle's device tree: only the device
        # evicts to make room, R-TIER-3).
        try:
            done = tree.clone().insert(
                token_list,
                namespace,
                priority=step.get("priority"),
                retain_for=step.get("retain_for"),
            )
        except RadixError:
            return False
        return bool(done.evicted)

    # ------------------------------------------------------------------ internals

    def _following(self) -> FollowingTree | None:
        """The oracle's tree that states facts: the tree, or a tiered oracle's device tree."""
        tree = self.oracle.tree
        if isinstance(getattr(tree, "tiers", None), tuple):
            tree = tree.tree("device")
        return tree if isinstance(tree, FollowingTree) else None

    def _facts(self, step: Step) -> dict[str, Any]:
        tree = self._following()
        if BY_NAME[step["op"]].resets or tree is None:
            return {"block_size": step.get("block_size", 1)}
        tree.split_seen = False
        return tree.facts()

    def _candidate_outcome(self, step: Step) -> Outcome:
        try:
            raw = apply_step(self.candidate, step, self._candidate_book, foreign=True)
        except CandidateFailure as failure:
            self.trace.append(dict(step))
            failure.step = len(self.trace)
            failure.trace = list(self.trace)
            raise
        if "error" in raw:
            raw = {"error": self.profile.map_kind(raw["error"])}
        return raw

    def _checked_step(
        self, step: Step, actual: Outcome, facts: dict[str, Any], *, previous: Step | None = None
    ) -> Outcome:
        """Safety, oracle, comparison for one step; record it when it agrees.

        A read is compared first as answered (:func:`strictly_equal`): equal to the
        reference's, it passes without its policy-free check (the reference's answer is
        well formed) unless that check learns from it (a dump at the ``tiers`` level,
        whose slots' labels it follows). Otherwise it is taken through JSON
        (:func:`as_json`) and checked as any answer."""
        op = step["op"]
        row = BY_NAME[op]
        read = self._oracle_read(step) if row.reads else None
        if read is not None:
            if self.safety.pure(row) and strictly_equal(read[0], actual, read[1]):
                if previous is None:
                    self._outcomes = (read[0], actual)
                expected = self._normalised(op, read[0])
                return self._agreed(step, row, expected, expected, facts, previous)
            actual = as_json(actual, op)
        try:
            self.safety.check(step, actual)
        except SafetyViolation as violation:
            expected = (
                read[0] if read is not None else self._oracle_outcome(step, actual, adopt=False)
            )
            if previous is None:
                self._outcomes = (expected, actual)
            found = safety_attribution(violation.prop, violation.detail)
            raise self._finding("safety", step, expected, actual, found) from None
        try:
            expected = (
                read[0] if read is not None else self._oracle_outcome(step, actual, adopt=True)
            )
        except Inadmissible as exc:
            # The reference does what the spec does instead (unless the refused choice
            # came to light only after the call, when it already did: its outcome).
            plain = exc.outcome
            if plain is None:
                plain = apply_step(self.oracle, step, self._oracle_book)
            if previous is None:
                self._outcomes = (plain, actual)
            self._note = f"not adopted: {exc.cause}"
            found = Attribution(exc.rules, exc.cause + self._modes_note(), "")
            raise self._finding("inadmissible", step, plain, actual, found) from None
        if previous is None:
            self._outcomes = (expected, actual)
        expected, compared = self._normalised(op, expected), self._normalised(op, actual)
        path = first_difference(expected, compared, "")
        if path is None:
            return self._agreed(step, row, expected, compared, facts, previous)
        self._split_facts(row, facts)
        observation = Observation(
            step, expected, compared, path, self._after(row, previous), self.levels, facts
        )
        if previous is None and not row.resets:
            self._accounting_first(step, expected, actual)
        raise self._finding("disagreement", step, expected, compared, attribute(observation))

    def _agreed(
        self,
        step: Step,
        row: Operation,
        expected: Outcome,
        compared: Outcome,
        facts: dict[str, Any],
        previous: Step | None,
    ) -> Outcome:
        """Note what an agreeing step exercised, and record it (a step of the trace, not a
        read after one); its normalised ``expected`` outcome."""
        self._split_facts(row, facts)
        observation = Observation(
            step, expected, compared, "", self._after(row, previous), self.levels, facts
        )
        exercised(observation, self.exercised, self._exercising)
        if previous is None:
            self.trace.append({**step, "expect": expected})
        return expected

    def _split_facts(self, row: Operation, facts: dict[str, Any]) -> None:
        """``facts["split"]``: any split since the dump was last compared (a sampled dump
        shows them all); a comparison of the shape clears it."""
        following = self._following()
        if "split" not in facts and following is not None:
            self._split_pending = self._split_pending or following.split_seen
            facts["split"] = self._split_pending
        if row.shape:
            self._split_pending = False

    def _after(self, row: Operation, previous: Step | None) -> Step | None:
        """The change a read is judged after. A read the trace asks for explicitly is
        judged after the last change, as the read the kit issues after that change
        would be: so a finding is named the same whether the dump came right after the
        change or some steps later (a large tree samples its dumps), and shrinking a
        large trace keeps its rule."""
        if previous is None and row.view is not None:
            return self._last_change
        return previous

    def _oracle_read(self, step: Step) -> tuple[Outcome, bytes | None]:
        """The reference's answer to a read, and its :func:`encoded` form when kept: a
        snapshot's dump, per handle, is the same for ever (R-SNAP-2). O(the read)."""
        row = BY_NAME[step["op"]]
        handle = step.get(row.handle.name) if row.handle is not None else None
        kept = self._oracle_snapshots.get(handle) if row.handle is not None else None
        if kept is not None:
            return kept
        outcome = apply_step(self.oracle, step, self._oracle_book)
        if row.handle is None or "ok" not in outcome:
            return outcome, None
        kept = (outcome, encoded(outcome))
        self._oracle_snapshots[handle] = kept
        return kept

    def _normalised(self, op: str, outcome: Outcome) -> Outcome:
        """What of ``outcome`` the levels and the profile specify."""
        recency = self.profile.compares_recency
        if BY_NAME[op].stream:
            return kit_events.normalise(
                outcome,
                self.profile.modes,
                with_ts=EVICTION in self.levels and recency,
                lenient="R-EVENT-6" in self.profile.waived,
                after_reset=self._steps == 1,
            )
        return normalise(op, outcome, self.levels, recency=recency)

    # ------------------------------------------------------------------ the events level

    def _reset_events(self, step: Step, reset: bool) -> None:
        """Start checking the candidate's events when the reset named a scheme."""
        spec = step.get("events")
        if EVENTS not in self.levels or not reset or not isinstance(spec, dict):
            self._events = None
            return
        self._events = kit_events.EventStream(kit_events.hasher_of(spec), step["block_size"])

    def _events_read(self, previous: Step, facts: dict[str, Any]) -> None:
        """Both sides' batches since the last read, compared; the candidate's fed to the
        kit's index (R-EVENT-*, R-ROUTE-3)."""
        read = {"op": STREAM.name}
        actual = self._candidate_outcome(read)
        self._checked_step(read, actual, dict(facts), previous=previous)
        payloads = kit_events.payloads_of(actual.get("ok")) or []
        stream = self._events
        assert stream is not None
        self._events_safety(lambda: stream.feed(payloads, lambda: self._candidate_read(SHAPE)),
                            previous)  # fmt: skip
        self.exercised.update(("R-EVENT-1", "R-EVENT-5", "R-EVENT-6", "R-ROUTE-3"))
        shown = self._normalised(STREAM.name, actual).get("ok") or {}
        kinds = {
            kind for batch in shown.get("batches", []) for event in batch.get("events", [])
            for kind in event
        }  # fmt: skip
        if "stored" in kinds:
            self.exercised.update(("R-EVENT-2", "R-EVENT-3"))
        if "removed" in kinds:
            self.exercised.add("R-EVENT-4")
        if "cleared" in kinds and BY_NAME[previous["op"]].clears is not None:
            self.exercised.add("R-EVENT-7")

    def _events_safety(self, check: Any, previous: Step) -> None:
        """Run one of the stream's own checks; a violation is a safety finding."""
        try:
            check()
        except SafetyViolation as violation:
            found = safety_attribution(violation.prop, violation.detail)
            read = {"op": STREAM.name}
            raise self._finding(
                "safety", read, {"ok": None}, {"ok": violation.detail}, found
            ) from None

    def _oracle_outcome(self, step: Step, actual: Outcome, *, adopt: bool) -> Outcome:
        step, refused = as_taken(step, self.profile)
        if refused is not None:
            return refused
        if adopt or self.profile.match_cap != "none":
            adopted = adopting_outcome(
                self.oracle, self._oracle_book, step, actual, self.profile, adopt=adopt
            )
            if adopted is not None:
                if adopt and (self.profile.adopts_eviction or self.profile.adopts_allocation):
                    self._note = f"adopted {self.candidate.name}'s choice"
                    self._adopted = True
                return adopted
        return apply_step(self.oracle, step, self._oracle_book)

    def _accounting_first(self, step: Step, expected: Outcome, actual: Outcome) -> None:
        """Before reporting a differing call, check the candidate's counters: a broken
        invariant (a leaked block, say) is the root cause to name (R-INV-1)."""
        stats = {"ok": self._candidate_read(COUNTERS)}
        try:
            self.safety.check({"op": COUNTERS.name}, stats)
        except SafetyViolation as violation:
            found = safety_attribution(violation.prop, f"{violation.detail} after {step['op']}")
            raise self._finding("safety", step, expected, actual, found) from None

    def _candidate_read(self, row: Operation) -> Any:
        """The candidate's answer to a read of no arguments (None for a refusal)."""
        return apply_step(self.candidate, {"op": row.name}, self._candidate_book).get("ok")

    def _follow(self, step: Step, answer: Any) -> None:
        """Track live leases and readers (the generator draws from them), evictions."""
        row = BY_NAME[step["op"]]
        if row.frees is not None and row.frees_in is None:  # the device's (steering)
            self.evicted += len(answer[row.frees])
        if row.issues == LEASE and answer.get(LEASE) is not None:
            self.live.append(answer[LEASE])
        handle = step.get(row.handle.name) if row.handle is not None else None
        if row.ends == ENDS_LEASE and handle in self.live:
            self.live.remove(handle)
        if row.enters:
            self.inside.append(answer[SNAPSHOT])
        if row.ends in (ENDS_EPOCH, ENDS_READER):
            self._oracle_snapshots.pop(handle, None)  # a dropped one is read no more
        if row.ends in (ENDS_EPOCH, ENDS_READER) and handle in self.inside:
            self.inside.remove(handle)
            (self.left if row.ends == ENDS_EPOCH else self.dropped).append(handle)

    def _changed(self, states: tuple[str, ...]) -> None:
        """``states`` may have changed: their views are to be read again, and no longer
        show the state before the next step. O(views)."""
        self._dirty.update(states)
        for read in VIEWS:
            if read.shows in states:
                self._fresh.pop(read.name, None)

    def _reads(self, step: Step, facts: dict[str, Any], *, failed: bool) -> None:
        """The read-only views after ``step`` that it can have changed (recorded, with its
        ``expect``): those its row changes, or after a failed call every view, which
        it must have left as it was (R-ERR-2)."""
        row = BY_NAME[step["op"]]
        tree = self.oracle.tree
        self._last = (step, facts)
        if self._events is not None:
            # After every step: a batch handed over late (explain reads a differing
            # step's itself) is compared at the very next read.
            self._events_read(step, facts)
        before = dict(self._fresh)
        if not failed:
            self._changed(row.changes)
        cached = 0 if tree is None else tree.stats().cached
        every = 1 if cached <= SMALL_TREE else max(DUMP_EVERY, cached // 32)
        # The shape is read every few steps of a large tree, after a fill, and after a
        # failed call when there is one from just before to compare it with (R-ERR-2).
        sampled = "batch" in step or self._steps % every == 0
        if failed:
            reads = [read.name for read in VIEWS if not read.shape or read.name in before]
            self._unchanged(step, facts, before, reads)
        else:
            reads = [
                read.name for read in VIEWS
                if read.shows in self._dirty and (sampled or not read.shape)
            ]  # fmt: skip
        for read in reads:
            self._fresh[read] = self._read({"op": read}, step, facts)
            self._dirty.discard(BY_NAME[read].shows or "")
        if self._events is not None and SHAPE.name in reads:
            stream, dump = self._events, self._fresh[SHAPE.name]
            self._events_safety(lambda: stream.check_dump(dump), step)
        # The latest snapshots' dumps, with the dump (after every write in a small tree,
        # every few in a large one: a snapshot changed by a write is caught at a later
        # read; shrinking then finds the write) and when a new one was taken.
        with_dump = SHAPE.name in reads and (failed or SNAPSHOTS_STATE in self._dirty)
        if with_dump or (row.issues == SNAPSHOT and not failed):
            self._snapshot_reads(step, facts)

    def _snapshot_reads(self, step: Step, facts: dict[str, Any]) -> None:
        """The dumps of the latest :data:`WATCHED` snapshots (not dropped), compared."""
        self._dirty.discard(SNAPSHOTS_STATE)
        if SNAPSHOTS not in self.levels:
            return
        assert SNAPSHOT_SHAPE.handle is not None
        for handle in range(max(1, self.snapshots - WATCHED + 1), self.snapshots + 1):
            if handle not in self.dropped:
                read = {"op": SNAPSHOT_SHAPE.name, SNAPSHOT_SHAPE.handle.name: handle}
                self._read(read, step, facts)

    def _unchanged(
        self, step: Step, facts: dict[str, Any], before: dict[str, Any], reads: list[str]
    ) -> None:
        """The safety check of a failed call: the candidate's state is as before it."""
        after = {
            read: apply_step(self.candidate, {"op": read}, self._candidate_book).get("ok")
            for read in reads
            if read in before
        }
        try:
            self.safety.check_unchanged(before, after, step["op"])
        except SafetyViolation as violation:
            prop = violation.prop
            properties = BY_NAME[step["op"]].out_of_blocks
            if properties is not None and step["expect"].get("error") == "out_of_blocks":
                prop = properties[1] if facts.get("readers") else properties[0]
            found = safety_attribution(prop, violation.detail)
            read = SHAPE.name if SHAPE.name in after else COUNTERS.name
            raise self._finding(
                "safety", {"op": read}, {"ok": before[read]}, {"ok": after[read]}, found
            ) from None

    def _read(self, read: Step, previous: Step, facts: dict[str, Any]) -> Any:
        """One read on both, checked and compared; the candidate's raw answer."""
        actual = self._candidate_outcome(read)
        self._checked_step(read, actual, dict(facts), previous=previous)
        return actual.get("ok")

    def _finding(
        self, kind: str, step: Step, expected: Outcome, actual: Outcome, found: Attribution
    ) -> Disagreement:
        recorded = {**step, "expect": expected, "actual": actual}
        self.trace.append(recorded)
        return Disagreement(
            Difference(
                index=len(self.trace) - 1,
                trace=list(self.trace),
                expected=expected,
                actual=actual,
                reference=self.oracle.name,
                candidate=self.candidate.name,
                levels=sorted(self.levels),
                kind=kind,
                rules=found.rules,
                cause=found.cause,
                peer_note=found.peer_note,
            )
        )

    def _modes_note(self) -> str:
        relaxed = [
            f"{key} = {value}"
            for key, value in self.profile.modes.items()
            if key != "error_kinds" and value != _strict(key)
        ]
        return f" (declared: {', '.join(relaxed)})" if relaxed else ""


def _strict(tolerance: str) -> str:
    from .profile import MODES

    return MODES[tolerance][0]


def _tier_names(reset: Step) -> tuple[str, ...]:
    """The tiers a reset step names, fastest first (the device alone without tiers)."""
    tiers = reset.get("tiers")
    if not isinstance(tiers, dict):
        return ("device",)
    present = [name for name in ("host", "disk") if tiers.get(name)]
    return ("device", *present)


def _ids(value: Any) -> list[int] | None:
    """``value`` as a list of block ids, or None when it is not one (compared as is)."""
    if isinstance(value, list) and all(
        isinstance(item, int) and not isinstance(item, bool) for item in value
    ):
        return list(value)
    return None


def _plain_dict(answer: Any) -> dict[str, Any] | None:
    return dict(answer) if isinstance(answer, dict) else None


def _where(step: Step, finding: Difference) -> str:
    """A finding as a path into the step's views: ``outcome...`` for the step's own
    answer, ``dump...``/``stats...``/``events...`` for a read after it that differed."""
    read = finding.trace[finding.index].get("op", "")
    row = BY_NAME.get(read)
    after = row is not None and (row.view is not None or row.stream) and read != step["op"]
    view = read if after else "outcome"
    path = first_difference(finding.expected, finding.actual, view)
    return path if path is not None else view


#: Answer fields a declared choice shows in, each looked at on its own.
_CHOICE_FIELDS = ("evicted", "freed", "allocated")


def declared_rules(
    step: Step,
    spec: Outcome,
    theirs: Outcome,
    profile: Profile,
    levels: frozenset[str],
    facts: dict[str, Any],
) -> list[tuple[str, str]]:
    """The declared rules a difference between the spec's outcome and the candidate's
    falls under, each with the profile's reason: the kit's attribution
    (:func:`kachedb_radix.spec.conform.rulemap.attribute`) of the whole difference and
    of each differing choice field on its own, kept where the profile declares the rule.
    O(fields * rule map)."""
    deviations = profile.deviations()
    op = step["op"]
    expected = normalise(op, spec, levels, recency=profile.compares_recency)
    actual = normalise(op, theirs, levels, recency=profile.compares_recency)
    trials = [expected]
    mine, their = expected.get("ok"), actual.get("ok")
    if isinstance(mine, dict) and isinstance(their, dict):
        for name in _CHOICE_FIELDS:
            if name in mine and mine.get(name) != their.get(name):
                trials.append({"ok": {**their, name: mine[name]}})
    found: dict[str, str] = {}
    for trial in trials:
        path = first_difference(trial, actual, "")
        if path is None:
            continue
        attribution = attribute(Observation(step, trial, actual, path, None, levels, facts))
        for rule in attribution.rules:
            if rule in deviations:
                found.setdefault(rule, deviations[rule])
    if not found:
        # Unattributed: the rules the profile's tolerances relax for these choices.
        for rule in ("R-EVICT-1", "R-EVICT-4", "R-INS-5", "R-ALLOC-2"):
            if rule in deviations:
                found[rule] = deviations[rule]
                break
    return list(found.items())


def _diff_hint(expected: Outcome, actual: Outcome) -> list[str]:
    """Name the first differing field of two outcomes, for long dumps."""
    path = first_difference(expected, actual, "")
    return [f"  first difference at {path or '(top)'}"] if path is not None else []


def first_difference(left: Any, right: Any, path: str) -> str | None:
    """Path of the first difference between two JSON values, None when equal.

    Strict about types: ``1``, ``1.0`` and ``true`` all differ. O(size); equal
    values (the usual case) are confirmed at C speed.
    """
    # The same data type for type: equal, confirmed at C speed; else the walk below
    # names the first difference (and finds none for keys in another order).
    if strictly_equal(left, right):
        return None
    return _path_of_difference(left, right, path)


def _path_of_difference(left: Any, right: Any, path: str) -> str | None:
    if isinstance(left, dict) and isinstance(right, dict):
        for key in list(left) + [key for key in right if key not in left]:
            if key not in left or key not in right:
                return f"{path}.{key}"
            found = _path_of_difference(left[key], right[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(left, list) and isinstance(right, list):
        for index, (a, b) in enumerate(zip(left, right, strict=False)):
            found = _path_of_difference(a, b, f"{path}[{index}]")
            if found is not None:
                return found
        return None if len(left) == len(right) else f"{path} (length {len(left)} vs {len(right)})"
    return None if left == right and type(left) is type(right) else path
