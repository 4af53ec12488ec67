"""The tier layer's work grows as its documented cost says -- counted, never timed.

``TieredTree._demote`` once spelled the whole path of *every* victim (``Registry.path``,
O(depth * B) each) before skipping the victims an earlier chain covered, so evicting one
path of n blocks spelled it n times: O(n^2 * B). ``benchmarks/bench_tiers.py`` measured
it: evicting a 2,048-block (32K-token) path cost 0.4-1.0 s on either twin, 11-15x more
per block than a 128-block path. Now a victim's path is spelled only when no earlier
victim's covered it; this test counts the tokens spelled, so the bug cannot come back.
"""

from __future__ import annotations

from typing import Any

import pytest

from kachedb_radix.reference.tiers.registry import Registry
from tests.conftest import TIER_IMPLEMENTATIONS


@pytest.mark.parametrize("twin", sorted(TIER_IMPLEMENTATIONS))
def test_demoting_a_long_path_spells_it_once(twin: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spelled = [0]
    original = Registry.path

    def counting(self: Registry, block: int) -> Any:
        found = original(self, block)
        spelled[0] += len(found[2])
        return found

    monkeypatch.setattr(Registry, "path", counting)
    blocks, size = 256, 4
    tiers = TIER_IMPLEMENTATIONS[twin](blocks, blocks, 0, size)
    tiers.insert(list(range(blocks * size)))
    done = tiers.evict(blocks)
    assert len(done.moves) == blocks and not done.dropped  # the whole path went to the host
    tiers.check_invariants()
    path_tokens = blocks * size
    assert spelled[0] <= 2 * path_tokens, (
        f"demoting one {blocks}-block path spelled {spelled[0]:,} tokens, "
        f"{spelled[0] / path_tokens:.0f} times the path"
    )
