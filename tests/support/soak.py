"""A soak: a long bounded random workload on a small pool, one writer and four reader
threads, watching memory, the quarantine and out-of-blocks errors.

The writer does what a serving engine does -- inserts finished sequences (some
pinned by running requests), matches prompts (some pinned), releases, evicts and
reclaims now and then -- over sequences that share prefixes, against a pool far too
small to hold them, so eviction never stops. Four reader threads keep entering
reader epochs and matching: most leave through ``with``, some call ``leave()``, some
just drop the reader (it must leave by itself, R-EPOCH-5), some take plain
snapshots. What must hold (each is checked, :class:`SoakFailure` otherwise):

* **memory flat**: the process's resident set after the warm-up (the first fifth)
  never exceeds the warm-up's by more than 5% (plus one MiB of allocator slack);
* **quarantine bounded**: it never exceeds the pool, and drains to 0 once the
  readers stop; no reader is left registered (dropped ones included);
* **no out-of-blocks error except when every block is pinned**: an insert refused
  because readers hold the quarantine (R-EPOCH-3) is retried as a server would --
  evict into the quarantine, wait for the readers to move on, reclaim -- and must
  then succeed; giving up is allowed only when nothing is evictable or quarantined.

Run it::

    python -m tests.support.soak --ops 1000000              # both implementations (minutes)
    python -m tests.support.soak --ops 20000 --impl accel   # one, shorter

``tests/snapshots/test_soak.py`` runs a short version in the test suite.
"""

from __future__ import annotations

import argparse
import importlib
import os
import random
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kachedb_radix.reference.errors import OutOfBlocksError

#: Memory may grow this much after the warm-up: 5%, plus allocator slack in bytes.
GROWTH = 0.05
SLACK = 1 << 20
#: Most leases the writer holds at once (their blocks are pinned).
MAX_LEASES = 4
#: Tokens per block, pool size and longest sequence in blocks.
BLOCK_SIZE = 4
NUM_BLOCKS = 64
MAX_BLOCKS = 6
#: The interpreter's thread switch interval during a soak, in seconds (default 0.005).
SWITCH = 2e-5


class SoakFailure(AssertionError):
    """A soak property did not hold; the message says which and the numbers."""


@dataclass
class SoakReport:
    """What a soak run saw.

    Attributes:
        implementation: the tree's ``implementation``.
        ops: writer operations run.
        seconds: wall time.
        curve: (operations so far, resident set in bytes, quarantined blocks) samples.
        epochs: reader epochs entered by the reader threads.
        dropped: readers dropped without leaving.
        retried: inserts refused while readers held the quarantine, then retried.
        all_pinned: inserts given up because every block was pinned.
        max_quarantined: the largest quarantine seen.
    """

    implementation: str
    ops: int
    seconds: float = 0.0
    curve: list[tuple[int, int, int]] = field(default_factory=list)
    epochs: int = 0
    dropped: int = 0
    retried: int = 0
    all_pinned: int = 0
    max_quarantined: int = 0

    @property
    def warm_rss(self) -> int:
        """The largest resident set during the warm-up (the first fifth)."""
        warm = [rss for done, rss, _ in self.curve if done <= self.ops // 5]
        return max(warm or [self.curve[0][1]])

    @property
    def peak_rss(self) -> int:
        """The largest resident set after the warm-up."""
        return max(rss for done, rss, _ in self.curve if done > self.ops // 5)

    def table(self) -> str:
        """The memory curve as a Markdown table."""
        lines = ["| operations | RSS (MiB) | quarantined |", "|---:|---:|---:|"]
        lines += [f"| {done:,} | {rss / 2**20:.1f} | {q} |" for done, rss, q in self.curve]
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: throughput, memory, readers, retries."""
        growth = self.peak_rss / self.warm_rss - 1
        return (
            f"{self.implementation}: {self.ops:,} ops in {self.seconds:.1f} s "
            f"({self.ops / self.seconds:,.0f}/s); RSS after warm-up {self.warm_rss / 2**20:.1f}"
            f" -> peak {self.peak_rss / 2**20:.1f} MiB ({growth:+.1%}); {self.epochs:,} reader "
            f"epochs ({self.dropped:,} dropped without leave); max quarantine "
            f"{self.max_quarantined}; {self.retried:,} inserts retried behind readers, "
            f"{self.all_pinned} refused with every block pinned"
        )


def resident_bytes() -> int:
    """This process's resident set size, from /proc (Linux). O(1)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Workload:
    """Sequences that share prefixes, as conversations do (seeded)."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.recent: list[list[int]] = [[0] * BLOCK_SIZE]

    def sequence(self) -> list[int]:
        base = self.random.choice(self.recent)
        keep = self.random.randrange(len(base) + 1)
        extra = self.random.randrange(1, MAX_BLOCKS * BLOCK_SIZE)
        tokens = (base[:keep] + [self.random.randrange(16) for _ in range(extra)])[
            : MAX_BLOCKS * BLOCK_SIZE + BLOCK_SIZE - 1
        ]
        self.recent = [*self.recent[-31:], tokens]  # replaced whole: readers see a list
        return tokens


def _read(tree: Any, workload: _Workload, stop: threading.Event, report: SoakReport) -> None:
    """A reader thread: epochs of one or two matches, left in every way there is."""
    chooser = random.Random(threading.get_ident())
    epochs = dropped = 0
    while not stop.is_set():
        how = chooser.random()
        tokens = chooser.choice(workload.recent)
        if how < 0.1:
            tree.snapshot().match(tokens)
            continue
        reader = tree.reader()
        reader.match(tokens)
        if how < 0.2:
            dropped += 1  # dropped without leave(): must leave by itself (R-EPOCH-5)
        elif how < 0.4:
            reader.leave()
        else:
            with reader:
                reader.match(chooser.choice(workload.recent))
        del reader
        epochs += 1
        time.sleep(0.0001)  # between epochs, as a real reader would be between requests
    with _COUNTS:
        report.epochs += epochs
        report.dropped += dropped


_COUNTS = threading.Lock()


def _insert(tree: Any, tokens: list[int], pin: bool, report: SoakReport) -> Any:
    """Insert as a server would: when readers hold the quarantine, evict into it,
    let them move on, reclaim, retry. None when every block is pinned."""
    for _ in range(2000):
        try:
            return tree.insert(tokens, pin=pin)
        except OutOfBlocksError:
            stats = tree.stats()
            if stats.evictable == 0 and stats.quarantined == 0:
                report.all_pinned += 1
                return None
            report.retried += 1
            tree.evict(len(tokens) // BLOCK_SIZE)
            time.sleep(0.0002)
            tree.reclaim()
    raise SoakFailure(f"an insert found no room after 2000 tries: {tree.stats()}")


def soak(
    tree_class: Any,
    ops: int,
    *,
    readers: int = 4,
    seed: int = 15,
    samples: int = 20,
) -> SoakReport:
    """Run the soak on a fresh ``tree_class(NUM_BLOCKS, BLOCK_SIZE)``; see the module.

    Cost: ``ops`` writer operations (each O(sequence length)) plus the readers' work.

    Raises:
        SoakFailure: memory grew, the quarantine did not drain, a reader stayed, or
            an insert was refused with blocks still evictable or quarantined.
    """
    tree = tree_class(NUM_BLOCKS, BLOCK_SIZE)
    report = SoakReport(tree.implementation, ops)
    workload = _Workload(seed)
    chooser = random.Random(seed + 1)
    leases: list[Any] = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=_read, args=(tree, workload, stop, report), daemon=True)
        for _ in range(readers)
    ]
    every = max(1, ops // samples)
    started = time.perf_counter()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH)  # interleave readers and writer finely, as cores would
    for thread in threads:
        thread.start()
    try:
        for done in range(1, ops + 1):
            pick = chooser.random()
            if pick < 0.45:
                pin = len(leases) < MAX_LEASES and chooser.random() < 0.3
                result = _insert(tree, workload.sequence(), pin, report)
                if result is not None and result.lease is not None:
                    leases.append(result.lease)
            elif pick < 0.8:
                pin = len(leases) < MAX_LEASES and chooser.random() < 0.2
                found = tree.match(chooser.choice(workload.recent), pin=pin)
                if found.lease is not None:
                    leases.append(found.lease)
            elif pick < 0.9 and leases:
                tree.release(leases.pop(chooser.randrange(len(leases))))
            elif pick < 0.95:
                tree.evict(chooser.randrange(1, 4))
            else:
                tree.reclaim()
            report.max_quarantined = max(report.max_quarantined, tree.stats().quarantined)
            if done % every == 0:
                report.curve.append((done, resident_bytes(), tree.stats().quarantined))
                tree.check_invariants()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        sys.setswitchinterval(interval)
    report.seconds = time.perf_counter() - started
    for lease in leases:
        tree.release(lease)
    tree.reclaim()
    _verify(tree, report)
    return report


def _verify(tree: Any, report: SoakReport) -> None:
    stats = tree.stats()
    tree.check_invariants()
    if stats.readers or stats.quarantined:
        raise SoakFailure(f"readers or quarantine left after the readers stopped: {stats}")
    if report.max_quarantined > stats.num_blocks:
        raise SoakFailure(f"quarantine {report.max_quarantined} exceeded the pool")
    if report.all_pinned:
        raise SoakFailure(
            f"{report.all_pinned} inserts were refused with every block pinned, which "
            f"this workload ({MAX_LEASES} leases of at most {MAX_BLOCKS} blocks) never does"
        )
    if report.peak_rss > report.warm_rss * (1 + GROWTH) + SLACK:
        raise SoakFailure(f"memory grew after the warm-up: {report.summary()}\n{report.table()}")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: run the soak on one or both implementations; 1 on failure."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.soak", description=__doc__)
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--impl", choices=("reference", "accel", "both"), default="both")
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args(argv)
    names = ("reference", "accel") if args.impl == "both" else (args.impl,)
    status = 0
    for name in names:
        module = importlib.import_module(f"kachedb_radix.{name}")
        try:
            report = soak(module.RadixTree, args.ops, seed=args.seed)
        except SoakFailure as failure:
            print(f"{name}: FAILED: {failure}", file=sys.stderr)
            status = 1
            continue
        print(report.summary())
        print(report.table())
    return status


if __name__ == "__main__":
    raise SystemExit(main())
