"""``kachedb-radix simulate``: replay a serving workload through the cache and plan its capacity.

With no argument it replays the embedded chat-and-agent workload
(:mod:`kachedb_radix.spec.simulate.workload`) over an automatic sweep of pool sizes and prints,
per capacity, the hit ratio of the tree's LRU beside Belady's offline bound and an
infinite pool. Give a trace file (Mooncake or token JSON lines) to replay yours;
``--out DIR`` writes results.json (published schema), results.csv and the plots.

Exit status: 0 done, 2 a usage error or bad input (a message, never a traceback).
:mod:`kachedb_radix.spec.cli` calls :func:`register`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console

from kachedb_radix.reference.errors import InvalidArgumentError
from kachedb_radix.reference.policies import check_policy

from ..conform.targets import IMPLEMENTATION_NAMES, PURE_SWITCH, default_implementation
from ..simulate.errors import SimulateError
from ..simulate.executors import EXECUTORS
from ..simulate.export import token_lines, write_lines
from ..simulate.formats import FORMATS, read_trace
from ..simulate.point import MODES
from ..simulate.progress import progress_bar
from ..simulate.results import Results, write_results
from ..simulate.run import Settings, execute, plan
from ..simulate.service import ON_FULL, ServiceModel
from ..simulate.summary import print_report
from ..simulate.sweep import parse_capacities, parse_sweep
from ..simulate.trace import Trace
from ..simulate.workload import WorkloadSpec, generate

EXIT_OK = 0
EXIT_USAGE = 2

#: The service model's numeric options: flag, ServiceModel field, type, metavar, help.
SERVICE_OPTIONS: tuple[tuple[str, str, type, str, str], ...] = (
    ("--prefill-tps", "prefill_tokens_per_s", float, "TOKENS", "prefill throughput, tokens/s"),
    ("--decode-ms", "decode_ms_per_token", float, "MS", "decode time per output token"),
    ("--max-running", "max_running", int, "N", "concurrent requests at most"),
)

#: The table's width when the output is not a terminal (a file, a pipe, a CI log).
PLAIN_WIDTH = 180


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``simulate`` subcommand to a CLI's subparsers."""
    service = ServiceModel()
    parser = subparsers.add_parser(
        "simulate",
        help="replay a serving workload through the cache: hit ratio against capacity",
        description="Replay TRACE (or the embedded chat-and-agent workload) through the "
        "radix tree at one or more pool sizes; report the hit ratio of LRU beside the "
        "offline Belady bound and an infinite pool.",
    )
    parser.add_argument(
        "trace",
        nargs="?",
        type=Path,
        metavar="TRACE",
        help="JSON-lines trace (default: the embedded workload)",
    )
    source = parser.add_argument_group("trace")
    source.add_argument("--format", choices=("auto", *FORMATS), default="auto")
    source.add_argument(
        "--block-size",
        type=int,
        default=16,
        metavar="B",
        help="tokens per block of token traces and the embedded workload (default 16)",
    )
    source.add_argument(
        "--hash-block-tokens",
        type=int,
        default=512,
        metavar="N",
        help="tokens per hash id of mooncake traces (default 512)",
    )
    source.add_argument(
        "--skip-bad", action="store_true", help="count and skip bad lines instead of stopping"
    )
    source.add_argument("--seed", type=int, default=0, help="embedded workload seed (default 0)")
    source.add_argument(
        "--requests",
        type=int,
        default=WorkloadSpec.requests,
        metavar="N",
        help=f"embedded workload size (default {WorkloadSpec.requests})",
    )
    source.add_argument(
        "--save-workload",
        type=Path,
        metavar="PATH",
        help="also write the embedded workload to PATH as a token trace",
    )
    run = parser.add_argument_group("simulation")
    run.add_argument("--mode", choices=MODES, default="sequential")
    sizes = run.add_mutually_exclusive_group()
    sizes.add_argument(
        "--capacity", metavar="LIST", help="pool sizes in blocks, e.g. 1000,5000,20k"
    )
    sizes.add_argument(
        "--sweep",
        metavar="auto|N",
        default="auto",
        help="N log-spaced capacities up to the working set (default auto: 8)",
    )
    run.add_argument(
        "--impl",
        choices=IMPLEMENTATION_NAMES,
        default=None,
        help=f"tree implementation (default: accel, or reference when {PURE_SWITCH}=1)",
    )
    run.add_argument(
        "--policy",
        default="lru",
        metavar="LIST",
        help="eviction policies to compare, e.g. lru,lfu,fifo,priority,slru (R-POL-*; LRU "
        "always runs: it is the baseline)",
    )
    run.add_argument(
        "--policy-options",
        default=None,
        metavar="JSON",
        help='options by policy, e.g. \'{"slru": {"protected_percent": 50}}\' (default: each '
        "policy's; for the embedded workload, priority gets its tenants' tiers)",
    )
    run.add_argument("--no-bounds", action="store_true", help="skip Belady and infinite capacity")
    run.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="process",
        help="where the capacities run (default: worker processes)",
    )
    run.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPUs)")
    run.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="Ray cluster for --executor ray ('auto', host:port; default: a local Ray)",
    )
    timed = parser.add_argument_group("timed mode (service model)")
    for flag, field, kind, metavar, text in SERVICE_OPTIONS:
        default = getattr(service, field)
        timed.add_argument(
            flag, type=kind, default=default, metavar=metavar, help=f"{text} (default {default:g})"
        )
    timed.add_argument(
        "--on-full",
        choices=ON_FULL,
        default=service.on_full,
        help="when every block is pinned: wait for one to finish, or refuse (default wait)",
    )
    output = parser.add_argument_group("output")
    output.add_argument(
        "--out", type=Path, metavar="DIR", help="write results.json, results.csv and the plots"
    )
    output.add_argument(
        "--timeline-capacity",
        type=int,
        default=None,
        metavar="N",
        help="the capacity of the hit-ratio-over-time plot (default: the middle one)",
    )
    output.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    """The ``simulate`` subcommand. Returns the exit status."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PLAIN_WIDTH
    try:
        settings = _settings(args)
        trace = _trace(args)
        prepared = plan(trace, settings)
        runs = 1 + len(settings.policies)
        total = len(trace.requests) * len(prepared.capacities) * runs
        with progress_bar(total, "replaying", console, quiet=args.quiet) as advance:
            results = execute(prepared, settings, advance)
    except (SimulateError, ImportError) as error:
        print(f"simulate: {error}", file=sys.stderr)
        return EXIT_USAGE
    print_report(results, console)
    if args.out is not None:
        return _write(results, args.out, console)
    return EXIT_OK


def _settings(args: argparse.Namespace) -> Settings:
    try:
        numbers = {
            field: getattr(args, flag[2:].replace("-", "_")) for flag, field, *_ in SERVICE_OPTIONS
        }
        service = ServiceModel(on_full=args.on_full, **numbers)
    except ValueError as error:
        raise SimulateError(str(error)) from None
    if args.jobs is not None and args.jobs < 1:
        raise SimulateError(f"--jobs must be >= 1, got {args.jobs}")
    if args.requests < 1:
        raise SimulateError(f"--requests must be >= 1, got {args.requests}")
    if args.block_size < 1 or args.hash_block_tokens < 1:
        raise SimulateError("--block-size and --hash-block-tokens must be >= 1")
    capacities = None if args.capacity is None else tuple(parse_capacities(args.capacity))
    return Settings(
        policies=_policies(args),
        mode=args.mode,
        implementation=args.impl or default_implementation(),
        service=service,
        capacities=capacities,
        sweep_points=parse_sweep(args.sweep),
        bounds=not args.no_bounds,
        executor=args.executor,
        jobs=args.jobs,
        ray_address=args.ray_address,
        timeline_capacity=args.timeline_capacity,
    )


def _policies(args: argparse.Namespace) -> tuple[tuple[str, dict[str, object] | None], ...]:
    """The policies to run beside LRU, with their options, checked as a tree checks them.

    Raises:
        SimulateError: an unknown policy or option, or options that are not JSON.
    """
    names = [name.strip() for name in args.policy.split(",") if name.strip()]
    try:
        given = {} if args.policy_options is None else json.loads(args.policy_options)
    except ValueError as error:
        raise SimulateError(f"--policy-options is not JSON: {error}") from None
    if not isinstance(given, dict) or not all(isinstance(value, dict) for value in given.values()):
        raise SimulateError("--policy-options must map policy names to objects of options")
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise SimulateError(f"--policy-options names {unknown[0]!r}, which --policy does not")
    chosen: list[tuple[str, dict[str, object] | None]] = []
    for name in dict.fromkeys(names):
        options = given.get(name)
        if options is None and name == "priority" and args.trace is None:
            options = WorkloadSpec().priority_options()  # the embedded workload's tiers
        try:
            check_policy(name, options)
        except InvalidArgumentError as error:
            raise SimulateError(f"--policy: {error}") from None
        if name != "lru":
            chosen.append((name, options))
    return tuple(chosen)


def _trace(args: argparse.Namespace) -> Trace:
    if args.trace is not None:
        if args.save_workload is not None:
            raise SimulateError("--save-workload writes the embedded workload: give no TRACE")
        return read_trace(
            args.trace,
            format=args.format,
            block_size=args.block_size,
            tokens_per_block=args.hash_block_tokens,
            skip_bad=args.skip_bad,
        )
    trace = generate(
        WorkloadSpec(requests=args.requests, seed=args.seed, block_size=args.block_size)
    )
    if args.save_workload is not None:
        try:
            write_lines(token_lines(trace), args.save_workload)
        except OSError as error:
            raise SimulateError(f"cannot write {args.save_workload}: {error}") from None
    return trace


def _write(results: Results, out: Path, console: Console) -> int:
    try:
        written = write_results(results, out)
    except OSError as error:
        print(f"simulate: cannot write results to {out}: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        from ..simulate.plots import write_plots

        written += write_plots(results, out)
    except ImportError:
        console.print(
            "plots skipped: matplotlib is not installed (pip install 'kachedb-radix[plot]')",
            highlight=False,
        )
    console.print(f"wrote {', '.join(path.name for path in written)} to {out}", highlight=False)
    return EXIT_OK
