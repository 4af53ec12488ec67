"""kachedb-radix conformance kit: the normative spec and the tools that check against it.

``SPEC.md`` beside this file states every rule (``R-GROUP-n``). The kit drives any
implementation -- in-process through :class:`spec.adapter.TreeAdapter` or any
:class:`spec.candidate.Candidate`, out-of-process through the JSON-lines protocol of
:mod:`spec.stdio` -- in lockstep with :mod:`reference`, under the deviations it
declares (:mod:`spec.profile`) and a policy-free safety check (:mod:`spec.safety`),
and reports every finding with its rule ids, shrunk (:func:`spec.runner.run_kit`).
Targets and profiles resolve with :func:`spec.targets.resolve` and
:func:`spec.profile.load`. Golden vectors live in ``spec/vectors/``, planted bugs in
:mod:`spec.mutants`, real peers in :mod:`spec.peers`.
"""

from __future__ import annotations

from .adapter import TreeAdapter
from .candidate import Candidate, CandidateError, CandidateFailure
from .levels import LEVELS
from .lockstep import Difference, Disagreement, Lockstep
from .profile import STRICT, Profile
from .runner import KitSettings, Report, run_kit

__all__ = [
    "LEVELS",
    "STRICT",
    "Candidate",
    "CandidateError",
    "CandidateFailure",
    "Difference",
    "Disagreement",
    "KitSettings",
    "Lockstep",
    "Profile",
    "Report",
    "TreeAdapter",
    "run_kit",
]
