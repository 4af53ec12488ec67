"""``kachedb-radix simulate``: replay a serving workload through the cache and plan its capacity.

With no argument it replays the embedded chat-and-agent workload
(:mod:`kachedb_radix.spec.simulate.workload`) over an automatic sweep of pool sizes and
prints, per capacity, the hit ratio of the tree's LRU beside Belady's offline bound and
an infinite pool, and the knee. Give a trace file (Mooncake or token JSON lines) to
replay yours, or ``--workload`` one of the published benchmarks' workloads
(:mod:`kachedb_radix.spec.simulate.published`); ``--model`` and ``--gpu`` turn blocks
into GiB and GPUs and, on a trace with timestamps, run the timed mode (TTFT and
throughput under load: :mod:`kachedb_radix.spec.simulate.plan`); ``--workers`` and
``--routing`` spread it over workers behind a router; ``--tiers`` puts host and disk
tiers under each worker's pool; ``--out DIR`` writes results.json (published schema),
results.csv, the plots and a self-contained report.html.

The options are one table (:mod:`kachedb_radix.spec.cli.simulate_options`), each checked
where it is parsed. Exit status: 0 done (the last line says what was simulated: requests,
capacities, configurations), 2 a usage error or bad input -- a trace with no request, a
value out of range, a file that cannot be read or written -- one line, never a traceback.
:mod:`kachedb_radix.spec.cli` calls :func:`register`.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import sys
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from kachedb_radix.reference.errors import InvalidArgumentError
from kachedb_radix.reference.policies import check_policy

from ..inputs import InputError
from ..simulate.cluster import ClusterSpec
from ..simulate.errors import SimulateError
from ..simulate.export import mooncake_records, token_lines, write_lines
from ..simulate.formats import read_trace
from ..simulate.plan.cost import CostModel
from ..simulate.plan.hardware import Deployment, Sizing, get_gpu
from ..simulate.plan.models import MODELS, ModelShape, parse_model
from ..simulate.plan.service import ServiceModel
from ..simulate.plan.slo import Slo
from ..simulate.progress import progress_bar
from ..simulate.published import PUBLISHED, generate_shared_prefix
from ..simulate.results import Results, check_out_dir, write_results
from ..simulate.run import Settings, execute, plan
from ..simulate.summary import print_report
from ..simulate.sweep import parse_capacities
from ..simulate.text import duration
from ..simulate.tiers import TierSpec, parse_tiers
from ..simulate.trace import Trace
from ..simulate.workload import WORKLOADS, generate
from ..twins import default_twin
from .simulate_options import add_options

EXIT_OK = 0
EXIT_USAGE = 2

#: The table's width when the output is not a terminal (a file, a pipe, a CI log).
PLAIN_WIDTH = 180
#: The deployment the timed mode assumes when --model or --gpu is not given.
DEFAULT_MODEL, DEFAULT_GPU = "llama-3-8b", "h100"
#: The options only the timed mode reads, and only a run with tiers.
TIMED_ONLY = ("ttft_slo", "prefill_tps", "decode_ms", "speedup", "disk_gbps",
              "host_latency_ms", "disk_latency_ms", "stage_gap")  # fmt: skip
TIERS_ONLY = ("write_through", "disk_gbps", "host_latency_ms", "disk_latency_ms")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``simulate`` subcommand to a CLI's subparsers."""
    parser = subparsers.add_parser(
        "simulate",
        help="replay a serving workload through the cache: hit ratio, GiB, GPUs, TTFT",
        description="Replay TRACE (or an embedded workload) through the radix tree at one "
        "or more pool sizes; report the hit ratio of LRU beside the offline Belady bound and "
        "an infinite pool, the knee, and with a model and GPUs the pool in GiB and GPUs, TTFT "
        "and throughput under load, and overload.",
    )
    add_options(parser)
    parser.set_defaults(handler=run_simulate)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


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
        results = _simulate(trace, _settings(args, trace), args.quiet, console)
    except (SimulateError, InputError, ImportError) as error:
        print(f"simulate: {' '.join(str(error).split())}", file=sys.stderr)
        if made is not None:
            _remove_empty(args.out, made)
        return EXIT_USAGE
    print_report(results, console)
    if args.out is not None:
        return _write(results, args.out, console)
    return EXIT_OK


def _simulate(trace: Trace, settings: Settings, quiet: bool, console: Console) -> Results:
    """Plan and run the sweep behind a progress bar. O(the sweep)."""
    prepared = plan(trace, settings)
    runs = len(prepared.job.configs)
    refined = settings.knee_rounds * settings.knee_points * 2 * len(settings.knee_fractions)
    capacities = len(prepared.capacities) + (refined if settings.bounds else 0)
    total = len(trace.requests) * capacities * runs  # the refinements: at most
    with progress_bar(total, "replaying", console, quiet=quiet) as advance:
        return execute(prepared, settings, advance)


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


# ---------------------------------------------------------------------- the workload


def _trace(args: argparse.Namespace) -> Trace:
    """The trace file, or the embedded workload (written out with --save-workload).

    Raises:
        SimulateError: options that do not apply to the source, or an unreadable trace.
    """
    if args.trace is not None:
        for flag, given in (("--save-workload", args.save_workload), ("--requests", args.requests)):
            if given is not None:
                raise SimulateError(f"{flag} applies to the embedded workload: give no TRACE")
        return read_trace(
            args.trace, format=args.format, block_size=args.block_size,
            tokens_per_block=args.hash_block_tokens, skip_bad=args.skip_bad,
        )  # fmt: skip
    if args.workload in PUBLISHED:
        if args.requests is not None:
            raise SimulateError(f"--requests: the {args.workload} workload has its own size")
        spec = replace(PUBLISHED[args.workload], seed=args.seed)
        trace = generate_shared_prefix(spec)
        lines = mooncake_records(trace)
    else:
        shape = replace(WORKLOADS[args.workload], seed=args.seed, block_size=args.block_size)
        if args.requests is not None:
            shape = replace(shape, requests=args.requests)
        trace = generate(shape)
        if args.workload != "chat-agent":
            trace = replace(trace, source=f"{args.workload} workload (seed {args.seed})")
        lines = token_lines(trace)
    if args.save_workload is not None:
        try:
            write_lines(lines, args.save_workload)
        except OSError as error:
            raise SimulateError(f"cannot write {args.save_workload}: {error}") from None
    return trace


# ---------------------------------------------------------------------- the settings


def _mode(args: argparse.Namespace, trace: Trace) -> str:
    if args.mode != "auto":
        return str(args.mode)
    return "timed" if args.gpu is not None and trace.has_timestamps() else "sequential"


def _model(args: argparse.Namespace, needed: bool) -> ModelShape | None:
    if args.model is not None:
        return parse_model(args.model, args.kv_dtype)
    if needed:
        found = MODELS[DEFAULT_MODEL]
        return found if args.kv_dtype is None else replace(found, kv_dtype=args.kv_dtype)
    return None


def _deployment(
    args: argparse.Namespace, model: ModelShape | None, needed: bool
) -> Deployment | None:
    name = args.gpu or (DEFAULT_GPU if needed else None)
    if name is None:
        return None
    chosen = model or MODELS[DEFAULT_MODEL]
    return Deployment(chosen, get_gpu(name), args.gpus, args.gpu_mem_util, args.gpu_reserve)


def _only(args: argparse.Namespace, names: tuple[str, ...], where: str) -> None:
    """Refuse an option given where it has no effect.

    Raises:
        SimulateError: the first such option.
    """
    for name in names:
        value = getattr(args, name)
        if value not in (None, False):
            raise SimulateError(f"{_flag(name)} applies to {where}")


def _service(args: argparse.Namespace) -> ServiceModel:
    try:
        return ServiceModel(args.max_running, args.token_budget, args.on_full,
                            args.request_overhead_ms)  # fmt: skip
    except ValueError as error:
        raise SimulateError(str(error)) from None


def _settings(args: argparse.Namespace, trace: Trace) -> Settings:
    """Every option, checked against the trace (sizes in its units, options of another
    mode). O(the options).

    Raises:
        SimulateError: an option that does not apply, or a size the trace cannot take.
    """
    mode = _mode(args, trace)
    timed = mode == "timed"
    model = _model(args, timed or args.gpu is not None)
    deployment = _deployment(args, model, timed)
    # Sizes in GiB and GPUs only for what the user named (the timed mode's default
    # deployment prices steps, it is not theirs to size).
    named_model = model if args.model is not None or args.gpu is not None else None
    named = deployment if args.gpu is not None else None
    sizing = Sizing(trace.tokens_per_block, named_model, named)
    if not timed:
        _only(
            args, TIMED_ONLY, "the timed mode (--gpu on a trace with timestamps, or --mode timed)"
        )
    cost = slo = None
    if timed:
        assert deployment is not None
        cost = _cost(args, deployment)
        if args.ttft_slo is not None:
            slo = Slo(args.ttft_slo, args.slo_attainment, args.slo_runs)
    capacities = None if args.capacity is None else tuple(parse_capacities(args.capacity, sizing))
    clusters = _clusters(args)
    _check_pools(capacities, clusters)
    return Settings(
        policies=_policies(args), clusters=clusters, tiers=_tiers(args, sizing), mode=mode,
        implementation=args.impl or default_twin(), service=_service(args),
        cost=cost, capacities=capacities, sweep_points=args.sweep, bounds=not args.no_bounds,
        executor=args.executor, jobs=args.jobs, ray_address=args.ray_address,
        timeline_capacity=args.timeline_capacity, knee_fractions=args.knee,
        knee_rounds=args.knee_rounds, deployment=named, model=named_model, slo=slo,
        speed=1.0 if args.speedup is None else args.speedup, warmup=args.warmup,
        stage_gap_ms=args.stage_gap,
    )  # fmt: skip


def _check_pools(capacities: tuple[int, ...] | None, clusters: tuple[ClusterSpec, ...]) -> None:
    """Refuse a capacity too small to give every worker of a cluster one block.

    Raises:
        SimulateError: the smallest such capacity and cluster.
    """
    widest = max((cluster.workers for cluster in clusters), default=1)
    if capacities and capacities[0] < widest:
        raise SimulateError(
            f"--capacity {capacities[0]:,} blocks split over {widest:,} workers leaves a "
            "worker none: give at least one block a worker"
        )


def _cost(args: argparse.Namespace, deployment: Deployment) -> CostModel:
    latencies = {}
    if args.host_latency_ms is not None:
        latencies["host_latency_ms"] = args.host_latency_ms
    if args.disk_latency_ms is not None:
        latencies["disk_latency_ms"] = args.disk_latency_ms
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
        _only(args, TIERS_ONLY, "tiers: give --tiers host=SIZE[,disk=SIZE]")
        return ()
    found = [parse_tiers(text, sizing, args.write_through) for text in args.tiers]
    return tuple(dict.fromkeys(found))


def _clusters(args: argparse.Namespace) -> tuple[ClusterSpec, ...]:
    """Every cluster asked for: workers x routings x indexes (one worker: just one).

    Raises:
        SimulateError: a cluster its spec refuses.
    """
    delay_requests, delay_ms = args.router_delay
    found: dict[str, ClusterSpec] = {}
    for workers in args.workers:
        for routing in args.routing if workers > 1 else ["round-robin"]:
            indexed = routing in ("prefix", "cost", "cache-aware")
            for index in args.index if indexed else ["shared"]:
                spec = ClusterSpec(workers=workers, routing=routing, index=index,
                                   gateways=args.gateways, delay_requests=delay_requests,
                                   delay_ms=delay_ms, overlap_weight=args.overlap_weight,
                                   seed=args.seed, router_index=args.router_index)  # fmt: skip
                found.setdefault(spec.label or "1", spec)
    return tuple(found.values())


def _policies(args: argparse.Namespace) -> tuple[tuple[str, dict[str, object] | None], ...]:
    """The policies to run beside LRU, with their options, checked as a tree checks them.

    Raises:
        SimulateError: an unknown option, or options for a policy not asked for.
    """
    names = args.policy
    given = args.policy_options or {}
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise SimulateError(f"--policy-options names {unknown[0]!r}, which --policy does not")
    chosen: list[tuple[str, dict[str, object] | None]] = []
    for name in names:
        options = given.get(name)
        if options is None and name == "priority" and args.trace is None:
            workload = WORKLOADS.get(args.workload)
            options = (workload.priority_options() or None) if workload is not None else None
        try:
            check_policy(name, options)
        except InvalidArgumentError as error:
            raise SimulateError(f"--policy: {error}") from None
        if name != "lru":
            chosen.append((name, options))
    return tuple(chosen)


# ---------------------------------------------------------------------- output


def _prefill_cost(args: argparse.Namespace, console: Console) -> int:
    """``--prefill-cost``: each prompt length's prefill alone on an idle worker."""
    model = _model(args, True)
    assert model is not None
    deployment = _deployment(args, model, True)
    assert deployment is not None
    cost = _cost(args, deployment)
    console.print(f"{model.describe()} on {deployment.gpus} x {deployment.gpu.part}",
                  highlight=False, markup=False)  # fmt: skip
    for tokens in args.prefill_cost:
        found = cost.solo_prefill(tokens, 0, args.token_budget)
        flops = found["linear_flops"] + found["attention_flops"]
        share = found["attention_flops"] / flops
        plural = "s" if found["steps"] > 1 else ""
        console.print(
            f"{tokens:,}-token prefill: {flops / 1e15:,.3g} PFLOP ({100 * share:.0f}% attention): "
            f"{duration(found['compute_ms'])} of compute at mfu {cost.mfu:g}, "
            f"{duration(found['ms'])} in {found['steps']:,.0f} step{plural} of "
            f"{args.token_budget:,} tokens (TTFT on an idle worker, "
            f"{args.request_overhead_ms:g} ms a request not counted)",
            highlight=False,
            markup=False,
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
                markup=False,
            )
        for name, data in (plots or {}).items():
            (out / name).write_bytes(data)
            written.append(out / name)
        written.append(write_report(results, out, plots))
    except OSError as error:
        print(f"simulate: cannot write results to {out}: {error}", file=sys.stderr)
        return EXIT_USAGE
    console.print(f"wrote {', '.join(path.name for path in written)} to {out}",
                  highlight=False, markup=False)  # fmt: skip
    return EXIT_OK
