"""kachedb-radix's spec: the normative rules and every tool that checks against them.

``SPEC.md`` beside this file states every rule (``R-GROUP-n``). The packages:

* :mod:`kachedb_radix.spec.conform` -- the conformance kit (lockstep, oracle, safety,
  profiles, rule ids, search, shrinking, replay, the report);
* :mod:`kachedb_radix.spec.protocol` -- the JSON-lines stdio protocol (messages, client,
  server, time limits);
* :mod:`kachedb_radix.spec.vectors`, :mod:`kachedb_radix.spec.mutants`,
  :mod:`kachedb_radix.spec.peers` -- golden vectors, planted bugs, real peers;
* :mod:`kachedb_radix.spec.explain`, :mod:`kachedb_radix.spec.simulate`,
  :mod:`kachedb_radix.spec.gate` -- the step-through pages, the capacity simulator, the
  performance gate;
* :mod:`kachedb_radix.spec.cli` -- the command line ``kachedb-radix`` (``python -m
  kachedb_radix.spec``).

Nothing is imported here, so the command line starts without loading the kit (and
Hypothesis) for the commands that do not need it.
"""
