"""The top level is the design's: seven entries, CI, a licence, and nothing else.

The twins live in ``reference/`` and ``accel/``, the rules and every tool in ``spec/``.
Checked on the files git tracks (skips outside a git checkout, e.g. an installed sdist).
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.support.paths import ROOT

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


#: The old top-level names (before the one import root, issue 20) and older ones; a
#: module importing one would find the folder through the checkout, not the install.
OLD_IMPORT = re.compile(r"^[ \t]*(from|import) (kvpool|reference|accel|spec)\b", re.MULTILINE)
#: The same names in commands and dotted references: ``python -m`` one of them, the C
#: extension without its root, a quoted or backticked dotted name whose next part is one
#: of the package's modules or exports (``spec.total_bytes`` of a ``PoolSpec`` is not).
OLD_NAME = re.compile(
    r"(-m (?P<command>spec|reference|accel)\b)|((?<![\w./-])accel\._radix)"
    r"|([\"'`](?P<root>spec|reference|accel)\.(?P<part>[A-Za-z_]\w*))"
)


def _names_in(package: str) -> set[str]:
    """The modules, subpackages and exports of one of the three packages."""
    folder = ROOT / package
    names = {path.stem for path in folder.glob("*.py*")}
    names |= {path.parent.name for path in folder.glob("*/__init__.py")}
    init = (folder / "__init__.py").read_text()
    names |= set(re.findall(r'^\s+"(\w+)",$', init, flags=re.MULTILINE))
    return names - {"__init__"}


def test_nothing_uses_the_old_import_names() -> None:
    """Code, tests, scripts and docs name the packages under ``kachedb_radix`` only."""
    known = {package: _names_in(package) for package in ("spec", "reference", "accel")}
    offenders = []
    for path in _tracked():
        if not path.endswith((".py", ".pyi", ".sh", ".md", ".toml", ".c", ".h")) and not (
            path.startswith(".ci/")
        ):
            continue
        file = ROOT / path
        if file.is_symlink() or not file.is_file() or file.name == "tests/project/test_layout.py":
            continue
        for number, line in enumerate(file.read_text().splitlines(), 1):
            found = OLD_IMPORT.match(line) is not None
            for match in OLD_NAME.finditer(line):
                root = match.group("root")
                found = found or root is None or match.group("part") in known[root]
            if found:
                offenders.append(f"{path}:{number}: {line.strip()}")
    assert not offenders, "old import names:\n" + "\n".join(offenders)


def test_twins_are_exported_under_one_name() -> None:
    from kachedb_radix import accel, reference

    for name in ("RadixTree", "BlockAllocator", "Snapshot", "Reader", "BlockPool"):
        ours, fast = getattr(reference, name), getattr(accel, name)
        assert ours is not fast, name
        assert ours.__name__ == fast.__name__ == name
