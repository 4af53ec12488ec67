"""The top level is the design's: seven entries, CI, a licence, and nothing else.

The twins live in ``reference/`` and ``accel/``, the rules and every tool in ``spec/``.
Checked on the files git tracks (skips outside a git checkout, e.g. an installed sdist).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED_TOP_LEVEL = {
    "pyproject.toml",
    "reference",
    "accel",
    "spec",
    "tests",
    "benchmarks",
    "README.md",
    ".ci",
    ".gitignore",
    "LICENSE",
    "docs",
}


def _tracked() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    done = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_top_level_is_the_designs() -> None:
    top = {path.split("/", 1)[0] for path in _tracked()}
    assert {"pyproject.toml", "reference", "accel", "spec", "tests", "README.md"} <= top
    assert top <= ALLOWED_TOP_LEVEL, f"unexpected top-level entries: {top - ALLOWED_TOP_LEVEL}"


def test_nothing_imports_the_old_packages() -> None:
    old = re.compile(r"^\s*(from|import) (kvpool|kachedb_radix)\b", re.MULTILINE)
    offenders = [
        path
        for path in _tracked()
        if path.endswith((".py", ".sh", ".md")) and old.search((ROOT / path).read_text())
    ]
    assert not offenders, f"imports of removed packages in {offenders}"


def test_twins_are_exported_under_one_name() -> None:
    import accel
    import reference

    for name in ("RadixTree", "BlockAllocator", "Snapshot", "Reader", "BlockPool"):
        ours, fast = getattr(reference, name), getattr(accel, name)
        assert ours is not fast, name
        assert ours.__name__ == fast.__name__ == name
