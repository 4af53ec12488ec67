"""The fuzz harness without the fuzzer: its regression inputs and its seed corpus
replay on the twins in lockstep, its byte format round-trips, and random bytes never
make it fail (the campaign itself is accel/fuzz.sh, run in CI)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from kachedb_radix.spec.conform.replay import read_trace
from kachedb_radix.spec.vectors import path_of

if os.environ.get("KACHEDB_RADIX_PURE") == "1":
    pytest.skip("KACHEDB_RADIX_PURE=1: the C twin is not under test", allow_module_level=True)

from tests.accel.fuzz_harness import (
    OPS,
    Cursor,
    encode_trace,
    failure,
    main,
    minimize,
    run_one,
    seed_inputs,
)

REGRESSIONS = sorted((Path(__file__).parent / "fuzz_regressions").iterdir())


@pytest.mark.parametrize("path", REGRESSIONS, ids=[path.name for path in REGRESSIONS])
def test_every_fuzz_finding_stays_fixed(path: Path) -> None:
    """Each minimised input the fuzzer once failed on now runs clean on both twins."""
    run_one(path.read_bytes())


def test_the_seed_corpus_replays() -> None:
    """The golden vectors and kit traces, encoded, run clean (R-DUMP-1 after every step)."""
    seeds = list(seed_inputs(kit_traces=4))
    assert len(seeds) > 30
    for data in seeds:
        run_one(data)


def test_encoding_keeps_the_operations_of_a_trace() -> None:
    """The encoder writes each operation the decoder reads back, in order."""
    steps = read_trace(path_of("snapshots"))
    first = next(encode_trace(steps))
    cursor = Cursor(first)
    reset = steps[0]
    assert (cursor.byte() + 1, cursor.byte() + 1) == (reset["num_blocks"], reset["block_size"])
    assert OPS[cursor.byte()] in {"insert", "match", "bad_tokens", "evict", "reader", "snapshot"}


def test_random_bytes_never_fail() -> None:
    """Arbitrary bytes decode to valid operation sequences on which the twins agree."""
    chooser = random.Random(15)
    for _ in range(60):
        run_one(bytes(chooser.randrange(256) for _ in range(chooser.randrange(0, 120))))


def test_minimize_keeps_the_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The minimiser cuts an input down while it fails the same way, and the command
    line replays and minimises files."""
    import tests.accel.fuzz_harness as harness

    real = harness.run_one

    def planted(data: bytes) -> None:  # a planted bug: any reclaim op "disagrees"
        if harness.OPS.index("reclaim") in data[2:]:
            raise AssertionError("planted")
        real(data)

    monkeypatch.setattr(harness, "run_one", planted)
    data = bytes([3, 1, 0, 0, 2, 0, 0, 0, OPS.index("reclaim"), 6, 6])
    small = minimize(data)
    assert failure(small) == failure(data) and len(small) <= 3
    with pytest.raises(ValueError, match="does not fail"):
        minimize(bytes([3, 1]))
    crash, out = tmp_path / "crash", tmp_path / "small"
    crash.write_bytes(data)
    assert main(["--minimize", str(crash), str(out)]) == 0
    assert out.read_bytes() == small
    monkeypatch.setattr(harness, "run_one", real)
    assert main([str(out)]) == 0
    assert main(["--seed-corpus", str(tmp_path / "seeds")]) == 0
    assert len(list((tmp_path / "seeds").iterdir())) > 30
