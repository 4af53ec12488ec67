"""``RadixTree.clone()``: an independent copy that answers exactly as the original would.

The conformance kit dry-runs inserts on a clone of the reference (``Lockstep.would_evict``),
so a clone that drifted from the original in any observable way -- the allocation or
eviction order, the clock, epoch numbers, quarantine -- would make the kit draw wrong
traces; one that shared a mutable table would corrupt the oracle.

Both twins have ``clone`` and every test of its behaviour runs on both (``make_tree``);
the tests that look at the reference's own attributes (its side tables, its queue class,
its subclasses, ``Numbering``, the kit's dry run on the reference oracle) are the
reference's only. tests/accel/test_clone.py adds what only the C twin has: snapshots and
clones sharing chunks and published nodes, and clone() under allocation failure.
"""

from __future__ import annotations

import gc
import random
from collections.abc import Callable
from typing import Any

import pytest
from immutables import Map

from kachedb_radix.reference import RadixTree
from kachedb_radix.reference.allocator import BlockAllocator
from kachedb_radix.reference.errors import ForeignLeaseError, InvariantViolation, RadixError
from kachedb_radix.reference.numbering import Numbering
from kachedb_radix.reference.snapshot import Version
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.lockstep import Lockstep
from kachedb_radix.spec.mutants.base import REGISTRY
from tests.conftest import IMPLEMENTATIONS, TreeFactory
from tests.support.trees import blocks

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI.
pytestmark = pytest.mark.quick

Op = tuple[Any, ...]


def random_program(rng: random.Random, length: int) -> list[Op]:
    """Operations over a small token alphabet, so prefixes are shared and edges split.

    Releases and leaves name a lease or reader made earlier in the same program by its
    position, so a program can run on any tree.
    """
    program: list[Op] = []
    leases = readers = 0
    for _ in range(length):
        kind = rng.choice(("insert", "insert", "match", "release", "evict", "reader", "leave"))
        namespace = rng.choice((None, None, "b"))
        if kind in ("insert", "match"):
            tokens = [rng.randrange(3) for _ in range(rng.randrange(1, 14))]
            pin = rng.random() < 0.3
            leases += pin
            program.append((kind, tokens, namespace, pin))
        elif kind == "release" and leases:
            program.append(("release", rng.randrange(leases)))
        elif kind == "evict":
            program.append(("evict", rng.randrange(4)))
        elif kind == "reader":
            readers += 1
            program.append(("reader",))
        elif kind == "leave" and readers:
            program.append(("leave", rng.randrange(readers)))
    return program


def run_program(tree: Any, program: list[Op]) -> list[Any]:
    """Apply ``program`` to ``tree``; each operation's answer (or error kind) in order."""
    leases: list[Any] = []
    readers: list[Any] = []
    answers: list[Any] = []
    for op in program:
        try:
            answers.append(_apply(tree, op, leases, readers))
        except InvariantViolation:
            raise
        except RadixError as error:  # out of blocks, a second release or leave
            answers.append(error.kind)
            if op[0] in ("insert", "match") and op[3]:
                leases.append(None)  # keeps later releases' positions
        tree.check_invariants()
    return answers


def _apply(tree: Any, op: Op, leases: list[Any], readers: list[Any]) -> Any:
    kind = op[0]
    if kind in ("insert", "match"):
        call: Callable[..., Any] = tree.insert if kind == "insert" else tree.match
        result = call(op[1], op[2], pin=op[3])
        if op[3]:
            leases.append(result.lease)
        evicted = getattr(result, "evicted", None)
        return (result.length, tuple(result.blocks), None if evicted is None else tuple(evicted))
    if kind == "release":
        lease = leases[op[1]]
        return "no lease" if lease is None else lease.release()
    if kind == "evict":
        return tuple(tree.evict(op[1]))
    if kind == "reader":
        readers.append(tree.reader())
        return readers[-1].epoch
    readers[op[1]].leave()
    return tree.reclaim()


def busy_tree(make_tree: TreeFactory = RadixTree) -> tuple[Any, Any, Any]:
    """A tree with branches, two namespaces, a live lease, a reader inside and a quarantine."""
    tree = make_tree(12, 4)
    tree.insert(blocks(1, 2, 3, 4))
    lease = tree.insert(blocks(1, 2, 5), pin=True).lease
    assert lease is not None
    tree.insert(blocks(7, 8), "b")
    reader = tree.reader()
    tree.evict(2)  # quarantined: the reader is inside
    tree.insert(blocks(1, 6, 6))
    assert tree.stats().quarantined == 2 and tree.stats().leases == 1
    return tree, lease, reader


def test_clone_is_the_same_twin(make_tree: TreeFactory, impl_name: str) -> None:
    """Which twin ran: the clone of each is of its own type, never the other's."""
    tree = make_tree(8, 2)
    twin = tree.clone()
    assert type(twin) is type(tree) is IMPLEMENTATIONS[impl_name]
    assert twin.implementation == tree.implementation == impl_name


def test_clone_is_in_the_same_state(make_tree: TreeFactory) -> None:
    tree, _, _ = busy_tree(make_tree)
    twin = tree.clone()
    assert type(twin) is type(tree)
    assert twin.dump() == tree.dump()
    assert twin.stats() == tree.stats()
    assert (twin.version, twin.clock, twin.namespaces()) == (
        tree.version,
        tree.clock,
        tree.namespaces(),
    )
    assert twin.snapshot().dump() == tree.snapshot().dump()
    twin.check_invariants()


@pytest.mark.parametrize("seed", range(40))
def test_clone_answers_as_the_original_would(make_tree: TreeFactory, seed: int) -> None:
    """History H, then a clone; the clone running S answers as a fresh tree running H + S,
    and the original is untouched by it (and the clone by the original)."""
    rng = random.Random(seed)
    history, future = random_program(rng, 30), random_program(rng, 40)
    num_blocks, size = rng.randrange(4, 16), rng.randrange(1, 4)

    original = make_tree(num_blocks, size)
    run_program(original, history)
    twin = original.clone()
    before = original.dump()

    replayed = make_tree(num_blocks, size)
    run_program(replayed, history)
    assert run_program(twin, future) == run_program(replayed, future)
    assert twin.dump() == replayed.dump() and twin.stats() == replayed.stats()
    assert original.dump() == before
    original.check_invariants()

    after_twin = twin.dump()
    run_program(original, future)
    assert twin.dump() == after_twin
    assert original.dump() == replayed.dump()


def test_shared_edges_grow_apart_safely(make_tree: TreeFactory) -> None:
    """Both trees extend the same shared leaf (a chat's next turn, in place when it can):
    the first extends the shared lists in place, the second must copy."""
    tree = make_tree(16, 2)
    tree.insert([1, 1, 2, 2])
    twin = tree.clone()
    twin.insert([1, 1, 2, 2, 3, 3])
    tree.insert([1, 1, 2, 2, 4, 4, 5, 5])
    assert twin.match([1, 1, 2, 2, 3, 3]).length == 6
    assert twin.match([1, 1, 2, 2, 4, 4]).length == 4
    assert tree.match([1, 1, 2, 2, 4, 4, 5, 5]).length == 8
    assert tree.match([1, 1, 2, 2, 3, 3]).length == 4
    tree.check_invariants()
    twin.check_invariants()


def test_shared_edges_trimmed_and_grown_apart(make_tree: TreeFactory) -> None:
    """One tree evicts a shared leaf's tail and grows the leaf again (where nothing else
    reads past the trimmed edge it may append in place); the other still holds the old
    tail and sees its own blocks unchanged."""
    tree = make_tree(16, 2)
    tree.insert([1, 1, 2, 2, 3, 3])
    twin = tree.clone()
    before = twin.dump()
    assert len(tree.evict(1)) == 1
    tree.insert([1, 1, 2, 2, 7, 7, 8, 8])
    assert twin.dump() == before
    before = tree.dump()
    assert len(twin.evict(1)) == 1
    twin.insert([1, 1, 2, 2, 5, 5, 6, 6])
    assert tree.dump() == before
    assert tree.match([1, 1, 2, 2, 7, 7, 8, 8]).length == 8
    assert twin.match([1, 1, 2, 2, 5, 5, 6, 6]).length == 8
    assert tree.match([1, 1, 2, 2, 5, 5]).length == twin.match([1, 1, 2, 2, 7, 7]).length == 4
    tree.check_invariants()
    twin.check_invariants()
    del twin
    gc.collect()
    # Alone again: the trimmed leaf grows in place (accel lowers the chunk's mark again).
    assert len(tree.evict(1)) == 1
    tree.insert([1, 1, 2, 2, 7, 7, 9, 9])
    tree.check_invariants()
    assert tree.match([1, 1, 2, 2, 7, 7, 9, 9]).length == 8


def test_leases_and_readers_stay_with_the_original(make_tree: TreeFactory) -> None:
    tree, lease, reader = busy_tree(make_tree)
    twin = tree.clone()
    with pytest.raises(ForeignLeaseError):
        twin.release(lease)
    lease.release()
    reader.leave()
    assert (tree.stats().leases, tree.stats().readers) == (0, 0)
    # The clone keeps their pins and epochs: it still evicts and quarantines as the
    # original did when it was cloned.
    assert (twin.stats().leases, twin.stats().pinned, twin.stats().readers) == (1, 3, 1)
    assert twin.reclaim() == ()
    assert twin.reader().epoch == tree.reader().epoch  # the epoch numbering goes on alike
    twin.check_invariants()


SHAREABLE = (int, str, type(None), Map, Version)


def test_no_mutable_table_is_shared() -> None:
    """Every attribute of a clone is its own object unless it can never change. This
    also guards attributes added to the tree later, which ``clone`` must copy too."""
    tree, _, _ = busy_tree()
    twin = tree.clone()
    assert vars(twin).keys() == vars(tree).keys()
    for name, value in vars(twin).items():
        if not isinstance(value, SHAREABLE):
            assert value is not vars(tree)[name], f"clone shares tree.{name}"


def test_clone_of_a_subclass_keeps_its_class() -> None:
    mutant = REGISTRY["early_reuse"].tree(8, 2)
    mutant.insert([1, 1, 2, 2])
    twin = mutant.clone()
    assert type(twin) is type(mutant)
    assert twin.dump() == mutant.dump()


def test_clone_keeps_the_queue_class_and_order() -> None:
    """A mutant's own eviction queue survives the copy, entries and order included, and
    the two queues change apart."""
    mutant = REGISTRY["lru_reversed"].tree(8, 2)
    for first in (1, 3, 5):
        mutant.insert([first, first, first + 1, first + 1])
    twin = mutant.clone()
    assert type(twin._queue) is type(mutant._queue)
    assert list(twin._queue.entries()) == list(mutant._queue.entries())
    assert twin.evict(1) == mutant.evict(1)
    twin.evict(1)
    assert twin.dump() != mutant.dump()
    twin.check_invariants()
    mutant.check_invariants()


#: The allocator twins by implementation name (accel's when it is under test).
ALLOCATORS: dict[str, Callable[[int], Any]] = {"reference": BlockAllocator}
if "accel" in IMPLEMENTATIONS:
    from kachedb_radix import accel

    ALLOCATORS["accel"] = accel.BlockAllocator


@pytest.mark.parametrize("twin_name", sorted(ALLOCATORS))
def test_allocator_clone_is_independent(twin_name: str) -> None:
    allocator = ALLOCATORS[twin_name](6)
    allocator.allocate(4)
    allocator.free([1, 3])
    twin = allocator.clone()
    assert type(twin) is type(allocator)
    assert twin.allocate(3) == [1, 3, 4]
    assert allocator.free_ids() == [1, 3, 4, 5]
    assert allocator.allocate(2) == [1, 3]
    twin.check_invariants()
    allocator.check_invariants()


def test_numbering_counts_and_copies() -> None:
    numbering = Numbering(5)
    assert iter(numbering) is numbering
    assert [next(numbering), next(numbering)] == [5, 6]
    twin = numbering.copy()
    assert (next(twin), next(twin), next(numbering)) == (7, 8, 7)
    assert repr(numbering) == "Numbering(next=8)"


def test_would_evict_dry_runs_on_a_clone() -> None:
    """The kit's dry run answers from a clone and leaves the oracle as it was."""
    lockstep = Lockstep(TreeAdapter(RadixTree, "candidate"), frozenset({"core"}))
    lockstep.run({"op": "reset", "num_blocks": 3, "block_size": 1})
    lockstep.run({"op": "insert", "tokens": [1, 2], "namespace": None, "pin": False})
    before = lockstep.oracle.dump()
    fits = {"op": "insert", "tokens": [1, 2, 3], "namespace": None, "pin": True}
    spills = {"op": "insert", "tokens": [4, 5], "namespace": None, "pin": False}
    assert not lockstep.would_evict(fits)
    assert lockstep.would_evict(spills)
    assert lockstep.oracle.dump() == before
    assert lockstep.oracle.stats()["clock"] == 1
