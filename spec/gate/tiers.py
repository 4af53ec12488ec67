"""The gate's tier cases (R-TIER-5, R-TIER-6): the CPU cost of planning a restore.

For the twins ``reference`` and ``accel`` (the tiered tree a target of that name ships,
:class:`kachedb_radix.reference.tiers.TieredTree` or ``kachedb_radix.accel.TieredTree``):

* ``tiers/restore-plan/<blocks>`` -- per block brought up, ``lookup`` of a prompt whose
  cached prefix is spread over the three tiers, then ``restore`` of it: the tree's whole
  share of a restore (walking each tier, the device insert that picks the new ids, the
  sources' pins, the list of moves), no bytes. The prompt is a path of ``blocks`` blocks
  of 16 tokens: its first quarter on the device, the next quarter in host memory, the
  rest on disk only, so a restore brings up three quarters of it, one third of those from
  the host. The device has room for the whole path: the restore evicts nothing (the
  first eviction has cases of its own). Each round builds that state afresh, untimed
  (:func:`spread_path`): insert the path, evict it all to the host, evict half of the host
  to disk, insert the first quarter again.

The quick set times 128 blocks (a 2,048-token prompt); the full set adds 2,048 blocks (a
32K-token prompt, the seed's example). The tree allocates as it walks: the ``memory``
calibration.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..twins import twin_class
from .shapes import BLOCK_SIZE, VOCAB, Workload, _seed

#: Path lengths in blocks: the quick set's, and the full set's.
QUICK_PLAN_BLOCKS = (128,)
FULL_PLAN_BLOCKS = (128, 2048)


def tiered_tree_class(twin: str) -> Callable[..., Any]:
    """The tiered tree a twin ships (:mod:`kachedb_radix.spec.twins`: an unknown name is
    refused, never taken for the reference).

    Raises:
        TwinError: ``twin`` names no twin.
        TwinUnavailable: ``accel`` where its C extension did not build.
    """
    found: Callable[..., Any] = twin_class(twin, "TieredTree")
    return found


def plan_tokens(blocks: int) -> list[int]:
    """The prompt of ``blocks`` full blocks (a fixed seed per length)."""
    values: list[int] = (
        _seed("restore-plan", blocks).integers(0, VOCAB, blocks * BLOCK_SIZE).tolist()
    )
    return values


def spread_path(make: Callable[..., Any], tokens: list[int]) -> Any:
    """A fresh tiered tree holding ``tokens`` as the module docstring says: the first
    quarter on the device, the second in host memory, the rest on disk only."""
    blocks = len(tokens) // BLOCK_SIZE
    tree = make(blocks, blocks, blocks, BLOCK_SIZE)
    tree.adopt("disk", tokens)
    tree.adopt("host", tokens[: blocks // 2 * BLOCK_SIZE])
    tree.insert(tokens[: blocks // 4 * BLOCK_SIZE])
    return tree


def restore_plan_workload(twin: str, blocks: int) -> Workload:
    """``lookup`` then ``restore`` of a path spread over the tiers, per block restored."""
    make = tiered_tree_class(twin)
    tokens = plan_tokens(blocks)
    expected = {"device": blocks // 4, "host": blocks // 4, "disk": blocks - blocks // 2}
    check = spread_path(make, tokens)
    if getattr(check, "implementation", None) != twin:
        raise RuntimeError(f"asked for the {twin} tiered tree, got {check!r}")
    tiers = check.lookup(tokens).tiers
    counts = {tier: tiers.count(tier) for tier in expected}
    if counts != expected:  # a broken case would time something else
        raise AssertionError(f"the path is spread {counts}, not {expected}")
    state: list[Any] = [check]

    def setup() -> None:
        state[0] = spread_path(make, tokens)

    def run() -> object:
        tree = state[0]
        plan = tree.lookup(tokens).plan
        done = tree.restore(tokens)
        return plan, done

    return Workload(run, setup, units=blocks - blocks // 4, unit="block", keep=[state])


def tier_cases(twin: str, quick: bool) -> dict[str, Callable[[], Workload]]:
    """The tier cases of ``twin``: name -> workload maker."""
    return {
        f"tiers/restore-plan/{blocks}": functools.partial(restore_plan_workload, twin, blocks)
        for blocks in (QUICK_PLAN_BLOCKS if quick else FULL_PLAN_BLOCKS)
    }
