"""The gate's decisions: every check, from measurements and a baseline file.

Checks, one row each:

1. every timed case is at most :data:`MAX_BASELINE_RATIO` times its baseline, both sides
   normalised by the case's calibration loop timed in the same run, or by its anchor
   case's median in the same pass over the cases (:func:`paired`; a case without a
   baseline is NEW: reported, not gated);
2. the first eviction after a fill grows at most
   :data:`~kachedb_radix.spec.gate.cases.MAX_EVICT_GROWTH` times per freed block from the smallest
   tree to the largest, both measured in the same pass (no baseline needed);
3. every memory figure is at most :data:`MAX_MEMORY_RATIO` times its baseline (memory is
   deterministic: a tolerance only for allocator rounding);
4. the baseline file's ``limits``: absolute bounds a project sets for itself --
   ``{"CASE": {"max_ns": 2450}}`` for a timed case, ``{"CASE": {"max": 64}}`` for a
   memory case.

The baseline file (JSON, ``format`` 2) holds the target's name, the machine it was
recorded on, ``limits`` (hand-written, kept by updates) and ``cases`` (written by
``--update-baseline``): per timed case its normalised median, calibration kind, raw median
and calibration time; per memory case its value; ``anchors``, the recording machine's
anchor time per kind; and, after an update of some of the cases (``--only``),
``updated_with``: that update's command and machine.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..inputs import InputError, read_json, write_text
from ..inputs.errors import QUOTE_CHARS
from .cases import MAX_EVICT_GROWTH, Plan
from .timing import format_ns

MAX_BASELINE_RATIO = 1.5
MAX_MEMORY_RATIO = 1.10
BASELINE_FORMAT = 2

PASS, FAIL, NEW = "PASS", "FAIL", "NEW"


@dataclass(frozen=True)
class Measurement:
    """A case's median time per unit and its calibration loop's time, same run."""

    median_ns: float
    calib_ns: float
    calibration: str
    rounds: int = 0
    unit: str = "call"
    #: Which pass over the cases measured it: a run's first pass follows a prior run's
    #: passes, a re-measure is the next. A ratio of two cases is taken within one pass.
    sweep: int = 0
    #: The median over rounds of each round's time per its interleaved anchor batch
    #: (None: a measurement without an interleaved anchor, or an older run's file).
    ratio: float | None = None

    @property
    def normalised(self) -> float:
        """The median in calibration loops: comparable across machines.  The median of
        the per-round ratios where the anchor was interleaved, else median / calibration."""
        if self.ratio is not None:
            return self.ratio
        return self.median_ns / self.calib_ns


@dataclass(frozen=True)
class Verdict:
    """One row of the gate's table.

    Attributes:
        figure: what is measured.
        median: the case's median, formatted ("" for a cross-case figure).
        value: the figure compared with the limit, formatted.
        limit: the limit, formatted.
        status: PASS, FAIL or NEW (no baseline).
        keys: the timed cases the row depends on (re-measured when it fails).
        note: anything a reader needs (re-measure history, the raw figures).
    """

    figure: str
    median: str
    value: str
    limit: str
    status: str
    keys: tuple[str, ...] = ()
    note: str = ""


@dataclass
class Baseline:
    """A target's baseline file, loaded."""

    target: str | None = None
    cases: dict[str, dict[str, Any]] = field(default_factory=dict)
    limits: dict[str, dict[str, float]] = field(default_factory=dict)
    recorded_with: dict[str, str] = field(default_factory=dict)
    #: The recording machine's anchors: per calibration kind, the median time of one loop
    #: over every measurement of that kind (see :func:`anchor_times`).
    anchors: dict[str, float] = field(default_factory=dict)


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message says why."""


#: The fields of a ``limits`` entry, and the fields of a ``cases`` entry the gate divides
#: by: each a positive finite number.
LIMIT_FIELDS = ("max_ns", "max")
CASE_FIGURES = ("normalised", "value")


def load_baseline(path: Path, *, missing_ok: bool = False) -> Baseline:
    """The baseline in ``path``; with ``missing_ok`` an empty one when the file does not
    exist (``--update-baseline`` starts one). Every field the gate uses is checked, so a
    hand-edited file is refused naming the field, never divided by. O(size of the file).

    Raises:
        BaselineError: unreadable (missing, a directory, binary, not UTF-8, over the cap),
            not JSON, an unknown format, or a field of the wrong shape: ``target`` not a
            string, ``cases`` or ``limits`` not objects of objects, a ``normalised``,
            ``value``, ``max_ns`` or ``max`` that is not a positive finite number, an
            unknown limit.
    """
    if missing_ok and not path.exists():
        return Baseline()
    try:
        data = read_json(path, "baseline")
    except InputError as exc:
        raise BaselineError(str(exc)) from None
    where = f"baseline {path}"
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise BaselineError(
            f"{where}: baseline format {found!r}, this gate reads format {BASELINE_FORMAT}"
        )
    target = data.get("target")
    if target is not None and not isinstance(target, str):
        raise BaselineError(f"{where}: target must be a string, not {shown(target)}")
    cases = _tables(data, "cases", where)
    for name, entry in cases.items():
        for figure in CASE_FIGURES:
            if figure in entry:
                _positive(entry[figure], f"{where}: cases.{name}.{figure}")
    limits = _tables(data, "limits", where)
    for name, entry in limits.items():
        unknown = sorted(set(entry) - set(LIMIT_FIELDS))
        if unknown:
            raise BaselineError(
                f"{where}: limits.{name}.{unknown[0]} is not a limit "
                f"(limits are {', '.join(LIMIT_FIELDS)})"
            )
        for key, bound in entry.items():
            _positive(bound, f"{where}: limits.{name}.{key}")
    recorded = data.get("recorded_with", {})
    if not isinstance(recorded, dict):
        raise BaselineError(f"{where}: recorded_with must be an object, not {shown(recorded)}")
    anchors = data.get("anchors", {})
    if not isinstance(anchors, dict):
        raise BaselineError(f"{where}: anchors must be an object, not {shown(anchors)}")
    for kind, anchor_ns in anchors.items():
        _positive(anchor_ns, f"{where}: anchors.{kind}")
    return Baseline(
        target, cases, limits, dict(recorded), {str(k): float(v) for k, v in anchors.items()}
    )


def shown(value: Any) -> str:
    """``value`` as JSON text (control characters escaped), cut to a recognisable start."""
    text = json.dumps(value)
    return text if len(text) <= QUOTE_CHARS else f"{text[:QUOTE_CHARS]}... ({len(text)} characters)"


def _tables(data: dict[str, Any], key: str, where: str) -> dict[str, dict[str, Any]]:
    """``data[key]``: an object whose every value is an object (absent: empty)."""
    table = data.get(key, {})
    if not isinstance(table, dict):
        raise BaselineError(f"{where}: {key} must be an object of cases, not {shown(table)}")
    for name, entry in table.items():
        if not isinstance(entry, dict):
            raise BaselineError(f"{where}: {key}.{name} must be an object, not {shown(entry)}")
    return {name: dict(entry) for name, entry in table.items()}


def _positive(value: Any, field_name: str) -> None:
    """``value`` must be a finite number above 0 (``bool`` is not a number here)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or value <= 0 or value > _LARGEST or not math.isfinite(value):
        raise BaselineError(
            f"{field_name} must be a number above 0 (at most 1e300), not {shown(value)}"
        )


#: The largest figure a baseline may hold: any larger int is not a float.
_LARGEST = 1e300


def save_baseline(
    path: Path,
    plan: Plan,
    results: Mapping[str, Sequence[Measurement]],
    memory: Mapping[str, float],
    machine: Mapping[str, str],
    command: str,
    *,
    whole: bool = True,
) -> int:
    """Merge the middle measurement of each case into ``path`` (limits and cases not
    measured are kept); returns the number of cases written. ``whole``: the run measured
    the whole plan, so its anchor times stand for the machine; a part of it (``--only``)
    keeps the file's (a subset's anchors are its own cases' mix: the first evictions'
    memory anchor, timed after a cache flush, is about three times the warm one) and
    records its command beside the file's, under ``updated_with`` -- unless the file
    recorded no machine yet (a new file): then the part is the recording.

    The middle, not the best: a calibration loop slowed by a noisy minute makes a case
    look fast, and keeping the lowest normalised figure would keep exactly that one (the
    baseline then fails every later quiet run).  Of an even number the lower middle.
    O(cases * measurements).

    Raises:
        InputError: the old baseline is malformed, or ``path`` cannot be written.
    """
    old = load_baseline(path, missing_ok=True)
    cases = dict(old.cases)
    anchors = {case.name: case.anchor for case in plan.cases if case.anchor}
    for key, measured in results.items():
        anchor = anchors.get(key)
        if anchor is not None:
            median, anchor_median = _middle_median(measured), _middle_median(results[anchor])
            cases[key] = {
                "normalised": round(median / anchor_median, 6),
                "calibration": f"anchor {anchor}",
                "median_ns": round(median, 1),
                "calibration_ns": round(anchor_median, 1),
                "unit": measured[0].unit,
            }
            continue
        ranked = sorted(measured, key=lambda m: m.normalised)
        best = ranked[(len(ranked) - 1) // 2]
        cases[key] = {
            "normalised": round(best.normalised, 6),
            "calibration": best.calibration,
            "median_ns": round(best.median_ns, 1),
            "calibration_ns": round(best.calib_ns, 1),
            "unit": best.unit,
        }
    for key, value in memory.items():
        cases[key] = {"value": round(value, 2), "unit": "bytes/block"}
    records = whole or not old.recorded_with  # a part of the plan into a new file records
    document = {
        "format": BASELINE_FORMAT,
        "target": plan.target,
        "about": (
            "Baseline of `kachedb-radix gate`: per timed case the median divided by its "
            "calibration loop timed in the same run (`normalised`); per memory case the "
            "bytes per cached block beyond the tokens. `anchors`: the recording machine's "
            "calibration loops, ns per loop by kind. `limits` are hand-written absolute "
            "bounds (max_ns for a timed case, max for a memory case), kept by updates."
        ),
        "recorded_with": {"command": command, **machine} if records else old.recorded_with,
        **({} if records else {"updated_with": {"command": command, **machine}}),
        "anchors": {**old.anchors, **anchor_times(results)} if records else old.anchors,
        "limits": old.limits,
        "cases": dict(sorted(cases.items())),
    }
    write_text(path, json.dumps(document, indent=1) + "\n", "baseline")
    return len(results) + len(memory)


Results = Mapping[str, Sequence[Measurement]]


def anchor_times(results: Results) -> dict[str, float]:
    """Per calibration kind, the median of the anchor times of every measurement of that
    kind: what the machine's anchors cost during the run.  O(measurements)."""
    by_kind: dict[str, list[float]] = {}
    for measured in results.values():
        for m in measured:
            by_kind.setdefault(m.calibration, []).append(m.calib_ns)
    return {kind: round(statistics.median(times), 1) for kind, times in sorted(by_kind.items())}


def machine_speed(results: Results, baseline: Baseline) -> str:
    """One line comparing this run's anchors with the baseline machine's, by kind, or ""
    when the baseline recorded none.  A kind far from 1x on one side only is the machine
    difference its cases' normalisation cancels."""
    now = anchor_times(results)
    parts = [
        f"{kind} {now[kind] / baseline.anchors[kind]:.2f}x"
        for kind in now
        if baseline.anchors.get(kind, 0) > 0
    ]
    if not parts:
        return ""
    return "anchors on this machine per the baseline's: " + ", ".join(parts)


def _middle_median(measured: Sequence[Measurement]) -> float:
    ranked = sorted(m.median_ns for m in measured)
    return ranked[(len(ranked) - 1) // 2]


def best_median(results: Results, key: str) -> float:
    """The lower of a case's medians (one, or two after a re-measure)."""
    return min(m.median_ns for m in results[key])


def best_normalised(results: Results, key: str) -> float:
    """The lower of a case's normalised medians."""
    return min(m.normalised for m in results[key])


def paired(results: Results, numerator: str, denominator: str) -> tuple[float, float]:
    """The two medians, measured in the same pass, whose ratio is lowest: the cases of a
    ratio are re-measured together, while either may also be re-measured alone (a lucky
    minute of one, divided into an unlucky one of the other, is no figure of either).
    Without a pass that measured both, the best of each. O(measurements).
    """
    below: dict[int, float] = {}
    for m in results[denominator]:
        below[m.sweep] = min(m.median_ns, below.get(m.sweep, float("inf")))
    pairs = [(m.median_ns, below[m.sweep]) for m in results[numerator] if m.sweep in below]
    if not pairs:
        return best_median(results, numerator), best_median(results, denominator)
    return min(pairs, key=lambda pair: pair[0] / pair[1])


def _history(results: Results, keys: Sequence[str]) -> str:
    again = [key for key in keys if len(results.get(key, ())) > 1]
    if not again:
        return ""
    parts = []
    for key in again:
        firsts = ", ".join(format_ns(m.median_ns) for m in results[key])
        parts.append(f"{key}: {firsts}")
    return "re-measured, best kept (" + "; ".join(parts) + ")"


def _join(*notes: str) -> str:
    return "; ".join(note for note in notes if note)


def _new(key: str, shown: str, limit: str, keys: tuple[str, ...] = ()) -> Verdict:
    return Verdict(key, shown, "no baseline", limit, NEW, keys, "record one with --update-baseline")


def evaluate(
    results: Results,
    memory: Mapping[str, float],
    plan: Plan,
    baseline: Baseline,
    max_ratio: float = MAX_BASELINE_RATIO,
) -> list[Verdict]:
    """Every check of the gate, from the measurements so far (``max_ratio``: the limit of
    a timed case against its baseline)."""
    verdicts: list[Verdict] = []
    for small, large in plan.evict_keys:
        if small not in results or large not in results:
            continue
        high, low = paired(results, large, small)
        growth = high / low
        verdicts.append(
            Verdict(
                f"eviction growth, {large} / {small}",
                "",
                f"{growth:.2f}x",
                f"<= {MAX_EVICT_GROWTH:g}x",
                PASS if growth <= MAX_EVICT_GROWTH else FAIL,
                (large, small),
                _join(
                    f"{format_ns(high)}/block vs {format_ns(low)}/block",
                    _history(results, (large, small)),
                ),
            )
        )
    for case in plan.cases:
        key = case.name
        if key not in results:
            continue
        median = best_median(results, key)
        shown = f"{format_ns(median)}/{results[key][0].unit}"
        history = _history(results, [key])
        limit = baseline.limits.get(key, {})
        if "max_ns" in limit:
            bound = float(limit["max_ns"])
            verdicts.append(
                Verdict(
                    f"{key} (limit)",
                    shown,
                    format_ns(median),
                    f"<= {format_ns(bound)}",
                    PASS if median <= bound else FAIL,
                    (key,),
                    history,
                )
            )
        entry = baseline.cases.get(key)
        if entry is None or "normalised" not in entry:
            verdicts.append(_new(key, shown, f"<= {max_ratio:g}x baseline", (key,)))
            continue
        keys: tuple[str, ...] = (key,)
        if case.anchor is None and entry.get("calibration", case.calibration) != case.calibration:
            # normalised by another kind of anchor: the two figures are not comparable
            verdicts.append(
                Verdict(key, shown, "no baseline", f"<= {max_ratio:g}x baseline", NEW,
                        (key,), f"the baseline's is per the {entry['calibration']} anchor, "
                        f"this run's per {case.calibration}: record one with --update-baseline")
            )  # fmt: skip
            continue
        if case.anchor is None:
            normalised = best_normalised(results, key)
            how = f"{results[key][0].calibration} calibration"
        elif case.anchor in results:
            mine, anchor = paired(results, key, case.anchor)
            normalised = mine / anchor
            keys, how = (key, case.anchor), f"per {case.anchor}, same pass"
        else:
            continue  # its anchor was not measured: nothing to divide by
        ratio = normalised / float(entry["normalised"])
        verdicts.append(
            Verdict(
                key,
                shown,
                f"{ratio:.2f}x baseline",
                f"<= {max_ratio:g}x baseline",
                PASS if ratio <= max_ratio else FAIL,
                keys,
                _join(how, history),
            )
        )
    for mem in plan.memory:
        key = mem.name
        if key not in memory:
            continue
        value = memory[key]
        shown = f"{value:.1f} B/block"
        limit = baseline.limits.get(key, {})
        if "max" in limit:
            bound = float(limit["max"])
            status = PASS if value <= bound else FAIL
            verdicts.append(
                Verdict(f"{key} (limit)", shown, f"{value:.1f}", f"<= {bound:g}", status)
            )
        entry = baseline.cases.get(key)
        if entry is None or "value" not in entry:
            verdicts.append(_new(key, shown, f"<= {MAX_MEMORY_RATIO:g}x baseline"))
            continue
        ratio = value / float(entry["value"])
        status = PASS if ratio <= MAX_MEMORY_RATIO else FAIL
        limit_text = f"<= {MAX_MEMORY_RATIO:g}x baseline"
        verdicts.append(Verdict(key, shown, f"{ratio:.2f}x baseline", limit_text, status))
    return verdicts
