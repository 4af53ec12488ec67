"""Hostile stdio candidates: real misbehaving programs, written here, driven by the
kit's client (spec/protocol/client.py) and by ``conform --cmd`` / ``replay --cmd``.

Each must end in a clear diagnostic within seconds, with the kit's memory bounded,
and leave no process behind: not the program (even one that ignores SIGTERM), not
the children it forked (checked after every test, from the pids they write).
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from kachedb_radix.spec.cli import conform
from kachedb_radix.spec.conform.candidate import CandidateFailure
from kachedb_radix.spec.protocol.client import StdioCandidate
from kachedb_radix.spec.vectors import path_of

HELLO = """
import json, os, signal, sys, time
open(sys.argv[1] + ".leader", "w").write(str(os.getpid()))
def say(message):
    sys.stdout.write(json.dumps(message) + "\\n"); sys.stdout.flush()
line = sys.stdin.readline()
say({"id": json.loads(line)["id"], "ok": {"protocol": 2, "name": "hostile",
     "levels": ["core"], "block_sizes": None}})
"""


IGNORE_TERM = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"

FORK = """
child = os.fork()
if child == 0:  # a child that ignores SIGTERM and would run for ever
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(1)
open(sys.argv[1], "w").write(str(child))
"""


def _program(
    tmp_path: Path, after_hello: str, *, ignore_term: bool = False, fork: bool = False
) -> list[str]:
    """A program that answers hello and then runs ``after_hello``; it may ignore
    SIGTERM, and may first fork a child whose pid it writes to ``child.pid``."""
    script = tmp_path / "hostile.py"
    script.write_text(
        (IGNORE_TERM if ignore_term else "")
        + textwrap.dedent(HELLO)
        + (FORK if fork else "")
        + textwrap.dedent(after_hello)
    )
    return [sys.executable, str(script), str(tmp_path / "child.pid")]


def _gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs (a zombie waiting for a reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


@pytest.fixture(autouse=True)
def _nothing_left_behind(tmp_path: Path) -> Iterator[None]:
    """After each test: the hostile program and any child it forked have ended
    (a zombie waiting for its reaper counts as ended)."""
    yield
    for name in ("child.pid.leader", "child.pid"):
        pidfile = tmp_path / name
        if pidfile.exists():
            assert _wait_gone(int(pidfile.read_text())), f"{name} is still running"


def _failure(argv: list[str], **options: float) -> tuple[str, StdioCandidate | None]:
    """Start ``argv``, send a reset, and return the failure's message."""
    candidate: StdioCandidate | None = None
    try:
        candidate = StdioCandidate(argv, **options)  # type: ignore[arg-type]
        candidate.reset(4, 1)
    except CandidateFailure as exc:
        return str(exc), candidate
    raise AssertionError("the hostile program was not reported")


def test_a_flood_without_newlines_is_cut_off_with_bounded_memory(tmp_path: Path) -> None:
    """200 MB of output on one line: refused at the line limit, memory stays small."""
    argv = _program(
        tmp_path,
        """
        sys.stdin.readline()
        chunk = b"x" * (1 << 20)
        for _ in range(200):
            sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
        time.sleep(60)
        """,
    )
    tracemalloc.start()
    started = time.monotonic()
    try:
        message, candidate = _failure(argv, max_line=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "answer longer than 1048576 bytes" in message and "request 1 (reset)" in message
    assert peak < 16 << 20, f"the kit held {peak} bytes"
    assert time.monotonic() - started < 20
    assert candidate is not None
    candidate.close()


def test_a_flood_of_lines_and_stderr_is_bounded(tmp_path: Path) -> None:
    """Endless short lines after the answer and an endless stderr: the first extra
    line is a wrong answer to the next request; the stderr tail is short."""
    argv = _program(
        tmp_path,
        """
        line = sys.stdin.readline()
        say({"id": json.loads(line)["id"], "ok": None})
        sys.stderr.write("L" * 300_000 + "\\n")  # one line far past the stderr cut
        while True:
            sys.stderr.write("e" * 5000 + "\\n")
            say({"id": 999, "ok": None})
        """,
    )
    candidate = StdioCandidate(argv)
    candidate.reset(4, 1)
    with pytest.raises(CandidateFailure, match="answer carries id") as raised:
        candidate.dump()
    text = str(raised.value)
    assert "stderr (last lines)" in text
    assert len(text) < 20 * 600  # at most 20 lines of at most 500 characters
    candidate.close()


def test_binary_garbage_is_a_clear_diagnostic(tmp_path: Path) -> None:
    argv = _program(
        tmp_path,
        """
        sys.stdin.readline()
        sys.stdout.buffer.write(bytes(range(256)) * 4 + b"\\n")
        sys.stdout.flush()
        time.sleep(60)
        """,
    )
    message, candidate = _failure(argv)
    assert "request 1 (reset): malformed answer" in message and "it began" in message
    assert candidate is not None
    candidate.close()  # a failed candidate still owns its pipes until closed


def test_a_program_that_closes_its_output_and_ignores_sigterm(tmp_path: Path) -> None:
    """Closed stdout, SIGTERM ignored, still running: reported, then SIGKILLed."""
    argv = _program(
        tmp_path,
        """
        os.close(1)
        print(os.getpid(), file=sys.stderr, flush=True)
        while True:
            time.sleep(1)
        """,
        ignore_term=True,
    )
    started = time.monotonic()
    message, candidate = _failure(argv)
    assert "closed its output" in message and "still running" in message
    assert candidate is not None
    assert _wait_gone(candidate._process.pid)
    assert time.monotonic() - started < 15
    candidate.close()  # idempotent


def test_closing_escalates_to_sigkill_and_takes_forked_children(tmp_path: Path) -> None:
    """A program that ignores both end of input and SIGTERM, with a forked child that
    outlives it: close() ends both (process group, SIGTERM then SIGKILL)."""
    pidfile = tmp_path / "child.pid"
    argv = _program(
        tmp_path,
        """
        for line in sys.stdin:
            say({"id": json.loads(line)["id"], "ok": None})
        while True:  # end of input: keep running anyway
            time.sleep(1)
        """,
        ignore_term=True,
        fork=True,
    )
    candidate = StdioCandidate(argv, close_grace=0.2)
    candidate.reset(4, 1)
    child = int(pidfile.read_text())
    leader = candidate._process.pid
    assert not _gone(child) and not _gone(leader)
    started = time.monotonic()
    candidate.close()
    assert time.monotonic() - started < 10
    assert _wait_gone(leader) and _wait_gone(child)


def test_a_child_left_behind_by_a_program_that_exits_is_ended(tmp_path: Path) -> None:
    """The program dies at once but its forked child holds the pipes: the failure is
    reported (no hang on the child's open stdout) and the child is ended."""
    pidfile = tmp_path / "child.pid"
    argv = _program(
        tmp_path,
        """
        sys.stdin.readline()
        os._exit(4)
        """,
        fork=True,
    )
    message, candidate = _failure(argv, timeout=2.0)
    assert "request 1 (reset)" in message
    assert _wait_gone(int(pidfile.read_text()))
    assert candidate is not None
    candidate.close()


def test_a_descendant_in_its_own_session_does_not_hang_close(tmp_path: Path) -> None:
    """A grandchild that starts a session of its own has left the process group on
    purpose and keeps the pipes open: close() still returns promptly (it does not
    close streams a reader is blocked on), and the grandchild is out of reach."""
    argv = _program(
        tmp_path,
        """
        import subprocess
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                                 start_new_session=True)
        open(sys.argv[1], "w").write(str(child.pid))
        for line in sys.stdin:
            say({"id": json.loads(line)["id"], "ok": None})
        """,
    )
    candidate = StdioCandidate(argv, close_grace=1.0)
    candidate.reset(4, 1)
    escaped = int((tmp_path / "child.pid").read_text())
    started = time.monotonic()
    try:
        candidate.close()
        assert time.monotonic() - started < 10
        assert not _gone(escaped)  # out of reach: documented in spec/protocol/client.py
    finally:
        os.kill(escaped, signal.SIGKILL)
    assert _wait_gone(escaped)


@pytest.mark.parametrize("command", ["conform", "replay"])
def test_the_cli_survives_a_hostile_command(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``conform --cmd`` and ``replay --cmd``: exit status 1, a diagnostic, no orphan."""
    pidfile = tmp_path / "child.pid"
    argv = _program(
        tmp_path,
        """
        sys.stdin.readline()
        sys.stdout.buffer.write(os.urandom(3000) + b"\\n")
        sys.stdout.flush()
        while True:
            time.sleep(1)
        """,
        ignore_term=True,
        fork=True,
    )
    line = " ".join(argv)
    if command == "conform":
        status = conform.main(["conform", "--cmd", line, "--examples", "3"])
    else:
        status = conform.main(["replay", str(path_of("core")), "--cmd", line])
    out = capsys.readouterr()
    assert status == 1
    assert "malformed answer" in out.out + out.err
    assert _wait_gone(int(pidfile.read_text()))
