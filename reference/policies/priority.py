"""``priority``: the lowest retention priority goes first, then the least recently
used (R-POL-5) -- the seed's tiers and TensorRT-LLM's retention priorities.

Each cached block has a *priority* (an int ``0 .. 100``: higher is kept longer), the
clock time *until* which it holds (0: for as long as the block is cached) and the
*fallback* it returns to then: the default priority of the block's namespace
(option ``namespaces``, else option ``default``). The key is
``(priority, stamp, block)``.

What an insert at time ``now`` asks -- ``q = priority`` or the namespace's default,
held until ``u = now + retain_for`` (0 without ``retain_for``) -- it applies to
every block of its path, as "keep these blocks at least at ``q``":

* a new block takes ``(q, u)``;
* a block found cached takes ``(q, u)`` if ``q`` is above its priority; at an equal
  priority that expires, it holds until the later of the two (0 counts as the
  latest); a lower ``q`` leaves it alone. So a one-off call that shares an agent
  loop's prefix never lowers it.

A match or a release changes no priority. When the clock reaches a block's
``until`` the block returns to ``(fallback, 0)`` -- before anything else the call
at that time does (``advance``). Across a split both halves keep their blocks'
priorities (per block, R-SPLIT-2); a block evicted and cached again takes what its
new insert asks.

Expiries wait in a heap of ``(until, block)`` with lazy deletion: an entry whose
block no longer holds until that time is skipped when it comes up. Each entry is
pushed by one insert and popped once, so the cost is O(log e) amortised per
priority an insert sets, e the pending expiries; ``evict`` never pays for it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

from ..errors import InvalidArgumentError
from .base import UNCHANGED, EvictionPolicy, Key, check_int_option
from .retention import MAX_PRIORITY, Retention

#: The default priority of a namespace without one (TensorRT-LLM's default, 35).
DEFAULT_PRIORITY = 35


class PriorityPolicy(EvictionPolicy):
    """Lowest priority first, then least recently used.

    Options: ``default`` (int ``0 .. 100``, default 35): the priority of blocks cached
    without one; ``namespaces`` (mapping of namespace name to such an int): a
    namespace's own default -- a tenant's tier.
    """

    name = "priority"
    option_names = ("default", "namespaces")
    dump_fields = ("priority", "until")
    key_names = ("priority", "stamp")

    def __init__(self, num_blocks: int, stamps: list[int], options: dict[str, object]) -> None:
        super().__init__(num_blocks, stamps, options)
        checked = self.check_options(options)
        self._default: int = checked["default"]  # type: ignore[assignment]
        self._namespaces: dict[str, int] = checked["namespaces"]  # type: ignore[assignment]
        self._priority = [0] * num_blocks
        self._until = [0] * num_blocks
        self._fallback = [0] * num_blocks
        self._expiries: list[tuple[int, int]] = []  # (until, block), lazily deleted

    @classmethod
    def check_options(cls, options: dict[str, object]) -> dict[str, object]:
        """``default`` and ``namespaces`` checked (see the class). O(namespaces)."""
        return {
            "default": check_int_option(options, "default", DEFAULT_PRIORITY, 0, MAX_PRIORITY),
            "namespaces": dict(sorted(_namespace_defaults(options.get("namespaces", {})).items())),
        }

    def key(self, block: int) -> Key:
        """``(priority, stamp, block)``. O(1)."""
        return (self._priority[block], self._stamps[block], block)

    def options(self) -> dict[str, object]:
        """``default`` and ``namespaces``. O(namespaces)."""
        return {"default": self._default, "namespaces": dict(sorted(self._namespaces.items()))}

    def default_for(self, namespace: str | None) -> int:
        """The priority blocks of ``namespace`` get and fall back to. O(1)."""
        if namespace is None:
            return self._default
        return self._namespaces.get(namespace, self._default)

    def advance(self, now: int) -> Sequence[int]:
        """Blocks whose ``until`` is ``now`` fall back. O(k log e) for k expiries."""
        expiries, until = self._expiries, self._until
        fell: list[int] = []
        while expiries and expiries[0][0] <= now:
            time, block = heapq.heappop(expiries)
            if until[block] == time:  # else a stale entry: re-set, extended or evicted
                self._priority[block] = self._fallback[block]
                until[block] = 0
                fell.append(block)
        return fell

    def cached(
        self, blocks: Sequence[int], now: int, namespace: str | None, retention: Retention
    ) -> Sequence[int]:
        """New blocks take the insert's ``(q, u)``. O(len(blocks) * log e)."""
        fallback = self.default_for(namespace)
        wanted, until = self._request(now, namespace, retention)
        for block in blocks:
            self._fallback[block] = fallback
            self._set(block, wanted, until)
        return UNCHANGED

    def found(
        self, blocks: Sequence[int], now: int, namespace: str | None, retention: Retention | None
    ) -> Sequence[int]:
        """An insert raises (never lowers) its path's priorities; a match changes none.

        O(len(blocks) * log e)."""
        if retention is None:
            return UNCHANGED
        wanted, until = self._request(now, namespace, retention)
        priority, held = self._priority, self._until
        for block in blocks:
            raises = wanted > priority[block]
            extends = (
                wanted == priority[block]
                and held[block] != 0
                and (until == 0 or until > held[block])
            )
            if raises or extends:
                self._set(block, wanted, until)
        return UNCHANGED

    def freed(self, block: int) -> None:
        """Its pending expiry (if any) becomes stale. O(1)."""
        self._until[block] = 0

    def block_fields(self, blocks: list[int]) -> dict[str, list[int]]:
        """``priority`` and ``until`` (0: never) of each block. O(len(blocks))."""
        return {
            "priority": [self._priority[block] for block in blocks],
            "until": [self._until[block] for block in blocks],
        }

    def check(self, cached: Iterable[int], clock: int) -> str | None:
        """Priorities in range; each pending ``until`` is in the future and queued.

        O(cached + e)."""
        pending = set(self._expiries)
        for block in cached:
            if not 0 <= self._priority[block] <= MAX_PRIORITY:
                return f"block {block} has priority {self._priority[block]}"
            until = self._until[block]
            if until and (until <= clock or (until, block) not in pending):
                return f"block {block} holds until {until}, which is past or not queued"
        return None

    def _request(self, now: int, namespace: str | None, retention: Retention) -> tuple[int, int]:
        wanted = self.default_for(namespace) if retention.priority is None else retention.priority
        until = 0 if retention.retain_for is None else now + retention.retain_for
        return wanted, until

    def _set(self, block: int, priority: int, until: int) -> None:
        self._priority[block] = priority
        self._until[block] = until
        if until:
            heapq.heappush(self._expiries, (until, block))

    def _copied_state(self) -> dict[str, object]:
        return {
            **self.__dict__,
            "_namespaces": dict(self._namespaces),
            "_priority": list(self._priority),
            "_until": list(self._until),
            "_fallback": list(self._fallback),
            "_expiries": list(self._expiries),
        }


def _namespace_defaults(value: object) -> dict[str, int]:
    """Option ``namespaces`` checked: names to priorities. O(namespaces).

    Raises:
        InvalidArgumentError: not a mapping of str to ints in ``0 .. 100``.
    """
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(
            f"policy option 'namespaces' must map namespace names to priorities, got {value!r}"
        )
    checked: dict[str, int] = {}
    for name, priority in value.items():
        if not isinstance(name, str):
            raise InvalidArgumentError(f"policy option 'namespaces': {name!r} is not a name")
        checked[name] = check_int_option({name: priority}, name, 0, 0, MAX_PRIORITY)
    return checked
