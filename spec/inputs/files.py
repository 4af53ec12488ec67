"""Files as the toolbox reads them.

Every file a user names passes through one of these readers, which refuse, in one line
naming the file, what no command can use:

- missing, a directory, unreadable (permissions, a FIFO that is not a file);
- larger than its cap (``LIMITS["text_file_bytes"]`` read whole, ``LIMITS["line_bytes"]``
  a line);
- binary (a NUL byte) or not UTF-8 (the offset of the first bad byte);
- JSON or TOML that does not parse, or nests deeper than ``LIMITS["json_depth"]``.

A reader opens the file once and reads it once; nothing is written.
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import InputError
from .jsontext import loads_json, nesting_depth
from .limits import LIMITS


def _open_regular(path: Path, what: str) -> tuple[int, int]:
    """Open ``path`` for reading as a regular file: ``(fd, size)``. O(1).

    Raises:
        InputError: missing, a directory, not a regular file, or unreadable.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(f"{what} {path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{what} {path}: a directory, not a file") from None
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot be read ({exc.strerror or exc})") from None
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        os.close(fd)
        raise InputError(f"{what} {path}: a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise InputError(f"{what} {path}: not a regular file")
    os.set_blocking(fd, True)
    return fd, info.st_size


def _decode(data: bytes, path: Path, what: str, where: str = "") -> str:
    """``data`` as UTF-8 text, refusing binary and bad bytes. O(len(data))."""
    at = f"{what} {path}{where}"
    if b"\0" in data:
        raise InputError(f"{at}: binary, not text (a NUL byte at offset {data.index(0)})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{at}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def read_text(path: str | Path, what: str) -> str:
    """The whole of text file ``path``; ``what`` names it in errors (``"profile"``).

    O(size of the file), which is at most ``LIMITS["text_file_bytes"]``.

    Raises:
        InputError: missing, a directory, unreadable, too large, binary or not UTF-8.
    """
    path = Path(path)
    cap = LIMITS["text_file_bytes"].maximum
    fd, size = _open_regular(path, what)
    with os.fdopen(fd, "rb") as file:
        if size > cap:
            raise InputError(f"{what} {path}: {size:,} bytes, over the cap of {cap:,}")
        data = file.read(cap + 1)
    if len(data) > cap:  # grew while read
        raise InputError(f"{what} {path}: over the cap of {cap:,} bytes")
    return _decode(data, path, what)


def iter_lines(path: str | Path, what: str) -> Iterator[tuple[int, str]]:
    """The lines of text file ``path`` as ``(line number from 1, text without its
    newline)``, read as they are used (a trace of any size streams). O(size of the file).

    Raises:
        InputError: missing, a directory, unreadable; a line over
            ``LIMITS["line_bytes"]``, binary or not UTF-8 (naming the line).
    """
    path = Path(path)
    cap = LIMITS["line_bytes"].maximum
    fd, _ = _open_regular(path, what)
    with os.fdopen(fd, "rb") as file:
        for number, raw in enumerate(iter(lambda: file.readline(cap + 1), b""), start=1):
            if len(raw) > cap:
                raise InputError(f"{what} {path} line {number}: over the cap of {cap:,} bytes")
            text = _decode(raw, path, what, f" line {number}")
            yield number, text.rstrip("\r\n")


def read_json(path: str | Path, what: str) -> Any:
    """The JSON value in file ``path``. O(size of the file).

    Raises:
        InputError: as :func:`read_text`, or not (finite, depth-capped) JSON.
    """
    return loads_json(read_text(path, what), f"{what} {path}")


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """The TOML document in file ``path``. O(size of the file).

    Arrays and inline tables nested deeper than ``LIMITS["json_depth"]`` are refused
    before the parser (which recurses) sees them.

    Raises:
        InputError: as :func:`read_text`, or not TOML, or nested too deeply.
    """
    text = read_text(path, what)
    cap = LIMITS["json_depth"].maximum
    # TOML nests with JSON's brackets. Its strings differ (a '"' inside a literal string
    # can hide brackets from the count), so the parser's own RecursionError is caught too.
    if text.count("[") + text.count("{") > cap and nesting_depth(text) > cap:
        raise InputError(f"{what} {path}: nested deeper than {cap} levels")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{what} {path}: not TOML ({exc})") from None
    except RecursionError:
        raise InputError(f"{what} {path}: nested too deeply") from None
