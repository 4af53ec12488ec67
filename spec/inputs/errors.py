"""The one exception for input the toolbox refuses.

:class:`InputError` is a :class:`ValueError` whose text is a single line: the input it
concerns (``trace t.jsonl line 3``, ``--seed``, ``profile p.toml``) and what is wrong
with it. Callers print it as ``kachedb-radix: <text>`` and exit 2, or answer HTTP 400
with it; they never show a traceback for it.
"""

from __future__ import annotations

import re

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


#: What a terminal would act on rather than show: C0 controls but tab and newline, DEL,
#: C1 controls (``\x9b`` is a one-byte CSI), and the bidirectional overrides and
#: isolates that reorder what is shown (CVE-2021-42574).
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` safe to print: every character a terminal would act on (escape sequences,
    carriage returns, bells, bidirectional overrides) written as its escape, ``\\x1b`` or
    ``\\u202e``; tabs, newlines and everything else kept. For text a program the kit
    drives wrote (its stderr, its name, its malformed answers), which must reach a
    terminal as text, never as commands. O(len(text)).
    """
    return _UNPRINTABLE.sub(lambda found: repr(found.group())[1:-1], text)
