"""Resolve a target name given on the command line into a :class:`Candidate`.

* ``reference`` -- the pure-Python reference (checking it against itself is a
  smoke test of the kit);
* ``accel`` -- the C twin, imported only when asked for;
* ``module:attribute`` -- any Python object: a tree class with the reference API
  (``Tree(num_blocks, block_size)``; wrapped by :class:`TreeAdapter`), an object
  that already speaks the plain-data :class:`Candidate` protocol (used directly), a
  class of such objects (instantiated with no arguments), or a zero-argument
  function returning either;
* a command line (``--cmd "program args"``) -- a program speaking the stdio
  protocol (:class:`spec.stdio.StdioCandidate`).
"""

from __future__ import annotations

import importlib
import shlex
from typing import Any

from .adapter import TreeAdapter
from .candidate import Candidate
from .stdio import DEFAULT_TIMEOUT, StdioCandidate

_TREE_METHODS = ("match", "insert", "release", "evict", "dump")
_CANDIDATE_METHODS = ("reset", "match", "insert", "release", "evict", "dump", "levels")


class TargetError(ValueError):
    """A target that cannot be loaded; the message says why and what to do."""


def resolve(target: str) -> Candidate:
    """The in-process candidate named by ``target``. Cost: an import.

    Raises:
        TargetError: unknown name, import failure, or an object of neither shape.
    """
    if target == "reference":
        import reference

        return TreeAdapter(reference.RadixTree, "reference")
    if target == "accel":
        try:
            import accel
        except ImportError as exc:
            raise TargetError(
                f"target accel: the C twin cannot be imported ({exc}); build it with "
                "`pip install -e .` (needs a C compiler), or check another target"
            ) from None
        return TreeAdapter(accel.RadixTree, "accel")
    if ":" not in target:
        raise TargetError(
            f"unknown target {target!r}: use reference, accel, module:attribute, "
            "or --cmd 'program args'"
        )
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
    return wrap(found, target)


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


def command(line: str, *, timeout: float = DEFAULT_TIMEOUT) -> StdioCandidate:
    """Start the program ``line`` (split like a shell would) as a stdio candidate.

    Raises:
        TargetError: the line is empty or cannot be split.
        CandidateFailure: the program does not start or fails its handshake.
    """
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise TargetError(f"--cmd {line!r}: {exc}") from None
    if not argv:
        raise TargetError("--cmd needs a program")
    return StdioCandidate(argv, timeout=timeout)


def _has(found: Any, names: tuple[str, ...]) -> bool:
    return all(hasattr(found, name) for name in names)
