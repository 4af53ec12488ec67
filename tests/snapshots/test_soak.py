"""The soak (tests/support/soak.py), short: both implementations stay flat and drain, and a
tree whose dropped readers stay registered fails it. The long run is
``python -m tests.support.soak --ops 1000000``."""

from __future__ import annotations

import pytest

from kachedb_radix.spec.mutants.snapshots import DroppedReaderStays
from tests.conftest import IMPLEMENTATIONS
from tests.support.soak import SoakFailure, main, soak

#: Writer operations per implementation in the test suite (seconds each).
SHORT = {"reference": 30_000, "accel": 100_000}


@pytest.mark.slow  # no branch only it covers: the CI coverage run leaves it out (.ci/run)
@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_a_short_soak_stays_flat_and_drains(name: str) -> None:
    """R-EPOCH-3, R-EPOCH-5: memory flat after warm-up, the quarantine bounded and
    drained, no reader left behind, no insert refused while anything was evictable."""
    report = soak(IMPLEMENTATIONS[name], SHORT[name])
    assert report.implementation == name
    assert report.epochs > 100 and report.dropped > 0
    assert report.peak_rss <= report.warm_rss * 1.05 + (1 << 20)
    assert len(report.curve) == 20 and "| operations |" in report.table()


def test_the_soak_catches_readers_that_leak() -> None:
    """R-EPOCH-5: with dropped readers staying registered the quarantine never drains
    and inserts run out of room: the soak fails."""
    with pytest.raises(SoakFailure):
        soak(DroppedReaderStays, 5_000)


def test_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--ops", "2000", "--impl", "reference"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("reference: 2,000 ops") and "| operations |" in out
