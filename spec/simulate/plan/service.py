"""The timed mode's scheduler: how many requests run, how many tokens a step takes.

The timed mode (:mod:`~kachedb_radix.spec.simulate.timed`) runs each worker as an
engine of *steps* (:mod:`~kachedb_radix.spec.simulate.plan.engine`), the way vLLM's
scheduler with chunked prefill does:

* **Token budget.** A step carries at most ``token_budget`` tokens (vLLM's
  ``max_num_batched_tokens``; default 8,192). Running requests past their prefill go
  first, one decode token each; the budget left goes to prompts still prefilling, in
  the order they were admitted, a chunk each; what is still left admits waiting
  requests, first come first served, each with a first chunk.
* **Concurrency.** At most ``max_running`` requests are admitted at once (vLLM's
  ``max_num_seqs``; default 256). ``token_budget`` must be at least that, so every
  running decode fits in a step.
* **Admission and the pool.** Admitting a request matches its prompt with
  ``pin=True`` and inserts it with ``pin=True`` (its prefill will fill those blocks,
  evicting by the tree's policy); they stay pinned until it completes. When every
  block is pinned and the insert finds no room (``OutOfBlocksError``), the request --
  and, first come first served, everyone behind it -- waits for a running request to
  finish (``on_full="wait"``), or is refused (``on_full="refuse"``); both are
  counted. A prompt with more whole blocks than the pool is always refused.
* **Completion.** Its leases are released; if the trace gave its output token ids,
  prompt + output is inserted unpinned (the next turn reuses the reply); when even
  that finds no room the output is simply not cached (counted).

What a step costs is :mod:`~kachedb_radix.spec.simulate.plan.cost`'s business. Not
modelled: decode-time growth of the KV in the pool (only prompts and, at the end,
outputs take blocks), preemption, speculative decoding, prefill/decode
disaggregation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OnFull = Literal["wait", "refuse"]
ON_FULL: tuple[OnFull, ...] = ("wait", "refuse")


@dataclass(frozen=True)
class ServiceModel:
    """The scheduler's parameters (see the module docstring).

    Raises:
        ValueError: a cap or budget out of range, or an unknown ``on_full``.
    """

    max_running: int = 256
    token_budget: int = 8192
    on_full: OnFull = "wait"

    def __post_init__(self) -> None:
        if self.max_running < 1:
            raise ValueError(f"max running requests must be >= 1, got {self.max_running}")
        if self.token_budget < self.max_running:
            raise ValueError(
                f"the token budget ({self.token_budget}) must be >= max running requests "
                f"({self.max_running}): every running decode takes a token of each step"
            )
        if self.on_full not in ON_FULL:
            raise ValueError(f"on_full must be one of {ON_FULL}, got {self.on_full!r}")
