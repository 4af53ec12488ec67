"""``--executor ray``: the sweep as Ray tasks, against a local Ray this test starts.

Ray comes with the optional ``cluster`` extra, which CI installs (``.ci/run``). The
test starts a small local Ray itself (2 CPUs, no dashboard) and stops it after.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

ray = pytest.importorskip(
    "ray", reason="Ray is not installed: pip install -e '.[cluster]' (CI installs it)"
)

from kachedb_radix.spec.cli.main import main  # noqa: E402
from kachedb_radix.spec.simulate.cluster import ClusterSpec  # noqa: E402
from kachedb_radix.spec.simulate.run import Settings, simulate  # noqa: E402
from kachedb_radix.spec.simulate.tiers import TierSpec  # noqa: E402
from kachedb_radix.spec.simulate.workload import WorkloadSpec, generate  # noqa: E402
from tests.support.simulate import assert_same_points  # noqa: E402


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_tasks_give_the_serial_results(local_ray: None) -> None:
    """A sweep over capacities, a policy, workers and routings -- and the knee's refinement
    rounds, which reuse the session -- as Ray tasks, with the serial figures."""
    trace = generate(WorkloadSpec(requests=80, seed=6))
    clusters = (ClusterSpec(workers=2, routing="round-robin"), ClusterSpec(workers=2,
                routing="cost"))  # fmt: skip
    found = {
        executor: simulate(trace, Settings(executor=executor, capacities=(150, 600, 2400),
                                           policies=(("lfu", None),), clusters=clusters))
        for executor in ("serial", "ray")
    }  # fmt: skip
    assert_same_points(found["serial"].points, found["ray"].points)
    assert found["ray"].executor == "ray" and found["ray"].refined == found["serial"].refined
    for one, two in zip(found["serial"].points, found["ray"].points, strict=True):
        assert (
            list(one.runs)
            == list(two.runs)
            == ["lru", "lfu", "2xround-robin", "2xround-robin/lfu", "2xcost", "2xcost/lfu"]
        )
        for label, run in one.runs.items():
            assert run.stats == two.runs[label].stats and run.balance == two.runs[label].balance


def test_tiered_configurations_are_ray_tasks_too(local_ray: None) -> None:
    """Tiers (``--tiers``) with a policy and a cluster, in one sweep of Ray tasks: the
    serial figures, the tiers' too."""
    trace = generate(WorkloadSpec(requests=40, seed=6))
    found = {
        executor: simulate(trace, Settings(executor=executor, capacities=(150, 600),
                                           knee_rounds=0, policies=(("lfu", None),),
                                           clusters=(ClusterSpec(workers=2, routing="cost"),),
                                           tiers=(TierSpec(host_blocks=900),)))
        for executor in ("serial", "ray")
    }  # fmt: skip
    assert_same_points(found["serial"].points, found["ray"].points)
    for one, two in zip(found["serial"].points, found["ray"].points, strict=True):
        assert list(one.runs) == list(two.runs) == [
            "lru", "lru+host900", "lfu", "lfu+host900",
            "2xcost", "2xcost+host900", "2xcost/lfu", "2xcost/lfu+host900",
        ]  # fmt: skip
        for label, run in one.runs.items():
            assert run.stats == two.runs[label].stats and run.tiers == two.runs[label].tiers
    assert found["ray"].points[0].runs["lru+host900"].tiers.host_tokens > 0  # type: ignore[union-attr]


def test_the_command_line_starts_and_stops_ray_when_none_runs(
    local_ray: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no Ray in the process, --executor ray connects (ray.init with the given
    address) and disconnects afterwards. The module's local Ray stands in for the
    cluster: only the connect and disconnect calls are observed."""
    calls: list[object] = []
    answers = [False]  # the executor's own question; Ray's internal ones get the truth
    real = ray.is_initialized
    monkeypatch.setattr(ray, "is_initialized", lambda: answers.pop() if answers else real())
    monkeypatch.setattr(ray, "init", lambda **options: calls.append(options["address"]))
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    status = main(
        ["simulate", "--requests", "60", "--capacity", "300,3000", "--executor", "ray",
         "--ray-address", "auto"]
    )  # fmt: skip
    assert status == 0 and calls == ["auto", "shutdown"]
    assert "(ray executor)" in capsys.readouterr().out
