"""The KV block pool, accelerated twin: block copies on a CUDA device with CuPy.

:class:`BlockPool` here has the API and the semantics of
:class:`kachedb_radix.reference.blockpool.BlockPool` (the NumPy reference), bit for bit; it only
runs on the GPU, one fused kernel launch per batch (:mod:`kachedb_radix.accel.blockpool.kernels`).
Geometry, presets, errors and argument checks are the reference's own
(:mod:`kachedb_radix.reference.blockpool`), imported, never repeated.

CuPy is imported lazily: ``import kachedb_radix.accel`` and
``import kachedb_radix.accel.blockpool`` work without CuPy and without a GPU;
:func:`cupy_unavailable_reason` says why the GPU path cannot run, and constructing a
:class:`BlockPool` then raises
:class:`~kachedb_radix.reference.blockpool.BackendUnavailableError` with that reason.
"""

from kachedb_radix.accel.blockpool.pool import BlockPool, CupyTransfer, cupy_unavailable_reason

__all__ = ["BlockPool", "CupyTransfer", "cupy_unavailable_reason"]
