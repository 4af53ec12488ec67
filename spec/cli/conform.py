"""``kachedb-radix conform`` and ``kachedb-radix replay``: the conformance kit's CLI.

``conform TARGET... [--cmd "program args"]...`` drives each target in lockstep with
the reference (see :mod:`spec.targets` for target names), prints each report and a
side-by-side summary, and exits 1 on any disagreement or failure. ``--mutants``
also runs the kit against every planted bug in :mod:`spec.mutants` and exits 1 if
one survives. ``replay TRACE --target T`` replays a JSON-lines trace (a golden
vector file or a reported disagreement) and shows where T differs.

Exit status: 0 all agree (and every mutant killed), 1 a disagreement, a failure or
a surviving mutant, 2 a usage error (unknown target, unreadable trace, bad level).

:mod:`spec.cli` calls :func:`register`; :func:`main` runs the two subcommands on their
own.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spec.candidate import Candidate, CandidateFailure
from spec.levels import GROUP_LEVEL, LEVELS, LevelError, ordered, parse_levels
from spec.replay import ReplayResult, TraceError, read_trace, replay
from spec.runner import KitSettings, Report, run_kit
from spec.stdio import DEFAULT_TIMEOUT
from spec.targets import TargetError, command, resolve

EXIT_OK = 0
EXIT_DIFFERS = 1
EXIT_USAGE = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``conform`` and ``replay`` subcommands to a CLI's subparsers."""
    conform = subparsers.add_parser(
        "conform",
        help="check implementations against the reference (and the mutant catalogue)",
        description="Drive each TARGET in lockstep with the reference; report the shortest "
        "sequence of operations on which they disagree.",
    )
    conform.add_argument(
        "targets",
        nargs="*",
        metavar="TARGET",
        help="reference, accel, or module:attribute (a tree class or a plain-data candidate)",
    )
    _add_cmd(conform)
    conform.add_argument(
        "--examples",
        type=int,
        default=KitSettings.examples,
        help=f"operation sequences to try (default {KitSettings.examples})",
    )
    conform.add_argument(
        "--seed",
        type=int,
        default=KitSettings.seed,
        help="search seed; the same seed repeats the same search (default 0)",
    )
    conform.add_argument(
        "--steps",
        type=int,
        default=KitSettings.steps,
        help=f"most operations per sequence (default {KitSettings.steps})",
    )
    conform.add_argument(
        "--levels",
        action="append",
        default=None,
        help=f"levels to check, comma-separated from {', '.join(LEVELS)} (default: all "
        "the target declares; core is always included)",
    )
    conform.add_argument(
        "--no-shrink",
        action="store_true",
        help="report the first disagreement found without shrinking it",
    )
    conform.add_argument(
        "--mutants",
        action="store_true",
        help="also run the kit against every planted bug in spec.mutants",
    )
    conform.add_argument("--json", action="store_true", help="print the results as JSON")
    conform.set_defaults(handler=run_conform)

    replayer = subparsers.add_parser(
        "replay",
        help="replay a JSON-lines trace against an implementation",
        description="Replay TRACE (golden vectors or a reported disagreement) and show the "
        "first step where the target's answer differs from the expected one.",
    )
    replayer.add_argument("trace", type=Path, metavar="TRACE", help="a JSON-lines trace file")
    replayer.add_argument(
        "--target", default=None, help="reference (default), accel or module:attribute"
    )
    _add_cmd(replayer)
    replayer.add_argument("--json", action="store_true", help="print the result as JSON")
    replayer.set_defaults(handler=run_replay)


def _add_cmd(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cmd",
        action="append",
        default=[],
        metavar="'PROGRAM ARGS'",
        help="a program speaking the stdio protocol (SPEC.md); repeatable",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds allowed per answer over stdio (default {DEFAULT_TIMEOUT:g})",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``conform`` or ``replay`` as a standalone CLI; return the exit status."""
    parser = argparse.ArgumentParser(prog="kachedb-radix")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    status: int = args.handler(args)
    return status


# ---------------------------------------------------------------------- conform


def run_conform(args: argparse.Namespace) -> int:
    """The ``conform`` subcommand. Returns the exit status."""
    if not args.targets and not args.cmd and not args.mutants:
        print("conform: name a TARGET, a --cmd, or --mutants", file=sys.stderr)
        return EXIT_USAGE
    try:
        levels = None if args.levels is None else parse_levels(args.levels)
    except LevelError as exc:
        print(f"conform: {exc}", file=sys.stderr)
        return EXIT_USAGE
    kit = KitSettings(
        examples=args.examples, seed=args.seed, steps=args.steps, shrink=not args.no_shrink
    )
    reports: list[Report] = []
    for name in [*args.targets, *(f"--cmd {line}" for line in args.cmd)]:
        candidate = _open(name, args.timeout)
        if candidate is None:
            return EXIT_USAGE
        try:
            reports.append(run_kit(candidate, levels, kit))
        except LevelError as exc:
            print(f"conform: {exc}", file=sys.stderr)
            return EXIT_USAGE
        finally:
            candidate.close()
        if not args.json:
            print(reports[-1].explain(), flush=True)
            undeclared = [level for level in LEVELS if level not in candidate.levels]
            if levels is None and undeclared:
                print(f"  not checked (not declared): {', '.join(undeclared)}", flush=True)
    mutants = _run_mutants(kit, quiet=args.json) if args.mutants else None
    if args.json:
        output: dict[str, Any] = {"results": [report.to_json() for report in reports]}
        if mutants is not None:
            output["mutants"] = mutants
        print(json.dumps(output, indent=2))
    elif reports:
        print(_summary(reports))
    failed = any(not report.passed for report in reports)
    survived = mutants is not None and mutants["killed"] < mutants["total"]
    return EXIT_DIFFERS if failed or survived else EXIT_OK


def _open(name: str, timeout: float) -> Candidate | None:
    try:
        if name.startswith("--cmd "):
            return command(name.removeprefix("--cmd "), timeout=timeout)
        return resolve(name)
    except TargetError as exc:
        print(f"conform: {exc}", file=sys.stderr)
    except CandidateFailure as exc:
        print(f"conform: {name}: {exc}", file=sys.stderr)
    return None


def _summary(reports: list[Report]) -> str:
    rows = [("implementation", "levels", "verdict", "examples", "seconds")]
    for report in reports:
        rows.append(
            (
                report.candidate,
                ",".join(report.levels),
                report.verdict,
                str(report.examples),
                f"{report.seconds:.1f}",
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(5)]
    lines = ["", "summary:"]
    for row in rows:
        lines.append(
            "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        )
    return "\n".join(lines)


def _run_mutants(kit: KitSettings, *, quiet: bool) -> dict[str, Any]:
    from spec.mutants import MUTANTS, check_mutant

    mutant_kit = KitSettings(examples=kit.examples, seed=kit.seed, steps=kit.steps, shrink=False)
    results = []
    for mutant in MUTANTS.values():
        result = check_mutant(mutant, mutant_kit)
        results.append(result)
        if not quiet:
            verdict = "killed  " if result.killed else "SURVIVED"
            print(
                f"  {verdict} {mutant.name:34} {result.seconds:6.2f} s  "
                f"{result.examples:4d} examples  ({', '.join(mutant.rules)})",
                flush=True,
            )
    killed = [result for result in results if result.killed]
    times = [result.seconds for result in killed]
    summary: dict[str, Any] = {
        "total": len(results),
        "killed": len(killed),
        "median_seconds_to_kill": round(statistics.median(times), 3) if times else None,
        "worst_seconds_to_kill": round(max(times), 3) if times else None,
        "mutants": [
            {
                "name": result.mutant.name,
                "rules": list(result.mutant.rules),
                "levels": ordered(
                    {GROUP_LEVEL[rule.split("-")[1]] for rule in result.mutant.rules}
                ),
                "description": result.mutant.description,
                "killed": result.killed,
                "seconds": round(result.seconds, 3),
                "examples": result.examples,
                "first_difference": result.step,
            }
            for result in results
        ],
    }
    if not quiet:
        print(
            f"mutants: {len(killed)}/{len(results)} killed; time to kill: median "
            f"{summary['median_seconds_to_kill']} s, worst {summary['worst_seconds_to_kill']} s"
        )
    return summary


# ---------------------------------------------------------------------- replay


def run_replay(args: argparse.Namespace) -> int:
    """The ``replay`` subcommand. Returns the exit status."""
    if args.target is not None and args.cmd:
        print("replay: give --target or --cmd, not both", file=sys.stderr)
        return EXIT_USAGE
    name = f"--cmd {args.cmd[0]}" if args.cmd else (args.target or "reference")
    try:
        steps = read_trace(args.trace)
    except (OSError, TraceError) as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return EXIT_USAGE
    candidate = _open(name, args.timeout)
    if candidate is None:
        return EXIT_USAGE
    try:
        result = replay(steps, candidate)
    except TraceError as exc:
        print(f"replay: {args.trace}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        candidate.close()
    if args.json:
        print(json.dumps(_replay_json(result), indent=2))
    else:
        print(_replay_text(result, args.trace))
    return EXIT_OK if result.passed else EXIT_DIFFERS


def _replay_text(result: ReplayResult, trace: Path) -> str:
    lines = [
        f"{result.candidate}: replayed {result.steps} steps of {result.traces} trace(s) "
        f"from {trace}"
    ]
    if result.skipped:
        lines.append(f"  skipped (levels not declared): {', '.join(result.skipped)}")
    if result.failure is not None:
        lines.append(result.failure)
    elif result.difference is not None:
        lines.append(result.difference.explain())
    else:
        lines.append("  every answer as expected")
    return "\n".join(lines)


def _replay_json(result: ReplayResult) -> dict[str, Any]:
    data: dict[str, Any] = {
        "candidate": result.candidate,
        "passed": result.passed,
        "steps": result.steps,
        "traces": result.traces,
        "skipped": result.skipped,
    }
    if result.difference is not None:
        data["difference"] = {
            "step": result.difference.index + 1,
            "expected": result.difference.expected,
            "actual": result.difference.actual,
            "levels": ordered(result.difference.levels),
        }
    if result.failure is not None:
        data["failure"] = result.failure
    return data


if __name__ == "__main__":
    sys.exit(main())
