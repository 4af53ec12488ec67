"""kachedb-radix conformance kit: the normative spec and the tools that check against it.

``SPEC.md`` beside this file states every rule (``R-GROUP-n``). The kit drives any implementation --
in-process through :class:`kachedb_radix.spec.adapter.TreeAdapter` or any
:class:`kachedb_radix.spec.candidate.Candidate`, out-of-process through the JSON-lines protocol of
:mod:`kachedb_radix.spec.stdio` -- in lockstep with :mod:`kachedb_radix.reference`, under the
deviations it declares (:mod:`kachedb_radix.spec.profile`) and a policy-free safety check
(:mod:`kachedb_radix.spec.safety`), and reports every finding with its rule ids, shrunk
(:func:`kachedb_radix.spec.runner.run_kit`). Targets and profiles resolve with
:func:`kachedb_radix.spec.targets.resolve` and :func:`kachedb_radix.spec.profile.load`. Golden
vectors live in ``spec/vectors/``, planted bugs in :mod:`kachedb_radix.spec.mutants`, real peers in
:mod:`kachedb_radix.spec.peers`.
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
