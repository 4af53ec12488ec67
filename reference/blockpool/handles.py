"""Handles for asynchronous transfers.

A handle is returned by ``offload`` / ``restore``.  Invariant: once ``done()`` has returned
True it stays True, and ``wait()`` returns the same result every time it is called.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class TransferHandle(Protocol[T_co]):
    """Something the caller can poll or block on."""

    def done(self) -> bool:
        """True once the transfer has completed.  Never blocks."""
        ...

    def wait(self) -> T_co:
        """Block until the transfer has completed, then return its result."""
        ...


class CompletedTransfer(Generic[T]):
    """A transfer that finished before its handle was returned (synchronous backends)."""

    def __init__(self, result: T) -> None:
        self._result = result

    def done(self) -> bool:
        return True

    def wait(self) -> T:
        return self._result
