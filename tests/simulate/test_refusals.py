"""Issue 32's reproductions against ``simulate``, each a test: a one-line error and exit 2,
or a correct answer -- never a traceback, a hang, or a silent substitution.

And the rules that keep it so: every option is checked where it is parsed (issue 32.2),
the caps are stated in ``--help``, and the command line is small functions over one table
of options (issue 36.4).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kachedb_radix.spec.cli import simulate as command
from kachedb_radix.spec.cli import simulate_options
from kachedb_radix.spec.cli.main import build_parser
from kachedb_radix.spec.inputs import LIMITS
from tests.support.simulate import MOONCAKE_SAMPLE, exit_status

QUICK = ["--requests", "30", "--executor", "serial", "--quiet"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--seed", "-1"], "argument --seed: -1 is below the least allowed, 0"),
        (["--workers", "2", "--routing", "prefix", "--router-index", "os:path"],
         "argument --router-index: not a class"),
        (["--workers", "2", "--routing", "prefix", "--router-index", "json:JSONDecoder"],
         "the class has no apply() method"),
        (["--requests", "99999999999999"], "over the most allowed, 100,000"),
        (["--prefill-cost", "1000000000000", "--model", "llama-3-8b", "--gpu", "h100"],
         "argument --prefill-cost: 1000000000000 is over the most allowed, 16,777,216"),
        (["--gpu-tflops", "0"], "argument --gpu-tflops: 0 must be above 0"),
        (["--hbm-tbps", "0"], "argument --hbm-tbps: 0 must be above 0"),
        (["--step-overhead-ms", "inf"], "argument --step-overhead-ms: 'inf' is not a finite"),
        (["--mode", "timed", "--tiers", "host=99", "--disk-latency-ms", "inf"],
         "argument --disk-latency-ms: 'inf' is not a finite number"),
        (["--policy", ",,,"], "argument --policy: ',,,' has an empty name in its list"),
        (["--workers", "600", "--capacity", "500"],
         "--capacity 500 blocks split over 600 workers leaves a worker none"),
        (["--timeline-capacity", "0"], "argument --timeline-capacity: 0 is below the least"),
        (["--capacity", "500", "--timeline-capacity", "7"], "--timeline-capacity 7 is not one"),
        (["--request-overhead-ms", "nan"], "argument --request-overhead-ms: 'nan' is not a"),
        (["--stage-gap=-1s"], "argument --stage-gap: expected a duration like 500ms"),
    ],
)  # fmt: skip
def test_bad_options_are_one_line_and_exit_2(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_status(["simulate", *QUICK, *arguments]) == 2
    captured = capsys.readouterr()
    assert message in captured.err.strip().splitlines()[-1] and captured.out == ""


def test_a_trace_that_would_hang_or_recurse_is_refused(tmp_path: Path) -> None:
    """100,000 nested brackets, an output of 10^12 tokens, a prompt of 10^12: each one
    line naming the line, from a real process, in well under a second."""
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"a":' * 100_000 + "1" + "}" * 100_000 + "\n")
    long = tmp_path / "long.jsonl"
    long.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1000000000000,'
                    ' "hash_ids": [1]}\n')  # fmt: skip
    huge = tmp_path / "huge.jsonl"
    huge.write_text('{"tokens": [1], "output_length": 1000000000000}\n')
    for path, message in (
        (deep, "deep.jsonl, line 1: JSON nested deeper than 64 levels"),
        (long, "long.jsonl, line 1: field 'output_length': Expected `int` <= 1048576"),
        (huge, "huge.jsonl, line 1: field 'output_length': Expected `int` <= 1048576"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "spec", "simulate", str(path), "--gpu", "h100"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert message in done.stderr and done.stderr.count("\n") == 1


def test_results_are_strict_json(tmp_path: Path) -> None:
    """results.json is written with dumps_json (no NaN, no Infinity): a timed run with
    refused requests (NaN TTFTs inside) still writes JSON any parser reads."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    out = tmp_path / "out"
    assert exit_status(["simulate", str(MOONCAKE_SAMPLE), "--mode", "timed", "--capacity",
                        "30,300", "--on-full", "refuse", "--knee-rounds", "0",
                        "--executor", "serial", "--quiet", "--out", str(out)]) == 0  # fmt: skip
    document = json.loads((out / "results.json").read_text(), parse_constant=refuse)
    assert document["points"][0]["lru"]["refused"] > 0


def test_the_caps_are_stated_in_help() -> None:
    """The caps the options enforce are the LIMITS rows, and --help says them."""
    text = " ".join(option.help for _, options in simulate_options.GROUPS for option in options)
    for name in (
        "simulate_requests",
        "request_tokens",
        "simulate_workers",
        "trace_requests",
        "output_tokens",
    ):
        assert LIMITS[name].describe() in text


#: Options whose word is not checked by a type at parse time, and why.
UNTYPED = {
    "--ray-address": "an address only Ray can resolve (auto, host:port)",
    "--tiers": "sizes in the trace's units: parse_tiers checks every word once it is read",
}


def test_every_option_is_checked_where_it_is_parsed() -> None:
    """Issue 32.2: a type or choices on every option that takes a value."""
    unchecked = []
    for _, options in simulate_options.GROUPS:
        for option in options:
            kwargs = option.kwargs
            if kwargs.get("action") == "store_true":
                continue
            if "type" not in kwargs and "choices" not in kwargs:
                unchecked.append(option.flags[0])
    assert sorted(unchecked) == sorted(UNTYPED)
    parser = build_parser()
    help_text = next(
        action.choices["simulate"].format_help()
        for action in parser._actions
        if hasattr(action, "choices") and isinstance(action.choices, dict)
    )
    assert "workers and routing:" in help_text and "timed mode (the service model):" in help_text


def test_the_command_is_small_functions() -> None:
    """Issue 36.4: no function of the command line over 80 lines."""
    for module in (command, simulate_options):
        tree = ast.parse(Path(module.__file__ or "").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                assert length <= 80, f"{module.__name__}.{node.name}: {length} lines"


class Broken:
    """A router index class with the API whose constructor refuses every argument."""

    def __init__(self, *args: object) -> None:
        raise ValueError("no hasher wanted")

    def apply(self) -> None: ...
    def query_hashes(self) -> None: ...
    def held(self) -> None: ...
    def workers(self) -> None: ...


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--workers", "1,,2"], "argument --workers: '1,,2' has an empty item in its list"),
        (["--workers", "2", "--routing", "prefix", "--router-index", "nocolon"],
         "argument --router-index: expected module:Class"),
        (["--workers", "2", "--routing", "prefix", "--capacity", "400", "--router-index",
          "tests.simulate.test_refusals:Broken"], "cannot be built: no hasher wanted"),
    ],
)  # fmt: skip
def test_more_refusals(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_status(["simulate", *QUICK, *arguments]) == 2
    assert message in capsys.readouterr().err


def test_a_router_index_named_and_a_delay_in_requests(capsys: pytest.CaptureFixture[str]) -> None:
    status = exit_status(["simulate", *QUICK, "--workers", "2", "--routing", "prefix",
                          "--capacity", "400", "--router-delay", "3", "--router-index",
                          "kachedb_radix.reference.router:RouterIndex"])  # fmt: skip
    assert status == 0 and "2xprefix+3req" in capsys.readouterr().out


def test_a_staged_trace_through_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace with load stages, run as a ladder (--stage-gap) after a warm-up, with tiers
    and their latencies: the stage table, the notes, and results.json per stage."""
    lines = []
    for number in range(40):
        stage = number // 20
        ids = [1000 * (number % 4) + k for k in range(3)] + [5000 + number]
        lines.append(json.dumps({"timestamp": 50.0 * number, "input_length": 2048,
                                 "output_length": 8, "hash_ids": ids, "stage": stage}))  # fmt: skip
    trace = tmp_path / "staged.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    status = exit_status(["simulate", str(trace), "--gpu", "h100", "--capacity", "12,40",
                          "--stage-gap", "1s", "--warmup", "4", "--workers", "1,2",
                          "--routing", "cache-aware", "--index", "approximate",
                          "--tiers", "host=40", "--host-latency-ms", "0.5",
                          "--disk-latency-ms", "0.2", "--knee-rounds", "0",
                          "--executor", "serial", "--quiet", "--out", str(out)])  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out
    assert "TTFT p90" in printed and "2xcache-aware@approx" in printed and "req/s" in printed
    assert "latency figures leave out the first 4 requests (--warmup)" in printed
    assert "load stages run one after another, each 1 s after the previous one drained" in printed
    document = json.loads((out / "results.json").read_text())
    stages = document["points"][0]["lru"]["service"]["stages"]
    assert [stage["requests"] for stage in stages] == [20, 20]
    assert document["settings"]["stage_gap_ms"] == 1000.0
    assert document["settings"]["cost"]["host_latency_ms"] == 0.5
    assert "<h2>Load stages</h2>" in (out / "report.html").read_text()


def test_an_output_that_cannot_be_written_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--out and --save-workload pass their parse-time check, then the disk refuses (a
    full disk, a race): one line, exit status 2, before anything runs for --out."""

    def refuse(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(command, "check_out_dir", refuse)
    assert exit_status(["simulate", *QUICK, "--out", str(tmp_path / "out")]) == 2
    assert "cannot write results to" in capsys.readouterr().err
    monkeypatch.setattr(command, "write_lines", refuse)
    assert exit_status(["simulate", *QUICK, "--save-workload", str(tmp_path / "w.jsonl")]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_what_the_planner_s_parts_refuse() -> None:
    """The service model, the deployment and the figures refuse what cannot be real."""
    from kachedb_radix.spec.simulate.errors import SimulateError
    from kachedb_radix.spec.simulate.plan.figures import _growth
    from kachedb_radix.spec.simulate.plan.hardware import GPUS, Deployment
    from kachedb_radix.spec.simulate.plan.models import MODELS, count_parameters
    from kachedb_radix.spec.simulate.plan.service import ServiceModel
    from kachedb_radix.spec.simulate.published import LLM_D, SGLANG_ROUTER

    with pytest.raises(ValueError, match="the request overhead must be >= 0 ms"):
        ServiceModel(request_overhead_ms=-1.0)
    with pytest.raises(SimulateError, match="--gpu-mem-util must be in"):
        Deployment(MODELS["llama-3-8b"], GPUS["h100"], mem_util=0.0)
    nan = float("nan")
    assert _growth([nan, nan, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]) is None  # its first quarter refused
    plain = {"num_hidden_layers": 1, "hidden_size": 8, "num_attention_heads": 2,
             "intermediate_size": 16, "vocab_size": 10}  # fmt: skip
    biased = count_parameters({**plain, "attention_bias": True})[0]
    assert biased - count_parameters(plain)[0] == 8 + 2 * 2 * 4  # q, k and v biases
    assert SGLANG_ROUTER.requests == SGLANG_ROUTER.prompts == 1024  # a burst: each prompt once
    assert LLM_D.prompts == 750 and LLM_D.requests == 17_084
