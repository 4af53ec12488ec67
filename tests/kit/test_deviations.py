"""What real engines legitimately do otherwise, declared in a profile, and held to exactly
that: namespace folding, a match that leaves the last token (vLLM's rule), a narrower
token range; rules a profile leaves without inputs read "not exercised"; a broken dump
is a safety failure no waiver absorbs; ``--examples`` is honoured."""

from __future__ import annotations

from typing import Any

import pytest

from kachedb_radix import reference
from kachedb_radix.reference.errors import TokenRangeError
from kachedb_radix.reference.namespaces import check_namespace
from kachedb_radix.reference.policies import check_retention
from kachedb_radix.reference.results import InsertResult, MatchResult
from kachedb_radix.reference.tokens import as_token_list
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.lockstep import Lockstep
from kachedb_radix.spec.conform.profile import STRICT, Profile, parse
from kachedb_radix.spec.conform.replay import replay
from kachedb_radix.spec.conform.run import KitReport, KitSettings, run_kit
from tests.kit.test_profile import LENIENT

QUICK = KitSettings(examples=120, budget=12_000, shrink_seconds=5)


def _run(tree: type[reference.RadixTree], profile: Profile = STRICT, **kit: Any) -> KitReport:
    settings = KitSettings(**{**QUICK.__dict__, **kit})
    return run_kit(TreeAdapter(tree, tree.__name__), kit=settings, profile=profile)


def _rows(report: KitReport) -> dict[str, Any]:
    return {row.rule: row for row in report.table()}


# ---------------------------------------------------------------------- namespace folding


def _fold(namespace: object) -> Any:
    return None if namespace == "" else namespace


class EmptySaltIsDefault(reference.RadixTree):
    """An engine that takes an empty cache salt for no salt: ``""`` is the default."""

    def match(self, tokens: object, namespace: str | None = None, *, pin: bool = False) -> Any:
        return super().match(tokens, _fold(namespace), pin=pin)

    def insert(
        self,
        tokens: object,
        namespace: str | None = None,
        *,
        pin: bool = False,
        priority: int | None = None,
        retain_for: int | None = None,
    ) -> Any:
        return super().insert(
            tokens, _fold(namespace), pin=pin, priority=priority, retain_for=retain_for
        )

    def snapshot(self) -> Any:
        return _FoldedView(super().snapshot())

    def reader(self) -> Any:
        return _FoldedView(super().reader())


class _FoldedView:
    """A snapshot or reader of :class:`EmptySaltIsDefault`, folding as its tree does."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def match(self, tokens: object, namespace: str | None = None) -> Any:
        return self._inner.match(tokens, _fold(namespace))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class EmptySaltAndAIsDefault(EmptySaltIsDefault):
    """Folds ``""`` and, undeclared, ``"a"`` into the default namespace."""

    def match(self, tokens: object, namespace: str | None = None, *, pin: bool = False) -> Any:
        return super().match(tokens, None if namespace == "a" else namespace, pin=pin)

    def insert(
        self,
        tokens: object,
        namespace: str | None = None,
        *,
        pin: bool = False,
        priority: int | None = None,
        retain_for: int | None = None,
    ) -> Any:
        return super().insert(
            tokens,
            None if namespace == "a" else namespace,
            pin=pin,
            priority=priority,
            retain_for=retain_for,
        )


FOLDS_EMPTY = parse({"name": "folds-empty", "namespaces": {"as_default": [""]}})


@pytest.mark.slow
def test_an_engine_folding_the_empty_salt_fails_strict_and_conforms_declared() -> None:
    """R-NS-1, R-NS-2: taking ``""`` for the default namespace matches across the two --
    a safety failure without a profile; declared, the oracle and the safety check fold
    the same way and it conforms, R-NS-1 a declared deviation, R-NS-2 still passing."""
    strict = _run(EmptySaltIsDefault, first=True)
    assert strict.findings and strict.findings[0].rule in ("R-NS-2", "R-NS-1", "R-NS-3")
    declared = _run(EmptySaltIsDefault, FOLDS_EMPTY)
    assert declared.passed, declared.explain()
    assert declared.verdict == "conforms with declared deviations"
    rows = _rows(declared)
    assert rows["R-NS-1"].status == "waived" and "'' -> default" in rows["R-NS-1"].reason
    assert rows["R-NS-2"].status == "pass"


@pytest.mark.slow
def test_the_safety_check_holds_an_engine_to_exactly_its_declared_folding() -> None:
    """R-NS-2: folding one more name than declared is still matching across namespaces."""
    report = _run(EmptySaltAndAIsDefault, FOLDS_EMPTY, examples=300)
    safety = [found for found in report.findings if found.kind == "safety"]
    assert any("R-NS-2" in found.rules for found in safety), report.explain()
    # The engine folding exactly what is declared passes the same profile (above).


# ---------------------------------------------------------------------- match cap


class LeavesTheLastToken(reference.RadixTree):
    """vLLM's scheduler rule: a match reuses at most ``len(tokens) - 1`` tokens, so the
    last token is recomputed for its logits; inserting a fully cached prompt therefore
    needs a block for its recomputed last block, evicting one (off the prompt's own
    path) when none is free, and frees it again once it finds the block cached."""

    def match(self, tokens: object, namespace: str | None = None, *, pin: bool = False) -> Any:
        token_list = as_token_list(tokens)
        check_namespace(namespace)
        found: MatchResult = super().match(token_list[:-1], namespace, pin=pin)
        return found

    def insert(
        self,
        tokens: object,
        namespace: str | None = None,
        *,
        pin: bool = False,
        priority: int | None = None,
        retain_for: int | None = None,
    ) -> Any:
        token_list = as_token_list(tokens)
        check_namespace(namespace)
        check_retention(priority, retain_for)  # every argument before anything changes
        size, wanted = self.block_size, len(token_list) // self.block_size
        recomputed: list[int] = []
        cached = self.snapshot().match(token_list, namespace).length == wanted * size
        if wanted and len(token_list) % size == 0 and cached and self.stats().free == 0:
            path, _ = self._walk(namespace, token_list, wanted)
            self._adjust_pins(path, +1)  # the prompt's own path is never the room
            recomputed = self._evict_blocks(1, path)
            self._adjust_pins(path, -1)
        result: InsertResult = super().insert(
            token_list, namespace, pin=pin, priority=priority, retain_for=retain_for
        )
        return InsertResult(
            result.length,
            result.blocks,
            result.reused,
            result.allocated,
            (*recomputed, *result.evicted),
            result.lease,
        )


LAST_TOKEN = parse({"name": "last-token", "match_cap": "last_token"})


@pytest.mark.slow
def test_a_match_cap_fails_strict_and_conforms_declared() -> None:
    """R-MATCH-1, R-INS-5: leaving the last token fails the strict spec (a shorter match,
    an insert evicting with blocks to spare); declared, the oracle caps its matches and
    finds the recomputed block its room the same way, and every other rule still holds."""
    strict = _run(LeavesTheLastToken, first=True)
    assert strict.findings and strict.findings[0].rule.startswith(("R-MATCH-", "R-INS-"))
    declared = _run(LeavesTheLastToken, LAST_TOKEN, examples=200)
    assert declared.passed, declared.explain()
    rows = _rows(declared)
    assert rows["R-MATCH-1"].status == "waived" and rows["R-INS-5"].status == "waived"
    assert rows["R-PIN-3"].status == "pass" and rows["R-EVICT-2"].status == "pass"


# ---------------------------------------------------------------------- token range


def test_a_fully_cached_insert_under_the_match_cap_evicts_off_its_path() -> None:
    """R-INS-5 under ``match_cap = "last_token"``, step by step: with the pool full, the
    insert of a cached prompt evicts the least recently used block off its own path for
    the recomputed last block; the oracle expects exactly that. The strict spec does
    not (an insert that needs no block evicts nothing)."""
    trace: list[dict[str, Any]] = [
        {"op": "reset", "num_blocks": 3, "block_size": 1},
        {"op": "insert", "tokens": [1, 2], "namespace": None, "pin": False},
        {"op": "insert", "tokens": [3], "namespace": None, "pin": False},
        {"op": "insert", "tokens": [1, 2], "namespace": None, "pin": False},
        {"op": "match", "tokens": [1, 2], "namespace": None, "pin": False},
    ]
    candidate = TreeAdapter(LeavesTheLastToken, "last-token")
    lockstep = Lockstep(candidate, candidate.levels, profile=LAST_TOKEN)
    expected = [lockstep.run(step) for step in trace]
    lockstep.finish(final=True)
    assert expected[3]["ok"]["evicted"] == [2]  # the block of [3], not one of the prompt's
    assert expected[4]["ok"]["length"] == 1  # the match leaves the last token
    assert replay(trace, candidate, profile=LAST_TOKEN).passed
    strict = replay(trace, candidate)
    assert not strict.passed and strict.difference is not None
    assert "R-INS-5" in strict.difference.rules


def _int32(tokens: object) -> list[int]:
    token_list = as_token_list(tokens)  # tokens first, the whole input (R-TOK-5)
    if any(token >= 2**31 for token in token_list):
        raise TokenRangeError("token ids are int32 here")
    return token_list


class Int32Tokens(reference.RadixTree):
    """Token ids as int32, as its tokenizer emits them: 2**31 and up are out of range.
    It publishes no snapshots (so no snapshot match to narrow as well)."""

    snapshot = None  # type: ignore[assignment]

    def match(self, tokens: object, namespace: str | None = None, *, pin: bool = False) -> Any:
        return super().match(_int32(tokens), namespace, pin=pin)

    def insert(
        self,
        tokens: object,
        namespace: str | None = None,
        *,
        pin: bool = False,
        priority: int | None = None,
        retain_for: int | None = None,
    ) -> Any:
        return super().insert(
            _int32(tokens), namespace, pin=pin, priority=priority, retain_for=retain_for
        )


class Int32TokensUnchecked(reference.RadixTree):
    """Declares int32 ids but accepts any 32-bit id anyway."""


INT32 = parse({"name": "int32", "token_limit": 2**31})


@pytest.mark.slow
def test_a_narrower_token_range_is_declared_and_checked_against() -> None:
    """R-TOK-1, R-TOK-3: int32 token ids end every strict example at the first large id;
    declared with ``token_limit``, valid ids are drawn below it, the limit is the range
    probe, and an engine that does not refuse at its own declared limit is caught."""
    strict = _run(Int32Tokens, first=True)
    # Refused as out of range (R-TOK-1, R-TOK-3), or as the wrong error where a bad
    # namespace comes with the large id (R-ERR-1: the namespace is what is wrong).
    assert strict.findings and strict.findings[0].rule in ("R-TOK-1", "R-TOK-3", "R-ERR-1")
    assert strict.findings[0].actual == {"error": "token_range"}
    assert any(token >= 2**31 for token in strict.findings[0].trace[-1]["tokens"])
    declared = _run(Int32Tokens, INT32)
    assert declared.passed, declared.explain()
    rows = _rows(declared)
    assert rows["R-TOK-1"].status == "waived" and rows["R-TOK-3"].status == "pass"
    loose = _run(Int32TokensUnchecked, INT32, first=True)
    assert loose.findings and loose.findings[0].rule == "R-TOK-3", loose.explain()


# ---------------------------------------------------------------------- inputs left out


@pytest.mark.slow
def test_a_rule_the_profile_leaves_without_inputs_is_not_exercised() -> None:
    """R-TOK-5: with R-TOK-2 and R-TOK-3 waived no bad token is drawn, so the rule that
    judges how bad tokens are reported is "not exercised", saying why -- not "pass"."""
    profile = parse({"waive": {"R-TOK-2": "unchecked", "R-TOK-3": "unchecked"}})
    waived = _rows(_run(reference.RadixTree, profile, budget=3_000))
    assert waived["R-TOK-5"].status == "not exercised"
    assert "R-TOK-2, R-TOK-3, which the profile waives" in waived["R-TOK-5"].reason
    assert _rows(_run(reference.RadixTree, budget=3_000))["R-TOK-5"].status == "pass"


# ---------------------------------------------------------------------- broken dumps


class DropsANamespace(TreeAdapter):
    """A dump that loses the namespaces after the first: blocks cut off from the pool."""

    def dump(self) -> dict[str, Any]:
        dump = super().dump()
        return {**dump, "namespaces": dump["namespaces"][:1]}


class OrphanEdge(TreeAdapter):
    """A dump whose edges lose their children lists."""

    def dump(self) -> dict[str, Any]:
        dump = super().dump()
        for space in dump["namespaces"]:
            for edge in space["children"]:
                edge.pop("children", None)
        return dump


def test_a_structurally_invalid_dump_is_a_safety_failure_no_waiver_absorbs() -> None:
    """R-INV-1, R-DUMP-1: under the most lenient profile (everything waivable waived) a
    dump missing namespaces or children is not filed as waived: it is a safety finding."""
    for adapter in (DropsANamespace, OrphanEdge):
        candidate = adapter(reference.RadixTree, adapter.__name__)
        report = run_kit(candidate, kit=KitSettings(first=True, examples=200), profile=LENIENT)
        assert report.findings, adapter.__name__
        found = report.findings[0]
        assert found.kind == "safety" and found.rule == "R-INV-1", found.explain()
        assert not report.waived or all(f.kind != "safety" for f in report.waived)


# ---------------------------------------------------------------------- --examples


def test_the_examples_asked_for_are_the_examples_run() -> None:
    """``--examples N`` runs N examples, not more (Hypothesis's targeting phase asks for
    extra ones), when the operation budget allows them all."""
    for examples in (5, 60):
        report = _run(reference.RadixTree, examples=examples, budget=10**9, steps=12)
        assert report.examples == examples
