"""Numbering: the tree's sequences of fresh ids (node ids, lease ids, epochs).

A :class:`Numbering` hands out 1, 2, 3, ... through ``next()``, like
``itertools.count(1)``, but its state is one plain int, so a tree holding it can be
copied (:meth:`kachedb_radix.reference.RadixTree.clone`). ``itertools.count`` cannot be: its copy
and pickle support was deprecated in Python 3.12 and removed in 3.14.

Epoch numbers are observable (``stats().oldest_reader``), so a copy must continue a
numbering exactly where the original stands, not merely hand out unused numbers.
"""

from __future__ import annotations


class Numbering:
    """The numbers ``start, start + 1, ...``, one per ``next()``.

    Args:
        start: the first number handed out.

    Cost: O(1) per number, O(1) to copy.
    """

    __slots__ = ("_last",)

    def __init__(self, start: int = 1) -> None:
        self._last = start - 1

    def __iter__(self) -> Numbering:
        return self

    def __next__(self) -> int:
        """The next number. O(1)."""
        self._last += 1
        return self._last

    def copy(self) -> Numbering:
        """An independent numbering that goes on from the same place. O(1)."""
        twin = Numbering()
        twin._last = self._last
        return twin

    def __repr__(self) -> str:
        return f"Numbering(next={self._last + 1})"
