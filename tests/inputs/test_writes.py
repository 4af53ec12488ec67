"""Outputs the system refuses only at the write itself: one line naming the path, status 2.

The argument types refuse what can be told before a command runs; these are the paths
they cannot judge (a file system that refuses new entries, a file standing where a
folder is to be made later, a write as root where ``os.access`` says yes to anything).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kachedb_radix.spec.cli.main import main
from kachedb_radix.spec.inputs import InputError, make_directory, write_text

#: A directory in which no entry can be made whoever asks (Linux's /proc).
REFUSING = Path("/proc")
needs_proc = pytest.mark.skipif(not (REFUSING / "self").is_dir(), reason="no Linux /proc here")


def test_writes_write_and_return_the_path(tmp_path: Path) -> None:
    folder = make_directory(tmp_path / "a" / "b")
    assert folder.is_dir()
    assert make_directory(folder) == folder  # an existing folder is fine
    assert write_text(folder / "t.txt", "é\n").read_text(encoding="utf-8") == "é\n"


def test_a_refused_write_is_one_line_naming_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match=r"^--report .*file/below: cannot be written \(") as made:
        make_directory(blocker / "below", "--report")
    assert "\n" not in str(made.value)
    with pytest.raises(InputError, match=r"trace .*: cannot be written"):
        write_text(blocker / "t.jsonl", "{}\n", "trace")
    with pytest.raises(InputError, match=r"output .*: cannot be written"):
        write_text(tmp_path, "", "output")  # a directory, not a file
    assert blocker.read_text() == "x"  # nothing else was touched


@needs_proc
@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["conform", "reference", "--budget", "50", "--report", "/proc/kachedb-nope"], "--report"),
        (["conform", "reference", "--budget", "50", "--save-traces", "/proc/kachedb-nope"],
         "--save-traces"),
        (["conform", "--index", "reference", "--examples", "2", "--report",
          "/proc/kachedb-nope"], "--report"),
    ],
)  # fmt: skip
def test_a_command_whose_output_is_refused_exits_2_in_one_line(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines() == [
        f"kachedb-radix conform: {named} /proc/kachedb-nope: cannot be written "
        "(No such file or directory)"
    ]
