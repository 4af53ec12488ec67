"""NVIDIA Dynamo's own code for the tests (``ai-dynamo-runtime`` 1.6.1, whose block
hashing and radix tree run on a CPU), or a skip that says why -- never in CI, which
installs the pinned wheel and sets ``KACHEDB_RADIX_REQUIRE_DYNAMO=1``: then a missing or
other wheel fails."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from types import ModuleType

import pytest

#: The Dynamo release the project is tested against.
PINNED = "1.6.1"


def require_dynamo() -> ModuleType:
    """``dynamo._core`` from the pinned wheel; skips the test when it is absent outside CI."""
    try:
        version = importlib.metadata.version("ai-dynamo-runtime")
        if version != PINNED:
            raise ImportError(f"ai-dynamo-runtime {version} is installed, the tests pin {PINNED}")
        return importlib.import_module("dynamo._core")
    except (ImportError, importlib.metadata.PackageNotFoundError) as exc:
        if os.environ.get("KACHEDB_RADIX_REQUIRE_DYNAMO") == "1":
            raise
        pytest.skip(f"{exc} (pip install --no-deps ai-dynamo-runtime=={PINNED}; CI installs it)")
