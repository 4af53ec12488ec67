"""kachedb-radix conformance kit: the normative spec and the tools that check against it.

``SPEC.md`` beside this file states every rule (``R-GROUP-n``). The kit drives any
implementation -- in-process through :class:`spec.adapter.TreeAdapter` or any
:class:`spec.candidate.Candidate`, out-of-process through the JSON-lines protocol of
:mod:`spec.stdio` -- in lockstep with :mod:`reference` and reports the shortest
sequence of operations on which they disagree (:func:`spec.runner.run_kit`).
Golden vectors live in ``spec/vectors/``, planted bugs in :mod:`spec.mutants`.
"""

from __future__ import annotations

from .adapter import TreeAdapter
from .candidate import Candidate, CandidateError, CandidateFailure
from .levels import LEVELS
from .lockstep import Difference, Disagreement, Lockstep
from .runner import KitSettings, Report, run_kit

__all__ = [
    "LEVELS",
    "Candidate",
    "CandidateError",
    "CandidateFailure",
    "Difference",
    "Disagreement",
    "KitSettings",
    "Lockstep",
    "Report",
    "TreeAdapter",
    "run_kit",
]
