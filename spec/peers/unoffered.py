"""The ``snapshots`` level's operations for a peer that has no reader snapshots.

SGLang's caches (both adapters) publish no versions: they declare no ``snapshots``
level, so the kit never sends these operations; a caller that does anyway gets
``unsupported`` from each, never an attribute error.
"""

from __future__ import annotations

from typing import Any

from ..conform.candidate import CandidateError


class WithoutSnapshots:
    """Each operation of the ``snapshots`` level, refused as ``unsupported``."""

    def snapshot(self) -> Any:
        """Not offered: the cache has no reader snapshots."""
        raise CandidateError("unsupported", "this cache has no reader snapshots")

    def reader(self) -> Any:
        """Not offered (see :meth:`snapshot`)."""
        return self.snapshot()

    def reclaim(self) -> Any:
        """Not offered (see :meth:`snapshot`)."""
        return self.snapshot()

    def leave(self, snapshot: int) -> None:
        """Not offered (see :meth:`snapshot`)."""
        self.snapshot()

    def snapshot_match(self, snapshot: int, tokens: object, namespace: object) -> Any:
        """Not offered (see :meth:`snapshot`)."""
        return self.snapshot()

    def snapshot_dump(self, snapshot: int) -> Any:
        """Not offered (see :meth:`snapshot`)."""
        return self.snapshot()

    def drop(self, snapshot: int) -> None:
        """Not offered (see :meth:`snapshot`)."""
        self.snapshot()
