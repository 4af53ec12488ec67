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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

from ..conform.candidate import (
    Candidate,
    CandidateFailure,
    EvictAnswer,
    InsertAnswer,
    MatchAnswer,
    NamespacesAnswer,
    ReaderAnswer,
    ReclaimAnswer,
    SnapshotAnswer,
    SnapshotMatchAnswer,
    StatsAnswer,
)

T = TypeVar("T")


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


class TimedCandidate:
    """``candidate`` with every call limited to ``seconds`` (see the module docstring)."""

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

    def _call(self, what: str, call: Callable[..., T], *args: Any) -> T:
        with limit(self.seconds, f"{self.name}: {what}"):
            return call(*args)

    def reset(self, num_blocks: int, block_size: int) -> None:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        self._call("reset", self.candidate.reset, num_blocks, block_size)

    def match(self, tokens: object, namespace: object, pin: bool) -> MatchAnswer:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self._call("match", self.candidate.match, tokens, namespace, pin)

    def insert(self, tokens: object, namespace: object, pin: bool) -> InsertAnswer:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self._call("insert", self.candidate.insert, tokens, namespace, pin)

    def release(self, lease: int) -> None:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        self._call("release", self.candidate.release, lease)

    def evict(self, count: object) -> EvictAnswer:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self._call("evict", self.candidate.evict, count)

    def stats(self) -> StatsAnswer:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self._call("stats", self.candidate.stats)

    def namespaces(self) -> NamespacesAnswer:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self._call("namespaces", self.candidate.namespaces)

    def dump(self) -> dict[str, Any]:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self._call("dump", self.candidate.dump)

    def snapshot(self) -> SnapshotAnswer:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self._call("snapshot", self.candidate.snapshot)

    def reader(self) -> ReaderAnswer:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self._call("reader", self.candidate.reader)

    def leave(self, snapshot: int) -> None:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        self._call("leave", self.candidate.leave, snapshot)

    def drop(self, snapshot: int) -> None:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        self._call("drop", self.candidate.drop, snapshot)

    def snapshot_match(
        self, snapshot: int, tokens: object, namespace: object
    ) -> SnapshotMatchAnswer:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self._call(
            "snapshot_match", self.candidate.snapshot_match, snapshot, tokens, namespace
        )

    def snapshot_dump(self, snapshot: int) -> dict[str, Any]:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self._call("snapshot_dump", self.candidate.snapshot_dump, snapshot)

    def reclaim(self) -> ReclaimAnswer:
        """See :class:`kachedb_radix.spec.conform.candidate.Candidate`."""
        return self._call("reclaim", self.candidate.reclaim)

    def close(self) -> None:
        """Close the wrapped candidate (not limited)."""
        self.candidate.close()
