"""The embedded workload: deterministic per seed, and it has the shapes it promises."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from kachedb_radix.spec.simulate.prefix import prefix_paths
from kachedb_radix.spec.simulate.workload import (
    SEED_TABLE,
    WORKLOADS,
    WorkloadSpec,
    _Generator,
    generate,
    generate_requests,
)

SPEC = WorkloadSpec(requests=400, seed=11)


def _key(spec: WorkloadSpec) -> list[tuple[object, ...]]:
    return [
        (r.tokens.tobytes(), r.sequence.tobytes(), r.timestamp, r.namespace, r.output_tokens)
        for r in generate_requests(spec)
    ]


def test_the_same_seed_gives_the_same_requests() -> None:
    assert _key(SPEC) == _key(WorkloadSpec(requests=400, seed=11))
    assert _key(SPEC) != _key(WorkloadSpec(requests=400, seed=12))


def test_requests_arrive_in_order_with_their_outputs() -> None:
    trace = generate(SPEC)
    stamps = [r.timestamp or 0.0 for r in trace.requests]
    assert len(trace.requests) == 400 and stamps == sorted(stamps) and stamps[-1] > 0
    assert (trace.format, trace.block_size, trace.token_scale) == ("tokens", 16, 1)
    assert trace.source == "embedded workload (seed 11)"
    for request in trace.requests:
        assert request.sequence[: len(request.tokens)] == request.tokens
        assert len(request.sequence) == len(request.tokens) + request.output_tokens > 0
        assert max(request.sequence) < SPEC.vocab


def test_the_workload_has_every_promised_shape() -> None:
    requests = generate_requests(SPEC)
    prompts = [r.tokens.tobytes() for r in requests]
    histories = {r.sequence.tobytes(): r for r in requests}
    grows = sum(  # a turn whose prompt starts with a whole earlier turn and its reply
        any(p.startswith(h) and p != h for h in histories) for p in prompts[:150]
    )
    assert grows > 20
    spaces = Counter(r.namespace for r in requests)
    assert set(spaces) == {None, "tenant-1", "tenant-2"}
    # shared system prompts with skewed popularity: the hottest first block is common
    first_blocks = Counter((r.namespace, r.tokens[:16].tobytes()) for r in requests)
    counts = sorted(first_blocks.values(), reverse=True)
    assert counts[0] >= 4 * counts[len(counts) // 2]
    # one-off prompts: first blocks nobody else has
    assert sum(1 for count in first_blocks.values() if count == 1) > 10
    paths = prefix_paths(generate(SPEC))
    assert paths.count < len(paths.nodes) / 3  # heavy reuse overall


def test_bad_specs_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one request"):
        generate_requests(WorkloadSpec(requests=0))
    with pytest.raises(ValueError, match="one tenant"):
        generate_requests(WorkloadSpec(tenants=0))


def test_forks_branch_a_conversation() -> None:
    """With forks certain, a later turn restarts from an earlier state of its session:
    its prompt does not extend the previous turn, yet shares more than the system prompt."""
    generator = _Generator(WorkloadSpec(seed=2, fork_probability=1.0))
    forks = 0
    for session in range(40):
        turns = generator.chat(session, 0.0, 0, None)
        for before, after in itertools.pairwise(turns):
            previous = np.concatenate([before.prompt, before.output]).tobytes()
            if not after.prompt.tobytes().startswith(previous):
                forks += 1
                assert after.turn >= 2
                assert after.prompt.tobytes().startswith(turns[0].prompt.tobytes())
    assert forks > 5


def test_the_seed_table_workload_has_the_articles_shape() -> None:
    """--workload seed-table: one tenant, exact 256-token messages and replies, prompts of
    6,144 tokens on average (6,123 measured), about 17 requests a second to the end."""
    requests = generate_requests(SEED_TABLE)
    assert len(requests) == 2000 and {r.namespace for r in requests} == {None}
    assert {r.output_tokens for r in requests} == {256}
    assert 6000 < np.mean([r.prompt_tokens for r in requests]) < 6300
    first = [r for r in requests if r.prompt_tokens == 3260 + 256]  # a chat's first turn
    assert first and all(r.priority is None for r in requests)
    stamps = np.array([r.timestamp or 0.0 for r in requests]) / 1000
    halves = np.histogram(stamps, bins=2)[0]
    assert 14 < len(stamps) / stamps[-1] < 20 and halves[1] >= halves[0]  # no lull at the end
    assert WORKLOADS["seed-table"] is SEED_TABLE and WORKLOADS["chat-agent"] == WorkloadSpec()
