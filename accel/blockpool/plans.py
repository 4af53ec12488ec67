"""Launch plans cached per pool, and ids prepared for a launch: the CPU side of every call.

A GPU call costs its host work before the kernel starts: checking the ids, building the
launch plan, turning both into launch arguments.  Here that work is done once per shape of
call, not per call:

* :class:`PlanCache` keeps a :class:`~kachedb_radix.accel.blockpool.kernels.LaunchPlan`
  per (operation, batch size, alignment of the buffer pointer), with its argument block
  already filled (:class:`Prepared`): a call only stores the buffer pointer and the ids
  into it, then hands the driver the block's address.
* :func:`host_ids` is the ids' validation
  (:func:`kachedb_radix.reference.blockpool.validation.normalize_ids`, in NumPy) with
  the pool-specific duplicate check.

Nothing here imports CuPy; the table-pointer lookup is a callable, so the cache is tested
on the CPU.  Cost of a cached lookup: one dict probe.

Invariant: a :class:`Prepared` block is reused by every call of its plan.  That is safe
because ``cuLaunchKernel`` copies the parameter bytes when it is called (the driver's
contract for ``kernelParams``: each points at "a region of memory from which the actual
kernel parameter will be copied"), so the block may be refilled as soon as the launch call
returns, whether or not the kernel has run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from kachedb_radix.accel.blockpool.kernels import (
    WORD,
    LaunchPlan,
    Side,
    buffer_side,
    copy_plan,
    gather_plan,
    new_args,
    scatter_plan,
)
from kachedb_radix.reference.blockpool.layout import PoolSpec
from kachedb_radix.reference.blockpool.validation import (
    BlockIds,
    IdArray,
    check_unique,
    normalize_ids,
)

#: Plans kept per pool before the cache starts over (a serving engine uses a few shapes).
MAX_PLANS = 4096

GATHER, SCATTER, COPY = "gather", "scatter", "copy"


class Prepared:
    """A cached plan with its argument block, filled but for the per-call fields.

    Attributes:
        plan: the launch plan.
        kernel: the name of the kernel it launches.
        grid: the grid ``(x, y, z)`` of the launch.
        args: the argument block: one ``KvpoolArgs`` as a 1-element NumPy array (what a
            CuPy kernel call passes by value).
        words: ``args`` seen as uint64 words
            (:data:`~kachedb_radix.accel.blockpool.kernels.WORD` names them): one store sets
            a per-call pointer.
        src_ids / dst_ids: the first ``n_pairs`` entries of the inline id arrays (int32).
        params: the driver's ``kernelParams`` array: one pointer, to ``args``.
        params_address: the address of ``params`` (what ``cuLaunchKernel`` takes).
    """

    __slots__ = ("args", "dst_ids", "grid", "kernel", "params", "params_address", "plan",
                 "src_ids", "words")  # fmt: skip

    def __init__(self, plan: LaunchPlan, src_table: int, dst_table: int) -> None:
        self.plan = plan
        self.kernel = plan.kernel
        gx, gy = plan.geometry
        self.grid = (gx, gy, 1)
        self.args = new_args(plan, src_table, dst_table)
        self.words: npt.NDArray[np.uint64] = self.args.view(np.uint64)
        n = plan.n_pairs if plan.inline else 0
        self.src_ids: npt.NDArray[np.int32] = self.args["src_ids"][0][:n]
        self.dst_ids: npt.NDArray[np.int32] = self.args["dst_ids"][0][:n]
        self.params = np.array([self.args.ctypes.data], dtype=np.uint64)
        self.params_address = int(self.params.ctypes.data)

    def set_bases(self, src_base: int, dst_base: int) -> None:
        """Store the two base pointers of this call.  O(1)."""
        words = self.words
        words[SRC_BASE] = src_base
        words[DST_BASE] = dst_base

    def set_inline(
        self,
        src_base: int,
        dst_base: int,
        src: Sequence[int] | IdArray | None,
        dst: Sequence[int] | IdArray | None,
    ) -> None:
        """Store the pointers and the ids (``n_pairs`` each, in range, for the indexed
        sides; None for a buffer side) of an inline call.  O(n_pairs)."""
        words = self.words
        words[SRC_BASE] = src_base
        words[DST_BASE] = dst_base
        if src is not None:
            self.src_ids[:] = src
        if dst is not None:
            self.dst_ids[:] = dst

    def set_arrays(
        self, src_idx: int, src_bytes: int, dst_idx: int, dst_bytes: int, status: int
    ) -> None:
        """Store where an array kernel finds its ids (device addresses, 0: the identity;
        element sizes 4 or 8) and its status words (0: none).  O(1)."""
        words = self.words
        words[SRC_IDX] = src_idx
        words[SRC_IDX_BYTES] = src_bytes
        words[DST_IDX] = dst_idx
        words[DST_IDX_BYTES] = dst_bytes
        words[STATUS] = status


SRC_BASE, DST_BASE = WORD["src_base"], WORD["dst_base"]
SRC_IDX, SRC_IDX_BYTES = WORD["src_idx"], WORD["src_idx_bytes"]
DST_IDX, DST_IDX_BYTES = WORD["dst_idx"], WORD["dst_idx_bytes"]
STATUS = WORD["status"]


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
        self._tile_major = True
        self.misses = 0

    @property
    def tile_major(self) -> bool:
        """The grid order of the plans built (see
        :attr:`kachedb_radix.accel.blockpool.kernels.LaunchPlan.geometry`; tile-major by default).
        Setting it forgets the plans built in the other order.  O(1)."""
        return self._tile_major

    @tile_major.setter
    def tile_major(self, value: bool) -> None:
        if bool(value) != self._tile_major:
            self._tile_major = bool(value)
            self._plans.clear()

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
        spec, pool, tm = self._spec, self._pool, self._tile_major
        if op == GATHER:
            plan = gather_plan(spec, pool, buffer_side(spec, buffer), n, tile_major=tm)
        elif op == SCATTER:
            plan = scatter_plan(spec, pool, buffer_side(spec, buffer), n, tile_major=tm)
        elif op == COPY:
            plan = copy_plan(spec, pool, n, tile_major=tm)
        else:
            raise ValueError(f"unknown operation {op!r}")
        prepared = Prepared(plan, self._table_address(plan.src), self._table_address(plan.dst))
        self._plans[key] = prepared
        return prepared


def host_ids(ids: BlockIds, num_blocks: int, role: str, *, unique: bool = False) -> IdArray:
    """``ids`` validated on the host (in NumPy) as an int64 array; ``unique`` also refuses
    repeats.  Cost O(n).  Errors: those of
    :func:`~kachedb_radix.reference.blockpool.validation.normalize_ids` and
    :func:`~kachedb_radix.reference.blockpool.validation.check_unique`."""
    out = normalize_ids(ids, num_blocks, role)
    if unique:
        check_unique(out, role)
    return out
