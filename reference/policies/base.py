"""The interface every eviction policy implements, and what the tree promises it.

The tree owns the shape, the pins and the stamps; a policy owns only the per-block
state its key needs (hit counts, insertion times, priorities, segments) and turns
it into keys. The tree tells the policy what happened to which blocks, always in
this order within one call, and after each call re-files in its eviction queue
every leaf whose tail key may have changed:

1. ``advance(now)`` -- the clock reached ``now`` (R-LRU-3), before anything else
   the call does at that time; keys that depend on time change here (R-POL-5);
2. ``cached(blocks, ...)`` -- an insert cached new blocks;
   ``found(blocks, ...)`` -- a match, or an insert, found these blocks cached
   (a *hit*, R-POL-3); ``released(blocks, ...)`` -- a lease over them ended;
3. ``freed(block)`` -- eviction removed the block from the tree.

The stamps of the blocks a call uses are already the new time when step 2 runs.
The hooks return the blocks, other than the call's own path, whose keys they
changed, so the tree can re-file them if they are leaf tails (an SLRU demotion, a
priority that fell back). Eviction never orders by the key of a block that is not
cached.

A policy never raises on these hooks: everything a call could get wrong was checked
before the call changed anything (R-ERR-2).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import ClassVar

from ..errors import InvalidArgumentError
from .retention import Retention

#: An eviction key: ints compared as a tuple, the block id last (R-POL-1).
Key = tuple[int, ...]

#: No blocks changed key.
UNCHANGED: tuple[int, ...] = ()


class EvictionPolicy(ABC):
    """One eviction policy's per-block state and keys. See the module docstring.

    Args:
        num_blocks: the pool size.
        stamps: the tree's per-block stamps, read (never written) by the policy.
        options: the policy's options, names already checked against
            :attr:`option_names`.

    Raises:
        InvalidArgumentError: an option's value is wrong.
    """

    #: The policy's name in ``RadixTree(policy=...)`` and in profiles.
    name: ClassVar[str]
    #: The options ``policy_options`` may give it.
    option_names: ClassVar[tuple[str, ...]] = ()
    #: Names of the per-block fields :meth:`block_fields` adds to each dumped edge.
    dump_fields: ClassVar[tuple[str, ...]] = ()
    #: The key's items before the block id, each a dump field or ``"stamp"``.
    key_names: ClassVar[tuple[str, ...]] = ("stamp",)

    @classmethod
    def key_from(cls, block: int, values: Mapping[str, int]) -> Key:
        """The key of ``block`` from what a dump shows of it (its ``stamp`` and the
        policy's fields): the same tuple :meth:`key` gives (``check_invariants`` checks
        it), so anything holding a dump -- ``explain``, a peer's adapter -- orders
        candidates as the tree does. O(1).

        Raises:
            KeyError: ``values`` lacks one of :attr:`key_names`.
        """
        return (*(values[name] for name in cls.key_names), block)

    def __init__(self, num_blocks: int, stamps: list[int], options: dict[str, object]) -> None:
        self._stamps = stamps

    @classmethod
    def check_options(cls, options: dict[str, object]) -> dict[str, object]:
        """``options`` checked, with every default filled in: what :meth:`options`
        will report. O(size of the options).

        Raises:
            InvalidArgumentError: a value is wrong.
        """
        return {}

    @abstractmethod
    def key(self, block: int) -> Key:
        """The eviction key of cached block ``block``; the smallest goes first. O(1)."""

    def options(self) -> dict[str, object]:
        """Every option with the value in force, defaults included (JSON data). O(1)."""
        return {}

    def advance(self, now: int) -> Sequence[int]:
        """The clock reached ``now``: the blocks whose key changed with time. O(1) here."""
        return UNCHANGED

    def cached(
        self, blocks: Sequence[int], now: int, namespace: str | None, retention: Retention
    ) -> Sequence[int]:
        """An insert at ``now`` cached ``blocks`` (new, in path order). O(len(blocks)) here."""
        return UNCHANGED

    def found(
        self, blocks: Sequence[int], now: int, namespace: str | None, retention: Retention | None
    ) -> Sequence[int]:
        """A match (``retention`` None) or an insert found ``blocks`` cached. O(1) here."""
        return UNCHANGED

    def released(self, blocks: Sequence[int], now: int) -> Sequence[int]:
        """A lease over ``blocks`` was released at ``now``. O(1) here."""
        return UNCHANGED

    def freed(self, block: int) -> None:  # noqa: B027 -- most policies keep nothing to drop
        """Eviction removed ``block`` from the tree. O(1) here."""

    def block_fields(self, blocks: list[int]) -> dict[str, list[int]]:
        """The policy's per-block dump fields for an edge's ``blocks``. O(len(blocks))."""
        return {}

    def check(self, cached: Iterable[int], clock: int) -> str | None:
        """The first broken invariant of the policy's state over the ``cached`` blocks
        at clock time ``clock``, or None. O(num_blocks) at most."""
        return None

    def check_keys(self, cached: Iterable[int]) -> str | None:
        """Whether every cached block's key is :meth:`key_from` its dumped values. O(n)."""
        for block in cached:
            values = {"stamp": self._stamps[block]}
            for name, items in self.block_fields([block]).items():
                values[name] = items[0]
            if self.key(block) != self.key_from(block, values):
                return f"block {block}'s key {self.key(block)} is not the dump's"
        return None

    def copy(self, stamps: list[int]) -> EvictionPolicy:
        """An independent copy reading the copied tree's ``stamps``. O(num_blocks)."""
        twin = type(self).__new__(type(self))
        twin.__dict__.update(self._copied_state())
        twin._stamps = stamps
        return twin

    def _copied_state(self) -> dict[str, object]:
        """Instance attributes with every mutable one copied (subclasses extend)."""
        return dict(self.__dict__)


def check_int_option(
    options: Mapping[str, object], name: str, default: int, low: int, high: int
) -> int:
    """Option ``name`` as an int in ``low .. high`` (``default`` when absent). O(1).

    Raises:
        InvalidArgumentError: the value is not such an int.
    """
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgumentError(
            f"policy option {name!r} must be an int in {low} .. {high}, got {value!r}"
        )
    return value
