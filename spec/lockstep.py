"""Lockstep execution: apply each step to the reference and a candidate, compare.

:class:`Lockstep` is the kit's core, used by the Hypothesis machine and by
``replay``. It records every step with the reference's outcome (``"expect"``), and
after each step compares the read-only views (dump, stats, namespaces and, at the
``snapshots`` level, the dumps of the latest snapshots, so a snapshot that changes
after it was taken is caught at the write that changed it). The first difference
raises :class:`Disagreement`, which carries the trace up to and including the
differing step and both answers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import reference

from .adapter import TreeAdapter
from .candidate import Candidate, CandidateFailure
from .steps import READ_OPS, LeaseBook, Outcome, Step, apply_step, describe, normalise


@dataclass
class Difference:
    """Where and how a candidate disagreed with the reference.

    Attributes:
        index: position of the differing step in ``trace`` (0-based).
        trace: the steps run, each with the reference's outcome as ``"expect"``; the
            last one is the differing step and also carries ``"actual"``.
        expected: the reference's outcome at that step (after level normalisation).
        actual: the candidate's outcome.
        reference: the reference's name.
        candidate: the candidate's name.
    """

    index: int
    trace: list[Step]
    expected: Outcome
    actual: Outcome
    reference: str
    candidate: str
    levels: list[str] = field(default_factory=list)

    def trace_lines(self) -> list[str]:
        """The trace as JSON lines. O(size of the trace)."""
        return [json.dumps(step, separators=(", ", ": ")) for step in self.trace]

    def explain(self) -> str:
        """A human report: the steps, the first differing one and both answers."""
        step = self.trace[self.index]
        lines = [
            f"{self.candidate} disagrees with {self.reference} at step {self.index + 1} "
            f"of {len(self.trace)}: {describe(step)}",
            f"  {self.reference}: {json.dumps(self.expected)}",
            f"  {self.candidate}: {json.dumps(self.actual)}",
        ]
        lines.extend(_diff_hint(self.expected, self.actual))
        lines.append("trace (JSON lines; replay with `kachedb-radix replay FILE --target ...`):")
        lines.extend(self.trace_lines())
        return "\n".join(lines)


class Disagreement(AssertionError):
    """The candidate's outcome differed from the reference's (a semantic bug)."""

    def __init__(self, difference: Difference) -> None:
        super().__init__(difference.explain())
        self.difference = difference


#: How many of the latest snapshots are dumped and compared after every step.
WATCHED = 2


def reference_oracle() -> TreeAdapter:
    """The reference implementation, as the oracle every candidate is compared with."""
    return TreeAdapter(reference.RadixTree, "reference")


class Lockstep:
    """Drives ``candidate`` and the reference side by side.

    Args:
        candidate: the implementation under test.
        levels: the levels compared (outcomes are normalised to them).
        check_reads: compare dump, stats and namespaces after every step.
        oracle: the reference (default: :func:`reference_oracle`).
    """

    def __init__(
        self,
        candidate: Candidate,
        levels: frozenset[str],
        *,
        check_reads: bool = True,
        oracle: TreeAdapter | None = None,
    ) -> None:
        self.candidate = candidate
        self.oracle = oracle if oracle is not None else reference_oracle()
        self.levels = levels
        self.check_reads = check_reads
        self.trace: list[Step] = []
        self._oracle_book = LeaseBook()
        self._candidate_book = LeaseBook()
        self.live: list[int] = []
        self.inside: list[int] = []
        self.left: list[int] = []
        self.dropped: list[int] = []

    @property
    def issued(self) -> int:
        """Lease handles issued since the last reset. O(1)."""
        return self._oracle_book.issued

    @property
    def snapshots(self) -> int:
        """Snapshot (and reader) handles issued since the last reset. O(1)."""
        return self._oracle_book.snapshots

    def run(self, step: Step) -> Outcome:
        """Apply ``step`` to both and compare; then compare the read-only views.

        Returns the reference's outcome. Cost: the two calls, plus three reads
        each when ``check_reads`` (and up to ``WATCHED`` snapshot dumps at the
        ``snapshots`` level).

        Raises:
            Disagreement: the outcomes (or views) differ.
            CandidateFailure: the candidate could not answer (with step and trace).
        """
        expected = self._step(step)
        op = step["op"]
        if op == "reset":
            self.live, self.inside, self.left, self.dropped = [], [], [], []
        elif "ok" in expected:
            answer = expected["ok"]
            if op in ("match", "insert") and answer.get("lease") is not None:
                self.live.append(answer["lease"])
            if op == "release" and step["lease"] in self.live:
                self.live.remove(step["lease"])
            if op == "reader":
                self.inside.append(answer["snapshot"])
            if op == "leave" and step["snapshot"] in self.inside:
                self.inside.remove(step["snapshot"])
                self.left.append(step["snapshot"])
            if op == "drop" and step["snapshot"] in self.inside:
                self.inside.remove(step["snapshot"])
                self.dropped.append(step["snapshot"])
        if self.check_reads:
            for read in READ_OPS:
                self._step({"op": read}, record_when_equal=False)
            if "snapshots" in self.levels:
                for handle in range(max(1, self.snapshots - WATCHED + 1), self.snapshots + 1):
                    if handle not in self.dropped:
                        self._step(
                            {"op": "snapshot_dump", "snapshot": handle}, record_when_equal=False
                        )
        return expected

    def would_evict(self, step: Step) -> bool:
        """Whether the reference would evict to run this insert (dry run on a copy).

        Cost: one ``RadixTree.clone()`` of the reference, O(pool + nodes).
        """
        tree = self.oracle.tree.clone()
        trial = TreeAdapter(lambda _blocks, _size: tree, self.oracle.name)
        trial.reset(tree.num_blocks, tree.block_size)  # adopts the clone
        outcome = apply_step(trial, step, LeaseBook())
        return "ok" in outcome and bool(outcome["ok"]["evicted"])

    def _step(self, step: Step, *, record_when_equal: bool = True) -> Outcome:
        op = step["op"]
        expected = normalise(op, apply_step(self.oracle, step, self._oracle_book), self.levels)
        recorded: Step = {**step, "expect": expected}
        try:
            actual = normalise(
                op, apply_step(self.candidate, step, self._candidate_book), self.levels
            )
        except CandidateFailure as failure:
            self.trace.append(recorded)
            failure.step = len(self.trace)
            failure.trace = list(self.trace)
            raise
        if first_difference(expected, actual, "") is not None:
            recorded["actual"] = actual
            self.trace.append(recorded)
            raise Disagreement(
                Difference(
                    index=len(self.trace) - 1,
                    trace=list(self.trace),
                    expected=expected,
                    actual=actual,
                    reference=self.oracle.name,
                    candidate=self.candidate.name,
                    levels=sorted(self.levels),
                )
            )
        if record_when_equal:
            self.trace.append(recorded)
        return expected


def _diff_hint(expected: Outcome, actual: Outcome) -> list[str]:
    """Name the first differing field of two outcomes, for long dumps."""
    path = first_difference(expected, actual, "")
    return [f"  first difference at {path or '(top)'}"] if path is not None else []


def first_difference(left: Any, right: Any, path: str) -> str | None:
    """Path of the first difference between two JSON values, None when equal.

    Strict about types: ``1``, ``1.0`` and ``true`` all differ. O(size).
    """
    if isinstance(left, dict) and isinstance(right, dict):
        for key in list(left) + [key for key in right if key not in left]:
            if key not in left or key not in right:
                return f"{path}.{key}"
            found = first_difference(left[key], right[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(left, list) and isinstance(right, list):
        for index, (a, b) in enumerate(zip(left, right, strict=False)):
            found = first_difference(a, b, f"{path}[{index}]")
            if found is not None:
                return found
        return None if len(left) == len(right) else f"{path} (length {len(left)} vs {len(right)})"
    return None if left == right and type(left) is type(right) else path
