"""Restore speed of the tiered KV cache: bytes brought up through ``KVCache.restore``,
beside what the hardware does with the same bytes, measured in the same run.

Run::

    python -m benchmarks.bench_tiers                 # the CPU figures (~2 min here)
    python -m benchmarks.bench_tiers --quick         # small, one round: a smoke run (~10 s)
    python -m benchmarks.bench_tiers --gpu           # the GPU figures (gpu_check.sh runs it)

CPU (:class:`kachedb_radix.reference.tiers.KVCache`, the NumPy pool), for the block sizes
of the two presets (16-token blocks: 2 MiB for Llama-3-8B fp16, 2.5 MiB for Llama-3-70B
FP8):

* **a plan of ``--plan-blocks`` blocks** (128: a 2,048-token prefix) restored from the host
  tier and from the disk tier, in GB/s (10^9 bytes/s), beside ``numpy.copyto`` of the same
  bytes (one memory copy), the pool's own ``restore`` of them (the copy into the device
  pool alone), and the disk's sequential read of the same slab file (``dd`` buffered with a
  cold page cache, ``dd iflag=direct``, ``fio`` when installed -- as
  ``benchmarks/bench_disk.py``). "Cold": the slab's pages dropped with
  ``posix_fadvise(DONTNEED)`` after a sync; ``fincore`` (util-linux), when present, says
  how much of the file was still resident right before each cold restore.
* **a 32K-token prefix** (2,048 blocks) of each preset, restored from the host tier and,
  cold, from the disk tier after a restart (the cache reopened warm from its slab, the
  reopen timed too). At full size these prefixes are 4 GiB and 5 GiB, three copies of
  which (device, host, staging) do not fit a shared 23 GiB machine; so the layer count
  is scaled down (``--layer-divisors``: 1/16 and 1/8 of the model's layers) with the
  block count kept, and the full-size time is extrapolated by a straight line through
  the two measured sizes (a fixed part per restore, a part per byte). Both points and the
  fit are printed.
* **planning** -- the tree's share of a restore, no bytes: ``lookup`` + ``restore`` of a
  path spread over the three tiers (the gate's ``tiers/restore-plan`` workload,
  :mod:`kachedb_radix.spec.gate.tiers`) for both tree twins, in microseconds per block
  brought up; and the device's eviction of a whole path (the demotion's bookkeeping),
  per block, at two path lengths.

GPU (``--gpu``; :class:`kachedb_radix.accel.KVCache`: a CuPy pool, pinned host memory, C
trees): a plan restored from the host tier against one pinned ``cudaMemcpyAsync`` of the
same bytes (and the pool's own ``restore`` from a pinned buffer), and the 32K-token
restore of both presets at full size, next to the seed's "under 20 ms" and the planner's
modelled prefill of the same prompt on the same GPU (its roofline, not a measurement).
Without a usable GPU it says why, marks every GPU figure unmeasured and exits 0.

Every figure is a median over rounds; the ratios divide figures of the same run. Every
restore's bytes are checked against what was stored. ``--json FILE`` keeps every round.
Nothing is asserted about speed: ``tests/tiers/test_bench_tiers.py`` runs it small.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
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

from benchmarks.bench_disk import _dd, _drop_cache, _fio
from kachedb_radix.reference.blockpool import PoolSpec
from kachedb_radix.reference.tiers import KVCache
from kachedb_radix.spec.gate import tiers as gate_tiers
from kachedb_radix.spec.gate import timing
from kachedb_radix.spec.gate.shapes import Workload
from kachedb_radix.spec.twins import twin_classes

MiB = 2**20
GiB = 2**30
BLOCK_TOKENS = 16
#: (label, block pool preset, planner model preset)
PRESETS = [("Llama-3-8B fp16", "llama-3-8b"), ("Llama-3-70B FP8", "llama-3-70b-fp8")]
PREFIX_TOKENS = 32_768
#: The seed's claim: "Restoring precomputed KV tensors from KacheDB takes < 20 ms" (32K).
SEED_CLAIM_MS = 20.0
#: ``cudaMemcpyHostToDevice``.
HOST_TO_DEVICE = 1
Rows = dict[str, list[float]]


# ---------------------------------------------------------------- helpers


def _gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _spec(preset: str, blocks: int, layers: int | None = None) -> PoolSpec:
    spec = PoolSpec.from_preset(preset, num_blocks=blocks, block_size=BLOCK_TOKENS)
    return spec if layers is None else dataclasses.replace(spec, num_layers=layers)


def _tokens(blocks: int) -> list[int]:
    return list(range(1, blocks * BLOCK_TOKENS + 1))


def _kv(spec: PoolSpec, blocks: int, seed: int = 24) -> npt.NDArray[Any]:
    """``blocks`` blocks of KV data, each block's bytes different (a pattern per block:
    random bytes for gigabytes would take longer to make than to restore)."""
    raw = np.empty((blocks, spec.bytes_per_block), dtype=np.uint8)
    pattern = np.random.default_rng(seed).integers(0, 256, 4096, dtype=np.uint8)
    raw[:] = np.resize(pattern, spec.bytes_per_block)
    raw[:, :8] = np.arange(blocks, dtype=np.uint64).view(np.uint8).reshape(blocks, 8)
    raw[:, -1] = np.arange(blocks) % 251
    return raw.view(spec.storage_dtype).reshape(spec.buffer_shape(blocks))


def _same_bytes(got: Any, want: npt.NDArray[Any]) -> bool:
    return bool(np.array_equal(np.asarray(got).view(np.uint8), want.view(np.uint8)))


def _resident(path: Path) -> float | None:
    """The share of ``path`` in the page cache (``fincore``), or None without it."""
    if shutil.which("fincore") is None:
        return None
    done = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode or not done.stdout.strip():
        return None
    return int(done.stdout.split()[0]) / max(path.stat().st_size, 1)


def _median(rows: Rows, name: str) -> float | None:
    values = rows.get(name)
    return statistics.median(values) if values else None


def _add(rows: Rows, name: str, value: float | None) -> None:
    if value is not None:
        rows.setdefault(name, []).append(value)


def _restore_all(cache: KVCache, tokens: list[int], source: str | None = None) -> int:
    """Restore ``tokens`` (all of them cached) and wait; the blocks brought up."""
    brought = cache.restore(tokens)
    brought.handle.wait()
    moves = brought.result.restored
    assert brought.result.length == len(tokens), "the restore stopped short"
    assert source is None or {move.source_tier for move in moves} == {source}, moves[:3]
    return len(moves)


# ---------------------------------------------------------------- a plan, CPU

HOST_ROW = "host -> device: KVCache.restore"
POOL_ROW = "host -> device: the pool's restore alone"
DEMOTE_ROW = "device -> host: KVCache demotion (evict)"
COPY_ROW = "memory: numpy.copyto of the same bytes"
COLD_ROW = "disk -> device, cold page cache: KVCache.restore"
WARM_ROW = "disk -> device, warm page cache: KVCache.restore"
PREAD_COLD_ROW = "disk: sequential preadv of the same bytes, cold page cache"
PREAD_WARM_ROW = "disk: sequential preadv of the same bytes, warm page cache"
DD_ROW = "disk: dd bs=2M, cold page cache"
HOST_ROWS = (HOST_ROW, POOL_ROW, DEMOTE_ROW)
DISK_ROWS = (COLD_ROW, WARM_ROW)
OTHER_DISK_ROWS = (DD_ROW, "disk: dd bs=2M iflag=direct", "disk: fio psync O_DIRECT QD1 2M")
#: Each row's anchor: the figure of the same run it is divided by.
ANCHOR = {
    **dict.fromkeys(HOST_ROWS, COPY_ROW),
    COLD_ROW: PREAD_COLD_ROW,
    WARM_ROW: PREAD_WARM_ROW,
    **dict.fromkeys(OTHER_DISK_ROWS, PREAD_COLD_ROW),
}


def cpu_cache_class() -> type[KVCache]:
    """The CPU twin: the KV cache over the NumPy pool with the C trees (the reference's
    trees under ``KACHEDB_RADIX_PURE=1``, or without the C extension)."""
    made: type[KVCache] = gate_tiers.cpu_cache_class("reference" if _pure() else "accel")
    return made


def _pure() -> bool:
    if os.environ.get("KACHEDB_RADIX_PURE") == "1":
        return True
    try:
        from kachedb_radix import accel  # noqa: F401
    except ImportError:  # pragma: no cover - the C extension is built with the package
        return True
    return False


class Path32:
    """A cached path and the states a measurement needs, each made untimed."""

    def __init__(self, cache: KVCache, tokens: list[int]) -> None:
        self.cache, self.tokens = cache, tokens
        self.blocks = len(tokens) // BLOCK_TOKENS

    def on_device(self) -> bool:
        return self.cache.lookup(self.tokens).on_device == self.blocks

    def up(self) -> None:
        """On the device (from wherever it is)."""
        if not self.on_device():
            self.cache.restore(self.tokens).handle.wait()

    def host_only(self) -> None:
        """In the host tier, not on the device (the host keeps its copies: no bytes)."""
        self.up()
        self.cache.evict(self.blocks)

    def device_only(self) -> None:
        """On the device, and in no slower tier without a disk (host copies dropped)."""
        self.up()
        self.cache.evict(self.blocks, "host")

    def disk_only(self) -> None:
        """On the disk only, its pages clean."""
        self.up()
        self.cache.evict(self.blocks)
        self.cache.evict(self.blocks, "host")
        self.cache.sync()

    def restore(self, source: str) -> None:
        _restore_all(self.cache, self.tokens, source)


def _payload_ranges(cache: KVCache, tokens: list[int]) -> list[tuple[int, int]]:
    """(offset, length) in the slab of each disk block's payload, in path order."""
    store = cache.disk
    assert store is not None
    geometry = store._geometry
    found = cache.lookup(tokens)
    assert set(found.tiers) == {"disk"}, found.tiers[:3]
    return [
        (geometry.slot_offset(cache._slot_of[block]) + geometry.payload_offset,
         store.block_bytes)
        for block in found.blocks
    ]  # fmt: skip


def _preadv(path: Path, ranges: list[tuple[int, int]], into: npt.NDArray[np.uint8]) -> None:
    """The anchor of a disk restore: one ``preadv`` per block payload, in order, into one
    buffer -- the reads a restore makes, with nothing else."""
    fd = os.open(path, os.O_RDONLY)
    try:
        for row, (offset, length) in enumerate(ranges):
            os.preadv(fd, [memoryview(into[row])], offset)
            assert length == into.shape[1]
    finally:
        os.close(fd)


def _shuffled(
    rng: random.Random, actions: dict[str, Callable[[], float | None]], rows: Rows | None
) -> None:
    """Run ``actions`` (each returns its figure, or None) in a random order: interleaved,
    so that the machine's moods fall on every row alike. ``rows`` None: a warm-up round
    (the first touches of pages and plans), its figures dropped."""
    names = list(actions)
    rng.shuffle(names)
    for name in names:
        figure = actions[name]()
        if rows is not None:
            _add(rows, name, figure)


def plan_rounds(preset: str, blocks: int, rounds: int, folder: Path) -> dict[str, Any]:
    """Every figure of a plan of ``blocks`` blocks of ``preset``, ``rounds`` times, each
    round's figures in a random order."""
    spec = _spec(preset, blocks)
    tokens, kv = _tokens(blocks), _kv(spec, blocks)
    nbytes = blocks * spec.bytes_per_block
    rows: Rows = {}
    resident: list[float] = []
    rng = random.Random(blocks)
    slab = folder / f"{preset}.slab"
    cls = cpu_cache_class()
    with cls(spec, model=preset, host_blocks=blocks, disk_path=slab, disk_blocks=blocks) as cache:
        cache.store(tokens, kv)
        path = Path32(cache, tokens)
        target = np.empty_like(kv)
        target[:] = 0  # its pages touched: the copy below measures a copy, not page faults
        payloads = np.empty((blocks, spec.bytes_per_block), dtype=np.uint8)
        payloads[:] = 0

        def host_restore() -> float:
            path.host_only()
            return _gbps(nbytes, _timed(lambda: path.restore("host")))

        def pool_restore() -> float:
            path.up()
            ids = list(cache.lookup(tokens).blocks)  # the path's own blocks, rewritten
            return _gbps(nbytes, _timed(lambda: cache.pool.restore(ids, kv).wait()))

        def demote() -> float:
            path.device_only()
            seconds = _timed(lambda: cache.evict(blocks))
            assert set(cache.lookup(tokens).tiers) == {"host"}
            return _gbps(nbytes, seconds)

        def copy() -> float:
            return _gbps(nbytes, _timed(lambda: np.copyto(target, kv)))

        host_actions: dict[str, Callable[[], float | None]] = {
            HOST_ROW: host_restore, POOL_ROW: pool_restore, DEMOTE_ROW: demote, COPY_ROW: copy
        }  # fmt: skip
        _shuffled(rng, host_actions, None)
        for _ in range(rounds):
            _shuffled(rng, host_actions, rows)
        path.host_only()
        path.restore("host")
        assert _same_bytes(cache.read(tokens), kv), "the host restore brought back other bytes"
        path.disk_only()
        ranges = _payload_ranges(cache, tokens)

        def cold_restore() -> float:
            path.disk_only()
            _drop_cache(slab)
            share = _resident(slab)
            if share is not None:
                resident.append(share)
            seconds = _timed(lambda: path.restore("disk"))
            assert _same_bytes(cache.read(tokens), kv), "the disk restore brought back other bytes"
            return _gbps(nbytes, seconds)

        def warm_restore() -> float:
            path.disk_only()
            _preadv(slab, ranges, payloads)  # its pages in the page cache
            return _gbps(nbytes, _timed(lambda: path.restore("disk")))

        def cold_preadv() -> float:
            path.disk_only()
            _drop_cache(slab)
            return _gbps(nbytes, _timed(lambda: _preadv(slab, ranges, payloads)))

        def warm_preadv() -> float:
            _preadv(slab, ranges, payloads)
            return _gbps(nbytes, _timed(lambda: _preadv(slab, ranges, payloads)))

        for _ in range(rounds):
            actions: dict[str, Callable[[], float | None]] = {
                COLD_ROW: cold_restore, WARM_ROW: warm_restore,
                PREAD_COLD_ROW: cold_preadv, PREAD_WARM_ROW: warm_preadv,
                "disk: dd bs=2M iflag=direct": lambda: _dd(slab, direct=True),
                DD_ROW: lambda: _dd(slab, direct=False),
                "disk: fio psync O_DIRECT QD1 2M": lambda: _fio(slab),
            }  # fmt: skip
            _shuffled(rng, actions, rows)
    slab.unlink()
    return {
        "preset": preset,
        "blocks": blocks,
        "block_bytes": spec.bytes_per_block,
        "bytes": nbytes,
        "rounds": rows,
        "resident_before_cold": resident,
    }


def plan_table(results: list[dict[str, Any]], labels: list[str]) -> str:
    """The plan figures, medians, with their ratios to the same run's anchors."""
    head = [
        "| GB/s (median) | " + " | ".join(labels) + " | ratio |",
        "| --- | " + " | ".join("---:" for _ in labels) + " | ---: |",
    ]
    lines = list(head)
    order = (*HOST_ROWS, COPY_ROW, *DISK_ROWS, PREAD_COLD_ROW, PREAD_WARM_ROW, *OTHER_DISK_ROWS)
    for name in order:
        cells, ratios = [], []
        base = ANCHOR.get(name)
        for result in results:
            value = _median(result["rounds"], name)
            cells.append("" if value is None else f"{value:.2f}")
            below = None if base is None else _median(result["rounds"], base)
            if value is not None and below:
                ratios.append(f"{value / below:.2f}x")
        what = "" if base is None else f" of {base.split(':')[1].strip()}"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {' / '.join(ratios)}{what} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- a 32K-token prefix, CPU


def prefix_rounds(
    preset: str, layers: int, tokens_count: int, rounds: int, folder: Path
) -> dict[str, Any]:
    """A ``tokens_count``-token prefix of ``preset`` with ``layers`` layers: seconds per
    round of its restore from the host tier, its demotion to it and ``numpy.copyto`` of
    the same bytes (interleaved); then, after a restart (the slab reopened warm), its cold
    restore from disk and the cold ``preadv`` of the same payloads (interleaved)."""
    blocks = tokens_count // BLOCK_TOKENS
    spec = _spec(preset, blocks, layers)
    tokens, kv = _tokens(blocks), _kv(spec, blocks)
    rows: Rows = {}
    rng = random.Random(layers)
    slab = folder / f"prefix-{preset}-{layers}.slab"
    cls = cpu_cache_class()

    def opened() -> KVCache:
        return cls(spec, model=preset, host_blocks=blocks, disk_path=slab, disk_blocks=blocks)

    cache = opened()
    try:
        cache.store(tokens, kv)
        path = Path32(cache, tokens)
        targets = [np.empty_like(kv)]  # dropped before the disk rounds
        targets[0][:] = 0

        def host() -> float:
            path.host_only()
            return _timed(lambda: path.restore("host"))

        def demote() -> float:
            path.device_only()
            return _timed(lambda: cache.evict(blocks))

        def copy() -> float:
            return _timed(lambda: np.copyto(targets[0], kv))

        host_actions: dict[str, Callable[[], float | None]] = {
            "host": host, "demote": demote, "copy": copy
        }  # fmt: skip
        _shuffled(rng, host_actions, None)
        for _ in range(rounds):
            _shuffled(rng, host_actions, rows)
        path.host_only()
        path.restore("host")
        assert _same_bytes(cache.read(tokens), kv), "the host restore brought back other bytes"
        targets.clear()
        path.disk_only()
        ranges = _payload_ranges(cache, tokens)
        cache.close()
        payloads = np.empty((blocks, spec.bytes_per_block), dtype=np.uint8)
        payloads[:] = 0

        def restart() -> float:  # reopen the slab warm, restore cold from disk
            nonlocal cache
            _drop_cache(slab)
            started = time.perf_counter()
            cache = opened()
            _add(rows, "reopen", time.perf_counter() - started)
            seconds = _timed(lambda: _restore_all(cache, tokens, "disk"))
            assert _same_bytes(cache.read(tokens), kv), "the disk restore brought back other bytes"
            cache.close()
            return seconds

        def cold_preadv() -> float:
            _drop_cache(slab)
            return _timed(lambda: _preadv(slab, ranges, payloads))

        for _ in range(rounds):
            _shuffled(rng, {"disk": restart, "preadv": cold_preadv}, rows)
    finally:
        cache.close()
        slab.unlink(missing_ok=True)
    return {"preset": preset, "layers": layers, "bytes": blocks * spec.bytes_per_block,
            "rounds": rows}  # fmt: skip


def extrapolate(points: list[tuple[int, float]], full_bytes: int) -> tuple[float, float, float]:
    """(fixed seconds, bytes per second, seconds at ``full_bytes``): the straight line
    through the smallest and largest measured points -- or, when noise gives that line a
    negative fixed part or no slope, the proportional line through the largest point
    (fixed part 0: the more cautious figure for a part that cannot be negative)."""
    (x0, y0), (x1, y1) = min(points), max(points)
    slope = (y1 - y0) / (x1 - x0) if x1 > x0 else 0.0
    fixed = y0 - slope * x0
    if slope <= 0 or fixed < 0:
        slope, fixed = y1 / x1, 0.0
    return fixed, 1 / slope, fixed + slope * full_bytes


#: The prefix table's rows: (source, what it is, its anchor or None).
PREFIX_ROWS = (
    ("host", "host -> device: KVCache.restore", "copy"),
    ("demote", "device -> host: KVCache demotion", "copy"),
    ("copy", "numpy.copyto of the same bytes", None),
    ("disk", "disk -> device, cold, after a restart", "preadv"),
    ("preadv", "sequential preadv of the same bytes, cold", None),
    ("reopen", "the reopen before it", None),
)


def prefix_table(
    results: list[dict[str, Any]], full: dict[str, int], tokens: int
) -> tuple[str, dict[str, Any]]:
    """The prefix table: each measured size (median ms, and the ratio to the row's anchor
    in the same rounds), then the fit and the full-size figure (and the ratio of the two
    fits). The reopen reads every record's header, not its payload: it depends on the
    record count, which every size shares, so its full-size figure is its median over
    the sizes."""
    claim = tokens == PREFIX_TOKENS
    lines = [
        "| preset, source | measured (layers: bytes -> median ms, anchor ratio) | "
        "fit: fixed + per byte | full size | full-size time (ratio) |"
        + (f" vs the seed's {SEED_CLAIM_MS:g} ms |" if claim else ""),
        "| --- | --- | --- | ---: | ---: |" + (" ---: |" if claim else ""),
    ]
    fits: dict[str, Any] = {}
    for label, preset in PRESETS:
        mine = [result for result in results if result["preset"] == preset]
        for source, name, anchor in PREFIX_ROWS if mine else ():
            points = [
                (result["bytes"], statistics.median(result["rounds"][source])) for result in mine
            ]
            cells = []
            for result, (_, seconds) in zip(mine, points, strict=True):
                ratio = ""
                if anchor is not None:
                    ratio = f", {statistics.median(result['rounds'][anchor]) / seconds:.2f}x"
                cells.append(f"{result['layers']}: {result['bytes'] / MiB:,.0f} MiB -> "
                             f"{seconds * 1e3:,.1f}{ratio}")  # fmt: skip
            if source == "reopen":
                seconds = statistics.median(value for _, value in points)
                fit = f"per record: {len(mine)} sizes, same {tokens // BLOCK_TOKENS:,} records"
                fits[f"{preset}/{source}"] = {"full_s": seconds}
            else:
                fixed, rate, seconds = extrapolate(points, full[preset])
                fit = f"{fixed * 1e3:,.1f} ms + {rate / 1e9:.2f} GB/s"
                fits[f"{preset}/{source}"] = {
                    "fixed_s": fixed, "bytes_per_s": rate, "full_s": seconds,
                }  # fmt: skip
            ratio = ""
            if anchor is not None:
                versus = fits[f"{preset}/{anchor}"]["full_s"] if f"{preset}/{anchor}" in fits \
                    else extrapolate([(result["bytes"], statistics.median(result["rounds"][anchor]))
                                      for result in mine], full[preset])[2]  # fmt: skip
                ratio = f" ({versus / seconds:.2f}x)"
                fits[f"{preset}/{source}"]["anchor_ratio"] = versus / seconds
            claimed = f" {seconds * 1e3 / SEED_CLAIM_MS:,.1f}x |" if claim else ""
            lines.append(
                f"| {label}, {name} | {'; '.join(cells)} | {fit} | {full[preset] / GiB:.2f} GiB | "
                f"{seconds * 1e3:,.0f} ms{ratio} |{claimed}"
            )
    return "\n".join(lines), fits


# ---------------------------------------------------------------- planning, both twins


def _twins() -> dict[str, Callable[..., Any]]:
    return twin_classes("TieredTree")  # the one picker: spec/twins.py


def evict_chain_workload(make: Callable[..., Any], blocks: int) -> Workload:
    """The device's eviction of a whole ``blocks``-block path into an empty host tier
    (the demotion's bookkeeping, no bytes), per block; a fresh tree each round."""
    tokens = gate_tiers.plan_tokens(blocks)
    state: list[Any] = [None]

    def setup() -> None:
        state[0] = make(blocks, blocks, 0, BLOCK_TOKENS)
        state[0].insert(tokens)

    def run() -> object:
        return state[0].evict(blocks)

    return Workload(run, setup, units=blocks, unit="block", rounds=3, keep=[state])


def planning(sizes: tuple[int, ...], budget_s: float) -> dict[str, dict[str, float]]:
    """Median ns per block: restore planning and eviction of a path, by twin and size."""
    policy = timing.Policy(budget_s=budget_s, min_rounds=5, max_rounds=301)
    found: dict[str, dict[str, float]] = {}
    for twin, make in _twins().items():
        figures: dict[str, float] = {}
        for blocks in sizes:
            work = gate_tiers.restore_plan_workload(twin, blocks)
            figures[f"plan/{blocks}"] = timing.time_workload(work, policy).median_ns
            chain = evict_chain_workload(make, blocks)
            figures[f"evict/{blocks}"] = timing.time_workload(chain, policy).median_ns
        found[twin] = figures
    return found


def planning_table(found: dict[str, dict[str, float]], sizes: tuple[int, ...]) -> str:
    twins = list(found)
    lines = [
        "| us per block (median) | " + " | ".join(twins) + " | reference / accel |",
        "| --- | " + " | ".join("---:" for _ in twins) + " | ---: |",
    ]
    for kind, what in (("plan", "lookup + restore, planning only"),
                       ("evict", "device eviction of the whole path (demotion)")):  # fmt: skip
        for blocks in sizes:
            values = [found[twin][f"{kind}/{blocks}"] for twin in twins]
            ratio = f"{values[0] / values[1]:.1f}x" if len(values) == 2 else ""
            cells = " | ".join(f"{value / 1e3:.2f}" for value in values)
            tokens = blocks * BLOCK_TOKENS
            lines.append(f"| {what}, {blocks:,} blocks ({tokens:,} tokens) | {cells} | {ratio} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- a tiered replay, C trees


def replay_rounds(requests: int, capacity: int, rounds: int, folder: Path) -> dict[str, Any]:
    """The simulator's sequential replay of a generated conversation trace (the speed
    target of ``benchmarks/bench_simulate.py``: ``requests`` requests, one hash id per 148
    tokens), on the C trees: plain, one tree of ``capacity`` blocks; tiered, a device of a
    tenth of it over a host tier of ``capacity`` blocks (``--tiers host=...``). Each round
    times, in a random order, reading and parsing the trace, the plain replay and the
    tiered replay (seconds)."""
    from kachedb_radix.spec.simulate.export import mooncake_lines, write_lines
    from kachedb_radix.spec.simulate.formats import read_trace
    from kachedb_radix.spec.simulate.plan.service import ServiceModel
    from kachedb_radix.spec.simulate.point import Config, Job, make_trees
    from kachedb_radix.spec.simulate.sequential import replay_sequential
    from kachedb_radix.spec.simulate.tiers import TierSpec, replay_tiered
    from kachedb_radix.spec.simulate.workload import WorkloadSpec, generate

    name = "reference" if _pure() else "accel"
    path = folder / "conversations.jsonl"
    write_lines(mooncake_lines(generate(WorkloadSpec(requests=requests, seed=0)), 148), path)
    trace = read_trace(path, tokens_per_block=148)
    plain_config, tiered_config = Config(), Config(tiers=TierSpec(host_blocks=capacity))
    order = list(range(len(trace.requests)))
    job = Job(trace=trace, mode="sequential", implementation=name, service=ServiceModel(),
              order=order, configs=(plain_config, tiered_config))  # fmt: skip
    rows: Rows = {}
    found: dict[str, Any] = {}

    def read() -> float:
        return _timed(lambda: read_trace(path, tokens_per_block=148))

    def plain() -> float:
        trees, made = make_trees(job, plain_config, capacity)
        assert made == name
        started = time.perf_counter()
        found["plain"] = replay_sequential(trace, trees[0])
        return time.perf_counter() - started

    def tiered() -> float:
        trees, made = make_trees(job, tiered_config, capacity // 10)
        assert made == name
        started = time.perf_counter()
        found["tiered"] = replay_tiered(trace, trees[0])
        return time.perf_counter() - started

    rng = random.Random(requests)
    actions: dict[str, Callable[[], float | None]] = {
        "read": read,
        "plain": plain,
        "tiered": tiered,
    }
    for _ in range(rounds):
        _shuffled(rng, actions, rows)
    path.unlink()
    assert found["tiered"].tiers is not None and sum(found["tiered"].tiers.host) > 0
    return {"requests": requests, "capacity": capacity, "trees": name, "rounds": rows}


def replay_table(result: dict[str, Any]) -> str:
    """Plain against tiered, each with and without reading the trace."""
    read, plain, tiered = (statistics.median(result["rounds"][key]) for key in
                           ("read", "plain", "tiered"))  # fmt: skip
    return "\n".join([
        "| seconds (median) | replay | read + parse + replay |",
        "| --- | ---: | ---: |",
        f"| plain: one tree of {result['capacity']:,} blocks | {plain:.3f} | {read + plain:.3f} |",
        f"| tiered: a device of {result['capacity'] // 10:,} over a host of "
        f"{result['capacity']:,} | {tiered:.3f} | {read + tiered:.3f} |",
        f"| tiered / plain | {tiered / plain:.1f}x | {(read + tiered) / (read + plain):.1f}x |",
    ])  # fmt: skip


# ---------------------------------------------------------------- CPU main


def cpu(args: argparse.Namespace) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="bench-tiers-", dir=args.dir))
    labels = []
    report: dict[str, Any] = {"machine": f"{os.cpu_count()} CPUs", "quick": args.quick}
    try:
        plans = []
        for label, preset in PRESETS:
            block = _spec(preset, 1).bytes_per_block
            labels.append(f"{block / MiB:g} MiB blocks ({label})")
            plans.append(plan_rounds(preset, args.plan_blocks, args.rounds, folder))
        report["plan"] = plans
        print(f"## A plan of {args.plan_blocks} blocks ({args.plan_blocks * BLOCK_TOKENS:,} "
              f"tokens), {args.rounds} round(s), slab in {folder.parent}\n")  # fmt: skip
        print(plan_table(plans, labels))
        shares = [share for plan in plans for share in plan["resident_before_cold"]]
        if shares:
            print(f"\nPage cache before each cold restore (fincore): at most {max(shares):.1%} "
                  "of the slab resident.")  # fmt: skip
        else:
            print("\nPage cache before each cold restore: not checked (no fincore).")
        prefixes = []
        full = {}
        for _, preset in PRESETS:
            spec = _spec(preset, args.prefix_tokens // BLOCK_TOKENS)
            full[preset] = spec.total_bytes
            for divisor in args.layer_divisors:
                layers = max(1, spec.num_layers // divisor)
                prefixes.append(
                    prefix_rounds(preset, layers, args.prefix_tokens, args.prefix_rounds, folder)
                )
        table, fits = prefix_table(prefixes, full, args.prefix_tokens)
        report["prefix"] = {"tokens": args.prefix_tokens, "results": prefixes, "fits": fits}
        print(f"\n## A {args.prefix_tokens:,}-token prefix, {args.prefix_rounds} round(s) per "
              "size, layers scaled down, full size extrapolated\n")  # fmt: skip
        print(table)
        replay = replay_rounds(args.replay_requests, args.replay_capacity, args.rounds, folder)
        report["replay"] = replay
        print(f"\n## A tiered replay against a plain one ({replay['trees']} trees, "
              f"{replay['requests']:,} requests), {args.rounds} round(s)\n")  # fmt: skip
        print(replay_table(replay))
    finally:
        shutil.rmtree(folder)
    sizes = (args.plan_blocks, args.prefix_tokens // BLOCK_TOKENS)
    found = planning(sizes, args.budget)
    report["planning_ns_per_block"] = found
    print("\n## Planning a restore, no bytes (both tree twins)\n")
    print(planning_table(found, sizes))
    return report


# ---------------------------------------------------------------- GPU


def gpu(args: argparse.Namespace) -> dict[str, Any]:
    """The GPU figures, or why they are unmeasured."""
    from kachedb_radix.accel.blockpool import cupy_unavailable_reason

    reason = cupy_unavailable_reason()
    if reason is not None:
        print(f"## GPU restore: unmeasured ({reason})")
        return {"gpu": None, "unmeasured": reason}
    import cupy as cp

    from kachedb_radix import accel

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    report: dict[str, Any] = {"gpu": name, "plan": [], "prefix": []}
    layers_of = (lambda spec: max(1, spec.num_layers // 32)) if args.quick else None
    for label, preset in PRESETS:
        plan = _gpu_plan(cp, accel, preset, args.plan_blocks, args.rounds)
        prefix = _gpu_prefix(cp, accel, preset, args.prefix_tokens, args.prefix_rounds, layers_of)
        report["plan"].append({"label": label, **plan})
        report["prefix"].append({"label": label, **prefix})
        cp.get_default_memory_pool().free_all_blocks()
        pinned = getattr(cp, "get_default_pinned_memory_pool", None)
        if pinned is not None:
            pinned().free_all_blocks()
    print(f"## GPU restore on {name}\n")
    print(_gpu_tables(report, args))
    return report


def _pinned_copy(cp: Any, nbytes: int) -> tuple[Any, Callable[[], object]]:
    """A pinned host buffer of ``nbytes`` and a one-call copy of it to the device."""
    memory = cp.cuda.alloc_pinned_memory(nbytes)
    host = np.frombuffer(memory, dtype=np.uint8, count=nbytes)
    host[:] = 7
    device = cp.empty(nbytes, dtype=cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)

    def copy() -> None:
        cp.cuda.runtime.memcpyAsync(
            device.data.ptr, host.ctypes.data, nbytes, HOST_TO_DEVICE, stream.ptr
        )
        stream.synchronize()

    copy()  # the first copy pays for what a first call pays
    return (memory, host, device, stream), copy


def _gpu_plan(cp: Any, accel: Any, preset: str, blocks: int, rounds: int) -> dict[str, Any]:
    """A plan of ``blocks`` blocks from the host tier, against a pinned memcpy."""
    spec = _spec(preset, blocks)
    tokens, kv = _tokens(blocks), _kv(spec, blocks)
    nbytes = blocks * spec.bytes_per_block
    rows: Rows = {}
    cache = accel.KVCache(spec, host_blocks=blocks)
    cache.store(tokens, kv)
    pinned_kv = cache.pool.alloc_host_buffer(blocks)
    pinned_kv[:] = kv
    keep, memcpy = _pinned_copy(cp, nbytes)
    cache.evict(blocks)
    _restore_all(cache, tokens, "host")  # warm-up: the first call's plans and staging
    ids = list(cache.lookup(tokens).blocks)  # the path's own device blocks, rewritten below
    for _ in range(rounds):
        cache.evict(blocks)
        cp.cuda.runtime.deviceSynchronize()
        _add(rows, "KVCache.restore", _gbps(nbytes, _timed(lambda: _restore_all(cache, tokens))))
        _add(
            rows,
            "pool.restore",
            _gbps(nbytes, _timed(lambda: cache.pool.restore(ids, pinned_kv).wait())),
        )
        _add(rows, "memcpy", _gbps(nbytes, _timed(memcpy)))
    cache.evict(blocks)
    _restore_all(cache, tokens, "host")
    assert _same_bytes(cache.read(tokens), kv), "the GPU restore brought back other bytes"
    cache.close()
    del keep
    return {"preset": preset, "blocks": blocks, "bytes": nbytes, "rounds": rows}


def _gpu_prefix(
    cp: Any,
    accel: Any,
    preset: str,
    tokens_count: int,
    rounds: int,
    layers_of: Callable[[PoolSpec], int] | None,
) -> dict[str, Any]:
    """A whole prefix from the host tier, at full size (``layers_of``: scaled, for a
    smoke run on a small device)."""
    blocks = tokens_count // BLOCK_TOKENS
    spec = _spec(preset, blocks)
    if layers_of is not None:
        spec = dataclasses.replace(spec, num_layers=layers_of(spec))
    tokens, kv = _tokens(blocks), _kv(spec, blocks)
    nbytes = blocks * spec.bytes_per_block
    rows: Rows = {}
    cache = accel.KVCache(spec, host_blocks=blocks)
    cache.store(tokens, kv)
    keep, memcpy = _pinned_copy(cp, nbytes)
    cache.evict(blocks)
    first = _timed(lambda: _restore_all(cache, tokens, "host"))  # pays for first allocations
    for _ in range(rounds):
        cache.evict(blocks)
        cp.cuda.runtime.deviceSynchronize()
        _add(rows, "KVCache.restore", _timed(lambda: _restore_all(cache, tokens, "host")))
        _add(rows, "memcpy", _timed(memcpy))
    assert _same_bytes(cache.read(tokens), kv), "the GPU restore brought back other bytes"
    cache.close()
    del keep, kv
    return {"preset": preset, "layers": spec.num_layers, "tokens": tokens_count,
            "bytes": nbytes, "first_s": first, "rounds": rows}  # fmt: skip


def _modelled(preset: str, gpu_name: str, tokens: int) -> tuple[float, float] | None:
    """The planner's roofline for this GPU: (prefill ms of ``tokens`` uncached tokens,
    restore ms over its host link), or None for a GPU it does not know."""
    from kachedb_radix.spec.simulate.plan.cost import CostModel
    from kachedb_radix.spec.simulate.plan.hardware import Deployment, get_gpu
    from kachedb_radix.spec.simulate.plan.models import MODELS

    part = next((key for key in ("h200", "h100") if key in gpu_name.lower()), None)
    if part is None:
        return None
    model = CostModel.of(Deployment(MODELS[preset], get_gpu(part), 1))
    return model.solo_prefill(tokens, 0, 8192)["ms"], model.restore_ms(tokens)


def _gpu_tables(report: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        f"A plan of {args.plan_blocks} blocks from the host tier (pinned), GB/s, median of "
        f"{args.rounds} round(s):",
        "",
        "| GB/s (median) | KVCache.restore | pool.restore from pinned | pinned cudaMemcpyAsync "
        "| KVCache / memcpy |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for plan in report["plan"]:
        rows = plan["rounds"]
        keys = ("KVCache.restore", "pool.restore", "memcpy")
        cache, pool, memcpy = (statistics.median(rows[key]) for key in keys)
        lines.append(f"| {plan['label']} | {cache:.2f} | {pool:.2f} | {memcpy:.2f} | "
                     f"{cache / memcpy:.2f}x |")  # fmt: skip
    lines += [
        "",
        f"A {args.prefix_tokens:,}-token prefix from the host tier, ms, median of "
        f"{args.prefix_rounds} round(s) (the first restore apart):",
        "",
        "| preset | bytes | KVCache.restore | first restore | pinned memcpy | "
        "seed's claim (32K) | planner: prefill / restore (modelled) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for prefix in report["prefix"]:
        rows = prefix["rounds"]
        cache, memcpy = (
            statistics.median(rows["KVCache.restore"]),
            statistics.median(rows["memcpy"]),
        )
        modelled = _modelled(prefix["preset"], report["gpu"], prefix["tokens"])
        model = "" if modelled is None else f"{modelled[0]:,.0f} ms / {modelled[1]:,.0f} ms"
        layers = "" if not args.quick else f", {prefix['layers']} layers"
        lines.append(
            f"| {prefix['label']}{layers} | {prefix['bytes'] / GiB:.2f} GiB "
            f"| {cache * 1e3:,.1f} ms | {prefix['first_s'] * 1e3:,.1f} ms "
            f"| {memcpy * 1e3:,.1f} ms | < {SEED_CLAIM_MS:g} ms | {model} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", action="store_true", help="the GPU figures (accel.KVCache)")
    parser.add_argument("--quick", action="store_true", help="small sizes, one round")
    parser.add_argument("--dir", type=Path, default=None, help="where the slab files go")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the plan figures")
    parser.add_argument("--plan-blocks", type=int, default=128)
    parser.add_argument("--prefix-tokens", type=int, default=PREFIX_TOKENS)
    parser.add_argument("--prefix-rounds", type=int, default=5)
    parser.add_argument("--layer-divisors", type=int, nargs=2, default=(16, 8),
                        help="CPU: the two scaled-down layer counts, as divisors")  # fmt: skip
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per planning case")
    parser.add_argument("--replay-requests", type=int, default=12_000)
    parser.add_argument("--replay-capacity", type=int, default=20_000)
    parser.add_argument("--json", type=Path, default=None, help="write every round here")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.plan_blocks, args.prefix_rounds, args.budget = 1, 16, 1, 0.1
        args.prefix_tokens, args.layer_divisors = 2048, (32, 16)
        args.replay_requests, args.replay_capacity = 600, 2000
    started = time.perf_counter()
    report = gpu(args) if args.gpu else cpu(args)
    report["seconds"] = time.perf_counter() - started
    print(f"\n({report['seconds']:.0f} s)")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
