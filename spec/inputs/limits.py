"""The caps on user input, one row each.

Everything that allocates or recurses in proportion to what a user hands the toolbox
has a cap here: a row names it, gives the maximum and its unit, and says why the number
is what it is. ``--help`` texts and ``docs/reliability.md`` quote these rows (a test
keeps the page equal to the table), and the code reads them, so the three never differ.

A cap is not a tuning knob: it is set far above any real use (a trace line nested 64
deep is already nonsense) and low enough that refusing costs nothing (no parser
recursion, no gigabyte allocation before the check).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Limit:
    """One cap: ``maximum`` ``unit`` of ``what``; ``why`` the reason for the number."""

    name: str
    maximum: int
    unit: str
    what: str
    why: str

    def describe(self) -> str:
        """The cap as ``--help`` states it: ``at most 64 levels``. O(1)."""
        return f"at most {self.maximum:,} {self.unit}"


_ROWS: Final = (
    Limit(
        "json_depth",
        64,
        "levels",
        "nesting of any JSON value read (trace lines, HTTP bodies, baselines, reports)",
        "every format the toolbox reads is at most a few levels deep; parsers recurse",
    ),
    Limit(
        "line_bytes",
        16 * 1024 * 1024,
        "bytes",
        "one line of a JSON-lines file (traces, candidate answers)",
        "a 1M-token prompt spelled as JSON is about 8 MB",
    ),
    Limit(
        "text_file_bytes",
        256 * 1024 * 1024,
        "bytes",
        "a file read whole (profiles, baselines, replay and explain traces)",
        "read whole into memory; a trace too large for this is streamed by simulate",
    ),
    Limit(
        "simulate_requests",
        100_000,
        "requests",
        "the embedded workload simulate generates (--requests)",
        "about 45 KB a request of prompt and reply token ids and their generation: "
        "4.5 GB before the replay; a larger workload belongs in a trace file",
    ),
    Limit(
        "trace_requests",
        5_000_000,
        "requests",
        "requests simulate reads from one trace",
        "about 1 KB a request of 100 block ids held in memory: 5 GB; the largest public "
        "traces hold a few million",
    ),
    Limit(
        "request_tokens",
        16_777_216,
        "tokens",
        "one request's prompt (trace lines, --prefill-cost)",
        "2**24: past the longest context any model serves (10M tokens); a prompt is "
        "prefilled in chunks, a few thousand steps at most",
    ),
    Limit(
        "output_tokens",
        1_048_576,
        "tokens",
        "one request's output (trace lines)",
        "2**20: no engine generates more in one request (max_model_len caps it); the "
        "timed mode steps once per output token, a few microseconds a step, so one line "
        "costs seconds at most",
    ),
    Limit(
        "simulate_workers",
        4_096,
        "workers",
        "workers of one simulated cluster (--workers)",
        "each worker is a tree and an engine; 4,096 replicas is past any fleet one router serves",
    ),
    Limit(
        "http_body_bytes",
        16 * 1024 * 1024,
        "bytes",
        "an HTTP request body (route's API, the explain playground)",
        "a 1M-token prompt as JSON is about 8 MB; refused from Content-Length, unread",
    ),
    Limit(
        "http_header_bytes",
        16 * 1024,
        "bytes",
        "an HTTP request line and headers together (route's API)",
        "real clients send well under 1 KB; the header block is buffered before parsing",
    ),
    Limit(
        "http_connections",
        256,
        "connections",
        "HTTP connections route's API keeps open at once (more wait in the backlog)",
        "each holds a buffer; a gateway's clients keep a few connections alive each",
    ),
    Limit(
        "route_tokens",
        1024 * 1024,
        "tokens",
        "tokens in one request routed (POST /route, each of a batch)",
        "a 1M-token context; as JSON it fits the body cap",
    ),
    Limit(
        "route_batch",
        4096,
        "requests",
        "requests in one POST /route/batch",
        "a batch is answered in one reply; 4,096 64-block prompts hash in under a second",
    ),
    Limit(
        "route_workers",
        1024,
        "workers",
        "workers one route process follows (--worker)",
        "two ZeroMQ sockets and two connections each; the C index's sets grow with it",
    ),
    Limit(
        "route_demo_workers",
        64,
        "workers",
        "route --demo's local workers",
        "each is a tree, a publisher and a subscription in one process (four sockets)",
    ),
    Limit(
        "playground_steps",
        2000,
        "steps",
        "steps in an explain playground session (typed, or in a loaded trace)",
        "every change records the whole session again",
    ),
    Limit(
        "playground_tokens",
        4096,
        "tokens",
        "tokens in one playground step",
        "a page a person reads: 4,096 tokens already draw a tree nobody can follow",
    ),
    Limit(
        "playground_block_size",
        64,
        "tokens",
        "tokens per block of a playground reset",
        "each block is drawn with its tokens",
    ),
    Limit(
        "playground_blocks",
        4096,
        "blocks",
        "a playground reset's pool (typed, or in a loaded trace)",
        "the pool is drawn block by block; the reference allocates it whole",
    ),
)

#: Every cap, by name.
LIMITS: Final[dict[str, Limit]] = {row.name: row for row in _ROWS}
