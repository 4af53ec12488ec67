"""The JSON-lines stdio protocol: versions, message shapes, encoding and answer checks.

One JSON object per line, UTF-8, in both directions (full text: ``SPEC.md``, "The
stdio protocol"; machine-readable schema: ``schema.json`` beside this file). The kit
writes requests ``{"id": n, "op": ..., ...arguments}``; the candidate answers each, in
order, with ``{"id": n, "ok": answer}`` or ``{"id": n, "error": {"kind": k,
"message": m}}``. The first request is always ``hello``. Every other operation, its
fields and its answer's fields come from the kit's one table of operations
(:mod:`kachedb_radix.spec.conform.operations`).

Versions (a change to the protocol bumps it; the kit drives every version below):

* 1 -- the core levels;
* 2 -- the ``snapshots`` level (``snapshot``, ``reader``, ``leave``,
  ``snapshot_match``, ``snapshot_dump``, ``reclaim``, four stats fields) and dump
  format 2 (a ``quarantine`` field);
* 3 -- ``drop`` (a reader forgotten without leaving, R-EPOCH-5), and capabilities:
  ``hello`` answers the list of ``operations`` the program supports. An optional
  operation it leaves out leaves the rules only it exercises "not exercised
  (unsupported)"; one its levels cannot be judged without is a failed handshake;
* 4 -- the ``policies`` level: a policy at ``reset``, a retention at ``insert``;
* 5 -- the ``events`` level: the block hashes at ``reset`` (``events``), and
  ``events``, the KV event batches since the last one, as base64 msgpack payloads;
* 6 -- the ``tiers`` level: the slower tiers at ``reset`` (``tiers``), ``lookup``,
  ``restore`` and ``tier_evict``, and with tiers the moves in the answers of
  ``insert`` and ``evict`` and each tier in ``dump`` and ``stats``.

A program speaking version 1 or 2 is driven at the levels it declares with the
operations of its version (:func:`kachedb_radix.spec.conform.operations.operations_of`);
its format-1 dumps are upgraded by :func:`upgrade_dump`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..conform.levels import SNAPSHOTS
from ..conform.operations import BY_NAME, LATEST, LEASE, OPERATIONS, SNAPSHOT

#: The protocol version this kit speaks: the newest an operation or argument of the
#: table was introduced in (each row says its own).
PROTOCOL_VERSION = LATEST

#: Versions a candidate may answer ``hello`` with: every one up to the kit's.
SUPPORTED_PROTOCOLS: tuple[int, ...] = tuple(range(1, PROTOCOL_VERSION + 1))

#: Error kinds of the protocol itself, besides the rules' (R-ERR-3): a malformed
#: request, an unknown operation, and a server that failed to carry out a valid
#: request for a reason no rule names (a bug in it).
PROTOCOL_KINDS: frozenset[str] = frozenset({"protocol", "unsupported", "internal"})

#: Where the JSON Schema of every message lives.
SCHEMA_PATH = Path(__file__).with_name("schema.json")

#: The fields of ``hello``'s answer: required, and (version 3) the capabilities.
HELLO_FIELDS: tuple[str, ...] = ("protocol", "name", "levels", "block_sizes")

#: Answer fields required per operation (``None``: the answer is JSON null).
ANSWER_FIELDS: dict[str, tuple[str, ...] | None] = {
    "hello": HELLO_FIELDS,
    **{op.name: op.answer for op in OPERATIONS},
}

#: Answer fields required besides :data:`ANSWER_FIELDS` of a version-2 candidate
#: (the dump's quarantine) and of one declaring the ``snapshots`` level (the stats'
#: reader and quarantine counters): the rows' ``answer_from`` and ``level_fields``.
V2_FIELDS: dict[str, tuple[str, ...]] = {
    op.name: tuple(name for name, since in op.answer_from if since <= 2)
    for op in OPERATIONS
    if op.answer_from
}
SNAPSHOT_FIELDS: dict[str, tuple[str, ...]] = {
    op.name: op.specified(SNAPSHOTS) for op in OPERATIONS if op.specified(SNAPSHOTS)
}

#: Typed request fields per operation, as the schema's ``#/$defs/request`` states them:
#: ``"int0"`` an integer >= 0, ``"int1"`` an integer >= 1, ``"bool"`` a boolean,
#: ``"any"`` any JSON value (the kit sends malformed arguments on purpose, R-TOK-2).
#: A request carries every argument (a trace step may leave some out, a request not),
#: except those introduced after version 3 (:data:`OPTIONAL_FIELDS`).
REQUEST_FIELDS: dict[str, dict[str, str]] = {
    "hello": {"protocol": "int1"},
    **{op.name: {argument.name: argument.wire for argument in op.arguments} for op in OPERATIONS},
}

#: Request fields a request may leave out, meaning their default: the arguments
#: protocol 4 added (the policy at ``reset``, the retention at ``insert``, R-POL-*),
#: protocol 5 (the block hashes at ``reset``, R-EVENT-2) and protocol 6 (the tiers at
#: ``reset``, R-TIER-1), so a client of version 3 still speaks to a server of version 6.
OPTIONAL_FIELDS: dict[str, dict[str, Any]] = {
    op.name: {argument.name: argument.default for argument in op.arguments if argument.since > 3}
    for op in OPERATIONS
}


class ProtocolError(ValueError):
    """A line that is not a well-formed message."""


def load_schema() -> dict[str, Any]:
    """The protocol's JSON Schema (draft 2020-12). O(size of the file)."""
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


def encode(message: dict[str, Any]) -> str:
    """One message as one line (no trailing newline). O(size).

    Raises:
        ValueError: the message holds a float NaN or infinity (not JSON).
    """
    return json.dumps(message, separators=(",", ":"), allow_nan=False)


def decode(line: str) -> dict[str, Any]:
    """Parse one line into a message object. O(size).

    Raises:
        ProtocolError: the line is not JSON, or not a JSON object.
    """
    try:
        message = json.loads(line)  # a trailing newline is whitespace to JSON
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise ProtocolError(f"not JSON ({exc}): {_clip(line.rstrip())}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"not a JSON object: {_clip(line.rstrip())}")
    return message


def request_problem(message: dict[str, Any]) -> tuple[str, str] | None:
    """What is wrong with ``message`` as a request, as ``(kind, text)``; None if well formed.

    The kind is ``"protocol"`` for a request the schema rejects (no integer ``id``,
    no string ``op``, a required field missing or of the wrong JSON type: ``true``
    and ``1.0`` are not integers, ``1`` is not a boolean) and ``"unsupported"`` for
    an ``op`` this protocol does not define. Argument *values* are the
    implementation's to judge (R-ERR-1). O(number of fields).
    """
    request_id = message.get("id")
    if not _is_int(request_id, 0):
        return "protocol", f"a request needs an integer id >= 0, got {_clip(repr(request_id))}"
    op = message.get("op")
    if not isinstance(op, str):
        return "protocol", f"a request needs a string op, got {_clip(repr(op))}"
    fields = REQUEST_FIELDS.get(op)
    if fields is None:
        return "unsupported", f"unknown operation {_clip(repr(op))}"
    for name, shape in fields.items():
        if name not in message:
            if name in OPTIONAL_FIELDS.get(op, {}):
                continue
            return "protocol", f"request {op!r} lacks field {name!r}"
        value = message[name]
        if shape == "bool" and not isinstance(value, bool):
            return "protocol", f"{op} field {name!r} must be a boolean, got {_clip(repr(value))}"
        if shape in ("int0", "int1") and not _is_int(value, int(shape[-1])):
            wanted = "an integer >= " + shape[-1]
            return "protocol", f"{op} field {name!r} must be {wanted}, got {_clip(repr(value))}"
    return None


def _is_int(value: object, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def upgrade_dump(dump: Any) -> Any:
    """A protocol-1 program's format-1 dump as format 2: with an empty quarantine.

    Version-1 programs have no readers, so nothing is ever quarantined. Anything
    else is returned as it is. O(1).
    """
    if isinstance(dump, dict) and dump.get("format") == 1 and "quarantine" not in dump:
        return {**dump, "format": 2, "quarantine": []}
    return dump


def response_problem(
    request_id: int, op: str, message: dict[str, Any], extra: tuple[str, ...] = ()
) -> str | None:
    """What is wrong with ``message`` as the answer to request ``request_id`` (``op``).

    Returns None when it is well formed. Checks the id, that exactly one of ``ok``
    and ``error`` is present, the error's ``kind``, and the answer's required fields
    (those of :data:`ANSWER_FIELDS` and ``extra``) and their JSON types where a
    wrong type would break the kit. O(size).
    """
    if message.get("id") != request_id:
        return f"answer carries id {message.get('id')!r}, expected {request_id}"
    if ("ok" in message) == ("error" in message):
        return 'an answer needs exactly one of "ok" and "error"'
    if "error" in message:
        error = message["error"]
        if not isinstance(error, dict) or not isinstance(error.get("kind"), str):
            return 'an error must be an object with a string "kind"'
        return None
    answer = message["ok"]
    fields = ANSWER_FIELDS.get(op)
    if fields is None:
        return None if answer is None else f"{op} answers null, got {_clip(json.dumps(answer))}"
    if not isinstance(answer, dict):
        return f"{op} answers an object, got {_clip(json.dumps(answer))}"
    missing = [name for name in (*fields, *extra) if name not in answer]
    if missing:
        return f"{op} answer lacks {', '.join(missing)}"
    row = BY_NAME.get(op)  # None for hello, the protocol's own
    issues = None if row is None else row.issues
    if issues == LEASE:
        lease = answer[LEASE]
        if lease is not None and (isinstance(lease, bool) or not isinstance(lease, int)):
            return f"lease must be a positive int or null, got {lease!r}"
        if lease is not None and lease < 1:
            return f"lease ids are positive ints, got {lease!r}"
    if issues == SNAPSHOT:
        snapshot = answer[SNAPSHOT]
        if isinstance(snapshot, bool) or not isinstance(snapshot, int) or snapshot < 1:
            return f"snapshot ids are positive ints, got {snapshot!r}"
    return None


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"
