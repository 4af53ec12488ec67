"""docs/simulate.md's commands run, as the page shows them, made small.

tests/project/test_docs.py checks that every command on the page parses; this runs the
planner's own commands -- the ones whose figures the page quotes -- with options added
at the end that make them small (fewer requests, one capacity, fewer routings, serial:
the last of a repeated option wins), and checks
each still prints what the page says it prints. The published benchmarks' full runs
take minutes; their workloads are checked by tests/simulate/test_published.py and
their routing by tests/simulate/test_service.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from kachedb_radix.spec.cli.main import main
from tests.support import docs

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "simulate.md"
#: The page's placeholders, and the files that stand in for them.
FILES = {
    "mooncake_synthetic_trace.jsonl": ROOT / "tests" / "data" / "mooncake_head.jsonl",
    "TRACE": ROOT / "tests" / "data" / "mooncake_head.jsonl",
    "path/to/config.json": ROOT / "tests" / "data" / "qwen3-0.6b-config.json",
}
QUICK = ("--executor", "serial", "--quiet")


@dataclass(frozen=True)
class Run:
    """A command the page shows, what makes it small, and what it must print."""

    command: str
    small: tuple[str, ...]
    prints: tuple[str, ...]


RUNS = [
    Run("kachedb-radix simulate --prefill-cost 32768 --model llama-3-8b --gpu h100", (),
        ("32,768-token prefill: 0.739 PFLOP (38% attention): 1.49 s of compute",)),
    Run("kachedb-radix simulate --workload seed-table --model llama-3-70b-fp8 --gpu h100 "
        "--gpus 8 --mode timed --capacity 8gpu --ttft-slo 2s",
        ("--requests", "120", "--slo-runs", "2", *QUICK),
        ("seed-table workload (seed 0): 120 requests", "SLO: TTFT ≤ 2 s for 90.0% of requests",
         "warm floor: a fully cached request on an idle worker has TTFT 36 ms")),
    Run("kachedb-radix simulate TRACE --model path/to/config.json --gpu mi300x",
        ("--capacity", "2000", "--no-bounds", *QUICK),
        ("model: qwen3-0.6b (28 layers, 8 KV heads x 128, bf16 KV: 112 KiB/token)",
         "1 x MI300X 192 GB", "simulated 300 requests at 1 capacity")),
    Run("kachedb-radix simulate mooncake_synthetic_trace.jsonl --model llama-3-70b-fp8 --gpu "
        "h100 --gpus 8 --workers 4 --routing random,round-robin,least-loaded,prefix,cost,"
        "weighted,cache-aware --index shared,approximate --capacity 32gpu",
        ("--routing", "weighted,cache-aware", *QUICK),  # the two new rules of the seven
        ("4xweighted", "4xcache-aware@approx", "no cache, 4xleast-loaded",
         "x 4 configurations")),
    Run("kachedb-radix simulate mooncake_synthetic_trace.jsonl --workers 4,8 --routing prefix "
        "--index shared,approximate,gateway --gateways 4 --capacity 25305", QUICK,
        ("8xprefix@approx", "8xprefix@gw4", "x 7 configurations")),
]  # fmt: skip


@pytest.mark.parametrize("run", RUNS, ids=[run.command[23:70] for run in RUNS])
def test_the_page_commands_run(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    shown = [docs.argv(command) for command in docs.commands(PAGE.read_text())]
    words = docs.argv(run.command)
    assert words in shown, f"docs/simulate.md no longer shows {run.command!r}"
    arguments = [str(FILES.get(word, word)) for word in words[1:]]
    assert main([*arguments, *run.small]) == 0
    out = capsys.readouterr().out
    for text in run.prints:
        assert text in out, text
