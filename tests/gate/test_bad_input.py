"""The gate's verdict is earned (issue 32): a baseline it cannot read, a field it cannot
divide by, an ``--only`` that matches nothing, a run that would gate nothing -- each is a
one-line refusal, exit 2, with the baseline as it was and no ``--json`` file written;
a verdict that runs says how many checks on how many cases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kachedb_radix.spec.cli import gate as gate_cli
from kachedb_radix.spec.gate import timing
from kachedb_radix.spec.gate.cases import Case
from kachedb_radix.spec.gate.verdicts import Measurement

#: The case every run here measures (scripted, never timed): a cheap host-side one.
CASE = "gpu-host/ids/list/16"
ARGS = ["reference", "--quick", "--only", CASE, "--plain"]


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every case measured at 1 us against a 10 us calibration loop, without timing."""

    def measure(case: Case, policy: timing.Policy) -> Measurement:
        return Measurement(1000.0, 10_000.0, case.calibration, 5)

    monkeypatch.setattr(gate_cli, "measure_case", measure)
    yield


def _refused(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Exit 2, one line naming the problem, nothing written beside the inputs."""
    before = {path: path.read_bytes() for path in tmp_path.iterdir() if path.is_file()}
    status = gate_cli.main([*ARGS, *argv, "--json", str(tmp_path / "run.json")])
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert said in err and len(err.splitlines()) == 1 and "Traceback" not in err
    after = {path: path.read_bytes() for path in tmp_path.iterdir() if path.is_file()}
    assert after == before  # the baseline as it was; no run.json


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "no such file"),  # GATE PASSED on nothing, before issue 32
        (b"\xff\xfe", "not UTF-8 (byte 0xff at offset 0)"),
        (b"\x00{}", "binary, not text"),
        (b"{", "not JSON"),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "nested deeper than 64 levels"),
        (
            b'{"format": 2, "cases": {"%s": {"normalised": 0}}}',
            "normalised must be a number",
        ),
        (b'{"format": 2, "cases": {"%s": {"normalised": "fast"}}}', 'not "fast"'),
        (b'{"format": 2, "cases": {"%s": {"normalised": -1}}}', "not -1"),
        (b'{"format": 2, "cases": {"%s": {"normalised": true}}}', "not true"),
        (b'{"format": 2, "cases": {"%s": {"value": 1e999}}}', "too large for a float"),
        (b'{"format": 2, "cases": {"%s": {"normalised": 1' + b"0" * 400 + b"}}}", "at most 1e300"),
        (b'{"format": 2, "cases": [1, 2]}', "cases must be an object of cases"),
        (b'{"format": 2, "cases": {"%s": 3}}', "cases.%s must be an object"),
        (b'{"format": 2, "limits": {"%s": "fast"}}', "limits.%s must be an object"),
        (b'{"format": 2, "limits": {"%s": {"max_ns": "fast"}}}', "limits.%s.max_ns must be"),
        (b'{"format": 2, "limits": {"%s": {"min_ns": 5}}}', "min_ns is not a limit"),
        (b'{"format": 2, "target": 7}', "target must be a string"),
        (b'{"format": 2, "recorded_with": [1]}', "recorded_with must be an object"),
        (b'{"format": 3}', "baseline format 3"),
    ],
    ids=lambda value: value[:24].decode(errors="replace") if isinstance(value, bytes) else value,
)
def test_a_baseline_the_gate_cannot_use_is_refused(
    content: bytes | None,
    said: str,
    scripted: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    baseline = tmp_path / "b.json"
    if content is not None:
        baseline.write_bytes(content.replace(b"%s", CASE.encode()))
    _refused(["--baseline", str(baseline)], said.replace("%s", CASE), capsys, tmp_path)


def test_nothing_to_gate_is_refused_before_measuring(
    scripted: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No case has a baseline or a limit: every verdict would be NEW."""
    baseline = tmp_path / "b.json"
    baseline.write_text(json.dumps({"format": 2, "cases": {"other/case": {"normalised": 1}}}))
    _refused(["--baseline", str(baseline)], "nothing to gate", capsys, tmp_path)
    # A timed case recorded as a memory figure: foreseen as gated, judged NEW after the run.
    baseline.write_text(json.dumps({"format": 2, "cases": {CASE: {"value": 5}}}))
    _refused(["--baseline", str(baseline)], "nothing was gated", capsys, tmp_path)


def test_an_only_that_matches_no_case_is_refused(
    scripted: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = tmp_path / "b.json"
    baseline.write_text(json.dumps({"format": 2, "cases": {CASE: {"normalised": 0.1}}}))
    _refused(["--baseline", str(baseline), "--only", "bogus"], "has 'bogus' in its name", capsys,
             tmp_path)  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--baseline", "{dir}"], "a directory; give a file name"),
        (["--baseline", "{dir}/no/b.json"], "no directory"),
        (["--baseline", "{file}", "--json", "{dir}"], "argument --json"),
        (["--baseline", "{file}", "--prior", "{dir}"], "a directory, not a file"),
        (["--baseline", "{file}", "--prior", "{dir}/none.json"], "no such file"),
        (["--baseline", "{file}", "--only", ""], "an empty text matches every case"),
    ],
)
def test_paths_and_texts_are_checked_while_parsing(
    argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--baseline DIR``, ``--json DIR``: refused before anything runs (issue 32)."""
    baseline = tmp_path / "b.json"
    baseline.write_text("{}")
    words = [word.format(dir=tmp_path, file=baseline) for word in argv]
    with pytest.raises(SystemExit) as stop:
        gate_cli.main(["reference", *words])
    assert stop.value.code == 2 and said in capsys.readouterr().err


def test_a_verdict_says_what_it_covered(
    scripted: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = tmp_path / "b.json"
    assert gate_cli.main([*ARGS, "--baseline", str(baseline), "--update-baseline"]) == 0
    assert gate_cli.main([*ARGS, "--baseline", str(baseline)]) == 0
    out = capsys.readouterr().out
    assert "GATE PASSED (1 checks on 1 timed and 0 memory cases)" in out


def test_a_silent_program_is_given_up_after_the_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--timeout`` bounds a ``--cmd`` program's start, as ``conform``'s does (30 s else)."""
    baseline = tmp_path / "b.json"
    baseline.write_text(json.dumps({"format": 2}))
    argv = ["--cmd", "sleep 100", "--timeout", "0.5", "--baseline", str(baseline), "--quick"]
    assert gate_cli.main(argv) == 2
    assert "request 0 (hello): no answer within 0.5 s (killed)" in capsys.readouterr().err


def test_a_long_field_is_quoted_by_its_start(
    scripted: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    baseline = tmp_path / "b.json"
    baseline.write_text(json.dumps({"format": 2, "target": ["x" * 5000]}))
    _refused(["--baseline", str(baseline)], "... (5004 characters)", capsys, tmp_path)
