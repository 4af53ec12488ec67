"""Stress: 4 reader threads and 1 writer over 100,000 writer operations (R-SNAP-1,
R-SNAP-2, R-EPOCH-1), for every implementation.

The writer inserts, matches with pins, releases and evicts at random on a small pool,
and records the tree's canonical dump after every call. Readers repeatedly enter an
epoch, match a few sequences on their snapshot, and leave. Afterwards:

* every reader answer equals the answer computed from the writer's dump of that
  version (a version published inside an insert, right after its eviction, is
  checked against the previous version with the evicted blocks cut off);
* no block a reader saw was handed out by an insert that started after the reader
  entered and returned before it left (a global sequence counter orders the events).
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from kachedb_radix.reference.errors import OutOfBlocksError
from tests.conftest import TreeFactory

WRITER_OPS = 100_000
READERS = 4
BLOCK_SIZE = 2
POOL = 48
READER_PAUSE_S = 0.0005
READER_STAY_S = 0.002
SEQUENCES = [
    [random.Random(seed).randrange(3) for _ in range(random.Random(seed + 1).randrange(2, 14))]
    for seed in range(0, 400, 2)
]


def match_in_dump(dump: dict[str, Any], tokens: list[int]) -> tuple[int, tuple[int, ...]]:
    """The longest whole-block match of ``tokens`` in the default namespace of a dump."""
    size = dump["block_size"]
    children = dump["namespaces"][0]["children"] if dump["namespaces"] else []
    blocks: list[int] = []
    position = 0
    while True:
        edge = next(
            (e for e in children if e["tokens"][:size] == tokens[position : position + size]),
            None,
        )
        if edge is None or position + size > len(tokens):
            break
        for index, block in enumerate(edge["blocks"]):
            start = position + index * size
            if tokens[start : start + size] != edge["tokens"][index * size : (index + 1) * size]:
                return len(blocks) * size, tuple(blocks)
            if start + size > len(tokens):
                return len(blocks) * size, tuple(blocks)
            blocks.append(block)
        position += len(edge["blocks"]) * size
        children = edge["children"]
    return len(blocks) * size, tuple(blocks)


@dataclass
class ReaderLog:
    answers: list[tuple[int, int, tuple[int, ...]]] = field(default_factory=list)
    visits: list[tuple[int, int, set[int]]] = field(default_factory=list)


@pytest.mark.slow
def test_readers_see_whole_versions_and_no_early_reuse(make_tree: TreeFactory) -> None:
    tree = make_tree(POOL, BLOCK_SIZE)
    sequence = itertools.count()
    dumps: dict[int, dict[str, Any]] = {0: tree.dump()}
    # version published inside an insert after its eviction -> evicted ids
    evicted_at: dict[int, tuple[int, ...]] = {}
    allocations: list[tuple[int, int, tuple[int, ...]]] = []
    done = threading.Event()
    errors: list[BaseException] = []

    def reader_loop(seed: int, log: ReaderLog) -> None:
        rng = random.Random(seed)
        try:
            while not done.is_set():
                with tree.reader() as reader:
                    entered = next(sequence)
                    seen: set[int] = set()
                    for step in range(4):
                        if step == 2:
                            # Stay inside while the writer works: its inserts must
                            # not hand out what this reader has seen.
                            time.sleep(READER_STAY_S)
                        choice = rng.randrange(len(SEQUENCES))
                        found = reader.match(SEQUENCES[choice])
                        blocks = tuple(found.blocks)
                        seen.update(blocks)
                        log.answers.append((reader.version, choice, blocks))
                    log.visits.append((entered, next(sequence), seen))
                # Let the writer run: readers are many, it is one, and they share a GIL.
                time.sleep(READER_PAUSE_S)
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    logs = [ReaderLog() for _ in range(READERS)]
    threads = [threading.Thread(target=reader_loop, args=(i, logs[i])) for i in range(READERS)]
    for thread in threads:
        thread.start()
    rng = random.Random(2024)
    leases: list[Any] = []
    try:
        for _ in range(WRITER_OPS):
            roll = rng.random()
            tokens = SEQUENCES[rng.randrange(len(SEQUENCES))]
            before = tree.version
            if roll < 0.45:
                started = next(sequence)
                try:
                    result = tree.insert(tokens, pin=rng.random() < 0.2)
                except OutOfBlocksError:
                    continue
                allocations.append((started, next(sequence), tuple(result.allocated)))
                if result.evicted and tree.version == before + 2:
                    evicted_at[before + 1] = tuple(result.evicted)
                if result.lease is not None:
                    leases.append(result.lease)
            elif roll < 0.75:
                result = tree.match(tokens, pin=rng.random() < 0.2)
                if result.lease is not None:
                    leases.append(result.lease)
            elif roll < 0.9 and leases:
                leases.pop(rng.randrange(len(leases))).release()
            else:
                tree.evict(rng.randrange(1, 4))
            dumps[tree.version] = tree.dump()
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert not errors, errors
    tree.check_invariants()

    checked = 0
    inside = 0  # inserts that ran wholly while some reader was inside
    for log in logs:
        for version, choice, blocks in log.answers:
            if version in dumps:
                expected = match_in_dump(dumps[version], SEQUENCES[choice])[1]
            else:
                # Published inside an insert right after its eviction: the previous
                # version with the evicted blocks gone.
                previous = match_in_dump(dumps[version - 1], SEQUENCES[choice])[1]
                gone = evicted_at[version]
                cut = next((i for i, b in enumerate(previous) if b in gone), len(previous))
                expected = previous[:cut]
            assert blocks == expected, (version, SEQUENCES[choice])
            checked += 1
        for entered, left, seen in log.visits:
            for started, finished, allocated in allocations:
                # Only an insert wholly inside the reader's stay surely allocated while
                # it was inside; one that overlaps an end may have allocated outside.
                if entered < started and finished < left:
                    inside += 1
                    assert not seen & set(allocated), (entered, started, finished, left)
    # The readers really ran alongside the writer, and inside their stays it inserted.
    assert checked > 100
    assert inside > 10


@pytest.mark.parametrize("tokens", [[0, 1, 2, 0, 1], [2, 2]])
def test_match_in_dump_agrees_with_the_tree(make_tree: TreeFactory, tokens: list[int]) -> None:
    """The checker's own matcher against the tree (R-MATCH-1)."""
    tree = make_tree(16, BLOCK_SIZE)
    tree.insert([0, 1, 2, 0, 2, 2])
    tree.insert([2, 2, 1])
    found = tree.match(tokens)
    assert match_in_dump(tree.dump(), tokens) == (found.length, tuple(found.blocks))
