"""Files as the toolbox writes them: the one place an output path's failure is worded.

The argument types (:func:`~.argtypes.output_dir`, :func:`~.argtypes.output_file`) refuse
the outputs that can be told bad before a command runs (a file where a directory is
wanted, a missing parent, no write permission). Some cannot be told until the write
itself: a file system that refuses a new entry (``/proc``, a read-only mount), a full
disk, a directory removed meanwhile, a check that ``os.access`` cannot make for root.
``conform`` (its report, traces and the index level's report) and ``gate`` (``--json``,
the baseline) write through these functions, so such a failure is one line naming the
option, the path and the system's reason -- an :class:`~.errors.InputError`, printed by
the command line with status 2 -- never a traceback. (``simulate`` and ``explain`` catch
the ``OSError`` around their own writes and word it themselves, also exit 2.)

Invariant: a function here changes nothing but the file or directory it was asked to
make; on failure a file may be left partly written (the caller's output, not its state).
"""

from __future__ import annotations

from pathlib import Path

from .errors import InputError


def _refused(path: Path, what: str, error: OSError) -> InputError:
    reason = error.strerror or type(error).__name__
    return InputError(f"{what} {path}: cannot be written ({reason})")


def make_directory(path: Path, what: str = "output directory") -> Path:
    """Make ``path`` and its missing parents (an existing directory is fine); ``path``.
    O(depth of the path).

    Raises:
        InputError: it cannot be made (a file in its place, a file system that refuses
            it, permissions).
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _refused(path, what, error) from None
    return path


def write_text(path: Path, text: str, what: str = "output") -> Path:
    """Write ``text`` to ``path`` as UTF-8 (replacing it); ``path``. O(len(text)).

    Raises:
        InputError: the file cannot be written (its directory is gone, a file system
            that refuses it, a full disk, permissions).
    """
    try:
        with path.open("w", encoding="utf-8", newline="") as stream:
            stream.write(text)
    except OSError as error:
        raise _refused(path, what, error) from None
    return path

