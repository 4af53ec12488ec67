"""What both crash campaigns share: the zygote that forks the workers they kill, and the
kill itself.

A *zygote* imports what its workers need once, then, for each ``run ARGS...`` line on its
standard input, forks a worker (a real process with its own pid, which the test kills
with SIGKILL), waits for it and reports how it ended: ``exit signal N`` or ``exit code
N``. A worker reports on standard output one line per event, each with a single
``os.write`` (atomic on a pipe); after it finishes or fails it sleeps, so that its pid
stays its own until the test kills it (a pid the zygote had reaped could be reused by
another process, which the test must never signal). ``quit`` or the end of input ends
the zygote. Used by :mod:`tests.tiers.crash_writer` (the disk store's campaign) and
:mod:`tests.tiers.kv_crash_worker` (the KV cache's).
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from collections.abc import Callable


def say(line: str) -> None:
    """One line to the test, in one write (atomic on a pipe)."""
    os.write(1, line.encode() + b"\n")


def describe(status: int) -> str:
    """How a reaped worker ended: ``signal N`` or ``code N``."""
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"code {os.WEXITSTATUS(status)}"


def serve(work: Callable[[list[str]], None]) -> None:
    """Fork a worker running ``work(args)`` for each ``run ARGS...`` line, until ``quit``."""
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        pid = os.fork()
        if pid == 0:  # the worker
            try:
                work(words[1:])
            except BaseException:
                traceback.print_exc()
                say("failed")
            finally:
                time.sleep(60)  # until the test kills it
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        say(f"exit {describe(status)}")


def kill_after(pid: int, delay: float) -> bool:
    """SIGKILL ``pid`` after ``delay`` seconds -- asleep, not spinning: on a machine with
    two busy cores a spinning parent would starve the worker it waits for."""
    if delay:
        time.sleep(delay)
    os.kill(pid, signal.SIGKILL)
    return True
