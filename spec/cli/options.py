"""Options several subcommands share, each declared once: its parse-time check
(:mod:`kachedb_radix.spec.inputs`), and the limit its help states.

* ``--timeout SECONDS``: a finite number above 0, at most ``LIMITS["timeout_seconds"]``;
  left out, a call gets :data:`~kachedb_radix.spec.protocol.client.DEFAULT_TIMEOUT`
  seconds and a program's start and ``hello``
  :data:`~kachedb_radix.spec.protocol.client.DEFAULT_STARTUP_TIMEOUT`; given, it bounds
  the start too (``--cmd "sleep 100" --timeout 2`` gives up after about 2 s, not 30).
* ``--profile FILE|strict``: ``strict``, or a deviation profile read and checked at parse
  time (missing, a directory, binary, not UTF-8, not TOML, nested too deeply, not a
  valid profile: one line, exit 2).
"""

from __future__ import annotations

import argparse

from ..conform.profile import Profile, ProfileError, load
from ..inputs import LIMITS, input_path_or, real
from ..protocol.client import DEFAULT_STARTUP_TIMEOUT, DEFAULT_TIMEOUT

#: ``--timeout``'s type.
TIMEOUT = real(0.0, LIMITS["timeout_seconds"].maximum, above=True)

_PROFILE_PATH = input_path_or("strict")


def add_timeout(parser: argparse.ArgumentParser, what: str) -> None:
    """Add ``--timeout``; ``what`` says what it bounds ("per call, over stdio")."""
    parser.add_argument(
        "--timeout",
        type=TIMEOUT,
        default=None,
        metavar="SECONDS",
        help=f"seconds allowed {what}, above 0 and "
        f"{LIMITS['timeout_seconds'].describe()} (default {DEFAULT_TIMEOUT:g}, and "
        f"{DEFAULT_STARTUP_TIMEOUT:g} for a program to start; given, it bounds the start too)",
    )


def timeouts(timeout: float | None) -> tuple[float, float]:
    """``(per call, for the start)`` that ``--timeout`` asks for. O(1)."""
    if timeout is None:
        return DEFAULT_TIMEOUT, DEFAULT_STARTUP_TIMEOUT
    return timeout, timeout


def profile_option(word: str) -> Profile | str:
    """``--profile``'s type: ``"strict"`` as it is, else the profile in file ``word``,
    read and checked now. O(size of the file).

    Raises:
        argparse.ArgumentTypeError: the file cannot be read, or is not a valid profile.
    """
    path = _PROFILE_PATH(word)
    if isinstance(path, str):
        return path
    try:
        return load(path)
    except ProfileError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


profile_option.__name__ = "profile"


def profile_name(profile: Profile | str | None) -> str | None:
    """How a report names the ``--profile`` it was given (its file, or ``strict``). O(1)."""
    if isinstance(profile, Profile):
        return profile.source
    return profile
