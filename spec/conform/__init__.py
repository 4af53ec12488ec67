"""The conformance kit: drive any implementation in lockstep with the reference.

How a run goes, module by module:

* :mod:`.candidate` -- the plain-data interface a candidate is driven through, and
  :mod:`.operations` -- the one table of its operations (arguments, levels, answers,
  handles) that steps, the protocol and the wrappers read;
* :mod:`.targets` -- a name (``reference``, ``accel``, a peer, ``module:attribute``, a
  command line) into a candidate and its deviation profile (:mod:`.profile`); the
  in-process adapter for tree classes is :mod:`.adapter`;
* :mod:`.search` -- the swarm search: Hypothesis draws examples, :mod:`.generate` their
  steps (:mod:`.steps`: a step as JSON data, applied through the table);
* :mod:`.lockstep` -- each step on the candidate and the oracle (:mod:`.oracle`, the
  reference following a candidate's admissible choices), the policy-free safety check
  (:mod:`.safety`), the comparison, and the rule a difference breaks with its likely
  cause (:mod:`.rulemap`, over the rules of SPEC.md, :mod:`.rules`, in their levels,
  :mod:`.levels`);
* :mod:`.shrink` -- each finding to its few essential steps;
* :mod:`.run` -- a whole run and its :class:`~.run.KitReport`, rule by rule;
  :mod:`.page` -- the report as an HTML page; :mod:`.replay` -- a saved trace replayed
  through the same lockstep.
"""

from __future__ import annotations
