"""Every rule in spec/SPEC.md is cited by a test, and every cited rule id exists."""

from __future__ import annotations

import re
from pathlib import Path

from kachedb_radix.spec.conform.levels import GROUP_LEVEL, LEVELS
from kachedb_radix.spec.conform.rules import RULE_ID, load_rules
from tests.support.paths import ROOT

RULES = load_rules()
SCANNED = ("tests", "reference", "spec", "accel")
SUFFIXES = {".py", ".pyi", ".c", ".h", ".md", ".json"}


def _files(folder: str) -> list[Path]:
    base = ROOT / folder
    return sorted(path for path in base.rglob("*") if path.suffix in SUFFIXES and path.is_file())


def test_spec_defines_rules_with_levels_and_reasons() -> None:
    assert len(RULES) >= 40
    for rule in RULES.values():
        assert rule.level in LEVELS, rule.id
        assert GROUP_LEVEL[rule.group] == rule.level, f"{rule.id} is filed under the wrong level"
        assert "**Why.**" in rule.text and "**Peers.**" in rule.text, f"{rule.id} lacks a reason"


def test_every_level_has_rules() -> None:
    assert {rule.level for rule in RULES.values()} == set(LEVELS)


def test_every_rule_is_cited_by_a_test() -> None:
    cited: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        if path.name != Path(__file__).name:
            cited.update(RULE_ID.findall(path.read_text(encoding="utf-8")))
    missing = sorted(set(RULES) - cited, key=_order)
    assert not missing, f"rules without a test citing them: {missing}"


def test_every_cited_rule_exists() -> None:
    unknown: dict[str, list[str]] = {}
    for folder in SCANNED:
        for path in _files(folder):
            for rule_id in RULE_ID.findall(path.read_text(encoding="utf-8", errors="replace")):
                if rule_id not in RULES:
                    unknown.setdefault(rule_id, []).append(str(path.relative_to(ROOT)))
    assert not unknown, f"rule ids cited but not defined in SPEC.md: {unknown}"


def test_rule_id_pattern_needs_whole_ids() -> None:
    # An id must not count as cited by a file that only mentions a longer one.
    longer = "R-TOK-" + "10"
    assert RULE_ID.findall(f"see {longer} and R-X-") == [longer]
    assert re.fullmatch(RULE_ID, longer[:-1])


def _order(rule_id: str) -> tuple[str, int]:
    _, group, number = rule_id.split("-")
    return group, int(number)
