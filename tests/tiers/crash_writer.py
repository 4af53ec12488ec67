"""The writer that the crash test kills: ``python -m tests.tiers.crash_writer``.

It is a *zygote*: it imports NumPy and the store once, then, for each ``run`` line on its
standard input, forks a worker (a real process, with its own pid, that the test kills with
SIGKILL), waits for it and reports how it ended. Forking from a warm process makes a run
cost milliseconds instead of an interpreter start, so a CI run affords a hundred kills.

The worker reopens the store (the restart after the previous kill), then puts and deletes
blocks of known content (:mod:`tests.tiers.blocks`) in random slots, syncing now and then,
and reports every step on standard output, one line each, written with a single
``os.write`` (atomic on a pipe) *before* the step starts and *after* it returns::

    pid PID                      the worker is running
    open OCCUPIED DROPPED        the store is open: blocks found, records dropped
    begin put SLOT GEN           about to put generation GEN into SLOT
    done put SLOT GEN SEQ        put returned: from now on it must survive any kill
    begin delete SLOT / done delete SLOT
    begin sync / done sync       sync returned: everything before it survives power loss
    finished                     the worker ran out of steps and closed the store
    failed                       the worker raised (the traceback is on standard error)

A worker never exits by itself: after ``finished`` or ``failed`` it sleeps, so that its
pid stays its own until the test kills it (a pid the zygote had reaped could be reused by
another process, which the test must never signal). It gives up after a minute, should
the test be gone. After the worker is gone the zygote writes ``exit signal N`` or
``exit code N``.

Command: ``run PATH SEED FIRST_GEN STEPS SYNC_PERCENT`` (block and metadata sizes come
from the store itself), or ``run create PATH SLOTS BLOCK_BYTES``: a worker that creates a
new store there (``begin create`` / ``done create``, then ``finished``), for the campaign
that kills creators (``tests/tiers/test_slab_files.py``). ``quit`` or the end of input ends
the zygote.
"""

from __future__ import annotations

import os
import random

from kachedb_radix.reference.tiers import DiskBlockStore
from tests.tiers import blocks
from tests.tiers.zygote import say, serve


def work(path: str, seed: int, first_gen: int, steps: int, sync_percent: int) -> None:
    """One worker's life: reopen, then put / delete / sync at random, reporting each step."""
    say(f"pid {os.getpid()}")
    store = DiskBlockStore.open(path)
    say(f"open {len(store)} {store.stats().dropped_corrupt}")
    rng = random.Random(seed)
    occupied = set(store.slots())
    gen = first_gen
    for _ in range(steps):
        if rng.randrange(100) < sync_percent:
            say("begin sync")
            store.sync()
            say("done sync")
            continue
        slot = rng.randrange(store.capacity)
        if slot in occupied:
            say(f"begin delete {slot}")
            store.delete(slot)
            say(f"done delete {slot}")
            occupied.discard(slot)
            continue
        data = blocks.payload(gen, store.block_bytes)  # made before "begin": the step is I/O
        meta = blocks.meta(slot, gen, store.meta_bytes)
        say(f"begin put {slot} {gen}")
        seq = store.put(slot, meta, data)
        say(f"done put {slot} {gen} {seq}")
        occupied.add(slot)
        gen += 1
    store.close()
    say("finished")


def create(path: str, slots: int, block_bytes: int) -> None:
    """One creator's life: create a store at ``path``, reporting before and after."""
    say(f"pid {os.getpid()}")
    say("begin create")
    store = DiskBlockStore.create(path, slots, block_bytes, 64)
    say("done create")
    store.close()
    say("finished")


def main() -> None:
    def dispatch(args: list[str]) -> None:
        if args[0] == "create":
            create(args[1], int(args[2]), int(args[3]))
        else:
            work(args[0], *map(int, args[1:]))

    serve(dispatch)


if __name__ == "__main__":
    main()
