"""The ``kachedb-radix`` command line: the demo main job for every implementation, and
issue 32's reproductions -- every option checked while parsing, every verdict earned."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kachedb_radix.spec.cli.main import main
from kachedb_radix.spec.twins import default_twin, twin_class

#: In the quick suite (``python -m pytest -m quick``), run on the installed wheel in CI.
pytestmark = pytest.mark.quick


def test_demo_prints_every_step_and_the_tree(
    impl_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo replays the scenario, evicts around a pinned request and draws the tree."""
    assert main(["demo", "--impl", impl_name]) == 0
    out = capsys.readouterr().out
    assert f"{impl_name} tree, pool of 14 blocks" in out
    rows = {line.split("  ")[0]: line.split() for line in out.splitlines() if line[:1].isalpha()}
    carol = rows["carol turn 1 (long prompt, pool short)"]
    assert carol[-2:] == ["6,7,9,12,13", "7,6,9"]  # allocated, evicted (R-INS-5)
    assert "6 blocks pinned, 8 evictable, 0 free" in out
    assert "├── 4 blocks [300 301 302 303 …]  #4-5,10-11  pin 1  t=15..14" in out


def test_pure_switch_selects_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """KACHEDB_RADIX_PURE=1 is the only way to make the CLI use the reference by default."""
    monkeypatch.setenv("KACHEDB_RADIX_PURE", "1")
    assert default_twin() == "reference"
    monkeypatch.setenv("KACHEDB_RADIX_PURE", "0")
    assert default_twin() == "accel"
    with pytest.raises(ValueError, match="unknown implementation"):
        twin_class("numpy")


@pytest.mark.parametrize(
    "command",
    [["kachedb-radix"], [sys.executable, "-m", "kachedb_radix.spec"]],
    ids=["console-script", "python-m-kachedb_radix.spec"],
)
def test_command_line_runs(command: list[str]) -> None:
    """The installed console command and ``python -m kachedb_radix.spec`` are the same command
    line."""
    if command[0] == "kachedb-radix":
        script = shutil.which("kachedb-radix", path=os.path.dirname(sys.executable))
        assert script is not None, "the install did not put kachedb-radix beside python"
        command = [script]
    done = subprocess.run(
        [*command, "demo", "--impl", "reference"], capture_output=True, text=True, check=True
    )
    assert "namespace (default)" in done.stdout


def test_a_reader_that_stops_early_gets_no_traceback() -> None:
    """``kachedb-radix explain --text | head -n 1``: the command ends quietly with status 141
    (128 + SIGPIPE, as a shell reports it) when its reader closes the pipe, no traceback."""
    command = [sys.executable, "-m", "kachedb_radix.spec", "explain", "--scenario", "scale"]
    with subprocess.Popen(
        [*command, "--text"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        process.stdout.close()  # the reader goes away with most of the report unread
        err = process.stderr.read().decode()
        status = process.wait()
    assert first.startswith(b"kachedb-radix explain")
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert status == 141


# ---------------------------------------------------------------- issue 32: verdicts earned


def _parse_refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``argv`` is refused while parsing: exit 2, one line on stderr; that line."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--budget", "0"], "--budget: 0 is below the least allowed, 1"),  # "pass", 0 examples
        (["--examples", "0"], "--examples: 0 is below the least allowed, 1"),
        (["--examples", "-1"], "--examples: -1 is below the least allowed, 1"),
        (["--examples", "1000001"], "over the most allowed, 1,000,000"),
        (["--steps", "-5"], "--steps: -5 is below the least allowed, 1"),
        (["--timeout", "0"], "--timeout: 0 must be above 0"),
        (["--timeout", "-1"], "--timeout: -1 must be above 0"),
        (["--timeout", "nan"], "--timeout: 'nan' is not a finite number"),
        (["--timeout", "inf"], "--timeout: 'inf' is not a finite number"),
        (["--seed", "-1"], "--seed: -1 is below the least allowed, 0"),
        (["--pool-sizes", "5-2"], "the smaller end comes first"),
        (["--pool-sizes", "2-99999999"], "over the most allowed, 65,536"),
        (["--block-sizes", ",,"], "empty item"),
        (["--block-sizes", "0"], "below the least allowed, 1"),
        (["--levels", "bogus"], "unknown 'bogus'"),
        (["--policy", "bogus"], "invalid choice: 'bogus'"),
        (["--policy-options", "[1]"], "a JSON array, not an object"),
        (["--events", "nope"], "invalid choice: 'nope'"),
        (["--save-traces", "{file}"], "a file, not a directory"),
        (["--report", "{file}"], "a file, not a directory"),
        (["--profile", "{latin1}"], "not UTF-8 (byte 0xff at offset 0)"),
        (["--profile", "{missing}"], "no such file"),
        (["--profile", "{dir}"], "a directory, not a file"),
        (["--profile", "{deep}"], "nested"),
    ],
)
def test_conform_options_are_refused_while_parsing(
    options: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 32: each was a pass on nothing, a traceback, or a silent default."""
    files = {"file": tmp_path / "f.txt", "latin1": tmp_path / "p.toml",
             "deep": tmp_path / "deep.toml"}  # fmt: skip
    files["file"].write_text("kept")
    files["latin1"].write_bytes(b"\xff")
    files["deep"].write_text("x = " + "[" * 100_000 + "]" * 100_000)
    before = {path: path.read_bytes() for path in files.values()}
    words = [word.format(missing=tmp_path / "none.toml", dir=tmp_path, **files) for word in options]
    assert said in _parse_refusal(["conform", "reference", *words], capsys)
    assert {path: path.read_bytes() for path in files.values()} == before
    assert sorted(tmp_path.iterdir()) == sorted(files.values())


def test_conform_says_what_a_pass_covered(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conform", "reference", "--examples", "3", "--steps", "5", "--no-shrink"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("reference: PASS"))
    assert "(3 examples, " in line and " operations, " in line
    assert "operations" in out.split("summary:")[1].splitlines()[1]


def test_conform_gives_up_on_a_silent_program_after_its_timeout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--cmd "sleep 100" --timeout 2`` waited 30 s for hello; now the timeout bounds it.
    (A Python that sleeps: the packaging check's PATH has no ``sleep``.)"""
    silent = f"{shlex.quote(sys.executable)} -c 'import time; time.sleep(100)'"
    assert main(["conform", "--cmd", silent, "--timeout", "0.5"]) == 2
    assert "request 0 (hello): no answer within 0.5 s (killed)" in capsys.readouterr().err


def test_a_programs_bytes_reach_the_terminal_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A candidate's stderr and malformed answer were echoed raw, escape bytes included."""
    program = tmp_path / "evil.py"
    program.write_text(
        "import sys\n"
        "sys.stderr.write('\\x1b[31mRED\\x1b]0;title\\x07 \\x00 \\x9b\\n'); sys.stderr.flush()\n"
        "sys.stdout.write('\\x1b[2J\\x1b[Hgarbage\\n'); sys.stdout.flush()\n"
    )
    assert main(["conform", "--cmd", f"{sys.executable} {program}"]) == 2
    err = capsys.readouterr().err
    assert "\\x1b[2J" in err and "\\x1b[31mRED" in err and "\\x07" in err and "\\x9b" in err
    assert not any(ord(char) < 32 and char not in "\t\n" for char in err)
    assert "\x9b" not in err


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        ([], "no steps (an empty trace checks nothing)"),  # "every answer as expected"
        (['{"op": "reset", "num_blocks": "x", "block_size": 4}'], "the reference refuses"),
        (['{"op": "reset", "num_blocks": 99999999999, "block_size": 1}'], "R-LIMIT-1"),
        (['{"op": "reset", "num_blocks": 4, "block_size": 1}', '{"op": "insert"}'],
         "line 2: not a step (insert lacks tokens)"),
        (['{"op": "reset", "num_blocks": 4, "block_size": 1}', '{"op": "release"}'],
         "line 2: not a step (release lacks lease)"),
        (['{"op": "reset", "num_blocks": 4, "block_size": 1}', '{"op": "release", "lease": "x"}'],
         'names a lease by its handle, an integer >= 0, not \'"x"\''),
        (['{"op": "reset", "num_blocks": 4, "block_size": 1, "levels": "core"}'],
         "levels must be a list"),
        (['{"op": "reset", "num_blocks": 4, "block_size": 1, "levels": ["wat"]}'],
         "unknown level 'wat'"),
        (['{"op": "reset", "num_blocks": 4, "block_size": 1, "expect": ["ok"]}'],
         'expect must be {"ok": ANSWER} or {"error": KIND}'),
        (['{"a":' * 100_000 + "1" + "}" * 100_000], "line 1: JSON nested deeper than 64 levels"),
        (['{"op": "reset", "num_blocks": NaN, "block_size": 1}'], "not usable JSON"),
        (['[1, 2]'], "line 1: not a step"),
        (['{"op": "insert", "tokens": [1]}'], "a trace starts with a reset step"),
    ],
)  # fmt: skip
def test_replay_refuses_a_trace_it_cannot_judge(
    lines: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 32: exit 2 and one line (these were exit 0, KeyError, AttributeError,
    RecursionError); the file as it was."""
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(line + "\n" for line in lines))
    before = trace.read_bytes()
    assert main(["replay", str(trace)]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert trace.read_bytes() == before


@pytest.mark.parametrize(
    ("content", "said"),
    [(b"\xff\n", "line 1: not UTF-8 (byte 0xff at offset 0)"), (b"\x00", "binary, not text")],
)
def test_replay_refuses_a_trace_that_is_not_text(
    content: bytes, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(content)
    assert main(["replay", str(trace)]) == 2
    assert said in capsys.readouterr().err


def test_replay_that_runs_no_trace_checked_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every trace skipped (levels the target does not declare) was "every answer as
    expected", exit 0."""
    trace = tmp_path / "t.jsonl"
    reset = {"op": "reset", "num_blocks": 4, "block_size": 1, "levels": ["pinning"]}
    trace.write_text(json.dumps(reset) + "\n" + json.dumps({"op": "dump"}) + "\n")
    served = f"{sys.executable} -m kachedb_radix.spec serve --levels core"
    assert main(["replay", str(trace), "--cmd", served]) == 2
    assert "runs none of the trace's 1 trace(s)" in capsys.readouterr().err
    assert main(["replay", str(trace)]) == 0  # the reference declares pinning: judged
    assert "replayed 2 steps of 1 trace(s)" in capsys.readouterr().out
    assert main(["replay", str(trace), "--cmd", served, "--cmd", served]) == 2
    assert "one --cmd" in capsys.readouterr().err


def test_replay_paths_are_checked_while_parsing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "no such file" in _parse_refusal(["replay", str(tmp_path / "none.jsonl")], capsys)
    assert "a directory" in _parse_refusal(["replay", str(tmp_path)], capsys)
    (tmp_path / "p.toml").write_bytes(b"\xff")
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"op": "reset", "num_blocks": 4, "block_size": 1}\n')
    refusal = _parse_refusal(["replay", str(trace), "--profile", str(tmp_path / "p.toml")], capsys)
    assert "not UTF-8" in refusal


def test_an_unknown_subcommand_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Every refusal while parsing is one line saying where the options are listed."""
    refusal = _parse_refusal(["bogus"], capsys)
    assert "invalid choice: 'bogus'" in refusal and "kachedb-radix --help" in refusal


def test_input_refused_deep_inside_a_command_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An InputError no command worded itself still ends in one line and status 2."""
    from kachedb_radix.spec.cli import demo as demo_cli
    from kachedb_radix.spec.inputs import InputError

    def refuse(tree: object) -> str:
        raise InputError("trace x line 3: not JSON")

    monkeypatch.setattr(demo_cli, "run_demo", refuse)
    monkeypatch.setattr("kachedb_radix.spec.cli.main.run_demo", refuse)
    assert main(["demo", "--impl", "reference"]) == 2
    assert capsys.readouterr().err == "kachedb-radix demo: trace x line 3: not JSON\n"


def test_a_pass_on_no_example_is_refused_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Were a search to run no example (the parse-time caps make it one at least), its
    "pass" would rest on nothing: exit 2, no report, no traces."""
    from kachedb_radix.spec.cli import conform as conform_cli
    from kachedb_radix.spec.conform.run import KitReport

    monkeypatch.setattr(
        conform_cli, "run_kit", lambda candidate, *args, **kwargs: KitReport("idle", ["core"],
                                                                            passed=True)
    )  # fmt: skip
    report = tmp_path / "report"
    assert main(["conform", "reference", "--report", str(report)]) == 2
    assert "idle: no example ran, nothing was checked" in capsys.readouterr().err
    assert not report.exists()


def test_replay_refuses_a_trace_past_its_caps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``LIMITS["trace_bytes"]`` and ``["trace_steps"]`` (64 MiB, 100,000 steps), shrunk
    here so the test stays small."""
    from kachedb_radix.spec.inputs import LIMITS, Limit

    trace = tmp_path / "t.jsonl"
    reset = '{"op": "reset", "num_blocks": 4, "block_size": 1}\n'
    trace.write_text(reset + '{"op": "dump"}\n' * 5)
    monkeypatch.setitem(LIMITS, "trace_steps", Limit("trace_steps", 3, "steps", "w", "y"))
    assert main(["replay", str(trace)]) == 2
    assert "more than 3 steps (the cap of a trace)" in capsys.readouterr().err
    monkeypatch.setitem(LIMITS, "trace_bytes", Limit("trace_bytes", 60, "bytes", "w", "y"))
    assert main(["replay", str(trace)]) == 2
    assert "over the cap of 60 bytes" in capsys.readouterr().err


def test_a_report_names_the_profile_file_it_was_checked_under(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--profile FILE`` is read while parsing; the report still records the file."""
    profile = tmp_path / "p.toml"
    profile.write_text('name = "p"\n[tolerate]\nrecency = "not_compared"\n')
    report = tmp_path / "report"
    argv = ["conform", "reference", "--profile", str(profile), "--examples", "2", "--steps", "4"]
    assert main([*argv, "--report", str(report)]) == 0
    made_by = json.loads((report / "report.json").read_text())["made_by"]
    assert made_by["profile"] == str(profile)
