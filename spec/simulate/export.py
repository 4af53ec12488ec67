"""Writing traces: any trace as a token trace, a token trace as a block-hash trace.

``--save-workload`` writes the embedded workload so it can be read, edited and
replayed (a published benchmark's block-hash workload as it is, with its load
stages); the benchmark writes generated traces in the Mooncake format to measure
reading them. Block hashes are assigned as Mooncake's are: consecutive integers in
first-seen order, one per ``tokens_per_block``-token chunk of the prompt (the last
chunk may be partial), chained over the prefix and the namespace -- equal ids at
equal positions mean equal prefixes. Output token ids have no place in that
format, only their count. Cost: O(total tokens).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from .trace import Request, Trace


def token_lines(trace: Trace) -> Iterator[dict[str, Any]]:
    """Each request as a token-format object. O(tokens)."""
    for request in trace.requests:
        line: dict[str, Any] = {"tokens": request.tokens.tolist()}
        if request.sequence is not request.tokens:
            line["output_tokens"] = request.sequence[len(request.tokens) :].tolist()
        else:
            line["output_length"] = request.output_tokens
        _common(line, request)
        yield line


def mooncake_lines(trace: Trace, tokens_per_block: int = 512) -> Iterator[dict[str, Any]]:
    """Each request of a token trace as a Mooncake-format object. O(tokens).

    Raises:
        ValueError: ``trace`` is not a token trace, or ``tokens_per_block`` < 1.
    """
    if trace.format != "tokens" or tokens_per_block < 1:
        raise ValueError("mooncake_lines hashes a token trace into blocks of >= 1 token")
    ids: dict[tuple[int, bytes], int] = {}
    roots: dict[str | None, int] = {}
    step = 4 * tokens_per_block
    for request in trace.requests:
        parent = roots.setdefault(request.namespace, -1 - len(roots))
        raw = request.tokens.tobytes()
        hashes = []
        for at in range(0, len(raw), step):
            key = (parent, raw[at : at + step])
            parent = ids.setdefault(key, len(ids))
            hashes.append(parent)
        line: dict[str, Any] = {
            "input_length": request.prompt_tokens,
            "output_length": request.output_tokens,
            "hash_ids": hashes,
        }
        _common(line, request)
        yield line


def mooncake_records(trace: Trace) -> Iterator[dict[str, Any]]:
    """Each request of a block-hash trace as a Mooncake-format object, its hash ids as
    they are. O(ids).

    Raises:
        ValueError: ``trace`` is not a block-hash trace.
    """
    if trace.format != "mooncake":
        raise ValueError("mooncake_records writes a block-hash trace; hash a token trace "
                         "with mooncake_lines")  # fmt: skip
    for request in trace.requests:
        line: dict[str, Any] = {
            "input_length": request.prompt_tokens,
            "output_length": request.output_tokens,
            "hash_ids": request.tokens.tolist(),
        }
        _common(line, request)
        yield line


def _common(line: dict[str, Any], request: Request) -> None:
    if request.timestamp is not None:
        line["timestamp"] = request.timestamp
    if request.namespace is not None:
        line["namespace"] = request.namespace
    if request.stage is not None:
        line["stage"] = request.stage
    line.update(request.retention())


def write_lines(lines: Iterator[dict[str, Any]], path: Path) -> int:
    """Write JSON lines to ``path``; returns how many. O(size).

    Raises:
        OSError: the file cannot be written.
    """
    encoder = msgspec.json.Encoder()
    written = 0
    with path.open("wb") as stream:
        for line in lines:
            stream.write(encoder.encode(line) + b"\n")
            written += 1
    return written
