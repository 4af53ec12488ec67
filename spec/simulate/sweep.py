"""Which capacities to simulate: a list given by the user, or log-spaced automatically.

``--capacity 1000,5000,20000`` names pool sizes in blocks (``k`` and ``M`` suffixes
allowed: ``20k``), or in tokens, bytes or GPUs (``2Mtok``, ``64GiB``, ``8gpu``: see
:mod:`~kachedb_radix.spec.simulate.plan.hardware`). ``--sweep auto`` (8 points) or
``--sweep N`` spaces N capacities logarithmically from 1/128 of the trace's working
set up to the working set itself -- the distinct blocks the trace ever inserts,
which an infinite pool ends up holding -- so the last point is where LRU meets the
infinite-capacity ceiling and the knee, if any, lies in between. Capacities are
rounded to two significant digits (except the working set itself), sorted and
deduplicated.
"""

from __future__ import annotations

import math

from .errors import SimulateError
from .plan.hardware import Sizing

#: Points of ``--sweep auto``.
AUTO_POINTS = 8
#: The smallest automatic capacity, as a fraction of the working set.
AUTO_SPAN = 128


def parse_capacities(text: str, sizing: Sizing | None = None) -> list[int]:
    """``"1000,5k,2M"`` -> ``[1000, 5000, 2000000]``, sorted, without repeats; with a
    ``sizing``, items may be tokens, bytes or GPUs too (:meth:`Sizing.parse`).
    O(len(text)).

    Raises:
        SimulateError: an item that is not a size of at least one block.
    """
    sizing = sizing or Sizing(1)
    return sorted({sizing.parse(item) for item in text.split(",")})


def parse_sweep(text: str) -> int:
    """``auto`` -> :data:`AUTO_POINTS`; ``N`` -> N (1 to 64). O(1).

    Raises:
        SimulateError: anything else.
    """
    if text == "auto":
        return AUTO_POINTS
    if text.isdigit() and 1 <= int(text) <= 64:
        return int(text)
    raise SimulateError(
        f"--sweep: expected 'auto' or a number of points from 1 to 64, got {text!r}"
    )


def auto_capacities(working_set: int, points: int = AUTO_POINTS) -> list[int]:
    """``points`` log-spaced capacities up to ``working_set`` blocks. O(points).

    Raises:
        SimulateError: an empty working set (the trace inserts no whole block).
    """
    if working_set < 1:
        raise SimulateError(
            "the trace caches no whole block, so there is no capacity to sweep "
            "(are its prompts shorter than one block?)"
        )
    if points == 1:
        return [working_set]
    low = max(1.0, working_set / AUTO_SPAN)
    found = {working_set}
    for step in range(points - 1):
        value = low * (working_set / low) ** (step / (points - 1))
        found.add(max(1, min(working_set, _two_digits(value))))
    return sorted(found)


def _two_digits(value: float) -> int:
    digits = max(0, math.floor(math.log10(value)) - 1)
    return int(round(value / 10**digits) * 10**digits)
