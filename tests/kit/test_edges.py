"""Edges of the kit the main tests pass by: every malformed answer the protocol
checker names, the stdio server's and client's error paths, targets, the adapter's
odd trees, the command line's usage errors and JSON output, the vector writer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kachedb_radix.spec.vectors as vectors_package
from kachedb_radix import reference
from kachedb_radix.spec.cli import conform
from kachedb_radix.spec.cli.main import main as cli_main
from kachedb_radix.spec.conform.adapter import TreeAdapter
from kachedb_radix.spec.conform.candidate import CandidateError, CandidateFailure
from kachedb_radix.spec.conform.levels import parse_levels
from kachedb_radix.spec.conform.lockstep import Difference, Disagreement, Lockstep
from kachedb_radix.spec.conform.replay import parse_trace
from kachedb_radix.spec.conform.rules import SpecFormatError, load_rules
from kachedb_radix.spec.conform.run import KitReport, choose_block_sizes
from kachedb_radix.spec.conform.shrink import Shrinker
from kachedb_radix.spec.conform.steps import LeaseBook, apply_step, normalise
from kachedb_radix.spec.conform.targets import TargetError, command, resolve, wrap
from kachedb_radix.spec.mutants.base import mutant
from kachedb_radix.spec.protocol.client import StdioCandidate
from kachedb_radix.spec.protocol.messages import decode, response_problem, upgrade_dump
from kachedb_radix.spec.protocol.server import build, handle, serve
from kachedb_radix.spec.protocol.server import main as serve_main
from kachedb_radix.spec.vectors import path_of
from kachedb_radix.spec.vectors.__main__ import main as vectors_main
from tests.support.paths import ROOT


@pytest.mark.parametrize(
    ("op", "message", "problem"),
    [
        ("reset", {"id": 1}, 'exactly one of "ok" and "error"'),
        ("reset", {"id": 1, "ok": None, "error": {"kind": "x"}}, "exactly one"),
        ("reset", {"id": 1, "error": "boom"}, 'string "kind"'),
        ("reset", {"id": 1, "error": {"kind": 3}}, 'string "kind"'),
        ("reset", {"id": 1, "ok": 5}, "reset answers null"),
        ("stats", {"id": 1, "ok": [1]}, "stats answers an object"),
        ("match", {"id": 1, "ok": {"length": 0, "blocks": [], "lease": "1"}}, "positive int"),
        ("match", {"id": 1, "ok": {"length": 0, "blocks": [], "lease": True}}, "positive int"),
        ("match", {"id": 1, "ok": {"length": 0, "blocks": [], "lease": 0}}, "positive ints"),
        ("snapshot", {"id": 1, "ok": {"snapshot": 0, "version": 0}}, "snapshot ids"),
        ("reader", {"id": 1, "ok": {"snapshot": True, "epoch": 1, "version": 0}}, "snapshot ids"),
    ],
)
def test_every_malformed_answer_is_named(op: str, message: dict[str, Any], problem: str) -> None:
    found = response_problem(1, op, message)
    assert found is not None and problem in found


def test_well_formed_answers_and_lines() -> None:
    ok = {"length": 0, "blocks": [], "lease": 2}
    assert response_problem(1, "match", {"id": 1, "ok": ok}) is None
    assert response_problem(1, "reset", {"id": 1, "error": {"kind": "protocol"}}) is None
    with pytest.raises(ValueError, match="not a JSON object"):
        decode("[1, 2]")
    assert upgrade_dump({"format": 2, "quarantine": []}) == {"format": 2, "quarantine": []}
    assert upgrade_dump(None) is None


def test_the_server_refuses_what_it_cannot_do(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Snapshot operations of a candidate without the level, requests lacking a field,
    blank lines; an accel that cannot be imported; unknown levels on the command line."""
    core = TreeAdapter(reference.RadixTree, "r", frozenset({"core"}))
    handle(core, {"id": 0, "op": "reset", "num_blocks": 4, "block_size": 1})
    with pytest.raises(CandidateError) as raised:
        handle(core, {"id": 1, "op": "reader"})
    assert raised.value.kind == "unsupported"
    with pytest.raises(CandidateError) as raised:
        handle(core, {"id": 2, "op": "match", "tokens": [1]})
    assert raised.value.kind == "protocol" and "lacks field" in raised.value.message
    out: Any = type("Out", (), {"lines": [], "write": lambda self, s: self.lines.append(s)})()
    out.flush = lambda: None
    assert serve(core, iter(["\n", '{"id": 0, "op": "stats"}\n']), out) == 0  # type: ignore[arg-type]
    assert len(out.lines) == 1 and json.loads(out.lines[0])["id"] == 0
    request.getfixturevalue("without_accel")  # `from kachedb_radix import accel` now fails
    with pytest.raises(SystemExit, match="the C twin is not available"):
        build("accel")
    monkeypatch.setattr(
        "kachedb_radix.spec.protocol.server.supported_levels", lambda *_: frozenset({"core"})
    )
    with pytest.raises(SystemExit, match="does not offer level"):
        build("reference", frozenset({"core", "snapshots"}))
    with pytest.raises(SystemExit):
        serve_main(["--levels", "core,warp"])


def test_targets_wrap_classes_factories_and_refuse_the_rest() -> None:
    class Plain(TreeAdapter):
        """A plain-data candidate class built with no arguments."""

        def __init__(self) -> None:
            super().__init__(reference.RadixTree, "plain")

    assert wrap(Plain, "plain").name == "plain"
    assert wrap(lambda: Plain(), "made").name == "plain"
    with pytest.raises(TargetError, match="neither a tree class"):
        wrap(int, "int")
    with pytest.raises(TargetError, match="zero-argument factory"):
        wrap(lambda needed: needed, "needs")
    with pytest.raises(TargetError, match="needs a program"):
        command("   ")
    with pytest.raises(TargetError, match="No closing quotation"):
        command("prog 'unclosed")
    assert resolve("accel").name == "accel"
    with pytest.raises(TargetError, match="neither a tree class"):
        wrap(5, "five")
    assert build("accel").name == "accel"


def test_a_mutant_name_is_registered_once() -> None:
    with pytest.raises(ValueError, match="duplicate name"):
        mutant("early_reuse", "R-EPOCH-1")(reference.RadixTree)
    with pytest.raises(ValueError, match="no rules"):
        mutant("nameless")(reference.RadixTree)


class _OddTree(reference.RadixTree):
    """A tree whose snapshots return leases and whose dump is not JSON data."""

    def snapshot(self) -> Any:
        inner = super().snapshot()
        lease = super().match([], pin=True).lease

        class Leaky:
            version = inner.version

            def match(self, tokens: object, namespace: object = None) -> Any:
                found = inner.match(tokens, namespace)  # type: ignore[arg-type]
                return type("Found", (), {"length": found.length, "blocks": (), "lease": lease})

        return Leaky()

    def dump(self) -> dict[str, Any]:
        return {"format": 2, "odd": {1, 2}}

    def stats(self) -> Any:
        full = super().stats()
        fields = ("num_blocks", "free", "cached", "pinned", "evictable", "leases", "clock")
        return type("Stats", (), {name: getattr(full, name) for name in fields})


def test_the_adapter_reports_odd_trees() -> None:
    adapter = TreeAdapter(_OddTree, "odd")
    assert adapter.tree is None
    adapter.reset(4, 1)
    assert isinstance(adapter.tree, _OddTree)
    snapshot = adapter.snapshot()["snapshot"]
    with pytest.raises(CandidateError, match="returned a lease") as raised:
        adapter.snapshot_match(snapshot, [1], None)
    assert raised.value.kind == "unexpected:lease"
    assert adapter.dump() == {"format": 2, "odd": {1, 2}}  # handed on as the tree gives it
    assert "version" not in adapter.stats()  # a tree without the snapshot counters


def test_a_dump_that_is_not_json_data_is_a_refusal_the_kit_names() -> None:
    """The kit compares a dump type for type first; one that differs goes through JSON,
    and one that is not JSON data (a set) is the refusal ``unexpected:dump``."""
    lockstep = Lockstep(TreeAdapter(_OddTree, "odd"), parse_levels(["core"]))
    with pytest.raises(Disagreement) as found:
        lockstep.run({"op": "reset", "num_blocks": 4, "block_size": 1})
    difference = found.value.difference
    assert difference.trace[-1]["op"] == "dump"
    assert difference.actual == {"error": "unexpected:dump"}
    assert "ok" in difference.expected


def test_a_foreign_lease_from_a_tree_that_pins_nothing() -> None:
    """R-PIN-5: when the class cannot even pin an empty match, any object stands in."""

    class NoLeases(reference.RadixTree):
        def match(self, tokens: object, namespace: Any = None, *, pin: bool = False) -> Any:
            return super().match(tokens, namespace)

    adapter = TreeAdapter(NoLeases, "no-leases")
    adapter.reset(4, 1)
    with pytest.raises(CandidateError) as raised:
        adapter.release(0)
    assert raised.value.kind == "foreign_lease"


def test_steps_levels_traces_and_rules_edge_cases(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown operation 'fly'"):
        apply_step(TreeAdapter(reference.RadixTree, "r"), {"op": "fly"}, LeaseBook())
    dump = {"ok": {"namespaces": [{"children": [5, {"stamps": [1], "children": None}]}]}}
    assert normalise("dump", dump, frozenset({"core"})) == {
        "ok": {"namespaces": [{"children": [5, {"children": None}]}]}
    }
    assert parse_levels(["core,,pinning,"]) == {"core", "pinning"}
    reset = '{"op": "reset", "num_blocks": 1, "block_size": 1}'
    assert [step["op"] for step in parse_trace([reset, "", "  "])] == ["reset"]
    fake = "-".join(("R", "FAKE", "1"))  # spelt out, it would count as a cited rule id
    twice = tmp_path / "twice.md"
    twice.write_text(f"### {fake} — x\nLevel: core\n\n### {fake} — y\nLevel: core\n")
    with pytest.raises(SpecFormatError, match=f"duplicate rule {fake}"):
        load_rules(twice)
    bare = tmp_path / "bare.md"
    bare.write_text(f"### {fake} — x\nno level here\n")
    with pytest.raises(SpecFormatError, match="lacks a 'Level:' line"):
        load_rules(bare)


def test_reports_and_block_sizes() -> None:
    died = Difference(
        1,
        [{"op": "reset"}, {"op": "stats"}],
        {"ok": {}},
        {"failure": "died"},
        "reference",
        "c",
        kind="failure",
    )
    report = KitReport("c", ["core"], passed=False, examples=1, seconds=0.5, findings=[died])
    assert report.to_json()["verdict"] == "failure"
    assert report.failure_trace == [{"op": "reset"}, {"op": "stats"}]
    reference_report = KitReport("c", ["core"], passed=True, examples=1, seconds=0.1)
    assert reference_report.to_json()["verdict"] == "pass"
    candidate = TreeAdapter(reference.RadixTree, "r", block_sizes=(3, 8))
    assert choose_block_sizes(candidate, (1, 2, 3)) == (3,)
    assert choose_block_sizes(candidate, (1, 2)) == (3,)


def test_shrinking_gives_up_on_a_failing_candidate() -> None:
    """A candidate that dies during every trial leaves the disagreement as it was found."""

    class Dying(TreeAdapter):
        def insert(
            self,
            tokens: object,
            namespace: object,
            pin: bool,
            priority: object = None,
            retain_for: object = None,
        ) -> Any:
            raise CandidateFailure("died")

    trace: list[dict[str, Any]] = [
        {"op": "reset", "num_blocks": 4, "block_size": 1},
        {"op": "insert", "tokens": [1], "namespace": None, "pin": False},
        {"op": "evict", "count": 1},
    ]
    found = Difference(2, trace, {"ok": {}}, {"ok": {"freed": []}}, "reference", "dying")
    candidate = Dying(reference.RadixTree, "dying")
    shrinker = Shrinker(candidate, frozenset({"core", "eviction"}))
    assert shrinker.shrink(found, 5) is found


def test_stdio_handshake_refusals(tmp_path: Path) -> None:
    """A hello with bad levels or block sizes; then nothing more is sent."""
    for ok, problem in [
        ({"name": "h", "protocol": 2, "levels": "core", "block_sizes": None}, "must be a list"),
        ({"name": "h", "protocol": 2, "levels": ["core", "x"], "block_sizes": None}, "unknown"),
        ({"name": "h", "protocol": 2, "levels": ["core"], "block_sizes": [0]}, "block_sizes"),
    ]:
        script = tmp_path / "hello.py"
        script.write_text(
            "import json, sys\nline = sys.stdin.readline()\n"
            f"print(json.dumps({{'id': 0, 'ok': {ok!r}}}), flush=True)\n"
            "sys.stdin.read()\n"
        )
        with pytest.raises(CandidateFailure, match=problem):
            StdioCandidate([sys.executable, str(script)])


def test_stdio_after_a_failure_and_unencodable_requests(tmp_path: Path) -> None:
    """An empty name in hello: the program's path names it. A request that is not JSON, a
    program that died before the next request, and every request after a failure."""
    script = tmp_path / "once.py"
    script.write_text(
        "import json, sys\nline = sys.stdin.readline()\n"
        "print(json.dumps({'id': 0, 'ok': {'protocol': 2, 'name': '', 'levels': ['core'],"
        " 'block_sizes': [1, 2]}}), flush=True)\n"
    )
    candidate = StdioCandidate([sys.executable, str(script)])
    assert candidate.name == sys.executable and candidate.block_sizes == (1, 2)
    with pytest.raises(CandidateFailure, match="cannot be encoded"):
        candidate.evict(float("nan"))
    candidate._process.wait(timeout=10)
    with pytest.raises(CandidateFailure, match=r"\(reset\): (could not write|the program closed)"):
        candidate.reset(4, 1)
    with pytest.raises(CandidateFailure, match="already failed earlier"):
        candidate.stats()
    candidate.close()
    candidate.close()


def test_vectors_write_and_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m kachedb_radix.spec.vectors --write`` into a scratch directory, then ``--check``
    finds it current; a changed file is reported stale."""
    monkeypatch.setattr(vectors_package, "VECTOR_DIR", tmp_path)
    assert vectors_main(["--write"]) == 0
    assert vectors_main(["--check"]) == 0
    path_of("core").write_text("{}\n")
    assert vectors_main([]) == 1


def test_module_entry_points_run() -> None:
    """``python -m kachedb_radix.spec.vectors`` and ``python -m kachedb_radix.spec.cli.conform`` as
    programs."""
    done = subprocess.run(
        [sys.executable, "-m", "kachedb_radix.spec.vectors", "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0 and "up to date" in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "kachedb_radix.spec.cli.conform", "replay", str(path_of("core"))],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0 and "replayed" in done.stdout


def test_cli_usage_errors_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    core = str(path_of("core"))
    for refused in (["conform", "reference", "--levels", "warp"],
                    ["replay", str(tmp_path / "none.jsonl")]):  # fmt: skip
        with pytest.raises(SystemExit) as stop:  # refused while parsing (issue 32)
            conform.main(refused)
        assert stop.value.code == 2
    assert conform.main(["conform", "tests.kit.test_edges:CoreOnly", "--levels", "pinning"]) == 2
    assert conform.main(["conform", "--cmd", str(tmp_path / "missing")]) == 2
    assert conform.main(["replay", core, "--target", "reference", "--cmd", "x"]) == 2
    assert conform.main(["replay", core, "--target", "nowhere"]) == 2
    headless = tmp_path / "headless.jsonl"
    headless.write_text('{"op": "stats"}\n')
    assert conform.main(["replay", str(headless)]) == 2
    capsys.readouterr()
    assert conform.main(["replay", core, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True
    snapshots = str(path_of("snapshots"))
    candidate = "tests.kit.test_edges:CoreOnly"
    assert conform.main(["replay", snapshots, "--target", candidate]) == 2  # checked nothing
    captured = capsys.readouterr()
    assert "skipped (levels not declared)" in captured.out
    assert "runs none of the trace's 6 trace(s)" in captured.err
    monkeypatch.setattr("kachedb_radix.spec.cli.main.twin_class", _no_tree)
    assert cli_main(["demo", "--impl", "reference"]) == 2
    assert "no such tree" in capsys.readouterr().err


def CoreOnly() -> TreeAdapter:
    """A candidate declaring the core level only (for the replay test above)."""
    return TreeAdapter(reference.RadixTree, "core-only", frozenset({"core"}))


def _no_tree(name: str) -> Any:
    raise ImportError(f"no such tree: {name}")


def test_cli_runs_the_mutant_catalogue_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    """``conform --mutants --json``: the catalogue's summary, machine-readable (one
    example each here, so it runs in seconds; the default kills every one)."""
    status = conform.main(["conform", "--mutants", "--examples", "1", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["results"] == [] and data["mutants"]["total"] >= 25
    assert status == (0 if data["mutants"]["killed"] == data["mutants"]["total"] else 1)
    assert conform.main(["conform", "--mutants", "--examples", "1"]) == status
    out = capsys.readouterr().out
    assert f"mutants: {data['mutants']['killed']}/{data['mutants']['total']} killed" in out


def test_replay_json_names_the_difference_and_the_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    full = str(path_of("full"))
    mutant = "kachedb_radix.spec.mutants.eviction:EvictedIdsSorted"
    assert conform.main(["replay", full, "--target", mutant, "--json"]) == 1
    assert "difference" in json.loads(capsys.readouterr().out)
    script = tmp_path / "quits.py"
    script.write_text(
        "import json, sys\nsys.stdin.readline()\n"
        "print(json.dumps({'id': 0, 'ok': {'protocol': 2, 'name': 'q', 'levels': ['core'],"
        " 'block_sizes': None}}), flush=True)\n"
    )
    line = f"{sys.executable} {script}"
    assert conform.main(["replay", str(path_of("core")), "--cmd", line, "--json"]) == 1
    # The program is gone after its hello: the kit notices on writing the reset or on
    # reading its answer, whichever comes first (a race), and says which.
    failure = json.loads(capsys.readouterr().out)["failure"]
    assert "closed its output" in failure or "could not write it, it exited" in failure


def test_calls_before_any_reset_are_refused_not_crashed() -> None:
    """A candidate whose first reset was refused (or never came) answers every call with
    ``invalid_argument``: explain goes on past a refused reset and must not crash."""
    adapter = TreeAdapter(reference.RadixTree, "r")
    for call in (adapter.dump, adapter.stats, lambda: adapter.match([1], None, False)):
        with pytest.raises(CandidateError) as raised:
            call()
        assert raised.value.kind == "invalid_argument"
