"""``kachedb-radix gate``: the performance gate, for this project or any other.

::

    kachedb-radix gate TARGET --baseline FILE [--update-baseline] [--quick]
    kachedb-radix gate --cmd "program args" --baseline FILE ...

TARGET is any conformance target (``reference``, ``accel``, ``module:Class``; ``--cmd`` for
a program speaking the stdio protocol).  The gate times the standard cases on it, divides
each figure by the anchor loop of its kind timed between its rounds, compares with the
baseline file and its limits, re-measures what failed once (in a fresh process: a
median is partly the luck of the process it was timed in), prints one table and exits:

* 0 -- every check passed (cases without a baseline are reported, not gated); the last
  line says how many checks on how many cases;
* 1 -- a regression: a case over 1.5x its baseline (``--max-ratio``), the first eviction
  growing more than 3x from 10^3 to 10^6 cached blocks, a memory figure over its
  baseline, a limit exceeded;
* 2 -- a usage error: an unknown target; a baseline that is missing (without
  ``--update-baseline``), unreadable or malformed (the field is named); a prior run that
  cannot be used; an ``--only`` that matches no case; or a run that gated nothing (no
  case has a baseline and no check needs none). Paths are checked before anything runs.

``--prior RUN.json`` (an earlier run's ``--json`` file, same target and mode) counts that
run's measurements with this one's: a figure fails only when it failed both times, which
is how CI reruns a failed gate.  It may be given several times: every run counts.

``--update-baseline`` measures every case three times and merges the middle one into FILE
(its hand-written ``limits`` are kept), with the machine's anchor times (``anchors``); a
run prints its own anchors per those.  With ``--only`` the file keeps its machine and
anchors (a part of the cases is no measure of the machine) and names the update under
``updated_with``.  With ``--prior`` the middle is taken over the earlier runs'
measurements too: a baseline recorded from the ``--json`` files of several runs, each in
a process of its own, is the middle of the machine's processes -- one process's medians
sit wherever that process's memory layout put them (the C twin's ``insert/shared/1024``
read 1.75-4.72 us in 20 processes on one quiet VM, 1.1-1.5x within one).  Adding the gate
to another project's CI: record a baseline once on the CI machine (``--update-baseline``,
best from several runs' ``--prior`` files), commit the file, and run the gate with
``--quick`` in CI.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
import time
from collections.abc import Sequence

from ..conform.candidate import CandidateFailure
from ..conform.targets import TargetError
from ..gate.cases import Case, Plan, build_plan
from ..gate.run import (
    PriorError,
    load_priors,
    machine,
    measure_case,
    render_plain,
    render_rich,
    run_gate,
    summary,
    to_json,
)
from ..gate.timing import FULL_POLICY, QUICK_POLICY
from ..gate.trees import GateTarget, gate_target
from ..gate.verdicts import (
    CASE_FIGURES,
    FAIL,
    MAX_BASELINE_RATIO,
    PASS,
    Baseline,
    BaselineError,
    Measurement,
    evaluate,
    load_baseline,
    machine_speed,
    save_baseline,
)
from ..inputs import input_path, output_file, real, write_text
from .gate_fresh import FreshError, TargetWords
from .gate_fresh import remeasure as fresh_remeasure
from .options import add_timeout, timeouts

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``gate`` subcommand to a CLI's subparsers."""
    parser = subparsers.add_parser(
        "gate",
        help="time a target on the standard shapes and compare with its baseline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(handler=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The gate's arguments (shared by the subcommand and :func:`main`)."""
    parser.add_argument(
        "target",
        nargs="?",
        metavar="TARGET",
        help="reference, accel, or module:attribute (a tree class or a plain-data candidate)",
    )
    parser.add_argument("--cmd", help="a program speaking the stdio protocol, instead of TARGET")
    add_timeout(parser, "per answer of --cmd")
    parser.add_argument(
        "--baseline",
        type=output_file,
        required=True,
        help="the baseline file (JSON); it must exist unless --update-baseline starts it",
    )
    parser.add_argument(
        "--update-baseline",
        action="store_true",
        help="measure every case three times and merge the middle one into the baseline file",
    )
    parser.add_argument("--quick", action="store_true", help="the CI set (a minute or two)")
    parser.add_argument(
        "--only", type=_text, help="only the cases whose name holds this text (one at least)"
    )
    parser.add_argument("--json", type=output_file, help="also write the results and verdicts here")
    parser.add_argument(
        "--prior",
        type=input_path,
        action="append",
        metavar="RUN.json",
        help="an earlier run's --json file: a figure fails only when it failed in every run; "
        "repeatable (with --update-baseline: the middle over every run is recorded)",
    )
    parser.add_argument("--plain", action="store_true", help="a plain-text table even with rich")
    parser.add_argument(
        "--max-ratio",
        type=real(1.0, 100.0, above=True),
        default=MAX_BASELINE_RATIO,
        metavar="R",
        help=f"a timed case fails above R times its baseline (default {MAX_BASELINE_RATIO:g}; "
        "above 1, at most 100)",
    )


def _text(word: str) -> str:
    """``--only``'s type: some text (an empty one would match every case). O(1)."""
    if not word:
        raise argparse.ArgumentTypeError("an empty text matches every case; leave --only out")
    return word


_text.__name__ = "text"


def run(args: argparse.Namespace) -> int:
    """Run the gate from parsed arguments; returns the exit status."""
    if (args.target is None) == (args.cmd is None):
        print("kachedb-radix gate: give a TARGET or --cmd, not both", file=sys.stderr)
        return EXIT_USAGE
    try:
        baseline = load_baseline(args.baseline, missing_ok=args.update_baseline)
        target = gate_target(args.target, args.cmd, timeouts(args.timeout))
    except (TargetError, BaselineError, CandidateFailure) as exc:
        print(f"kachedb-radix gate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _run(args, target, baseline)
    finally:
        target.close()


def _run(args: argparse.Namespace, target: GateTarget, baseline: Baseline) -> int:
    started = time.perf_counter()
    plan = build_plan(target, args.quick, args.only)
    if not plan.cases and not plan.memory:
        print(
            f"kachedb-radix gate: no {plan.mode} case of {target.name} has {args.only!r} in "
            "its name: nothing to gate",
            file=sys.stderr,
        )
        return EXIT_USAGE
    policy = QUICK_POLICY if args.quick else FULL_POLICY
    host = machine()
    print(
        f"kachedb-radix gate: {target.name} ({target.implementation}), {plan.mode} mode, "
        f"{len(plan.cases)} timed and {len(plan.memory)} memory cases"
    )
    print("machine: " + ", ".join(f"{k}={v}" for k, v in host.items()))
    if baseline.target not in (None, target.name):
        print(f"note: the baseline was recorded for {baseline.target!r}")
    for note in plan.notes:
        print(note)
    try:
        prior = None if not args.prior else load_priors(args.prior, plan)
    except PriorError as exc:
        print(f"kachedb-radix gate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.update_baseline:
        baseline = Baseline(limits=baseline.limits)  # record afresh, gate on limits only
    elif _nothing_gated(plan, baseline, args.baseline):
        return EXIT_USAGE
    for path in args.prior or ():
        print(f"counting the measurements of {path} with this run's")

    def measure(case: Case) -> Measurement:
        return measure_case(case, policy)

    def progress(line: str) -> None:
        print("  " + line, flush=True)

    words = TargetWords(args.target, args.cmd, args.timeout)

    def again(cases: Sequence[Case]) -> dict[str, Measurement]:
        """The cases of failing checks, in a fresh process (gate_fresh); here if it fails."""
        names = [case.name for case in cases]
        progress(f"measuring {', '.join(names)} again, in a fresh process")
        try:
            return fresh_remeasure(words, args.quick, names)
        except FreshError as exc:
            progress(f"{exc}: measuring again in this process instead")
            return {case.name: measure(case) for case in cases}

    run = run_gate(
        plan,
        baseline,
        measure,
        progress=progress,
        prior=prior,
        max_ratio=args.max_ratio,
        remeasure=again,
    )
    written = 0
    if args.update_baseline:
        for case in plan.cases:  # three measurements each, the middle one recorded
            while len(run.results[case.name]) < 3:
                run.results[case.name].append(measure(case))
        named = args.target if args.cmd is None else f"--cmd {args.cmd!r}"
        command = f"kachedb-radix gate {named} --update-baseline" + (" --quick" * args.quick)
        if args.only:
            command += f" --only {shlex.quote(args.only)}"
        command += "".join(f" --prior {shlex.quote(path.name)}" for path in args.prior or ())
        written = save_baseline(
            args.baseline, plan, run.results, run.memory, host, command, whole=not args.only
        )
        run.verdicts = evaluate(
            run.results, run.memory, plan, load_baseline(args.baseline), args.max_ratio
        )
    table = None if args.plain else render_rich(run.verdicts, f"kachedb-radix gate: {plan.target}")
    if table is None:
        print(render_plain(run.verdicts))
    else:
        importlib.import_module("rich.console").Console(width=200).print(table)
    if not args.update_baseline and not any(v.status in (PASS, FAIL) for v in run.verdicts):
        # Not foreseen by _nothing_gated (a case whose anchor was not measured): the same.
        print("kachedb-radix gate: nothing was gated (every case is NEW)", file=sys.stderr)
        return EXIT_USAGE
    if args.json is not None:
        write_text(args.json, json.dumps(to_json(run, host), indent=1) + "\n", "--json")
    speed = machine_speed(run.results, baseline)
    if speed:
        print(speed)
    print(summary(run))
    print(f"took {time.perf_counter() - started:.0f} s")
    if args.update_baseline:
        print(f"baseline: wrote {written} cases to {args.baseline}")
        return EXIT_OK
    return run.exit_code


def _nothing_gated(plan: Plan, baseline: Baseline, where: object) -> bool:
    """Say so and return True when no check of ``plan`` can pass or fail against
    ``baseline`` (every case would be NEW): a gate that would check nothing. O(cases)."""
    gated = bool(plan.evict_keys) or any(
        name in baseline.limits
        or any(figure in baseline.cases.get(name, {}) for figure in CASE_FIGURES)
        for name in [case.name for case in plan.cases] + [case.name for case in plan.memory]
    )
    if not gated:
        print(
            f"kachedb-radix gate: nothing to gate: none of the {len(plan.cases)} timed and "
            f"{len(plan.memory)} memory cases has a baseline or a limit in {where} "
            "(record them with --update-baseline)",
            file=sys.stderr,
        )
    return not gated


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kachedb_radix.spec.cli.gate``: the subcommand on its own."""
    parser = argparse.ArgumentParser(
        prog="kachedb-radix gate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover - the console script calls main()
    sys.exit(main())
