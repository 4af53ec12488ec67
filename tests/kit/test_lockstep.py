"""The lockstep's less travelled paths: a choice no declared mode allows (an
``inadmissible`` finding naming the modes), the dry run of ``would_evict`` on a
clone when a quarantine makes the read-only walk inexact, the adopting oracle's
refusals, and saved traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kachedb_radix import reference
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.lockstep import (
    Disagreement,
    Lockstep,
    adopting_outcome,
    copy_reference,
)
from kachedb_radix.spec.conform.oracle import OracleAdapter
from kachedb_radix.spec.conform.page import save_traces
from kachedb_radix.spec.conform.profile import STRICT, parse
from kachedb_radix.spec.conform.run import KitSettings, run_kit
from kachedb_radix.spec.conform.steps import LeaseBook
from kachedb_radix.spec.mutants.eviction import EvictedIdsSorted

ALL = frozenset({"core", "pinning", "eviction", "namespaces", "snapshots"})

WHOLE_NODES = parse(
    {"tolerate": {"eviction_granularity": "whole_leaf_node", "evicted_set": "covering"}}
)


def _insert(tokens: list[Any], pin: bool = False) -> dict[str, Any]:
    return {"op": "insert", "tokens": tokens, "namespace": None, "pin": pin}


class ReportsTheAncestor(TreeAdapter):
    """Frees a leaf's tail as the reference does, but reports its edge's first block."""

    def evict(self, count: object) -> Any:
        freed = super().evict(count)
        return {"freed": [block - 1 for block in freed["freed"]]}


def _inadmissible(profile: Any) -> Any:
    lockstep = Lockstep(ReportsTheAncestor(reference.RadixTree, "ancestor"), ALL, profile=profile)
    lockstep.run({"op": "reset", "num_blocks": 4, "block_size": 1})
    lockstep.run(_insert([1, 2]))
    with pytest.raises(Disagreement) as raised:
        lockstep.run({"op": "evict", "count": 1})
    return raised.value.difference


def test_an_inadmissible_choice_is_a_finding_naming_the_declared_modes() -> None:
    """R-EVICT-2, R-EVICT-1: under whole-node eviction, freeing a leaf's first block
    instead of its tail is not adopted: with recency compared it is not the least
    recently used tail, without it an ancestor freed before its descendant. The
    finding says which modes were declared."""
    found = _inadmissible(WHOLE_NODES)
    assert found.kind == "inadmissible" and found.rule == "R-EVICT-2"
    assert "(declared: eviction_granularity = whole_leaf_node, evicted_set = covering)" in (
        found.cause
    )
    own_recency = parse({"tolerate": {**WHOLE_NODES.modes, "recency": "not_compared"}})
    found = _inadmissible(own_recency)
    assert found.kind == "inadmissible" and found.rule == "R-EVICT-1"
    assert "deepest first" in found.cause and "recency = not_compared" in found.cause


def test_would_evict_dry_runs_a_clone_under_a_quarantine() -> None:
    """R-EPOCH-3, R-INS-5: with quarantined blocks the answer comes from a dry run on a
    clone of the reference, which leaves the reference as it was."""
    lockstep = Lockstep(TreeAdapter(reference.RadixTree, "ref"), ALL)
    assert not lockstep.would_evict(_insert([1]))  # no tree yet
    lockstep.run({"op": "reset", "num_blocks": 3, "block_size": 1})
    lockstep.run(_insert([1, 2, 3]))
    assert lockstep.would_evict(_insert([4]))  # full pool, evictable leaf
    assert not lockstep.would_evict(_insert([1.5]))  # refused before anything
    assert not lockstep.would_evict(_insert([1, 2, 3, 4, 5]))  # no room at all
    lockstep.run({"op": "reader"})
    lockstep.run({"op": "evict", "count": 1})  # block 2 waits in quarantine
    lockstep.run({"op": "leave", "snapshot": 1})
    before = lockstep.oracle.dump()
    assert lockstep.oracle.tree.stats().quarantined == 1
    assert not lockstep.would_evict(_insert([4]))  # the quarantine is reclaimed instead
    assert lockstep.would_evict(_insert([4, 5]))  # one more block must be evicted
    assert lockstep.oracle.dump() == before
    trial = copy_reference(lockstep.oracle)
    assert trial.dump() == before and trial.tree is not lockstep.oracle.tree


def test_the_adopting_oracle_passes_refusals_on_as_kinds() -> None:
    """R-INS-6, R-ERR-1: an adopted insert or evict the reference refuses is its kind;
    an answer with nothing to adopt leaves the step to the plain call."""
    oracle, book = OracleAdapter(), LeaseBook()
    oracle.reset(1, 1)
    answer = {"length": 2, "blocks": [0, 1], "reused": 0, "allocated": [0, 1], "evicted": []}
    step = _insert([1, 2])
    assert adopting_outcome(oracle, book, step, {"ok": answer}, WHOLE_NODES) == {
        "error": "out_of_blocks"
    }
    evict = {"op": "evict", "count": -1}
    assert adopting_outcome(oracle, book, evict, {"ok": {"freed": []}}, WHOLE_NODES) == {
        "error": "invalid_argument"
    }
    assert adopting_outcome(oracle, book, evict, {"ok": {"freed": "x"}}, WHOLE_NODES) is None
    assert adopting_outcome(oracle, book, evict, {"ok": {"freed": []}}, STRICT) is None
    plain = TreeAdapter(reference.RadixTree, "plain")
    assert adopting_outcome(plain, book, evict, {"ok": {"freed": []}}, WHOLE_NODES) is None


def test_saved_traces_replay(tmp_path: Path) -> None:
    """``--save-traces``: each finding's shrunk trace as ``<target>-<rule>.jsonl``."""
    report = run_kit(TreeAdapter(EvictedIdsSorted, "sorted"), kit=KitSettings(first=True))
    written = save_traces([report], tmp_path / "traces")
    assert [path.name for path in written] == ["sorted-R-EVICT-4.jsonl"]
    lines = written[0].read_text().splitlines()
    assert json.loads(lines[0])["op"] == "reset" and "actual" in json.loads(lines[-1])
