"""The committed conformance report (``docs/conformance/``) is the one the kit makes today.

It is generated output: its table follows SPEC.md's rules, the rule map and every
target's behaviour, so any of those changing makes the committed copy stale. This test
makes it again, with the targets and settings the report records it was made with
(``made_by``), and compares everything but the wall times. Regenerate it with the
command the failure prints.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from kachedb_radix.spec.conform.levels import parse_levels
from kachedb_radix.spec.conform.run import KitReport, KitSettings, kit_settings, run_kit
from kachedb_radix.spec.conform.targets import TargetError, load_profile, resolve
from tests.support.paths import ROOT

COMMITTED = ROOT / "docs" / "conformance" / "report.json"

#: What changes from run to run of the same kit on the same targets: wall times.
VOLATILE = frozenset({"seconds", "first_finding_seconds"})


def _stable(result: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in result.items() if key not in VOLATILE}


def _regenerate(made_by: dict[str, Any]) -> list[KitReport]:
    settings = kit_settings(made_by["settings"])
    levels = None if made_by.get("levels") is None else parse_levels(made_by["levels"])
    profile = made_by.get("profile")
    reports = []
    for name in made_by["targets"]:
        try:
            target = resolve(name, profile=None if profile is None else load_profile(profile))
        except TargetError as exc:
            if name == "sglang" and os.environ.get("KACHEDB_RADIX_REQUIRE_SGLANG") != "1":
                pytest.skip(f"the committed report has SGLang, not installed here: {exc}")
            raise
        candidate = target.open()
        try:
            reports.append(run_kit(candidate, levels, settings, profile=target.profile))
        finally:
            candidate.close()
    return reports


#: The command-line options that set each of the kit's settings.
OPTIONS = {"examples": "--examples", "seed": "--seed", "steps": "--steps", "budget": "--budget"}


def _command(made_by: dict[str, Any]) -> str:
    """The command that makes the report again: its targets and the settings that differ
    from the defaults."""
    defaults = KitSettings()
    words = ["kachedb-radix", "conform", *made_by["targets"]]
    for name, option in OPTIONS.items():
        if made_by["settings"][name] != getattr(defaults, name):
            words += [option, str(made_by["settings"][name])]
    return " ".join([*words, "--report", "docs/conformance"])


def test_the_command_names_the_settings_it_was_made_with() -> None:
    made_by = {"targets": ["accel"], "settings": {**KitSettings().__dict__, "budget": 10_000}}
    expected = "kachedb-radix conform accel --budget 10000 --report docs/conformance"
    assert _command(made_by) == expected


@pytest.mark.slow
def test_the_committed_report_is_what_the_kit_makes_now() -> None:
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))
    made_by = committed.get("made_by")
    assert made_by, f"{COMMITTED} does not say how it was made (regenerate it)"
    fresh = [_stable(report.to_json()) for report in _regenerate(made_by)]
    kept = [_stable(result) for result in committed["results"]]
    command = _command(made_by)
    assert [r["candidate"] for r in fresh] == [r["candidate"] for r in kept], command
    for now, then in zip(fresh, kept, strict=True):
        assert now == then, f"{now['candidate']}: the committed report is stale; run {command}"
