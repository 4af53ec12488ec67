"""Checked input: what every command and service does with bytes a user hands it.

A user's input reaches the toolbox as command-line words, files (traces, profiles,
baselines), and HTTP bodies. Each passes through this package before anything else
sees it, so that one meaning is written once:

- :mod:`.errors`: :class:`InputError`, the one exception for refused input; its text is
  one line that names the input (an option, a file, a line of a file, a field) and what
  is wrong with it. A command prints it and exits 2; a service answers 400 with it.
- :mod:`.limits`: the caps on everything that allocates or recurses in proportion to
  user input (JSON nesting, line and file sizes, ...), one table row each, so that
  ``--help``, ``docs/reliability.md`` and the code state the same numbers.
- :mod:`.jsontext`: JSON as the toolbox reads and writes it: depth-capped, finite
  numbers only (no ``NaN``, no ``Infinity``, no ``1e400``), objects where objects are
  expected.
- :mod:`.files`: files read whole or line by line: missing, a directory, too large,
  binary, not UTF-8, truncated: each refused in one line naming the file.
- :mod:`.argtypes`: argparse ``type=`` callables for numbers (finite, in range, never
  silently replaced) and paths (an input that exists, an output that can be written).
- :mod:`.writes`: the outputs a command writes (reports, traces, JSON): a path the
  system refuses at the write itself is an :class:`InputError` naming it, too.

Invariant: nothing in this package changes any state of the caller's; a refusal is
raised before the caller has done anything with the input. (:mod:`.writes` writes the
file it is asked to, nothing else.)
"""

from __future__ import annotations

from .argtypes import (
    choice_list,
    count,
    count_list,
    count_range,
    input_path,
    input_path_or,
    json_object,
    output_dir,
    output_file,
    real,
)
from .errors import InputError, printable, quote
from .files import iter_lines, read_json, read_text, read_toml
from .jsontext import decode_json, dumps_json, loads_json, loads_json_object
from .limits import LIMITS, Limit, limits_table
from .writes import make_directory, write_text

__all__ = [
    "LIMITS",
    "InputError",
    "Limit",
    "choice_list",
    "count",
    "count_list",
    "count_range",
    "decode_json",
    "dumps_json",
    "input_path",
    "input_path_or",
    "iter_lines",
    "json_object",
    "limits_table",
    "loads_json",
    "loads_json_object",
    "make_directory",
    "output_dir",
    "output_file",
    "printable",
    "quote",
    "read_json",
    "read_text",
    "read_toml",
    "real",
    "write_text",
]
