"""Shrink a finding to a short trace that still shows it.

The search records each finding with the whole example that led to it, often hundreds
of steps. This shrinker replays candidate traces through a fresh
:class:`~kachedb_radix.spec.conform.lockstep.Lockstep` and keeps every change after which
the same rule is still broken first (or, for a failure, the candidate still fails): it
tries the trace without its bulk fills at once (they are often only scenery), deletes
runs of steps (halves, quarters, ... single steps), then simplifies what is left
(shorter token lists, no pin, the default namespace, smaller counts, a smaller pool,
block size 1), and repeats while anything helps and time is left.

Handles stay valid by construction. While shrinking, a step that names a lease or
a snapshot (``release``, ``leave``, ``snapshot_match``, ``snapshot_dump``) refers to
the *step* that issued it, not to a handle number; each trial resolves the
reference against what that step issued in the trial. A trial whose issuing step
is gone, or issued nothing this time, is rejected, so a shrunk trace never uses a
handle the candidate was not issued, and a ``leave`` always names a reader.

Cost: one replay per trial; bounded by ``seconds``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .candidate import Candidate, CandidateFailure
from .lockstep import Difference, Disagreement, Lockstep
from .operations import BY_NAME, LEASE, OPERATIONS, SNAPSHOT
from .profile import STRICT, Profile
from .steps import META_KEYS, Step

#: Step fields that name a lease or a snapshot by handle, by operation (the table's).
HANDLE_FIELDS = {op.name: op.handle.name for op in OPERATIONS if op.handle is not None}

#: Keys kept from a recorded step when shrinking (the arguments, and the batch mark).
_KEEP = {"op", "batch"}


#: The key under which a symbolic step keeps its identity (its index in the
#: original trace), so references survive deletions.
SID = "_sid"


@dataclass(frozen=True)
class Ref:
    """A handle written as the identity of the step that issued it (-1: never issued)."""

    step: int


class _Invalid(Exception):
    """A trial trace refers to a lease or snapshot no step issued."""


@dataclass
class Shrinker:
    """Shrinks findings of one candidate (see the module docstring).

    Attributes:
        candidate: the candidate (reset by every trial).
        levels: the levels compared.
        profile: the candidate's declared deviations.
        reopen: a fresh candidate after a failure (None: reuse the candidate).
        pool: the smallest and largest pool a shrunk trace may use.
        block_sizes: the block sizes a shrunk trace may use.
    """

    candidate: Candidate
    levels: frozenset[str]
    profile: Profile = STRICT
    reopen: Callable[[], Candidate] | None = None
    pool: tuple[int, int] = (1, 2**31)
    block_sizes: tuple[int, ...] | None = None

    def shrink(self, finding: Difference, seconds: float = 10.0) -> Difference:
        """The shortest finding of the same rule (or failure) found within ``seconds``.

        Returns ``finding`` itself when no trial reproduces it (a candidate that
        is not deterministic).
        """
        deadline = time.monotonic() + seconds
        steps = symbolic(finding.trace)
        best: tuple[Difference, int] | None = self._trial(steps, finding)
        if best is None:
            return finding
        steps = steps[: best[1]]
        # A bulk fill is often scenery: try the trace without any of its inserts first,
        # one trial, before deleting it half by half.
        unfilled = _without_dangling([step for step in steps if not step.get("batch")])
        if len(unfilled) < len(steps):
            found = self._first_smaller([unfilled], steps, finding, deadline)
            if found is not None:
                best, steps = found
        while time.monotonic() < deadline:
            found = self._first_smaller(_deletions(steps), steps, finding, deadline)
            if found is None:
                simpler = _simplifications(steps, self.pool, self.block_sizes)
                found = self._first_smaller(simpler, steps, finding, deadline)
            if found is None:
                break
            best, steps = found
        return best[0]

    def _first_smaller(
        self, trials: list[list[Step]], steps: list[Step], target: Difference, deadline: float
    ) -> tuple[tuple[Difference, int], list[Step]] | None:
        """The first trial that still shows ``target`` and is smaller than ``steps``: its
        finding and its steps up to the finding."""
        for trial in trials:
            if time.monotonic() >= deadline:
                return None
            result = self._trial(trial, target)
            if result is not None and _smaller(trial[: result[1]], steps):
                return result, trial[: result[1]]
        return None

    def _trial(self, steps: list[Step], target: Difference) -> tuple[Difference, int] | None:
        """Replay ``steps``; the finding and how many steps ran, when it is ``target``'s."""
        if target.kind == "failure" and self.reopen is not None:
            self.candidate.close()
            self.candidate = self.reopen()
        lockstep = Lockstep(self.candidate, self.levels, profile=self.profile)
        issued: dict[int, int] = {}
        ran = 0
        try:
            for index, step in enumerate(steps):
                ran = index + 1
                lockstep.run(concrete(step, issued))
                _note_issue(lockstep, step[SID], issued)
            lockstep.finish(final=True)
        except _Invalid:
            return None
        except Disagreement as exc:
            found = exc.difference
            if target.kind != "failure" and found.rule == target.rule:
                return found, ran
            return None
        except CandidateFailure as exc:
            if target.kind == "failure":
                from .search import failure_difference

                return failure_difference(exc, lockstep), ran
            return None
        return None


def symbolic(trace: list[Step]) -> list[Step]:
    """``trace`` with recorded outcomes dropped and handles turned into :class:`Ref`."""
    leases: dict[int, int] = {}
    snapshots: dict[int, int] = {}
    steps: list[Step] = []
    for index, step in enumerate(trace):
        row = BY_NAME[step["op"]]
        if row.resets:
            leases, snapshots = {}, {}
        bare = {key: value for key, value in step.items() if key not in META_KEYS or key in _KEEP}
        bare[SID] = index
        argument = row.handle
        if argument is not None and isinstance(bare.get(argument.name), int):
            table = leases if argument.handle == LEASE else snapshots
            handle = bare[argument.name]
            bare[argument.name] = Ref(table[handle]) if handle in table else Ref(-1)
        steps.append(bare)
        answer = step.get("expect", {}).get("ok")
        if isinstance(answer, dict):
            if row.issues == LEASE and answer.get(LEASE):
                leases[answer[LEASE]] = index
            if row.issues == SNAPSHOT:
                snapshots[answer[SNAPSHOT]] = index
    return steps


def concrete(step: Step, issued: dict[int, int]) -> Step:
    """``step`` with its :class:`Ref` resolved against what each step issued.

    Raises:
        _Invalid: the referenced step is gone or issued nothing in this trial.
    """
    plain = {key: value for key, value in step.items() if key != SID}
    field = HANDLE_FIELDS.get(step["op"])
    ref = plain.get(field) if field is not None else None
    if field is None or not isinstance(ref, Ref):
        return plain
    if ref.step < 0:
        plain[field] = 0  # a lease never issued, on purpose (R-PIN-5)
    elif ref.step in issued:
        plain[field] = issued[ref.step]
    else:
        raise _Invalid(f"step {ref.step} issued nothing")
    return plain


def _note_issue(lockstep: Lockstep, sid: int, issued: dict[int, int]) -> None:
    recorded = lockstep.trace[-1] if lockstep.trace else {}
    answer = recorded.get("expect", {}).get("ok")
    if not isinstance(answer, dict):
        return
    row = BY_NAME[recorded["op"]]
    if row.issues == LEASE and answer.get(LEASE):
        issued[sid] = answer[LEASE]
    if row.issues == SNAPSHOT:
        issued[sid] = answer[SNAPSHOT]
    if row.resets:
        issued.clear()


def _smaller(new: list[Step], old: list[Step]) -> bool:
    return (len(new), _size(new)) < (len(old), _size(old))


def _size(steps: list[Step]) -> int:
    total = 0
    for step in steps:
        for key, value in step.items():
            total += len(value) if isinstance(value, list) else 1
            if key == "num_blocks":
                total += value
    return total


def _deletions(steps: list[Step]) -> list[list[Step]]:
    """Traces with a run of steps removed, longest runs first (never the first reset)."""
    found: list[list[Step]] = []
    size = max(1, (len(steps) - 1) // 2)
    while size >= 1:
        for start in range(len(steps) - size, 0, -size):
            found.append(_without_dangling(steps[:start] + steps[start + size :]))
        if size == 1:
            break
        size //= 2
    return found


def _without_dangling(steps: list[Step]) -> list[Step]:
    """``steps`` less those naming a lease or snapshot whose issuing step is gone."""
    present = {step[SID] for step in steps}
    kept = []
    for step in steps:
        field = HANDLE_FIELDS.get(step["op"])
        ref = step.get(field) if field is not None else None
        if isinstance(ref, Ref) and ref.step >= 0 and ref.step not in present:
            continue
        kept.append(step)
    return kept


def _simplifications(
    steps: list[Step], pool: tuple[int, int], block_sizes: tuple[int, ...] | None
) -> list[list[Step]]:
    """Traces with one step's arguments made simpler (see the module docstring), pools
    and block sizes staying among those allowed."""
    found: list[list[Step]] = []
    for index, step in enumerate(steps):
        for simpler in _simpler(step, pool, block_sizes):
            found.append([*steps[:index], simpler, *steps[index + 1 :]])
    return found


def _simpler(step: Step, pool: tuple[int, int], block_sizes: tuple[int, ...] | None) -> list[Step]:
    options: list[Step] = []
    if BY_NAME[step["op"]].resets:
        blocks = step["num_blocks"]
        for smaller in sorted({blocks // 2, blocks - 1, 2, pool[0]}):
            if max(1, pool[0]) <= smaller < blocks:
                options.append({**step, "num_blocks": smaller})
        smallest = min(block_sizes) if block_sizes else 1
        if step["block_size"] > smallest:
            options.append({**step, "block_size": smallest})
    tokens = step.get("tokens")
    if isinstance(tokens, list) and tokens:
        for cut in sorted({len(tokens) // 2, len(tokens) - 1}):
            options.append({**step, "tokens": tokens[:cut]})
        options.append({**step, "tokens": tokens[1:]})
    if step.get("pin"):
        options.append({**step, "pin": False})
    if isinstance(step.get("namespace"), str):
        options.append({**step, "namespace": None})
    count = step.get("count")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        options.extend({**step, "count": smaller} for smaller in sorted({count // 2, count - 1}))
    if step.get("batch"):
        options.append({key: value for key, value in step.items() if key != "batch"})
    return options


def plain_trace(steps: list[Step]) -> list[dict[str, Any]]:
    """A symbolic trace written back with step identities (for tests and debugging)."""
    return [
        {key: (value.step if isinstance(value, Ref) else value) for key, value in step.items()}
        for step in steps
    ]
