"""Small traces for the simulator's tests, built from plain lists."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from kachedb_radix.spec.cli.main import main
from kachedb_radix.spec.simulate.point import Point
from kachedb_radix.spec.simulate.trace import Request, Trace
from tests.support.paths import DATA

MOONCAKE_SAMPLE = DATA / "mooncake_head.jsonl"


def block_trace(paths: list[list[int]], *, tokens_per_block: int = 1) -> Trace:
    """A block-hash trace: one request per list of hash ids, 1 ms apart."""
    requests = []
    for number, ids in enumerate(paths, 1):
        tokens = array("I", ids)
        requests.append(
            Request(tokens, tokens, len(ids) * tokens_per_block, 1, float(number), None, number)
        )
    return Trace(requests, "mooncake", 1, tokens_per_block, "test")


def token_trace(
    prompts: list[list[int]],
    *,
    block_size: int = 2,
    outputs: list[list[int]] | None = None,
    namespaces: list[str | None] | None = None,
    timestamps: list[float] | None = None,
) -> Trace:
    """A token trace; ``outputs`` (token ids) are inserted after their prompt."""
    requests = []
    for index, prompt in enumerate(prompts):
        tokens = array("I", prompt)
        output = [] if outputs is None else outputs[index]
        sequence = tokens + array("I", output) if output else tokens
        requests.append(
            Request(
                tokens,
                sequence,
                len(prompt),
                len(output),
                float(index) if timestamps is None else timestamps[index],
                None if namespaces is None else namespaces[index],
                index + 1,
            )
        )
    return Trace(requests, "tokens", block_size, 1, "test")


def assert_same_points(first: list[Point], second: list[Point]) -> None:
    """Two sweeps found the same figures at the same capacities (wall times aside)."""
    for a, b in zip(first, second, strict=True):
        assert (a.capacity, a.lru, a.belady, a.timeline) == (
            b.capacity,
            b.lru,
            b.belady,
            b.timeline,
        )
        assert a.replay.lengths == b.replay.lengths


def exit_status(arguments: Sequence[str]) -> int:
    """``main``'s exit status, whether it returns it or argparse exits with it (an option
    refused where it is parsed)."""
    try:
        return main(list(arguments))
    except SystemExit as stop:
        return int(str(stop.code))
