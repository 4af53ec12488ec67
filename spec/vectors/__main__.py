"""``python -m kachedb_radix.spec.vectors [--write | --check]``: regenerate or verify the golden
vectors."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import path_of, stale, write


def main(argv: Sequence[str] | None = None) -> int:
    """Write the vectors (``--write``) or check them (default); return the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m kachedb_radix.spec.vectors",
        description="Regenerate (--write) or check (--check, the default) the golden vectors.",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite spec/vectors/*.jsonl")
    action.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    args = parser.parse_args(argv)
    if args.write:
        for path in write():
            print(f"wrote {path}")
        return 0
    outdated = stale()
    for name in outdated:
        print(f"stale: {path_of(name)} (regenerate: python -m kachedb_radix.spec.vectors --write)")
    if not outdated:
        print("vectors are up to date")
    return 1 if outdated else 0


if __name__ == "__main__":
    sys.exit(main())
