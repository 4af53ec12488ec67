"""argparse ``type=`` callables that check a word at parse time.

Each returns a callable that turns one command-line word into a value or raises
:class:`argparse.ArgumentTypeError`, whose text argparse prints after the option's name
(``argument --seed: -1 is below the least allowed, 0``) before exiting 2. So an option
is checked once, where it is declared, and never reaches a command's code out of range:

- :func:`count` and :func:`real`: a number in a closed range; floats are always finite
  (``nan``, ``inf`` refused); 0 is a value like any other, never "the default";
- :func:`count_list` and :func:`count_range`: integers in range, as a comma-separated
  list (``1,2,4``) or a range (``2-4096``);
- :func:`choice_list`: a comma-separated list of known names, none empty;
- :func:`json_object`: a JSON object (depth-capped, finite numbers: :mod:`.jsontext`);
- :func:`input_path`, :func:`output_file`, :func:`output_dir`: a path that can be read,
  or written without clobbering a directory or a file, checked before any work starts;
  :func:`input_path_or` also takes a few reserved words (``strict`` for a profile).

Every callable has a ``__name__`` (argparse names the type in its fallback message).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Collection
from pathlib import Path

from .errors import InputError, quote
from .jsontext import loads_json_object


def _named(function: Callable[[str], object], name: str) -> None:
    function.__name__ = name


def count(least: int, most: int) -> Callable[[str], int]:
    """An integer in ``[least, most]`` (decimal; ``_`` separators allowed). O(len(word)).

    Raises (from the returned callable):
        argparse.ArgumentTypeError: not an integer, or out of range.
    """

    def parse(word: str) -> int:
        try:
            value = int(word.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{quote(word)} is not an integer") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{value} is below the least allowed, {least:,}")
        if value > most:
            raise argparse.ArgumentTypeError(f"{value} is over the most allowed, {most:,}")
        return value

    _named(parse, "integer")
    return parse


def real(least: float, most: float, *, above: bool = False) -> Callable[[str], float]:
    """A finite number in ``[least, most]``, or ``(least, most]`` with ``above``. O(1).

    Raises (from the returned callable):
        argparse.ArgumentTypeError: not a number, not finite, or out of range.
    """

    def parse(word: str) -> float:
        try:
            value = float(word.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{quote(word)} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{quote(word)} is not a finite number")
        if value < least or (above and value == least):
            relation = "above" if above else "at least"
            raise argparse.ArgumentTypeError(f"{word.strip()} must be {relation} {least:g}")
        if value > most:
            raise argparse.ArgumentTypeError(f"{word.strip()} is over the most allowed, {most:g}")
        return value

    _named(parse, "number")
    return parse


def count_list(least: int, most: int, *, most_items: int) -> Callable[[str], tuple[int, ...]]:
    """A comma-separated list of integers, each in ``[least, most]``, at least one and at
    most ``most_items``, duplicates removed in order. O(len(word)).

    Raises (from the returned callable):
        argparse.ArgumentTypeError: an empty list or item, an item that is not an integer
            or out of range, too many items.
    """
    item = count(least, most)

    def parse(word: str) -> tuple[int, ...]:
        parts = [part.strip() for part in word.split(",")]
        if not word.strip() or any(not part for part in parts):
            raise argparse.ArgumentTypeError(f"{quote(word)} has an empty item in its list")
        if len(parts) > most_items:
            raise argparse.ArgumentTypeError(
                f"{len(parts)} items, over the most allowed, {most_items}"
            )
        return tuple(dict.fromkeys(item(part) for part in parts))

    _named(parse, "list")
    return parse


def count_range(least: int, most: int) -> Callable[[str], tuple[int, int]]:
    """``LOW-HIGH`` (or one integer ``N``, meaning ``N-N``), both in ``[least, most]``, the
    smaller first. ``least`` must be >= 0 (a ``-`` separates the ends). O(len(word)).

    Raises (from the returned callable):
        argparse.ArgumentTypeError: an end that is not an integer or out of range, or the
            larger first.
    """
    end = count(least, most)

    def parse(word: str) -> tuple[int, int]:
        low, dash, high = word.strip().partition("-")
        pair = (end(low), end(high if dash else low))
        if pair[0] > pair[1]:
            raise argparse.ArgumentTypeError(f"{quote(word)}: the smaller end comes first")
        return pair

    _named(parse, "range")
    return parse


def json_object(word: str) -> dict[str, object]:
    """A JSON object (depth-capped, finite numbers only). O(len(word)).

    Raises:
        argparse.ArgumentTypeError: not JSON, nested too deeply, a non-finite number, or
            not an object.
    """
    try:
        return loads_json_object(word, quote(word))
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_named(json_object, "JSON object")


def choice_list(choices: Collection[str], *, most: int | None = None) -> Callable[[str], list[str]]:
    """A comma-separated list of names from ``choices``, at least one, none empty,
    duplicates removed in order. O(len(word)).

    Raises (from the returned callable):
        argparse.ArgumentTypeError: an empty list or name, an unknown name, too many.
    """

    def parse(word: str) -> list[str]:
        names = [name.strip() for name in word.split(",")]
        if not word.strip() or any(not name for name in names):
            raise argparse.ArgumentTypeError(f"{quote(word)} has an empty name in its list")
        unknown = [name for name in names if name not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {quote(unknown[0])} (choose from {', '.join(sorted(choices))})"
            )
        unique = list(dict.fromkeys(names))
        if most is not None and len(unique) > most:
            raise argparse.ArgumentTypeError(f"{len(unique)} names, over the most allowed, {most}")
        return unique

    _named(parse, "list")
    return parse


def input_path(word: str) -> Path:
    """An existing regular file that can be read (its contents are checked by the reader,
    :mod:`.files`). O(1).

    Raises:
        argparse.ArgumentTypeError: empty, missing, a directory, not a file, unreadable.
    """
    if not word:
        raise argparse.ArgumentTypeError("an empty path")
    path = Path(word)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{word}: no such file")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{word}: a directory, not a file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{word}: not a regular file")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{word}: cannot be read (permission denied)")
    return path


def input_path_or(*words: str) -> Callable[[str], Path | str]:
    """One of ``words`` as it is, else an :func:`input_path` (a file named like a word
    is reached as ``./word``). O(1).

    Raises (from the returned callable):
        argparse.ArgumentTypeError: as :func:`input_path`.
    """

    def parse(word: str) -> Path | str:
        return word if word in words else input_path(word)

    _named(parse, "path")
    return parse


def output_file(word: str) -> Path:
    """A file path to write: not a directory, in a directory that exists and can be
    written. Nothing is created here. O(1).

    Raises:
        argparse.ArgumentTypeError: empty, a directory, no such directory, not writable.
    """
    if not word:
        raise argparse.ArgumentTypeError("an empty path")
    path = Path(word)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{word}: a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{word}: no directory {parent}")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{word}: cannot be written (permission denied)")
    return path


def output_dir(word: str) -> Path:
    """A directory to write into: an existing directory, or a path that can be created
    (no file in its place, its nearest existing ancestor writable). Nothing is created
    here. O(depth of the path).

    Raises:
        argparse.ArgumentTypeError: empty, an existing file, or not writable.
    """
    if not word:
        raise argparse.ArgumentTypeError("an empty path")
    path = Path(word)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{word}: a file, not a directory")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{word}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK):
        raise argparse.ArgumentTypeError(f"{word}: cannot be written (permission denied)")
    return path
