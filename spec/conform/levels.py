"""Conformance levels: which groups of rules an implementation declares it supports.

An implementation always supports ``core``; it may add any of the others. The
``events`` level (KV events and the router index, :mod:`kachedb_radix.spec.conform.events`)
is checked only when asked for (``conform --events``): it hashes every cached block on
both sides, so a default run leaves it out. An implementation that does not declare a
level is still checked at the others. The ``tiers`` level (a cache over device, host
and disk, R-TIER-*) is opt-in too (``conform --tiers``); such a run leaves ``snapshots``
and ``events`` out. The kit generates only operations whose outcome the declared
levels fully determine, and compares only what those levels specify (see ``SPEC.md``,
"Conformance levels").
"""

from __future__ import annotations

from collections.abc import Iterable

#: The levels by name: the one place a level's name is written (code names them by
#: these constants, never by a string of its own).
CORE = "core"
PINNING = "pinning"
EVICTION = "eviction"
NAMESPACES = "namespaces"
SNAPSHOTS = "snapshots"
POLICIES = "policies"
EVENTS = "events"
TIERS = "tiers"

#: Every level, in the order SPEC.md lists them.
LEVELS: tuple[str, ...] = (CORE, PINNING, EVICTION, NAMESPACES, SNAPSHOTS, POLICIES, EVENTS, TIERS)

#: The levels the kit drives (a candidate may declare): all of them.
KIT_LEVELS: tuple[str, ...] = LEVELS

#: The levels a run checks only when asked for (``--events``, ``--levels``).
OPT_IN_LEVELS: frozenset[str] = frozenset({EVENTS, TIERS})

#: Levels a run at the ``tiers`` level leaves out: a tiered tree keeps no snapshots, and
#: its events (one stream over several media) are the suite's to check (R-TIER-9).
TIERS_EXCLUDE: frozenset[str] = frozenset({SNAPSHOTS, EVENTS})

#: The rule groups (the middle part of a rule id ``R-GROUP-n``) of each level.
LEVEL_GROUPS: dict[str, tuple[str, ...]] = {
    CORE: ("TOK", "MATCH", "INS", "SPLIT", "EDGE", "ALLOC", "LIMIT", "ERR", "DUMP", "INV"),
    PINNING: ("PIN",),
    EVICTION: ("EVICT", "LRU", "CLEAR"),
    NAMESPACES: ("NS",),
    SNAPSHOTS: ("SNAP", "EPOCH"),
    POLICIES: ("POL",),
    EVENTS: ("EVENT", "ROUTE"),
    TIERS: ("TIER",),
}

#: The level each rule group belongs to.
GROUP_LEVEL: dict[str, str] = {
    group: level for level, groups in LEVEL_GROUPS.items() for group in groups
}


class LevelError(ValueError):
    """A level name that SPEC.md does not define."""


def parse_levels(names: Iterable[str]) -> frozenset[str]:
    """Validate level names and return them as a set that always includes ``core``. O(n).

    Accepts names separated by commas inside each item too (``["core,pinning"]``).

    Raises:
        LevelError: a name is not one of :data:`LEVELS`.
    """
    found = {CORE}
    for item in names:
        for name in item.split(","):
            name = name.strip()
            if not name:
                continue
            if name not in LEVELS:
                raise LevelError(f"unknown level {name!r}: levels are {', '.join(LEVELS)}")
            found.add(name)
    return frozenset(found)


def ordered(levels: Iterable[str]) -> list[str]:
    """``levels`` in the canonical order of :data:`LEVELS`. O(len(LEVELS))."""
    chosen = set(levels)
    return [level for level in LEVELS if level in chosen]
