"""The one exception for input the toolbox refuses.

:class:`InputError` is a :class:`ValueError` whose text is a single line: the input it
concerns (``trace t.jsonl line 3``, ``--seed``, ``profile p.toml``) and what is wrong
with it. Callers print it as ``kachedb-radix: <text>`` and exit 2, or answer HTTP 400
with it; they never show a traceback for it.
"""

from __future__ import annotations

#: The longest piece of a user's input quoted back in a message: enough to recognise it,
#: never a megabyte of it on the terminal.
QUOTE_CHARS = 60


class InputError(ValueError):
    """Input refused before it changed anything; ``str(error)`` is one line saying why."""

    def __init__(self, message: str) -> None:
        # One line, whatever the message was built from (a quoted input may hold newlines).
        super().__init__(" ".join(message.split()))


def quote(text: str) -> str:
    """``text`` as a message shows it: ``repr`` (escapes control and escape bytes), cut to
    :data:`QUOTE_CHARS` characters. O(QUOTE_CHARS)."""
    if len(text) > QUOTE_CHARS:
        return repr(text[:QUOTE_CHARS]) + f"... ({len(text)} characters)"
    return repr(text)
