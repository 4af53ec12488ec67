"""Stateful test: every implementation against the brute-force model (tests/support/model.py).

Hypothesis drives random insert, match, pin, release and evict calls over a two- or
three-letter alphabet, block sizes 1 to 4 and pools of 1 to 12 blocks, so splits,
divergence inside blocks and eviction pressure happen on most steps. After every
step the answers, the counters and the block-level view of ``dump()`` must agree with
the model, and ``check_invariants()`` must pass. Rules exercised: R-MATCH-1,
R-INS-1..6, R-SPLIT-1..2, R-ALLOC-2, R-PIN-1..4, R-LRU-1..4, R-EVICT-1..4, R-NS-1..3,
R-ERR-2, and with readers entering and leaving in between, R-SNAP-1, R-SNAP-2 and
R-EPOCH-1..3.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kachedb_radix.reference.errors import LeaseReleasedError, OutOfBlocksError
from tests.conftest import IMPLEMENTATIONS, TreeFactory
from tests.support.model import Model
from tests.support.trees import flatten

#: Examples per implementation and steps per example: about 16,000 checked steps each.
MAX_EXAMPLES = 400
STEPS = 40

namespaces = st.sampled_from([None, None, "tenant-a"])


def token_lists(alphabet: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, alphabet - 1), max_size=14)


class ModelComparison(RuleBasedStateMachine):
    """The implementation under test and the model, in lockstep."""

    leases = Bundle("leases")
    readers = Bundle("readers")

    def __init__(self, factory: TreeFactory) -> None:
        super().__init__()
        self.factory = factory
        self.tree: Any = None
        self.model: Model | None = None
        self.real_leases: dict[int, Any] = {}
        self.real_readers: dict[int, Any] = {}
        self.alphabet = 2

    @initialize(
        num_blocks=st.integers(1, 12), block_size=st.integers(1, 4), alphabet=st.integers(2, 3)
    )
    def build(self, num_blocks: int, block_size: int, alphabet: int) -> None:
        self.tree = self.factory(num_blocks, block_size)
        self.model = Model(num_blocks, block_size)
        self.alphabet = alphabet

    def _tokens(self, raw: list[int]) -> list[int]:
        return [token % self.alphabet for token in raw]

    @rule(target=leases, raw=token_lists(3), namespace=namespaces, pin=st.booleans())
    def insert(self, raw: list[int], namespace: str | None, pin: bool) -> int:
        assert self.model is not None
        tokens = self._tokens(raw)
        try:
            expected = self.model.insert(tokens, namespace, pin)
        except OutOfBlocksError:
            before = self.tree.dump()
            with pytest.raises(OutOfBlocksError):
                self.tree.insert(tokens, namespace, pin=pin)
            assert self.tree.dump() == before  # R-INS-6, R-ERR-2
            return 0
        got = self.tree.insert(tokens, namespace, pin=pin)
        length, blocks, reused, allocated, evicted, lease_id = expected
        assert got.length == length
        assert tuple(got.blocks) == tuple(blocks)
        assert got.reused == reused
        assert tuple(got.allocated) == tuple(allocated)
        assert tuple(got.evicted) == tuple(evicted)
        return self._remember(lease_id, got.lease)

    @rule(target=leases, raw=token_lists(3), namespace=namespaces, pin=st.booleans())
    def match(self, raw: list[int], namespace: str | None, pin: bool) -> int:
        assert self.model is not None
        tokens = self._tokens(raw)
        length, blocks, lease_id = self.model.match(tokens, namespace, pin)
        got = self.tree.match(tokens, namespace, pin=pin)
        assert got.length == length
        assert tuple(got.blocks) == tuple(blocks)
        return self._remember(lease_id, got.lease)

    def _remember(self, lease_id: int | None, lease: Any) -> int:
        assert (lease_id is None) == (lease is None)
        if lease_id is None:
            return 0
        self.real_leases[lease_id] = lease
        return lease_id

    @precondition(lambda self: self.real_leases)
    @rule(lease_id=leases)
    def release(self, lease_id: int) -> None:
        assert self.model is not None
        if lease_id == 0:
            return
        lease = self.real_leases[lease_id]
        if self.model.leases[lease_id].released:
            before = self.tree.dump()
            with pytest.raises(LeaseReleasedError):
                lease.release()
            assert self.tree.dump() == before
            return
        self.model.release(lease_id)
        self.tree.release(lease)
        assert lease.released

    @rule(count=st.integers(0, 5))
    def evict(self, count: int) -> None:
        assert self.model is not None
        assert tuple(self.tree.evict(count)) == tuple(self.model.evict(count))

    @rule(target=readers)
    def enter_reader(self) -> int:
        assert self.model is not None
        epoch = self.model.enter()
        reader = self.tree.reader()
        assert reader.version == self.model.version
        self.real_readers[epoch] = reader
        return epoch

    @precondition(lambda self: self.real_readers)
    @rule(epoch=readers, raw=token_lists(3), namespace=namespaces)
    def snapshot_match(self, epoch: int, raw: list[int], namespace: str | None) -> None:
        assert self.model is not None
        tokens = self._tokens(raw)
        length, blocks = self.model.snapshot_match(epoch, tokens, namespace)
        got = self.real_readers[epoch].match(tokens, namespace)
        assert (got.length, tuple(got.blocks), got.lease) == (length, tuple(blocks), None)

    @precondition(lambda self: self.real_readers)
    @rule(epoch=readers)
    def leave_reader(self, epoch: int) -> None:
        assert self.model is not None
        reader = self.real_readers[epoch]
        if not self.model.readers[epoch].inside:
            assert reader.left
            return
        self.model.leave(epoch)
        reader.leave()

    @rule()
    def reclaim(self) -> None:
        assert self.model is not None
        assert tuple(self.tree.reclaim()) == tuple(self.model.reclaim())

    @invariant()
    def agrees_with_model(self) -> None:
        if self.model is None:
            return
        self.tree.check_invariants()
        assert flatten(self.tree.dump()) == self.model.flat()
        stats = self.tree.stats()
        assert stats.clock == self.tree.clock == self.model.clock
        assert stats.free == len(self.model.free)
        assert stats.cached == len(self.model.entries)
        assert stats.pinned == self.model.pinned()
        assert stats.evictable == stats.cached - stats.pinned
        assert stats.quarantined == len(self.model.quarantined())
        assert self.tree.dump()["quarantine"] == self.model.quarantined()
        assert stats.version == self.tree.version == self.model.version
        assert stats.readers == len(self.model._inside())


@pytest.mark.slow  # no branch only it covers: the CI coverage run leaves it out (.ci/run)
@pytest.mark.parametrize("impl_name", sorted(IMPLEMENTATIONS))
def test_implementation_matches_brute_force_model(impl_name: str) -> None:
    factory = IMPLEMENTATIONS[impl_name]

    class OnThisImplementation(ModelComparison):
        def __init__(self) -> None:
            super().__init__(factory)

    run_state_machine_as_test(
        OnThisImplementation,
        settings=settings(
            max_examples=MAX_EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
