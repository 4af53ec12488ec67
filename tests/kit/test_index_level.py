"""The index level (``conform --index``): router indexes driven by several workers' event
streams and compared with the reference index after every batch (R-ROUTE-*).

The twins agree case by case; every planted bug is caught by a rule it breaks; NVIDIA
Dynamo's own ``RadixTree`` (ai-dynamo-runtime 1.6.1) shows the two differences its
profile does not declare, each on its minimal stream, and under the strict profile the
ones it declares; the command line exits 0, 1 and 2 as documented."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from kachedb_radix.spec.cli.main import main
from kachedb_radix.spec.conform.index import (
    IndexTarget,
    TwinIndex,
    check_index,
    resolve_index,
    run_stream,
)
from kachedb_radix.spec.conform.index.stream import (
    KINDS,
    PLAIN_KINDS,
    Prompt,
    Stream,
    Truth,
    deliveries,
)
from kachedb_radix.spec.conform.profile import STRICT
from kachedb_radix.spec.mutants.indexes import INDEX_MUTANTS
from tests.conftest import ROUTER_IMPLEMENTATIONS
from tests.support.dynamo import require_dynamo

#: Dynamo's two undeclared differences, as their minimal streams (docs/conformance.md).
ORPHANED_CHILD = Stream(
    (Prompt((0, 0), None),),
    (("store", 0, 0, 0, 0), ("store", 0, 0, 1, 0), ("remove", 0, 0, 0, 0), ("store", 0, 0, 0, 0)),
)
PARENTLESS_AT_ROOT = Stream((Prompt((0, 0), None),), (("store_parentless", 0, 0, 1, 0),))


@pytest.mark.parametrize("name", sorted(ROUTER_IMPLEMENTATIONS))
def test_each_twin_agrees_with_the_reference_index_in_every_case(name: str) -> None:
    report = check_index(resolve_index(name), examples=40)
    assert report.implementation == name  # the twin asked for is the one that ran
    assert report.ok, report.explain()
    assert report.verdict == "conforms"
    assert set(report.cases) == {"plain"} | (set(KINDS) - PLAIN_KINDS)
    assert set(report.cases.values()) == {"agrees"}
    assert report.examples >= 40 * len(report.cases)


def test_the_truth_counts_copies_and_reads_a_parentless_store_of_held_blocks_as_a_report() -> None:
    stream = Stream(
        (Prompt((0, 1), None),),
        (
            ("store", 0, 0, 0, 1),  # both blocks
            ("store", 0, 0, 0, 0),  # block 0 again, no parent (it is the first): a report
            ("store", 0, 0, 1, 0),  # block 1 again under block 0: a copy
            ("remove", 0, 0, 1, 0),  # one copy of block 1 goes
        ),
    )
    seen: list[tuple[frozenset[str], int]] = []
    hashes = stream.prompts[0].hashes()
    for delivery, truth in deliveries(stream):
        assert isinstance(truth, Truth)
        seen.append((delivery.kinds, truth.depth((0, 0), hashes)))
    assert seen == [
        (frozenset({"store"}), 2),
        (frozenset({"store", "duplicate"}), 2),
        (frozenset({"store", "duplicate"}), 2),
        (frozenset({"remove"}), 2),  # block 1 still has a copy
    ]
    assert run_stream(stream, TwinIndex("reference"), STRICT) is None


@pytest.mark.parametrize("mutant", sorted(INDEX_MUTANTS))
def test_every_planted_index_bug_is_caught_by_a_rule_it_breaks(mutant: str) -> None:
    report = check_index(IndexTarget(mutant, INDEX_MUTANTS[mutant]), examples=100)
    assert not report.ok, f"{mutant} survived"
    declared = INDEX_MUTANTS[mutant].rules
    assert any(finding.rules[0] in declared for finding in report.findings), report.explain()
    for finding in report.findings:  # each trace is a minimal stream that still differs
        assert 1 <= len(finding.trace) <= 6, finding.explain()


@pytest.mark.slow  # 15 s: the level at its default size on Dynamo's tree
def test_dynamo_s_radix_tree_shows_two_undeclared_differences_each_on_a_minimal_stream() -> None:
    require_dynamo()
    target = resolve_index("dynamo")
    assert target.profile.name == "dynamo-1.6.1-radix-tree"
    report = check_index(target, examples=500)
    assert report.implementation == "dynamo 1.6.1 RadixTree"
    assert not report.ok
    assert {"gap", "restart"}.isdisjoint(report.cases)  # declared: event ids are not its
    by_case = {finding.cases: finding for finding in report.findings}
    parentless = by_case[("parentless",)]
    assert parentless.kind == "wrong" and parentless.rules[0] == "R-ROUTE-2"
    assert [d.operation for d in parentless.trace] == list(PARENTLESS_AT_ROOT.operations)
    orphan = by_case[()]
    assert orphan.kind == "differs" and orphan.rules == ("R-ROUTE-4",)
    assert len(orphan.trace) == 4
    # Every declared choice agrees: no other case shows a difference.
    assert {case for case, result in report.cases.items() if result != "agrees"} == {
        "plain",
        "parentless",
    }


def test_dynamo_s_two_differences_replay_on_their_committed_streams() -> None:
    require_dynamo()
    target = resolve_index("dynamo")
    orphan = run_stream(ORPHANED_CHILD, target.open(), target.profile)
    assert orphan is not None and orphan.kind == "differs"
    assert "depth 1, the reference index 2 (its cache holds 2)" in orphan.detail
    root = run_stream(PARENTLESS_AT_ROOT, target.open(), target.profile)
    assert root is not None and root.kind == "wrong"
    assert "matched at depth 1, but its cache holds 0" in root.detail
    for stream in (ORPHANED_CHILD, PARENTLESS_AT_ROOT):  # the reference index agrees
        assert run_stream(stream, TwinIndex("reference"), STRICT) is None


def test_dynamo_under_the_strict_profile_shows_what_its_profile_declares() -> None:
    require_dynamo()
    report = check_index(resolve_index("dynamo", "strict"), examples=150)
    results = report.cases
    assert results["duplicate"] == "R-ROUTE-5"  # one entry per block: a removal drops it
    assert results["unknown_parent"] == "R-ROUTE-3"  # raised, and the store dropped
    assert results["malformed"] in ("R-ROUTE-2", "R-ROUTE-3")  # refused, not stale
    assert results["gap"] == "R-ROUTE-1"


def test_the_command_line_exits_0_1_and_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["conform", "--index", "reference", "--examples", "20"]) == 0
    out = capsys.readouterr().out
    assert "index reference (reference), profile strict: conforms" in out
    assert main(["conform", "--index", "nosuch"]) == 2
    assert "unknown index target 'nosuch'" in capsys.readouterr().err
    assert main(["conform", "--index"]) == 2
    assert main(["conform", "--index", "reference", "--tiers"]) == 2
    assert "--tiers is for caches" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["conform", "--index", "reference", "--examples", "0"])
    assert stop.value.code == 2
    capsys.readouterr()
    folder = tmp_path / "report"
    code = main(
        ["conform", "--index", "accel", "--examples", "20", "--json", "--report", str(folder)]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["reports"][0]["implementation"] == "accel"
    assert json.loads((folder / "router-index.json").read_text()) == data
    assert "conforms" in (folder / "router-index.txt").read_text()


def test_the_command_line_reports_dynamo_s_differences_and_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    require_dynamo()
    assert main(["conform", "--index", "dynamo", "--examples", "100"]) == 1
    captured = capsys.readouterr()
    assert "R-ROUTE-2 (wrong)" in captured.out and "stores, with no parent," in captured.out
    assert "WARN" not in captured.err  # Dynamo's own log lines kept off the output


def test_targets_that_cannot_load_or_run_say_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from kachedb_radix.spec import peers
    from kachedb_radix.spec.conform.index import candidates
    from kachedb_radix.spec.conform.targets import TargetError
    from kachedb_radix.spec.twins import TwinUnavailable

    def no_wheel() -> Callable[[], Any]:
        raise ImportError("ai-dynamo-runtime is not installed (pip install ...)")

    monkeypatch.setitem(
        peers.INDEX_PEERS,
        "dynamo",
        dataclasses.replace(peers.INDEX_PEERS["dynamo"], factory=no_wheel),
    )
    with pytest.raises(
        TargetError, match="index target dynamo: ai-dynamo-runtime is not installed"
    ):
        resolve_index("dynamo")

    def unbuilt(name: str, cls: str) -> None:
        raise TwinUnavailable("the C extension did not build")

    monkeypatch.setattr(candidates, "twin_class", unbuilt)
    with pytest.raises(TargetError, match="index target accel: the C extension did not build"):
        resolve_index("accel")
    with pytest.raises(ValueError, match="examples >= 1"):
        check_index(IndexTarget("reference", lambda: TwinIndex("reference")), examples=0)


def test_an_index_of_your_own_is_a_module_attribute_target(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``module:attribute`` names an adapter class (strict by default); one that is not
    an index candidate is refused, naming what it lacks."""
    name = "kachedb_radix.spec.mutants.indexes:KeepsRemoved"
    target = resolve_index(name)
    assert target.profile is STRICT and target.open().implementation == "reference"
    assert main(["conform", "--index", name, "--examples", "30"]) == 1
    assert "R-ROUTE-2 (wrong)" in capsys.readouterr().out
    from kachedb_radix.spec.conform.targets import TargetError

    with pytest.raises(TargetError, match="is not a class or factory"):
        resolve_index("kachedb_radix.reference:RadixTree.__mro__")
    with pytest.raises(TargetError, match="has no apply, lost, remove_worker, depths"):
        resolve_index("collections:OrderedDict")
    with pytest.raises(TargetError, match="takes arguments"):
        resolve_index("kachedb_radix.spec.conform.index:TwinIndex")
    with pytest.raises(TargetError, match="cannot import"):
        resolve_index("no_such_module_here:Index")


class _QueryRaises(TwinIndex):
    """An index whose queries fail once it holds something."""

    def __init__(self) -> None:
        super().__init__("reference")

    def depths(
        self, tokens: Sequence[int], namespace: str | None, hashes: Sequence[int]
    ) -> dict[tuple[int, int], int]:
        found = super().depths(tokens, namespace, hashes)
        if found:
            raise KeyError("lookup table corrupt")
        return found


def test_an_index_that_raises_on_a_query_is_a_finding_not_a_crash() -> None:
    report = check_index(IndexTarget("raises", _QueryRaises), examples=20)
    (first, *_) = report.findings
    assert first.kind == "raised" and first.rules[0] == "R-ROUTE-3"
    assert "the index raised KeyError: 'lookup table corrupt'" in first.detail
    assert len(first.trace) == 1
