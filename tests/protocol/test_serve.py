"""The reference's stdio server answers every line with a schema-valid answer (R-ERR-1,
R-ERR-3): wrong field types, unknown handles, ``leave`` on a plain snapshot, a missing
id, garbage -- checked case by case and by a Hypothesis-driven protocol fuzz."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kachedb_radix import reference
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.protocol.messages import REQUEST_FIELDS, load_schema, request_problem
from kachedb_radix.spec.protocol.server import answer, serve

SCHEMA = load_schema()
RESPONSE = jsonschema.Draft202012Validator({"$ref": "#/$defs/response", "$defs": SCHEMA["$defs"]})


def _answers(lines: list[Any]) -> list[dict[str, Any]]:
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    out = io.StringIO()
    serve(TreeAdapter(reference.RadixTree, "reference"), io.StringIO(text), out)
    responses = [json.loads(line) for line in out.getvalue().splitlines()]
    for response in responses:
        RESPONSE.validate(response)
    return responses


def _kind(response: dict[str, Any]) -> str:
    kind: str = response["error"]["kind"]
    return kind


RESET = {"id": 1, "op": "reset", "num_blocks": 4, "block_size": 1}


@pytest.mark.parametrize(
    ("request_", "kind"),
    [
        ({"id": 2, "op": "release", "lease": True}, "protocol"),
        ({"id": 2, "op": "release", "lease": 1.0}, "protocol"),
        ({"id": 2, "op": "match", "tokens": [1], "namespace": None, "pin": 1}, "protocol"),
        ({"id": 2, "op": "insert", "tokens": [1], "namespace": None}, "protocol"),
        ({"id": 2, "op": "reset", "num_blocks": True, "block_size": 1}, "protocol"),
        ({"id": 2, "op": "leave", "snapshot": 9}, "invalid_argument"),
        ({"id": 2, "op": "snapshot_dump", "snapshot": 9}, "invalid_argument"),
        ({"id": 2, "op": "snapshot_match", "snapshot": 9, "tokens": [], "namespace": None}, None),
        ({"id": 2, "op": "release", "lease": 7}, "foreign_lease"),
        ({"id": 2, "op": "fly"}, "unsupported"),
        ({"id": 2, "op": 3}, "protocol"),
    ],
)
def test_wrong_types_and_unknown_handles_get_typed_answers(
    request_: dict[str, Any], kind: str | None
) -> None:
    """R-ERR-1, R-PIN-5: every malformed request gets a schema-valid error, never a crash."""
    responses = _answers([RESET, request_])
    assert responses[0] == {"id": 1, "ok": None}
    assert responses[1]["id"] == 2
    assert _kind(responses[1]) == (kind or "invalid_argument")


def test_leave_on_a_plain_snapshot_is_an_invalid_argument() -> None:
    """R-EPOCH-4, R-ERR-1: a plain snapshot has no epoch; leaving it used to kill the server."""
    responses = _answers(
        [
            RESET,
            {"id": 2, "op": "snapshot"},
            {"id": 3, "op": "leave", "snapshot": 1},
            {"id": 4, "op": "reader"},
            {"id": 5, "op": "leave", "snapshot": 2},
            {"id": 6, "op": "leave", "snapshot": 2},
        ]
    )
    assert responses[1]["ok"]["snapshot"] == 1
    assert _kind(responses[2]) == "invalid_argument"
    assert responses[4] == {"id": 5, "ok": None}
    assert _kind(responses[5]) == "reader_left"


def test_requests_without_a_valid_id_are_answered_with_id_null() -> None:
    responses = _answers(
        [{"op": "stats"}, {"id": True, "op": "stats"}, {"id": -1, "op": "stats"}, "nope", "[1]"]
    )
    assert [response["id"] for response in responses] == [None] * 5
    assert {_kind(response) for response in responses} == {"protocol"}


def test_a_crash_inside_the_implementation_is_an_internal_answer() -> None:
    class Broken(reference.RadixTree):
        def stats(self) -> Any:
            raise ZeroDivisionError("boom")

    out = io.StringIO()
    serve(
        TreeAdapter(Broken, "broken"),
        io.StringIO(json.dumps(RESET) + '\n{"id":2,"op":"stats"}\n'),
        out,
    )
    second = json.loads(out.getvalue().splitlines()[1])
    RESPONSE.validate(second)
    assert (
        second["error"]["kind"] == "internal" and "ZeroDivisionError" in second["error"]["message"]
    )


def test_request_problem_mirrors_the_schema() -> None:
    """Every request the schema accepts passes request_problem, and the reverse."""
    request = jsonschema.Draft202012Validator({"$ref": "#/$defs/request", "$defs": SCHEMA["$defs"]})
    assert set(REQUEST_FIELDS) == set(SCHEMA["$defs"]["traceStep"]["properties"]["op"]["enum"]) | {
        "hello"
    }
    good = {"id": 0, "op": "hello", "protocol": 3}
    assert request_problem(good) is None and request.is_valid(good)
    assert request_problem({"id": 0, "op": "hello"}) == (
        "protocol",
        "request 'hello' lacks field 'protocol'",
    )


# ---------------------------------------------------------------------- the fuzz

JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 2**33),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=4),
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
GOOD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "int0": st.integers(0, 5),
    "int1": st.integers(1, 6),
    "bool": st.booleans(),
    "any": st.one_of(st.lists(st.integers(0, 3), max_size=6), JSON_VALUES, st.none()),
}


@st.composite
def requests(draw: st.DrawFn) -> Any:
    """Mostly well-formed requests (so the server reaches deep states), some broken."""
    shape = draw(st.integers(0, 9))
    if shape == 0:
        return draw(st.text(max_size=20))  # garbage, possibly not JSON at all
    if shape == 1:
        return draw(JSON_VALUES)  # JSON, possibly not an object
    op = draw(st.sampled_from(sorted(REQUEST_FIELDS)))
    message: dict[str, Any] = {"op": op}
    if draw(st.integers(0, 19)):
        message["id"] = draw(st.integers(0, 50))
    else:
        message["id"] = draw(JSON_VALUES)
    for name, kind in REQUEST_FIELDS[op].items():
        choice = draw(st.integers(0, 9))
        if choice == 0:
            continue  # a missing field
        message[name] = draw(JSON_VALUES if choice == 1 else GOOD_VALUES[kind])
    if draw(st.integers(0, 9)) == 0:
        message[draw(st.text(max_size=3))] = draw(JSON_VALUES)
    return message


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(requests(), min_size=1, max_size=25))
def test_protocol_fuzz_every_line_gets_one_schema_valid_answer(lines: list[Any]) -> None:
    """R-ERR-3: random and malformed lines never crash the server; each non-blank line
    gets exactly one answer, carrying the request's id when it had a valid one."""
    texts = [line if isinstance(line, str) else json.dumps(line) for line in lines]
    texts = [text.replace("\n", " ") for text in texts]
    sent = [text for text in texts if text.strip()]
    responses = _answers([RESET, *sent])
    assert len(responses) == len(sent) + 1
    for text, response in zip(sent, responses[1:], strict=True):
        try:
            message = json.loads(text)
        except ValueError:
            message = None
        valid_id = (
            isinstance(message, dict)
            and isinstance(message.get("id"), int)
            and not isinstance(message.get("id"), bool)
            and message["id"] >= 0
        )
        assert response["id"] == (message["id"] if valid_id and isinstance(message, dict) else None)


def test_the_server_process_never_hangs_on_garbage() -> None:
    """Bytes that are not UTF-8, absurd nesting, huge numbers and half lines: one answer
    per line and a clean exit at end of input."""
    lines = [
        b"\xff\xfe not utf-8",
        b"[" * 5000 + b"]" * 5000,
        b'{"id": 1, "op": "evict", "count": ' + b"9" * 5000 + b"}",
        b'{"id": 2, "op": "reset", "num_blocks": 3, "block_size": 1}',
        b'{"id": 3, "op": "insert", "tokens": [1, 2, 3], "namespace": null, "pin": true}',
        b'{"id": 4, "op": "release", "lease": 1}',
        b'{"id": 5, "op": "stats"',
    ]
    process = subprocess.run(
        [sys.executable, "-m", "kachedb_radix.spec.protocol.server"],
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        timeout=60,
        check=True,
    )
    responses = [json.loads(line) for line in process.stdout.decode().splitlines()]
    assert len(responses) == len(lines)
    for response in responses:
        RESPONSE.validate(response)
    assert [response.get("ok", "error") for response in responses[3:6]] == [
        None,
        {
            "length": 3,
            "blocks": [0, 1, 2],
            "reused": 0,
            "allocated": [0, 1, 2],
            "evicted": [],
            "lease": 1,
        },
        None,
    ]
    assert responses[0]["id"] is None and responses[-1]["id"] is None


def test_answer_is_usable_on_its_own() -> None:
    adapter = TreeAdapter(reference.RadixTree, "reference")
    assert answer(adapter, json.dumps(RESET)) == {"id": 1, "ok": None}


def test_every_kind_the_reference_can_emit_is_in_r_err_3_and_the_schema() -> None:
    """R-ERR-3: every error class the reference can raise (each leaf of RadixError's
    hierarchy) has its kind in R-ERR-3's list and the schema's errorKind enum, and so
    does every kind the server adds; nothing is listed that nothing emits."""
    from kachedb_radix.reference.errors import ERROR_KINDS, RadixError
    from kachedb_radix.spec.conform.rules import SPEC_PATH
    from kachedb_radix.spec.protocol.messages import PROTOCOL_KINDS, load_schema
    from kachedb_radix.spec.protocol.server import SERVER_KINDS

    def leaves(cls: type[RadixError]) -> set[type[RadixError]]:
        below = cls.__subclasses__()
        return {cls} if not below else set().union(*(leaves(sub) for sub in below))

    emitted = {cls.kind for cls in leaves(RadixError)}
    assert emitted == set(ERROR_KINDS)
    schema_kinds = set(load_schema()["$defs"]["errorKind"]["enum"])
    assert schema_kinds == set(SERVER_KINDS) == emitted | set(PROTOCOL_KINDS)
    text = SPEC_PATH.read_text(encoding="utf-8")
    rule = text[text.index("### R-ERR-3") : text.index("**Why.**", text.index("### R-ERR-3"))]
    assert {kind for kind in schema_kinds if f"`{kind}`" in rule} == schema_kinds
