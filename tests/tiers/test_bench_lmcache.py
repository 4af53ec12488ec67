"""``benchmarks/bench_lmcache.py`` runs: without LMCache it says so and exits 0; with it
(its own environment: CPU torch, LMCache 0.5.6 without its CUDA dependencies) a small
side-by-side run checks every restore's bytes and prints its table. Nothing here looks
at a figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_lmcache import PATHS, lmcache_missing
from tests.support.paths import ROOT

MISSING = lmcache_missing()


def _run(arguments: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_lmcache", *arguments], cwd=ROOT,
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.skipif(MISSING is None, reason="LMCache is here: the run below measures")
def test_without_lmcache_it_says_unmeasured() -> None:
    assert "## Beside LMCache: unmeasured (LMCache or torch not importable" in _run([])


@pytest.mark.skipif(
    MISSING is not None,
    reason="LMCache 0.5.6 needs CPU torch and its own environment (the benchmark's "
    f"docstring); not installed here: {MISSING}",
)
def test_beside_lmcache_every_path_runs(tmp_path: Path) -> None:  # pragma: no cover - its env
    report = tmp_path / "lmcache.json"
    out = _run(["--tokens", "512", "--rounds", "1", "--dir", str(tmp_path), "--json", str(report)])
    assert all(f"| {path} |" in out for path in PATHS)
    seconds = json.loads(report.read_text())["seconds"]
    assert all(len(runs) == 1 for path in PATHS for runs in seconds[path].values())
