"""The sequential mode and the bounds against simulators written here with sets and dicts.

The oracle below knows nothing of the tree: a block is the tuple of every token up to
its end (with the namespace), the cache is a dict from block to the last request that
used it, and eviction takes the least recently used cached block with no cached
child, never from the request's own path -- the classic LRU cache simulation. The
tree's replay must give the same matched length for every request and the same
number of evictions, for both implementations (R-INS-5, R-EVICT-1, R-LRU-1, R-NS-1).
Belady is checked against an exhaustive search over every cache content.
"""

from __future__ import annotations

import functools
import itertools
import random

import pytest

from kachedb_radix.spec.simulate.bounds import belady_lengths, infinite_lengths, next_uses
from kachedb_radix.spec.simulate.formats import read_trace
from kachedb_radix.spec.simulate.metrics import hit_stats
from kachedb_radix.spec.simulate.prefix import prefix_paths
from kachedb_radix.spec.simulate.sequential import replay_sequential
from kachedb_radix.spec.simulate.trace import Trace
from kachedb_radix.spec.simulate.workload import WorkloadSpec, generate
from kachedb_radix.spec.twins import default_twin, twin_class
from tests.support.simulate import MOONCAKE_SAMPLE, block_trace, token_trace

Block = tuple[object, ...]


def _path(trace: Trace, index: int, *, sequence: bool) -> list[Block]:
    request = trace.requests[index]
    tokens = list(request.sequence if sequence else request.tokens)
    size = trace.block_size
    return [(request.namespace, *tokens[: (end + 1) * size]) for end in range(len(tokens) // size)]


def oracle_lru(trace: Trace, capacity: int) -> tuple[list[int], int]:
    """Matched tree lengths and evictions of a plain LRU over whole-prefix blocks."""
    last_use: dict[Block, int] = {}
    children: dict[Block, int] = {}  # cached children of each cached block
    lengths: list[int] = []
    evictions = 0
    size = trace.block_size
    for index in range(len(trace.requests)):
        prompt = _path(trace, index, sequence=False)
        hit = 0
        while hit < len(prompt) and prompt[hit] in last_use:
            hit += 1
        lengths.append(hit * size)
        path = _path(trace, index, sequence=True)[:capacity]
        on_path = set(path)
        missing = [block for block in path if block not in last_use]
        for _ in range(len(last_use) + len(missing) - capacity):
            leaves = [b for b in last_use if not children[b] and b not in on_path]
            oldest = min(leaves, key=last_use.__getitem__)
            assert sum(last_use[b] == last_use[oldest] for b in leaves) == 1  # no ties
            del last_use[oldest], children[oldest]
            if oldest[:-size] in children:
                children[oldest[:-size]] -= 1
            evictions += 1
        for block in missing:
            children[block] = 0
            if block[:-size] in children:
                children[block[:-size]] += 1
        for block in path:
            last_use[block] = index
    return lengths, evictions


def oracle_best(trace: Trace, capacity: int) -> int:
    """The most prompt blocks any offline policy can hit: every cache content tried."""
    prompts = [_path(trace, i, sequence=False) for i in range(len(trace.requests))]
    paths = [_path(trace, i, sequence=True)[:capacity] for i in range(len(trace.requests))]

    @functools.cache
    def best(step: int, cache: frozenset[Block]) -> int:
        if step == len(prompts):
            return 0
        hit = 0
        while hit < len(prompts[step]) and prompts[step][hit] in cache:
            hit += 1
        pool = sorted(cache | set(paths[step]), key=len)
        options = 0
        for size in range(min(capacity, len(pool)) + 1):
            for kept in itertools.combinations(pool, size):
                chosen = set(kept)
                if all(len(b) == 2 or b[:-1] in chosen for b in chosen):  # whole root paths
                    options = max(options, best(step + 1, frozenset(chosen)))
        return hit + options

    return best(0, frozenset())


def _random_block_trace(rng: random.Random) -> Trace:
    return block_trace(
        [[rng.randint(1, 3) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(2, 6))]
    )


# ---------------------------------------------------------------------- LRU


@pytest.mark.parametrize("capacity", [1, 3, 8, 40, 10_000])
def test_sequential_matches_the_oracle_on_small_token_traces(impl_name: str, capacity: int) -> None:
    """Random chats with shared prefixes, outputs and two namespaces: identical hits."""
    rng = random.Random(capacity)
    prompts, outputs, spaces = [], [], []
    history: dict[str | None, list[int]] = {None: [], "t": []}
    for _ in range(60):
        space = rng.choice([None, "t"])
        if rng.random() < 0.3:
            history[space] = history[space][: rng.randrange(len(history[space]) + 1)]
        prompt = history[space] + [rng.randrange(4) for _ in range(rng.randint(0, 7))]
        output = [rng.randrange(4) for _ in range(rng.randint(0, 3))]
        prompts.append(prompt)
        outputs.append(output)
        spaces.append(space)
        history[space] = prompt + output
    trace = token_trace(prompts, block_size=2, outputs=outputs, namespaces=spaces)
    done = replay_sequential(trace, twin_class(impl_name)(capacity, 2))
    assert (done.lengths, done.evictions) == oracle_lru(trace, capacity)


@functools.cache
def _sample_oracle(capacity: int) -> tuple[list[int], int]:
    return oracle_lru(read_trace(MOONCAKE_SAMPLE), capacity)


@pytest.mark.parametrize("capacity", [40, 400, 1500])
def test_sequential_matches_the_oracle_on_the_mooncake_sample(
    impl_name: str, capacity: int
) -> None:
    """The first 300 requests of the Mooncake trace: identical hits and evictions."""
    trace = read_trace(MOONCAKE_SAMPLE)
    done = replay_sequential(trace, twin_class(impl_name)(capacity, 1))
    assert (done.lengths, done.evictions) == _sample_oracle(capacity)


EMBEDDED = WorkloadSpec(requests=40, seed=3, block_size=64)


@functools.cache
def _embedded_oracle() -> tuple[list[int], int]:
    return oracle_lru(generate(EMBEDDED), 120)


def test_sequential_matches_the_oracle_on_the_embedded_workload(impl_name: str) -> None:
    """A small embedded workload (agents, chats, forks, tenants) at a tight pool."""
    trace = generate(EMBEDDED)
    done = replay_sequential(trace, twin_class(impl_name)(120, 64))
    lengths, evictions = _embedded_oracle()
    assert done.evictions == evictions > 0
    assert done.lengths == lengths
    assert hit_stats(trace, done.lengths).hit_blocks > 0


# ---------------------------------------------------------------------- bounds


def test_infinite_is_lru_with_room_for_everything() -> None:
    trace = read_trace(MOONCAKE_SAMPLE)
    paths = prefix_paths(trace)
    order = list(range(len(trace.requests)))
    lengths, evictions = oracle_lru(trace, paths.count)
    assert evictions == 0
    assert infinite_lengths(paths, order, 1) == lengths


def test_next_uses_by_brute_force() -> None:
    """Each position's next use is the next step whose prompt holds its prefix."""
    trace = token_trace(
        [[1, 1, 2, 2], [1, 1], [3, 3], [1, 1, 2, 2, 4, 4], [3, 3, 5, 5]],
        outputs=[[], [2, 2], [], [], []],
    )
    paths = prefix_paths(trace)
    order = [4, 0, 2, 1, 3]
    upcoming = next_uses(paths, order)
    for step, index in enumerate(order):
        for offset, node in enumerate(paths.path(index)):
            later = [
                s
                for s in range(step + 1, len(order))
                if node in paths.path(order[s])[: paths.prompt_blocks[order[s]]]
            ]
            expected = later[0] if later else 1 << 62
            assert upcoming[paths.starts[index] + offset] == expected


def test_belady_is_the_best_any_offline_policy_does() -> None:
    """On 150 random tiny traces and 3 capacities, Belady with bypass equals the
    exhaustive optimum, and is never below LRU nor above infinite capacity."""
    rng = random.Random(7)
    for _ in range(150):
        trace = _random_block_trace(rng)
        paths = prefix_paths(trace)
        order = list(range(len(trace.requests)))
        ceiling = sum(infinite_lengths(paths, order, 1))
        for capacity in (1, 2, 3):
            belady = sum(belady_lengths(paths, order, capacity, 1))
            lru = sum(oracle_lru(trace, capacity)[0])
            assert belady == oracle_best(trace, capacity), (trace.requests, capacity)
            assert lru <= belady <= ceiling


def test_belady_never_below_lru_on_real_traffic() -> None:
    trace = read_trace(MOONCAKE_SAMPLE)
    paths = prefix_paths(trace)
    order = list(range(len(trace.requests)))
    for capacity in (50, 400, 2000):
        belady = hit_stats(trace, belady_lengths(paths, order, capacity, 1))
        lru = hit_stats(
            trace,
            replay_sequential(trace, twin_class(default_twin())(capacity, 1)).lengths,
        )
        assert lru.saved_tokens <= belady.saved_tokens


def test_belady_rejects_an_empty_pool() -> None:
    trace = block_trace([[1]])
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        belady_lengths(prefix_paths(trace), [0], 0, 1)


def test_belady_skips_retired_entries_of_a_reused_output() -> None:
    """A cached reply on a later request's path (beyond its prompt) keeps its far next
    use, but being on the path retires its heap entry: Belady passes over it and
    keeps the prompt that is needed again."""
    trace = token_trace([[1], [9], [1], [9]], block_size=1, outputs=[[2], [], [2, 3], []])
    paths = prefix_paths(trace)
    order = [0, 1, 2, 3]
    assert belady_lengths(paths, order, 3, 1) == [0, 0, 1, 1]
    assert sum(belady_lengths(paths, order, 3, 1)) == oracle_best(trace, 3)
    assert oracle_lru(trace, 3)[0] == [0, 0, 1, 0]


def test_next_uses_with_no_prompt_block() -> None:
    trace = token_trace([[1], [1]], block_size=2, outputs=[[2, 3], []])
    assert next_uses(prefix_paths(trace), [0, 1]).tolist() == [1 << 62]
