"""Read the rules out of ``SPEC.md``: ids, titles and levels.

A rule is a level-3 heading ``### R-GROUP-n — title`` followed by a line
``Level: <level>``. Tests use this to check that every rule is cited by a test and
every cited id exists.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Where the specification lives.
SPEC_PATH = Path(__file__).parent.parent / "SPEC.md"

#: A rule id anywhere in text.
RULE_ID = re.compile(r"\bR-[A-Z]+-[0-9]+\b")

_HEADING = re.compile(r"^### (R-[A-Z]+-[0-9]+) — (.+)$")
_LEVEL = re.compile(r"^Level: (\w+)$")


class SpecFormatError(ValueError):
    """SPEC.md does not follow the rule format; the message names the line."""


@dataclass(frozen=True)
class Rule:
    """One rule of the specification.

    Attributes:
        id: ``R-GROUP-n``.
        title: the heading text after the dash.
        level: the conformance level it belongs to.
        text: the rule's body, up to the next heading.
    """

    id: str
    title: str
    level: str
    text: str

    @property
    def group(self) -> str:
        """The GROUP part of the id."""
        return self.id.split("-")[1]


def load_rules(path: Path = SPEC_PATH) -> dict[str, Rule]:
    """The rules of ``path`` by id, in document order. O(size of the file).

    Raises:
        SpecFormatError: a rule heading without a ``Level:`` line, or a duplicate id.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    rules: dict[str, Rule] = {}
    index = 0
    while index < len(lines):
        heading = _HEADING.match(lines[index])
        index += 1
        if heading is None:
            continue
        rule_id, title = heading.groups()
        if rule_id in rules:
            raise SpecFormatError(f"{path}:{index}: duplicate rule {rule_id}")
        level = _LEVEL.match(lines[index]) if index < len(lines) else None
        if level is None:
            raise SpecFormatError(f"{path}:{index + 1}: {rule_id} lacks a 'Level:' line")
        body: list[str] = []
        index += 1
        while index < len(lines) and not lines[index].startswith("#"):
            body.append(lines[index])
            index += 1
        rules[rule_id] = Rule(rule_id, title, level.group(1), "\n".join(body).strip())
    return rules


def markdown_html(text: str, *, inline: bool = False) -> str:
    """``text`` (SPEC.md's Markdown: code spans, emphasis, lists) as HTML, by
    markdown-it-py's CommonMark renderer with raw HTML off (escaped, never passed
    through); ``inline`` for one paragraph without its ``<p>``. O(len(text)).

    A rule's body and a finding's cause or peer note are shown on pages with it, so
    ``2**32`` in a code span stays ``2**32`` and backticks become code.
    """
    renderer = _markdown()
    html: str = renderer.renderInline(text) if inline else renderer.render(text)
    return html


@functools.cache
def _markdown() -> Any:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False})
