"""Published benchmarks' workloads, recreated: what the planner is validated on.

Two public benchmarks of cache-aware routing ran synthetic shared-prefix workloads whose
generators are public; this module regenerates them, seeded, as block-hash traces (the
Mooncake format: one id per block of ``block_tokens`` tokens, equal ids at equal
positions meaning equal prefixes), so ``kachedb-radix simulate --workload NAME`` replays
them and ``--save-workload`` writes them out. docs/simulate.md puts each published
figure beside the planner's.

**llm-d, "KV-Cache Wins You Can See"** (llm-d blog, 2025-09-24; the workload is the
``shared_prefix`` template of llm-d's precise-prefix-cache-aware guide,
``guides/precise-prefix-cache-aware/benchmark-templates/guide.yaml``, run by
inference-perf): 150 groups ("customers") of 5 prompts each, a group's prompts sharing
a 6,000-token system prompt followed by a 1,200-token question of their own, 1,000
output tokens each (``ignore_eos``), served by vLLM with 64-token blocks. inference-perf
(``datagen/shared_prefix_datagen.py``, ``loadgen/``) shuffles the 750 prompts once and
sends a stage's ``k``-th request the prompt ``k mod 750``; a stage of rate ``r`` and
duration ``d`` sends ``int(r * d)`` requests, Poisson: each second it draws how many
from Poisson(``r``) and spreads them over that second by normalised exponential gaps;
and a stage starts only once every request of the one before has completed (the
simulator's ``--stage-gap``). The ladder: 15 requests/s for 50 s to warm the caches,
then 3, 10, 15, 20, 22, 25, 30, 35, 40, 43, 46, 49, 52, 55, 57, 60 requests/s, each
for the duration that sends 600-1,548 requests: 17,084 requests in all.

**SGLang v0.4's cache-aware router** (LMSYS blog, 2024-12-04): ``bench_serving``'s
``generated-shared-prefix`` dataset at its defaults (sglang ``benchmark/serving.py``:
``--gsp-num-groups 64 --gsp-prompts-per-group 16 --gsp-system-prompt-len 2048
--gsp-question-len 128 --gsp-output-len 256``, lengths exact at the default range ratio
1.0): 1,024 prompts, each a group's 2,048-token system prompt and a 128-token question,
256 output tokens, shuffled and sent at once (``--request-rate inf``: a burst). SGLang
caches at token granularity; the trace uses 16-token blocks, which divide both lengths.

Token ids are not generated (only which blocks are equal matters), so a trace of
17,084 requests of 113 blocks takes a few MB. Determinism: one
``numpy.random.Generator`` seeded with ``seed`` draws everything in a fixed order; the
same spec gives the same trace, id for id (a test keeps a checksum of each).
Cost: O(requests x blocks per prompt).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

import numpy as np

from .trace import Request, Trace


@dataclass(frozen=True)
class SharedPrefixSpec:
    """A shared-prefix benchmark's workload (see the module docstring).

    Attributes:
        name: how ``--workload`` names it.
        groups, prompts_per_group: distinct system prompts, and questions under each.
        system_tokens, question_tokens, output_tokens: the lengths, exact.
        block_tokens: tokens per hash id (the engine's block size).
        stages: ``(requests per second, seconds)`` of each load stage; empty: every
            request at time 0 (a burst).
        seed: the generator's seed.

    With stages, a stage's ``k``-th request takes prompt ``k mod prompts``
    (inference-perf); without, each prompt is sent once, in the shuffled order (SGLang).
    """

    name: str
    groups: int
    prompts_per_group: int
    system_tokens: int
    question_tokens: int
    output_tokens: int
    block_tokens: int
    stages: tuple[tuple[float, float], ...] = ()
    seed: int = 0

    @property
    def prompts(self) -> int:
        """Distinct prompts. O(1)."""
        return self.groups * self.prompts_per_group

    @property
    def prompt_blocks(self) -> int:
        """Hash ids of one prompt (the last block may be partial). O(1)."""
        return math.ceil((self.system_tokens + self.question_tokens) / self.block_tokens)

    @property
    def shared_blocks(self) -> int:
        """Whole blocks of the system prompt: the ids a group's prompts share. O(1)."""
        return self.system_tokens // self.block_tokens

    @property
    def requests(self) -> int:
        """Requests the workload sends. O(stages)."""
        if not self.stages:
            return self.prompts
        return sum(int(rate * seconds) for rate, seconds in self.stages)


#: llm-d's precise-prefix-cache-aware benchmark (see the module docstring).
LLM_D = SharedPrefixSpec(
    name="llm-d",
    groups=150,
    prompts_per_group=5,
    system_tokens=6000,
    question_tokens=1200,
    output_tokens=1000,
    block_tokens=64,
    stages=(
        (15, 50), (3, 20), (10, 20), (15, 20), (20, 38), (22, 34), (25, 30), (30, 25),
        (35, 21), (40, 38), (43, 36), (46, 33), (49, 30), (52, 29), (55, 27), (57, 26),
        (60, 25),
    ),
)  # fmt: skip

#: SGLang v0.4's cache-aware router benchmark (see the module docstring).
SGLANG_ROUTER = SharedPrefixSpec(
    name="sglang-router",
    groups=64,
    prompts_per_group=16,
    system_tokens=2048,
    question_tokens=128,
    output_tokens=256,
    block_tokens=16,
    stages=(),
)

#: The published workloads, by ``--workload`` name.
PUBLISHED = {spec.name: spec for spec in (LLM_D, SGLANG_ROUTER)}


def _prompt_ids(spec: SharedPrefixSpec, rng: np.random.Generator) -> list[array[int]]:
    """Each prompt's hash ids, in the shuffled order requests take them. O(prompts x blocks)."""
    shared, own = spec.shared_blocks, spec.prompt_blocks - spec.shared_blocks
    prompts = []
    next_id = 0
    for _ in range(spec.groups):
        system = list(range(next_id, next_id + shared))
        next_id += shared
        for _ in range(spec.prompts_per_group):
            prompts.append(array("I", system + list(range(next_id, next_id + own))))
            next_id += own
    order = rng.permutation(len(prompts))
    return [prompts[int(at)] for at in order]


def _stage_times(rate: float, count: int, rng: np.random.Generator) -> tuple[list[float], float]:
    """``count`` arrival offsets in seconds, inference-perf's Poisson timer: each second
    Poisson(``rate``) requests, spread over it by normalised exponential gaps; and the
    seconds the stage's arrivals took. O(count)."""
    times: list[float] = []
    second = 0.0
    while len(times) < count:
        burst = int(rng.poisson(rate))
        if burst:
            gaps = rng.exponential(1.0 / burst, burst)
            offsets = second + np.cumsum(gaps / gaps.sum())
            times.extend(float(at) for at in offsets[: count - len(times)])
        second += 1.0
    return times, second


def generate_shared_prefix(spec: SharedPrefixSpec) -> Trace:
    """The workload of ``spec`` as a block-hash trace (see the module docstring): in
    arrival order, each request tagged with its stage. O(requests x blocks)."""
    rng = np.random.default_rng(spec.seed)
    prompts = _prompt_ids(spec, rng)
    prompt_tokens = spec.system_tokens + spec.question_tokens
    requests = []

    def add(ids: array[int], millis: float, stage: int | None) -> None:
        requests.append(
            Request(
                ids, ids, prompt_tokens, spec.output_tokens, round(millis, 3), None,
                stage=stage,
            )
        )  # fmt: skip

    if not spec.stages:
        for ids in prompts:
            add(ids, 0.0, None)
    start = 0.0
    for stage, (rate, seconds) in enumerate(spec.stages):
        times, took = _stage_times(rate, int(rate * seconds), rng)
        for k, offset in enumerate(times):
            add(prompts[k % len(prompts)], (start + offset) * 1000.0, stage)
        start += max(seconds, took)  # the next stage's arrivals never overlap this one's
    source = f"{spec.name} workload (seed {spec.seed})"
    return Trace(requests, "mooncake", 1, spec.block_tokens, source)
