"""The GPU benchmarks run end to end on the CPU stand-in for CuPy.

``benchmarks/gpu_check.sh`` runs them once, on a lent GPU, with no second try: this test
runs a few of them (both layouts, every id kind, device timing, the host round trip) over
:mod:`tests.support.fake_cupy` in a child process, then writes the summary, so a broken benchmark
shows here first.  Nothing here looks at a timing: on the fake they mean nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.paths import ROOT

REPO_ROOT = ROOT

SELECTED = (
    "test_device_bandwidth[block_major-gather-1]",
    "test_device_bandwidth[layer_major-copy-4]",
    "test_host_round_trip[block_major-1]",
    "test_host_cost[block_major-gather-device-2]",
    "test_host_cost[block_major-copy-list-1]",
    "test_host_cost[layer_major-scatter-numpy-1]",
    "test_grid_order[layer_major-4]",
)

DRIVER = textwrap.dedent(
    """
    import sys
    import pytest
    from tests.support import fake_cupy

    sys.modules["cupy"] = fake_cupy.module()
    sys.exit(pytest.main(sys.argv[1:]))
    """
)


def test_gpu_benchmarks_run_on_the_fake(tmp_path: Path) -> None:
    bench_json = tmp_path / "bench.json"
    node_ids = [f"benchmarks/bench_blockpool.py::{name}" for name in SELECTED]
    run = subprocess.run(
        [sys.executable, "-c", DRIVER, "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         f"--benchmark-json={bench_json}", *node_ids],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    benches = json.loads(bench_json.read_text())["benchmarks"]
    kinds = {b["extra_info"]["kind"] for b in benches}
    assert kinds == {"device", "host", "host-cost", "grid-order"}
    assert {b["extra_info"]["device"] for b in benches} == {"fake CuPy on the CPU"}
    assert {b["extra_info"]["launch"] for b in benches} == {"driver"}

    summary = tmp_path / "summary.md"
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_blockpool", "summarize", str(bench_json),
         str(summary)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    text = summary.read_text()
    assert "## Host cost per call" in text and "| block_major | accel | gather | device |" in text
    assert "Launch path: kernels launched by cupy.cuda.driver.launchKernel" in text
    assert "## Against torch" in text and "## Grid order" in text
    assert "| layer_major | 4 |" in text
