"""The KV cache survives SIGKILL: a process using it is killed at random moments, again and
again, and the reopened cache serves only the right bytes and loses nothing acknowledged.

The store's own campaign (``test_disk_crash.py``) kills a process calling
``DiskBlockStore.put`` and ``delete``; this one kills a process using the whole
:class:`~kachedb_radix.reference.tiers.KVCache` -- stores of known bytes whose evictions
push paths down to host and disk, restores that bring them back, evictions of each tier,
an occasional ``sync`` -- so a kill lands in the middle of a call's *program* of moves
(R-TIER-8): between two disk writes of one demotion, after a drop's delete and before the
put that reuses its slot, inside the reopen itself. A worker forked from a warm zygote
(:mod:`tests.tiers.kv_crash_worker`) reopens the campaign's one slab file, makes a seeded
workload's calls and reports each before it starts and after it returns; the test
SIGKILLs it on a chosen call's "begin" line after a random sleep (up to 0.4 ms; a call
takes 0.1-0.4 ms), then reopens the cache itself and holds it to the promise:

* ``check_invariants()`` passes on the reopened cache;
* every block it serves (a restore of each disk path, then a read of the device) has
  exactly the bytes stored for its prefix, byte for byte: never a torn block, never
  another prefix's;
* nothing acknowledged is lost. The workload is a function of its seed alone, so the
  test replays it in-process, before the worker runs, on a copy of the same file with
  the same functions: the disk tier's prefixes after every call, ``D[0]`` (the reopen)
  to ``D[n]``. If call k was the last to return and call k+1 was running, the reopened
  disk tier holds every prefix of ``D[k] & D[k+1]`` that call k+1 does not itself delete
  (the replay notes each record a call deletes: rarely, a call's first demotion evicts a
  disk block that its next demotion writes again) and nothing outside ``D[k] | D[k+1]``;
  killed between calls, exactly ``D[k]``.
  The worker reports a digest of each call's moves and ids, and the replay must match it
  call for call (so the replay is the worker's history, not a similar one).

The tree twins take turns (the reference's, the C tree's, both over the NumPy pool); the
checks reopen with the reference (the file is the interface). The next worker reopens
the file this check leaves: one file lives through every kill of the campaign. The test
tallies where the kills landed -- in which call, and for a call that changes the disk,
whether none, part or all of its changes had reached the file -- and prints the tally
(``pytest -s`` shows it). ``KACHEDB_RADIX_KV_CRASH_RUNS`` sets the number of kills of the
quick campaign (50, on tmpfs); the campaign marked slow kills 200 workers on the disk. A
planted bug that only a kill can see (a record taken out and put back within one call)
shows the checks fail when they should.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from kachedb_radix.reference.tiers import KVCache
from tests.conftest import TIER_IMPLEMENTATIONS
from tests.support.paths import ROOT
from tests.tiers import kv_crash_worker as worker
from tests.tiers.test_kv_cache import kv_of
from tests.tiers.zygote import kill_after

#: Calls per worker.
CALLS = 24
#: The longest sleep between a call's "begin" line and the kill.
MAX_DELAY_S = 4e-4


@dataclass
class History:
    """The workload of one worker replayed in-process: each call's digest, the disk
    tier's prefixes after the reopen (``states[0]``) and after each call, and the chained
    hashes of the disk blocks each call deleted (a call may delete a prefix and write it
    again: the disk evicts it for one demotion and a later demotion of the same call
    brings it back; it is on disk before and after the call, and not in between)."""

    digests: list[str]
    states: list[set[worker.Prefix]]
    removed: list[set[bytes]]

    def changes_disk(self, call: int) -> bool:
        return self.states[call] != self.states[call + 1] or bool(self.removed[call])


@dataclass
class Campaign:
    """One slab file, one zygote, many killed workers."""

    folder: Path
    seed: int
    planted: bool = False  # the workers (and the replay) run the planted bug
    tally: Counter[str] = field(
        default_factory=lambda: Counter(dict.fromkeys(["acknowledged disk blocks lost"], 0))
    )

    def __post_init__(self) -> None:
        self.live = self.folder / "live.slab"  # the file the workers use
        self.start = self.folder / "start.slab"  # the file as the next worker finds it
        self.replay = self.folder / "replay.slab"
        worker.open_cache(self.live, "reference").close()
        shutil.copyfile(self.live, self.start)
        self.twins = sorted(TIER_IMPLEMENTATIONS)
        self.rng = random.Random(self.seed)
        self.errors = (self.folder / "zygote.err").open("w+b")
        environment = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        self.zygote = subprocess.Popen(
            [sys.executable, "-m", "tests.tiers.kv_crash_worker"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            env=environment,
        )

    def close(self) -> None:
        stdin: IO[bytes] | None = self.zygote.stdin
        assert stdin is not None
        stdin.write(b"quit\n")
        stdin.close()
        self.zygote.wait(timeout=30)
        if self.zygote.stdout is not None:
            self.zygote.stdout.close()
        self.errors.close()

    def history(self, twin: str, seed: int) -> History:
        """The worker's calls made in-process on a copy of the file it will reopen."""
        shutil.copyfile(self.start, self.replay)
        cache = worker.open_cache(self.replay, twin, planted=self.planted)
        deleted: set[bytes] = set()
        forget = cache._forget_disk

        def forget_and_note(block: int) -> None:
            deleted.add(cache._hash_of[block])
            forget(block)

        setattr(cache, "_forget_disk", forget_and_note)  # noqa: B010 (a method, replaced)
        digests, states, removed = [], [worker.disk_prefixes(cache)], []
        for call in worker.workload(seed, CALLS):
            digests.append(worker.apply(cache, call, worker.kv_for(call)))
            states.append(worker.disk_prefixes(cache))
            removed.append(set(deleted))
            deleted.clear()
        cache.check_invariants()
        cache.close()
        self.replay.unlink()
        return History(digests, states, removed)

    def _read(self) -> list[str]:
        stdout = self.zygote.stdout
        assert stdout is not None
        line = stdout.readline().decode()
        if not line:
            raise AssertionError(f"the zygote died: {self._errors()}")
        return line.split()

    def _errors(self) -> str:
        self.errors.seek(0)
        return self.errors.read().decode()[-3000:]

    def run(self) -> None:
        """One worker: replay its calls, start it, kill it, check the file it leaves."""
        twin = self.twins[self.tally["runs"] % len(self.twins)]
        seed = self.rng.randrange(2**32)
        history = self.history(twin, seed)
        writers = [call for call in range(CALLS) if history.changes_disk(call)]
        aim = self.rng.random()
        if aim < 0.08:
            target = -1  # while it reopens the file
        elif aim < 0.75 and writers:
            target = self.rng.choice(writers)  # inside a call that changes the disk
        else:
            target = self.rng.randrange(CALLS)
        delay = 0.0 if self.rng.random() < 0.25 else self.rng.uniform(0, MAX_DELAY_S)
        stdin = self.zygote.stdin
        assert stdin is not None
        planted = " planted" if self.planted else ""
        stdin.write(f"run {self.live} {twin} {seed} {CALLS}{planted}\n".encode())
        stdin.flush()
        pid, begun, done, opened, killed, finished = 0, -1, -1, False, False, False
        kinds: dict[int, str] = {}
        while True:
            words = self._read()
            if words[0] == "pid":
                pid = int(words[1])
                if target == -1:
                    killed = kill_after(pid, delay)
            elif words[0] == "open":
                opened = True
            elif words[0] == "begin":
                begun = int(words[1])
                kinds[begun] = words[2]
                if begun == target and not killed:
                    killed = kill_after(pid, delay)
            elif words[0] == "done":
                done = int(words[1])
                assert words[2] == history.digests[done], (
                    f"call {done} of the {twin} worker (seed {seed}) did other work than "
                    "its replay: the workload is not deterministic"
                )
            elif words[0] in ("finished", "failed"):
                assert words[0] == "finished", f"the worker failed: {self._errors()}"
                if not killed:  # the worker sleeps: its pid is still its own
                    finished = kill_after(pid, 0.0)
            elif words[0] == "exit":
                break
        assert words[1:] == ["signal", str(int(signal.SIGKILL))], self._errors()
        self.tally["runs"] += 1
        self.tally[f"runs of the {twin} tree"] += 1
        in_flight = begun if begun > done else None
        self._tally(history, opened, finished, in_flight, kinds)
        self._check(history, done, in_flight)
        shutil.copyfile(self.live, self.start)  # what the next worker reopens

    def _tally(
        self,
        history: History,
        opened: bool,
        finished: bool,
        in_flight: int | None,
        kinds: dict[int, str],
    ) -> None:
        if finished:
            self.tally["runs that finished"] += 1
        elif not opened:
            self.tally["killed while reopening"] += 1
        elif in_flight is None:
            self.tally["killed between calls"] += 1
        elif not history.changes_disk(in_flight):
            self.tally[f"killed inside a {kinds[in_flight]} that leaves the disk alone"] += 1
        else:
            self.tally[f"killed inside a {kinds[in_flight]} that changes the disk"] += 1

    def _check(self, history: History, done: int, in_flight: int | None) -> None:
        """Reopen the file and hold it to the promise (see the module docstring)."""
        before = history.states[done + 1]
        after = history.states[in_flight + 1] if in_flight is not None else before
        # A device as large as the disk tier: the checks' restores evict nothing, so they
        # leave the file as the next worker must find it.
        cache = worker.open_cache(self.live, "reference", device_blocks=worker.DISK_BLOCKS)
        try:
            cache.check_invariants()
            found = worker.disk_prefixes(cache)
            self.tally["records left out at reopen"] += cache.stats().unusable
            kept = before & after
            if in_flight is not None:  # less what the interrupted call deleted and rewrote
                rewritten = history.removed[in_flight]
                kept = {prefix for prefix in kept if worker.chain_hash(*prefix) not in rewritten}
                if kept != before & after:
                    self.tally["  ... that deleted a prefix it then wrote again"] += 1
            lost = kept - found
            self.tally["acknowledged disk blocks lost"] += len(lost)
            assert not lost, f"acknowledged blocks lost: {sorted(lost)[:5]}"
            stray = found - (before | after)
            assert not stray, f"blocks no call left on disk: {sorted(stray)[:5]}"
            if in_flight is not None and before != after:
                changed = (after - before) | (before - after)
                landed = len((after - before) & found) + len((before - after) - found)
                share = "none" if not landed else "all" if landed == len(changed) else "part"
                self.tally[f"  ... of its disk changes on the file: {share}"] += 1
            self.tally["disk blocks verified byte for byte"] += self._verify(cache, found)
            assert cache.stats().lost == 0  # a process crash tears no record
            cache.check_invariants()
        finally:
            cache.close()

    def _verify(self, cache: KVCache, found: set[worker.Prefix]) -> int:
        """Restore every disk path and compare every byte the device then serves."""
        verified: set[worker.Prefix] = set()
        for namespace, tokens in sorted(found, key=lambda key: -len(key[1])):
            if (namespace, tokens) in verified:
                continue
            brought = cache.restore(list(tokens), namespace)
            brought.handle.wait()
            assert brought.result.length == len(tokens), f"{tokens} came back short"
            got = cache.read(list(tokens), namespace)
            want = kv_of(worker.SPEC, list(tokens), namespace)
            assert got.tobytes() == want.tobytes(), f"wrong bytes served for {tokens}"
            ends = range(worker.B, len(tokens) + 1, worker.B)
            verified.update((namespace, tokens[:end]) for end in ends)
        assert verified == found
        return len(verified)


def _campaign(folder: Path, runs: int, seed: int, planted: bool = False) -> Counter[str]:
    campaign = Campaign(folder, seed, planted)
    try:
        for _ in range(runs):
            campaign.run()
    finally:
        campaign.close()
    return campaign.tally


def _report(title: str, tally: Counter[str], started: float) -> None:
    print(f"\nKV cache crash campaign: {title} ({time.perf_counter() - started:.1f} s)")
    for key in sorted(tally, key=lambda key: (key.startswith("runs"), key)):
        print(f"  {key}: {tally[key]}")


@pytest.fixture
def memory_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder on tmpfs (``/dev/shm``) when there is one, else ``tmp_path``: a process
    crash involves the page cache alone, so tmpfs tests the same promise and spares the
    shared machine's disk (the slow campaign runs on the disk)."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="kachedb-kv-crash-", dir=shm))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def _assert_campaign(tally: Counter[str], runs: int) -> None:
    assert tally["runs"] == runs and tally["acknowledged disk blocks lost"] == 0
    assert tally["runs that finished"] <= runs // 4  # the campaign kills; it does not watch
    inside = sum(count for key, count in tally.items() if "that changes the disk" in key)
    assert inside >= runs // 4  # and many kills land inside a call that writes the disk
    assert tally["disk blocks verified byte for byte"] > runs  # there was something to check


def test_sigkill_never_loses_or_serves_a_wrong_kv_block(memory_folder: Path) -> None:
    runs = int(os.environ.get("KACHEDB_RADIX_KV_CRASH_RUNS", "50"))
    started = time.perf_counter()
    tally = _campaign(memory_folder, runs, seed=24)
    _report(f"{runs} kills, in {memory_folder}", tally, started)
    _assert_campaign(tally, runs)


def test_the_campaign_catches_a_gap_only_a_kill_can_see(memory_folder: Path) -> None:
    """The checks can fail: a cache that takes a record out and puts it back within one
    call (right before and after every call, so the replay and every invariant pass) loses
    an acknowledged block to the first kill that lands in the gap."""
    # It stops at the first failure: in ten campaigns of other seeds, at runs 1 to 33.
    with pytest.raises(AssertionError, match="acknowledged blocks lost"):
        _campaign(memory_folder, 200, seed=5, planted=True)


@pytest.mark.slow
def test_sigkill_kv_campaign_on_disk(tmp_path: Path) -> None:
    """200 kills on the disk (``sync`` an fdatasync there)."""
    started = time.perf_counter()
    tally = _campaign(tmp_path, 200, seed=2024)
    _report(f"200 kills, in {tmp_path}", tally, started)
    _assert_campaign(tally, 200)
