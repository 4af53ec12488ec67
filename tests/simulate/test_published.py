"""The published benchmarks' workloads, regenerated: what they sent, id for id.

llm-d's precise-routing benchmark and SGLang v0.4's router benchmark are the planner's
validation (docs/simulate.md puts their figures beside the planner's): these tests keep
the regenerated traces equal to what the benchmarks' generators send (counts, lengths,
sharing, arrivals, stages) and, by a checksum, equal from one run to the next.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from kachedb_radix.spec.simulate.export import mooncake_records
from kachedb_radix.spec.simulate.formats import read_trace
from kachedb_radix.spec.simulate.published import (
    LLM_D,
    PUBLISHED,
    SGLANG_ROUTER,
    generate_shared_prefix,
)
from tests.support.simulate import exit_status

#: sha256 of each workload's lines (seed 0), as ``mooncake_records`` writes them.
CHECKSUMS = {
    "llm-d": "fcf593cfc8b7207cd47e205d3b4729284a85d4ae60388313725c43110abea9f8",
    "sglang-router": "8f47275d18ad69cba5da812c441108bff9e10eb9fb8af374a4213564b1ed946a",
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_the_workloads_are_the_same_every_time(name: str) -> None:
    digest = hashlib.sha256()
    for line in mooncake_records(generate_shared_prefix(PUBLISHED[name])):
        digest.update(json.dumps(line, sort_keys=True).encode() + b"\n")
    assert digest.hexdigest() == CHECKSUMS[name]
    other = generate_shared_prefix(replace(PUBLISHED[name], seed=1))
    assert [r.tokens for r in other.requests] != [
        r.tokens for r in generate_shared_prefix(PUBLISHED[name]).requests
    ]


def test_llm_d_sends_its_ladder() -> None:
    """150 groups x 5 prompts of 6,000 + 1,200 tokens in 64-token blocks (93 shared, 20
    of its own: 113), 1,000 outputs; the stages' int(rate x duration) requests, Poisson,
    each stage cycling through the shuffled prompts from the first."""
    trace = generate_shared_prefix(LLM_D)
    requests = trace.requests
    assert len(requests) == LLM_D.requests == 17_084
    assert (trace.tokens_per_block, trace.format) == (64, "mooncake")
    assert {len(r.tokens) for r in requests} == {113}
    assert {(r.prompt_tokens, r.output_tokens) for r in requests} == {(7200, 1000)}
    prompts = {tuple(r.tokens) for r in requests}
    assert len(prompts) == 750
    groups = Counter(prompt[:93] for prompt in prompts)
    assert len(groups) == 150 and set(groups.values()) == {5}
    stages = Counter(r.stage for r in requests)
    assert [stages[k] for k in range(17)] == [int(r * d) for r, d in LLM_D.stages]
    stamps = [r.timestamp or 0.0 for r in requests]
    assert stamps == sorted(stamps)
    warm = [r for r in requests if r.stage == 0]
    assert 45_000 < (warm[-1].timestamp or 0.0) <= 51_000  # 750 over about 50 s
    first = [r for r in requests if r.stage == 1]
    assert first[0].tokens == warm[0].tokens  # each stage starts the cycle again


def test_sglang_sends_one_burst() -> None:
    """64 groups x 16 prompts of 2,048 + 128 tokens in 16-token blocks, 256 outputs, each
    prompt once, shuffled, all at time 0."""
    trace = generate_shared_prefix(SGLANG_ROUTER)
    requests = trace.requests
    assert len(requests) == 1024 and {r.timestamp for r in requests} == {0.0}
    assert {len(r.tokens) for r in requests} == {136} and {r.stage for r in requests} == {None}
    assert len({tuple(r.tokens) for r in requests}) == 1024
    groups = Counter(tuple(r.tokens[:128]) for r in requests)
    assert len(groups) == 64 and set(groups.values()) == {16}
    assert [tuple(r.tokens[:128]) for r in requests[:16]] != [tuple(requests[0].tokens[:128])] * 16


def test_a_saved_workload_reads_back(tmp_path: Path) -> None:
    """``--save-workload`` writes a published workload in the Mooncake format, its stages
    kept; the file replays as the generated trace."""
    saved = tmp_path / "sglang.jsonl"
    status = exit_status(["simulate", "--workload", "sglang-router", "--save-workload",
                          str(saved), "--capacity", "20000", "--no-bounds",
                          "--executor", "serial", "--quiet"])  # fmt: skip
    assert status == 0
    again = read_trace(saved, tokens_per_block=16)
    made = generate_shared_prefix(SGLANG_ROUTER).requests
    assert [(r.tokens, r.prompt_tokens, r.output_tokens, r.timestamp) for r in again.requests] == [
        (r.tokens, r.prompt_tokens, r.output_tokens, r.timestamp) for r in made
    ]
    staged = replace(LLM_D, stages=LLM_D.stages[:2])
    lines = list(mooncake_records(generate_shared_prefix(staged)))
    assert {line["stage"] for line in lines} == {0, 1}
    path = tmp_path / "llm-d.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert {r.stage for r in read_trace(path, tokens_per_block=64).requests} == {0, 1}
