"""The JSON-lines stdio protocol: any program in any language as a candidate.

* :mod:`.messages` -- versions, the message shapes (read from the operations table,
  :mod:`kachedb_radix.spec.conform.operations`), encoding and the request and answer
  checks; the JSON Schema is ``schema.json`` beside it;
* :mod:`.client` -- a child program driven over its stdin and stdout, as a candidate;
* :mod:`.server` -- the reference (or the C twin) served over the protocol: a tool and
  the protocol's worked example (``kachedb-radix serve``);
* :mod:`.timeout` -- the per-call time limit for in-process candidates.
"""

from __future__ import annotations
