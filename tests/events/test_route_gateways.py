"""More than one router (issue 34.3), the version CI runs: two real ``route``
processes fed by the same workers' streams agree on every request and equal the
planner's shared index exactly, one of them killed and restarted mid-run catches up by
replay and agrees again; two ``route --learn`` gateways equal the planner's index per
gateway (``simulate --index gateway``) exactly. ``python -m benchmarks.route_gateways``
runs a larger case and the unwaited one."""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.route_gateways import planner, real_setup
from kachedb_radix.spec.simulate.formats import read_trace


def test_gateways_agree_with_each_other_and_with_the_planner() -> None:
    workers, gateways, capacity = 3, 2, 500
    with tempfile.TemporaryDirectory() as folder:
        figures, path = planner(80, workers, gateways, capacity, Path(folder))
        trace = read_trace(path, format="tokens", block_size=16)
    streams = real_setup(trace, workers, gateways, capacity, restart_at=40)
    assert streams.recovered and streams.same_rate == 1.0
    assert streams.after_restart_asked == 40 and streams.after_restart_same == 40
    assert round(streams.ratio, 6) == figures["shared"]
    assert streams.requests == figures["shared_requests"]
    learned = real_setup(trace, workers, gateways, capacity, learn=True)
    assert round(learned.ratio, 6) == figures["gateway"]
    assert learned.requests == figures["gateway_requests"]
