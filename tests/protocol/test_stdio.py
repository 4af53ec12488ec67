"""The stdio side of the kit: the reference served as a child process, the schema, and
clear diagnostics for programs that hang, die or answer malformed JSON."""

from __future__ import annotations

import io
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kachedb_radix import reference
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.candidate import CandidateError, CandidateFailure
from kachedb_radix.spec.conform.levels import parse_levels
from kachedb_radix.spec.conform.run import KitSettings, run_kit
from kachedb_radix.spec.protocol.client import StdioCandidate
from kachedb_radix.spec.protocol.messages import load_schema
from kachedb_radix.spec.protocol.server import serve
from kachedb_radix.spec.vectors import path_of
from tests.support.paths import ROOT

SERVE = [sys.executable, "-m", "kachedb_radix.spec.protocol.server"]
SCHEMA = load_schema()


def _validator(ref: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$ref": ref, "$defs": SCHEMA["$defs"]})


def test_schema_is_valid() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.slow
def test_whole_kit_through_the_stdio_server() -> None:
    candidate = StdioCandidate(SERVE)
    try:
        assert candidate.name == "reference"
        assert candidate.levels == parse_levels(
            ["core,pinning,eviction,namespaces,snapshots,policies,events,tiers"]
        )
        assert candidate.protocol == 7 and "drop" in candidate.operations
        assert "reset_prefix_cache" in candidate.operations  # protocol 7, optional
        assert {"events", "lookup", "restore", "tier_evict"} <= candidate.operations
        report = run_kit(candidate, kit=KitSettings(examples=40, budget=4_000))
    finally:
        candidate.close()
    assert report.passed, report.explain()


@pytest.mark.slow
def test_a_program_of_protocol_2_still_passes_without_drop() -> None:
    """An implementation written against protocol 2 (before ``drop`` and the list of
    operations) is driven with version 2's operations: it passes every level it
    declares, snapshots included, and the rule only ``drop`` exercises reads "not
    exercised" with the reason, instead of failing on ``unsupported``."""
    candidate = StdioCandidate([*SERVE, "--protocol", "2"])
    try:
        assert candidate.protocol == 2 and "drop" not in candidate.operations
        assert "snapshots" in candidate.levels
        report = run_kit(candidate, kit=KitSettings(examples=60, budget=3_000))
    finally:
        candidate.close()
    assert report.passed, report.explain()
    rows = {row.rule: row for row in report.table()}
    assert rows["R-EPOCH-5"].status == "not exercised"
    assert "does not offer drop" in rows["R-EPOCH-5"].reason
    assert rows["R-EPOCH-2"].status == "pass" and rows["R-SNAP-2"].status == "pass"
    current = StdioCandidate(SERVE)
    try:
        full = run_kit(current, kit=KitSettings(examples=60, budget=3_000))
    finally:
        current.close()
    assert {row.rule: row for row in full.table()}["R-EPOCH-5"].status == "pass"


def test_a_program_that_lists_too_few_operations_fails_its_handshake(tmp_path: Path) -> None:
    """Protocol 3: a program whose levels cannot be judged without an operation it does
    not list is refused at ``hello``, naming it; an unknown name is refused too."""
    for listed, message in ((["reset", "match"], "cannot be judged without"),
                            (["reset", "fly"], "operations must be a list of names")):  # fmt: skip
        body = (
            "hello = {'protocol': 3, 'name': 'few', 'levels': ['core'], 'block_sizes': None,"
            f" 'operations': {listed!r}}}\n"
        )
        with pytest.raises(CandidateFailure, match=message):
            StdioCandidate(_fake_hello(tmp_path, body))


def test_tiers_travel_over_the_stdio_protocol() -> None:
    """Protocol 6: the tiers at reset, lookup, restore and tier_evict, the moves in the
    answers, each tier in the dump (R-TIER-*), checked through the kit's own client."""
    candidate = StdioCandidate(SERVE)
    try:
        levels = frozenset({"core", "pinning", "eviction", "namespaces", "tiers"})
        report = run_kit(candidate, levels, KitSettings(examples=12, budget=1_500))
    finally:
        candidate.close()
    assert report.passed, report.explain()
    assert {"R-TIER-3", "R-TIER-5", "R-TIER-6", "R-TIER-8"} <= report.exercised


def test_declared_levels_limit_the_run() -> None:
    candidate = StdioCandidate([*SERVE, "--levels", "core"])
    try:
        report = run_kit(candidate, kit=KitSettings(examples=10))
    finally:
        candidate.close()
    assert report.passed and report.levels == ["core"]


@pytest.mark.parametrize("suite", ["full", "snapshots"])
def test_server_traffic_matches_the_schema(suite: str) -> None:
    """Every request of a vector file and every answer of the server validate."""
    requests: list[dict[str, Any]] = [{"id": 0, "op": "hello", "protocol": 3}]
    leases: list[int] = []
    snapshots: list[int] = []
    for number, line in enumerate(path_of(suite).read_text().splitlines()[:120], 1):
        step = json.loads(line)
        _validator("#/$defs/traceStep").validate(step)
        request = {
            key: value for key, value in step.items() if key not in ("expect", "trace", "levels")
        }
        request["id"] = number
        if request["op"] == "release":
            request["lease"] = leases[request["lease"] - 1] if request["lease"] else 0
        if "snapshot" in request:
            request["snapshot"] = snapshots[request["snapshot"] - 1]
        if request["op"] == "reset":
            leases, snapshots = [], []
        requests.append(request)
        answer = step["expect"].get("ok")
        if isinstance(answer, dict) and answer.get("lease"):
            leases.append(answer["lease"])
        if step["op"] in ("snapshot", "reader") and isinstance(answer, dict):
            snapshots.append(answer["snapshot"])
    out = io.StringIO()
    serve(
        TreeAdapter(reference.RadixTree, "reference"),
        io.StringIO("".join(json.dumps(request) + "\n" for request in requests)),
        out,
    )
    responses = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(responses) == len(requests)
    ops = set()
    for request, response in zip(requests, responses, strict=True):
        _validator("#/$defs/request").validate(request)
        _validator("#/$defs/response").validate(response)
        assert response["id"] == request["id"]
        if "ok" in response:
            _validator(f"#/$defs/answers/{request['op']}").validate(response["ok"])
            ops.add(request["op"])
    if suite == "snapshots":
        assert {"snapshot", "reader", "snapshot_match", "snapshot_dump", "reclaim"} <= ops


@pytest.mark.slow
def test_protocol_1_programs_still_run_at_the_old_levels(tmp_path: Path) -> None:
    """A program written for protocol 1 (format-1 dumps, no snapshot stats) conforms at
    the levels it declares; it may not declare snapshots (R-DUMP-1)."""
    script = tmp_path / "old_server.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys
            sys.path.insert(0, sys.argv[2])  # this checkout's packages first
            from kachedb_radix import reference
            from kachedb_radix.spec.conform.adapter import TreeAdapter
            from kachedb_radix.spec.protocol.server import handle
            from kachedb_radix.spec.conform.candidate import CandidateError
            LEVELS = sys.argv[1].split(",")
            tree = TreeAdapter(reference.RadixTree, "old", frozenset(LEVELS))
            for line in sys.stdin:
                request = json.loads(line)
                try:
                    answer = handle(tree, request)
                except CandidateError as exc:
                    print(json.dumps({"id": request["id"], "error": {"kind": exc.kind}}))
                    sys.stdout.flush()
                    continue
                if request["op"] == "hello":
                    answer["protocol"] = 1
                if request["op"] == "dump":
                    answer["format"] = 1
                    del answer["quarantine"]
                if request["op"] == "stats":
                    for name in ("quarantined", "readers", "oldest_reader", "version"):
                        del answer[name]
                print(json.dumps({"id": request["id"], "ok": answer}))
                sys.stdout.flush()
            """
        )
    )
    root = str(ROOT)
    old = StdioCandidate([sys.executable, str(script), "core,pinning,eviction,namespaces", root])
    try:
        assert old.protocol == 1 and "snapshots" not in old.levels
        old.reset(4, 1)
        assert old.dump()["quarantine"] == []  # upgraded to format 2
        report = run_kit(old, kit=KitSettings(examples=20, budget=3_000))
    finally:
        old.close()
    assert report.passed, report.explain()
    with pytest.raises(CandidateFailure, match="snapshots level needs protocol 2"):
        StdioCandidate([sys.executable, str(script), "core,snapshots", root])


def test_server_answers_garbage_and_unknown_ops() -> None:
    out = io.StringIO()
    serve(TreeAdapter(reference.RadixTree, "r"), io.StringIO('nope\n{"id": 3, "op": "fly"}\n'), out)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["id"] is None and first["error"]["kind"] == "protocol"
    assert second == {
        "id": 3,
        "error": {"kind": "unsupported", "message": "unknown operation 'fly'"},
    }


def _fake(tmp_path: Path, body: str) -> list[str]:
    """A tiny server that answers hello correctly and then misbehaves as ``body`` says."""
    script = tmp_path / "fake.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys, time
            def say(message):
                sys.stdout.write(json.dumps(message) + "\\n"); sys.stdout.flush()
            for line in sys.stdin:
                request = json.loads(line)
                if request["op"] == "hello":
                    say({"id": request["id"], "ok": {"protocol": 1, "name": "fake",
                         "levels": ["core"], "block_sizes": None}})
                    continue
            """
        )
        + textwrap.indent(textwrap.dedent(body), "    ")
    )
    return [sys.executable, str(script)]


RESET = "step 1: fake: request 1 (reset)"


@pytest.mark.parametrize(
    ("body", "diagnostic", "where"),
    [
        ("time.sleep(60)\n", "no answer within 0.5 s", RESET),
        ("sys.stderr.write('boom: segfault\\n'); sys.exit(3)\n", "exited with status 3", RESET),
        ("sys.stdout.write('{not json\\n'); sys.stdout.flush()\n", "not JSON", RESET),
        ("say({'id': request['id'] + 7, 'ok': None})\n", "answer carries id", RESET),
        (
            "say({'id': request['id'], 'ok': None if request['op'] == 'reset' else {}})\n",
            "dump answer lacks format",
            "step 2: fake: request 2 (dump)",
        ),
    ],
    ids=["hang", "die", "malformed-json", "wrong-id", "missing-field"],
)
def test_misbehaving_programs_get_a_clear_diagnostic(
    tmp_path: Path, body: str, diagnostic: str, where: str
) -> None:
    candidate = StdioCandidate(_fake(tmp_path, body), timeout=0.5)
    report = run_kit(candidate, kit=KitSettings(examples=5))
    candidate.close()
    assert report.verdict == "failure"
    assert report.failure is not None
    assert diagnostic in report.failure
    assert where in report.failure
    assert report.failure_trace and report.failure_trace[0]["op"] == "reset"
    if "exited" in diagnostic:
        assert "boom: segfault" in report.failure  # the stderr tail is shown


def test_handshake_failures(tmp_path: Path) -> None:
    silent = tmp_path / "silent.py"
    silent.write_text("import time\ntime.sleep(60)\n")
    with pytest.raises(CandidateFailure, match=r"request 0 \(hello\): no answer"):
        StdioCandidate([sys.executable, str(silent)], startup_timeout=0.5)
    old = tmp_path / "old.py"
    old.write_text(
        "import sys, json\nfor line in sys.stdin:\n"
        "    print(json.dumps({'id': 0, 'ok': {'protocol': 0, 'name': 'x', 'levels': ['core'],"
        " 'block_sizes': None}}), flush=True)\n"
    )
    with pytest.raises(CandidateFailure, match="speaks protocol 0"):
        StdioCandidate([sys.executable, str(old)])
    with pytest.raises(CandidateFailure, match="could not start"):
        StdioCandidate([str(tmp_path / "missing-program")])


def test_error_answers_become_kinds() -> None:
    candidate = StdioCandidate(SERVE)
    try:
        candidate.reset(4, 2)
        with pytest.raises(CandidateError) as raised:
            candidate.match([1, 2**32], None, False)
        assert raised.value.kind == "token_range"
        assert candidate.insert([1, 2, 3], None, True)["lease"] == 1
    finally:
        candidate.close()


def test_cli_runs_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    from kachedb_radix.spec.cli import conform

    command = " ".join([*SERVE, "--levels", "core,pinning"])
    assert conform.main(["conform", "--cmd", command, "--examples", "10"]) == 0
    assert "reference: PASS at levels core, pinning" in capsys.readouterr().out
    vectors = str(path_of("pinning"))
    assert conform.main(["replay", vectors, "--cmd", command]) == 0


def _fake_hello(tmp_path: Path, hello: str) -> list[str]:
    """A program that answers ``hello`` with the dict built by the Python line ``hello``."""
    script = tmp_path / "hello.py"
    script.write_text(
        "import json, sys\n" + hello + "for line in sys.stdin:\n"
        "    request = json.loads(line)\n"
        "    print(json.dumps({'id': request['id'], 'ok': hello}), flush=True)\n"
    )
    return [sys.executable, str(script)]
