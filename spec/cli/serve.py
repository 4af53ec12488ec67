"""``kachedb-radix serve``: the reference (or the C twin) over the JSON-lines stdio protocol.

It reads requests from stdin until end of file and answers each on one line
(:mod:`kachedb_radix.spec.protocol.server`): a tool for implementers to diff their
program's traffic against, and what ``conform --cmd`` drives in the kit's own tests.
"""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    """Add the ``serve`` subcommand to ``commands`` (argparse subparsers)."""
    from ..protocol.server import add_arguments

    parser = commands.add_parser(
        "serve", help="serve the reference or accel over the JSON-lines stdio protocol"
    )
    add_arguments(parser)
    parser.set_defaults(handler=lambda args: _serve(args, parser))


def _serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from ..protocol.server import run

    return run(args, parser)
