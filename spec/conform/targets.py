"""Resolve a target name into something the kit can check: :func:`resolve`, :func:`command`.

A :class:`Target` is a name, a way to open a fresh
:class:`~kachedb_radix.spec.conform.candidate.Candidate` (again after one failed: a program that
died is restarted) and the deviation profile to check it under
(:mod:`kachedb_radix.spec.conform.profile`). Names:

* ``reference`` -- the pure-Python reference (checking it against itself is a
  smoke test of the kit);
* ``accel`` -- the C twin, imported only when asked for;
* a peer of :mod:`kachedb_radix.spec.peers` (``sglang``) -- a real cache behind an adapter, with
  the profile it ships;
* ``module:attribute`` -- any Python object: a tree class with the reference API
  (``Tree(num_blocks, block_size)``; wrapped by :class:`TreeAdapter`), an object
  that already speaks the plain-data :class:`Candidate` protocol (used directly), a
  class of such objects (instantiated with no arguments), or a zero-argument
  function returning either;
* a command line (:func:`command`, ``--cmd "program args"``) -- a program speaking
  the stdio protocol (:class:`kachedb_radix.spec.protocol.client.StdioCandidate`).

``reference`` and ``accel`` are picked where every twin is picked,
:mod:`kachedb_radix.spec.twins` (no silent fallback: asking for ``accel`` when its C
extension did not build fails, saying so). ``gate`` builds its
timed trees from :func:`resolve` too (:mod:`kachedb_radix.spec.gate.trees`).

Both functions are plain, for other tools too (``kachedb-radix explain`` resolves
targets and profiles the way ``conform`` does)::

    target = resolve("sglang")              # its shipped profile
    target = resolve("accel", profile="my.toml", timeout=5.0)
    candidate = target.open()
"""

from __future__ import annotations

import importlib
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..protocol.client import DEFAULT_STARTUP_TIMEOUT, DEFAULT_TIMEOUT, StdioCandidate
from ..protocol.timeout import TimedCandidate
from ..twins import PURE_SWITCH as PURE_SWITCH
from ..twins import TWIN_NAMES, TwinUnavailable, twin_class
from .adapter import TreeAdapter
from .candidate import Candidate
from .profile import STRICT, Profile, load

_TREE_METHODS = ("match", "insert", "release", "evict", "dump")
_CANDIDATE_METHODS = ("reset", "match", "insert", "release", "evict", "dump", "levels")


class TargetError(ValueError):
    """A target that cannot be loaded; the message says why and what to do."""


@dataclass(frozen=True)
class Target:
    """A resolved target.

    Attributes:
        name: the name it was resolved from.
        open: makes a fresh candidate (for a program: starts it).
        profile: the deviation profile to check it under.
    """

    name: str
    open: Callable[[], Candidate]
    profile: Profile = STRICT


ProfileSpec = Profile | str | Path | None


def resolve(name: str, *, profile: ProfileSpec = None, timeout: float | None = None) -> Target:
    """The in-process target named ``name`` (see the module docstring). Cost: an import.

    ``profile`` is a :class:`Profile`, a path to a TOML profile, ``"strict"`` (no
    deviations), or None for the target's own (a peer's shipped profile; otherwise
    the strict spec). With
    ``timeout``, each call of the candidate must answer within that many seconds
    (:mod:`kachedb_radix.spec.protocol.timeout`).

    Raises:
        TargetError: unknown name, import failure, or an object of neither shape.
        ProfileError: the profile file is not a valid profile.
    """
    opener, shipped = _opener(name)
    chosen = load_profile(profile) if profile is not None else shipped
    if timeout is not None:
        inner = opener

        def opener() -> Candidate:
            return TimedCandidate(inner(), timeout)

    return Target(name, opener, chosen)


def load_profile(profile: ProfileSpec) -> Profile:
    """``profile`` as a :class:`Profile`: itself, the file it names, or the strict spec
    (None or ``"strict"``).

    Raises:
        ProfileError: the file is not a valid profile.
    """
    if profile is None or str(profile) == "strict":
        return STRICT
    if isinstance(profile, Profile):
        return profile
    return load(profile)


def _opener(name: str) -> tuple[Callable[[], Candidate], Profile]:
    from .. import peers

    if name in TWIN_NAMES:
        try:
            tree, tiered = twin_class(name, "RadixTree"), twin_class(name, "TieredTree")
        except TwinUnavailable as exc:
            raise TargetError(f"target {name}: {exc}, or check another target") from None
        return (lambda: TreeAdapter(tree, name, tier_factory=tiered)), STRICT
    if name in peers.PEERS:
        peer = peers.PEERS[name]
        try:
            factory = peer.factory()
        except ImportError as exc:
            raise TargetError(f"target {name}: {exc}") from None
        return factory, load(peer.profile)
    if ":" not in name:
        raise TargetError(
            f"unknown target {name!r}: use reference, accel, "
            f"{', '.join(peers.PEERS)}, module:attribute, or --cmd 'program args'"
        )
    found = import_object(name)
    wrap(found, name)  # fail now, not at the first open
    return (lambda: wrap(found, name)), STRICT


def import_object(target: str) -> Any:
    """The object ``module:attribute`` names (dots in the attribute walk into it).
    Cost: an import.

    Raises:
        TargetError: the module does not import, or has no such attribute.
    """
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TargetError(f"target {target}: cannot import {module_name!r} ({exc})") from None
    found: Any = module
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise TargetError(f"target {target}: {module_name} has no {attribute!r}") from None
    return found


def wrap(found: Any, name: str) -> Candidate:
    """Turn a Python object into a candidate (see the module docstring).

    Raises:
        TargetError: the object has neither the tree API nor the candidate protocol.
    """
    if _has(found, _CANDIDATE_METHODS) and not isinstance(found, type):
        candidate: Candidate = found
        return candidate
    if isinstance(found, type):
        if _has(found, _TREE_METHODS) and not _has(found, ("reset",)):
            return TreeAdapter(found, name)
        if _has(found, _CANDIDATE_METHODS):
            return wrap(found(), name)
    elif callable(found):
        try:
            made = found()
        except TypeError as exc:
            raise TargetError(
                f"target {name}: {found!r} is not a zero-argument factory ({exc})"
            ) from None
        return wrap(made, name)
    raise TargetError(
        f"target {name}: {found!r} is neither a tree class with the reference API "
        f"(methods {', '.join(_TREE_METHODS)}) nor a plain-data candidate "
        "(see spec.candidate.Candidate)"
    )


def command(
    line: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    profile: ProfileSpec = None,
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
) -> Target:
    """The program ``line`` (split like a shell would) as a stdio target, ``timeout``
    seconds allowed per answer and ``startup_timeout`` for its start and ``hello``.

    Opening it starts the program and says ``hello`` (raising
    :class:`~kachedb_radix.spec.conform.candidate.CandidateFailure` when it does not start or fails
    the handshake); after a failure the kit opens it again.

    Raises:
        TargetError: the line is empty or cannot be split.
        ProfileError: the profile file is not a valid profile.
    """
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise TargetError(f"--cmd {line!r}: {exc}") from None
    if not argv:
        raise TargetError("--cmd needs a program")
    return Target(
        f"--cmd {line}",
        lambda: StdioCandidate(argv, timeout=timeout, startup_timeout=startup_timeout),
        load_profile(profile),
    )


def _has(found: Any, names: tuple[str, ...]) -> bool:
    return all(hasattr(found, name) for name in names)
