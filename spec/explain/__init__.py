"""``kachedb-radix explain``: watch the algorithm work, step by step.

For teachers and design reviewers. A trace -- a built-in scenario
(:mod:`kachedb_radix.spec.explain.scenarios`) or any of the kit's JSON-lines traces: golden
vectors, shrunk disagreements -- is run on the reference and, optionally, on
another implementation beside it (:mod:`kachedb_radix.spec.explain.record`). Each step becomes
a view (:mod:`kachedb_radix.spec.explain.view`): the tree with what the step changed marked,
the block pool, the outcome, the SPEC rules that decided it
(:mod:`kachedb_radix.spec.explain.decide`) and the evidence behind it
(:mod:`kachedb_radix.spec.explain.why`). Views are drawn as one self-contained HTML page to
step through (:mod:`kachedb_radix.spec.explain.page`), as one SVG per step for slides
(:mod:`kachedb_radix.spec.explain.svg`), or as text (:mod:`kachedb_radix.spec.explain.text`);
big trees fold (:mod:`kachedb_radix.spec.explain.collapse`) and are laid out as tidy trees
(:mod:`kachedb_radix.spec.explain.layout`).

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
