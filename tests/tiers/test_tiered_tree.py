"""The tiered tree (R-TIER-*): rules by example, and a state machine that follows every
call's moves through :class:`TierContents` (each slot holding a label of its prefix),
so that a misordered or wrong move shows as a block holding the wrong prefix.

Every test runs once per twin (``make_tiers``); under the C twin the state machine also
runs the reference in lockstep and compares every answer and dump (one suite, both
twins, and their agreement).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kachedb_radix.reference.errors import (
    ForeignLeaseError,
    InvalidArgumentError,
    InvalidTokensError,
    LeaseReleasedError,
    OutOfBlocksError,
)
from kachedb_radix.reference.tiers import Move, TieredTree
from kachedb_radix.spec.conform.contents import TierContents
from tests.conftest import TIER_IMPLEMENTATIONS, TreeFactory

B = 2


def path(*blocks: int) -> list[int]:
    """Tokens of a path whose block i is ``[b, b]`` for the given ``b`` values."""
    return [token for block in blocks for token in (block, block)]


# ---------------------------------------------------------------------- rules by example


def test_each_tier_is_a_tree_and_the_dump_shows_each(make_tiers: TreeFactory) -> None:
    """R-TIER-1: the device tree's dump, with each slower tier's under ``tiers``; R-TIER-2:
    insert is the device tree's insert, ids and all."""
    tiers = make_tiers(2, 3, 4, B)
    plain = make_tiers(2, 0, 0, B)
    assert tiers.tiers == ("device", "host", "disk") and plain.tiers == ("device",)
    for tree in (tiers, plain):
        done = tree.insert(path(1, 2))
        assert (done.blocks, done.allocated, done.moves) == ((0, 1), (0, 1), ())
    tiers.evict(2)
    dump = tiers.dump()
    assert set(dump["tiers"]) == {"host", "disk"} and dump["write_through"] is False
    assert dump["tiers"]["host"] == tiers.tree("host").dump()
    assert dump["namespaces"] == [] and dump["num_blocks"] == 2
    assert tiers.capacity("disk") == 4 and plain.capacity("disk") == 0
    assert tiers.namespaces() == [None]
    assert tiers.block_key("host", 1).parent == 0
    with pytest.raises(InvalidArgumentError):
        tiers.block_key("host", 7)
    assert plain.dump()["tiers"] == {}


def test_device_eviction_demotes_the_whole_path_to_the_host(make_tiers: TreeFactory) -> None:
    """R-TIER-3: the victim's path goes down in one insert; the host keeps it usable."""
    tiers = make_tiers(3, 4, 0, B)
    tiers.insert(path(1, 2, 3))
    done = tiers.insert(path(7))  # the device is full: block 2 (tail of 1,2,3) goes down
    assert done.evicted == (2,)
    assert done.moves == (
        Move("device", 0, "host", 0),
        Move("device", 1, "host", 1),
        Move("device", 2, "host", 2),
    )
    found = tiers.lookup(path(1, 2, 3))
    assert found.tiers == ("device", "device", "host")
    assert found.plan.start == 2 and found.plan.sources == (("host", 2),)
    tiers.check_invariants()


def test_a_block_already_on_the_host_is_not_copied_again(make_tiers: TreeFactory) -> None:
    """R-TIER-3: demotion reuses what the next tier holds."""
    tiers = make_tiers(3, 4, 0, B)
    tiers.insert(path(1, 2, 3))
    tiers.evict(3)  # the whole path goes down, three copies
    tiers.restore(path(1, 2, 3))  # back up; the host keeps its copies
    again = tiers.evict(3)
    assert again.freed == (2, 1, 0) and again.moves == () and again.dropped == ()
    assert tiers.stats().demoted["host"] == 3
    tiers.check_invariants()


def test_host_eviction_demotes_to_disk_and_the_last_tier_drops(make_tiers: TreeFactory) -> None:
    tiers = make_tiers(2, 2, 2, B)
    tiers.insert(path(1, 2))
    tiers.evict(2)  # -> host
    to_disk = tiers.evict(2, "host")
    assert [move.target_tier for move in to_disk.moves] == ["disk", "disk"]
    tiers.insert(path(5, 6))
    tiers.evict(2)
    tiers.evict(2, "host")  # the disk is full: 1,2 dropped from the disk
    assert tiers.lookup(path(1, 2)).length == 0
    assert tiers.lookup(path(5, 6)).tiers == ("disk", "disk")
    assert tiers.stats().dropped["disk"] == 2
    tiers.check_invariants()


def test_moves_into_slower_tiers_run_first(make_tiers: TreeFactory) -> None:
    """R-TIER-8: a host slot is read (to disk) before a demotion overwrites it."""
    tiers = make_tiers(1, 1, 2, B)
    tiers.insert(path(1))
    tiers.evict(1)  # 1 -> host slot 0
    done = tiers.insert(path(2))
    tiers.insert(path(3))  # device victim 2 -> host slot 0, whose 1 goes to disk first
    assert tiers.lookup(path(1)).tiers == ("disk",)
    del done
    contents_check = TierContents(B)
    tiers2 = make_tiers(1, 1, 2, B)
    for block in (1, 2, 3):
        stored = tiers2.insert(path(block))
        contents_check.run(stored.moves)
        contents_check.write("device", stored.blocks, None, path(block), stored.reused)
    for block in (1, 2, 3):
        found = tiers2.lookup(path(block))
        contents_check.check(found.tiers, found.blocks, None, path(block))


def test_restore_brings_host_and_disk_blocks_up_and_keeps_their_copies(
    make_tiers: TreeFactory,
) -> None:
    """R-TIER-6."""
    tiers = make_tiers(4, 2, 4, B)
    tiers.insert(path(1, 2, 3, 4))
    tiers.evict(2)  # 4, 3 -> host needs the whole path: 4 blocks, host holds 2 -> dropped
    assert tiers.stats().dropped["device"] == 2
    tiers.insert(path(1, 2, 3, 4))
    tiers.evict(4)
    found = tiers.lookup(path(1, 2, 3, 4))
    assert found.tiers == ("disk",) * 4 or found.length < 8
    tiers.check_invariants()
    fresh = make_tiers(4, 4, 4, B)
    fresh.insert(path(1, 2, 3, 4))
    fresh.evict(4)  # all four on the host
    fresh.evict(2, "host")  # the host's tail two go to the disk (with their path)
    found = fresh.lookup(path(1, 2, 3, 4))
    assert found.tiers == ("host", "host", "disk", "disk")
    done = fresh.restore(path(1, 2, 3, 4), pin=True)
    assert [move.source_tier for move in done.restored] == ["host", "host", "disk", "disk"]
    assert fresh.lookup(path(1, 2, 3, 4)).tiers == ("device",) * 4
    assert fresh.tree("host").stats().cached == 2  # the copies stay
    assert fresh.tree("disk").stats().cached == 4
    fresh.release(done.lease)
    fresh.check_invariants()


def test_a_restore_without_device_room_changes_nothing(make_tiers: TreeFactory) -> None:
    """R-TIER-6: the device insert fails before anything moves."""
    tiers = make_tiers(2, 4, 0, B)
    tiers.insert(path(1, 2))
    tiers.evict(2)
    pinned = tiers.insert(path(5, 6), pin=True)
    before = tiers.dump()
    with pytest.raises(OutOfBlocksError):
        tiers.restore(path(1, 2))
    assert tiers.dump() == before
    tiers.release(pinned.lease)
    tiers.check_invariants()


def test_a_pinned_block_is_never_demoted(make_tiers: TreeFactory) -> None:
    """R-TIER-7: a lease holds its blocks in their tiers."""
    tiers = make_tiers(2, 2, 2, B)
    tiers.insert(path(1, 2))
    tiers.evict(2)
    held = tiers.lookup(path(1, 2), pin=True)  # pins the host copy
    assert held.tiers == ("host", "host")
    assert tiers.evict(2, "host").freed == ()
    tiers.insert(path(3, 4))
    assert tiers.evict(2).dropped == (("device", 1), ("device", 0))  # host full of pins
    tiers.release(held.lease)
    assert tiers.evict(2, "host").freed == (1, 0)
    tiers.check_invariants()


def test_write_through_copies_at_insert_after_the_caller_writes(make_tiers: TreeFactory) -> None:
    """R-TIER-4."""
    tiers = make_tiers(2, 4, 0, B, write_through=True)
    done = tiers.insert(path(1, 2))
    assert done.moves == ()
    assert done.after == (Move("device", 0, "host", 0), Move("device", 1, "host", 1))
    assert tiers.evict(2).moves == ()  # already there: nothing to copy
    assert tiers.lookup(path(1, 2)).tiers == ("host", "host")
    tiers.check_invariants()


def test_lookup_without_pin_is_a_query(make_tiers: TreeFactory) -> None:
    """R-TIER-5: no clock moves, no stamp, nothing changes."""
    tiers = make_tiers(2, 2, 0, B)
    tiers.insert(path(1, 2))
    tiers.evict(1)
    before = tiers.dump()
    found = tiers.lookup(path(1, 2, 9))
    assert (found.length, found.tiers, found.lease) == (4, ("device", "host"), None)
    assert tiers.dump() == before


def test_events_name_each_tier_by_its_medium(make_tiers: TreeFactory) -> None:
    """R-TIER-9: one batch per call; GPU, CPU, STORAGE."""
    tiers = make_tiers(1, 1, 1, B, events=True)
    tiers.insert(path(1))
    tiers.evict(1)
    tiers.evict(1, "host")
    batches = tiers.take_events()
    assert len(batches) == 3
    media = [[(type(event).__name__, event.medium) for event in batch.events] for batch in batches]
    assert media == [
        [("BlockStored", "GPU")],
        [("BlockRemoved", "GPU"), ("BlockStored", "CPU")],
        [("BlockRemoved", "CPU"), ("BlockStored", "STORAGE")],
    ]
    stored = [batch.events[-1] for batch in batches]
    assert len({tuple(event.block_hashes) for event in stored}) == 1  # one block, three media


@pytest.mark.parametrize(
    ("args", "options", "message"),
    [
        ((0,), {}, "device_blocks must be an int >= 1"),
        ((2, -1), {}, "host_blocks must be an int >= 0"),
        ((2, 0, True), {}, "disk_blocks must be an int >= 0"),
        ((2,), {"write_through": True}, "write_through needs a host tier"),
        ((2, 2), {"write_through": 1}, "write_through must be a bool"),
    ],
)
def test_bad_construction_is_refused(
    make_tiers: TreeFactory, args: tuple[Any, ...], options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        make_tiers(*args, **options)


def test_bad_calls_change_nothing(make_tiers: TreeFactory) -> None:
    tiers = make_tiers(2, 2, 0, B)
    held = tiers.insert(path(1), pin=True)
    before = tiers.dump()
    with pytest.raises(InvalidArgumentError, match="no disk tier"):
        tiers.evict(1, "disk")
    with pytest.raises(InvalidArgumentError, match="tier must be one of"):
        tiers.evict(1, "gpu")
    with pytest.raises(InvalidArgumentError):
        tiers.evict(-1)
    with pytest.raises(ForeignLeaseError):
        tiers.release(make_tiers(1).insert(path(1), pin=True).lease)
    with pytest.raises(InvalidArgumentError):
        tiers.take_events()
    assert tiers.dump() == before
    tiers.release(held.lease)
    with pytest.raises(LeaseReleasedError):
        tiers.release(held.lease)
    tiers.check_invariants()


@pytest.mark.parametrize(
    "bad",
    [[1, 2, "x", 4], [1, True, 3, 4], [1, 2, -1, 4], [1, 2, 2**32, 4], (1, 2.0), "ab", 7],
    ids=["str", "bool", "negative", "too-large", "tuple-float", "a-str", "an-int"],
)
def test_bad_tokens_or_namespace_change_nothing(make_tiers: TreeFactory, bad: Any) -> None:
    """Every call that takes tokens refuses malformed ones (R-TOK-*) and a namespace that
    is not None or a str, before any change -- a list reaches the tier trees unchecked by
    the tier layer, and the first tree call's own checks refuse it."""
    tiers = make_tiers(2, 2, 2, B)
    tiers.insert(path(1, 2))
    tiers.insert(path(3, 4))  # (1, 2) demoted to the host
    tiers.evict(1, "host")
    before = tiers.dump()
    calls: list[Callable[[Any, Any], object]] = [
        lambda tokens, ns: tiers.lookup(tokens, ns),
        lambda tokens, ns: tiers.lookup(tokens, ns, pin=True),
        lambda tokens, ns: tiers.match(tokens, ns, pin=True),
        lambda tokens, ns: tiers.insert(tokens, ns, pin=True),
        lambda tokens, ns: tiers.restore(tokens, ns, pin=True),
        lambda tokens, ns: tiers.adopt("host", tokens, ns),
    ]
    for call in calls:
        with pytest.raises(InvalidTokensError):
            call(bad, None)
        with pytest.raises(InvalidArgumentError):
            call(path(1, 2), 5)
        assert tiers.dump() == before
    tiers.check_invariants()


# ---------------------------------------------------------------------- the state machine

TOKENS = st.lists(st.integers(1, 3), min_size=0, max_size=5).map(lambda blocks: path(*blocks))
NAMESPACES = st.sampled_from([None, "a"])


class TieredMachine(RuleBasedStateMachine):
    """Random calls on a small tiered tree; every move followed through the contents."""

    factory: TreeFactory = TieredTree

    def __init__(self) -> None:
        super().__init__()
        self.tiers: Any = None
        self.shadow: Any = None  # the reference, in lockstep, under the C twin
        self.contents = TierContents(B)
        self.leases: list[tuple[Any, Any]] = []

    @rule(
        device=st.integers(1, 4),
        host=st.integers(0, 5),
        disk=st.integers(0, 5),
        write_through=st.booleans(),
        policy=st.sampled_from(["lru", "fifo", "lfu"]),
    )
    @precondition(lambda self: self.tiers is None)
    def build(self, device: int, host: int, disk: int, write_through: bool, policy: str) -> None:
        write_through = write_through and host > 0
        self.tiers = self.factory(device, host, disk, B, write_through=write_through, policy=policy)
        if self.factory is not TieredTree:
            self.shadow = TieredTree(
                device, host, disk, B, write_through=write_through, policy=policy
            )

    def both(self, call: str, *args: Any, **options: Any) -> Any:
        """Call the tree (and the shadow); the same answer or the same error class."""
        try:
            result = getattr(self.tiers, call)(*args, **options)
        except OutOfBlocksError:
            if self.shadow is not None:
                with pytest.raises(OutOfBlocksError):
                    getattr(self.shadow, call)(*args, **options)
            raise
        if self.shadow is not None:
            twin = getattr(self.shadow, call)(*args, **options)
            assert _plain(result) == _plain(twin), call
        return result

    @rule(tokens=TOKENS, namespace=NAMESPACES, pin=st.booleans())
    @precondition(lambda self: self.tiers is not None)
    def insert(self, tokens: list[int], namespace: str | None, pin: bool) -> None:
        before = self.tiers.dump()
        try:
            done = self.both("insert", tokens, namespace, pin=pin)
        except OutOfBlocksError:
            assert self.tiers.dump() == before
            return
        self.contents.run(done.moves)
        self.contents.write("device", done.blocks, namespace, tokens, done.reused)
        self.contents.run(done.after)
        self.contents.check(("device",) * len(done.blocks), done.blocks, namespace, tokens)
        self.keep(done.lease)

    @rule(tokens=TOKENS, namespace=NAMESPACES, pin=st.booleans())
    @precondition(lambda self: self.tiers is not None)
    def restore(self, tokens: list[int], namespace: str | None, pin: bool) -> None:
        found = self.tiers.lookup(tokens, namespace)
        before = self.tiers.dump()
        try:
            done = self.both("restore", tokens, namespace, pin=pin)
        except OutOfBlocksError:
            assert self.tiers.dump() == before
            return
        assert done.length == found.length
        assert [(move.source_tier, move.source) for move in done.restored] == list(
            found.plan.sources
        )
        self.contents.run(done.moves)
        self.contents.run(done.restored)
        self.contents.check(("device",) * len(done.blocks), done.blocks, namespace, tokens)
        self.keep(done.lease)

    @rule(tokens=TOKENS, namespace=NAMESPACES, pin=st.booleans())
    @precondition(lambda self: self.tiers is not None)
    def lookup(self, tokens: list[int], namespace: str | None, pin: bool) -> None:
        found = self.both("lookup", tokens, namespace, pin=pin)
        self.contents.check(found.tiers, found.blocks, namespace, tokens)
        self.keep(found.lease)

    @rule(count=st.integers(0, 3), tier=st.sampled_from(["device", "host", "disk"]))
    @precondition(lambda self: self.tiers is not None)
    def evict(self, count: int, tier: str) -> None:
        if tier not in self.tiers.tiers:
            return
        done = self.both("evict", count, tier)
        self.contents.run(done.moves)

    @rule(data=st.data())
    @precondition(lambda self: bool(self.leases))
    def release(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.leases) - 1))
        lease, twin = self.leases.pop(index)
        self.tiers.release(lease)
        if twin is not None:
            self.shadow.release(twin)

    def keep(self, lease: Any) -> None:
        if lease is None:
            return
        twin = None
        if self.shadow is not None:
            twin = self.shadow._leases[lease.id]  # the shadow issued the same id
        self.leases.append((lease, twin))

    @invariant()
    def holds(self) -> None:
        if self.tiers is None:
            return
        self.tiers.check_invariants()
        dump = self.tiers.dump()
        self.contents.check_tier("device", dump)  # R-TIER-8: every block holds its prefix
        for tier, tier_dump in dump["tiers"].items():
            self.contents.check_tier(tier, tier_dump)
        for lease, _ in self.leases:  # R-TIER-7: every pinned block is where it was pinned
            for tier, tier_lease in lease.leases.items():
                found = self.tiers.tree(tier).snapshot().match(tier_lease.tokens, lease.namespace)
                assert tuple(found.blocks) == tuple(tier_lease.blocks)
        if self.shadow is not None:
            self.shadow.check_invariants()
            assert self.tiers.dump() == self.shadow.dump()
            assert self.tiers.stats() == self.shadow.stats()


def _plain(result: Any) -> Any:
    """A result without its lease object (leases compare by id)."""
    fields = getattr(result, "__dataclass_fields__", None)
    if fields is None:
        return result
    return {
        name: (
            getattr(result, name).id
            if name == "lease" and getattr(result, name)
            else getattr(result, name)
        )
        for name in fields
    }


@pytest.mark.parametrize("impl_name", sorted(TIER_IMPLEMENTATIONS))
def test_the_state_machine(impl_name: str) -> None:
    machine: type[TieredMachine] = type(
        f"{impl_name}Machine", (TieredMachine,), {"factory": TIER_IMPLEMENTATIONS[impl_name]}
    )
    assert machine.factory(1).implementation == impl_name
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=120,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
