"""The Hypothesis state machine that drives a candidate in lockstep with the reference.

Each example resets both implementations with a drawn block size (1-4) and pool
(2-12 blocks), then runs up to ``steps`` operations drawn by
:func:`spec.generate.draw_step` from the declared levels:

* ``core``: match and insert (no pins, default namespace), malformed tokens;
  inserts that would need eviction are skipped unless ``eviction`` is declared;
* ``pinning``: ``pin=True`` on match and insert, release of live, released and
  never-issued leases;
* ``eviction``: ``evict(n)``, malformed counts, inserts that evict;
* ``namespaces``: named namespaces, including ``""``, and malformed ones;
* ``snapshots``: snapshots, readers (at most two inside), leaves (of readers
  inside, sometimes of ones that left), snapshot matches on any snapshot taken so
  far (interleaved with the writes after it), malformed ones, ``reclaim``, and
  readers dropped without leaving (R-EPOCH-5).

Every outcome and, after every step, the dump, stats and namespaces (and at the
``snapshots`` level the dumps of the two latest snapshots) are compared
(:class:`spec.lockstep.Lockstep`). Hypothesis shrinks a disagreement to a short
trace; the runner (:mod:`spec.runner`) reports it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from .candidate import Candidate
from .generate import DataChooser, Inputs, draw_step
from .lockstep import Difference, Disagreement, Lockstep


class ShrinkBudgetSpent(BaseException):
    """Shrinking ran out of time; the runner reports the shortest trace seen so far.

    A ``BaseException`` so Hypothesis lets it through instead of treating it as a
    failure of the example.
    """


@dataclass
class Session:
    """What one kit run drives, shared by all the machine's examples.

    Attributes:
        candidate: the implementation under test (kept across examples; each
            example starts with ``reset``).
        levels: the levels generated and compared.
        block_sizes: block sizes to draw from.
        pool: smallest and largest pool size to draw.
        examples: examples started so far (counted by the machine).
        shrink_seconds: time allowed for shrinking once a disagreement is found.
        best: the disagreement with the shortest trace seen so far.
        found_at: when the first disagreement was found (``time.monotonic()``).
    """

    candidate: Candidate
    levels: frozenset[str]
    block_sizes: tuple[int, ...] = (1, 2, 3, 4)
    pool: tuple[int, int] = (2, 12)
    examples: int = field(default=0)
    shrink_seconds: float = 10.0
    best: Difference | None = None
    found_at: float | None = None

    def record(self, difference: Difference) -> None:
        """Keep ``difference`` if its trace is the shortest so far. O(1)."""
        if self.found_at is None:
            self.found_at = time.monotonic()
        if self.best is None or len(difference.trace) < len(self.best.trace):
            self.best = difference


class LockstepMachine(RuleBasedStateMachine):
    """One example: a fresh pair of trees and a random sequence of operations."""

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        if (
            session.found_at is not None
            and time.monotonic() - session.found_at > session.shrink_seconds
        ):
            raise ShrinkBudgetSpent(f"shrinking took over {session.shrink_seconds:g} s")
        session.examples += 1
        self.lockstep = Lockstep(session.candidate, session.levels)
        self.inputs = Inputs(1)
        self.num_blocks = 1

    @initialize(data=st.data())
    def reset(self, data: st.DataObject) -> None:
        """Start both trees empty with a drawn block size and pool."""
        chooser = DataChooser(data)
        block_size = chooser.choice(self.session.block_sizes)
        self.num_blocks = chooser.integer(*self.session.pool)
        self.inputs = Inputs(block_size)
        self.lockstep.run({"op": "reset", "num_blocks": self.num_blocks, "block_size": block_size})

    @rule(data=st.data())
    def operate(self, data: st.DataObject) -> None:
        """Run one drawn operation on both and compare (a no-op when unusable here)."""
        step = draw_step(
            DataChooser(data), self.inputs, self.session.levels, self.num_blocks, self.lockstep
        )
        if step is not None:
            try:
                self.lockstep.run(step)
            except Disagreement as exc:
                self.session.record(exc.difference)
                raise
