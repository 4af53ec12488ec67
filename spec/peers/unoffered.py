"""The ``snapshots`` level's operations for a peer that has no reader snapshots, and the
optional operations its adapter does not carry out.

SGLang's caches (both adapters) publish no versions: they declare no ``snapshots``
level, so the kit never sends these operations; a caller that does anyway gets
``unsupported`` from each, never an attribute error. Their adapters offer exactly the
operations their levels require (:attr:`WithoutSnapshots.operations`): none of the
optional ones, so the rules only ``reset_prefix_cache`` exercises read "not exercised
(unsupported)".
"""

from __future__ import annotations

from typing import Any

from ..conform.candidate import CandidateError
from ..conform.operations import required_of


class WithoutSnapshots:
    """Each operation of the ``snapshots`` level, refused as ``unsupported``; the optional
    operations likewise, and not offered."""

    @property
    def operations(self) -> frozenset[str]:
        """What the kit may send: the operations its levels require (no optional one)."""
        levels: frozenset[str] = getattr(self, "levels")  # noqa: B009 -- the peer's own
        return required_of(levels)

    def reset_prefix_cache(self) -> Any:
        """Not offered: the adapter does not clear the engine's whole cache."""
        raise CandidateError("unsupported", "this adapter does not clear the whole cache")

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
