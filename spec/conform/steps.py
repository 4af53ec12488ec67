"""Trace steps: one operation as plain JSON data, and how to apply it to a candidate.

A *step* is a JSON object with an ``"op"`` and that operation's arguments; a
*trace* is a list of steps, written one per line (JSON lines). The same shape is
used by the golden vectors, by the disagreement reports and by ``replay``::

    {"op": "reset", "num_blocks": 6, "block_size": 2}
    {"op": "insert", "tokens": [0, 1, 0, 0, 1], "namespace": null, "pin": true}
    {"op": "release", "lease": 1}
    {"op": "evict", "count": 2}
    {"op": "dump"}
    {"op": "reader"}
    {"op": "snapshot_match", "snapshot": 1, "tokens": [0, 1], "namespace": null}
    {"op": "leave", "snapshot": 1}
    {"op": "reader"}
    {"op": "drop", "snapshot": 2}

Leases are named in traces by *handle*: the n-th lease issued since the last
``reset`` is handle n, whatever id the implementation chose; handle 0 is a lease the
tree never issued. Snapshots and readers are named the same way, by one handle
sequence of their own: the n-th ``snapshot`` or ``reader`` since the reset is
snapshot handle n. An *outcome* is ``{"ok": answer}`` or ``{"error": kind}``; a
recorded step may carry the reference's outcome as ``"expect"``.
"""

from __future__ import annotations

import json
import marshal
from typing import Any

from .candidate import Candidate, CandidateError, CandidateFailure
from .levels import EVICTION, SNAPSHOTS
from .operations import BY_NAME, LEASE, OPERATIONS, REQUIRED, SNAPSHOT, VIEWS, Argument, Operation

Step = dict[str, Any]
Outcome = dict[str, Any]

#: Every operation a step may name (the table's, :mod:`kachedb_radix.spec.conform.operations`).
OPS: tuple[str, ...] = tuple(op.name for op in OPERATIONS)

#: Operations of the ``snapshots`` level.
SNAPSHOT_OPS: frozenset[str] = frozenset(op.name for op in OPERATIONS if op.level == SNAPSHOTS)

#: The reads the kit issues after every step, in the order it compares them (the dump
#: first: a difference in the shape is the one to name): the table's views.
READ_OPS: tuple[str, ...] = tuple(op.name for op in VIEWS)

#: Keys a step may carry besides its arguments (ignored when applying it).
META_KEYS = frozenset({"op", "expect", "actual", "trace", "levels", "note", "batch"})


class LeaseBook:
    """Translates trace handles (1, 2, ... per reset) to one candidate's ids: of
    leases, and of snapshots and readers."""

    __slots__ = ("_ids", "_snapshots")

    def __init__(self) -> None:
        self._ids: list[int] = []
        self._snapshots: list[int] = []

    def clear(self) -> None:
        """Forget every lease and snapshot (on reset). O(1)."""
        self._ids = []
        self._snapshots = []

    def file(self, lease_id: int | None) -> int | None:
        """File a lease id just issued; return its handle (None stays None). O(1)."""
        if lease_id is None:
            return None
        self._ids.append(lease_id)
        return len(self._ids)

    def lease_id(self, handle: int) -> int:
        """The candidate's id for ``handle``; 0 for handle 0 or one never issued. O(1)."""
        if 1 <= handle <= len(self._ids):
            return self._ids[handle - 1]
        return 0

    @property
    def issued(self) -> int:
        """Handles issued since the last reset. O(1)."""
        return len(self._ids)

    def file_snapshot(self, snapshot_id: int) -> int:
        """File a snapshot (or reader) id just issued; return its handle. O(1)."""
        self._snapshots.append(snapshot_id)
        return len(self._snapshots)

    def snapshot_id(self, handle: int) -> int:
        """The candidate's id for snapshot ``handle``; 0 for one never issued. O(1)."""
        if 1 <= handle <= len(self._snapshots):
            return self._snapshots[handle - 1]
        return 0

    @property
    def snapshots(self) -> int:
        """Snapshot handles issued since the last reset. O(1)."""
        return len(self._snapshots)


class StepError(ValueError):
    """A step that is no call of an operation: not an object, an unknown ``op``, or a
    required argument missing. The message names what is wrong."""


def check_step(step: object) -> Operation:
    """The row of the operation ``step`` calls, once the step is one: an object naming
    a known operation and giving every argument its row requires. O(arguments).

    Raises:
        StepError: it is not one.
    """
    if not isinstance(step, dict):
        raise StepError(f"a step is a JSON object, got {type(step).__name__}")
    name = step.get("op")
    row = BY_NAME.get(name) if isinstance(name, str) else None
    if row is None:
        raise StepError(f"unknown operation {name!r}; the operations are {list(OPS)}")
    missing = [
        argument.name
        for argument in row.arguments
        if argument.default is REQUIRED and argument.name not in step
    ]
    if missing:
        raise StepError(f"{row.name} lacks {', '.join(missing)}")
    return row


def apply_step(
    candidate: Candidate, step: Step, book: LeaseBook, *, foreign: bool = False
) -> Outcome:
    """Apply one step to ``candidate`` and return its outcome. Cost: one call.

    The operation's row of the table says which arguments to pass, in which order,
    what a step may leave out, and which arguments and answer fields are handles:
    handles in the step become the candidate's ids (``book``), ids it issues become
    the next handles. With ``foreign`` (the candidate under test, not the kit's own
    oracle), an exception of the call other than a ``CandidateError`` is the candidate
    breaking the Candidate protocol: a ``CandidateFailure``.

    Raises:
        StepError: the step names an unknown operation, or lacks an argument it must give.
        CandidateFailure: the candidate could not answer (hang, crash, bad data).
    """
    op = check_step(step)
    arguments = [_argument(step, argument, book) for argument in op.arguments]
    try:
        answer = getattr(candidate, op.name)(*arguments)
    except CandidateError as exc:
        return {"error": exc.kind}
    except Exception as exc:
        if not foreign:
            raise
        raise CandidateFailure(
            f"{op.name}: raised {type(exc).__name__} ({exc}), not a CandidateError: "
            "a candidate answers or refuses with a kind"
        ) from exc
    if op.resets:
        book.clear()
    if answer is None:
        return {"ok": None}
    answer = dict(answer)
    if op.issues == LEASE:
        answer[LEASE] = book.file(answer[LEASE])
    elif op.issues == SNAPSHOT:
        answer[SNAPSHOT] = book.file_snapshot(answer[SNAPSHOT])
    return {"ok": answer}


def resets(step: Step) -> bool:
    """Whether ``step`` starts afresh (a ``reset``: its row says so); False for anything
    that names no operation. O(1)."""
    name = step.get("op") if isinstance(step, dict) else None
    row = BY_NAME.get(name) if isinstance(name, str) else None
    return row is not None and row.resets


def _argument(step: Step, argument: Argument, book: LeaseBook) -> Any:
    """One argument of ``step`` as the candidate takes it."""
    value = step[argument.name] if argument.default is REQUIRED else step.get(
        argument.name, argument.default
    )
    if argument.handle == LEASE:
        return book.lease_id(value)
    if argument.handle == SNAPSHOT:
        return book.snapshot_id(value)
    return bool(value) if argument.wire == "bool" else value


def normalise(
    op: str, outcome: Outcome, levels: frozenset[str], *, recency: bool = True
) -> Outcome:
    """What of ``outcome`` the declared ``levels`` specify, as ``op``'s row says.
    O(size of the outcome).

    Fields only a level specifies (the row's ``level_fields``: the stats' version,
    reader and quarantine counters of the ``snapshots`` level, R-SNAP-1, R-EPOCH-3) are
    removed without that level; the recency fields (the row's ``recency``: the logical
    clock and the stamps, R-LRU-*) without the ``eviction`` level, or when ``recency``
    is False (a profile's ``recency = "not_compared"``). With tiers each slower tier's
    answer is reduced the same way (the row's ``per_tier``, R-TIER-1).
    """
    row = BY_NAME.get(op)
    if row is None or "ok" not in outcome or not isinstance(outcome["ok"], dict):
        return outcome
    unspecified = [
        field for level, fields in row.level_fields if level not in levels for field in fields
    ]
    if EVICTION not in levels or not recency:
        unspecified += row.recency
    if not unspecified:
        return {"ok": dict(outcome["ok"])}
    answer = _without(outcome["ok"], unspecified)
    if row.per_tier and isinstance(answer.get("tiers"), dict):
        answer["tiers"] = {
            tier: _without(part, unspecified) if isinstance(part, dict) else part
            for tier, part in answer["tiers"].items()
        }
    return {"ok": answer}


def _without(answer: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    """``answer`` without ``fields``; ``stamps`` also from every edge of its shape. O(size)."""
    stripped = {key: value for key, value in answer.items() if key not in fields}
    if "stamps" in fields and isinstance(stripped.get("namespaces"), list):
        stripped["namespaces"] = [_without_stamps(space) for space in stripped["namespaces"]]
    return stripped


def _without_stamps(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    stripped = {key: value for key, value in node.items() if key != "stamps"}
    if isinstance(stripped.get("children"), list):
        stripped["children"] = [_without_stamps(child) for child in stripped["children"]]
    return stripped


def describe(step: Step) -> str:
    """A one-line human description of a step, e.g. ``insert [0, 1, 0] ns=None pin``."""
    op = step["op"]
    args = [f"{key}={value!r}" for key, value in step.items() if key not in META_KEYS]
    return f"{op}({', '.join(args)})"


def bare(step: Step) -> Step:
    """The step without recorded outcomes or metadata. O(size)."""
    return {key: value for key, value in step.items() if key not in META_KEYS or key == "op"}


def encoded(value: Any) -> bytes | None:
    """``value`` written type for type (``marshal``'s format 2, which shares nothing
    between equal objects, so equal plain data always gives equal bytes), or None when
    it holds something marshal cannot write. O(size), at C speed."""
    try:
        return marshal.dumps(value, 2)
    except ValueError:
        return None


def strictly_equal(left: Any, right: Any, left_encoded: bytes | None = None) -> bool:
    """Whether two answers are the same data type for type: ``1``, ``1.0`` and ``True``
    differ, as do a list and a tuple, and two objects with their keys in another order
    (a false "differ" only costs the field-by-field comparison that follows it).
    ``left_encoded`` is :func:`encoded` of ``left`` when already known. O(size), at C
    speed."""
    mine = left_encoded if left_encoded is not None else encoded(left)
    return mine is not None and mine == encoded(right)


def as_json(outcome: Outcome, op: str) -> Outcome:
    """``outcome`` as JSON carries it: its answer written as JSON text and read back
    (tuples become lists), or, for an answer that is not JSON data (a set, an object),
    the refusal ``unexpected:<op>``, so a finding names it rather than the kit failing.
    O(size)."""
    if "ok" not in outcome:
        return outcome
    try:
        return {"ok": json.loads(json.dumps(outcome["ok"]))}
    except (TypeError, ValueError):
        return {"error": f"unexpected:{op}"}
