"""Eviction policies: which evictable leaf tail goes first (R-POL-*).

Every policy orders the same candidates -- the unpinned last blocks of leaves
(R-EVICT-1) -- and changes nothing else: pins stay exact, ancestors go after their
descendants, an insert evicts exactly its shortfall and never from its own path
(R-INS-5). A policy only defines each block's *eviction key*, a tuple of ints that
ends with the block id (the tie-break, R-POL-1): the smallest key goes first.

=============  ========================================  =========
policy         key of a leaf tail                         rule
=============  ========================================  =========
``lru``        ``(stamp, block)``                          R-POL-2
``lfu``        ``(hits, stamp, block)``                    R-POL-3
``fifo``       ``(born, block)``                           R-POL-4
``priority``   ``(priority, stamp, block)``                R-POL-5
``slru``       ``(protected, stamp, block)``               R-POL-6
=============  ========================================  =========

:data:`POLICIES` is the one table of them; :func:`make_policy` builds one by name
from its options, refusing unknown names and options with ``InvalidArgumentError``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import InvalidArgumentError
from .base import EvictionPolicy
from .fifo import FifoPolicy
from .lfu import HITS_CAP, LfuPolicy
from .lru import LruPolicy
from .priority import DEFAULT_PRIORITY, PriorityPolicy
from .retention import MAX_PRIORITY, Retention, check_retention
from .slru import SlruPolicy

#: Every policy by name, the default first.
POLICIES: dict[str, type[EvictionPolicy]] = {
    policy.name: policy for policy in (LruPolicy, LfuPolicy, FifoPolicy, PriorityPolicy, SlruPolicy)
}

#: The policy a tree gets when none is named.
DEFAULT_POLICY = "lru"


def make_policy(
    name: object, options: object, num_blocks: int, stamps: list[int]
) -> EvictionPolicy:
    """The policy ``name`` with ``options`` for a pool of ``num_blocks``. O(num_blocks).

    ``stamps`` is the tree's own per-block stamp table (R-LRU-1), shared, not copied:
    every policy breaks ties by recency and reads the stamps the tree writes.

    Raises:
        InvalidArgumentError: ``name`` is not a policy of :data:`POLICIES`, or
            ``options`` is not a mapping of that policy's options with valid values.
    """
    policy, checked = check_policy(name, options)
    return POLICIES[policy](num_blocks, stamps, checked)


def check_policy(name: object, options: object) -> tuple[str, dict[str, object]]:
    """``(name, options)`` checked, the options with their defaults filled in, without
    building the policy (the C twin's constructor calls it). O(size of the options).

    Raises:
        InvalidArgumentError: as :func:`make_policy`.
    """
    if not isinstance(name, str) or name not in POLICIES:
        raise InvalidArgumentError(f"policy must be one of {', '.join(POLICIES)}, got {name!r}")
    if options is None:
        options = {}
    if not isinstance(options, Mapping) or not all(isinstance(key, str) for key in options):
        raise InvalidArgumentError(
            f"policy_options must be a mapping of option names, got {options!r}"
        )
    policy = POLICIES[name]
    unknown = sorted(set(options) - set(policy.option_names))
    if unknown:
        known = ", ".join(policy.option_names) or "none"
        raise InvalidArgumentError(
            f"policy {name!r} has no option {unknown[0]!r} (its options: {known})"
        )
    return name, policy.check_options(dict(options))


__all__ = [
    "DEFAULT_POLICY",
    "DEFAULT_PRIORITY",
    "HITS_CAP",
    "MAX_PRIORITY",
    "POLICIES",
    "EvictionPolicy",
    "FifoPolicy",
    "LfuPolicy",
    "LruPolicy",
    "PriorityPolicy",
    "Retention",
    "SlruPolicy",
    "check_policy",
    "check_retention",
    "make_policy",
]
