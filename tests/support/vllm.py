"""vLLM's own code for the tests, or a skip that says why (never in CI, which installs
the pinned wheel and sets ``KACHEDB_RADIX_REQUIRE_VLLM=1``: then a missing wheel fails)."""

from __future__ import annotations

import os

import pytest

from kachedb_radix.spec.peers.vllm import Vllm, VllmUnavailable, load_vllm


def require_vllm() -> Vllm:
    """The loaded vLLM modules; skips the test when the wheel is absent outside CI."""
    try:
        return load_vllm()
    except VllmUnavailable as exc:
        if os.environ.get("KACHEDB_RADIX_REQUIRE_VLLM") == "1":
            raise
        pytest.skip(f"{exc} (CI installs it)")
