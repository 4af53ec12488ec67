"""The ``kachedb-radix`` command: ``demo`` now, the conformance kit and benchmarks beside it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import conform
from .demo import run_demo
from .impls import IMPLEMENTATION_NAMES, PURE_SWITCH, default_implementation, tree_class


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="kachedb-radix",
        description="Reference radix tree for LLM KV prefix caching.",
    )
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


if __name__ == "__main__":
    sys.exit(main())
