"""What the gate times: any conformance target, seen as a factory of trees.

The gate drives trees through the reference API (``match``, ``insert``, ``evict``,
``stats``, leases with ``release()``), so it accepts every target the conformance kit
accepts (:mod:`kachedb_radix.spec.conform.targets`):

* ``reference``, ``accel``, or ``module:Class`` naming a tree class -- timed directly,
  through the class itself (the kit's adapter only builds the trees);
* ``module:attribute`` naming a plain-data candidate
  (:class:`kachedb_radix.spec.conform.candidate.Candidate`), or ``--cmd "program args"``
  for a program speaking the stdio protocol -- timed through :class:`CandidateTree`,
  which presents a candidate as a tree (each tree of a ``--cmd`` target is its own
  process; a round trip per call is part of what is timed, as it is part of what such a
  cache costs its caller).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from ..conform.adapter import TreeAdapter
from ..conform.candidate import Candidate
from ..conform.targets import command, resolve
from ..protocol.client import DEFAULT_STARTUP_TIMEOUT, DEFAULT_TIMEOUT
from ..twins import TWIN_NAMES

TreeFactory = Callable[[int, int], Any]


@dataclass
class GateTarget:
    """A target the gate can time.

    Attributes:
        name: how it is named in reports and in its baseline file.
        factory: ``factory(num_blocks, block_size)`` builds an empty tree.
        implementation: what its trees report as ``implementation`` (checked on every
            tree, so a silent fallback to another implementation cannot pass).
        reuse_trees: whether a tree built for one case may serve another (not when all
            trees are one shared candidate object).
        pool: ``"reference"`` or ``"accel"``: whose block pool's host side to time too.
        closers: what to close at the end (child processes).
        policies: whether ``factory`` takes ``policy=`` (R-POL-1): then the eviction
            growth is checked under every policy.
    """

    name: str
    factory: TreeFactory
    implementation: str
    reuse_trees: bool = True
    pool: str | None = None
    closers: list[Callable[[], None]] = field(default_factory=list)
    policies: bool = False

    def close(self) -> None:
        """Close every child process the target started. Idempotent."""
        while self.closers:
            self.closers.pop()()


class CandidateTree:
    """A plain-data candidate seen through the tree API the gate's workloads use.

    Token arrays become lists; answers become attribute objects; a lease is an object
    whose ``release()`` releases it.  Cost: the candidate's own, plus for a program one
    JSON round trip per call.
    """

    def __init__(self, candidate: Candidate, num_blocks: int, block_size: int) -> None:
        candidate.reset(num_blocks, block_size)
        self.candidate = candidate
        self.implementation = candidate.name

    @staticmethod
    def _tokens(tokens: object) -> object:
        tolist = getattr(tokens, "tolist", None)
        return tolist() if callable(tolist) else tokens

    def _lease(self, lease: int | None) -> Any:
        if lease is None:
            return None
        candidate = self.candidate
        return SimpleNamespace(id=lease, release=lambda: candidate.release(lease))

    def match(self, tokens: object, namespace: object = None, *, pin: bool = False) -> Any:
        answer = self.candidate.match(self._tokens(tokens), namespace, pin)
        return SimpleNamespace(**{**answer, "lease": self._lease(answer["lease"])})

    def insert(self, tokens: object, namespace: object = None, *, pin: bool = False) -> Any:
        answer = self.candidate.insert(self._tokens(tokens), namespace, pin)
        return SimpleNamespace(**{**answer, "lease": self._lease(answer["lease"])})

    def release(self, lease: Any) -> None:
        self.candidate.release(lease.id)

    def evict(self, count: int) -> tuple[int, ...]:
        return tuple(self.candidate.evict(count)["freed"])

    def stats(self) -> Any:
        return SimpleNamespace(**self.candidate.stats())


def _tree_class_target(name: str) -> GateTarget:
    def adapter(num_blocks: int, block_size: int, policy: str = "lru") -> TreeAdapter:
        opened = resolve(name).open()
        assert isinstance(opened, TreeAdapter)
        opened.reset(num_blocks, block_size, policy)
        return opened

    def factory(num_blocks: int, block_size: int, policy: str = "lru") -> Any:
        return adapter(num_blocks, block_size, policy).tree

    probing = adapter(1, 1)
    probe = probing.tree
    implementation = str(getattr(probe, "implementation", type(probe).__name__))
    pool = name if name in TWIN_NAMES else None
    policies = "policies" in probing.levels
    return GateTarget(name, factory, implementation, pool=pool, policies=policies)


def _candidate_target(
    name: str, make: Callable[[], Candidate], shared: bool | None = None
) -> GateTarget:
    first = make()
    if shared is None:
        # A module attribute may name one candidate object (shared by every tree) or
        # make a new one each time: ask twice.
        second = make()
        shared = second is first
        if not shared:
            second.close()
    target = GateTarget(name, lambda n, b: None, first.name, reuse_trees=not shared)

    def factory(num_blocks: int, block_size: int) -> CandidateTree:
        candidate = first if shared else make()
        tree = CandidateTree(candidate, num_blocks, block_size)
        if candidate is not first:
            target.closers.append(candidate.close)
            # a tree dropped early (the first eviction's rounds) closes its process now
            weakref.finalize(tree, candidate.close)
        return tree

    target.closers.append(first.close)
    target.factory = factory
    return target


def gate_target(
    name: str | None, cmd: str | None = None, timeouts: tuple[float, float] | None = None
) -> GateTarget:
    """The target named on the command line (``name``, or a program ``cmd``, given
    ``timeouts`` seconds per answer and for its start: the protocol's defaults for None).

    Raises:
        spec.targets.TargetError: unknown name, import failure, wrong shape, empty ``cmd``.
        spec.candidate.CandidateFailure: the program does not start or fails its handshake.
    """
    if cmd is not None:
        per_call, startup = timeouts or (DEFAULT_TIMEOUT, DEFAULT_STARTUP_TIMEOUT)

        def start() -> Any:
            return command(cmd, timeout=per_call, startup_timeout=startup).open()

        return _candidate_target(f"cmd:{cmd}", start, shared=False)
    assert name is not None
    target = resolve(name)
    found = target.open()
    if isinstance(found, TreeAdapter):
        return _tree_class_target(name)
    found.close()
    return _candidate_target(name, target.open)
