"""``simulate --policy``: eviction policies compared beside LRU (R-POL-*) in the table,
results.json, results.csv and both plots; the workload's retention requests; and every
way to misuse the flags."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import jsonschema
import pytest

from kachedb_radix.spec.cli.main import main
from kachedb_radix.spec.simulate.errors import TraceLineError
from kachedb_radix.spec.simulate.formats import parse_trace
from kachedb_radix.spec.simulate.results import SCHEMA_PATH
from kachedb_radix.spec.simulate.run import Settings, simulate
from kachedb_radix.spec.simulate.workload import WorkloadSpec, generate
from tests.support.simulate import MOONCAKE_SAMPLE, exit_status, token_trace

SCHEMA = json.loads(SCHEMA_PATH.read_text())


def test_policies_are_compared_in_every_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R-POL-1: each policy gets a column, a knee line, a results.json run per point
    (schema-valid), two CSV columns and a curve; LRU always runs as the baseline."""
    out = tmp_path / "run"
    status = main(
        ["simulate", "--requests", "150", "--executor", "serial", "--capacity", "300,3000",
         "--policy", "lfu,priority,slru", "--out", str(out)]
    )  # fmt: skip
    assert status == 0
    printed = capsys.readouterr().out
    for column in ("hit LRU", "hit LFU", "hit PRIORITY", "hit SLRU"):
        assert column in printed
    assert "knee 90% (blocks): lfu" in printed and ", slru " in printed
    document = json.loads((out / "results.json").read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    assert document["version"] == 5
    assert list(document["settings"]["policies"]) == ["lru", "lfu", "priority", "slru"]
    assert document["settings"]["policies"]["priority"]["namespaces"] == {"tenant-1": 60}
    for point in document["points"]:
        assert list(point["policies"]) == ["lfu", "priority", "slru"]
        assert 0 <= point["policies"]["lfu"]["token_hit_ratio"] <= 1
        assert "slru" in point["timeline"][0]
    curves = {curve["series"] for curve in document["knee"]["curves"]}
    assert curves == {"lru", "lfu", "priority", "slru", "belady"}
    with (out / "results.csv").open() as stream:
        row = next(csv.DictReader(stream))
    assert {"lfu_token_hit_ratio", "slru_block_hit_ratio"} <= set(row)
    assert (out / "hit_ratio_vs_capacity.png").stat().st_size > 1000


def test_a_policy_run_is_the_tree_under_that_policy() -> None:
    """R-POL-4: the figures of a compared policy are those of a tree built with it:
    fifo beside lru on a trace where they differ (a prefix used again, then a new one)."""
    trace = token_trace([[1, 1], [2, 2], [1, 1], [3, 3], [1, 1]], block_size=2)
    results = simulate(trace, Settings(capacities=(2,), executor="serial", bounds=False,
                                       policies=(("fifo", None),)))  # fmt: skip
    point = results.points[0]
    assert point.lru.hit_blocks == 2  # [1, 1] kept by its reuse: hits at 3 and 5
    assert point.runs["fifo"].stats.hit_blocks == 1  # born first, evicted at [3, 3]
    assert results.policies == ["fifo"] and results.policy_options["fifo"] == {}


def test_the_workload_asks_what_its_clients_would() -> None:
    """R-POL-5: agent steps ask a high priority until their next step, the last step
    nothing; one-off calls a low one; chat nothing -- drawing them draws no random number,
    so the tokens are those of the same seed without them."""
    spec = WorkloadSpec(requests=400, seed=3)
    requests = generate(spec).requests
    asked = {(r.priority, r.retain_for) for r in requests}
    assert asked <= {(None, None), (spec.agent_priority, spec.agent_retain_for),
                     (spec.oneoff_priority, None)}  # fmt: skip
    assert len(asked) == 3
    plain = WorkloadSpec(requests=400, seed=3, agent_priority=0, oneoff_priority=0)
    assert [r.tokens for r in generate(plain).requests] == [r.tokens for r in requests]
    assert spec.priority_options() == {"namespaces": {"tenant-1": 60}}


def test_traces_may_carry_retention() -> None:
    """R-POL-8: a trace line's priority is 0 .. 100 and its retain_for needs one."""
    trace = parse_trace(b'{"tokens": [1, 2], "priority": 70, "retain_for": 9}\n', "t")
    assert trace.requests[0].retention() == {"priority": 70, "retain_for": 9}
    with pytest.raises(TraceLineError, match="retain_for"):
        parse_trace(b'{"tokens": [1, 2], "retain_for": 9}\n', "t")
    with pytest.raises(TraceLineError, match="priority"):
        parse_trace(b'{"tokens": [1, 2], "priority": 101}\n', "t")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--policy", "lru,mru"], "argument --policy: unknown 'mru'"),
        (["--policy", ",,,"], "argument --policy: ',,,' has an empty name"),
        (["--policy", "slru", "--policy-options", "[1]"], "a JSON array, not an object"),
        (["--policy", "slru", "--policy-options", '{"slru": 1}'], "map policy names"),
        (["--policy", "slru", "--policy-options", "{x"], "not JSON"),
        (["--policy", "lfu", "--policy-options", '{"slru": {}}'], "which --policy does not"),
        (["--policy", "slru", "--policy-options", '{"slru": {"protected_percent": 200}}'],
         "protected_percent"),
    ],
)  # fmt: skip
def test_bad_policy_flags_are_refused(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """R-POL-1: a usage error naming what was wrong, nothing simulated."""
    assert exit_status(["simulate", str(MOONCAKE_SAMPLE), "--executor", "serial", *flags]) == 2
    assert message in capsys.readouterr().err
