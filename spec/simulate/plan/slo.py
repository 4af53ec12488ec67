"""A TTFT SLO: how many requests meet it, and the load at which enough of them still do.

``--ttft-slo 500ms`` sets the SLO; ``--slo-attainment 0.9`` (default) the share of
requests that must meet it.

* **Attainment** at a run: requests whose TTFT is at most the SLO, over all requests
  -- a refused request misses it.
* **Throughput at the SLO**: the highest arrival rate at which the attainment still
  reaches its target. The trace is replayed faster or slower (every timestamp divided
  by a speed-up ``s``, :func:`~kachedb_radix.spec.simulate.timed.replay_timed`), and
  ``s`` searched for: doubling (or halving) from 1 until the target is lost (or met),
  then bisecting in log scale, within ``runs`` timed runs in all (default 8, from
  1/64 to 64 times the trace's rate). The answer is the fastest ``s`` that met the
  target, times the trace's own rate (requests / (last arrival - first arrival));
  the next faster ``s`` tried bounds it above. Attainment is assumed to fall as load
  grows (a queue only gets longer); on a trace where it does not, the search still
  returns a rate that met the target, not necessarily the highest.

Cost: ``runs`` timed replays.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import SimulateError

#: The search's range of speed-ups, both ways.
SPEED_LIMIT = 64.0


@dataclass(frozen=True)
class Slo:
    """The SLO and its search budget.

    Raises:
        SimulateError: a bound out of range.
    """

    ttft_ms: float
    attainment: float = 0.9
    runs: int = 8

    def __post_init__(self) -> None:
        if not self.ttft_ms > 0:
            raise SimulateError(f"--ttft-slo must be > 0, got {self.ttft_ms:g} ms")
        if not 0 < self.attainment <= 1:
            raise SimulateError(f"--slo-attainment must be in (0, 1], got {self.attainment}")
        if self.runs < 0:
            raise SimulateError(f"--slo-runs must be >= 0, got {self.runs}")


@dataclass(frozen=True)
class Throughput:
    """The search's answer.

    Attributes:
        speed: the fastest speed-up that met the target (0.0: none did, down to 1/64).
        requests_per_s: ``speed`` times the trace's rate.
        failed_at: the slowest speed-up tried that missed it (None: none missed, up to 64).
        runs: timed runs made.
    """

    speed: float
    requests_per_s: float
    failed_at: float | None
    runs: int


def parse_duration(text: str) -> float:
    """``500ms``, ``0.5s``, ``1.2 s`` or a bare number of ms -> milliseconds. O(len(text)).

    Raises:
        SimulateError: anything else.
    """
    found = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)?\s*", text)
    if found is None:
        raise SimulateError(f"expected a duration like 500ms or 1.5s, got {text!r}")
    value = float(found[1])
    return value * 1000.0 if found[2] == "s" else value


def attainment(ttft: Sequence[float], slo_ms: float) -> float:
    """Share of requests whose TTFT is at most ``slo_ms`` (NaN: refused, a miss). O(n)."""
    if not ttft:
        return 0.0
    return sum(1 for value in ttft if value <= slo_ms) / len(ttft)


def search(run: Callable[[float], Sequence[float]], slo: Slo, rate: float) -> Throughput:
    """The throughput at ``slo`` (see the module docstring); ``run(speed)`` replays the
    trace at that speed-up and gives every request's TTFT, ``rate`` the trace's own
    requests per second. O(slo.runs) replays."""
    made = 0

    def meets(speed: float) -> bool:
        nonlocal made
        made += 1
        return attainment(run(speed), slo.ttft_ms) >= slo.attainment

    good: float | None = None
    bad: float | None = None
    speed = 1.0
    while made < slo.runs:
        if meets(speed):
            good = speed
            if bad is not None or speed >= SPEED_LIMIT:
                break
            speed *= 2
        else:
            bad = speed
            if good is not None or speed <= 1 / SPEED_LIMIT:
                break
            speed /= 2
    while made < slo.runs and good is not None and bad is not None and bad / good > 1.05:
        middle = math.sqrt(good * bad)
        if meets(middle):
            good = middle
        else:
            bad = middle
    found = good or 0.0
    return Throughput(found, found * rate, bad, made)
