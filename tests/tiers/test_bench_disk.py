"""``benchmarks/bench_disk.py`` runs end to end, small: every row is measured and printed.

Nothing here looks at a figure (a shared machine's timings mean nothing in a unit test):
it checks that the script runs as the benchmarks page says, restores the right bytes (the
script asserts it), and writes its table and JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT


def test_the_disk_benchmark_runs(tmp_path: Path) -> None:
    report = tmp_path / "disk.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/bench_disk.py", "--total-mib", "8", "--rounds", "1",
         "--dir", str(tmp_path), "--json", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| restore cold: read_into |" in done.stdout
    assert "| disk: dd bs=2M iflag=direct |" in done.stdout or "dd bs=2M, cold" in done.stdout
    results = json.loads(report.read_text())
    assert [result["block_bytes"] for result in results] == [2 * 2**20, 5 * 2**19]
    for result in results:
        assert result["blocks"] == 8 * 2**20 // result["block_bytes"]
        rows = result["median_gbps"]
        assert {"store: put + sync", "restore cold: read_into", "restore warm: mmap copy"} <= set(
            rows
        )
        assert all(value > 0 for value in rows.values())
    assert [path.name for path in tmp_path.iterdir()] == ["disk.json"]  # the store is gone
