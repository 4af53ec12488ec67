"""route under load and faults (issue 34.4), the short version CI runs: workers
publishing while 8 clients route from another process, a worker killed (SIGKILL) and
started again mid-stream, the router killed and started again mid-stream, two slow
clients attached throughout. Nothing crashes, no request fails but while the router
is down, and afterwards every worker's blocks and every answer equal those of a fresh
index rebuilt from the same events. The long version is a benchmark:
``python -m benchmarks.route_service faults --rate 1000000 --seconds 60``."""

from __future__ import annotations

from benchmarks.route_service import FaultRun, faults


def test_the_router_survives_load_and_faults_and_recovers_exactly() -> None:
    result = faults(FaultRun(rate=60_000, seconds=5.0, clients=8))
    load = result["load"]
    assert load["requests"] > 0 and load["non2xx"] == 0, load
    assert result["errors_outside_the_router_restart"] == 0, result
    assert result["recovered"], result
    assert result["same_blocks_as_a_fresh_index"], result["router_rows"]
    assert result["same_answers_as_a_fresh_index"], result
    assert result["router_stale_after"] == []
