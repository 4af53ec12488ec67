"""A per-call time limit for in-process candidates.

A program behind the stdio protocol is killed when it does not answer in time
(:mod:`kachedb_radix.spec.protocol.client`). An in-process candidate that loops forever would hang
the kit instead; :class:`TimedCandidate` gives each of its calls ``seconds`` and turns an overrun
into a :class:`~kachedb_radix.spec.conform.candidate.CandidateFailure` naming the call, so the kit
reports it like a program that stopped answering.

The limit is a ``SIGALRM`` timer (:func:`signal.setitimer`): it interrupts Python
code at once, and native code (a C extension) as soon as it returns to the
interpreter. It works in the main thread of a POSIX process; elsewhere calls run
without a limit (:func:`available` says which). A native call that never returns
can only be stopped from outside: run such a candidate behind ``--cmd``.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from ..conform.candidate import Candidate, CandidateFailure
from ..conform.operations import Forwarding, offered


class _Overrun(BaseException):
    """Raised inside a call that ran past its limit (a BaseException, so candidate code
    catching ``Exception`` cannot swallow it)."""


def available() -> bool:
    """Whether calls can be limited here: a POSIX main thread. O(1)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextmanager
def limit(seconds: float, what: str) -> Iterator[None]:
    """Run the body with a time limit of ``seconds`` (no limit when not available).

    Raises:
        CandidateFailure: the body ran past the limit.
    """
    if not available() or seconds <= 0:
        yield
        return

    def overrun(signum: int, frame: FrameType | None) -> None:
        raise _Overrun()

    previous = signal.signal(signal.SIGALRM, overrun)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _Overrun:
        raise CandidateFailure(f"{what}: no answer within {seconds:g} s (interrupted)") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class TimedCandidate(Forwarding):
    """``candidate`` with every call limited to ``seconds`` (see the module docstring).

    Every operation of the table goes through :meth:`forward`, so none can be left out.
    """

    def __init__(self, candidate: Candidate, seconds: float) -> None:
        self.candidate = candidate
        self.seconds = seconds

    @property
    def name(self) -> str:
        """The wrapped candidate's name."""
        return self.candidate.name

    @property
    def levels(self) -> frozenset[str]:
        """The wrapped candidate's levels."""
        return self.candidate.levels

    @property
    def block_sizes(self) -> tuple[int, ...] | None:
        """The wrapped candidate's block sizes."""
        return self.candidate.block_sizes

    @property
    def operations(self) -> frozenset[str]:
        """The wrapped candidate's operations."""
        return offered(self.candidate)

    def forward(self, op: str, *args: Any) -> Any:
        """The wrapped candidate's ``op``, within the time limit."""
        with limit(self.seconds, f"{self.name}: {op}"):
            return getattr(self.candidate, op)(*args)

    def close(self) -> None:
        """Close the wrapped candidate (not limited)."""
        self.candidate.close()
