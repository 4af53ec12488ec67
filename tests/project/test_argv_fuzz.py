"""The command line, fuzzed (issue 32, item 6): argv for every subcommand drawn from its
own parser, each run in a child process under limits.

For each subcommand, Hypothesis draws a command line from the subcommand's argparse
parser: its positionals and a handful of its options, each option's value drawn for its
type (an integer, a number, a list, a range, JSON, a path, a choice) from good values and
odd ones -- negative, 0, NaN, infinities, huge, empty lists, empty names, unbalanced
JSON, escape sequences -- and odd files: missing, a directory, a FIFO, binary, not
UTF-8, 100,000 levels deep, truncated, empty, a reset the reference refuses, a profile or
baseline that does not validate. Each command line runs in a fresh child of a zygote
(:mod:`tests.support.argv_zygote`) with its address space capped and a wall-clock limit,
and must:

* exit with 0, 1 or 2, by itself, within the limit (no signal, no hang);
* print no traceback on stderr;
* write nothing when it exits 2 (a refusal changes nothing: every file under the run's
  directory is as it was).

Commands that would run long get tiny sizes first (``conform --examples 2 --budget 60``,
``gate --quick --only ...``, ``simulate --requests 20 ...``), which the draws can then
override with odd values only. Left out, and why: ``explain --serve`` and ``route``
without ``--duration`` (servers that run until stopped: ``route`` always gets
``--duration 2``), ``conform --mutants`` (a minute of mutants per draw).

CI cost: the examples per subcommand (:data:`EXAMPLES`, about 0.3-1.5 s each on the
2-core machine) -- about 60 s in all, once: the tests that run children are marked
``slow`` (the coverage run cannot measure a child that ends with ``os._exit``), so CI
runs them in its suite on Python 3.13 only; the in-process trace fuzzer runs in both.
``KACHEDB_ARGV_FUZZ_EXAMPLES=N`` runs N per subcommand instead;
``KACHEDB_ARGV_FUZZ_REPORT=FILE`` appends each command line tried and how it ended, as
JSON lines (``docs/reliability.md`` counts a campaign's).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kachedb_radix.spec.cli.main import build_parser
from tests.support.paths import ROOT

#: Draws per subcommand in CI (simulate's and route's lanes are rewritten now: few).
EXAMPLES = {
    "demo": 3,
    "conform": 14,
    "replay": 14,
    "explain": 12,
    "gate": 6,
    "serve": 4,
    "simulate": 8,
    "route": 4,
}
#: Wall-clock seconds a command line may take, and address space beyond the zygote's.
SECONDS = 60.0
MEMORY = 3 * 1024**3
PYTHON = sys.executable

# ---------------------------------------------------------------------- the odd inputs

#: Numbers a user types by mistake, for every numeric option.
ODD_NUMBERS = ["-1", "0", "-0", "nan", "inf", "-inf", "1e400", "99999999999999999999",
               "2147483648", "1.5", "0x10", "", " ", "x", "1_000", "-99999999999999"]  # fmt: skip
#: Lists and ranges gone wrong.
ODD_LISTS = ["", ",", ",,,", "1,,2", "a,b", "0,1", "-1", "5-2", "-", "1-", "0-4", "1-99999999"]
#: JSON gone wrong.
ODD_JSON = ["{}", "[]", "{", "null", '{"a": NaN}', '{"protected_percent": 1e400}',
            "[" * 100 + "]" * 100, '{"protected_percent": "x"}', '"x"']  # fmt: skip
#: Words for free-text options.
ODD_TEXT = ["", " ", "x", "\x1b[31mred\x1b[0m", "a" * 300, "ünïcode", "../..", "-", "os:path",
            "kachedb_radix.reference:RadixTree", "no.such.module:Tree"]  # fmt: skip

#: The files every draw may name (made afresh for each run), by name.
FILES = [
    "missing.jsonl", "dir", "fifo", "binary.bin", "latin1.txt", "deep.jsonl", "truncated.jsonl",
    "empty.jsonl", "trace.jsonl", "refused.jsonl", "huge.jsonl", "noreset.jsonl",
    "profile.toml", "bad_profile.toml", "deep.toml", "baseline.json", "bad_baseline.json",
    "mooncake.jsonl", "prior.json",
]  # fmt: skip
#: Where a draw may ask for output: a new file or directory (good), or odd: an existing
#: directory, file or FIFO, a folder that is missing.
OUTPUTS = ["out/new.json", "out/newdir", "out/a/b/c"]
ODD_OUTPUTS = ["dir", "trace.jsonl", "fifo", "binary.bin", "missing/x", ""]

DEEP = '{"a":' * 100_000 + "1" + "}" * 100_000
#: The one case ``gate`` runs (a fast host-side one), which the baseline file records.
GATED = "gpu-host/ids/list/16"


def make_files(root: Path) -> None:
    """The odd (and a few good) input files, under ``root``. O(a few MB)."""
    (root / "dir").mkdir()
    os.mkfifo(root / "fifo")
    (root / "binary.bin").write_bytes(b"\x00\x01\x02\xff" * 64)
    (root / "latin1.txt").write_bytes(b'{"op": "reset", "caf\xe9": 1}\n')
    (root / "deep.jsonl").write_text(DEEP + "\n")
    (root / "truncated.jsonl").write_text('{"op": "reset", "num_blocks": 4, "blo')
    (root / "empty.jsonl").write_text("")
    reset = {"op": "reset", "num_blocks": 6, "block_size": 2}
    steps = [reset, {"op": "insert", "tokens": [1, 2, 3, 4]}, {"op": "match", "tokens": [1, 2]}]
    (root / "trace.jsonl").write_text("".join(json.dumps(step) + "\n" for step in steps))
    refused = {"op": "reset", "num_blocks": "x", "block_size": 4}
    (root / "refused.jsonl").write_text(json.dumps(refused) + '\n{"op": "dump"}\n')
    huge = {"op": "reset", "num_blocks": 99_999_999_999_999, "block_size": 1}
    (root / "huge.jsonl").write_text(json.dumps(huge) + "\n")
    (root / "noreset.jsonl").write_text('{"op": "insert"}\n{"op": "release"}\n')
    (root / "profile.toml").write_text('name = "fuzz"\n[tolerate]\nrecency = "not_compared"\n')
    (root / "bad_profile.toml").write_text('name = "fuzz"\nnonsense = 1\n')
    (root / "deep.toml").write_text("x = " + "[" * 10_000 + "]" * 10_000 + "\n")
    case = {"normalised": 0.25, "calibration": "cpu", "unit": "call"}
    (root / "baseline.json").write_text(json.dumps({"format": 2, "cases": {GATED: case}}))
    bad = {"format": 2, "cases": {"gpu-host/ids/list/16": {"normalised": 0}}}
    (root / "bad_baseline.json").write_text(json.dumps(bad))
    head = (ROOT / "tests" / "data" / "mooncake_head.jsonl").read_text().splitlines()[:12]
    (root / "mooncake.jsonl").write_text("\n".join(head) + "\n")
    prior = {"target": "reference", "mode": "quick", "results": {"x": [{"median_ns": "fast"}]}}
    (root / "prior.json").write_text(json.dumps(prior))


# ---------------------------------------------------------------------- drawing argv


#: Good values per option (a draw mixes them with the odd ones), kept small so that a run
#: that is accepted ends in seconds.
GOOD: dict[str, list[str]] = {
    "--examples": ["1", "2"], "--steps": ["1", "5"], "--budget": ["1", "40"],
    "--seed": ["0", "7"], "--timeout": ["5", "0.5"], "--levels": ["core", "core,pinning", "tiers"],
    "--block-sizes": ["1", "1,2"], "--pool-sizes": ["2-8", "4"],
    "--policy-options": ['{"protected_percent": 50}'], "--port": ["0"],
    "--target": ["reference", "accel", "sglang", "bogus"],
    "--cmd": [f"{PYTHON} -m kachedb_radix.spec serve", "sleep 100", "'unbalanced", "/nonexistent",
              f"{PYTHON} -c 'import sys; sys.stdout.write(chr(27) + \"[2J\" + chr(0))'"],
    "--only": ["gpu-host/ids/list/16", "bogus"],
    "--requests": ["5", "20"], "--workers": ["1", "2"], "--blocks": ["8", "64"],
    "--capacity": ["100", "2Mtok", "0", "-5", "1e400"], "--sweep": ["2", "auto", "0"],
    "--knee-rounds": ["0", "1"], "--jobs": ["1"], "--gateways": ["1", "2"],
    "--router-delay": ["0", "50ms"], "--tiers": ["host=100", "host=", "disk=-1"],
    "--model": ["llama-3-8b", "bogus"], "--gpus": ["1"], "--duration": ["1", "-1", "0.5"],
    "--block-size": ["1", "16"], "--hash-block-tokens": ["16", "512"],
    "--policy": ["lru", "lru,lfu", ",,,"], "--routing": ["prefix", "cost", ",,"],
    "--index": ["shared", "gateway"], "--protocol": ["1", "6"],
    "--listen": ["127.0.0.1:0", "evil.example:80", "::1:0", "x"],
    "--worker": ["w0=tcp://127.0.0.1:1", "=", "w0"], "--ttft-slo": ["1s", "x"],
    "--prefill-cost": ["1000", "1000000000000"], "--timeline-capacity": ["0", "7"],
    "--knee": ["0.9", "1.5", ","], "--impl": ["reference", "accel"],
    "targets": ["reference", "accel", "sglang"], "target": ["reference", "accel"],
}  # fmt: skip
#: Options that name an output, whatever their type.
OUTPUT_FLAGS = {"--out", "--save-workload"}
#: Options left out of the draws, by subcommand (see the module docstring).
LEFT_OUT = {"explain": {"--serve"}, "conform": {"--mutants"}}
#: What every command line of a subcommand starts with: small sizes (a draw may override
#: them, later on the line, with a good small value or an odd one).
BASE: dict[str, list[str]] = {
    "conform": ["--examples", "2", "--budget", "60", "--steps", "6", "--no-shrink",
                "--timeout", "5"],
    "replay": ["--timeout", "5"],
    "explain": ["--timeout", "5"],
    "gate": ["--quick", "--only", "gpu-host/ids/list/16", "--baseline", "baseline.json",
             "--timeout", "5"],
    "simulate": ["--requests", "20", "--executor", "serial", "--sweep", "2", "--knee-rounds",
                 "0", "--no-bounds", "--quiet", "--out", "out/sim"],
    "route": ["--duration", "2"],
}  # fmt: skip


@dataclass
class Drawn:
    """A command line and the odd inputs in it (for the counts)."""

    argv: list[str]
    odd: list[str] = field(default_factory=list)


def _type_name(action: argparse.Action) -> str:
    return getattr(action.type, "__name__", "") if action.type is not None else ""


def _value(action: argparse.Action, flag: str) -> st.SearchStrategy[tuple[str, str | None]]:
    """A value for ``action``: ``(word, odd class or None)``."""
    kind = _type_name(action)
    good: list[str] = list(GOOD.get(flag, []))
    if action.choices is not None:
        good += [str(choice) for choice in action.choices]
        odd = ["bogus", "", "LRU"]
        odd_class = "choice"
    elif kind in ("integer", "int", "number", "float"):
        good = good or ["1", "2"]
        odd, odd_class = ODD_NUMBERS, "number"
    elif kind in ("list", "range"):
        good = good or ["1"]
        odd, odd_class = ODD_LISTS, "list"
    elif kind == "JSON object" or flag.endswith("options"):
        odd, odd_class = ODD_JSON, "json"
    elif kind in ("output_file", "output_dir") or flag in OUTPUT_FLAGS:
        good, odd, odd_class = OUTPUTS, ODD_OUTPUTS, "output path"
    elif kind in ("input_path", "Path", "path", "profile"):
        good = [name for name in FILES if _file_class(name) is None] + ["strict"] * (
            kind == "profile"
        )
        return _one_in_three(
            st.sampled_from(good).map(lambda word: (word, None)),
            st.sampled_from([name for name in FILES if name not in good] + [""]).map(
                lambda word: (word, _file_class(word) or "text")
            ),
        )
    else:
        odd, odd_class = ODD_TEXT + FILES[:6], "text"
    if not good:
        return st.sampled_from(odd).map(lambda word: (word, odd_class))
    return _one_in_three(
        st.sampled_from(good).map(lambda word: (word, None)),
        st.sampled_from(odd).map(lambda word: (word, odd_class)),
    )


def _one_in_three(
    good: st.SearchStrategy[tuple[str, str | None]], odd: st.SearchStrategy[tuple[str, str | None]]
) -> st.SearchStrategy[tuple[str, str | None]]:
    """``odd`` one time in three, else ``good``: enough lines get past the parser to
    reach the commands' own checks (and every good draw still meets odd ones later)."""
    return st.integers(0, 2).flatmap(lambda pick: odd if pick == 0 else good)


def _file_class(name: str) -> str | None:
    """None for a good file, else the odd class ``file NAME``."""
    good = {"trace.jsonl", "profile.toml", "baseline.json", "mooncake.jsonl"}
    return None if name in good else f"file {name}"


def subparser(command: str) -> argparse.ArgumentParser:
    """The subcommand's own parser (the one ``kachedb-radix COMMAND`` uses)."""
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[command]
            return found
    raise AssertionError("no subcommands")  # pragma: no cover


@st.composite
def command_lines(draw: st.DrawFn, command: str) -> Drawn:
    """A command line of ``command`` drawn from its parser (module docstring)."""
    parser = subparser(command)
    drawn = Drawn([command, *BASE.get(command, [])])
    optional = [
        action
        for action in parser._actions
        if action.option_strings
        and not isinstance(action, (argparse._HelpAction, argparse._VersionAction))
        and action.option_strings[0] not in LEFT_OUT.get(command, set())
    ]
    for action in draw(st.lists(st.sampled_from(optional), max_size=3, unique_by=id)):
        flag = (
            action.option_strings[-1]
            if action.option_strings[-1].startswith("--")
            else (action.option_strings[0])
        )
        drawn.argv.append(flag)
        if action.nargs == 0:
            continue
        if action.nargs == "?" and draw(st.booleans()):
            continue
        word, odd = draw(_value(action, flag))
        drawn.argv[-1] = f"{flag}={word}" if word.startswith("-") else flag
        if not word.startswith("-"):
            drawn.argv.append(word)
        if odd is not None:
            drawn.odd.append(f"{odd}: {flag}")
    for action in parser._actions:
        if action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        many = action.nargs in ("*", "+")
        least = 1 if action.nargs in (None, "+") else 0
        count = min(draw(st.integers(least, 2)), 2 if many else 1)  # an optional one: 2 in 3
        for _ in range(count):
            word, odd = draw(_value(action, action.dest))
            if word.startswith("-"):
                word = "./" + word  # a positional, not an option
            drawn.argv.append(word)
            if odd is not None:
                drawn.odd.append(f"{odd}: {action.dest}")
    return drawn


# ---------------------------------------------------------------------- running


class Zygote:
    """The runner process (:mod:`tests.support.argv_zygote`)."""

    def __init__(self) -> None:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(ROOT)}  # fmt: skip
        self.process = subprocess.Popen(
            [PYTHON, "-m", "tests.support.argv_zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        assert json.loads(self._line()) == {"ready": True}

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the zygote died"
        return line

    def run(self, argv: list[str], cwd: Path, seconds: float = SECONDS) -> dict[str, Any]:
        assert self.process.stdin is not None
        request = {"argv": argv, "cwd": str(cwd), "seconds": seconds, "memory": MEMORY}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self._line())
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.process.stdout.close()


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    runner = Zygote()
    yield runner
    runner.close()


def _snapshot(root: Path) -> dict[str, tuple[str, int, float]]:
    """Every path under ``root`` (the run's own stdout and stderr left out) with its kind,
    size and modification time."""
    seen: dict[str, tuple[str, int, float]] = {}
    for path in root.rglob("*"):
        name = path.relative_to(root).as_posix()
        if name in ("stdout.txt", "stderr.txt"):
            continue
        info = path.lstat()
        kind = "dir" if path.is_dir() else "fifo" if path.is_fifo() else "file"
        seen[name] = (kind, 0 if kind == "dir" else info.st_size, info.st_mtime)
    return seen


def check(zygote: Zygote, drawn: Drawn, scratch: Path) -> dict[str, Any]:
    """Run ``drawn`` in a fresh directory and check what the module docstring promises."""
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir()
    make_files(scratch)
    before = _snapshot(scratch)
    outcome = zygote.run(drawn.argv, scratch)
    err = (scratch / "stderr.txt").read_text(errors="replace")
    shown = " ".join(drawn.argv)[:400]
    report = os.environ.get("KACHEDB_ARGV_FUZZ_REPORT")
    if report:
        with open(report, "a", encoding="utf-8") as log:
            log.write(json.dumps({"argv": drawn.argv, "odd": drawn.odd, **outcome}) + "\n")
    assert not outcome["timed_out"], f"{shown}: ran past {SECONDS:g} s"
    assert outcome["signal"] is None, f"{shown}: killed by signal {outcome['signal']}"
    assert outcome["status"] in (0, 1, 2), f"{shown}: exit {outcome['status']}\n{err[-3000:]}"
    assert "Traceback (most recent call last)" not in err, f"{shown}:\n{err[-3000:]}"
    if outcome["status"] == 2:
        assert _snapshot(scratch) == before, f"{shown}: exit 2, yet files changed"
    return outcome


def _fuzz(command: str, zygote: Zygote, tmp_path: Path) -> None:
    examples = int(os.environ.get("KACHEDB_ARGV_FUZZ_EXAMPLES", EXAMPLES[command]))

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize="KACHEDB_ARGV_FUZZ_EXAMPLES" not in os.environ,
        suppress_health_check=list(HealthCheck),
    )
    @given(drawn=command_lines(command))
    def fuzz(drawn: Drawn) -> None:
        check(zygote, drawn, tmp_path / "run")

    fuzz()


#: The command lines run in child processes, which the coverage run cannot measure (a
#: child ends with ``os._exit``): they run once, in CI's suite on its newer Python.
SLOW = pytest.mark.slow


@SLOW
@pytest.mark.parametrize("command", ["demo", "conform", "replay", "explain", "gate", "serve"])
def test_every_command_line_ends_in_0_1_or_2_without_a_traceback(
    command: str, zygote: Zygote, tmp_path: Path
) -> None:
    _fuzz(command, zygote, tmp_path)


#: Set to 1 to run the lanes' fuzzers below while they are skipped.
ALL = os.environ.get("KACHEDB_ARGV_FUZZ_ALL") == "1"


@SLOW
@pytest.mark.skipif(
    not ALL, reason="simulate is the planner's lane, rewritten for issue 32 now; its failing "
    "command lines are listed in the trust report: enable after merging"
)  # fmt: skip
def test_simulate_command_lines(zygote: Zygote, tmp_path: Path) -> None:
    _fuzz("simulate", zygote, tmp_path)


@SLOW
@pytest.mark.skipif(
    not ALL, reason="route is rservice's lane, rewritten for issue 32 now; its failing "
    "command lines are listed in the trust report: enable after merging"
)  # fmt: skip
def test_route_command_lines(zygote: Zygote, tmp_path: Path) -> None:
    _fuzz("route", zygote, tmp_path)


# ---------------------------------------------------------------------- the runner itself


@SLOW
def test_the_runner_sees_a_traceback_a_hang_and_a_write(zygote: Zygote, tmp_path: Path) -> None:
    """The checks can fail: a command that escapes ``main`` (an argv that is not a list of
    str makes argparse raise), one that outlives its limit, and files written on exit 2."""
    scratch = tmp_path / "run"
    scratch.mkdir()
    escaped = zygote.run([1], scratch)  # type: ignore[list-item]
    assert escaped["status"] == 70
    assert "Traceback" in (scratch / "stderr.txt").read_text()
    assert zygote.run(["demo", "--impl", "reference"], scratch)["status"] == 0
    assert "pool of 14 blocks" in (scratch / "stdout.txt").read_text()
    refused = zygote.run(["conform", "--examples", "0"], scratch)
    assert refused["status"] == 2 and refused["seconds"] < SECONDS
    # A hang: killed at its limit, and the program it started (a session of its own) with it.
    hung = zygote.run(["conform", "--cmd", "sleep 97.5", "--timeout", "60"], scratch, seconds=2)
    assert hung["timed_out"] and hung["status"] is None
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _runs(pid, "97.5")]
    with pytest.raises(AssertionError, match="files changed"):
        drawn = Drawn(["conform"])  # exit 2 (no target) after the check saw a new file:
        check(_Writing(zygote), drawn, tmp_path / "w")


def _runs(pid: str, word: str) -> bool:
    """Whether process ``pid`` has ``word`` on its command line."""
    try:
        return word in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


class _Writing(Zygote):
    """A zygote stand-in whose run writes a file, then reports exit 2."""

    def __init__(self, inner: Zygote) -> None:
        self.inner = inner

    def run(self, argv: list[str], cwd: Path, seconds: float = SECONDS) -> dict[str, Any]:
        (cwd / "out").mkdir(exist_ok=True)
        (cwd / "out" / "written.json").write_text("{}")
        return self.inner.run(argv, cwd, seconds)


# ---------------------------------------------------------------------- odd trace contents

#: JSON values an argument of a trace step may hold, good and odd.
ODD_VALUES = st.one_of(
    st.integers(-3, 8),
    st.sampled_from([2**31, 2**32, 2**63, 99_999_999_999_999, -(2**40), 10**30]),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=4),
    st.lists(st.integers(-2, 2**32 + 1), max_size=6),
    st.lists(st.lists(st.integers(0, 3), max_size=2), max_size=2),
    st.dictionaries(st.sampled_from(["host", "disk", "write_through", "scheme", "seed", "x"]),
                    st.one_of(st.integers(-1, 4), st.booleans(), st.text(max_size=3)),
                    max_size=3),
)  # fmt: skip


@st.composite
def odd_steps(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A trace: mostly real operations with odd arguments, some missing or extra."""
    from kachedb_radix.spec.conform.operations import OPERATIONS

    steps: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 6))):
        op = (
            "reset"
            if index == 0 and draw(st.booleans())
            else draw(st.sampled_from([op.name for op in OPERATIONS] + ["fly"]))
        )
        step: dict[str, Any] = {"op": op}
        for operation in OPERATIONS:
            if operation.name != op:
                continue
            for argument in operation.arguments:
                if draw(st.integers(0, 4)):  # mostly given
                    step[argument.name] = draw(ODD_VALUES)
        if draw(st.integers(0, 5)) == 0:
            key = draw(st.sampled_from(["levels", "expect", "batch", "note", "trace"]))
            step[key] = draw(ODD_VALUES)
        steps.append(step)
    return steps


#: Traces tried in CI (about 0.15 s each); ``KACHEDB_TRACE_FUZZ_EXAMPLES=N`` for more.
TRACES = int(os.environ.get("KACHEDB_TRACE_FUZZ_EXAMPLES", 40))


@settings(max_examples=TRACES, deadline=None, database=None,
          derandomize="KACHEDB_TRACE_FUZZ_EXAMPLES" not in os.environ,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(steps=odd_steps(), target=st.sampled_from(["reference", "accel"]))
def test_replay_and_explain_take_any_trace(
    steps: list[dict[str, Any]], target: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Any trace of JSON objects: exit 0, 1 or 2, never an exception (in process, so
    cheap: a crash here is a traceback a user would see). The reference refusing a reset
    (bad sizes, tiers, events, policies) is a one-line refusal; other odd arguments are
    the implementations' to judge, compared by kind (R-ERR-1, R-TOK-2)."""
    from kachedb_radix.spec.cli.main import main

    trace = tmp_path_factory.mktemp("trace") / "t.jsonl"
    trace.write_text("".join(json.dumps(step) + "\n" for step in steps))
    assert main(["replay", str(trace), "--target", target]) in (0, 1, 2)
    assert main(["explain", str(trace), "--target", target]) in (0, 1, 2)
