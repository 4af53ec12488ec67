"""The timed mode's service model: how long a request takes, given what it reused.

A deliberately small model of one serving engine, enough to turn hit ratios into
time-to-first-token (TTFT) and to make pinning real (a running request holds its
blocks):

* **Admission.** Requests are admitted first come, first served, while fewer than
  ``max_running`` are running. Admitting one matches its prompt with ``pin=True``
  (its cached prefix is pinned) and inserts the prompt with ``pin=True`` (the
  blocks its prefill will fill are allocated and pinned, evicting LRU leaves).
* **Full pool.** When every block it could evict is pinned and the insert finds no
  room (``OutOfBlocksError``), the request -- and, first come first served, every
  request behind it -- waits for a running request to finish (``on_full="wait"``),
  or it is refused (``on_full="refuse"``). Either is counted: ``waited`` counts
  every request that sat in the queue while the pool was full. A prompt with more
  whole blocks than the pool can never run and is always refused.
* **Prefill.** One prefill stream, first come first served, at
  ``prefill_tokens_per_s``: a request's prefill starts when it is admitted and the
  previous prefill is done, and lasts ``uncached prompt tokens / throughput``.
  Cached tokens cost nothing, which is the point of the cache.
  TTFT = end of prefill - arrival (queueing included).
* **Decode.** Then ``output tokens * decode_ms_per_token`` (requests decode
  side by side in one batch, so decode does not queue).
* **Completion.** The request's leases are released; if the trace gave its output
  token ids, prompt + output is inserted unpinned (the next turn can reuse the
  reply); when even that finds no room the output is simply not cached (counted).

Not modelled: decode-time KV growth in the pool (only prompts and, at the end,
outputs take blocks), chunked prefill, preemption, batching effects on speed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OnFull = Literal["wait", "refuse"]
ON_FULL: tuple[OnFull, ...] = ("wait", "refuse")


@dataclass(frozen=True)
class ServiceModel:
    """The timed mode's parameters (defaults: a mid-size model on one GPU node).

    Raises:
        ValueError: a throughput, time or cap out of range, or an unknown ``on_full``.
    """

    prefill_tokens_per_s: float = 20_000.0
    decode_ms_per_token: float = 20.0
    max_running: int = 64
    on_full: OnFull = "wait"

    def __post_init__(self) -> None:
        if not self.prefill_tokens_per_s > 0:
            raise ValueError(f"prefill throughput must be > 0, got {self.prefill_tokens_per_s}")
        if not self.decode_ms_per_token >= 0:
            raise ValueError(f"decode time must be >= 0, got {self.decode_ms_per_token}")
        if self.max_running < 1:
            raise ValueError(f"max running requests must be >= 1, got {self.max_running}")
        if self.on_full not in ON_FULL:
            raise ValueError(f"on_full must be one of {ON_FULL}, got {self.on_full!r}")

    def prefill_ms(self, uncached_tokens: int) -> float:
        """Milliseconds to prefill ``uncached_tokens``. O(1)."""
        return uncached_tokens * 1000.0 / self.prefill_tokens_per_s

    def decode_ms(self, output_tokens: int) -> float:
        """Milliseconds to decode ``output_tokens``. O(1)."""
        return output_tokens * self.decode_ms_per_token
