"""Reading the project's Markdown pages the way the docs tests check them.

The pages are the README, every ``docs/*.md`` and ``benchmarks/README.md``. What is
read out of them: fenced code blocks by language, the command lines of ``console``
blocks and of command-table cells, relative links and the anchors GitHub gives headings.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.support.paths import ROOT

#: The Markdown pages whose examples and commands are tested.
PAGES: tuple[Path, ...] = (
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "benchmarks" / "README.md",
)

FENCE = re.compile(r"^( *)```(\w*)[^\n]*\n(.*?)^\1```[ \t]*$", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]+`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
#: A table row whose first cell is one code span: the command tables.
TABLE_COMMAND = re.compile(r"^\|\s*`([^`]+)`\s*\|", re.MULTILINE)


def relative(page: Path) -> str:
    """The page's path from the repository root, for test ids and messages."""
    return page.relative_to(ROOT).as_posix()


def blocks(text: str, language: str) -> list[str]:
    """The bodies of the fenced blocks tagged ``language``, indentation removed.

    A block indented under a list item keeps that indentation on every line; it is
    stripped so the body reads as it would be typed.
    """
    found = []
    for match in FENCE.finditer(text):
        indent, tag, body = match.groups()
        if tag == language:
            found.append("".join(line.removeprefix(indent) for line in body.splitlines(True)))
    return found


def without_code(text: str) -> str:
    """The text with fenced blocks and inline code spans blanked out."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def _join_continuations(lines: list[str]) -> list[str]:
    joined: list[str] = []
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    if pending:
        joined.append(pending)
    return joined


def console_commands(body: str) -> list[str]:
    """The command lines of one ``console`` block, continuations joined.

    A block that prompts (some line starts with ``$ ``) shows output too: only its
    prompted lines, with their backslash continuations, are commands. A block with no
    prompt is all commands. Blank lines and lines that are only a comment are skipped;
    a trailing ``# comment`` is left for :func:`argv` to drop.
    """
    lines = body.splitlines()
    if any(line.startswith("$ ") for line in lines):
        picked: list[str] = []
        inside = False
        for line in lines:
            if line.startswith("$ "):
                picked.append(line[2:])
                inside = line.rstrip().endswith("\\")
            elif inside:
                picked.append(line)
                inside = line.rstrip().endswith("\\")
        lines = picked
    commands = []
    for line in _join_continuations(lines):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            commands.append(" ".join(stripped.split()))
    return commands


def table_commands(text: str) -> list[str]:
    """The commands that open a table row (``| `kachedb-radix ...` | ... |``).

    Optional parts written ``[--quick]`` count as given, so they are checked too.
    """
    return [
        re.sub(r"\[([^\]]*)\]", r"\1", command)
        for command in TABLE_COMMAND.findall(without_code_blocks(text))
    ]


def without_code_blocks(text: str) -> str:
    """The text with fenced blocks blanked out (inline code kept)."""
    return FENCE.sub("", text)


def commands(text: str) -> list[str]:
    """Every command a page shows: its console blocks' lines and its command tables'."""
    found = [command for body in blocks(text, "console") for command in console_commands(body)]
    return found + table_commands(text)


def argv(command: str) -> list[str]:
    """The words of a shell command line, a trailing comment dropped."""
    return shlex.split(command, comments=True)


def cli_arguments(words: list[str]) -> list[str] | None:
    """The arguments given to the ``kachedb-radix`` command line, or None for another program.

    ``python -m kachedb_radix.spec`` is the same command line; leading ``VAR=value``
    assignments and ``time`` are looked through.
    """
    rest = list(words)
    while rest and (re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", rest[0]) or rest[0] == "time"):
        rest.pop(0)
    if rest[:1] == ["kachedb-radix"]:
        return rest[1:]
    if rest[:1] == ["python"] and rest[1:3] == ["-m", "kachedb_radix.spec"]:
        return rest[3:]
    return None


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of every heading in a page, repeated headings numbered as GitHub does."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(without_code_blocks(text)):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text: str) -> list[str]:
    """The targets of a page's links and images that are not web addresses."""
    return [
        target
        for target in LINK.findall(without_code(text))
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)
    ]


def broken_links(page: Path) -> list[str]:
    """Each relative link or image of ``page`` whose file, or heading, does not exist."""
    text = page.read_text()
    broken = []
    for target in links(text):
        path_part, _, fragment = target.partition("#")
        file = (page.parent / path_part).resolve() if path_part else page
        if not file.exists():
            broken.append(f"{target}: {file} does not exist")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file.read_text()):
            broken.append(f"{target}: no heading with anchor #{fragment} in {file.name}")
    return broken
