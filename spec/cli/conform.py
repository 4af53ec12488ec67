"""``kachedb-radix conform`` and ``kachedb-radix replay``: the conformance kit's CLI.

``conform TARGET... [--cmd "program args"]...`` drives each target in lockstep with the reference
(see :mod:`kachedb_radix.spec.conform.targets` for target names) under its deviation profile
(``--profile``; :mod:`kachedb_radix.spec.conform.profile`), prints each report -- every finding with
its rule ids, one per rule unless ``--first`` -- and a side-by-side summary, writes the conformance
report page with ``--report DIR`` (:mod:`kachedb_radix.spec.conform.page`), and exits 1 on any
finding or failure. ``--mutants`` also runs the kit against every planted bug in
:mod:`kachedb_radix.spec.mutants` and exits 1 if one survives. ``replay TRACE --target T`` replays a
JSON-lines trace (a golden vector file or a reported finding) and shows where T differs.

Exit status: 0 all agree (and every mutant killed), 1 a disagreement, a failure or
a surviving mutant, 2 a usage error (unknown target, unreadable trace, bad level), or a
run that would check nothing (no examples; a trace of no steps, or every trace skipped),
3 a kit error: the kit itself raised (its bug, not the target's; nothing after it was
judged), its trace and traceback saved (:mod:`kachedb_radix.spec.conform.errors`).
Every option is checked when the command line is parsed (:mod:`kachedb_radix.spec.inputs`),
its caps stated in ``--help`` and ``docs/reliability.md``.

:mod:`kachedb_radix.spec.cli` calls :func:`register`; :func:`main` runs the two subcommands on their
own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kachedb_radix.reference.events import ENGINES, SCHEMES
from kachedb_radix.reference.policies import POLICIES

from ..conform.candidate import CandidateFailure
from ..conform.errors import EXIT_KIT_ERROR, KitError
from ..conform.levels import (
    GROUP_LEVEL,
    LEVELS,
    OPT_IN_LEVELS,
    TIERS_EXCLUDE,
    LevelError,
    ordered,
    parse_levels,
)
from ..conform.page import save_traces, write_report
from ..conform.profile import ProfileError
from ..conform.profile import parse as parse_profile
from ..conform.replay import ReplayResult, TraceError, read_trace, replay
from ..conform.run import KitReport, KitSettings, dumps, kit_json, run_kit
from ..conform.steps import Step
from ..conform.targets import Target, TargetError, command, resolve
from ..inputs import (
    LIMITS,
    choice_list,
    count,
    count_list,
    count_range,
    input_path,
    json_object,
    output_dir,
)
from .conform_index import INDEX_EXAMPLES, INDEX_TARGETS, run_index
from .options import add_timeout, profile_name, profile_option, timeouts

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
        "--index",
        action="store_true",
        help="check router indexes instead of caches (the index level, R-ROUTE-*): each "
        f"TARGET is {', '.join(INDEX_TARGETS)} or module:attribute; event streams from "
        "several workers, each worker's depth compared with the reference index after "
        "every batch",
    )
    conform.add_argument(
        "--examples",
        type=count(1, LIMITS["kit_examples"].maximum),
        default=None,
        help=f"operation sequences to try, at least 1 and {LIMITS['kit_examples'].describe()} "
        f"(default {KitSettings.examples}; with --index, streams per case, default "
        f"{INDEX_EXAMPLES})",
    )
    conform.add_argument(
        "--seed",
        type=count(0, 2**64 - 1),
        default=KitSettings.seed,
        help="search seed, 0 to 2**64 - 1; the same seed repeats the same search (default 0)",
    )
    conform.add_argument(
        "--steps",
        type=count(1, LIMITS["kit_steps"].maximum),
        default=KitSettings.steps,
        help=f"most operations per sequence, at least 1 and {LIMITS['kit_steps'].describe()} "
        f"(default {KitSettings.steps})",
    )
    conform.add_argument(
        "--levels",
        action="append",
        type=choice_list(LEVELS),
        default=None,
        metavar="LEVEL,...",
        help=f"levels to check, comma-separated from {', '.join(LEVELS)} (default: all "
        "the target declares; core is always included)",
    )
    conform.add_argument(
        "--events",
        nargs="?",
        const="",
        default=None,
        choices=("", *dict.fromkeys((*SCHEMES, *ENGINES))),  # a name in both: the engine
        metavar="SCHEME",
        help="also check the KV event stream (the opt-in events level, R-EVENT-*, R-ROUTE-*): "
        "the batches against the reference's, an index fed them against the target's blocks, "
        "recovery from dropped batches, late subscribers and restarts; SCHEME names the block "
        f"hashes, one of {', '.join(SCHEMES)}, or an engine's ({', '.join(ENGINES)}: its "
        "scheme and seed at its defaults) (default: the profile's [events], else sha256_cbor)",
    )
    conform.add_argument(
        "--tiers",
        action="store_true",
        help="also check the cache over device, host and disk (the opt-in tiers level, "
        "R-TIER-*): demotion, lookup across tiers, restore, write-through, pins per tier, "
        "and every move followed byte-free to what each slot holds; leaves out snapshots "
        "and events",
    )
    conform.add_argument(
        "--no-shrink",
        action="store_true",
        help="report findings without shrinking them",
    )
    conform.add_argument(
        "--first",
        action="store_true",
        help="stop at the first finding (default: keep searching and report one finding per rule)",
    )
    conform.add_argument(
        "--profile",
        type=profile_option,
        default=None,
        metavar="FILE",
        help="a deviation profile (TOML, spec/conform/profile.py) for every target named, or "
        "'strict' for none (default: each target's own; sglang ships spec/peers/sglang.toml)",
    )
    conform.add_argument(
        "--policy",
        default=None,
        choices=POLICIES,
        metavar="NAME",
        help="the eviction policy the targets run and the oracle follows (R-POL-*: "
        f"{', '.join(POLICIES)}; default: the profile's, else lru)",
    )
    conform.add_argument(
        "--policy-options",
        type=json_object,
        default=None,
        metavar="JSON",
        help="that policy's options as a JSON object, e.g. '{\"protected_percent\": 50}'",
    )
    conform.add_argument(
        "--block-sizes",
        type=count_list(
            1, LIMITS["kit_block_tokens"].maximum, most_items=LIMITS["list_items"].maximum
        ),
        default=None,
        metavar="B,B,...",
        help="block sizes to draw, each at least 1 and "
        f"{LIMITS['kit_block_tokens'].describe()}, {LIMITS['list_items'].describe()} "
        "(default 1,2,3,4; intersected with the target's)",
    )
    conform.add_argument(
        "--pool-sizes",
        type=count_range(1, LIMITS["kit_pool_blocks"].maximum),
        default=None,
        metavar="MIN-MAX",
        help="pool sizes to draw from, each at least 1 and "
        f"{LIMITS['kit_pool_blocks'].describe()} "
        f"(default {KitSettings.pool[0]}-{KitSettings.pool[1]})",
    )
    conform.add_argument(
        "--budget",
        type=count(1, LIMITS["kit_budget"].maximum),
        default=KitSettings.budget,
        help="most operations a search runs, fills included, at least 1 and "
        f"{LIMITS['kit_budget'].describe()} (default {KitSettings.budget})",
    )
    conform.add_argument(
        "--report",
        type=output_dir,
        default=None,
        metavar="DIR",
        help="also write DIR/index.html and DIR/report.json: targets x rules",
    )
    conform.add_argument(
        "--mutants",
        action="store_true",
        help="also run the kit against every planted bug in spec.mutants",
    )
    conform.add_argument(
        "--json",
        action="store_true",
        help="print the results as JSON (spec/conform/report.schema.json)",
    )
    conform.add_argument(
        "--save-traces",
        type=output_dir,
        default=None,
        metavar="DIR",
        help="write each finding's shrunk trace as DIR/<target>-<rule>.jsonl (replayable)",
    )
    conform.set_defaults(handler=run_conform)

    replayer = subparsers.add_parser(
        "replay",
        help="replay a JSON-lines trace against an implementation",
        description="Replay TRACE (golden vectors or a reported disagreement) and show the "
        "first step where the target's answer differs from the expected one.",
    )
    replayer.add_argument(
        "trace",
        type=input_path,
        metavar="TRACE",
        help=f"a JSON-lines trace file ({LIMITS['trace_bytes'].describe()}, "
        f"{LIMITS['trace_steps'].describe()})",
    )
    replayer.add_argument(
        "--target", default=None, help="reference (default), accel or module:attribute"
    )
    _add_cmd(replayer, "the program to replay on, instead of --target")
    replayer.add_argument(
        "--profile",
        type=profile_option,
        default=None,
        metavar="FILE",
        help="judge under this deviation profile, or 'strict' for none (default: the "
        "target's own, as conform judges it)",
    )
    replayer.add_argument("--json", action="store_true", help="print the result as JSON")
    replayer.set_defaults(handler=run_replay)


def _add_cmd(
    parser: argparse.ArgumentParser,
    what: str = "a program speaking the stdio protocol (SPEC.md); repeatable",
) -> None:
    parser.add_argument("--cmd", action="append", default=[], metavar="'PROGRAM ARGS'", help=what)
    add_timeout(parser, "per call, over stdio and in-process")


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
    if args.index:
        return run_index(args)
    if not args.targets and not args.cmd and not args.mutants:
        print("conform: name a TARGET, a --cmd, or --mutants", file=sys.stderr)
        return EXIT_USAGE
    levels = (
        None
        if args.levels is None
        else parse_levels(name for group in args.levels for name in group)
    )
    kit = _settings(args)
    reports: list[KitReport] = []
    for name in [*args.targets, *(f"--cmd {line}" for line in args.cmd)]:
        report = _check(name, args, levels, kit)
        if report is None:
            return EXIT_USAGE
        reports.append(report)
        if report.kit_error is not None:
            _save_kit_error(report.kit_error, args.save_traces, report.candidate)
        if not args.json:
            print(report.explain(), flush=True)
            # Under the target's own lines: the levels it does not declare.
            undeclared = [level for level in LEVELS if level not in report.levels]
            if levels is None and undeclared:
                print(f"  not checked (not declared): {', '.join(undeclared)}", flush=True)
    idle = [report.candidate for report in reports if report.examples == 0 and report.passed]
    if idle:  # a pass must rest on something; nothing is written for it
        print(f"conform: {', '.join(idle)}: no example ran, nothing was checked", file=sys.stderr)
        return EXIT_USAGE
    mutants = _run_mutants(kit, quiet=args.json) if args.mutants else None
    if args.save_traces is not None:
        for path in save_traces(reports, args.save_traces):
            if not args.json:
                print(f"trace: {path}")
    if args.report is not None and reports:
        made_by = {
            "targets": [*args.targets, *(f"--cmd {line}" for line in args.cmd)],
            "profile": profile_name(args.profile),
            "levels": None if args.levels is None else [",".join(group) for group in args.levels],
            "settings": kit_json(kit),
        }
        names = [*args.targets, *(f"--cmd {line}" for line in args.cmd)]
        written = write_report(
            reports,
            args.report,
            made_by,
            _explainer(
                {id(report): name for report, name in zip(reports, names, strict=True)}, args
            ),
        )
        if not args.json:
            print(f"report: {', '.join(str(path) for path in written)}")
    if args.json:
        extra: dict[str, Any] = {"mutants": mutants} if mutants is not None else {}
        print(dumps(reports, **extra))
    elif reports:
        print(_summary(reports))
    failed = any(not report.passed for report in reports)
    survived = mutants is not None and mutants["killed"] < mutants["total"]
    kit_errors = any(report.kit_error is not None for report in reports)
    if kit_errors or (mutants is not None and mutants["kit_errors"]):
        return EXIT_KIT_ERROR
    return EXIT_DIFFERS if failed or survived else EXIT_OK


def _save_kit_error(
    error: KitError, directory: Path | None, name: str, command: str = "conform"
) -> None:
    """Save a kit error's trace and traceback (in ``directory``, else a fresh temporary
    folder) and say where, on stderr."""
    folder = directory if directory is not None else Path(tempfile.mkdtemp(prefix="kachedb-"))
    stem = "kit-error-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    try:
        paths = error.save(folder, stem)
    except OSError as exc:
        print(f"{command}: {error.headline()} (its trace could not be saved: {exc})",
              file=sys.stderr)  # fmt: skip
        return
    print(
        f"{command}: {error.headline()}\n  a bug in the kit, not in {name}: trace and "
        f"traceback saved to {', '.join(map(str, paths))}",
        file=sys.stderr,
    )


def _explainer(
    names: dict[int, str], args: argparse.Namespace
) -> Callable[[KitReport, list[Step]], str | None]:
    """Makes the report's explain pages: a trace run again on the report's implementation
    beside the reference, under the profile it was checked under (None when it cannot run:
    the page is then left out)."""
    from ..explain import RecordError, build_page, frame_views, record

    def explain(report: KitReport, steps: list[Step]) -> str | None:
        name = names.get(id(report))
        target = _target(name, args) if name is not None else None
        if target is None:
            return None
        try:
            candidate = target.open()
        except CandidateFailure:
            return None
        try:
            profile = None if report.profile.strict else report.profile
            recording = record(
                steps,
                candidate,
                title=f"{report.candidate}: a trace of the report",
                source=f"kachedb-radix conform --report ({report.candidate})",
                profile=profile,
            )
        except RecordError:
            return None
        finally:
            candidate.close()
        return build_page(recording, frame_views(recording))

    return explain


def _settings(args: argparse.Namespace) -> KitSettings:
    """The kit settings the flags ask for (each checked when parsed)."""
    return KitSettings(
        examples=KitSettings.examples if args.examples is None else args.examples,
        seed=args.seed,
        steps=args.steps,
        shrink=not args.no_shrink,
        block_sizes=args.block_sizes or KitSettings.block_sizes,
        pool=args.pool_sizes or KitSettings.pool,
        first=args.first,
        budget=args.budget,
    )


def _check(
    name: str, args: argparse.Namespace, levels: frozenset[str] | None, kit: KitSettings
) -> KitReport | None:
    """Run the kit on target ``name``; None (and a message) on a usage error."""
    target = _target(name, args)
    if target is None:
        return None
    if args.policy is not None or args.policy_options is not None:
        try:
            options = args.policy_options
            policy = args.policy or target.profile.policy
            target = dataclasses.replace(
                target, profile=target.profile.with_policy(policy, options)
            )
        except ProfileError as exc:
            print(f"conform: --policy: {exc}", file=sys.stderr)
            return None
    if args.events:
        try:
            engine = ENGINES.get(args.events)  # an engine's name: its scheme and seed
            named = {"scheme": engine.scheme, "seed": engine.seed} if engine else {}
            events = {**target.profile.events, "scheme": args.events, **named}
            profile = parse_profile({"events": events}, "--events")
        except ProfileError as exc:
            print(f"conform: {exc}", file=sys.stderr)
            return None
        target = dataclasses.replace(
            target, profile=dataclasses.replace(target.profile, events=profile.events)
        )
    try:
        candidate = target.open()
    except CandidateFailure as exc:
        print(f"conform: {name}: {exc}", file=sys.stderr)
        return None
    if args.events is not None:
        chosen = levels if levels is not None else frozenset(candidate.levels) - OPT_IN_LEVELS
        levels = chosen | {"events"}
    if args.tiers:
        chosen = levels if levels is not None else frozenset(candidate.levels) - OPT_IN_LEVELS
        levels = (chosen | {"tiers"}) - TIERS_EXCLUDE
    try:
        report = run_kit(candidate, levels, kit, profile=target.profile, reopen=target.open)
    except LevelError as exc:
        print(f"conform: {exc}", file=sys.stderr)
        return None
    finally:
        candidate.close()
    return report


def _target(name: str, args: argparse.Namespace) -> Target | None:
    per_call, startup = timeouts(args.timeout)
    try:
        if name.startswith("--cmd "):
            line = name.removeprefix("--cmd ")
            return command(line, timeout=per_call, profile=args.profile, startup_timeout=startup)
        return resolve(name, profile=args.profile, timeout=per_call)
    except (TargetError, ProfileError) as exc:
        print(f"conform: {exc}", file=sys.stderr)
    return None


def _summary(reports: list[KitReport]) -> str:
    rows = [("implementation", "levels", "verdict", "examples", "operations", "rules", "seconds")]
    for report in reports:
        rows.append(
            (
                report.candidate,
                ",".join(report.levels),
                _short(report),
                str(report.examples),
                str(report.operations),
                str(len(report.exercised)),
                f"{report.seconds:.1f}",
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = ["", "summary:"]
    for row in rows:
        lines.append(
            "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        )
    return "\n".join(lines)


def _short(report: KitReport) -> str:
    """The verdict in a table cell: the deviations or findings counted, not listed."""
    if report.findings:
        return f"{report.verdict}: {len(report.findings)} rule(s)"
    deviations = report.deviations()
    return f"{report.verdict} ({len(deviations)})" if deviations else report.verdict


def _run_mutants(kit: KitSettings, *, quiet: bool) -> dict[str, Any]:
    from ..mutants import MUTANTS, check_mutant

    mutant_kit = dataclasses.replace(kit, shrink=False, first=True)
    results = []
    for mutant in MUTANTS.values():
        result = check_mutant(mutant, mutant_kit)
        results.append(result)
        if result.kit_error is not None:
            _save_kit_error(result.kit_error, None, f"mutant-{mutant.name}")
        if not quiet:
            verdict = "killed  " if result.killed else "SURVIVED"
            if result.kit_error is not None:
                verdict = "KITERROR"
            right = "right rule" if result.right_rule else "other rule" if result.killed else ""
            print(
                f"  {verdict} {mutant.name:34} {result.seconds:6.2f} s  "
                f"{result.examples:4d} examples  found {','.join(result.rules[:1]) or '-':10}"
                f" {right:10} (declares {', '.join(mutant.rules)})",
                flush=True,
            )
    killed = [result for result in results if result.killed]
    right_rule = [result for result in killed if result.right_rule]
    times = [result.seconds for result in killed]
    summary: dict[str, Any] = {
        "total": len(results),
        "killed": len(killed),
        "right_rule": len(right_rule),
        "kit_errors": sum(result.kit_error is not None for result in results),
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
                "found_rules": list(result.rules),
                "right_rule": result.right_rule,
            }
            for result in results
        ],
    }
    if not quiet:
        print(
            f"mutants: {len(killed)}/{len(results)} killed, {len(right_rule)} with the right "
            "rule; "
            f"time to kill: median {summary['median_seconds_to_kill']} s, "
            f"worst {summary['worst_seconds_to_kill']} s"
        )
    return summary


# ---------------------------------------------------------------------- replay


def run_replay(args: argparse.Namespace) -> int:
    """The ``replay`` subcommand. Returns the exit status."""
    if args.target is not None and args.cmd:
        print("replay: give --target or --cmd, not both", file=sys.stderr)
        return EXIT_USAGE
    if len(args.cmd) > 1:
        print("replay: one --cmd (replay runs one program)", file=sys.stderr)
        return EXIT_USAGE
    name = f"--cmd {args.cmd[0]}" if args.cmd else (args.target or "reference")
    try:
        steps = read_trace(args.trace)
    except TraceError as exc:
        print(f"replay: {exc}", file=sys.stderr)
        return EXIT_USAGE
    target = _target(name, argparse.Namespace(timeout=args.timeout, profile=args.profile))
    if target is None:
        return EXIT_USAGE
    try:
        candidate = target.open()
    except CandidateFailure as exc:
        print(f"replay: {name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = replay(steps, candidate, profile=target.profile)
    except TraceError as exc:
        print(f"replay: {args.trace}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        candidate.close()
    if result.kit_error is not None:
        _save_kit_error(result.kit_error, None, f"replay-{name}", "replay")
    if args.json:
        print(json.dumps(_replay_json(result), indent=2))
    else:
        print(_replay_text(result, args.trace))
    if result.kit_error is not None:
        return EXIT_KIT_ERROR
    if not result.passed:
        return EXIT_DIFFERS
    if result.steps == 0:  # every trace skipped: a pass must rest on something
        print(
            f"replay: {result.candidate} runs none of the trace's {len(result.skipped)} "
            "trace(s) (levels or sizes it does not declare): nothing was checked",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return EXIT_OK


def _replay_text(result: ReplayResult, trace: Path) -> str:
    profile = "" if result.profile.strict else f" under profile {result.profile.name!r}"
    lines = [
        f"{result.candidate}: replayed {result.steps} steps of {result.traces} trace(s) "
        f"from {trace}{profile}"
    ]
    if result.skipped:
        lines.append(f"  skipped (levels not declared): {', '.join(result.skipped)}")
    if result.kit_error is not None:
        lines.append(result.kit_error.explain())
    elif result.failure is not None:
        lines.append(result.failure)
    elif result.difference is not None:
        lines.append(result.difference.explain())
    else:
        lines.append("  every answer as expected")
    lines += [f"  stale trace: {note}" for note in result.stale]
    return "\n".join(lines)


def _replay_json(result: ReplayResult) -> dict[str, Any]:
    data: dict[str, Any] = {
        "candidate": result.candidate,
        "profile": result.profile.name,
        "passed": result.passed,
        "steps": result.steps,
        "traces": result.traces,
        "skipped": result.skipped,
    }
    if result.difference is not None:  # the report's finding entry, and its levels
        data["difference"] = {
            **result.difference.to_json(),
            "levels": ordered(result.difference.levels),
        }
    if result.failure is not None:
        data["failure"] = result.failure
    if result.kit_error is not None:
        data["kit_error"] = result.kit_error.to_json()
    data["stale"] = result.stale
    return data


if __name__ == "__main__":
    sys.exit(main())
