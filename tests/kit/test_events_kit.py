"""The events level in the kit (R-EVENT-*, R-ROUTE-*): both twins pass it, every planted
event bug is caught with its rule, the stream is compared under a profile's tolerances,
it travels over the stdio protocol (version 5), and SGLang 0.5.23's own event recording
is checked: its hashes are what the ``sglang`` schemes compute, and each of its genuine
differences has a minimal trace."""

from __future__ import annotations

import base64
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kachedb_radix import reference
from kachedb_radix.reference.events import (
    AllBlocksCleared,
    BlockHasher,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    encode_batch,
)
from kachedb_radix.reference.router.wire import decode_for_router
from kachedb_radix.spec.conform import events as kit_events
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.profile import STRICT, load, parse
from kachedb_radix.spec.conform.replay import read_trace, replay
from kachedb_radix.spec.conform.run import KitSettings, run_kit
from kachedb_radix.spec.mutants import MUTANTS, check_mutant
from kachedb_radix.spec.peers import TRACES
from tests.conftest import IMPLEMENTATIONS

#: The rules the events level exercises.
EVENT_RULES = {f"R-EVENT-{n}" for n in range(1, 7)} | {f"R-ROUTE-{n}" for n in range(1, 5)}
#: Dynamo's XXH3 for speed; the default scheme is checked by one run below.
FAST = parse({"name": "fast", "events": {"scheme": "xxh3_64"}})
QUICK = KitSettings(examples=40, budget=4_000, shrink=False)


@pytest.mark.slow  # no branch only it covers: the CI coverage run leaves it out (.ci/run)
@pytest.mark.parametrize("impl", sorted(IMPLEMENTATIONS))
def test_both_twins_pass_the_events_level(impl: str) -> None:
    """Every event rule is exercised and passes, with the default hashes too."""
    candidate = TreeAdapter(IMPLEMENTATIONS[impl], impl)
    assert "events" in candidate.levels
    report = run_kit(candidate, candidate.levels, QUICK, profile=FAST)
    assert report.passed, report.explain()
    assert report.exercised >= EVENT_RULES
    default = run_kit(
        candidate, candidate.levels, KitSettings(examples=8, budget=800, shrink=False)
    )
    assert default.passed, default.explain()
    assert "events" not in run_kit(candidate, kit=KitSettings(examples=2, budget=100)).levels


@pytest.mark.parametrize("name", sorted(n for n, m in MUTANTS.items() if m.events))
def test_every_event_mutant_is_killed_with_its_rule(name: str) -> None:
    result = check_mutant(MUTANTS[name])
    assert result.killed and result.right_rule, (name, result.rules)


def _answer(*batches: KVEventBatch) -> dict[str, Any]:
    return {"ok": kit_events.encode_payloads([encode_batch(b) for b in batches])}


def test_the_stream_is_compared_under_the_profile_s_tolerances() -> None:
    """R-EVENT-3, R-EVENT-4: removal order and the split of stores into events are the
    spec's unless declared; ``ts`` is compared with the clock; a payload that does not
    decode is named; right after a reset a declared announcement is dropped."""
    stored = [
        BlockStored([1], None, [5], 1, None, "GPU", None),
        BlockStored([2], 1, [6], 1, None, "GPU", None),
    ]
    one = BlockStored([1, 2], None, [5, 6], 1, None, "GPU", None)
    removed = BlockRemoved([2, 1], "GPU")
    strict, lenient = (
        dict(STRICT.modes),
        {**STRICT.modes, "store_events": "any", "removal_order": "any", "reset_events": "cleared"},
    )

    def shown(modes: dict[str, str], *events: Any, **flags: Any) -> Any:
        return kit_events.normalise(
            _answer(KVEventBatch(3.0, list(events))), modes, with_ts=False, lenient=False, **flags
        )

    assert shown(strict, *stored) != shown(strict, one)
    assert shown(lenient, *stored) == shown(lenient, one)
    assert shown(strict, removed) != shown(strict, BlockRemoved([1, 2], "GPU"))
    assert shown(lenient, removed) == shown(lenient, BlockRemoved([1, 2], "GPU"))
    cleared = kit_events.normalise(
        _answer(KVEventBatch(0.0, [AllBlocksCleared()])), lenient, with_ts=True, lenient=False,
        after_reset=True,
    )  # fmt: skip
    assert cleared == {"ok": {"batches": []}}
    timed = kit_events.normalise(
        _answer(KVEventBatch(3.0, [])), strict, with_ts=True, lenient=False
    )
    assert timed["ok"]["batches"] == [{"events": [], "ts": 3.0}]
    bad = {"ok": {"batches": [base64.b64encode(b"\xc1").decode()]}}
    assert (
        "undecodable"
        in kit_events.normalise(bad, strict, with_ts=False, lenient=False)["ok"]["batches"][0]
    )
    assert kit_events.normalise({"ok": {"batches": 3}}, strict, with_ts=False, lenient=False) == {
        "ok": {"malformed_answer": {"batches": 3}}
    }
    assert kit_events.payloads_of({"batches": ["!"]}) is None


def test_events_travel_over_the_stdio_protocol() -> None:
    """Protocol 5 on: the scheme at reset, the batches as base64 payloads."""
    from kachedb_radix.spec.protocol.client import StdioCandidate
    from kachedb_radix.spec.protocol.messages import PROTOCOL_VERSION
    from tests.protocol.test_stdio import SERVE

    candidate = StdioCandidate(SERVE)
    try:
        assert candidate.protocol == PROTOCOL_VERSION and "events" in candidate.operations
        report = run_kit(candidate, candidate.levels - {"tiers"}, QUICK, profile=FAST)
    finally:
        candidate.close()
    assert report.passed, report.explain()
    assert report.exercised >= EVENT_RULES


# ---------------------------------------------------------------------------- SGLang


def _sglang() -> Any:
    from kachedb_radix.spec.peers import sglang

    try:
        sglang.load(events=True)
    except ImportError as exc:
        if os.environ.get("KACHEDB_RADIX_REQUIRE_SGLANG") == "1":
            raise
        pytest.skip(f"SGLang's event recording cannot run here: {exc}")
    return sglang


def test_sglang_hashes_are_the_sglang_schemes() -> None:
    """R-EVENT-2: SGLang's own recorder (its C++ page hash built from the wheel) names
    blocks as BlockHasher("sglang") does, and in Dynamo's format as "sglang_dynamo"."""
    sglang = _sglang()
    for scheme in ("sglang", "sglang_dynamo"):
        candidate = sglang.SGLangCandidate()
        candidate.reset(64, 3, events={"scheme": scheme})
        hasher = BlockHasher(scheme)
        for tokens, namespace in (([1, 2, 3, 4, 5, 6, 7], None), ([9] * 9, "tenant")):
            candidate.insert(tokens, namespace, False)
            chain = [hasher.external(h) for h in hasher.chain(tokens, 3, namespace)]
            stored: list[int] = []
            for payload in candidate.events()["batches"]:
                batch = decode_for_router(base64.b64decode(payload))
                for event in batch.events:
                    stored += getattr(event, "block_hashes", [])
            assert stored == chain, (scheme, tokens)
    with pytest.raises(Exception, match="not 'sha256_cbor'"):
        sglang.SGLangCandidate().reset(4, 1, events={"scheme": "sha256_cbor"})


#: Each event trace of SGLang, and the profile it was found under: the shipped one, less
#: the tolerances of the differences found after it (so each is the first found).
def _profiles() -> dict[str, Any]:
    from kachedb_radix.spec.peers import sglang

    text = sglang.PROFILE.read_text(encoding="utf-8")
    without_order = text.replace('removal_order = "any"\n', "")
    without_waiver = without_order.replace("R-EVENT-6 = ", "# R-EVENT-6 = ")
    return {
        "R-EVENT-1": without_waiver.replace('reset_events = "cleared"\n', ""),
        "R-EVENT-6": without_waiver,
        "R-EVENT-4": without_order,
        "R-EVENT-2": text,
    }


@pytest.mark.parametrize("rule", ["R-EVENT-1", "R-EVENT-6", "R-EVENT-4", "R-EVENT-2"])
def test_each_sglang_event_difference_has_a_minimal_trace(rule: str, tmp_path: Path) -> None:
    """SGLang 0.5.23's stream: a fresh cache announces a clear (R-EVENT-1); its
    BlockStored leaves out lora_name, which vLLM's schema requires (R-EVENT-6); a node's
    pages are removed top-down (R-EVENT-4); in its default format two namespaces' blocks
    carry one hash (R-EVENT-2). Each trace shows it at its last step; the reference
    replays it cleanly but R-EVENT-2's, whose scheme itself drops the namespace."""
    sglang = _sglang()
    path = tmp_path / "profile.toml"
    path.write_text(_profiles()[rule], encoding="utf-8")
    profile = load(path)
    steps = read_trace(TRACES / f"sglang-0-5-23-{rule}.jsonl")
    assert len(steps) <= 6
    differs = replay(steps, sglang.SGLangCandidate(), profile=profile)
    assert differs.difference is not None and differs.difference.rule == rule
    assert differs.difference.index == len(steps) - 1
    if rule != "R-EVENT-2":
        assert replay(steps, TreeAdapter(reference.RadixTree, "reference"), profile=profile).passed


def test_sglang_in_dynamo_format_conforms_with_declared_deviations() -> None:
    """Dynamo's format mixes the namespace into every hash: R-EVENT-2 holds, and what is
    left is declared (R-EVENT-1, R-EVENT-4, R-EVENT-6)."""
    sglang = _sglang()
    profile = load(sglang.PROFILE)
    dynamo = replace(profile, events={"scheme": "sglang_dynamo", "seed": profile.events["seed"]})
    candidate = sglang.SGLangCandidate()
    report = run_kit(
        candidate,
        candidate.levels,
        KitSettings(examples=30, budget=3_000, shrink=False),
        profile=dynamo,
    )
    assert report.passed, report.explain()
    assert {"R-EVENT-1", "R-EVENT-4", "R-EVENT-6"} <= set(report.deviations())
