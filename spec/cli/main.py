"""The ``kachedb-radix`` command line: the parser with every subcommand, and ``main``.

Each subcommand's module registers its own arguments and handler
(:mod:`kachedb_radix.spec.cli`); ``demo`` is registered here, beside the version.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn, cast

from kachedb_radix.reference import __version__

from ..conform.targets import (
    IMPLEMENTATION_NAMES,
    PURE_SWITCH,
    default_implementation,
    tree_class,
)
from ..inputs import InputError
from . import conform, explain, gate, route, serve, simulate
from . import hash as hash_command
from .demo import run_demo


class Parser(argparse.ArgumentParser):
    """An argument parser whose refusal is one line: what was wrong, and where the
    options are listed (argparse's own prints the whole usage first), exit status 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``prog: message (prog --help lists the options)`` and exit 2."""
        self.exit(2, f"{self.prog}: {message} ({self.prog} --help lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = Parser(
        prog="kachedb-radix",
        description="Reference radix tree for LLM KV prefix caching.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # Each subcommand's parser is a Parser too (its refusals one line); registered as any.
    commands = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", required=True, parser_class=Parser),
    )
    demo = commands.add_parser(
        "demo", help="replay a small multi-turn scenario and draw the resulting tree"
    )
    demo.add_argument(
        "--impl",
        choices=IMPLEMENTATION_NAMES,
        default=None,
        help=f"tree implementation (default: accel, or reference when {PURE_SWITCH}=1)",
    )
    demo.set_defaults(handler=_demo)
    conform.register(commands)
    explain.register(commands)
    simulate.register(commands)
    gate.register(commands)
    serve.register(commands)
    route.register(commands)
    hash_command.register(commands)
    return parser


def _demo(args: argparse.Namespace) -> int:
    name = args.impl or default_implementation()
    try:
        tree = tree_class(name)
    except ImportError as error:
        print(f"kachedb-radix: {error}", file=sys.stderr)
        return 2
    print(run_demo(tree))
    return 0


#: The exit status of a command whose reader closed its output early (``... | head``):
#: 128 + SIGPIPE, what a shell reports for a process that SIGPIPE ended.
CLOSED_OUTPUT_STATUS = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status.

    Input refused anywhere below (:class:`~kachedb_radix.spec.inputs.InputError`) ends
    the command with its one line and status 2. A reader that stops reading
    (``kachedb-radix explain --text | head -n 3``) ends the command quietly with status
    141, as SIGPIPE would, never with a traceback: the rest of the output goes to
    ``os.devnull``, so the interpreter's final flush cannot fail either.
    """
    args = build_parser().parse_args(argv)
    try:
        status: int = args.handler(args)
        sys.stdout.flush()
    except InputError as exc:  # refused input a command did not word itself: one line
        print(f"kachedb-radix {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return CLOSED_OUTPUT_STATUS
    return status
