"""The KV block pool, accelerated twin: block copies on a CUDA device with CuPy.

:class:`BlockPool` here has the API and the semantics of
:class:`reference.blockpool.BlockPool` (the NumPy reference), bit for bit; it only runs on
the GPU, one fused kernel launch per batch (:mod:`accel.blockpool.kernels`). Geometry,
presets, errors and argument checks are the reference's own
(:mod:`reference.blockpool`), imported, never repeated.

CuPy is imported lazily: ``import accel`` and ``import accel.blockpool`` work without
CuPy and without a GPU; :func:`cupy_unavailable_reason` says why the GPU path cannot run,
and constructing a :class:`BlockPool` then raises
:class:`~reference.blockpool.BackendUnavailableError` with that reason.
"""

from accel.blockpool.pool import BlockPool, CupyTransfer, cupy_unavailable_reason

__all__ = ["BlockPool", "CupyTransfer", "cupy_unavailable_reason"]
