"""One place for each meaning (issue 36): no comparison against an operation's or a
level's name is left in the kit outside its table (``spec/conform/operations.py``,
``spec/conform/levels.py``); everything else reads the row. The counts are held here
(``python -m tests.support.comparisons`` lists the sites); the issue's target is at
most 15 operation-name comparisons in the kit's modules."""

from __future__ import annotations

from tests.support.comparisons import TABLES, main, sites
from tests.support.paths import ROOT

#: The kit: the conformance kit, its protocol and the explain pages built on its lockstep.
KIT = ("spec/conform", "spec/protocol", "spec/explain")

#: What is left, each for its reason: ``"namespaces" in answer`` (an answer field that
#: shares the operation's name, spec/explain/why.py).
OPERATION_SITES = 1


def test_the_kit_compares_no_operation_name_outside_the_table() -> None:
    found = [site for site in sites(KIT, ROOT) if site.kind == "operation"]
    assert len(found) <= OPERATION_SITES <= 15, "\n".join(
        f"{site.path}:{site.line}: {site.text}" for site in found
    )


def test_no_level_name_is_compared_in_the_kit() -> None:
    found = [site for site in sites(KIT, ROOT) if site.kind == "level"]
    assert not found, "\n".join(f"{site.path}:{site.line}: {site.text}" for site in found)


def test_the_counter_sees_a_comparison_and_leaves_the_tables_alone() -> None:
    """The counter finds each form of comparison (so a zero above means something), and
    the tables themselves hold the names they define."""
    import ast

    from tests.support.comparisons import _compare

    def kinds(text: str) -> list[str]:
        node = ast.parse(text).body[0]
        assert isinstance(node, ast.Expr) and isinstance(node.value, ast.Compare)
        return list(_compare(node.value))

    assert kinds('op == "insert"') == ["operation"]
    assert kinds('step["op"] in ("evict", "tier_evict")') == ["operation"]
    assert kinds('"drop" in run.offered') == ["operation"]
    assert kinds('"snapshots" in self.levels') == ["level"]
    assert kinds('"events" not in levels') == ["level"]
    assert kinds('"tiers" in chosen') == ["level"]
    assert kinds('name == "tokens"') == []
    in_tables = [site for site in sites(("spec/conform",), ROOT) if site.path in TABLES]
    assert not in_tables
    assert main(list(KIT)) == 0
