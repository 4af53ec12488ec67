"""``kachedb-radix simulate``: the main job end to end, its files, and every way to misuse it."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from rich.console import Console
from rich.progress import Progress

from kachedb_radix.spec.cli.main import main
from kachedb_radix.spec.simulate.errors import SimulateError
from kachedb_radix.spec.simulate.executors import Session, run_tasks
from kachedb_radix.spec.simulate.point import RUN, Task
from kachedb_radix.spec.simulate.progress import RateColumn, progress_bar
from kachedb_radix.spec.simulate.results import CSV_COLUMNS, SCHEMA_PATH
from kachedb_radix.spec.simulate.run import Settings, execute, plan, simulate
from kachedb_radix.spec.simulate.sweep import auto_capacities, parse_capacities, parse_sweep
from kachedb_radix.spec.simulate.text import count, duration, percent, rate, ratio
from kachedb_radix.spec.simulate.workload import WorkloadSpec, generate
from tests.support.simulate import MOONCAKE_SAMPLE, exit_status

SCHEMA = json.loads(SCHEMA_PATH.read_text())
SMALL = ["--requests", "120", "--executor", "serial"]


def _validate(document: object) -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)


@pytest.mark.slow
def test_no_arguments_runs_the_embedded_workload(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's main-job command, exactly: a fresh clone, no arguments."""
    assert main(["simulate"]) == 0
    out = capsys.readouterr().out
    assert "embedded workload (seed 0): 2,000 requests" in out
    assert "hit LRU" in out and "Belady" in out and "infinite" in out
    assert out.count("%") > 30 and "knee (LRU): 90% of the achievable hit ratio" in out
    assert (
        "simulated 2,000 requests at 8 capacities (+8 refining the knees) x 1 configuration" in out
    )
    assert "(process executor)" in out
    assert "knee refinement ran" in out


def test_out_writes_schema_valid_json_csv_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    status = main(
        ["simulate", str(MOONCAKE_SAMPLE), "--capacity", "100,1k,8000", "--out", str(out),
         "--executor", "serial", "--timeline-capacity", "1000"]
    )  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out
    assert "300 requests (mooncake, 512 tokens per hash block)" in printed
    assert "wrote results.json, results.csv, hit_ratio_vs_capacity.png" in printed
    assert printed.rstrip().endswith(f"report.html to {out}")
    document = json.loads((out / "results.json").read_text())
    _validate(document)
    capacities = [point["capacity"] for point in document["points"]]
    assert sorted({100, 1000, 7352, *document["knee"]["refined_capacities"]}) == capacities
    assert "capacity 8,000 is more than the 7,352 blocks this trace can ever use" in printed
    assert document["trace"]["working_set_blocks"] == 7352
    assert document["timeline_capacity"] == 1000
    top = document["points"][-1]
    assert top["lru"]["token_hit_ratio"] == document["infinite"]["token_hit_ratio"] > 0
    with (out / "results.csv").open() as stream:
        rows = list(csv.DictReader(stream))
    assert list(rows[0]) == list(CSV_COLUMNS) and len(rows) == len(capacities)
    assert rows[0]["ttft_p50_ms"] == "" and float(rows[2]["belady_token_hit_ratio"]) > 0
    for name in ("hit_ratio_vs_capacity.png", "hit_ratio_over_time.png"):
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def test_timed_mode_reports_ttft(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(
        ["simulate", str(MOONCAKE_SAMPLE), "--mode", "timed", "--capacity", "300,3000",
         "--prefill-tps", "200000", "--max-running", "16", "--executor", "serial",
         "--knee-rounds", "0", "--out", str(tmp_path)]
    )  # fmt: skip
    assert status == 0
    out = capsys.readouterr().out
    assert "timed mode" in out and "TTFT p50" in out and "waited" in out
    assert (
        "service model (llama-3-8b on 1 x H100 SXM5 80 GB, per worker): prefill 200,000 tokens/s"
        in out
    )
    document = json.loads((tmp_path / "results.json").read_text())
    _validate(document)
    small = document["points"][0]["lru"]
    assert small["waited"] > 0 and set(small["ttft_ms"]) == {"p50", "p90", "p99", "mean"}
    assert document["settings"]["service"]["max_running"] == 16
    assert document["points"][0]["no_cache"]["1 worker"]["trees"] == "none"
    assert small["service"]["output_tokens_per_s"] > 0 and small["service"]["makespan_s"] > 0


def test_no_bounds_and_the_knee_when_unreached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")  # the user's width is kept
    assert main(["simulate", *SMALL, "--no-bounds", "--capacity", "900"]) == 0
    printed = capsys.readouterr().out
    assert "working set" not in printed and "knee:" not in printed
    assert max(map(len, printed.splitlines())) <= 120
    assert main(["simulate", *SMALL, "--no-bounds", "--sweep", "3", "--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "results.json").read_text())
    _validate(document)
    assert document["infinite"] is None and document["points"][0]["belady"] is None
    assert document["knee"]["lru_capacity"] is None
    assert "knee:" not in capsys.readouterr().out
    results = simulate(generate(WorkloadSpec(requests=60)), Settings(executor="serial",
                       capacities=(2,)))  # fmt: skip
    lru, belady = results.knee("lru"), results.knee("belady")
    assert lru is not None and belady is not None  # with bounds: a knee, not reached at 2
    assert lru.capacity is None and lru.bracket is None and belady.capacity is None
    with pytest.raises(KeyError):
        results.point(3)


def test_bad_lines_exit_2_naming_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "bad.jsonl"
    good = '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}'
    trace.write_text(good + '\n{"input_length": 6, "hash_ids": [1, "x"]}\n' + good + "\n")
    assert main(["simulate", str(trace), *SMALL[2:]]) == 2
    error = capsys.readouterr().err
    assert error == f"simulate: {trace}, line 2: field 'hash_ids[1]': Expected `int`, got `str`\n"
    assert (
        main(["simulate", str(trace), "--skip-bad", "--capacity", "4", "--executor", "serial"]) == 0
    )
    assert "skipped 1 bad lines (--skip-bad); first: line 2: field 'hash_ids[1]'" in (
        capsys.readouterr().out
    )


def test_bad_input_never_shows_a_traceback(tmp_path: Path) -> None:
    """The installed command, a real process: a message and status 2, no traceback."""
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"tokens": [1, 2]}\n{"tokens": [1, -2]}\n')
    done = subprocess.run(
        [sys.executable, "-m", "spec", "simulate", str(trace)], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "line 2: field 'tokens[1]': Expected `int` >= 0" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


#: Refused where they are parsed (argparse: "argument --x: ..."), or once the trace is
#: read ("simulate: ..."): each a one-line message naming the option, exit 2.
USAGE_ERRORS = [
    (["--capacity", "10,abc"], "argument --capacity: 'abc' is not a number of blocks or a size"),
    (["--capacity", "0"], "--capacity: '0' is not a whole number"),
    (["--sweep", "many"], "argument --sweep: expected 'auto' or a number"),
    (["--jobs", "0"], "argument --jobs: 0 is below the least allowed, 1"),
    (["--requests", "0"], "argument --requests: 0 is below the least allowed, 1"),
    (["--block-size", "0"], "argument --block-size: 0 is below the least allowed, 1"),
    (["--mode", "timed", "--prefill-tps", "0"], "argument --prefill-tps: 0 must be above 0"),
    (["--prefill-tps", "9"], "--prefill-tps applies to the timed mode"),
    (["--ttft-slo", "1s"], "--ttft-slo applies to the timed mode"),
    (["--stage-gap", "1s"], "--stage-gap applies to the timed mode"),
    (["--mode", "timed", "--ttft-slo", "fast"], "expected a duration like 500ms"),
    (["--mode", "timed", "--ttft-slo", "0ms"], "argument --ttft-slo: '0ms' must be above 0 ms"),
    (["--knee", "0.9,1.2"], "argument --knee: '1.2' is not a fraction"),
    (["--knee-rounds", "-1"], "argument --knee-rounds: -1 is below the least allowed, 0"),
    (["--capacity", "64GiB"], "a size in bytes needs --model"),
    (["--model", "llama-3-8b", "--capacity", "2gpu"], "GPUs need --model and --gpu"),
    (["--model", "gpt-9"], "argument --model: unknown model 'gpt-9'"),
    (["--model", "layers=2,kv_heads=x,head_dim=4"], "kv_heads='x' is not a number"),
    (["--model", "layers=2,head_dim=4"], "kv_heads is missing"),
    (["--model", "layers=2,kv_heads=1,head_dim=4,color=red"], "'color=red' is not key=value"),
    (["--model", "llama-3-70b", "--gpu", "l40s"], "leave no room for KV on 1 x L40S"),
    (["--gpu", "h100", "--gpu-mem-util", "1.5"], "argument --gpu-mem-util: 1.5 is over the most"),
    (["--workers", "0"], "argument --workers: 0 is below the least allowed, 1"),
    (["--workers", "2", "--routing", "magic"], "argument --routing: unknown 'magic'"),
    (["--workers", "2", "--routing", "prefix", "--index", "x"], "argument --index: unknown 'x'"),
    (["--router-delay", "soon"], "'soon' is not a number of requests or a time like 50ms"),
    (["--workers", "2", "--routing", "prefix", "--router-index", "nowhere:Index"],
     "argument --router-index: No module named 'nowhere'"),
    (["--prefill-cost", "0"], "argument --prefill-cost: 0 is below the least allowed, 1"),
    (["--out", "/dev/null/x"], "argument --out: /dev/null/x: /dev/null is a file"),
    (["--capacity", "100", "--timeline-capacity", "5"], "--timeline-capacity 5 is not one"),
    ([str(MOONCAKE_SAMPLE), "--save-workload", "x"], "--save-workload applies to the embedded"),
    (["missing.jsonl"], "argument TRACE: missing.jsonl: no such file"),
    (["--save-workload", "/nonexistent/dir/w.jsonl"], "no directory /nonexistent/dir"),
    (["--workload", "llm-d", "--requests", "5"], "--requests: the llm-d workload has its own"),
    (["--warmup", "120"], "--warmup 120 leaves no request of the 120 to measure"),
]  # fmt: skip


@pytest.mark.parametrize(("arguments", "message"), USAGE_ERRORS)
def test_usage_errors_exit_2(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_status(["simulate", *SMALL, *arguments]) == 2
    error = capsys.readouterr().err
    assert message in error.strip().splitlines()[-1] and "Traceback" not in error


def test_timed_mode_on_a_trace_without_timestamps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"tokens": [1, 2], "timestamp": 1}\n{"tokens": [1, 2]}\n')
    assert main(["simulate", str(trace), "--mode", "timed", "--capacity", "4"]) == 2
    assert "line 2: field 'timestamp': missing; the timed mode needs" in capsys.readouterr().err


def test_unwritable_out_and_missing_matplotlib(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert exit_status(["simulate", *SMALL, "--capacity", "500", "--out", str(blocker)]) == 2
    assert f"argument --out: {blocker}: a file, not a directory" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    assert main(["simulate", *SMALL, "--capacity", "500", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "plots skipped: matplotlib is not installed (pip install 'kachedb-radix[plot]')" in out
    assert "wrote results.json, results.csv, report.html to" in out
    assert "Plots skipped" in (tmp_path / "o" / "report.html").read_text()


def test_a_saved_workload_replays_to_the_same_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "w.jsonl"
    common = ["--capacity", "400,4000", "--executor", "serial", "--out"]
    assert (
        main(["simulate", *SMALL, "--save-workload", str(saved), *common, str(tmp_path / "a")]) == 0
    )
    assert main(["simulate", str(saved), *common, str(tmp_path / "b")]) == 0
    capsys.readouterr()
    first, second = (json.loads((tmp_path / d / "results.json").read_text()) for d in "ab")
    for a, b in zip(first["points"], second["points"], strict=True):
        assert {k: v for k, v in a["lru"].items() if k != "seconds"} == {
            k: v for k, v in b["lru"].items() if k != "seconds"
        }
        assert a["belady"] == b["belady"] and a["timeline"] == b["timeline"]


# ---------------------------------------------------------------------- the parts


def test_process_and_serial_executors_agree() -> None:
    trace = generate(WorkloadSpec(requests=80, seed=9))
    settings = Settings(executor="serial", capacities=(200, 900, 3000), knee_rounds=0)
    prepared = plan(trace, settings)
    serial = execute(prepared, settings)
    seen: list[int] = []
    tasks = [Task(RUN, capacity) for capacity in prepared.capacities]
    with Session(prepared.job, "process", jobs=2) as session:
        parallel = session.run(tasks, seen.append)
        again = session.run(tasks[:1], seen.append)  # the pool is kept between calls
    assert sum(seen) == 4 * 80
    for point, found in zip(serial.points, parallel, strict=True):
        assert found.run is not None and found.run.stats == point.lru
        assert found.run.replay.lengths == point.replay.lengths
    assert again[0].run is not None and again[0].run.stats == serial.points[0].lru
    one = run_tasks(prepared.job, tasks[:1], seen.append, executor="process")
    assert one[0].run is not None and one[0].run.stats == serial.points[0].lru
    with pytest.raises(SimulateError, match="unknown executor 'mpi'"):
        run_tasks(prepared.job, tasks, seen.append, executor="mpi")
    with pytest.raises(SimulateError, match="unknown mode 'batch'"):
        plan(trace, Settings(mode="batch"))


def test_capacities_and_sweeps() -> None:
    assert parse_capacities("1000, 5k,20_000,1.5k,5000") == [1000, 1500, 5000, 20000]
    assert parse_capacities("2M") == [2_000_000]
    for bad in ("", "1.5", "-3", "k", "1e3x"):
        with pytest.raises(SimulateError, match="not a whole number of blocks"):
            parse_capacities(bad)
    assert parse_sweep("auto") == 8 and parse_sweep("3") == 3
    for bad in ("0", "65", "-1"):
        with pytest.raises(SimulateError):
            parse_sweep(bad)
    assert auto_capacities(43924) == [340, 690, 1400, 2700, 5500, 11000, 22000, 43924]
    assert auto_capacities(5) == [1, 2, 3, 4, 5] and auto_capacities(7, 1) == [7]
    with pytest.raises(SimulateError, match="caches no whole block"):
        auto_capacities(0)


def test_report_formats() -> None:
    assert (percent(0.4318), percent(None)) == ("43.2%", "—")
    assert (count(39852661), count(1234), count(5), count(2.5e9)) == ("39.9M", "1.23k", "5", "2.5G")
    assert (duration(None), duration(350.2), duration(1234.5)) == ("—", "350 ms", "1.23 s")
    assert duration(1_589_757.0) == "1,590 s"
    assert (rate(8730.4), rate(None), ratio(1.7543), ratio(None)) == ("8.73k", "—", "1.75x", "—")


def test_progress_bar_on_a_terminal_only() -> None:
    stream = io.StringIO()
    terminal = Console(file=stream, force_terminal=True, width=100)
    with progress_bar(10, "replaying", terminal) as advance:
        advance(4)
        advance(6)
    assert "replaying" in stream.getvalue()
    quiet = io.StringIO()
    with progress_bar(10, "replaying", Console(file=quiet, force_terminal=True), quiet=True) as off:
        off(10)
    with progress_bar(10, "replaying", Console(file=quiet)) as off:
        off(10)
    assert quiet.getvalue() == ""
    with Progress(RateColumn()) as bar:
        task = bar.add_task("x", total=None)
        assert str(RateColumn().render(bar.tasks[task])) == ""


def test_ray_executor_without_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the cluster extra were not installed
    prepared = plan(generate(WorkloadSpec(requests=20)), Settings(capacities=(50,)))
    with pytest.raises(SimulateError, match=r"--executor ray needs Ray: pip install"):
        run_tasks(prepared.job, [Task(RUN, 50)], lambda done: None, executor="ray")


def test_worker_entry_points_in_process() -> None:
    """What a worker process and a Ray task run, called here (their own processes are
    not traced by coverage): the job installed once, progress added to the counter."""
    import multiprocessing

    from kachedb_radix.spec.simulate import executors

    prepared = plan(generate(WorkloadSpec(requests=30)), Settings(capacities=(100,)))
    counter = multiprocessing.get_context("spawn").Value("q", 0)
    executors._start_worker(prepared.job, counter)
    try:
        found = executors._worker_task(Task(RUN, 100))
    finally:
        executors._start_worker(None, None)
    assert counter.value == 30 and found.run is not None
    again = executors._ray_task(prepared.job, Task(RUN, 100)).run
    assert again is not None and again.stats == found.run.stats
