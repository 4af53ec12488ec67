"""Launch plans cached per pool, and ids prepared for a launch: the CPU side of every call.

A GPU call costs its host work before the kernel starts: checking the ids, building the
launch plan, turning both into launch arguments.  Here that work is done once per shape of
call, not per call:

* :class:`PlanCache` keeps a :class:`~accel.blockpool.kernels.LaunchPlan` and its constant
  launch arguments per (operation, batch size, alignment of the buffer pointer); a call
  only adds the pointers and the ids.
* :func:`host_ids` is the ids' validation (:func:`reference.blockpool.validation.normalize_ids`,
  in NumPy) with the pool-specific duplicate check.

Nothing here imports CuPy; the table-pointer lookup is a callable, so the cache is tested
on the CPU.  Cost of a cached lookup: one dict probe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accel.blockpool.kernels import (
    LaunchPlan,
    Side,
    buffer_side,
    copy_plan,
    gather_plan,
    scatter_plan,
    static_args,
)
from reference.blockpool.layout import PoolSpec
from reference.blockpool.validation import BlockIds, IdArray, check_unique, normalize_ids

#: Plans kept per pool before the cache starts over (a serving engine uses a few shapes).
MAX_PLANS = 4096

GATHER, SCATTER, COPY = "gather", "scatter", "copy"


@dataclass(frozen=True)
class Prepared:
    """A cached plan and the launch arguments that never change for it."""

    plan: LaunchPlan
    static: tuple[Any, ...]


class PlanCache:
    """Launch plans of one pool, by (operation, batch size, buffer pointer mod 16).

    Args:
        spec: the pool's geometry.
        pool: the pool's own side (fixed for its lifetime).
        table_address: the device address of a side's segment table (0 for none).
    """

    def __init__(self, spec: PoolSpec, pool: Side, table_address: Callable[[Side], int]) -> None:
        self._spec = spec
        self._pool = pool
        self._table_address = table_address
        self._plans: dict[tuple[str, int, int], Prepared] = {}
        self.misses = 0

    def __len__(self) -> int:
        return len(self._plans)

    def get(self, op: str, n: int, buffer: int = 0) -> Prepared:
        """The plan of ``op`` (GATHER, SCATTER, COPY) on ``n`` pairs with the contiguous
        buffer at address ``buffer`` (unused for COPY).  O(1) once cached.

        The buffer's address enters the plan only through its alignment (the vector width),
        so one plan serves every buffer with the same address modulo 16.
        """
        key = (op, n, buffer % 16)
        found = self._plans.get(key)
        if found is not None:
            return found
        self.misses += 1
        if len(self._plans) >= MAX_PLANS:
            self._plans.clear()
        spec, pool = self._spec, self._pool
        if op == GATHER:
            plan = gather_plan(spec, pool, buffer_side(spec, buffer), n)
        elif op == SCATTER:
            plan = scatter_plan(spec, pool, buffer_side(spec, buffer), n)
        elif op == COPY:
            plan = copy_plan(spec, pool, n)
        else:
            raise ValueError(f"unknown operation {op!r}")
        prepared = Prepared(
            plan, static_args(plan, self._table_address(plan.src), self._table_address(plan.dst))
        )
        self._plans[key] = prepared
        return prepared


def host_ids(ids: BlockIds, num_blocks: int, role: str, *, unique: bool = False) -> IdArray:
    """``ids`` validated on the host (in NumPy) as an int64 array; ``unique`` also refuses
    repeats.  Cost O(n).  Errors: those of
    :func:`~reference.blockpool.validation.normalize_ids` and
    :func:`~reference.blockpool.validation.check_unique`."""
    out = normalize_ids(ids, num_blocks, role)
    if unique:
        check_unique(out, role)
    return out
