"""``kachedb-radix simulate``'s options, declared as data, checked where they are parsed.

:data:`GROUPS` is the one table of the command's options: one :class:`Option` row each,
in the groups and the order ``--help`` shows them; :func:`add_options` builds the
parser from it. Every value is checked by its row's ``type`` at parse time, through
the shared input layer (:mod:`kachedb_radix.spec.inputs`: counts and reals in a range,
finite, 0 a value and never "the default"; paths that can be read or written; caps
from :data:`~kachedb_radix.spec.inputs.LIMITS`), so a bad word is a one-line argparse
error naming the option, exit 2, before anything runs. What only the trace can tell
(sizes in GiB or GPUs need its block size; a timeline capacity must be one that is
simulated) is checked as soon as the trace is read, with the same one-line refusal.

Cost: O(options) to build the parser; each check O(its word).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kachedb_radix.reference.policies import POLICIES

from ..inputs import (
    LIMITS,
    InputError,
    choice_list,
    count,
    input_path,
    loads_json_object,
    output_dir,
    output_file,
    real,
)
from ..simulate.cluster import INDEXES, ROUTINGS, load_index_class
from ..simulate.errors import SimulateError
from ..simulate.executors import EXECUTORS
from ..simulate.formats import FORMATS
from ..simulate.plan.cost import DISK_BYTES_PER_S, DISK_LATENCY_MS, HOST_LATENCY_MS
from ..simulate.plan.hardware import GPU_NAMES, check_size
from ..simulate.plan.knee import parse_fractions
from ..simulate.plan.models import MODELS, parse_model
from ..simulate.plan.service import ON_FULL, ServiceModel
from ..simulate.plan.slo import parse_duration
from ..simulate.published import PUBLISHED
from ..simulate.sweep import parse_sweep
from ..simulate.workload import WORKLOADS, WorkloadSpec
from ..twins import PURE_SWITCH, TWIN_NAMES

#: Every ``--workload``: the generators and the published benchmarks' workloads.
WORKLOAD_NAMES = (*WORKLOADS, *PUBLISHED)
MODES = ("auto", "sequential", "timed")
#: A timed quantity's range, ms: up to a day.
DAY_MS = 86_400_000.0


@dataclass(frozen=True)
class Option:
    """One option: its flags and what ``add_argument`` takes (``type`` checks the word).

    Attributes:
        flags: its names (a positional has one without dashes).
        help: the ``--help`` text.
        kwargs: the rest of ``add_argument``'s keywords.
        exclusive: options sharing this name are mutually exclusive.
    """

    flags: tuple[str, ...]
    help: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    exclusive: str | None = None


def _checked(parse: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """``parse`` as an argparse type: its SimulateError or InputError becomes the
    one-line argparse error."""

    def check(word: str) -> Any:
        try:
            return parse(word)
        except (SimulateError, InputError) as error:
            text = str(error).split(": ", 1)[-1] if str(error).startswith("--") else str(error)
            raise argparse.ArgumentTypeError(text) from None

    check.__name__ = name
    return check


def count_list(least: int, most: int) -> Callable[[str], list[int]]:
    """A comma-separated list of whole numbers in ``[least, most]``, without repeats,
    in order. O(len(word))."""
    item = count(least, most)

    def parse(word: str) -> list[int]:
        parts = [part.strip() for part in word.split(",")]
        if not word.strip() or not all(parts):
            raise argparse.ArgumentTypeError(f"{word!r} has an empty item in its list")
        return list(dict.fromkeys(item(part) for part in parts))

    parse.__name__ = "list"
    return parse


def duration(least: float, most: float = DAY_MS, *, above: bool = False) -> Callable[[str], float]:
    """``500ms``, ``1.5s`` or a number of ms, in ``[least, most]`` ms (or above
    ``least``). O(len(word))."""

    def parse(word: str) -> float:
        value = parse_duration(word)
        if value < least or (above and value == least) or value > most:
            relation = "above" if above else "at least"
            raise SimulateError(f"{word!r} must be {relation} {least:g} ms and at most {most:g} ms")
        return value

    return _checked(parse, "duration")


def _router_delay(word: str) -> tuple[int, float | None]:
    """``N`` requests or a time: ``(requests, ms or None)``."""
    text = word.strip()
    if text.endswith("s"):
        return 0, duration(0.0)(text)
    if not text.isdigit():
        raise SimulateError(f"{word!r} is not a number of requests or a time like 50ms")
    return count(0, LIMITS["trace_requests"].maximum)(text), None


def _sizes(word: str) -> str:
    """A list of sizes as ``--capacity`` takes them, checked for form (the units are
    resolved once the trace's block size is known)."""
    for item in word.split(","):
        check_size(item)
    return word


def _model(word: str) -> str:
    parse_model(word)  # a preset, a config that reads, or a shape: refused here if not
    return word


def _policy_options(word: str) -> dict[str, Any]:
    found = loads_json_object(word, "--policy-options")
    if not all(isinstance(value, dict) for value in found.values()):
        raise SimulateError("must map policy names to objects of options")
    return found


def _router_index(word: str) -> str:
    load_index_class(word)
    return word


REQUESTS = LIMITS["simulate_requests"]
TOKENS = LIMITS["request_tokens"]
WORKERS = LIMITS["simulate_workers"]
SERVICE = ServiceModel()

#: The options, grouped and ordered as ``--help`` shows them (see the module docstring).
GROUPS: tuple[tuple[str | None, tuple[Option, ...]], ...] = (
    (None, (
        Option(("trace",), "JSON-lines trace (default: the embedded workload; at most "
               f"{LIMITS['trace_requests'].maximum:,} requests, a prompt {TOKENS.describe()}, "
               f"an output {LIMITS['output_tokens'].describe()})",
               {"nargs": "?", "type": input_path, "metavar": "TRACE"}),
    )),
    ("trace", (
        Option(("--format",), "the trace's format (default auto: told from its first line)",
               {"choices": ("auto", *FORMATS), "default": "auto"}),
        Option(("--block-size",), "tokens per block of token traces and the embedded "
               "workload (default 16)", {"type": count(1, 65_536), "default": 16, "metavar": "B"}),
        Option(("--hash-block-tokens",), "tokens per hash id of mooncake traces (default 512)",
               {"type": count(1, 1 << 20), "default": 512, "metavar": "N"}),
        Option(("--skip-bad",), "count and skip bad lines instead of stopping",
               {"action": "store_true"}),
        Option(("--workload",), "the embedded workload: chat-agent (default), seed-table "
               "(the seed article's benchmark), llm-d (llm-d's precise-routing benchmark, "
               "17,084 requests in load stages), sglang-router (SGLang v0.4's router "
               "benchmark, a burst of 1,024)",
               {"choices": WORKLOAD_NAMES, "default": "chat-agent"}),
        Option(("--seed",), "workload and routing seed (default 0)",
               {"type": count(0, 2**63 - 1), "default": 0}),
        Option(("--requests",), f"size of the chat-agent and seed-table workloads (default "
               f"{WorkloadSpec.requests:,}; {REQUESTS.describe()})",
               {"type": count(1, REQUESTS.maximum), "default": None, "metavar": "N"}),
        Option(("--save-workload",), "also write the embedded workload to PATH as a trace",
               {"type": output_file, "metavar": "PATH"}),
    )),
    ("simulation", (
        Option(("--mode",), "auto (default): timed when --gpu is given and every request "
               "has a timestamp, else sequential", {"choices": MODES, "default": "auto"}),
        Option(("--capacity",), "pool sizes: blocks (1000, 20k), tokens (2Mtok), bytes "
               "(64GiB, 2TB) or GPUs (8gpu); a cluster's total with --workers",
               {"type": _checked(_sizes, "sizes"), "metavar": "LIST"}, exclusive="sizes"),
        Option(("--sweep",), "N log-spaced capacities up to the working set (1 to 64; "
               "default auto: 8)", {"type": _checked(parse_sweep, "sweep"), "default": "auto",
               "metavar": "auto|N"}, exclusive="sizes"),
        Option(("--knee",), "fractions of the achievable hit ratio to find the pool for, e.g. "
               "0.8,0.9,0.95 (default 0.9)",
               {"type": _checked(parse_fractions, "fractions"), "default": "0.9",
                "metavar": "FRACTIONS"}),
        Option(("--knee-rounds",), "rounds of extra capacities around the knees (default 2, "
               "0: none)", {"type": count(0, 10), "default": 2, "metavar": "N"}),
        Option(("--impl",), f"tree implementation (default: accel, or reference when "
               f"{PURE_SWITCH}=1)", {"choices": TWIN_NAMES, "default": None}),
        Option(("--policy",), "eviction policies to compare, e.g. lru,lfu,fifo,priority,slru "
               "(R-POL-*; LRU always runs: it is the baseline)",
               {"type": choice_list(POLICIES), "default": ["lru"], "metavar": "LIST"}),
        Option(("--policy-options",), 'options by policy, e.g. \'{"slru": '
               '{"protected_percent": 50}}\' (default: each policy\'s; for the embedded '
               "workload, priority gets its tenants' tiers)",
               {"type": _checked(_policy_options, "JSON"), "default": None, "metavar": "JSON"}),
        Option(("--no-bounds",), "skip Belady and infinite capacity", {"action": "store_true"}),
        Option(("--executor",), "where the tasks run (default: worker processes)",
               {"choices": EXECUTORS, "default": "process"}),
        Option(("--jobs",), "worker processes (default: CPUs)",
               {"type": count(1, 1024), "default": None, "metavar": "N"}),
        Option(("--ray-address",), "Ray cluster for --executor ray ('auto', host:port; "
               "default: a local Ray)", {"default": None, "metavar": "ADDR"}),
    )),
    ("workers and routing", (
        Option(("--workers",), f"workers sharing the capacity, e.g. 1,4,8 (each its own tree; "
               f"default 1; {WORKERS.describe()})",
               {"type": count_list(1, WORKERS.maximum), "default": [1], "metavar": "LIST"}),
        Option(("--routing",), f"routing rules with several workers: {', '.join(ROUTINGS)} "
               "(default round-robin,cost)",
               {"type": choice_list(ROUTINGS), "default": ["round-robin", "cost"],
                "metavar": "LIST"}),
        Option(("--index",), f"the router's index for prefix, cost and cache-aware: "
               f"{', '.join(INDEXES)} (fed by the workers' events; learned at routing time, as "
               "SGLang's approximate tree; learned per gateway from its own decisions)",
               {"type": choice_list(INDEXES), "default": ["shared"], "metavar": "LIST"}),
        Option(("--gateways",), "gateways of --index gateway (4)",
               {"type": count(1, WORKERS.maximum), "default": 4, "metavar": "N"}),
        Option(("--router-delay",), "events reach the router N requests later, or after a "
               "time like 50ms (default 0)",
               {"type": _checked(_router_delay, "delay"), "default": (0, None),
                "metavar": "N|TIME"}),
        Option(("--overlap-weight",), "cost routing: weight of a block to prefill against a "
               "block of load (1)", {"type": real(0.0, 1e6, above=True), "default": 1.0,
               "metavar": "W"}),
        Option(("--router-index",), "the router index class (default: the RouterIndex of "
               "--impl: the C twin's with accel, the reference's with reference)",
               {"type": _checked(_router_index, "MODULE:CLASS"), "default": None,
                "metavar": "MODULE:CLASS"}),
    )),
    ("tiers (host and disk under each worker's pool)", (
        Option(("--tiers",), "host and/or disk tiers under the device pool (the swept "
               "capacity), sizes as --capacity takes them (a cluster's totals); repeat for "
               "several, each run beside the same configuration without tiers; a word "
               "write-through or write-back per spec",
               {"action": "append", "default": None, "metavar": "host=SIZE[,disk=SIZE]"}),
        Option(("--write-through",), "copy every stored path to the host at once (default: "
               "write-back, on eviction)", {"action": "store_true"}),
        Option(("--disk-gbps",), f"disk read bandwidth per GPU of a worker, GB/s "
               f"({DISK_BYTES_PER_S / 1e9:g}: one PCIe Gen4 NVMe drive per GPU); the host link "
               "is --gpu's (--host-gbps)", {"type": real(0.0, 1e5, above=True), "default": None,
               "metavar": "GB"}),
        Option(("--host-latency-ms",), f"fixed cost of a restore from the host "
               f"({HOST_LATENCY_MS:g})", {"type": real(0.0, DAY_MS), "default": None,
               "metavar": "MS"}),
        Option(("--disk-latency-ms",), f"fixed cost of a restore from disk ({DISK_LATENCY_MS:g})",
               {"type": real(0.0, DAY_MS), "default": None, "metavar": "MS"}),
    )),
    ("model and GPUs", (
        Option(("--model",), f"a preset ({', '.join(MODELS)}), a Hugging Face config.json, or "
               "layers=,kv_heads=,head_dim=,dtype= [,hidden=,heads=,vocab=,params=,active=]: "
               "capacities in GiB", {"type": _checked(_model, "model"), "default": None,
               "metavar": "NAME|PATH|SPEC"}),
        Option(("--kv-dtype",), "the KV cache's dtype (default: the model's; fp8 as vLLM's "
               "--kv-cache-dtype fp8)", {"choices": ("bf16", "fp16", "fp32", "fp8"),
               "default": None}),
        Option(("--gpu",), "GPU class: capacities in GPUs, TTFT",
               {"choices": GPU_NAMES, "default": None}),
        Option(("--gpus",), "GPUs per worker (tensor parallel; 1)",
               {"type": count(1, 1024), "default": 1, "metavar": "N"}),
        Option(("--gpu-mem-util",), "share of GPU memory the engine takes (vLLM's "
               "gpu_memory_utilization; 0.9)", {"type": real(0.0, 1.0, above=True),
               "default": 0.9, "metavar": "F"}),
        Option(("--gpu-reserve",), "GiB per GPU kept for activations and the runtime (2)",
               {"type": real(0.0, 1e4), "default": 2.0, "metavar": "GIB"}),
        Option(("--gpu-tflops",), "override the GPU's dense TFLOP/s at the model's dtype",
               {"type": real(0.0, 1e6, above=True), "default": None, "metavar": "TF"}),
        Option(("--hbm-tbps",), "override the GPU's HBM bandwidth, TB/s",
               {"type": real(0.0, 1e3, above=True), "default": None, "metavar": "TB"}),
        Option(("--host-gbps",), "override the GPU's host link, GB/s one way",
               {"type": real(0.0, 1e5, above=True), "default": None, "metavar": "GB"}),
    )),
    ("timed mode (the service model)", (
        Option(("--max-running",), f"requests running at once at most (default "
               f"{SERVICE.max_running})", {"type": count(1, 1 << 16),
               "default": SERVICE.max_running, "metavar": "N"}),
        Option(("--token-budget",), f"tokens a step at most (default {SERVICE.token_budget:,})",
               {"type": count(1, 1 << 24), "default": SERVICE.token_budget, "metavar": "N"}),
        Option(("--mfu",), "share of peak FLOP/s the kernels reach (0.5)",
               {"type": real(0.0, 1.0, above=True), "default": 0.5, "metavar": "F"}),
        Option(("--mbu",), "share of HBM bandwidth the kernels reach (0.7)",
               {"type": real(0.0, 1.0, above=True), "default": 0.7, "metavar": "F"}),
        Option(("--step-overhead-ms",), "fixed cost of a step: scheduling, launches, sampling "
               "(2)", {"type": real(0.0, DAY_MS), "default": 2.0, "metavar": "MS"}),
        Option(("--request-overhead-ms",), f"fixed cost of a request outside the GPU: HTTP, "
               f"gateway, tokenising, streaming (default {SERVICE.request_overhead_ms:g}: "
               "llm-d's fastest published TTFT less this model's step; docs/simulate.md)",
               {"type": real(0.0, DAY_MS), "default": SERVICE.request_overhead_ms,
                "metavar": "MS"}),
        Option(("--prefill-tps",), "override: prefill at this many tokens/s (no attention "
               "term)", {"type": real(0.0, 1e12, above=True), "default": None,
               "metavar": "TOKENS"}),
        Option(("--decode-ms",), "override: a step with decodes lasts at least this long",
               {"type": real(0.0, DAY_MS), "default": None, "metavar": "MS"}),
        Option(("--on-full",), "when a request finds the pool full: wait for blocks, or "
               "refuse it (default wait)", {"choices": ON_FULL, "default": SERVICE.on_full}),
        Option(("--speedup",), "replay the arrivals F times faster (2: twice the traffic; "
               "default 1)", {"type": real(0.0, 1024.0, above=True), "default": None,
               "metavar": "F"}),
        Option(("--warmup",), "leave the first N requests out of the latency figures "
               "(default 0)", {"type": count(0, LIMITS["trace_requests"].maximum),
               "default": 0, "metavar": "N"}),
        Option(("--stage-gap",), "run the trace's load stages one after another, each this "
               "long after the previous one drained (inference-perf's ladder; default: the "
               "arrivals as they are)", {"type": duration(0.0), "default": None,
               "metavar": "TIME"}),
        Option(("--ttft-slo",), "TTFT SLO, e.g. 500ms: attainment and throughput at the SLO",
               {"type": duration(0.0, above=True), "default": None, "metavar": "TIME"}),
        Option(("--slo-attainment",), "share of requests that must meet the SLO (0.9)",
               {"type": real(0.0, 1.0, above=True), "default": 0.9, "metavar": "F"}),
        Option(("--slo-runs",), "timed runs searching the throughput at the SLO (8; 0: none)",
               {"type": count(0, 64), "default": 8, "metavar": "N"}),
        Option(("--prefill-cost",), f"print what prompts of these lengths cost to prefill "
               f"alone (e.g. 32768; {TOKENS.describe()}) and exit",
               {"type": count_list(1, TOKENS.maximum), "default": None, "metavar": "TOKENS"}),
    )),
    ("output", (
        Option(("--out",), "write results.json, results.csv, the plots and report.html",
               {"type": output_dir, "metavar": "DIR"}),
        Option(("--timeline-capacity",), "the capacity of the over-time plot and the cluster "
               "table, in blocks (default: the middle one)",
               {"type": count(1, 2**62), "default": None, "metavar": "N"}),
        Option(("--quiet",), "no progress bar", {"action": "store_true"}),
    )),
)  # fmt: skip


def add_options(parser: argparse.ArgumentParser) -> None:
    """Declare every option of :data:`GROUPS` on ``parser``, grouped. O(options)."""
    for title, options in GROUPS:
        group: Any = parser if title is None else parser.add_argument_group(title)
        exclusive: dict[str, Any] = {}
        for option in options:
            target = group
            if option.exclusive is not None:
                if option.exclusive not in exclusive:
                    exclusive[option.exclusive] = group.add_mutually_exclusive_group()
                target = exclusive[option.exclusive]
            target.add_argument(*option.flags, help=option.help, **option.kwargs)
