"""The timed mode's scheduler: how many requests run, how many tokens a step takes, and
what a request costs outside the GPU.

The timed mode (:mod:`~kachedb_radix.spec.simulate.timed`) runs each worker as an
engine of *steps* (:mod:`~kachedb_radix.spec.simulate.plan.engine`), the way vLLM's
scheduler with chunked prefill does, over a KV pool its running requests hold
(:mod:`~kachedb_radix.spec.simulate.plan.memory`):

* **Token budget.** A step carries at most ``token_budget`` tokens (vLLM's
  ``max_num_batched_tokens``; default 8,192): one for every decoding request, the
  rest to prompts prefilling, in admission order, then to admissions.
* **Concurrency.** At most ``max_running`` requests run at once (vLLM's
  ``max_num_seqs``; default 256). ``token_budget`` must be at least that, so every
  running decode fits in a step. Memory bounds it too: a request holds its prompt's
  blocks and its outputs' until it finishes.
* **A full pool.** Admission that finds no room waits for blocks to be released
  (``on_full="wait"``, the default) or refuses the request (``"refuse"``); a decode that
  finds none preempts the newest running request (vLLM's recompute preemption).
* **Per-request overhead.** ``request_overhead_ms`` is added to every TTFT: what a
  request costs before its first token that no GPU step accounts for -- the HTTP
  request and the router or gateway, tokenising the prompt, scheduling, detokenising
  and streaming the token back -- so a fully cached request's TTFT on an idle worker
  (the *warm floor*) is this plus one step. The default, :data:`REQUEST_OVERHEAD_MS`,
  comes from a measurement: in llm-d's published report of its precise-prefix-cache
  guide (16 H100s, 8 vLLM replicas of Qwen3-32B at TP 2, the 60 requests/s stage), the
  fastest TTFT was 46.7 ms, for a prompt of about 7,600 tokens found in the cache; this
  model's one step for that request on an idle replica is 16.4 ms (the 65.5 GB of
  weights and the prompt's KV read at 0.7 of 2 x 3.35 TB/s, plus the 2 ms step
  overhead), which leaves 30 ms for everything outside the GPU. It is an upper bound of
  that share (under load the request's step is longer, so the real remainder is
  smaller), and it is a
  gateway-fronted deployment's: a client talking to one engine directly pays less
  (``--request-overhead-ms``).

Not modelled: speculative decoding, prefill/decode disaggregation, priorities, a
prompt's prefill allocating its blocks chunk by chunk (admission holds the whole
prompt's blocks at once, as SGLang does; vLLM allocates per chunk).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

OnFull = Literal["wait", "refuse"]
ON_FULL: tuple[OnFull, ...] = ("wait", "refuse")

#: The default per-request overhead, ms (the module docstring says where it comes from).
REQUEST_OVERHEAD_MS = 30.0


@dataclass(frozen=True)
class ServiceModel:
    """The scheduler's parameters (see the module docstring).

    Raises:
        ValueError: a cap, budget or overhead out of range, or an unknown ``on_full``.
    """

    max_running: int = 256
    token_budget: int = 8192
    on_full: OnFull = "wait"
    request_overhead_ms: float = REQUEST_OVERHEAD_MS

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
        if not (math.isfinite(self.request_overhead_ms) and self.request_overhead_ms >= 0):
            raise ValueError(
                f"the request overhead must be >= 0 ms, got {self.request_overhead_ms}"
            )
