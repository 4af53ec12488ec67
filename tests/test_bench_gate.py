"""The performance gate's logic (benchmarks/gate.py), driven by fake timings.

Nothing here times real code: measurements are scripted, so every assertion is about
the gate's decisions -- normalisation by the calibration loop, the 1.5x baseline rule
with one re-measure, the accel target and speed-up, eviction flatness, the exit status
-- plus the workload builders the gate relies on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import reference
from benchmarks import gate, shapes
from benchmarks.gate import (
    FAIL,
    NEW,
    PASS,
    SKIP,
    TARGET_CASE,
    Case,
    Measurement,
    Plan,
    Verdict,
)
from benchmarks.shapes import Implementations, Workload

SMALL, LARGE = gate.EVICT_SMALL, gate.EVICT_LARGE


def _never() -> Workload:
    raise AssertionError("a fake measurement never builds a workload")


def impls(accel: bool = True, pure: bool = False) -> Implementations:
    factories: dict[str, Any] = {"reference": reference.RadixTree}
    missing: dict[str, str] = {}
    if accel:
        factories["accel"] = object
    else:
        missing["accel"] = "KACHEDB_RADIX_PURE=1" if pure else "not importable: test"
    return Implementations(factories, missing, pure)


def plan_for(which: Implementations) -> Plan:
    cases = [Case(TARGET_CASE, name, _never) for name in which.factories]
    for name in which.factories:
        cases += [Case(f"evict/{SMALL}", name, _never), Case(f"evict/{LARGE}", name, _never)]
    return Plan("test", cases, {name: (SMALL, LARGE) for name in which.factories})


# Healthy defaults: accel 1 us, reference 100 us, flat eviction. Calibration 10 us.
HEALTHY = {
    f"{TARGET_CASE}@accel": 1_000.0,
    f"{TARGET_CASE}@reference": 100_000.0,
    f"evict/{SMALL}@reference": 1_000.0,
    f"evict/{LARGE}@reference": 2_000.0,
    f"evict/{SMALL}@accel": 50.0,
    f"evict/{LARGE}@accel": 100.0,
}
CALIBRATION = 10_000.0


class FakeMeasure:
    """Scripted medians per case key; each call takes the next one (the last repeats)."""

    def __init__(self, scripts: dict[str, list[float]], calibration: float = CALIBRATION):
        self.scripts = scripts
        self.calibration = calibration
        self.calls: dict[str, int] = {}

    def __call__(self, case: Case) -> Measurement:
        count = self.calls.get(case.key, 0)
        self.calls[case.key] = count + 1
        script = self.scripts.get(case.key) or [HEALTHY[case.key]]
        return Measurement(script[min(count, len(script) - 1)], self.calibration, 11)


def baseline_of(medians: dict[str, float], calibration: float = CALIBRATION) -> dict[str, float]:
    return {key: median / calibration for key, median in medians.items()}


def statuses(run: gate.GateRun) -> dict[tuple[str, str], str]:
    return {(v.figure, v.impl): v.status for v in run.verdicts}


def status_of(run: gate.GateRun, prefix: str, impl: str | None = None) -> str:
    found = [
        v.status
        for v in run.verdicts
        if v.figure.startswith(prefix) and (impl is None or v.impl == impl)
    ]
    assert len(found) == 1, (prefix, impl, found)
    return found[0]


# ---------------------------------------------------------------- normalisation


def test_normalised_median_is_in_calibration_loops() -> None:
    assert Measurement(median_ns=300.0, calib_ns=100.0).normalised == 3.0


def test_a_uniformly_slower_machine_does_not_trip_the_baseline() -> None:
    which = impls()
    plan = plan_for(which)
    baseline = baseline_of(HEALTHY)
    # Everything, calibration included, runs 2x slower: normalised figures are unchanged
    # (accel's 2 us still meets its absolute target, which is not normalised).
    slow = FakeMeasure({key: [2 * value] for key, value in HEALTHY.items()}, 2 * CALIBRATION)
    run = gate.run_gate(plan, which, baseline, slow)
    assert run.exit_code == 0
    assert run.remeasured == []
    assert all(v.status == PASS for v in run.verdicts if v.figure in {c.name for c in plan.cases})


def test_same_median_on_a_faster_calibration_is_a_regression() -> None:
    which = impls()
    key = f"evict/{SMALL}@reference"
    # Same raw median, but the machine's calibration loop got twice as fast: the case
    # is 2x slower relative to the machine, over the 1.5x limit, twice.
    fake = FakeMeasure({}, CALIBRATION / 2)
    run = gate.run_gate(plan_for(which), which, baseline_of({key: HEALTHY[key]}), fake)
    assert statuses(run)[(f"evict/{SMALL}", "reference")] == FAIL
    assert run.exit_code == 1


# ---------------------------------------------------------------- the 1.5x rule


@pytest.mark.parametrize(("factor", "status"), [(1.5, PASS), (1.49, PASS), (1.51, FAIL)])
def test_baseline_limit_is_one_and_a_half(factor: float, status: str) -> None:
    which = impls()
    key = f"{TARGET_CASE}@reference"
    fake = FakeMeasure({key: [HEALTHY[key] * factor]})
    run = gate.run_gate(plan_for(which), which, baseline_of(HEALTHY), fake)
    assert statuses(run)[(TARGET_CASE, "reference")] == status
    assert run.exit_code == (1 if status == FAIL else 0)


def test_a_case_over_the_limit_is_measured_once_more_and_passes_if_it_recovers() -> None:
    which = impls()
    key = f"{TARGET_CASE}@reference"
    fake = FakeMeasure({key: [HEALTHY[key] * 1.8, HEALTHY[key] * 1.1]})
    run = gate.run_gate(plan_for(which), which, baseline_of(HEALTHY), fake)
    assert fake.calls[key] == 2
    assert all(count == 1 for other, count in fake.calls.items() if other != key)
    assert run.remeasured == [key]
    assert run.exit_code == 0
    verdict = next(v for v in run.verdicts if v.keys == (key,))
    assert verdict.value == "1.10x baseline"
    assert "re-measured" in verdict.note


def test_a_case_over_the_limit_twice_fails() -> None:
    which = impls()
    key = f"{TARGET_CASE}@reference"
    fake = FakeMeasure({key: [HEALTHY[key] * 1.8, HEALTHY[key] * 1.7]})
    run = gate.run_gate(plan_for(which), which, baseline_of(HEALTHY), fake)
    assert fake.calls[key] == 2  # measured once more, not more
    assert run.exit_code == 1
    failed = [v for v in run.failed if v.keys == (key,)]
    assert len(failed) == 1 and failed[0].value == "1.70x baseline"


def test_a_case_without_baseline_is_reported_not_failed() -> None:
    which = impls()
    run = gate.run_gate(plan_for(which), which, {}, FakeMeasure({}))
    assert run.exit_code == 0
    assert {v.status for v in run.verdicts if v.value == "no baseline"} == {NEW}


# ---------------------------------------------------------------- accel checks


@pytest.mark.parametrize(
    ("accel_ns", "reference_ns", "target", "speedup"),
    [
        (1_000.0, 100_000.0, PASS, PASS),
        (2_450.0, 49_000.0, PASS, PASS),  # both limits are inclusive
        (2_500.0, 100_000.0, FAIL, PASS),
        (2_000.0, 30_000.0, PASS, FAIL),  # 15x < 20x
    ],
)
def test_accel_target_and_speedup(
    accel_ns: float, reference_ns: float, target: str, speedup: str
) -> None:
    which = impls()
    fake = FakeMeasure(
        {f"{TARGET_CASE}@accel": [accel_ns], f"{TARGET_CASE}@reference": [reference_ns]}
    )
    run = gate.run_gate(plan_for(which), which, {}, fake)
    assert status_of(run, f"{TARGET_CASE} (64", "accel") == target
    assert status_of(run, "speed-up") == speedup
    assert run.exit_code == (0 if target == speedup == PASS else 1)


def test_a_slow_accel_is_measured_again_before_failing() -> None:
    which = impls()
    key = f"{TARGET_CASE}@accel"
    fake = FakeMeasure({key: [3_000.0, 2_000.0]})
    run = gate.run_gate(plan_for(which), which, {}, fake)
    assert fake.calls[key] == 2
    assert status_of(run, f"{TARGET_CASE} (64", "accel") == PASS
    assert run.exit_code == 0


def test_missing_accel_fails_the_gate() -> None:
    which = impls(accel=False)
    run = gate.run_gate(plan_for(which), which, {}, FakeMeasure({}))
    assert status_of(run, "accel importable") == FAIL
    assert status_of(run, "speed-up") == FAIL
    assert run.exit_code == 1


def test_pure_mode_skips_the_accel_checks() -> None:
    which = impls(accel=False, pure=True)
    run = gate.run_gate(plan_for(which), which, {}, FakeMeasure({}))
    assert status_of(run, "accel importable") == SKIP
    assert status_of(run, f"{TARGET_CASE} (64") == SKIP
    assert status_of(run, "speed-up") == SKIP
    assert run.exit_code == 0


def test_implementations_follow_the_pure_switch() -> None:
    pure = shapes.find_implementations({"KACHEDB_RADIX_PURE": "1"})
    assert list(pure.factories) == ["reference"]
    assert pure.pure and "KACHEDB_RADIX_PURE=1" in pure.missing["accel"]
    assert "accel NOT RUN" in pure.describe()
    normal = shapes.find_implementations({})
    assert not normal.pure
    assert "accel" in normal.factories or normal.missing["accel"].startswith("not importable")


# ---------------------------------------------------------------- eviction flatness


@pytest.mark.parametrize(("growth", "status"), [(2.9, PASS), (3.0, PASS), (3.2, FAIL)])
def test_eviction_growth_limit(growth: float, status: str) -> None:
    which = impls()
    key = f"evict/{LARGE}@accel"
    fake = FakeMeasure({key: [HEALTHY[f"evict/{SMALL}@accel"] * growth]})
    run = gate.run_gate(plan_for(which), which, {}, fake)
    assert status_of(run, "eviction per block", "accel") == status
    assert status_of(run, "eviction per block", "reference") == PASS
    if status == FAIL:
        assert set(run.remeasured) == {key, f"evict/{SMALL}@accel"}


# ---------------------------------------------------------------- baseline file


def test_baseline_file_round_trip_and_merge(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    assert gate.load_baseline(path) == {}
    host = {"cpu": "test"}
    gate.save_baseline(path, {"a@reference": [Measurement(200.0, 100.0)]}, host, "cmd")
    # Best of two measurements is kept; keys not measured this time are kept too.
    twice = [Measurement(500.0, 100.0), Measurement(300.0, 100.0)]
    gate.save_baseline(path, {"b@accel": twice}, host, "cmd")
    assert gate.load_baseline(path) == {"a@reference": 2.0, "b@accel": 3.0}
    document = json.loads(path.read_text())
    assert document["recorded_with"]["cpu"] == "test"


def test_an_unknown_baseline_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"format": 99, "cases": {}}))
    with pytest.raises(ValueError, match="format"):
        gate.load_baseline(path)


# ---------------------------------------------------------------- command line


@pytest.fixture
def fake_command(monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, list[float]]], None]:
    def install(scripts: dict[str, list[float]]) -> None:
        which = impls()
        fake = FakeMeasure(scripts)
        monkeypatch.setattr(shapes, "find_implementations", lambda: which)
        monkeypatch.setattr(gate, "build_plan", lambda found, quick: plan_for(found))
        monkeypatch.setattr(gate, "measure_case", lambda case, policy: fake(case))

    return install


def test_command_exits_zero_and_prints_every_limit(
    fake_command: Callable[[dict[str, list[float]]], None],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_command({})
    path = tmp_path / "baseline.json"
    assert gate.main(["--quick", "--plain", "--baseline", str(path), "--update-baseline"]) == 0
    assert set(gate.load_baseline(path)) == set(HEALTHY)
    out_json = tmp_path / "out.json"
    code = gate.main(["--quick", "--plain", "--baseline", str(path), "--json", str(out_json)])
    out = capsys.readouterr().out
    assert code == 0
    assert "GATE PASSED" in out
    for limit in ("<= 2.45 us", ">= 20x", "<= 3x", "<= 1.5x baseline"):
        assert limit in out
    assert json.loads(out_json.read_text())["exit_code"] == 0


def test_command_exits_non_zero_on_a_regression(
    fake_command: Callable[[dict[str, list[float]]], None],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "baseline.json"
    fake_command({})
    gate.main(["--plain", "--baseline", str(path), "--update-baseline"])
    key = f"{TARGET_CASE}@reference"
    fake_command({key: [HEALTHY[key] * 2]})
    assert gate.main(["--plain", "--baseline", str(path)]) == 1
    out = capsys.readouterr().out
    assert "GATE FAILED" in out and "2.00x baseline" in out


def test_plain_table_has_a_row_per_verdict() -> None:
    rows = [
        Verdict("figure one", "accel", "1 us", "1 us", "<= 2 us", PASS),
        Verdict("figure two", "", "", "no", "required", FAIL, note="why"),
    ]
    text = gate.render_plain(rows)
    lines = text.splitlines()
    assert len(lines) == 4  # header, rule, two rows
    assert lines[0].split() == list(gate.COLUMNS)
    assert "FAIL" in lines[3] and lines[3].endswith("why")


# ---------------------------------------------------------------- timing loop


class FakeClock:
    """perf_counter_ns stand-in: time moves only when the timed code says so."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_repeated_calls_report_the_median_per_call() -> None:
    clock = FakeClock()
    durations: Iterator[int] = iter([100, 100, 100] + [100, 5_000, 100, 100] * 10_000)

    def call() -> None:
        clock.now += next(durations)

    policy = gate.Policy(budget_s=0.001, min_rounds=5, max_rounds=50, batch_ns=100.0)
    timing = gate.time_workload(Workload(call), policy, clock)
    assert timing.inner == 1
    assert timing.median_ns == 100.0  # the 5 us outliers do not move the median
    assert 5 <= timing.rounds <= 50


def test_rounds_with_setup_time_only_the_call_and_divide_by_units() -> None:
    clock = FakeClock()

    def setup() -> None:
        clock.now += 1_000_000  # untimed

    def call() -> None:
        clock.now += 640

    policy = gate.Policy(budget_s=0.05, min_rounds=7, max_rounds=9)
    timing = gate.time_workload(Workload(call, setup, units=64, unit="block"), policy, clock)
    assert timing.median_ns == 10.0
    assert timing.rounds == 9


def test_format_ns() -> None:
    assert gate.format_ns(855.0) == "855 ns"
    assert gate.format_ns(2_450.0) == "2.45 us"
    assert gate.format_ns(81_900.0) == "81.9 us"
    assert gate.format_ns(3.2e6) == "3.2 ms"


# ---------------------------------------------------------------- workloads


def test_branchy_shape_is_one_block_nodes_with_eight_siblings() -> None:
    built = shapes.branchy(4)
    tree = shapes.build_tree(reference.RadixTree, "reference", built)
    assert tree.stats().cached == 4 * 8
    level = tree.dump()["namespaces"][0]["children"]
    for _ in range(4):
        assert len(level) == 8
        assert all(len(edge["blocks"]) == 1 for edge in level)
        on_path = [edge for edge in level if edge["children"]]
        level = on_path[0]["children"] if on_path else []
    assert level == []


def test_eviction_workload_refills_to_the_same_size() -> None:
    work = shapes.evict_workload(reference.RadixTree, "reference", 1_000)
    tree: Any = work.keep[0]
    assert work.setup is not None
    target = tree.stats().cached
    assert target >= 1_000
    for _ in range(30):  # more than the tree holds, so refills must happen
        work.setup()
        assert tree.stats().cached == target
        freed = work.run()
        assert len(freed) == shapes.EVICT_BATCH  # type: ignore[arg-type]
    tree.check_invariants()


@pytest.mark.parametrize("kind", sorted(gate.INSERT_KINDS))
def test_insert_workloads_never_evict_in_the_timed_call(kind: str) -> None:
    work = gate.INSERT_KINDS[kind](reference.RadixTree, "reference", 1024)
    tree: Any = work.keep[0]
    assert work.setup is not None
    for _ in range(80):  # enough to fill the 8,192-block pool at least once
        work.setup()
        before = tree.stats()
        work.run()
        after = tree.stats()
        assert after.free <= before.free  # nothing was freed inside the timed call
        assert after.leases == 0
    tree.check_invariants()


def test_every_shape_serves_a_full_match_on_every_input_kind() -> None:
    for name in shapes.SHAPES:
        built = shapes.get_shape(name, 256)
        tree = shapes.build_tree(reference.RadixTree, "reference", built)
        flat = shapes.build_flat(built)
        for kind in shapes.INPUT_KINDS:
            for index in (tree, flat):
                work = shapes.match_workload(index, built.query[:256], kind)
                assert work.run().length == 256  # type: ignore[attr-defined]


def test_measure_case_keeps_the_faster_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    """A calibration slowed by a burst of load must not make the case look fast."""
    timings = iter([30_000.0, 1_000.0, 20_000.0])  # calibration before, case, calibration after

    def fake_time(work: Workload, policy: gate.Policy, clock: Any = None) -> gate.Timing:
        return gate.Timing(next(timings), rounds=15, inner=1)

    monkeypatch.setattr(gate, "time_workload", fake_time)
    case = gate.Case("x", "reference", lambda: Workload(lambda: None))
    measured = gate.measure_case(case, gate.QUICK_POLICY)
    assert (measured.median_ns, measured.calib_ns) == (1_000.0, 20_000.0)
    assert measured.normalised == pytest.approx(0.05)
