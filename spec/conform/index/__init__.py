"""The ``index`` level: router indexes checked against the reference index (R-ROUTE-*).

The other levels check a *cache*; this one checks what a router builds from many
caches' event streams -- an index of which worker holds which block -- and answers
queries from (``kachedb-radix conform --index TARGET``).  Module by module:

* :mod:`.stream` -- the streams: a few prompts and three publishers' operations
  (stores with and without known parents, duplicate stores, removals of blocks held
  and not, clears, a worker leaving, gaps, restarts, payloads that do not decode), read
  into batches against the truth of what each worker's cache holds;
* :mod:`.candidates` -- the protocol an index is driven through, the twins' adapter,
  and the targets (``reference``, ``accel``, and the index peers: ``dynamo``, NVIDIA
  Dynamo's own ``RadixTree``);
* :mod:`.check` -- the lockstep with the reference index after every batch, the
  search that shrinks each difference to a minimal stream, and the report.

In-process only: an index in another language is reached through a Python adapter of
the :class:`~.candidates.IndexCandidate` protocol (four methods).
"""

from __future__ import annotations

from .candidates import IndexCandidate, IndexTarget, TwinIndex, resolve_index
from .check import IndexFinding, IndexReport, check_index, run_stream

__all__ = [
    "IndexCandidate",
    "IndexFinding",
    "IndexReport",
    "IndexTarget",
    "TwinIndex",
    "check_index",
    "resolve_index",
    "run_stream",
]
