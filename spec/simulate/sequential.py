"""The sequential mode: the classic cache simulation, one request at a time.

For each request in trace order, exactly what a serving engine does per request,
with nothing running beside it:

1. ``match(prompt, namespace, pin=True)`` -- the cached prefix, pinned;
2. ``insert(sequence, namespace)`` -- cache the prompt (and output ids when the
   trace has them), with the request's retention priority if it has one (R-POL-5),
   evicting by the tree's policy when short (R-INS-5, R-POL-1);
3. release the lease.

A sequence with more whole blocks than the pool caches its first ``num_blocks``
blocks only (counted as truncated). Hit ratios from this mode are comparable with
published cache-simulation numbers. The loop does no more Python per request than
those three calls: tokens are uint32 arrays (buffers the C twin reads in place)
and the figures are computed afterwards from the matched lengths.

Cost: O(total tokens) tree work plus three calls per request.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .trace import Trace

if TYPE_CHECKING:
    from .tiers import TierRecord

#: Progress is reported every this many requests.
PROGRESS_EVERY = 256

Progress = Callable[[int], None]


@dataclass
class Replay:
    """What replaying a trace through a tree did.

    Attributes:
        lengths: the matched tree length of each request, by trace index
            (``metrics.REFUSED`` for a refused one).
        order: trace indices in the order they were offered to the cache (trace
            order; arrival order in the timed mode).
        evictions: blocks evicted.
        peak_pinned: most blocks pinned at once.
        truncated: sequences longer than the pool, cached in part.
        waited: requests that waited for a full pool (timed mode).
        refused: requests refused (timed mode).
        preemptions: times a running request was preempted for want of a block
            (timed mode); preempted: requests preempted at least once.
        ttft: time to first token of each request, by trace index, in ms (timed
            mode; NaN for a refused one; empty in the sequential mode).
        tpot: time per output token after the first, likewise (NaN with fewer than
            two output tokens).
        worker_of: the worker each request went to, by trace index (None: one worker).
        busy_ms: per worker, the time its steps took (timed mode).
        span_ms: first arrival to last completion (timed mode).
        arrival: each request's arrival as served, by trace index, in ms (timed mode:
            after any speed-up and stage shift); finish: its completion (NaN: refused).
        restored: tree tokens restored from slower tiers (with tiers).
        tiers: per request, what its hit restored from each tier (None without tiers).
    """

    lengths: list[int]
    order: list[int]
    evictions: int = 0
    peak_pinned: int = 0
    truncated: int = 0
    waited: int = 0
    refused: int = 0
    preemptions: int = 0
    preempted: int = 0
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    worker_of: list[int] | None = None
    busy_ms: list[float] = field(default_factory=list)
    span_ms: float = 0.0
    arrival: list[float] = field(default_factory=list)
    finish: list[float] = field(default_factory=list)
    restored: int = 0
    tiers: TierRecord | None = None

    @property
    def ttft_ms(self) -> list[float]:
        """TTFT of each served request, by trace index (refused ones left out). O(n)."""
        return [value for value in self.ttft if not math.isnan(value)]


def replay_sequential(trace: Trace, tree: Any, progress: Progress | None = None) -> Replay:
    """Replay ``trace`` through ``tree`` (an empty RadixTree of the trace's block size).

    ``progress(k)`` is called with the number of requests done since its last call.

    Raises:
        ValueError: the tree's block size is not the trace's.
    """
    if tree.block_size != trace.block_size:
        raise ValueError(f"tree block size {tree.block_size} != trace's {trace.block_size}")
    longest = tree.num_blocks * trace.block_size  # tokens of the longest cacheable sequence
    match, insert = tree.match, tree.insert
    lengths: list[int] = []
    remember = lengths.append
    evictions = truncated = 0
    for request in trace.requests:
        hit = match(request.tokens, request.namespace, pin=True)
        sequence = request.sequence
        if len(sequence) >= longest + trace.block_size:
            sequence = sequence[:longest]
            truncated += 1
        if request.priority is None:
            evictions += len(insert(sequence, request.namespace).evicted)
        else:
            evictions += len(insert(sequence, request.namespace, **request.retention()).evicted)
        hit.lease.release()
        remember(hit.length)
        if progress is not None and len(lengths) % PROGRESS_EVERY == 0:
            progress(PROGRESS_EVERY)
    if progress is not None:
        progress(len(lengths) % PROGRESS_EVERY)
    return Replay(
        lengths=lengths,
        order=list(range(len(lengths))),
        evictions=evictions,
        peak_pinned=max(lengths, default=0) // trace.block_size,
        truncated=truncated,
    )
