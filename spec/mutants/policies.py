"""Planted bugs of the eviction policies (R-POL-*): each runs under the policy it breaks.

Each swaps the tree's policy object for a subclass of the reference's own policy that
differs in one step, or wraps one of the tree's steps, as the other mutants do; the
policies' modules themselves are untouched, so the oracle beside them stays correct.
"""

from __future__ import annotations

from collections.abc import Sequence

from kachedb_radix.reference.node import Node
from kachedb_radix.reference.policies import FifoPolicy, LfuPolicy, PriorityPolicy, SlruPolicy
from kachedb_radix.reference.policies.retention import Retention

from .base import MutantTree, mutant


class _ForgetfulLfu(LfuPolicy):
    """Leaves a new block's count as the block id's last life left it."""

    def cached(
        self, blocks: Sequence[int], now: int, namespace: str | None, retention: Retention
    ) -> Sequence[int]:
        return ()


@mutant("lfu_count_outlives_eviction", "R-POL-7", "R-POL-3", policy="lfu")
class LfuCountOutlivesEviction(MutantTree):
    """A block id cached again inherits the hit count of the tokens it held before."""

    def __init__(self, num_blocks: int, block_size: int = 16, **options: object) -> None:
        super().__init__(num_blocks, block_size, **options)  # type: ignore[arg-type]
        self._policy = _ForgetfulLfu(num_blocks, self._stamps, {})


class _UseIsBirth(FifoPolicy):
    """Moves a block's birth to every call that finds it."""

    def found(
        self, blocks: Sequence[int], now: int, namespace: str | None, retention: Retention | None
    ) -> Sequence[int]:
        return self.cached(blocks, now, namespace, Retention())


@mutant("fifo_born_again_on_use", "R-POL-4", policy="fifo")
class FifoBornAgainOnUse(MutantTree):
    """FIFO that counts a hit as a new insertion: a disguised LRU."""

    def __init__(self, num_blocks: int, block_size: int = 16, **options: object) -> None:
        super().__init__(num_blocks, block_size, **options)  # type: ignore[arg-type]
        self._policy = _UseIsBirth(num_blocks, self._stamps, {})


@mutant("priority_lost_on_split", "R-POL-7", "R-POL-5", policy="priority")
class PriorityLostOnSplit(MutantTree):
    """A split gives the upper half's blocks their namespace's default priority."""

    def _split(self, node: Node, at: int) -> Node:
        upper = super()._split(node, at)
        policy = self._policy
        assert isinstance(policy, PriorityPolicy)
        for block in upper.edge_blocks():
            policy._priority[block] = policy._fallback[block]
            policy._until[block] = 0
        return upper


class _LatestWins(PriorityPolicy):
    """Gives every block an insert finds the insert's priority, lower or not."""

    def found(
        self, blocks: Sequence[int], now: int, namespace: str | None, retention: Retention | None
    ) -> Sequence[int]:
        if retention is not None:
            wanted, until = self._request(now, namespace, retention)
            for block in blocks:
                self._set(block, wanted, until)
        return ()


@mutant("priority_lowered_by_a_later_insert", "R-POL-5", policy="priority")
class PriorityLoweredByALaterInsert(MutantTree):
    """The latest insert's priority wins: a one-off call lowers an agent loop's prefix."""

    def __init__(self, num_blocks: int, block_size: int = 16, **options: object) -> None:
        super().__init__(num_blocks, block_size, **options)  # type: ignore[arg-type]
        self._policy = _LatestWins(num_blocks, self._stamps, {})


class _VersionClock(PriorityPolicy):
    """Counts ``retain_for`` from the tree's published version, not its clock."""

    tree: MutantTree

    def _request(self, now: int, namespace: str | None, retention: Retention) -> tuple[int, int]:
        wanted, until = super()._request(now, namespace, retention)
        if until:
            until = self.tree.version + 1 + (retention.retain_for or 0)
        return wanted, until


@mutant("retention_counted_in_versions", "R-POL-5", policy="priority")
class RetentionCountedInVersions(MutantTree):
    """``retain_for`` counted in published versions (evictions publish too), not ticks."""

    def __init__(self, num_blocks: int, block_size: int = 16, **options: object) -> None:
        super().__init__(num_blocks, block_size, **options)  # type: ignore[arg-type]
        policy = _VersionClock(num_blocks, self._stamps, {})
        policy.tree = self
        self._policy = policy


class _NeverDemotes(SlruPolicy):
    """A protected segment without a size."""

    def found(
        self, blocks: Sequence[int], now: int, namespace: str | None, retention: Retention | None
    ) -> Sequence[int]:
        capacity, self._capacity = self._capacity, len(self._protected)
        try:
            return super().found(blocks, now, namespace, retention)
        finally:
            self._capacity = capacity

    def check(self, cached: object, clock: int) -> str | None:
        return None  # its own check would see the segment overfull


@mutant(
    "protected_never_demotes", "R-POL-6", policy="slru", policy_options={"protected_percent": 25}
)
class ProtectedNeverDemotes(MutantTree):
    """SLRU whose protected segment grows past its size: nothing is ever demoted."""

    def __init__(self, num_blocks: int, block_size: int = 16, **options: object) -> None:
        super().__init__(num_blocks, block_size, **options)  # type: ignore[arg-type]
        self._policy = _NeverDemotes(num_blocks, self._stamps, {"protected_percent": 25})
