"""Which tree implementation the command line uses.

``reference`` is the pure-Python executable spec; ``accel`` is the C twin. The CLI
uses ``accel`` unless ``KACHEDB_RADIX_PURE=1`` is set (for platforms without a
compiler) or ``--impl`` says otherwise. There is no silent fallback: if the C
extension did not build, asking for ``accel`` fails with a message saying so.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

#: The environment switch that selects the pure-Python reference everywhere.
PURE_SWITCH = "KACHEDB_RADIX_PURE"

IMPLEMENTATION_NAMES = ("reference", "accel")


def default_implementation() -> str:
    """``reference`` when ``KACHEDB_RADIX_PURE=1``, else ``accel``. O(1)."""
    return "reference" if os.environ.get(PURE_SWITCH) == "1" else "accel"


def tree_class(name: str) -> Any:
    """The ``RadixTree`` class of implementation ``name``.

    Raises:
        ValueError: unknown name.
        ImportError: ``accel`` asked for but its C extension is not importable.
    """
    if name not in IMPLEMENTATION_NAMES:
        raise ValueError(f"unknown implementation {name!r}; choose from {IMPLEMENTATION_NAMES}")
    module = importlib.import_module(f"kachedb_radix.{name}")
    return module.RadixTree
