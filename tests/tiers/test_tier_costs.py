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


def test_the_registry_copies_a_path_once_and_shares_its_own() -> None:
    """``add_path`` keeps one tuple per path: a caller's list is copied (so a later change
    to it changes nothing), only its first ``len(blocks) * B`` tokens; a ``path()`` answer
    is kept as it is, shared by the blocks of both paths."""
    registry = Registry(2)
    tokens = [1, 2, 3, 4, 5, 6, 7]  # three blocks and a partial one
    registry.add_path(None, (10, 11, 12), tokens, 0, 2)
    tokens[0] = 99
    assert registry.key(12).tokens == (5, 6) and registry.key(10).tokens == (1, 2)
    namespace, ids, spelled = registry.path(12)
    assert (namespace, ids, spelled) == (None, (10, 11, 12), (1, 2, 3, 4, 5, 6))
    below = Registry(2)
    below.add_path("t", (20, 21, 22), spelled, 1, 2)
    assert below.path(22)[2] is spelled and 20 not in below
    assert below.key(21).parent == 20 and below.key(21).namespace == "t"
    whole = Registry(2)
    whole.add_path(None, (30, 31), [1, 2, 3, 4], 0, 2)  # a list of exactly the path
    assert whole.path(31)[2] == (1, 2, 3, 4) and whole.key(30).parent is None
