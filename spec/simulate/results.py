"""A simulation's results, and the files ``--out DIR`` writes.

``results.json`` follows the published JSON Schema ``results.schema.json`` beside
this module (format version :data:`RESULTS_VERSION`); ``results.csv`` has one row
per capacity, with two columns more per policy compared beside LRU; the plots are
drawn by :mod:`kachedb_radix.spec.simulate.plots`.

The knee: the smallest simulated capacity at which a policy reaches
:data:`KNEE_FRACTION` of the infinite-capacity token hit ratio -- past it, more
blocks buy little. It is only as fine as the sweep.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .metrics import HitStats
from .point import Point
from .sequential import Replay
from .service import ServiceModel
from .trace import Trace

RESULTS_VERSION = 2
SCHEMA_PATH = Path(__file__).with_name("results.schema.json")
KNEE_FRACTION = 0.9

CSV_COLUMNS = (
    "capacity_blocks",
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
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
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
    #: The policies compared beside LRU, in the order asked, with the options they ran
    #: with (defaults filled in).
    compared: dict[str, dict[str, object]] = field(default_factory=dict)

    @property
    def policies(self) -> list[str]:
        """The policies compared beside LRU, in the order asked. O(1)."""
        return list(self.compared)

    def stats(self, point: Point, policy: str) -> HitStats | None:
        """``policy``'s hit counts at ``point``: ``lru``, ``belady`` or a compared policy
        (None: Belady without bounds). O(1)."""
        if policy == "lru":
            return point.lru
        if policy == "belady":
            return point.belady
        return point.policies[policy].stats

    def csv_columns(self) -> tuple[str, ...]:
        """:data:`CSV_COLUMNS`, then each compared policy's two ratios. O(policies)."""
        extra = [
            f"{name}_{kind}_hit_ratio" for name in self.policies for kind in ("token", "block")
        ]
        return (*CSV_COLUMNS, *extra)

    def point(self, capacity: int) -> Point:
        """The point simulated at ``capacity``. O(points).

        Raises:
            KeyError: no point at that capacity.
        """
        for found in self.points:
            if found.capacity == capacity:
                return found
        raise KeyError(capacity)

    def knee(self, policy: str) -> int | None:
        """The knee of ``policy`` (``lru``, ``belady`` or a compared policy), see the module
        docstring. O(points)."""
        if self.infinite is None:
            return None
        target = KNEE_FRACTION * self.infinite.token_hit_ratio
        for point in self.points:
            stats = self.stats(point, policy)
            if stats is not None and stats.token_hit_ratio >= target:
                return point.capacity
        return None

    def to_json(self) -> dict[str, Any]:
        """The ``results.json`` document. O(points * windows)."""
        trace = self.trace
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
                "policies": {"lru": {}, **self.compared},
            },
            "infinite": None if self.infinite is None else self.infinite.to_json(),
            "knee": {
                "fraction_of_infinite": KNEE_FRACTION,
                "lru_capacity": self.knee("lru"),
                "belady_capacity": self.knee("belady"),
                "policy_capacities": {name: self.knee(name) for name in self.policies},
            },
            "timeline_capacity": self.timeline_capacity,
            "points": [_point_json(point) for point in self.points],
            "seconds": self.seconds,
        }

    def csv_rows(self) -> list[dict[str, Any]]:
        """One row per capacity, keyed by :data:`CSV_COLUMNS`. O(points)."""
        rows = []
        for point in self.points:
            done = point.replay
            row: dict[str, Any] = {
                "capacity_blocks": point.capacity,
                "lru_token_hit_ratio": round(point.lru.token_hit_ratio, 6),
                "lru_block_hit_ratio": round(point.lru.block_hit_ratio, 6),
                "prefill_tokens_saved": point.lru.saved_tokens,
                "evictions": done.evictions,
                "peak_pinned_blocks": done.peak_pinned,
                "truncated": done.truncated,
                "waited": done.waited,
                "refused": done.refused,
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
            for name, run in point.policies.items():
                row[f"{name}_token_hit_ratio"] = round(run.stats.token_hit_ratio, 6)
                row[f"{name}_block_hit_ratio"] = round(run.stats.block_hit_ratio, 6)
            rows.append(row)
        return rows


def _point_json(point: Point) -> dict[str, Any]:
    return {
        "capacity": point.capacity,
        "lru": _run_json(point.lru, point.replay, point.ttft_ms, point.seconds),
        "policies": {
            name: _run_json(run.stats, run.replay, run.ttft_ms, run.seconds)
            for name, run in point.policies.items()
        },
        "belady": None if point.belady is None else point.belady.to_json(),
        "belady_seconds": round(point.belady_seconds, 4),
        "timeline": point.timeline,
    }


def _run_json(
    stats: HitStats, done: Replay, ttft_ms: dict[str, float], seconds: float
) -> dict[str, Any]:
    found = stats.to_json()
    found.update(
        evictions=done.evictions,
        peak_pinned_blocks=done.peak_pinned,
        truncated=done.truncated,
        waited=done.waited,
        refused=done.refused,
        uncached_outputs=done.uncached_outputs,
        ttft_ms=ttft_ms or None,
        seconds=round(seconds, 4),
    )
    return found


def write_results(results: Results, out: Path) -> list[Path]:
    """Write results.json and results.csv into ``out`` (created). Returns the paths.

    Raises:
        OSError: ``out`` cannot be created or written.
    """
    out.mkdir(parents=True, exist_ok=True)
    document = out / "results.json"
    document.write_text(json.dumps(results.to_json(), indent=1) + "\n")
    table = out / "results.csv"
    with table.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=results.csv_columns())
        writer.writeheader()
        writer.writerows(results.csv_rows())
    return [document, table]
