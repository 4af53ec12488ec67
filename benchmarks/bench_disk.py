"""The disk tier's bandwidth: store (host -> disk) and restore (disk -> host) through
:class:`~kachedb_radix.reference.tiers.DiskBlockStore`, against the disk's own sequential
read measured in the same run (``dd``, and ``fio`` when it is installed).

Run::

    python benchmarks/bench_disk.py                    # 512 MiB per block size, 5 rounds
    python benchmarks/bench_disk.py --dir /mnt/nvme    # a store on another disk
    python benchmarks/bench_disk.py --quick            # 64 MiB, 1 round: a smoke run

For each block size (2 MiB: a 16-token block of Llama-3-8B in fp16; 2.5 MiB: of
Llama-3-70B in FP8) it makes a store of ``--total-mib`` MiB, then times, per round (the
two sizes take turns, round by round):

* **store**: ``put`` every block from a host pool, then one ``sync()`` (fdatasync): the
  bytes are on the device when the clock stops. Also without the sync (page cache only).
* **restore, cold**: the file's pages dropped from the page cache
  (``posix_fadvise(DONTNEED)`` after a sync: no root needed), then ``read_into`` every
  block into its place in a preallocated host pool, each payload checksum verified; the
  same in a shuffled order (a tier's restores are scattered), alone and with ``prefetch``
  keeping 32 blocks advised ahead (the kernel then reads them side by side), without
  verification (raw
  ``preadv``) and through ``mmap`` (a slice copy per block), to show what the order, the
  checksum and the choice of ``pread`` cost.
* **restore, warm**: the same with the file in the page cache (memory bandwidth bound).
* **the disk's sequential read** of the same file, cold: ``dd bs=2M iflag=direct``
  (O_DIRECT, queue depth 1), ``dd bs=2M`` after dropping the pages (buffered, with the
  kernel's readahead), and ``fio`` (psync, O_DIRECT, queue depth 1, 2 MiB) when present.
* **hashing alone**: XXH3-128 of a block in memory, and ``numpy.copyto`` of a block (the
  memory bandwidth), for scale.

Each figure is the median over rounds, in GB/s (10^9 bytes per second); the last column
divides it by the buffered cold ``dd`` figure of the same size and run (the store reads
through the page cache too, so that is the disk's speed for it; O_DIRECT at queue depth 1
forgoes the kernel's readahead and is slower on most disks). ``--json FILE`` keeps every
round. Nothing is asserted here: ``tests/tiers/test_bench_disk.py`` runs it small.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kachedb_radix.reference.tiers import DiskBlockStore
from kachedb_radix.reference.tiers.disk_format import checksum

MiB = 2**20
#: (label, bytes): the KV block sizes of the issue.
BLOCK_SIZES = [("2 MiB (Llama-3-8B fp16)", 2 * MiB), ("2.5 MiB (Llama-3-70B FP8)", 5 * MiB // 2)]
Host = npt.NDArray[np.uint8]
COLD_WAYS = (
    "read_into",
    "read_into, random order",
    "read_into, random order, prefetch 32 ahead",
    "preadv, no checksum",
    "mmap copy",
)
#: The row the ratios divide by: the disk read through the page cache, as the store reads.
BASELINE = "disk: dd bs=2M, cold page cache"


def _gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


def _drop_cache(path: Path) -> None:
    """Evict the file's pages from the page cache (they must be clean: sync first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _in_memory(action: Callable[[], object], block: int, repeat: int = 20) -> float:
    """GB/s of ``action`` on one block, repeated (the block stays in the CPU's caches as
    little as a 2 MiB block can: the figure is a ceiling, for scale)."""

    def many() -> None:
        for _ in range(repeat):
            action()

    return _gbps(block * repeat, _timed(many))


def _dd(path: Path, direct: bool) -> float | None:
    """dd's sequential read of ``path`` in GB/s (None if dd refused, e.g. no O_DIRECT)."""
    if not direct:
        _drop_cache(path)
    flags = ["iflag=direct"] if direct else []
    done = subprocess.run(
        ["dd", f"if={path}", "of=/dev/null", "bs=2M", *flags],
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"^(\d+) bytes .* copied, ([\d.]+) s", done.stderr, re.MULTILINE)
    if done.returncode or found is None:
        return None
    return _gbps(int(found.group(1)), float(found.group(2)))


def _fio(path: Path) -> float | None:
    """fio's sequential O_DIRECT read at queue depth 1, in GB/s (None without fio)."""
    if shutil.which("fio") is None:
        return None
    done = subprocess.run(
        ["fio", "--name=seqread", f"--filename={path}", "--rw=read", "--bs=2M", "--direct=1",
         "--ioengine=psync", "--iodepth=1", "--numjobs=1", "--output-format=json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode:
        return None
    job = json.loads(done.stdout[done.stdout.index("{") :])["jobs"][0]["read"]
    return float(job["bw_bytes"]) / 1e9


def _store_round(store: DiskBlockStore, host: Host, sync: bool) -> float:
    """Put every block from the host pool (the store emptied first, untimed)."""
    for slot in list(store.slots()):
        store.delete(slot)
    store.sync()

    def put_all() -> None:
        for slot in range(store.capacity):
            store.put(slot, b"bench", host[slot])
        if sync:
            store.sync()

    return _timed(put_all)


def _restore_round(store: DiskBlockStore, host: Host, how: str, cold: bool) -> float:
    path = Path(store.path)
    if cold:
        _drop_cache(path)
    if how.startswith("read_into"):
        order = list(range(store.capacity))
        if "random" in how:
            random.Random(24).shuffle(order)
        window = 32 if "prefetch" in how else 0

        def restore() -> None:
            for done, slot in enumerate(order):
                if window and done % (window // 2) == 0:  # keep ~32 blocks advised ahead
                    store.prefetch(order[done : done + window])
                store.read_into(slot, host[slot])

    elif how == "preadv, no checksum":
        geometry = store._geometry
        fd = store._fd

        def restore() -> None:
            for slot in range(store.capacity):
                offset = geometry.slot_offset(slot) + geometry.payload_offset
                os.preadv(fd, [host[slot]], offset)

    else:  # mmap: one slice copy per block out of the mapping
        geometry = store._geometry

        def restore() -> None:
            with path.open("rb") as file, mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ) as m:
                mapped = np.frombuffer(m, np.uint8)
                for slot in range(store.capacity):
                    start = geometry.slot_offset(slot) + geometry.payload_offset
                    np.copyto(host[slot], mapped[start : start + geometry.block_bytes])
                del mapped

    return _timed(restore)


class _Case:
    """One block size: its store, the host pools it stores from and restores into, and
    the figures of every round so far."""

    def __init__(self, folder: Path, label: str, block: int, total: int) -> None:
        self.label, self.block = label, block
        slots = max(1, total // block)
        self.nbytes = slots * block
        self.host = np.random.default_rng(24).integers(0, 256, size=(slots, block), dtype=np.uint8)
        self.restored = np.zeros_like(self.host)
        self.store = DiskBlockStore.create(folder / f"bench-{block}.store", slots, block, 64)
        self.rows: dict[str, list[float]] = {}

    def add(self, name: str, value: float | None) -> None:
        if value is not None:
            self.rows.setdefault(name, []).append(value)

    def round(self) -> None:
        """Every measurement once, in the order of the table."""
        store, host, restored, nbytes = self.store, self.host, self.restored, self.nbytes
        path = Path(store.path)
        self.add("store: put + sync", _gbps(nbytes, _store_round(store, host, sync=True)))
        self.add(
            "store: put, page cache only", _gbps(nbytes, _store_round(store, host, sync=False))
        )
        store.sync()
        for how in COLD_WAYS:
            restored.fill(0)
            seconds = _restore_round(store, restored, how, cold=True)
            self.add(f"restore cold: {how}", _gbps(nbytes, seconds))
            assert np.array_equal(restored, host), f"{how} brought back other bytes"
        for how in ("read_into", "preadv, no checksum", "mmap copy"):
            seconds = _restore_round(store, restored, how, cold=False)
            self.add(f"restore warm: {how}", _gbps(nbytes, seconds))
        self.add("disk: dd bs=2M iflag=direct", _dd(path, direct=True))
        self.add(BASELINE, _dd(path, direct=False))
        self.add("disk: fio psync O_DIRECT QD1 2M", _fio(path))
        self.add("memory: XXH3-128 of a block", _in_memory(lambda: checksum(host[0]), self.block))
        copy = _in_memory(lambda: np.copyto(restored[0], host[0]), self.block)
        self.add("memory: numpy.copyto of a block", copy)

    def result(self) -> dict[str, Any]:
        medians = {name: statistics.median(values) for name, values in self.rows.items()}
        return {"block": self.label, "block_bytes": self.block, "blocks": self.store.capacity,
                "bytes": self.nbytes, "rounds": self.rows, "median_gbps": medians}  # fmt: skip


def _table(results: list[dict[str, Any]]) -> str:
    labels = [result["block"] for result in results]
    names = list(results[0]["median_gbps"])
    lines = [
        "| GB/s (median) | " + " | ".join(labels) + f" | vs {BASELINE} |",
        "| --- | " + " | ".join("---:" for _ in labels) + " | ---: |",
    ]
    for name in names:
        cells, ratios = [], []
        for result in results:
            value = result["median_gbps"].get(name)
            cells.append("" if value is None else f"{value:.2f}")
            dd = result["median_gbps"].get(BASELINE)
            if value is not None and dd and not name.startswith("memory"):
                ratios.append(f"{value / dd:.2f}x")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {' / '.join(ratios)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=None, help="where the store goes")
    parser.add_argument("--total-mib", type=int, default=512, help="store size per block size")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="64 MiB, 1 round")
    parser.add_argument("--json", type=Path, default=None, help="write every round here")
    args = parser.parse_args(argv)
    total, rounds = (64 * MiB, 1) if args.quick else (args.total_mib * MiB, args.rounds)
    folder = Path(tempfile.mkdtemp(prefix="bench-disk-", dir=args.dir))
    cases: list[_Case] = []
    try:
        cases.extend(_Case(folder, label, size, total) for label, size in BLOCK_SIZES)
        for _ in range(rounds):  # the sizes take turns, so that a noisy minute hits both
            for case in cases:
                case.round()
        results = [case.result() for case in cases]
    finally:
        for case in cases:
            case.store.close()
        shutil.rmtree(folder)
    print(f"disk tier: {total // MiB} MiB per block size, {rounds} round(s), in {folder.parent}")
    print(_table(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
