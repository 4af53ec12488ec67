"""The ``kachedb-radix demo`` main job, for every implementation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from kachedb_radix.spec.cli.main import main
from kachedb_radix.spec.conform.targets import default_implementation, tree_class

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI.
pytestmark = pytest.mark.quick


def test_demo_prints_every_step_and_the_tree(
    impl_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo replays the scenario, evicts around a pinned request and draws the tree."""
    assert main(["demo", "--impl", impl_name]) == 0
    out = capsys.readouterr().out
    assert f"{impl_name} tree, pool of 14 blocks" in out
    rows = {line.split("  ")[0]: line.split() for line in out.splitlines() if line[:1].isalpha()}
    carol = rows["carol turn 1 (long prompt, pool short)"]
    assert carol[-2:] == ["6,7,9,12,13", "7,6,9"]  # allocated, evicted (R-INS-5)
    assert "6 blocks pinned, 8 evictable, 0 free" in out
    assert "├── 4 blocks [300 301 302 303 …]  #4-5,10-11  pin 1  t=15..14" in out


def test_pure_switch_selects_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """KACHEDB_RADIX_PURE=1 is the only way to make the CLI use the reference by default."""
    monkeypatch.setenv("KACHEDB_RADIX_PURE", "1")
    assert default_implementation() == "reference"
    monkeypatch.setenv("KACHEDB_RADIX_PURE", "0")
    assert default_implementation() == "accel"
    with pytest.raises(ValueError, match="unknown implementation"):
        tree_class("numpy")


@pytest.mark.parametrize(
    "command",
    [["kachedb-radix"], [sys.executable, "-m", "kachedb_radix.spec"]],
    ids=["console-script", "python-m-kachedb_radix.spec"],
)
def test_command_line_runs(command: list[str]) -> None:
    """The installed console command and ``python -m kachedb_radix.spec`` are the same command
    line."""
    if command[0] == "kachedb-radix":
        script = shutil.which("kachedb-radix", path=os.path.dirname(sys.executable))
        assert script is not None, "the install did not put kachedb-radix beside python"
        command = [script]
    done = subprocess.run(
        [*command, "demo", "--impl", "reference"], capture_output=True, text=True, check=True
    )
    assert "namespace (default)" in done.stdout


def test_a_reader_that_stops_early_gets_no_traceback() -> None:
    """``kachedb-radix explain --text | head -n 1``: the command ends quietly with status 141
    (128 + SIGPIPE, as a shell reports it) when its reader closes the pipe, no traceback."""
    command = [sys.executable, "-m", "kachedb_radix.spec", "explain", "--scenario", "scale"]
    with subprocess.Popen(
        [*command, "--text"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()  # the reader goes away with most of the report unread
        err = process.stderr.read().decode()
        status = process.wait()
    assert first.startswith(b"kachedb-radix explain")
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert status == 141
