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
