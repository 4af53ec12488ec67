"""The simulator's one error type: input it cannot use, said precisely.

Every problem with a trace or an option is a :class:`SimulateError`; the command
line prints its message and exits with status 2, never a traceback. A problem on
one line of a trace is a :class:`TraceLineError`, which names the file, the line
and the field, so a user can open the file at that spot.
"""

from __future__ import annotations


class SimulateError(Exception):
    """Input the simulator cannot use: a bad trace, an impossible option."""


class TraceLineError(SimulateError):
    """One line of a trace is bad.

    Attributes:
        source: the trace's name (its path).
        line: the 1-based line number.
        field: the field at fault (``hash_ids[3]``), or None when the line as a
            whole is (malformed JSON, an object of neither format).
        reason: what was wrong, without the location.
        detail: the field and the reason, without the file and the line.
    """

    def __init__(self, source: str, line: int, field: str | None, reason: str) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.reason = reason
        self.detail = reason if field is None else f"field {field!r}: {reason}"
        super().__init__(f"{source}, line {line}: {self.detail}")
