"""The figures a run reports, computed from matched lengths.

Every engine and bound returns, per request (by trace index), the tree length its
match found -- or :data:`REFUSED` for a request the timed mode turned away. From
that and the trace's mapping (:mod:`kachedb_radix.spec.simulate.trace`) come:

* **token hit ratio**: prompt tokens whose KV was reused / prompt tokens, over every
  request of the trace -- a request the timed mode refused reuses nothing but still
  counts, so every policy and both bounds share one denominator (leaving refused
  requests out would let LRU "beat" the infinite pool at capacities too small for the
  longest prompts, and fall as the pool grows);
* **block hit ratio**: prompt blocks matched / whole prompt blocks (tree blocks),
  likewise over every request;
* **prefill tokens saved**: the numerator of the token hit ratio;
* a **timeline**: the token hit ratio in consecutive windows of requests, in the
  order they were served, for the hit-ratio-over-time plot.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .trace import Trace

#: The matched length recorded for a request the timed mode refused.
REFUSED = -1


@dataclass(frozen=True)
class HitStats:
    """Hit counts of one policy: ``requests`` it served; the rest over every request."""

    requests: int
    prompt_tokens: int
    saved_tokens: int
    prompt_blocks: int
    hit_blocks: int

    @property
    def token_hit_ratio(self) -> float:
        """Saved / prompt tokens (0 for no tokens). O(1)."""
        return self.saved_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def block_hit_ratio(self) -> float:
        """Matched / whole prompt blocks (0 for no blocks). O(1)."""
        return self.hit_blocks / self.prompt_blocks if self.prompt_blocks else 0.0

    def to_json(self) -> dict[str, Any]:
        """The counts and both ratios, as results.json has them. O(1)."""
        return {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "prefill_tokens_saved": self.saved_tokens,
            "prompt_blocks": self.prompt_blocks,
            "hit_blocks": self.hit_blocks,
            "token_hit_ratio": round(self.token_hit_ratio, 6),
            "block_hit_ratio": round(self.block_hit_ratio, 6),
        }


def _columns(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    prompt_tokens = np.fromiter((r.prompt_tokens for r in trace.requests), np.int64)
    prompt_blocks = np.fromiter((len(r.tokens) for r in trace.requests), np.int64)
    return prompt_tokens, prompt_blocks // trace.block_size


def _saved(trace: Trace, lengths: np.ndarray, prompt_tokens: np.ndarray) -> np.ndarray:
    saved: np.ndarray = np.minimum(np.maximum(lengths, 0) * trace.token_scale, prompt_tokens)
    return saved


def hit_stats(trace: Trace, lengths: Sequence[int]) -> HitStats:
    """Hit counts from per-request matched lengths (a REFUSED one served nothing and
    saved nothing, but its prompt counts). O(n)."""
    matched = np.asarray(lengths, dtype=np.int64)
    prompt_tokens, prompt_blocks = _columns(trace)
    served = matched >= 0
    return HitStats(
        requests=int(served.sum()),
        prompt_tokens=int(prompt_tokens.sum()),
        saved_tokens=int(_saved(trace, matched, prompt_tokens)[served].sum()),
        prompt_blocks=int(prompt_blocks.sum()),
        hit_blocks=int((matched[served] // trace.block_size).sum()),
    )


def timeline(
    trace: Trace,
    order: Sequence[int],
    series: Mapping[str, Sequence[int]],
    windows: int = 100,
) -> list[dict[str, Any]]:
    """The token hit ratio of each series in ``windows`` consecutive request windows.

    Windows split ``order`` (the serving order) into near-equal runs of requests.
    Each window reports its last request's position (``requests``), its arrival
    time in seconds (``time_s``, None without timestamps) and, per series, the
    window's token hit ratio over its requests (refused ones saving nothing; None
    when none was served). O(n).
    """
    positions = np.asarray(order, dtype=np.int64)
    prompt_tokens, _ = _columns(trace)
    ordered_prompts = prompt_tokens[positions]
    saved = {}
    served = {}
    for name, lengths in series.items():
        matched = np.asarray(lengths, dtype=np.int64)[positions]
        served[name] = matched >= 0
        saved[name] = _saved(trace, matched, ordered_prompts)
    bounds = np.linspace(0, len(positions), min(windows, len(positions)) + 1).astype(np.int64)
    rows = []
    for low, high in itertools.pairwise(bounds.tolist()):
        last = trace.requests[int(positions[high - 1])]
        row: dict[str, Any] = {
            "requests": int(high),
            "time_s": None if last.timestamp is None else round(last.timestamp / 1000.0, 3),
        }
        total = int(ordered_prompts[low:high].sum())
        for name in series:
            if not total or not served[name][low:high].any():
                row[name] = None
                continue
            saved_here = int(saved[name][low:high][served[name][low:high]].sum())
            row[name] = round(saved_here / total, 6)
        rows.append(row)
    return rows


def percentiles(values: Sequence[float], points: Sequence[int] = (50, 90, 99)) -> dict[str, float]:
    """``{"p50": ..., ...}`` by linear interpolation (NumPy's default); {} for no values.
    O(n log n)."""
    if not values:
        return {}
    found = np.percentile(np.asarray(values, dtype=np.float64), list(points))
    return {f"p{point}": round(float(value), 3) for point, value in zip(points, found, strict=True)}
