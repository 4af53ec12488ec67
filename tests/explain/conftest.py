"""The explain tests' shared fixtures: one headless Chromium (Debian's ``chromium``) driven
by Playwright for Python, which needs no browser download of its own; axe-core's script
(npm's ``axe-core``, named by ``KACHEDB_RADIX_AXE``); the pages, built once per run.

Without Chromium, Playwright or axe-core the browser tests skip and say so -- unless
``KACHEDB_RADIX_REQUIRE_BROWSER=1`` (set by ``.ci/run``, which installs them), where a
missing one fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
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


@pytest.fixture(scope="session")
def axe_source() -> str:
    """axe-core's script (``axe.min.js``, from npm): ``KACHEDB_RADIX_AXE`` names the file
    (``.ci/run`` installs axe-core and sets it)."""
    path = os.environ.get("KACHEDB_RADIX_AXE")
    if not path or not os.path.isfile(path):
        _missing(
            "axe-core is not installed (npm install axe-core, then KACHEDB_RADIX_AXE="
            "node_modules/axe-core/axe.min.js)"
        )
    with open(str(path), encoding="utf-8") as file:
        return file.read()


class Pages:
    """The explain pages the browser tests open, each recorded and written once per run:
    every built-in scenario by its name, and the demo and the events scenario beside
    SGLang 0.5.23 (``demo-sglang``, ``demo-sglang-strict``, ``events-sglang``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._built: dict[str, tuple[Any, Any, Path]] = {}

    def get(self, name: str) -> tuple[Any, Any, Path]:
        """The recording, its views and the page's file."""
        if name not in self._built:
            self._built[name] = self._build(name)
        return self._built[name]

    def _build(self, name: str) -> tuple[Any, Any, Path]:
        from kachedb_radix.spec.explain import build_page, frame_views, record, scenario

        chosen, _, peer = name.partition("-")
        steps = scenario(chosen).steps
        if peer:
            from tests.explain.test_profile import sglang_target

            target = sglang_target("strict" if peer.endswith("strict") else None)
            candidate = target.open()
            try:
                recording = record(steps, candidate, title=chosen, source=name,
                                   profile=target.profile)  # fmt: skip
            finally:
                candidate.close()
        else:
            recording = record(steps, title=chosen, source=name)
        views = frame_views(recording)
        path = self.folder / f"{name}.html"
        path.write_text(build_page(recording, views), encoding="utf-8")
        return recording, views, path


@pytest.fixture(scope="session")
def explain_pages(tmp_path_factory: pytest.TempPathFactory) -> Pages:
    """The pages, built on first use and shared by the browser tests."""
    return Pages(tmp_path_factory.mktemp("pages"))
