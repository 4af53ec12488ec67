"""Leases: how a running request pins the blocks it uses.

``match(..., pin=True)`` and ``insert(..., pin=True)`` return a lease over exactly
the blocks they returned (R-PIN-1, R-PIN-2). While a lease lives, those blocks --
and, since they form a root path, all their ancestors -- are never evicted
(R-PIN-3). Releasing the lease drops the pins and refreshes the blocks' recency, as
the request has just finished using them (R-LRU-1). Releasing twice raises
:class:`LeaseReleasedError` (R-PIN-4); releasing on another tree raises
:class:`ForeignLeaseError` (R-PIN-5).

A lease remembers the token prefix it pinned, not node references: later inserts
may split the nodes under it, but the pinned path itself can neither change nor
disappear, so walking it again on release always finds the same blocks.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .tree import RadixTree


class Lease:
    """A pin on one cached root path; release it exactly once.

    Usable as a context manager: leaving the ``with`` block releases it.
    """

    __slots__ = ("_released", "_tree", "blocks", "id", "namespace", "tokens")

    def __init__(
        self,
        tree: RadixTree,
        lease_id: int,
        namespace: str | None,
        tokens: tuple[int, ...],
        blocks: tuple[int, ...],
    ) -> None:
        self._tree = tree
        self.id = lease_id
        self.namespace = namespace
        self.tokens = tokens
        self.blocks = blocks
        self._released = False

    @property
    def length(self) -> int:
        """Pinned length in tokens. O(1)."""
        return len(self.tokens)

    @property
    def released(self) -> bool:
        """Whether the lease has been released. O(1)."""
        return self._released

    def release(self) -> None:
        """Release the pins; same as ``tree.release(lease)``. O(length).

        Raises:
            LeaseReleasedError: already released.
        """
        self._tree.release(self)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not self._released:
            self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else "live"
        return f"<Lease {self.id} {state}: {len(self.blocks)} blocks, namespace={self.namespace!r}>"
