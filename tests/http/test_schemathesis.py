"""Both HTTP services attacked by Schemathesis (issue 32): ``route``'s API and the
``explain --serve`` playground, each a live process on loopback, each described by the
OpenAPI 3.1 document it serves. Positive, negative and stateful generation, every
Schemathesis check (the playground's trace upload excepted from "schema-valid data is
accepted": its schema is text) and this project's own (``schemathesis_hooks.py``: no
empty reply, strict JSON); bounded by examples and time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kachedb_radix.reference import RadixTree
from kachedb_radix.spec.router.publisher import EventPublisher

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
#: Seconds each run may take (Schemathesis's own budget), and examples per operation.
BUDGET_S, EXAMPLES = 15, 25


def _schemathesis(config: str, url: str, folder: Path, env: dict[str, str] | None = None) -> str:
    """Run Schemathesis in ``folder`` (it keeps a cache where it runs)."""
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(HERE / config),
               "run", f"{url}/openapi.json", "--max-examples", str(EXAMPLES), "--seed", "7",
               "--max-time", str(BUDGET_S), "--workers", "1"]  # fmt: skip
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=folder,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)},
        timeout=BUDGET_S * 4,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    return out


def _wait_for(url: str, process: subprocess.Popen[str]) -> None:
    import urllib.request

    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/openapi.json", timeout=2):
                return
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, "did not start"
            time.sleep(0.1)


@pytest.fixture
def route_url() -> Iterator[str]:
    """A live ``kachedb-radix route`` following two workers that hold some blocks."""
    from benchmarks.route_service import free_port

    publishers = [EventPublisher("tcp://127.0.0.1:0", "tcp://127.0.0.1:0") for _ in range(2)]
    tree = RadixTree(64, 4, events=True)
    tree.insert(list(range(16)))
    for batch in tree.take_events():
        publishers[0].publish(batch)
    port = free_port()
    command = [sys.executable, "-m", "kachedb_radix.spec", "route", "--block-size", "4",
               "--listen", f"127.0.0.1:{port}", "--plain"]  # fmt: skip
    for number, publisher in enumerate(publishers):
        command += ["--worker", f"w{number}={publisher.endpoint},{publisher.replay_endpoint}"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_for(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(10)
        for publisher in publishers:
            publisher.close()


def test_routes_api_survives_schemathesis(route_url: str, tmp_path: Path) -> None:
    out = _schemathesis("route.toml", route_url, tmp_path)
    assert "No issues found" in out and "Stateful" in out


@pytest.fixture
def playground_url() -> Iterator[str]:
    """A live ``kachedb-radix explain --serve``."""
    command = [sys.executable, "-m", "kachedb_radix.spec", "explain", "--serve", "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("playground: http://127.0.0.1:"), line
        url = line.split()[1].rstrip("/")
        _wait_for(url, process)
        yield url
    finally:
        process.send_signal(2)
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def test_the_playground_survives_schemathesis(playground_url: str, tmp_path: Path) -> None:
    fresh = {"KACHEDB_RADIX_PLAYGROUND_FRESH": "40"}
    out = _schemathesis("playground.toml", playground_url, tmp_path, fresh)
    assert "No issues found" in out or "1 warning" in out
    assert "failure" not in out.split("SUMMARY")[-1]
