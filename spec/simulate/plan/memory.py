"""The KV pool of a worker: what its running requests hold, with a cache and without.

A serving engine's KV cache is a pool of fixed-size blocks. A running request holds the
blocks of every token whose KV it has computed -- its prompt's, then one more block each
time its generated tokens fill the last one -- until it finishes; only then do they
return to the pool (with a cache, still holding their KV, to be reused or evicted). So
concurrency is bounded by memory, and a pool too small for the running requests makes
new ones wait (:mod:`~kachedb_radix.spec.simulate.plan.engine` says when, and what is
preempted).

Two pools with one interface, so the cache and the no-cache baseline run with the same
memory and the same admission:

* :class:`TreePool` -- the cache: the worker's radix tree. Admission matches the
  prompt's cached prefix (pinned: R-PIN) and inserts the blocks it will fill (pinned;
  the insert evicts unpinned cached blocks by the tree's policy when short, R-INS-5);
  each growth inserts the sequence one block longer, pinned. When every block is pinned
  the insert raises ``OutOfBlocksError`` and nothing changed (R-ERR-2): the pool is
  full. Releasing leaves the blocks cached (evictable).
* :class:`CountingPool` -- the no-cache baseline (a vLLM without prefix caching): a
  count of free blocks, the same block arithmetic, nothing matched or kept.

**Blocks and sequences.** ``t`` real tokens take ``ceil(t / tokens_per_block)`` blocks
(a partial last block is a whole block in a paged pool); a request of ``n`` output
tokens computes the KV of all but its last, so it ends holding the blocks of ``prompt +
n - 1`` tokens. The tree tokens a request's
blocks hold are its *sequence*: the prompt, then the output token ids when the trace
gives them, then filler up to the block of its last output token. Filler stands for
output tokens nobody can know in advance (a Mooncake trace has no output ids): the
first filler token of request ``i`` is ``2**32 - 1 - i`` and the rest ``2**32 - 1``, so
no two requests' outputs share a block and no prompt matches into one (a trace whose
token ids reach 2**32 - 1 - i would collide; real vocabularies and hash-id counters
stop far below). Outputs so become cached blocks on completion, as vLLM and SGLang
cache a reply; a filler block is never hit again, and its eviction is the real cost of
caching outputs nobody reuses.

Cost: a tree pool's admission is a match and an insert, O(sequence) each; a growth an
insert; a counting pool O(1).
"""

from __future__ import annotations

from array import array
from typing import Any

from kachedb_radix.reference.errors import OutOfBlocksError

from ..trace import Request, Trace

#: The filler token after which request ``i``'s first one, ``FILLER - i``, is counted.
FILLER = 2**32 - 1


def blocks_for(trace: Trace, tokens: int) -> int:
    """Blocks that ``tokens`` real tokens take. O(1)."""
    per_block = trace.tokens_per_block
    return -(-tokens // per_block)


def footprint(trace: Trace, request: Request) -> int:
    """Blocks a request holds when it finishes: its prompt and every output token but
    the last (whose KV is never computed: generation stops once it is sampled). O(1)."""
    return blocks_for(trace, request.prompt_tokens + max(request.output_tokens - 1, 0))


def sequence_for(trace: Trace, index: int, request: Request) -> array[int]:
    """Request ``index``'s tree tokens up to its last block: prompt, output ids, filler
    (see the module docstring). O(its footprint)."""
    needed = footprint(trace, request) * trace.block_size
    base = request.sequence
    if len(base) >= needed:
        return base if len(base) == needed else base[:needed]
    pad = needed - len(base)
    return base + array("I", [FILLER - index % FILLER]) + array("I", [FILLER]) * (pad - 1)


class TreePool:
    """The cache's pool: a worker's tree (see the module docstring).

    Args:
        tree: the worker's radix tree (or a tiered worker tree).
        trace: the trace it serves (its block size and mapping).

    Attributes:
        evictions: blocks the pool's inserts evicted.
        peak_pinned: the most blocks pinned at once.
    """

    reuse = True

    def __init__(self, tree: Any, trace: Trace) -> None:
        self.tree = tree
        self.trace = trace
        self.num_blocks: int = tree.num_blocks
        self.evictions = 0
        self.peak_pinned = 0

    def admit(
        self, request: Request, sequence: array[int], computed: int, blocks: int
    ) -> tuple[int, list[Any]] | None:
        """Match the cached prefix of the first ``computed`` real tokens (the prompt,
        or the prompt and the outputs so far after a preemption) and hold ``blocks``
        blocks of ``sequence``, pinned: ``(matched tree tokens, leases)``, or None when
        the pool is pinned full (nothing held). O(sequence).
        """
        trace, tree = self.trace, self.tree
        if computed <= request.prompt_tokens:
            tokens = request.tokens
        else:  # whole blocks only: a partial block was never complete
            tokens = sequence[: computed // trace.tokens_per_block * trace.block_size]
        hit = None
        try:
            # A tiered tree's match restores to the device: it may find no room either.
            hit = tree.match(tokens, request.namespace, pin=True)
            done = tree.insert(
                sequence[: blocks * trace.block_size], request.namespace, pin=True,
                **request.retention(),
            )  # fmt: skip
        except OutOfBlocksError:
            if hit is not None:
                hit.lease.release()
            return None
        self._count(done)
        return hit.length, [hit.lease, done.lease]

    def grow(self, request: Request, sequence: array[int], blocks: int, leases: list[Any]) -> bool:
        """Hold the first ``blocks`` blocks of ``sequence`` (one more than before):
        True, or False when the pool is pinned full (nothing changed). O(sequence)."""
        try:
            done = self.tree.insert(
                sequence[: blocks * self.trace.block_size], request.namespace, pin=True,
                **request.retention(),
            )  # fmt: skip
        except OutOfBlocksError:
            return False
        self._count(done)
        leases.append(done.lease)
        return True

    def release(self, leases: list[Any], blocks: int) -> None:
        """Unpin what a request held; its blocks stay cached. O(its blocks)."""
        for lease in leases:
            lease.release()

    def _count(self, done: Any) -> None:
        self.evictions += len(done.evicted)
        self.peak_pinned = max(self.peak_pinned, self.tree.stats().pinned)


class CountingPool:
    """The no-cache baseline's pool: ``num_blocks`` blocks, counted (module docstring)."""

    reuse = False

    def __init__(self, num_blocks: int, trace: Trace) -> None:
        self.num_blocks = num_blocks
        self.trace = trace
        self.free = num_blocks
        self.evictions = 0
        self.peak_pinned = 0

    def admit(
        self, request: Request, sequence: array[int], computed: int, blocks: int
    ) -> tuple[int, list[Any]] | None:
        """Hold ``blocks`` blocks: ``(0, [])`` (nothing is cached), or None. O(1)."""
        if blocks > self.free:
            return None
        self._take(blocks)
        return 0, []

    def grow(self, request: Request, sequence: array[int], blocks: int, leases: list[Any]) -> bool:
        """One more block, if one is free. O(1)."""
        if not self.free:
            return False
        self._take(1)
        return True

    def release(self, leases: list[Any], blocks: int) -> None:
        """Return ``blocks`` blocks to the pool. O(1)."""
        self.free += blocks

    def _take(self, blocks: int) -> None:
        self.free -= blocks
        self.peak_pinned = max(self.peak_pinned, self.num_blocks - self.free)
