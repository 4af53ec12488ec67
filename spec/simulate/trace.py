"""What a simulation replays: requests, and how the tree's units map to real tokens.

A :class:`Trace` is a list of :class:`Request` records plus the one decision about
units that every number the simulator reports depends on -- the *mapping*:

* **Block-hash traces** (the Mooncake format): each hash id stands for one KV block
  of ``tokens_per_block`` real tokens (512 in the Mooncake traces; the last block
  of a prompt may be partial). The tree sees each hash id as one token with block
  size 1, so one hash id is one tree block, and equal ids chained over the prefix
  are equal tree prefixes. A match of ``m`` blocks saves
  ``min(m * tokens_per_block, input_length)`` prompt tokens: the partial last
  block counts only its own tokens. A prompt of ``n`` hash ids is ``n`` blocks.
* **Token traces**: the tree sees the token ids themselves with ``block_size`` B
  tokens per block (``--block-size``, default 16). A prompt of ``t`` tokens is
  ``t // B`` blocks (a trailing partial block is never cached, R-INS-3); a match
  of ``m`` blocks saves ``m * B`` tokens.

So ``token_scale`` -- real tokens per tree token -- is ``tokens_per_block`` for
block-hash traces and 1 for token traces, and a match of tree length ``L`` saves
``min(L * token_scale, prompt_tokens)`` tokens in both cases.

What a request inserts: its prompt, and its output token ids when the trace gives
them (a chat's next turn starts with this turn's reply, as serving engines cache
it). Block-hash traces have no output ids, so they insert the prompt only.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a trace.

    Attributes:
        tokens: what the tree matches, as a uint32 array: the hash ids (block-hash
            traces) or the prompt's token ids (token traces).
        sequence: what the tree inserts: ``tokens`` followed by the output token
            ids when the trace gives them, else ``tokens`` itself.
        prompt_tokens: real prompt tokens (``input_length``, or ``len(tokens)``).
        output_tokens: real output tokens (decode steps in the timed mode).
        timestamp: arrival time in milliseconds, or None when the trace has none.
        namespace: the tenant, adapter or model the request belongs to (R-NS), or None.
        line: the 1-based line of the trace file it came from (0 when generated).
        priority: the retention priority its client asks for its inserts (R-POL-5),
            or None for the namespace's default.
        retain_for: how many logical clock ticks that priority holds, or None (for as
            long as the blocks stay cached).
        stage: the load stage the request belongs to (a benchmark's step of its rate
            ladder, numbered from 0), or None: TTFT is also reported per stage.
    """

    tokens: array[int]
    sequence: array[int]
    prompt_tokens: int
    output_tokens: int
    timestamp: float | None
    namespace: str | None
    line: int = 0
    priority: int | None = None
    retain_for: int | None = None
    stage: int | None = None

    def retention(self) -> dict[str, int]:
        """The insert keywords its retention asks for: none without a priority. O(1)."""
        if self.priority is None:
            return {}
        if self.retain_for is None:
            return {"priority": self.priority}
        return {"priority": self.priority, "retain_for": self.retain_for}


@dataclass(frozen=True, slots=True)
class SkippedLine:
    """A bad line left out under ``--skip-bad``: where it was and why."""

    line: int
    reason: str


@dataclass(frozen=True)
class Trace:
    """A workload ready to replay.

    Attributes:
        requests: in file (or generation) order.
        format: ``mooncake`` (block hashes) or ``tokens``.
        block_size: tokens per tree block: 1 for block-hash traces, B for token traces.
        token_scale: real tokens per tree token (see the module docstring).
        source: the file it was read from, or a description of the generator.
        skipped: bad lines left out under ``--skip-bad``.
    """

    requests: list[Request]
    format: str
    block_size: int
    token_scale: int
    source: str
    skipped: list[SkippedLine] = field(default_factory=list)

    @property
    def name(self) -> str:
        """A short name: the trace file's name without its folders, else ``source``. O(1)."""
        return Path(self.source).name if self.source.endswith(".jsonl") else self.source

    @property
    def tokens_per_block(self) -> int:
        """Real tokens one tree block stands for. O(1)."""
        return self.block_size * self.token_scale

    def prompt_blocks(self, request: Request) -> int:
        """Whole tree blocks of the request's prompt. O(1)."""
        return len(request.tokens) // self.block_size

    def saved_tokens(self, request: Request, matched_length: int) -> int:
        """Real prompt tokens a match of ``matched_length`` tree tokens saves. O(1)."""
        return min(matched_length * self.token_scale, request.prompt_tokens)

    def has_timestamps(self) -> bool:
        """Whether every request has an arrival time (the timed mode needs it). O(n)."""
        return all(request.timestamp is not None for request in self.requests)
