"""The knee: the pool a hit-ratio curve needs to reach a fraction of what is achievable.

The ceiling is the infinite-capacity hit ratio (no policy at any capacity does better);
the knee at fraction ``f`` is the capacity at which a policy's curve reaches
``f * ceiling`` -- past it, more blocks buy little. ``--knee 0.8,0.9,0.95`` asks for
several fractions (default 0.9).

**Interpolated, not the first point that happens to reach it.** Along the simulated
capacities (sorted), the knee is bracketed by the first capacity whose ratio reaches
the target and the capacity before it; inside the bracket the capacity is
interpolated linearly in ``log(capacity)`` (a hit-ratio curve is close to linear in
log capacity over a short span, and far from linear in capacity). When the smallest
capacity already reaches the target the knee is *at most* that capacity; when none
does, there is none in range. Curves need not be monotone (LRU's is not, in general):
the bracket is always the first crossing.

**Refined where it matters.** A sweep of a few log-spaced points leaves brackets a
factor of about 2 wide. :func:`refinements` proposes, for every bracket wider than
:data:`TOLERANCE`, ``per_bracket`` capacities log-spaced inside it; the simulation runs
them (a few extra points, not a dense scan) and repeats for ``rounds`` rounds. Two
rounds of two points narrow a factor-2 bracket to about 2^(1/9) = 8% before the
interpolation, which then lands within a few percent of a dense scan (on the Mooncake
trace within 1.2% at 80, 90 and 95%, from 28 capacities against 251; measured in
docs/simulate.md). Cost: O(points) per knee.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import SimulateError

#: The fraction of the ceiling asked for by default.
DEFAULT_FRACTIONS = (0.9,)
#: Brackets narrower than this ratio are not refined further.
TOLERANCE = 1.05


@dataclass(frozen=True)
class Knee:
    """Where one curve reaches ``fraction`` of the ceiling.

    Attributes:
        series: the curve (``lru``, a policy or configuration, ``belady``).
        fraction: of the ceiling.
        target: the hit ratio reached (``fraction * ceiling``).
        capacity: the interpolated capacity in blocks, or None when no simulated
            capacity reaches the target.
        bracket: the simulated capacities around it (``low`` None when the smallest
            one already reaches it: then ``capacity`` is an upper bound).
    """

    series: str
    fraction: float
    target: float
    capacity: float | None
    bracket: tuple[int | None, int] | None

    @property
    def bounded_above_only(self) -> bool:
        """Whether the smallest capacity already reached the target. O(1)."""
        return self.bracket is not None and self.bracket[0] is None

    def to_json(self) -> dict[str, object]:
        """Plain data for results.json. O(1)."""
        return {
            "series": self.series,
            "fraction": self.fraction,
            "target_hit_ratio": round(self.target, 6),
            "capacity": None if self.capacity is None else round(self.capacity, 1),
            "bracket": None if self.bracket is None else list(self.bracket),
        }


def parse_fractions(text: str) -> tuple[float, ...]:
    """``"0.8,0.9,95%"`` -> ``(0.8, 0.9, 0.95)``, sorted, without repeats. O(len(text)).

    Raises:
        SimulateError: an item that is not a fraction in (0, 1].
    """
    found = set()
    for item in text.split(","):
        word = item.strip()
        try:
            value = float(word[:-1]) / 100 if word.endswith("%") else float(word)
        except ValueError:
            value = math.nan
        if not 0 < value <= 1:
            raise SimulateError(
                f"--knee: {word!r} is not a fraction of the ceiling in (0, 1] "
                "(expected a list like 0.8,0.9,0.95)"
            )
        found.add(value)
    return tuple(sorted(found))


def find_knee(
    series: str,
    fraction: float,
    ceiling: float,
    curve: Sequence[tuple[int, float]],
) -> Knee:
    """The knee of ``curve`` (``(capacity, hit ratio)`` pairs, any order). O(points log points)."""
    target = fraction * ceiling
    ordered = sorted(curve)
    for position, (capacity, ratio) in enumerate(ordered):
        if ratio >= target:
            if position == 0:
                return Knee(series, fraction, target, float(capacity), (None, capacity))
            low, below = ordered[position - 1]
            share = (target - below) / (ratio - below)
            logged = math.log(low) + share * (math.log(capacity) - math.log(low))
            return Knee(series, fraction, target, math.exp(logged), (low, capacity))
    return Knee(series, fraction, target, None, None)


def refinements(knees: Sequence[Knee], known: Sequence[int], per_bracket: int = 2) -> list[int]:
    """New capacities inside every bracket wider than :data:`TOLERANCE`, log-spaced,
    rounded to three significant digits, none already ``known``. O(knees * per_bracket)."""
    have = set(known)
    wanted: set[int] = set()
    for knee in knees:
        if knee.bracket is None:
            continue
        low, high = knee.bracket
        if low is None:
            continue
        if high / low <= TOLERANCE or high - low < 2:
            continue
        for step in range(1, per_bracket + 1):
            value = low * (high / low) ** (step / (per_bracket + 1))
            rounded = min(high - 1, max(low + 1, _three_digits(value)))
            if rounded not in have:
                wanted.add(rounded)
    return sorted(wanted)


def _three_digits(value: float) -> int:
    digits = max(0, math.floor(math.log10(value)) - 2)
    return int(round(value / 10**digits) * 10**digits)
