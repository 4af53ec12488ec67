"""The tier layer's work grows as its documented cost says -- counted, never timed.

Kept as a failing test (``xfail(strict=True)``), a known bug left to the owner of
``reference/tiers/tree.py``: ``TieredTree._demote`` spells the whole path of *every*
victim (``Registry.path``, O(depth * B) each) before it skips the victims an earlier
chain already covered, so evicting one path of n blocks spells it n times: O(n^2 * B)
where O(n * B) does. ``benchmarks/bench_tiers.py`` measured it: evicting a 2,048-block
(32K-token) path from the device costs 0.4-1.0 s on either twin (the same Python
bookkeeping), 11-15x more per block than a 128-block path. The fix: spell a victim's
path only when no earlier victim's path covered it (still before ``registry.remove``).
When it is fixed this test passes, strict xfail fails, and the marker goes.
"""

from __future__ import annotations

from typing import Any

import pytest

from kachedb_radix.reference.tiers.registry import Registry
from tests.conftest import TIER_IMPLEMENTATIONS


@pytest.mark.xfail(
    strict=True,
    reason="TieredTree._demote spells every victim's path before skipping covered ones: "
    "O(n^2 * B) to demote one n-block path (see the module docstring)",
)
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
