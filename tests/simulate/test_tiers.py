"""Host and disk tiers under each worker's pool (``--tiers``, issue 25 item 4): the split of
a hit into its device, host and disk runs, worked out on paper; restores priced per tier
on one link per worker; both tiered-tree twins alike; tiers composed with policies,
workers and routings in one sweep; results v4, the CSV, the report and the plot; bad
tier options refused with a message."""

from __future__ import annotations

import csv
import dataclasses
import json
from array import array
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kachedb_radix.spec.cli.main import main
from kachedb_radix.spec.simulate.cluster import INDEX_OF, ClusterSpec, Router, load_index_class
from kachedb_radix.spec.simulate.errors import SimulateError
from kachedb_radix.spec.simulate.plan.hardware import Sizing
from kachedb_radix.spec.simulate.plan.models import MODELS
from kachedb_radix.spec.simulate.plan.service import ServiceModel
from kachedb_radix.spec.simulate.run import Settings, simulate
from kachedb_radix.spec.simulate.tiers import (
    TierSpec,
    make_tiered_trees,
    parse_tiers,
    replay_tiered,
    tier_hits,
)
from kachedb_radix.spec.simulate.timed import replay_timed
from kachedb_radix.spec.simulate.trace import Request, Trace
from kachedb_radix.spec.simulate.workload import WorkloadSpec, generate
from kachedb_radix.spec.twins import twin_class
from tests.simulate.test_engines import FLAT
from tests.support.simulate import block_trace, exit_status

SCHEMA = json.loads(
    (Path(__file__).parents[2] / "spec" / "simulate" / "results.schema.json").read_text()
)
A, B, C, D = [1, 2], [3, 4], [5, 6], [7, 8]
#: Device 3 blocks, host 2, disk 4. r0-r2 fill the device; B's insert demotes A to the
#: host, C's demotes B there, which pushes A on to disk. r3 (A) finds A only on disk;
#: its restore evicts [3] and [6] from the device, and C goes to the host. r4 ([5,6,7])
#: finds [5] on the device and [6] on the host. By r5, B has fallen off the disk.
PATHS = [A, B, C, A, [5, 6, 7], [3, 4, 8]]
LENGTHS, HOST, DISK = [0, 0, 0, 2, 2, 0], [0, 0, 0, 0, 1, 0], [0, 0, 0, 2, 0, 0]


def _tiered(impl: str, device: int = 3, host: int = 2, disk: int = 4) -> Any:
    return make_tiered_trees(impl, TierSpec(host, disk), [device], 100, 1, {})[0]


def _timed(paths: list[list[int]], stamps: list[float]) -> Trace:
    """Block-hash requests of 10 tokens per block, one output token each."""
    made = [Request(array("I", ids), array("I", ids), 10 * len(ids), 1, stamp, None, number)
            for number, (ids, stamp) in enumerate(zip(paths, stamps, strict=True), 1)]  # fmt: skip
    return Trace(made, "mooncake", 1, 10, "hand")


#: 1 ms a prefilled token; KV of 1 byte a token; a block (10 tokens) restores in 10 ms
#: from the host, 20 ms from disk (its 500 B/s is slower than the host link).
LINK = dataclasses.replace(FLAT, kv_bytes_per_token=1, hbm_bytes_per_s=1e15,
                           host_bytes_per_s=1000.0, disk_bytes_per_s=500.0,
                           host_latency_ms=0.5, disk_latency_ms=1.0)  # fmt: skip


def test_a_hit_splits_into_its_device_host_and_disk_runs(impl_name: str) -> None:
    """The scenario of :data:`PATHS`, sequential mode: the split, the per-tier ratios
    (1 + 1 + 2 of 14 prompt tokens), and the device's share equal to LRU's without tiers
    (restoring then inserting leaves the device as inserting alone does)."""
    trace = block_trace(PATHS)
    tree = _tiered(impl_name)
    done = replay_tiered(trace, tree)
    tree.tiers.check_invariants()
    assert tree.tiers.tree("device").stats().pinned == 0
    assert done.tiers is not None and (done.lengths, done.tiers.host, done.tiers.disk) == (
        LENGTHS,
        HOST,
        DISK,
    )
    hits = tier_hits(trace, done.lengths, done.tiers)
    assert (hits.device_tokens, hits.host_tokens, hits.disk_tokens) == (1, 1, 2)
    assert hits.prompt_tokens == 14 and hits.ratio("miss") == pytest.approx(10 / 14)
    assert (hits.host_blocks, hits.disk_blocks, hits.restores) == (1, 2, 2)
    assert hits.restore_ms == {} and hits.demoted["host"] > 0 and hits.dropped["disk"] == 2
    settings = Settings(executor="serial", capacities=(3,), knee_rounds=0,
                        implementation=impl_name, tiers=(TierSpec(2, 4),))  # fmt: skip
    results = simulate(trace, settings)
    point = results.points[0]
    plain, tiered = point.runs["lru"], point.runs["lru+host2+disk4"]
    assert plain.replay.lengths == [0, 0, 0, 0, 1, 0] and tiered.replay.lengths == LENGTHS
    assert tiered.tiers is not None and tiered.tiers.device_tokens == plain.stats.saved_tokens


def test_the_timed_mode_charges_each_tier_its_restore(impl_name: str) -> None:
    """The same scenario, 1 s apart: r3 restores 2 blocks from disk (1 + 2 x 20 ms) and
    computes its last token (1 ms); r4 restores 1 block from the host (0.5 + 10 ms) and
    computes its 10 uncached tokens (10 ms); misses compute every token."""
    trace = _timed(PATHS, [1000.0 * n for n in range(len(PATHS))])
    tree = _tiered(impl_name)
    done = replay_timed(trace, [tree], ServiceModel(request_overhead_ms=0.0), LINK)
    assert done.lengths == LENGTHS and done.tiers is not None
    assert done.ttft == pytest.approx([20.0, 20.0, 20.0, 42.0, 20.5, 30.0])
    assert done.tiers.restore_ms == pytest.approx([0, 0, 0, 41.0, 10.5, 0])
    assert done.tiers.link_busy_ms == pytest.approx(51.5) and done.restored == 3
    assert tree.tiers.tree("device").stats().pinned == 0
    hits = tier_hits(trace, done.lengths, done.tiers)
    assert hits.restore_ms["p50"] == pytest.approx((41.0 + 10.5) / 2)


def test_restores_on_one_worker_share_its_link() -> None:
    """A and B pushed to the host by C and D; both asked again at the same instant: A's
    restore takes the link for 20.5 ms, B's waits for it and is done at 41 ms."""
    paths = [A, B, C, D, A, B]
    trace = _timed(paths, [0.0, 100.0, 200.0, 300.0, 1000.0, 1000.0])
    tree = _tiered("reference", device=4, host=8, disk=0)
    done = replay_timed(trace, [tree], ServiceModel(request_overhead_ms=0.0), LINK)
    assert done.lengths[4:] == [2, 2] and done.tiers is not None and done.tiers.host[4:] == [2, 2]
    assert done.tiers.restore_ms[4:] == pytest.approx([20.5, 41.0])
    assert done.ttft[4:] == pytest.approx([21.5, 42.0])


def test_tier_specs_parse_like_capacities() -> None:
    sizing = Sizing(512, MODELS["llama-3-70b-fp8"])  # 80 MiB a block
    assert parse_tiers("host=2TiB", sizing) == TierSpec(26214, 0)
    assert parse_tiers("host=1k, disk=20k,write-through", sizing) == TierSpec(1000, 20000, True)
    assert parse_tiers("disk=8Mtok,write-back", sizing, write_through=True) == TierSpec(0, 15625)
    assert TierSpec(1000, 20000, True).label == "host1000+disk20000+wt"
    assert TierSpec(10, 3).pools(4, 100) == [(3, 1), (3, 1), (2, 1), (2, 1)]
    assert TierSpec(10, 0).pools(2, 4) == [(4, 0), (4, 0)]  # never beyond the working set
    for bad, message in (("host=2TiB,host=1", "host given twice"), ("ram=5", "not host=SIZE"),
                         ("write-back", "give a host or a disk tier"),
                         ("host=x", "--tiers host: 'x'"),
                         ("disk=9,write-through", "write-through needs a host tier")):  # fmt: skip
        with pytest.raises(SimulateError, match=message):
            parse_tiers(bad, sizing)
    with pytest.raises(SimulateError, match="--tiers host 1GiB: a size in bytes needs --model"):
        parse_tiers("host=1GiB", Sizing(16))
    with pytest.raises(SimulateError, match="capacity must be >= 0 blocks"):
        TierSpec(-1, 5)
    with pytest.raises(SimulateError, match=r"--tiers: .*policy"):  # the tiers refuse it
        make_tiered_trees("reference", TierSpec(8, 0), [4], 100, 16, {"policy": "nope"})
    with pytest.raises(ValueError, match="unknown implementation"):
        make_tiered_trees("fortran", TierSpec(8, 0), [4], 100, 16, {})


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--tiers", "host=lots"], "--tiers host: 'lots' is not a whole number of blocks"),
        (["--write-through"], "--write-through applies to tiers: give --tiers"),
        (["--tiers", "host=99", "--disk-gbps", "5"], "--disk-gbps applies to the timed mode"),
        (
            ["--mode", "timed", "--tiers", "host=99", "--disk-gbps", "0"],
            "argument --disk-gbps: 0 must be above 0",
        ),
        (
            ["--mode", "timed", "--tiers", "host=9", "--disk-latency-ms", "-1"],
            "argument --disk-latency-ms: -1 must be at least 0",
        ),
        (
            ["--mode", "timed", "--tiers", "host=9", "--disk-latency-ms", "inf"],
            "argument --disk-latency-ms: 'inf' is not a finite number",
        ),
    ],
)
def test_bad_tier_options_are_a_message(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_status(["simulate", "--requests", "20", *arguments]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error


def test_tiers_compose_with_policies_workers_and_routings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every policy on every cluster, each without tiers and with each tier configuration,
    as tasks of one sweep; results.json (v4, schema-valid) keeps the tiered runs apart
    from the policies and clusters; the CSV, the tiers table, the report and the plot."""
    status = main(["simulate", "--requests", "80", "--capacity", "100,400", "--policy", "lfu",
                   "--workers", "1,2", "--routing", "prefix", "--tiers", "host=600",
                   "--knee-rounds", "0", "--executor", "serial",
                   "--out", str(tmp_path)])  # fmt: skip
    assert status == 0
    out = capsys.readouterr().out
    assert "│ lru+host600 " in out and "│ 2xprefix/lfu+host600 " in out  # two tables say so
    document = json.loads((tmp_path / "results.json").read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    assert document["version"] == 5
    labels = [config["label"] for config in document["settings"]["configurations"]]
    assert labels == ["lru", "lru+host600", "lfu", "lfu+host600", "2xprefix", "2xprefix+host600",
                      "2xprefix/lfu", "2xprefix/lfu+host600"]  # fmt: skip
    tiers = document["settings"]["configurations"][1]["tiers"]
    assert tiers == {"host_blocks": 600, "disk_blocks": 0, "host_gib": None, "disk_gib": None,
                     "write_through": False}  # fmt: skip
    for point in document["points"]:
        assert set(point["policies"]) == {"lfu"}
        assert set(point["clusters"]) == {"2xprefix", "2xprefix/lfu"}
        assert set(point["tiered"]) == {label for label in labels if "+host" in label}
        for run in point["tiered"].values():
            figures = run["tiers"]
            shares = ("device_hit_ratio", "host_hit_ratio", "disk_hit_ratio", "miss_ratio")
            assert sum(figures[name] for name in shares) == pytest.approx(1, abs=1e-5)
            assert figures["device_hit_ratio"] + figures["host_hit_ratio"] == pytest.approx(
                run["token_hit_ratio"], abs=1e-5
            )
        small = point["tiered"]["lru+host600"]["tiers"]
        if point["capacity"] == 100:
            assert small["host_hit_ratio"] > 0.15 and small["restored_blocks"]["host"] > 0
    with (tmp_path / "results.csv").open() as stream:
        row = next(csv.DictReader(stream))
    assert float(row["lru+host600_host_hit_ratio"]) > 0.15
    page = (tmp_path / "report.html").read_text()
    assert '<table id="tiers">' in page and "over the workers): host 600 blocks" in page
    assert (tmp_path / "tiers_vs_capacity.png").read_bytes()[:4] == b"\x89PNG"


def test_the_timed_mode_reports_ttft_with_and_without_tiers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Llama-3-8B on one H100 (the timed mode's default deployment), a device pool far
    below the working set: the host tier's hits come back over the link, and the table
    puts TTFT with the tiers beside TTFT without them."""
    status = main(["simulate", "--requests", "150", "--mode", "timed", "--capacity", "200",
                   "--tiers", "host=4000,disk=9000", "--write-through", "--knee-rounds", "0",
                   "--executor", "serial", "--no-bounds"])  # fmt: skip
    assert status == 0
    out = capsys.readouterr().out
    assert "TTFT p50 without" in out and "restore wait p50" in out
    assert "tiers host4000+disk9000+wt (write-through; in all, split over the workers): " in out
    assert "host 4,000 blocks; disk 9,000 blocks" in out and "from disk 6.5 GB/s + 0.1 ms" in out


def test_routed_tiered_workers_run_on_the_c_twins_alike() -> None:
    """Two workers routed by prefix, each with a host tier: the C trees feeding the C
    router index give the reference's every figure; each run's index is its trees' twin."""
    pytest.importorskip("kachedb_radix.accel")
    trace = generate(WorkloadSpec(requests=60, seed=3))
    found = {}
    for impl in ("reference", "accel"):
        settings = Settings(executor="serial", capacities=(300,), knee_rounds=0, bounds=False,
                            implementation=impl, tiers=(TierSpec(900),),
                            clusters=(ClusterSpec(workers=2, routing="prefix"),))  # fmt: skip
        found[impl] = simulate(trace, settings).points[0].runs
    assert list(found["accel"]) == ["lru", "lru+host900", "2xprefix", "2xprefix+host900"]
    for label, run in found["reference"].items():
        twin = found["accel"][label]
        assert (twin.trees, run.trees) == ("accel", "reference")
        assert twin.replay.lengths == run.replay.lengths and twin.tiers == run.tiers
        assert twin.replay.worker_of == run.replay.worker_of
    assert found["accel"]["2xprefix+host900"].tiers.host_tokens > 0  # type: ignore[union-attr]
    spec = ClusterSpec(workers=2, routing="prefix")
    router = Router(spec, trace, [], [[]] * len(trace.requests), implementation="accel")
    assert type(router.indexes[0]) is load_index_class(INDEX_OF["accel"])


def test_a_chain_longer_than_the_host_is_dropped_whole(impl_name: str) -> None:
    """R-TIER-3: device 3 blocks, host 2: a 3-block chain evicted from the device finds an
    empty host that cannot hold it, and the whole path is dropped (a path is not cut to
    what fits), which the planner's per-tier figures then show."""
    tiers = twin_class(impl_name, "TieredTree")(3, 2, 0, 1)
    tiers.insert([1, 2, 3])
    done = tiers.insert([7, 8, 9])  # evicts the whole chain
    assert tiers.tree("host").stats().pinned == 0 and len(done.dropped) == 3
    assert tiers.lookup([1, 2, 3]).length == 0
