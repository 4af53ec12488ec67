"""A target's own panel, against planted bugs: each rule a step touched is cited as
followed or departed from, in facts about what the target did. Every mutant below breaks
one rule; its panel must say it departs from that rule at the step that shows it (and
the page's data, text and slides must still be made for every step)."""

from __future__ import annotations

from typing import Any

import pytest

from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.explain import build_page, frame_views, record, slide, text_report
from kachedb_radix.spec.explain.record import Recording
from kachedb_radix.spec.explain.view import View
from kachedb_radix.spec.mutants import MUTANTS


def _call(op: str, tokens: list[int], pin: bool = False, namespace: str | None = None) -> Any:
    return {"op": op, "tokens": tokens, "namespace": namespace, "pin": pin}


#: One trace that touches most rules a panel checks: inserts that split, reuse, evict
#: (with a pin held), matches, a release, an evict, reads, a namespace.
STEPS: list[dict[str, Any]] = [
    {"op": "reset", "num_blocks": 8, "block_size": 2},
    _call("insert", [1, 2, 3, 4, 5, 6]),
    _call("match", [1, 2, 3, 4], pin=True),
    _call("insert", [1, 2, 3, 4, 9, 9]),
    _call("insert", [1, 2, 7, 7]),
    _call("insert", [1, 2], namespace="a"),
    _call("match", [1, 2], namespace="a"),
    _call("insert", [20, 21, 22, 23, 24, 25]),
    {"op": "release", "lease": 1},
    {"op": "evict", "count": 2},
    {"op": "stats"},
    {"op": "dump"},
]

#: mutant -> (a rule its panel departs from somewhere in :data:`STEPS`).
DEPARTS = {
    "alloc_descending": "R-ALLOC-2",
    "alloc_largest_first": "R-ALLOC-2",
    "freed_blocks_leak": "R-INV-1",
    "insert_evicts_extra": "R-INS-5",
    "insert_never_evicts": "R-INS-6",
    "pin_whole_edge": "R-PIN-1",
    "pin_last_node_only": "R-PIN-2",
    "clock_ticks_on_evict": "R-LRU-3",
    "match_not_stamped": "R-LRU-1",
    "release_not_stamped": "R-LRU-1",
    "match_short_by_one_block": "R-MATCH-1",
    "reuse_trusts_first_block": "R-INS-2",
    "split_drops_pins": "R-SPLIT-2",
    "split_drops_stamps": "R-SPLIT-2",
    "split_misplaces_blocks": "R-EDGE-1",
    "stats_evictable_counts_pinned": "R-INV-1",
    "stats_leases_never_drop": "R-INV-2",
    "dump_not_path_compressed": "R-DUMP-2",
    "lru_reversed": "R-EVICT-2",
}


def _recorded(name: str) -> tuple[Recording, list[list[View]]]:
    mutant = MUTANTS[name]
    recording = record(STEPS, TreeAdapter(mutant.tree, name), title=name, source=name)
    return recording, frame_views(recording)


@pytest.mark.parametrize("name", sorted(DEPARTS))
def test_a_planted_bug_is_cited_as_departing(name: str) -> None:
    recording, views = _recorded(name)
    cited = {
        (rule, verdict)
        for row in views
        for rule_reason, verdict in zip(row[1]["rules"], row[1]["verdicts"], strict=True)
        for rule in rule_reason[:1]
    }
    assert (DEPARTS[name], "departs") in cited, sorted(cited)
    assert all(verdict in ("follows", "departs") for row in views for verdict in row[1]["verdicts"])
    assert "<svg" in slide(views[-1][1], [name], len(views) - 1)
    assert name in text_report(recording, views)
    assert build_page(recording, views).startswith("<!DOCTYPE html>")


def test_the_reference_beside_itself_follows_every_rule_it_touches() -> None:
    """R-INV-1, R-DUMP-2: a correct target follows everything it is cited for."""
    recording = record(STEPS, TreeAdapter(MUTANTS["alloc_descending"].tree.__mro__[1], "twin"),
                       title="t", source="s")  # fmt: skip
    views = frame_views(recording)
    verdicts = {verdict for row in views for verdict in row[1]["verdicts"]}
    assert verdicts == {"follows"} and recording.first_difference is None
    stats = views[STEPS.index({"op": "stats"})][1]
    assert ["R-INV-1", "follows"] in [
        [rule, verdict]
        for (rule, _), verdict in zip(stats["rules"], stats["verdicts"], strict=True)
    ]
