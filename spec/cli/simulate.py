"""``kachedb-radix simulate``: replay a serving workload through the cache and plan its capacity.

With no argument it replays the embedded chat-and-agent workload
(:mod:`kachedb_radix.spec.simulate.workload`) over an automatic sweep of pool sizes and prints,
per capacity, the hit ratio of the tree's LRU beside Belady's offline bound and an
infinite pool, and the knee. Give a trace file (Mooncake or token JSON lines) to
replay yours; ``--model`` and ``--gpu`` turn blocks into GiB and GPUs and, on a trace
with timestamps, run the timed mode (TTFT under load, the service model of
:mod:`kachedb_radix.spec.simulate.plan.cost`); ``--workers`` and ``--routing`` spread it
over workers behind a router; ``--tiers`` puts host and disk tiers under each
worker's pool (:mod:`kachedb_radix.spec.simulate.tiers`); ``--out DIR`` writes
results.json (published schema), results.csv, the plots and a self-contained
report.html.

Exit status: 0 done, 2 a usage error or bad input (a message, never a traceback).
:mod:`kachedb_radix.spec.cli` calls :func:`register`.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from kachedb_radix.reference.errors import InvalidArgumentError
from kachedb_radix.reference.policies import check_policy

from ..conform.targets import IMPLEMENTATION_NAMES, PURE_SWITCH, default_implementation
from ..simulate.cluster import INDEXES, ROUTINGS, ClusterSpec
from ..simulate.plan.cost import DISK_BYTES_PER_S, DISK_LATENCY_MS, HOST_LATENCY_MS, CostModel
from ..simulate.errors import SimulateError
from ..simulate.executors import EXECUTORS
from ..simulate.export import token_lines, write_lines
from ..simulate.formats import FORMATS, read_trace
from ..simulate.plan.hardware import GPUS, Deployment, Sizing, get_gpu
from ..simulate.plan.knee import parse_fractions
from ..simulate.plan.models import MODELS, ModelShape, parse_model
from ..simulate.progress import progress_bar
from ..simulate.results import Results, check_out_dir, write_results
from ..simulate.run import Settings, execute, plan
from ..simulate.plan.service import ON_FULL, ServiceModel
from ..simulate.plan.slo import Slo, parse_duration
from ..simulate.summary import duration, print_report
from ..simulate.sweep import parse_capacities, parse_sweep
from ..simulate.tiers import TierSpec, parse_tiers
from ..simulate.trace import Trace
from ..simulate.workload import WORKLOADS, WorkloadSpec, generate

EXIT_OK = 0
EXIT_USAGE = 2

#: The table's width when the output is not a terminal (a file, a pipe, a CI log).
PLAIN_WIDTH = 180
#: The deployment the timed mode assumes when --model or --gpu is not given.
DEFAULT_MODEL, DEFAULT_GPU = "llama-3-8b", "h100"
MODES = ("auto", "sequential", "timed")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``simulate`` subcommand to a CLI's subparsers."""
    service = ServiceModel()
    parser = subparsers.add_parser(
        "simulate",
        help="replay a serving workload through the cache: hit ratio, GiB, GPUs, TTFT",
        description="Replay TRACE (or the embedded chat-and-agent workload) through the "
        "radix tree at one or more pool sizes; report the hit ratio of LRU beside the "
        "offline Belady bound and an infinite pool, the knee, and with a model and GPUs "
        "the pool in GiB and GPUs and TTFT under load.",
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
    source.add_argument(
        "--workload",
        choices=tuple(WORKLOADS),
        default="chat-agent",
        help="the embedded workload's shape (default chat-agent; seed-table: the seed "
        "article's benchmark, 6,144-token prompts, 256-token replies)",
    )
    source.add_argument("--seed", type=int, default=0, help="workload and routing seed (default 0)")
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
    run.add_argument(
        "--mode",
        choices=MODES,
        default="auto",
        help="auto (default): timed when --gpu is given and every request has a "
        "timestamp, else sequential",
    )
    sizes = run.add_mutually_exclusive_group()
    sizes.add_argument(
        "--capacity",
        metavar="LIST",
        help="pool sizes: blocks (1000, 20k), tokens (2Mtok), bytes (64GiB, 2TB) or GPUs "
        "(8gpu); a cluster's total with --workers",
    )
    sizes.add_argument(
        "--sweep",
        metavar="auto|N",
        default="auto",
        help="N log-spaced capacities up to the working set (default auto: 8)",
    )
    run.add_argument(
        "--knee",
        default="0.9",
        metavar="FRACTIONS",
        help="fractions of the achievable hit ratio to find the pool for, e.g. "
        "0.8,0.9,0.95 (default 0.9)",
    )
    run.add_argument(
        "--knee-rounds",
        type=int,
        default=2,
        metavar="N",
        help="rounds of extra capacities around the knees (default 2, 0: none)",
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
        help="where the tasks run (default: worker processes)",
    )
    run.add_argument("--jobs", type=int, default=None, help="worker processes (default: CPUs)")
    run.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="Ray cluster for --executor ray ('auto', host:port; default: a local Ray)",
    )
    cluster = parser.add_argument_group("workers and routing")
    cluster.add_argument(
        "--workers",
        default="1",
        metavar="LIST",
        help="workers sharing the capacity, e.g. 1,4,8 (each its own tree; default 1)",
    )
    cluster.add_argument(
        "--routing",
        default="round-robin,cost",
        metavar="LIST",
        help=f"routing rules with several workers: {', '.join(ROUTINGS)} "
        "(default round-robin,cost)",
    )
    cluster.add_argument(
        "--index",
        default="shared",
        metavar="LIST",
        help=f"the router's index for prefix and cost: {', '.join(INDEXES)} "
        "(one fed by the workers' events, or one per gateway from its own decisions)",
    )
    cluster.add_argument(
        "--gateways", type=int, default=4, metavar="N", help="gateways of --index gateway (4)"
    )
    cluster.add_argument(
        "--router-delay",
        default="0",
        metavar="N|MS",
        help="events reach the router N requests later, or after a time like 50ms (default 0)",
    )
    cluster.add_argument(
        "--overlap-weight",
        type=float,
        default=1.0,
        metavar="W",
        help="cost routing: weight of a block to prefill against a block of load (1)",
    )
    cluster.add_argument(
        "--router-index",
        default=None,
        metavar="MODULE:CLASS",
        help="the router index class (default: the RouterIndex of --impl: the C twin's "
        "with accel, the reference's with reference)",
    )
    tiers = parser.add_argument_group("tiers (host and disk under each worker's pool)")
    tiers.add_argument(
        "--tiers",
        action="append",
        default=None,
        metavar="host=SIZE[,disk=SIZE]",
        help="host and/or disk tiers under the device pool (the swept capacity), sizes as "
        "--capacity takes them (a cluster's totals); repeat for several, each run beside "
        "the same configuration without tiers; a word write-through or write-back per spec",
    )
    tiers.add_argument(
        "--write-through",
        action="store_true",
        help="copy every stored path to the host at once (default: write-back, on eviction)",
    )
    tiers.add_argument(
        "--disk-gbps",
        type=float,
        default=None,
        metavar="GB",
        help=f"disk read bandwidth per GPU of a worker, GB/s ({DISK_BYTES_PER_S / 1e9:g}: one "
        "PCIe Gen4 NVMe drive per GPU); the host link is --gpu's (--host-gbps)",
    )
    tiers.add_argument(
        "--host-latency-ms",
        type=float,
        default=None,
        metavar="MS",
        help=f"fixed cost of a restore from the host ({HOST_LATENCY_MS:g})",
    )
    tiers.add_argument(
        "--disk-latency-ms",
        type=float,
        default=None,
        metavar="MS",
        help=f"fixed cost of a restore from disk ({DISK_LATENCY_MS:g})",
    )
    hardware = parser.add_argument_group("model and GPUs")
    hardware.add_argument(
        "--model",
        default=None,
        metavar="NAME|SPEC",
        help=f"a preset ({', '.join(MODELS)}) or layers=,kv_heads=,head_dim=,dtype= "
        "[,hidden=,heads=,vocab=,params=]: capacities in GiB",
    )
    hardware.add_argument(
        "--gpu", choices=tuple(GPUS), default=None, help="GPU class: capacities in GPUs, TTFT"
    )
    hardware.add_argument(
        "--gpus", type=int, default=1, metavar="N", help="GPUs per worker (tensor parallel; 1)"
    )
    hardware.add_argument(
        "--gpu-mem-util",
        type=float,
        default=0.9,
        metavar="F",
        help="share of GPU memory the engine takes (vLLM's gpu_memory_utilization; 0.9)",
    )
    hardware.add_argument(
        "--gpu-reserve",
        type=float,
        default=2.0,
        metavar="GIB",
        help="GiB per GPU kept for activations and the runtime (2)",
    )
    hardware.add_argument(
        "--gpu-tflops",
        type=float,
        default=None,
        metavar="TF",
        help="override the GPU's dense TFLOP/s at the model's dtype",
    )
    hardware.add_argument(
        "--hbm-tbps",
        type=float,
        default=None,
        metavar="TB",
        help="override the GPU's HBM bandwidth, TB/s",
    )
    hardware.add_argument("--host-gbps", type=float, default=None, metavar="GB",
                          help="override the GPU's host link, GB/s one way")  # fmt: skip
    timed = parser.add_argument_group("timed mode (the service model)")
    timed.add_argument(
        "--max-running",
        type=int,
        default=service.max_running,
        metavar="N",
        help=f"requests running at once at most (default {service.max_running})",
    )
    timed.add_argument(
        "--token-budget",
        type=int,
        default=service.token_budget,
        metavar="N",
        help=f"tokens a step at most (default {service.token_budget:,})",
    )
    timed.add_argument(
        "--mfu",
        type=float,
        default=0.5,
        metavar="F",
        help="share of peak FLOP/s the kernels reach (0.5)",
    )
    timed.add_argument(
        "--mbu",
        type=float,
        default=0.7,
        metavar="F",
        help="share of HBM bandwidth the kernels reach (0.7)",
    )
    timed.add_argument(
        "--step-overhead-ms",
        type=float,
        default=2.0,
        metavar="MS",
        help="fixed cost of a step: scheduling, launches, sampling (2)",
    )
    timed.add_argument(
        "--prefill-tps",
        type=float,
        default=None,
        metavar="TOKENS",
        help="override: prefill at this many tokens/s (no attention term)",
    )
    timed.add_argument(
        "--decode-ms",
        type=float,
        default=None,
        metavar="MS",
        help="override: a step with decodes lasts at least this long",
    )
    timed.add_argument(
        "--on-full",
        choices=ON_FULL,
        default=service.on_full,
        help="when every block is pinned: wait for one to finish, or refuse (default wait)",
    )
    timed.add_argument(
        "--speedup",
        type=float,
        default=None,
        metavar="F",
        help="replay the arrivals F times faster (2: twice the traffic; default 1)",
    )
    timed.add_argument(
        "--ttft-slo",
        default=None,
        metavar="TIME",
        help="TTFT SLO, e.g. 500ms: attainment and throughput at the SLO",
    )
    timed.add_argument(
        "--slo-attainment",
        type=float,
        default=0.9,
        metavar="F",
        help="share of requests that must meet the SLO (0.9)",
    )
    timed.add_argument(
        "--slo-runs",
        type=int,
        default=8,
        metavar="N",
        help="timed runs searching the throughput at the SLO (8; 0: none)",
    )
    timed.add_argument("--prefill-cost", default=None, metavar="TOKENS",
                       help="print what prompts of these lengths cost to prefill alone "
                       "(e.g. 32768) and exit")  # fmt: skip
    output = parser.add_argument_group("output")
    output.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write results.json, results.csv, the plots and report.html",
    )
    output.add_argument(
        "--timeline-capacity",
        type=int,
        default=None,
        metavar="N",
        help="the capacity of the over-time plot and the cluster table (default: the middle one)",
    )
    output.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    """The ``simulate`` subcommand. Returns the exit status."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PLAIN_WIDTH
    made = None  # an --out folder made by the check, removed again if nothing is written
    try:
        if args.prefill_cost is not None:
            return _prefill_cost(args, console)
        if args.out is not None:
            made = _missing_root(args.out)
            _check_out(args.out)
        trace = _trace(args)
        settings = _settings(args, trace)
        prepared = plan(trace, settings)
        runs = len(prepared.job.configs)
        refined = settings.knee_rounds * settings.knee_points * 2 * len(settings.knee_fractions)
        capacities = len(prepared.capacities) + (refined if settings.bounds else 0)
        total = len(trace.requests) * capacities * runs  # the refinements: at most
        with progress_bar(total, "replaying", console, quiet=args.quiet) as advance:
            results = execute(prepared, settings, advance)
    except (SimulateError, ImportError) as error:
        print(f"simulate: {error}", file=sys.stderr)
        if made is not None:
            _remove_empty(args.out, made)
        return EXIT_USAGE
    print_report(results, console)
    if args.out is not None:
        return _write(results, args.out, console)
    return EXIT_OK


def _missing_root(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (None: it exists)."""
    missing = list(itertools.takewhile(lambda folder: not folder.exists(), (path, *path.parents)))
    return missing[-1] if missing else None


def _remove_empty(path: Path, root: Path) -> None:
    """Remove ``path`` and its parents up to ``root``, stopping at one not empty."""
    chain = (path, *path.parents)
    with contextlib.suppress(OSError):
        for folder in chain[: chain.index(root) + 1]:
            folder.rmdir()


def _check_out(out: Path) -> None:
    """Refuse an --out that cannot be written before running anything."""
    try:
        check_out_dir(out)
    except OSError as error:
        raise SimulateError(f"cannot write results to {out}: {error.strerror or error}") from None


def _model(args: argparse.Namespace, needed: bool) -> ModelShape | None:
    if args.model is not None:
        return parse_model(args.model)
    return MODELS[DEFAULT_MODEL] if needed else None


def _deployment(
    args: argparse.Namespace, model: ModelShape | None, needed: bool
) -> Deployment | None:
    name = args.gpu or (DEFAULT_GPU if needed else None)
    if name is None:
        return None
    chosen = model or MODELS[DEFAULT_MODEL]
    return Deployment(chosen, get_gpu(name), args.gpus, args.gpu_mem_util, args.gpu_reserve)


def _mode(args: argparse.Namespace, trace: Trace) -> str:
    if args.mode != "auto":
        return str(args.mode)
    return "timed" if args.gpu is not None and trace.has_timestamps() else "sequential"


def _settings(args: argparse.Namespace, trace: Trace) -> Settings:
    if args.jobs is not None and args.jobs < 1:
        raise SimulateError(f"--jobs must be >= 1, got {args.jobs}")
    if args.knee_rounds < 0:
        raise SimulateError(f"--knee-rounds must be >= 0, got {args.knee_rounds}")
    mode = _mode(args, trace)
    timed = mode == "timed"
    model = _model(args, timed or args.gpu is not None)
    deployment = _deployment(args, model, timed)
    # Sizes in GiB and GPUs only for what the user named (the timed mode's default
    # deployment prices steps, it is not theirs to size).
    named_model = model if args.model is not None or args.gpu is not None else None
    named = deployment if args.gpu is not None else None
    sizing = Sizing(trace.tokens_per_block, named_model, named)
    try:
        service = ServiceModel(args.max_running, args.token_budget, args.on_full)
    except ValueError as error:
        raise SimulateError(str(error)) from None
    cost = None
    slo = None
    if timed:
        assert deployment is not None
        cost = _cost(args, deployment)
        if args.ttft_slo is not None:
            slo = Slo(parse_duration(args.ttft_slo), args.slo_attainment, args.slo_runs)
    else:
        timed_only = (("--ttft-slo", args.ttft_slo), ("--prefill-tps", args.prefill_tps),
                      ("--decode-ms", args.decode_ms), ("--speedup", args.speedup),
                      ("--disk-gbps", args.disk_gbps),
                      ("--host-latency-ms", args.host_latency_ms),
                      ("--disk-latency-ms", args.disk_latency_ms))  # fmt: skip
        for flag, value in timed_only:
            if value is not None:
                raise SimulateError(
                    f"{flag} applies to the timed mode "
                    "(--gpu on a trace with timestamps, or --mode timed)"
                )
    capacities = None if args.capacity is None else tuple(parse_capacities(args.capacity, sizing))
    return Settings(
        policies=_policies(args),
        clusters=_clusters(args),
        tiers=_tiers(args, sizing),
        mode=mode,
        implementation=args.impl or default_implementation(),
        service=service,
        cost=cost,
        capacities=capacities,
        sweep_points=parse_sweep(args.sweep),
        bounds=not args.no_bounds,
        executor=args.executor,
        jobs=args.jobs,
        ray_address=args.ray_address,
        timeline_capacity=args.timeline_capacity,
        knee_fractions=parse_fractions(args.knee),
        knee_rounds=args.knee_rounds,
        deployment=named,
        model=named_model,
        slo=slo,
        speed=1.0 if args.speedup is None else args.speedup,
    )


def _cost(args: argparse.Namespace, deployment: Deployment) -> CostModel:
    latencies = {}
    if args.host_latency_ms is not None:
        latencies["host_latency_ms"] = args.host_latency_ms
    if args.disk_latency_ms is not None:
        latencies["disk_latency_ms"] = args.disk_latency_ms
    for name, value in (("--host-gbps", args.host_gbps), ("--disk-gbps", args.disk_gbps)):
        if value is not None and not value > 0:
            raise SimulateError(f"{name} must be > 0, got {value}")
    return CostModel.of(
        deployment,
        peak_flops=None if args.gpu_tflops is None else args.gpu_tflops * 1e12,
        hbm_bytes_per_s=None if args.hbm_tbps is None else args.hbm_tbps * 1e12,
        host_bytes_per_s=None if args.host_gbps is None else args.host_gbps * 1e9,
        disk_bytes_per_s=None if args.disk_gbps is None else args.disk_gbps * 1e9,
        mfu=args.mfu,
        mbu=args.mbu,
        overhead_ms=args.step_overhead_ms,
        prefill_tokens_per_s=args.prefill_tps,
        decode_ms=args.decode_ms,
        **latencies,
    )


def _tiers(args: argparse.Namespace, sizing: Sizing) -> tuple[TierSpec, ...]:
    """Every tier configuration asked for (``--tiers``), in order, without repeats.

    Raises:
        SimulateError: a bad spec, or a tier option without ``--tiers``.
    """
    if not args.tiers:
        given = (("--write-through", args.write_through or None),
                 ("--disk-gbps", args.disk_gbps), ("--host-latency-ms", args.host_latency_ms),
                 ("--disk-latency-ms", args.disk_latency_ms))  # fmt: skip
        for flag, value in given:
            if value is not None:
                raise SimulateError(f"{flag} applies to tiers: give --tiers host=SIZE[,disk=SIZE]")
        return ()
    found = [parse_tiers(text, sizing, args.write_through) for text in args.tiers]
    return tuple(dict.fromkeys(found))


def _words(text: str) -> list[str]:
    return [word.strip() for word in text.split(",") if word.strip()]


def _clusters(args: argparse.Namespace) -> tuple[ClusterSpec, ...]:
    """Every cluster asked for: workers x routings x indexes (one worker: just one).

    Raises:
        SimulateError: a bad count, routing, index or delay.
    """
    counts = []
    for word in _words(args.workers):
        if not word.isdigit() or int(word) < 1:
            raise SimulateError(f"--workers: {word!r} is not a number of workers >= 1")
        counts.append(int(word))
    delay = args.router_delay.strip()
    delay_ms = None
    delay_requests = 0
    if delay.endswith("s"):
        delay_ms = parse_duration(delay)
    elif delay.isdigit():
        delay_requests = int(delay)
    else:
        raise SimulateError(
            f"--router-delay: expected a number of requests or a time, got {delay!r}"
        )
    found: dict[str, ClusterSpec] = {}
    for workers in dict.fromkeys(counts):
        for routing in _words(args.routing) if workers > 1 else ["round-robin"]:
            for index in _words(args.index) if routing in ("prefix", "cost") else ["shared"]:
                spec = ClusterSpec(
                    workers=workers,
                    routing=routing,
                    index=index,
                    gateways=args.gateways,
                    delay_requests=delay_requests,
                    delay_ms=delay_ms,
                    overlap_weight=args.overlap_weight,
                    seed=args.seed,
                    router_index=args.router_index,
                )
                found.setdefault(spec.label or "1", spec)
    return tuple(found.values())


def _policies(args: argparse.Namespace) -> tuple[tuple[str, dict[str, object] | None], ...]:
    """The policies to run beside LRU, with their options, checked as a tree checks them.

    Raises:
        SimulateError: an unknown policy or option, or options that are not JSON.
    """
    names = _words(args.policy)
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
            options = WORKLOADS[args.workload].priority_options() or None
        try:
            check_policy(name, options)
        except InvalidArgumentError as error:
            raise SimulateError(f"--policy: {error}") from None
        if name != "lru":
            chosen.append((name, options))
    return tuple(chosen)


def _trace(args: argparse.Namespace) -> Trace:
    if args.requests < 1:
        raise SimulateError(f"--requests must be >= 1, got {args.requests}")
    if args.block_size < 1 or args.hash_block_tokens < 1:
        raise SimulateError("--block-size and --hash-block-tokens must be >= 1")
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
    spec = replace(
        WORKLOADS[args.workload], requests=args.requests, seed=args.seed, block_size=args.block_size
    )
    trace = generate(spec)
    if args.workload != "chat-agent":
        trace = replace(trace, source=f"{args.workload} workload (seed {args.seed})")
    if args.save_workload is not None:
        try:
            write_lines(token_lines(trace), args.save_workload)
        except OSError as error:
            raise SimulateError(f"cannot write {args.save_workload}: {error}") from None
    return trace


def _prefill_cost(args: argparse.Namespace, console: Console) -> int:
    """``--prefill-cost``: each prompt length's prefill alone on an idle worker."""
    lengths = []
    for word in _words(args.prefill_cost):
        if not word.isdigit() or int(word) < 1:
            raise SimulateError(f"--prefill-cost: {word!r} is not a number of tokens >= 1")
        lengths.append(int(word))
    model = _model(args, True)
    assert model is not None
    deployment = _deployment(args, model, True)
    assert deployment is not None
    cost = _cost(args, deployment)
    console.print(
        f"{model.describe()} on {deployment.gpus} x {deployment.gpu.part}", highlight=False
    )
    for tokens in lengths:
        found = cost.solo_prefill(tokens, 0, args.token_budget)
        flops = found["linear_flops"] + found["attention_flops"]
        share = found["attention_flops"] / flops
        plural = "s" if found["steps"] > 1 else ""
        console.print(
            f"{tokens:,}-token prefill: {flops / 1e15:,.3g} PFLOP ({100 * share:.0f}% attention): "
            f"{duration(found['compute_ms'])} of compute at mfu {cost.mfu:g}, "
            f"{duration(found['ms'])} in {found['steps']:.0f} step{plural} of "
            f"{args.token_budget:,} tokens (TTFT on an idle worker)",
            highlight=False,
        )
    return EXIT_OK


def _write(results: Results, out: Path, console: Console) -> int:
    from ..simulate.report import write_report

    try:
        written = write_results(results, out)
        try:
            from ..simulate.plots import figures

            plots: dict[str, bytes] | None = figures(results)
        except ImportError:
            plots = None
            console.print(
                "plots skipped: matplotlib is not installed (pip install 'kachedb-radix[plot]')",
                highlight=False,
            )
        for name, data in (plots or {}).items():
            (out / name).write_bytes(data)
            written.append(out / name)
        written.append(write_report(results, out, plots))
    except OSError as error:
        print(f"simulate: cannot write results to {out}: {error}", file=sys.stderr)
        return EXIT_USAGE
    console.print(f"wrote {', '.join(path.name for path in written)} to {out}", highlight=False)
    return EXIT_OK
