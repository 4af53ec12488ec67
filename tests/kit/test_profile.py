"""Deviation profiles: parsing, clear errors for bad ones, deviations, kind mapping, and
the kit comparing accordingly -- a candidate with another eviction policy conforms with
declared deviations, while the safety check still kills a pin-ignoring one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kachedb_radix import reference
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.profile import (
    MODES,
    RELAXES,
    SAFETY_RULES,
    STRICT,
    ProfileError,
    load,
    parse,
)
from kachedb_radix.spec.conform.rules import load_rules
from kachedb_radix.spec.conform.run import KitSettings, run_kit
from kachedb_radix.spec.conform.targets import load_profile
from kachedb_radix.spec.mutants.eviction import EvictWholeLeaf
from kachedb_radix.spec.mutants.pinning import PinnedBlockEvicted

QUICK = KitSettings(examples=60, budget=8_000)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profile.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_full_profile_loads(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        name = "my-cache"
        block_sizes = [16, 1, 16]
        pool_sizes = [2, 100]
        [tolerate]
        eviction_granularity = "whole_leaf_node"
        evicted_set = "covering"
        allocation_order = "any"
        recency = "not_compared"
        error_kinds = "mapped"
        removal_order = "any"
        store_events = "any"
        event_fields = "hashes"
        reset_events = "cleared"
        [errors]
        TypeError = "token_type"
        [events]
        scheme = "xxh3_64"
        [waive]
        R-TOK-3 = "  ids are int64  "
        """,
    )
    profile = load(path)
    assert profile.events == {"scheme": "xxh3_64", "seed": "vllm-none-hash"}
    assert profile.events_fields() == {"events": {"scheme": "xxh3_64", "seed": "vllm-none-hash"}}
    assert profile.name == "my-cache" and profile.source == str(path)
    assert profile.block_sizes == (1, 16) and profile.pool_sizes == (2, 100)
    assert profile.waived == {"R-TOK-3": "ids are int64"}
    assert profile.adopts_eviction and profile.adopts_allocation and not profile.compares_recency
    assert not profile.strict and STRICT.strict
    deviations = profile.deviations()
    relaxed = {rule for rules, _ in RELAXES.values() for rule in rules}
    assert set(deviations) == relaxed | {"R-TOK-3"}
    assert next(iter(deviations)) == "R-TOK-3"  # SPEC order
    assert profile.map_kind("unexpected:TypeError") == "token_type"
    assert profile.map_kind("TypeError") == "token_type"
    assert profile.map_kind("token_range") == "token_range"
    assert STRICT.map_kind("unexpected:TypeError") == "unexpected:TypeError"
    assert profile.to_json()["tolerate"]["recency"] == "not_compared"
    assert load_profile(path) == profile and load_profile("strict") is STRICT
    assert load_profile(profile) is profile and load_profile(None) is STRICT


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"colour": 1}, "unknown key"),
        ({"name": ""}, "name must be"),
        ({"tolerate": 3}, r"\[tolerate\] must be a table"),
        ({"tolerate": {"speed": "fast"}}, "unknown tolerance 'speed'"),
        ({"events": {"scheme": "md5"}}, r"\[events\]: unknown hash scheme 'md5'"),
        ({"events": {"salt": "x"}}, r"\[events\]: unknown key\(s\) salt"),
        ({"tolerate": {"removal_order": "random"}}, "choose eviction_order | any"),
        ({"tolerate": {"recency": "sometimes"}}, "choose exact | not_compared"),
        ({"tolerate": {"eviction_granularity": "whole_leaf_node"}}, "contradicts"),
        ({"tolerate": {"error_kinds": "mapped"}}, r"needs an \[errors\] table"),
        ({"errors": {"TypeError": "token_type"}}, 'needs error_kinds = "mapped"'),
        (
            {"tolerate": {"error_kinds": "mapped"}, "errors": {"TypeError": "oops"}},
            "is not an error kind",
        ),
        ({"waive": {"R-" + "NOPE-1": "x"}}, "no such rule"),
        ({"waive": {"R-PIN-3": "we evict pinned blocks"}}, "safety rule"),
        ({"waive": {"R-TOK-3": " "}}, "needs a reason"),
        ({"block_sizes": []}, "block_sizes must be"),
        ({"block_sizes": [True]}, "block_sizes must be"),
        ({"pool_sizes": [5, 2]}, "pool_sizes must be"),
        ({"pool_sizes": [5]}, "pool_sizes must be"),
    ],
)
def test_bad_profiles_are_clear_errors(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse(data, "test.toml")


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"missing\.toml: no such file"):
        load(tmp_path / "missing.toml")
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b"\xff")
    with pytest.raises(ProfileError, match=r"not UTF-8 \(byte 0xff at offset 0\)"):
        load(latin1)  # issue 32: was a UnicodeDecodeError
    with pytest.raises(ProfileError, match="not TOML"):
        load(_write(tmp_path, "name = "))


def test_safety_rules_and_modes_are_consistent() -> None:
    """Every relaxed rule and safety rule exists; no mode relaxes a safety rule."""
    rules = load_rules()
    relaxed = {rule for rules_of, _ in RELAXES.values() for rule in rules_of}
    assert relaxed <= set(rules) and set(SAFETY_RULES) <= set(rules)
    assert not relaxed & set(SAFETY_RULES)
    assert {key for key, _ in RELAXES} == set(MODES)


WHOLE_NODES = parse(
    {
        "tolerate": {
            "eviction_granularity": "whole_leaf_node",
            "evicted_set": "covering",
            "recency": "not_compared",
        }
    }
)

#: Everything a profile can relax or waive: only the safety check is left.
LENIENT = parse(
    {
        "tolerate": {
            "eviction_granularity": "whole_leaf_node",
            "evicted_set": "covering",
            "allocation_order": "any",
            "recency": "not_compared",
            "error_kinds": "mapped",
            "removal_order": "any",
            "store_events": "any",
            "event_fields": "hashes",
            "reset_events": "cleared",
        },
        "errors": {"AssertionError": "invariant"},
        "waive": {
            rule: "lenient"
            for rule in load_rules()
            if rule not in SAFETY_RULES and not any(rule in rules for rules, _ in RELAXES.values())
        },
    }
)


class WholeLeafEviction(reference.RadixTree):
    """Evicts the unpinned blocks of whole leaf edges, least recently used edge first:
    SGLang's policy (whole nodes) on the reference's tree."""

    def choose_victims(self, count: int, protected: Any) -> Iterator[int]:
        chosen = 0
        while chosen < count and (tail := self._queue.first()) is not None:
            nid = self._queue.owner(tail)
            assert nid is not None
            # The rest of the edge while its new tail is still an evictable leaf's.
            while (node := self._nodes.get(nid)) is not None and self._queue.owner(
                node.tail()
            ) == nid:
                yield node.tail()
                chosen += 1


@pytest.mark.slow
def test_whole_node_eviction_conforms_with_declared_deviations() -> None:
    """R-EVICT-1, R-EVICT-4, R-INS-5: a tree that evicts whole leaf edges fails the strict
    spec, and conforms under a profile that declares it; the rest is still compared."""
    strict = run_kit(TreeAdapter(WholeLeafEviction, "whole"), kit=KitSettings(first=True))
    assert strict.findings and strict.findings[0].rule.startswith(("R-EVICT-", "R-INS-5"))
    declared = run_kit(TreeAdapter(WholeLeafEviction, "whole"), kit=QUICK, profile=WHOLE_NODES)
    assert declared.passed, declared.explain()
    assert declared.verdict == "conforms with declared deviations"
    assert "R-EVICT-1" in declared.deviations() and "R-LRU-1" in declared.deviations()
    rows = {row.rule: row for row in declared.table()}
    assert rows["R-EVICT-1"].status == "waived" and "whole leaf nodes" in rows["R-EVICT-1"].reason
    assert rows["R-MATCH-1"].status == "pass"
    # A buggy whole-leaf evictor (it frees the pinned part of an edge too) is still caught.
    buggy = run_kit(
        TreeAdapter(EvictWholeLeaf, "buggy"), kit=KitSettings(first=True), profile=WHOLE_NODES
    )
    assert buggy.findings and buggy.findings[0].kind in ("inadmissible", "safety")


@pytest.mark.slow
def test_a_pin_ignoring_eviction_is_killed_under_the_most_lenient_profile() -> None:
    """R-PIN-3: waiving and tolerating everything a profile may still leaves the safety
    check, which catches a cache whose eviction ignores pins."""
    assert set(LENIENT.deviations()) | set(SAFETY_RULES) == set(load_rules())
    report = run_kit(
        TreeAdapter(PinnedBlockEvicted, "pins-ignored"),
        kit=KitSettings(first=True, shrink=False),
        profile=LENIENT,
    )
    assert report.findings, report.explain()
    found = report.findings[0]
    assert found.kind == "safety" and found.rule == "R-PIN-3"
    # The reference itself passes under the same profile.
    assert run_kit(TreeAdapter(reference.RadixTree, "ref"), kit=QUICK, profile=LENIENT).passed


def test_reports_show_shipped_profiles_by_their_project_path(tmp_path: Path) -> None:
    """A committed report names no machine's directories: a profile shipped in the
    project shows as its path from the project root; any other file as given."""
    from kachedb_radix.spec.peers import sglang as peer

    shipped = load(peer.PROFILE)
    assert shipped.shown_source == "spec/peers/sglang.toml"
    assert shipped.to_json()["source"] == "spec/peers/sglang.toml"
    mine = tmp_path / "mine.toml"
    mine.write_text('[tolerate]\nrecency = "not_compared"\n')
    assert load(mine).shown_source == str(mine)
    assert STRICT.shown_source is None
