"""Numbers as the tables print them: ratios, counts, durations, rates.

One formatting for every table and line the simulator prints (the summary, the
planner's tables, the report page), so a figure reads the same everywhere. Cost: O(1)
each.
"""

from __future__ import annotations


def percent(ratio: float | None) -> str:
    """``0.4318`` -> ``43.2%``; None -> an em dash. O(1)."""
    return "—" if ratio is None else f"{100 * ratio:.1f}%"


def count(value: float) -> str:
    """A count in three significant figures: ``39852661`` -> ``39.9M``. O(1)."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:g}"


def duration(milliseconds: float | None) -> str:
    """``350.0`` -> ``350 ms``, ``1234.5`` -> ``1.23 s``, ``1589757`` -> ``1,590 s``;
    None -> an em dash. O(1)."""
    if milliseconds is None:
        return "—"
    if milliseconds < 1000:
        return f"{milliseconds:.0f} ms"
    seconds = milliseconds / 1000
    if seconds < 100:
        return f"{seconds:.3g} s"
    return f"{float(f'{seconds:.3g}'):,.0f} s"


def rate(value: float | None) -> str:
    """A rate in three significant figures: ``8730.4`` -> ``8.73k``; None -> an em dash. O(1)."""
    return "—" if value is None else count(float(f"{value:.3g}"))


def ratio(value: float | None, empty: str = "—") -> str:
    """``1.7543`` -> ``1.75x``; None -> ``empty``. O(1)."""
    return empty if value is None else f"{value:.2f}x"
