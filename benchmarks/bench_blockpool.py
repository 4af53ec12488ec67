"""GPU cost of the accel block pool, against a contiguous copy and against torch (pytest-benchmark;
skipped without a GPU; the torch rows skip without torch).

Run:  ``pytest benchmarks/bench_blockpool.py --benchmark-json=OUT.json``
then  ``python benchmarks/bench_blockpool.py summarize OUT.json SUMMARY.md [--junit X.xml ...]``
(``benchmarks/gpu_check.sh OUTDIR`` does both, with the GPU tests).

Geometry: Llama-3-8B, fp16, 16-token blocks (2 MiB per block, 32 KiB per layer chunk), both
layouts; ids are a random permutation of the pool (scattered blocks).  Figures, each in
``extra_info`` (``kind`` says which table it belongs to):

* ``device`` -- bandwidth of gather / scatter / copy from CUDA events around ``reps`` calls
  queued behind a busy-wait kernel (so the GPU never waits for Python: the kernels' own
  speed), against a contiguous ``cudaMemcpyAsync`` of the same bytes (``fraction``).
* ``host`` -- offload+restore through one pinned buffer against contiguous pinned copies.
* ``host-cost`` -- microseconds of host time per call, 1-16 blocks, ids given as a Python
  list, a NumPy array or a device array; torch's ``index_select`` the same way (a device
  index tensor, and one built from a list).  Calls are issued ``HOST_CALLS`` times in a row
  behind a busy-wait kernel and timed on the host, so the figure is the host's own cost.
* ``vs-torch`` -- gather against ``torch.index_select`` (block-major: one call; layer-major:
  one per layer tensor, as an engine without a fused kernel does) and scatter against
  ``index_copy_``, 16-4096 blocks, both **device-only** (behind a busy-wait kernel) and
  **back to back** (``reps`` calls issued as fast as Python can, timed by CUDA events from
  the first to the last: host overhead shows when it exceeds the device time), each
  measured for both in the same run.

* ``grid-order`` -- gather with the launch grid tile-major (the default) against
  chunk-major, device-only and back to back, in the same run (a tuning check).

Bytes are counted once (a move of N bytes reads N and writes N).  pytest-benchmark's own
statistics time one call plus a stream synchronisation (end to end).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kachedb_radix.accel.blockpool import BlockPool, cupy_unavailable_reason
from kachedb_radix.reference.blockpool import Layout, PoolSpec

GPU_SKIP_REASON = cupy_unavailable_reason()
BATCHES = [1, 4, 16, 64, 256, 1024, 4096]
HOST_BATCHES = [1, 16, 256, 1024]
HOST_COST_BATCHES = [1, 2, 4, 8, 16]
TORCH_BATCHES = [16, 64, 256, 1024, 4096]
GRID_ORDER_BATCHES = [4, 256, 1024, 4096]
HOST_CALLS = 300
OPS = ["gather", "scatter", "copy"]
TARGET_FRACTION = 0.85
TARGET_MIN_BATCH = 64
TARGET_HOST_US = 12.0
TARGET_TORCH_RATIO = 0.95
TARGET_TORCH_MIN_BATCH = 256
TARGET_LAYER_MAJOR_RATIO = 2.0
BLOCK_SIZE = 16
PRESET = "llama-3-8b"
_D2D, _D2H, _H2D = 3, 2, 1

SPIN_SOURCE = r"""
extern "C" __global__ void kvpool_bench_spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
"""


def torch_unavailable_reason() -> str | None:
    """None if torch imports with CUDA, else why not."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return "torch not importable"
    if not torch.cuda.is_available():
        return "torch has no CUDA device"
    return None


# ----------------------------------------------------------------------------- GPU helpers
class Rig:
    """A pool sized for the largest batch that fits, with gather and baseline buffers."""

    def __init__(self, layout: Layout) -> None:
        import cupy as cp

        self.cp = cp
        unit = PoolSpec.from_preset(PRESET, num_blocks=1, block_size=BLOCK_SIZE, layout=layout)
        free, _ = cp.cuda.runtime.memGetInfo()
        # pool of 2*B blocks (disjoint copy pairs) + gather buffer + baseline buffer + torch
        # per-layer buffers = at most 5*B blocks
        fit = int(0.8 * int(free)) // (5 * unit.bytes_per_block)
        self.max_batch = max((b for b in BATCHES if b <= fit), default=0)
        if self.max_batch == 0:
            pytest.skip(f"not even one batch fits in {int(free)} free bytes")
        self.spec = unit.with_blocks(2 * self.max_batch)
        self.pool = BlockPool(self.spec)
        for arr in self.pool.arrays:  # non-zero contents
            arr.view(cp.uint8).fill(0x5A)
        shape = self.spec.buffer_shape(self.max_batch)
        self.buf_a = cp.empty(shape, dtype=self.spec.storage_dtype)
        self.buf_b = cp.empty(shape, dtype=self.spec.storage_dtype)
        self.buf_a.view(cp.uint8).fill(0xA5)
        perm = np.random.default_rng(0).permutation(self.spec.num_blocks)
        self.src = [int(i) for i in perm[: self.max_batch]]
        self.dst = [int(i) for i in perm[self.max_batch :]]
        self.spin = cp.RawKernel(SPIN_SOURCE, "kvpool_bench_spin")
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
        # CUDA 13 dropped clockRate from the device properties: assume 2 GHz then (the spin
        # kernel only needs to outlast the host's launches, not to last an exact time)
        self.clock_khz = int(props.get("clockRate") or 0) or 2_000_000
        name = props["name"]
        self.device_name = name.decode() if isinstance(name, bytes) else str(name)
        cp.cuda.get_current_stream().synchronize()

    def ids(self, kind: str, which: str, n: int) -> Any:
        """The first ``n`` source or destination ids as a list, NumPy array or device array."""
        ids = (self.src if which == "src" else self.dst)[:n]
        if kind == "list":
            return list(ids)
        if kind == "numpy":
            return np.asarray(ids, dtype=np.int64)
        return self.cp.asarray(np.asarray(ids, dtype=np.int64))

    def op(self, name: str, n: int, kind: str = "list") -> Callable[[], None]:
        pool = self.pool
        src, dst = self.ids(kind, "src", n), self.ids(kind, "dst", n)
        out = self.buf_a[:n]
        if name == "gather":

            def gather() -> None:
                pool.gather(src, out=out)

            return gather
        if name == "scatter":
            return lambda: pool.scatter(dst, out)
        return lambda: pool.copy(src, dst)

    def contiguous(self, n: int) -> Callable[[], None]:
        nbytes = self.spec.buffer_bytes(n)
        a, b, cp = self.buf_a.data.ptr, self.buf_b.data.ptr, self.cp

        def run() -> None:
            stream = cp.cuda.get_current_stream()
            cp.cuda.runtime.memcpyAsync(b, a, nbytes, _D2D, stream.ptr)

        return run

    def spin_ms(self, ms: float) -> None:
        """Queue a busy-wait kernel of about ``ms`` milliseconds on the current stream."""
        self.spin((1,), (1,), (np.int64(int(ms * self.clock_khz)),))

    def device_seconds(self, fn: Callable[[], None], nbytes: int) -> float:
        """Mean GPU seconds per call, launch overhead hidden behind a busy-wait kernel."""
        cp = self.cp
        reps = max(3, min(50, math.ceil(2**28 / max(nbytes, 1))))
        fn()  # warm-up (and kernel compilation)
        stream = cp.cuda.get_current_stream()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        self.spin_ms(2.0 + reps * 0.2)  # long enough for Python to queue every call
        start.record(stream)
        for _ in range(reps):
            fn()
        end.record(stream)
        end.synchronize()
        return float(cp.cuda.get_elapsed_time(start, end)) / 1e3 / reps

    def back_to_back_seconds(self, fn: Callable[[], None], nbytes: int) -> float:
        """Mean seconds per call for calls issued back to back, from the first call's start
        to the last call's end on the GPU: the host's cost shows where it exceeds the
        device's."""
        cp = self.cp
        reps = max(20, min(200, math.ceil(2**30 / max(nbytes, 1))))
        for _ in range(3):
            fn()
        stream = cp.cuda.get_current_stream()
        stream.synchronize()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        for _ in range(reps):
            fn()
        end.record(stream)
        end.synchronize()
        return float(cp.cuda.get_elapsed_time(start, end)) / 1e3 / reps

    def host_us(self, fn: Callable[[], None], calls: int = HOST_CALLS) -> float:
        """Median host microseconds per call over 5 rounds of ``calls`` calls, queued
        behind a busy-wait kernel so a full launch queue never blocks the host."""
        cp = self.cp
        for _ in range(3):
            fn()
        samples = []
        for _ in range(5):
            cp.cuda.get_current_stream().synchronize()
            self.spin_ms(calls * 0.05 + 2.0)
            began = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            samples.append((time.perf_counter_ns() - began) / calls / 1e3)
        cp.cuda.get_current_stream().synchronize()
        self.pool.check_device_ids()
        return float(np.median(samples))

    def close(self) -> None:
        del self.pool, self.buf_a, self.buf_b
        self.cp.get_default_memory_pool().free_all_blocks()


class TorchSide:
    """The same pool and buffers seen as torch tensors (zero copy), for the baselines."""

    def __init__(self, rig: Rig) -> None:
        torch = importlib.import_module("torch")
        self.torch = torch
        self.rig = rig
        self.layers = [torch.as_tensor(a, device="cuda") for a in rig.pool.arrays]
        self.out = torch.as_tensor(rig.buf_a, device="cuda")
        self.layer_major = rig.spec.layout is Layout.LAYER_MAJOR

    def layer_buffers(self, n: int) -> list[Any]:
        """One contiguous [2, n, ...] buffer per layer, as per-layer calls read or write."""
        shape = (2, n, *self.rig.spec.layer_shape[2:])
        return [
            self.torch.empty(shape, dtype=self.layers[0].dtype, device="cuda") for _ in self.layers
        ]

    def index(self, ids: list[int]) -> Any:
        return self.torch.tensor(ids, dtype=self.torch.int64, device="cuda")

    def gather(self, n: int, from_list: bool = False) -> Callable[[], None]:
        torch = self.torch
        ids = self.rig.src[:n]
        idx = self.index(ids)
        if not self.layer_major:
            pool, out = self.layers[0], self.out[:n]

            def block_major() -> None:
                index = self.index(ids) if from_list else idx
                torch.index_select(pool, 0, index, out=out)

            return block_major
        outs = self.layer_buffers(n)

        def per_layer() -> None:
            index = self.index(ids) if from_list else idx
            for layer, out in zip(self.layers, outs, strict=True):
                torch.index_select(layer, 1, index, out=out)

        return per_layer

    def scatter(self, n: int) -> Callable[[], None]:
        idx = self.index(self.rig.dst[:n])
        if not self.layer_major:
            pool, src = self.layers[0], self.out[:n]
            return lambda: pool.index_copy_(0, idx, src)
        srcs = self.layer_buffers(n)

        def per_layer() -> None:
            for layer, src in zip(self.layers, srcs, strict=True):
                layer.index_copy_(1, idx, src)

        return per_layer


pytestmark = pytest.mark.skipif(GPU_SKIP_REASON is not None, reason=GPU_SKIP_REASON or "")


@pytest.fixture(scope="module", params=list(Layout), ids=lambda lay: lay.value)
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    r = Rig(request.param)
    yield r
    r.close()


@pytest.fixture(scope="module")
def torch_side(rig: Rig) -> TorchSide:
    reason = torch_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return TorchSide(rig)


def _record(
    benchmark: Any, rig: Rig, fn: Callable[[], None], rounds: int, warmup: int, **info: Any
) -> None:
    """Store ``info`` (plus layout, device and launch path) and let pytest-benchmark time
    ``fn`` synced."""
    benchmark.extra_info.update(
        layout=rig.spec.layout.value,
        device=rig.device_name,
        launch=rig.pool.launch_path,
        launch_note=rig.pool.launch_note,
        **info,
    )

    def run() -> None:
        fn()
        rig.cp.cuda.get_current_stream().synchronize()

    benchmark.pedantic(run, rounds=rounds, iterations=1, warmup_rounds=warmup)


@pytest.mark.parametrize("n", BATCHES)
@pytest.mark.parametrize("op", OPS)
def test_device_bandwidth(benchmark: Any, rig: Rig, op: str, n: int) -> None:
    if n > rig.max_batch:
        pytest.skip(f"batch {n} does not fit in device memory (max {rig.max_batch})")
    nbytes = rig.spec.buffer_bytes(n)
    fn, base = rig.op(op, n), rig.contiguous(n)
    t_op = rig.device_seconds(fn, nbytes)
    t_base = rig.device_seconds(base, nbytes)
    _record(
        benchmark,
        rig,
        fn,
        rounds=5,
        warmup=1,
        kind="device",
        op=op,
        blocks=n,
        bytes=nbytes,
        op_gbps=nbytes / t_op / 1e9,
        contig_gbps=nbytes / t_base / 1e9,
        fraction=t_base / t_op,
    )


@pytest.mark.parametrize("n", HOST_BATCHES)
def test_host_round_trip(benchmark: Any, rig: Rig, n: int) -> None:
    if n > rig.max_batch:
        pytest.skip(f"batch {n} does not fit in device memory (max {rig.max_batch})")
    cp = rig.cp
    pool = rig.pool
    host = pool.alloc_host_buffer(n)
    src, dst = rig.src[:n], rig.dst[:n]
    nbytes = rig.spec.buffer_bytes(n)
    dev = rig.buf_b.data.ptr

    def round_trip() -> None:
        cur = cp.cuda.get_current_stream()
        pool.offload(src, host_out=host).stream_wait(cur)
        pool.restore(dst, host).stream_wait(cur)

    def contiguous() -> None:
        cur = cp.cuda.get_current_stream()
        cp.cuda.runtime.memcpyAsync(host.ctypes.data, dev, nbytes, _D2H, cur.ptr)
        cp.cuda.runtime.memcpyAsync(dev, host.ctypes.data, nbytes, _H2D, cur.ptr)

    def timed(fn: Callable[[], None], reps: int = 3) -> float:
        fn()
        stream = cp.cuda.get_current_stream()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        for _ in range(reps):
            fn()
        end.record(stream)
        end.synchronize()
        return float(cp.cuda.get_elapsed_time(start, end)) / 1e3 / reps

    t_op, t_base = timed(round_trip), timed(contiguous)
    _record(
        benchmark,
        rig,
        round_trip,
        rounds=3,
        warmup=0,
        kind="host",
        op="offload+restore",
        blocks=n,
        bytes=2 * nbytes,
        op_gbps=2 * nbytes / t_op / 1e9,
        contig_gbps=2 * nbytes / t_base / 1e9,
        fraction=t_base / t_op,
    )
    pool.synchronize()


@pytest.mark.parametrize("n", HOST_COST_BATCHES)
@pytest.mark.parametrize("ids", ["list", "numpy", "device"])
@pytest.mark.parametrize("op", OPS)
def test_host_cost(benchmark: Any, rig: Rig, op: str, ids: str, n: int) -> None:
    """Host microseconds per call of the accel pool for small batches."""
    fn = rig.op(op, n, ids)
    us = rig.host_us(fn)
    _record(
        benchmark,
        rig,
        fn,
        rounds=3,
        warmup=1,
        kind="host-cost",
        impl="accel",
        op=op,
        ids=ids,
        blocks=n,
        host_us=us,
    )


@pytest.mark.parametrize("n", HOST_COST_BATCHES)
@pytest.mark.parametrize("ids", ["device", "list"])
def test_torch_host_cost(benchmark: Any, rig: Rig, torch_side: TorchSide, ids: str, n: int) -> None:
    """Host microseconds per call of torch's index_select (per layer for layer-major)."""
    fn = torch_side.gather(n, from_list=ids == "list")
    us = rig.host_us(fn)
    _record(
        benchmark,
        rig,
        fn,
        rounds=3,
        warmup=1,
        kind="host-cost",
        impl="torch",
        op="gather",
        ids=ids,
        blocks=n,
        host_us=us,
    )


@pytest.mark.parametrize("n", TORCH_BATCHES)
@pytest.mark.parametrize("op", ["gather", "scatter"])
def test_vs_torch(benchmark: Any, rig: Rig, torch_side: TorchSide, op: str, n: int) -> None:
    """Ours against torch, device-only and back to back, in the same run."""
    if n > rig.max_batch:
        pytest.skip(f"batch {n} does not fit in device memory (max {rig.max_batch})")
    nbytes = rig.spec.buffer_bytes(n)
    ours = rig.op(op, n)
    theirs = torch_side.gather(n) if op == "gather" else torch_side.scatter(n)
    info: dict[str, Any] = {}
    for mode, timer in (("device", rig.device_seconds), ("back-to-back", rig.back_to_back_seconds)):
        t_ours, t_torch = timer(ours, nbytes), timer(theirs, nbytes)
        info[f"{mode}_ours_gbps"] = nbytes / t_ours / 1e9
        info[f"{mode}_torch_gbps"] = nbytes / t_torch / 1e9
        info[f"{mode}_ratio"] = t_torch / t_ours
    _record(
        benchmark,
        rig,
        ours,
        rounds=3,
        warmup=1,
        kind="vs-torch",
        op=op,
        blocks=n,
        bytes=nbytes,
        **info,
    )


@pytest.mark.parametrize("n", GRID_ORDER_BATCHES)
def test_grid_order(benchmark: Any, rig: Rig, n: int) -> None:
    """Gather with the launch grid tile-major (the default) against chunk-major (the order
    before issue 14), device-only and back to back, in the same run."""
    if n > rig.max_batch:
        pytest.skip(f"batch {n} does not fit in device memory (max {rig.max_batch})")
    nbytes = rig.spec.buffer_bytes(n)
    fn = rig.op("gather", n)
    info: dict[str, Any] = {}
    try:
        for order, tile_major in (("tile", True), ("chunk", False)):
            rig.pool.tile_major = tile_major
            for mode, timer in (
                ("device", rig.device_seconds),
                ("back-to-back", rig.back_to_back_seconds),
            ):
                info[f"{mode}_{order}_gbps"] = nbytes / timer(fn, nbytes) / 1e9
    finally:
        rig.pool.tile_major = True
    _record(benchmark, rig, fn, rounds=3, warmup=1, kind="grid-order", op="gather", blocks=n,
            bytes=nbytes, **info)  # fmt: skip


# ----------------------------------------------------------------------------- summary
def _junit_counts(paths: list[Path]) -> list[str]:
    lines = []
    for path in paths:
        if not path.exists():
            lines.append(f"- `{path.name}`: missing (the run did not produce it)")
            continue
        root = ET.parse(path).getroot()
        suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
        keys = ("tests", "failures", "errors", "skipped")
        tot = {k: sum(int(s.get(k, 0)) for s in suites) for k in keys}
        passed = tot["tests"] - tot["failures"] - tot["errors"] - tot["skipped"]
        lines.append(
            f"- `{path.name}`: {tot['tests']} tests, {passed} passed, {tot['skipped']} skipped, "
            f"{tot['failures']} failed, {tot['errors']} errors"
        )
    return lines


def _load_rows(bench_json: Path, notes: list[str]) -> list[dict[str, Any]]:
    text = bench_json.read_text() if bench_json.exists() else ""
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        notes.append(f"`{bench_json.name}` is not valid JSON: {exc}")
        data = {}
    rows = []
    for b in data.get("benchmarks", []):
        info = dict(b.get("extra_info", {}))
        if "kind" in info:
            info["e2e_us"] = float(b["stats"]["mean"]) * 1e6
            rows.append(info)
    return rows


def _device_table(rows: list[dict[str, Any]]) -> tuple[list[str], int]:
    lines = [
        f"Device bandwidth against a contiguous copy (target: fraction >= {TARGET_FRACTION:.2f} "
        f"from {TARGET_MIN_BATCH} blocks).",
        "",
        "| kind | layout | op | blocks | MiB | op GB/s | contiguous GB/s | fraction "
        "| end-to-end mean (us) | target |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    misses = 0
    for r in sorted(rows, key=lambda r: (r["kind"], r["layout"], r["op"], r["blocks"])):
        target = "-"
        if r["kind"] == "device" and r["blocks"] >= TARGET_MIN_BATCH:
            ok = r["fraction"] >= TARGET_FRACTION
            misses += not ok
            target = "met" if ok else "MISSED"
        lines.append(
            f"| {r['kind']} | {r['layout']} | {r['op']} | {r['blocks']} "
            f"| {r['bytes'] / 2**20:.1f} | {r['op_gbps']:.1f} | {r['contig_gbps']:.1f} "
            f"| {r['fraction']:.3f} | {r['e2e_us']:.1f} | {target} |"
        )
    return lines, misses


def _host_cost_table(rows: list[dict[str, Any]]) -> tuple[list[str], int]:
    lines = [
        f"Host microseconds per call (median of 5 rounds of {HOST_CALLS} calls; target: accel "
        f"<= {TARGET_HOST_US:g} us for 1-16 blocks with list or NumPy ids).",
        "",
        "| layout | impl | op | ids | "
        + " | ".join(f"{n} blk" for n in HOST_COST_BATCHES)
        + " | target |",
        "|---|---|---|---|" + "---:|" * len(HOST_COST_BATCHES) + "---|",
    ]
    groups: dict[tuple[str, str, str, str], dict[int, float]] = {}
    for r in rows:
        key = (r["layout"], r["impl"], r["op"], r["ids"])
        groups.setdefault(key, {})[r["blocks"]] = r["host_us"]
    misses = 0
    for key in sorted(groups):
        cells = groups[key]
        target = "-"
        if key[1] == "accel" and key[3] in ("list", "numpy"):
            ok = all(v <= TARGET_HOST_US for v in cells.values())
            misses += not ok
            target = "met" if ok else "MISSED"
        values = " | ".join(f"{cells[n]:.1f}" if n in cells else "-" for n in HOST_COST_BATCHES)
        lines.append(f"| {' | '.join(key)} | {values} | {target} |")
    return lines, misses


def _torch_table(rows: list[dict[str, Any]]) -> tuple[list[str], int]:
    lines = [
        "Against torch (GB/s; ratio = torch time / ours, > 1 means faster).  Targets: "
        f"block-major gather back to back >= {TARGET_TORCH_RATIO:g}x torch from "
        f"{TARGET_TORCH_MIN_BATCH} blocks; layer-major gather >= {TARGET_LAYER_MAJOR_RATIO:g}x "
        "torch's per-layer index_select.",
        "",
        "| layout | op | blocks | device-only ours | torch | ratio "
        "| back-to-back ours | torch | ratio | target |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    misses = 0
    for r in sorted(rows, key=lambda r: (r["layout"], r["op"], r["blocks"])):
        target = "-"
        if r["op"] == "gather" and r["layout"] == Layout.BLOCK_MAJOR.value:
            if r["blocks"] >= TARGET_TORCH_MIN_BATCH:
                ok = r["back-to-back_ratio"] >= TARGET_TORCH_RATIO
                misses += not ok
                target = "met" if ok else "MISSED"
        elif r["op"] == "gather":
            ok = r["back-to-back_ratio"] >= TARGET_LAYER_MAJOR_RATIO
            misses += not ok
            target = "met" if ok else "MISSED"
        lines.append(
            f"| {r['layout']} | {r['op']} | {r['blocks']} "
            f"| {r['device_ours_gbps']:.0f} | {r['device_torch_gbps']:.0f} "
            f"| {r['device_ratio']:.2f} | {r['back-to-back_ours_gbps']:.0f} "
            f"| {r['back-to-back_torch_gbps']:.0f} | {r['back-to-back_ratio']:.2f} | {target} |"
        )
    return lines, misses


def _grid_order_table(rows: list[dict[str, Any]]) -> tuple[list[str], int]:
    lines = [
        "Gather, launch grid tile-major (the default) against chunk-major (GB/s; ratio = "
        "chunk-major time / tile-major, > 1 means the default is faster).  No target.",
        "",
        "| layout | blocks | device-only tile | chunk | ratio | back-to-back tile | chunk "
        "| ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(rows, key=lambda r: (r["layout"], r["blocks"])):
        cells = []
        for mode in ("device", "back-to-back"):
            tile, chunk = r[f"{mode}_tile_gbps"], r[f"{mode}_chunk_gbps"]
            cells.append(f"{tile:.0f} | {chunk:.0f} | {tile / chunk:.3f}")
        lines.append(f"| {r['layout']} | {r['blocks']} | {' | '.join(cells)} |")
    return lines, 0


def summarize(bench_json: Path, out_md: Path, junits: list[Path], notes: list[str]) -> int:
    """Write the markdown summary; return how many rows missed their target."""
    notes = list(notes)
    rows = _load_rows(bench_json, notes)
    lines = ["# block pool GPU check", ""]
    lines += [f"- {n}" for n in notes]
    lines += _junit_counts(junits)
    lines.append("")
    misses = 0
    if not rows:
        reason = GPU_SKIP_REASON or "no benchmark results were recorded"
        lines.append(f"**GPU figures unmeasured**: {reason}.")
    else:
        lines.append(f"Device: {rows[0].get('device', '?')}.")
        launches = sorted({str(r.get("launch_note") or r.get("launch") or "?") for r in rows})
        lines.append(f"Launch path: {'; '.join(launches)}.")
        sections = (
            ("Bandwidth", _device_table, ("device", "host")),
            ("Host cost per call", _host_cost_table, ("host-cost",)),
            ("Against torch", _torch_table, ("vs-torch",)),
            ("Grid order", _grid_order_table, ("grid-order",)),
        )
        for title, table, kinds in sections:
            subset = [r for r in rows if r["kind"] in kinds]
            lines += ["", f"## {title}", ""]
            if not subset:
                why = torch_unavailable_reason() if "vs-torch" in kinds else None
                lines.append(f"unmeasured{': ' + why if why else ''}.")
                continue
            body, missed = table(subset)
            lines += body
            misses += missed
    out_md.write_text("\n".join(lines) + "\n")
    return misses


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summarize", help="write a markdown table from a benchmark json")
    s.add_argument("bench_json", type=Path)
    s.add_argument("out_md", type=Path)
    s.add_argument("--junit", type=Path, action="append", default=[])
    s.add_argument("--note", action="append", default=[])
    args = parser.parse_args(argv)
    misses = summarize(args.bench_json, args.out_md, args.junit, args.note)
    print(args.out_md.read_text())
    if misses:
        print(f"{misses} rows missed their target", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
