"""``benchmarks/bench_tiers.py`` runs end to end, small: its CPU part here, its GPU part on
the CPU stand-in for CuPy (``gpu_check.sh`` runs it once on a lent GPU, with no second
try, so a broken GPU path must show here first), and without CuPy it says the GPU figures
are unmeasured and exits 0.

Nothing here looks at a figure (a shared machine's timings mean nothing in a unit test):
the script checks every restore's bytes itself; these tests check that it runs, prints
its tables and writes its JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kachedb_radix.accel.blockpool import cupy_unavailable_reason
from tests.support.paths import ROOT

ON_THE_FAKE = textwrap.dedent(
    """
    import sys
    from tests.support import fake_cupy

    sys.modules["cupy"] = fake_cupy.module()
    from benchmarks import bench_tiers

    sys.exit(bench_tiers.main(sys.argv[1:]))
    """
)


def _run(arguments: list[str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, *arguments], cwd=ROOT, capture_output=True, text=True, timeout=180,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def test_the_cpu_figures_run(tmp_path: Path) -> None:
    report = tmp_path / "tiers.json"
    done = _run(["-m", "benchmarks.bench_tiers", "--quick", "--dir", str(tmp_path),
                 "--json", str(report)])  # fmt: skip
    assert "| host -> device: KVCache.restore |" in done.stdout
    assert "| disk -> device, cold page cache: KVCache.restore |" in done.stdout
    assert "| disk: dd bs=2M, cold page cache |" in done.stdout
    assert "| device -> host: KVCache demotion (evict) |" in done.stdout
    assert "| disk: sequential preadv of the same bytes, cold page cache |" in done.stdout
    assert "| tiered / plain |" in done.stdout
    assert "Llama-3-70B FP8, disk -> device, cold, after a restart" in done.stdout
    assert "| lookup + restore, planning only, 128 blocks (2,048 tokens) |" in done.stdout
    results = json.loads(report.read_text())
    assert [plan["block_bytes"] for plan in results["plan"]] == [2 * 2**20, 5 * 2**19]
    for plan in results["plan"]:
        assert all(value > 0 for values in plan["rounds"].values() for value in values)
    assert {fit for fit in results["prefix"]["fits"]} == {
        f"{preset}/{source}"
        for preset in ("llama-3-8b", "llama-3-70b-fp8")
        for source in ("host", "demote", "copy", "disk", "preadv", "reopen")
    }
    assert set(results["planning_ns_per_block"]) >= {"reference"}
    assert set(results["replay"]["rounds"]) == {"read", "plain", "tiered"}
    assert [path.name for path in tmp_path.iterdir()] == ["tiers.json"]  # the slabs are gone


@pytest.mark.skipif(cupy_unavailable_reason() is None, reason="a GPU is here: gpu_check.sh")
def test_without_a_gpu_the_gpu_figures_are_unmeasured(tmp_path: Path) -> None:
    report = tmp_path / "gpu.json"
    done = _run(["-m", "benchmarks.bench_tiers", "--gpu", "--json", str(report)])
    assert "## GPU restore: unmeasured (" in done.stdout
    assert json.loads(report.read_text())["unmeasured"] == cupy_unavailable_reason()


def test_the_gpu_figures_run_on_the_stand_in(tmp_path: Path) -> None:
    report = tmp_path / "gpu.json"
    done = _run(["-c", ON_THE_FAKE, "--gpu", "--quick", "--json", str(report)])
    assert "## GPU restore on fake CuPy on the CPU" in done.stdout
    assert "| Llama-3-8B fp16 |" in done.stdout and "pinned cudaMemcpyAsync" in done.stdout
    results = json.loads(report.read_text())
    assert [plan["preset"] for plan in results["plan"]] == ["llama-3-8b", "llama-3-70b-fp8"]
    for prefix in results["prefix"]:
        assert prefix["tokens"] == 2048 and prefix["rounds"]["KVCache.restore"]
