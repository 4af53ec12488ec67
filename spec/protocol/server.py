"""A stdio server for the reference (or the C twin): ``kachedb-radix serve``.

It is both a tool and a worked example of the protocol (``SPEC.md``, "The stdio
protocol"): an implementer can diff their program's traffic against it, and the
kit's own tests run the whole state machine through it as a child process.

Usage::

    kachedb-radix serve [--impl reference|accel] [--levels core,pinning,...] [--protocol N]

(or ``python -m kachedb_radix.spec.protocol.server``, the same options). It speaks the
kit's protocol version (:data:`~kachedb_radix.spec.protocol.messages.PROTOCOL_VERSION`)
unless ``--protocol`` asks for an older one: then it answers ``hello`` with that version
and offers only that version's operations, as a program written against it would (the
kit's tests keep such programs passing). It reads requests from stdin until end of file
and answers each on one line. Requests are dispatched through the table of operations
(:mod:`kachedb_radix.spec.conform.operations`).
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from kachedb_radix.reference.errors import ERROR_KINDS

from ..conform.adapter import TreeAdapter, supported_levels
from ..conform.candidate import Candidate, CandidateError
from ..conform.levels import LEVELS, LevelError, ordered, parse_levels
from ..conform.operations import OPERATIONS, level_since, offered, operation, operations_of
from ..twins import TWIN_NAMES, TwinUnavailable, twin_class
from .messages import (
    PROTOCOL_KINDS,
    PROTOCOL_VERSION,
    SUPPORTED_PROTOCOLS,
    ProtocolError,
    decode,
    encode,
    request_problem,
)

#: The kinds this server answers with: the rules' (R-ERR-3) and the protocol's own.
SERVER_KINDS = frozenset(ERROR_KINDS) | PROTOCOL_KINDS


def handle(candidate: Candidate, message: dict[str, Any], protocol: int = PROTOCOL_VERSION) -> Any:
    """Carry out one request on ``candidate`` and return the ``ok`` answer. O(the call).

    ``protocol`` is the version this server speaks: ``hello`` answers it (with the
    ``operations`` list from version 3 on), and an operation the candidate or that
    version does not offer is ``"unsupported"``.

    Raises:
        CandidateError: the call was rejected (its kind goes back to the kit), the
            request is malformed (kind ``"protocol"``: it does not validate against the
            schema, :func:`kachedb_radix.spec.protocol.messages.request_problem`) or names
            an operation not offered (kind ``"unsupported"``).
    """
    problem = request_problem(message)
    if problem is not None:
        raise CandidateError(*problem)
    op = message["op"]
    available = offered(candidate) & operations_of(frozenset(candidate.levels), protocol)
    if op == "hello":
        answer: dict[str, Any] = {
            "protocol": protocol,
            "name": candidate.name,
            "levels": ordered(candidate.levels),
            "block_sizes": None if candidate.block_sizes is None else list(candidate.block_sizes),
        }
        if protocol >= 3:
            answer["operations"] = [op.name for op in OPERATIONS if op.name in available]
        return answer
    if op not in available:
        raise CandidateError("unsupported", f"{candidate.name} does not offer {op!r} here")
    # Arguments protocol 4 or 5 added may be left out: they mean their default.
    arguments = [
        message.get(argument.name, argument.default) for argument in operation(op).arguments
    ]
    return getattr(candidate, op)(*arguments)


def serve(
    candidate: Candidate, stdin: TextIO, stdout: TextIO, protocol: int = PROTOCOL_VERSION
) -> int:
    """Answer requests from ``stdin`` on ``stdout`` until end of file; return 0.

    Every non-blank line gets exactly one answer that validates against the schema:
    a line that is not a JSON object, or a request without a valid ``id``, is
    answered with ``id`` null and kind ``"protocol"``; a call the implementation
    could not carry out for a reason that is not a rule's error kind is answered
    with kind ``"internal"`` (a bug, named in the message). Cost: one call per line.
    """
    for line in stdin:
        if not line.strip():
            continue
        stdout.write(encode(answer(candidate, line, protocol)) + "\n")
        stdout.flush()
    return 0


def answer(candidate: Candidate, line: str, protocol: int = PROTOCOL_VERSION) -> dict[str, Any]:
    """The response to one request line (see :func:`serve`). O(the call)."""
    request_id: Any = None
    try:
        message = decode(line)
        raw_id = message.get("id")
        request_id = raw_id if isinstance(raw_id, int) and not isinstance(raw_id, bool) else None
        if request_id is not None and request_id < 0:
            request_id = None
        return {"id": request_id, "ok": handle(candidate, message, protocol)}
    except ProtocolError as exc:
        return _error(None, "protocol", str(exc))
    except CandidateError as exc:
        if exc.kind not in SERVER_KINDS:
            return _error(request_id, "internal", f"{exc.kind}: {exc.message}")
        return _error(request_id, exc.kind, exc.message)
    except Exception as exc:  # the last resort: the server itself must never die
        return _error(request_id, "internal", f"{type(exc).__name__}: {exc}")


def _error(request_id: int | None, kind: str, message: str) -> dict[str, Any]:
    return {"id": request_id, "error": {"kind": kind, "message": message}}


def build(impl: str, levels: frozenset[str] | None = None) -> Candidate:
    """The candidate to serve: ``"reference"`` or ``"accel"``, declaring ``levels``
    (default: every level the implementation offers, :func:`supported_levels`).

    Raises:
        SystemExit: ``accel`` cannot be imported (the C twin is not built), or
            ``levels`` names a level the implementation does not offer.
    """
    try:
        factory, tiered = twin_class(impl, "RadixTree"), twin_class(impl, "TieredTree")
    except TwinUnavailable as exc:
        raise SystemExit(
            f"kachedb-radix serve: --impl {impl}: the C twin is not available ({exc})"
        ) from None
    offered = supported_levels(factory, tiered)
    if levels is not None and not levels <= offered:
        missing = ", ".join(ordered(levels - offered))
        raise SystemExit(f"kachedb-radix serve: {impl} does not offer level(s) {missing}")
    return TreeAdapter(factory, impl, offered if levels is None else levels, tier_factory=tiered)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The server's options, on ``parser`` (``kachedb-radix serve`` and ``python -m``)."""
    parser.add_argument("--impl", choices=TWIN_NAMES, default="reference")
    parser.add_argument(
        "--levels",
        default=None,
        help=f"levels to declare in hello (comma-separated from {', '.join(LEVELS)}; "
        "default: all the implementation offers)",
    )
    parser.add_argument(
        "--protocol",
        type=int,
        choices=SUPPORTED_PROTOCOLS,
        default=PROTOCOL_VERSION,
        help=f"the protocol version to speak (default {PROTOCOL_VERSION}); an older one "
        "offers only that version's operations, as a program written against it would",
    )


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Serve stdin and stdout as ``args`` say; the exit status (0 at end of input)."""
    try:
        levels = None if args.levels is None else parse_levels([args.levels])
    except LevelError as exc:
        parser.error(str(exc))
    # Bytes that are not UTF-8 must become a "protocol" answer, not a crash.
    if isinstance(sys.stdin, io.TextIOWrapper):
        sys.stdin.reconfigure(errors="replace")
    too_new = {level for level in LEVELS if args.protocol < level_since(level)}
    for level in ordered(too_new & (levels or frozenset())):
        parser.error(f"--levels: the {level} level needs protocol {level_since(level)} or later")
    candidate = build(args.impl, levels)
    if levels is None and too_new:
        candidate = build(args.impl, frozenset(candidate.levels) - too_new)
    return serve(candidate, sys.stdin, sys.stdout, args.protocol)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kachedb_radix.spec.protocol.server``: the same as ``kachedb-radix serve``."""
    parser = argparse.ArgumentParser(
        prog="python -m kachedb_radix.spec.protocol.server",
        description="Serve a kachedb-radix implementation over the JSON-lines stdio protocol.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv), parser)


if __name__ == "__main__":
    raise SystemExit(main())
