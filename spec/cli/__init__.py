"""The ``kachedb-radix`` command line (also ``python -m kachedb_radix.spec``).

One subcommand per tool of the executable spec's toolbox, each in its own module of
this package: ``demo`` (the teaching scenario, :mod:`kachedb_radix.spec.demo`), ``conform`` and
``replay`` (the conformance kit, :mod:`kachedb_radix.spec.cli.conform`), ``gate`` (the performance
gate, :mod:`kachedb_radix.spec.cli.gate`). Exit status: 0 success,
1 a finding (a disagreement, a regression), 2 a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kachedb_radix.reference import __version__
from kachedb_radix.spec.cli import conform, explain, gate, simulate
from kachedb_radix.spec.demo import run_demo
from kachedb_radix.spec.impls import (
    IMPLEMENTATION_NAMES,
    PURE_SWITCH,
    default_implementation,
    tree_class,
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="kachedb-radix",
        description="Reference radix tree for LLM KV prefix caching.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    status: int = args.handler(args)
    return status
