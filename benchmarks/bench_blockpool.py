"""GPU bandwidth of the accel block pool's fused copies (pytest-benchmark; skipped without a GPU).

Run:  ``pytest benchmarks/bench_blockpool.py --benchmark-json=OUT.json``
then  ``python benchmarks/bench_blockpool.py summarize OUT.json SUMMARY.md [--junit X.xml ...]``.

What is measured, per layout (block-major, layer-major), op (gather, scatter, copy) and batch
(1 ... 4096 randomly scattered Llama-3-8B fp16 blocks of 16 tokens = 2 MiB each):

* ``op_gbps``: device bandwidth of the operation, from CUDA events around ``reps`` back-to-back
  calls queued behind a busy-wait kernel (so the GPU never waits for Python and the figure is
  the kernels' own speed).  Bytes counted once (a move of N bytes reads N and writes N).
* ``contig_gbps``: a contiguous device-to-device ``cudaMemcpyAsync`` of the same byte count,
  timed the same way in the same test.  ``fraction = op_gbps / contig_gbps`` (target >= 0.85
  for batches of 64 blocks or more).
* pytest-benchmark's own statistics time one call plus a stream synchronisation (end to end,
  including Python validation and launch overhead).

Host round trip (``test_host_round_trip``): ``offload`` then ``restore`` of N blocks through
one pinned host buffer against a contiguous pinned device->host then host->device copy of the
same bytes, both timed with CUDA events on the current stream.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accel.blockpool import BlockPool, cupy_unavailable_reason
from reference.blockpool import Layout, PoolSpec

GPU_SKIP_REASON = cupy_unavailable_reason()
BATCHES = [1, 4, 16, 64, 256, 1024, 4096]
HOST_BATCHES = [1, 16, 256, 1024]
OPS = ["gather", "scatter", "copy"]
TARGET_FRACTION = 0.85
TARGET_MIN_BATCH = 64
BLOCK_SIZE = 16
PRESET = "llama-3-8b"
_D2D, _D2H, _H2D = 3, 2, 1

SPIN_SOURCE = r"""
extern "C" __global__ void kvpool_bench_spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
"""


# ----------------------------------------------------------------------------- GPU helpers
class Rig:
    """A pool sized for the largest batch that fits, with gather and baseline buffers."""

    def __init__(self, layout: Layout) -> None:
        import cupy as cp

        self.cp = cp
        unit = PoolSpec.from_preset(PRESET, num_blocks=1, block_size=BLOCK_SIZE, layout=layout)
        free, _ = cp.cuda.runtime.memGetInfo()
        # pool of 2*B blocks (disjoint copy pairs) + gather buffer + baseline buffer = 4*B blocks
        fit = int(0.8 * int(free)) // (4 * unit.bytes_per_block)
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
        self.clock_khz = int(props["clockRate"]) or 2_000_000
        self.device_name = (
            props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        )
        cp.cuda.get_current_stream().synchronize()

    def op(self, name: str, n: int) -> Callable[[], None]:
        pool, src, dst = self.pool, self.src[:n], self.dst[:n]
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

    def device_seconds(self, fn: Callable[[], None], nbytes: int) -> float:
        """Mean GPU seconds per call, launch overhead hidden behind a busy-wait kernel."""
        cp = self.cp
        reps = max(3, min(50, math.ceil(2**28 / max(nbytes, 1))))
        fn()  # warm-up (and kernel compilation)
        stream = cp.cuda.get_current_stream()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        spin_ms = 2.0 + reps * 0.2  # long enough for Python to queue every call
        self.spin((1,), (1,), (np.int64(int(spin_ms * self.clock_khz)),))
        start.record(stream)
        for _ in range(reps):
            fn()
        end.record(stream)
        end.synchronize()
        return float(cp.cuda.get_elapsed_time(start, end)) / 1e3 / reps

    def close(self) -> None:
        del self.pool, self.buf_a, self.buf_b
        self.cp.get_default_memory_pool().free_all_blocks()


pytestmark = pytest.mark.skipif(GPU_SKIP_REASON is not None, reason=GPU_SKIP_REASON or "")


@pytest.fixture(scope="module", params=list(Layout), ids=lambda lay: lay.value)
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    r = Rig(request.param)
    yield r
    r.close()


def _sync_after(rig: Rig, fn: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        fn()
        rig.cp.cuda.get_current_stream().synchronize()

    return run


@pytest.mark.parametrize("n", BATCHES)
@pytest.mark.parametrize("op", OPS)
def test_device_bandwidth(benchmark: Any, rig: Rig, op: str, n: int) -> None:
    if n > rig.max_batch:
        pytest.skip(f"batch {n} does not fit in device memory (max {rig.max_batch})")
    nbytes = rig.spec.buffer_bytes(n)
    fn, base = rig.op(op, n), rig.contiguous(n)
    t_op = rig.device_seconds(fn, nbytes)
    t_base = rig.device_seconds(base, nbytes)
    benchmark.extra_info.update(
        kind="device",
        layout=rig.spec.layout.value,
        op=op,
        blocks=n,
        bytes=nbytes,
        op_gbps=nbytes / t_op / 1e9,
        contig_gbps=nbytes / t_base / 1e9,
        fraction=t_base / t_op,
        device=rig.device_name,
    )
    benchmark.pedantic(_sync_after(rig, fn), rounds=5, iterations=1, warmup_rounds=1)


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
    benchmark.extra_info.update(
        kind="host",
        layout=rig.spec.layout.value,
        op="offload+restore",
        blocks=n,
        bytes=2 * nbytes,
        op_gbps=2 * nbytes / t_op / 1e9,
        contig_gbps=2 * nbytes / t_base / 1e9,
        fraction=t_base / t_op,
        device=rig.device_name,
    )
    benchmark.pedantic(_sync_after(rig, round_trip), rounds=3, iterations=1, warmup_rounds=0)
    pool.synchronize()


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


def summarize(bench_json: Path, out_md: Path, junits: list[Path], notes: list[str]) -> int:
    """Write the markdown summary; return how many device rows (>= 64 blocks) missed target."""
    rows: list[dict[str, Any]] = []
    text = bench_json.read_text() if bench_json.exists() else ""
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        notes = [*notes, f"`{bench_json.name}` is not valid JSON: {exc}"]
        data = {}
    if data:
        for b in data.get("benchmarks", []):
            info = dict(b.get("extra_info", {}))
            if "op_gbps" in info:
                info["e2e_us"] = float(b["stats"]["mean"]) * 1e6
                rows.append(info)
    lines = ["# block pool GPU check", ""]
    lines += [f"- {n}" for n in notes]
    lines += _junit_counts(junits)
    lines.append("")
    misses = 0
    if not rows:
        reason = GPU_SKIP_REASON or "no benchmark results were recorded"
        lines.append(f"**GPU figures unmeasured**: {reason}.")
    else:
        lines.append(
            f"Device: {rows[0].get('device', '?')}.  Target: fraction >= "
            f"{TARGET_FRACTION:.2f} for batches of {TARGET_MIN_BATCH}+ blocks."
        )
        lines += [
            "",
            "| kind | layout | op | blocks | MiB | op GB/s | contiguous GB/s | fraction "
            "| end-to-end mean (us) | target |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        rows.sort(key=lambda r: (r["kind"], r["layout"], r["op"], r["blocks"]))
        for r in rows:
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
        print(f"{misses} device rows missed the {TARGET_FRACTION:.0%} target", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
