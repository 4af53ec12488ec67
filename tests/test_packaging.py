"""The packaging facts agree with each other: the supported Python versions (requires-python,
the classifiers, the README, the Pythons CI runs), the version's single source, the quick
suite's modules. The build itself is checked by ``.ci/package``."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .conftest import QUICK_MODULES

ROOT = Path(__file__).resolve().parent.parent


def _project() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def _classified_versions() -> list[str]:
    """The ``Programming Language :: Python :: 3.x`` classifiers' versions, ascending."""
    prefix = "Programming Language :: Python :: "
    classifiers: list[str] = _project()["project"]["classifiers"]
    found = [name.removeprefix(prefix) for name in classifiers if name.startswith(prefix)]
    return sorted((name for name in found if re.fullmatch(r"3\.\d+", name)), key=Version)


def test_classifiers_start_at_requires_python() -> None:
    versions = _classified_versions()
    assert versions, "no Programming Language :: Python :: 3.x classifier"
    required = SpecifierSet(_project()["project"]["requires-python"])
    assert all(version in required for version in versions)
    lowest = Version(versions[0])
    below = f"{lowest.major}.{lowest.minor - 1}"
    assert below not in required, f"requires-python allows {below}, which no classifier lists"


def test_readme_states_the_supported_versions() -> None:
    line = next(
        line
        for line in (ROOT / "README.md").read_text().split("\n\n")
        if line.startswith("Supported Python versions:")
    )
    stated = re.findall(r"\b3\.\d+\b", line.split("(", 1)[0])
    assert stated == _classified_versions()
    assert f'`requires-python = "{_project()["project"]["requires-python"]}"`' in line


def test_ci_runs_the_lowest_and_the_highest_version() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    match = re.search(r"^ci_pythons=\(([\d. ]+)\)$", run, flags=re.MULTILINE)
    assert match is not None, ".ci/run does not name its Pythons in ci_pythons=(...)"
    versions = _classified_versions()
    assert match.group(1).split() == [versions[0], versions[-1]]


def test_the_version_has_one_source() -> None:
    project = _project()
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "reference._version.__version__"
    assert "__version__ = " in (ROOT / "reference" / "_version.py").read_text()


def test_quick_modules_exist() -> None:
    """A renamed module would silently leave the quick suite."""
    missing = sorted(name for name in QUICK_MODULES if not (ROOT / "tests" / name).is_file())
    assert missing == []
