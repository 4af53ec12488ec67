"""``kachedb-radix conform --index TARGET...``: the index level on router indexes.

Each TARGET (``reference``, ``accel``, ``dynamo``) is run by
:func:`kachedb_radix.spec.conform.index.check_index` under its own profile, or the one
``--profile`` names; the report is printed (``--json``: as JSON) and, with ``--report
DIR``, written to ``DIR/router-index.json`` and ``DIR/router-index.txt``.  Exit 0 when
every target agrees (declared deviations included), 1 when one differs, 2 on a usage
error (no target, an unknown one, an option of the cache levels).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..conform.index import IndexReport, check_index, resolve_index
from ..conform.index.check import DEFAULT_EXAMPLES
from ..conform.targets import TargetError
from ..inputs import make_directory, write_text
from ..peers import INDEX_PEERS
from ..twins import TWIN_NAMES

#: The index targets, for ``--help``.
INDEX_TARGETS: tuple[str, ...] = (*TWIN_NAMES, *INDEX_PEERS)
#: Streams per case by default.
INDEX_EXAMPLES = DEFAULT_EXAMPLES

#: Options of the cache levels that mean nothing for an index: (attribute, flag, unset).
_CACHE_ONLY: tuple[tuple[str, str, object], ...] = (
    ("cmd", "--cmd", []),
    ("levels", "--levels", None),
    ("events", "--events", None),
    ("tiers", "--tiers", False),
    ("mutants", "--mutants", False),
    ("policy", "--policy", None),
    ("policy_options", "--policy-options", None),
    ("block_sizes", "--block-sizes", None),
    ("pool_sizes", "--pool-sizes", None),
    ("save_traces", "--save-traces", None),
    ("first", "--first", False),
    ("no_shrink", "--no-shrink", False),
)


def run_index(args: argparse.Namespace) -> int:
    """The ``conform --index`` command. Returns the exit status. Cost: the runs'."""
    given = [flag for name, flag, unset in _CACHE_ONLY if getattr(args, name, unset) != unset]
    if given:
        print(
            f"conform --index: {', '.join(given)} is for caches, not router indexes",
            file=sys.stderr,
        )
        return 2
    if not args.targets:
        print(f"conform --index: name a TARGET ({', '.join(INDEX_TARGETS)})", file=sys.stderr)
        return 2
    try:
        targets = [resolve_index(name, args.profile) for name in args.targets]
    except TargetError as exc:
        print(f"conform --index: {exc}", file=sys.stderr)
        return 2
    examples = INDEX_EXAMPLES if args.examples is None else args.examples
    reports: list[IndexReport] = []
    for target in targets:
        report = check_index(target, examples=examples, seed=args.seed)
        reports.append(report)
        if not args.json:
            print(report.explain(), flush=True)
    data = {
        "level": "index",
        "seed": args.seed,
        "reports": [report.to_json() for report in reports],
    }
    if args.report is not None:
        written = _write(reports, data, args.report)
        if not args.json:
            print(f"report: {', '.join(str(path) for path in written)}")
    if args.json:
        print(json.dumps(data, indent=2))
    return 0 if all(report.ok for report in reports) else 1


def _write(reports: list[IndexReport], data: dict[str, object], folder: Path) -> list[Path]:
    make_directory(folder, "--report")
    as_json, as_text = folder / "router-index.json", folder / "router-index.txt"
    write_text(as_json, json.dumps(data, indent=2) + "\n", "--report")
    write_text(as_text, "\n\n".join(report.explain() for report in reports) + "\n", "--report")
    return [as_json, as_text]
