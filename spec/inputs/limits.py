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

from kachedb_radix.reference.limits import MAX_BLOCK_SIZE, MAX_NUM_BLOCKS, MAX_TOKEN_SLOTS


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
        "block_size",
        1 << 24,
        "tokens",
        "a block of tokens (route --block-size, hash --block-size)",
        "the C router index keeps a block size in 24 bits; engines use 1 to 256",
    ),
    Limit(
        "text_file_bytes",
        256 * 1024 * 1024,
        "bytes",
        "a file read whole (profiles, gate baselines and prior runs)",
        "read whole into memory; a trace too large for this is streamed by simulate",
    ),
    Limit(
        "pool_blocks",
        MAX_NUM_BLOCKS,
        "blocks",
        "a pool: a tree's, each tier's, a reset's num_blocks (both twins; SPEC.md R-LIMIT-1)",
        "the reference reserves about 60 bytes per block when built: about 1 GB at the cap",
    ),
    Limit(
        "block_tokens",
        MAX_BLOCK_SIZE,
        "tokens",
        "a block: a tree's or a reset's block_size (both twins; SPEC.md R-LIMIT-2)",
        "engines use 1 to 256 tokens a block; the C twin draws block_size + 1 hash keys",
    ),
    Limit(
        "pool_tokens",
        MAX_TOKEN_SLOTS,
        "tokens",
        "a pool's num_blocks * block_size (both twins; SPEC.md R-LIMIT-3)",
        "the C twin keeps token offsets in 32 bits; a full pool at the cap is 16 GiB of ids",
    ),
    Limit(
        "trace_bytes",
        64 * 1024 * 1024,
        "bytes",
        "a trace replay or explain reads (the kit's JSON lines)",
        "its steps are held in memory, several times the text; vectors and findings are KBs",
    ),
    Limit(
        "trace_steps",
        100_000,
        "steps",
        "the steps of a trace replay or explain reads",
        "each is run on the reference and the target with reads after it; the golden "
        "vectors are 1,435 steps in all",
    ),
    Limit(
        "explain_pool_blocks",
        65_536,
        "blocks",
        "a pool explain draws (each reset of its trace)",
        "every block is drawn, on the page and in the text; the scenarios use 6 to 300",
    ),
    Limit(
        "kit_examples",
        1_000_000,
        "examples",
        "conform --examples",
        "CI runs 1,500; a million is hours of search",
    ),
    Limit(
        "kit_steps",
        10_000,
        "operations",
        "conform --steps, the operations of one example",
        "an example's trace is held, replayed and shrunk; the default is 300",
    ),
    Limit(
        "kit_budget",
        100_000_000,
        "operations",
        "conform --budget, the operations of a whole search",
        "CI's search is 75,000; the cap is days of search",
    ),
    Limit(
        "kit_pool_blocks",
        65_536,
        "blocks",
        "conform --pool-sizes, the largest pool an example draws",
        "every example builds that pool in both twins and fills it; the default is 4,096",
    ),
    Limit(
        "kit_block_tokens",
        1_024,
        "tokens",
        "conform --block-sizes, each block size an example draws",
        "an example's inserts are whole blocks of it; the default sizes are 1 to 4",
    ),
    Limit(
        "list_items",
        64,
        "items",
        "a comma-separated option's list (conform --block-sizes)",
        "each item is a separate search dimension; nobody lists more",
    ),
    Limit(
        "timeout_seconds",
        86_400,
        "seconds",
        "--timeout, per call of a candidate (conform, replay, explain)",
        "a day per answer is already a hang; the timer takes any finite number",
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


def limits_table() -> str:
    """The caps as ``docs/reliability.md`` shows them: a Markdown table, one row per cap,
    in table order (a test keeps the page equal to it). O(rows)."""
    lines = ["| cap | at most | what it bounds | why this number |", "| --- | ---: | --- | --- |"]
    for row in _ROWS:
        lines.append(f"| `{row.name}` | {row.maximum:,} {row.unit} | {row.what} | {row.why} |")
    return "\n".join(lines)
