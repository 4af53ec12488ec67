"""``explain --profile``: a target beside the reference, compared as the kit compares it
under its deviation profile -- declared policy differences followed, not marked, and
what follows them still compared; an inadmissible choice still marked."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kachedb_radix.spec.cli.main import main as cli_main
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.profile import parse
from kachedb_radix.spec.explain import record
from kachedb_radix.spec.mutants.recency import ClockFrozenOnMatch
from tests.kit.test_profile import WHOLE_NODES, WholeLeafEviction
from tests.support.paths import ROOT

#: A two-block leaf in a two-block pool; the next insert needs one block. The
#: reference evicts the leaf's tail only (R-EVICT-1); a whole-leaf evictor frees both.
STEPS: list[dict[str, Any]] = [
    {"op": "reset", "num_blocks": 2, "block_size": 1},
    {"op": "insert", "tokens": [1, 2], "namespace": None, "pin": False},
    {"op": "insert", "tokens": [3], "namespace": None, "pin": False},
    {"op": "match", "tokens": [1], "namespace": None, "pin": False},
    {"op": "insert", "tokens": [3, 4], "namespace": None, "pin": False},
    {"op": "stats"},
]

PROFILE_TOML = """
name = "whole-nodes"
[tolerate]
eviction_granularity = "whole_leaf_node"
evicted_set = "covering"
recency = "not_compared"
"""


def test_strict_marks_the_policy_difference() -> None:
    """R-EVICT-1: without a profile the whole-leaf eviction is where the two part ways."""
    recording = record(STEPS, TreeAdapter(WholeLeafEviction, "whole"), title="t", source="s")
    assert recording.first_difference == 2
    assert recording.frames[2].difference is not None
    assert recording.frames[2].difference.startswith("outcome")


def test_under_its_profile_the_reference_follows_and_compares_the_rest() -> None:
    """R-EVICT-1, R-INS-5: under a profile declaring whole-node eviction the step is
    declared, not marked: the reference's side shows the spec's own eviction (the tail
    block only) beside the target's, and keeps the state the kit adopted -- the target's
    choice -- which the later match and insert run on, still compared."""
    recording = record(
        STEPS, TreeAdapter(WholeLeafEviction, "whole"), title="t", source="s", profile=WHOLE_NODES
    )
    assert recording.first_difference is None, [f.difference for f in recording.frames]
    frame = recording.frames[2]
    assert dict(frame.declared)["R-INS-5"].startswith("declared: frees whole nodes covering")
    spec, theirs = frame.sides
    assert spec.outcome is not None and spec.outcome["ok"]["evicted"] == [1]
    assert theirs.outcome is not None and theirs.outcome["ok"]["evicted"] == [1, 0]
    assert spec.adopted is not None and spec.adopted.outcome is not None
    assert spec.adopted.outcome["ok"]["evicted"] == [1, 0]
    assert spec.note == "the spec's own outcome; the kit adopts whole's choice after it"
    # The views: the next step starts from the adopted state, and says so.
    from kachedb_radix.spec.explain import frame_views

    views = frame_views(recording)
    assert views[2][0]["adopted"]["outcome"].endswith("evicted 1,0")
    assert views[3][0]["origin"].startswith("starts from the state the kit adopted at step 3")
    # The match after it sees the same (emptied) tree on both sides.
    match = recording.frames[3].sides
    assert (
        match[0].outcome == match[1].outcome == {"ok": {"length": 0, "blocks": [], "lease": None}}
    )


def test_a_profile_does_not_hide_other_differences() -> None:
    """R-LRU-1: a profile that tolerates only eviction still marks a frozen clock."""
    eviction_only = parse(
        {"tolerate": {"eviction_granularity": "whole_leaf_node", "evicted_set": "covering"}}
    )
    recording = record(
        STEPS,
        TreeAdapter(ClockFrozenOnMatch, "frozen"),
        title="t",
        source="s",
        profile=eviction_only,
    )
    assert recording.first_difference is not None
    # ... while a profile that does not compare recency lets it pass.
    quiet = record(
        STEPS,
        TreeAdapter(ClockFrozenOnMatch, "frozen"),
        title="t",
        source="s",
        profile=WHOLE_NODES,
    )
    assert quiet.first_difference is None


def test_an_inadmissible_choice_is_still_marked() -> None:
    """R-PIN-3: an evictor that frees a pinned block is not followed under any profile."""
    steps: list[dict[str, Any]] = [
        {"op": "reset", "num_blocks": 2, "block_size": 1},
        {"op": "insert", "tokens": [1, 2], "namespace": None, "pin": True},
        {"op": "evict", "count": 1},
    ]

    class FreesPinned(TreeAdapter):
        def evict(self, count: object) -> Any:
            return {"freed": [1]}  # block 1 is pinned by the live lease

    recording = record(
        steps,
        FreesPinned(WholeLeafEviction, "pinned"),
        title="t",
        source="s",
        profile=WHOLE_NODES,
    )
    # Freeing a pinned block is a safety failure, which no profile waives: marked, and
    # named as what it is (the reference did what the spec does instead).
    assert recording.first_difference == 2
    finding = recording.frames[2].finding
    assert finding is not None and finding.kind == "safety" and finding.rule == "R-PIN-3"
    assert recording.frames[2].sides[0].outcome == {"ok": {"freed": []}}  # all pinned


def test_an_inadmissible_choice_shows_the_specs_outcome_beside_it() -> None:
    """R-EVICT-2: under a profile that tolerates whole-node eviction but compares
    recency, evicting the newer leaf is not followed: the step is marked, the reference
    side says why it did not adopt and shows the spec's own eviction."""
    steps: list[dict[str, Any]] = [
        {"op": "reset", "num_blocks": 2, "block_size": 1},
        {"op": "insert", "tokens": [1], "namespace": None, "pin": False},
        {"op": "insert", "tokens": [2], "namespace": None, "pin": False},
        {"op": "evict", "count": 1},
    ]

    class NewestFirst(TreeAdapter):
        def evict(self, count: object) -> Any:
            return {"freed": [1]}  # block 1 holds [2], used after block 0

    profile = parse(
        {"tolerate": {"eviction_granularity": "whole_leaf_node", "evicted_set": "covering"}}
    )
    recording = record(
        steps, NewestFirst(WholeLeafEviction, "newest"), title="t", source="s", profile=profile
    )
    frame = recording.frames[3]
    assert frame.finding is not None and frame.finding.kind == "inadmissible"
    assert frame.finding.rule == "R-EVICT-2" and frame.difference is not None
    reference = frame.sides[0]
    assert reference.note is not None and reference.note.startswith("not adopted")
    assert reference.outcome == {"ok": {"freed": [0]}}


def test_cli_profile_file_strict_and_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command line: a profile file makes the whole-leaf target agree (exit 0);
    ``--profile strict`` or none marks it (exit 1); a bad profile, or a profile
    without a target, is a usage error (exit 2) without a traceback."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(json.dumps(step) for step in STEPS) + "\n")
    profile = tmp_path / "whole.toml"
    profile.write_text(PROFILE_TOML)
    target = ["--target", "tests.kit.test_profile:WholeLeafEviction"]
    page = tmp_path / "page.html"
    assert cli_main(["explain", str(trace), *target, "--profile", str(profile)]) == 0
    assert "profile whole-nodes" in capsys.readouterr().out
    assert (
        cli_main(["explain", str(trace), *target, "--profile", str(profile), "--html", str(page)])
        == 0
    )
    assert "profile whole-nodes" in page.read_text()
    assert cli_main(["explain", str(trace), *target]) == 1
    assert cli_main(["explain", str(trace), *target, "--profile", "strict"]) == 1
    capsys.readouterr()
    bad = tmp_path / "bad.toml"
    unknown = "R-" + "NOPE-1"  # spelt apart: tests/kit/test_rules.py reads every cited id
    bad.write_text(f'[waive]\n{unknown} = "x"\n')
    with pytest.raises(SystemExit) as stop:  # refused while parsing (issue 32)
        cli_main(["explain", str(trace), *target, "--profile", str(bad)])
    assert stop.value.code == 2 and unknown in capsys.readouterr().err
    assert cli_main(["explain", str(trace), "--profile", str(profile)]) == 2
    assert "--profile needs a --target" in capsys.readouterr().err


FROZEN_CLOCK_WAIVED = parse({"name": "frozen-clock", "waive": {"R-LRU-3": "keeps its own clock"}})


def test_a_waived_rule_is_shown_as_waived_and_what_follows_it_too() -> None:
    """R-LRU-3: a difference the kit attributes to a waived rule is not marked: the frame
    says which rule the profile waives and why, later frames until the next reset say
    they follow it, and a new trace after a reset is attributed afresh."""
    steps = [*STEPS, dict(STEPS[0], trace="again"), *STEPS[1:]]
    recording = record(
        steps,
        TreeAdapter(ClockFrozenOnMatch, "frozen"),
        title="t",
        source="s",
        profile=FROZEN_CLOCK_WAIVED,
    )
    assert recording.first_difference is None, [f.difference for f in recording.frames]
    waived = [frame.waived for frame in recording.frames]
    assert waived[:3] == [None, None, None]
    assert waived[3] == "R-LRU-3 waived by profile 'frozen-clock': keeps its own clock"
    assert all(w is not None and w.startswith("follows the waived R-LRU-3") for w in waived[4:6])
    assert waived[6:9] == [None, None, None]
    assert waived[9] is not None and waived[9].startswith("R-LRU-3 waived")
    # Without the waiver the same steps are marked, and nothing is shown as waived.
    strict = record(steps, TreeAdapter(ClockFrozenOnMatch, "frozen"), title="t", source="s")
    assert strict.first_difference == 3
    assert all(frame.waived is None for frame in strict.frames)


def test_the_text_and_the_page_show_the_waiver() -> None:
    """R-LRU-3: the text report and the page's data carry the waived steps."""
    from kachedb_radix.spec.explain import frame_views, text_report
    from kachedb_radix.spec.explain.page import page_data

    recording = record(
        STEPS,
        TreeAdapter(ClockFrozenOnMatch, "frozen"),
        title="t",
        source="s",
        profile=FROZEN_CLOCK_WAIVED,
    )
    views = frame_views(recording)
    text = text_report(recording, views)
    # The waived step is declared (the profile's reason); those after it are not compared.
    assert "declared: R-LRU-3 (keeps its own clock)" in text
    assert "≈ not compared: follows the waived R-LRU-3 difference at step 4" in text
    assert "no difference in 6 steps (2 steps not compared); 1 declared difference" in text
    frames = page_data(recording, views)["frames"]
    assert [bool(frame["declared"]) for frame in frames] == [False] * 3 + [True] + [False] * 2
    assert [frame["waived"] is not None for frame in frames] == [False] * 4 + [True] * 2
    assert all(frame["differs"] is None for frame in frames)


def test_an_inadmissible_choice_after_a_waived_difference_is_still_marked() -> None:
    """R-PIN-3, R-LRU-3: a waived difference does not hide a later inadmissible choice
    (an evictor that frees a pinned block), though the trees may have parted."""
    steps: list[dict[str, Any]] = [
        {"op": "reset", "num_blocks": 4, "block_size": 1},
        {"op": "insert", "tokens": [1, 2], "namespace": None, "pin": False},
        {"op": "match", "tokens": [1], "namespace": None, "pin": False},
        {"op": "insert", "tokens": [5], "namespace": None, "pin": True},
        {"op": "evict", "count": 1},
    ]

    class FrozenFreesPinned(TreeAdapter):
        def evict(self, count: object) -> Any:
            return {"freed": [2]}  # block 2 holds [5], pinned by the live lease

    profile = parse(
        {
            "name": "lenient",
            "tolerate": {"eviction_granularity": "whole_leaf_node", "evicted_set": "covering"},
            "waive": {"R-LRU-3": "keeps its own clock"},
        }
    )
    recording = record(
        steps, FrozenFreesPinned(ClockFrozenOnMatch, "frozen"), title="t", source="s",
        profile=profile,
    )  # fmt: skip
    assert [frame.waived is not None for frame in recording.frames[:4]] == [
        False, False, True, True,
    ]  # fmt: skip
    assert recording.first_difference == 4, [(f.difference, f.waived) for f in recording.frames]
    finding = recording.frames[4].finding
    assert finding is not None and finding.kind == "safety" and finding.rule == "R-PIN-3"


# ---------------------------------------------------------------------- SGLang's own code

SGLANG_REQUIRED = os.environ.get("KACHEDB_RADIX_REQUIRE_SGLANG") == "1"


def sglang_target(profile: str | None = None) -> Any:
    """SGLang 0.5.23 as the kit resolves it (its shipped profile, or ``profile``); skips
    without the wheel unless ``KACHEDB_RADIX_REQUIRE_SGLANG=1``, where that fails."""
    from kachedb_radix.spec.conform.targets import TargetError, resolve

    try:
        return resolve("sglang", profile=profile)
    except TargetError as exc:
        if SGLANG_REQUIRED:
            pytest.fail(f"{exc} (KACHEDB_RADIX_REQUIRE_SGLANG=1: .ci/run installs it)")
        pytest.skip(str(exc))


def test_sglang_beside_the_spec_each_side_does_what_it_does() -> None:
    """R-EVICT-1, R-ALLOC-2: the demo beside SGLang under its shipped profile. At step 18
    SGLang evicts whole nodes (4 blocks, #6-9) where the spec evicts 3 (#7, #6, #9): a
    declared difference, both outcomes kept, the adopted state beside the spec's; SGLang's
    panel says what SGLang did, citing rules only as followed or departed from. At the
    strict spec the same step is the one difference that matters: the stamp-only ones
    before it are minor."""
    from kachedb_radix.spec.explain import frame_views, scenario

    steps = scenario("demo").steps
    target = sglang_target()
    candidate = target.open()
    try:
        recording = record(steps, candidate, title="t", source="s", profile=target.profile)
    finally:
        candidate.close()
    declared = [frame.number for frame in recording.frames if frame.declared]
    assert declared == [18] and recording.first_difference is None
    frame = recording.frames[17]
    assert "R-EVICT-1" in dict(frame.declared)
    spec, theirs = frame.sides
    assert spec.outcome is not None and theirs.outcome is not None and spec.adopted is not None
    assert spec.outcome["ok"]["evicted"] == [7, 6, 9]
    assert theirs.outcome["ok"]["evicted"] == [6, 7, 8, 9]
    assert spec.adopted.outcome == theirs.outcome
    views = frame_views(recording)
    panel = dict(
        zip((rule for rule, _ in views[17][1]["rules"]), views[17][1]["verdicts"], strict=True)
    )
    # Declared departures are ticked as declared, in the panel as in the banner.
    assert panel["R-EVICT-1"] == "declared" and panel["R-ALLOC-2"] == "declared"
    ruling = views[17][0]["ruling"]
    assert ruling.kind == "declared" and set(ruling.rules("declared")) >= {"R-EVICT-1", "R-ALLOC-2"}
    reasons = " ".join(reason for _, reason in views[17][1]["rules"])
    assert "the smallest free ids are taken" not in reasons and "took #8-9,6-7,12" in reasons
    strict = sglang_target("strict")
    candidate = strict.open()
    try:
        marked = record(steps, candidate, title="t", source="s", profile=strict.profile)
    finally:
        candidate.close()
    assert marked.first_major == 17 and marked.first_difference is not None
    minor = [frame.number for frame in marked.frames if frame.minor]
    assert len(minor) >= 8 and 18 not in minor  # stamps only, folded behind step 18
    # R-SPLIT-2, on the trace SGLang's profile ships for it: its panel says it departs,
    # with the stamps (t=1 kept by the spec, t=2 by SGLang), not the spec's reasoning.
    trace = ROOT / "spec" / "peers" / "traces" / "sglang-0-5-23-R-SPLIT-2.jsonl"
    candidate = strict.open()
    try:
        shipped = record(
            [json.loads(line) for line in trace.read_text().splitlines()],
            candidate, title="t", source="s", profile=strict.profile,
        )  # fmt: skip
    finally:
        candidate.close()
    view = frame_views(shipped)[2][1]
    said = {
        rule: (text, verdict)
        for (rule, text), verdict in zip(view["rules"], view["verdicts"], strict=True)
    }
    assert said["R-SPLIT-2"] == (
        "#2 (not used by this step) went from t=1 to t=2 in the split",
        "departs",
    )
