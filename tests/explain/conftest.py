"""The explain tests' shared fixture: one headless Chromium (Debian's ``chromium``) driven
by Playwright for Python, which needs no browser download of its own.

Without Chromium or Playwright the browser tests skip and say so -- unless
``KACHEDB_RADIX_REQUIRE_BROWSER=1`` (set by ``.ci/run``, which installs both), where a
missing browser fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _missing(reason: str) -> None:
    if os.environ.get("KACHEDB_RADIX_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (KACHEDB_RADIX_REQUIRE_BROWSER=1: .ci/run installs it)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for each module of the explain tests.

    Per module, not per session: while Playwright's sync API is open it keeps an asyncio
    loop running on the main thread, so a later test's ``asyncio.run`` (the route
    service's) would fail with "cannot be called from a running event loop".
    """
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright for Python is not installed (pip install -e '.[test]')")
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        _missing("Chromium is not installed (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield launched
        launched.close()
