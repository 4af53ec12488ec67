"""A simulation's results, and the files ``--out DIR`` writes.

``results.json`` follows the published JSON Schema ``results.schema.json`` beside
this module (format version :data:`RESULTS_VERSION`); ``results.csv`` has one row
per capacity, with two columns more per configuration beside LRU; the plots are
drawn by :mod:`kachedb_radix.spec.simulate.plots` and the self-contained page by
:mod:`kachedb_radix.spec.simulate.report`.

The knees (:mod:`kachedb_radix.spec.simulate.plan.knee`): for every configuration and
Belady, at every fraction asked for, the capacity interpolated where the curve
reaches that fraction of the infinite-capacity token hit ratio.

**Versions.** Each version only adds to the one before, so a reader of an older
version that ignores keys it does not know reads a newer document unchanged:
2 added the policies beside LRU; 3 the model and GPUs, the knees at several
fractions, the timed mode's service figures, the clusters and the no-cache baseline;
4 the tiers -- ``settings.configurations[].tiers`` (null without), each point's
``tiered`` runs (every configuration with tiers, by label; never under ``policies`` or
``clusters``, so a version-3 reader's sums over those are what they were) and a tiered
run's ``tiers`` figures (the hit ratio per tier, the restores), and in the cost model
the disk bandwidth and the restore latencies; 5 the service model's memory (a running
request holds its prompt's and its outputs' blocks; the no-cache baseline has the same
pools): every point's ``no_cache`` baselines at its capacity (the top-level
``no_cache`` is now the baseline at the timeline capacity, with the same memory, no
longer one with unbounded memory), a run's ``preemptions`` and ``preempted``
(``uncached_outputs`` is gone: outputs are held while they decode), and in a timed
run's ``service`` the TTFT mean, the warm-up left out, the makespan, input and output
tokens and requests a second, the offered decode, the load and whether it is
overloaded or saturated, and the figures per load stage; in the settings, the
scheduler's request overhead, the warm-up and the stage gap.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..inputs import dumps_json
from .metrics import HitStats
from .plan.cost import CostModel
from .plan.hardware import Sizing
from .plan.knee import DEFAULT_FRACTIONS, Knee, find_knee
from .plan.service import ServiceModel
from .plan.slo import Slo
from .point import Config, Point, Run
from .trace import Trace

RESULTS_VERSION = 5
#: A tiered configuration's CSV columns: its token hit ratio from each tier.
TIER_COLUMNS = ("device", "host", "disk")
SCHEMA_PATH = Path(__file__).with_name("results.schema.json")

CSV_COLUMNS = (
    "capacity_blocks",
    "capacity_gib",
    "lru_token_hit_ratio",
    "lru_block_hit_ratio",
    "belady_token_hit_ratio",
    "belady_block_hit_ratio",
    "infinite_token_hit_ratio",
    "infinite_block_hit_ratio",
    "prefill_tokens_saved",
    "evictions",
    "peak_pinned_blocks",
    "truncated",
    "waited",
    "refused",
    "preemptions",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "output_tokens_per_s",
    "load",
    "no_cache_ttft_p50_ms",
    "no_cache_ttft_p99_ms",
    "slo_attainment",
    "seconds",
)


@dataclass(frozen=True)
class Results:
    """Everything a simulation found (see :meth:`to_json` for the published form)."""

    trace: Trace
    mode: str
    implementation: str
    executor: str
    service: ServiceModel | None
    working_set: int
    infinite: HitStats | None
    points: list[Point]
    timeline_capacity: int
    seconds: dict[str, float]
    cost: CostModel | None = None
    configs: tuple[Config, ...] = (Config(),)
    #: Each policy's options in force (defaults filled in), by name.
    policy_options: dict[str, dict[str, object]] = field(default_factory=dict)
    sizing: Sizing | None = None
    knee_fractions: tuple[float, ...] = DEFAULT_FRACTIONS
    #: Capacities the knee's refinement rounds added.
    refined: list[int] = field(default_factory=list)
    #: The timed mode's no-cache baselines, by cluster ("1 worker", "4xprefix", ...).
    no_cache: dict[str, Run] = field(default_factory=dict)
    slo: Slo | None = None
    notes: list[str] = field(default_factory=list)
    warmup: int = 0
    stage_gap_ms: float | None = None

    @property
    def labels(self) -> list[str]:
        """Every configuration's label, LRU first. O(configurations)."""
        return [config.label for config in self.configs]

    @property
    def policies(self) -> list[str]:
        """The policies compared beside LRU on one worker without tiers, in the order
        asked. O(configs)."""
        return [
            c.label
            for c in self.configs
            if c.cluster.workers == 1 and c.label != "lru" and c.tiers is None
        ]

    @property
    def clusters(self) -> list[str]:
        """The configurations on several workers without tiers, in order. O(configs)."""
        return [c.label for c in self.configs if c.cluster.workers > 1 and c.tiers is None]

    @property
    def tiered(self) -> list[str]:
        """The configurations with host or disk tiers, in order. O(configurations)."""
        return [c.label for c in self.configs if c.tiers is not None]

    def config(self, label: str) -> Config:
        """The configuration named ``label``. O(configurations).

        Raises:
            KeyError: no such configuration.
        """
        for config in self.configs:
            if config.label == label:
                return config
        raise KeyError(label)

    def stats(self, point: Point, series: str) -> HitStats | None:
        """``series``'s hit counts at ``point``: a configuration's label or ``belady``
        (None: Belady without bounds). O(1)."""
        if series == "belady":
            return point.belady
        return point.runs[series].stats

    def shown(self) -> list[Point]:
        """The points the tables show: the sweep's, not the knee's refinements (those are
        in results.json, the CSV and the plots). O(points)."""
        added = set(self.refined)
        return [point for point in self.points if point.capacity not in added]

    def point(self, capacity: int) -> Point:
        """The point simulated at ``capacity``. O(points).

        Raises:
            KeyError: no point at that capacity.
        """
        for found in self.points:
            if found.capacity == capacity:
                return found
        raise KeyError(capacity)

    def knee(self, series: str, fraction: float | None = None) -> Knee | None:
        """``series``'s knee at ``fraction`` (default: the first asked), or None without
        bounds. O(points)."""
        if self.infinite is None:
            return None
        share = self.knee_fractions[0] if fraction is None else fraction
        curve = []
        for point in self.points:
            stats = self.stats(point, series)
            assert stats is not None, "with bounds, every point has Belady's counts"
            curve.append((point.capacity, stats.token_hit_ratio))
        return find_knee(series, share, self.infinite.token_hit_ratio, curve)

    def knees(self) -> list[Knee]:
        """Every configuration's and Belady's knee at every fraction. O(points * configs)."""
        if self.infinite is None:
            return []
        found = []
        for series in (*self.labels, "belady"):
            for fraction in self.knee_fractions:
                knee = self.knee(series, fraction)
                assert knee is not None
                found.append(knee)
        return found

    def csv_columns(self) -> tuple[str, ...]:
        """:data:`CSV_COLUMNS`, then each other configuration's two ratios. O(configs)."""
        extra = [
            f"{name}_{kind}_hit_ratio" for name in self.labels[1:] for kind in ("token", "block")
        ]
        extra += [f"{name}_{tier}_hit_ratio" for name in self.tiered for tier in TIER_COLUMNS]
        extra += [f"{name}_ttft_{p}_ms" for name in self.tiered if self.mode == "timed"
                  for p in ("p50", "p99")]  # fmt: skip
        return (*CSV_COLUMNS, *extra)

    def to_json(self) -> dict[str, Any]:
        """The ``results.json`` document. O(points * windows)."""
        trace = self.trace
        sizing = self.sizing or Sizing(trace.tokens_per_block)
        lru = self.knee("lru")
        belady = self.knee("belady")
        return {
            "format": "kachedb-radix simulate results",
            "version": RESULTS_VERSION,
            "trace": {
                "source": trace.source,
                "format": trace.format,
                "requests": len(trace.requests),
                "skipped_lines": len(trace.skipped),
                "block_size": trace.block_size,
                "tokens_per_block": trace.tokens_per_block,
                "namespaces": len({request.namespace for request in trace.requests}),
                "working_set_blocks": self.working_set,
            },
            "settings": {
                "mode": self.mode,
                "implementation": self.implementation,
                "executor": self.executor,
                "bounds": self.infinite is not None,
                "service": None if self.service is None else asdict(self.service),
                "cost": None if self.cost is None else asdict(self.cost),
                "policies": {
                    "lru": {},
                    **{name: o for name, o in self.policy_options.items() if name != "lru"},
                },
                "configurations": [
                    c.to_json(self.policy_options.get(c.policy, {}), sizing) for c in self.configs
                ],
                "model": None if sizing.model is None else asdict(sizing.model),
                "deployment": _deployment_json(sizing),
                "slo": None if self.slo is None else asdict(self.slo),
                "warmup_requests": self.warmup,
                "stage_gap_ms": self.stage_gap_ms,
            },
            "infinite": None if self.infinite is None else self.infinite.to_json(),
            "knee": {
                "fraction_of_infinite": self.knee_fractions[0],
                "fractions": list(self.knee_fractions),
                "lru_capacity": _rounded(lru),
                "belady_capacity": _rounded(belady),
                "refined_capacities": self.refined,
                "curves": [knee.to_json() for knee in self.knees()],
            },
            "timeline_capacity": self.timeline_capacity,
            "points": [self._point_json(point, sizing) for point in self.points],
            "no_cache": {label: _run_json(run) for label, run in self.no_cache.items()},
            "notes": self.notes,
            "seconds": self.seconds,
        }

    def _point_json(self, point: Point, sizing: Sizing) -> dict[str, Any]:
        gib = sizing.gib(point.capacity)
        gpus = sizing.gpus(point.capacity)
        return {
            "capacity": point.capacity,
            "capacity_tokens": int(sizing.tokens(point.capacity)),
            "capacity_gib": None if gib is None else round(gib, 3),
            "capacity_gpus": None if gpus is None else round(gpus, 3),
            "lru": _run_json(point.runs["lru"]),
            "policies": {name: _run_json(point.runs[name]) for name in self.policies},
            "clusters": {name: _run_json(point.runs[name]) for name in self.clusters},
            "tiered": {name: _run_json(point.runs[name]) for name in self.tiered},
            "belady": None if point.belady is None else point.belady.to_json(),
            "belady_seconds": round(point.belady_seconds, 4),
            "timeline": point.timeline,
            "no_cache": {label: _run_json(run) for label, run in point.no_cache.items()},
        }

    def csv_rows(self) -> list[dict[str, Any]]:
        """One row per capacity, keyed by :meth:`csv_columns`. O(points)."""
        sizing = self.sizing or Sizing(self.trace.tokens_per_block)
        rows = []
        for point in self.points:
            done = point.replay
            gib = sizing.gib(point.capacity)
            baseline = point.runs["lru"]
            service = baseline.service
            reached = None if service is None else service.attainment
            plain = point.no_cache.get("1 worker")
            row: dict[str, Any] = {
                "capacity_blocks": point.capacity,
                "capacity_gib": "" if gib is None else round(gib, 3),
                "lru_token_hit_ratio": round(point.lru.token_hit_ratio, 6),
                "lru_block_hit_ratio": round(point.lru.block_hit_ratio, 6),
                "prefill_tokens_saved": point.lru.saved_tokens,
                "evictions": done.evictions,
                "peak_pinned_blocks": done.peak_pinned,
                "truncated": done.truncated,
                "waited": done.waited,
                "refused": done.refused,
                "preemptions": done.preemptions,
                "output_tokens_per_s": _cell(
                    None if service is None else service.output_tokens_per_s
                ),
                "load": _cell(None if service is None else service.load),
                "no_cache_ttft_p50_ms": "" if plain is None else plain.ttft_ms.get("p50", ""),
                "no_cache_ttft_p99_ms": "" if plain is None else plain.ttft_ms.get("p99", ""),
                "slo_attainment": "" if reached is None else round(reached, 6),
                "seconds": round(point.seconds, 4),
            }
            for name, stats in (("belady", point.belady), ("infinite", self.infinite)):
                row[f"{name}_token_hit_ratio"] = (
                    "" if stats is None else round(stats.token_hit_ratio, 6)
                )
                row[f"{name}_block_hit_ratio"] = (
                    "" if stats is None else round(stats.block_hit_ratio, 6)
                )
            for percentile in ("p50", "p90", "p99"):
                row[f"ttft_{percentile}_ms"] = point.ttft_ms.get(percentile, "")
            for name in self.labels[1:]:
                run = point.runs[name]
                row[f"{name}_token_hit_ratio"] = round(run.stats.token_hit_ratio, 6)
                row[f"{name}_block_hit_ratio"] = round(run.stats.block_hit_ratio, 6)
            for name in self.tiered:
                run = point.runs[name]
                assert run.tiers is not None, "a tiered configuration's run has tier figures"
                for tier in TIER_COLUMNS:
                    row[f"{name}_{tier}_hit_ratio"] = round(run.tiers.ratio(tier), 6)
                if self.mode == "timed":
                    for percentile in ("p50", "p99"):
                        row[f"{name}_ttft_{percentile}_ms"] = run.ttft_ms.get(percentile, "")
            rows.append(row)
        return rows


def _cell(value: float | None) -> float | str:
    return "" if value is None else round(value, 6)


def _rounded(knee: Knee | None) -> int | None:
    if knee is None or knee.capacity is None:
        return None
    return max(1, round(knee.capacity))


def _deployment_json(sizing: Sizing) -> dict[str, Any] | None:
    deployment = sizing.deployment
    if deployment is None:
        return None
    return {
        "gpu": deployment.gpu.name,
        "part": deployment.gpu.part,
        "gpus_per_worker": deployment.gpus,
        "mem_util": deployment.mem_util,
        "reserve_gib": deployment.reserve_gib,
        "kv_gib_per_gpu": round(deployment.kv_bytes_per_gpu / 1024**3, 3),
        "worker_blocks": sizing.worker_blocks(),
        "source": deployment.gpu.source,
    }


def _run_json(run: Run) -> dict[str, Any]:
    found = run.stats.to_json()
    done = run.replay
    found.update(
        evictions=done.evictions,
        peak_pinned_blocks=done.peak_pinned,
        truncated=done.truncated,
        waited=done.waited,
        refused=done.refused,
        preemptions=done.preemptions,
        preempted=done.preempted,
        ttft_ms=run.ttft_ms or None,
        seconds=round(run.seconds, 4),
        trees=run.trees,
    )
    if run.service is not None:
        found["service"] = run.service.to_json()
    if run.tiers is not None:
        found["tiers"] = run.tiers.to_json()
    balance = run.balance
    if balance is not None:
        found["balance"] = {
            "requests": balance.requests,
            "prompt_tokens": balance.prompt_tokens,
            "saved_tokens": balance.saved_tokens,
            "imbalance": round(balance.imbalance, 6),
        }
    return found


def check_out_dir(out: Path) -> None:
    """Make ``out`` and check a file can be written in it, before a run. O(1).

    Raises:
        OSError: it cannot be created or written.
    """
    out.mkdir(parents=True, exist_ok=True)
    probe = out / ".kachedb-radix-write-check"
    probe.write_bytes(b"")
    probe.unlink()


def write_results(results: Results, out: Path) -> list[Path]:
    """Write results.json and results.csv into ``out`` (created). Returns the paths.

    Raises:
        OSError: ``out`` cannot be created or written.
    """
    out.mkdir(parents=True, exist_ok=True)
    document = out / "results.json"
    document.write_text(dumps_json(results.to_json(), indent=1) + "\n")
    table = out / "results.csv"
    with table.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=results.csv_columns())
        writer.writeheader()
        writer.writerows(results.csv_rows())
    return [document, table]
