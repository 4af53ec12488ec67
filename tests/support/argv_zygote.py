"""The argv fuzzer's runner: one process that imports the command line once, then runs
each command line it is sent in a fresh child, under resource limits.

``python -m tests.support.argv_zygote`` reads one JSON request per line on stdin,
``{"argv": [...], "cwd": DIR, "seconds": S, "memory": BYTES}``, and answers one JSON line
per request: ``{"status": N | null, "signal": N | null, "timed_out": bool,
"seconds": S, "max_rss": KIB}``. The child:

* runs ``kachedb_radix.spec.cli.main.main(argv)`` in ``cwd`` with stdin from
  ``/dev/null`` and stdout, stderr written to ``cwd/stdout.txt`` and ``cwd/stderr.txt``;
* has its address space capped (``RLIMIT_AS``: ``memory`` bytes more than the zygote's),
  so runaway allocation ends in a ``MemoryError`` (a traceback the test sees), not a
  swapping machine;
* is a session of its own, and gets ``seconds`` of wall time: past that its group gets
  SIGKILL and the answer says ``timed_out``;
* exits with ``main``'s status (a ``SystemExit``'s code: argparse's 2; ``--help``'s 0),
  or 70 after printing the traceback of anything that escaped ``main``.

The zygote is a child subreaper (``PR_SET_CHILD_SUBREAPER``): the programs a command
starts (``conform --cmd``, in sessions of their own) are reparented to it if the
command dies, and after each request every process left is killed and reaped, so no
run leaks a process into the next, or past the test.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import json
import os
import resource
import signal
import sys
import time
import traceback
from typing import Any

#: The exit status of a child whose command escaped ``main`` with an exception.
ESCAPED = 70
#: ``prctl`` option numbers (linux/prctl.h).
_PR_SET_CHILD_SUBREAPER = 36


def _address_space() -> int:
    """This process's current virtual size, in bytes. O(1)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0  # pragma: no cover - every Linux has the line


def _child(argv: list[str], cwd: str, memory: int) -> None:
    """In the forked child: the command, its status as the exit status. Never returns."""
    status = ESCAPED
    try:
        os.setsid()
        os.chdir(cwd)
        stdin = os.open(os.devnull, os.O_RDONLY)
        stdout = os.open("stdout.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        stderr = os.open("stderr.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
        limit = _address_space() + memory
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        from kachedb_radix.spec.cli.main import main

        try:
            status = main(argv)
        except SystemExit as stop:
            code = stop.code
            status = code if isinstance(code, int) else 0 if code is None else 1
            if isinstance(code, str):
                print(code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = ESCAPED
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):  # a full output: the status stands
                stream.flush()
        os._exit(status)


def _reap_strays() -> None:
    """Kill and reap every process left over (reparented here, the subreaper). O(procs)."""
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:  # its parent is the zygote
            with contextlib.suppress(OSError):
                os.kill(int(entry), signal.SIGKILL)
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.01)


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Run one request in a child; how it ended. O(the command)."""
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(request["argv"], request["cwd"], request["memory"])
    deadline = started + request["seconds"]
    timed_out = False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.005)
    _reap_strays()
    return {
        "status": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "timed_out": timed_out,
        "seconds": round(time.monotonic() - started, 3),
        "max_rss": usage.ru_maxrss,
    }


def serve() -> None:
    """Answer requests on stdin until it ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    import kachedb_radix.spec.cli.main  # noqa: F401  (imported once, shared by every child)

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip():
            print(json.dumps(run(json.loads(line))), flush=True)


if __name__ == "__main__":
    serve()
