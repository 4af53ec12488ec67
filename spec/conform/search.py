"""The search: Hypothesis draws examples and runs each in lockstep with the reference.

Each example is a *swarm*: it first draws its own configuration -- a block size, a
pool from 2 to thousands of blocks, a length from one step to hundreds, and which
operation kinds it uses with which weights (:func:`draw_swarm`) -- then that many
steps. Some examples are therefore pure insert/evict churn with no reader inside,
others all snapshots, others a long fill followed by matches; bugs that wait for a
state (a large tree, many evictions, a high clock, the eviction queue's internal
maintenance) get examples that reach it. A ``fill`` step inserts many long
sequences sharing prefixes at once, comparing the state only after the last one,
so large trees cost little. At the end of each example the search reports the
tree's depth, its leaves, the most children of one node, the blocks evicted, the
clock and the eviction queue's length to Hypothesis's ``target()``, which steers
later examples towards more.

Steps come from :mod:`kachedb_radix.spec.conform.generate`; the per-step details are drawn from a
seed Hypothesis chooses (so an example costs few choices however long it is). The search never
shrinks: a finding ends its example and is recorded per rule (:class:`Session`), and the search goes
on; :mod:`kachedb_radix.spec.conform.shrink` minimises each recorded finding afterwards. Examples
are therefore counted without shrinking replays.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings, target
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from .candidate import Candidate, CandidateFailure
from .errors import KitError
from .generate import (
    MAX_DEEP_BLOCKS,
    Chooser,
    DataChooser,
    Inputs,
    RandomChooser,
    closing_kinds,
    draw_step,
    kinds_for,
    tiers_fields,
)
from .levels import EVENTS, EVICTION, PINNING, TIERS
from .levels import NAMESPACES as NAMESPACES_LEVEL
from .lockstep import Difference, Disagreement, Lockstep, waived
from .operations import BY_NAME
from .profile import STRICT, Profile

#: Pool scales an example draws from (smallest, largest, weight); clamped to the
#: session's pool range.
POOL_SCALES: tuple[tuple[int, int, int], ...] = ((2, 12, 4), (13, 128, 3), (129, 4096, 3))

#: Length scales (fewest, most steps, weight); the most is capped by the session's.
LENGTH_SCALES: tuple[tuple[int, int, int], ...] = ((1, 30, 3), (31, 120, 4), (121, 10**6, 3))

#: The range seeds are drawn from. Hypothesis sometimes draws, instead of a random
#: integer, a constant it found in the source of the project's imported modules, which
#: would make a run depend on what else happens to be imported (a test suite, another
#: tool); no source literal is written in this range, so a run depends on its seed only.
SEEDS = (2**40, 2**41 - 1)

#: Most operations one example runs, fills included: what a long example costs.
OPERATIONS = 600

#: Most inserts in one fill (and at most half the pool's blocks).
FILL_MOST = 96

#: Most inserts in one sibling fill: hundreds of short leaves under a few heads.
SIBLINGS_MOST = 320

#: Fewest and most steps of one churn burst.
CHURN = (20, 120)


class StopSearch(BaseException):
    """Ends the search early (``--first`` after a finding, or a candidate that cannot
    be restarted). A ``BaseException`` so Hypothesis lets it through."""


@dataclass
class Swarm:
    """One example's configuration.

    Attributes:
        block_size: tokens per block.
        num_blocks: the pool.
        length: steps to draw.
        kinds: the operation kinds it draws, repeated by weight.
    """

    block_size: int
    num_blocks: int
    length: int
    kinds: tuple[str, ...]


@dataclass
class Session:
    """What one kit run drives and what it found, shared by all its examples.

    Attributes:
        candidate: the implementation under test (kept across examples).
        levels: the levels generated and compared.
        profile: the candidate's declared deviations.
        reopen: makes a fresh candidate after a failure (None: cannot restart).
        block_sizes: block sizes to draw from.
        pool: smallest and largest pool to draw.
        max_steps: most steps per example.
        first: stop at the first finding (``--first``).
        findings: the first finding per primary rule, in the order found.
        waived: findings attributed to a waived rule (not failures), per rule.
        exercised: rules exercised so far.
        examples: examples run.
        max_examples: most examples to run (``--examples``): Hypothesis may ask for more
            (its targeting phase), the search stops at this many.
        started: when the search started (``time.perf_counter()``).
        first_at: seconds from the start to the first finding.
        budget: most operations (steps, fills included) the whole search runs; past
            it no example starts. A count, not a time, so runs stay deterministic.
        operations: operations run so far.
        stopped: why the search stopped early (None while it runs).
        kit_error: the kit's own error that stopped the search, if one did (nothing
            after it was judged).
    """

    candidate: Candidate
    levels: frozenset[str]
    profile: Profile = STRICT
    reopen: Callable[[], Candidate] | None = None
    block_sizes: tuple[int, ...] = (1, 2, 3, 4)
    pool: tuple[int, int] = (2, 4096)
    max_steps: int = 300
    first: bool = False
    findings: dict[str, Difference] = field(default_factory=dict)
    waived: dict[str, Difference] = field(default_factory=dict)
    exercised: set[str] = field(default_factory=set)
    examples: int = 0
    max_examples: int = 10**9
    started: float = field(default_factory=time.perf_counter)
    first_at: float | None = None
    budget: int = 10**9
    operations: int = 0
    stopped: str | None = None
    kit_error: KitError | None = None

    def record(self, difference: Difference) -> None:
        """Keep ``difference`` if it is the first for its primary rule. O(1).

        A plain disagreement attributed to a rule the profile waives (or relaxes by
        a tolerance mode) is kept apart as waived; safety findings, inadmissible
        choices and failures always count.
        """
        rule = difference.rule
        if waived(difference, self.profile) is not None:
            self.waived.setdefault(rule, difference)
            return
        if rule not in self.findings:
            self.findings[rule] = difference
            if self.first_at is None:
                self.first_at = time.perf_counter() - self.started
        if self.first:
            self.stopped = f"first finding: {rule}"
            raise StopSearch(self.stopped)


def draw_swarm(chooser: Chooser, session: Session) -> Swarm:
    """Draw one example's configuration (see the module docstring). O(kinds)."""
    block_size = chooser.choice(session.block_sizes)
    low, high, _ = _scale(chooser, POOL_SCALES)
    low, high = max(low, session.pool[0]), min(high, session.pool[1])
    if low > high:
        low, high = session.pool
    # Log-uniform within the scale: as many pools of 129-512 blocks as of 1024-4096.
    num_blocks = min(high, int(low * (high / low) ** (chooser.integer(0, 1000) / 1000)))
    shortest, longest, _ = _scale(chooser, LENGTH_SCALES)
    longest = min(longest, session.max_steps)
    length = chooser.integer(min(shortest, longest), longest)
    kinds: list[str] = []
    for kind, weight in _base_weights(session.levels).items():
        if chooser.integer(0, 3) > 0:
            kinds.extend([kind] * (weight * chooser.integer(1, 4)))
    return Swarm(block_size, num_blocks, length, tuple(kinds) or ("insert",))


def _scale(chooser: Chooser, scales: tuple[tuple[int, int, int], ...]) -> tuple[int, int, int]:
    weighted = [scale for scale in scales for _ in range(scale[2])]
    return chooser.choice(weighted)


def _base_weights(levels: frozenset[str]) -> dict[str, int]:
    weights: dict[str, int] = {"fill": 1}
    if {PINNING, EVICTION} <= levels:
        weights["churn"] = 2  # long runs of pinned matches, evictions and re-inserts
    for kind in kinds_for(levels):
        weights[kind] = weights.get(kind, 0) + 1
    return weights


def search(session: Session, *, examples: int, seed_value: int) -> None:
    """Run ``examples`` swarm examples (deterministic for a seed), or as many as the
    session's operation budget allows. Cost: the examples.

    Findings land in ``session``; a :class:`StopSearch` ends it early.
    """

    session.max_examples = examples

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.target],
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )
    @given(st.data())
    def example(data: st.DataObject) -> None:
        run_example(session, DataChooser(data))

    try:
        seed(seed_value)(example)()
    except StopSearch:
        pass
    except Exception:
        # Stopping mid-search looks to Hypothesis like data generation changed (an
        # example with a known prefix drew less); once we stopped, that is expected.
        if session.stopped is None:
            raise


def run_example(session: Session, chooser: Chooser) -> None:
    """Draw and run one example; record what it finds in ``session``."""
    # Hypothesis biases integers towards their bounds and repeats values; the
    # configuration and each step's details come from seeds made of its draws, the
    # example's and the step's index, so they spread evenly and never repeat.
    base = chooser.integer(*SEEDS)
    swarm = draw_swarm(RandomChooser(base), session)
    if session.operations >= session.budget:
        session.stopped = "the search's operation budget is spent"
        raise StopSearch(session.stopped)
    if session.examples >= session.max_examples:
        session.stopped = f"{session.max_examples} examples run"
        raise StopSearch(session.stopped)
    session.examples += 1
    lockstep = Lockstep(
        session.candidate, session.levels, profile=session.profile, exercised=session.exercised
    )
    ran, steered = 0, False
    inputs = Inputs(swarm.block_size, MAX_DEEP_BLOCKS, session.profile.token_limit)
    # Probes for a rule already found (or waived) are not drawn again: the examples left
    # go to what has not been found yet, so one run reports every finding.
    avoid = frozenset(session.profile.waived) | frozenset(session.findings)
    try:
        lockstep.run(
            {
                "op": "reset",
                "num_blocks": swarm.num_blocks,
                "block_size": swarm.block_size,
                **session.profile.reset_fields(),
                **(session.profile.events_fields() if EVENTS in session.levels else {}),
                **(
                    tiers_fields(RandomChooser(base + 1), swarm.num_blocks, session.profile.tiers)
                    if TIERS in session.levels
                    else {}
                ),
            }
        )
        for index, draw in enumerate(_step_draws(chooser, swarm.length)):
            details = RandomChooser(_seed(base, index, draw))
            kind = details.choice(swarm.kinds)
            for step in _steps(kind, details, inputs, swarm, session.levels, lockstep, avoid):
                lockstep.run(step)
            if lockstep.steps_run >= OPERATIONS:
                break  # the fills took the example's budget
        lockstep.finish(final=True)
        # The example's reach, before the draws that close it (a clear would empty it).
        ran, steered = lockstep.steps_run, True
        _steer(lockstep)
        for step in _closing_steps(base, inputs, swarm, session, lockstep, avoid):
            lockstep.run(step)
        lockstep.finish(final=True)
    except Disagreement as exc:
        session.record(exc.difference)
    except CandidateFailure as exc:
        session.record(failure_difference(exc, lockstep))
        _reopen(session)
    except Exception as exc:  # the kit's own bug: end the search, report it (never a pass)
        found = exc if isinstance(exc, KitError) else None
        if found is None:
            found = KitError.of(exc, list(lockstep.trace), where="drawing a step")
        found.example = session.examples
        session.kit_error = found
        session.stopped = f"kit error: {found.error}"
        raise StopSearch(session.stopped) from exc
    finally:
        # The closing draws are not counted: the budget is spent as before they existed.
        session.operations += ran if steered else lockstep.steps_run
        if not steered:
            _steer(lockstep)


#: Mixed into an example's seed for the chooser of its closing draws (a stream of its own).
CLOSING_SALT = 0x5EED_C1EA


def _closing_steps(
    base: int,
    inputs: Inputs,
    swarm: Swarm,
    session: Session,
    lockstep: Lockstep,
    avoid: frozenset[str],
) -> Iterator[dict[str, Any]]:
    """The draws that close an example (a clear of the whole cache), after its last step,
    from a chooser of their own: every step before them is what it was without them."""
    side = RandomChooser(base ^ CLOSING_SALT)
    for kind in closing_kinds(session.levels):
        step = draw_step(
            side, inputs, session.levels, swarm.num_blocks, lockstep, kind=kind, avoid=avoid
        )
        if step is not None:
            yield step


def _step_draws(chooser: Chooser, length: int) -> list[int]:
    """One Hypothesis draw per step, all distinct. Drawn as one unique list, so that
    Hypothesis's mutator (which copies a value to other places of an example) leaves
    them alone: copying a seed would only repeat a step."""
    if isinstance(chooser, DataChooser):
        draws: list[int] = chooser.data.draw(
            st.lists(st.integers(*SEEDS), min_size=length, max_size=length, unique=True)
        )
        return draws
    return [chooser.integer(*SEEDS) for _ in range(length)]


def _seed(base: int, index: int, draw: int) -> int:
    """One step's seed from the example's seed, the step's index and its own draw."""
    return (base * 1_000_003 + index) * 4_294_967_311 + draw


def _steps(
    kind: str,
    details: RandomChooser,
    inputs: Inputs,
    swarm: Swarm,
    levels: frozenset[str],
    lockstep: Lockstep,
    avoid: frozenset[str],
) -> Iterator[dict[str, Any]]:
    """The step(s) of one draw: one operation, the inserts of a fill, or a churn burst
    (lazily, so each sees the state the previous one left)."""
    if kind == "churn":
        yield from _churn(details, inputs, lockstep, TIERS in levels)
        return
    if kind != "fill":
        step = draw_step(
            details, inputs, levels, swarm.num_blocks, lockstep, kind=kind, avoid=avoid
        )
        if step is not None:
            yield step
        return
    style = details.choice(("mixed", "deep", "wide", "siblings", "siblings"))
    most = SIBLINGS_MOST if style == "siblings" else FILL_MOST
    count = details.integer(4, max(4, min(most, swarm.num_blocks // 2)))
    prefix = details.integer(0, 4)
    if style == "siblings":
        inputs.new_heads(details)
    for _ in range(count):
        namespace = Inputs.namespace(details) if NAMESPACES_LEVEL in levels else None
        if style == "siblings":
            tokens = inputs.sibling_tokens(details)
        else:
            tokens = inputs.long_tokens(details, style, prefix)
        step = {"op": "insert", "tokens": tokens, "namespace": namespace}
        step.update(pin=False, batch=True)
        if EVICTION not in levels and lockstep.would_evict(step):
            continue
        inputs.filled(tokens, namespace)
        yield step


def _churn(
    details: RandomChooser, inputs: Inputs, lockstep: Lockstep, tiers: bool = False
) -> Iterator[dict[str, Any]]:
    """A burst of the traffic a busy cache sees over what it holds: pinned matches of
    sequences filled earlier (leases held a while, so shared heads collect many pins),
    releases, small evictions and re-inserts of sequences evicted meanwhile; with
    ``tiers``, half the matches are restores or lookups of what went down. Each step is
    compared as it runs. Cost: 20-120 steps."""
    if not inputs.cached:
        return
    for _ in range(details.integer(*CHURN)):
        tokens, namespace = details.choice(inputs.cached)
        roll = details.integer(0, 19)
        if roll < 8:
            op = details.choice(("restore", "restore", "lookup", "match")) if tiers else "match"
            yield {"op": op, "tokens": tokens, "namespace": namespace, "pin": True}
        elif roll < 12 and lockstep.live:
            yield {"op": "release", "lease": details.choice(lockstep.live)}
        elif roll < 15:
            yield {"op": "evict", "count": details.integer(1, 3)}
        else:
            pin = details.integer(0, 3) == 0
            yield {"op": "insert", "tokens": tokens, "namespace": namespace, "pin": pin}


def failure_difference(failure: CandidateFailure, lockstep: Lockstep) -> Difference:
    """A candidate that could not answer, as a finding of kind ``failure``."""
    trace = failure.trace or list(lockstep.trace)
    row = BY_NAME.get(trace[-1]["op"]) if trace else None
    rules = row.rules if row is not None else ("R-INV-2",)  # none run: the reset's
    message = str(failure).splitlines()[0]
    return Difference(
        index=max(len(trace) - 1, 0),
        trace=trace,
        expected={"ok": None},
        actual={"failure": str(failure)},
        reference=lockstep.oracle.name,
        candidate=lockstep.candidate.name,
        levels=sorted(lockstep.levels),
        kind="failure",
        rules=rules,
        cause=f"could not answer ({message})",
    )


def _reopen(session: Session) -> None:
    session.candidate.close()
    if session.reopen is None:
        session.stopped = "the candidate failed and cannot be restarted"
        raise StopSearch(session.stopped)
    try:
        session.candidate = session.reopen()
    except CandidateFailure as exc:
        session.stopped = f"the candidate cannot be restarted: {exc}"
        raise StopSearch(session.stopped) from None


def _steer(lockstep: Lockstep) -> None:
    """Report the example's reach to Hypothesis's targeting (module docstring), read from
    the reference's dump: the deepest path in blocks, the leaves, the most children of
    one edge, the evictable leaves (the eviction queue), blocks evicted, the clock."""
    tree = lockstep.tree
    if tree is None or not currently_in_test_context():
        return
    depth = leaves = evictable = fan_out = 0
    spaces = tree.dump()["namespaces"]
    pending = [(edge, 0) for space in spaces for edge in space["children"]]
    for space in spaces:
        fan_out = max(fan_out, len(space["children"]))
    while pending:
        edge, above = pending.pop()
        below = above + len(edge["blocks"])
        depth = max(depth, below)
        fan_out = max(fan_out, len(edge["children"]))
        if not edge["children"]:
            leaves += 1
            evictable += edge["pins"][-1] == 0
        pending.extend((child, below) for child in edge["children"])
    target(float(depth), label="depth in blocks")
    target(float(leaves), label="leaves")
    target(float(fan_out), label="children of one node")
    target(float(lockstep.evicted), label="blocks evicted")
    target(float(tree.clock), label="clock")
    if isinstance(getattr(tree, "tiers", None), tuple):  # a tiered oracle (R-TIER-3)
        moved = tree.stats()
        target(float(sum(moved.demoted.values())), label="blocks demoted")
        target(float(sum(moved.restored.values())), label="blocks restored")
    target(float(evictable), label="eviction queue entries")
