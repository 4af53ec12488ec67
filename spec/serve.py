"""A stdio server for the reference (or the C twin): ``python -m spec.serve``.

It is both a tool and a worked example of the protocol (``SPEC.md``, "The stdio
protocol"): an implementer can diff their program's traffic against it, and the
kit's own tests run the whole state machine through it as a child process.

Usage::

    python -m spec.serve [--impl reference|accel] [--levels core,pinning,...]

It speaks protocol version 2 (``spec.protocol.PROTOCOL_VERSION``).

It reads requests from stdin until end of file and answers each on one line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from .adapter import TreeAdapter, supported_levels
from .candidate import Candidate, CandidateError
from .levels import LEVELS, LevelError, ordered, parse_levels
from .protocol import PROTOCOL_VERSION, ProtocolError, decode, encode
from .steps import SNAPSHOT_OPS


def handle(candidate: Candidate, message: dict[str, Any]) -> Any:
    """Carry out one request on ``candidate`` and return the ``ok`` answer. O(the call).

    Raises:
        CandidateError: the call was rejected (its kind goes back to the kit), or
            the request was malformed (kind ``"protocol"``) or names an unknown
            operation (kind ``"unsupported"``).
    """
    op = message.get("op")
    try:
        if op == "hello":
            return {
                "protocol": PROTOCOL_VERSION,
                "name": candidate.name,
                "levels": ordered(candidate.levels),
                "block_sizes": None
                if candidate.block_sizes is None
                else list(candidate.block_sizes),
            }
        if op == "reset":
            candidate.reset(message["num_blocks"], message["block_size"])
            return None
        if op == "match":
            return candidate.match(message["tokens"], message["namespace"], message["pin"])
        if op == "insert":
            return candidate.insert(message["tokens"], message["namespace"], message["pin"])
        if op == "release":
            candidate.release(message["lease"])
            return None
        if op == "evict":
            return candidate.evict(message["count"])
        if op == "stats":
            return candidate.stats()
        if op == "namespaces":
            return candidate.namespaces()
        if op == "dump":
            return candidate.dump()
        if op in SNAPSHOT_OPS and "snapshots" not in candidate.levels:
            raise CandidateError("unsupported", f"{op!r} needs the snapshots level")
        if op == "snapshot":
            return candidate.snapshot()
        if op == "reader":
            return candidate.reader()
        if op == "leave":
            candidate.leave(message["snapshot"])
            return None
        if op == "snapshot_match":
            return candidate.snapshot_match(
                message["snapshot"], message["tokens"], message["namespace"]
            )
        if op == "snapshot_dump":
            return candidate.snapshot_dump(message["snapshot"])
        if op == "reclaim":
            return candidate.reclaim()
        if op == "drop":
            candidate.drop(message["snapshot"])
            return None
    except KeyError as exc:
        raise CandidateError("protocol", f"request {op!r} lacks field {exc}") from None
    raise CandidateError("unsupported", f"unknown operation {op!r}")


def serve(candidate: Candidate, stdin: TextIO, stdout: TextIO) -> int:
    """Answer requests from ``stdin`` on ``stdout`` until end of file; return 0.

    A line that is not a JSON object is answered with ``id`` null and kind
    ``"protocol"``. Cost: one call per line.
    """
    for line in stdin:
        if not line.strip():
            continue
        request_id: Any = None
        try:
            message = decode(line)
            request_id = message.get("id")
            response: dict[str, Any] = {"id": request_id, "ok": handle(candidate, message)}
        except ProtocolError as exc:
            response = {"id": None, "error": {"kind": "protocol", "message": str(exc)}}
        except CandidateError as exc:
            response = {"id": request_id, "error": {"kind": exc.kind, "message": exc.message}}
        stdout.write(encode(response) + "\n")
        stdout.flush()
    return 0


def build(impl: str, levels: frozenset[str] | None = None) -> Candidate:
    """The candidate to serve: ``"reference"`` or ``"accel"``, declaring ``levels``
    (default: every level the implementation offers, :func:`supported_levels`).

    Raises:
        SystemExit: ``accel`` cannot be imported (the C twin is not built), or
            ``levels`` names a level the implementation does not offer.
    """
    factory: Any
    if impl == "accel":
        try:
            import accel
        except ImportError as exc:
            raise SystemExit(
                f"spec.serve: --impl accel: the C twin is not available ({exc})"
            ) from None
        factory = accel.RadixTree
    else:
        import reference

        factory = reference.RadixTree
    offered = supported_levels(factory)
    if levels is not None and not levels <= offered:
        missing = ", ".join(ordered(levels - offered))
        raise SystemExit(f"spec.serve: {impl} does not offer level(s) {missing}")
    return TreeAdapter(factory, impl, offered if levels is None else levels)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m spec.serve",
        description="Serve a kachedb-radix implementation over the JSON-lines stdio protocol.",
    )
    parser.add_argument("--impl", choices=("reference", "accel"), default="reference")
    parser.add_argument(
        "--levels",
        default=None,
        help=f"levels to declare in hello (comma-separated from {', '.join(LEVELS)}; "
        "default: all the implementation offers)",
    )
    args = parser.parse_args(argv)
    try:
        levels = None if args.levels is None else parse_levels([args.levels])
    except LevelError as exc:
        parser.error(str(exc))
    return serve(build(args.impl, levels), sys.stdin, sys.stdout)


if __name__ == "__main__":
    raise SystemExit(main())
