"""``kachedb-radix explain``: watch the algorithm work, step by step.

For teachers and design reviewers. A trace -- a built-in scenario
(:mod:`spec.explain.scenarios`) or any of the kit's JSON-lines traces: golden
vectors, shrunk disagreements -- is run on the reference and, optionally, on
another implementation beside it (:mod:`spec.explain.record`). Each step becomes
a view (:mod:`spec.explain.view`): the tree with what the step changed marked,
the block pool, the outcome, the SPEC rules that decided it
(:mod:`spec.explain.decide`) and the evidence behind it (:mod:`spec.explain.why`).
Views are drawn as one self-contained HTML page to step through
(:mod:`spec.explain.page`), as one SVG per step for slides
(:mod:`spec.explain.svg`), or as text (:mod:`spec.explain.text`); big trees fold
(:mod:`spec.explain.collapse`) and are laid out as tidy trees
(:mod:`spec.explain.layout`).

Everything is derived from the canonical dumps the implementations publish
(R-DUMP-1), so any target the kit can drive can be explained.
"""

from __future__ import annotations

from .page import build_page
from .record import RecordError, Recording, record
from .scenarios import SCENARIOS, Scenario, scenario
from .svg import slide
from .text import text_report
from .view import frame_views

__all__ = [
    "SCENARIOS",
    "RecordError",
    "Recording",
    "Scenario",
    "build_page",
    "frame_views",
    "record",
    "scenario",
    "slide",
    "text_report",
]
