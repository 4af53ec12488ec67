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
COPY_ROW = "memory: numpy.copyto of the same bytes"
COLD_ROW = "disk -> device, cold page cache: KVCache.restore"
WARM_ROW = "disk -> device, warm page cache: KVCache.restore"
DD_ROW = "disk: dd bs=2M, cold page cache"
HOST_ROWS = (HOST_ROW, POOL_ROW)
DISK_ROWS = (COLD_ROW, WARM_ROW, "disk: dd bs=2M iflag=direct", "disk: fio psync O_DIRECT QD1 2M")


def plan_rounds(preset: str, blocks: int, rounds: int, folder: Path) -> dict[str, Any]:
    """Every figure of a plan of ``blocks`` blocks of ``preset``, ``rounds`` times."""
    spec = _spec(preset, blocks)
    tokens, kv = _tokens(blocks), _kv(spec, blocks)
    nbytes = blocks * spec.bytes_per_block
    rows: Rows = {}
    resident: list[float] = []
    with KVCache(spec, host_blocks=blocks) as cache:
        cache.store(tokens, kv)
        target = np.empty_like(kv)
        target[:] = 0  # its pages touched: the copy below measures a copy, not page faults
        for _ in range(rounds):
            cache.evict(blocks)  # the whole path demoted to the host (untimed)
            seconds = _timed(lambda: _restore_all(cache, tokens, "host"))
            _add(rows, HOST_ROW, _gbps(nbytes, seconds))
            ids = list(cache.lookup(tokens).blocks)  # the path's own device blocks, rewritten
            seconds = _timed(lambda: cache.pool.restore(ids, kv).wait())  # noqa: B023
            _add(rows, POOL_ROW, _gbps(nbytes, seconds))
            _add(rows, COPY_ROW, _gbps(nbytes, _timed(lambda: np.copyto(target, kv))))
        cache.evict(blocks)
        _restore_all(cache, tokens, "host")
        assert _same_bytes(cache.read(tokens), kv), "the host restore brought back other bytes"
    path = folder / f"{preset}.slab"
    with KVCache(spec, host_blocks=blocks, disk_path=path, disk_blocks=blocks) as cache:
        cache.store(tokens, kv)
        cache.evict(blocks)
        cache.evict(blocks, "host")  # the path on disk only
        cache.sync()
        for _ in range(rounds):
            _drop_cache(path)
            share = _resident(path)
            if share is not None:
                resident.append(share)
            seconds = _timed(lambda: _restore_all(cache, tokens, "disk"))
            _add(rows, COLD_ROW, _gbps(nbytes, seconds))
            assert _same_bytes(cache.read(tokens), kv), "the disk restore brought back other bytes"
            cache.evict(blocks)
            cache.evict(blocks, "host")
            seconds = _timed(lambda: _restore_all(cache, tokens, "disk"))
            _add(rows, WARM_ROW, _gbps(nbytes, seconds))
            cache.evict(blocks)
            cache.evict(blocks, "host")
            _add(rows, "disk: dd bs=2M iflag=direct", _dd(path, direct=True))
            _add(rows, DD_ROW, _dd(path, direct=False))
            _add(rows, "disk: fio psync O_DIRECT QD1 2M", _fio(path))
    path.unlink()
    return {
        "preset": preset,
        "blocks": blocks,
        "block_bytes": spec.bytes_per_block,
        "bytes": nbytes,
        "rounds": rows,
        "resident_before_cold": resident,
    }


def plan_table(results: list[dict[str, Any]], labels: list[str]) -> str:
    """The plan figures, medians, with their ratios to the same run's baselines."""
    head = [
        "| GB/s (median) | " + " | ".join(labels) + " | ratio |",
        "| --- | " + " | ".join("---:" for _ in labels) + " | ---: |",
    ]
    lines = list(head)
    for name in (*HOST_ROWS, COPY_ROW, *DISK_ROWS[:2], DD_ROW, *DISK_ROWS[2:]):
        cells, ratios = [], []
        base = COPY_ROW if name in HOST_ROWS else DD_ROW if name in DISK_ROWS else None
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
    """A ``tokens_count``-token prefix of ``preset`` with ``layers`` layers, restored from
    the host tier and (after a restart) from disk: seconds per round."""
    blocks = tokens_count // BLOCK_TOKENS
    spec = _spec(preset, blocks, layers)
    tokens, kv = _tokens(blocks), _kv(spec, blocks)
    rows: Rows = {}
    path = folder / f"prefix-{preset}-{layers}.slab"
    cache = KVCache(spec, host_blocks=blocks, disk_path=path, disk_blocks=blocks)
    try:
        cache.store(tokens, kv)
        for _ in range(rounds):
            cache.evict(blocks)  # to the host (untimed: see the planning figures)
            _add(rows, "host", _timed(lambda: _restore_all(cache, tokens, "host")))
        assert _same_bytes(cache.read(tokens), kv), "the host restore brought back other bytes"
        cache.evict(blocks)
        cache.evict(blocks, "host")
        cache.close()
        for _ in range(rounds):  # a restart: reopen the slab warm, restore cold from disk
            _drop_cache(path)
            started = time.perf_counter()
            cache = KVCache(spec, host_blocks=blocks, disk_path=path, disk_blocks=blocks)
            _add(rows, "reopen", time.perf_counter() - started)
            started = time.perf_counter()
            _restore_all(cache, tokens, "disk")
            _add(rows, "disk", time.perf_counter() - started)
            assert _same_bytes(cache.read(tokens), kv), "the disk restore brought back other bytes"
            cache.close()
    finally:
        cache.close()
        path.unlink(missing_ok=True)
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


def prefix_table(
    results: list[dict[str, Any]], full: dict[str, int], tokens: int
) -> tuple[str, dict[str, Any]]:
    """The prefix table: each measured size, then the fit and the full-size figure. The
    reopen reads every record's header, not its payload: it depends on the record count,
    which every size shares, so its full-size figure is its median over the sizes."""
    claim = tokens == PREFIX_TOKENS
    lines = [
        "| preset, source | measured (layers: bytes -> median ms) | fit: fixed + per byte | "
        "full size | full-size time |"
        + (f" vs the seed's {SEED_CLAIM_MS:g} ms |" if claim else ""),
        "| --- | --- | --- | ---: | ---: |" + (" ---: |" if claim else ""),
    ]
    fits: dict[str, Any] = {}
    for label, preset in PRESETS:
        mine = [result for result in results if result["preset"] == preset]
        for source in ("host", "disk", "reopen") if mine else ():
            points = [
                (result["bytes"], statistics.median(result["rounds"][source])) for result in mine
            ]
            measured = "; ".join(
                f"{result['layers']}: {result['bytes'] / MiB:,.0f} MiB -> {seconds * 1e3:,.1f}"
                for result, (_, seconds) in zip(mine, points, strict=True)
            )
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
            name = {"host": "host -> device", "disk": "disk -> device, cold, after a restart",
                    "reopen": "the reopen before it"}[source]  # fmt: skip
            versus = f" {seconds * 1e3 / SEED_CLAIM_MS:,.1f}x |" if claim else ""
            lines.append(
                f"| {label}, {name} | {measured} | {fit} | {full[preset] / GiB:.2f} GiB | "
                f"{seconds * 1e3:,.0f} ms |{versus}"
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
    from kachedb_radix.spec.simulate.cost import CostModel
    from kachedb_radix.spec.simulate.hardware import Deployment, get_gpu
    from kachedb_radix.spec.simulate.models import MODELS

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
    parser.add_argument("--json", type=Path, default=None, help="write every round here")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.plan_blocks, args.prefix_rounds, args.budget = 1, 16, 1, 0.1
        args.prefix_tokens, args.layer_divisors = 2048, (32, 16)
    started = time.perf_counter()
    report = gpu(args) if args.gpu else cpu(args)
    report["seconds"] = time.perf_counter() - started
    print(f"\n({report['seconds']:.0f} s)")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
