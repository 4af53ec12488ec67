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
        "a file read whole (profiles, baselines, replay and explain traces)",
        "read whole into memory; a trace too large for this is streamed by simulate",
    ),
)

#: Every cap, by name.
LIMITS: Final[dict[str, Limit]] = {row.name: row for row in _ROWS}
